package controller

import (
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// trim keeps out of the shared caches what no controller reads, so that
// memory follows the number of objects, not their size: server-side-apply
// bookkeeping on every object, and of Pods and Jobs (the most numerous and
// largest objects cached) everything but their metadata, the names of their
// volumes and the source of their claim volumes, a Pod's scheduling gates
// and phase and a Job's conditions, which is all the podwatcher reads. A controller that comes to
// need more must add it here.
func trim(obj any) (any, error) {
	if acc, ok := obj.(metav1.ObjectMetaAccessor); ok {
		acc.GetObjectMeta().SetManagedFields(nil)
	}
	switch o := obj.(type) {
	case *corev1.Pod:
		delete(o.Annotations, corev1.LastAppliedConfigAnnotation)
		o.Spec = corev1.PodSpec{Volumes: claimVolumes(o.Spec.Volumes), SchedulingGates: o.Spec.SchedulingGates}
		o.Status = corev1.PodStatus{Phase: o.Status.Phase}
	case *batchv1.Job:
		delete(o.Annotations, corev1.LastAppliedConfigAnnotation)
		o.Spec.Template = corev1.PodTemplateSpec{Spec: corev1.PodSpec{Volumes: claimVolumes(o.Spec.Template.Spec.Volumes)}}
		o.Status = batchv1.JobStatus{Conditions: o.Status.Conditions}
	}
	return obj, nil
}

// claimVolumes keeps of volumes their names, which the podwatcher needs to
// tell a missing volume from one of another kind, and the source of those
// that are persistentVolumeClaim volumes. Every pod has a projected
// service-account volume that is larger than the rest of its trimmed self.
func claimVolumes(volumes []corev1.Volume) []corev1.Volume {
	if len(volumes) == 0 {
		return nil
	}
	out := make([]corev1.Volume, len(volumes))
	for i, v := range volumes {
		out[i] = corev1.Volume{Name: v.Name}
		if v.PersistentVolumeClaim != nil {
			out[i].PersistentVolumeClaim = &corev1.PersistentVolumeClaimVolumeSource{ClaimName: v.PersistentVolumeClaim.ClaimName}
		}
	}
	return out
}

// trimToMetadata keeps of a claim its metadata only, less what trim drops
// from every object; other objects it trims as trim does. It serves the
// cache of ManagedClaims, which holds claims alone.
func trimToMetadata(obj any) (any, error) {
	if _, err := trim(obj); err != nil {
		return nil, err
	}
	switch o := obj.(type) {
	case *corev1.PersistentVolumeClaim:
		delete(o.Annotations, corev1.LastAppliedConfigAnnotation)
		o.Spec = corev1.PersistentVolumeClaimSpec{}
		o.Status = corev1.PersistentVolumeClaimStatus{}
	}
	return obj, nil
}
