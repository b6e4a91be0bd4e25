package chart

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/BurntSushi/toml"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// ciDir holds the CI recipes: <system>.yaml the class and pool, values/ the
// configuration a user copies, reference/ what the system makes of it.
var ciDir = filepath.Join(manifestsDir, "examples", "ci")

// The configuration files of the CI recipes (values of ARC's and GitLab
// Runner's charts, Jenkins' JCasC) ask for the claim that the reference
// objects carry, of the class the recipe makes, in the namespace where the
// reference objects are: what TestCIRecipes runs on a real node is what a
// user who copies the file gets.
func TestTheCIConfigurationFilesAskForTheRecipesClaim(t *testing.T) {
	for _, tt := range []struct {
		system string
		// claim reads the claim template's spec and the namespace of the
		// jobs, "" where the file does not say it (a chart's release
		// namespace).
		claim func(t *testing.T, values map[string]any) (map[string]any, string)
	}{
		{system: "arc", claim: func(t *testing.T, v map[string]any) (map[string]any, string) {
			spec, _, _ := unstructured.NestedMap(v, "containerMode", "kubernetesModeWorkVolumeClaim")
			return spec, ""
		}},
		{system: "gitlab", claim: gitlabClaim},
		{system: "jenkins", claim: func(t *testing.T, v map[string]any) (map[string]any, string) {
			clouds, _, _ := unstructured.NestedSlice(v, "jenkins", "clouds")
			if len(clouds) != 1 {
				t.Fatalf("%d clouds, want 1", len(clouds))
			}
			cloud, _, _ := unstructured.NestedMap(clouds[0].(map[string]any), "kubernetes")
			templates, _, _ := unstructured.NestedSlice(cloud, "templates")
			if len(templates) != 1 {
				t.Fatalf("%d pod templates, want 1", len(templates))
			}
			volume, _, _ := unstructured.NestedMap(templates[0].(map[string]any), "workspaceVolume", "genericEphemeralVolume")
			// The plugin's fields, as the claim spec it makes of them.
			spec := map[string]any{"storageClassName": volume["storageClassName"], "accessModes": []any{volume["accessModes"]},
				"resources": map[string]any{"requests": map[string]any{"storage": volume["requestsSize"]}}}
			namespace, _ := cloud["namespace"].(string)
			return spec, namespace
		}},
	} {
		t.Run(tt.system, func(t *testing.T) {
			values := readYAML(t, filepath.Join(ciDir, "values", tt.system+".yaml"))
			spec, namespace := tt.claim(t, values)
			class := ""
			for _, o := range readObjects(t, filepath.Join(ciDir, tt.system+".yaml")) {
				if o.GetKind() == "StorageClass" {
					class = o.GetName()
				}
			}
			ref := readObjects(t, filepath.Join(ciDir, "reference", tt.system+".yaml"))[0]
			want := referenceClaim(t, ref)
			if spec["storageClassName"] != class || spec["storageClassName"] != want["storageClassName"] {
				t.Errorf("the claim's class is %v, want the recipe's %s, which the reference's claim names (%v)", spec["storageClassName"], class, want["storageClassName"])
			}
			if got, want := yamlOf(t, spec["accessModes"]), yamlOf(t, want["accessModes"]); got != want {
				t.Errorf("the claim's access modes are %s, want the reference's %s", got, want)
			}
			if _, ok, _ := unstructured.NestedString(spec, "resources", "requests", "storage"); !ok {
				t.Error("the claim asks for no size")
			}
			if namespace != "" && namespace != ref.GetNamespace() {
				t.Errorf("the jobs run in namespace %s, the reference's in %s", namespace, ref.GetNamespace())
			}
		})
	}
}

// gitlabClaim reads the claim of the "builds" volume of the pod_spec patch
// in the runner's config.toml (runners.config).
func gitlabClaim(t *testing.T, v map[string]any) (map[string]any, string) {
	t.Helper()
	text, _, _ := unstructured.NestedString(v, "runners", "config")
	var config struct {
		Runners []struct {
			Executor   string
			Kubernetes struct {
				Namespace string
				PodSpec   []struct {
					Name, PatchType, Patch string
				} `toml:"pod_spec"`
			}
		}
	}
	if _, err := toml.Decode(text, &config); err != nil {
		t.Fatalf("runners.config is not TOML: %v", err)
	}
	if len(config.Runners) != 1 || config.Runners[0].Executor != "kubernetes" || len(config.Runners[0].Kubernetes.PodSpec) != 1 {
		t.Fatalf("runners.config: %+v, want one kubernetes runner with one pod_spec patch", config.Runners)
	}
	var patch map[string]any
	if err := yaml.Unmarshal([]byte(config.Runners[0].Kubernetes.PodSpec[0].Patch), &patch); err != nil {
		t.Fatalf("the pod_spec patch is not YAML: %v", err)
	}
	volumes, _, _ := unstructured.NestedSlice(patch, "volumes")
	for _, vol := range volumes {
		if spec, ok, _ := unstructured.NestedMap(vol.(map[string]any), "ephemeral", "volumeClaimTemplate", "spec"); ok {
			return spec, config.Runners[0].Kubernetes.Namespace
		}
	}
	t.Fatal("the pod_spec patch has no ephemeral volume")
	return nil, ""
}

// referenceClaim is the claim template's spec of the reference object's
// one ephemeral volume.
func referenceClaim(t *testing.T, o *unstructured.Unstructured) map[string]any {
	t.Helper()
	path := []string{"spec", "volumes"}
	if o.GetKind() == "Job" {
		path = []string{"spec", "template", "spec", "volumes"}
	}
	volumes, _, _ := unstructured.NestedSlice(o.Object, path...)
	for _, v := range volumes {
		if spec, ok, _ := unstructured.NestedMap(v.(map[string]any), "ephemeral", "volumeClaimTemplate", "spec"); ok {
			return spec
		}
	}
	t.Fatalf("%s %s has no ephemeral volume", o.GetKind(), o.GetName())
	return nil
}

// readYAML reads the YAML map of file, duplicate keys refused.
func readYAML(t *testing.T, file string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := yaml.UnmarshalStrict(b, &v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return v
}

// readObjects decodes the objects of file, at least one.
func readObjects(t *testing.T, file string) []*unstructured.Unstructured {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Decode(bytes.NewReader(b))
	if err != nil || len(objs) == 0 {
		t.Fatalf("%s: %d objects, %v", file, len(objs), err)
	}
	return objs
}

func yamlOf(t *testing.T, v any) string {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
