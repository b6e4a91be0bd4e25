package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/reclaimable/reclaimable/internal/controller"
)

// Lifecycle pods make and remove volume directories where the provisioner
// cannot: on a node's disk, which it does not reach (the local backend),
// and in a share whose files a consumer wrote as its own user, in
// directories of its own mode, which the provisioner's user may not remove
// (the directory backend). A pod runs the reclaimable image's "lifecycle"
// command as root, with the directory that holds the volume's directory
// mounted at Mount; what it works on comes from its environment,
// never from a claim unchecked. It runs in a namespace of its own, whose
// Pod Security level admits it; the provisioner's pod stays "restricted".

// The lifecycle operations.
const (
	Create = "create"
	Delete = "delete"
	// Scrub empties a volume, mounted through a claim of its own
	// at Mount, whatever its backend.
	Scrub = "scrub"
)

// Mount is where a lifecycle pod sees the directory that holds
// the volume's directory (a local class's nodePath, a directory class's
// share), the pod's volume lifecycleVolume.
const (
	Mount           = "/pool"
	lifecycleVolume = "pool"
)

// The environment of a lifecycle pod.
const (
	EnvVolumeName = "RECLAIMABLE_VOLUME_NAME" // the volume's name, its directory's name
	EnvVolumePath = "RECLAIMABLE_VOLUME_PATH" // the directory's path on the node
	EnvVolumeMode = "RECLAIMABLE_VOLUME_MODE" // octal, as the class's directoryMode
	EnvVolumeSize = "RECLAIMABLE_VOLUME_SIZE" // the claim's request, a quantity
)

// Run carries out op on the volume directory that env names, in
// base (the pod's mount of the node's directory of volumes). Both are
// idempotent: create reuses a directory an earlier pod made, delete of a
// directory that is gone succeeds.
func Run(op, base string, env func(string) string) error {
	name := env(EnvVolumeName)
	dirs := Dirs{Root: base}
	switch op {
	case Create:
		mode, err := Mode(map[string]string{ModeParameter: env(EnvVolumeMode)})
		if err != nil {
			return fmt.Errorf("%s: %w", EnvVolumeMode, err)
		}
		return dirs.Create(base, name, mode)
	case Delete:
		return dirs.Remove(base, name)
	case Scrub:
		return scrub(base)
	}
	return fmt.Errorf("unknown lifecycle operation %q: %q, %q or %q", op, Create, Delete, Scrub)
}

// scrub empties base, the mount of a volume: every entry, hidden ones,
// read-only subtrees and other users' files included (the pod runs as root
// with the capabilities that override file modes and owners). The mount
// point itself stays. It never follows a symbolic link out of base: each
// entry is removed as what it is.
func scrub(base string) error {
	entries, err := os.ReadDir(base)
	if err != nil {
		return fmt.Errorf("reading the volume at %s: %w", base, err)
	}
	var errs []error
	for _, e := range entries {
		if err := os.RemoveAll(path.Join(base, e.Name())); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("emptying the volume: %w", err)
	}
	if left, err := os.ReadDir(base); err != nil || len(left) > 0 {
		return fmt.Errorf("emptying the volume: %d entries left (%v)", len(left), err)
	}
	return nil
}

// TemplatesParameter names a ConfigMap in the lifecycle namespace whose
// keys "create", "delete" and "scrub" replace a class's built-in lifecycle
// pods.
const TemplatesParameter = "lifecycleTemplates"

// Templates reads a class's lifecycleTemplates parameter: the ConfigMap
// whose keys replace the built-in lifecycle pods, "" for none.
func Templates(in map[string]string) (string, error) {
	t, ok := in[TemplatesParameter]
	if !ok {
		return "", nil
	}
	if msgs := validation.IsDNS1123Subdomain(t); len(msgs) > 0 {
		return t, fmt.Errorf("parameter %q must name a ConfigMap, not %q: %s", TemplatesParameter, t, strings.Join(msgs, "; "))
	}
	return t, nil
}

// Pods runs lifecycle pods in a namespace of their own.
type Pods struct {
	client    kubernetes.Interface
	namespace string
	// image, if set, is the image of the built-in pods, whatever template
	// says.
	image string
	// template names the PodTemplate in namespace whose container
	// "lifecycle" gives the built-in pods their image and pull policy, and
	// whose pull secrets they get: the installation makes it with the
	// controllers' image, so that an image override (kustomize images:,
	// the chart's image.*) reaches the pods too, and a pull secret of the
	// lifecycle namespace can be named there. "" for none.
	template string
	// timeout bounds how long one pod may take, from creation to its end.
	timeout time.Duration
	// events is the cache of lifecycle pods that waits read.
	events *Events
	// durations, if not nil, times each pod by operation and result.
	durations *prometheus.HistogramVec
}

// NodeGoneError says the node that holds a volume's directory no longer
// exists: no pod can reach the directory.
type NodeGoneError struct{ Node, Dir, Msg string }

func (e *NodeGoneError) Error() string { return e.Msg }

// NewDurations is the histogram of lifecycle pods' durations, under the
// subsystem of the controller that runs them.
func NewDurations(subsystem string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: controller.Namespace, Subsystem: subsystem, Name: "lifecycle_pod_duration_seconds",
		Help:    "Lifecycle pods of the local backend, from creation to their end, by operation (create, delete) and result (succeeded, failed, deadline).",
		Buckets: []float64{0.5, 1, 2, 3, 5, 10, 20, 30, 60, 120, 300}},
		[]string{"op", "result"})
}

// NewPods runs lifecycle pods of image in namespace through client, each
// for timeout at most; events is the cache their waits read, durations
// (if not nil) times them by operation and result.
func NewPods(client kubernetes.Interface, namespace, image string, timeout time.Duration, events *Events, durations *prometheus.HistogramVec) Pods {
	return Pods{client: client, namespace: namespace, image: image, timeout: timeout, events: events, durations: durations}
}

// WithTemplate is l with the built-in pods taking their image and pull
// secrets from the PodTemplate name (see Pods.template).
func (l Pods) WithTemplate(name string) Pods {
	l.template = name
	return l
}

// Runs says whether pods can run: an image or a PodTemplate to take it
// from was given.
func (l Pods) Runs() bool { return l.image != "" || l.template != "" }

// run runs job's pod to its end and removes it, whatever the end: success,
// failure (the error carries the pod's termination message) or the
// deadline.
func (l Pods) Run(ctx context.Context, j Job) error {
	logger := klog.FromContext(ctx).WithValues("op", j.Op, "node", j.Node, "pv", j.Volume)
	pods := l.client.CoreV1().Pods(l.namespace)
	if err := l.afterCreate(ctx, j); err != nil {
		return err
	}
	want, err := l.podFor(ctx, j)
	if err != nil {
		return err
	}
	pod, err := pods.Create(ctx, want, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		// An earlier attempt's pod: its end is this attempt's end.
		pod, err = pods.Get(ctx, j.podName(), metav1.GetOptions{})
	}
	if err != nil {
		return fmt.Errorf("starting the %s pod %s/%s on %s: %w", j.Op, l.namespace, j.podName(), j.where(), err)
	}
	defer l.remove(ctx, pod)

	// The deadline counts from the pod's creation, also for a pod an
	// earlier attempt started.
	started := pod.CreationTimestamp.Time
	if started.IsZero() {
		started = time.Now()
	}
	deadline := started.Add(l.timeout)
	waitCtx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	last, err := l.wait(waitCtx, pod)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, errGone) {
			l.observe(j.Op, "failed", started)
			return fmt.Errorf("the %s pod %s/%s on %s was deleted before it finished", j.Op, l.namespace, pod.Name, j.where())
		}
		l.observe(j.Op, "deadline", started)
		return fmt.Errorf("the %s pod %s/%s on %s did not finish within %s (%s)", j.Op, l.namespace, pod.Name, j.where(), l.timeout, podState(last))
	}
	if last.Status.Phase == corev1.PodFailed {
		l.observe(j.Op, "failed", started)
		return fmt.Errorf("the %s pod %s/%s on %s failed: %s", j.Op, l.namespace, pod.Name, j.where(), terminationMessage(last))
	}
	l.observe(j.Op, "succeeded", started)
	logger.V(2).Info("Lifecycle pod succeeded", "pod", klog.KObj(pod))
	return nil
}

// afterCreate has any other work on j's volume wait, up to the timeout,
// while the pod that creates its storage exists: one that timed out is
// deleted, but stays until its kubelet confirms that its containers stopped
// (behind an unreachable kubelet, until its node is removed). A delete run
// meanwhile could end first, and the create would then leave a directory
// with no volume.
func (l Pods) afterCreate(ctx context.Context, j Job) error {
	if j.Op == Create {
		return nil
	}
	name := Job{Op: Create, Volume: j.Volume}.podName()
	waitCtx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	var last *corev1.Pod
	for {
		changed := l.events.next()
		// The API server, not the cache, says that the pod is gone.
		p, err := l.client.CoreV1().Pods(l.namespace).Get(waitCtx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case err == nil:
			last = p
		case waitCtx.Err() == nil:
			return fmt.Errorf("looking for the create pod %s/%s of volume %s before its %s: %w", l.namespace, name, j.Volume, j.Op, err)
		}
		select {
		case <-waitCtx.Done():
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("the create pod %s/%s of volume %s still exists (%s): the %s waits until it is gone, lest the two overlap; if its node is down for good, delete the Node or force-delete the pod",
				l.namespace, name, j.Volume, podState(last), j.Op)
		case <-changed:
		}
	}
}

// wait returns the pod once it has ended, errGone once it is deleted, or
// ctx's error with the pod as last seen. It reads the pod from the cache of
// lifecycle pods and wakes on its changes; only while the cache does not
// hold the pod (just created, or deleted) does it ask the API server,
// which alone can say that the pod is gone.
func (l Pods) wait(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	var last *corev1.Pod
	for {
		changed := l.events.next()
		p, err := l.events.pods.Get(pod.Name)
		if err != nil || p.UID != pod.UID {
			p, err = l.client.CoreV1().Pods(l.namespace).Get(ctx, pod.Name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err) || err == nil && p.UID != pod.UID:
				return last, errGone
			case err != nil && ctx.Err() != nil:
				return last, ctx.Err()
			case err != nil:
				// The API server may answer at the pod's next change.
				p = nil
			}
		}
		if p != nil {
			last = p
			if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
				return p, nil
			}
		}
		select {
		case <-ctx.Done():
			return last, ctx.Err()
		case <-changed:
		}
	}
}

func (l Pods) observe(op, result string, started time.Time) {
	if l.durations != nil {
		l.durations.WithLabelValues(op, result).Observe(time.Since(started).Seconds())
	}
}

// remove deletes the pod, precondition on its UID so that a pod of the same
// name started since is left alone; it outlives ctx's cancellation. The
// deletion is not forced: a pod that ended goes at once, and one that did
// not (its deadline) stays until its kubelet has stopped its containers,
// which may still be at work on the volume (afterCreate).
func (l Pods) remove(ctx context.Context, pod *corev1.Pod) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	err := l.client.CoreV1().Pods(l.namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &pod.UID},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		klog.FromContext(ctx).Error(err, "Removing a lifecycle pod", "pod", klog.KObj(pod))
	}
}

// errGone: the pod waited for was deleted, by someone else.
var errGone = errors.New("lifecycle pod gone")

// podState says where a pod that did not finish stands, for an event.
func podState(p *corev1.Pod) string {
	if p == nil {
		return "never seen"
	}
	if d := p.DeletionTimestamp; d != nil {
		// Deleted, and its kubelet has not confirmed that its containers
		// stopped: a node that does not answer.
		return fmt.Sprintf("%s, terminating since %s on node %q", p.Status.Phase, d.UTC().Format(time.RFC3339), p.Spec.NodeName)
	}
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			return fmt.Sprintf("%s, container waiting: %s %s", p.Status.Phase, w.Reason, w.Message)
		}
	}
	return string(p.Status.Phase)
}

// terminationMessage is what the failed pod's container said, or its exit.
func terminationMessage(p *corev1.Pod) string {
	for _, cs := range p.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil {
			if t.Message != "" {
				return t.Message
			}
			return fmt.Sprintf("exit code %d (%s)", t.ExitCode, t.Reason)
		}
	}
	return "no container status"
}

// octalMode writes mode as the directoryMode parameter takes it.
func octalMode(m fs.FileMode) string {
	n := uint64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		n |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		n |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		n |= 0o1000
	}
	return "0" + strconv.FormatUint(n, 8)
}
