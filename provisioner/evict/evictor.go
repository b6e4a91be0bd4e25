package evict

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/reclaimable/reclaimable/internal/controller"
	"github.com/reclaimable/reclaimable/internal/eviction"
	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/internal/wellknown"
	"github.com/reclaimable/reclaimable/provisioner/lifecycle"
)

const (
	reasonEvictionFailed = "EvictionFailed"
	// reasonEvictedFromGoneNode: a member whose node is gone, let go
	// without its storage, which no pod can reach.
	reasonEvictedFromGoneNode = "EvictedFromGoneNode"
	// reasonMemberNotMade: a member made ahead whose storage was not made
	// in time, removed.
	reasonMemberNotMade = "MemberNotMade"
)

// ErrHandedBack: the storage of an evicted member went back to the
// provisioner that made it, which deletes no volume object already being
// deleted.
var ErrHandedBack = errors.New("handed back to the provisioner of its storage")

// ErrNoBackend: the evicted member names no backend of the provisioner,
// which cannot remove its storage; an administrator can.
var ErrNoBackend = errors.New("names no backend of this provisioner")

// Provisioner is what the evictor and the measurer ask of the provisioner
// they run in.
type Provisioner interface {
	// UpdateVolume writes pv guarded by the resourceVersion the cache
	// showed: nil, nil once the volume is gone, and a controller.Wait when
	// it changed meanwhile. what says the write in an error.
	UpdateVolume(ctx context.Context, pv *corev1.PersistentVolume, what string) (*corev1.PersistentVolume, error)
	// RemoveStorage removes the storage of pv, an evicted member being
	// deleted, through the backend that made it: a
	// *lifecycle.NodeGoneError when the node that holds it is gone, an
	// error wrapping ErrHandedBack when it went back to another
	// provisioner.
	RemoveStorage(ctx context.Context, pv *corev1.PersistentVolume) error
	// Measures reports whether the backend that made pv measures its
	// members; Measure measures pv through it until deadline (partial:
	// stopped there or at what it could not read).
	Measures(pv *corev1.PersistentVolume) bool
	Measure(pv *corev1.PersistentVolume, deadline time.Time) (bytes int64, partial bool, err error)
}

// Config is what the evictor works with.
type Config struct {
	// Provisioner is the provisioner's name: another installation's
	// evictions are its own to complete.
	Provisioner string
	Client      kubernetes.Interface
	// Volumes and Pools are the shared informers' caches.
	Volumes  cache.Indexer
	Pools    cache.Indexer
	Nodes    corelisters.NodeLister
	Recorder record.EventRecorder
	Clock    clock.PassiveClock
	// AheadBound is how long a member made ahead may wait for its storage
	// before it is removed.
	AheadBound time.Duration
	// Evictions counts evictions by class and cause.
	Evictions *prometheus.CounterVec
	Workers   int
}

// Evictor completes the evictions of the provisioner's members, and
// removes members made ahead whose storage was never made.
type Evictor struct {
	p    Provisioner
	cfg  Config
	loop *controller.Loop[*corev1.PersistentVolume, string]
}

// NewEvictor builds the evictor of p; Watch has it follow the volumes.
func NewEvictor(p Provisioner, cfg Config) *Evictor {
	e := &Evictor{p: p, cfg: cfg}
	// A sweep now and then finds a step that failed or that a restart
	// interrupted.
	e.loop = &controller.Loop[*corev1.PersistentVolume, string]{
		Name: "evictor", Ref: controller.NameRef[*corev1.PersistentVolume],
		Wants: func(_, pv *corev1.PersistentVolume) bool { return e.Wants(pv) },
		Sync:  e.Sync, Sweep: time.Minute, List: controller.ListOf[*corev1.PersistentVolume](cfg.Volumes), Workers: cfg.Workers,
	}
	return e
}

// Watch queues the fenced volumes of the shared informer volumes.
func (e *Evictor) Watch(volumes cache.SharedIndexInformer) error { return e.loop.Watch(volumes) }

// Run completes evictions until ctx is done.
func (e *Evictor) Run(ctx context.Context) { e.loop.Run(ctx) }

// Wants reports whether the evictor has a step to take for pv: a volume
// this provisioner made that carries the eviction finalizer, or that was
// made ahead and waits for its storage; another installation's are its own
// to complete.
func (e *Evictor) Wants(pv *corev1.PersistentVolume) bool {
	return pv.Annotations[wellknown.ProvisionedBy] == e.cfg.Provisioner &&
		(slices.Contains(pv.Finalizers, wellknown.EvictFinalizer) || pools.StoragePending(pv))
}

// removeIfNotMade removes pv, made ahead and still waiting for its storage,
// once it has waited AheadBound or its node is gone: no claim had it, so no
// data goes, and it would otherwise count against maxVolumes for good. The
// pool makes another. Until then it is looked at again when the bound ends;
// making its storage (ahead.Members.Finish) is the pool manager's.
func (e *Evictor) removeIfNotMade(ctx context.Context, pv *corev1.PersistentVolume) error {
	why := ""
	if node := pv.Annotations[wellknown.Node]; node != "" && e.cfg.Nodes != nil {
		if _, err := e.cfg.Nodes.Get(node); apierrors.IsNotFound(err) {
			why = fmt.Sprintf("its node %s is gone", node)
		}
	}
	if age := e.cfg.Clock.Since(pv.CreationTimestamp.Time); why == "" {
		if age < e.cfg.AheadBound {
			e.loop.AddAfter(pv.Name, e.cfg.AheadBound-age)
			return nil
		}
		why = fmt.Sprintf("its storage was not made within %s (three times --lifecycle-timeout)", e.cfg.AheadBound)
	}
	fenced := pv.DeepCopy()
	fenced.Annotations[wellknown.Evicting] = wellknown.EvictNotMade
	fenced.Finalizers = append(fenced.Finalizers, wellknown.EvictFinalizer)
	res, err := e.p.UpdateVolume(ctx, fenced, "fencing volume "+pv.Name+", whose storage was not made, for removal")
	if res == nil {
		return err
	}
	msg := fmt.Sprintf("Made ahead of claims, but %s: removed, with whatever of its storage was made; the pool makes another", why)
	e.cfg.Recorder.Event(res, corev1.EventTypeWarning, reasonMemberNotMade, msg)
	if pool := pools.PoolOf(e.cfg.Pools, pv.Spec.StorageClassName); pool != nil {
		e.cfg.Recorder.Eventf(pool, corev1.EventTypeWarning, reasonMemberNotMade, "Volume %s: %s", pv.Name, msg)
	}
	e.cfg.Evictions.WithLabelValues(pv.Spec.StorageClassName, wellknown.EvictNotMade).Inc()
	klog.FromContext(ctx).Info("Removing a member whose storage was not made", "reason", why)
	return DeleteFenced(ctx, e.cfg.Client, res)
}

// Sync takes the eviction of the volume called name one step further.
func (e *Evictor) Sync(ctx context.Context, name string) error {
	obj, exists, err := e.cfg.Volumes.GetByKey(name)
	if err != nil || !exists {
		return err
	}
	pv := obj.(*corev1.PersistentVolume)
	if !e.Wants(pv) {
		return nil
	}
	logger := klog.FromContext(ctx).WithValues("pv", name)
	ctx = klog.NewContext(ctx, logger)
	if pools.StoragePending(pv) && pv.DeletionTimestamp == nil && !slices.Contains(pv.Finalizers, wellknown.EvictFinalizer) {
		return e.removeIfNotMade(ctx, pv)
	}
	if pv.DeletionTimestamp == nil {
		// Fenced, not deleted: a crash, or a write that came between: a
		// claim's, or an administrator's pre-bind, which no eviction
		// may delete either.
		if eviction.Unclaimed(pv) && !pools.PreBound(pv) && pools.Evicting(pv) {
			return DeleteFenced(ctx, e.cfg.Client, pv)
		}
		return e.unfence(ctx, pv)
	}
	err = e.p.RemoveStorage(ctx, pv)
	if gone := (*lifecycle.NodeGoneError)(nil); errors.As(err, &gone) {
		// The pool asked for the data to go, and no pod can reach it:
		// retrying would keep the volume Terminating for good.
		e.cfg.Recorder.Eventf(pv, corev1.EventTypeWarning, reasonEvictedFromGoneNode,
			"Node %s is gone: the directory %s stays on its disk; remove it should the node come back. The volume object goes", gone.Node, gone.Dir)
		err = nil
	}
	switch {
	case errors.Is(err, ErrNoBackend):
		return err
	case errors.Is(err, ErrHandedBack):
		// Fence fences no such member: the backing provisioner deletes
		// only what is Released, never an object already being deleted.
		return fmt.Errorf("volume %s was %w, which does not delete a volume object being deleted; remove its finalizer %s by hand once its storage is gone", name, err, wellknown.EvictFinalizer)
	case err != nil:
		e.cfg.Recorder.Eventf(pv, corev1.EventTypeWarning, reasonEvictionFailed, "Removing the storage of the evicted volume failed, retrying: %v", err)
		return fmt.Errorf("removing the storage of evicted volume %s: %w", name, err)
	}
	if _, err := e.cfg.Client.CoreV1().PersistentVolumes().Update(ctx, withoutFinalizer(pv), metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing the finalizer of evicted volume %s: %w", name, err)
	}
	logger.V(2).Info("Evicted a member of the pool", "cause", pv.Annotations[wellknown.Evicting])
	return nil
}

// unfence takes the fence of pv down: a claim had it before it could be
// deleted.
func (e *Evictor) unfence(ctx context.Context, pv *corev1.PersistentVolume) error {
	updated := withoutFinalizer(pv)
	delete(updated.Annotations, wellknown.Evicting)
	if _, err := e.cfg.Client.CoreV1().PersistentVolumes().Update(ctx, updated, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("taking down the eviction fence of volume %s: %w", pv.Name, err)
	}
	klog.FromContext(ctx).Info("A claim had the member before its eviction; it stays")
	return nil
}
