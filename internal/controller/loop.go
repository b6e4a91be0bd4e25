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

// Loop follows the objects of one shared informer through a Queue: the
// handlers, the queue and the sweep that every loop over an informer
// writes alike, so that a loop is its decisions and its Sync alone.
type Loop[T any, K comparable] struct {
	// Name names the queue in logs and metrics.
	Name string
	// Key is what the queue holds for an object; false for none.
	Key func(T) (K, bool)
	// Wants says whether an addition (old is the zero T) or a change
	// queues the object; nil queues every one.
	Wants func(old, cur T) bool
	// Gone, if not nil, hears of each object deleted.
	Gone func(T)
	// Sync takes the object of a key one step further.
	Sync func(ctx context.Context, key K) error
	// Sweep, if not 0, is how often every object List returns that Wants
	// as an addition is queued again: the safety net for a step that
	// failed, a restart, or an event the watch missed.
	Sweep time.Duration
	List  func() []T
	// Workers sync in parallel, at least one.
	Workers int

	queue *Queue[K]
}

func (l *Loop[T, K]) q() *Queue[K] {
	if l.queue == nil {
		l.queue = NewQueue(l.Name, l.Sync)
	}
	return l.queue
}

// Watch queues the objects of informer as Wants says. Call it once,
// before Run.
func (l *Loop[T, K]) Watch(informer cache.SharedIndexInformer) error {
	l.q()
	_, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if cur, ok := Object[T](obj); ok {
				var zero T
				l.offer(zero, cur)
			}
		},
		UpdateFunc: func(old, cur any) {
			o, ok1 := Object[T](old)
			c, ok2 := Object[T](cur)
			if ok1 && ok2 {
				l.offer(o, c)
			}
		},
		DeleteFunc: func(obj any) {
			if t, ok := Object[T](obj); ok && l.Gone != nil {
				l.Gone(t)
			}
		},
	})
	return err
}

func (l *Loop[T, K]) offer(old, cur T) {
	if l.Wants != nil && !l.Wants(old, cur) {
		return
	}
	if key, ok := l.Key(cur); ok {
		l.q().Add(key)
	}
}

// Add queues key; AddAfter after d.
func (l *Loop[T, K]) Add(key K)                       { l.q().Add(key) }
func (l *Loop[T, K]) AddAfter(key K, d time.Duration) { l.q().AddAfter(key, d) }

// Run syncs until ctx is done, sweeping every Sweep.
func (l *Loop[T, K]) Run(ctx context.Context) {
	if l.Sweep > 0 {
		go Every(ctx, l.Sweep, func(context.Context) {
			var zero T
			for _, t := range l.List() {
				l.offer(zero, t)
			}
		})
	}
	l.q().Run(ctx, max(1, l.Workers))
}

// NameKey keys a cluster-scoped object by its name.
func NameKey[T metav1.Object](obj T) (string, bool) { return obj.GetName(), true }

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
