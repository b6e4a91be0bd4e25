package chart

import (
	"os"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Every container that kustomize and the chart install runs one image,
// with imagePullPolicy IfNotPresent (an image loaded into the nodes is
// used), and the lifecycle and scrub pods get the same image and pull
// secrets: by default the image of VERSION, else the one an overlay's
// images: entry or the chart's image.* names.
func TestTheInstallationRunsOneImage(t *testing.T) {
	b, err := os.ReadFile("../../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	version := "ghcr.io/reclaimable/reclaimable:" + strings.TrimSpace(string(b))
	const other = "registry.example.com/reclaimable:v1.2.3"
	for _, tt := range []struct {
		name          string
		chart         bool
		values        map[string]any
		kustomization string
		want          string
		wantSecrets   []string
	}{
		{name: "kustomize: manifests/", want: version},
		{name: "kustomize: overlays/all", kustomization: "resources: [%[1]s/overlays/all]", want: version},
		// The overlay of docs/install.md, "The image".
		{name: "kustomize: an images entry and pull secrets", want: other, wantSecrets: []string{"regcred"}, kustomization: `resources: [%[1]s]
images: [{name: ghcr.io/reclaimable/reclaimable, newName: registry.example.com/reclaimable, newTag: v1.2.3}]
patches:
  - target: {kind: Deployment}
    patch: |-
      - op: add
        path: /spec/template/spec/imagePullSecrets
        value: [{name: regcred}]
  - target: {kind: PodTemplate, name: reclaimable-lifecycle}
    patch: |-
      - op: add
        path: /template/spec/imagePullSecrets
        value: [{name: regcred}]`},
		{name: "kustomize: overlays/all and an images entry", want: other, kustomization: `resources: [%[1]s/overlays/all]
images: [{name: ghcr.io/reclaimable/reclaimable, newName: registry.example.com/reclaimable, newTag: v1.2.3}]`},
		{name: "chart: defaults", chart: true, want: version},
		{name: "chart: mode all", chart: true, values: map[string]any{"mode": "all"}, want: version},
		{name: "chart: image and pull secrets", chart: true, want: other, wantSecrets: []string{"regcred"}, values: map[string]any{
			"image":            map[string]any{"repository": "registry.example.com/reclaimable", "tag": "v1.2.3", "pullPolicy": "IfNotPresent"},
			"imagePullSecrets": []any{map[string]any{"name": "regcred"}},
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			objs := installation(t, tt.chart, tt.values, tt.kustomization)
			containers := 0
			for _, o := range objs {
				if o.GetKind() != "Deployment" {
					continue
				}
				spec, _, _ := unstructured.NestedMap(o.Object, "spec", "template", "spec")
				if got := pullSecrets(spec); !slices.Equal(got, tt.wantSecrets) {
					t.Errorf("Deployment %s pulls with %v, want %v", o.GetName(), got, tt.wantSecrets)
				}
				list, _, _ := unstructured.NestedSlice(spec, "containers")
				for _, c := range list {
					containers++
					c := c.(map[string]any)
					image, _, _ := unstructured.NestedString(c, "image")
					policy, _, _ := unstructured.NestedString(c, "imagePullPolicy")
					if image != tt.want || policy != "IfNotPresent" {
						t.Errorf("Deployment %s runs %s with pull policy %q, want %s, IfNotPresent", o.GetName(), image, policy, tt.want)
					}
					if !provisions(c) {
						continue
					}
					image, secrets := lifecyclePods(t, objs, c)
					if image != tt.want || !slices.Equal(secrets, tt.wantSecrets) {
						t.Errorf("Deployment %s: the lifecycle pods run %s with pull secrets %v, want %s, %v", o.GetName(), image, secrets, tt.want, tt.wantSecrets)
					}
				}
			}
			if containers == 0 {
				t.Fatal("no container rendered")
			}
		})
	}
}

// provisions says whether container c runs the provisioner.
func provisions(c map[string]any) bool {
	args, _, _ := unstructured.NestedStringSlice(c, "args")
	return len(args) > 0 && (args[0] == "provisioner" || args[0] == "all")
}

// lifecyclePods is the image and the pull secrets of the lifecycle pods of
// the provisioner in container c, as the process will see them: its
// --lifecycle-image, with the container's variables expanded, else the
// image of the container "lifecycle" of its --lifecycle-pod-template; the
// pull secrets of that template.
func lifecyclePods(t *testing.T, objs []*unstructured.Unstructured, c map[string]any) (string, []string) {
	t.Helper()
	env := map[string]string{}
	list, _, _ := unstructured.NestedSlice(c, "env")
	for _, e := range list {
		e := e.(map[string]any)
		if v, ok := e["value"].(string); ok {
			env[e["name"].(string)] = v
		}
	}
	flags := map[string]string{}
	args, _, _ := unstructured.NestedStringSlice(c, "args")
	for _, a := range args {
		if name, v, ok := strings.Cut(a, "="); ok {
			for k, x := range env {
				v = strings.ReplaceAll(v, "$("+k+")", x)
			}
			flags[name] = v
		}
	}
	image := flags["--lifecycle-image"]
	var secrets []string
	if name := flags["--lifecycle-pod-template"]; name != "" {
		tmpl := object(t, objs, "PodTemplate", flags["--lifecycle-namespace"], name)
		spec, _, _ := unstructured.NestedMap(tmpl.Object, "template", "spec")
		secrets = pullSecrets(spec)
		containers, _, _ := unstructured.NestedSlice(spec, "containers")
		for _, x := range containers {
			if x := x.(map[string]any); x["name"] == "lifecycle" && image == "" {
				image, _ = x["image"].(string)
			}
		}
	}
	return image, secrets
}

// pullSecrets names the imagePullSecrets of a pod spec.
func pullSecrets(spec map[string]any) []string {
	list, _, _ := unstructured.NestedSlice(spec, "imagePullSecrets")
	var out []string
	for _, s := range list {
		out = append(out, s.(map[string]any)["name"].(string))
	}
	return out
}

// object is the object of kind, namespace and name among objs.
func object(t *testing.T, objs []*unstructured.Unstructured, kind, namespace, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetNamespace() == namespace && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("no %s %s/%s installed", kind, namespace, name)
	return nil
}
