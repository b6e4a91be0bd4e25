package podwatcher

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/reclaimable/reclaimable/internal/controller"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// The handlers leave the objects of the initial lists to the sweep Run
// starts with: queued all at once, tens of thousands of keys would size
// the queue's maps for good.
func TestInitialListIsLeftToTheSweep(t *testing.T) {
	pod := annotatedPod("p", "uid-p", ask("cache", "true", validYAML))
	claim := managedClaim("p-cache", kindPod, "p", "uid-p")
	f := newFixture(t, []runtime.Object{pod, claim})
	f.ownerAdded(kindPod, controller.PodRecordOf(pod), true)
	f.claimAdded(claim, true)
	if got := f.c.queue.Len(); got != 0 {
		t.Fatalf("queue length after the initial list = %d, want 0", got)
	}
	f.ownerAdded(kindPod, controller.PodRecordOf(pod), false)
	f.claimAdded(claim, false)
	if got := f.c.queue.Len(); got != 2 {
		t.Fatalf("queue length after a pod and a claim added later = %d, want 2", got)
	}
}

// A sweep queues gated pods first, then the owners that ask for claims,
// then the claims, never more than sweepRoom keys at a time, and skips
// pods that ask for nothing.
func TestSweepQueuesGatedFirstWithinRoom(t *testing.T) {
	objs := []runtime.Object{
		annotatedPod("asks", "uid-asks", ask("cache", "true", validYAML)),
		annotatedPod("plain", "uid-plain", map[string]string{"x": "y"}),
		gated(annotatedPod("held", "uid-held", nil), wellknown.ClaimsGate),
	}
	claims := sweepRoom + 50
	for i := range claims {
		objs = append(objs, managedClaim(fmt.Sprintf("c-%d", i), kindPod, "gone", "uid-gone"))
	}
	f := newFixture(t, objs)
	var mu sync.Mutex
	var order []ref
	most := 0
	f.c.queue.Sync = func(_ context.Context, k ref) error {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, k)
		most = max(most, f.c.queue.Len())
		return nil
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	swept := make(chan struct{})
	go func() { f.c.sweep(ctx); close(swept) }()
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return f.c.queue.Len() >= sweepRoom, nil }); err != nil {
		t.Fatalf("the sweep queued %d keys", f.c.queue.Len())
	}
	select {
	case <-swept:
		t.Fatalf("the sweep finished with no worker, leaving %d keys waiting (room %d)", f.c.queue.Len(), sweepRoom)
	default:
	}
	if got := f.c.queue.Len(); got != sweepRoom {
		t.Fatalf("%d keys waiting, room %d", got, sweepRoom)
	}

	f.c.queue.Sweep = 0 // the workers alone: the sweep above is the one under test
	go f.c.queue.Run(ctx)
	want := 2 + claims
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return len(order) >= want, nil
	}); err != nil {
		t.Fatalf("%d keys synced, want %d", len(order), want)
	}
	<-swept
	mu.Lock()
	defer mu.Unlock()
	if order[0] != podRef("held") || order[1] != podRef("asks") {
		t.Errorf("first keys synced %v, want the gated pod, then the pod asking for a claim", order[:2])
	}
	for _, k := range order[2:] {
		if k.Kind != kindClaim {
			t.Errorf("%v synced among the claims", k)
		}
	}
	if most > sweepRoom {
		t.Errorf("%d keys waited at once, room %d", most, sweepRoom)
	}
}
