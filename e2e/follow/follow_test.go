package follow

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

func volume(rv string, phase corev1.PersistentVolumePhase) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv", ResourceVersion: rv},
		Status:     corev1.PersistentVolumeStatus{Phase: phase},
	}
}

// Versions delivered before anyone reads are kept in order, so that waiting
// for one phase and then the next sees both, however close together they
// came, and each with the time it arrived rather than the time it was read.
func TestUntilSeesEveryVersionInOrderWithItsArrivalTime(t *testing.T) {
	w := watch.NewFakeWithChanSize(10, false)
	f := New[*corev1.PersistentVolume](w, "volume pv")
	defer f.Stop()
	before := time.Now()
	w.Add(volume("1", corev1.VolumeBound))
	w.Modify(volume("2", corev1.VolumeReleased))
	w.Modify(volume("3", corev1.VolumeAvailable))
	w.Delete(volume("4", corev1.VolumeAvailable))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	released, err := f.Until(ctx, VolumePhase(corev1.VolumeReleased))
	if err != nil {
		t.Fatal(err)
	}
	if released.Object.ResourceVersion != "2" || released.Type != watch.Modified {
		t.Errorf("Released seen at version %s (%s), want 2 (MODIFIED)", released.Object.ResourceVersion, released.Type)
	}
	time.Sleep(100 * time.Millisecond) // the reader busy elsewhere while Available arrives
	readAt := time.Now()
	available, err := f.Until(ctx, VolumePhase(corev1.VolumeAvailable))
	if err != nil {
		t.Fatal(err)
	}
	if available.Object.ResourceVersion != "3" {
		t.Errorf("Available seen at version %s, want 3", available.Object.ResourceVersion)
	}
	if available.At.Before(before) || !available.At.Before(readAt) {
		t.Errorf("Available stamped %s after the writes, read %s after them: want the time it arrived, before it was read",
			available.At.Sub(before), readAt.Sub(before))
	}
	if ev, err := f.Until(ctx, Deleted); err != nil || ev.Object.ResourceVersion != "4" {
		t.Errorf("deletion: %v, %v", ev.Object, err)
	}
}

// A wait starts from the version the previous one returned: a claim that
// names its volume and is Bound in one version satisfies a wait for each.
func TestUntilStartsFromTheLastVersionReturned(t *testing.T) {
	w := watch.NewFakeWithChanSize(10, false)
	f := New[*corev1.PersistentVolumeClaim](w, "claim ns/c")
	defer f.Stop()
	bound := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "c", ResourceVersion: "7"},
		Spec:       corev1.PersistentVolumeClaimSpec{VolumeName: "pv"},
		Status:     corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound},
	}
	w.Add(bound)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := f.Until(ctx, func(ev Event[*corev1.PersistentVolumeClaim]) bool { return ev.Object.Spec.VolumeName != "" }); err != nil {
		t.Fatal(err)
	}
	ev, err := f.Until(ctx, ClaimPhase(corev1.ClaimBound))
	if err != nil || ev.Object.ResourceVersion != "7" {
		t.Fatalf("Bound: %v, %v; want version 7 again", ev.Object, err)
	}
}

// Events delivered before the watch ended are still returned; then the end
// is reported, not waited out.
func TestNextReportsTheEndOfTheWatchAfterItsEvents(t *testing.T) {
	w := watch.NewFakeWithChanSize(10, false)
	f := New[*corev1.PersistentVolume](w, "volume pv")
	w.Add(volume("1", corev1.VolumeAvailable))
	w.Stop()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if ev, err := f.Next(ctx); err != nil || ev.Object.ResourceVersion != "1" {
		t.Fatalf("first event: %v, %v", ev.Object, err)
	}
	_, err := f.Until(ctx, VolumePhase(corev1.VolumeReleased))
	if err == nil || !strings.Contains(err.Error(), "watch of volume pv ended") {
		t.Fatalf("after the end: %v, want the watch's end", err)
	}
}

// An Error event (a version too old, say) ends the following with the
// server's message.
func TestNextReportsAWatchError(t *testing.T) {
	w := watch.NewFakeWithChanSize(10, false)
	f := New[*corev1.PersistentVolume](w, "volume pv")
	w.Error(&metav1.Status{Status: metav1.StatusFailure, Reason: metav1.StatusReasonExpired, Message: "too old resource version: 1 (5)", Code: 410})

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := f.Next(ctx)
	if err == nil || !strings.Contains(err.Error(), "too old resource version") {
		t.Fatalf("Next = %v, want the server's error", err)
	}
}

// A wait that outlasts its context returns the context's error.
func TestNextStopsWithItsContext(t *testing.T) {
	w := watch.NewFakeWithChanSize(10, false)
	f := New[*corev1.PersistentVolume](w, "volume pv")
	defer f.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := f.Next(ctx); err != context.DeadlineExceeded {
		t.Fatalf("Next = %v, want %v", err, context.DeadlineExceeded)
	}
}
