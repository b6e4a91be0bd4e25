package classpool

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/klog/v2"

	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/internal/wellknown"
	"github.com/reclaimable/reclaimable/provisioner/backend"
)

// HandBack evicts pv, a free member of a class pool as the cache showed it
// when the eviction was decided, by handing it back to the provisioner
// that made its storage, in one update guarded by its resourceVersion:
// that provisioner deletes only Released volumes, and never one whose
// object is already being deleted, so the volume is not fenced and
// deleted as other members are. Its claimRef names a claim that never
// exists (in the backing-claim namespace, with a UID of its own), so that
// the PV controller calls it Released, and its reclaim policy is Delete:
// the backing provisioner deletes disk and object. From this write on it
// is no longer in the pool, and no claim can be given it. It reports
// false when pv changed since the decision.
func (b *Pools) HandBack(ctx context.Context, pv *corev1.PersistentVolume, cause string) (bool, error) {
	logger := klog.FromContext(ctx).WithValues("pv", pv.Name, "cause", cause)
	if pv.Annotations[wellknown.BackingClass] == "" {
		return false, fmt.Errorf("volume %s does not say which class made its storage (annotation %s)", pv.Name, wellknown.BackingClass)
	}
	back, backer, err := backend.HandedBackCopy(pv)
	if err != nil {
		return false, err
	}
	back.Annotations[wellknown.Evicting] = cause
	back.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimDelete
	back.Spec.ClaimRef = &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1",
		Namespace: b.cfg.Namespace, Name: "evicted-" + pv.Name, UID: uuid.NewUUID()}
	_, err = b.cfg.Client.CoreV1().PersistentVolumes().Update(ctx, back, metav1.UpdateOptions{})
	switch {
	case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		logger.V(2).Info("Not evicting a member that changed since the decision")
		return false, nil
	case err != nil:
		return false, fmt.Errorf("handing volume %s back to provisioner %s for eviction: %w", pv.Name, backer, err)
	}
	b.cfg.Evictions.WithLabelValues(pv.Spec.StorageClassName, cause).Inc()
	logger.Info("Evicted a member of the pool: handed back to the provisioner of its storage", "provisioner", backer)
	return true, nil
}

// memberOf is pv, a volume of a backing class kept for the pool (step 3),
// made a member of class, with policy and labels: provisioned-by this
// provisioner, its backing provisioner and class recorded, the marks of
// the keep gone. Its claimRef is the caller's to set.
func (b *Pools) memberOf(pv *corev1.PersistentVolume, class string, policy corev1.PersistentVolumeReclaimPolicy, labels map[string]string) *corev1.PersistentVolume {
	member := backend.Member(pv, b.cfg.Name, class, policy)
	for _, k := range forClaimKeys {
		delete(member.Annotations, k)
	}
	if len(labels) > 0 {
		if member.Labels == nil {
			member.Labels = map[string]string{}
		}
		maps.Copy(member.Labels, labels)
	}
	member.Labels = pools.SetManagedBy(member.Labels, b.cfg.ControllerID)
	return member
}
