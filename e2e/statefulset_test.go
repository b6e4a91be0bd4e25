//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/reclaimable/reclaimable/e2e/framework"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// TestNodeStatefulSetReplicasGetTheirOwnVolumesBack has Kubernetes' own
// StatefulSet controller as the pool's client, with no annotation of the
// project's: a StatefulSet of three on the real node, each replica's claim
// from the volumeClaimTemplate of a Retain pool class with reserveFor, each
// replica writing its name into its volume. Scaled to one with whenScaled
// Delete, the two claims go and their volumes return to the pool reserved
// for them; scaled back to three, each returning replica's claim, of the
// same name, gets its own volume back with its own data, and none gets
// another's. Deleted with whenDeleted Delete, every claim goes and every
// volume is back in the pool, its data with it.
func TestNodeStatefulSetReplicasGetTheirOwnVolumesBack(t *testing.T) {
	framework.RealNode(t)
	t.Parallel()
	c := newCycleCase(t, "sts", map[string]string{wellknown.ReserveFor: "10m"}, "")
	framework.StartController(t, c.args...).WaitReady(t)
	ctx := context.Background()
	client := framework.Client()
	sets := client.AppsV1().StatefulSets(c.ns)

	set := replicaSet("web", c.class, 3)
	if _, err := sets.Create(ctx, set, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	replicas := []string{"web-0", "web-1", "web-2"}
	volumes := map[string]*corev1.PersistentVolume{}
	for _, pod := range replicas {
		waitReplicaSays(t, c.ns, pod, fmt.Sprintf("wrote /cache/owner: %q", pod))
		volumes[pod] = boundVolume(t, c.ns, "data-"+pod)
	}
	seen := map[string]string{}
	for pod, pv := range volumes {
		if other, ok := seen[pv.Name]; ok {
			t.Fatalf("replicas %s and %s share volume %s", pod, other, pv.Name)
		}
		seen[pv.Name] = pod
	}

	scale(t, c.ns, "web", 1)
	for _, pod := range replicas[1:] {
		framework.Eventually(t, 2*time.Minute, func(ctx context.Context) (bool, error) {
			_, err := client.CoreV1().PersistentVolumeClaims(c.ns).Get(ctx, "data-"+pod, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		}, fmt.Sprintf("the claim of %s to be deleted by the StatefulSet controller (whenScaled Delete)", pod))
		waitInPool(t, volumes[pod].Name)
		waitReserved(t, volumes[pod].Name, c.ns, "data-"+pod)
	}

	scale(t, c.ns, "web", 3)
	for _, pod := range replicas[1:] {
		waitReplicaSays(t, c.ns, pod, fmt.Sprintf("found /cache/owner holding its own %q", pod))
		if got := boundVolume(t, c.ns, "data-"+pod); got.Name != volumes[pod].Name {
			t.Errorf("replica %s came back to volume %s, not its own %s", pod, got.Name, volumes[pod].Name)
		}
	}

	patch := []byte(`{"spec":{"persistentVolumeClaimRetentionPolicy":{"whenDeleted":"Delete","whenScaled":"Delete"}}}`)
	if _, err := sets.Patch(ctx, "web", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// The StatefulSet controller makes the set the claims' owner once it
	// sees the policy: deleting the set before that would leave them.
	for _, pod := range replicas {
		framework.Eventually(t, time.Minute, func(ctx context.Context) (bool, error) {
			claim, err := client.CoreV1().PersistentVolumeClaims(c.ns).Get(ctx, "data-"+pod, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			for _, ref := range claim.OwnerReferences {
				if ref.Kind == "StatefulSet" && ref.Name == "web" {
					return true, nil
				}
			}
			return false, nil
		}, fmt.Sprintf("the claim of %s to be owned by its StatefulSet (whenDeleted Delete)", pod))
	}
	if err := sets.Delete(ctx, "web", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)}); err != nil {
		t.Fatal(err)
	}
	for _, pod := range replicas {
		waitInPool(t, volumes[pod].Name)
		waitReserved(t, volumes[pod].Name, c.ns, "data-"+pod)
		b, err := os.ReadFile(filepath.Join(volumes[pod].Spec.HostPath.Path, "owner"))
		if err != nil {
			t.Fatalf("the volume of %s back in the pool: %v", pod, err)
		}
		if string(b) != pod {
			t.Errorf("the volume of %s holds %q on the node, want %q", pod, b, pod)
		}
	}
	c.inv.Check(t, 10*time.Second)
}

// replicaSet is a StatefulSet of replicas on the real node whose pods keep
// their own name in /cache/owner, on a claim "data" of class.
func replicaSet(name, class string, replicas int32) *appsv1.StatefulSet {
	labels := map[string]string{"app": name}
	spec := nodePodSpec("", 1000, "keep", "/cache/owner", "$(POD_NAME)")
	spec.RestartPolicy = corev1.RestartPolicyAlways
	spec.Volumes = nil
	spec.Containers[0].VolumeMounts[0].Name = "data"
	spec.TerminationGracePeriodSeconds = ptr.To[int64](5)
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            &replicas,
			ServiceName:         name,
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector:            &metav1.LabelSelector{MatchLabels: labels},
			PersistentVolumeClaimRetentionPolicy: &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
				WhenScaled: appsv1.DeletePersistentVolumeClaimRetentionPolicyType, WhenDeleted: appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
			},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: "data"},
				Spec: corev1.PersistentVolumeClaimSpec{
					StorageClassName: &class,
					AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
				},
			}},
		},
	}
}

// waitReplicaSays waits until the replica runs on the real node and its
// log holds want; a replica that fails or restarts fails the test.
func waitReplicaSays(t *testing.T, ns, pod, want string) {
	t.Helper()
	framework.Eventually(t, 2*time.Minute, func(ctx context.Context) (bool, error) {
		p, err := framework.Client().CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		} else if err != nil {
			return false, err
		}
		for _, s := range p.Status.ContainerStatuses {
			if s.RestartCount > 0 || s.LastTerminationState.Terminated != nil {
				return false, fmt.Errorf("replica %s restarted: %s", pod, podLog(ns, pod))
			}
		}
		if p.Status.Phase != corev1.PodRunning {
			return false, nil
		}
		if p.Spec.NodeName != framework.RealNodeName {
			return false, fmt.Errorf("replica %s runs on node %q, want the real node", pod, p.Spec.NodeName)
		}
		return strings.Contains(podLog(ns, pod), want), nil
	}, fmt.Sprintf("replica %s/%s to say %s", ns, pod, want))
}

// scale sets the StatefulSet's replicas.
func scale(t *testing.T, ns, name string, replicas int32) {
	t.Helper()
	patch := fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, replicas)
	if _, err := framework.Client().AppsV1().StatefulSets(ns).Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}
