package pools

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/reclaimable/reclaimable/internal/wellknown"
)

func TestReserved(t *testing.T) {
	byName := &corev1.ObjectReference{Namespace: "ns", Name: "data"}
	bound := &corev1.ObjectReference{Namespace: "ns", Name: "data", UID: "uid"}
	annotated := map[string]string{wellknown.ReservedUntil: "2026-11-25T10:00:00.000Z"}
	for _, tt := range []struct {
		name        string
		ref         *corev1.ObjectReference
		annotations map[string]string
		want        bool
	}{
		{"reserved by the releaser", byName, annotated, true},
		{"empty time: still the releaser's, which ends it", byName, map[string]string{wellknown.ReservedUntil: ""}, true},
		{"pre-bound by an administrator", byName, nil, false},
		{"bound since: the annotation is stale", bound, annotated, false},
		{"free", nil, annotated, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Annotations: tt.annotations}, Spec: corev1.PersistentVolumeSpec{ClaimRef: tt.ref}}
			if got := Reserved(pv); got != tt.want {
				t.Errorf("Reserved = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestPreBound(t *testing.T) {
	byName := &corev1.ObjectReference{Namespace: "ns", Name: "data"}
	for _, tt := range []struct {
		name        string
		ref         *corev1.ObjectReference
		annotations map[string]string
		want        bool
	}{
		{"pre-bound by an administrator", byName, nil, true},
		{"reserved by the releaser", byName, map[string]string{wellknown.ReservedUntil: "2026-11-25T10:00:00.000Z"}, false},
		{"held for its namespace", byName, map[string]string{wellknown.HeldForNamespace: "ns"}, false},
		{"made ahead", AheadClaimRef("pv"), map[string]string{wellknown.MadeAhead: ""}, false},
		{"emptied by a scrub", AheadClaimRef("pv"), nil, false},
		{"bound", &corev1.ObjectReference{Namespace: "ns", Name: "data", UID: "uid"}, nil, false},
		{"free", nil, nil, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv", Annotations: tt.annotations}, Spec: corev1.PersistentVolumeSpec{ClaimRef: tt.ref}}
			if got := PreBound(pv); got != tt.want {
				t.Errorf("PreBound = %v, want %v", got, tt.want)
			}
		})
	}
}
