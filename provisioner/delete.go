package provisioner

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	lib "sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/reclaimable/reclaimable/internal/wellknown"
	"github.com/reclaimable/reclaimable/provisioner/backend"
)

// Delete removes, through the backend that made it, the storage of a volume
// this provisioner created with reclaim policy Delete, or hands it back to
// the provisioner that made its storage (the class backend). Anything else is left
// alone: the library then keeps the PV too.
func (p *provisioner) Delete(ctx context.Context, pv *corev1.PersistentVolume) error {
	p.pending.Unreserve(pv.Name)
	b := p.backends[pv.Annotations[wellknown.Backend]]
	if pv.Annotations[wellknown.ProvisionedBy] != p.name || b == nil {
		return &lib.IgnoredError{Reason: "the volume was not created by a backend of this provisioner"}
	}
	if pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete {
		return &lib.IgnoredError{Reason: "the volume's reclaim policy is not Delete, its data is kept"}
	}
	// Released is the PV controller's word, and may be stale: a volume
	// handed to a claim (the class backend's, a taken member) is Released
	// until the PV controller binds it.
	if gone, err := p.ClaimGone(ctx, pv); err != nil || !gone {
		if err != nil {
			return err
		}
		return &lib.IgnoredError{Reason: "the claim the volume names still exists"}
	}
	how, err := b.Delete(ctx, pv)
	if err == nil && how == backend.HandedBack {
		return &lib.IgnoredError{Reason: "the volume was handed back to the provisioner that made its storage, which deletes it"}
	}
	return err
}
