//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/reclaimable/reclaimable/e2e/framework"
	"github.com/reclaimable/reclaimable/e2e/process"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// A namespace at maxVolumesPerNamespace waits, with a NamespaceAtMaximum
// event, while another namespace is served from the same pool; a member
// its namespace lets go of serves its waiting claim, warm. The maximum is
// the pool's (a VolumePool over a class that sets no limit).
func TestVolumePoolMaxVolumesPerNamespaceKeepsANamespaceToItsShare(t *testing.T) {
	t.Parallel()
	a, b := framework.Namespace(t), framework.Namespace(t)
	r := newVolumePoolCase(t, map[string]string{wellknown.ReuseScope: wellknown.ReuseScopeNamespace, wellknown.MaxVolumesPerNamespace: "1"}, a, b)

	r.create(a, "first")
	first := r.boundTo(a, "first")
	file := r.fill(first)

	r.create(a, "second")
	framework.WaitEvent(t, 30*time.Second, framework.EventQuery{Namespace: a, Kind: "PersistentVolumeClaim", Name: "second", Reason: "NamespaceAtMaximum", Type: corev1.EventTypeWarning,
		Message: fmt.Sprintf("namespace %s has 1 of at most 1 volumes of class %s (maxVolumesPerNamespace=1)", a, r.class)})

	// Another namespace is served meanwhile, from the same pool.
	r.create(b, "first")
	if got := r.boundTo(b, "first"); got == first {
		t.Fatalf("claim %s/first got volume %s of namespace %s", b, got, a)
	}
	if c, err := framework.Client().CoreV1().PersistentVolumeClaims(a).Get(context.Background(), "second", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	} else if c.Status.Phase != corev1.ClaimPending || c.Spec.VolumeName != "" {
		t.Fatalf("claim %s/second, its namespace at its maximum: %s, volume %q; want Pending without a volume", a, c.Status.Phase, c.Spec.VolumeName)
	}
	m, err := process.ScrapeMetrics(context.Background(), r.provisioner.MetricsAddr)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := m.Value("reclaimable_provisioner_namespace_at_maximum_total", map[string]string{"class": r.class}); v < 1 {
		t.Errorf("namespace_at_maximum_total = %v, want at least 1", v)
	}

	// The namespace lets go of its member: its waiting claim has it, warm.
	r.deleteGone(a, "first")
	if got := r.boundTo(a, "second"); got != first {
		t.Errorf("claim %s/second got volume %s, want %s, its namespace's", a, got, first)
	} else if !r.holds(got, file) {
		t.Errorf("volume %s came back to namespace %s without its data", got, a)
	}
	if n := r.volumes(); n != 2 {
		t.Errorf("the class has %d volumes, want 2: one per namespace", n)
	}
	r.inv.Check(t, 10*time.Second)
}

// Under keyPolicy Require, a namespace at maxVolumesPerNamespace whose only
// member was last used under another key does not keep a claim of a new
// key waiting beside that idle member: with evictForClaims the member goes
// and the claim gets a new one, the namespace's share unchanged.
func TestRequiredKeyAtItsNamespacesMaximumEvictsItsIdleMember(t *testing.T) {
	t.Parallel()
	ns := framework.Namespace(t)
	r := newVolumePoolCase(t, map[string]string{wellknown.ReuseScope: wellknown.ReuseScopeNamespace, wellknown.MaxVolumesPerNamespace: "1",
		wellknown.KeyLabel: "team", wellknown.KeyPolicy: wellknown.KeyPolicyRequire, evictForClaims: "true"}, ns)
	claims := framework.Client().CoreV1().PersistentVolumeClaims(ns)
	create := func(name, team string) {
		c := claimOf(r.class, name)
		c.Labels = map[string]string{"team": team}
		if _, err := claims.Create(context.Background(), c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	create("a1", "a")
	first := r.boundTo(ns, "a1")
	r.deleteGone(ns, "a1")
	create("b1", "b")
	framework.WaitEvent(t, time.Minute, framework.EventQuery{Namespace: ns, Kind: "PersistentVolumeClaim", Name: "b1", Reason: "EvictingForClaim", Type: corev1.EventTypeNormal,
		Message: "evicting volume " + first})
	if got := r.boundTo(ns, "b1"); got == first {
		t.Fatalf("claim %s/b1 of team b got volume %s, last used by team a", ns, got)
	}
	framework.Eventually(t, time.Minute, func(ctx context.Context) (bool, error) {
		_, err := framework.Client().CoreV1().PersistentVolumes().Get(ctx, first, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}, "team a's member to be gone")
	if n := r.volumes(); n != 1 {
		t.Errorf("the class has %d volumes, want 1: the namespace's maximum", n)
	}
	r.inv.Check(t, 10*time.Second)
}
