//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	volumehelpers "k8s.io/component-helpers/storage/volume"

	"github.com/reclaimable/reclaimable/e2e/cluster"
	"github.com/reclaimable/reclaimable/e2e/framework"
)

// localCase is a class of the local backend whose volumes are directories
// on the real node, the namespace its pods run in, the namespace of its
// lifecycle pods, and the controllers serving them.
type localCase struct {
	ns, helpers, class, nodePath string
	inv                          *framework.Invariants
	controllers                  *framework.Process
}

// params adds to the class's parameters; args to the controllers' flags.
func newLocalCase(t *testing.T, policy corev1.PersistentVolumeReclaimPolicy, params map[string]string, args ...string) *localCase {
	t.Helper()
	framework.RealNode(t)
	t.Parallel()
	c := &localCase{ns: framework.Namespace(t), helpers: framework.Namespace(t)}
	id := framework.Name("local")
	provisioner := "local.reclaimable/" + id
	c.nodePath = filepath.Join(t.TempDir(), "pool")
	if err := os.MkdirAll(c.nodePath, 0o755); err != nil {
		t.Fatal(err)
	}
	parameters := map[string]string{"backend": "local", "nodePath": c.nodePath}
	maps.Copy(parameters, params)
	c.class = createClass(t, "local", id, provisioner, policy, storagev1.VolumeBindingWaitForFirstConsumer, parameters)
	c.inv = framework.WatchInvariants(t, framework.Scope{ControllerID: id, Classes: []string{c.class}, Namespaces: []string{c.ns}, NamespaceScoped: []string{c.class}})
	c.controllers = framework.StartController(t, append([]string{"all", "--controller-id=" + id, "--provisioner-name=" + provisioner, "--namespace=" + c.ns,
		"--lifecycle-namespace=" + c.helpers, "--lifecycle-image=" + cluster.ReclaimableImage,
		"--cleanup-interval=5s", "--release-interval=5s"}, args...)...)
	c.controllers.WaitReady(t)
	return c
}

// noHelperLeft waits until no lifecycle pod is left.
func (c *localCase) noHelperLeft(t *testing.T) {
	t.Helper()
	framework.Eventually(t, 30*time.Second, func(ctx context.Context) (bool, error) {
		pods, err := framework.Client().CoreV1().Pods(c.helpers).List(ctx, metav1.ListOptions{})
		return err == nil && len(pods.Items) == 0, err
	}, "no lifecycle pod to be left in "+c.helpers)
}

// onTheNode checks that volume is a directory in the class's nodePath,
// pinned to the real node.
func (c *localCase) onTheNode(t *testing.T, pv *corev1.PersistentVolume) {
	t.Helper()
	if pv.Spec.HostPath == nil || pv.Spec.HostPath.Path != filepath.Join(c.nodePath, pv.Name) {
		t.Fatalf("volume %s has source %v, want the directory %s on the node", pv.Name, pv.Spec.PersistentVolumeSource, filepath.Join(c.nodePath, pv.Name))
	}
	terms := pv.Spec.NodeAffinity.Required.NodeSelectorTerms
	if len(terms) != 1 || len(terms[0].MatchExpressions) != 1 || !strings.Contains(fmt.Sprint(terms[0].MatchExpressions[0].Values), framework.RealNodeName) {
		t.Fatalf("volume %s has node affinity %v, want the real node alone", pv.Name, terms)
	}
	if fi, err := os.Stat(pv.Spec.HostPath.Path); err != nil || !fi.IsDir() {
		t.Fatalf("the directory of volume %s is not on the node: %v", pv.Name, err)
	}
}

// TestNodeLocalPoolServesTheNextPodOnItsNode: a claim of a local class gets
// a new directory made by a create pod on the real node; its pod writes; the
// volume returns to the pool; the next pod of the workload is scheduled to
// the same node, gets the same volume and reads the data. No lifecycle pod
// is left.
func TestNodeLocalPoolServesTheNextPodOnItsNode(t *testing.T) {
	c := newLocalCase(t, corev1.PersistentVolumeReclaimRetain, nil)
	const claim = "local-cache"
	first := "written on the node by uid 1000\n"
	log := runToCompletion(t, c.ns, nodePod("writer", claim, c.class, 1000, "write", "/cache/log", first))
	if want := fmt.Sprintf("wrote /cache/log: %q", first); !strings.Contains(log, want) {
		t.Fatalf("writer's log %q lacks %q", log, want)
	}
	volume := boundVolume(t, c.ns, claim)
	c.onTheNode(t, volume)
	c.noHelperLeft(t)
	deletePod(t, c.ns, "writer", claim)
	waitInPool(t, volume.Name)

	log = runToCompletion(t, c.ns, nodePod("reader", claim, c.class, 2000, "append", "/cache/log", "read\n"))
	if want := fmt.Sprintf("read /cache/log: %q", first); !strings.Contains(log, want) {
		t.Errorf("reader's log %q lacks %q", log, want)
	}
	if got := boundVolume(t, c.ns, claim); got.Name != volume.Name {
		t.Errorf("the second pod's claim got volume %s, want %s from the node's pool", got.Name, volume.Name)
	}
	deletePod(t, c.ns, "reader", claim)
	c.noHelperLeft(t)
	c.inv.Check(t, 10*time.Second)
}

// TestNodeLocalWarmVolumeDrawsItsWorkloadsNextPod: under the class's
// defaults the released volume is kept for its claim's name, so the PV
// controller binds the workload's next claim to it as soon as the claim
// exists, and the scheduler, which only sees that binding, sends the pod to
// the volume's node although an empty fake node has more room.
func TestNodeLocalWarmVolumeDrawsItsWorkloadsNextPod(t *testing.T) {
	c := newLocalCase(t, corev1.PersistentVolumeReclaimRetain, nil)
	c.drawsTheNextPod(t, "cache", "cache")
}

// TestNodeLocalFreeVolumeDrawsAnotherWorkloadsPod: a free volume, kept for
// no claim (reuseScope cluster, no reservation), draws a pod of another
// workload to its node: the scheduler scores a node where a free volume fits
// the pod's claim, configured as docs/pools.md says.
func TestNodeLocalFreeVolumeDrawsAnotherWorkloadsPod(t *testing.T) {
	c := newLocalCase(t, corev1.PersistentVolumeReclaimRetain, map[string]string{"reuseScope": "cluster", "reserveFor": "0"})
	c.drawsTheNextPod(t, "first-workload", "second-workload")
}

// drawsTheNextPod runs a pod on the real node that writes into a new volume
// through claim, then a pod through next that may run on the real node or
// on an empty fake node, which the scheduler's resource scores favour. The
// second pod must be scheduled to the real node, at the first try, and read
// the first pod's data.
func (c *localCase) drawsTheNextPod(t *testing.T, claim, next string) {
	t.Helper()
	other := framework.Name("roomy")
	framework.CreateNode(t, other, nil)
	drawnToTheVolume(t, c.ns, c.class, claim, next, other)
	c.noHelperLeft(t)
	c.inv.Check(t, 10*time.Second)
}

// drawnToTheVolume runs a pod on the real node that writes into a new
// volume of class through claim, then a pod through next that may run on
// the real node or on the fake node other (whose taint, if it is a zone
// node, it tolerates). The second pod must be scheduled to the real node,
// at the first try, get the first pod's volume and read its data.
func drawnToTheVolume(t *testing.T, ns, class, claim, next, other string) {
	t.Helper()
	runToCompletion(t, ns, nodePod("writer", claim, class, 1000, "write", "/cache/log", "warm\n"))
	volume := boundVolume(t, ns, claim)
	deletePod(t, ns, "writer", claim)
	waitInPool(t, volume.Name)

	pod := nodePod("reader", next, class, 1000, "expect", "/cache/log", "warm\n")
	pod.Spec.NodeSelector = nil
	pod.Spec.Tolerations = append(pod.Spec.Tolerations, framework.ZoneNodeToleration(other))
	pod.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{framework.RealNodeName, other}}},
		}}},
	}}
	if _, err := framework.Client().CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A node the scheduler selected for a new volume shows on the claim
	// before the pod is bound to it (the pod waits for the volume).
	var node string
	framework.Eventually(t, time.Minute, func(ctx context.Context) (bool, error) {
		pvc, err := framework.Client().CoreV1().PersistentVolumeClaims(ns).Get(ctx, next, metav1.GetOptions{})
		if err == nil && pvc.Annotations[volumehelpers.AnnSelectedNode] != "" {
			node = pvc.Annotations[volumehelpers.AnnSelectedNode]
			return true, nil
		}
		p, err := framework.Client().CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		node = p.Spec.NodeName
		return node != "", nil
	}, "pod "+pod.Name+" to be scheduled")
	if node != framework.RealNodeName {
		t.Fatalf("pod %s was scheduled to %s, away from the free volume %s on %s", pod.Name, node, volume.Name, framework.RealNodeName)
	}
	waitSucceeded(t, ns, pod.Name)
	if got := boundVolume(t, ns, next); got.Name != volume.Name {
		t.Fatalf("claim %s got volume %s, want the node's free volume %s", next, got.Name, volume.Name)
	}
	deletePod(t, ns, pod.Name, next)
}

// TestNodeLocalDeleteRemovesTheDirectory: with reclaim policy Delete, a
// delete pod on the node removes the volume's directory once its claim is
// gone, whatever its consumer left there as its own user (a file, a 0755
// and a 0555 directory, each with a file), then the volume object goes.
func TestNodeLocalDeleteRemovesTheDirectory(t *testing.T) {
	c := newLocalCase(t, corev1.PersistentVolumeReclaimDelete, nil)
	const claim = "scratch"
	runToCompletion(t, c.ns, nodePod("writer", claim, c.class, 1000, "fill", "/cache"))
	volume := boundVolume(t, c.ns, claim)
	c.onTheNode(t, volume)
	consumersTree(t, volume.Spec.HostPath.Path)
	deletePod(t, c.ns, "writer", claim)
	volumeAndDirectoryGone(t, volume.Name, volume.Spec.HostPath.Path)
	c.noHelperLeft(t)
	c.inv.Check(t, 10*time.Second)
}

// TestNodeLocalStuckLifecyclePodEndsAtItsDeadline: on a node without the
// class's nodePath the create pod cannot mount it and never finishes. At
// the deadline the provisioner removes it (and the delete pod that follows,
// stuck the same way), reports the claim's provisioning failed, and leaves
// no pod and no directory; once the directory exists, a retry serves the
// claim.
func TestNodeLocalStuckLifecyclePodEndsAtItsDeadline(t *testing.T) {
	c := newLocalCase(t, corev1.PersistentVolumeReclaimRetain, nil, "--lifecycle-timeout=5s")
	if err := os.Remove(c.nodePath); err != nil {
		t.Fatal(err)
	}
	const claim = "late"
	if _, err := framework.Client().CoreV1().Pods(c.ns).Create(context.Background(), nodePod("writer", claim, c.class, 1000, "write", "/cache/log", "at last\n"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ev := waitEventMessage(t, c.ns, claim, "ProvisioningFailed", "did not finish within 5s")
	t.Logf("event: %s", ev)
	c.noHelperLeft(t)
	if _, err := os.Stat(c.nodePath); !os.IsNotExist(err) {
		t.Fatalf("nodePath %s appeared on the node: %v", c.nodePath, err)
	}

	if err := os.MkdirAll(c.nodePath, 0o755); err != nil {
		t.Fatal(err)
	}
	log := waitSucceeded(t, c.ns, "writer")
	if !strings.Contains(log, "wrote /cache/log") {
		t.Errorf("writer's log %q", log)
	}
	c.onTheNode(t, boundVolume(t, c.ns, claim))
	c.noHelperLeft(t)
	deletePod(t, c.ns, "writer", claim)
	c.inv.Check(t, 10*time.Second)
}

// waitEventMessage waits for an event of reason on the claim whose message
// contains substr, and returns the message.
func waitEventMessage(t *testing.T, ns, claim, reason, substr string) string {
	t.Helper()
	return framework.WaitEvent(t, 2*time.Minute, framework.EventQuery{Namespace: ns, Kind: "PersistentVolumeClaim", Name: claim, Reason: reason, Message: substr}).Message
}

// TestNodeLocalProvisionerKilledDuringACreatePod: the provisioner is killed
// while its create pod waits on the node (nodePath is not there yet). The
// next provisioner finds that pod by its name, waits for it instead of
// starting another, and removes it once it has made the directory: the
// claim is served, no lifecycle pod is left, and nodePath holds the
// volume's directory alone.
func TestNodeLocalProvisionerKilledDuringACreatePod(t *testing.T) {
	c := newLocalCase(t, corev1.PersistentVolumeReclaimRetain, nil, "--lifecycle-timeout=90s")
	if err := os.Remove(c.nodePath); err != nil {
		t.Fatal(err)
	}
	const claim = "interrupted"
	client := framework.Client()
	if _, err := client.CoreV1().Pods(c.ns).Create(context.Background(), nodePod("writer", claim, c.class, 1000, "write", "/cache/log", "after a restart\n"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var helper string
	framework.Eventually(t, time.Minute, func(ctx context.Context) (bool, error) {
		pods, err := client.CoreV1().Pods(c.helpers).List(ctx, metav1.ListOptions{})
		if err != nil || len(pods.Items) == 0 {
			return false, err
		}
		helper = pods.Items[0].Name
		return true, nil
	}, "a create pod to be started")
	c.controllers.Kill()
	if err := os.MkdirAll(c.nodePath, 0o755); err != nil {
		t.Fatal(err)
	}
	c.controllers.Start()
	c.controllers.WaitReady(t)

	waitSucceeded(t, c.ns, "writer")
	volume := boundVolume(t, c.ns, claim)
	c.onTheNode(t, volume)
	if want := "create-" + volume.Name; helper != want {
		t.Errorf("the killed provisioner's pod was %s, want %s", helper, want)
	}
	c.noHelperLeft(t)
	entries, err := os.ReadDir(c.nodePath)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != volume.Name {
		t.Errorf("nodePath holds %v, want the directory of %s alone", entries, volume.Name)
	}
	deletePod(t, c.ns, "writer", claim)
	c.inv.Check(t, 10*time.Second)
}

// TestNodeLocalFailedCreatePodIsReportedAndUndone: the class's lifecycle
// templates replace the create pod with one that seeds each volume from a
// golden copy that is not on the node: the pod fails, the claim's event
// carries its termination message, the built-in delete pod removes whatever
// was made, and no pod is left. Once the template is fixed, a retry serves
// the claim.
func TestNodeLocalFailedCreatePodIsReportedAndUndone(t *testing.T) {
	c := newLocalCase(t, corev1.PersistentVolumeReclaimRetain, map[string]string{"lifecycleTemplates": "templates"})
	client := framework.Client()
	ctx := context.Background()
	template := func(image string, args ...string) string {
		// As root, as the built-in pod: the reclaimable image runs as user
		// 65532, and the template chooses the security context.
		return fmt.Sprintf(`spec:
  containers:
  - name: create
    image: %s
    imagePullPolicy: IfNotPresent
    args: [%s]
    securityContext:
      runAsUser: 0
      allowPrivilegeEscalation: false
      capabilities: {drop: [ALL], add: [CHOWN, FOWNER, DAC_OVERRIDE, FSETID]}
    volumeMounts: [{name: pool, mountPath: /pool}]
`, image, strings.Join(args, ", "))
	}
	cm, err := client.CoreV1().ConfigMaps(c.helpers).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "templates"},
		Data:       map[string]string{"create": template(cluster.ConsumerImage, "expect", "/pool/golden-copy", "seed")},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const claim = "seeded"
	if _, err := client.CoreV1().Pods(c.ns).Create(ctx, nodePod("writer", claim, c.class, 1000, "write", "/cache/log", "on a seeded volume\n"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitEventMessage(t, c.ns, claim, "ProvisioningFailed", "failed: open /pool/golden-copy: no such file or directory")
	c.noHelperLeft(t)
	if entries, err := os.ReadDir(c.nodePath); err != nil || len(entries) != 0 {
		t.Fatalf("nodePath holds %v (%v) after a failed create, want nothing", entries, err)
	}

	cm.Data["create"] = template(cluster.ReclaimableImage, "lifecycle", "create")
	if _, err := client.CoreV1().ConfigMaps(c.helpers).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitSucceeded(t, c.ns, "writer")
	volume := boundVolume(t, c.ns, claim)
	c.onTheNode(t, volume)
	c.noHelperLeft(t)
	deletePod(t, c.ns, "writer", claim)
	c.inv.Check(t, 10*time.Second)
}
