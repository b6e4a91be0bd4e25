package provisioner

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	volumehelpers "k8s.io/component-helpers/storage/volume"

	"github.com/reclaimable/reclaimable/internal/controller"
	"github.com/reclaimable/reclaimable/internal/keys"
)

// This file holds the claims that wait for a full pool: Provision records
// them, and a volume freed in their class hands them back to the library at
// once rather than after its back-off.

// wake hands the claims waiting for class back to the library, which calls
// Provision for them at once instead of after its back-off.
func (p *provisioner) wake(class string) {
	for _, c := range p.waiting.still(class, p.stillWaiting) {
		p.requeue(c)
	}
}

// Waiting counts the claims of class that wait for a full pool.
func (p *provisioner) Waiting(class string) int {
	return len(p.waiting.still(class, p.stillWaiting))
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

// onVolume wakes the claims waiting for a class when one of its volumes is
// freed or deleted, or a free one joins.
func (p *provisioner) onVolume(old, cur *corev1.PersistentVolume) {
	if cur != nil {
		p.takes.observe(cur)
	}
	if old != nil && cur != nil && p.isPoolVolume(cur) {
		if kind, ok := issuedNow(old, cur); ok {
			p.metrics.issues.WithLabelValues(volumehelpers.GetPersistentVolumeClass(cur), string(kind)).Inc()
		}
	}
	switch {
	case cur == nil:
		// Gone before a count saw it (evicted soon after it was made): it
		// holds no place any more.
		p.pending.unreserve(old.Name)
		p.wake(volumehelpers.GetPersistentVolumeClass(old))
	case isFreed(cur) && (old == nil || !isFreed(old) || keys.Value(old.Labels, PoolLabel) != keys.Value(cur.Labels, PoolLabel)):
		p.wake(volumehelpers.GetPersistentVolumeClass(cur))
	}
}

// isFreed reports whether pv no longer serves a claim.
func isFreed(pv *corev1.PersistentVolume) bool {
	if pv.DeletionTimestamp != nil || pv.Status.Phase == corev1.VolumeFailed {
		return false
	}
	_, held := controller.HeldFor(pv)
	return pv.Spec.ClaimRef == nil || pv.Status.Phase == corev1.VolumeReleased || held || controller.Reserved(pv)
}
