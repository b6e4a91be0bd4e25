//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/reclaimable/reclaimable/e2e/framework"
	"github.com/reclaimable/reclaimable/e2e/objects"
	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// addStatic labels n new volumes into the case's static pool, as an
// administrator does, and waits until the provisioner names in each a claim
// that never exists: from then on it alone issues them, and the PV
// controller binds none to a claim on its own.
func (r *poolCase) addStatic(n int) []string {
	r.t.Helper()
	names := make([]string, n)
	for i := range names {
		names[i] = framework.Name("static")
		framework.CreateVolume(r.t, objects.NewVolume(names[i], r.class, "1Gi", r.base+"/"+names[i], func(pv *corev1.PersistentVolume) {
			pv.Labels = map[string]string{wellknown.Pool: r.class}
		}))
	}
	for _, name := range names {
		framework.Eventually(r.t, 30*time.Second, func(ctx context.Context) (bool, error) {
			pv, err := framework.Client().CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			return pools.Unissued(pv) && pv.Status.Phase == corev1.VolumeAvailable, nil
		}, "static member "+name+" to be issued by the provisioner alone (a claimRef naming no claim)")
	}
	return names
}

// createLabelled creates the claim ns/name of the case's class, labelled
// team=team ("" no label).
func (r *poolCase) createLabelled(ns, name, team string) {
	r.t.Helper()
	c := claimOf(r.class, name)
	if team != "" {
		c.Labels = map[string]string{"team": team}
	}
	if _, err := framework.Client().CoreV1().PersistentVolumeClaims(ns).Create(context.Background(), c, metav1.CreateOptions{}); err != nil {
		r.t.Fatal(err)
	}
}

// pending fails the test unless the claim ns/name is Pending without a
// volume.
func (r *poolCase) pending(ns, name string) {
	r.t.Helper()
	c, err := framework.Client().CoreV1().PersistentVolumeClaims(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		r.t.Fatal(err)
	}
	if c.Status.Phase != corev1.ClaimPending || c.Spec.VolumeName != "" {
		r.t.Errorf("claim %s/%s: %s, volume %q; want Pending without a volume", ns, name, c.Status.Phase, c.Spec.VolumeName)
	}
}

// A static pool under keyPolicy Require keeps a member's data to its key,
// though an administrator made the member and no claim had it before: the
// provisioner issues it and records the key of its first claim, so once
// that claim is gone a claim without a key waits, and the next claim of
// the key gets it. Left without a claimRef, the member would be bound by
// the PV controller, which records no key: the claim without one would get
// team a's data, and team a's next claim would wait beside it.
func TestStaticPoolRequiredKeyHoldsForTheKeyOfItsFirstClaim(t *testing.T) {
	t.Parallel()
	ns := framework.Namespace(t)
	r := newStaticPoolCase(t, map[string]string{wellknown.ReuseScope: wellknown.ReuseScopeNamespace, wellknown.KeyLabel: "team", wellknown.KeyPolicy: wellknown.KeyPolicyRequire}, ns)
	member := r.addStatic(1)[0]

	r.createLabelled(ns, "a1", "a")
	if got := r.boundTo(ns, "a1"); got != member {
		t.Fatalf("claim a1 got volume %s, want %s, the pool's one member", got, member)
	}
	r.deleteGone(ns, "a1")
	r.heldFor(member, ns)

	r.createLabelled(ns, "nokey", "")
	framework.WaitEvent(t, 30*time.Second, framework.EventQuery{Namespace: ns, Kind: "PersistentVolumeClaim", Name: "nokey", Reason: "PoolExhausted", Type: corev1.EventTypeWarning,
		Message: "free for other keys only"})
	r.createLabelled(ns, "a2", "a")
	if got := r.boundTo(ns, "a2"); got != member {
		t.Errorf("claim a2 of team a got volume %s, want %s, last used by team a", got, member)
	}
	r.pending(ns, "nokey")
	r.inv.Check(t, 10*time.Second)
}

// A static pool keeps a namespace to maxVolumesPerNamespace though its
// members were made by an administrator and no claim had them: three claims
// of one namespace get one member between them, the other two waiting at
// the maximum. Left without a claimRef, the PV controller would bind each
// claim to a member of its own, past the maximum.
func TestStaticPoolKeepsANamespaceToItsShare(t *testing.T) {
	t.Parallel()
	ns := framework.Namespace(t)
	r := newStaticPoolCase(t, map[string]string{wellknown.ReuseScope: wellknown.ReuseScopeNamespace, wellknown.MaxVolumesPerNamespace: "1"}, ns)
	r.addStatic(3)

	names := []string{"c1", "c2", "c3"}
	for _, name := range names {
		r.create(ns, name)
	}
	first := ""
	framework.Eventually(t, 30*time.Second, func(ctx context.Context) (bool, error) {
		claims, err := framework.Client().CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		bound := 0
		for _, c := range claims.Items {
			if c.Status.Phase == corev1.ClaimBound {
				bound, first = bound+1, c.Name
			}
		}
		if bound > 1 {
			return false, fmt.Errorf("%d claims of namespace %s are bound, above its maximum of 1", bound, ns)
		}
		return bound == 1, nil
	}, "one claim of the namespace to be bound")
	for _, name := range names {
		if name == first {
			continue
		}
		framework.WaitEvent(t, 30*time.Second, framework.EventQuery{Namespace: ns, Kind: "PersistentVolumeClaim", Name: name, Reason: "NamespaceAtMaximum", Type: corev1.EventTypeWarning,
			Message: fmt.Sprintf("namespace %s has 1 of at most 1 volumes of class %s", ns, r.class)})
		r.pending(ns, name)
	}
	r.inv.Check(t, 10*time.Second)
}
