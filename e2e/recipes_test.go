//go:build e2e

package e2e

// The recipes of docs/ci.md, each as the CI system runs it: the objects
// its configuration makes for a job (manifests/examples/ci/<system>.yaml,
// copied from its source at the version each file cites), made on the
// real node in the system's way, named as it names them, and deleted as it
// deletes them, through the installation as its Deployments run it.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/reclaimable/reclaimable/apis/reclaimable/v1alpha1"
	"github.com/reclaimable/reclaimable/e2e/cluster"
	"github.com/reclaimable/reclaimable/e2e/framework"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// ciRecipe is one CI system's recipe as the test runs it.
type ciRecipe struct {
	system string
	// key is the cache key the member of a job must record, as the
	// system's labels give it.
	key string
	// start makes the objects of one job of the recipe in ns, its
	// container running the consumer with args, and returns the job's
	// claim and how the system ends the job.
	start func(r *recipeRun, t *testing.T, ns string, args []string) (claim string, end func())
}

// recipeRun is a recipe's file as applied: its class and pool made for the
// test, the objects of a job as the system makes them.
type recipeRun struct {
	class string
	pool  *v1alpha1.VolumePool
	// job are the file's objects after its class and pool.
	job []runtime.Object
}

var ciRecipes = []ciRecipe{
	{system: "arc", key: "actions.github.com/scale-set-name=my-repo-runners", start: func(r *recipeRun, t *testing.T, ns string, args []string) (string, func()) {
		// <scale set>-<5>-runner-<5>; ARC deletes the pod when the job is
		// done, and Kubernetes the claim with it.
		return r.startPod(t, ns, fmt.Sprintf("my-repo-runners-%s-runner-%s", utilrand.String(5), utilrand.String(5)), args)
	}},
	{system: "jenkins", key: "reclaimable.github.io/cache-key=team-a/my-app/main", start: func(r *recipeRun, t *testing.T, ns string, args []string) (string, func()) {
		// <label>-<5>-<5>, deleted when the build is over.
		return r.startPod(t, ns, fmt.Sprintf("my-app-12-%s-%s-%s", utilrand.String(5), utilrand.String(5), utilrand.String(5)), args)
	}},
	{system: "gitlab", key: "project.runner.gitlab.com/id=42", start: func(r *recipeRun, t *testing.T, ns string, args []string) (string, func()) {
		// runner-<token>-project-<id>-concurrent-<n>-<8>, deleted with
		// propagation Background when the job is done.
		return r.startPod(t, ns, "runner-t3stt0k3-project-42-concurrent-0-"+utilrand.String(8), args)
	}},
	{system: "tekton", key: "tekton.dev/pipeline=build-app", start: (*recipeRun).startPipelineRun},
	{system: "buildkite", key: "buildkite.com/pipeline-slug=my-app", start: (*recipeRun).startBuildkiteJob},
}

// Each recipe of docs/ci.md on the real node, as docs/ci.md says it
// behaves: a job writes into its volume; the next job of the same key, in
// the same namespace, with a claim of another (generated) name, gets the
// same volume and reads it; a job of another namespace gets another volume
// and does not see the file. The member records the key the system's
// labels give. Not parallel with the other installations' tests (their
// controllers share the installation's names); the recipes run side by
// side. In a file after installed_test.go: Go runs the tests that are not
// parallel in the order of their files, and the chart's and the renamed
// installation's tests must come before any that installs the default.
func TestCIRecipes(t *testing.T) {
	framework.RealNode(t)
	install(t)
	c := startInstalled(t, kustomized(t, manifestsDir()))
	for _, recipe := range ciRecipes {
		t.Run(recipe.system, func(t *testing.T) {
			t.Parallel()
			c.runRecipe(t, recipe)
		})
	}
}

func (c *installedCycle) runRecipe(t *testing.T, recipe ciRecipe) {
	r := c.applyRecipe(t, recipe.system)
	a, b := framework.Namespace(t), framework.Namespace(t)
	scope := framework.Scope{ControllerID: c.id, Classes: []string{r.class}, Namespaces: []string{a, b}, NamespaceScoped: []string{r.class}}
	if r.pool.Spec.KeyPolicy == wellknown.KeyPolicyRequire {
		scope.KeyRequired = map[string]string{r.class: r.pool.Spec.KeyLabel}
	}
	inv := framework.WatchInvariants(t, scope)

	job := func(ns string, args ...string) string {
		t.Helper()
		claim, end := recipe.start(r, t, ns, args)
		pv := boundVolume(t, ns, claim)
		if got := pv.Annotations[wellknown.LastKey]; got != recipe.key {
			t.Errorf("volume %s of claim %s/%s was issued under key %q, want %q", pv.Name, ns, claim, got, recipe.key)
		}
		end()
		framework.Eventually(t, 2*time.Minute, func(ctx context.Context) (bool, error) {
			_, err := framework.Client().CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		}, fmt.Sprintf("claim %s/%s to go with its job", ns, claim))
		waitInPool(t, pv.Name)
		return pv.Name
	}
	const probe = "cache-probe"
	first := job(a, "write", probe, "first job\n")
	if second := job(a, "expect", probe, "first job\n"); second != first {
		t.Errorf("the second job of namespace %s got volume %s, want %s, the first's", a, second, first)
	}
	// The consumer's write fails if the file is there.
	if other := job(b, "write", probe, "another namespace's job\n"); other == first {
		t.Errorf("the job of namespace %s got volume %s, namespace %s's", b, other, a)
	}
	inv.Check(t, 10*time.Second)
}

// applyRecipe reads manifests/examples/ci/<system>.yaml, makes its class
// (renamed for the test, its share a directory of the test's, reached from
// the real node, of the installation as rendered) and its pool, and
// returns the objects of one job, from reference/<system>.yaml.
func (c *installedCycle) applyRecipe(t *testing.T, system string) *recipeRun {
	t.Helper()
	objs := recipeObjects(t, system+".yaml")
	class, ok := objs[0].(*storagev1.StorageClass)
	if !ok || len(objs) != 2 {
		t.Fatalf("%s.yaml starts with a %T and holds %d objects, want a StorageClass and a VolumePool", system, objs[0], len(objs))
	}
	pool, ok := objs[1].(*v1alpha1.VolumePool)
	if !ok {
		t.Fatalf("%s.yaml's second object is a %T, want a VolumePool", system, objs[1])
	}
	if class.Provisioner != "vendor/reclaimable" || class.Annotations[wellknown.ClassControllerID] != "reclaimable" || pool.Spec.StorageClassName != class.Name {
		t.Fatalf("%s.yaml: class %s of %s (controller ID %q), pool of %s: want the default installation's class and its pool",
			system, class.Name, class.Provisioner, class.Annotations[wellknown.ClassControllerID], pool.Spec.StorageClassName)
	}
	share := c.shareDir(t, system)
	class.Name, class.Provisioner = framework.Name(system), c.provisioner
	class.Annotations[wellknown.ClassControllerID] = c.id
	class.Parameters["baseDir"], class.Parameters["hostPath"] = share, share
	class.AllowedTopologies = realNodeTopology()
	framework.CreateClass(t, class)
	pool.Spec.StorageClassName = class.Name
	createPool(t, pool.Spec)
	return &recipeRun{class: class.Name, pool: pool, job: recipeObjects(t, filepath.Join("reference", system+".yaml"))}
}

// recipeObjects decodes the objects of manifests/examples/ci/file.
func recipeObjects(t *testing.T, file string) []runtime.Object {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(manifestsDir(), "examples", "ci", file))
	if err != nil {
		t.Fatal(err)
	}
	return decodeObjects(t, string(b))
}

// kubectl apply -f manifests/examples/ci/<system>.yaml, as docs/ci.md says
// to run it on a cluster with reclaimable installed, applies the system's
// class and its pool and nothing else: the objects the system makes for a
// job (in a namespace the system has, and a pod that would take a member)
// are in reference/, which nobody applies.
func TestCIRecipesApplyTheClassAndThePoolAlone(t *testing.T) {
	t.Parallel()
	for _, r := range ciRecipes {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		stdout, _, err := kubectl(ctx, "apply", "--dry-run=server", "-o", "name", "-f", filepath.Join(manifestsDir(), "examples", "ci", r.system+".yaml"))
		cancel()
		if err != nil {
			t.Errorf("%s: %v", r.system, err)
			continue
		}
		var kinds []string
		for _, line := range strings.Fields(stdout) {
			kind, _, _ := strings.Cut(line, "/")
			kinds = append(kinds, kind)
		}
		if want := []string{"storageclass.storage.k8s.io", "volumepool.reclaimable.github.io"}; !slices.Equal(kinds, want) {
			t.Errorf("kubectl apply -f manifests/examples/ci/%s.yaml applies %v, want the class and the pool alone", r.system, strings.Fields(stdout))
		}
	}
}

// object returns the job's object of type T, its template's class the
// test's.
func object[T runtime.Object](t *testing.T, r *recipeRun) T {
	t.Helper()
	for _, obj := range r.job {
		if o, ok := obj.(T); ok {
			return o.DeepCopyObject().(T)
		}
	}
	var none T
	t.Fatalf("the recipe has no %T", none)
	return none
}

// onTheRealNode makes spec the recipe's pod spec on the test bed: the
// container that mounts the cache volume runs the consumer with args,
// relative paths in the volume; the system's other containers (its agents
// and helpers, which this test bed cannot run) are left out. The
// ephemeral volumes' claims are of the test's class.
func (r *recipeRun) onTheRealNode(t *testing.T, spec *corev1.PodSpec, volume string, args []string) {
	t.Helper()
	var consumer *corev1.Container
	for i := range spec.Containers {
		for _, m := range spec.Containers[i].VolumeMounts {
			if m.Name == volume && consumer == nil {
				consumer = &spec.Containers[i]
				args = append([]string{args[0], filepath.Join(m.MountPath, args[1])}, args[2:]...)
			}
		}
	}
	if consumer == nil {
		t.Fatalf("no container of the recipe mounts volume %s", volume)
	}
	consumer.Image, consumer.ImagePullPolicy, consumer.Command, consumer.Args = cluster.ConsumerImage, corev1.PullNever, nil, args
	spec.Containers = []corev1.Container{*consumer}
	spec.NodeSelector = map[string]string{cluster.RealNodeLabel: "true"}
	spec.Tolerations = []corev1.Toleration{{Key: cluster.RealNodeTaint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](1000), RunAsGroup: ptr.To[int64](3000)}
	for _, v := range spec.Volumes {
		if v.Ephemeral != nil {
			v.Ephemeral.VolumeClaimTemplate.Spec.StorageClassName = &r.class
		}
	}
}

// cacheVolume is the name of the recipe's volume of the test's class in
// spec: an ephemeral one, or one naming a claim.
func cacheVolume(t *testing.T, spec corev1.PodSpec) string {
	t.Helper()
	for _, v := range spec.Volumes {
		if v.Ephemeral != nil || v.PersistentVolumeClaim != nil {
			return v.Name
		}
	}
	t.Fatal("the recipe's pod has no volume of a claim")
	return ""
}

// startPod makes the recipe's pod under name in ns; Kubernetes makes its
// ephemeral volume's claim, <pod>-<volume>, owned by the pod. The job ends
// with the pod's deletion, as the system deletes it.
func (r *recipeRun) startPod(t *testing.T, ns, name string, args []string) (string, func()) {
	t.Helper()
	pod := object[*corev1.Pod](t, r)
	pod.Name, pod.Namespace = name, ns
	volume := cacheVolume(t, pod.Spec)
	r.onTheRealNode(t, &pod.Spec, volume, args)
	runToCompletion(t, ns, pod)
	return name + "-" + volume, func() {
		background := metav1.DeletePropagationBackground
		if err := framework.Client().CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{PropagationPolicy: &background}); err != nil {
			t.Fatal(err)
		}
	}
}

// pipelineRunCRD stands in for Tekton's PipelineRun: the owner of a
// workspace's claim, whose deletion deletes it. The test bed has no Tekton.
const pipelineRunCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: pipelineruns.tekton.dev
spec:
  group: tekton.dev
  scope: Namespaced
  names: {kind: PipelineRun, plural: pipelineruns, singular: pipelinerun}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          x-kubernetes-preserve-unknown-fields: true
`

// startPipelineRun makes what Tekton makes for a PipelineRun of the
// recipe: the run (a stand-in), the workspace's claim from its template,
// named as pvchandler.go names it, and the TaskRun's pod, both owned by the
// run. The job ends with the run's deletion, whose dependents the garbage
// collector deletes.
func (r *recipeRun) startPipelineRun(t *testing.T, ns string, args []string) (string, func()) {
	t.Helper()
	ctx := context.Background()
	crd := filepath.Join(t.TempDir(), "pipelinerun.yaml")
	if err := os.WriteFile(crd, []byte(pipelineRunCRD), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := kubectl(ctx, "apply", "-f", crd); err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(framework.Config())
	if err != nil {
		t.Fatal(err)
	}
	runs := dyn.Resource(schema.GroupVersionResource{Group: "tekton.dev", Version: "v1", Resource: "pipelineruns"})
	name := "build-app-run-" + utilrand.String(5)
	var run *unstructured.Unstructured
	framework.Eventually(t, 30*time.Second, func(ctx context.Context) (bool, error) {
		run, err = runs.Namespace(ns).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "tekton.dev/v1", "kind": "PipelineRun", "metadata": map[string]any{"name": name},
		}}, metav1.CreateOptions{})
		return err == nil, nil
	}, "the PipelineRun stand-in to be served")
	owner := []metav1.OwnerReference{{APIVersion: "tekton.dev/v1", Kind: "PipelineRun", Name: name, UID: run.GetUID(), Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}

	claim := object[*corev1.PersistentVolumeClaim](t, r)
	// GeneratePVCNameFromWorkspaceBinding: the template's name, then the
	// hash of the workspace's name and the owner's UID.
	sum := sha256.Sum256([]byte("cache" + string(run.GetUID())))
	claim.Name, claim.Namespace, claim.OwnerReferences = "cache-"+hex.EncodeToString(sum[:])[:10], ns, owner
	claim.Spec.StorageClassName = &r.class
	if _, err := framework.Client().CoreV1().PersistentVolumeClaims(ns).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := object[*corev1.Pod](t, r)
	pod.Name, pod.Namespace, pod.OwnerReferences = name+"-build-pod", ns, owner
	volume := cacheVolume(t, pod.Spec)
	for _, v := range pod.Spec.Volumes {
		if v.Name == volume {
			v.PersistentVolumeClaim.ClaimName = claim.Name
		}
	}
	r.onTheRealNode(t, &pod.Spec, volume, args)
	runToCompletion(t, ns, pod)
	return claim.Name, func() {
		if err := runs.Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// startBuildkiteJob makes the Job the stack makes for a Buildkite job,
// named for its UUID; the Job controller makes its pod, Kubernetes the
// pod's claim. The job ends as the stack's do: the Job goes once it
// finished, by its ttlSecondsAfterFinished, and its pod and claim with it.
// The test holds the TTL off until it has read the claim, then sets it to
// 0 rather than wait the stack's ten minutes.
func (r *recipeRun) startBuildkiteJob(t *testing.T, ns string, args []string) (string, func()) {
	t.Helper()
	ctx := context.Background()
	job := object[*batchv1.Job](t, r)
	uuid := utilrand.String(8) + "-" + utilrand.String(4) + "-" + utilrand.String(4) + "-" + utilrand.String(4) + "-" + utilrand.String(12)
	job.Name, job.Namespace = "buildkite-"+uuid, ns
	job.Labels["buildkite.com/job-uuid"], job.Spec.Template.Labels["buildkite.com/job-uuid"] = uuid, uuid
	job.Spec.TTLSecondsAfterFinished = nil
	volume := cacheVolume(t, job.Spec.Template.Spec)
	r.onTheRealNode(t, &job.Spec.Template.Spec, volume, args)
	if _, err := framework.Client().BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pod string
	framework.Eventually(t, 2*time.Minute, func(ctx context.Context) (bool, error) {
		pods, err := framework.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + job.Name})
		if err != nil || len(pods.Items) == 0 {
			return false, err
		}
		pod = pods.Items[0].Name
		return true, nil
	}, "the Job's pod")
	waitSucceeded(t, ns, pod)
	return pod + "-" + volume, func() {
		if _, err := framework.Client().BatchV1().Jobs(ns).Patch(ctx, job.Name, types.MergePatchType, []byte(`{"spec":{"ttlSecondsAfterFinished":0}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}
