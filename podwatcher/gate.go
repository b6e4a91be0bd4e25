package podwatcher

import (
	"context"
	"fmt"
	"slices"
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

// This file holds the claims gate. An annotated pod exists before its claim,
// since the podwatcher makes the claim once it sees the pod; the scheduler
// tries the pod first, finds the claim missing and backs off for a second or
// more, long after the claim has appeared. A pod created with the scheduling
// gate wellknown.ClaimsGate is not tried until the podwatcher removes the gate,
// which it does as soon as every claim the pod asks for exists.

const (
	// gatedOnIndex finds the gated pods that mount a claim
	// "<namespace>/<name>", so that the claim's arrival releases them at once.
	gatedOnIndex = "podwatcher/gated-on"
	// gatedIndex holds every gated pod under one value, for the metrics.
	gatedIndex = "podwatcher/gated"

	// gateWarnAfter is how long a pod may be held before it is worth a
	// Warning: far longer than a claim takes to be made.
	gateWarnAfter = time.Minute

	// ReasonWaitingForClaims: a gated pod has waited gateWarnAfter for a
	// claim that does not exist (its Job's claim was refused, say, or a
	// claim someone else makes never came).
	ReasonWaitingForClaims = "WaitingForClaims"
	// ReasonGateHeldLong: a pod was released after being held longer than
	// gateWarnAfter, most likely while no podwatcher ran.
	ReasonGateHeldLong = "ClaimsGateHeldLong"
)

func podGated(obj any) ([]string, error) {
	if pod, ok := controller.AsPodRecord(obj); ok && holdsClaimsGate(pod.SchedulingGates) {
		return []string{""}, nil
	}
	return nil, nil
}

// gatedPods counts the gated pods in the cache and the age of the oldest.
func (c *Controller) gatedPods() (n int, oldest time.Duration) {
	objs, _ := c.podIndexer.ByIndex(gatedIndex, "")
	now := c.clock.Now()
	for _, o := range objs {
		if pod, ok := controller.AsPodRecord(o); ok {
			n++
			oldest = max(oldest, now.Sub(pod.CreationTimestamp.Time))
		}
	}
	return n, oldest
}

func hasGate(pod *corev1.Pod) bool { return holdsClaimsGate(pod.Spec.SchedulingGates) }

// holdsClaimsGate tells whether gates hold the claims gate.
func holdsClaimsGate(gates []corev1.PodSchedulingGate) bool {
	return slices.ContainsFunc(gates, func(g corev1.PodSchedulingGate) bool { return g.Name == wellknown.ClaimsGate })
}

// gateIndexes are the places of the claims gate in pod's gates, last first
// (the order they are removed in).
func gateIndexes(pod *corev1.Pod) []int {
	var at []int
	for i, g := range pod.Spec.SchedulingGates {
		if g.Name == wellknown.ClaimsGate {
			at = append([]int{i}, at...)
		}
	}
	return at
}

// podGatedOn indexes a gated pod by every claim it mounts: its own claims,
// its Job's, and claims it did not ask for, which cost nothing to list.
func podGatedOn(obj any) ([]string, error) {
	pod, ok := controller.AsPodRecord(obj)
	if !ok || !holdsClaimsGate(pod.SchedulingGates) {
		return nil, nil
	}
	var names []string
	for _, v := range pod.Volumes {
		if v.ClaimName != "" {
			names = append(names, pod.Namespace+"/"+v.ClaimName)
		}
	}
	return names, nil
}

// gateVerdict is what becomes of a pod's claims gate.
type gateVerdict int

const (
	// keepGate: a request was rejected; the pod cannot run as it is, and
	// its Warning events say why.
	keepGate gateVerdict = iota
	// awaitClaims: some claim does not exist yet; its arrival requeues the pod.
	awaitClaims
	// releaseGate: every claim the pod asks for exists.
	releaseGate
)

// decideGate judges the gate of a pod from the claim requests that concern
// it (its own and its Job's), whether any of them was rejected, and which
// claims exist. A pod that asks for no claim is released: the gate can only
// have been put there by mistake, and nothing else would ever remove it.
func decideGate(requests []claimRequest, rejected bool, exists func(claim string) bool) (gateVerdict, []string) {
	if rejected {
		return keepGate, nil
	}
	var missing []string
	for _, r := range requests {
		if !exists(r.ClaimName) {
			missing = append(missing, r.ClaimName)
		}
	}
	if len(missing) > 0 {
		return awaitClaims, missing
	}
	return releaseGate, nil
}

// syncGate removes the claims gate of pod once decideGate allows it.
func (c *Controller) syncGate(ctx context.Context, pod *corev1.Pod, requests []claimRequest, rejected bool) error {
	logger := klog.FromContext(ctx)
	var lookupErr error
	verdict, missing := decideGate(requests, rejected, func(name string) bool {
		ok, err := c.claimExists(ctx, pod.Namespace, name)
		if err != nil && lookupErr == nil {
			lookupErr = err
		}
		return ok
	})
	if lookupErr != nil {
		return lookupErr
	}
	switch verdict {
	case keepGate:
		logger.V(4).Info("Keeping the claims gate: a claim request was rejected")
		return nil
	case awaitClaims:
		logger.V(4).Info("Keeping the claims gate until the claims exist", "missing", missing)
		// The sweep looks at the pod again, and warns once it has waited
		// long. The message names when the wait began, not how long it has
		// lasted: the same wait is the same message, which report sends once.
		if held := c.clock.Now().Sub(pod.CreationTimestamp.Time); held > gateWarnAfter {
			c.report(pod, pod.UID, corev1.EventTypeWarning, ReasonWaitingForClaims, "", fmt.Sprintf(
				"Held by the scheduling gate %s since %s, more than %s: claims %s do not exist yet; a Warning on the pod or its Job says why if their request was refused",
				wellknown.ClaimsGate, pod.CreationTimestamp.UTC().Format(time.RFC3339), gateWarnAfter, strings.Join(missing, ", ")))
		}
		return nil
	}
	if err := c.removeGate(ctx, pod); err != nil {
		return err
	}
	if held := c.clock.Now().Sub(pod.CreationTimestamp.Time); held > gateWarnAfter {
		c.report(pod, pod.UID, corev1.EventTypeWarning, ReasonGateHeldLong, "", fmt.Sprintf(
			"Released from the scheduling gate %s after %s although its claims take moments: no podwatcher ran for a while, or its claims were late",
			wellknown.ClaimsGate, held.Round(time.Second)))
	}
	return nil
}

// claimExists looks for a claim in the cache of managed claims, then among
// the claims this podwatcher created that the cache does not show yet, then
// on the API server (a claim of someone else's, or one the cache is behind
// on).
func (c *Controller) claimExists(ctx context.Context, namespace, name string) (bool, error) {
	if _, err := c.claims.PersistentVolumeClaims(namespace).Get(name); err == nil {
		return true, nil
	}
	if c.expect.created(namespace + "/" + name) {
		return true, nil
	}
	_, err := c.client.CoreV1().PersistentVolumeClaims(namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err):
		return false, nil
	}
	c.metrics.apiErrors.WithLabelValues("get").Inc()
	return false, fmt.Errorf("looking for claim %s/%s: %w", namespace, name, err)
}

// removeGate removes the claims gate, under either name, and nothing else,
// from pod, in one patch. The patch first tests that each gate is still
// where the cache saw it, so that a change made meanwhile cannot make it
// remove another gate.
func (c *Controller) removeGate(ctx context.Context, pod *corev1.Pod) error {
	var ops []string
	for _, i := range gateIndexes(pod) {
		ops = append(ops, fmt.Sprintf(`{"op":"test","path":"/spec/schedulingGates/%d/name","value":%q},{"op":"remove","path":"/spec/schedulingGates/%d"}`,
			i, pod.Spec.SchedulingGates[i].Name, i))
	}
	patch := "[" + strings.Join(ops, ",") + "]"
	_, err := c.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.JSONPatchType, []byte(patch), metav1.PatchOptions{})
	switch {
	case err == nil:
		c.metrics.gatesRemoved.Inc()
		klog.FromContext(ctx).V(2).Info("Removed the claims gate")
		return nil
	case apierrors.IsNotFound(err):
		return nil
	}
	// The cache may be behind: the gate already gone, or moved.
	live, getErr := c.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(getErr):
		return nil
	case getErr == nil && live.UID == pod.UID && !hasGate(live):
		return nil
	}
	c.metrics.apiErrors.WithLabelValues("patch").Inc()
	return fmt.Errorf("removing the claims gate of pod %s/%s: %w", pod.Namespace, pod.Name, err)
}

// gatedOn is the refs of the gated pods that mount claim
// "<namespace>/<name>".
func (c *Controller) gatedOn(claim string) []ref {
	objs, err := c.podIndexer.ByIndex(gatedOnIndex, claim)
	if err != nil {
		return nil
	}
	var queued []ref
	for _, o := range objs {
		if pod, ok := controller.AsPodRecord(o); ok {
			queued = append(queued, ref{kindPod, pod.Namespace, pod.Name})
		}
	}
	return queued
}
