//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/reclaimable/reclaimable/e2e/cluster"
	"github.com/reclaimable/reclaimable/e2e/framework"
	"github.com/reclaimable/reclaimable/e2e/objects"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// The installation as pods: its Deployments' own pods, on the real node,
// from the image the node imported (make image's), under their
// ServiceAccounts and the restricted Pod Security its namespace enforces,
// reaching the API server through the kubernetes Service as in any
// cluster (cluster/service.go). Renamed, with names of its own, so that
// its Leases and its podwatcher are apart from every other installation's.
const (
	podsNamespace   = "pods-system"
	podsLifecycle   = "pods-lifecycle"
	podsID          = "pods"
	podsProvisioner = "pods.example.com/reclaimable"
)

// The chart, installed as a user installs it with values that rename it
// and place its pods on the real node, two provisioner replicas and its
// share a directory of the test's, runs as pods (see asPods); uninstalled
// at the end. Not parallel, in a file after helm_test.go and before
// installed_test.go, and before the kustomize one: helm owns the
// cluster-wide objects it makes, and refuses to make those an earlier
// kustomize apply left.
func TestHelmAsPodsOnTheRealNode(t *testing.T) {
	framework.RealNode(t)
	share := framework.ControllerDir(t)
	helm(t, "install", map[string]any{
		"namespace": podsNamespace, "lifecycleNamespace": podsLifecycle, "controllerID": podsID, "provisionerName": podsProvisioner,
		"nodeSelector": map[string]any{cluster.RealNodeLabel: "true"},
		"tolerations":  []any{map[string]any{"key": cluster.RealNodeTaint, "operator": "Exists", "effect": "NoSchedule"}},
		"provisioner":  map[string]any{"replicas": 2},
		"share":        map[string]any{"hostPath": share},
	})
	t.Cleanup(func() { helm(t, "uninstall", nil) })
	asPods(t, share)
}

// The kustomize installation, renamed as docs/install.md says, its
// Deployments placed on the real node (what an administrator's overlay
// would say of its nodes), two provisioner replicas and its share a
// directory of the test's, runs as pods (see asPods). Not parallel, in a
// file before installed_test.go and after helm_test.go: it shares the
// cluster-wide objects' names with every installation, and removes its own
// before the others install.
func TestInstallAsPodsOnTheRealNode(t *testing.T) {
	framework.RealNode(t)
	share := framework.ControllerDir(t)
	patches := fmt.Sprintf(`  - target: {kind: Deployment}
    patch: |-
      - op: add
        path: /spec/template/spec/nodeSelector
        value: {%[1]s: "true"}
      - op: add
        path: /spec/template/spec/tolerations
        value: [{key: %[2]s, operator: Exists, effect: NoSchedule}]
  - target: {kind: Deployment, name: reclaimable-provisioner}
    patch: |-
      - op: replace
        path: /spec/replicas
        value: 2
  - target: {kind: PersistentVolume, name: reclaimable-share}
    patch: |-
      - op: replace
        path: /spec/hostPath/path
        value: %[3]s
`, cluster.RealNodeLabel, cluster.RealNodeTaint, share)
	applyRenamed(t, renamedOverlay(t, podsNamespace, podsID, podsProvisioner, podsLifecycle, patches), podsNamespace, podsLifecycle)
	asPods(t, share)
}

// asPods checks an installation of the pods settings running as pods on
// the real node, from the image the node imported (make image's): every
// Deployment becomes available (its probes answered), every controller
// leads, an annotated pod's data reaches the workload's next pod through
// the pool; then the provisioner's leader is killed (its pod deleted at
// once), its standby takes the Lease over, and the workload's third pod
// gets the volume and the data through it. No invariant is violated.
func asPods(t *testing.T, share string) {
	t.Helper()
	client := framework.Client()
	namespace, err := client.CoreV1().Namespaces().Get(context.Background(), podsNamespace, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := namespace.Labels["pod-security.kubernetes.io/enforce"]; got != "restricted" {
		t.Errorf("namespace %s enforces Pod Security %q, want restricted", podsNamespace, got)
	}
	for _, name := range installedControllers {
		deployment := "reclaimable-" + name
		if err := wait.PollUntilContextTimeout(context.Background(), framework.Interval, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
			d, err := client.AppsV1().Deployments(podsNamespace).Get(ctx, deployment, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			for _, c := range d.Status.Conditions {
				if c.Type == appsv1.DeploymentAvailable && c.Status == corev1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		}); err != nil {
			t.Fatalf("Deployment %s/%s available on the real node: %v; its namespace's pods: %s", podsNamespace, deployment, err, podsOf(podsNamespace))
		}
		lease := podsID + "-" + name
		framework.Eventually(t, time.Minute, func(ctx context.Context) (bool, error) {
			l, err := client.CoordinationV1().Leases(podsNamespace).Get(ctx, lease, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			return deref(l.Spec.HolderIdentity, "") != "", nil
		}, "Lease "+podsNamespace+"/"+lease+" to have a holder")
	}

	// The class's share, as the provisioner's pod sees it (its volume at
	// --directory-root) and as the nodes do (the host path).
	class := framework.CreateClass(t, objects.NewClass(framework.Name("pods"), podsProvisioner, func(sc *storagev1.StorageClass) {
		retain, immediate := corev1.PersistentVolumeReclaimRetain, storagev1.VolumeBindingImmediate
		sc.Annotations = map[string]string{wellknown.ClassControllerID: podsID}
		sc.Parameters = map[string]string{"backend": "directory", "baseDir": "/var/lib/reclaimable", "source": "hostPath", "hostPath": share}
		sc.ReclaimPolicy, sc.VolumeBindingMode = &retain, &immediate
		sc.AllowedTopologies = realNodeTopology()
	}))
	ns := framework.Namespace(t)
	inv := framework.WatchInvariants(t, framework.Scope{ControllerID: podsID, Classes: []string{class}, Namespaces: []string{ns}, NamespaceScoped: []string{class}})
	const claim = "pods-cache"
	runToCompletion(t, ns, nodePod("first", claim, class, 1000, "write", "/cache/mine", "the first pod's\n"))
	first := boundVolume(t, ns, claim)
	deletePod(t, ns, "first", claim)
	waitInPool(t, first.Name)
	runToCompletion(t, ns, nodePod("second", claim, class, 2000, "expect", "/cache/mine", "the first pod's\n"))
	if got := boundVolume(t, ns, claim); got.Name != first.Name {
		t.Errorf("the second pod's claim got volume %s, want %s, the first's", got.Name, first.Name)
	}
	deletePod(t, ns, "second", claim)
	waitInPool(t, first.Name)

	killLeader(t, "provisioner")
	runToCompletion(t, ns, nodePod("third", claim, class, 1000, "expect", "/cache/mine", "the first pod's\n"))
	if got := boundVolume(t, ns, claim); got.Name != first.Name {
		t.Errorf("after the failover the third pod's claim got volume %s, want %s, the first's", got.Name, first.Name)
	}
	deletePod(t, ns, "third", claim)
	inv.Check(t, 10*time.Second)
}

// killLeader deletes at once the pod of the controller's replica that
// holds its Lease (identity "<pod name>_<UUID>": a pod's host name is its
// name), and waits until another replica holds it.
func killLeader(t *testing.T, controller string) {
	t.Helper()
	ctx := context.Background()
	client := framework.Client()
	lease := podsID + "-" + controller
	l, err := client.CoordinationV1().Leases(podsNamespace).Get(ctx, lease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	holder := deref(l.Spec.HolderIdentity, "")
	leader, _, _ := strings.Cut(holder, "_")
	if _, err := client.CoreV1().Pods(podsNamespace).Get(ctx, leader, metav1.GetOptions{}); err != nil {
		t.Fatalf("the %s's leader %q is no pod of %s: %v", controller, holder, podsNamespace, err)
	}
	if err := client.CoreV1().Pods(podsNamespace).Delete(ctx, leader, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	framework.Eventually(t, time.Minute, func(ctx context.Context) (bool, error) {
		l, err := client.CoordinationV1().Leases(podsNamespace).Get(ctx, lease, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		now := deref(l.Spec.HolderIdentity, "")
		return now != "" && now != holder, nil
	}, fmt.Sprintf("a standby of the %s to take Lease %s/%s over from %s", controller, podsNamespace, lease, holder))
	t.Logf("the %s's standby took the Lease over %s after its leader's pod was deleted", controller, time.Since(start).Round(100*time.Millisecond))
}

// podsOf lists the pods of ns with their phase and node, for a message.
func podsOf(ns string) string {
	pods, err := framework.Client().CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, p := range pods.Items {
		s := fmt.Sprintf("%s %s on %q", p.Name, p.Status.Phase, p.Spec.NodeName)
		for _, c := range p.Status.ContainerStatuses {
			if w := c.State.Waiting; w != nil {
				s += fmt.Sprintf(", %s waiting: %s %s", c.Name, w.Reason, w.Message)
			}
			if term := c.LastTerminationState.Terminated; term != nil {
				s += fmt.Sprintf(", %s ended: %s %s", c.Name, term.Reason, term.Message)
			}
		}
		tail := int64(5)
		if b, err := framework.Client().CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: &tail}).DoRaw(context.Background()); err == nil {
			s += fmt.Sprintf(", log: %q", b)
		}
		out = append(out, s)
	}
	return fmt.Sprint(out)
}
