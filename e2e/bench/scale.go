package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	volumehelpers "k8s.io/component-helpers/storage/volume"

	"github.com/reclaimable/reclaimable/e2e/objects"
	"github.com/reclaimable/reclaimable/internal/controller"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

const scaleNS = "scale"

// scale measures the controllers' start-up and memory in three steps, each
// a fresh start of the three processes run for ScaleSettle: with none of
// the phase's objects present (the baseline), with plain pods (no
// annotation, no volume: what most pods of a cluster are), then with n
// annotated pods beside them, their n claims (as the podwatcher would have
// made them) and n volumes pre-bound to those claims (as the provisioner
// would have issued them). The differences give what a plain pod and what
// an annotated pod with its claim and volume cost each controller. Pods
// go to the kwok node, unscheduled by anyone.
func (b *bench) scale(ctx context.Context, n, plain int) (*Scale, error) {
	b.inst.stop()
	s := &Scale{SettleSeconds: b.cfg.ScaleSettle.Seconds()}
	if _, err := b.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: scaleNS}}, metav1.CreateOptions{}); err != nil {
		return s, err
	}
	var err error
	b.logf("Scale: baseline, none of the phase's objects present")
	if s.Baseline, _, err = b.scaleMeasure(ctx, "baseline"); err != nil {
		return s, err
	}

	// What was created is reported, whichever step stops the phase.
	var made scaleMade
	defer func() {
		s.PlainPods, s.Pods, s.Claims, s.Volumes = int(made.plain.Load()), int(made.pods.Load()), int(made.pairs.Load()), int(made.pairs.Load())
	}()
	if plain > 0 {
		start := time.Now()
		if err := b.scalePlainPods(ctx, plain, &made.plain); err != nil {
			return s, fmt.Errorf("creating plain pods: %w", err)
		}
		b.logf("Scale: %d plain pods created in %.0f s", plain, time.Since(start).Seconds())
		if s.PlainOnly, _, err = b.scaleMeasure(ctx, "plain"); err != nil {
			return s, err
		}
	}

	start := time.Now()
	uids, err := b.scaleAnnotatedPods(ctx, n, &made.pods)
	if err != nil {
		return s, fmt.Errorf("creating pods: %w", err)
	}
	if err := parallel(ctx, n, func(ctx context.Context, i int) error {
		if err := b.scalePair(ctx, i, uids[i]); err != nil {
			return err
		}
		made.pairs.Add(1)
		return nil
	}); err != nil {
		return s, fmt.Errorf("creating claims and volumes: %w", err)
	}
	s.CreateSeconds = time.Since(start).Seconds()
	b.logf("Scale: created in %.0f s; waiting until every claim is seen Bound", s.CreateSeconds)
	s.Bound = b.scaleWaitBound(ctx, n)

	b.logf("Scale: starting the controllers with %d annotated pods, claims and volumes and %d plain pods present", n, plain)
	stats, reqs, err := b.scaleMeasure(ctx, "annotated")
	s.Controllers = stats
	if err != nil {
		return s, err
	}
	s.Requests = CostRows(reqs, 0)
	for _, limit := range b.cfg.ScaleLimits {
		s.AtLimits = append(s.AtLimits, b.scaleAtLimit(ctx, limit))
	}
	return s, nil
}

// scaleMade counts the scale phase's objects as they are created: plain
// pods, annotated pods, and claims each with its volume.
type scaleMade struct {
	plain, pods, pairs atomic.Int64
}

// scalePlainPods creates plain pods, counted in made.
func (b *bench) scalePlainPods(ctx context.Context, plain int, made *atomic.Int64) error {
	return parallel(ctx, plain, func(ctx context.Context, i int) error {
		name := fmt.Sprintf("p-%d", i)
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "plain"}},
			Spec: corev1.PodSpec{NodeName: "node-1", RestartPolicy: corev1.RestartPolicyAlways,
				Containers: []corev1.Container{{Name: "build", Image: "busybox"}}},
		}
		if _, err := b.client.CoreV1().Pods(scaleNS).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			return err
		}
		made.Add(1)
		return nil
	})
}

// scaleAnnotatedPods creates n annotated pods, counted in made, and
// returns their UIDs, for their claims' owner references.
func (b *bench) scaleAnnotatedPods(ctx context.Context, n int, made *atomic.Int64) ([]types.UID, error) {
	uids := make([]types.UID, n)
	err := parallel(ctx, n, func(ctx context.Context, i int) error {
		name := fmt.Sprintf("s-%d", i)
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{
				wellknown.EnabledKey("cache"):  "true",
				wellknown.TemplateKey("cache"): claimTemplate(b.class, "1Gi"),
			}},
			Spec: podSpec(name, "node-1"),
		}
		p, err := b.client.CoreV1().Pods(scaleNS).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		uids[i] = p.UID
		made.Add(1)
		return nil
	})
	return uids, err
}

// scalePair creates the claim of annotated pod i, owned by the pod of
// podUID, and its volume, made bound, as the PV controller leaves a claim
// and its volume: binding tens of thousands one by one takes it many
// minutes.
func (b *bench) scalePair(ctx context.Context, i int, podUID types.UID) error {
	name := fmt.Sprintf("s-%d", i)
	pvName := fmt.Sprintf("scale-%d", i)
	claim := objects.NewClaim(scaleNS, name, b.class, "1Gi", func(c *corev1.PersistentVolumeClaim) {
		c.Labels = map[string]string{wellknown.ClaimManagedBy: controllerID, wellknown.ClaimedBy: string(podUID)}
		c.Annotations = map[string]string{volumehelpers.AnnBindCompleted: "yes", volumehelpers.AnnBoundByController: "yes"}
		c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: name, UID: podUID}}
		c.Spec.VolumeName = pvName
	})
	c, err := b.client.CoreV1().PersistentVolumeClaims(scaleNS).Create(ctx, claim, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	pv := objects.NewVolume(pvName, b.class, "1Gi", filepath.Join(b.base, pvName), func(pv *corev1.PersistentVolume) {
		pv.Labels = map[string]string{wellknown.VolumeManagedBy: controllerID}
		pv.Annotations = map[string]string{wellknown.ProvisionedBy: provisionerName, volumehelpers.AnnBoundByController: "yes"}
		pv.Spec.ClaimRef = &corev1.ObjectReference{APIVersion: "v1", Kind: "PersistentVolumeClaim", Namespace: scaleNS, Name: name, UID: c.UID}
	})
	created, err := b.client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	return b.scaleStatusBound(ctx, created, c)
}

// scaleStatusBound writes the Bound phase into the status of the volume,
// then of its claim. The PV controller may write either first (a phase of
// its own): on a conflict, the status is written again on a fresh copy.
func (b *bench) scaleStatusBound(ctx context.Context, pv *corev1.PersistentVolume, c *corev1.PersistentVolumeClaim) error {
	pvs := b.client.CoreV1().PersistentVolumes()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pv.Status.Phase = corev1.VolumeBound
		_, err := pvs.UpdateStatus(ctx, pv, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			if fresh, gerr := pvs.Get(ctx, pv.Name, metav1.GetOptions{}); gerr == nil {
				pv = fresh
			}
		}
		return err
	}); err != nil {
		return err
	}
	claims := b.client.CoreV1().PersistentVolumeClaims(scaleNS)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound, AccessModes: pv.Spec.AccessModes, Capacity: pv.Spec.Capacity}
		_, err := claims.UpdateStatus(ctx, c, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			if fresh, gerr := claims.Get(ctx, c.Name, metav1.GetOptions{}); gerr == nil {
				c = fresh
			}
		}
		return err
	})
}

// scaleWaitBound waits up to 5 minutes until the recorder has seen the n
// claims of the scale phase Bound, and returns how many it has; fewer is
// logged, and the phase goes on.
func (b *bench) scaleWaitBound(ctx context.Context, n int) int {
	bindCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	err := b.rec.wait(bindCtx, func() bool { return b.scaleBoundLocked() >= n })
	cancel()
	b.rec.mu.Lock()
	bound := b.scaleBoundLocked()
	b.rec.mu.Unlock()
	if err != nil {
		b.logf("Scale: only %d of %d claims bound after 5 minutes; going on", bound, n)
	}
	return bound
}

// scaleBoundLocked counts the scale phase's claims the recorder has seen
// Bound; the recorder's lock is held.
func (b *bench) scaleBoundLocked() int {
	n := 0
	for _, recs := range b.rec.byName {
		if len(recs) > 0 && recs[0].namespace == scaleNS && !recs[len(recs)-1].bound.IsZero() {
			n++
		}
	}
	return n
}

// scaleAtLimit measures the controllers as scaleMeasure does, each under
// the memory limit limit. A controller that is not ready within the
// start's deadline (a heap that cannot fit, collected again and again) is
// a result, not a failure of the run.
func (b *bench) scaleAtLimit(ctx context.Context, limit string) LimitRun {
	run := LimitRun{Limit: limit}
	q, err := resource.ParseQuantity(limit)
	if err != nil {
		run.Error = err.Error()
		return run
	}
	saved := b.inst.env
	defer func() { b.inst.env = saved }()
	b.inst.env = map[string][]string{}
	for _, name := range controllerNames {
		b.inst.env[name] = []string{controller.EnvMemoryLimit + "=" + strconv.FormatInt(q.Value(), 10)}
	}
	b.logf("Scale: the controllers under a memory limit of %s", limit)
	if run.Controllers, _, err = b.scaleMeasure(ctx, "limit-"+limit); err != nil {
		run.Error = err.Error()
	}
	return run
}

// scaleMeasure starts the controllers, lets them run for ScaleSettle, reads
// their time to ready, memory and requests, keeps a heap profile of each in
// the log directory (named after step), then restarts them to time a start
// on the settled cluster, then each alone, and stops them.
func (b *bench) scaleMeasure(ctx context.Context, step string) ([]ProcessStats, map[string]Requests, error) {
	ready, err := b.inst.start(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer b.inst.stop()
	select {
	case <-time.After(b.cfg.ScaleSettle):
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	// RSS first: the heap profile collects garbage, which moves it.
	stats, err := b.inst.stats()
	if err != nil {
		return nil, nil, err
	}
	for i := range stats {
		stats[i].ReadySeconds = ready[stats[i].Controller].Seconds()
	}
	if err := b.inst.heapProfiles(ctx, stats, "scale-"+step); err != nil {
		return nil, nil, err
	}
	reqs, err := b.inst.requests(ctx)
	if err != nil {
		return nil, nil, err
	}
	b.inst.stop()
	again, err := b.inst.start(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("restarting: %w", err)
	}
	for i := range stats {
		stats[i].RestartSeconds = again[stats[i].Controller].Seconds()
	}
	// Then each alone, as a rollout of one controller's Deployment or a
	// failover restarts it, the others stopped.
	b.inst.stop()
	for i := range stats {
		alone, err := b.inst.startSome(ctx, []string{stats[i].Controller})
		if err != nil {
			return nil, nil, fmt.Errorf("restarting %s alone: %w", stats[i].Controller, err)
		}
		stats[i].RestartAloneSeconds = alone[stats[i].Controller].Seconds()
		b.inst.stop()
	}
	return stats, reqs, nil
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
