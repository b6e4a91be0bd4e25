//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/reclaimable/reclaimable/e2e/cluster"
	"github.com/reclaimable/reclaimable/e2e/framework"
	"github.com/reclaimable/reclaimable/e2e/objects"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// newNodeCase is a cycleCase for a test on the real node, in parallel
// with the others, its controllers running.
func newNodeCase(t *testing.T, prefix string) *cycleCase {
	t.Helper()
	framework.RealNode(t)
	t.Parallel()
	c := newCycleCase(t, prefix, nil, "")
	framework.StartController(t, c.args...).WaitReady(t)
	return c
}

// nodePod is an annotated pod for the real node (see nodePodSpec).
func nodePod(name, claim, class string, uid int64, args ...string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: soakOwnerAnnotations("cache", class)},
		Spec:       nodePodSpec(claim, uid, args...),
	}
}

// nodePodSpec runs the consumer image on the real node as uid, in group
// 3000 (the team sharing the cache), with claim mounted at /cache and the
// pod's name in $(POD_NAME) for its arguments.
func nodePodSpec(claim string, uid int64, args ...string) corev1.PodSpec {
	group := int64(3000)
	return corev1.PodSpec{
		RestartPolicy:   corev1.RestartPolicyNever,
		NodeSelector:    map[string]string{cluster.RealNodeLabel: "true"},
		Tolerations:     []corev1.Toleration{{Key: cluster.RealNodeTaint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		SecurityContext: &corev1.PodSecurityContext{RunAsUser: &uid, RunAsGroup: &group},
		Containers: []corev1.Container{{
			Name: "consumer", Image: cluster.ConsumerImage, ImagePullPolicy: corev1.PullNever,
			Args:         args,
			Env:          []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
			VolumeMounts: []corev1.VolumeMount{{Name: "cache", MountPath: "/cache"}},
		}},
		Volumes: []corev1.Volume{{Name: "cache", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim},
		}}},
	}
}

// realNodeTopology is a StorageClass's allowedTopologies for a share that
// is a directory of this machine, which the real node is: its volumes, and
// their lifecycle pods, go there; the fake nodes do not reach it.
func realNodeTopology() []corev1.TopologySelectorTerm {
	return []corev1.TopologySelectorTerm{{MatchLabelExpressions: []corev1.TopologySelectorLabelRequirement{
		{Key: cluster.RealNodeLabel, Values: []string{"true"}},
	}}}
}

// runToCompletion creates pod, waits until it Succeeded on the real node
// and returns its log. A pod that fails fails the test with its log.
func runToCompletion(t *testing.T, ns string, pod *corev1.Pod) string {
	t.Helper()
	if _, err := framework.Client().CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return waitSucceeded(t, ns, pod.Name)
}

// waitSucceeded waits until the pod Succeeded in a container of the real
// node and returns its log. A pod that fails fails the test with its log.
func waitSucceeded(t *testing.T, ns, name string) string {
	t.Helper()
	p := waitPod(t, ns, name, corev1.PodSucceeded)
	if p.Spec.NodeName != framework.RealNodeName {
		t.Fatalf("pod %s ran on node %q, want the real node %s", name, p.Spec.NodeName, framework.RealNodeName)
	}
	if id := p.Status.ContainerStatuses[0].ContainerID; !strings.HasPrefix(id, "containerd://") {
		t.Fatalf("pod %s has container ID %q, want one of containerd", name, id)
	}
	return podLog(ns, name)
}

// waitPod waits until the pod is in phase; a pod that fails first fails
// the test with its log.
func waitPod(t *testing.T, ns, name string, phase corev1.PodPhase) *corev1.Pod {
	t.Helper()
	var last *corev1.Pod
	framework.Eventually(t, 2*time.Minute, func(ctx context.Context) (bool, error) {
		p, err := framework.Client().CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = p
		if p.Status.Phase == corev1.PodFailed && phase != corev1.PodFailed {
			return false, fmt.Errorf("pod %s failed: %s", name, podLog(ns, name))
		}
		return p.Status.Phase == phase, nil
	}, fmt.Sprintf("pod %s/%s to be %s", ns, name, phase))
	return last
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
	c := newNodeCase(t, "node")
	ns, class := c.ns, c.class

	const claim = "build-cache"
	first := "written by uid 1000\n"
	log := runToCompletion(t, ns, nodePod("writer", claim, class, 1000, "write", "/cache/log", first))
	if want := fmt.Sprintf("uid=1000 wrote /cache/log: %q", first); !strings.Contains(log, want) {
		t.Fatalf("writer's log %q lacks %q", log, want)
	}
	volume := boundVolume(t, ns, claim)
	deletePod(t, ns, "writer", claim)
	// The next pod of a workload comes once the last one's volume is back
	// in the pool; one that comes while the PV controller has yet to see
	// the claim gone finds the volume still Bound, and gets a new one.
	waitInPool(t, volume.Name)

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

// waitInPool waits until the volume is back in the pool: Available.
func waitInPool(t *testing.T, volume string) {
	t.Helper()
	framework.Eventually(t, time.Minute, func(ctx context.Context) (bool, error) {
		pv, err := framework.Client().CoreV1().PersistentVolumes().Get(ctx, volume, metav1.GetOptions{})
		return err == nil && pv.Status.Phase == corev1.VolumeAvailable, err
	}, fmt.Sprintf("volume %s to be back in the pool", volume))
}

// TestNodeJobPodsShareTheirJobsClaim runs a Job of four pods, two at a
// time, on the real node: each pod appends its name to a file in the Job's
// one claim and prints the file; the last to write sees all four. Once the
// Job is deleted its claim goes and the volume returns to the pool with the
// four lines in it.
func TestNodeJobPodsShareTheirJobsClaim(t *testing.T) {
	c := newNodeCase(t, "nodejob")
	client := framework.Client()
	ctx := context.Background()

	const claim = "job-cache"
	parallelism, completions := int32(2), int32(4)
	job, err := client.BatchV1().Jobs(c.ns).Create(ctx, &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "build", Annotations: soakOwnerAnnotations("cache", c.class)},
		Spec: batchv1.JobSpec{Parallelism: &parallelism, Completions: &completions,
			Template: corev1.PodTemplateSpec{Spec: nodePodSpec(claim, 1000, "add", "/cache/log", "$(POD_NAME)\n")}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 3*time.Minute, func(ctx context.Context) (bool, error) {
		j, err := client.BatchV1().Jobs(c.ns).Get(ctx, job.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if j.Status.Failed > 0 {
			return false, fmt.Errorf("job %s has %d failed pods", job.Name, j.Status.Failed)
		}
		return j.Status.Succeeded == completions, nil
	}, "the Job's four pods to succeed")

	pods, err := client.CoreV1().Pods(c.ns).List(ctx, metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=" + job.Name})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	var longest []string
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodSucceeded {
			continue
		}
		names = append(names, p.Name)
		log := waitSucceeded(t, c.ns, p.Name)
		_, held, ok := strings.Cut(strings.TrimSpace(log), "which now holds: ")
		content, err := strconv.Unquote(held)
		if !ok || err != nil {
			t.Fatalf("pod %s's log does not say what the file holds: %q", p.Name, log)
		}
		if lines := strings.Fields(content); len(lines) > len(longest) {
			longest = lines
		}
	}
	slices.Sort(names)
	slices.Sort(longest)
	if len(names) != int(completions) || !slices.Equal(longest, names) {
		t.Fatalf("the last pod saw %v, want the names of the Job's %d succeeded pods %v", longest, completions, names)
	}

	volume := boundVolume(t, c.ns, claim)
	background := metav1.DeletePropagationBackground
	if err := client.BatchV1().Jobs(c.ns).Delete(ctx, job.Name, metav1.DeleteOptions{PropagationPolicy: &background}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, time.Minute, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().PersistentVolumeClaims(c.ns).Get(ctx, claim, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}, "the Job's claim to go with the Job")
	waitInPool(t, volume.Name)
	b, err := os.ReadFile(filepath.Join(volume.Spec.HostPath.Path, "log"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Fields(string(b))
	slices.Sort(lines)
	if !slices.Equal(lines, names) {
		t.Errorf("the volume back in the pool holds %q, want the four pods' names %v", b, names)
	}
	c.inv.Check(t, 10*time.Second)
}

// TestNodeClaimInUseStaysUntilItsPodIsGone deletes a claim while its pod
// runs on the real node: the claim stays Terminating and its volume Bound,
// and the pod can still write into it. Once the pod has finished and is
// deleted, the claim goes and the volume returns to the pool with the
// pod's last write.
func TestNodeClaimInUseStaysUntilItsPodIsGone(t *testing.T) {
	c := newNodeCase(t, "nodeinuse")
	client := framework.Client()
	ctx := context.Background()

	const claim = "in-use"
	last := "written after the claim was deleted\n"
	if _, err := client.CoreV1().Pods(c.ns).Create(ctx, nodePod("holder", claim, c.class, 1000, "await", "/cache/go", "/cache/log", last), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, c.ns, "holder", corev1.PodRunning)
	volume := boundVolume(t, c.ns, claim)

	if err := client.CoreV1().PersistentVolumeClaims(c.ns).Delete(ctx, claim, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	stillInUse := func() {
		t.Helper()
		pvc, err := client.CoreV1().PersistentVolumeClaims(c.ns).Get(ctx, claim, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("claim %s in use by a pod: %v", claim, err)
		}
		if pvc.DeletionTimestamp == nil {
			t.Fatalf("claim %s was deleted but is not Terminating", claim)
		}
		pv, err := client.CoreV1().PersistentVolumes().Get(ctx, volume.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if pv.Status.Phase != corev1.VolumeBound || pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID != pvc.UID {
			t.Fatalf("volume %s of a claim in use is %s with claimRef %v, want Bound to claim %s", pv.Name, pv.Status.Phase, pv.Spec.ClaimRef, pvc.UID)
		}
	}
	stillInUse()

	// The pod writes once told to, through the mount of a claim that is
	// being deleted.
	if err := os.WriteFile(filepath.Join(volume.Spec.HostPath.Path, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	log := waitSucceeded(t, c.ns, "holder")
	if want := fmt.Sprintf("added %q to /cache/log", last); !strings.Contains(log, want) {
		t.Fatalf("the pod's log %q lacks %q", log, want)
	}
	// A Succeeded pod still names the claim: it is kept while the pod exists.
	stillInUse()

	deletePod(t, c.ns, "holder", claim)
	waitInPool(t, volume.Name)
	b, err := os.ReadFile(filepath.Join(volume.Spec.HostPath.Path, "log"))
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != last {
		t.Errorf("the volume back in the pool holds %q, want the pod's last write %q", b, last)
	}
	c.inv.Check(t, 10*time.Second)
}

// TestNodeDirectoryDeleteRemovesWhatAConsumerLeft: the provisioner runs as
// deployed (user 65532, no capability). A consumer on the real node, as
// uid 1000, leaves a file, a 0755 directory and a 0555 directory, each
// holding a file, in a volume of a directory class with reclaim policy
// Delete. Once its claim is gone, the volume's directory is gone from the
// share and the volume object too: the provisioner's user may not remove
// the consumer's directories, so a delete pod did, on the node that
// reaches the share.
func TestNodeDirectoryDeleteRemovesWhatAConsumerLeft(t *testing.T) {
	framework.RealNode(t)
	t.Parallel()
	ns, helpers := framework.Namespace(t), framework.Namespace(t)
	id := framework.Name("deployed")
	provisioner := "deployed.reclaimable/" + id
	base := framework.ControllerDir(t, "pool")
	policy, binding := corev1.PersistentVolumeReclaimDelete, storagev1.VolumeBindingImmediate
	class := framework.CreateClass(t, objects.NewClass(framework.Name("deployed"), provisioner, func(sc *storagev1.StorageClass) {
		sc.Annotations = map[string]string{wellknown.ClassControllerID: id}
		sc.ReclaimPolicy, sc.VolumeBindingMode = &policy, &binding
		sc.Parameters = map[string]string{"backend": "directory", "source": "hostPath", "baseDir": base, "hostPath": base}
		// The share is a directory of this machine, which the real node
		// is; the fake node does not reach it.
		sc.AllowedTopologies = realNodeTopology()
	}))
	inv := framework.WatchInvariants(t, framework.Scope{ControllerID: id, Classes: []string{class}, Namespaces: []string{ns}, NamespaceScoped: []string{class}})
	controllers := framework.StartController(t, "all", "--controller-id="+id, "--provisioner-name="+provisioner, "--namespace="+ns,
		"--directory-root="+filepath.Dir(base), "--lifecycle-namespace="+helpers, "--lifecycle-image="+cluster.ReclaimableImage,
		"--cleanup-interval=5s", "--release-interval=5s")
	controllers.WaitReady(t)

	const claim = "scratch"
	runToCompletion(t, ns, nodePod("builder", claim, class, 1000, "fill", "/cache"))
	volume := boundVolume(t, ns, claim)
	dir := volume.Spec.HostPath.Path
	consumersTree(t, dir)
	deletePod(t, ns, "builder", claim)
	volumeAndDirectoryGone(t, volume.Name, dir)
	if !strings.Contains(controllers.Log(), "Removing a volume's directory through a lifecycle pod") {
		t.Errorf("the provisioner removed %s without a lifecycle pod: does it run as the manifests run it?", dir)
	}
	framework.Eventually(t, 30*time.Second, func(ctx context.Context) (bool, error) {
		pods, err := framework.Client().CoreV1().Pods(helpers).List(ctx, metav1.ListOptions{})
		return err == nil && len(pods.Items) == 0, err
	}, "no lifecycle pod to be left in "+helpers)
	inv.Check(t, 10*time.Second)
}

// consumersTree checks that dir holds what the consumer's fill left, as
// uid 1000: a 0555 directory with a file in it, which the provisioner's
// user may not remove.
func consumersTree(t *testing.T, dir string) {
	t.Helper()
	fi, err := os.Stat(filepath.Join(dir, "readonly"))
	if err != nil {
		t.Fatalf("the consumer's tree is not in the volume's directory %s: %v", dir, err)
	}
	if st := fi.Sys().(*syscall.Stat_t); fi.Mode().Perm() != 0o555 || st.Uid != 1000 {
		t.Fatalf("%s/readonly has mode %v and owner %d, want 0555 and the consumer's uid 1000", dir, fi.Mode().Perm(), st.Uid)
	}
	if _, err := os.Stat(filepath.Join(dir, "readonly", "a.o")); err != nil {
		t.Fatal(err)
	}
}

// volumeAndDirectoryGone waits until the volume object is deleted, and
// checks that its directory went before it.
func volumeAndDirectoryGone(t *testing.T, volume, dir string) {
	t.Helper()
	framework.Eventually(t, 2*time.Minute, func(ctx context.Context) (bool, error) {
		_, err := framework.Client().CoreV1().PersistentVolumes().Get(ctx, volume, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}, "volume "+volume+" to be deleted")
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the directory %s of deleted volume %s is still there: %v", dir, volume, err)
	}
}
