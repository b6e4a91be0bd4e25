//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/utils/ptr"

	"github.com/reclaimable/reclaimable/e2e/framework"
	"github.com/reclaimable/reclaimable/e2e/objects"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// The provisioner's tests run it with the directory backend on a temporary
// directory and simulate each consumer by writing into the volume's backing
// directory: there is no kubelet to mount anything.

const provisionerWait = 30 * time.Second

type provisionerEnv struct {
	t    *testing.T
	ns   string
	id   string // --controller-id
	name string // --provisioner-name
	root string // --directory-root
	base string // baseDir of the directory classes
	proc *framework.Process
	inv  *framework.Invariants
}

// startProvisioner runs a provisioner of its own for one test.
func startProvisioner(t *testing.T, args ...string) *provisionerEnv {
	t.Helper()
	e := &provisionerEnv{
		t:    t,
		ns:   framework.Namespace(t),
		id:   framework.Name("prov"),
		name: "e2e.reclaimable.test/" + framework.Name("p"),
	}
	e.base = framework.ControllerDir(t, "pool")
	e.root = filepath.Dir(e.base)
	e.proc = framework.StartController(t, append([]string{"provisioner",
		"--provisioner-name=" + e.name,
		"--controller-id=" + e.id,
		"--directory-root=" + e.root,
	}, args...)...)
	e.proc.WaitReady(t)
	return e
}

// watch starts checking the product's invariants on the volumes of classes
// and the claims of the test's namespace.
func (e *provisionerEnv) watch(classes ...string) {
	e.t.Helper()
	e.inv = framework.WatchInvariants(e.t, framework.Scope{ControllerID: e.id, Classes: classes, Namespaces: []string{e.ns}})
}

// check returns every volume left Released to the pool, as the releaser
// would (none runs here), and checks the invariants.
func (e *provisionerEnv) check(classes ...string) {
	e.t.Helper()
	for _, class := range classes {
		for _, pv := range e.volumesOf(class) {
			if pv.Status.Phase == corev1.VolumeReleased && pv.Spec.PersistentVolumeReclaimPolicy == corev1.PersistentVolumeReclaimRetain {
				e.releaseByHand(pv.Name)
				e.volumePhase(pv.Name, corev1.VolumeAvailable)
			}
		}
	}
	e.inv.Check(e.t, provisionerWait)
}

// class creates a StorageClass of this provisioner (Retain, Immediate,
// directory backend on hostPath unless mods say otherwise) and removes it and
// its volumes at cleanup.
func (e *provisionerEnv) class(params map[string]string, mods ...func(*storagev1.StorageClass)) string {
	e.t.Helper()
	all := map[string]string{"backend": "directory", "baseDir": e.base, "source": "hostPath", "hostPath": "/mnt/reclaimable"}
	for k, v := range params {
		if v == "" {
			delete(all, k)
		} else {
			all[k] = v
		}
	}
	setParams := func(sc *storagev1.StorageClass) { sc.Parameters = all }
	return framework.CreateClass(e.t, objects.NewClass(framework.Name("prov"), e.name, append([]func(*storagev1.StorageClass){setParams}, mods...)...))
}

func (e *provisionerEnv) claim(name, class, size string, mods ...func(*corev1.PersistentVolumeClaim)) *corev1.PersistentVolumeClaim {
	e.t.Helper()
	return framework.CreateClaim(e.t, objects.NewClaim(e.ns, name, class, size, mods...))
}

func (e *provisionerEnv) deleteClaim(name string) {
	e.t.Helper()
	if err := framework.Client().CoreV1().PersistentVolumeClaims(e.ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// bound waits for claim to be Bound and returns its volume, checking that
// the volume points back at this very claim.
func (e *provisionerEnv) bound(claim *corev1.PersistentVolumeClaim) *corev1.PersistentVolume {
	e.t.Helper()
	return e.boundWithin(claim, provisionerWait)
}

func (e *provisionerEnv) boundWithin(claim *corev1.PersistentVolumeClaim, timeout time.Duration) *corev1.PersistentVolume {
	e.t.Helper()
	client := framework.Client()
	var pv *corev1.PersistentVolume
	framework.Eventually(e.t, timeout, func(ctx context.Context) (bool, error) {
		c, err := client.CoreV1().PersistentVolumeClaims(e.ns).Get(ctx, claim.Name, metav1.GetOptions{})
		if err != nil || c.Status.Phase != corev1.ClaimBound {
			return false, err
		}
		pv, err = client.CoreV1().PersistentVolumes().Get(ctx, c.Spec.VolumeName, metav1.GetOptions{})
		return err == nil, err
	}, "claim "+claim.Name+" to be Bound")
	if ref := pv.Spec.ClaimRef; ref == nil || ref.UID != claim.UID {
		e.t.Fatalf("claim %s is bound to %s, which points at %v", claim.Name, pv.Name, pv.Spec.ClaimRef)
	}
	return pv
}

func (e *provisionerEnv) volumePhase(name string, want corev1.PersistentVolumePhase) {
	e.t.Helper()
	framework.Eventually(e.t, provisionerWait, func(ctx context.Context) (bool, error) {
		pv, err := framework.Client().CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
		return err == nil && pv.Status.Phase == want, err
	}, fmt.Sprintf("volume %s to be %s", name, want))
}

// releaseByHand does what the releaser does: clear the claimRef of a
// Released volume and record its last claim.
func (e *provisionerEnv) releaseByHand(name string) {
	e.t.Helper()
	ctx := context.Background()
	client := framework.Client()
	pv, err := client.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	metav1.SetMetaDataAnnotation(&pv.ObjectMeta, wellknown.LastClaim, pv.Spec.ClaimRef.Namespace+"/"+pv.Spec.ClaimRef.Name)
	metav1.SetMetaDataAnnotation(&pv.ObjectMeta, wellknown.ReleasedAt, time.Now().UTC().Format(time.RFC3339))
	pv.Spec.ClaimRef = nil
	if _, err := client.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// dir is the backing directory of a volume the provisioner created.
func (e *provisionerEnv) dir(pv *corev1.PersistentVolume) string {
	return filepath.Join(e.base, pv.Name)
}

// write simulates the consumer, and has the invariant checker make sure
// the file outlives the claim if the volume is Retain.
func (e *provisionerEnv) write(pv *corev1.PersistentVolume, file, content string) {
	e.t.Helper()
	path := filepath.Join(e.dir(pv), file)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		e.t.Fatalf("writing into volume %s: %v", pv.Name, err)
	}
	if e.inv != nil {
		e.inv.Marker(pv.Name, path)
	}
}

func (e *provisionerEnv) read(pv *corev1.PersistentVolume, file string) string {
	e.t.Helper()
	b, err := os.ReadFile(filepath.Join(e.dir(pv), file))
	if err != nil {
		e.t.Fatalf("reading from volume %s: %v", pv.Name, err)
	}
	return string(b)
}

// event waits for an event with reason on the claim and returns its message.
func (e *provisionerEnv) event(claim, reason string) string {
	e.t.Helper()
	var msg string
	framework.Eventually(e.t, provisionerWait, func(ctx context.Context) (bool, error) {
		events, err := framework.Client().CoreV1().Events(e.ns).List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.name=" + claim + ",reason=" + reason,
		})
		if err != nil || len(events.Items) == 0 {
			return false, err
		}
		msg = events.Items[0].Message
		return true, nil
	}, fmt.Sprintf("a %s event on claim %s", reason, claim))
	return msg
}

func (e *provisionerEnv) volumesOf(class string) []corev1.PersistentVolume {
	e.t.Helper()
	pvs, err := framework.Client().CoreV1().PersistentVolumes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []corev1.PersistentVolume
	for _, pv := range pvs.Items {
		if pv.Spec.StorageClassName == class {
			out = append(out, pv)
		}
	}
	return out
}

// A claim gets a new volume and directory; once it is gone, claims of other
// names get the same volume with its data, whether the volume was returned
// to the pool (as the releaser does) or is still Released.
func TestProvisionerReusesRetainedVolume(t *testing.T) {
	t.Parallel()
	e := startProvisioner(t)
	class := e.class(nil)
	e.watch(class)

	first := e.claim("first", class, "1Gi")
	pv := e.bound(first)
	if pv.Name != "pvc-"+string(first.UID) || pv.Annotations[wellknown.ProvisionedBy] != e.name || pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimRetain {
		t.Fatalf("new volume: name %s, annotations %v, policy %s", pv.Name, pv.Annotations, pv.Spec.PersistentVolumeReclaimPolicy)
	}
	if pv.Spec.HostPath == nil || pv.Spec.HostPath.Path != "/mnt/reclaimable/"+pv.Name {
		t.Errorf("hostPath = %+v", pv.Spec.HostPath)
	}
	e.write(pv, "cache", "warm")

	// Returned to the pool by hand, as the releaser would.
	e.deleteClaim("first")
	e.volumePhase(pv.Name, corev1.VolumeReleased)
	e.releaseByHand(pv.Name)
	second := e.claim("second", class, "1Gi")
	if got := e.bound(second); got.Name != pv.Name {
		t.Fatalf("second claim got %s, want the pool volume %s", got.Name, pv.Name)
	}
	if got := e.read(pv, "cache"); got != "warm" {
		t.Errorf("data = %q, want it kept", got)
	}

	// Not returned at all: the provisioner takes it while it is Released.
	e.write(pv, "cache", "warmer")
	e.deleteClaim("second")
	e.volumePhase(pv.Name, corev1.VolumeReleased)
	third := e.claim("third", class, "1Gi")
	got := e.bound(third)
	if got.Name != pv.Name {
		t.Fatalf("third claim got %s, want the Released pool volume %s", got.Name, pv.Name)
	}
	if got.Annotations[wellknown.LastClaim] != e.ns+"/third" {
		t.Errorf("last claim = %q", got.Annotations[wellknown.LastClaim])
	}
	if data := e.read(pv, "cache"); data != "warmer" {
		t.Errorf("data = %q, want it kept", data)
	}
	if n := len(e.volumesOf(class)); n != 1 {
		t.Errorf("%d volumes in the class, want the one reused", n)
	}
	e.check(class)
}

// A claim recreated with the namespace and name of an earlier one gets the
// volume that one used, although others are free and smaller.
func TestProvisionerPrefersTheVolumeAClaimUsedBefore(t *testing.T) {
	t.Parallel()
	e := startProvisioner(t)
	class := e.class(nil)
	e.watch(class)

	sizes := map[string]string{"a": "1Gi", "b": "2Gi", "c": "1Gi"}
	used := map[string]*corev1.PersistentVolume{}
	for _, name := range []string{"a", "b", "c"} {
		used[name] = e.bound(e.claim(name, class, sizes[name]))
		e.write(used[name], "owner", name)
	}
	// b goes first, so it is also the least recently released.
	for _, name := range []string{"b", "a", "c"} {
		e.deleteClaim(name)
		e.volumePhase(used[name].Name, corev1.VolumeReleased)
	}

	again := e.claim("b", class, "1Gi")
	got := e.bound(again)
	if got.Name != used["b"].Name {
		t.Fatalf("recreated claim b got %s (used by %s), want %s", got.Name, e.read(got, "owner"), used["b"].Name)
	}
	if owner := e.read(got, "owner"); owner != "b" {
		t.Errorf("data of %q, want b's", owner)
	}
	e.check(class)
}

// 20 claims race for 5 free pool volumes: each volume goes to one claim, and
// 15 new ones are created.
func TestProvisionerRacingClaimsNeverShareAVolume(t *testing.T) {
	t.Parallel()
	e := startProvisioner(t, "--provisioner-workers=8")
	class := e.class(nil)
	e.watch(class)

	pool := map[string]bool{}
	var seeds []*corev1.PersistentVolumeClaim
	for i := range 5 {
		seeds = append(seeds, e.claim(fmt.Sprintf("seed-%d", i), class, "1Gi"))
	}
	for _, c := range seeds {
		pool[e.bound(c).Name] = true
	}
	for _, c := range seeds {
		e.deleteClaim(c.Name)
	}
	for name := range pool {
		e.volumePhase(name, corev1.VolumeReleased)
	}

	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		claims []*corev1.PersistentVolumeClaim
	)
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := e.claim(fmt.Sprintf("racer-%d", i), class, "1Gi")
			mu.Lock()
			claims = append(claims, c)
			mu.Unlock()
		}()
	}
	wg.Wait()

	owner := map[string]string{}
	reused, created := 0, 0
	for _, c := range claims {
		pv := e.bound(c)
		if prev, ok := owner[pv.Name]; ok {
			t.Errorf("volume %s bound to %s and %s", pv.Name, prev, c.Name)
		}
		owner[pv.Name] = c.Name
		switch {
		case pool[pv.Name]:
			reused++
		case pv.Name == "pvc-"+string(c.UID):
			created++
		default:
			t.Errorf("claim %s got %s, neither a pool volume nor one created for it", c.Name, pv.Name)
		}
	}
	if reused != 5 || created != 15 {
		t.Errorf("reused %d, created %d; want 5 and 15", reused, created)
	}
	// Nothing bound twice, nothing made in excess.
	framework.Consistently(t, 2*time.Second, func(ctx context.Context) (bool, error) {
		uids := map[types.UID]string{}
		pvs := e.volumesOf(class)
		for _, pv := range pvs {
			if ref := pv.Spec.ClaimRef; ref != nil {
				if other, ok := uids[ref.UID]; ok {
					return false, fmt.Errorf("claim %s/%s is referenced by %s and %s", ref.Namespace, ref.Name, other, pv.Name)
				}
				uids[ref.UID] = pv.Name
			}
		}
		return len(pvs) == 20, nil
	}, "the class to hold 20 volumes, each for one claim")
	entries, err := os.ReadDir(e.base)
	if err != nil || len(entries) != 20 {
		t.Errorf("%d directories, want 20 (%v)", len(entries), err)
	}
	e.check(class)
}

// Under WaitForFirstConsumer the volume fits the node the scheduler picked:
// a new one carries the class's topology, and of the pool's volumes only one
// reachable from that node is given.
func TestProvisionerWaitForFirstConsumer(t *testing.T) {
	t.Parallel()
	e := startProvisioner(t)
	shareKey := "e2e.reclaimable.test/" + framework.Name("share")
	node := framework.Name("node")
	framework.CreateNode(t, node, map[string]string{shareKey: "mounted"})

	// A new volume: only the new node has the share, and says so.
	class := e.class(nil, func(sc *storagev1.StorageClass) {
		sc.VolumeBindingMode = ptr.To(storagev1.VolumeBindingWaitForFirstConsumer)
		sc.AllowedTopologies = []corev1.TopologySelectorTerm{{MatchLabelExpressions: []corev1.TopologySelectorLabelRequirement{
			{Key: shareKey, Values: []string{"mounted"}},
		}}}
	})
	static := e.class(map[string]string{"backend": "static", "baseDir": "", "source": "", "hostPath": ""}, func(sc *storagev1.StorageClass) {
		sc.VolumeBindingMode = ptr.To(storagev1.VolumeBindingWaitForFirstConsumer)
	})
	e.watch(class, static)
	c := e.claim("new", class, "1Gi")
	e.pod("consumer", "new", nil)
	pv := e.bound(c)
	e.podOn("consumer", node)
	if a := pv.Spec.NodeAffinity; a == nil || a.Required == nil ||
		a.Required.NodeSelectorTerms[0].MatchExpressions[0].Key != shareKey {
		t.Errorf("node affinity = %+v, want the class's topology", pv.Spec.NodeAffinity)
	}

	// The pool: a small volume on another node and a larger one on the new
	// node, both Released. The smaller would be preferred, but does not fit.
	elsewhere := e.staticVolume(static, "1Gi", "node-1")
	here := e.staticVolume(static, "2Gi", node)
	e.volumePhase(elsewhere, corev1.VolumeReleased)
	e.volumePhase(here, corev1.VolumeReleased)
	c = e.claim("pooled", static, "1Gi")
	e.pod("pinned", "pooled", map[string]string{"kubernetes.io/hostname": node})
	if got := e.bound(c); got.Name != here {
		t.Errorf("claim got %s, want %s on the selected node", got.Name, here)
	}
	e.podOn("pinned", node)
	e.check(class, static)
}

// pod creates a pod that mounts claim, optionally pinned by nodeSelector.
func (e *provisionerEnv) pod(name, claim string, nodeSelector map[string]string) {
	e.t.Helper()
	_, err := framework.Client().CoreV1().Pods(e.ns).Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeSelector: nodeSelector,
			Containers:   []corev1.Container{{Name: "c", Image: "busybox", VolumeMounts: []corev1.VolumeMount{{Name: "v", MountPath: "/cache"}}}},
			Volumes: []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim},
			}}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
}

func (e *provisionerEnv) podOn(name, node string) {
	e.t.Helper()
	framework.Eventually(e.t, provisionerWait, func(ctx context.Context) (bool, error) {
		p, err := framework.Client().CoreV1().Pods(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || p.Spec.NodeName == "" {
			return false, err
		}
		if p.Spec.NodeName != node {
			return false, fmt.Errorf("pod %s scheduled to %s, want %s", name, p.Spec.NodeName, node)
		}
		return true, nil
	}, "pod "+name+" to be scheduled")
}

// staticVolume creates a Released volume labelled into the static pool of
// class, reachable from node only, and returns its name.
func (e *provisionerEnv) staticVolume(class, size, node string) string {
	e.t.Helper()
	name := framework.Name("static")
	framework.CreateVolume(e.t, objects.NewVolume(name, class, size, "/mnt/static/"+name, func(pv *corev1.PersistentVolume) {
		pv.Labels = map[string]string{wellknown.Domain + "/pool": class}
		// A claim that no longer exists: the PV controller marks it Released.
		pv.Spec.ClaimRef = &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: e.ns, Name: "gone-" + name, UID: uuid.NewUUID()}
		pv.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
		}}}}
	}))
	return name
}

// At maxVolumes the waiting claim gets a PoolExhausted event, and the volume
// a claim frees goes to it.
func TestProvisionerMaxVolumes(t *testing.T) {
	t.Parallel()
	e := startProvisioner(t)
	class := e.class(map[string]string{"maxVolumes": "2"})
	e.watch(class)

	a := e.bound(e.claim("a", class, "1Gi"))
	e.bound(e.claim("b", class, "1Gi"))
	waiting := e.claim("c", class, "1Gi")

	msg := e.event("c", "PoolExhausted")
	if !strings.Contains(msg, "2 of at most 2 volumes") || !strings.Contains(msg, "2 in use") {
		t.Errorf("PoolExhausted message %q lacks the counts", msg)
	}
	framework.Consistently(t, 2*time.Second, func(ctx context.Context) (bool, error) {
		return len(e.volumesOf(class)) == 2, nil
	}, "no volume beyond maxVolumes")

	// The freed volume wakes the waiting claim: it does not wait for the
	// library's next retry, 15 s after the refusal at the earliest.
	e.deleteClaim("a")
	if got := e.boundWithin(waiting, 8*time.Second); got.Name != a.Name {
		t.Errorf("waiting claim got %s, want the freed %s", got.Name, a.Name)
	}
	if n := len(e.volumesOf(class)); n != 2 {
		t.Errorf("%d volumes, want 2", n)
	}
	e.check(class)
}

// With reclaim policy Delete the directory goes with the volume.
func TestProvisionerDeletePolicyRemovesTheDirectory(t *testing.T) {
	t.Parallel()
	e := startProvisioner(t)
	class := e.class(nil, func(sc *storagev1.StorageClass) {
		sc.ReclaimPolicy = ptr.To(corev1.PersistentVolumeReclaimDelete)
	})
	e.watch(class)
	pv := e.bound(e.claim("scratch", class, "1Gi"))
	e.write(pv, "data", "x")

	e.deleteClaim("scratch")
	framework.Eventually(t, provisionerWait, func(ctx context.Context) (bool, error) {
		_, err := framework.Client().CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}, "the volume to be deleted")
	if _, err := os.Stat(e.dir(pv)); !os.IsNotExist(err) {
		t.Errorf("directory of the deleted volume: %v, want it gone", err)
	}
	if _, err := os.Stat(e.base); err != nil {
		t.Errorf("base directory: %v", err)
	}
	e.check(class)
}

// A static pool with no free volume says so on the claim, and serves it as
// soon as a volume is freed.
func TestProvisionerStaticPoolWithoutFreeVolume(t *testing.T) {
	t.Parallel()
	e := startProvisioner(t)
	class := e.class(map[string]string{"backend": "static", "baseDir": "", "source": "", "hostPath": ""})
	e.watch(class)
	name := framework.Name("static")
	_, err := framework.Client().CoreV1().PersistentVolumes().Create(context.Background(), &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{wellknown.Domain + "/pool": class}},
		Spec: corev1.PersistentVolumeSpec{
			StorageClassName:              class,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/mnt/static/" + name}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	if got := e.bound(e.claim("holder", class, "1Gi")); got.Name != name {
		t.Fatalf("first claim got %s, want %s", got.Name, name)
	}
	waiting := e.claim("waiting", class, "1Gi")
	msg := e.event("waiting", "PoolExhausted")
	if !strings.Contains(msg, "static pool") || !strings.Contains(msg, "1 volumes, 1 in use") || !strings.Contains(msg, wellknown.Domain+"/pool="+class) {
		t.Errorf("PoolExhausted message %q does not say what to do", msg)
	}

	e.deleteClaim("holder")
	if got := e.boundWithin(waiting, 8*time.Second); got.Name != name {
		t.Errorf("waiting claim got %s, want %s", got.Name, name)
	}
	if n := len(e.volumesOf(class)); n != 1 {
		t.Errorf("a static pool grew to %d volumes", n)
	}
	e.check(class)
}

// A class with a parameter the provisioner does not know, or a claim whose
// selector uses a key the class does not declare, gets an event and no volume.
func TestProvisionerRefusesWhatItDoesNotUnderstand(t *testing.T) {
	t.Parallel()
	e := startProvisioner(t)
	badClass := e.class(map[string]string{"colour": "blue"})
	class := e.class(map[string]string{"selectorKeys": "cache"})
	e.watch(badClass, class)
	e.claim("bad-class", badClass, "1Gi")
	if msg := e.event("bad-class", "InvalidStorageClassParameters"); !strings.Contains(msg, `unknown parameter "colour"`) {
		t.Errorf("message %q does not name the parameter", msg)
	}

	e.claim("bad-selector", class, "1Gi", func(c *corev1.PersistentVolumeClaim) {
		c.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"region": "east"}}
	})
	if msg := e.event("bad-selector", "UnsupportedSelector"); !strings.Contains(msg, "region") {
		t.Errorf("message %q does not name the key", msg)
	}
	// A selector on a declared key is honoured: the new volume carries it.
	good := e.claim("good-selector", class, "1Gi", func(c *corev1.PersistentVolumeClaim) {
		c.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"cache": "go"}}
	})
	if pv := e.bound(good); pv.Labels["cache"] != "go" {
		t.Errorf("labels = %v", pv.Labels)
	}
	if n := len(e.volumesOf(badClass)); n != 0 {
		t.Errorf("%d volumes created for an invalid class", n)
	}
	entries, _ := os.ReadDir(e.base)
	if len(entries) != 1 {
		t.Errorf("%d directories, want only the good claim's", len(entries))
	}
	e.check(badClass, class)
}
