package controller

import (
	"context"
	"errors"
	"testing"
	"time"
)

type fakeRunnable struct {
	name    string
	err     error
	started chan struct{}
	stopped chan struct{}
}

func newFakeRunnable(name string, err error) *fakeRunnable {
	return &fakeRunnable{name: name, err: err, started: make(chan struct{}), stopped: make(chan struct{})}
}

func (f *fakeRunnable) Name() string { return f.name }

func (f *fakeRunnable) Run(ctx context.Context) error {
	close(f.started)
	defer close(f.stopped)
	if f.err != nil {
		return f.err
	}
	<-ctx.Done()
	return nil
}

func awaitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not happen", what)
	}
}

// The group takes the first one's name, so its Lease, and runs all until
// ctx is done.
func TestTogetherRunsAllUnderTheFirstName(t *testing.T) {
	a, b := newFakeRunnable("provisioner", nil), newFakeRunnable("poolmanager", nil)
	g := Together(a, b)
	if g.Name() != "provisioner" {
		t.Errorf("Name() = %q, want provisioner", g.Name())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	awaitClosed(t, a.started, "the first starting")
	awaitClosed(t, b.started, "the second starting")
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run() = %v, want nil once ctx is done", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after ctx was done")
	}
}

// One failing stops the others, and Run says which failed.
func TestTogetherStopsTheRestWhenOneFails(t *testing.T) {
	boom := errors.New("boom")
	a, b := newFakeRunnable("provisioner", nil), newFakeRunnable("poolmanager", boom)
	err := Together(a, b).Run(context.Background())
	if !errors.Is(err, boom) || err.Error() != "poolmanager: boom" {
		t.Errorf("Run() = %v, want poolmanager: boom", err)
	}
	awaitClosed(t, a.stopped, "the other stopping")
}

type startingRunnable struct {
	*fakeRunnable
	startErr error
	started  bool
}

func (s *startingRunnable) Start(context.Context) error {
	s.started = true
	return s.startErr
}

// A member's Start comes before any member runs; one that fails runs none,
// and the error names no member twice.
func TestTogetherStartsBeforeRunning(t *testing.T) {
	boom := errors.New("cache did not start")
	first := &startingRunnable{fakeRunnable: newFakeRunnable("provisioner", nil), startErr: boom}
	second := newFakeRunnable("poolmanager", nil)
	err := Together(first, second).Run(context.Background())
	if !first.started || !errors.Is(err, boom) || err.Error() != boom.Error() {
		t.Errorf("Run() = %v (started %v), want the Start error as it is", err, first.started)
	}
	select {
	case <-second.started:
		t.Error("a member ran although a Start failed")
	default:
	}
}
