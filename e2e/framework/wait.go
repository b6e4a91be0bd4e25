package framework

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Interval is how often Eventually and Consistently evaluate a condition.
const Interval = 50 * time.Millisecond

// Eventually polls cond until it returns true, and fails the test with what
// if it has not by timeout or if it returns an error.
func Eventually(t testing.TB, timeout time.Duration, cond func(ctx context.Context) (bool, error), what string) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), Interval, timeout, true, func(ctx context.Context) (bool, error) {
		ok, err := cond(ctx)
		last = err
		return ok, err
	})
	if err != nil {
		if last != nil {
			t.Fatalf("waiting for %s: %v", what, last)
		}
		t.Fatalf("timed out after %s waiting for %s", timeout, what)
	}
}

// Consistently evaluates cond for the whole duration and fails the test
// with what as soon as it returns false or an error.
func Consistently(t testing.TB, duration time.Duration, cond func(ctx context.Context) (bool, error), what string) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(duration)
	ticker := time.NewTicker(Interval)
	defer ticker.Stop()
	for {
		ok, err := cond(ctx)
		if err != nil {
			t.Fatalf("checking that %s: %v", what, err)
		}
		if !ok {
			t.Fatalf("expected %s, it did not hold", what)
		}
		if time.Now().After(deadline) {
			return
		}
		<-ticker.C
	}
}
