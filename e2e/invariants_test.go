//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/reclaimable/reclaimable/apis/reclaimable/v1alpha1"
	"github.com/reclaimable/reclaimable/e2e/framework"
	"github.com/reclaimable/reclaimable/e2e/objects"
)

// errorRecorder collects what a checker reports instead of failing the test.
type errorRecorder struct {
	*testing.T
	errors []string
}

func (r *errorRecorder) Error(args ...any) { r.errors = append(r.errors, fmt.Sprint(args...)) }

// The checker is only worth something if it fails: break invariants 2, 3,
// 5, 6 and 8 by hand on the real cluster and expect each to be reported. (The
// PV controller never lets a claim be Bound to two volumes, so invariant 1
// is proven on synthetic volumes in package framework.)
func TestInvariantCheckerReportsViolations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := framework.Client()
	ns := framework.Namespace(t)
	class := createRetainClass(t, nil)
	inv := framework.WatchInvariants(t, framework.Scope{ControllerID: "none", Classes: []string{class}, Namespaces: []string{ns}})

	// A claim bound to a volume, whose claimRef is then cleared while the
	// claim exists (2).
	dir := t.TempDir()
	a := createHostPathVolume(t, class, "1Gi", dir)
	createClaim(t, ns, "victim", class, "1Gi", "")
	waitVolumePhase(t, a.Name, corev1.VolumeBound)
	// A marker in a Retain volume's data, then removed (3).
	marker := filepath.Join(dir, "marker")
	if err := os.WriteFile(marker, []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	inv.Marker(a.Name, marker)
	if err := os.Remove(marker); err != nil {
		t.Fatal(err)
	}
	// A volume too small for the claim bound to it by hand (6), and a
	// released volume nobody returns to the pool (5).
	// The PV controller itself refuses such a pair, so make it as a user
	// could: a claim naming the volume, the volume naming the claim.
	small := createHostPathVolume(t, class, "1Mi", t.TempDir())
	big := createClaim(t, ns, "too-big", class, "10Gi", small.Name)
	updateVolume(t, small.Name, func(pv *corev1.PersistentVolume) { pv.Spec.ClaimRef = claimRef(big) })
	leftover := createHostPathVolume(t, class, "1Gi", t.TempDir())
	gone := createClaim(t, ns, "gone", class, "1Gi", "")
	framework.Eventually(t, 30*time.Second, func(ctx context.Context) (bool, error) {
		c, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, gone.Name, metav1.GetOptions{})
		return err == nil && c.Spec.VolumeName != "", err
	}, "a claim for the leftover volume to bind")
	if err := client.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, gone.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitVolumePhase(t, leftover.Name, corev1.VolumeReleased)
	updateVolume(t, a.Name, func(pv *corev1.PersistentVolume) { pv.Spec.ClaimRef = nil })
	// A pool whose status counts more bound volumes than its class has (8).
	pools := volumePools(t)
	pool, err := pools.Create(ctx, &v1alpha1.VolumePool{ObjectMeta: metav1.ObjectMeta{Name: framework.Name("pool")},
		Spec: v1alpha1.VolumePoolSpec{StorageClassName: class}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pools.Delete(context.Background(), pool.Name, metav1.DeleteOptions{}) })
	// Ready, as if another installation served the class: the pool
	// managers of the tests running beside this one leave it alone.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := pools.Get(ctx, pool.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		p.Status.Bound, p.Status.Total = 50, 50
		p.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "SettingsInForce", Message: "by hand", LastTransitionTime: metav1.Now()}}
		_, err = pools.UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}

	rec := &errorRecorder{T: t}
	framework.Eventually(t, 30*time.Second, func(ctx context.Context) (bool, error) {
		return inv.Violations(ctx) >= 6, nil
	}, "the checker to see the violations")
	inv.Check(rec, 0)
	report := strings.Join(rec.errors, "\n")
	for _, want := range []string{"invariant 2:", "invariant 3:", "invariant 5:", "invariant 6:", "invariant 8:"} {
		if !strings.Contains(report, want) {
			t.Errorf("checker did not report %q; it reported:\n%s", want, report)
		}
	}
}

func createRetainClass(t *testing.T, annotations map[string]string) string {
	t.Helper()
	return framework.CreateClass(t, objects.NewClass(framework.Name("retain"), "kubernetes.io/no-provisioner", func(sc *storagev1.StorageClass) {
		sc.Annotations = annotations
	}))
}

func createHostPathVolume(t *testing.T, class, size, path string) *corev1.PersistentVolume {
	t.Helper()
	return framework.CreateVolume(t, objects.NewVolume(framework.Name(class), class, size, path))
}

func createClaim(t *testing.T, ns, name, class, size, volume string) *corev1.PersistentVolumeClaim {
	t.Helper()
	return framework.CreateClaim(t, objects.NewClaim(ns, name, class, size, func(c *corev1.PersistentVolumeClaim) { c.Spec.VolumeName = volume }))
}

// updateVolume applies change to the current volume, retrying on conflicts
// with the PV controller's own writes.
func updateVolume(t *testing.T, name string, change func(*corev1.PersistentVolume)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pv, err := framework.Client().CoreV1().PersistentVolumes().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(pv)
		_, err = framework.Client().CoreV1().PersistentVolumes().Update(context.Background(), pv, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("updating volume %s: %v", name, err)
	}
}

func claimRef(c *corev1.PersistentVolumeClaim) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: c.Namespace, Name: c.Name, UID: c.UID}
}

func waitVolumePhase(t *testing.T, name string, want corev1.PersistentVolumePhase) {
	t.Helper()
	framework.Eventually(t, 30*time.Second, func(ctx context.Context) (bool, error) {
		pv, err := framework.Client().CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return pv.Status.Phase == want, nil
	}, fmt.Sprintf("volume %s to be %s", name, want))
}
