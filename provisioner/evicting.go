package provisioner

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/klog/v2"
	lib "sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/reclaimable/reclaimable/apis/reclaimable/v1alpha1"
	"github.com/reclaimable/reclaimable/internal/eviction"
	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/internal/wellknown"
	"github.com/reclaimable/reclaimable/provisioner/backend"
	"github.com/reclaimable/reclaimable/provisioner/evict"
	"github.com/reclaimable/reclaimable/provisioner/match"
)

// Eviction as the provisioner decides it for a claim (evictForClaims) and
// carries it out for the pool manager (Evict): the fence and the delete
// (provisioner/evict, which completes them) or the hand-back to the
// provisioner of the storage (the class backend), as the member's backend
// says.

const (
	// reasonMemberEvicted, on the pool, as the pool manager records it.
	reasonMemberEvicted = "MemberEvicted"
)

// CheckEvict says why the members of class, as its pool makes it, cannot
// be evicted, or nil.
func (p *provisioner) CheckEvict(class *storagev1.StorageClass) error {
	params, err := backend.ParseParameters(class, p.backends)
	if err != nil {
		return err
	}
	_, err = p.backends[params.Backend].Evicts()
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

// Measures reports whether the backend that made pv measures its members.
func (p *provisioner) Measures(pv *corev1.PersistentVolume) bool {
	b := p.backends[pv.Annotations[wellknown.Backend]]
	return b != nil && b.Measures()
}

// Measure measures member pv through the backend that made it.
func (p *provisioner) Measure(pv *corev1.PersistentVolume, deadline time.Time) (int64, bool, error) {
	b := p.backends[pv.Annotations[wellknown.Backend]]
	if b == nil {
		return 0, false, backend.ErrNotMeasured
	}
	return b.Usage(pv, deadline)
}

// RemoveStorage removes the storage of pv, an evicted member being deleted,
// through the backend that made it (evict.Provisioner). A backend that
// ignores the volume has nothing to remove.
func (p *provisioner) RemoveStorage(ctx context.Context, pv *corev1.PersistentVolume) error {
	b := p.backends[pv.Annotations[wellknown.Backend]]
	if b == nil {
		return fmt.Errorf("volume %s %w (%s); remove its finalizer %s by hand once its storage is gone", pv.Name, evict.ErrNoBackend, wellknown.Backend, wellknown.EvictFinalizer)
	}
	how, err := b.Delete(ctx, pv)
	var ignored *lib.IgnoredError
	switch {
	case errors.As(err, &ignored):
		return nil
	case err != nil:
		return err
	case how == backend.HandedBack:
		return evict.ErrHandedBack
	}
	return nil
}

// Evict fences pv, a member of a pool of this provisioner as the cache
// showed it when the eviction was decided, and deletes it: its storage is
// removed next, in the background. It reports whether it did; a member
// that changed since (issued, say) is left alone.
func (p *provisioner) Evict(ctx context.Context, pv *corev1.PersistentVolume, cause string) (bool, error) {
	if !eviction.Evictable(pv) {
		return false, nil
	}
	b := p.backends[pv.Annotations[wellknown.Backend]]
	if b == nil {
		return false, nil
	}
	switch how, _ := b.Evicts(); how {
	case backend.EvictNever:
		return false, nil
	case backend.EvictHandingBack:
		return p.classes.HandBack(ctx, pv, cause)
	}
	logger := klog.FromContext(ctx).WithValues("pv", pv.Name, "cause", cause)
	res, err := evict.Fence(ctx, p.client, pv, cause)
	if res == nil {
		if err == nil {
			logger.V(2).Info("Not evicting a member that changed since the decision")
		}
		return false, err
	}
	p.metrics.evictions.WithLabelValues(pv.Spec.StorageClassName, cause).Inc()
	logger.Info("Evicting a member of the pool")
	if err := evict.DeleteFenced(ctx, p.client, res); err != nil {
		// The evictor finds the fence and tries again, or takes it
		// down if a claim had the volume meanwhile.
		logger.V(2).Info("Deleting the fenced member failed; the evictor retries", "err", err)
	}
	return true, nil
}

// evictForClaim makes room, at the maximum of class, for claim, which no
// free member fits: it evicts the pool's least recently used member
// (eviction.Victim) and the claim waits, woken when the member is gone. A
// member already being evicted for each claim that waits is room enough:
// a claim retried meanwhile evicts no second one.
func (p *provisioner) evictForClaim(ctx context.Context, claim *corev1.PersistentVolumeClaim, class *storagev1.StorageClass, params *backend.Params, state match.State, msg string) (*corev1.PersistentVolume, lib.ProvisioningState, error) {
	members := p.members(class.Name, params.Pool)
	evicting := 0
	for _, pv := range members {
		if pools.Evicting(pv) {
			evicting++
		}
	}
	if evicting < p.Waiting(class.Name) {
		victim := eviction.Victim(members)
		if victim == nil {
			return p.exhausted(ctx, claim, class, state, msg+"; no member may be evicted for it (evictForClaims): every one is bound, released or scrubbing")
		}
		if err := p.evictFor(ctx, claim, class, victim, msg, fmt.Sprintf("the pool is at maxVolumes %d", params.MaxVolumes)); err != nil {
			return nil, lib.ProvisioningFinished, err
		}
	}
	p.onWaitingChange(class.Name)
	return nil, lib.ProvisioningFinished, reportedError{fmt.Errorf("%w: %s; a member is being evicted to make room for it", errExhausted, msg)}
}

// evictFor evicts victim for claim, which waits at a maximum msg tells of
// (limit, for the pool's event), with an event on the claim and the pool.
func (p *provisioner) evictFor(ctx context.Context, claim *corev1.PersistentVolumeClaim, class *storagev1.StorageClass, victim *corev1.PersistentVolume, msg, limit string) error {
	evicted, err := p.Evict(ctx, victim, wellknown.EvictForClaim)
	if err != nil {
		return err
	}
	if !evicted {
		return fmt.Errorf("volume %s, chosen for eviction to make room for the claim, changed first; deciding again", victim.Name)
	}
	why := fmt.Sprintf("evicting volume %s (%s, the least recently used member), with its data, to make room for claim %s/%s (evictForClaims)",
		victim.Name, pools.StateOf(victim), claim.Namespace, claim.Name)
	p.recorder.Eventf(claim, corev1.EventTypeNormal, reasonEvictingForClaim, "%s; %s", msg, why)
	if pool := pools.PoolOf(p.pools, class.Name); pool != nil {
		p.recorder.Eventf(pool, corev1.EventTypeNormal, reasonMemberEvicted, "Evicted volume %s (%s), with its data, for claim %s/%s: %s (evictForClaims)",
			victim.Name, pools.StateOf(victim), claim.Namespace, claim.Name, limit)
	}
	return nil
}
