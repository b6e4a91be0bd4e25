package releaser

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/reclaimable/reclaimable/internal/controller"
	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// The releaser's writes to volumes: each one update guarded by the
// volume's resourceVersion, with the event that records it.

// associate labels pv with the controller ID. It changes nothing else, so it
// is safe on a Bound volume. It returns the updated volume, or nil when the
// volume changed or vanished meanwhile.
func (c *Controller) associate(ctx context.Context, pv *corev1.PersistentVolume, r rule) (*corev1.PersistentVolume, error) {
	logger := klog.FromContext(ctx)
	updated := pv.DeepCopy()
	if updated.Labels == nil {
		updated.Labels = map[string]string{}
	}
	updated.Labels[wellknown.VolumeManagedBy] = c.policy.controllerID
	res, err := c.client.CoreV1().PersistentVolumes().Update(ctx, updated, metav1.UpdateOptions{})
	if err != nil {
		return nil, c.writeFailed(ctx, pv, errAssociate, "associate", err)
	}
	c.writes.wrote(pv.Name, pv.ResourceVersion)
	c.metrics.associations.WithLabelValues(string(r)).Inc()
	msg := c.policy.describe(r, pv)
	c.recorder.Eventf(res, corev1.EventTypeNormal, "Associated", "Associated with controller ID %s: %s", c.policy.controllerID, msg)
	logger.Info("Associated volume", "rule", r)
	return res, nil
}

// release clears pv's claimRef, and its association unless a rule that does
// not depend on the claim still holds, in one update guarded by its
// resourceVersion, and records the claim it was released from. With the
// class's reserveFor, the claimRef keeps the claim's namespace and name
// without its UID instead: the PV controller then binds the volume to the
// next claim of that name and to no other, until the reservation ends.
//
// A new claim of the same name that is not bound yet (replacement) makes a
// release that would keep the name wait, with the queue's back-off: the PV
// controller would bind that claim to this volume while the provisioner
// gives it another. It is released once that claim is bound, or once the
// claim has waited replacementWait for a volume.
func (c *Controller) release(ctx context.Context, pv *corev1.PersistentVolume, replacement *corev1.PersistentVolumeClaim) error {
	logger := klog.FromContext(ctx)
	ref := pv.Spec.ClaimRef
	class := c.classOf(pv)
	outcome, _ := c.outcomes.get(ref.UID)
	if scrub, why := scrubOnRelease(pools.OnReleaseOf(class, c.policy.provisionerName), outcome); scrub {
		return c.handToScrub(ctx, pv, why)
	}
	updated := pv.DeepCopy()
	updated.Spec.ClaimRef = nil
	keptBy, keep := c.policy.keepsAssociation(pv, class)
	if !keep {
		delete(updated.Labels, wellknown.VolumeManagedBy)
	}
	if updated.Annotations == nil {
		updated.Annotations = map[string]string{}
	}
	now := c.clock.Now()
	updated.Annotations[wellknown.LastClaim] = ref.Namespace + "/" + ref.Name
	updated.Annotations[wellknown.ReleasedAt] = now.UTC().Format(time.RFC3339)
	delete(updated.Annotations, wellknown.ReservedUntil)
	delete(updated.Annotations, wellknown.HeldForNamespace)
	reserve := c.policy.reservation(class, keep)
	until := now.Add(reserve)
	heldFor := c.policy.heldNamespace(class, keep, ref.Namespace)
	if reserve > 0 || heldFor != "" {
		name := c.policy.heldName(class, pv.Name, ref.Name)
		if replacement != nil && name == ref.Name && now.Sub(replacement.CreationTimestamp.Time) < replacementWait {
			return controller.Wait("new claim %s/%s of the same name is not bound yet", ref.Namespace, ref.Name)
		}
		updated.Spec.ClaimRef = byName(ref.Namespace, name)
	}
	if reserve > 0 {
		updated.Annotations[wellknown.ReservedUntil] = until.UTC().Format(wellknown.ReservedUntilFormat)
	}
	if heldFor != "" {
		updated.Annotations[wellknown.HeldForNamespace] = heldFor
	}
	res, err := c.client.CoreV1().PersistentVolumes().Update(ctx, updated, metav1.UpdateOptions{})
	if err != nil {
		return c.writeFailed(ctx, pv, errRelease, "release", err)
	}
	c.writes.wrote(pv.Name, pv.ResourceVersion)
	c.metrics.releases.Inc()
	scope := ""
	if heldFor != "" {
		scope = fmt.Sprintf("; only claims of namespace %s may have it (%s: %s)", heldFor, wellknown.ReuseScope, wellknown.ReuseScopeNamespace)
	}
	if reserve > 0 {
		c.recorder.Eventf(res, corev1.EventTypeNormal, "Reserved", "Returned to the pool with its data and reserved for the next claim %s/%s until %s: claim %s/%s (UID %s) no longer exists%s",
			ref.Namespace, ref.Name, until.UTC().Format(wellknown.ReservedUntilFormat), ref.Namespace, ref.Name, ref.UID, scope)
		c.queue.AddAfter(pv.Name, reserve)
	} else {
		c.recorder.Eventf(res, corev1.EventTypeNormal, "Released", "Returned to the pool with its data: claim %s/%s (UID %s) no longer exists%s", ref.Namespace, ref.Name, ref.UID, scope)
	}
	kv := []any{"claim", klog.KRef(ref.Namespace, ref.Name), "claimUID", ref.UID, "associationKept", keep, "reservedFor", reserve, "heldForNamespace", heldFor}
	if keep {
		kv = append(kv, "rule", keptBy)
	}
	logger.Info("Released volume", kv...)
	return nil
}

// endReservation makes a reserved volume an ordinary free member: it clears
// the claimRef by name, or under reuseScope namespace keeps it as the
// volume's hold, unless a claim of that name took the volume meanwhile,
// which the update's resourceVersion would tell.
func (c *Controller) endReservation(ctx context.Context, pv *corev1.PersistentVolume) error {
	ref := pv.Spec.ClaimRef
	_, kept := c.policy.keepsAssociation(pv, c.classOf(pv))
	heldFor := c.policy.heldNamespace(c.classOf(pv), kept, ref.Namespace)
	updated := pv.DeepCopy()
	delete(updated.Annotations, wellknown.ReservedUntil)
	scope := "any claim"
	if heldFor != "" {
		updated.Annotations[wellknown.HeldForNamespace] = heldFor
		scope = "any claim of namespace " + heldFor
	} else {
		updated.Spec.ClaimRef = nil
		delete(updated.Annotations, wellknown.HeldForNamespace)
	}
	res, err := c.client.CoreV1().PersistentVolumes().Update(ctx, updated, metav1.UpdateOptions{})
	if err != nil {
		return c.writeFailed(ctx, pv, errRelease, "end the reservation of", err)
	}
	c.writes.wrote(pv.Name, pv.ResourceVersion)
	c.recorder.Eventf(res, corev1.EventTypeNormal, "ReservationExpired", "The reservation for claim %s/%s ended unused; the volume is free for %s", ref.Namespace, ref.Name, scope)
	klog.FromContext(ctx).Info("Reservation ended", "claim", klog.KRef(ref.Namespace, ref.Name), "heldForNamespace", heldFor)
	return nil
}

// hold keeps a free volume of a namespace-scoped class for claims of ns
// alone, naming its last claim ns/name by namespace and name (or, under
// keyPolicy Require, a name no claim has) so that the PV controller binds
// it to no other claim. A reservation it had ends: it is a hold now.
func (c *Controller) hold(ctx context.Context, pv *corev1.PersistentVolume, ns, name string) error {
	return c.rescope(ctx, pv, "hold", func(updated *corev1.PersistentVolume) {
		updated.Spec.ClaimRef = byName(ns, name)
		updated.Annotations[wellknown.HeldForNamespace] = ns
		delete(updated.Annotations, wellknown.ReservedUntil)
	}, "HeldForNamespace", fmt.Sprintf("Free for any claim of namespace %s only, where it was last bound (StorageClass parameter %s: %s)", ns, wellknown.ReuseScope, wellknown.ReuseScopeNamespace))
}

// letGo makes a held volume free for any claim, its class now saying
// reuseScope cluster.
func (c *Controller) letGo(ctx context.Context, pv *corev1.PersistentVolume) error {
	ns, _ := pools.HeldFor(pv)
	return c.rescope(ctx, pv, "let go of", func(updated *corev1.PersistentVolume) {
		updated.Spec.ClaimRef = nil
		delete(updated.Annotations, wellknown.HeldForNamespace)
	}, "HoldEnded", fmt.Sprintf("Free for any claim, no longer for namespace %s only (StorageClass parameter %s: %s)", ns, wellknown.ReuseScope, wellknown.ReuseScopeCluster))
}

// rescope writes change to a free volume and reports it with an event. The
// update carries the version in which the volume was seen free: if a claim
// took it meanwhile, the write fails and nothing is lost.
func (c *Controller) rescope(ctx context.Context, pv *corev1.PersistentVolume, verb string, change func(*corev1.PersistentVolume), reason, msg string) error {
	updated := pv.DeepCopy()
	change(updated)
	res, err := c.client.CoreV1().PersistentVolumes().Update(ctx, updated, metav1.UpdateOptions{})
	if err != nil {
		return c.writeFailed(ctx, pv, errRelease, verb, err)
	}
	c.writes.wrote(pv.Name, pv.ResourceVersion)
	c.recorder.Event(res, corev1.EventTypeNormal, reason, msg)
	klog.FromContext(ctx).Info("Changed the hold of a free volume", "reason", reason, "claimRef", updated.Spec.ClaimRef)
	return nil
}

// byName is a claimRef that names a claim by namespace and name, without
// UID: the PV controller binds the volume to that claim, should it exist,
// and to no other.
func byName(ns, name string) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: ns, Name: name}
}

// writeFailed handles a failed update of pv. A conflict means a newer
// version exists: its event queues the volume again, and a recheck shortly
// after covers a lost event. A volume that is gone needs nothing. Anything
// else is retried with back-off, and reported on the volume when an
// administrator has to act (missing permission, a volume the API rejects).
func (c *Controller) writeFailed(ctx context.Context, pv *corev1.PersistentVolume, reason, verb string, err error) error {
	switch {
	case apierrors.IsConflict(err):
		c.metrics.errors.WithLabelValues(errConflict).Inc()
		klog.FromContext(ctx).V(2).Info("Volume changed meanwhile, deciding again from the newer version", "action", verb)
		c.queue.AddAfter(pv.Name, c.conflictRecheck)
		return nil
	case apierrors.IsNotFound(err):
		return nil
	}
	c.metrics.errors.WithLabelValues(reason).Inc()
	if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) {
		c.warn(pv, reason, "Cannot %s the volume: %v", verb, err)
	}
	return fmt.Errorf("%s volume %s: %w", verb, pv.Name, err)
}

// warn records a Warning event on pv, once per reason and version of it,
// and reports whether it did.
func (c *Controller) warn(pv *corev1.PersistentVolume, reason, format string, args ...any) bool {
	if !c.warned.first(pv.Name, pv.ResourceVersion, reason) {
		return false
	}
	c.recorder.Eventf(pv, corev1.EventTypeWarning, reason, format, args...)
	return true
}

// handToScrub hands pv, Released from a claim that is gone, to the
// provisioner's scrubber instead of returning it to the pool: the volume
// stays Released, its claimRef naming the gone claim, so that neither the
// PV controller nor the provisioner gives it to anyone; the scrubber
// empties it and returns it. No reservation or hold: its data goes. why
// says so in the event.
func (c *Controller) handToScrub(ctx context.Context, pv *corev1.PersistentVolume, why string) error {
	ref := pv.Spec.ClaimRef
	updated := pv.DeepCopy()
	if updated.Annotations == nil {
		updated.Annotations = map[string]string{}
	}
	updated.Annotations[wellknown.Scrub] = wellknown.ScrubRequested
	updated.Annotations[wellknown.LastClaim] = ref.Namespace + "/" + ref.Name
	delete(updated.Annotations, wellknown.ReservedUntil)
	delete(updated.Annotations, wellknown.HeldForNamespace)
	res, err := c.client.CoreV1().PersistentVolumes().Update(ctx, updated, metav1.UpdateOptions{})
	if err != nil {
		return c.writeFailed(ctx, pv, errRelease, "hand to the scrub", err)
	}
	c.writes.wrote(pv.Name, pv.ResourceVersion)
	c.metrics.releases.Inc()
	c.recorder.Eventf(res, corev1.EventTypeNormal, "HandedToScrub", "Claim %s/%s (UID %s) no longer exists; %s: the volume is emptied before any claim may have it",
		ref.Namespace, ref.Name, ref.UID, why)
	klog.FromContext(ctx).Info("Handed volume to the scrub", "claim", klog.KRef(ref.Namespace, ref.Name), "claimUID", ref.UID, "why", why)
	return nil
}
