//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/reclaimable/reclaimable/e2e/cluster"
	"github.com/reclaimable/reclaimable/e2e/framework"
	"github.com/reclaimable/reclaimable/e2e/objects"
	"github.com/reclaimable/reclaimable/internal/keys"
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

// The kustomize installation, renamed as docs/install.md says, its
// Deployments placed on the real node (what an administrator's overlay
// would say of its nodes) and its share a directory of the test's, runs as
// pods: each Deployment becomes available (probes answered), each
// controller leads, and an annotated pod's data reaches the workload's
// next pod through the pool. Not parallel, in a file before
// installed_test.go: it shares the cluster-wide objects' names with every
// kustomize installation, and removes its own before the others install.
func TestInstallAsPodsOnTheRealNode(t *testing.T) {
	framework.RealNode(t)
	share := framework.ControllerDir(t)
	overlay := t.TempDir()
	rel, err := filepath.Rel(overlay, manifestsDir())
	if err != nil {
		t.Fatal(err)
	}
	kustomization := fmt.Sprintf(`resources: [%[1]s]
configMapGenerator:
  - name: reclaimable-settings
    behavior: merge
    literals: [namespace=%[2]s, controller-id=%[3]s, provisioner-name=%[4]s, lifecycle-namespace=%[5]s]
patches:
  - target: {kind: Deployment}
    patch: |-
      - op: add
        path: /spec/template/spec/nodeSelector
        value: {%[6]s: "true"}
      - op: add
        path: /spec/template/spec/tolerations
        value: [{key: %[7]s, operator: Exists, effect: NoSchedule}]
  - target: {kind: PersistentVolume, name: reclaimable-share}
    patch: |-
      - op: replace
        path: /spec/hostPath/path
        value: %[8]s
components: [%[1]s/components/settings]
`, filepath.ToSlash(rel), podsNamespace, podsID, podsProvisioner, podsLifecycle, cluster.RealNodeLabel, cluster.RealNodeTaint, share)
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kustomization), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if _, _, err := kubectl(ctx, "delete", "--wait", "--ignore-not-found", "namespace/"+podsNamespace, "namespace/"+podsLifecycle, "persistentvolume/reclaimable-share"); err != nil {
			t.Errorf("removing the installation: %v", err)
		}
	})
	if _, _, err := kubectl(ctx, "apply", "-k", overlay); err != nil {
		t.Fatal(err)
	}

	client := framework.Client()
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
		sc.Annotations = map[string]string{keys.ClassControllerID: podsID}
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
	inv.Check(t, 10*time.Second)
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
