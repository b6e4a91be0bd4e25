package process

import (
	"strings"
	"testing"
)

func TestMetricsValue(t *testing.T) {
	m, err := ParseMetrics(strings.NewReader(`# TYPE a_total counter
a_total{rule="x\"y",path="z\\w"} 3
a_total{rule="n\nl"} 4
# TYPE g gauge
g 0.5
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
		found  bool
	}{
		{"a_total", map[string]string{"rule": `x"y`, "path": `z\w`}, 3, true},
		{"a_total", map[string]string{"rule": "n\nl"}, 4, true},
		{"a_total", map[string]string{"rule": `x"y`}, 0, false},
		{"g", nil, 0.5, true},
		{"missing", nil, 0, false},
	} {
		if got, found := m.Value(tc.name, tc.labels); got != tc.want || found != tc.found {
			t.Errorf("Value(%s, %v) = %v, %v; want %v, %v", tc.name, tc.labels, got, found, tc.want, tc.found)
		}
	}
	if _, err := ParseMetrics(strings.NewReader("a_total{rule=x} 1\n")); err == nil {
		t.Error("an unquoted label value parsed")
	}
}
