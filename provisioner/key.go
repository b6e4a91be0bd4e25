package provisioner

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// A claim's cache key (keyLabel) says whose data it wants: CI systems
// generate claim names, so the name cannot say it, but they label or
// annotate what a job's pod is for (the pipeline, the repository, the
// scale set).

// keyOf is claim's cache key under the class's keyLabel name ("" none):
// its own label or annotation, else that of the Pod that owns it
// (pools.CacheKey). The claim of an ephemeral volume carries only its
// template's; its Pod, its controller, carries what the CI system knows of
// the job. A Pod gone, or replaced by another of its name, gives no key.
func (p *provisioner) keyOf(ctx context.Context, claim *corev1.PersistentVolumeClaim, name string) (string, error) {
	if name == "" {
		return "", nil
	}
	if key := pools.CacheKey(name, claim.Labels, claim.Annotations); key != "" {
		return key, nil
	}
	owner := metav1.GetControllerOf(claim)
	if owner == nil || owner.Kind != "Pod" || owner.APIVersion != "v1" {
		return "", nil
	}
	pod, err := p.client.CoreV1().Pods(claim.Namespace).Get(ctx, owner.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("reading pod %s, the owner of the claim, for its label or annotation %s: %w", owner.Name, name, err)
	case pod.UID != owner.UID:
		return "", nil
	}
	return pools.CacheKey(name, pod.Labels, pod.Annotations), nil
}

// setLastKey records on a volume being issued the key of its claim.
func setLastKey(annotations map[string]string, key string) {
	if key == "" {
		delete(annotations, wellknown.LastKey)
		return
	}
	annotations[wellknown.LastKey] = key
}
