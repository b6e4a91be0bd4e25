//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/reclaimable/reclaimable/apis/reclaimable/v1alpha1"
	"github.com/reclaimable/reclaimable/e2e/framework"
	"github.com/reclaimable/reclaimable/e2e/process"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// poolCase is a class of the directory backend with extra parameters,
// served by its own provisioner and releaser, for the reservation and
// reuse-scope tests.
type poolCase struct {
	t         *testing.T
	class, id string
	// pool is the class's VolumePool, "" for none.
	pool                  string
	provisionerName, base string
	inv                   *framework.Invariants
	provisioner, releaser *framework.Process
}

func newReserveCase(t *testing.T, reserveFor string, namespaces ...string) *poolCase {
	t.Helper()
	return newPoolCase(t, map[string]string{wellknown.ReserveFor: reserveFor}, namespaces...)
}

func newPoolCase(t *testing.T, extra map[string]string, namespaces ...string) *poolCase {
	t.Helper()
	return newPoolCaseWith(t, extra, false, namespaces...)
}

// newVolumePoolCase is newPoolCase with reserveFor and reuseScope set on a
// VolumePool of the class, over class parameters that say otherwise (no
// reservation, the other scope): what the test sees is the pool's doing.
func newVolumePoolCase(t *testing.T, extra map[string]string, namespaces ...string) *poolCase {
	t.Helper()
	return newPoolCaseWith(t, extra, true, namespaces...)
}

// newStaticPoolCase is newVolumePoolCase over a class of the static
// backend, which has no member until addStatic labels some into it.
func newStaticPoolCase(t *testing.T, extra map[string]string, namespaces ...string) *poolCase {
	t.Helper()
	extra = maps.Clone(extra)
	extra[staticBackend] = "true"
	return newPoolCaseWith(t, extra, true, namespaces...)
}

// staticBackend, set to "true" among a pool case's settings, makes its
// class one of the static backend.
const staticBackend = "static"

func newPoolCaseWith(t *testing.T, extra map[string]string, onPool bool, namespaces ...string) *poolCase {
	t.Helper()
	client := framework.Client()
	id := framework.Name("pool")
	prov := "pool.example.com/" + id
	base := framework.ControllerDir(t)
	params := map[string]string{"baseDir": base, "hostPath": base}
	if !onPool {
		maps.Copy(params, extra)
	} else {
		if _, ok := extra[wellknown.ReserveFor]; ok {
			params[wellknown.ReserveFor] = "0"
		}
		switch extra[wellknown.ReuseScope] {
		case wellknown.ReuseScopeCluster:
			params[wellknown.ReuseScope] = wellknown.ReuseScopeNamespace
		case wellknown.ReuseScopeNamespace:
			params[wellknown.ReuseScope] = wellknown.ReuseScopeCluster
		}
	}
	var class string
	if extra[staticBackend] == "true" {
		class = createClass(t, "pool", id, prov, corev1.PersistentVolumeReclaimRetain, storagev1.VolumeBindingImmediate, map[string]string{"backend": "static"})
	} else {
		class = createDirectoryClass(t, "pool", id, prov, params)
	}
	var pool string
	if onPool {
		pool = createVolumePool(t, class, extra)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		if pvs, err := client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{}); err == nil {
			for _, pv := range pvs.Items {
				if pv.Spec.StorageClassName == class {
					_ = client.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{})
				}
			}
		}
	})
	r := &poolCase{t: t, class: class, pool: pool, id: id, provisionerName: prov, base: base}
	scope := framework.Scope{ControllerID: id, Classes: []string{class}, Namespaces: namespaces}
	if extra[wellknown.ReuseScope] != wellknown.ReuseScopeCluster {
		scope.NamespaceScoped = scope.Classes
	}
	if extra[wellknown.KeyPolicy] == wellknown.KeyPolicyRequire {
		scope.KeyRequired = map[string]string{class: extra[wellknown.KeyLabel]}
	}
	if s, ok := extra[wellknown.MaxVolumesPerNamespace]; ok {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatal(err)
		}
		scope.MaxPerNamespace = map[string]int{class: n}
	}
	r.inv = framework.WatchInvariants(t, scope)
	r.start()
	return r
}

// start runs the class's provisioner and releaser, until stop or the test's
// end.
func (r *poolCase) start() {
	r.t.Helper()
	r.provisioner = framework.StartController(r.t, "provisioner", "--controller-id="+r.id, "--provisioner-name="+r.provisionerName, "--directory-root="+r.base,
		"--pool-status-interval=1s")
	r.releaser = framework.StartController(r.t, "releaser", "--controller-id="+r.id, "--provisioner-name="+r.provisionerName)
	r.provisioner.WaitReady(r.t)
	r.releaser.WaitReady(r.t)
}

// issues reads the provisioner's issues_total of kind for the class; 0
// while it has none.
func (r *poolCase) issues(kind string) float64 {
	r.t.Helper()
	return r.issuesWith(map[string]string{"class": r.class, "kind": kind})
}

// issuesWith reads the provisioner's issues_total over the series with
// labels.
func (r *poolCase) issuesWith(labels map[string]string) float64 {
	r.t.Helper()
	m, err := process.ScrapeMetrics(context.Background(), r.provisioner.MetricsAddr)
	if err != nil {
		r.t.Fatal(err)
	}
	return m.Sum("reclaimable_provisioner_issues_total", labels)
}

func (r *poolCase) create(ns, name string) {
	r.t.Helper()
	if _, err := framework.Client().CoreV1().PersistentVolumeClaims(ns).Create(context.Background(), claimOf(r.class, name), metav1.CreateOptions{}); err != nil {
		r.t.Fatal(err)
	}
}

// claimOf is a claim of 1Gi, ReadWriteOnce, of class.
func claimOf(class, name string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: &class,
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
}

func (r *poolCase) boundTo(ns, name string) string {
	r.t.Helper()
	var volume string
	framework.Eventually(r.t, 30*time.Second, func(ctx context.Context) (bool, error) {
		c, err := framework.Client().CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		volume = c.Spec.VolumeName
		return c.Status.Phase == corev1.ClaimBound, nil
	}, fmt.Sprintf("claim %s/%s to be Bound", ns, name))
	return volume
}

// deleteGone deletes a claim and waits until it is gone.
func (r *poolCase) deleteGone(ns, name string) {
	r.t.Helper()
	deleteClaim(r.t, ns, name)
}

// deleteClaim deletes the claim ns/name and waits until it is gone.
func deleteClaim(t *testing.T, ns, name string) {
	t.Helper()
	claims := framework.Client().CoreV1().PersistentVolumeClaims(ns)
	if err := claims.Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 30*time.Second, func(ctx context.Context) (bool, error) {
		_, err := claims.Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}, fmt.Sprintf("claim %s/%s to be gone", ns, name))
}

// volumes counts the volumes of the class.
func (r *poolCase) volumes() int {
	r.t.Helper()
	pvs, err := framework.Client().CoreV1().PersistentVolumes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		r.t.Fatal(err)
	}
	n := 0
	for _, pv := range pvs.Items {
		if pv.Spec.StorageClassName == r.class {
			n++
		}
	}
	return n
}

// reservedFor waits until volume is reserved for ns/name.
func (r *poolCase) reservedFor(volume, ns, name string) {
	r.t.Helper()
	waitReserved(r.t, volume, ns, name)
}

// waitReserved waits until volume is reserved for the claim ns/name: its
// claimRef names that claim, with no UID, until the time it records.
func waitReserved(t *testing.T, volume, ns, name string) {
	t.Helper()
	framework.Eventually(t, 30*time.Second, func(ctx context.Context) (bool, error) {
		pv, err := framework.Client().CoreV1().PersistentVolumes().Get(ctx, volume, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		ref := pv.Spec.ClaimRef
		return ref != nil && ref.UID == "" && ref.Namespace == ns && ref.Name == name && pv.Annotations[wellknown.ReservedUntil] != "", nil
	}, fmt.Sprintf("volume %s to be reserved for %s/%s", volume, ns, name))
}

// Claims that come back with the names of earlier ones, in another order,
// each get their own volume back: the releaser reserves a released volume
// for its last claim's namespace and name (reserveFor). A claim of a new
// name, with every member reserved, takes the oldest reservation: the pool
// never grows.
func TestReserveForGivesEachClaimItsOwnVolumeBack(t *testing.T) {
	t.Parallel()
	ns := framework.Namespace(t)
	r := newReserveCase(t, "10m", ns)
	names := []string{"job-a", "job-b", "job-c", "job-d"}
	first := map[string]string{}
	for _, n := range names {
		r.create(ns, n)
	}
	for _, n := range names {
		first[n] = r.boundTo(ns, n)
	}
	for _, n := range names {
		r.deleteGone(ns, n)
		r.reservedFor(first[n], ns, n)
	}
	again := []string{"job-d", "job-b", "job-a", "job-c"}
	for _, n := range again {
		r.create(ns, n)
	}
	for _, n := range again {
		if got := r.boundTo(ns, n); got != first[n] {
			t.Errorf("claim %s got volume %s, not its own %s", n, got, first[n])
		}
	}

	// Every member reserved again, one after the other: a claim of a new
	// name takes the oldest reservation rather than grow the pool.
	for _, n := range again {
		r.deleteGone(ns, n)
		r.reservedFor(first[n], ns, n)
	}
	r.create(ns, "job-e")
	if got := r.boundTo(ns, "job-e"); got != first[again[0]] {
		t.Errorf("claim job-e got volume %s, want %s, the oldest reservation", got, first[again[0]])
	}
	n := r.volumes()
	if n != len(names) {
		t.Errorf("the class has %d volumes, want %d: the pool grew", n, len(names))
	}
	// How often a job got its own cache back, from the metrics alone.
	framework.Eventually(t, 10*time.Second, func(context.Context) (bool, error) {
		return r.issues("same-claim") == 4 && r.issues("other-member") == 1 && r.issues("new-volume") == 4, nil
	}, "issues_total: 4 new volumes, 4 same-claim hits, 1 other member")
	r.inv.Check(t, 10*time.Second)
}

// Two claims of one name in two namespaces each get their own volume back:
// a reservation names the namespace too.
func TestReserveForKeepsNamespacesApart(t *testing.T) {
	t.Parallel()
	a, b := framework.Namespace(t), framework.Namespace(t)
	reservationsKeepNamespacesApart(t, newReserveCase(t, "10m", a, b), a, b)
}

// The same with reserveFor on the class's VolumePool.
func TestVolumePoolReserveForKeepsNamespacesApart(t *testing.T) {
	t.Parallel()
	a, b := framework.Namespace(t), framework.Namespace(t)
	reservationsKeepNamespacesApart(t, newVolumePoolCase(t, map[string]string{wellknown.ReserveFor: "10m"}, a, b), a, b)
}

func reservationsKeepNamespacesApart(t *testing.T, r *poolCase, a, b string) {
	r.create(a, "cache")
	r.create(b, "cache")
	va, vb := r.boundTo(a, "cache"), r.boundTo(b, "cache")
	r.deleteGone(a, "cache")
	r.reservedFor(va, a, "cache")
	r.deleteGone(b, "cache")
	r.reservedFor(vb, b, "cache")
	r.create(b, "cache")
	r.create(a, "cache")
	if got := r.boundTo(b, "cache"); got != vb {
		t.Errorf("claim %s/cache got volume %s, not its own %s", b, got, vb)
	}
	if got := r.boundTo(a, "cache"); got != va {
		t.Errorf("claim %s/cache got volume %s, not its own %s", a, got, va)
	}
	r.inv.Check(t, 10*time.Second)
}

// A claim recreated about when its reservation ends gets exactly one
// volume, and the volume exactly one claim, whoever wins: the claim taking
// it, or the releaser ending the reservation. Repeated, the moments
// straddle the end.
func TestReserveForEndingWhileTheClaimComes(t *testing.T) {
	t.Parallel()
	ns := framework.Namespace(t)
	r := newReserveCase(t, "1s", ns)
	r.create(ns, "job")
	volume := r.boundTo(ns, "job")
	for i := range 4 {
		r.deleteGone(ns, "job")
		pv, err := framework.Client().CoreV1().PersistentVolumes().Get(context.Background(), volume, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// The test's input is the moment of the create, not a wait for
		// anything: from 200 ms before the reservation's end to 100 ms
		// after, a step later each round.
		if s := pv.Annotations[wellknown.ReservedUntil]; s != "" {
			if until, err := time.Parse(time.RFC3339, s); err == nil {
				<-time.After(time.Until(until.Add(time.Duration(i-2) * 100 * time.Millisecond)))
			}
		}
		r.create(ns, "job")
		volume = r.boundTo(ns, "job")
	}
	r.inv.Check(t, 10*time.Second)
}

// createVolumePool makes the pool of class with settings (reserveFor,
// reuseScope) as a VolumePool; it is deleted at cleanup.
// evictForClaims is the VolumePool field, as createVolumePool takes it.
const evictForClaims = "evictForClaims"

func createVolumePool(t *testing.T, class string, settings map[string]string) string {
	t.Helper()
	spec := v1alpha1.VolumePoolSpec{StorageClassName: class, ReuseScope: settings[wellknown.ReuseScope],
		KeyLabel: settings[wellknown.KeyLabel], KeyPolicy: settings[wellknown.KeyPolicy]}
	if s, ok := settings[wellknown.ReserveFor]; ok {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		spec.ReserveFor = &metav1.Duration{Duration: d}
	}
	if s, ok := settings[wellknown.MaxVolumesPerNamespace]; ok {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatal(err)
		}
		spec.MaxVolumesPerNamespace = ptr.To(int32(n))
	}
	spec.EvictForClaims = settings[evictForClaims] == "true"
	return createPool(t, spec)
}

// A claim deleted and made again at once, under the same name, gets its
// volume back even when the PV controller has not yet released it from the
// earlier claim: the provisioner waits for it (AwaitingItsVolume) rather
// than give the claim the other member, reserved for another name, or grow
// the pool. How long the claim waited is logged, round by round.
func TestAClaimMadeAgainAtOnceGetsItsVolumeBack(t *testing.T) {
	t.Parallel()
	ns := framework.Namespace(t)
	r := newReserveCase(t, "10m", ns)
	r.create(ns, "other")
	r.create(ns, "cache")
	spare := r.boundTo(ns, "other")
	volume := r.boundTo(ns, "cache")
	r.deleteGone(ns, "other")
	r.reservedFor(spare, ns, "other")

	claims := framework.Client().CoreV1().PersistentVolumeClaims(ns)
	waited := 0
	for round := range 5 {
		old, err := claims.Get(context.Background(), "cache", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// Without its protection finalizer (no pod uses it) the claim is
		// gone the moment it is deleted, and its name free for the next.
		if _, err := claims.Patch(context.Background(), "cache", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := claims.Delete(context.Background(), "cache", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		// Made again as soon as the API server lets the name be used: the
		// earlier claim is gone then, not necessarily seen gone.
		var created *corev1.PersistentVolumeClaim
		start := time.Now()
		framework.Eventually(t, 30*time.Second, func(ctx context.Context) (bool, error) {
			created, err = claims.Create(ctx, claimOf(r.class, "cache"), metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return false, nil
			}
			return err == nil, err
		}, "the claim's name to be free again")
		made := time.Now()
		if got := r.boundTo(ns, "cache"); got != volume {
			t.Fatalf("round %d: the claim made again got volume %s, not its own %s", round, got, volume)
		}
		boundAfter := time.Since(made)
		events, err := framework.Client().CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{
			FieldSelector: "involvedObject.uid=" + string(created.UID) + ",reason=AwaitingItsVolume"})
		if err != nil {
			t.Fatal(err)
		}
		if len(events.Items) > 0 {
			waited++
		}
		t.Logf("round %d: claim %s (earlier %s) made %v after the delete, Bound to its volume within %v; waited for it: %v",
			round, created.UID, old.UID, made.Sub(start).Round(time.Millisecond), boundAfter.Round(time.Millisecond), len(events.Items) > 0)
	}
	t.Logf("%d of 5 claims found their volume still bound to the earlier claim and waited for it", waited)
	r.reservedFor(spare, ns, "other")
	n := r.volumes()
	if n != 2 {
		t.Errorf("the class has %d volumes, want 2: the pool grew", n)
	}
	r.inv.Check(t, 10*time.Second)
}
