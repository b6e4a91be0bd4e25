package bench

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/reclaimable/reclaimable/apis/reclaimable/v1alpha1"
	"github.com/reclaimable/reclaimable/client/clientset/versioned"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// The eviction run: what a claim at a pool's maximum pays when it fits no
// member and evictForClaims removes the least recently used one to make
// room (fence, delete, storage, then a new volume), against a claim that
// finds a free member. One claim at a time, on a pool of one volume.

// Eviction is the eviction run's report.
type Eviction struct {
	Cycles int `json:"cycles"`
	// Hit: a claim that fits the free member takes it.
	Hit Summary `json:"hit_claim_created_to_bound"`
	// Evict: a claim that fits no member, at the maximum, waits for the
	// member's eviction and a new volume.
	Evict  Summary `json:"evict_claim_created_to_bound"`
	Failed int     `json:"failed,omitempty"`
}

const evictClass = "bench-evict"

func (b *bench) eviction(ctx context.Context, cycles int) (*Eviction, error) {
	e := &Eviction{Cycles: cycles}
	free := map[string]string{wellknown.ReserveFor: "0", wellknown.ReuseScope: wellknown.ReuseScopeCluster}
	if err := b.recurringClass(ctx, evictClass, free); err != nil {
		return nil, err
	}
	pools, err := versioned.NewForConfig(b.cluster.Config)
	if err != nil {
		return nil, err
	}
	if _, err := pools.ReclaimableV1alpha1().VolumePools().Create(ctx, &v1alpha1.VolumePool{
		ObjectMeta: metav1.ObjectMeta{Name: evictClass},
		Spec:       v1alpha1.VolumePoolSpec{StorageClassName: evictClass, MaxVolumes: ptr.To(int32(1)), EvictForClaims: true},
	}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	run := func(size func(i int) string) Summary {
		var bound []time.Duration
		for i := range cycles + 1 {
			t, err := b.claimCycleOf(ctx, b.ns, fmt.Sprintf("%s-%d", evictClass, b.seq.Add(1)), evictClass, size(i))
			if err != nil {
				e.Failed++
				b.logf("eviction cycle: %v", err)
				continue
			}
			if i > 0 { // the first makes the member the others find or evict
				bound = append(bound, t.claim.bound.Sub(t.claim.created))
			}
		}
		return Summarize(bound)
	}
	e.Hit = run(func(int) string { return "1Gi" })
	// Each a size no earlier volume has: the member never fits.
	e.Evict = run(func(i int) string { return fmt.Sprintf("%dMi", 2048+i) })
	if e.Failed > 0 {
		return e, fmt.Errorf("%d cycles failed", e.Failed)
	}
	return e, nil
}

// evictionSection writes the eviction run.
func (r *Report) evictionSection(p printer) {
	e := r.Eviction
	if e == nil {
		return
	}
	p("\n### A claim at the maximum: a free member that fits, or evicting one (%d cycles of each, one at a time)\n\n", e.Cycles)
	p("| the claim | claim created -> Bound p50 | p95 | p99 |\n|---|--:|--:|--:|\n")
	p("| fits the free member, takes it | %s | %s | %s |\n", fmtMs(e.Hit.P50ms), fmtMs(e.Hit.P95ms), fmtMs(e.Hit.P99ms))
	p("| fits none: the member is evicted (evictForClaims), a new volume made | %s | %s | %s |\n", fmtMs(e.Evict.P50ms), fmtMs(e.Evict.P95ms), fmtMs(e.Evict.P99ms))
	if e.Failed > 0 {
		p("\n%d cycles failed.\n", e.Failed)
	}
}
