package classpool

import (
	"context"
	"fmt"

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
	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// This file holds how a class pool keeps members made ahead of claims
// (minAvailable): through backing claims too (grow.go), for a claim that
// never exists.

// reasonMemberNotMade: a member made ahead whose storage was not made in
// time, removed.
const reasonMemberNotMade = "MemberNotMade"

// Ahead is what members made ahead of claims for a VolumePool are asked
// for.
type Ahead struct {
	// Class is the pool class, Pool its VolumePool, Backing its backing
	// class.
	Class, Pool string
	Backing     *storagev1.StorageClass
	// Shape is the claim each is asked like: the pool's template.
	Shape corev1.PersistentVolumeClaimSpec
	// MaxVolumes is the class's maximum (0: none).
	MaxVolumes int
	// Node, if not nil, names the node each next member is made for: a
	// class that binds on first consumer makes a volume for a node.
	Node func() (string, error)
}

// AskAhead asks a.Backing for up to n members of a.Class's pool ahead of
// claims, within its maximum, and returns how many it asked for. Each is a
// backing claim of the pool's template, for a claim that never exists
// (wellknown.BackingForUID a UID of its own, wellknown.MadeAhead the pool), that
// syncAhead takes through the steps of the hand-over, the last of which
// makes the volume a free member. For a class that binds on first
// consumer, the backing claim names the node it is made for, as the
// scheduler does for a pod's.
func (b *Pools) AskAhead(ctx context.Context, a Ahead, n int) (int, error) {
	ns := b.cfg.Namespace
	for asked := 0; asked < n; asked++ {
		annotations := map[string]string{wellknown.PoolClass: a.Class, wellknown.MadeAhead: a.Pool}
		if a.Node != nil {
			node, err := a.Node()
			if err != nil {
				return asked, err
			}
			annotations[volumehelpers.AnnSelectedNode] = node
		}
		uid := uuid.NewUUID()
		name := backingClaimName(uid)
		if !b.p.Reserve(a.Class, name, a.MaxVolumes) {
			return asked, nil // the maximum is reached; claims may still free members
		}
		b.cfg.Pending.MarkAhead(name)
		annotations[wellknown.BackingForUID] = string(uid)
		backing := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{
				Name: name, Namespace: ns,
				Labels:      map[string]string{wellknown.BackingClaimOf: b.cfg.ControllerID},
				Annotations: annotations,
			},
			Spec: corev1.PersistentVolumeClaimSpec{
				StorageClassName: ptr.To(a.Backing.Name),
				AccessModes:      a.Shape.AccessModes, VolumeMode: a.Shape.VolumeMode, Resources: a.Shape.Resources,
			},
		}
		if _, err := b.cfg.Client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, backing, metav1.CreateOptions{}); err != nil {
			b.cfg.Pending.Unreserve(name)
			return asked, fmt.Errorf("asking class %s for a member ahead of claims through claim %s/%s: %w", a.Backing.Name, ns, name, err)
		}
		klog.FromContext(ctx).V(2).Info("Asked the backing class for a member ahead of claims", "backingClass", a.Backing.Name, "claim", klog.KObj(backing), "pool", a.Pool)
	}
	return n, nil
}

// syncAhead takes a member asked for ahead of claims (AskAhead) one step
// further: kept once its volume is bound, the backing claim deleted, and,
// once it is gone, the volume made a free member made ahead.
func (b *Pools) syncAhead(ctx context.Context, uid types.UID, backing *corev1.PersistentVolumeClaim, kept *corev1.PersistentVolume) error {
	logger := klog.FromContext(ctx).WithValues("backingClaim", backingClaimName(uid))
	if kept == nil {
		pv, err := b.backingVolume(ctx, backing)
		if err != nil {
			return err
		}
		if pv == nil {
			return b.awaitAhead(ctx, uid, backing) // its bind brings it back
		}
		if err := b.keep(ctx, pv, map[string]string{wellknown.BackingForUID: string(uid),
			wellknown.PoolClass: backing.Annotations[wellknown.PoolClass], wellknown.MadeAhead: backing.Annotations[wellknown.MadeAhead]}); err != nil {
			return err
		}
		logger.V(2).Info("Kept a volume of the backing class for a member made ahead", "pv", pv.Name)
		b.deleteBackingClaim(ctx, backing)
		return nil // its deletion brings it back
	}
	live, err := b.backingClaimLive(ctx, uid)
	switch {
	case err != nil:
		return err
	case live != nil:
		logger.V(4).Info("Waiting for the backing claim of a member made ahead to be gone", "pv", kept.Name)
		b.deleteBackingClaim(ctx, live)
		return nil
	}
	member := b.memberOf(kept, kept.Annotations[wellknown.PoolClass], corev1.PersistentVolumeReclaimRetain, nil)
	member.Spec.ClaimRef = pools.AheadClaimRef(kept.Name)
	if _, err := b.cfg.Client.CoreV1().PersistentVolumes().Update(ctx, member, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("making volume %s a member ahead of claims: %w", kept.Name, err)
	}
	b.cfg.Pending.Rename(backingClaimName(uid), kept.Name)
	b.cfg.Created.WithLabelValues(member.Spec.StorageClassName).Inc()
	logger.V(2).Info("Made a member ahead of claims", "pv", kept.Name, "pool", kept.Annotations[wellknown.MadeAhead])
	return nil
}

// awaitAhead waits for the backing class to bind a volume to backing, a
// backing claim asked for a member made ahead, for AheadBound at most, and
// not at all once its pool is gone or keeps no member ahead any more: the
// claim is then deleted, which loses nothing (nothing is bound to it), and
// its place under maxVolumes is given back. A driver that never makes the
// volume would otherwise hold that place for good.
func (b *Pools) awaitAhead(ctx context.Context, uid types.UID, backing *corev1.PersistentVolumeClaim) error {
	if backing.DeletionTimestamp != nil {
		return nil
	}
	class, bound := ptr.Deref(backing.Spec.StorageClassName, ""), b.cfg.AheadBound
	var pool *v1alpha1.VolumePool
	if obj, ok, _ := b.cfg.Pools.GetByKey(backing.Annotations[wellknown.MadeAhead]); ok {
		pool, _ = obj.(*v1alpha1.VolumePool)
	}
	age := b.cfg.Clock.Since(backing.CreationTimestamp.Time)
	var reason, msg string
	switch {
	case pool == nil:
		msg = fmt.Sprintf("VolumePool %s is gone", backing.Annotations[wellknown.MadeAhead])
	case ptr.Deref(pool.Spec.MinAvailable, 0) == 0:
		reason, msg = corev1.EventTypeNormal, fmt.Sprintf("Asking class %s for a member ahead of claims is cancelled: the pool's minAvailable is 0 (backing claim %s/%s)", class, backing.Namespace, backing.Name)
	case age >= bound:
		reason, msg = corev1.EventTypeWarning, fmt.Sprintf("Class %s did not bind a volume to claim %s/%s, asked for a member ahead of claims, within %s (three times --lifecycle-timeout): the claim is deleted, and the pool asks again", class, backing.Namespace, backing.Name, bound)
	default:
		klog.FromContext(ctx).V(4).Info("Waiting for the backing class to bind a volume to the backing claim of a member made ahead", "claim", klog.KObj(backing))
		b.queue.AddAfter(uid, bound-age)
		return nil
	}
	err := b.cfg.Client.CoreV1().PersistentVolumeClaims(backing.Namespace).Delete(ctx, backing.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &backing.UID}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting backing claim %s/%s, whose member made ahead is given up: %w", backing.Namespace, backing.Name, err)
	}
	b.cfg.Pending.Unreserve(backing.Name)
	if pool != nil {
		b.cfg.Recorder.Event(pool, reason, reasonMemberNotMade, msg)
	}
	klog.FromContext(ctx).Info("Gave up a member made ahead through the backing class", "claim", klog.KObj(backing), "why", msg)
	return nil
}
