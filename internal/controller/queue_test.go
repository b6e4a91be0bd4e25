package controller

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// A failing key is retried with back-off until it succeeds, then forgotten;
// keys added while waiting are synced once.
func TestQueueRetriesUntilSuccess(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var mu sync.Mutex
	calls := map[string]int{}
	succeeded := make(chan string, 10)
	q := NewQueue[string]("test", func(_ context.Context, key string) error {
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

func TestOptionsValidate(t *testing.T) {
	valid := func() Options {
		return Options{ControllerID: "reclaimable", ProvisionerName: "vendor/reclaimable", QPS: 50, Burst: 100, EventQPS: 20, EventBurst: 50,
			LeaderElect: true, LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}
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
		"renew deadline above lease": {func(o *Options) { o.RenewDeadline = 20 * time.Second }, false},
		"bad timings, no election":   {func(o *Options) { o.LeaderElect = false; o.RenewDeadline = 20 * time.Second }, true},
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
