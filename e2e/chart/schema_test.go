package chart

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// values.schema.json refuses a misspelt key, a value outside its set and a
// value of the wrong type, each with a message naming it, where the chart
// would otherwise install its default without a word.
func TestTheSchemaRefusesBadValues(t *testing.T) {
	for _, tt := range []struct {
		name   string
		values map[string]any
		says   string
	}{
		{"a mode not in the set", map[string]any{"mode": "All"}, "mode"},
		{"a misspelt key", map[string]any{"podwatchr": map[string]any{"replicas": 1}}, "podwatchr"},
		{"replicas as a string", map[string]any{"podwatcher": map[string]any{"replicas": "two"}}, "replicas"},
		{"a misspelt nested key", map[string]any{"share": map[string]any{"hostpath": "/srv"}}, "hostpath"},
		{"a logging format not in the set", map[string]any{"logging": map[string]any{"format": "yaml"}}, "format"},
		{"an extra argument that is no flag", map[string]any{"extraArgs": []any{"kube-api-qps=50"}}, "extraArgs"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Render(chartDir, tt.values)
			if err == nil || !strings.Contains(err.Error(), tt.says) {
				t.Errorf("rendering with %v: %v, want a refusal naming %q", tt.values, err, tt.says)
			}
		})
	}
}

// The values a platform team sets on every chart reach every controller's
// pod: pull secrets, pod annotations, a priority class, extra arguments.
func TestTheChartPassesPodSettings(t *testing.T) {
	for _, mode := range []string{"separate", "all"} {
		objs, err := Render(chartDir, map[string]any{
			"mode":              mode,
			"imagePullSecrets":  []any{map[string]any{"name": "regcred"}},
			"podAnnotations":    map[string]any{"example.com/team": "storage"},
			"priorityClassName": "system-cluster-critical",
			"extraArgs":         []any{"--kube-api-qps=50"},
		})
		if err != nil {
			t.Fatalf("mode %s: %v", mode, err)
		}
		deployments := 0
		for _, o := range objs {
			if o.GetKind() != "Deployment" {
				continue
			}
			deployments++
			pod := o.Object["spec"].(map[string]any)["template"].(map[string]any)
			if got, _, _ := unstructured.NestedString(pod, "metadata", "annotations", "example.com/team"); got != "storage" {
				t.Errorf("%s: pod annotation %q, want storage", o.GetName(), got)
			}
			if got, _, _ := unstructured.NestedString(pod, "spec", "priorityClassName"); got != "system-cluster-critical" {
				t.Errorf("%s: priorityClassName %q", o.GetName(), got)
			}
			secrets, _, _ := unstructured.NestedSlice(pod, "spec", "imagePullSecrets")
			if len(secrets) != 1 || secrets[0].(map[string]any)["name"] != "regcred" {
				t.Errorf("%s: imagePullSecrets %v", o.GetName(), secrets)
			}
			containers, _, _ := unstructured.NestedSlice(pod, "spec", "containers")
			args, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
			if !slices.Contains(args, "--kube-api-qps=50") {
				t.Errorf("%s: args %v, want the extra argument", o.GetName(), args)
			}
		}
		if deployments == 0 {
			t.Errorf("mode %s: no Deployment rendered", mode)
		}
	}
}

// helm install -n reclaimable-system --create-namespace, the habit: Helm
// makes the release's namespace, so the chart does not make it again (the
// two would collide), and its notes say how to label it.
func TestTheChartLeavesTheReleaseNamespaceToHelm(t *testing.T) {
	for _, tt := range []struct {
		release string
		made    bool
	}{{"default", true}, {"reclaimable-system", false}} {
		objs, notes, err := RenderIn(chartDir, tt.release, nil)
		if err != nil {
			t.Fatal(err)
		}
		made := slices.ContainsFunc(objs, func(o *unstructured.Unstructured) bool {
			return o.GetKind() == "Namespace" && o.GetName() == "reclaimable-system"
		})
		if made != tt.made {
			t.Errorf("release in %s: namespace reclaimable-system made by the chart %v, want %v", tt.release, made, tt.made)
		}
		if labels := strings.Contains(notes, "kubectl label namespace reclaimable-system"); labels == tt.made {
			t.Errorf("release in %s: notes say how to label the namespace %v, want %v:\n%s", tt.release, labels, !tt.made, notes)
		}
	}
}
