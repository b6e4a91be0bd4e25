// Command demo runs the whole cycle on a local control plane, for a
// newcomer: reclaimable runs with the directory backend in a temporary
// directory, the example pod asks for a claim, and a timeline shows the
// claim created, the volume provisioned and written to, the pod and claim
// gone, the volume Released then Available again, and a second pod's claim
// getting the same volume with the data still there.
//
// The pods run on the real node: the first one's container writes into the
// volume, the second one's, as another user, reads it, and the timeline
// shows their own log lines. Where the machine cannot run the real node
// (or RECLAIMABLE_E2E_NO_REAL_NODE says not to), the pods go to the fake
// node and the demo writes and reads the file itself, and says so.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/reclaimable/reclaimable/e2e/cluster"
	"github.com/reclaimable/reclaimable/e2e/follow"
	"github.com/reclaimable/reclaimable/e2e/process"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

func main() {
	keep := flag.Bool("keep", false, "leave the control plane and the controllers running, and print how to reach them")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		os.Exit(1)
	}
}

// timeline prints each step with the time since the start and since the
// previous step.
type timeline struct{ start, last time.Time }

func (t *timeline) step(format string, args ...any) { t.stepAt(time.Now(), format, args...) }

// stepAt prints a step that happened at, which may be before now: the
// time a watch delivered it.
func (t *timeline) stepAt(at time.Time, format string, args ...any) {
	fmt.Printf("  %8s  %9s  %s\n", at.Sub(t.start).Round(time.Millisecond), "+"+at.Sub(t.last).Round(time.Millisecond).String(), fmt.Sprintf(format, args...))
	t.last = at
}

// demo is one run: the control plane, the real node if there is one, the
// controllers, and the share the directory backend writes to.
type demo struct {
	keep             bool
	work, clusterDir string
	share            string
	c                *cluster.Cluster
	node             *cluster.Node
	controllers      *process.Controller
	client           kubernetes.Interface
	ns               string
	tl               *timeline
	content          string
}

// run is the demo: two pods one after the other, the second finding what
// the first wrote in the volume the pool gave it back.
func run(ctx context.Context, keep bool) error {
	d, err := start(ctx, keep)
	if err != nil {
		return err
	}
	defer d.finish()
	if err := d.installClassAndControllers(ctx); err != nil {
		return err
	}
	volume, err := d.firstPodWrites(ctx)
	if err != nil {
		return err
	}
	return d.secondPodReads(ctx, volume)
}

// start builds reclaimable and starts the control plane and the real node,
// in _output/cluster with keep (for make cluster-down), else in a
// temporary directory.
func start(ctx context.Context, keep bool) (*demo, error) {
	work, err := os.MkdirTemp("", "reclaimable-demo-")
	if err != nil {
		return nil, err
	}
	d := &demo{keep: keep, work: work, clusterDir: filepath.Join(work, "cluster"), share: filepath.Join(work, "share"), ns: "default"}
	if keep {
		if d.clusterDir, err = filepath.Abs(filepath.Join("_output", "cluster")); err != nil {
			return nil, err
		}
		if _, err := os.Stat(filepath.Join(d.clusterDir, "pids")); err == nil {
			return nil, fmt.Errorf("a control plane is already recorded in %s: run 'make cluster-down' first", d.clusterDir)
		}
	}

	fmt.Println("Building reclaimable and starting a local control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok) and a real node (kubelet, containerd, runc)...")
	binary, err := process.Build(ctx, work)
	if err != nil {
		return nil, err
	}
	if d.c, err = cluster.Start(ctx, cluster.Options{Dir: d.clusterDir, Detach: keep, Log: os.Stdout}); err != nil {
		return nil, err
	}
	d.client = d.c.Client
	node, why, err := startNode(ctx, d.c)
	if err != nil {
		d.c.Stop()
		return nil, err
	}
	if node == nil {
		fmt.Printf("No real node (%s): the pods run on the fake node (kwok), and the demo writes and reads their file itself.\n", why)
	}
	d.node = node
	d.controllers, err = newControllers(binary, d.c.Kubeconfig, d.share, filepath.Join(work, "reclaimable.log"), keep)
	if err != nil {
		d.c.Stop()
		return nil, err
	}
	return d, nil
}

// finish stops everything and removes the work directory, or with keep
// says how to reach what keeps running.
func (d *demo) finish() {
	if !d.keep {
		d.controllers.Signal(syscall.SIGTERM, 30*time.Second)
		d.c.Stop()
		_ = os.RemoveAll(d.work)
		return
	}
	if d.controllers.Pid() == 0 {
		return
	}
	fmt.Printf("\nThe control plane and reclaimable (pid %d, log %s) keep running. Explore with:\n"+
		"  export KUBECONFIG=%s\n  export PATH=%s:$PATH\n  kubectl get pods,pvc,pv -A; kubectl get events -A\n"+
		"The volumes' directories are under %s.\n",
		d.controllers.Pid(), d.controllers.LogPath, d.c.Kubeconfig, d.c.BinDir, d.share)
	if d.node != nil {
		fmt.Printf("Run your own pod on the real node (the consumer image prints what it finds; see docs/development.md):\n"+
			"  kubectl run mine --image=%s --image-pull-policy=Never --restart=Never \\\n"+
			"    --overrides='{\"spec\":{\"nodeSelector\":{%q:\"true\"},\"tolerations\":[{\"key\":%q,\"operator\":\"Exists\"}]}}' -- write /hello world\n"+
			"  kubectl logs mine\n", cluster.ConsumerImage, cluster.RealNodeLabel, cluster.RealNodeTaint)
	}
	fmt.Println("Stop everything with:\n  make cluster-down")
}

// installClassAndControllers creates the example StorageClass on the share
// (a temporary directory plays the NFS export or host path a cluster would
// mount) and starts reclaimable all.
func (d *demo) installClassAndControllers(ctx context.Context) error {
	if err := os.MkdirAll(d.share, 0o755); err != nil {
		return err
	}
	class, err := exampleClass(d.share)
	if err != nil {
		return err
	}
	if _, err := d.client.StorageV1().StorageClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		return err
	}
	if err := startControllers(ctx, d.controllers); err != nil {
		return err
	}
	if d.keep {
		if err := recordPID(d.clusterDir, d.controllers.Pid()); err != nil {
			return err
		}
	}
	fmt.Printf("\nStorageClass %q (directory backend in %s, reclaimPolicy Retain); reclaimable all is running.\n", class.Name, d.share)
	fmt.Println("\nTimeline (since start, since previous step):")
	d.tl = &timeline{start: time.Now(), last: time.Now()}
	return nil
}

// firstPodWrites runs build-1, which asks for a claim by annotation and
// writes into the new volume it gets; once it is deleted, its claim goes
// and the volume returns to the pool. It returns the volume's name.
func (d *demo) firstPodWrites(ctx context.Context) (string, error) {
	tl, client, ns := d.tl, d.client, d.ns
	d.content = "objects compiled by build-1 at " + time.Now().UTC().Format(time.RFC3339)
	pod, err := examplePod("build-1")
	if err != nil {
		return "", err
	}
	if d.node != nil {
		onRealNode(pod, 1000, "write", "/cache/cache.txt", d.content)
	}
	claimName := pod.Spec.Volumes[0].PersistentVolumeClaim.ClaimName
	// Each object is followed on a watch started before the step that
	// changes it: a state that lasts a millisecond is still seen, and each
	// step is timed when the API server told of it.
	claim, err := follow.Claim(ctx, client, ns, claimName, "")
	if err != nil {
		return "", err
	}
	defer claim.Stop()
	pod1, err := follow.Pod(ctx, client, ns, pod.Name, "")
	if err != nil {
		return "", err
	}
	defer pod1.Stop()
	if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return "", err
	}
	created := time.Now()
	tl.step("pod build-1 created, asking for claim %s by annotation", claimName)
	volume, bound, err := d.firstClaimBound(ctx, claim, claimName)
	if err != nil {
		return "", err
	}
	if d.node != nil {
		tl.stepAt(bound, "claim Bound")
		if err := podRan(ctx, tl, client, pod1, created, "wrote /cache/cache.txt: "+strconv.Quote(d.content)); err != nil {
			return "", err
		}
	} else {
		tl.stepAt(bound, "claim Bound, pod scheduled on the fake node")
		// No kubelet mounts anything on the fake node: the consumer's
		// write goes straight into the volume's directory.
		if err := os.WriteFile(filepath.Join(d.share, volume, "cache.txt"), []byte(d.content), 0o644); err != nil {
			return "", err
		}
		tl.step("build-1 writes cache.txt into the volume")
	}
	if err := d.firstVolumeBack(ctx, claim, claimName, volume); err != nil {
		return "", err
	}
	return volume, nil
}

// firstClaimBound follows build-1's claim from its creation by the
// podwatcher to Bound, through the new volume the provisioner makes for
// it. It returns the volume's name and when the claim was Bound.
func (d *demo) firstClaimBound(ctx context.Context, claim *follow.Follower[*corev1.PersistentVolumeClaim], claimName string) (string, time.Time, error) {
	ev, err := waitFor(ctx, claim, "to be created", follow.Exists)
	if err != nil {
		return "", time.Time{}, err
	}
	d.tl.stepAt(ev.At, "claim %s created by the podwatcher", claimName)
	if ev, err = waitFor(ctx, claim, "to name a volume", func(ev follow.Event[*corev1.PersistentVolumeClaim]) bool {
		return follow.Exists(ev) && ev.Object.Spec.VolumeName != ""
	}); err != nil {
		return "", time.Time{}, err
	}
	volume := ev.Object.Spec.VolumeName
	d.tl.stepAt(ev.At, "volume %s provisioned: a new directory %s", volume, filepath.Join(d.share, volume))
	if ev, err = waitFor(ctx, claim, "to be Bound", follow.ClaimPhase(corev1.ClaimBound)); err != nil {
		return "", time.Time{}, err
	}
	return volume, ev.At, nil
}

// firstVolumeBack deletes build-1 and follows its claim, deleted by the
// garbage collector, and its volume, Released then Available again.
func (d *demo) firstVolumeBack(ctx context.Context, claim *follow.Follower[*corev1.PersistentVolumeClaim], claimName, volume string) error {
	tl := d.tl
	pv, err := follow.Volume(ctx, d.client, volume, "")
	if err != nil {
		return err
	}
	defer pv.Stop()
	if err := d.client.CoreV1().Pods(d.ns).Delete(ctx, "build-1", metav1.DeleteOptions{}); err != nil {
		return err
	}
	tl.step("pod build-1 deleted")
	ev, err := waitFor(ctx, claim, "to be deleted", follow.Deleted)
	if err != nil {
		return err
	}
	tl.stepAt(ev.At, "claim %s deleted by the garbage collector (the pod owned it)", claimName)
	pvEv, err := waitFor(ctx, pv, "to be Released", follow.VolumePhase(corev1.VolumeReleased))
	if err != nil {
		return err
	}
	tl.stepAt(pvEv.At, "volume %s Released (reclaimPolicy Retain: data kept)", volume)
	if pvEv, err = waitFor(ctx, pv, "to be Available", follow.VolumePhase(corev1.VolumeAvailable)); err != nil {
		return err
	}
	tl.stepAt(pvEv.At, "volume %s Available again: the releaser returned it to the pool", volume)
	return nil
}

// secondPodReads runs build-2 (another user on the real node), whose claim
// must get volume from the pool, with build-1's data in it.
func (d *demo) secondPodReads(ctx context.Context, volume string) error {
	tl, client, ns := d.tl, d.client, d.ns
	pod2, err := examplePod("build-2")
	if err != nil {
		return err
	}
	if d.node != nil {
		onRealNode(pod2, 2000, "read", "/cache/cache.txt")
	}
	claim2Name := pod2.Spec.Volumes[0].PersistentVolumeClaim.ClaimName
	claim2, err := follow.Claim(ctx, client, ns, claim2Name, "")
	if err != nil {
		return err
	}
	defer claim2.Stop()
	pod2Events, err := follow.Pod(ctx, client, ns, pod2.Name, "")
	if err != nil {
		return err
	}
	defer pod2Events.Stop()
	if _, err := client.CoreV1().Pods(ns).Create(ctx, pod2, metav1.CreateOptions{}); err != nil {
		return err
	}
	created := time.Now()
	if d.node != nil {
		tl.step("pod build-2 created, running as another user (uid 2000), asking for claim %s", claim2Name)
	} else {
		tl.step("pod build-2 created, asking for claim %s", claim2Name)
	}
	ev, err := waitFor(ctx, claim2, "to be created", follow.Exists)
	if err != nil {
		return err
	}
	tl.stepAt(ev.At, "claim %s created; the scheduler retries pod build-2 now that its claim exists", claim2Name)
	if ev, err = waitFor(ctx, claim2, "to be Bound", follow.ClaimPhase(corev1.ClaimBound)); err != nil {
		return err
	}
	bound := ev.Object
	if bound.Spec.VolumeName != volume {
		return fmt.Errorf("claim %s got volume %s, not the pool's %s", claim2Name, bound.Spec.VolumeName, volume)
	}
	tl.stepAt(ev.At, "claim %s Bound to the same volume %s", claim2Name, volume)
	if d.node != nil {
		if err := podRan(ctx, tl, client, pod2Events, created, "read /cache/cache.txt: "+strconv.Quote(d.content)); err != nil {
			return err
		}
		fmt.Println("\nOne volume, and its data, served two containers one after the other; the second found what the first wrote. Nothing was wiped.")
		return nil
	}
	got, err := os.ReadFile(filepath.Join(d.share, bound.Spec.VolumeName, "cache.txt"))
	if err != nil {
		return fmt.Errorf("the data did not survive: %w", err)
	}
	if string(got) != d.content {
		return fmt.Errorf("the data changed: %q", got)
	}
	tl.step("build-2 finds cache.txt: %q", got)
	fmt.Println("\nOne volume, and its data, served two pods one after the other; nothing was wiped.")
	return nil
}

// startNode starts the real node, or says why there is none: the machine
// cannot run it, or RECLAIMABLE_E2E_NO_REAL_NODE asks to go without.
func startNode(ctx context.Context, c *cluster.Cluster) (*cluster.Node, string, error) {
	if why := os.Getenv(cluster.NoRealNodeEnv); why != "" {
		return nil, cluster.NoRealNodeEnv + "=" + strconv.Quote(why), nil
	}
	if err := cluster.NodeUnsupported(); err != nil {
		return nil, err.Error(), nil
	}
	n, err := c.StartNode(ctx, "real-node")
	return n, "", err
}

// onRealNode turns the example pod into one for the real node: the
// consumer image (nothing is pulled) run as uid with args.
func onRealNode(pod *corev1.Pod, uid int64, args ...string) {
	pod.Spec.SecurityContext.RunAsUser = &uid
	pod.Spec.NodeSelector = map[string]string{cluster.RealNodeLabel: "true"}
	pod.Spec.Tolerations = []corev1.Toleration{{Key: cluster.RealNodeTaint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	main := &pod.Spec.Containers[0]
	main.Image, main.ImagePullPolicy = cluster.ConsumerImage, corev1.PullNever
	main.Command, main.Args = nil, args
}

// podRan waits for the pod to finish, prints how long it took since it was
// created and its log line, which must report what it did.
func podRan(ctx context.Context, tl *timeline, client kubernetes.Interface, pod *follow.Follower[*corev1.Pod], created time.Time, did string) error {
	ev, err := waitFor(ctx, pod, "to finish", follow.PodFinished)
	if err != nil {
		return err
	}
	p := ev.Object
	b, err := client.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("reading the log of pod %s: %w", p.Name, err)
	}
	log := strings.TrimSpace(string(b))
	if p.Status.Phase != corev1.PodSucceeded {
		return fmt.Errorf("pod %s %s: %s", p.Name, p.Status.Phase, log)
	}
	if !strings.Contains(log, " "+did) {
		return fmt.Errorf("pod %s's log does not say it %s: %q", p.Name, did, log)
	}
	tl.stepAt(ev.At, "pod %s Succeeded on %s, %s after it was created; its log:", p.Name, p.Spec.NodeName, ev.At.Sub(created).Round(10*time.Millisecond))
	fmt.Printf("  %8s  %9s    %s\n", "", "", log)
	return nil
}

// exampleClass is manifests/examples/storageclass.yaml with its directories
// pointed at share.
func exampleClass(share string) (*storagev1.StorageClass, error) {
	var class storagev1.StorageClass
	if err := readExample("storageclass.yaml", &class); err != nil {
		return nil, err
	}
	class.Parameters["baseDir"] = share
	class.Parameters["hostPath"] = share
	return &class, nil
}

// examplePod is manifests/examples/pod.yaml under another name, asking for
// a claim of its own.
func examplePod(name string) (*corev1.Pod, error) {
	var pod corev1.Pod
	if err := readExample("pod.yaml", &pod); err != nil {
		return nil, err
	}
	pod.Name = name
	for i := range pod.Spec.Volumes {
		if pvc := pod.Spec.Volumes[i].PersistentVolumeClaim; pvc != nil && pod.Annotations[wellknown.EnabledKey(pod.Spec.Volumes[i].Name)] != "" {
			pvc.ClaimName = name + "-" + pod.Spec.Volumes[i].Name
		}
	}
	return &pod, nil
}

func readExample(file string, into any) error {
	b, err := os.ReadFile(filepath.Join(process.RepoRoot(), "manifests", "examples", file))
	if err != nil {
		return err
	}
	return yaml.UnmarshalStrict(b, into)
}

// newControllers prepares the three controllers in one process, as the
// small-cluster installation runs them. With keep the process outlives the
// demo, to be stopped by 'make cluster-down'.
func newControllers(binary, kubeconfig, share, logPath string, keep bool) (*process.Controller, error) {
	controllers, err := process.NewController(binary, logPath, "all", "--kubeconfig="+kubeconfig,
		"--directory-root="+share, "--leader-elect-resource-namespace=default")
	if err != nil {
		return nil, err
	}
	controllers.OwnProcessGroup = true
	controllers.OutliveParent = keep
	return controllers, nil
}

// startControllers starts reclaimable all and waits until it is ready.
func startControllers(ctx context.Context, controllers *process.Controller) error {
	if err := controllers.Start(); err != nil {
		return err
	}
	if _, err := controllers.WaitReady(ctx, time.Minute); err != nil {
		controllers.Signal(syscall.SIGKILL, 30*time.Second)
		return err
	}
	return nil
}

// recordPID adds the controllers to the cluster's PID file, so that
// 'make cluster-down' stops them first.
func recordPID(clusterDir string, pid int) error {
	f, err := os.OpenFile(filepath.Join(clusterDir, "pids"), os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = fmt.Fprintf(f, "reclaimable %d\n", pid)
	return err
}

// waitFor waits up to a minute for the first event from f that done accepts,
// and says what was awaited (what the object was to do) if none comes.
func waitFor[T runtime.Object](ctx context.Context, f *follow.Follower[T], what string, done func(follow.Event[T]) bool) (follow.Event[T], error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	ev, err := f.Until(ctx, done)
	if err != nil {
		return ev, fmt.Errorf("waiting for %s %s: %w", f, what, err)
	}
	return ev, nil
}
