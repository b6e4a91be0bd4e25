package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/reclaimable/reclaimable/apis/reclaimable/v1alpha1"
	"github.com/reclaimable/reclaimable/client/clientset/versioned"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// The made-ahead run: claims of a size no member of their pool has, the
// pool misses of today, first on a class without a VolumePool (each claim
// waits for a new volume), then on one whose pool keeps members that fit
// ready (minAvailable at the run's concurrency, a template larger than any
// claim). It measures claim created -> Bound for both.

// MadeAhead is the made-ahead run's report.
type MadeAhead struct {
	Concurrency  int `json:"concurrency"`
	Cycles       int `json:"cycles"`
	MinAvailable int `json:"min_available"`
	// Without: every claim a new volume, on a class without a pool.
	Without Summary `json:"without_claim_created_to_bound"`
	// With: the same claims on a class whose pool keeps members ready.
	With Summary `json:"with_claim_created_to_bound"`
	// WithWarmPct is the share of claims of the second part served by a
	// volume that existed before them.
	WithWarmPct float64 `json:"with_warm_pct"`
	Failed      int     `json:"failed,omitempty"`
}

// The made-ahead run's classes, and the capacity of its members made ahead.
const (
	missClass     = "bench-miss"
	aheadClass    = "bench-ahead"
	aheadCapacity = "4Gi"
)

// madeAhead runs cycles claims at concurrency on each class; the claims ask
// for strictly growing sizes from 2 GiB, so that no volume of an earlier
// one fits a later one.
func (b *bench) madeAhead(ctx context.Context, cycles, concurrency int) (*MadeAhead, error) {
	r := &MadeAhead{Concurrency: concurrency, Cycles: cycles, MinAvailable: concurrency}
	// Released volumes go back to the pool free to any claim: no
	// reservation or hold keeps a member from the next claim.
	free := map[string]string{wellknown.ReserveFor: "0", wellknown.ReuseScope: wellknown.ReuseScopeCluster}
	var size atomic.Int64
	run := func(class string) (Summary, float64, int) {
		return b.boundRun(ctx, concurrency, cycles, func(ctx context.Context, seq int) (cycleTimes, error) {
			return b.claimCycleOf(ctx, b.ns, fmt.Sprintf("%s-%d", class, seq), class, fmt.Sprintf("%dMi", 2048+size.Add(1)))
		})
	}

	if err := b.recurringClass(ctx, missClass, free); err != nil {
		return nil, err
	}
	var failed int
	r.Without, _, failed = run(missClass)
	r.Failed += failed

	if err := b.recurringClass(ctx, aheadClass, free); err != nil {
		return nil, err
	}
	pools, err := versioned.NewForConfig(b.cluster.Config)
	if err != nil {
		return nil, err
	}
	if _, err := pools.ReclaimableV1alpha1().VolumePools().Create(ctx, &v1alpha1.VolumePool{
		ObjectMeta: metav1.ObjectMeta{Name: aheadClass},
		Spec: v1alpha1.VolumePoolSpec{StorageClassName: aheadClass,
			MinAvailable: ptr.To(int32(concurrency)), MaxVolumes: ptr.To(int32(4 * concurrency)),
			Template: &v1alpha1.VolumePoolTemplate{Capacity: ptr.To(resource.MustParse(aheadCapacity))}},
	}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	// Measured from a pool that is ready, as an administrator would
	// create it ahead of the workload.
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := pools.ReclaimableV1alpha1().VolumePools().Get(ctx, aheadClass, metav1.GetOptions{})
		return err == nil && int(p.Status.Free) >= concurrency, nil
	}); err != nil {
		return r, fmt.Errorf("waiting for %d members made ahead: %w", concurrency, err)
	}
	r.With, r.WithWarmPct, failed = run(aheadClass)
	r.Failed += failed
	if r.Failed > 0 {
		return r, fmt.Errorf("%d cycles failed", r.Failed)
	}
	return r, nil
}

// boundRun runs cycles of cycle at concurrency and sums up claim created ->
// Bound, the share of claims served by a volume that existed before them,
// and how many cycles failed.
func (b *bench) boundRun(ctx context.Context, concurrency, cycles int, cycle func(ctx context.Context, seq int) (cycleTimes, error)) (Summary, float64, int) {
	var (
		mu    sync.Mutex
		bound []time.Duration
		hits  int
	)
	_, errs := runCount(ctx, concurrency, cycles, &b.seq, func(ctx context.Context, _, seq int) (struct{}, error) {
		t, err := cycle(ctx, seq)
		if err != nil {
			return struct{}{}, err
		}
		mu.Lock()
		defer mu.Unlock()
		bound = append(bound, t.claim.bound.Sub(t.claim.created))
		if t.claim.hit {
			hits++
		}
		return struct{}{}, nil
	})
	pct := 0.0
	if len(bound) > 0 {
		pct = 100 * float64(hits) / float64(len(bound))
	}
	return Summarize(bound), pct, len(errs)
}
