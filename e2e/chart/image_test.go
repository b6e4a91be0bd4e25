package chart

import (
	"os"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Every container that kustomize and the chart install runs the image of
// VERSION, with imagePullPolicy IfNotPresent (an image loaded into the
// nodes is used), and the lifecycle and scrub pods get the same image.
func TestTheInstallationRunsTheImageOfVERSION(t *testing.T) {
	b, err := os.ReadFile("../../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	want := "ghcr.io/reclaimable/reclaimable:" + strings.TrimSpace(string(b))
	for _, tt := range []struct {
		name          string
		chart         bool
		values        map[string]any
		kustomization string
	}{
		{name: "kustomize: manifests/"},
		{name: "kustomize: overlays/all", kustomization: "resources: [%[1]s/overlays/all]"},
		{name: "chart: defaults", chart: true},
		{name: "chart: mode all", chart: true, values: map[string]any{"mode": "all"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			objs := installation(t, tt.chart, tt.values, tt.kustomization)
			containers := 0
			for _, o := range objs {
				if o.GetKind() != "Deployment" {
					continue
				}
				list, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
				for _, c := range list {
					containers++
					c := c.(map[string]any)
					image, _, _ := unstructured.NestedString(c, "image")
					policy, _, _ := unstructured.NestedString(c, "imagePullPolicy")
					if image != want || policy != "IfNotPresent" {
						t.Errorf("Deployment %s runs %s with pull policy %q, want %s, IfNotPresent", o.GetName(), image, policy, want)
					}
					env, _, _ := unstructured.NestedSlice(c, "env")
					for _, e := range env {
						e := e.(map[string]any)
						if e["name"] == "LIFECYCLE_IMAGE" && e["value"] != want {
							t.Errorf("Deployment %s: the lifecycle pods run %v, want %s", o.GetName(), e["value"], want)
						}
					}
				}
			}
			if containers == 0 {
				t.Fatal("no container rendered")
			}
		})
	}
}
