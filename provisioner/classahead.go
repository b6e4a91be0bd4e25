package provisioner

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	volumehelpers "k8s.io/component-helpers/storage/volume"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/reclaimable/reclaimable/apis/reclaimable/v1alpha1"
	"github.com/reclaimable/reclaimable/internal/keys"
	"github.com/reclaimable/reclaimable/provisioner/backend"
)

// This file holds how a class pool (class.go) keeps members made ahead of
// claims (minAvailable): through backing claims too (backing.go), for a
// claim that never exists.

// askAhead asks backing, the backing class of class, for up to n members of class's pool
// ahead of claims, within its maxVolumes, and returns how many it asked for.
// Each is a backing claim of the pool's template, for a claim that never
// exists (keys.BackingForUID a UID of its own, keys.MadeAhead the pool), that
// syncAhead takes through the steps of the hand-over, the last of which
// makes the volume a free member. For a class that binds on first consumer,
// the backing claim names the node it is made for, as the scheduler does
// for a pod's (leastServedZone).
func (p *provisioner) askAhead(ctx context.Context, class *storagev1.StorageClass, pool *v1alpha1.VolumePool, params *params, backing *storagev1.StorageClass, n int) (int, error) {
	if p.backing == nil {
		return 0, errors.New("the provisioner does not watch backing claims")
	}
	// A class that binds on first consumer makes each member ahead for a
	// node of the least served of the pool's zones (zones.go).
	var nodes map[string][]*corev1.Node
	var free map[string]int
	if backend.BindingMode(class) == storagev1.VolumeBindingWaitForFirstConsumer {
		nodes = p.zoneNodes(pool)
		free = p.freeByZone(class.Name, nodes)
	}
	for asked := 0; asked < n; asked++ {
		annotations := map[string]string{keys.PoolClass: class.Name, keys.MadeAhead: pool.Name}
		if nodes != nil {
			zone, node, ok := leastServedZone(templateZones(pool), free, nodes)
			if !ok {
				return asked, fmt.Errorf("no Ready, schedulable node of the zones %v matches the template's nodeSelector %v", templateZones(pool), templateNodes(pool))
			}
			free[zone]++
			annotations[volumehelpers.AnnSelectedNode] = node.Name
		}
		uid := uuid.NewUUID()
		name := backingClaimName(uid)
		if _, _, ok := p.reserve(class.Name, name, "", params.maxVolumes, 0); !ok {
			return asked, nil // the maximum is reached; claims may still free members
		}
		p.pending.MarkAhead(name)
		shape := aheadClaim(pool, name)
		annotations[keys.BackingForUID] = string(uid)
		backing := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{
				Name: name, Namespace: p.backing.namespace,
				Labels:      map[string]string{keys.BackingClaimOf: p.backing.controllerID},
				Annotations: annotations,
			},
			Spec: corev1.PersistentVolumeClaimSpec{
				StorageClassName: ptr.To(backing.Name),
				AccessModes:      shape.Spec.AccessModes, VolumeMode: shape.Spec.VolumeMode, Resources: shape.Spec.Resources,
			},
		}
		if _, err := p.client.CoreV1().PersistentVolumeClaims(p.backing.namespace).Create(ctx, backing, metav1.CreateOptions{}); err != nil {
			p.pending.Unreserve(name)
			return asked, fmt.Errorf("asking class %s for a member ahead of claims through claim %s/%s: %w", backing.Name, p.backing.namespace, name, err)
		}
		klog.FromContext(ctx).V(2).Info("Asked the backing class for a member ahead of claims", "backingClass", backing.Name, "claim", klog.KObj(backing), "pool", pool.Name)
	}
	return n, nil
}

// syncAhead takes a member asked for ahead of claims (askAhead) one step
// further: kept once its volume is bound, the backing claim deleted, and,
// once it is gone, the volume made a free member made ahead.
func (p *provisioner) syncAhead(ctx context.Context, uid types.UID, backing *corev1.PersistentVolumeClaim, kept *corev1.PersistentVolume) error {
	logger := klog.FromContext(ctx).WithValues("backingClaim", backingClaimName(uid))
	if kept == nil {
		pv, err := p.backingVolume(ctx, backing)
		if err != nil {
			return err
		}
		if pv == nil {
			return p.awaitAhead(ctx, uid, backing) // its bind brings it back
		}
		if err := p.keep(ctx, pv, map[string]string{keys.BackingForUID: string(uid),
			keys.PoolClass: backing.Annotations[keys.PoolClass], keys.MadeAhead: backing.Annotations[keys.MadeAhead]}); err != nil {
			return err
		}
		logger.V(2).Info("Kept a volume of the backing class for a member made ahead", "pv", pv.Name)
		p.deleteBackingClaim(ctx, backing)
		return nil // its deletion brings it back
	}
	live, err := p.backingClaimLive(ctx, uid)
	switch {
	case err != nil:
		return err
	case live != nil:
		logger.V(4).Info("Waiting for the backing claim of a member made ahead to be gone", "pv", kept.Name)
		p.deleteBackingClaim(ctx, live)
		return nil
	}
	member := p.memberOf(kept, kept.Annotations[keys.PoolClass], corev1.PersistentVolumeReclaimRetain, nil)
	member.Spec.ClaimRef = aheadClaimRef(kept.Name)
	if _, err := p.client.CoreV1().PersistentVolumes().Update(ctx, member, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("making volume %s a member ahead of claims: %w", kept.Name, err)
	}
	p.pending.Rename(backingClaimName(uid), kept.Name)
	p.metrics.created.WithLabelValues(member.Spec.StorageClassName).Inc()
	logger.V(2).Info("Made a member ahead of claims", "pv", kept.Name, "pool", kept.Annotations[keys.MadeAhead])
	return nil
}

// awaitAhead waits for the backing class to bind a volume to backing, a
// backing claim asked for a member made ahead, for aheadBound at most, and
// not at all once its pool is gone or keeps no member ahead any more: the
// claim is then deleted, which loses nothing (nothing is bound to it), and
// its place under maxVolumes is given back. A driver that never makes the
// volume would otherwise hold that place for good.
func (p *provisioner) awaitAhead(ctx context.Context, uid types.UID, backing *corev1.PersistentVolumeClaim) error {
	if backing.DeletionTimestamp != nil {
		return nil
	}
	class := ptr.Deref(backing.Spec.StorageClassName, "")
	var pool *v1alpha1.VolumePool
	if obj, ok, _ := p.pools.GetByKey(backing.Annotations[keys.MadeAhead]); ok {
		pool, _ = obj.(*v1alpha1.VolumePool)
	}
	age := p.clock.Since(backing.CreationTimestamp.Time)
	var reason, msg string
	switch {
	case pool == nil:
		msg = fmt.Sprintf("VolumePool %s is gone", backing.Annotations[keys.MadeAhead])
	case ptr.Deref(pool.Spec.MinAvailable, 0) == 0:
		reason, msg = corev1.EventTypeNormal, fmt.Sprintf("Asking class %s for a member ahead of claims is cancelled: the pool's minAvailable is 0 (backing claim %s/%s)", class, backing.Namespace, backing.Name)
	case age >= p.aheadBound:
		reason, msg = corev1.EventTypeWarning, fmt.Sprintf("Class %s did not bind a volume to claim %s/%s, asked for a member ahead of claims, within %s (three times --lifecycle-timeout): the claim is deleted, and the pool asks again", class, backing.Namespace, backing.Name, p.aheadBound)
	default:
		klog.FromContext(ctx).V(4).Info("Waiting for the backing class to bind a volume to the backing claim of a member made ahead", "claim", klog.KObj(backing))
		p.backing.queue.AddAfter(uid, p.aheadBound-age)
		return nil
	}
	err := p.client.CoreV1().PersistentVolumeClaims(backing.Namespace).Delete(ctx, backing.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &backing.UID}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting backing claim %s/%s, whose member made ahead is given up: %w", backing.Namespace, backing.Name, err)
	}
	p.pending.Unreserve(backing.Name)
	if pool != nil {
		p.recorder.Event(pool, reason, reasonMemberNotMade, msg)
	}
	klog.FromContext(ctx).Info("Gave up a member made ahead through the backing class", "claim", klog.KObj(backing), "why", msg)
	return nil
}

// backingClaimCached reports whether the cache shows the backing claim of
// that name, or the volume kept for it.
func (p *provisioner) backingClaimCached(name string) bool {
	if p.backing == nil {
		return false
	}
	if _, err := p.backing.lister.PersistentVolumeClaims(p.backing.namespace).Get(name); err == nil {
		return true
	}
	uid, ok := strings.CutPrefix(name, "pvc-")
	return ok && p.keptVolume(types.UID(uid)) != nil
}

// aheadThroughBacking counts the members of class asked for ahead of
// claims on their way: backing claims, and volumes kept and not yet
// members.
func (p *provisioner) aheadThroughBacking(class string) int {
	n := 0
	for _, v := range p.inFlight(class) {
		if v.ahead {
			n++
		}
	}
	return n
}
