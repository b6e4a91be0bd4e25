//go:build e2e

package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/reclaimable/reclaimable/e2e/framework"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// The harness itself: the real PV controller binds a claim to a Retain
// volume, marks the volume Released when the claim goes, and makes it
// Available again once its claimRef is cleared.
func TestHarnessRetainVolumeLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := framework.Client()
	ns := framework.Namespace(t)
	class := createRetainClass(t, nil)
	inv := framework.WatchInvariants(t, framework.Scope{Classes: []string{class}, Namespaces: []string{ns}})
	pv := createHostPathVolume(t, class, "1Gi", "/tmp/"+class)
	claim := createClaim(t, ns, "cache", class, "1Gi", "")

	phase := func(want corev1.PersistentVolumePhase) func(context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			got, err := client.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			return got.Status.Phase == want, nil
		}
	}
	framework.Eventually(t, 30*time.Second, phase(corev1.VolumeBound), "the volume to be Bound")
	got, err := client.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ref := got.Spec.ClaimRef; ref == nil || ref.UID != claim.UID {
		t.Fatalf("volume bound to %v, want claim %s", ref, claim.UID)
	}

	if err := client.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, claim.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 30*time.Second, phase(corev1.VolumeReleased), "the volume to be Released")

	got, err = client.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got.Spec.ClaimRef = nil
	if _, err := client.CoreV1().PersistentVolumes().Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 30*time.Second, phase(corev1.VolumeAvailable), "the volume to be Available")
	inv.Check(t, 0)
}

// The binary starts every controller, reports ready once its caches have
// synced, leads one Lease per controller, and on SIGTERM exits 0 and gives
// its Leases up so that a successor need not wait for them to expire.
func TestHarnessBinaryLeadsAndShutsDownCleanly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	id := framework.Name("plumbing")
	// A podwatcher watching every namespace would race the other tests'
	// podwatchers for their pods: keep it to a namespace of its own.
	p := framework.StartController(t, "all", "--controller-id="+id, "--namespace="+framework.Namespace(t), "--directory-root="+framework.ControllerDir(t))
	p.WaitReady(t)

	leases := []string{id + "-podwatcher", id + "-provisioner", id + "-releaser"}
	for _, name := range leases {
		framework.Eventually(t, 30*time.Second, func(ctx context.Context) (bool, error) {
			l, err := framework.Client().CoordinationV1().Leases("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			return l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "", nil
		}, "Lease "+name+" to have a holder")
	}
	code, body, err := p.Get(ctx, p.HealthAddr, "/healthz")
	if err != nil || code != 200 {
		t.Fatalf("/healthz = %d %q, %v", code, body, err)
	}
	code, body, err = p.Get(ctx, p.MetricsAddr, "/metrics")
	if err != nil || code != 200 {
		t.Fatalf("/metrics = %d, %v", code, err)
	}
	for _, metric := range []string{"process_resident_memory_bytes", "reclaimable_workqueue_adds_total", "reclaimable_api_requests_total"} {
		if !strings.Contains(body, metric) {
			t.Errorf("/metrics lacks %s", metric)
		}
	}

	p.Stop()
	if exited, code := p.Exited(); !exited || code != 0 {
		t.Fatalf("after SIGTERM: exited=%v code=%d", exited, code)
	}
	for _, name := range leases {
		l, err := framework.Client().CoordinationV1().Leases("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
			t.Errorf("Lease %s still held by %q after a clean shutdown", name, *l.Spec.HolderIdentity)
		}
	}
}

// The waiter the tests and the demo share sees a phase that lasted no
// longer than the write after it: a volume made Released and, right after,
// Available again, as the releaser does, is seen Released, then Available.
func TestHarnessFollowSeesAPhaseThatPassesAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := framework.Client()
	pv := createHostPathVolume(t, framework.Name("follow"), "1Gi", t.TempDir())
	versions := framework.FollowVolume(t, pv.Name, pv.ResourceVersion)
	framework.VolumePhases(t, versions, 30*time.Second, func(cur *corev1.PersistentVolume) bool {
		return cur.Status.Phase == corev1.VolumeAvailable
	})

	// Patches, not updates: the PV controller may write the volume in
	// between, and the second write must follow the first whatever it does.
	setPhase := func(phase corev1.PersistentVolumePhase) *corev1.PersistentVolume {
		patch := []byte(`{"status":{"phase":"` + string(phase) + `"}}`)
		got, err := client.CoreV1().PersistentVolumes().Patch(ctx, pv.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	setPhase(corev1.VolumeReleased)
	last := setPhase(corev1.VolumeAvailable)
	if last.Status.Phase != corev1.VolumeAvailable {
		t.Fatalf("volume %s is %s after the second write, want Available", pv.Name, last.Status.Phase)
	}

	phases := framework.VolumePhases(t, versions, 30*time.Second, func(cur *corev1.PersistentVolume) bool {
		return cur.ResourceVersion == last.ResourceVersion
	})
	if want := []corev1.PersistentVolumePhase{corev1.VolumeAvailable, corev1.VolumeReleased, corev1.VolumeAvailable}; !slices.Equal(phases, want) {
		t.Errorf("volume %s went through phases %v, want %v", pv.Name, phases, want)
	}
}

// In `reclaimable all`, each controller writes under a field manager of its
// own: managedFields name the podwatcher on the claim it made, the
// provisioner on the volume it made (through the provisioning library),
// and the releaser on the association label and the release it wrote.
func TestHarnessEachControllerWritesUnderItsOwnName(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client := framework.Client()
	c := newCycleCase(t, "managers", nil, "")
	framework.StartController(t, c.args...).WaitReady(t)
	if err := createOwner(ctx, c.ns, "builder", "cache", c.class, false); err != nil {
		t.Fatal(err)
	}
	pv, err := waitBound(ctx, c.ns, "cache")
	if err != nil {
		t.Fatal(err)
	}
	claim, err := client.CoreV1().PersistentVolumeClaims(c.ns).Get(ctx, "cache", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wroteField(t, "claim", claim.ManagedFields, "reclaimable-podwatcher", wellknown.ClaimManagedBy)
	wroteField(t, "volume", pv.ManagedFields, "reclaimable-provisioner", "hostPath")
	// Made associated with the installation, not associated afterwards.
	wroteField(t, "volume", pv.ManagedFields, "reclaimable-provisioner", wellknown.VolumeManagedBy)

	if err := deleteOwner(ctx, c.ns, "builder", false); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, time.Minute, func(ctx context.Context) (bool, error) {
		pv, err = client.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
		return err == nil && pv.Annotations[wellknown.ReleasedAt] != "", err
	}, "the releaser to release volume "+pv.Name)
	wroteField(t, "volume", pv.ManagedFields, "reclaimable-releaser", wellknown.ReleasedAt)
}

// wroteField fails the test unless manager owns the field named key (a
// label, an annotation or a spec field) in managed.
func wroteField(t *testing.T, what string, managed []metav1.ManagedFieldsEntry, manager, key string) {
	t.Helper()
	var managers []string
	for _, m := range managed {
		managers = append(managers, m.Manager)
		if m.Manager == manager && m.FieldsV1 != nil && strings.Contains(string(m.FieldsV1.Raw), `"f:`+key+`"`) {
			return
		}
	}
	t.Errorf("the %s's field %s is not owned by %s; its managers: %v", what, key, manager, managers)
}
