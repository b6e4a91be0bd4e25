package provisioner

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	volumehelpers "k8s.io/component-helpers/storage/volume"
	"k8s.io/klog/v2"

	"github.com/reclaimable/reclaimable/internal/controller"
	"github.com/reclaimable/reclaimable/internal/wellknown"
	"github.com/reclaimable/reclaimable/provisioner/match"
)

// This file holds how a free pool member is taken for a claim: one
// conditional write, safe against other claims and the PV controller.

// takeResult is what became of an attempt to take a pool member.
type takeResult int

const (
	// lost: the member is not free for the claim (any more); try the next.
	lost takeResult = iota
	// taken: the member now points at the claim.
	taken
	// boundMeanwhile: the PV controller bound the claim to the member first,
	// as it does with Available volumes.
	boundMeanwhile
)

// issueFromPool takes for claim the first member of cands it can, in order,
// and reports it (taken), or the one the PV controller bound the claim to
// first (boundMeanwhile); lost when every one went elsewhere meanwhile. A
// member issued is recorded in the metrics and an IssuedFromPool event.
func (p *provisioner) issueFromPool(ctx context.Context, claim *corev1.PersistentVolumeClaim, key, class string, namespaced bool, cands []*corev1.PersistentVolume, fits func(*corev1.PersistentVolume) bool) (string, takeResult, error) {
	stale := p.takes.Members()
	for _, pv := range cands {
		if stale[pv.Name] || !p.takes.Try(pv.Name) {
			continue
		}
		last := match.LastClaim(pv)
		takesReservation := match.AvailabilityOf(pv, claim, namespaced) == match.ReservedForOther
		result, err := p.take(ctx, pv, claim, key, namespaced, fits)
		p.takes.Done(pv.Name)
		switch {
		case err != nil:
			return "", lost, err
		case result == lost:
			continue
		case result == boundMeanwhile:
			return pv.Name, result, nil
		}
		p.metrics.issued.WithLabelValues(class).Inc()
		// One event says it all, reservation included: a hit costs the API
		// server a write less than an event of its own on the volume would.
		reservation := ""
		if takesReservation {
			reservation = fmt.Sprintf("; it was reserved for the next claim of that name (%s), and no other free volume of the class fits", wellknown.ReserveFor)
		}
		p.recorder.Eventf(claim, corev1.EventTypeNormal, reasonIssuedFromPool,
			"Volume %s issued from the pool of class %s with the data of its last use (%s)%s", pv.Name, class, describeLastUse(last, claim), reservation)
		klog.FromContext(ctx).V(2).Info("Issued a pool volume", "pv", pv.Name, "lastClaim", last)
		return pv.Name, taken, nil
	}
	return "", lost, nil
}

// take points pv at claim, if pv is still free and fits (fits re-checks a
// fresher copy). Two claims never win the same member: the update carries
// the resourceVersion the member had when it was judged free.
func (p *provisioner) take(ctx context.Context, pv *corev1.PersistentVolume, claim *corev1.PersistentVolumeClaim, key string, namespaced bool, fits func(*corev1.PersistentVolume) bool) (takeResult, error) {
	logger := klog.FromContext(ctx)
	for retried := false; ; retried = true {
		if gone, err := p.ClaimGone(ctx, pv); err != nil || !gone {
			return lost, err
		}
		// Bind as the PV controller would, including its bound-by-controller
		// mark: should the claim end up bound to another volume anyway, the
		// PV controller then returns this one to the pool rather than keeping
		// it reserved for the claim's name.
		updated, _, err := volumehelpers.GetBindVolumeToClaim(pv, claim)
		if err != nil {
			return lost, err
		}
		if updated.Annotations == nil {
			updated.Annotations = map[string]string{}
		}
		if namespaced {
			// Should the claim end up bound to another volume, the PV
			// controller unbinds this one; without its bound-by-controller
			// mark it keeps the claim's name instead of clearing the
			// claimRef, which would let it bind any claim of any namespace,
			// and the mark below keeps it free for this namespace.
			delete(updated.Annotations, volumehelpers.AnnBoundByController)
			updated.Annotations[wellknown.HeldForNamespace] = claim.Namespace
		}
		updated.Annotations[wellknown.LastClaim] = match.ClaimName(claim)
		setLastKey(updated.Annotations, key)
		updated.Annotations[wellknown.IssuedAt] = p.clock.Now().UTC().Format(time.RFC3339)
		// Issued, the volume is no longer kept for anyone.
		delete(updated.Annotations, wellknown.ReservedUntil)
		_, err = p.client.CoreV1().PersistentVolumes().Update(ctx, updated, metav1.UpdateOptions{})
		switch {
		case err == nil:
			p.takes.Expect(claim.UID, claim.Namespace, pv.Name)
			return taken, nil
		case apierrors.IsNotFound(err):
			return lost, nil
		case !apierrors.IsConflict(err):
			return lost, fmt.Errorf("issuing volume %s: %w", pv.Name, err)
		}
		p.metrics.conflicts.WithLabelValues(volumehelpers.GetPersistentVolumeClass(pv)).Inc()

		// Someone changed the member first: the PV controller binding this
		// very claim to it, another claim taking it, or just a status update.
		live, err := p.client.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return lost, nil
		case err != nil:
			return lost, fmt.Errorf("reading volume %s: %w", pv.Name, err)
		case live.Spec.ClaimRef != nil && live.Spec.ClaimRef.UID == claim.UID:
			p.takes.Expect(claim.UID, claim.Namespace, pv.Name)
			return boundMeanwhile, nil
		case retried && match.KeptForName(live, claim) && fits(live):
			// Kept for this claim's very name (a reservation the releaser
			// wrote meanwhile): the PV controller binds it to the claim on
			// its own, and another member taken now would be a second.
			p.takes.Expect(claim.UID, claim.Namespace, pv.Name)
			return boundMeanwhile, nil
		case retried || !match.Issuable(match.AvailabilityOf(live, claim, namespaced)) || !fits(live):
			logger.V(2).Info("Pool volume taken meanwhile, trying the next", "pv", pv.Name)
			return lost, nil
		}
		pv = live
	}
}

// ClaimGone reports whether the claim a Released volume names is gone, which
// only the API server can say for sure; the cache can only say it is not.
func (p *provisioner) ClaimGone(ctx context.Context, pv *corev1.PersistentVolume) (bool, error) {
	ref := pv.Spec.ClaimRef
	if ref == nil || ref.UID == "" {
		return true, nil
	}
	gone, err := controller.Gone(ctx,
		func(c *corev1.PersistentVolumeClaim) bool { return c.UID == ref.UID },
		func() (*corev1.PersistentVolumeClaim, error) {
			return p.claims.PersistentVolumeClaims(ref.Namespace).Get(ref.Name)
		},
		func(ctx context.Context) (*corev1.PersistentVolumeClaim, error) {
			return p.client.CoreV1().PersistentVolumeClaims(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		})
	if err != nil {
		return false, fmt.Errorf("checking whether claim %s/%s of volume %s still exists: %w", ref.Namespace, ref.Name, pv.Name, err)
	}
	return gone, nil
}

// UpdateVolume writes updated, guarded by the resourceVersion the cache
// showed, and returns what the API server stored. what says the write in
// an error. A volume changed meanwhile is looked at again with the queue's
// back-off (controller.Wait): its newer version may differ only where no
// event queues it again. A volume gone needs nothing: nil, nil.
func (p *provisioner) UpdateVolume(ctx context.Context, updated *corev1.PersistentVolume, what string) (*corev1.PersistentVolume, error) {
	res, err := p.client.CoreV1().PersistentVolumes().Update(ctx, updated, metav1.UpdateOptions{})
	switch {
	case apierrors.IsConflict(err):
		return nil, controller.Wait("volume %s changed since the cache showed it", updated.Name)
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return res, nil
}
