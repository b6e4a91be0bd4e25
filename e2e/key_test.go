//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/reclaimable/reclaimable/e2e/framework"
	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// createKeyed creates a claim ns/name of the pool's class, labelled ci=key
// (no label for ""), owned by pod if one is given.
func (r *poolCase) createKeyed(ns, name, key string, pod *corev1.Pod) {
	r.t.Helper()
	claim := claimOf(r.class, name)
	if key != "" {
		claim.Labels = map[string]string{"ci": key}
	}
	if pod != nil {
		claim.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID, Controller: ptr.To(true)}}
	}
	if _, err := framework.Client().CoreV1().PersistentVolumeClaims(ns).Create(context.Background(), claim, metav1.CreateOptions{}); err != nil {
		r.t.Fatal(err)
	}
}

// Under keyPolicy Require a member goes only to claims of the key it was
// last used under: not to a claim made again under its last claim's very
// name with another key (the PV controller would bind a member held by that
// name), not to a claim of another key; it goes, warm, to a claim of its
// key, read here from the Pod that owns the claim, as an ephemeral volume's
// claim is owned. Invariant 13 watches every binding.
func TestKeyPolicyRequireNeverHandsAnotherKeysMember(t *testing.T) {
	t.Parallel()
	ns := framework.Namespace(t)
	// The class says reuseScope cluster; the pool, which Require needs,
	// says namespace.
	r := newVolumePoolCase(t, map[string]string{wellknown.KeyLabel: "ci", wellknown.KeyPolicy: wellknown.KeyPolicyRequire, wellknown.ReuseScope: wellknown.ReuseScopeNamespace}, ns)

	r.createKeyed(ns, "cache", "a", nil)
	filled := r.boundTo(ns, "cache")
	file := r.fill(filled)
	r.deleteGone(ns, "cache")
	// The release holds it by key in the one update that returns it.
	r.heldFor(filled, ns)
	if pv, err := framework.Client().CoreV1().PersistentVolumes().Get(context.Background(), filled, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	} else if got := pv.Annotations[wellknown.LastKey]; got != "ci=a" || pools.Reserved(pv) || pv.Spec.ClaimRef.Name != wellknown.HeldClaim(filled) {
		t.Errorf("volume %s: last key %q, reserved %v, claimRef %s; want ci=a, not reserved, held by %s", filled, got, pools.Reserved(pv), pv.Spec.ClaimRef.Name, wellknown.HeldClaim(filled))
	}

	// The same name, another key.
	r.createKeyed(ns, "cache", "b", nil)
	if got := r.boundTo(ns, "cache"); got == filled {
		t.Errorf("claim %s/cache of key b got volume %s, last used under key a", ns, filled)
	} else if r.holds(got, file) {
		t.Errorf("the claim of key b sees the file of key a")
	}
	// No key at all.
	r.createKeyed(ns, "plain", "", nil)
	if got := r.boundTo(ns, "plain"); got == filled {
		t.Errorf("claim %s/plain without a key got volume %s, last used under key a", ns, filled)
	}

	// Key a again, from the pod that owns the claim.
	pod, err := framework.Client().CoreV1().Pods(ns).Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "runner-1", Labels: map[string]string{"ci": "a"}},
		Spec: corev1.PodSpec{
			// Never scheduled: it only owns the claim, as a CI runner's pod
			// owns its ephemeral volume's.
			NodeSelector: map[string]string{"reclaimable.github.io/no-such-node": "true"},
			Containers:   []corev1.Container{{Name: "c", Image: "busybox"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r.createKeyed(ns, "runner-1-work", "", pod)
	if got := r.boundTo(ns, "runner-1-work"); got != filled {
		t.Errorf("claim %s/runner-1-work of key a (its pod's) got volume %s, want %s, last used under key a", ns, got, filled)
	} else if !r.holds(got, file) {
		t.Errorf("volume %s came back to key a without its data", got)
	}
	// The issues metric tells a hit of the claim's key from the rest.
	framework.Eventually(t, 10*time.Second, func(context.Context) (bool, error) {
		key := func(result string) float64 { return r.issuesWith(map[string]string{"class": r.class, "key": result}) }
		return key("own") == 1 && key("fresh") == 3 && key("other") == 0 && key("none") == 0, nil
	}, "issues_total: one member of the claim's key, three new volumes")
	r.inv.Check(t, 10*time.Second)
}
