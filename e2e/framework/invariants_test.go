package framework

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
