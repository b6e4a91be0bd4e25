package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// The CI-runs-by-key run: jobs of a few pipelines (cache keys) that run a
// few at a time, as a CI system's do, each with a claim of a generated
// name, on a pool with room for every key. It measures how often a job
// gets a volume last used under its own key, another key's (warm, but
// someone else's cache), or an empty one: without a key (the baseline),
// and with keyLabel under each keyPolicy.

// KeyRuns is the CI-runs-by-key run's report for one pool setting.
type KeyRuns struct {
	// Setting: "none" (no keyLabel), or the keyPolicy with keyLabel.
	Setting     string `json:"setting"`
	Keys        int    `json:"keys"`
	Concurrency int    `json:"concurrency"`
	MaxVolumes  int    `json:"max_volumes"`
	Runs        int    `json:"runs"`
	// OwnKeyPct: runs that got a volume last used under their key;
	// OtherKeyPct: one last used under another; EmptyPct: one no run had
	// used (a new volume).
	OwnKeyPct   float64 `json:"own_key_pct"`
	OtherKeyPct float64 `json:"other_key_pct"`
	EmptyPct    float64 `json:"empty_pct"`
	// Volumes the pool had at the end.
	Volumes int     `json:"volumes"`
	Bound   Summary `json:"claim_created_to_bound"`
	Failed  int     `json:"failed,omitempty"`
}

// The run's shape, as docs/ci.md's example pools: five pipelines, three
// jobs in flight, room for eight volumes.
const (
	keyRunKeys        = 5
	keyRunConcurrency = 3
	keyRunMaxVolumes  = 8
)

// keySettings are the pool settings the run compares: the baseline
// first.
var keySettings = []string{"none", wellknown.KeyPolicyPrefer, wellknown.KeyPolicyRequire}

func (b *bench) keyRuns(ctx context.Context, r *Report) {
	if b.cfg.KeyCycles == 0 {
		return
	}
	for i, setting := range keySettings {
		b.logf("CI runs by key: %d keys, %d in flight, %d volumes at most, %d runs, key setting %s", keyRunKeys, keyRunConcurrency, keyRunMaxVolumes, b.cfg.KeyCycles, setting)
		k, err := b.keyRun(ctx, fmt.Sprintf("bench-keys-%d", i), setting, b.cfg.KeyCycles)
		if err != nil {
			b.note(r, "CI runs by key, %s: %v", setting, err)
		}
		if k != nil {
			r.Keys = append(r.Keys, *k)
		}
	}
}

// keyRun runs a warm-up job per key, then runs jobs of keys drawn at
// random, keyRunConcurrency at a time, on class, a class of the default
// reserveFor and reuseScope (namespace) with keyLabel and keyPolicy as
// setting says. Whose a volume was is the run's own record: the last key a
// job of the run had it under.
func (b *bench) keyRun(ctx context.Context, class, setting string, runs int) (*KeyRuns, error) {
	params := map[string]string{wellknown.MaxVolumes: fmt.Sprint(keyRunMaxVolumes)}
	if setting != "none" {
		params[wellknown.KeyLabel], params[wellknown.KeyPolicy] = wellknown.CacheKeyLabel, setting
	}
	if err := b.recurringClass(ctx, class, params); err != nil {
		return nil, err
	}
	var (
		mu                   sync.Mutex
		lastKey              = map[string]int{} // volume -> the key a job last had it under
		own, other, empty, n int
		bound                []time.Duration
		rng                  = rand.New(rand.NewPCG(3, 4))
	)
	job := func(ctx context.Context, key, seq int) error {
		t, err := b.claimCycleOf(ctx, b.ns, fmt.Sprintf("%s-job-%d", class, seq), class, "1Gi", func(c *corev1.PersistentVolumeClaim) {
			c.Labels = map[string]string{wellknown.CacheKeyLabel: fmt.Sprintf("pipeline-%d", key)}
		})
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		switch last, used := lastKey[t.claim.volume]; {
		case !used:
			empty++
		case last == key:
			own++
		default:
			other++
		}
		lastKey[t.claim.volume] = key
		n++
		bound = append(bound, t.claim.bound.Sub(t.claim.created))
		return nil
	}
	// Warm-up, not measured: a job of each key, all at once.
	var next atomic.Int64
	if _, errs := runCount(ctx, keyRunKeys, keyRunKeys, &b.seq, func(ctx context.Context, _, seq int) (struct{}, error) {
		return struct{}{}, job(ctx, int(next.Add(1)-1), seq)
	}); len(errs) > 0 {
		return nil, fmt.Errorf("warming the pool of %s up: %w", class, errs[0])
	}
	mu.Lock()
	own, other, empty, n, bound = 0, 0, 0, 0, nil
	mu.Unlock()
	_, errs := runCount(ctx, keyRunConcurrency, runs, &b.seq, func(ctx context.Context, _, seq int) (struct{}, error) {
		mu.Lock()
		key := rng.IntN(keyRunKeys)
		mu.Unlock()
		return struct{}{}, job(ctx, key, seq)
	})
	k := &KeyRuns{Setting: setting, Keys: keyRunKeys, Concurrency: keyRunConcurrency, MaxVolumes: keyRunMaxVolumes,
		Runs: n, Volumes: len(lastKey), Bound: Summarize(bound), Failed: len(errs)}
	if n > 0 {
		k.OwnKeyPct, k.OtherKeyPct, k.EmptyPct = 100*float64(own)/float64(n), 100*float64(other)/float64(n), 100*float64(empty)/float64(n)
	}
	if len(errs) > 0 {
		return k, errs[0]
	}
	return k, nil
}

// keysSection writes the CI-runs-by-key run.
func (r *Report) keysSection(p printer) {
	if len(r.Keys) == 0 {
		return
	}
	k := r.Keys[0]
	p("\n### CI runs by key (%d keys drawn at random, %d jobs in flight, at most %d volumes, every claim a new name, after a warm-up job per key)\n\n", k.Keys, k.Concurrency, k.MaxVolumes)
	p("| keyLabel, keyPolicy | runs | own key's volume | another key's | empty | volumes at the end | claim created -> Bound p50 | p99 |\n|---|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, k := range r.Keys {
		setting := "no keyLabel (baseline)"
		if k.Setting != "none" {
			setting = "keyLabel, " + k.Setting
		}
		p("| %s | %d | %.1f%% | %.1f%% | %.1f%% | %d | %s | %s |\n", setting, k.Runs, k.OwnKeyPct, k.OtherKeyPct, k.EmptyPct, k.Volumes, fmtMs(k.Bound.P50ms), fmtMs(k.Bound.P99ms))
	}
	for _, k := range r.Keys {
		if k.Failed > 0 {
			p("\n%s: %d runs failed.\n", k.Setting, k.Failed)
		}
	}
}

// keyTargets adds the run's target: with keyLabel, at least 95% of jobs
// get their key's volume, under the policy that holds to it (Require),
// the baseline and Prefer beside it for reference.
func (r *Report) keyTargets(add func(name, goal, measured string, met *bool)) {
	if r.Settings.KeyCycles == 0 {
		return
	}
	figures := map[string]KeyRuns{}
	for _, k := range r.Keys {
		figures[k.Setting] = k
	}
	name := "CI jobs that got their key's volume, keyLabel with keyPolicy Require (Prefer; no keyLabel)"
	req, ok := figures[wellknown.KeyPolicyRequire]
	if !ok || req.Runs == 0 {
		add(name, ">= 95%", "not measured", nil)
		return
	}
	met := req.OwnKeyPct >= 95
	add(name, ">= 95%", fmt.Sprintf("%.1f%% (%.1f%%; %.1f%%)", req.OwnKeyPct, figures[wellknown.KeyPolicyPrefer].OwnKeyPct, figures["none"].OwnKeyPct), &met)
}
