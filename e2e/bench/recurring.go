package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/reclaimable/reclaimable/e2e/objects"
	"github.com/reclaimable/reclaimable/internal/wellknown"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The recurring-workload run: a fixed set of claim names that come back in
// random order, as CI jobs and runners do, on a class with reserveFor and a
// pool with room for all of them (a warm-up gives every name a volume). It measures how often a claim gets its
// own previous volume back, how often it is served warm from the pool, and
// claim created -> Bound.

// Recurring is the recurring-workload run's report.
type Recurring struct {
	Names       int    `json:"names"`
	Concurrency int    `json:"concurrency"`
	Cycles      int    `json:"cycles"`
	ReserveFor  string `json:"reserve_for"`
	// OwnPct is the share of claims that got their own previous volume,
	// among those whose previous volume was free when they came.
	OwnPct float64 `json:"own_pct"`
	// WarmPct is the share of claims served by a volume that existed
	// before them.
	WarmPct float64 `json:"warm_pct"`
	Bound   Summary `json:"claim_created_to_bound"`
	Failed  int     `json:"failed,omitempty"`
}

// The recurring-workload run's shape: its class (ours, with reserveFor), how
// many claim names come back, how many are in flight.
const (
	recurringClass       = "bench-recurring"
	recurringNames       = 20
	recurringConcurrency = 10
)

// recurring runs cycles claims named from names at concurrency, each name
// in flight at most once.
func (b *bench) recurring(ctx context.Context, names, concurrency, cycles int, reserveFor string) (*Recurring, error) {
	if err := b.recurringClass(ctx, recurringClass, map[string]string{wellknown.ReserveFor: reserveFor}); err != nil {
		return nil, err
	}
	var (
		mu       sync.Mutex
		busy     = map[int]bool{}
		last     = map[int]string{} // name -> its previous volume
		own, due int
		warm     int
		bound    []time.Duration
		rng      = rand.New(rand.NewPCG(1, 2))
	)
	pick := func() int {
		mu.Lock()
		defer mu.Unlock()
		for {
			n := rng.IntN(names)
			if !busy[n] {
				busy[n] = true
				return n
			}
		}
	}
	// Warm-up, not measured: every name once, so that the pool has a volume
	// for each name, as the run's premise wants.
	if err := b.warmUp(ctx, recurringClass, names, func(n int, volume string) {
		mu.Lock()
		last[n] = volume
		mu.Unlock()
	}); err != nil {
		return nil, err
	}

	_, errs := runCount(ctx, concurrency, cycles, &b.seq, func(ctx context.Context, _, _ int) (struct{}, error) {
		n := pick()
		defer func() { mu.Lock(); delete(busy, n); mu.Unlock() }()
		name := fmt.Sprintf("%s-%d", recurringClass, n)
		mu.Lock()
		prev := last[n]
		mu.Unlock()
		// Was the previous volume free for it (reserved, or Available)?
		prevFree := prev != "" && b.volumeFree(prev)
		t, err := b.claimCycle(ctx, b.ns, name, recurringClass)
		if err != nil {
			return struct{}{}, err
		}
		mu.Lock()
		defer mu.Unlock()
		if prevFree {
			due++
			if t.claim.volume == prev {
				own++
			}
		}
		if t.claim.hit {
			warm++
		}
		bound = append(bound, t.claim.bound.Sub(t.claim.created))
		last[n] = t.claim.volume
		return struct{}{}, nil
	})
	r := &Recurring{Names: names, Concurrency: concurrency, Cycles: len(bound), ReserveFor: reserveFor, Bound: Summarize(bound), Failed: len(errs)}
	if due > 0 {
		r.OwnPct = 100 * float64(own) / float64(due)
	}
	if len(bound) > 0 {
		r.WarmPct = 100 * float64(warm) / float64(len(bound))
	}
	if len(errs) > 0 {
		return r, errs[0]
	}
	return r, nil
}

// recurringClass creates class, ours, with the directory backend and extra
// parameters.
func (b *bench) recurringClass(ctx context.Context, class string, extra map[string]string) error {
	base := filepath.Join(filepath.Dir(b.base), class)
	if err := os.MkdirAll(base, 0o755); err != nil {
		return err
	}
	retain := corev1.PersistentVolumeReclaimRetain
	immediate := storagev1.VolumeBindingImmediate
	params := map[string]string{"backend": "directory", "baseDir": base, "source": "hostPath", "hostPath": base}
	for k, v := range extra {
		params[k] = v
	}
	_, err := b.client.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: class, Annotations: map[string]string{wellknown.ClassControllerID: controllerID}},
		Provisioner:       provisionerName,
		ReclaimPolicy:     &retain,
		VolumeBindingMode: &immediate,
		Parameters:        params,
	}, metav1.CreateOptions{})
	return err
}

// warmUp runs one cycle for each of names claim names of class, all at the
// same time, so that its pool has that many volumes; seen is told which
// volume each name had.
func (b *bench) warmUp(ctx context.Context, class string, names int, seen func(n int, volume string)) error {
	var next atomic.Int64
	if _, errs := runCount(ctx, names, names, &b.seq, func(ctx context.Context, _, _ int) (struct{}, error) {
		n := int(next.Add(1) - 1)
		t, err := b.claimCycle(ctx, b.ns, fmt.Sprintf("%s-%d", class, n), class)
		if err == nil {
			seen(n, t.claim.volume)
		}
		return struct{}{}, err
	}); len(errs) > 0 {
		return fmt.Errorf("warming the pool of %s up: %w", class, errs[0])
	}
	return nil
}

// OneOff is the one-off-names run's report for one reserveFor and
// reuseScope.
type OneOff struct {
	ReserveFor string `json:"reserve_for"`
	ReuseScope string `json:"reuse_scope"`
	Cycles     int    `json:"cycles"`
	// WarmPct is the share of claims served by a volume that existed
	// before them.
	WarmPct float64 `json:"warm_pct"`
	Bound   Summary `json:"claim_created_to_bound"`
	// The claims that went through the provisioner, by step: created ->
	// handed to the provisioner by the PV controller -> volume issued ->
	// Bound.
	HandedOff int     `json:"handed_off"`
	ToHandOff Summary `json:"created_to_handed_off"`
	ToIssue   Summary `json:"handed_off_to_issued"`
	ToBind    Summary `json:"issued_to_bound"`
	Failed    int     `json:"failed,omitempty"`
}

// oneOff measures what a reservation or a namespace scope costs a workload
// whose claim names never come back: on a class with reserveFor and
// reuseScope whose pool a warm-up gave names volumes, cycles claims of new
// names at concurrency. With a reservation or reuseScope namespace every
// free member names a claim that does not come back, so the provisioner
// hands each claim one; with neither, the PV controller binds a free member
// itself.
func (b *bench) oneOff(ctx context.Context, class string, names, concurrency, cycles int, reserveFor, scope string) (*OneOff, error) {
	if err := b.recurringClass(ctx, class, map[string]string{wellknown.ReserveFor: reserveFor, wellknown.ReuseScope: scope}); err != nil {
		return nil, err
	}
	if err := b.warmUp(ctx, class, names, func(int, string) {}); err != nil {
		return nil, err
	}
	var (
		mu                  sync.Mutex
		warm                int
		bound               []time.Duration
		toHand, toIss, toBd []time.Duration
	)
	_, errs := runCount(ctx, concurrency, cycles, &b.seq, func(ctx context.Context, _, seq int) (struct{}, error) {
		t, err := b.claimCycle(ctx, b.ns, fmt.Sprintf("%s-once-%d", class, seq), class)
		if err != nil {
			return struct{}{}, err
		}
		mu.Lock()
		defer mu.Unlock()
		if t.claim.hit {
			warm++
		}
		bound = append(bound, t.claim.bound.Sub(t.claim.created))
		if c := t.claim; !c.handedOff.IsZero() && !c.issued.IsZero() {
			toHand = append(toHand, c.handedOff.Sub(c.created))
			toIss = append(toIss, c.issued.Sub(c.handedOff))
			toBd = append(toBd, c.bound.Sub(c.issued))
		}
		return struct{}{}, nil
	})
	r := &OneOff{ReserveFor: reserveFor, ReuseScope: scope, Cycles: len(bound), Bound: Summarize(bound), Failed: len(errs),
		HandedOff: len(toHand), ToHandOff: Summarize(toHand), ToIssue: Summarize(toIss), ToBind: Summarize(toBd)}
	if len(bound) > 0 {
		r.WarmPct = 100 * float64(warm) / float64(len(bound))
	}
	if len(errs) > 0 {
		return r, errs[0]
	}
	return r, nil
}

// volumeFree reports whether the recorder last saw volume Available (free,
// or reserved by name).
func (b *bench) volumeFree(volume string) bool {
	b.rec.mu.Lock()
	defer b.rec.mu.Unlock()
	v := b.rec.volumes[volume]
	return v != nil && v.phase == corev1.VolumeAvailable
}

// claimCycle creates a claim of 1Gi of class in ns, waits until it is
// bound, deletes it and waits until its volume is back in the pool
// (released and Available, or reserved).
func (b *bench) claimCycle(ctx context.Context, ns, name, class string) (cycleTimes, error) {
	return b.claimCycleOf(ctx, ns, name, class, "1Gi")
}

// claimCycleOf is claimCycle with a claim of size, changed by mods.
func (b *bench) claimCycleOf(ctx context.Context, ns, name, class, size string, mods ...func(*corev1.PersistentVolumeClaim)) (cycleTimes, error) {
	ctx, cancel := context.WithTimeout(ctx, cycleTimeout)
	defer cancel()
	var t cycleTimes
	t.start = time.Now()
	created, err := b.client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, objects.NewClaim(ns, name, class, size, mods...), metav1.CreateOptions{})
	if err != nil {
		return t, fmt.Errorf("creating claim %s: %w", name, err)
	}
	t.ownerCreated = time.Now()
	uid := created.UID
	if err := b.rec.wait(ctx, func() bool { c := b.rec.claims[uid]; return c != nil && !c.bound.IsZero() }); err != nil {
		return t, fmt.Errorf("waiting for claim %s to be bound: %w", name, err)
	}
	if err := b.client.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return t, fmt.Errorf("deleting claim %s: %w", name, err)
	}
	t.ownerDeleted = time.Now()
	if err := b.rec.wait(ctx, func() bool { c := b.rec.claims[uid]; return !c.gone.IsZero() && !c.available.IsZero() }); err != nil {
		return t, fmt.Errorf("waiting for the volume of claim %s to be back in the pool: %w", name, err)
	}
	t.claim = b.rec.snapshot(uid)
	return t, nil
}
