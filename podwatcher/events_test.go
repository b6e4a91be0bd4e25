package podwatcher

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/reclaimable/reclaimable/internal/controller"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// The indexes and the owner handlers run for every event of every kept
// pod, tens of thousands at a start: they read the cached record as it is
// and build no Pod from it, which would be kilobytes of garbage each time.
func TestPodEventsReadTheRecordWithoutAllocating(t *testing.T) {
	claimVolume := corev1.Volume{Name: "cache", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "p-cache"}}}
	// Kept but neither asking for claims nor gated: a pod of a Job that
	// asks, say, whose own events change nothing of its claims.
	old := controller.PodRecordOf(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "uid-p", ResourceVersion: "1",
			Annotations: map[string]string{wellknown.TemplateKey("cache"): validYAML}},
		Spec: corev1.PodSpec{Volumes: []corev1.Volume{claimVolume, {Name: "scratch"}}},
	})
	cur := controller.PodRecordOf(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "uid-p", ResourceVersion: "2",
			Annotations: map[string]string{wellknown.TemplateKey("cache"): validYAML}},
		Spec:   corev1.PodSpec{Volumes: []corev1.Volume{claimVolume, {Name: "scratch"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	})
	for name, read := range map[string]func(){
		"gated index":    func() { _, _ = podGated(cur) },
		"gated-on index": func() { _, _ = podGatedOn(cur) },
		"wanted claims":  func() { _ = podWantsClaims(cur) },
		"update filter":  func() { _ = claimsMayChange(old, cur) },
		"outcome":        func() { _ = outcome(cur) },
	} {
		if allocs := testing.AllocsPerRun(100, read); allocs != 0 {
			t.Errorf("%s: %.0f allocations per pod event, want 0", name, allocs)
		}
	}
	if claimsMayChange(old, cur) {
		t.Errorf("a change of phase alone counts as a change of the pod's claims")
	}
}
