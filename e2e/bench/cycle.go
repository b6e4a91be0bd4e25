package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/reclaimable/reclaimable/e2e/objects"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// cycleTimes are the moments of one cycle. For our cycle and the pod
// floor's the owner is the pod; for the floor's it is the claim itself.
type cycleTimes struct {
	start        time.Time // before the first request
	ownerCreated time.Time // the create call returned
	ownerDeleted time.Time // the delete call returned
	claim        claimRecord
}

func (t cycleTimes) end() time.Time { return t.claim.available }

// cycleTimeout bounds one cycle; a cycle that takes longer is a failure.
const cycleTimeout = 2 * time.Minute

// ourCycle runs one cycle through the controllers: an annotated pod asks
// for a claim, the claim binds, the pod is deleted, the podwatcher deletes
// the claim, the releaser returns the volume to the pool. With miss, the
// claim asks for a size no pool volume has, so the provisioner must create
// one.
func (b *bench) ourCycle(ctx context.Context, seq int, miss bool) (cycleTimes, error) {
	ctx, cancel := context.WithTimeout(ctx, cycleTimeout)
	defer cancel()
	name := fmt.Sprintf("c-%d", seq)
	size := "1Gi"
	if miss {
		// Strictly growing sizes: no earlier volume fits.
		size = fmt.Sprintf("%dMi", 2048+b.missSeq.Add(1))
	}
	var t cycleTimes
	t.start = time.Now()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: b.ns, Annotations: map[string]string{
			wellknown.EnabledKey("cache"):  "true",
			wellknown.TemplateKey("cache"): claimTemplate(b.class, size),
		}},
		Spec: podSpec(name, ""),
	}
	if _, err := b.client.CoreV1().Pods(b.ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return t, fmt.Errorf("creating pod %s: %w", name, err)
	}
	t.ownerCreated = time.Now()
	uid, err := b.waitBound(ctx, name)
	if err != nil {
		return t, err
	}
	zero := int64(0)
	// Grace period 0: the workload is done, and there is no kubelet to wait for.
	if err := b.client.CoreV1().Pods(b.ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		return t, fmt.Errorf("deleting pod %s: %w", name, err)
	}
	t.ownerDeleted = time.Now()
	b.ownerDeleted(b.ns+"/"+name, t.ownerDeleted)
	if err := b.rec.wait(ctx, func() bool {
		c := b.rec.claims[uid]
		return !c.gone.IsZero() && !c.available.IsZero()
	}); err != nil {
		return t, fmt.Errorf("waiting for claim %s to go and its volume to be Available: %w", name, err)
	}
	t.claim = b.rec.snapshot(uid)
	b.ourCycles.Add(1)
	return t, nil
}

// waitBound waits until the podwatcher's claim name in the benchmark's
// namespace is created and bound, and returns its UID.
func (b *bench) waitBound(ctx context.Context, name string) (types.UID, error) {
	var uid types.UID
	if err := b.rec.wait(ctx, func() bool {
		c := b.rec.latestLocked(b.ns, name)
		if c == nil || c.bound.IsZero() {
			return false
		}
		uid = c.uid
		return true
	}); err != nil {
		return "", fmt.Errorf("waiting for claim %s to be created and bound: %w", name, err)
	}
	return uid, nil
}

// floorCycle runs the same cycle with no controllers and the fewest
// requests (three): a claim is created and the PV controller binds it to an
// Available volume of the floor's pool, as it does our pool hits; the claim
// is deleted; the Released volume's claimRef is cleared. The pool has a
// volume per worker, so a claim always finds one.
//
// The claim is not pre-bound with spec.volumeName: the PV controller binds
// such a claim only at its next resync (measured here: 4.3 s at p50 with
// the 5 s resync), which would make the floor slower than our controllers.
func (b *bench) floorCycle(ctx context.Context, _, seq int) (cycleTimes, error) {
	return b.referenceCycle(ctx, fmt.Sprintf("f-%d", seq), b.floorNS, b.floorClass, false)
}

// podFloorCycle is the floor's cycle with the pod our cycle has, and still
// no controller of ours: what any pod with a claim costs the API server,
// the scheduler, the node, the garbage collector and the PV controller,
// which our cycle pays too. The pod is ours (same spec, its volume naming
// the claim, placed by the scheduler) without the annotations, so that a
// pod left by a failed cycle is nothing to the podwatcher once it starts.
// The benchmark creates the claim right after the pod, and deletes it
// right after the pod: in our cycle the podwatcher creates it and the
// garbage collector deletes it. Five requests: create pod, create claim,
// delete pod, delete claim, patch volume. The class and its pool are the
// pod floor's own, shaped like the floor's.
func (b *bench) podFloorCycle(ctx context.Context, _, seq int) (cycleTimes, error) {
	return b.referenceCycle(ctx, fmt.Sprintf("p-%d", seq), b.podFloorNS, b.podFloorClass, true)
}

// referenceCycle runs a cycle of the floor (withPod false) or of the pod
// floor in namespace ns, with a claim of class. The owner's moments are the
// claim's for the floor and the pod's for the pod floor, so that each step
// is timed from where ours is.
func (b *bench) referenceCycle(ctx context.Context, name, ns, class string, withPod bool) (cycleTimes, error) {
	ctx, cancel := context.WithTimeout(ctx, cycleTimeout)
	defer cancel()
	var t cycleTimes
	t.start = time.Now()
	if withPod {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: podSpec(name, "")}
		if _, err := b.client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			return t, fmt.Errorf("creating pod %s: %w", name, err)
		}
		t.ownerCreated = time.Now()
	}
	created, err := b.client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, objects.NewClaim(ns, name, class, "1Gi"), metav1.CreateOptions{})
	if err != nil {
		return t, fmt.Errorf("creating claim %s: %w", name, err)
	}
	if !withPod {
		t.ownerCreated = time.Now()
	}
	uid := created.UID
	var pv string
	if err := b.rec.wait(ctx, func() bool {
		c := b.rec.claims[uid]
		if c == nil || c.bound.IsZero() {
			return false
		}
		pv = c.volume
		return true
	}); err != nil {
		return t, fmt.Errorf("waiting for claim %s to be bound: %w", name, err)
	}
	if withPod {
		zero := int64(0)
		if err := b.client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			return t, fmt.Errorf("deleting pod %s: %w", name, err)
		}
		// Timed from the pod's deletion, as ours is: the claim's own
		// deletion is part of the step.
		t.ownerDeleted = time.Now()
	}
	if err := b.client.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return t, fmt.Errorf("deleting claim %s: %w", name, err)
	}
	if !withPod {
		t.ownerDeleted = time.Now()
	}
	if err := b.rec.wait(ctx, func() bool { return !b.rec.claims[uid].released.IsZero() }); err != nil {
		return t, fmt.Errorf("waiting for volume %s to be Released: %w", pv, err)
	}
	if _, err := b.client.CoreV1().PersistentVolumes().Patch(ctx, pv, types.MergePatchType, []byte(`{"spec":{"claimRef":null}}`), metav1.PatchOptions{}); err != nil {
		return t, fmt.Errorf("clearing the claimRef of %s: %w", pv, err)
	}
	if err := b.rec.wait(ctx, func() bool {
		c := b.rec.claims[uid]
		return !c.gone.IsZero() && !c.available.IsZero()
	}); err != nil {
		return t, fmt.Errorf("waiting for volume %s to be Available: %w", pv, err)
	}
	t.claim = b.rec.snapshot(uid)
	return t, nil
}

func floorVolume(worker int) string { return fmt.Sprintf("floor-%d", worker) }

func podFloorVolume(worker int) string { return fmt.Sprintf("podfloor-%d", worker) }

func claimTemplate(class, size string) string {
	return fmt.Sprintf(`{"apiVersion":"v1","kind":"PersistentVolumeClaim","spec":{"storageClassName":%q,"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":%q}}}}`, class, size)
}

func podSpec(claimName, node string) corev1.PodSpec {
	return corev1.PodSpec{
		NodeName:      node,
		RestartPolicy: corev1.RestartPolicyAlways,
		Containers:    []corev1.Container{{Name: "build", Image: "busybox", VolumeMounts: []corev1.VolumeMount{{Name: "cache", MountPath: "/cache"}}}},
		Volumes:       []corev1.Volume{objects.ClaimVolume("cache", claimName)},
	}
}

// cycleFunc runs one cycle; worker is stable per goroutine, seq unique.
type cycleFunc func(ctx context.Context, worker, seq int) (cycleTimes, error)

// runCount runs total cycles on concurrency workers and collects what
// each returns.
func runCount[T any](ctx context.Context, concurrency, total int, seq *atomic.Int64, fn func(ctx context.Context, worker, seq int) (T, error)) ([]T, []error) {
	var (
		mu      sync.Mutex
		results []T
		errs    []error
		left    atomic.Int64
		wg      sync.WaitGroup
	)
	left.Store(int64(total))
	for w := range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 && ctx.Err() == nil {
				t, err := fn(ctx, w, int(seq.Add(1)))
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					results = append(results, t)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return results, errs
}

// runWindow keeps concurrency workers busy, and counts the cycles that end
// within a window of length d that opens once every worker has finished a
// first cycle (so the pool has grown to the concurrency), or after warmup
// at the latest. It then lets the cycles in flight finish.
func runWindow(ctx context.Context, concurrency int, d, warmup time.Duration, seq *atomic.Int64, fn cycleFunc) (completed int, errs []error, window time.Duration) {
	var (
		mu     sync.Mutex
		ends   []time.Time
		warmed sync.WaitGroup
		wg     sync.WaitGroup
		stop   atomic.Bool
	)
	warmed.Add(concurrency)
	for w := range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			first := true
			for !stop.Load() && ctx.Err() == nil {
				t, err := fn(ctx, w, int(seq.Add(1)))
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					ends = append(ends, t.end())
				}
				mu.Unlock()
				if first {
					warmed.Done()
					first = false
				}
			}
			if first {
				warmed.Done()
			}
		}()
	}
	warm := make(chan struct{})
	go func() { warmed.Wait(); close(warm) }()
	select {
	case <-warm:
	case <-time.After(warmup):
	case <-ctx.Done():
	}
	open := time.Now()
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
	closeAt := time.Now()
	stop.Store(true)
	wg.Wait()
	for _, e := range ends {
		if !e.Before(open) && !e.After(closeAt) {
			completed++
		}
	}
	return completed, errs, closeAt.Sub(open)
}
