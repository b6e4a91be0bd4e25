package chart

import (
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Each alert of the chart's PrometheusRule parses, names only metrics the
// controllers export (the Metrics tables of docs/configuration.md, which
// cmd/reclaimable's reference test holds to what the controllers
// register), and is explained in docs/operations.md.
func TestTheAlertsNameOnlyExportedMetrics(t *testing.T) {
	objs, err := Render(chartDir, map[string]any{"monitoring": map[string]any{
		"podMonitor": map[string]any{"enabled": true}, "prometheusRule": map[string]any{"enabled": true}}})
	if err != nil {
		t.Fatal(err)
	}
	exported := documentedMetrics(t)
	operations, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	var alerts []string
	for _, o := range objs {
		if o.GetKind() != "PrometheusRule" {
			continue
		}
		groups, _, _ := unstructured.NestedSlice(o.Object, "spec", "groups")
		for _, g := range groups {
			rules, _ := g.(map[string]any)["rules"].([]any)
			for _, r := range rules {
				rule := r.(map[string]any)
				name, _ := rule["alert"].(string)
				alerts = append(alerts, name)
				expr, err := parser.NewParser(parser.Options{}).ParseExpr(rule["expr"].(string))
				if err != nil {
					t.Errorf("alert %s: %v", name, err)
					continue
				}
				names := metricNames(expr)
				if len(names) == 0 {
					t.Errorf("alert %s names no metric", name)
				}
				for _, m := range names {
					if !exported[m] {
						t.Errorf("alert %s reads %s, which the controllers do not export", name, m)
					}
				}
				if !strings.Contains(string(operations), "| `"+name+"` |") {
					t.Errorf("alert %s is not in the alerts table of docs/operations.md", name)
				}
			}
		}
	}
	if want := []string{"ReclaimableNoLeader", "ReclaimablePodsGatedLong", "ReclaimablePoolBelowMinAvailable", "ReclaimablePoolExhausted", "ReclaimableScrubsFailing"}; !slices.Equal(slices.Sorted(slices.Values(alerts)), want) {
		t.Errorf("alerts %v, want %v", alerts, want)
	}
}

// metricNames lists the metrics expr selects.
func metricNames(expr parser.Expr) []string {
	seen := map[string]bool{}
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			for _, m := range vs.LabelMatchers {
				if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
					seen[m.Value] = true
				}
			}
		}
		return nil
	})
	return slices.Sorted(maps.Keys(seen))
}

// documentedMetrics are the metric names the Metrics section of
// docs/configuration.md lists.
func documentedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(b), "\n## Metrics\n")
	section, _, _ = strings.Cut(section, "\n## ")
	out := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(reclaimable_[a-z0-9_]+)").FindAllStringSubmatch(section, -1) {
		out[m[1]] = true
	}
	return out
}
