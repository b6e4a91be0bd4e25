package provisioner

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// This file holds how the flow consults its record of its own writes that
// the informer does not show yet (package memory): members taken, volumes being
// created.

// issuedTo names the volume already pointing at claim, if any, trusting the
// provisioner's own recent takes over a cache that has not caught up.
func (p *provisioner) issuedTo(claim *corev1.PersistentVolumeClaim) string {
	if names := p.issued.Get(claim.UID); len(names) > 0 {
		return names[0].Name
	}
	return p.takes.IssuedTo(claim.UID)
}

// reserve counts the volumes of class this provisioner created, including
// the ones on their way (a class pool's backing claims among them), in the
// class and on node (a volume's wellknown.Node), and holds a place for name on
// node unless that would exceed maxVolumes or maxPerNode (0: no limit). A retry for a name already counted always gets its place back.
func (p *provisioner) reserve(class, name, node string, maxVolumes, maxPerNode int) (count, onNode int, ok bool) {
	return p.pending.Reserve(class, name, node, maxVolumes, maxPerNode, func() map[string]string {
		names := p.classes.Pending(class)
		objs, _ := p.volumes.ByIndex(pools.VolumesByClass, class)
		for _, o := range objs {
			if pv := o.(*corev1.PersistentVolume); pv.Annotations[wellknown.ProvisionedBy] == p.name {
				names[pv.Name] = pv.Annotations[wellknown.Node]
			}
		}
		return names
	})
}
