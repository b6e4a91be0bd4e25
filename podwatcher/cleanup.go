package podwatcher

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/reclaimable/reclaimable/internal/controller"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// syncClaim deletes a managed claim whose owner is gone, unless the
// garbage collector is about to.
func (c *Controller) syncClaim(ctx context.Context, k ref) error {
	logger := klog.FromContext(ctx)
	claim, err := c.claims.PersistentVolumeClaims(k.Namespace).Get(k.Name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if claim.Labels[wellknown.ClaimManagedBy] != c.controllerID || claim.DeletionTimestamp != nil {
		return nil
	}
	ref, ok := claimOwner(claim)
	if !ok {
		logger.V(2).Info("Cannot tell the owner of a managed claim from its claimed-by label, owner reference and owner annotation; leaving it alone")
		return nil
	}
	goneSince, gone, err := c.ownerGone(ctx, claim.Namespace, ref)
	if err != nil {
		return err
	}
	verdict := decideClaim(claim, c.controllerID, gone, goneSince, c.clock.Now(), c.cfg.GarbageCollectionGrace)
	switch verdict.action {
	case leaveClaim:
		return nil
	case waitForCollector:
		if c.leftToGC.add(claim.UID) {
			c.metrics.leftToGC.Inc()
		}
		logger.V(4).Info("Owner gone; leaving the claim to the garbage collector", "ownerKind", ref.Kind, "owner", ref.Name, "ownerUID", ref.UID, "recheckIn", verdict.wait)
		c.queue.AddAfter(k, verdict.wait)
		return nil
	}
	if referencesOwner(claim) {
		logger.Info("The garbage collector has not deleted the claim of a gone owner within the grace; deleting it",
			"ownerKind", ref.Kind, "owner", ref.Name, "ownerUID", ref.UID, "grace", c.cfg.GarbageCollectionGrace)
	}

	err = c.client.CoreV1().PersistentVolumeClaims(claim.Namespace).Delete(ctx, claim.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &claim.UID, ResourceVersion: &claim.ResourceVersion},
	})
	switch {
	case err == nil:
		c.metrics.deleted.Inc()
		c.recorder.Eventf(claim, corev1.EventTypeNormal, "ClaimDeleted", "Deleted claim: its owner %s %s (UID %s) no longer exists", ref.Kind, ref.Name, ref.UID)
		logger.V(2).Info("Deleted claim of a gone owner", "ownerKind", ref.Kind, "owner", ref.Name, "ownerUID", ref.UID)
		return nil
	case apierrors.IsNotFound(err):
		return nil // deleted by someone else, e.g. the garbage collector
	case apierrors.IsConflict(err):
		// Changed since the cache saw it: look again at the new version.
		return fmt.Errorf("claim %s changed since it was read, examining it again", k)
	default:
		c.metrics.apiErrors.WithLabelValues("delete").Inc()
		return fmt.Errorf("deleting claim %s: %w", k, err)
	}
}

// referencesOwner tells whether a claim still has an ownerReference to the
// owner its claimed-by label names, so that the garbage collector deletes
// it once that owner is gone.
func referencesOwner(claim *corev1.PersistentVolumeClaim) bool {
	uid := types.UID(claim.Labels[wellknown.ClaimedBy])
	if uid == "" {
		return false
	}
	for _, ref := range claim.OwnerReferences {
		if ref.UID == uid {
			return true
		}
	}
	return false
}

// claimOwner returns the owner a managed claim was created for: the Pod or
// Job its claimed-by label names by UID, found by kind and name through the
// claim's controller reference or, once that is gone, our owner annotation.
// A claim whose owner cannot be told is left alone.
func claimOwner(claim *corev1.PersistentVolumeClaim) (owner, bool) {
	o := owner{Namespace: claim.Namespace, UID: types.UID(claim.Labels[wellknown.ClaimedBy])}
	if o.UID == "" {
		return o, false
	}
	if ref := metav1.GetControllerOf(claim); ref != nil && ref.UID == o.UID {
		o.APIVersion, o.Kind, o.Name = ref.APIVersion, ref.Kind, ref.Name
	} else if kind, name, ok := strings.Cut(claim.Annotations[ownerAnnotation], "/"); ok {
		o.Kind, o.Name = kind, name
		o.APIVersion = "v1"
		if kind == kindJob {
			o.APIVersion = "batch/v1"
		}
	}
	switch {
	case o.Name == "":
		return o, false
	case o.Kind == kindPod && o.APIVersion == "v1":
	case o.Kind == kindJob && isBatchGroup(o.APIVersion):
	default:
		return o, false
	}
	return o, true
}

// ownerGone tells whether the owner ref names no longer exists and, if so,
// since when the podwatcher knows it. The cache is trusted only to say it
// exists; absence is confirmed by the API server, either through the delete
// event we saw or through a GET.
func (c *Controller) ownerGone(ctx context.Context, namespace string, ref owner) (time.Time, bool, error) {
	// A UID never comes back: once gone, always gone.
	if since, seenGone := c.gone.goneSince(ref.UID); seenGone {
		return since, true, nil
	}
	same := func(o metav1.Object) bool { return o.GetUID() == ref.UID }
	cached := func() (metav1.Object, error) {
		if ref.Kind == kindPod {
			return c.pods.Pods(namespace).Get(ref.Name)
		}
		return c.jobs.Jobs(namespace).Get(ref.Name)
	}
	gone, err := controller.Gone(ctx, same, cached, func(ctx context.Context) (metav1.Object, error) {
		if ref.Kind == kindPod {
			return c.client.CoreV1().Pods(namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		}
		return c.client.BatchV1().Jobs(namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	})
	switch {
	case err != nil:
		c.metrics.apiErrors.WithLabelValues("get").Inc()
		return time.Time{}, false, fmt.Errorf("reading owner %s %s/%s: %w", ref.Kind, namespace, ref.Name, err)
	case !gone:
		return time.Time{}, false, nil
	}
	// Absent, or another object of the same name made in its place: a UID
	// never comes back, so this is remembered like a delete event.
	return c.gone.mark(ref.UID), true, nil
}
