package releaser

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	volumehelpers "k8s.io/component-helpers/storage/volume"
	"k8s.io/klog/v2"

	"github.com/reclaimable/reclaimable/internal/controller"
	"github.com/reclaimable/reclaimable/internal/pools"
)

// sync decides, for one volume, whether to associate it, release it, or
// change the hold of a free one, from the cache and, for a claim's absence,
// the API server; write.go makes the writes it decides on.

// classOf is pv's StorageClass as the cache has it, with its pool's
// settings over its parameters; nil for none.
func (c *Controller) classOf(pv *corev1.PersistentVolume) *storagev1.StorageClass {
	name := volumehelpers.GetPersistentVolumeClass(pv)
	if name == "" {
		return nil
	}
	class, err := c.classes.Get(name)
	if err != nil {
		return nil
	}
	return pools.EffectiveClass(class, pools.PoolOf(c.pools, name))
}

// managedClaim returns the managed claim with the namespace and name of pv's
// claimRef, if the cache has one.
func (c *Controller) managedClaim(pv *corev1.PersistentVolume) *corev1.PersistentVolumeClaim {
	ref := pv.Spec.ClaimRef
	if ref == nil || ref.Namespace == "" || ref.Name == "" {
		return nil
	}
	claim, err := c.claims.PersistentVolumeClaims(ref.Namespace).Get(ref.Name)
	if err != nil {
		return nil
	}
	return claim
}

// sync associates one volume if a rule says so, and releases it if it is
// ours, Released, and its claim is gone.
func (c *Controller) sync(ctx context.Context, name string) error {
	logger := klog.FromContext(ctx).WithValues("pv", name)
	ctx = klog.NewContext(ctx, logger)
	pv, err := c.volumes.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if c.writes.stale(pv.Name, pv.ResourceVersion) {
		logger.V(4).Info("Cache predates the releaser's last write, waiting for the newer version")
		return nil
	}

	if r, ok := c.policy.associationRule(pv, c.classOf(pv), c.managedClaim(pv)); ok {
		if pv, err = c.associate(ctx, pv, r); pv == nil || err != nil {
			return err
		}
	}

	switch fix, ns, name := c.policy.rescopeOf(pv, c.classOf(pv)); fix {
	case scopeHold:
		return c.hold(ctx, pv, ns, name)
	case scopeLetGo:
		return c.letGo(ctx, pv)
	}

	if until, reserved := reservedUntil(pv, c.policy.controllerID); reserved {
		if wait := until.Sub(c.clock.Now()); wait > 0 {
			c.queue.AddAfter(name, wait)
			return nil
		}
		return c.endReservation(ctx, pv)
	}

	ok, why := releasable(pv, c.policy.controllerID)
	if !ok {
		// Counted once per version of the volume, like the warning, so
		// that the metric does not grow with every sweep.
		if why == invalidClaimRef && c.warn(pv, errInvalidClaimRef, "Not released: spec.claimRef names no claim (namespace %q, name %q), so the releaser cannot tell whether it still exists; clear spec.claimRef by hand if the volume is free",
			pv.Spec.ClaimRef.Namespace, pv.Spec.ClaimRef.Name) {
			c.metrics.errors.WithLabelValues(errInvalidClaimRef).Inc()
		}
		logger.V(5).Info("Nothing to release", "reason", why)
		return nil
	}
	gone, live, err := c.claimGone(ctx, pv.Spec.ClaimRef)
	if err != nil {
		c.metrics.errors.WithLabelValues(errClaimCheck).Inc()
		if apierrors.IsForbidden(err) {
			c.warn(pv, errClaimCheck, "Cannot check whether claim %s/%s still exists: %v", pv.Spec.ClaimRef.Namespace, pv.Spec.ClaimRef.Name, err)
		}
		return fmt.Errorf("checking claim %s/%s of volume %s: %w", pv.Spec.ClaimRef.Namespace, pv.Spec.ClaimRef.Name, name, err)
	}
	if !gone {
		logger.V(4).Info("Released volume keeps its claimRef: the claim still exists", "claim", klog.KRef(pv.Spec.ClaimRef.Namespace, pv.Spec.ClaimRef.Name))
		return nil
	}
	replacement, err := c.unboundReplacement(ctx, pv.Spec.ClaimRef, live)
	if err != nil {
		return fmt.Errorf("reading the claim that replaced %s/%s: %w", pv.Spec.ClaimRef.Namespace, pv.Spec.ClaimRef.Name, err)
	}
	return c.release(ctx, pv, replacement)
}

// replacementWait bounds how long a release that would keep a claim's name
// waits for a new claim of that name to be bound elsewhere. A provisioner
// that can serve the new claim does so within seconds. One still unbound
// after that is a claim no volume is made for: its pool is full, or, under
// onRelease Scrub, the provisioner leaves a Released member to the releaser
// alone; waiting longer would keep from the new claim the one volume it
// can have. The release then goes ahead: should a provisioner make the
// claim a volume meanwhile after all, the PV controller binds the claim to
// one of the two and the other stays free, never bound to two claims.
const replacementWait = 10 * time.Second

// unboundReplacement returns the claim with the namespace and name of ref
// but another UID, if one exists and is not bound yet, else nil. live is
// the API server's answer to the lookup that proved ref's claim gone, if it
// was asked; else the managed claims cache tells whether such a claim
// exists, and, since it keeps the metadata of claims only, the API server
// whether it is bound.
func (c *Controller) unboundReplacement(ctx context.Context, ref *corev1.ObjectReference, live *corev1.PersistentVolumeClaim) (*corev1.PersistentVolumeClaim, error) {
	if live == nil {
		cached, err := c.claims.PersistentVolumeClaims(ref.Namespace).Get(ref.Name)
		if err != nil || cached.UID == ref.UID {
			return nil, nil
		}
		if live, err = c.client.CoreV1().PersistentVolumeClaims(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return nil, nil
		} else if err != nil {
			return nil, err
		}
	}
	if live.UID != ref.UID && live.Spec.VolumeName == "" && live.DeletionTimestamp == nil {
		return live, nil
	}
	return nil, nil
}

// claimGone reports whether the claim ref points at no longer exists with
// that namespace, name and UID. Only the API server can say so: the managed
// claims cache may only prove the claim still exists; a deletion seen on the
// watch stands for the API server's answer.
// The claim of that name the API server answered with, if it was asked
// and has one, is returned too.
func (c *Controller) claimGone(ctx context.Context, ref *corev1.ObjectReference) (bool, *corev1.PersistentVolumeClaim, error) {
	if ref.UID != "" && c.deleted.has(ref.UID) {
		return true, nil, nil
	}
	var live *corev1.PersistentVolumeClaim
	// Still there: the deletion, when it comes, queues the volume again.
	gone, err := controller.Gone(ctx,
		func(claim *corev1.PersistentVolumeClaim) bool { return sameClaim(ref, claim) },
		func() (*corev1.PersistentVolumeClaim, error) {
			return c.claims.PersistentVolumeClaims(ref.Namespace).Get(ref.Name)
		},
		func(ctx context.Context) (*corev1.PersistentVolumeClaim, error) {
			claim, err := c.client.CoreV1().PersistentVolumeClaims(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
			if err == nil {
				live = claim
			}
			return claim, err
		})
	return gone, live, err
}
