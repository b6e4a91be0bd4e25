package provisioner

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/klog/v2"

	"github.com/reclaimable/reclaimable/apis/reclaimable/v1alpha1"
	"github.com/reclaimable/reclaimable/internal/controller"
	"github.com/reclaimable/reclaimable/internal/keys"
)

// This file holds the members made ahead of any claim, for a VolumePool's
// minAvailable. Each is made in three steps, each safe to repeat: its
// volume object, whose claimRef names a claim that never exists (so the PV
// controller binds it to nobody) and which is marked storage-pending; then
// its storage, through the class's backend; then the mark goes. The object
// comes first so that a provisioner stopped at any point leaves something
// that lists what it started, and FinishAhead completes it.

// defaultAheadCapacity is the capacity of a member made ahead when the
// pool's template does not say.
var defaultAheadCapacity = resource.MustParse("1Gi")

// CheckAhead says why the pool of class (as pool makes it) cannot keep
// members made ahead, or nil when it can. It does no I/O.
func (p *provisioner) CheckAhead(class *storagev1.StorageClass, pool *v1alpha1.VolumePool) error {
	params, err := parseParameters(class, p.backends)
	if err != nil {
		return err
	}
	maker, advice := params.pool.maker()
	switch {
	case maker == nil:
		return fmt.Errorf("the %s backend makes no volumes (%s): it cannot keep members ready", params.backend, advice)
	case params.backend == backendLocal:
		return fmt.Errorf("the %s backend makes a volume on the node of its first consumer, and members made ahead have none yet", backendLocal)
	case class.ReclaimPolicy != nil && *class.ReclaimPolicy != corev1.PersistentVolumeReclaimRetain:
		return fmt.Errorf("the class's reclaimPolicy is %s: its volumes leave the pool when released, so members made ahead would be used once", *class.ReclaimPolicy)
	}
	claim := aheadClaim(pool, "check")
	if _, err := maker.refuse(claim); err != nil {
		return fmt.Errorf("the template is refused: %w", err)
	}
	if max := params.maxCapacity; max != nil && claim.Spec.Resources.Requests.Storage().Cmp(*max) > 0 {
		return fmt.Errorf("the template's capacity %s is above the class's %s %s", claim.Spec.Resources.Requests.Storage(), paramMaxCapacity, max)
	}
	return nil
}

// AheadInFlight counts the members of class being made ahead that the
// cache does not show yet.
func (p *provisioner) AheadInFlight(class string) int {
	return p.pending.aheadInFlight(class, func(name string) bool {
		_, exists, _ := p.volumes.GetByKey(name)
		return exists
	})
}

// MakeAhead makes up to n members of class's pool (class as pool makes it)
// ahead of claims, within its maxVolumes, and returns how many it made.
func (p *provisioner) MakeAhead(ctx context.Context, class *storagev1.StorageClass, pool *v1alpha1.VolumePool, n int) (int, error) {
	if err := p.CheckAhead(class, pool); err != nil {
		return 0, err
	}
	params, err := parseParameters(class, p.backends)
	if err != nil {
		return 0, err
	}
	maker, _ := params.pool.maker()
	for made := 0; made < n; made++ {
		name := "pvc-" + string(uuid.NewUUID())
		if _, _, ok := p.reserve(class.Name, name, "", params.maxVolumes, params.maxVolumesPerNode); !ok {
			return made, nil // the maximum is reached; claims may still free members
		}
		p.pending.markAhead(name)
		start := p.clock.Now()
		v := newVolume{name: name, claim: aheadClaim(pool, name)}
		if err := p.makeAhead(ctx, class, params.backend, maker, pool.Name, v); err != nil {
			return made, err
		}
		p.metrics.madeAhead.WithLabelValues(class.Name).Observe(p.clock.Since(start).Seconds())
	}
	return n, nil
}

func (p *provisioner) makeAhead(ctx context.Context, class *storagev1.StorageClass, backend string, maker volumeMaker, pool string, v newVolume) error {
	plan, err := maker.plan(v)
	if err != nil {
		p.pending.unreserve(v.name)
		return err
	}
	pv := volumeObject(class, backend, v, plan, nodeAffinity(class), map[string]string{
		keys.ProvisionedBy:  p.name,
		keys.MadeAhead:      pool,
		keys.StoragePending: "true",
	})
	pv.Spec.ClaimRef = &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: v.claim.Namespace, Name: v.claim.Name}
	created, err := p.client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	if err != nil {
		p.pending.unreserve(v.name)
		return fmt.Errorf("creating volume %s ahead of claims: %w", v.name, err)
	}
	klog.FromContext(ctx).V(2).Info("Making a member ahead of claims", "pv", v.name, "pool", pool)
	return p.finishAhead(ctx, maker, created)
}

// finishAhead makes the storage of pv, a member made ahead whose storage is
// pending, and clears the mark: the member is free from then on.
func (p *provisioner) finishAhead(ctx context.Context, maker volumeMaker, pv *corev1.PersistentVolume) error {
	claim := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: keys.MadeAheadClaim(pv.Name)},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: pv.Spec.AccessModes, VolumeMode: pv.Spec.VolumeMode,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: pv.Spec.Capacity[corev1.ResourceStorage]}},
		},
	}
	if _, err := maker.create(ctx, newVolume{name: pv.Name, claim: claim}); err != nil {
		return fmt.Errorf("making the storage of volume %s ahead of claims: %w", pv.Name, err)
	}
	updated := pv.DeepCopy()
	delete(updated.Annotations, keys.StoragePending)
	// Guarded by the resourceVersion: a volume changed meanwhile is looked
	// at again from the cache, and its storage is made again, which reuses
	// what this call made.
	if _, err := p.client.CoreV1().PersistentVolumes().Update(ctx, updated, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("marking volume %s ready: %w", pv.Name, err)
	}
	return nil
}

// FinishAhead completes the members of class made ahead whose storage is
// still pending: a provisioner stopped between the steps left them.
func (p *provisioner) FinishAhead(ctx context.Context, class *storagev1.StorageClass) error {
	params, err := parseParameters(class, p.backends)
	if err != nil {
		return err
	}
	maker, _ := params.pool.maker()
	objs, _ := p.volumes.ByIndex(controller.VolumesByClass, class.Name)
	var errs []error
	for _, o := range objs {
		pv, ok := o.(*corev1.PersistentVolume)
		if !ok || pv.Annotations[keys.ProvisionedBy] != p.name || !controller.StoragePending(pv) || pv.DeletionTimestamp != nil {
			continue
		}
		if maker == nil {
			errs = append(errs, fmt.Errorf("volume %s waits for its storage, and the %s backend makes none", pv.Name, params.backend))
			continue
		}
		klog.FromContext(ctx).Info("Finishing a member made ahead", "pv", pv.Name)
		errs = append(errs, p.finishAhead(ctx, maker, pv))
	}
	return errors.Join(errs...)
}

// aheadClaim is the claim a member made ahead for pool is shaped after: the
// pool's template, with the name the member's claimRef gives, in no
// namespace any claim could be made in under that name by chance.
func aheadClaim(pool *v1alpha1.VolumePool, pv string) *corev1.PersistentVolumeClaim {
	capacity := defaultAheadCapacity
	modes := []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	if t := pool.Spec.Template; t != nil {
		if t.Capacity != nil {
			capacity = *t.Capacity
		}
		if len(t.AccessModes) > 0 {
			modes = t.AccessModes
		}
	}
	fs := corev1.PersistentVolumeFilesystem
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: aheadNamespace, Name: keys.MadeAheadClaim(pv)},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: modes, VolumeMode: &fs,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: capacity}},
		},
	}
}

// aheadNamespace holds the claims named by members made ahead; none is
// ever made. kube-system: who may create claims there may do far more.
const aheadNamespace = metav1.NamespaceSystem
