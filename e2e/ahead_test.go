//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/reclaimable/reclaimable/apis/reclaimable/v1alpha1"
	"github.com/reclaimable/reclaimable/e2e/cluster"
	"github.com/reclaimable/reclaimable/e2e/framework"
	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// newAheadCase is a directory class with its controllers running and a
// VolumePool of the class that keeps minAvailable free members, at most
// maxVolumes; reserveFor 0 holds a released volume for its namespace
// rather than for its claim's name.
func newAheadCase(t *testing.T, minAvailable, maxVolumes int32, ns string) *poolCase {
	t.Helper()
	r := newPoolCase(t, map[string]string{wellknown.ReserveFor: "0s"}, ns)
	r.createAheadPool(minAvailable, maxVolumes)
	return r
}

// createAheadPool makes r's class a VolumePool that keeps minAvailable
// free members, at most maxVolumes, deleted at cleanup.
func (r *poolCase) createAheadPool(minAvailable, maxVolumes int32) {
	r.t.Helper()
	pools := volumePools(r.t)
	pool, err := pools.Create(context.Background(), &v1alpha1.VolumePool{
		ObjectMeta: metav1.ObjectMeta{Name: framework.Name("warm")},
		Spec:       v1alpha1.VolumePoolSpec{StorageClassName: r.class, MinAvailable: ptr.To(minAvailable), MaxVolumes: ptr.To(maxVolumes)},
	}, metav1.CreateOptions{})
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { _ = pools.Delete(context.Background(), pool.Name, metav1.DeleteOptions{}) })
	r.pool = pool.Name
}

// setMinAvailable edits the pool's minAvailable, as kubectl edit would.
func (r *poolCase) setMinAvailable(n int32) {
	r.t.Helper()
	pools := volumePools(r.t)
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := pools.Get(context.Background(), r.pool, metav1.GetOptions{})
		if err != nil {
			return err
		}
		p.Spec.MinAvailable = ptr.To(n)
		_, err = pools.Update(context.Background(), p, metav1.UpdateOptions{})
		return err
	}); err != nil {
		r.t.Fatal(err)
	}
}

// A pool with minAvailable has that many free members before any claim
// asks; a claim takes one and the pool makes another; a higher minimum
// grows it; a claim of a namespace that holds a warm volume gets that one,
// not an empty member.
func TestVolumePoolMakesMembersAhead(t *testing.T) {
	t.Parallel()
	ns := framework.Namespace(t)
	r := newAheadCase(t, 3, 6, ns)

	pool := r.waitPoolStatus("made ahead", poolCounts{free: 3, total: 3})
	if !meta.IsStatusConditionTrue(pool.Status.Conditions, "Ready") || pool.Status.MadeAhead != 3 {
		t.Errorf("made ahead: conditions %+v, madeAhead %d; want Ready and 3", pool.Status.Conditions, pool.Status.MadeAhead)
	}
	r.create(ns, "a")
	a := r.boundTo(ns, "a")
	r.waitPoolStatus("one taken, one more made", poolCounts{free: 3, bound: 1, total: 4})

	r.setMinAvailable(5)
	r.waitPoolStatus("a higher minimum", poolCounts{free: 5, bound: 1, total: 6})
	// What the below-minimum alert compares the free members with.
	if got := r.provisioner.Metric("reclaimable_volumepool_min_available", map[string]string{"pool": r.pool}); got != 5 {
		t.Errorf("volumepool_min_available = %v, want 5", got)
	}

	// a's volume, held for the namespace with its data, goes to the next
	// claim of the namespace before any empty member.
	r.deleteGone(ns, "a")
	r.waitPoolStatus("a released and held", poolCounts{free: 5, held: 1, total: 6})
	r.create(ns, "b")
	if got := r.boundTo(ns, "b"); got != a {
		t.Errorf("claim b got %s, want %s, the volume its namespace used", got, a)
	}
	r.waitPoolStatus("the warm volume taken", poolCounts{free: 5, bound: 1, total: 6})
	framework.Eventually(t, 10*time.Second, func(context.Context) (bool, error) {
		return r.issues("made-ahead") == 1 && r.issues("other-member") == 1, nil
	}, "issues_total: a from a member made ahead, b from the warm one")
	r.inv.Check(t, 10*time.Second)
}

// Claims and members made ahead grow the pool together without passing
// its maximum: 20 claims against a pool making 10 members ahead, at most
// 12 volumes. A watch sees every volume of the class as it is created.
func TestVolumePoolMakeAheadRacesClaimsWithinTheMaximum(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := framework.Namespace(t)
	r := newPoolCase(t, map[string]string{wellknown.ReserveFor: "0s"}, ns)

	var mu sync.Mutex
	seen := map[string]bool{}
	factory := informers.NewSharedInformerFactory(framework.Client(), 0)
	inf := factory.Core().V1().PersistentVolumes().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		if pv, ok := obj.(*corev1.PersistentVolume); ok && pv.Spec.StorageClassName == r.class {
			mu.Lock()
			seen[pv.Name] = true
			mu.Unlock()
		}
	}}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	factory.Start(stop)
	factory.WaitForCacheSync(stop)

	r.createAheadPool(10, 12)
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := range 20 {
		wg.Go(func() {
			_, err := framework.Client().CoreV1().PersistentVolumeClaims(ns).Create(ctx, claimOf(r.class, fmt.Sprintf("c%02d", i)), metav1.CreateOptions{})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}

	bound := 0
	framework.Eventually(t, 60*time.Second, func(ctx context.Context) (bool, error) {
		claims, err := framework.Client().CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		bound = 0
		for _, c := range claims.Items {
			if c.Status.Phase == corev1.ClaimBound {
				bound++
			}
		}
		return bound == 12, nil
	}, "12 of the 20 claims to be bound")
	r.waitPoolStatus("at the maximum", poolCounts{bound: 12, total: 12})
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 12 {
		t.Errorf("the class had %d volumes, want at most (and here exactly) 12", len(seen))
	}
	r.inv.Check(t, 10*time.Second)
}

// A provisioner killed (SIGKILL) while it makes members ahead leaves volume
// objects that list their storage, and the next one finishes them: no
// half-made member is issued or left, and no directory is without its
// volume. The share refuses the provisioner's writes at first, so that the
// kill finds members whose volume object exists and whose storage does not.
func TestVolumePoolMakeAheadSurvivesAKill(t *testing.T) {
	t.Parallel()
	ns := framework.Namespace(t)
	r := newPoolCase(t, map[string]string{wellknown.ReserveFor: "0s"}, ns)
	if err := os.Chmod(r.base, 0o555); err != nil {
		t.Fatal(err)
	}
	r.createAheadPool(4, 4)

	framework.WaitEvent(t, 60*time.Second, framework.EventQuery{Namespace: "default", Kind: "VolumePool", Name: r.pool, Reason: "MakeAheadFailed", Message: "permission denied"})
	half := r.classVolumes()
	if len(half) == 0 || !pools.StoragePending(half[0]) || pools.StateOf(half[0]) != pools.StateOther {
		t.Fatalf("after a failed make: %d volumes, want one waiting for its storage", len(half))
	}
	r.create(ns, "early")
	r.provisioner.Kill()
	if err := os.Chmod(r.base, 0o755); err != nil {
		t.Fatal(err)
	}
	r.provisioner.Start()
	r.provisioner.WaitReady(t)

	// Four members in all, the claim's among them: none is left half made.
	r.boundTo(ns, "early")
	r.waitPoolStatus("finished after the kill", poolCounts{free: 3, bound: 1, total: 4})
	pvs := r.classVolumes()
	dirs, err := os.ReadDir(r.base)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, pv := range pvs {
		if pools.StoragePending(pv) {
			t.Errorf("volume %s still waits for its storage", pv.Name)
		}
		if _, err := os.Stat(filepath.Join(r.base, pv.Name)); err != nil {
			t.Errorf("volume %s has no directory: %v", pv.Name, err)
		}
		names[pv.Name] = true
	}
	for _, d := range dirs {
		if !names[d.Name()] {
			t.Errorf("directory %s has no volume", d.Name())
		}
	}
	r.inv.Check(t, 10*time.Second)
}

// classVolumes lists the volumes of r's class, by name.
func (r *poolCase) classVolumes() []*corev1.PersistentVolume {
	r.t.Helper()
	list, err := framework.Client().CoreV1().PersistentVolumes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		r.t.Fatal(err)
	}
	var out []*corev1.PersistentVolume
	for i := range list.Items {
		if list.Items[i].Spec.StorageClassName == r.class {
			out = append(out, &list.Items[i])
		}
	}
	return out
}

// A pool of a node-local class makes its members ahead on the nodes its
// template names, each through a lifecycle pod on the real node; the next
// pod there gets the member made ahead, and the pool makes another.
func TestNodeLocalPoolMakesMembersAheadOnTheNode(t *testing.T) {
	c := newLocalCase(t, corev1.PersistentVolumeReclaimRetain, nil)
	ctx := context.Background()
	pools := volumePools(t)
	pool, err := pools.Create(ctx, &v1alpha1.VolumePool{ObjectMeta: metav1.ObjectMeta{Name: framework.Name("warm")},
		Spec: v1alpha1.VolumePoolSpec{StorageClassName: c.class, MinAvailable: ptr.To[int32](1), MaxVolumes: ptr.To[int32](2),
			Template: &v1alpha1.VolumePoolTemplate{NodeSelector: map[string]string{cluster.RealNodeLabel: "true"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pools.Delete(context.Background(), pool.Name, metav1.DeleteOptions{}) })

	ahead := waitMadeAhead(t, c.class, 1)[0]
	c.onTheNode(t, ahead)
	if _, err := os.Stat(ahead.Spec.HostPath.Path); err != nil {
		t.Fatalf("the member made ahead has no directory on the node: %v", err)
	}
	c.noHelperLeft(t)

	const claim = "cache"
	runToCompletion(t, c.ns, nodePod("writer", claim, c.class, 1000, "write", "/cache/log", "into a member made ahead\n"))
	if got := boundVolume(t, c.ns, claim); got.Name != ahead.Name {
		t.Errorf("the pod's claim got volume %s, want %s, made ahead on its node", got.Name, ahead.Name)
	}
	next := waitMadeAhead(t, c.class, 1)[0]
	c.onTheNode(t, next)
	deletePod(t, c.ns, "writer", claim)
	c.noHelperLeft(t)
	c.inv.Check(t, 10*time.Second)
}

// waitMadeAhead waits until class has n members made ahead and ready, no
// claim's yet, and returns them.
func waitMadeAhead(t *testing.T, class string, n int) []*corev1.PersistentVolume {
	t.Helper()
	var ready []*corev1.PersistentVolume
	framework.Eventually(t, 2*time.Minute, func(ctx context.Context) (bool, error) {
		list, err := framework.Client().CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		ready = nil
		for i := range list.Items {
			pv := &list.Items[i]
			if pv.Spec.StorageClassName == class && pools.Unissued(pv) && !pools.StoragePending(pv) {
				ready = append(ready, pv)
			}
		}
		return len(ready) == n, nil
	}, fmt.Sprintf("%d members of class %s made ahead", n, class))
	return ready
}
