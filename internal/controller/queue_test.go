package controller

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// A failing key is retried with back-off until it succeeds, then forgotten;
// keys added while waiting are synced once.
func TestQueueRetriesUntilSuccess(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var mu sync.Mutex
	calls := map[string]int{}
	succeeded := make(chan string, 10)
	q := newQueue[string]("test", func(_ context.Context, key string) error {
		mu.Lock()
		defer mu.Unlock()
		calls[key]++
		if key == "flaky" && calls[key] < 3 {
			return errors.New("not yet")
		}
		succeeded <- key
		return nil
	})
	q.Add("flaky")
	q.Add("steady")
	q.Add("steady")

	done := make(chan struct{})
	go func() { q.Run(ctx, 2); close(done) }()

	got := map[string]bool{}
	deadline := time.After(10 * time.Second)
	for len(got) < 2 {
		select {
		case key := <-succeeded:
			got[key] = true
		case <-deadline:
			t.Fatalf("keys synced successfully so far: %v", got)
		}
	}
	cancel()
	<-done

	mu.Lock()
	defer mu.Unlock()
	if calls["flaky"] != 3 {
		t.Errorf("flaky synced %d times, want 3 (two failures, one success)", calls["flaky"])
	}
	if calls["steady"] != 1 {
		t.Errorf("steady synced %d times, want 1: duplicate adds must be merged", calls["steady"])
	}
	if n := q.queue.NumRequeues("flaky"); n != 0 {
		t.Errorf("flaky still has %d requeues after success, want it forgotten", n)
	}
}

// A key whose sync waits comes back with the growing back-off of a failure,
// not at a fixed period, and is forgotten once the wait ends.
func TestQueueWaitBacksOff(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var mu sync.Mutex
	var at []time.Time
	done := make(chan struct{})
	q := newQueue[string]("test", func(_ context.Context, key string) error {
		mu.Lock()
		defer mu.Unlock()
		at = append(at, time.Now())
		if len(at) < 5 {
			return Wait("claim %s not bound yet", key)
		}
		close(done)
		return nil
	})
	q.Add("pv")
	stopped := make(chan struct{})
	go func() { q.Run(ctx, 1); close(stopped) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting key was not synced again five times")
	}
	cancel()
	<-stopped

	mu.Lock()
	defer mu.Unlock()
	// 20ms, 40ms, 80ms, 160ms: each pause at least the limiter's.
	for i := 1; i < len(at); i++ {
		if gap, least := at[i].Sub(at[i-1]), 20*time.Millisecond<<(i-1); gap < least {
			t.Errorf("sync %d came %v after the one before, want at least %v", i+1, gap, least)
		}
	}
	if n := q.queue.NumRequeues("pv"); n != 0 {
		t.Errorf("%d requeues left after the wait ended, want it forgotten", n)
	}
	if !IsWait(Wait("x")) || IsWait(errors.New("x")) {
		t.Error("IsWait tells a wait from a failure wrongly")
	}
}

func TestOptionsValidate(t *testing.T) {
	// The flags' defaults.
	valid := func() Options {
		var o Options
		o.AddFlags(pflag.NewFlagSet("test", pflag.ContinueOnError))
		return o
	}
	for name, tc := range map[string]struct {
		mutate func(*Options)
		ok     bool
	}{
		"defaults":                   {func(*Options) {}, true},
		"empty controller id":        {func(o *Options) { o.ControllerID = "" }, false},
		"id not a label value":       {func(o *Options) { o.ControllerID = "a/b" }, false},
		"id too long":                {func(o *Options) { o.ControllerID = string(make([]byte, 64)) }, false},
		"no provisioner name":        {func(o *Options) { o.ProvisionerName = "" }, false},
		"zero qps":                   {func(o *Options) { o.QPS = 0 }, false},
		"renew deadline above lease": {func(o *Options) { o.LeaderElection.RenewDeadline.Duration = 20 * time.Second }, false},
		"bad timings, no election": {func(o *Options) {
			o.LeaderElection.LeaderElect = false
			o.LeaderElection.RenewDeadline.Duration = 20 * time.Second
		}, true},
		"a lock other than leases":  {func(o *Options) { o.LeaderElection.ResourceLock = "configmaps" }, false},
		"lease name prefix":         {func(o *Options) { o.LeaderElection.ResourceName = "ci-cache" }, true},
		"lease name prefix invalid": {func(o *Options) { o.LeaderElection.ResourceName = "CI_cache" }, false},
	} {
		t.Run(name, func(t *testing.T) {
			o := valid()
			tc.mutate(&o)
			if err := o.Validate(); (err == nil) != tc.ok {
				t.Errorf("Validate() = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

// WaitForRoom goes on only while fewer than room keys wait, and gives up
// when its context ends or the queue shuts down.
func TestWaitForRoom(t *testing.T) {
	q := newQueue[string]("test", func(context.Context, string) error { return nil })
	q.Add("a")
	q.Add("b")
	if !q.WaitForRoom(context.Background(), 3) {
		t.Fatal("no room with 2 keys waiting and room for 3")
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if q.WaitForRoom(ended, 2) {
		t.Fatal("room found with 2 keys waiting and room for 2")
	}
	// A worker takes a key: there is room again.
	k, _ := q.queue.Get()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !q.WaitForRoom(ctx, 2) {
		t.Fatal("no room after a key was taken")
	}
	q.queue.Done(k)
	q.Add("c")
	q.queue.ShutDown()
	if q.WaitForRoom(ctx, 2) {
		t.Fatal("room found in a queue shut down")
	}
}
