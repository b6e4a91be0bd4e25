package pools

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	volumehelpers "k8s.io/component-helpers/storage/volume"
)

// VolumesByClass indexes the shared PersistentVolume informer by the name of
// each volume's StorageClass, the beta annotation honoured as the PV
// controller does. The provisioner and the releaser both read it; one
// process running both registers it once.
const VolumesByClass = "reclaimable/volume-class"

// IndexVolumesByClass adds VolumesByClass to the volume informer, unless a
// controller of the process already has.
func IndexVolumesByClass(volumes cache.SharedIndexInformer) error {
	if _, ok := volumes.GetIndexer().GetIndexers()[VolumesByClass]; ok {
		return nil
	}
	return volumes.AddIndexers(cache.Indexers{VolumesByClass: VolumeClass})
}

// VolumeClass is the index function of VolumesByClass.
func VolumeClass(obj any) ([]string, error) {
	pv, ok := obj.(*corev1.PersistentVolume)
	if !ok {
		return nil, nil
	}
	if class := volumehelpers.GetPersistentVolumeClass(pv); class != "" {
		return []string{class}, nil
	}
	return nil, nil
}
