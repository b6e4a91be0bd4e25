// Package chart lints and renders charts/reclaimable with the Helm SDK, and
// compares what it renders with what kustomize builds from manifests/: the
// chart and the kustomize installation are kept the same by its tests.
package chart

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint/support"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// ReleaseName is the name the tests give the release.
const ReleaseName = "reclaimable"

// Render renders the chart in dir with values, as helm template does for
// a cluster of Kubernetes v1.34, and returns its objects.
func Render(dir string, values map[string]any) ([]*unstructured.Unstructured, error) {
	objs, _, err := RenderIn(dir, "default", values)
	return objs, err
}

// RenderIn renders the chart in dir with values as a release in namespace,
// for a cluster that serves apis too ("group/version/Kind"), and returns
// its objects and its notes.
func RenderIn(dir, namespace string, values map[string]any, apis ...string) ([]*unstructured.Unstructured, string, error) {
	ch, err := loader.Load(dir)
	if err != nil {
		return nil, "", err
	}
	install := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	install.DryRun, install.ClientOnly, install.Replace, install.IncludeCRDs = true, true, true, true
	install.ReleaseName, install.Namespace = ReleaseName, namespace
	install.KubeVersion = &chartutil.KubeVersion{Version: "v1.34.0", Major: "1", Minor: "34"}
	install.APIVersions = apis
	rel, err := install.Run(ch, values)
	if err != nil {
		return nil, "", err
	}
	objs, err := Decode(strings.NewReader(rel.Manifest))
	return objs, rel.Info.Notes, err
}

// Lint lints the chart in dir with values, as helm lint --strict does, and
// returns what it found wrong.
func Lint(dir string, values map[string]any) []string {
	l := action.NewLint()
	l.Strict = true
	l.KubeVersion = &chartutil.KubeVersion{Version: "v1.34.0", Major: "1", Minor: "34"}
	res := l.Run([]string{dir}, values)
	var out []string
	for _, m := range res.Messages {
		if m.Severity >= support.WarningSev {
			out = append(out, m.Error())
		}
	}
	for _, err := range res.Errors {
		out = append(out, err.Error())
	}
	return out
}

// Kustomize builds the kustomization in dir, as kubectl apply -k does (files
// outside it allowed, for a test's kustomization over manifests/).
func Kustomize(dir string) ([]*unstructured.Unstructured, error) {
	opts := krusty.MakeDefaultOptions()
	opts.LoadRestrictions = types.LoadRestrictionsNone
	m, err := krusty.MakeKustomizer(opts).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, err
	}
	b, err := m.AsYaml()
	if err != nil {
		return nil, err
	}
	return Decode(bytes.NewReader(b))
}

// Decode reads the objects of a YAML stream, leaving out empty documents.
func Decode(r io.Reader) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
	var out []*unstructured.Unstructured
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, err
		}
		if len(obj) > 0 {
			out = append(out, &unstructured.Unstructured{Object: obj})
		}
	}
}

// Helm's own marks on what it renders, which the kustomize installation
// does not have.
var helmLabels = []string{"app.kubernetes.io/managed-by", "helm.sh/chart"}

// clusterScoped are the kinds of both installations that live in no
// namespace: kustomize's namespace transformer gives the admission policies
// one anyway, which the API server ignores.
var clusterScoped = map[string]bool{
	"Namespace": true, "CustomResourceDefinition": true, "ClusterRole": true, "ClusterRoleBinding": true, "PersistentVolume": true,
	"StorageClass": true, "ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true,
	"MutatingAdmissionPolicy": true, "MutatingAdmissionPolicyBinding": true,
}

// Compare says how the chart's objects differ from kustomize's, an entry
// per object missing on either side or different, Helm's own labels
// and the namespace of cluster-scoped objects left aside;
// none when they are the same.
func Compare(chart, kustomize []*unstructured.Unstructured) []string {
	byKey := func(objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
		out := map[string]*unstructured.Unstructured{}
		for _, o := range objs {
			o = o.DeepCopy()
			labels := o.GetLabels()
			for _, k := range helmLabels {
				delete(labels, k)
			}
			o.SetLabels(labels)
			if clusterScoped[o.GetKind()] {
				o.SetNamespace("")
			}
			out[key(o)] = o
		}
		return out
	}
	c, k := byKey(chart), byKey(kustomize)
	var diffs []string
	for _, name := range slices.Sorted(maps.Keys(k)) {
		switch got, ok := c[name]; {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("%s: kustomize has it, the chart does not", name))
		case !equality.Semantic.DeepEqual(normal(got.Object), normal(k[name].Object)):
			diffs = append(diffs, fmt.Sprintf("%s differs:\n%s", name, diff(normal(got.Object), normal(k[name].Object), "")))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c)) {
		if _, ok := k[name]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: the chart has it, kustomize does not", name))
		}
	}
	return diffs
}

func key(o *unstructured.Unstructured) string {
	return fmt.Sprintf("%s %s %s/%s", o.GetAPIVersion(), o.GetKind(), o.GetNamespace(), o.GetName())
}

// normal makes values that mean the same compare equal: YAML integers are
// int64 from one decoder and float64 from another, and empty maps are
// left out by one side.
func normal(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, x := range v {
			if m, ok := x.(map[string]any); ok && len(m) == 0 {
				continue
			}
			out[k] = normal(x)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = normal(x)
		}
		return out
	case int:
		return float64(v)
	case int64:
		return float64(v)
	}
	return v
}

// diff lists the paths where a (the chart's) and b (kustomize's) differ.
func diff(a, b any, path string) string {
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if aok && bok {
		var out strings.Builder
		for _, k := range slices.Sorted(maps.Keys(union(am, bm))) {
			out.WriteString(diff(am[k], bm[k], path+"."+k))
		}
		return out.String()
	}
	al, aok := a.([]any)
	bl, bok := b.([]any)
	if aok && bok && len(al) == len(bl) {
		var out strings.Builder
		for i := range al {
			out.WriteString(diff(al[i], bl[i], fmt.Sprintf("%s[%d]", path, i)))
		}
		return out.String()
	}
	if equality.Semantic.DeepEqual(a, b) {
		return ""
	}
	return fmt.Sprintf("  %s: chart %v, kustomize %v\n", path, a, b)
}

func union(a, b map[string]any) map[string]any {
	out := maps.Clone(a)
	maps.Copy(out, b)
	return out
}
