package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/reclaimable/reclaimable/e2e/cluster"
	"github.com/reclaimable/reclaimable/e2e/framework"
)

// nodePod is an annotated pod for the real node: it runs the consumer
// image as uid, in group 3000 (the team sharing the cache), with its claim
// mounted at /cache.
func nodePod(name, claim, class string, uid int64, args ...string) *corev1.Pod {
	group := int64(3000)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: soakOwnerAnnotations("cache", class)},
		Spec: corev1.PodSpec{
			RestartPolicy:   corev1.RestartPolicyNever,
			NodeSelector:    map[string]string{cluster.RealNodeLabel: "true"},
			Tolerations:     []corev1.Toleration{{Key: cluster.RealNodeTaint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			SecurityContext: &corev1.PodSecurityContext{RunAsUser: &uid, RunAsGroup: &group},
			Containers: []corev1.Container{{
				Name: "consumer", Image: cluster.ConsumerImage, ImagePullPolicy: corev1.PullNever,
				Args:         args,
				VolumeMounts: []corev1.VolumeMount{{Name: "cache", MountPath: "/cache"}},
			}},
			Volumes: []corev1.Volume{{Name: "cache", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim},
			}}},
		},
	}
}

// runToCompletion creates pod, waits until it Succeeded on the real node
// and returns its log. A pod that fails fails the test with its log.
func runToCompletion(t *testing.T, ns string, pod *corev1.Pod) string {
	t.Helper()
	client := framework.Client()
	if _, err := client.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var last *corev1.Pod
	framework.Eventually(t, 2*time.Minute, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = p
		if p.Status.Phase == corev1.PodFailed {
			return false, fmt.Errorf("pod %s failed: %s", pod.Name, podLog(ns, pod.Name))
		}
		return p.Status.Phase == corev1.PodSucceeded, nil
	}, fmt.Sprintf("pod %s/%s to succeed on the real node", ns, pod.Name))
	if last.Spec.NodeName != framework.RealNodeName {
		t.Fatalf("pod %s ran on node %q, want the real node %s", pod.Name, last.Spec.NodeName, framework.RealNodeName)
	}
	if id := last.Status.ContainerStatuses[0].ContainerID; !strings.HasPrefix(id, "containerd://") {
		t.Fatalf("pod %s has container ID %q, want one of containerd", pod.Name, id)
	}
	return podLog(ns, pod.Name)
}

// podLog is a pod's log as the API server gets it from the kubelet.
func podLog(ns, name string) string {
	b, err := framework.Client().CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(context.Background())
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	return string(b)
}

// deletePod deletes a pod and waits until it and its claim are gone: the
// podwatcher deletes the claim of a pod that is gone.
func deletePod(t *testing.T, ns, name, claim string) {
	t.Helper()
	client := framework.Client()
	if err := client.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, time.Minute, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return false, nil
		}
		_, err = client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}, fmt.Sprintf("pod %s/%s and its claim %s to be gone", ns, name, claim))
}

// TestNodeCarriesDataToTheNextPod runs the cycle through real mounts: a pod
// on the real node, as uid 1000, writes into its claim's volume (directory
// backend, hostPath) and exits; its claim goes and the volume returns to the
// pool; the next pod of the workload, as uid 2000, gets the same volume,
// reads the first pod's file and appends to it. What each pod saw is read
// from its log, as the kubelet serves it.
func TestNodeCarriesDataToTheNextPod(t *testing.T) {
	framework.RealNode(t)
	t.Parallel()
	c := newCycleCase(t, "node")
	ns, class := c.ns, c.class
	framework.StartController(t, c.args...).WaitReady(t)

	const claim = "build-cache"
	first := "written by uid 1000\n"
	log := runToCompletion(t, ns, nodePod("writer", claim, class, 1000, "write", "/cache/log", first))
	if want := fmt.Sprintf("uid=1000 wrote /cache/log: %q", first); !strings.Contains(log, want) {
		t.Fatalf("writer's log %q lacks %q", log, want)
	}
	volume := boundVolume(t, ns, claim)
	deletePod(t, ns, "writer", claim)

	second := "appended by uid 2000\n"
	log = runToCompletion(t, ns, nodePod("reader", claim, class, 2000, "append", "/cache/log", second))
	for _, want := range []string{fmt.Sprintf("uid=2000 read /cache/log: %q", first), fmt.Sprintf("uid=2000 appended /cache/log: %q", second)} {
		if !strings.Contains(log, want) {
			t.Errorf("reader's log %q lacks %q", log, want)
		}
	}
	if got := boundVolume(t, ns, claim); got.Name != volume.Name {
		t.Errorf("the second pod's claim got volume %s, want %s, the first pod's", got.Name, volume.Name)
	}
	b, err := os.ReadFile(filepath.Join(volume.Spec.HostPath.Path, "log"))
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != first+second {
		t.Errorf("the volume's file holds %q on the node, want %q", b, first+second)
	}
	deletePod(t, ns, "reader", claim)
	c.inv.Check(t, 10*time.Second)
}

// boundVolume is the volume claim is bound to.
func boundVolume(t *testing.T, ns, claim string) *corev1.PersistentVolume {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pv, err := waitBound(ctx, ns, claim)
	if err != nil {
		t.Fatalf("claim %s/%s bound: %v", ns, claim, err)
	}
	return pv
}
