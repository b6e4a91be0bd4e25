package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/reclaimable/reclaimable/e2e/objects"
	"github.com/reclaimable/reclaimable/internal/keys"
)

const scaleNS = "scale"

// scale stops the controllers, creates n annotated pods (on the kwok node,
// not scheduled), their n claims (as the podwatcher would have made them)
// and n volumes pre-bound to those claims (as the provisioner would have
// issued them), waits until the PV controller bound them all, then starts
// the three controllers afresh and measures their time to ready (caches
// synced), and their memory and requests after ScaleSettle.
func (b *bench) scale(ctx context.Context, n int) (*Scale, error) {
	b.inst.stop()
	s := &Scale{SettleSeconds: b.cfg.ScaleSettle.Seconds()}
	if _, err := b.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: scaleNS}}, metav1.CreateOptions{}); err != nil {
		return s, err
	}
	start := time.Now()
	var pods, pairs atomic.Int64
	defer func() { s.Pods, s.Claims, s.Volumes = int(pods.Load()), int(pairs.Load()), int(pairs.Load()) }()
	uids := make([]types.UID, n)
	if err := parallel(ctx, n, func(ctx context.Context, i int) error {
		name := fmt.Sprintf("s-%d", i)
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{
				keys.EnabledKey("cache"):  "true",
				keys.TemplateKey("cache"): claimTemplate(b.class, "1Gi"),
			}},
			Spec: podSpec(name, "node-1"),
		}
		p, err := b.client.CoreV1().Pods(scaleNS).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		uids[i] = p.UID
		pods.Add(1)
		return nil
	}); err != nil {
		return s, fmt.Errorf("creating pods: %w", err)
	}
	if err := parallel(ctx, n, func(ctx context.Context, i int) error {
		name := fmt.Sprintf("s-%d", i)
		pvName := fmt.Sprintf("scale-%d", i)
		claim := objects.NewClaim(scaleNS, name, b.class, "1Gi", func(c *corev1.PersistentVolumeClaim) {
			c.Labels = map[string]string{keys.ClaimManagedBy: controllerID, keys.ClaimedBy: string(uids[i])}
			c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: name, UID: uids[i]}}
			c.Spec.VolumeName = pvName
		})
		c, err := b.client.CoreV1().PersistentVolumeClaims(scaleNS).Create(ctx, claim, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		pv := objects.NewVolume(pvName, b.class, "1Gi", filepath.Join(b.base, pvName), func(pv *corev1.PersistentVolume) {
			pv.Labels = map[string]string{keys.VolumeManagedBy: controllerID}
			pv.Annotations = map[string]string{keys.ProvisionedBy: provisionerName}
			pv.Spec.ClaimRef = &corev1.ObjectReference{APIVersion: "v1", Kind: "PersistentVolumeClaim", Namespace: scaleNS, Name: name, UID: c.UID}
		})
		if _, err := b.client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
			return err
		}
		pairs.Add(1)
		return nil
	}); err != nil {
		return s, fmt.Errorf("creating claims and volumes: %w", err)
	}
	s.CreateSeconds = time.Since(start).Seconds()
	b.logf("Scale: created in %.0f s; waiting for the PV controller to bind them", s.CreateSeconds)
	bound := func() int {
		n := 0
		for _, recs := range b.rec.byName {
			if len(recs) > 0 && recs[0].namespace == scaleNS && !recs[len(recs)-1].bound.IsZero() {
				n++
			}
		}
		return n
	}
	bindCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	err := b.rec.wait(bindCtx, func() bool { return bound() >= n })
	cancel()
	b.rec.mu.Lock()
	s.Bound = bound()
	b.rec.mu.Unlock()
	if err != nil {
		b.logf("Scale: only %d of %d claims bound after 5 minutes; going on", s.Bound, n)
	}

	b.logf("Scale: starting the controllers with %d objects of each kind present", n)
	ready, err := b.inst.start(ctx)
	if err != nil {
		return s, err
	}
	select {
	case <-time.After(b.cfg.ScaleSettle):
	case <-ctx.Done():
		return s, ctx.Err()
	}
	stats, err := b.inst.stats()
	if err != nil {
		return s, err
	}
	for i := range stats {
		stats[i].ReadySeconds = ready[stats[i].Controller].Seconds()
	}
	s.Controllers = stats
	reqs, err := b.inst.requests(ctx)
	if err != nil {
		return s, err
	}
	s.Requests = CostRows(reqs, 0)
	return s, nil
}

// parallel runs fn for 0..n-1 on a few goroutines; the first error stops it.
func parallel(ctx context.Context, n int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(ctx, i); err != nil {
					cancel(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return context.Cause(ctx)
}
