package chart

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

const (
	chartDir     = "../../charts/reclaimable"
	manifestsDir = "../../manifests"
)

func TestTheChartLints(t *testing.T) {
	for name, values := range map[string]map[string]any{
		"defaults": nil,
		"mode all": {"mode": "all"},
		"nfs":      {"share": map[string]any{"nfs": map[string]any{"server": "nfs.example.internal", "path": "/exports/reclaimable"}}},
		"monitoring": {"monitoring": map[string]any{"podMonitor": map[string]any{"enabled": true, "interval": "30s"},
			"prometheusRule": map[string]any{"enabled": true}}},
	} {
		if msgs := Lint(chartDir, values); len(msgs) > 0 {
			t.Errorf("%s: helm lint --strict says:\n%s", name, strings.Join(msgs, "\n"))
		}
	}
}

// The chart with each set of values installs what kustomize builds from
// the matching kustomization: the base, the one-process overlay, the base
// with each component.
func TestTheChartInstallsWhatKustomizeDoes(t *testing.T) {
	for _, tt := range []struct {
		name   string
		values map[string]any
		// kustomization is manifests/ itself, or one over it written
		// into a temporary directory.
		kustomization string
		// apis the cluster serves besides v1.34's.
		apis []string
	}{
		{"defaults: manifests/", nil, "", nil},
		{"mode all: overlays/all", map[string]any{"mode": "all"}, "resources: [%s/overlays/all]", nil},
		{"claims gate: components/claims-gate", map[string]any{"claimsGate": map[string]any{"enabled": true}},
			"resources: [%[1]s]\ncomponents: [%[1]s/components/claims-gate]", nil},
		// Kubernetes v1.36 serves MutatingAdmissionPolicy as v1, which
		// the test bed's v1.34 cannot run: rendered with that API set.
		{"claims gate, admissionregistration v1: components/claims-gate-v1", map[string]any{"claimsGate": map[string]any{"enabled": true}},
			"resources: [%[1]s]\ncomponents: [%[1]s/components/claims-gate-v1]", []string{"admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"}},
		{"nfs share: components/nfs-share", map[string]any{
			"share":       map[string]any{"nfs": map[string]any{"server": "nfs.example.internal", "path": "/exports/reclaimable"}},
			"provisioner": map[string]any{"replicas": 2},
		}, "resources: [%[1]s]\ncomponents: [%[1]s/components/nfs-share]", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rendered, _, err := RenderIn(chartDir, "default", tt.values, tt.apis...)
			if err != nil {
				t.Fatal(err)
			}
			built := kustomize(t, tt.kustomization)
			if diffs := Compare(rendered, built); len(diffs) > 0 {
				t.Errorf("the chart and kustomize disagree:\n%s", strings.Join(diffs, "\n"))
			}
		})
	}
}

// A difference between the two is found, and said where it is.
func TestCompareFindsADifference(t *testing.T) {
	rendered, err := Render(chartDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	built := kustomize(t, "")
	for _, o := range built {
		if o.GetKind() == "Deployment" && o.GetName() == "reclaimable-provisioner" {
			containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			if err := unstructured.SetNestedField(containers[0].(map[string]any), "512Mi", "resources", "limits", "memory"); err != nil {
				t.Fatal(err)
			}
			if err := unstructured.SetNestedSlice(o.Object, containers, "spec", "template", "spec", "containers"); err != nil {
				t.Fatal(err)
			}
		}
	}
	built = append(built, &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "only-here", "namespace": "reclaimable-system"}}})
	diffs := Compare(rendered, built)
	want := []string{
		"apps/v1 Deployment reclaimable-system/reclaimable-provisioner differs:\n  .spec.template.spec.containers[0].resources.limits.memory: chart 80Mi, kustomize 512Mi\n",
		"v1 ConfigMap reclaimable-system/only-here: kustomize has it, the chart does not",
	}
	if strings.Join(diffs, "|") != strings.Join(want, "|") {
		t.Errorf("Compare = %q, want %q", diffs, want)
	}
}

// kustomize builds manifests/, or with kustomization (a format whose %s is
// the path of manifests/) a kustomization over it.
func kustomize(t *testing.T, kustomization string) []*unstructured.Unstructured {
	t.Helper()
	dir, err := filepath.Abs(manifestsDir)
	if err != nil {
		t.Fatal(err)
	}
	if kustomization != "" {
		over := t.TempDir()
		// kustomize takes only relative paths.
		if dir, err = filepath.Rel(over, dir); err != nil {
			t.Fatal(err)
		}
		content := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n" + strings.ReplaceAll(kustomization, "%[1]s", dir)
		content = strings.ReplaceAll(content, "%s", dir)
		if err := os.WriteFile(filepath.Join(over, "kustomization.yaml"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		dir = over
	}
	objs, err := Kustomize(dir)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// The claims gate's two components are one policy under two API versions:
// nothing else may differ.
func TestTheClaimsGateComponentsAgree(t *testing.T) {
	read := func(dir string) string {
		b, err := os.ReadFile(filepath.Join(manifestsDir, "components", dir, "policy.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	v1beta1, v1 := read("claims-gate"), read("claims-gate-v1")
	if want := strings.ReplaceAll(v1beta1, "apiVersion: admissionregistration.k8s.io/v1beta1\n", "apiVersion: admissionregistration.k8s.io/v1\n"); v1 != want || v1 == v1beta1 {
		t.Errorf("components/claims-gate-v1/policy.yaml differs from components/claims-gate/policy.yaml by more than the API version")
	}
}

// Helm creates a chart's crds/ before any of its templates, and checks
// every template's kind against the cluster first: the VolumePool CRD must
// be in crds/, and no template may render a CRD, or a first install with
// examples.volumePools fails on a cluster without it (an e2e test installs
// so, on a control plane without the CRD).
func TestTheChartInstallsItsCRDBeforeItsTemplates(t *testing.T) {
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	var crds []string
	for _, f := range ch.CRDObjects() {
		objs, err := Decode(bytes.NewReader(f.File.Data))
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			crds = append(crds, o.GetKind()+" "+o.GetName())
		}
	}
	if want := []string{"CustomResourceDefinition volumepools.reclaimable.github.io"}; !slices.Equal(crds, want) {
		t.Errorf("the chart's crds/ holds %v, want %v", crds, want)
	}
	install := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	install.DryRun, install.ClientOnly, install.ReleaseName, install.Namespace = true, true, ReleaseName, "default"
	install.KubeVersion = &chartutil.KubeVersion{Version: "v1.34.0", Major: "1", Minor: "34"}
	rel, err := install.Run(ch, map[string]any{"examples": map[string]any{"volumePools": []any{map[string]any{
		"apiVersion": "reclaimable.github.io/v1alpha1", "kind": "VolumePool", "metadata": map[string]any{"name": "p"},
		"spec": map[string]any{"storageClassName": "c"},
	}}}})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Decode(strings.NewReader(rel.Manifest))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.GetKind() == "CustomResourceDefinition" {
			t.Errorf("a template renders CRD %s: Helm would check the VolumePools' kind before creating it", o.GetName())
		}
	}
}
