//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/reclaimable/reclaimable/apis/reclaimable/v1alpha1"
	"github.com/reclaimable/reclaimable/e2e/framework"
	"github.com/reclaimable/reclaimable/e2e/objects"
	"github.com/reclaimable/reclaimable/internal/wellknown"
	"github.com/reclaimable/reclaimable/provisioner/classpool"
)

// The class backend's tests run a pool in front of a StorageClass of a real
// CSI stack: the tests' CSI driver behind the real external-provisioner
// sidecar (framework.StartCSIDriver). The driver's volumes hold no data and
// no pod mounts them; what is tested is who makes, issues and deletes them.

type classCase struct {
	*provisionerEnv
	driver  *framework.CSIDriver
	backing string // the driver's class
	pool    string // the pool class in front of it
}

// startClassPool runs the controllers ("all") with a pool class of reclaim
// policy policy in front of a class of a CSI driver of the test's own; env
// is added to the controllers' environment.
func startClassPool(t *testing.T, policy corev1.PersistentVolumeReclaimPolicy, env ...string) *classCase {
	t.Helper()
	c := &classCase{driver: framework.StartCSIDriver(t)}
	c.provisionerEnv = &provisionerEnv{t: t, ns: framework.Namespace(t), id: framework.Name("class"), name: "e2e.reclaimable.test/" + framework.Name("p")}
	c.backing = framework.CreateClass(t, objects.NewClass(framework.Name("csi"), c.driver.Name, func(sc *storagev1.StorageClass) {
		sc.ReclaimPolicy = ptr.To(corev1.PersistentVolumeReclaimDelete)
	}))
	c.pool = framework.CreateClass(t, objects.NewClass(framework.Name("pool"), c.name, func(sc *storagev1.StorageClass) {
		sc.ReclaimPolicy = &policy
		sc.Parameters = map[string]string{"backend": "class", "backingClass": c.backing}
	}))
	c.watch(c.pool)
	c.proc = framework.StartControllerWithEnv(t, env, "all", "--controller-id="+c.id, "--provisioner-name="+c.name,
		"--namespace="+c.ns, "--backing-claim-namespace="+c.ns, "--release-interval=5s", "--pool-status-interval=1s")
	c.proc.WaitReady(t)
	return c
}

// volumePool gives the pool class a VolumePool of spec, whose released
// members are free to any claim at once, until cleanup.
func (c *classCase) volumePool(spec v1alpha1.VolumePoolSpec) {
	c.t.Helper()
	spec.StorageClassName, spec.ReuseScope, spec.ReserveFor = c.pool, wellknown.ReuseScopeCluster, &metav1.Duration{}
	if _, err := volumePools(c.t).Create(context.Background(), &v1alpha1.VolumePool{ObjectMeta: metav1.ObjectMeta{Name: c.pool}, Spec: spec}, metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { _ = volumePools(c.t).Delete(context.Background(), c.pool, metav1.DeleteOptions{}) })
}

// noBackingClaimLeft waits until the claims the provisioner made in the
// backing class are all gone.
func (c *classCase) noBackingClaimLeft() {
	c.t.Helper()
	framework.Eventually(c.t, provisionerWait, func(ctx context.Context) (bool, error) {
		claims, err := framework.Client().CoreV1().PersistentVolumeClaims(c.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		return !slices.ContainsFunc(claims.Items, func(pc corev1.PersistentVolumeClaim) bool {
			return pc.Spec.StorageClassName != nil && *pc.Spec.StorageClassName == c.backing
		}), nil
	}, "no claim of the backing class to be left")
}

// fromDriver checks that pv is a volume the driver made, issued as a member
// of the pool class.
func (c *classCase) fromDriver(pv *corev1.PersistentVolume, policy corev1.PersistentVolumeReclaimPolicy) {
	c.t.Helper()
	if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != c.driver.Name || pv.Spec.CSI.VolumeHandle == "" {
		c.t.Fatalf("volume %s has source %+v, want a volume of driver %s", pv.Name, pv.Spec.PersistentVolumeSource, c.driver.Name)
	}
	if pv.Spec.StorageClassName != c.pool || pv.Annotations[wellknown.ProvisionedBy] != c.name || pv.Spec.PersistentVolumeReclaimPolicy != policy {
		c.t.Fatalf("volume %s: class %s, provisioned-by %q, reclaim policy %s; want a member of %s, %s, %s",
			pv.Name, pv.Spec.StorageClassName, pv.Annotations[wellknown.ProvisionedBy], pv.Spec.PersistentVolumeReclaimPolicy, c.pool, c.name, policy)
	}
	if slices.Contains(pv.Finalizers, "external-provisioner.volume.kubernetes.io/finalizer") {
		c.t.Errorf("volume %s keeps the sidecar's finalizer: %v", pv.Name, pv.Finalizers)
	}
}

// A pool in front of a CSI class grows through the real sidecar, issues the
// volume it got to the claim, and, once the claim is gone, issues it again
// to the next claim: one CreateVolume for two claims.
func TestAClassPoolGrowsThroughACSIDriverAndIssuesItsVolumeAgain(t *testing.T) {
	t.Parallel()
	c := startClassPool(t, corev1.PersistentVolumeReclaimRetain)

	first := c.claim("first", c.pool, "1Gi")
	pv := c.bound(first)
	c.fromDriver(pv, corev1.PersistentVolumeReclaimRetain)
	if calls := c.driver.Calls(t); !slices.Equal(calls.Created, []string{pv.Spec.CSI.VolumeHandle}) {
		t.Fatalf("the driver made %v, want the one volume %s", calls.Created, pv.Spec.CSI.VolumeHandle)
	}
	c.noBackingClaimLeft()

	c.deleteClaim("first")
	framework.Eventually(t, provisionerWait, func(ctx context.Context) (bool, error) {
		got, err := framework.Client().CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
		return err == nil && got.Status.Phase == corev1.VolumeAvailable, err
	}, "volume "+pv.Name+" to be back in the pool")
	second := c.claim("second", c.pool, "1Gi")
	if got := c.bound(second); got.Name != pv.Name {
		t.Fatalf("second claim got %s, want the pool's volume %s", got.Name, pv.Name)
	}
	if calls := c.driver.Calls(t); len(calls.Created) != 1 || len(calls.Deleted) != 0 {
		t.Fatalf("the driver made %v and deleted %v for two claims, want one volume made and none deleted", calls.Created, calls.Deleted)
	}
	c.inv.Check(t, provisionerWait)
}

// Under reclaim policy Delete, a member whose claim is gone goes back to
// the driver, which deletes it: DeleteVolume, and no object left behind.
func TestAClassPoolUnderDeleteGivesTheVolumeBackToItsDriver(t *testing.T) {
	t.Parallel()
	c := startClassPool(t, corev1.PersistentVolumeReclaimDelete)

	claim := c.claim("only", c.pool, "1Gi")
	pv := c.bound(claim)
	c.fromDriver(pv, corev1.PersistentVolumeReclaimDelete)
	c.noBackingClaimLeft()

	c.deleteClaim("only")
	framework.Eventually(t, provisionerWait, func(ctx context.Context) (bool, error) {
		pvs, err := framework.Client().CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		return !slices.ContainsFunc(pvs.Items, func(v corev1.PersistentVolume) bool { return v.Name == pv.Name }), nil
	}, "volume "+pv.Name+" to be deleted")
	if calls := c.driver.Calls(t); !slices.Equal(calls.Deleted, []string{pv.Spec.CSI.VolumeHandle}) {
		t.Fatalf("the driver deleted %v, want %s", calls.Deleted, pv.Spec.CSI.VolumeHandle)
	}
	c.noBackingClaimLeft()
	c.inv.Check(t, provisionerWait)
}

// The provisioner killed (SIGKILL) right after each write of the hand-over
// (classpool.CrashAfterEnv): the one started afresh finishes the work.
// The claim gets the one volume the driver made, no backing claim is left,
// and the driver holds no volume that no object points at.
func TestAClassPoolFinishesWhatACrashInterrupted(t *testing.T) {
	t.Parallel()
	for _, step := range []string{"asked", "kept", "released", "handed-over"} {
		t.Run(step, func(t *testing.T) {
			t.Parallel()
			c := startClassPool(t, corev1.PersistentVolumeReclaimRetain, classpool.CrashAfterEnv+"="+step)
			claim := c.claim("crash", c.pool, "1Gi")
			framework.Eventually(t, provisionerWait, func(context.Context) (bool, error) {
				exited, _ := c.proc.Exited()
				return exited, nil
			}, "the controllers to crash after step "+step)
			if !strings.Contains(c.proc.Log(), "Crashing on purpose") {
				t.Fatalf("the controllers exited, but not at step %s", step)
			}

			c.proc.SetEnv()
			c.proc.Start()
			pv := c.bound(claim)
			c.fromDriver(pv, corev1.PersistentVolumeReclaimRetain)
			if calls := c.driver.Calls(t); !slices.Equal(calls.Created, []string{pv.Spec.CSI.VolumeHandle}) || len(calls.Deleted) != 0 {
				t.Fatalf("the driver made %v and deleted %v, want the one volume %s", calls.Created, calls.Deleted, pv.Spec.CSI.VolumeHandle)
			}
			c.noBackingClaimLeft()
			c.inv.Check(t, provisionerWait)
		})
	}
}

// What the driver refuses reaches the claim, whose owner may not read the
// backing claim's namespace; and once the claim goes, its backing claim
// goes too.
func TestAClassPoolTellsTheClaimWhatItsDriverRefused(t *testing.T) {
	t.Parallel()
	c := startClassPool(t, corev1.PersistentVolumeReclaimRetain)

	c.claim("huge", c.pool, "2Ti")
	if msg := c.event("huge", "BackingClassFailed"); !strings.Contains(msg, "this driver makes at most") {
		t.Fatalf("BackingClassFailed says %q, want the driver's words", msg)
	}
	c.deleteClaim("huge")
	c.noBackingClaimLeft()
	if calls := c.driver.Calls(t); len(calls.Created) != 0 {
		t.Fatalf("the driver made %v", calls.Created)
	}
	c.inv.Check(t, provisionerWait)
}

// At its maximum, a class pool with evictForClaims evicts its free member
// for a claim that member does not fit: the member goes back to the
// driver, which deletes it (DeleteVolume), and the claim gets a new one.
func TestAClassPoolEvictsThroughItsDriver(t *testing.T) {
	t.Parallel()
	c := startClassPool(t, corev1.PersistentVolumeReclaimRetain)
	c.volumePool(v1alpha1.VolumePoolSpec{MaxVolumes: ptr.To[int32](1), EvictForClaims: true})

	first := c.bound(c.claim("first", c.pool, "1Gi"))
	c.deleteClaim("first")
	waitInPool(t, first.Name)

	big := c.claim("big", c.pool, "2Gi")
	framework.WaitEvent(t, provisionerWait, framework.EventQuery{Namespace: c.ns, Kind: "PersistentVolumeClaim", Name: "big", Reason: "EvictingForClaim", Message: first.Name})
	got := c.bound(big)
	if got.Name == first.Name {
		t.Fatalf("claim big got member %s, which does not fit it", got.Name)
	}
	c.fromDriver(got, corev1.PersistentVolumeReclaimRetain)
	framework.Eventually(t, provisionerWait, func(ctx context.Context) (bool, error) {
		_, err := framework.Client().CoreV1().PersistentVolumes().Get(ctx, first.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}, "the evicted member "+first.Name+" to be deleted")
	if calls := c.driver.Calls(t); !slices.Equal(calls.Deleted, []string{first.Spec.CSI.VolumeHandle}) || len(calls.Created) != 2 {
		t.Fatalf("the driver made %v and deleted %v; want two made and the evicted %s deleted", calls.Created, calls.Deleted, first.Spec.CSI.VolumeHandle)
	}
	c.noBackingClaimLeft()
	c.inv.Check(t, provisionerWait)
}

// A class pool keeps members made ahead through its backing class
// (minAvailable): the driver makes them before any claim asks, a claim
// gets one at once, and the pool makes another to keep minAvailable.
func TestAClassPoolKeepsMembersMadeAhead(t *testing.T) {
	t.Parallel()
	c := startClassPool(t, corev1.PersistentVolumeReclaimRetain)
	c.volumePool(v1alpha1.VolumePoolSpec{MinAvailable: ptr.To[int32](2), MaxVolumes: ptr.To[int32](3)})
	free := func(n int) {
		t.Helper()
		framework.Eventually(t, time.Minute, func(ctx context.Context) (bool, error) {
			p, err := volumePools(t).Get(ctx, c.pool, metav1.GetOptions{})
			return err == nil && int(p.Status.Free) == n, err
		}, fmt.Sprintf("the pool to have %d free members", n))
	}
	free(2)
	made := c.driver.Calls(t).Created
	if len(made) != 2 {
		t.Fatalf("the driver made %v ahead of claims, want two", made)
	}
	for _, pv := range c.volumesOf(c.pool) {
		c.fromDriver(&pv, corev1.PersistentVolumeReclaimRetain)
	}
	c.noBackingClaimLeft()

	got := c.bound(c.claim("warm", c.pool, "1Gi"))
	if !slices.Contains(made, got.Spec.CSI.VolumeHandle) {
		t.Fatalf("claim warm got %s, not one of the members made ahead %v", got.Spec.CSI.VolumeHandle, made)
	}
	framework.Eventually(t, provisionerWait, func(context.Context) (bool, error) {
		return len(c.driver.Calls(t).Created) == 3, nil
	}, "the driver to make a third member, to keep two free")
	free(2)
	if calls := c.driver.Calls(t); len(calls.Created) != 3 {
		t.Fatalf("the driver made %v, want three: two ahead, one more to keep two free", calls.Created)
	}
	c.noBackingClaimLeft()
	c.inv.Check(t, provisionerWait)
}
