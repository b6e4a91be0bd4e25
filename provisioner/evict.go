package provisioner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	lib "sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/reclaimable/reclaimable/apis/reclaimable/v1alpha1"
	"github.com/reclaimable/reclaimable/internal/controller"
	"github.com/reclaimable/reclaimable/internal/eviction"
	"github.com/reclaimable/reclaimable/internal/keys"
)

// Eviction removes a member from its pool with its data, without ever
// racing a claim. Three writes, each safe to repeat and each found again
// after a restart:
//
//  1. The fence: keys.Evicting (the cause) and keys.EvictFinalizer, in one
//     update guarded by the resourceVersion the decision was made on. The
//     provisioner gives no claim a volume so marked.
//  2. The delete, guarded by the fence's resourceVersion: the PV controller
//     and the scheduler bind no volume being deleted, and a bind that came
//     between the two writes makes the delete fail, and the fence is taken
//     down again. So a member is either issued or evicted, never both.
//  3. The storage, through the backend that made it; then the finalizer
//     goes, and with it the volume object.
//
// Steps 2 (after a crash) and 3 run in the evictor's queue, from the
// volume informer; step 1 is Evict, called by whoever decided.

const (
	reasonEvictionFailed = "EvictionFailed"
	// reasonEvictedFromGoneNode: a local member whose node is gone, let
	// go without its storage, which no pod can reach.
	reasonEvictedFromGoneNode = "EvictedFromGoneNode"
	// reasonMemberNotMade: a member made ahead whose storage was not made
	// in time, removed.
	reasonMemberNotMade = "MemberNotMade"
	// reasonMemberEvicted, on the pool, as the pool manager records it.
	reasonMemberEvicted = "MemberEvicted"
)

// CheckEvict says why the members of class, as its pool makes it, cannot
// be evicted, or nil.
func (p *provisioner) CheckEvict(class *storagev1.StorageClass) error {
	params, err := parseParameters(class, p.backends)
	if err != nil {
		return err
	}
	_, err = p.backends[params.backend].evicts()
	return err
}

// Usage returns what pv, a member of a directory class, held when it last
// came back to the pool, if that was measured.
func (p *provisioner) Usage(pv *corev1.PersistentVolume) (v1alpha1.MemberUsage, bool) {
	if p.measurer == nil {
		return v1alpha1.MemberUsage{}, false
	}
	return p.measurer.Usage(pv)
}

// withoutEvictFinalizer is a copy of pv without the eviction finalizer.
func withoutEvictFinalizer(pv *corev1.PersistentVolume) *corev1.PersistentVolume {
	updated := pv.DeepCopy()
	updated.Finalizers = slices.DeleteFunc(updated.Finalizers, func(f string) bool { return f == keys.EvictFinalizer })
	return updated
}

// Evict fences pv, a member of a pool of this provisioner as the cache
// showed it when the eviction was decided, and deletes it: its storage is
// removed next, in the background. It reports whether it did; a member
// that changed since (issued, say) is left alone.
func (p *provisioner) Evict(ctx context.Context, pv *corev1.PersistentVolume, cause string) (bool, error) {
	if !eviction.Evictable(pv) {
		return false, nil
	}
	b := p.backends[pv.Annotations[keys.Backend]]
	if b == nil {
		return false, nil
	}
	switch how, _ := b.evicts(); how {
	case evictNever:
		return false, nil
	case evictHandingBack:
		return p.evictToBacking(ctx, pv, cause)
	}
	logger := klog.FromContext(ctx).WithValues("pv", pv.Name, "cause", cause)
	fenced := pv.DeepCopy()
	if fenced.Annotations == nil {
		fenced.Annotations = map[string]string{}
	}
	fenced.Annotations[keys.Evicting] = cause
	fenced.Finalizers = append(fenced.Finalizers, keys.EvictFinalizer)
	res, err := p.client.CoreV1().PersistentVolumes().Update(ctx, fenced, metav1.UpdateOptions{})
	switch {
	case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		logger.V(2).Info("Not evicting a member that changed since the decision")
		return false, nil
	case err != nil:
		return false, fmt.Errorf("fencing volume %s for eviction: %w", pv.Name, err)
	}
	p.metrics.evictions.WithLabelValues(pv.Spec.StorageClassName, cause).Inc()
	logger.Info("Evicting a member of the pool")
	if err := p.deleteFenced(ctx, res); err != nil {
		// The evictor finds the fence and tries again, or takes it
		// down if a claim had the volume meanwhile.
		logger.V(2).Info("Deleting the fenced member failed; the evictor retries", "err", err)
	}
	return true, nil
}

// deleteFenced deletes pv, fenced, unless it changed since.
func (p *provisioner) deleteFenced(ctx context.Context, pv *corev1.PersistentVolume) error {
	err := p.client.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &pv.UID, ResourceVersion: &pv.ResourceVersion},
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// evictForClaim makes room, at the maximum of class, for claim, which no
// free member fits: it evicts the pool's least recently used member
// (eviction.Victim) and the claim waits, woken when the member is gone. A
// member already being evicted for each claim that waits is room enough:
// a claim retried meanwhile evicts no second one.
func (p *provisioner) evictForClaim(ctx context.Context, claim *corev1.PersistentVolumeClaim, class *storagev1.StorageClass, params *params, state poolState, msg string) (*corev1.PersistentVolume, lib.ProvisioningState, error) {
	members := p.members(class.Name, params.pool)
	evicting := 0
	for _, pv := range members {
		if controller.Evicting(pv) {
			evicting++
		}
	}
	if evicting < p.Waiting(class.Name) {
		victim := eviction.Victim(members)
		if victim == nil {
			return p.exhausted(ctx, claim, class, state, msg+"; no member may be evicted for it (evictForClaims): every one is bound, released or scrubbing")
		}
		evicted, err := p.Evict(ctx, victim, keys.EvictForClaim)
		if err != nil {
			return nil, lib.ProvisioningFinished, err
		}
		if !evicted {
			return nil, lib.ProvisioningFinished, fmt.Errorf("volume %s, chosen for eviction to make room for the claim, changed first; deciding again", victim.Name)
		}
		why := fmt.Sprintf("evicting volume %s (%s, the least recently used member), with its data, to make room for claim %s/%s (evictForClaims)",
			victim.Name, controller.StateOf(victim), claim.Namespace, claim.Name)
		p.recorder.Eventf(claim, corev1.EventTypeNormal, reasonEvictingForClaim, "%s; %s", msg, why)
		if pool := controller.PoolOf(p.pools, class.Name); pool != nil {
			p.recorder.Eventf(pool, corev1.EventTypeNormal, reasonMemberEvicted, "Evicted volume %s (%s), with its data, for claim %s/%s: the pool is at maxVolumes %d (evictForClaims)",
				victim.Name, controller.StateOf(victim), claim.Namespace, claim.Name, params.maxVolumes)
		}
	}
	p.onWaitingChange(class.Name)
	return nil, lib.ProvisioningFinished, reportedError{fmt.Errorf("%w: %s; a member is being evicted to make room for it", errExhausted, msg)}
}

// evictor completes the evictions of this provisioner's members.
type evictor struct {
	p     *provisioner
	queue *controller.Queue[string]
}

func newEvictor(p *provisioner, volumes cache.SharedIndexInformer) (*evictor, error) {
	e := &evictor{p: p}
	e.queue = controller.NewQueue("evictor", e.sync)
	_, err := volumes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    e.enqueueIfFenced,
		UpdateFunc: func(_, cur any) { e.enqueueIfFenced(cur) },
	})
	return e, err
}

// run completes evictions until ctx is done; a sweep now and then finds
// a step that failed or that a restart interrupted.
func (e *evictor) run(ctx context.Context, workers int) {
	go controller.Every(ctx, time.Minute, func(context.Context) {
		for _, o := range e.p.volumes.List() {
			e.enqueueIfFenced(o)
		}
	})
	e.queue.Run(ctx, workers)
}

// enqueueIfFenced queues a volume this provisioner made that carries the
// eviction finalizer, or that was made ahead and waits for its storage;
// another installation's are its own to complete.
func (e *evictor) enqueueIfFenced(obj any) {
	if pv, ok := obj.(*corev1.PersistentVolume); ok && pv.Annotations[keys.ProvisionedBy] == e.p.name &&
		(slices.Contains(pv.Finalizers, keys.EvictFinalizer) || controller.StoragePending(pv)) {
		e.queue.Add(pv.Name)
	}
}

// removeIfNotMade removes pv, made ahead and still waiting for its storage,
// once it has waited aheadBound or its node is gone: no claim had it, so no
// data goes, and it would otherwise count against maxVolumes for good. The
// pool makes another. Until then it is looked at again when the bound ends;
// making its storage (FinishAhead) is the pool manager's.
func (e *evictor) removeIfNotMade(ctx context.Context, pv *corev1.PersistentVolume) error {
	why := ""
	if node := pv.Annotations[keys.Node]; node != "" {
		if _, err := e.p.nodeNamed(node); apierrors.IsNotFound(err) {
			why = fmt.Sprintf("its node %s is gone", node)
		}
	}
	if age := e.p.clock.Since(pv.CreationTimestamp.Time); why == "" {
		if age < e.p.aheadBound {
			e.queue.AddAfter(pv.Name, e.p.aheadBound-age)
			return nil
		}
		why = fmt.Sprintf("its storage was not made within %s (three times --lifecycle-timeout)", e.p.aheadBound)
	}
	fenced := pv.DeepCopy()
	fenced.Annotations[keys.Evicting] = keys.EvictNotMade
	fenced.Finalizers = append(fenced.Finalizers, keys.EvictFinalizer)
	res, err := e.p.UpdateVolume(ctx, fenced, "fencing volume "+pv.Name+", whose storage was not made, for removal")
	if res == nil {
		return err
	}
	msg := fmt.Sprintf("Made ahead of claims, but %s: removed, with whatever of its storage was made; the pool makes another", why)
	e.p.recorder.Event(res, corev1.EventTypeWarning, reasonMemberNotMade, msg)
	if pool := controller.PoolOf(e.p.pools, pv.Spec.StorageClassName); pool != nil {
		e.p.recorder.Eventf(pool, corev1.EventTypeWarning, reasonMemberNotMade, "Volume %s: %s", pv.Name, msg)
	}
	e.p.metrics.evictions.WithLabelValues(pv.Spec.StorageClassName, keys.EvictNotMade).Inc()
	klog.FromContext(ctx).Info("Removing a member whose storage was not made", "reason", why)
	return e.p.deleteFenced(ctx, res)
}

func (e *evictor) sync(ctx context.Context, name string) error {
	obj, exists, err := e.p.volumes.GetByKey(name)
	if err != nil || !exists {
		return err
	}
	pv := obj.(*corev1.PersistentVolume)
	if pv.Annotations[keys.ProvisionedBy] != e.p.name || !slices.Contains(pv.Finalizers, keys.EvictFinalizer) && !controller.StoragePending(pv) {
		return nil
	}
	logger := klog.FromContext(ctx).WithValues("pv", name)
	ctx = klog.NewContext(ctx, logger)
	if controller.StoragePending(pv) && pv.DeletionTimestamp == nil && !slices.Contains(pv.Finalizers, keys.EvictFinalizer) {
		return e.removeIfNotMade(ctx, pv)
	}
	if pv.DeletionTimestamp == nil {
		// Fenced, not deleted: a crash, or a write that came between: a
		// claim's, or an administrator's pre-bind, which no eviction
		// may delete either.
		if eviction.Unclaimed(pv) && !controller.PreBound(pv) && controller.Evicting(pv) {
			return e.p.deleteFenced(ctx, pv)
		}
		return e.unfence(ctx, pv)
	}
	b := e.p.backends[pv.Annotations[keys.Backend]]
	if b == nil {
		return fmt.Errorf("volume %s names no backend of this provisioner (%s); remove its finalizer %s by hand once its storage is gone", name, keys.Backend, keys.EvictFinalizer)
	}
	how, err := b.delete(ctx, pv)
	if gone := (*nodeGone)(nil); errors.As(err, &gone) {
		// The pool asked for the data to go, and no pod can reach it:
		// retrying would keep the volume Terminating for good.
		e.p.recorder.Eventf(pv, corev1.EventTypeWarning, reasonEvictedFromGoneNode,
			"Node %s is gone: the directory %s stays on its disk; remove it should the node come back. The volume object goes", gone.node, gone.dir)
		err = nil
	}
	if err == nil && how == handedBack {
		// Evict fences no such member: the backing provisioner deletes
		// only what is Released, never an object already being deleted.
		return fmt.Errorf("volume %s was handed back to the provisioner of its storage, which does not delete a volume object being deleted; remove its finalizer %s by hand once its storage is gone", name, keys.EvictFinalizer)
	}
	if err != nil {
		var ignored *lib.IgnoredError
		if !errors.As(err, &ignored) {
			e.p.recorder.Eventf(pv, corev1.EventTypeWarning, reasonEvictionFailed, "Removing the storage of the evicted volume failed, retrying: %v", err)
			return fmt.Errorf("removing the storage of evicted volume %s: %w", name, err)
		}
	}
	updated := withoutEvictFinalizer(pv)
	if _, err := e.p.client.CoreV1().PersistentVolumes().Update(ctx, updated, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing the finalizer of evicted volume %s: %w", name, err)
	}
	logger.V(2).Info("Evicted a member of the pool", "cause", pv.Annotations[keys.Evicting])
	return nil
}

// unfence takes the fence of pv down: a claim had it before it could be
// deleted.
func (e *evictor) unfence(ctx context.Context, pv *corev1.PersistentVolume) error {
	updated := withoutEvictFinalizer(pv)
	delete(updated.Annotations, keys.Evicting)
	if _, err := e.p.client.CoreV1().PersistentVolumes().Update(ctx, updated, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("taking down the eviction fence of volume %s: %w", pv.Name, err)
	}
	klog.FromContext(ctx).Info("A claim had the member before its eviction; it stays")
	return nil
}
