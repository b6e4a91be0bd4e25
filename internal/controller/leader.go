package controller

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// errLeaseLost ends the process: a replica that lost its lease may hold
// stale state, and a fresh start is the simplest way to drop it.
var errLeaseLost = errors.New("lost the leader lease")

// runLeading runs c while this replica holds c's Lease, or directly when
// leader election is off. Each controller has a Lease of its own, named
// "<controller-id>-<controller>" (--leader-elect-resource-name replaces the
// controller ID), so that controllers deployed apart and together elect
// the same way.
func (e *Env) runLeading(ctx context.Context, c Runnable) error {
	leading := e.leading.WithLabelValues(c.Name())
	if !e.LeaderElection.LeaderElect {
		leading.Set(1)
		defer leading.Set(0)
		return c.Run(ctx)
	}
	leading.Set(0)

	// The elector does not wait for OnStartedLeading to return, so the
	// controller's result comes back on a channel; a controller that fails
	// while leading cancels the election, which releases the lease.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	runDone := make(chan error, 1)
	var mu sync.Mutex
	running, finished := false, false
	logger := klog.FromContext(ctx)
	identity, err := newIdentity()
	if err != nil {
		return err
	}
	lease := e.leaseName(c.Name())
	elector, err := e.elector(ctx, c.Name(), identity, leaderelection.LeaderCallbacks{
		OnStartedLeading: func(ctx context.Context) {
			mu.Lock()
			if finished { // the election ended before this goroutine started
				mu.Unlock()
				return
			}
			running = true
			mu.Unlock()
			leading.Set(1)
			logger.Info("Started leading", "lease", lease, "identity", identity)
			err := c.Run(ctx)
			if err != nil {
				cancel()
			}
			runDone <- err
		},
		OnStoppedLeading: func() {
			leading.Set(0)
			logger.Info("Stopped leading", "lease", lease, "identity", identity)
		},
	})
	if err != nil {
		return err
	}
	elector.Run(ctx)
	mu.Lock()
	finished = true
	wasRunning := running
	mu.Unlock()
	if wasRunning {
		if err := <-runDone; err != nil {
			return err
		}
	}
	if ctx.Err() == nil {
		return errLeaseLost
	}
	return nil
}

// newIdentity names this replica in a Lease: its host and a UUID.
func newIdentity() (string, error) {
	host, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("reading hostname for the leader identity: %w", err)
	}
	return host + "_" + string(uuid.NewUUID()), nil
}

// elector elects a leader for the controller called name on its Lease, as
// replica id, with callbacks; it logs the leaders of other replicas.
func (e *Env) elector(ctx context.Context, name, id string, callbacks leaderelection.LeaderCallbacks) (*leaderelection.LeaderElector, error) {
	logger := klog.FromContext(ctx)
	lease := e.leaseName(name)
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, e.leaseNamespace(), lease,
		e.Client.CoreV1(), e.Client.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: id})
	if err != nil {
		return nil, fmt.Errorf("creating lease lock: %w", err)
	}
	watchdog := leaderelection.NewLeaderHealthzAdaptor(e.LeaderElection.RenewDeadline.Duration)
	e.health.addCheck(name+"-leader", watchdog.Check)
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		Name:            lease,
		LeaseDuration:   e.LeaderElection.LeaseDuration.Duration,
		RenewDeadline:   e.LeaderElection.RenewDeadline.Duration,
		RetryPeriod:     e.LeaderElection.RetryPeriod.Duration,
		ReleaseOnCancel: true,
		WatchDog:        watchdog,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: callbacks.OnStartedLeading,
			OnStoppedLeading: callbacks.OnStoppedLeading,
			OnNewLeader: func(current string) {
				if current != id {
					logger.Info("Another replica leads", "lease", lease, "leader", current)
				}
			},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("creating leader elector: %w", err)
	}
	return elector, nil
}
