// Package evict completes the evictions of a provisioner's pool members
// (the evictor) and measures what members hold as they come back to the
// pool (the measurer), which the byte watermarks evict by. Which members
// go is the pools' one policy (internal/eviction); this package carries it
// out.
package evict

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// Eviction removes a member from its pool with its data, without ever
// racing a claim. Three writes, each safe to repeat and each found again
// after a restart:
//
//  1. The fence: wellknown.Evicting (the cause) and wellknown.EvictFinalizer, in one
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
// volume informer; step 1 is Fence, called by whoever decided.

// Fence marks pv, as the cache showed it when its eviction was decided, for
// eviction by cause: step 1. It returns the fenced volume, or nil when pv
// changed since (issued, say) or is gone, which leaves it alone.
func Fence(ctx context.Context, client kubernetes.Interface, pv *corev1.PersistentVolume, cause string) (*corev1.PersistentVolume, error) {
	fenced := pv.DeepCopy()
	if fenced.Annotations == nil {
		fenced.Annotations = map[string]string{}
	}
	fenced.Annotations[wellknown.Evicting] = cause
	fenced.Finalizers = append(fenced.Finalizers, wellknown.EvictFinalizer)
	res, err := client.CoreV1().PersistentVolumes().Update(ctx, fenced, metav1.UpdateOptions{})
	switch {
	case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("fencing volume %s for eviction: %w", pv.Name, err)
	}
	return res, nil
}

// DeleteFenced deletes pv, fenced, unless it changed since: step 2.
func DeleteFenced(ctx context.Context, client kubernetes.Interface, pv *corev1.PersistentVolume) error {
	err := client.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &pv.UID, ResourceVersion: &pv.ResourceVersion},
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// withoutFinalizer is a copy of pv without the eviction finalizer.
func withoutFinalizer(pv *corev1.PersistentVolume) *corev1.PersistentVolume {
	updated := pv.DeepCopy()
	updated.Finalizers = slices.DeleteFunc(updated.Finalizers, func(f string) bool { return f == wellknown.EvictFinalizer })
	return updated
}
