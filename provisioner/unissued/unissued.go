// Package unissued keeps the free members of pools that hold members to
// namespaces (reuseScope namespace) out of the PV controller's reach.
//
// The PV controller binds a free volume without a claimRef to any pending
// claim that fits, without the provisioner: past keyPolicy Require, which
// then records no key (the member's data later goes to a claim of another
// key), and past maxVolumesPerNamespace, which then cannot count it. Members
// made ahead, held and reserved name a claim already. A member found
// without one (a static pool's member no claim has had, one whose pool
// changed its reuseScope to namespace, one a scrub emptied before it named
// one itself) gets the claimRef of a member made ahead: a claim that never
// exists (pools.AheadClaimRef), which the PV controller binds to nobody, so
// that only the provisioner issues it, minding keys and shares.
//
// Such members no longer draw a pod to their node through the scheduler's
// volume binding: the provisioner picks among them on the node the
// scheduler chose.
package unissued

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	volumehelpers "k8s.io/component-helpers/storage/volume"
	"k8s.io/klog/v2"

	"github.com/reclaimable/reclaimable/internal/controller"
	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// Config is what the keeper reads and writes through.
type Config struct {
	// Provisioner is the provisioner's name: only its classes' members are
	// kept.
	Provisioner string
	Client      kubernetes.Interface
	// Volumes is the shared volume informer's cache.
	Volumes cache.Indexer
	Classes storagelisters.StorageClassLister
	// Pools is the shared VolumePool informer's cache: a pool's reuseScope
	// overrides its class's.
	Pools   cache.Indexer
	Workers int
}

// Keeper names a claim that never exists in the claimRef of each loose
// member (Loose) of a pool that holds members to namespaces.
type Keeper struct {
	cfg  Config
	loop *controller.Loop[*corev1.PersistentVolume, string]
}

// New builds the keeper of cfg; Watch has it follow the volumes.
func New(cfg Config) *Keeper {
	k := &Keeper{cfg: cfg}
	// A member turns loose at a write of someone else's (an administrator
	// labelling it into a pool, the PV controller clearing a claimRef); a
	// pool that changes its reuseScope changes no member, which the sweep
	// finds.
	k.loop = &controller.Loop[*corev1.PersistentVolume, string]{
		Name: "unissued", Ref: controller.NameRef[*corev1.PersistentVolume],
		Wants: func(_, cur *corev1.PersistentVolume) bool { return Loose(cur, cfg.Provisioner) },
		Sync:  k.Sync, Sweep: time.Minute, List: controller.ListOf[*corev1.PersistentVolume](cfg.Volumes), Workers: cfg.Workers,
	}
	return k
}

// Watch queues the loose members of the shared informer volumes.
func (k *Keeper) Watch(volumes cache.SharedIndexInformer) error { return k.loop.Watch(volumes) }

// Run keeps members until ctx is done.
func (k *Keeper) Run(ctx context.Context) { k.loop.Run(ctx) }

// Loose reports whether pv is a pool member of provisioner, no claim's yet,
// that the PV controller may bind to a claim on its own: one without a
// claimRef that is neither being made, emptied, evicted nor deleted (each
// of which names a claim, or none, in its own time). A member with a last
// claim is its namespace's: the releaser holds it for that namespace
// (releaser.rescopeOf), and naming no claim's namespace would hand its
// data to any.
func Loose(pv *corev1.PersistentVolume, provisioner string) bool {
	return pools.MayBeMember(pv, provisioner) && pv.Spec.ClaimRef == nil && pv.Annotations[wellknown.LastClaim] == "" &&
		pv.DeletionTimestamp == nil && pv.Status.Phase != corev1.VolumeFailed &&
		!pools.Scrubbing(pv) && !pools.Evicting(pv) && !pools.StoragePending(pv)
}

// Namespaced reports whether class, as pool makes it, holds its members to
// namespaces: reuseScope namespace, the default, or a scope it cannot read
// (pools.NamespaceScoped, the side that leaks nothing).
func Namespaced(class *storagev1.StorageClass, pool cache.Indexer) bool {
	return pools.NamespaceScoped(pools.EffectiveClass(class, pools.PoolOf(pool, class.Name)), class.Provisioner)
}

// Sync gives the volume called name the claimRef of a claim that never
// exists, if it is loose in a pool that holds members to namespaces. The
// write is guarded by the resourceVersion the cache showed: should the PV
// controller bind the member first, the write fails and the member stays
// with the claim it got, which the provisioner counts as any other.
func (k *Keeper) Sync(ctx context.Context, name string) error {
	obj, exists, err := k.cfg.Volumes.GetByKey(name)
	if err != nil || !exists {
		return err
	}
	pv := obj.(*corev1.PersistentVolume)
	if !Loose(pv, k.cfg.Provisioner) {
		return nil
	}
	class, err := k.cfg.Classes.Get(volumehelpers.GetPersistentVolumeClass(pv))
	switch {
	case apierrors.IsNotFound(err):
		return nil // no class, no provisioner to issue it: Kubernetes' alone
	case err != nil:
		return err
	case class.Provisioner != k.cfg.Provisioner || !Namespaced(class, k.cfg.Pools):
		return nil
	}
	updated := pv.DeepCopy()
	updated.Spec.ClaimRef = pools.AheadClaimRef(pv.Name)
	_, err = k.cfg.Client.CoreV1().PersistentVolumes().Update(ctx, updated, metav1.UpdateOptions{})
	switch {
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		// Gone, or changed first: the change queues it again if it is
		// still loose.
		return nil
	case err != nil:
		return fmt.Errorf("naming a claim that never exists in the claimRef of volume %s: %w", pv.Name, err)
	}
	klog.FromContext(ctx).V(2).Info("A free member without a claimRef is issued by the provisioner alone from now on", "pv", pv.Name)
	return nil
}
