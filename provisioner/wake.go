package provisioner

import (
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	volumehelpers "k8s.io/component-helpers/storage/volume"
	lib "sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/internal/wellknown"
	"github.com/reclaimable/reclaimable/provisioner/match"
	"github.com/reclaimable/reclaimable/provisioner/memory"
)

// This file holds the claims that wait for a full pool: Provision records
// them, and a volume freed in their class hands them back to the library at
// once rather than after its back-off.

// returnWait bounds how long a claim waits for its own volume, still bound
// to the earlier claim of its namespace and name, before it is served as
// any other claim. The PV controller releases such a volume as soon as it
// sees the earlier claim deleted, well within a second on a healthy
// control plane (docs/performance.md measures it); longer means it is
// behind, and the claim would rather have another volume than wait on it.
const returnWait = 10 * time.Second

// errAwaitingReturn marks a claim that waits for its own volume.
var errAwaitingReturn = errors.New("awaiting its volume")

// awaitReturn has claim wait, for left at most, for pv, which is still
// bound to the earlier claim of its name: its release (wakeReturns) or the
// end of the wait hands the claim back to the library.
func (p *provisioner) awaitReturn(claim *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume, left time.Duration) (*corev1.PersistentVolume, lib.ProvisioningState, error) {
	if was := p.returns.Add(pv.Name, claim); !was {
		p.recorder.Eventf(claim, corev1.EventTypeNormal, reasonAwaitingItsVolume,
			"Volume %s, which the earlier claim of this name used, is being released: the claim waits up to %s for it and its data rather than taking another volume", pv.Name, returnWait)
		p.after(left, func() { p.requeue(claim) })
	}
	// A release the cache showed before the claim was recorded woke no one.
	if obj, ok, _ := p.volumes.GetByKey(pv.Name); !ok || match.AvailabilityOf(obj.(*corev1.PersistentVolume), claim, false) != match.Returning {
		p.requeue(claim)
	}
	return nil, lib.ProvisioningFinished, reportedError{fmt.Errorf("%w: volume %s is bound to the earlier claim of this name until the PV controller releases it", errAwaitingReturn, pv.Name)}
}

// wakeReturns hands back to the library the claims waiting for pv to be
// released, on any change of it: those it still keeps wait again.
func (p *provisioner) wakeReturns(pv string) { p.requeueStill(p.returns, pv) }

// wake hands the claims waiting for class back to the library, which calls
// Provision for them at once instead of after its back-off.
func (p *provisioner) wake(class string) {
	p.requeueStill(p.waiting, class)
	p.requeueStill(p.atShare, class)
}

// requeueStill hands back to the library the claims of w that wait for
// key and still wait for a volume.
func (p *provisioner) requeueStill(w *memory.Waiting, key string) {
	for _, c := range w.Still(key, p.stillWaiting) {
		p.requeue(c)
	}
}

// Waiting counts the claims of class that wait for a full pool.
func (p *provisioner) Waiting(class string) int {
	return len(p.waiting.Still(class, p.stillWaiting))
}

// stillWaiting returns the claim of uid and key as the cache has it, or nil
// when it is gone, is another claim of that name, or has a volume.
func (p *provisioner) stillWaiting(uid types.UID, key types.NamespacedName) *corev1.PersistentVolumeClaim {
	c, err := p.claims.PersistentVolumeClaims(key.Namespace).Get(key.Name)
	if err != nil || c.UID != uid || c.Spec.VolumeName != "" {
		return nil
	}
	return c
}

// observeTaken drops the record of a member taken once the cache shows
// it; issued calls it after it shows the member (RefsOfThen), so that
// issuedTo finds the member in one or the other at every moment.
func (p *provisioner) observeTaken(obj any) {
	if pv, ok := obj.(*corev1.PersistentVolume); ok {
		p.takes.Observe(pv)
	}
}

// onVolume wakes the claims waiting for a class when one of its volumes is
// freed or deleted, or a free one joins.
func (p *provisioner) onVolume(old, cur *corev1.PersistentVolume) {
	if cur != nil {
		p.wakeReturns(cur.Name)
	} else {
		p.wakeReturns(old.Name)
	}
	if old != nil && cur != nil && p.isPoolVolume(cur) {
		if kind, ok := match.IssuedNow(old, cur); ok {
			p.metrics.issues.WithLabelValues(volumehelpers.GetPersistentVolumeClass(cur), string(kind), string(match.KeyResultOf(old, cur))).Inc()
		}
	}
	switch {
	case cur == nil:
		// Gone before a count saw it (evicted soon after it was made): it
		// holds no place any more.
		p.pending.Unreserve(old.Name)
		p.wake(volumehelpers.GetPersistentVolumeClass(old))
	case old != nil && volumehelpers.GetPersistentVolumeClass(old) != volumehelpers.GetPersistentVolumeClass(cur):
		// Gone to another class (a class member handed back): room in
		// its class.
		p.wake(volumehelpers.GetPersistentVolumeClass(old))
	case isFreed(cur) && (old == nil || !isFreed(old) || old.Labels[wellknown.Pool] != cur.Labels[wellknown.Pool]):
		p.wake(volumehelpers.GetPersistentVolumeClass(cur))
	}
}

// isFreed reports whether pv no longer serves a claim and may serve the
// next. A member being emptied, made or evicted serves none yet: the end of
// its scrub or of its making is what frees it, and must wake the claims
// waiting, which a Released phase seen before would not.
func isFreed(pv *corev1.PersistentVolume) bool {
	if pv.DeletionTimestamp != nil || pv.Status.Phase == corev1.VolumeFailed ||
		pools.Scrubbing(pv) || pools.StoragePending(pv) || pools.Evicting(pv) {
		return false
	}
	_, held := pools.HeldFor(pv)
	return pv.Spec.ClaimRef == nil || pools.Unissued(pv) || pv.Status.Phase == corev1.VolumeReleased || held || pools.Reserved(pv)
}
