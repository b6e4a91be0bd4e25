package backend

import (
	"maps"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// VolumeObject is the PersistentVolume of v, a volume of class, around what
// its backend made (or will make) of it: shaped as v's claim asks, pinned by
// affinity, with the annotations given and the backend's.
func VolumeObject(class *storagev1.StorageClass, backendName string, v NewVolume, made MadeVolume, affinity *corev1.VolumeNodeAffinity, annotations map[string]string) *corev1.PersistentVolume {
	if made.NodeAffinity != nil {
		affinity = made.NodeAffinity
	}
	policy := corev1.PersistentVolumeReclaimRetain
	if class.ReclaimPolicy != nil {
		policy = *class.ReclaimPolicy
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: v.Name, Annotations: map[string]string{}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:    corev1.ResourceList{corev1.ResourceStorage: v.Claim.Spec.Resources.Requests[corev1.ResourceStorage]},
			AccessModes: v.Claim.Spec.AccessModes,
			// A backend refuses the modes it cannot make.
			VolumeMode:                    ptr.To(ptr.Deref(v.Claim.Spec.VolumeMode, corev1.PersistentVolumeFilesystem)),
			PersistentVolumeReclaimPolicy: policy,
			StorageClassName:              class.Name,
			MountOptions:                  class.MountOptions,
			NodeAffinity:                  affinity,
			PersistentVolumeSource:        made.Source,
		},
	}
	pv.Annotations[wellknown.Backend] = backendName
	maps.Copy(pv.Annotations, annotations)
	maps.Copy(pv.Annotations, made.Annotations)
	return pv
}
