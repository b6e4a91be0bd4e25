package bench

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/reclaimable/reclaimable/e2e/objects"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// The scheduling phase times what a workload waits for before it can
// start: pod created -> pod scheduled. An annotated pod exists before its
// claim, and without the claims gate the scheduler tries it first, finds
// the claim missing and backs off. Each variant runs whole cycles (the pod
// is deleted once scheduled, and the volume must be back in the pool before
// the next cycle), so that its rate at concurrency 1 is that of a
// sequential workload.

// The variants of the scheduling phase.
const (
	VariantFloor   = "claim first (floor)"
	VariantGated   = "annotated, gated"
	VariantUngated = "annotated, no gate"
)

// SchedulingRow is one variant at one concurrency.
type SchedulingRow struct {
	Concurrency int     `json:"concurrency"`
	Variant     string  `json:"variant"`
	Scheduled   Summary `json:"pod_created_to_scheduled"`
	PerMinute   float64 `json:"cycles_per_min"`
	Failures    int     `json:"failures,omitempty"`
	// Against the floor's row of the same concurrency; 0 for the floor.
	P99VsFloor  float64 `json:"p99_vs_floor,omitempty"`
	RateVsFloor float64 `json:"rate_vs_floor_pct,omitempty"`
}

// schedCycle is one cycle of a variant; it returns pod created -> scheduled.
type schedCycle = func(ctx context.Context, worker, seq int) (time.Duration, error)

// schedulingPhase runs cycles of each variant at each concurrency.
func (b *bench) schedulingPhase(ctx context.Context, cycles int, levels []int, note func(string, ...any)) []SchedulingRow {
	variants := []struct {
		name string
		run  schedCycle
	}{
		{VariantFloor, b.claimFirstCycle},
		{VariantGated, func(ctx context.Context, _, seq int) (time.Duration, error) {
			return b.annotatedPodCycle(ctx, seq, true)
		}},
		{VariantUngated, func(ctx context.Context, _, seq int) (time.Duration, error) {
			return b.annotatedPodCycle(ctx, seq, false)
		}},
	}
	var rows []SchedulingRow
	for _, level := range levels {
		var floor *SchedulingRow
		for _, v := range variants {
			b.logf("Scheduling: %s, %d cycles at concurrency %d", v.name, cycles, level)
			start := time.Now()
			ds, errs := runCount(ctx, level, cycles, &b.seq, v.run)
			elapsed := time.Since(start)
			for _, e := range first(errs, 3) {
				note("scheduling cycle (%s, concurrency %d) failed: %v", v.name, level, e)
			}
			row := SchedulingRow{Concurrency: level, Variant: v.name, Scheduled: Summarize(ds), PerMinute: perMinute(len(ds), elapsed), Failures: len(errs)}
			if floor != nil && floor.Scheduled.P99ms > 0 && floor.PerMinute > 0 {
				row.P99VsFloor = row.Scheduled.P99ms / floor.Scheduled.P99ms
				row.RateVsFloor = 100 * row.PerMinute / floor.PerMinute
			}
			rows = append(rows, row)
			if v.name == VariantFloor {
				floor = &rows[len(rows)-1]
			}
		}
	}
	return rows
}

// annotatedPodCycle: an annotated pod, with or without the claims gate,
// asks for its claim; once it is scheduled it is deleted, and the cycle ends
// when its volume is back in the pool.
func (b *bench) annotatedPodCycle(ctx context.Context, seq int, gated bool) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, cycleTimeout)
	defer cancel()
	name := fmt.Sprintf("s-%d", seq)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: b.ns, Annotations: map[string]string{
			wellknown.EnabledKey("cache"):  "true",
			wellknown.TemplateKey("cache"): claimTemplate(b.class, "1Gi"),
		}},
		Spec: podSpec(name, ""),
	}
	if gated {
		pod.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: wellknown.ClaimsGate}}
	}
	created, err := b.client.CoreV1().Pods(b.ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return 0, fmt.Errorf("creating pod %s: %w", name, err)
	}
	scheduled, err := b.waitScheduled(ctx, created, time.Now())
	if err != nil {
		return 0, err
	}
	uid, err := b.waitBound(ctx, name)
	if err != nil {
		return 0, err
	}
	zero := int64(0)
	if err := b.client.CoreV1().Pods(b.ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		return 0, fmt.Errorf("deleting pod %s: %w", name, err)
	}
	b.ownerDeleted(b.ns+"/"+name, time.Now())
	if err := b.rec.wait(ctx, func() bool {
		c := b.rec.claims[uid]
		return !c.gone.IsZero() && !c.available.IsZero()
	}); err != nil {
		return 0, fmt.Errorf("waiting for claim %s to go and its volume to be Available: %w", name, err)
	}
	return scheduled, nil
}

// claimFirstCycle is the floor: no controller, the claim created before
// the pod (which has no annotations), then the pod; once it is scheduled
// the pod and the claim are deleted and the Released volume's claimRef is
// cleared. It uses the pod floor's namespace, class and pool.
func (b *bench) claimFirstCycle(ctx context.Context, _, seq int) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, cycleTimeout)
	defer cancel()
	ns, name := b.podFloorNS, fmt.Sprintf("sf-%d", seq)
	claim, err := b.client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, objects.NewClaim(ns, name, b.podFloorClass, "1Gi"), metav1.CreateOptions{})
	if err != nil {
		return 0, fmt.Errorf("creating claim %s: %w", name, err)
	}
	created, err := b.client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: podSpec(name, "")}, metav1.CreateOptions{})
	if err != nil {
		return 0, fmt.Errorf("creating pod %s: %w", name, err)
	}
	scheduled, err := b.waitScheduled(ctx, created, time.Now())
	if err != nil {
		return 0, err
	}
	var pv string
	if err := b.rec.wait(ctx, func() bool {
		c := b.rec.claims[claim.UID]
		if c == nil || c.bound.IsZero() {
			return false
		}
		pv = c.volume
		return true
	}); err != nil {
		return 0, fmt.Errorf("waiting for claim %s to be bound: %w", name, err)
	}
	zero := int64(0)
	if err := b.client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		return 0, fmt.Errorf("deleting pod %s: %w", name, err)
	}
	if err := b.client.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return 0, fmt.Errorf("deleting claim %s: %w", name, err)
	}
	if err := b.rec.wait(ctx, func() bool { return !b.rec.claims[claim.UID].released.IsZero() }); err != nil {
		return 0, fmt.Errorf("waiting for volume %s to be Released: %w", pv, err)
	}
	if _, err := b.client.CoreV1().PersistentVolumes().Patch(ctx, pv, types.MergePatchType, []byte(`{"spec":{"claimRef":null}}`), metav1.PatchOptions{}); err != nil {
		return 0, fmt.Errorf("clearing the claimRef of %s: %w", pv, err)
	}
	if err := b.rec.wait(ctx, func() bool {
		c := b.rec.claims[claim.UID]
		return !c.gone.IsZero() && !c.available.IsZero()
	}); err != nil {
		return 0, fmt.Errorf("waiting for volume %s to be Available: %w", pv, err)
	}
	return scheduled, nil
}

// waitScheduled waits until the scheduler has bound pod to a node and
// returns how long after created (when its create call returned) the watch
// told.
func (b *bench) waitScheduled(ctx context.Context, pod *corev1.Pod, created time.Time) (time.Duration, error) {
	var at time.Time
	if err := b.rec.wait(ctx, func() bool {
		at = b.rec.pods[pod.UID]
		return !at.IsZero()
	}); err != nil {
		return 0, fmt.Errorf("waiting for pod %s to be scheduled: %w", pod.Name, err)
	}
	return at.Sub(created), nil
}
