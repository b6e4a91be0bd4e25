package chart

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// settings are the values that must agree between the controllers of one
// installation, and with the objects around them.
type settings struct {
	namespace, controllerID, provisionerName, lifecycleNamespace string
}

var (
	defaultSettings = settings{"reclaimable-system", "reclaimable", "vendor/reclaimable", "reclaimable-lifecycle"}
	renamedSettings = settings{"team-a", "team-a", "example.com/team-a", "team-a-lifecycle"}
)

// renamedOverlay renames an installation as docs/install.md says: its
// values merged into reclaimable-settings, components/settings last. %[1]s
// is manifests/, %[2]s what the overlay builds on.
const renamedOverlay = `resources: [%[2]s]
configMapGenerator:
  - name: reclaimable-settings
    behavior: merge
    literals: [namespace=team-a, controller-id=team-a, provisioner-name=example.com/team-a, lifecycle-namespace=team-a-lifecycle]
components: [%[1]s/components/claims-gate, %[1]s/components/settings]
`

// settingFlags are the flags each controller reads a setting through, and
// the environment variable the Deployment takes it from: one place per
// setting, the same for every controller.
var settingFlags = []struct {
	flag, env   string
	value       func(settings) string
	controllers []string // the subcommands that read it
}{
	{"--controller-id", "CONTROLLER_ID", func(s settings) string { return s.controllerID }, []string{"podwatcher", "provisioner", "releaser", "all"}},
	{"--provisioner-name", "PROVISIONER_NAME", func(s settings) string { return s.provisionerName }, []string{"podwatcher", "provisioner", "releaser", "all"}},
	{"--lifecycle-namespace", "LIFECYCLE_NAMESPACE", func(s settings) string { return s.lifecycleNamespace }, []string{"provisioner", "all"}},
}

// Every rendering of the installation, kustomize's and the chart's, default
// and renamed, gives each controller every setting it reads, from its one
// place, with the same value as the others; and the namespaces, Lease names
// and users the objects around them name agree.
func TestEveryControllerGetsTheSameSettings(t *testing.T) {
	renamedValues := map[string]any{"namespace": renamedSettings.namespace, "controllerID": renamedSettings.controllerID,
		"provisionerName": renamedSettings.provisionerName, "lifecycleNamespace": renamedSettings.lifecycleNamespace,
		"claimsGate": map[string]any{"enabled": true}}
	for _, tt := range []struct {
		name string
		want settings
		// Either values of the chart, or a kustomization over manifests/
		// ("" for manifests/ itself).
		chart         bool
		values        map[string]any
		kustomization string
	}{
		{name: "kustomize: manifests/", want: defaultSettings},
		{name: "kustomize: overlays/all", want: defaultSettings, kustomization: "resources: [%[1]s/overlays/all]"},
		{name: "kustomize: renamed", want: renamedSettings, kustomization: fmt.Sprintf(renamedOverlay, "%[1]s", "%[1]s")},
		{name: "kustomize: renamed overlays/all", want: renamedSettings, kustomization: fmt.Sprintf(renamedOverlay, "%[1]s", "%[1]s/overlays/all")},
		{name: "chart: defaults", want: defaultSettings, chart: true},
		{name: "chart: mode all", want: defaultSettings, chart: true, values: map[string]any{"mode": "all"}},
		{name: "chart: renamed", want: renamedSettings, chart: true, values: renamedValues},
		{name: "chart: renamed mode all", want: renamedSettings, chart: true, values: merged(renamedValues, map[string]any{"mode": "all"})},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, problem := range checkSettings(installation(t, tt.chart, tt.values, tt.kustomization), tt.want) {
				t.Error(problem)
			}
		})
	}
}

// The check finds a controller that lacks a setting, or gets it some other
// way, or another value.
func TestCheckSettingsFindsADisagreement(t *testing.T) {
	objs := kustomize(t, "")
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		c := containers[0].(map[string]any)
		args, _, _ := unstructured.NestedStringSlice(c, "args")
		switch o.GetName() {
		case "reclaimable-releaser": // lacks it, as on the releaser before
			args = slices.DeleteFunc(args, func(a string) bool { return strings.HasPrefix(a, "--provisioner-name=") })
		case "reclaimable-podwatcher": // has it written out
			for i, a := range args {
				if strings.HasPrefix(a, "--controller-id=") {
					args[i] = "--controller-id=reclaimable"
				}
			}
		}
		_ = unstructured.SetNestedStringSlice(c, args, "args")
		_ = unstructured.SetNestedSlice(o.Object, containers, "spec", "template", "spec", "containers")
	}
	got := checkSettings(objs, defaultSettings)
	want := []string{
		`Deployment reclaimable-system/reclaimable-podwatcher (podwatcher): --controller-id is "--controller-id=reclaimable", want --controller-id=$(CONTROLLER_ID)`,
		`Deployment reclaimable-system/reclaimable-releaser (releaser): no --provisioner-name`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("checkSettings = %q, want %q", got, want)
	}
}

// checkSettings says where objs disagree with want, an entry per problem.
func checkSettings(objs []*unstructured.Unstructured, want settings) []string {
	var problems []string
	errorf := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	var deployments, namespaces []string
	for _, o := range objs {
		what := o.GetKind() + " " + o.GetName()
		switch o.GetKind() {
		case "Namespace":
			namespaces = append(namespaces, o.GetName())
		case "Deployment":
			what = fmt.Sprintf("Deployment %s/%s", o.GetNamespace(), o.GetName())
			deployments = append(deployments, o.GetName())
			if o.GetNamespace() != want.namespace {
				errorf("%s: in namespace %q, want %q", what, o.GetNamespace(), want.namespace)
			}
			containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			for _, c := range containers {
				problems = append(problems, checkContainer(what, c.(map[string]any), want)...)
			}
		case "Role":
			if name, ok := strings.CutSuffix(o.GetName(), "-leader-election"); ok {
				controller := strings.TrimPrefix(name, "reclaimable-")
				rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
				var names []string
				for _, r := range rules {
					n, _, _ := unstructured.NestedStringSlice(r.(map[string]any), "resourceNames")
					names = append(names, n...)
				}
				if lease := want.controllerID + "-" + controller; !slices.Equal(names, []string{lease}) {
					errorf("%s: allows the Leases %q, want %q", what, names, lease)
				}
			}
			if o.GetName() == "reclaimable-lifecycle" && o.GetNamespace() != want.lifecycleNamespace {
				errorf("%s: in namespace %q, want %q", what, o.GetNamespace(), want.lifecycleNamespace)
			}
		case "RoleBinding", "ClusterRoleBinding":
			subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
			for _, s := range subjects {
				if ns, _, _ := unstructured.NestedString(s.(map[string]any), "namespace"); ns != want.namespace {
					errorf("%s: a subject in namespace %q, want %q", what, ns, want.namespace)
				}
			}
			if o.GetName() == "reclaimable-lifecycle" && o.GetNamespace() != want.lifecycleNamespace {
				errorf("%s: in namespace %q, want %q", what, o.GetNamespace(), want.lifecycleNamespace)
			}
		case "ValidatingAdmissionPolicy":
			// The users the installation names: in matchConditions, or in
			// a variable called podwatcher (other variables name users of
			// Kubernetes, in kube-system).
			conditions, _, _ := unstructured.NestedSlice(o.Object, "spec", "matchConditions")
			variables, _, _ := unstructured.NestedSlice(o.Object, "spec", "variables")
			for _, v := range variables {
				if name, _, _ := unstructured.NestedString(v.(map[string]any), "name"); name == "podwatcher" {
					conditions = append(conditions, v)
				}
			}
			for _, c := range conditions {
				expr, _, _ := unstructured.NestedString(c.(map[string]any), "expression")
				if strings.Contains(expr, "system:serviceaccount:") && !strings.Contains(expr, "system:serviceaccount:"+want.namespace+":") {
					errorf("%s: names users outside namespace %q: %s", what, want.namespace, expr)
				}
			}
		case "MutatingAdmissionPolicyBinding":
			name, _, _ := unstructured.NestedString(o.Object, "spec", "paramRef", "name")
			ns, _, _ := unstructured.NestedString(o.Object, "spec", "paramRef", "namespace")
			if lease := want.controllerID + "-podwatcher"; name != lease || ns != want.namespace {
				errorf("%s: reads the Lease %s/%s, want %s/%s", what, ns, name, want.namespace, lease)
			}
		case "PersistentVolume":
			if ns, ok, _ := unstructured.NestedString(o.Object, "spec", "claimRef", "namespace"); ok && ns != want.namespace {
				errorf("%s: reserved for a claim in namespace %q, want %q", what, ns, want.namespace)
			}
		}
		if ns := o.GetNamespace(); ns != "" && !clusterScoped[o.GetKind()] && ns != want.namespace && ns != want.lifecycleNamespace {
			errorf("%s: in namespace %q, neither the installation's nor the lifecycle pods'", what, ns)
		}
	}
	if len(deployments) == 0 {
		errorf("no Deployment")
	}
	for _, ns := range []string{want.namespace, want.lifecycleNamespace} {
		if !slices.Contains(namespaces, ns) {
			errorf("no Namespace %s; there are %q", ns, namespaces)
		}
	}
	return problems
}

// checkContainer checks that a controller's container passes each setting
// it reads as its flag from the environment variable, and the variable's
// value.
func checkContainer(deployment string, c map[string]any, want settings) []string {
	var problems []string
	args, _, _ := unstructured.NestedStringSlice(c, "args")
	if len(args) == 0 {
		return []string{deployment + ": no args"}
	}
	what := fmt.Sprintf("%s (%s)", deployment, args[0])
	env := map[string]string{}
	list, _, _ := unstructured.NestedSlice(c, "env")
	for _, e := range list {
		name, _, _ := unstructured.NestedString(e.(map[string]any), "name")
		value, _, _ := unstructured.NestedString(e.(map[string]any), "value")
		env[name] = value
	}
	for _, s := range settingFlags {
		if !slices.Contains(s.controllers, args[0]) {
			continue
		}
		i := slices.IndexFunc(args, func(a string) bool { return strings.HasPrefix(a, s.flag+"=") })
		switch {
		case i < 0:
			problems = append(problems, fmt.Sprintf("%s: no %s", what, s.flag))
		case args[i] != s.flag+"=$("+s.env+")":
			problems = append(problems, fmt.Sprintf("%s: %s is %q, want %s=$(%s)", what, s.flag, args[i], s.flag, s.env))
		case env[s.env] != s.value(want):
			problems = append(problems, fmt.Sprintf("%s: %s=%q, want %q", what, s.env, env[s.env], s.value(want)))
		}
	}
	return problems
}

// installation is the chart rendered with values, or (chart false) the
// kustomization over manifests/ that kustomize builds.
func installation(t *testing.T, chart bool, values map[string]any, kustomization string) []*unstructured.Unstructured {
	t.Helper()
	if !chart {
		return kustomize(t, kustomization)
	}
	objs, err := Render(chartDir, values)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func merged(a, b map[string]any) map[string]any {
	out := maps.Clone(a)
	maps.Copy(out, b)
	return out
}
