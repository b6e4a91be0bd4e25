// Package follow reads the versions of one object from a watch as they
// arrive, each stamped with the time it arrived, for the tests and the demo.
//
// A caller that waits for one state and then another reads them in the
// order the API server wrote them, so a state that lasted a millisecond (a
// volume Released, then made Available again by the releaser) is still seen,
// which polling cannot promise. The arrival time is taken as the watch
// delivers the event, not when the caller gets round to reading it, so a
// timeline built from it stays accurate while the caller waits for something
// else.
package follow

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// Event is one version of the followed object, or its deletion.
type Event[T runtime.Object] struct {
	Type   watch.EventType
	Object T
	// At is when the watch delivered the event.
	At time.Time
}

// Follower holds what a watch delivered until its one reader takes it. Its
// methods other than Stop are for one goroutine at a time.
type Follower[T runtime.Object] struct {
	what string
	w    watch.Interface
	// last is the event Next returned last, if seen; only the reader
	// touches them.
	last Event[T]
	seen bool

	mu      sync.Mutex
	pending []Event[T]
	err     error // why the watch ended, once it has
	// arrived has room for one signal, so that an arrival between a
	// reader's look at pending and its wait is not lost.
	arrived chan struct{}
}

// New follows w, a watch of the object described by what (for errors), from
// now on; Stop ends it.
func New[T runtime.Object](w watch.Interface, what string) *Follower[T] {
	f := &Follower[T]{what: what, w: w, arrived: make(chan struct{}, 1)}
	go f.read()
	return f
}

// Volume follows the persistent volume name from resourceVersion, or, if
// that is empty, from its current version (delivered first, as Added).
func Volume(ctx context.Context, client kubernetes.Interface, name, resourceVersion string) (*Follower[*corev1.PersistentVolume], error) {
	w, err := client.CoreV1().PersistentVolumes().Watch(ctx, byName(name, resourceVersion))
	if err != nil {
		return nil, fmt.Errorf("watching volume %s: %w", name, err)
	}
	return New[*corev1.PersistentVolume](w, "volume "+name), nil
}

// Claim follows the claim ns/name as Volume follows a volume. Started before
// the claim exists, it delivers its creation.
func Claim(ctx context.Context, client kubernetes.Interface, ns, name, resourceVersion string) (*Follower[*corev1.PersistentVolumeClaim], error) {
	w, err := client.CoreV1().PersistentVolumeClaims(ns).Watch(ctx, byName(name, resourceVersion))
	if err != nil {
		return nil, fmt.Errorf("watching claim %s/%s: %w", ns, name, err)
	}
	return New[*corev1.PersistentVolumeClaim](w, "claim "+ns+"/"+name), nil
}

// Pod follows the pod ns/name as Claim follows a claim.
func Pod(ctx context.Context, client kubernetes.Interface, ns, name, resourceVersion string) (*Follower[*corev1.Pod], error) {
	w, err := client.CoreV1().Pods(ns).Watch(ctx, byName(name, resourceVersion))
	if err != nil {
		return nil, fmt.Errorf("watching pod %s/%s: %w", ns, name, err)
	}
	return New[*corev1.Pod](w, "pod "+ns+"/"+name), nil
}

func byName(name, resourceVersion string) metav1.ListOptions {
	return metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String(), ResourceVersion: resourceVersion}
}

func (f *Follower[T]) read() {
	var end error
	for ev := range f.w.ResultChan() {
		at := time.Now()
		if ev.Type == watch.Error {
			end = fmt.Errorf("watch of %s failed: %w", f.what, apierrors.FromObject(ev.Object))
			break
		}
		if ev.Type == watch.Bookmark {
			continue
		}
		obj, ok := ev.Object.(T)
		if !ok {
			end = fmt.Errorf("watch of %s delivered a %T", f.what, ev.Object)
			break
		}
		f.mu.Lock()
		f.pending = append(f.pending, Event[T]{Type: ev.Type, Object: obj, At: at})
		f.mu.Unlock()
		f.signal()
	}
	if end == nil {
		end = fmt.Errorf("watch of %s ended", f.what)
	}
	// An Error event leaves the watch open: stop it so that the server and
	// the decoder let go of it.
	f.w.Stop()
	f.mu.Lock()
	f.err = end
	f.mu.Unlock()
	f.signal()
}

func (f *Follower[T]) signal() {
	select {
	case f.arrived <- struct{}{}:
	default:
	}
}

// Next returns the oldest event not yet returned, waiting for one until ctx
// ends. Once the watch has ended and every event has been returned, it
// returns why the watch ended.
func (f *Follower[T]) Next(ctx context.Context) (Event[T], error) {
	for {
		f.mu.Lock()
		if len(f.pending) > 0 {
			ev := f.pending[0]
			f.pending[0] = Event[T]{}
			f.pending = f.pending[1:]
			f.mu.Unlock()
			f.last, f.seen = ev, true
			return ev, nil
		}
		err := f.err
		f.mu.Unlock()
		if err != nil {
			return Event[T]{}, err
		}
		select {
		case <-f.arrived:
		case <-ctx.Done():
			return Event[T]{}, context.Cause(ctx)
		}
	}
}

// Until returns the first event for which done is true, from the last one
// returned (the state the caller last saw) on. So a version that satisfies
// two waits in a row satisfies both, and a wait for the state after another
// sees every version that came between them.
func (f *Follower[T]) Until(ctx context.Context, done func(Event[T]) bool) (Event[T], error) {
	if f.seen && done(f.last) {
		return f.last, nil
	}
	for {
		ev, err := f.Next(ctx)
		if err != nil {
			return ev, err
		}
		if done(ev) {
			return ev, nil
		}
	}
}

// String names the followed object.
func (f *Follower[T]) String() string { return f.what }

// Stop ends the watch. Events already delivered can still be read.
func (f *Follower[T]) Stop() { f.w.Stop() }

// Exists is true of an event that carries a version of the object, false of
// its deletion.
func Exists[T runtime.Object](ev Event[T]) bool {
	return ev.Type == watch.Added || ev.Type == watch.Modified
}

// Deleted is true of the object's deletion.
func Deleted[T runtime.Object](ev Event[T]) bool { return ev.Type == watch.Deleted }

// VolumePhase is true of a version of the volume in phase.
func VolumePhase(phase corev1.PersistentVolumePhase) func(Event[*corev1.PersistentVolume]) bool {
	return func(ev Event[*corev1.PersistentVolume]) bool {
		return Exists(ev) && ev.Object.Status.Phase == phase
	}
}

// ClaimPhase is true of a version of the claim in phase.
func ClaimPhase(phase corev1.PersistentVolumeClaimPhase) func(Event[*corev1.PersistentVolumeClaim]) bool {
	return func(ev Event[*corev1.PersistentVolumeClaim]) bool {
		return Exists(ev) && ev.Object.Status.Phase == phase
	}
}

// PodFinished is true of a version of the pod that ran to its end,
// Succeeded or Failed.
func PodFinished(ev Event[*corev1.Pod]) bool {
	return Exists(ev) && (ev.Object.Status.Phase == corev1.PodSucceeded || ev.Object.Status.Phase == corev1.PodFailed)
}
