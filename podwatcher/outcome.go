package podwatcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/reclaimable/reclaimable/internal/controller"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// outcome is how an owner ended (wellknown.OutcomeSucceeded or
// wellknown.OutcomeFailed), or "" while it runs or where success cannot be
// told. A pod whose deletion began before it succeeded counts as not
// succeeded: its containers may exit 0 on the SIGTERM of the deletion,
// with their work half done. A Job's Complete condition is the Job
// controller's own verdict, deletion or not.
func outcome(obj any) string {
	switch o := obj.(type) {
	case *controller.PodRecord:
		return podOutcome(o.Phase, o.DeletionTimestamp)
	case *corev1.Pod:
		return podOutcome(o.Status.Phase, o.DeletionTimestamp)
	case *batchv1.Job:
		for _, cond := range o.Status.Conditions {
			if cond.Status != corev1.ConditionTrue {
				continue
			}
			switch cond.Type {
			case batchv1.JobComplete, batchv1.JobSuccessCriteriaMet:
				return wellknown.OutcomeSucceeded
			case batchv1.JobFailed, batchv1.JobFailureTarget:
				return wellknown.OutcomeFailed
			}
		}
	}
	return ""
}

func podOutcome(phase corev1.PodPhase, deletion *metav1.Time) string {
	switch {
	case phase == corev1.PodSucceeded && deletion == nil:
		return wellknown.OutcomeSucceeded
	case phase == corev1.PodFailed:
		return wellknown.OutcomeFailed
	}
	return ""
}

// recordOutcome writes result on the claims made for the owner uid that
// do not carry an outcome yet, so that the releaser can tell, once a claim
// is gone, whether its volume is to be scrubbed (onRelease
// ScrubUnlessSucceeded). The patch carries the cached resourceVersion: a
// claim changed since, or deleted and made again under the same name for
// another owner, is refused and looked at again from a newer cache.
func (c *Controller) recordOutcome(ctx context.Context, uid types.UID, result string) error {
	var errs []error
	for _, name := range c.claimedBy.Get(string(uid)) {
		claim, err := c.claims.PersistentVolumeClaims(name.Namespace).Get(name.Name)
		if err != nil || claim.Labels[wellknown.ClaimedBy] != string(uid) || claim.Labels[wellknown.ClaimManagedBy] != c.controllerID || claim.DeletionTimestamp != nil {
			continue
		}
		if _, recorded := claim.Annotations[wellknown.ConsumerOutcome]; recorded {
			continue
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
			"resourceVersion": claim.ResourceVersion,
			"annotations":     map[string]string{wellknown.ConsumerOutcome: result},
		}})
		if err != nil {
			return err
		}
		_, err = c.client.CoreV1().PersistentVolumeClaims(claim.Namespace).Patch(ctx, claim.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		switch {
		case err == nil:
			klog.FromContext(ctx).V(2).Info("Recorded the outcome of the claim's owner", "claim", klog.KObj(claim), "outcome", result)
		case apierrors.IsNotFound(err):
			// Gone already: its volume is released without a known
			// outcome, the side that leaks nothing.
		case apierrors.IsConflict(err):
			errs = append(errs, fmt.Errorf("claim %s/%s changed since it was read, recording outcome %s again", claim.Namespace, claim.Name, result))
		default:
			c.metrics.apiErrors.WithLabelValues("patch").Inc()
			errs = append(errs, fmt.Errorf("recording outcome %s on claim %s/%s: %w", result, claim.Namespace, claim.Name, err))
		}
	}
	return errors.Join(errs...)
}
