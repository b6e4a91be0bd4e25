package framework

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/reclaimable/reclaimable/e2e/follow"
)

// FollowVolume starts following the volume name from resourceVersion (its
// current version if empty), until the test ends.
func FollowVolume(t testing.TB, name, resourceVersion string) *follow.Follower[*corev1.PersistentVolume] {
	t.Helper()
	f, err := follow.Volume(context.Background(), Client(), name, resourceVersion)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Stop)
	return f
}

// VolumePhases hands each version of the volume that f delivers to each,
// from the last one an earlier wait returned, until each returns true. It
// returns the phases the volume went through, a repeated phase once, and
// fails the test if the watch ends, the volume is deleted or timeout passes
// first.
func VolumePhases(t testing.TB, f *follow.Follower[*corev1.PersistentVolume], timeout time.Duration, each func(*corev1.PersistentVolume) bool) []corev1.PersistentVolumePhase {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var phases []corev1.PersistentVolumePhase
	_, err := f.Until(ctx, func(ev follow.Event[*corev1.PersistentVolume]) bool {
		if !follow.Exists(ev) {
			t.Fatalf("%s deleted; phases seen: %v", f, phases)
		}
		if phase := ev.Object.Status.Phase; len(phases) == 0 || phases[len(phases)-1] != phase {
			phases = append(phases, phase)
		}
		return each(ev.Object)
	})
	if err != nil {
		t.Fatalf("following %s: %v; phases seen: %v", f, err, phases)
	}
	return phases
}
