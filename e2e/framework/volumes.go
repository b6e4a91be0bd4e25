package framework

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// FollowVolume reads the versions of one volume from w (a watch of that
// volume alone) and hands each to each, until each returns true. It returns
// the phases the volume went through, a repeated phase once, and fails the
// test if the watch ends or timeout passes first.
func FollowVolume(t testing.TB, w watch.Interface, name string, timeout time.Duration, each func(*corev1.PersistentVolume) bool) []corev1.PersistentVolumePhase {
	t.Helper()
	var phases []corev1.PersistentVolumePhase
	deadline := time.After(timeout)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch of volume %s ended; phases seen: %v", name, phases)
			}
			pv, ok := ev.Object.(*corev1.PersistentVolume)
			if !ok {
				t.Fatalf("watch of volume %s: %v", name, ev.Object)
			}
			if len(phases) == 0 || phases[len(phases)-1] != pv.Status.Phase {
				phases = append(phases, pv.Status.Phase)
			}
			if each(pv) {
				return phases
			}
		case <-deadline:
			t.Fatalf("volume %s: nothing awaited seen within %s; phases seen: %v", name, timeout, phases)
		}
	}
}
