package controller

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// Object returns obj, an informer's object, as a T, unwrapping the
// tombstone a deletion the watch missed leaves behind
// (cache.DeletedFinalStateUnknown); false for anything else.
func Object[T any](obj any) (T, bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	t, ok := obj.(T)
	return t, ok
}

// EventType says what an informer reported of an object.
type EventType int

const (
	Added EventType = iota
	Updated
	Deleted
)

// Event is one change an informer reported of an object of type T.
type Event[T any] struct {
	Type EventType
	// Obj is the object as it is, or as it was last seen if Deleted; Old,
	// for an update only, is what it was before.
	Obj, Old T
	// Initial tells an addition of the informer's initial list from one
	// a watch reported.
	Initial bool
	// Missed tells a deletion inferred from a relist (the watch missed it,
	// and the cache kept only a tombstone) from one a watch reported: only
	// the latter is definite.
	Missed bool
}

// Handle calls on for each event of the objects of informer that are T.
// It is the one place event handlers are registered: every loop hears of
// its objects through it, and so do the few caches beside loops (a wait for
// a lifecycle pod, the record of volumes on their way).
func Handle[T any](informer cache.SharedIndexInformer, on func(Event[T])) error {
	_, err := informer.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			if t, ok := obj.(T); ok {
				on(Event[T]{Type: Added, Obj: t, Initial: initial})
			}
		},
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(T)
			c, ok2 := cur.(T)
			if ok1 && ok2 {
				on(Event[T]{Type: Updated, Obj: c, Old: o})
			}
		},
		DeleteFunc: func(obj any) {
			_, missed := obj.(cache.DeletedFinalStateUnknown)
			if t, ok := Object[T](obj); ok {
				on(Event[T]{Type: Deleted, Obj: t, Missed: missed})
			}
		},
	})
	return err
}

// Loop follows objects of shared informers through a queue: the handlers,
// the queue and the sweep that every loop writes alike, so that a loop is
// its decisions and its Sync alone. Its own objects, T, are followed by
// Watch as Ref and Wants say; the objects of other informers whose changes
// concern them by WatchMapped.
type Loop[T any, R comparable] struct {
	// Name names the queue in logs and metrics.
	Name string
	// Ref is what the queue holds for an object, the reference its Sync
	// looks it up by; false for none.
	Ref func(T) (R, bool)
	// Wants says whether an addition (old is the zero T) or a change
	// queues the object; nil queues every one.
	Wants func(old, cur T) bool
	// Gone, if not nil, hears of each object deleted.
	Gone func(T)
	// Sync takes the object of a ref one step further.
	Sync func(ctx context.Context, ref R) error
	// Delay, if not 0, is how long a ref queued by a watch or a sweep
	// waits: every change within it costs one sync.
	Delay time.Duration
	// Sweep, if not 0, is how often every object List returns that Wants
	// as an addition is queued again: the safety net for a step that
	// failed, a restart, or an event the watch missed.
	Sweep time.Duration
	List  func() []T
	// Sweeper, if not nil, is the sweep instead, for a loop whose refs
	// are of more than one kind of object; it queues with Add.
	Sweeper func(ctx context.Context)
	// SweepFirst sweeps as Run starts, for a loop whose watches leave the
	// objects of the informers' initial lists to the sweep.
	SweepFirst bool
	// Workers sync in parallel, at least one.
	Workers int

	queue *refQueue[R]
}

func (l *Loop[T, R]) q() *refQueue[R] {
	if l.queue == nil {
		// Sync is looked up at each call, so that a test may replace it.
		l.queue = newQueue(l.Name, func(ctx context.Context, ref R) error { return l.Sync(ctx, ref) })
	}
	return l.queue
}

// Watch queues the objects of informer as Wants says, and tells Gone of
// those deleted. Call it once, before Run.
func (l *Loop[T, R]) Watch(informer cache.SharedIndexInformer) error {
	l.q()
	return Handle(informer, func(e Event[T]) {
		switch e.Type {
		case Added:
			var zero T
			l.offer(zero, e.Obj)
		case Updated:
			l.offer(e.Old, e.Obj)
		case Deleted:
			if l.Gone != nil {
				l.Gone(e.Obj)
			}
		}
	})
}

// WatchMapped queues the refs that refs maps each event of informer's
// objects to: the loop's objects that a change of another kind of object
// concerns (the volumes of a deleted claim, the pools of a class). Call it
// before Run.
func WatchMapped[S, T any, R comparable](l *Loop[T, R], informer cache.SharedIndexInformer, refs func(Event[S]) []R) error {
	l.q()
	return Handle(informer, func(e Event[S]) {
		for _, ref := range refs(e) {
			l.add(ref)
		}
	})
}

func (l *Loop[T, R]) offer(old, cur T) {
	if l.Wants != nil && !l.Wants(old, cur) {
		return
	}
	if ref, ok := l.Ref(cur); ok {
		l.add(ref)
	}
}

func (l *Loop[T, R]) add(ref R) {
	if l.Delay > 0 {
		l.q().AddAfter(ref, l.Delay)
		return
	}
	l.q().Add(ref)
}

// Add queues ref at once; AddAfter after d.
func (l *Loop[T, R]) Add(ref R)                       { l.q().Add(ref) }
func (l *Loop[T, R]) AddAfter(ref R, d time.Duration) { l.q().AddAfter(ref, d) }

// Len is the number of refs waiting.
func (l *Loop[T, R]) Len() int { return l.q().Len() }

// WaitForRoom blocks until fewer than room refs wait (refQueue.WaitForRoom).
func (l *Loop[T, R]) WaitForRoom(ctx context.Context, room int) bool {
	return l.q().WaitForRoom(ctx, room)
}

// Run syncs until ctx is done, sweeping every Sweep.
func (l *Loop[T, R]) Run(ctx context.Context) {
	if l.Sweep > 0 {
		sweep := l.Sweeper
		if sweep == nil {
			sweep = func(context.Context) {
				var zero T
				for _, t := range l.List() {
					l.offer(zero, t)
				}
			}
		}
		repeat := every
		if l.SweepFirst {
			repeat = nowAndEvery
		}
		go repeat(ctx, l.Sweep, sweep)
	}
	l.q().Run(ctx, max(1, l.Workers))
}

// NameRef refers to a cluster-scoped object by its name.
func NameRef[T metav1.Object](obj T) (string, bool) { return obj.GetName(), true }

// ListOf lists the objects of indexer that are T, for a Loop's sweep.
func ListOf[T any](indexer cache.Indexer) func() []T {
	return func() []T {
		var out []T
		for _, o := range indexer.List() {
			if t, ok := o.(T); ok {
				out = append(out, t)
			}
		}
		return out
	}
}
