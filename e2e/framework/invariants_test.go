package framework

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// Invariant 1 on synthetic volumes: the PV controller never produces a
// double binding, so the real cluster cannot show the checker failing.
func TestCheckBindingReportsAClaimBoundTwiceOrAVolumeInAnotherNamespace(t *testing.T) {
	volume := func(name string, phase corev1.PersistentVolumePhase, claim types.UID) *corev1.PersistentVolume {
		pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeSpec{StorageClassName: "pool"}}
		if name == "s" {
			pv.Spec.StorageClassName = "scoped"
		}
		pv.Status.Phase = phase
		if claim != "" {
			pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "ns", Name: "c", UID: claim}
		}
		return pv
	}
	// Volumes named s are of class scoped, with reuseScope namespace.
	inNamespace := func(ns string, pv *corev1.PersistentVolume) *corev1.PersistentVolume {
		pv.Spec.ClaimRef.Namespace = ns
		return pv
	}
	for _, tc := range []struct {
		name   string
		events []*corev1.PersistentVolume
		want   string
	}{
		{"one volume, seen many times", []*corev1.PersistentVolume{
			volume("a", corev1.VolumeBound, "u1"), volume("a", corev1.VolumeBound, "u1"), volume("a", corev1.VolumeReleased, "u1"),
		}, ""},
		{"a spare reservation next to the binding", []*corev1.PersistentVolume{
			volume("a", corev1.VolumeBound, "u1"), volume("b", corev1.VolumeAvailable, "u1"), volume("b", corev1.VolumeAvailable, ""),
		}, ""},
		{"two claims, two volumes", []*corev1.PersistentVolume{
			volume("a", corev1.VolumeBound, "u1"), volume("b", corev1.VolumeBound, "u2"),
		}, ""},
		{"one claim Bound to two volumes", []*corev1.PersistentVolume{
			volume("a", corev1.VolumeBound, "u1"), volume("b", corev1.VolumeBound, "u1"),
		}, "invariant 1: claim ns/c (uid u1) is bound to volume b, and was bound to volume a"},
		{"a namespace-scoped volume bound in its namespace again", []*corev1.PersistentVolume{
			volume("s", corev1.VolumeBound, "u1"), volume("s", corev1.VolumeAvailable, ""), volume("s", corev1.VolumeBound, "u2"),
		}, ""},
		{"a namespace-scoped volume bound in another namespace", []*corev1.PersistentVolume{
			volume("s", corev1.VolumeBound, "u1"), inNamespace("other", volume("s", corev1.VolumeBound, "u2")),
		}, "invariant 7: volume s of namespace-scoped class scoped is bound in namespace other, and was last bound in ns"},
		{"a cluster-wide volume may go to another namespace", []*corev1.PersistentVolume{
			volume("a", corev1.VolumeBound, "u1"), inNamespace("other", volume("a", corev1.VolumeBound, "u2")),
		}, ""},
		{"another class is out of scope", []*corev1.PersistentVolume{
			volume("a", corev1.VolumeBound, "u1"), func() *corev1.PersistentVolume {
				pv := volume("b", corev1.VolumeBound, "u1")
				pv.Spec.StorageClassName = "other"
				return pv
			}(),
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inv := &Invariants{scope: Scope{Classes: []string{"pool", "scoped"}, NamespaceScoped: []string{"scoped"}}, markers: map[string][]string{}, boundTo: map[types.UID]string{}, boundIn: map[string]string{}}
			for _, pv := range tc.events {
				inv.checkBinding(pv)
			}
			got := strings.Join(inv.violations, "\n")
			if got != tc.want {
				t.Errorf("violations = %q, want %q", got, tc.want)
			}
		})
	}
}

// Invariants 11 and 12 on synthetic volumes: the product never fences a
// pre-bound volume nor leaves a member stuck, so the real cluster cannot
// show the checker failing.
func TestCheckPreBoundAndStuckMembers(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	volume := func(mods ...func(*corev1.PersistentVolume)) *corev1.PersistentVolume {
		pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "a", Annotations: map[string]string{}, CreationTimestamp: metav1.NewTime(now.Add(-time.Hour))},
			Spec: corev1.PersistentVolumeSpec{StorageClassName: "pool"}}
		for _, m := range mods {
			m(pv)
		}
		return pv
	}
	preBound := func(pv *corev1.PersistentVolume) {
		pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "ns", Name: "wanted"}
	}
	fenced := func(pv *corev1.PersistentVolume) { pv.Annotations[wellknown.Evicting] = wellknown.EvictIdle }

	inv := &Invariants{scope: Scope{Classes: []string{"pool"}}}
	inv.checkPreBound(volume(preBound))
	inv.checkPreBound(volume(fenced))
	if len(inv.violations) != 0 {
		t.Errorf("violations %q for a pre-bound volume left alone and a free one fenced", inv.violations)
	}
	inv.checkPreBound(volume(preBound, fenced))
	if want := "invariant 11: volume a, pre-bound to claim ns/wanted, is fenced for eviction (idle)"; len(inv.violations) != 1 || inv.violations[0] != want {
		t.Errorf("violations %q, want %q", inv.violations, want)
	}

	deleting := func(ago time.Duration) func(*corev1.PersistentVolume) {
		return func(pv *corev1.PersistentVolume) { pv.DeletionTimestamp = &metav1.Time{Time: now.Add(-ago)} }
	}
	pending := func(ago time.Duration) func(*corev1.PersistentVolume) {
		return func(pv *corev1.PersistentVolume) {
			pv.Annotations[wellknown.StoragePending] = "true"
			pv.CreationTimestamp = metav1.NewTime(now.Add(-ago))
		}
	}
	for _, tc := range []struct {
		name string
		pv   *corev1.PersistentVolume
		want string
	}{
		{"storage pending within the bound", volume(pending(time.Minute)), ""},
		{"storage pending past the bound", volume(pending(7 * time.Minute)), "invariant 12: volume a has waited for its storage"},
		{"evicted within the bound", volume(fenced, deleting(time.Minute)), ""},
		{"evicted past the bound", volume(fenced, deleting(7*time.Minute)), "invariant 12: volume a has been evicted (idle)"},
		{"fenced, not yet deleted", volume(fenced), ""},
	} {
		got := stuck(tc.pv, 6*time.Minute, now)
		if tc.want == "" && got != "" || tc.want != "" && !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
