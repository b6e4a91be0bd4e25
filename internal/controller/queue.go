package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// refQueue is a typed, rate-limited workqueue with the worker loop of
// kubernetes/sample-controller: a ref is taken with Get, handed to sync, and
// always marked Done; a failed sync is retried with per-ref exponential
// back-off, a successful one resets the back-off.
//
// Event handlers only ever call Add or AddAfter. Refs are deduplicated while
// they wait, so a burst of events for one object costs one sync.
type refQueue[T comparable] struct {
	name  string
	queue workqueue.TypedRateLimitingInterface[T]
	sync  func(context.Context, T) error
}

// newQueue returns a queue whose workers call sync for every ref.
func newQueue[T comparable](name string, sync func(ctx context.Context, ref T) error) *refQueue[T] {
	limiter := workqueue.NewTypedItemExponentialFailureRateLimiter[T](20*time.Millisecond, 2*time.Minute)
	return &refQueue[T]{
		name: name,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(limiter, workqueue.TypedRateLimitingQueueConfig[T]{
			Name: name,
		}),
		sync: sync,
	}
}

// Add queues ref for a sync as soon as a worker is free.
func (q *refQueue[T]) Add(ref T) { q.queue.Add(ref) }

// AddAfter queues ref for a sync after d.
func (q *refQueue[T]) AddAfter(ref T, d time.Duration) { q.queue.AddAfter(ref, d) }

// Len is the number of refs waiting.
func (q *refQueue[T]) Len() int { return q.queue.Len() }

// roomPoll is how often WaitForRoom looks at the queue's length: the
// client-go queue tells no one when a ref leaves it.
const roomPoll = 10 * time.Millisecond

// WaitForRoom blocks until fewer than room refs wait, and reports false if
// ctx ends or the queue shuts down first. A sweep that queues every object
// of a large cache at once grows the queue's maps (its dirty set, its
// metrics' add times) to the size of the cache, and Go never shrinks a map:
// with 20,000 pods and claims, some 10 MB kept for good. A sweep that waits
// for room before each ref keeps them as small as room.
func (q *refQueue[T]) WaitForRoom(ctx context.Context, room int) bool {
	if q.queue.Len() < room {
		return true
	}
	tick := time.NewTicker(roomPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
			if q.queue.ShuttingDown() {
				return false
			}
			if q.queue.Len() < room {
				return true
			}
		}
	}
}

// Run starts workers and blocks until ctx is done, then shuts the queue down
// and waits for the syncs in flight to finish.
func (q *refQueue[T]) Run(ctx context.Context, workers int) {
	defer utilruntime.HandleCrashWithContext(ctx)
	logger := klog.FromContext(ctx).WithValues("queue", q.name)
	ctx = klog.NewContext(ctx, logger)

	done := make(chan struct{}, workers)
	for range workers {
		go func() {
			defer func() { done <- struct{}{} }()
			wait.UntilWithContext(ctx, q.work, time.Second)
		}()
	}
	<-ctx.Done()
	q.queue.ShutDown()
	for range workers {
		<-done
	}
}

func (q *refQueue[T]) work(ctx context.Context) {
	for q.next(ctx) {
	}
}

func (q *refQueue[T]) next(ctx context.Context) bool {
	ref, shutdown := q.queue.Get()
	if shutdown {
		return false
	}
	defer q.queue.Done(ref)

	if err := q.sync(ctx, ref); err != nil {
		if ctx.Err() != nil {
			return false
		}
		if w := (waiting{}); errors.As(err, &w) {
			klog.FromContext(ctx).V(4).Info("Waiting, will look again", "ref", ref, "reason", w.reason, "retries", q.queue.NumRequeues(ref))
			q.queue.AddRateLimited(ref)
			return true
		}
		klog.FromContext(ctx).Error(err, "Sync failed, will retry", "ref", ref, "retries", q.queue.NumRequeues(ref))
		q.queue.AddRateLimited(ref)
		return true
	}
	q.queue.Forget(ref)
	return true
}

// Wait is what a sync returns when its object waits for something that no
// event it is queued for will announce (a claim it does not watch being
// bound, a finalizer another controller holds): the ref comes back after
// the queue's per-ref back-off, which grows while the wait lasts, instead
// of at a fixed period. It is not logged as a failure.
func Wait(format string, args ...any) error { return waiting{reason: fmt.Sprintf(format, args...)} }

// IsWait reports whether err is a sync's Wait.
func IsWait(err error) bool { return errors.As(err, &waiting{}) }

type waiting struct{ reason string }

func (w waiting) Error() string { return "waiting: " + w.reason }

// every calls sweep every period until ctx is done, the first time one
// period from now: a sweep is the safety net for events a replica missed,
// and at start the informers' initial lists have just queued every object.
func every(ctx context.Context, period time.Duration, sweep func(context.Context)) {
	ticker := time.NewTicker(period)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			sweep(ctx)
		}
	}
}

// nowAndEvery calls sweep at once, then as every does: for a controller
// whose handlers leave the objects of the initial lists to its sweep.
func nowAndEvery(ctx context.Context, period time.Duration, sweep func(context.Context)) {
	sweep(ctx)
	every(ctx, period, sweep)
}
