package match

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/reclaimable/reclaimable/internal/wellknown"
)

func TestClaimSelector(t *testing.T) {
	allowed := sets.New("cache", wellknown.Pool)
	tests := []struct {
		name    string
		sel     *metav1.LabelSelector
		wantErr string
	}{
		{"no selector", nil, ""},
		{"known key", &metav1.LabelSelector{MatchLabels: map[string]string{"cache": "go"}}, ""},
		{"known key in an expression", &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "cache", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"npm"}},
		}}, ""},
		{"unknown key", &metav1.LabelSelector{MatchLabels: map[string]string{"region": "east"}}, "region"},
		{"unknown key among known ones", &metav1.LabelSelector{
			MatchLabels:      map[string]string{"cache": "go"},
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "zone", Operator: metav1.LabelSelectorOpExists}},
		}, "zone"},
		{"invalid operator", &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "cache", Operator: "Near", Values: []string{"x"}},
		}}, "invalid selector"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			claim := claimFor("ns", "c", "1Gi", func(c *corev1.PersistentVolumeClaim) { c.Spec.Selector = tt.sel })
			_, err := ClaimSelector(claim, allowed)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("ClaimSelector error = %v, want containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestLabelsFor(t *testing.T) {
	tests := []struct {
		selector string
		want     map[string]string
		wantErr  bool
	}{
		{"", nil, false},
		{"cache=go", map[string]string{"cache": "go"}, false},
		{"cache in (go)", map[string]string{"cache": "go"}, false},
		{"cache=go,tier!=hot", map[string]string{"cache": "go"}, false},
		{"cache notin (npm),!tier", map[string]string{}, false},
		{"cache in (go,npm)", nil, true},
		{"cache", nil, true},
		{"cache=go,cache=npm", nil, true},
		{"cache=go,cache notin (go)", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.selector, func(t *testing.T) {
			var sel labels.Selector
			if tt.selector != "" {
				var err error
				if sel, err = labels.Parse(tt.selector); err != nil {
					t.Fatal(err)
				}
			}
			got, err := LabelsFor(sel)
			if (err != nil) != tt.wantErr {
				t.Fatalf("LabelsFor error = %v, want error %v", err, tt.wantErr)
			}
			if !tt.wantErr && !labels.Equals(got, tt.want) {
				t.Errorf("LabelsFor = %v, want %v", got, tt.want)
			}
		})
	}
}
