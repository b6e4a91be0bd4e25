package podwatcher

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/reclaimable/reclaimable/internal/wellknown"
)

func (c *Controller) sync(ctx context.Context, k ref) error {
	logger := klog.FromContext(ctx).WithValues("kind", k.Kind, "namespace", k.Namespace, "name", k.Name)
	ctx = klog.NewContext(ctx, logger)
	switch k.Kind {
	case kindPod:
		return c.syncPod(ctx, k)
	case kindJob:
		return c.syncJob(ctx, k)
	case kindClaim:
		return c.syncClaim(ctx, k)
	}
	return nil
}

func (c *Controller) syncPod(ctx context.Context, k ref) error {
	pod, err := c.pods.Pods(k.Namespace).Get(k.Name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	// A pod that is going or has ended needs no new claim; creating one
	// would only take a volume from the pool for nothing. Its claims learn
	// how it ended.
	if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		if result := outcome(pod); result != "" {
			return c.recordOutcome(ctx, pod.UID, result)
		}
		return nil
	}
	annotations := pod.Annotations
	// The claims of the pod's Job, which the gate waits for too.
	var jobRequests []claimRequest
	var jobRejected bool
	if ref := metav1.GetControllerOf(pod); ref != nil && ref.Kind == kindJob && isBatchGroup(ref.APIVersion) {
		job, err := c.jobs.Jobs(pod.Namespace).Get(ref.Name)
		if err != nil || job.UID != ref.UID {
			// The Job is not in the cache yet (or is gone, and the pod
			// with it). Its annotations decide which claims are the Job's.
			c.queue.AddAfter(k, jobWait)
			return nil
		}
		annotations = withoutJobVolumes(annotations, job.Annotations)
		// Parsed again only for the gate: the Job's own sync makes its claims.
		if hasGate(pod) {
			var rejections []rejection
			jobRequests, rejections = parseRequests(job.Namespace, job.Annotations, job.Spec.Template.Spec.Volumes)
			jobRejected = len(rejections) > 0
		}
	}
	requests, rejections := parseRequests(pod.Namespace, annotations, pod.Spec.Volumes)
	err = c.ensureClaims(ctx, pod, owner{
		APIVersion: "v1", Kind: kindPod, Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID,
	}, requests, rejections)
	if !hasGate(pod) {
		return err
	}
	return errors.Join(err, c.syncGate(ctx, pod, append(requests, jobRequests...), jobRejected || len(rejections) > 0))
}

func (c *Controller) syncJob(ctx context.Context, k ref) error {
	job, err := c.jobs.Jobs(k.Namespace).Get(k.Name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	// A Job that is going or has finished needs no new claim; its claims
	// learn how it ended.
	if result := outcome(job); job.DeletionTimestamp != nil || result != "" {
		if result != "" {
			return c.recordOutcome(ctx, job.UID, result)
		}
		return nil
	}
	requests, rejections := parseRequests(job.Namespace, job.Annotations, job.Spec.Template.Spec.Volumes)
	return c.ensureClaims(ctx, job, owner{
		APIVersion: "batch/v1", Kind: kindJob, Namespace: job.Namespace, Name: job.Name, UID: job.UID,
	}, requests, rejections)
}

func isBatchGroup(apiVersion string) bool {
	return apiVersion == "batch/v1" || apiVersion == "batch/v1beta1"
}

// withoutJobVolumes drops a pod's claim annotations for the volumes its Job
// asks claims for: the pods of such a Job share the Job's claim.
func withoutJobVolumes(pod, job map[string]string) map[string]string {
	out := make(map[string]string, len(pod))
	for k, v := range pod {
		out[k] = v
	}
	for k := range job {
		if volume, ok := enabledVolume(k); ok {
			delete(out, wellknown.EnabledKey(volume))
			delete(out, wellknown.TemplateKey(volume))
		}
	}
	return out
}

// ensureClaims reports rejections or creates the claims that do not exist.
// It never updates a claim: an existing one, ours or not, is left as it is.
func (c *Controller) ensureClaims(ctx context.Context, obj runtime.Object, o owner, requests []claimRequest, rejections []rejection) error {
	logger := klog.FromContext(ctx)
	for _, r := range rejections {
		if c.owners.firstReport(o.UID, r.Reason, r.Volume, r.Message) {
			c.metrics.rejections.WithLabelValues(r.Reason).Inc()
			c.recorder.Event(obj, corev1.EventTypeWarning, r.Reason, r.Message)
			logger.V(2).Info("Claim request rejected", "volume", r.Volume, "reason", r.Reason, "message", r.Message)
		}
	}

	var errs []error
	for _, req := range requests {
		if err := c.ensureClaim(ctx, obj, o, req); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (c *Controller) ensureClaim(ctx context.Context, obj runtime.Object, o owner, req claimRequest) error {
	logger := klog.FromContext(ctx).WithValues("volume", req.Volume, "claim", req.ClaimName)
	name := o.Namespace + "/" + req.ClaimName
	if _, err := c.claims.PersistentVolumeClaims(o.Namespace).Get(req.ClaimName); err == nil {
		return nil // ours, for this owner or another: never touched here
	}
	if !c.owners.mayCreate(o.UID, req, c.clock.Now(), c.cfg.CleanupInterval) || !c.expect.send(name) {
		return nil
	}

	claim := buildClaim(req, o, c.controllerID)
	_, err := c.client.CoreV1().PersistentVolumeClaims(o.Namespace).Create(ctx, claim, metav1.CreateOptions{})
	switch {
	case err == nil:
		c.expect.confirm(name)
		if o.Kind == kindJob {
			for _, k := range c.gatedOn(name) {
				c.queue.Add(k)
			}
		}
		c.metrics.created.Inc()
		c.recorder.Eventf(obj, corev1.EventTypeNormal, "ClaimCreated", "Created claim %s for volume %s", req.ClaimName, req.Volume)
		logger.V(2).Info("Created claim")
		return nil
	case apierrors.IsAlreadyExists(err):
		c.expect.failed(name)
		return c.examineExisting(ctx, obj, o, req)
	case apierrors.IsInvalid(err):
		// The same template would be refused again: wait for a new one.
		c.expect.failed(name)
		c.owners.refusedTemplate(o.UID, req.Volume, req.Source)
		c.report(obj, o.UID, corev1.EventTypeWarning, "ClaimRejected", req.Volume,
			fmt.Sprintf("The API server refused claim %s for volume %s: %s", req.ClaimName, req.Volume, truncate(err.Error(), maxMessage)))
		return nil
	case apierrors.IsForbidden(err):
		// Quota or policy: may pass later, so retry with back-off.
		c.expect.failed(name)
		c.metrics.apiErrors.WithLabelValues("create").Inc()
		c.report(obj, o.UID, corev1.EventTypeWarning, "ClaimForbidden", req.Volume,
			fmt.Sprintf("Cannot create claim %s for volume %s yet, will retry: %s", req.ClaimName, req.Volume, truncate(err.Error(), maxMessage)))
		return err
	default:
		c.expect.failed(name)
		c.metrics.apiErrors.WithLabelValues("create").Inc()
		return fmt.Errorf("creating claim %s: %w", name, err)
	}
}

// examineExisting looks at a claim the cache does not have but the API
// server does. Ours means the informer is behind; not ours means the claim
// belongs to someone else and is left alone.
func (c *Controller) examineExisting(ctx context.Context, obj runtime.Object, o owner, req claimRequest) error {
	existing, err := c.client.CoreV1().PersistentVolumeClaims(o.Namespace).Get(ctx, req.ClaimName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("claim %s/%s existed and is gone, trying again", o.Namespace, req.ClaimName)
	}
	if err != nil {
		c.metrics.apiErrors.WithLabelValues("get").Inc()
		return fmt.Errorf("reading claim %s/%s: %w", o.Namespace, req.ClaimName, err)
	}
	if existing.Labels[wellknown.ClaimManagedBy] == c.controllerID {
		return nil
	}
	c.owners.foreignFound(o.UID, req.ClaimName, c.clock.Now())
	c.report(obj, o.UID, corev1.EventTypeNormal, "ClaimExists", req.Volume,
		fmt.Sprintf("Claim %s for volume %s already exists and was not created by this controller; it is used as it is and never deleted by it", req.ClaimName, req.Volume))
	return nil
}

func (c *Controller) report(obj runtime.Object, uid types.UID, eventType, reason, volume, message string) {
	if !c.owners.firstReport(uid, reason, volume, message) {
		return
	}
	if eventType == corev1.EventTypeWarning {
		c.metrics.rejections.WithLabelValues(reason).Inc()
	}
	c.recorder.Event(obj, eventType, reason, message)
}
