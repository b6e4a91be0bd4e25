package pools

import (
	"crypto/sha256"
	"fmt"
	"strings"
	"testing"
)

func TestCacheKey(t *testing.T) {
	long := strings.Repeat("folder/", 40) + "main"
	for _, tt := range []struct {
		name                string
		labels, annotations map[string]string
		want                string
	}{
		{name: "neither", want: ""},
		{name: "the label", labels: map[string]string{"ci": "a"}, want: "ci=a"},
		{name: "the annotation, no label", annotations: map[string]string{"ci": "team/app/main"}, want: "ci=team/app/main"},
		{name: "the label before the annotation", labels: map[string]string{"ci": "a"}, annotations: map[string]string{"ci": "b"}, want: "ci=a"},
		{name: "an empty label leaves the annotation", labels: map[string]string{"ci": ""}, annotations: map[string]string{"ci": "b"}, want: "ci=b"},
		{name: "empty values are no key", labels: map[string]string{"ci": ""}, annotations: map[string]string{"ci": ""}, want: ""},
		{name: "another name is no key", labels: map[string]string{"team": "a"}, want: ""},
		{name: "a long value by its SHA-256", annotations: map[string]string{"ci": long}, want: fmt.Sprintf("ci=sha256:%x", sha256.Sum256([]byte(long)))},
		{name: "the longest value as it is", labels: map[string]string{"ci": long[:MaxKeyValue]}, want: "ci=" + long[:MaxKeyValue]},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := CacheKey("ci", tt.labels, tt.annotations); got != tt.want {
				t.Errorf("CacheKey = %q, want %q", got, tt.want)
			}
		})
	}
}
