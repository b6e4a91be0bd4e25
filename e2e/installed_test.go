//go:build e2e

package e2e

// The controllers as an installation runs them: each with the arguments,
// environment, user and groups its Deployment gives it, as kubectl
// kustomize or the chart renders it (not as installed: what a user applies
// is what runs), and its ServiceAccount's token. The test bed overrides
// only what it must: the kubeconfig (the pod's service account), the
// listen addresses (several run side by side) and the share's path (a
// directory of the test's under --directory-root).

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/reclaimable/reclaimable/apis/reclaimable/v1alpha1"
	"github.com/reclaimable/reclaimable/e2e/framework"
	"github.com/reclaimable/reclaimable/e2e/objects"
	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// renamedSettings are those of the renamed installations: every name that
// must agree between the controllers, other than the default's.
const (
	renamedNamespace   = "team-a"
	renamedLifecycle   = "team-a-lifecycle"
	renamedID          = "team-a"
	renamedProvisioner = "example.com/team-a"
)

// An installation renamed as docs/install.md says (its values merged into
// reclaimable-settings: another namespace, controller ID, provisioner name
// and lifecycle namespace) keeps its promises: a volume used in one
// namespace never goes to another's claim, and a pool that says Scrub
// empties a volume before the next claim. Not parallel, and before any test
// installs the default: the renamed and the default installation share
// their cluster-scoped objects' names (applying the default later binds
// them back to its own ServiceAccounts).
func TestInstallRenamedKeepsNamespacesApartAndScrubs(t *testing.T) {
	framework.RealNode(t)
	// With a pull secret for the lifecycle pods, as docs/install.md says.
	overlay := renamedOverlay(t, renamedNamespace, renamedID, renamedProvisioner, renamedLifecycle, fmt.Sprintf(`  - target: {kind: PodTemplate, name: reclaimable-lifecycle}
    patch: '[{"op": "add", "path": "/template/spec/imagePullSecrets", "value": [{"name": %q}]}]'
`, lifecyclePullSecret))
	applyRenamed(t, overlay, renamedNamespace, renamedLifecycle)

	c := startInstalled(t, kustomized(t, overlay))
	c.wantSettings(t, renamedNamespace, renamedID, renamedProvisioner, renamedLifecycle)
	c.keepsNamespacesApartAndScrubs(t)
}

// renamedOverlay writes an overlay of manifests/ renamed as docs/install.md
// says (its values merged into reclaimable-settings: namespace, controller
// ID, provisioner name and lifecycle namespace), with patches (entries of
// kustomize's patches, "" for none), and returns its directory.
func renamedOverlay(t *testing.T, namespace, id, provisioner, lifecycle, patches string) string {
	t.Helper()
	overlay := t.TempDir()
	rel, err := filepath.Rel(overlay, manifestsDir())
	if err != nil {
		t.Fatal(err)
	}
	if patches != "" {
		patches = "patches:\n" + patches
	}
	kustomization := fmt.Sprintf(`resources: [%[1]s]
configMapGenerator:
  - name: reclaimable-settings
    behavior: merge
    literals: [namespace=%[2]s, controller-id=%[3]s, provisioner-name=%[4]s, lifecycle-namespace=%[5]s]
%[6]scomponents: [%[1]s/components/settings]
`, filepath.ToSlash(rel), namespace, id, provisioner, lifecycle, patches)
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kustomization), 0o644); err != nil {
		t.Fatal(err)
	}
	return overlay
}

// applyRenamed applies the renamed overlay whose namespaces are namespace
// and lifecycle. At cleanup its namespaces and its share's volume go; the
// cluster-scoped objects it shares with the default installation stay for
// the default's apply, the VolumePool CRD (and every test's pools) with
// them.
func applyRenamed(t *testing.T, overlay, namespace, lifecycle string) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if _, _, err := kubectl(ctx, "delete", "--wait", "--ignore-not-found", "namespace/"+namespace, "namespace/"+lifecycle, "persistentvolume/reclaimable-share"); err != nil {
			t.Errorf("removing the renamed installation: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, _, err := kubectl(ctx, "apply", "-k", overlay); err != nil {
		t.Fatal(err)
	}
}

// Each controller runs with nothing but its ServiceAccount's token, as
// kustomize renders manifests/, through a whole cycle: an annotated pod
// gets its claim, the claim a volume the provisioner grew, the pod goes,
// the claim goes, the volume is Released and then Available again. No
// controller is refused anything. Not parallel: its podwatcher, as
// installed, watches every namespace.
func TestInstallFullCycleWithServiceAccountCredentials(t *testing.T) {
	install(t)
	c := startInstalled(t, kustomized(t, manifestsDir()))
	c.cycle(t, "build")
	c.inv.Check(t, 10*time.Second)
}

// rendered is an installation as kubectl kustomize or the chart renders
// it: what an apply or an install of the same input creates.
type rendered []runtime.Object

// kustomized renders the kustomization in dir with the cluster's kubectl.
func kustomized(t *testing.T, dir string) rendered { return renderedObjects(t, dir) }

// charted renders the chart with values, as helm template does.
func charted(t *testing.T, values map[string]any) rendered {
	return decodeObjects(t, chart(t, "template", values))
}

// controller is the controller name (podwatcher, provisioner, releaser)
// as its rendered Deployment runs it.
func (r rendered) controller(t *testing.T, name string) deployed {
	t.Helper()
	for _, obj := range r {
		d, ok := obj.(*appsv1.Deployment)
		if !ok || d.Name != "reclaimable-"+name {
			continue
		}
		spec := d.Spec.Template.Spec
		if len(spec.Containers) != 1 {
			t.Fatalf("Deployment %s has %d containers, want 1", d.Name, len(spec.Containers))
		}
		c := spec.Containers[0]
		args, env := containerCommand(t, c, d.Namespace)
		psc := spec.SecurityContext
		if psc == nil || psc.RunAsUser == nil || psc.RunAsGroup == nil {
			t.Fatalf("Deployment %s gives its pods no user and group: %+v", d.Name, psc)
		}
		groups := []uint32{uint32(*psc.RunAsGroup)}
		if psc.FSGroup != nil {
			groups = append(groups, uint32(*psc.FSGroup))
		}
		return deployed{namespace: d.Namespace, serviceAccount: spec.ServiceAccountName, container: framework.Container{
			Args: args, Env: env, UID: uint32(*psc.RunAsUser), GID: uint32(*psc.RunAsGroup), Groups: groups,
		}}
	}
	t.Fatalf("no Deployment reclaimable-%s rendered", name)
	return deployed{}
}

// deployed is a controller as its Deployment runs it.
type deployed struct {
	namespace, serviceAccount string
	container                 framework.Container
}

// memoryLimit is what the downward API gives for ref (limits.memory): the
// container's limit in units of the divisor, rounded up, as the kubelet
// writes it. Without a limit the kubelet would give the node's allocatable
// memory, which the test bed does not know: the manifests always set one.
func memoryLimit(t *testing.T, c corev1.Container, ref *corev1.ResourceFieldSelector) string {
	t.Helper()
	limit, ok := c.Resources.Limits[corev1.ResourceMemory]
	if !ok {
		t.Fatalf("container %s: %s asks for a memory limit the container does not set", c.Name, ref.Resource)
	}
	divisor := int64(1)
	if !ref.Divisor.IsZero() {
		divisor = ref.Divisor.Value()
	}
	return strconv.FormatInt((limit.Value()+divisor-1)/divisor, 10)
}

// containerCommand returns c's arguments and environment as the kubelet
// gives them to its process in a pod of namespace ns: each $(VAR) of the
// arguments expanded from the environment, $$ as $.
func containerCommand(t *testing.T, c corev1.Container, ns string) (args, env []string) {
	t.Helper()
	values := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			values[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
			values[e.Name] = ns
		case e.ValueFrom.ResourceFieldRef != nil && e.ValueFrom.ResourceFieldRef.Resource == "limits.memory":
			values[e.Name] = memoryLimit(t, c, e.ValueFrom.ResourceFieldRef)
		default:
			t.Fatalf("container %s: the environment variable %s comes from %+v, which the test bed does not resolve", c.Name, e.Name, e.ValueFrom)
		}
		env = append(env, e.Name+"="+values[e.Name])
	}
	if len(c.EnvFrom) > 0 {
		t.Fatalf("container %s takes its environment from %+v, which the test bed does not resolve", c.Name, c.EnvFrom)
	}
	for _, a := range c.Args {
		args = append(args, expand(a, values))
	}
	return args, env
}

// containerArgs is containerCommand's arguments.
func containerArgs(t *testing.T, c corev1.Container, ns string) []string {
	t.Helper()
	args, _ := containerCommand(t, c, ns)
	return args
}

// expand expands s as the kubelet expands a container's arguments: $(VAR)
// becomes VAR's value when env has it and stays as written otherwise; $$
// becomes $.
func expand(s string, env map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteByte(s[i])
				continue
			}
			name := s[i+2 : i+2+end]
			if v, ok := env[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

// flagValue is the value of --name=value in args; "" if absent.
func flagValue(args []string, name string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

// installedCycle is the cycle through the controllers of an installation,
// each run as its rendered Deployment runs it, in namespaces of the test's
// own, on directory classes whose share is a directory of the test's.
type installedCycle struct {
	// ns is where the pods and claims are.
	ns string
	// What the rendered Deployments say: the installation's namespace,
	// controller ID, provisioner name and lifecycle namespace.
	installNS, id, provisioner, lifecycleNS string
	// lifecycleTemplate is the provisioner's --lifecycle-pod-template.
	lifecycleTemplate string
	// root is the share (--directory-root); class a directory class of
	// fake nodes' volumes, in volumes, a directory of the share.
	root, class, volumes string
	inv                  *framework.Invariants
	procs                []*framework.Process
}

// stop stops the controllers, as deleting their Deployments would.
func (c *installedCycle) stop() {
	for _, p := range c.procs {
		p.Stop()
	}
}

// startInstalled starts the controllers of the rendered installation r,
// each as its Deployment runs it (see the top of this file), and waits
// until each leads. At cleanup each is stopped and must have been refused
// nothing.
func startInstalled(t *testing.T, r rendered) *installedCycle {
	t.Helper()
	c := newInstalledCycle(t, r)
	c.start(t, r, "")
	c.inv = framework.WatchInvariants(t, framework.Scope{ControllerID: c.id, Classes: []string{c.class}, Namespaces: []string{c.ns}})
	return c
}

// newInstalledCycle is the cycle of the rendered installation r, its
// controllers not started yet (start).
func newInstalledCycle(t *testing.T, r rendered) *installedCycle {
	t.Helper()
	c := &installedCycle{ns: framework.Namespace(t)}
	prov := r.controller(t, "provisioner")
	c.installNS, c.id = prov.namespace, flagValue(prov.container.Args, "--controller-id")
	c.provisioner, c.lifecycleNS = flagValue(prov.container.Args, "--provisioner-name"), flagValue(prov.container.Args, "--lifecycle-namespace")
	c.lifecycleTemplate = flagValue(prov.container.Args, "--lifecycle-pod-template")

	// The share, as the provisioner's pod would see it under --directory-root.
	c.volumes = framework.ControllerDir(t, "volumes")
	c.root = filepath.Dir(c.volumes)
	c.class = c.newClass(t, "install", c.volumes, false)
	return c
}

// start starts the controllers of the rendered installation r, each as its
// Deployment runs it, binary ("" the work tree's) in its container, and
// waits until each leads.
func (c *installedCycle) start(t *testing.T, r rendered, binary string) {
	t.Helper()
	client := framework.Client()
	controllers := map[string]deployed{}
	for _, name := range installedControllers {
		controllers[name] = r.controller(t, name)
	}
	procs := map[string]*framework.Process{}
	for _, name := range installedControllers {
		d := controllers[name]
		container := d.container
		container.Binary = binary
		container.Args = slices.Clone(container.Args)
		for i, a := range container.Args {
			if strings.HasPrefix(a, "--directory-root=") {
				container.Args[i] = "--directory-root=" + c.root
			}
		}
		p := framework.StartDeployed(t, container, kubeconfigIn(t, d.namespace, d.serviceAccount))
		procs[name] = p
		c.procs = append(c.procs, p)
		// Whether the cycle got through or not; stopping first covers the
		// Lease given up on shutdown.
		t.Cleanup(func() {
			p.Stop()
			noForbidden(t, name, p)
		})
	}
	for _, name := range installedControllers {
		procs[name].WaitReady(t)
		// The container's limit, through the downward API, is the Go
		// runtime's soft limit less a tenth.
		for _, e := range controllers[name].container.Env {
			if v, ok := strings.CutPrefix(e, "MEMORY_LIMIT="); ok {
				limit, err := strconv.ParseFloat(v, 64)
				if err != nil {
					t.Fatalf("%s: MEMORY_LIMIT=%q", name, v)
				}
				if got := procs[name].Metric("go_gc_gomemlimit_bytes", nil); math.Abs(got-limit*0.9) > 1 {
					t.Errorf("%s: the Go runtime's memory limit is %.0f bytes, want 90%% of the container's %s", name, got, v)
				}
			}
		}
		lease := c.id + "-" + name
		framework.Eventually(t, 30*time.Second, func(ctx context.Context) (bool, error) {
			l, err := client.CoordinationV1().Leases(c.installNS).Get(ctx, lease, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			return err == nil && deref(l.Spec.HolderIdentity, "") != "", err
		}, "Lease "+c.installNS+"/"+lease+" to have a holder")
	}
}

// wantSettings fails the test unless the rendered controllers say these
// settings.
func (c *installedCycle) wantSettings(t *testing.T, installNS, id, provisioner, lifecycleNS string) {
	t.Helper()
	got := []string{c.installNS, c.id, c.provisioner, c.lifecycleNS}
	if want := []string{installNS, id, provisioner, lifecycleNS}; !slices.Equal(got, want) {
		t.Fatalf("the rendered installation says namespace, controller ID, provisioner name and lifecycle namespace %q, want %q", got, want)
	}
}

// shareDir makes the directory name of the share, the controllers'.
func (c *installedCycle) shareDir(t *testing.T, name string) string {
	t.Helper()
	dir := filepath.Join(c.root, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	framework.ForControllers(t, dir)
	return dir
}

// newClass creates a directory class of the installation (its provisioner
// name and controller ID, as rendered) whose volumes are directories of
// base, on the fake nodes or, with realNode, on the real node, where its
// scrub pods run.
func (c *installedCycle) newClass(t *testing.T, prefix, base string, realNode bool) string {
	t.Helper()
	return framework.CreateClass(t, objects.NewClass(framework.Name(prefix), c.provisioner, func(sc *storagev1.StorageClass) {
		retain := corev1.PersistentVolumeReclaimRetain
		binding := storagev1.VolumeBindingWaitForFirstConsumer
		sc.Annotations = map[string]string{wellknown.ClassControllerID: c.id}
		sc.Parameters = map[string]string{"backend": "directory", "baseDir": base, "source": "hostPath", "hostPath": base, "maxVolumes": "5"}
		if realNode {
			// The share is a directory of this machine, which the real
			// node is: the volumes, and so their scrub pods, go there.
			binding = storagev1.VolumeBindingImmediate
			sc.AllowedTopologies = realNodeTopology()
		}
		sc.ReclaimPolicy, sc.VolumeBindingMode = &retain, &binding
	}))
}

// keepsNamespacesApartAndScrubs runs pods of two namespaces on the real
// node through two pools of the installation, both of reuseScope
// namespace: one that keeps data (onRelease Keep) and one that says Scrub.
// The first never gives namespace a's volume to namespace b; the second
// empties a's volume before b's claim gets it.
func (c *installedCycle) keepsNamespacesApartAndScrubs(t *testing.T) {
	t.Helper()
	a, b := c.ns, framework.Namespace(t)
	kept := c.newClass(t, "kept", c.shareDir(t, "kept"), true)
	scrubbed := c.newClass(t, "scrubbed", c.shareDir(t, "scrubbed"), true)
	createPool(t, v1alpha1.VolumePoolSpec{StorageClassName: kept, MaxVolumes: ptr.To[int32](2)})
	createPool(t, v1alpha1.VolumePoolSpec{StorageClassName: scrubbed, OnRelease: wellknown.OnReleaseScrub, MaxVolumes: ptr.To[int32](1)})
	inv := framework.WatchInvariants(t, framework.Scope{ControllerID: c.id, Classes: []string{kept, scrubbed}, Namespaces: []string{a, b},
		NamespaceScoped: []string{kept, scrubbed}, Scrubbed: []string{scrubbed}})

	// Kept: a's volume comes back held for a, with a's data; b's claim
	// gets another.
	// A claim name of each pool's own: a released volume stays reserved
	// for its claim's name (reserveFor), whatever the class.
	claim := "kept-cache"
	runToCompletion(t, a, nodePod("a-kept", claim, kept, 1000, "write", "/cache/mine", "a's data\n"))
	first := boundVolume(t, a, claim)
	inv.Marker(first.Name, filepath.Join(first.Spec.HostPath.Path, "mine"))
	deletePod(t, a, "a-kept", claim)
	framework.Eventually(t, time.Minute, func(ctx context.Context) (bool, error) {
		pv, err := framework.Client().CoreV1().PersistentVolumes().Get(ctx, first.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		held, ok := pools.HeldFor(pv)
		return pv.Status.Phase == corev1.VolumeAvailable && ok && held == a, nil
	}, "namespace "+a+"'s volume "+first.Name+" to be back in the pool, held for "+a)
	// The consumer's write fails if the file is there: b never sees a's.
	runToCompletion(t, b, nodePod("b-kept", claim, kept, 1000, "write", "/cache/mine", "b's data\n"))
	if got := boundVolume(t, b, claim); got.Name == first.Name {
		t.Fatalf("namespace %s's claim got volume %s, namespace %s's, with its data", b, got.Name, a)
	}
	deletePod(t, b, "b-kept", claim)
	if data, err := os.ReadFile(filepath.Join(first.Spec.HostPath.Path, "mine")); err != nil || string(data) != "a's data\n" {
		t.Errorf("namespace %s's volume holds %q (%v), want its data", a, data, err)
	}

	// Scrubbed: the pool holds one volume, so b's claim gets a's, emptied
	// first by a scrub pod of the lifecycle namespace, which runs what the
	// installation's PodTemplate says.
	claim = "scrubbed-cache"
	runToCompletion(t, a, nodePod("a-scrubbed", claim, scrubbed, 1000, "write", "/cache/mine", "a's data\n"))
	volume := boundVolume(t, a, claim)
	scrubPod := c.watchLifecyclePod(t, "scrub-"+volume.Name)
	deletePod(t, a, "a-scrubbed", claim)
	framework.WaitEvent(t, 2*time.Minute, framework.EventQuery{Namespace: metav1.NamespaceDefault, Kind: "PersistentVolume", Name: volume.Name, Reason: "Scrubbed"})
	c.wantRunAsTheTemplateSays(t, scrubPod)
	runToCompletion(t, b, nodePod("b-scrubbed", claim, scrubbed, 1000, "write", "/cache/mine", "b's data\n"))
	if got := boundVolume(t, b, claim); got.Name != volume.Name {
		t.Errorf("namespace %s's claim got volume %s, want %s, the pool's one, scrubbed", b, got.Name, volume.Name)
	}
	deletePod(t, b, "b-scrubbed", claim)
	inv.Check(t, 10*time.Second)
}

// lifecyclePullSecret is the pull secret the installed lifecycle pods are
// given, a Secret of their namespace.
const lifecyclePullSecret = "regcred"

// watchLifecyclePod makes the pull secret of the lifecycle namespace and
// returns the first version of the lifecycle pod name seen from now on.
func (c *installedCycle) watchLifecyclePod(t *testing.T, name string) <-chan *corev1.Pod {
	t.Helper()
	ctx := t.Context()
	client := framework.Client()
	_, err := client.CoreV1().Secrets(c.lifecycleNS).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: lifecyclePullSecret},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{}}`)},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	w, err := client.CoreV1().Pods(c.lifecycleNS).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan *corev1.Pod, 1)
	go func() {
		defer w.Stop()
		for e := range w.ResultChan() {
			if p, ok := e.Object.(*corev1.Pod); ok {
				seen <- p
				return
			}
		}
	}()
	return seen
}

// wantRunAsTheTemplateSays fails the test unless the lifecycle pod seen
// ran the image, pull policy and pull secrets of the installation's
// PodTemplate, which names a pull secret.
func (c *installedCycle) wantRunAsTheTemplateSays(t *testing.T, seen <-chan *corev1.Pod) {
	t.Helper()
	tmpl, err := framework.Client().CoreV1().PodTemplates(c.lifecycleNS).Get(t.Context(), c.lifecycleTemplate, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the installation's lifecycle PodTemplate: %v", err)
	}
	want := tmpl.Template.Spec
	if !slices.Contains(want.ImagePullSecrets, corev1.LocalObjectReference{Name: lifecyclePullSecret}) {
		t.Fatalf("PodTemplate %s/%s names pull secrets %v, want %s among them", c.lifecycleNS, tmpl.Name, want.ImagePullSecrets, lifecyclePullSecret)
	}
	var p *corev1.Pod
	select {
	case p = <-seen:
	case <-time.After(10 * time.Second):
		t.Fatal("no lifecycle pod seen, though its work is done")
	}
	got, wantC := p.Spec.Containers[0], want.Containers[0]
	if got.Image != wantC.Image || got.ImagePullPolicy != wantC.ImagePullPolicy || !slices.Equal(p.Spec.ImagePullSecrets, want.ImagePullSecrets) {
		t.Errorf("lifecycle pod %s ran %s, pull policy %s, pull secrets %v; want the PodTemplate's %s, %s, %v",
			p.Name, got.Image, got.ImagePullPolicy, p.Spec.ImagePullSecrets, wantC.Image, wantC.ImagePullPolicy, want.ImagePullSecrets)
	}
}

// cycleClaim is the claim every pod of the cycle asks for: the same
// workload's.
const cycleClaim = "cache"

func (c *installedCycle) cycle(t *testing.T, pod string) *corev1.PersistentVolume {
	t.Helper()
	ctx := context.Background()
	client := framework.Client()
	const volume = "cache"
	template := fmt.Sprintf(`apiVersion: v1
kind: PersistentVolumeClaim
spec:
  storageClassName: %s
  accessModes: [ReadWriteOnce]
  resources:
    requests:
      storage: 1Gi
`, c.class)
	created, err := client.CoreV1().Pods(c.ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: pod, Annotations: map[string]string{
			wellknown.EnabledKey(volume): "true", wellknown.TemplateKey(volume): template,
		}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "build", Image: "busybox", VolumeMounts: []corev1.VolumeMount{{Name: volume, MountPath: "/cache"}}}},
			Volumes: []corev1.Volume{{Name: volume, VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: cycleClaim},
			}}},
			// Released by the podwatcher under the installation's pod policy.
			SchedulingGates: []corev1.PodSchedulingGate{{Name: wellknown.ClaimsGate}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	var claim *corev1.PersistentVolumeClaim
	framework.Eventually(t, 60*time.Second, func(ctx context.Context) (bool, error) {
		claim, err = client.CoreV1().PersistentVolumeClaims(c.ns).Get(ctx, cycleClaim, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil && claim.Status.Phase == corev1.ClaimBound && claim.DeletionTimestamp == nil, err
	}, "the podwatcher's claim to be bound")
	if got := claim.Labels[wellknown.ClaimManagedBy]; got != c.id {
		t.Fatalf("claim label %s = %q, want %s", wellknown.ClaimManagedBy, got, c.id)
	}
	framework.Eventually(t, 60*time.Second, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods(c.ns).Get(ctx, created.Name, metav1.GetOptions{})
		return err == nil && len(p.Spec.SchedulingGates) == 0 && p.Spec.NodeName != "", err
	}, "the podwatcher to remove the pod's gate and the pod to be scheduled")
	pv, err := client.CoreV1().PersistentVolumes().Get(ctx, claim.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.CoreV1().PersistentVolumes().Delete(context.Background(), pv.Name, metav1.DeleteOptions{})
	})
	if got := pv.Annotations[wellknown.ProvisionedBy]; got != c.provisioner {
		t.Fatalf("volume %s provisioned by %q, want %s", pv.Name, got, c.provisioner)
	}
	if pv.Spec.HostPath == nil {
		t.Fatalf("volume %s is not a host path: %+v", pv.Name, pv.Spec.PersistentVolumeSource)
	}
	if dir := pv.Spec.HostPath.Path; !strings.HasPrefix(dir, c.volumes+string(filepath.Separator)) {
		t.Fatalf("volume %s is at %s, outside the class's baseDir %s", pv.Name, dir, c.volumes)
	} else if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		t.Fatalf("the provisioner did not make the volume's directory %s: %v", dir, err)
	}
	// What the pod would have written: it must survive the cycle.
	marker := filepath.Join(pv.Spec.HostPath.Path, "cache-entry")
	if _, err := os.Stat(marker); errors.Is(err, os.ErrNotExist) {
		if err := os.WriteFile(marker, []byte("kept"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c.inv.Marker(pv.Name, marker)

	// Released may last only milliseconds: watch the volume's phases.
	versions := framework.FollowVolume(t, pv.Name, pv.ResourceVersion)
	if err := client.CoreV1().Pods(c.ns).Delete(ctx, created.Name, metav1.DeleteOptions{GracePeriodSeconds: newInt64(0)}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 60*time.Second, func(ctx context.Context) (bool, error) {
		got, err := client.CoreV1().PersistentVolumeClaims(c.ns).Get(ctx, cycleClaim, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return err == nil && got.UID != claim.UID, err
	}, "the claim to be deleted once its pod is gone")

	// The class has the default reuseScope, namespace: back in the pool,
	// the volume names its last claim without UID and is held for ns.
	phases := framework.VolumePhases(t, versions, 60*time.Second, func(cur *corev1.PersistentVolume) bool {
		held, ok := pools.HeldFor(cur)
		return cur.Status.Phase == corev1.VolumeAvailable && ok && held == c.ns && cur.Spec.ClaimRef.Name == cycleClaim
	})
	t.Logf("volume %s (%s): %v", pv.Name, pv.Spec.HostPath.Path, phases)
	if !slices.Contains(phases, corev1.VolumeReleased) {
		t.Errorf("volume %s became Available without being Released first: %v", pv.Name, phases)
	}

	// Each controller recorded its events with its own credentials.
	waitEvent(t, c.ns, "Pod", created.Name, "ClaimCreated")
	waitEvent(t, c.ns, "PersistentVolumeClaim", cycleClaim, "ProvisioningSucceeded")
	// Released and reserved for its claim's name: the default reserveFor.
	waitEvent(t, metav1.NamespaceDefault, "PersistentVolume", pv.Name, "Reserved")
	return pv
}

// waitEvent waits for an event with reason about the object kind/name, whose
// events live in namespace ns (a cluster-scoped object's in "default").
func waitEvent(t *testing.T, ns, kind, name, reason string) {
	t.Helper()
	framework.WaitEvent(t, 30*time.Second, framework.EventQuery{Namespace: ns, Kind: kind, Name: name, Reason: reason})
}
