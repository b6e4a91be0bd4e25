package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/reclaimable/reclaimable/apis/reclaimable/v1alpha1"
	"github.com/reclaimable/reclaimable/client/clientset/versioned"
	"github.com/reclaimable/reclaimable/e2e/cluster"
	"github.com/reclaimable/reclaimable/e2e/objects"
	poolrules "github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// The node-local run: pods on a real node with a claim of a `local` class,
// one at a time. A miss waits for a create pod to make the volume's
// directory on the node; a hit is served from the node's pool. The floor
// is the same pod with a claim of a class without provisioner, and a free
// local volume on the node: what the scheduler and the PV controller take
// for any pod with a node-local claim.

// NodeLocal is the node-local run's report.
type NodeLocal struct {
	Cycles int `json:"cycles"`
	// Miss: every claim a new volume (reclaim policy Delete, so the pool
	// stays empty): the create pod is on the critical path.
	Miss NodeLocalRow `json:"miss"`
	// Hit: the workload's claim name comes back, and its volume is free on
	// the node (the class's defaults).
	Hit NodeLocalRow `json:"hit"`
	// Floor: pod and claim created by the benchmark, no controller.
	Floor NodeLocalRow `json:"floor"`
	// KeepToPool and ScrubToPool are claim gone -> its volume free again,
	// for the hit class (onRelease Keep: the data stays) and for a class
	// whose VolumePool says onRelease Scrub (a scrub pod empties the
	// volume on the node first).
	KeepToPool  Summary `json:"keep_claim_gone_to_free"`
	ScrubToPool Summary `json:"scrub_claim_gone_to_free"`
	ScrubFailed int     `json:"scrub_failed,omitempty"`
}

// NodeLocalRow is one kind of cycle's figures.
type NodeLocalRow struct {
	// Bound is claim created -> Bound; Scheduled is pod created -> bound
	// to the node.
	Bound     Summary `json:"claim_created_to_bound"`
	Scheduled Summary `json:"pod_created_to_scheduled"`
	// Provisioned is node selected -> Bound, the create pod's part of a
	// miss: from the PV controller handing the claim, its node selected by
	// the scheduler, to the provisioner.
	Provisioned Summary `json:"node_selected_to_bound"`
	// Unexpected counts cycles served otherwise than the row says (a hit
	// that got a new volume, a miss that got an old one); they are left
	// out of the figures.
	Unexpected int `json:"unexpected,omitempty"`
	Failed     int `json:"failed,omitempty"`

	bound, scheduled, provisioned []time.Duration
}

const (
	nodeLocalNode      = "bench-node"
	nodeLocalNS        = "bench-node"
	nodeLocalLifecycle = "bench-lifecycle"
	nodeLocalHitClass  = "bench-local"
	nodeLocalMissClass = "bench-local-miss"
	nodeLocalFloor     = "bench-node-floor"
	nodeLocalScrub     = "bench-local-scrub"
	// nodeLocalClaim is the hit cycles' claim name, the same every time.
	nodeLocalClaim = "cache"
)

// nodeLocalFlags are the provisioner's flags for the run's lifecycle pods.
func nodeLocalFlags() []string {
	return []string{"--lifecycle-namespace=" + nodeLocalLifecycle, "--lifecycle-image=" + cluster.ReclaimableImage}
}

// nodeLocal starts the real node, runs cycles of each kind and stops the
// node again, so that the other phases run without it.
func (b *bench) nodeLocal(ctx context.Context, cycles int) (*NodeLocal, error) {
	node, err := b.cluster.StartNode(ctx, nodeLocalNode)
	if err != nil {
		return nil, fmt.Errorf("starting the real node: %w", err)
	}
	defer func() {
		if err := node.Stop(); err != nil {
			b.logf("stopping the real node: %v", err)
		}
	}()
	nodePath := filepath.Join(b.cfg.Dir, "node-volumes")
	if err := b.nodeLocalSetup(ctx, nodePath); err != nil {
		return nil, err
	}
	out := &NodeLocal{Cycles: cycles}
	var keep []time.Duration
	// One warm-up hit cycle makes the volume the hit cycles come back to.
	if _, _, err := b.nodeLocalCycle(ctx, nodeLocalHitClass, nodeLocalClaim, 0, false); err != nil {
		return nil, fmt.Errorf("warm-up: %w", err)
	}
	for i := range cycles {
		for _, kind := range []struct {
			row   *NodeLocalRow
			run   func() (cycleTimes, time.Duration, error)
			wantH bool
		}{
			{&out.Miss, func() (cycleTimes, time.Duration, error) {
				return b.nodeLocalCycle(ctx, nodeLocalMissClass, fmt.Sprintf("miss-%d", i), i, true)
			}, false},
			{&out.Hit, func() (cycleTimes, time.Duration, error) {
				return b.nodeLocalCycle(ctx, nodeLocalHitClass, nodeLocalClaim, i, false)
			}, true},
			{&out.Floor, func() (cycleTimes, time.Duration, error) { return b.nodeFloorCycle(ctx, i) }, true},
		} {
			t, scheduled, err := kind.run()
			switch {
			case err != nil:
				kind.row.Failed++
				b.logf("node-local cycle failed: %v", err)
			case t.claim.hit != kind.wantH:
				kind.row.Unexpected++
			default:
				if kind.row == &out.Hit {
					keep = append(keep, t.claim.available.Sub(t.claim.gone))
				}
				kind.row.bound = append(kind.row.bound, t.claim.bound.Sub(t.claim.created))
				kind.row.scheduled = append(kind.row.scheduled, scheduled)
				if h := t.claim.handedOff; !h.IsZero() {
					kind.row.provisioned = append(kind.row.provisioned, t.claim.bound.Sub(h))
				}
			}
		}
	}
	for _, row := range []*NodeLocalRow{&out.Miss, &out.Hit, &out.Floor} {
		row.Bound, row.Scheduled, row.Provisioned = Summarize(row.bound), Summarize(row.scheduled), Summarize(row.provisioned)
	}
	out.KeepToPool = Summarize(keep)
	var scrubbed []time.Duration
	for i := range cycles {
		d, err := b.nodeScrubCycle(ctx, i)
		if err != nil {
			out.ScrubFailed++
			b.logf("node-local scrub cycle failed: %v", err)
			continue
		}
		scrubbed = append(scrubbed, d)
	}
	out.ScrubToPool = Summarize(scrubbed)
	return out, nil
}

// nodeScrubCycle runs a pod through a claim of the scrub class and
// returns claim gone -> its volume emptied and free again.
func (b *bench) nodeScrubCycle(ctx context.Context, seq int) (time.Duration, error) {
	t, _, err := b.nodeLocalCycle(ctx, nodeLocalScrub, "scrubbed", seq, false)
	if err != nil {
		return 0, err
	}
	var freed time.Time
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, cycleTimeout, true, func(ctx context.Context) (bool, error) {
		pv, err := b.client.CoreV1().PersistentVolumes().Get(ctx, t.claim.volume, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		_, scrubbing := pv.Annotations[wellknown.Scrub]
		freed = time.Now()
		// Free again: no claim's, though under reuseScope namespace its
		// claimRef names a claim that never exists, for its namespace.
		free := pv.Spec.ClaimRef == nil || poolrules.Unissued(pv)
		return !scrubbing && free && pv.Status.Phase == corev1.VolumeAvailable, nil
	}); err != nil {
		return 0, fmt.Errorf("waiting for volume %s to be scrubbed: %w", t.claim.volume, err)
	}
	return freed.Sub(t.claim.gone), nil
}

// nodeLocalSetup creates the run's namespaces, its classes and the floor's
// volume on the node.
func (b *bench) nodeLocalSetup(ctx context.Context, nodePath string) error {
	if err := os.MkdirAll(filepath.Join(nodePath, "floor"), 0o777); err != nil {
		return err
	}
	for _, ns := range []string{nodeLocalNS, nodeLocalLifecycle} {
		if _, err := b.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	wffc := func(sc *storagev1.StorageClass) {
		sc.VolumeBindingMode = ptr.To(storagev1.VolumeBindingWaitForFirstConsumer)
	}
	local := func(sc *storagev1.StorageClass) {
		sc.Parameters = map[string]string{"backend": "local", "nodePath": nodePath}
	}
	for _, sc := range []*storagev1.StorageClass{
		objects.NewClass(nodeLocalHitClass, provisionerName, wffc, local),
		objects.NewClass(nodeLocalMissClass, provisionerName, wffc, local, func(sc *storagev1.StorageClass) {
			sc.ReclaimPolicy = ptr.To(corev1.PersistentVolumeReclaimDelete)
		}),
		objects.NewClass(nodeLocalFloor, "kubernetes.io/no-provisioner", wffc),
		objects.NewClass(nodeLocalScrub, provisionerName, wffc, local),
	} {
		if _, err := b.client.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	pools, err := versioned.NewForConfig(b.cluster.Config)
	if err != nil {
		return err
	}
	if _, err := pools.ReclaimableV1alpha1().VolumePools().Create(ctx, &v1alpha1.VolumePool{ObjectMeta: metav1.ObjectMeta{Name: nodeLocalScrub},
		Spec: v1alpha1.VolumePoolSpec{StorageClassName: nodeLocalScrub, OnRelease: wellknown.OnReleaseScrub}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	pv := objects.NewVolume(nodeLocalFloor, nodeLocalFloor, "1Gi", filepath.Join(nodePath, "floor"), func(pv *corev1.PersistentVolume) {
		pv.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{nodeLocalNode}}},
		}}}}
	})
	if _, err := b.client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		return err
	}
	return b.rec.wait(ctx, func() bool {
		v := b.rec.volumes[nodeLocalFloor]
		return v != nil && v.phase == corev1.VolumeAvailable
	})
}

// nodePod is a pod for the real node through claim, which exits at once.
func nodePod(name, claim string, annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: nodeLocalNS, Annotations: annotations},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			NodeSelector:  map[string]string{cluster.RealNodeLabel: "true"},
			Tolerations:   []corev1.Toleration{{Key: cluster.RealNodeTaint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			Containers: []corev1.Container{{
				Name: "build", Image: cluster.ConsumerImage, ImagePullPolicy: corev1.PullNever, Args: []string{"sleep", "0s"},
				VolumeMounts: []corev1.VolumeMount{{Name: "cache", MountPath: "/cache"}},
			}},
			Volumes: []corev1.Volume{objects.ClaimVolume("cache", claim)},
		},
	}
}

// nodeLocalCycle runs an annotated pod through claim of class until it
// ends, deletes it, and waits until its claim is gone and the volume is
// back in the pool, or with deleted, gone from the node. It returns the
// claim's record and pod created -> scheduled.
func (b *bench) nodeLocalCycle(ctx context.Context, class, claim string, seq int, deleted bool) (cycleTimes, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, cycleTimeout)
	defer cancel()
	pod := nodePod(fmt.Sprintf("%s-%d", class, seq), claim, map[string]string{
		wellknown.EnabledKey("cache"):  "true",
		wellknown.TemplateKey("cache"): claimTemplate(class, "1Gi"),
	})
	var t cycleTimes
	t.start = time.Now()
	uid, created, err := b.runNodePod(ctx, pod)
	if err != nil {
		return t, 0, err
	}
	rec, scheduled, err := b.nodePodSeen(ctx, claim, t.start, uid, created)
	if err != nil {
		return t, 0, err
	}
	t.claim = rec
	if err := b.client.CoreV1().Pods(nodeLocalNS).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		return t, 0, err
	}
	if err := b.rec.wait(ctx, func() bool {
		c := b.rec.claims[rec.uid]
		return !c.gone.IsZero() && (deleted || !c.available.IsZero())
	}); err != nil {
		return t, 0, fmt.Errorf("waiting for claim %s to go and its volume to be back: %w", claim, err)
	}
	t.claim = b.rec.snapshot(rec.uid) // with the claim's end

	if deleted {
		if err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			_, err := b.client.CoreV1().PersistentVolumes().Get(ctx, rec.volume, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		}); err != nil {
			return t, 0, fmt.Errorf("waiting for volume %s to be deleted: %w", rec.volume, err)
		}
	}
	return t, scheduled, nil
}

// nodeFloorCycle is nodeLocalCycle without controllers: the benchmark
// creates the claim right after the pod and deletes it after the pod, and
// returns the volume to the pool by clearing its claimRef.
func (b *bench) nodeFloorCycle(ctx context.Context, seq int) (cycleTimes, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, cycleTimeout)
	defer cancel()
	name := fmt.Sprintf("floor-%d", seq)
	var t cycleTimes
	t.start = time.Now()
	pod := nodePod(name, name, nil)
	claimCreated := make(chan error, 1)
	uid, created, err := b.runNodePod(ctx, pod, func() {
		_, err := b.client.CoreV1().PersistentVolumeClaims(nodeLocalNS).Create(ctx, objects.NewClaim(nodeLocalNS, name, nodeLocalFloor, "1Gi"), metav1.CreateOptions{})
		claimCreated <- err
	})
	if err != nil {
		return t, 0, err
	}
	if err := <-claimCreated; err != nil {
		return t, 0, err
	}
	rec, scheduled, err := b.nodePodSeen(ctx, name, t.start, uid, created)
	if err != nil {
		return t, 0, err
	}
	t.claim = rec
	if err := b.client.CoreV1().Pods(nodeLocalNS).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return t, 0, err
	}
	if err := b.client.CoreV1().PersistentVolumeClaims(nodeLocalNS).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return t, 0, err
	}
	if err := b.rec.wait(ctx, func() bool { return !b.rec.claims[rec.uid].released.IsZero() }); err != nil {
		return t, 0, fmt.Errorf("waiting for volume %s to be Released: %w", rec.volume, err)
	}
	if _, err := b.client.CoreV1().PersistentVolumes().Patch(ctx, rec.volume, types.MergePatchType, []byte(`{"spec":{"claimRef":null}}`), metav1.PatchOptions{}); err != nil {
		return t, 0, err
	}
	if err := b.rec.wait(ctx, func() bool { return !b.rec.claims[rec.uid].available.IsZero() }); err != nil {
		return t, 0, fmt.Errorf("waiting for volume %s to be Available: %w", rec.volume, err)
	}
	return t, scheduled, nil
}

// nodePodSeen waits until the recorder has seen claim, created after start,
// bound and the pod uid scheduled, and returns the claim's record and pod
// created -> scheduled.
func (b *bench) nodePodSeen(ctx context.Context, claim string, start time.Time, uid types.UID, created time.Time) (claimRecord, time.Duration, error) {
	var (
		rec       claimRecord
		scheduled time.Time
	)
	err := b.rec.wait(ctx, func() bool {
		c := b.rec.latestLocked(nodeLocalNS, claim)
		at, ok := b.rec.pods[uid]
		if c == nil || c.bound.IsZero() || c.created.Before(start) || !ok {
			return false
		}
		rec, scheduled = *c, at
		return true
	})
	if err != nil {
		return rec, 0, fmt.Errorf("waiting for claim %s bound and pod scheduled: %w", claim, err)
	}
	return rec, scheduled.Sub(created), nil
}

// runNodePod creates pod, runs then (the floor's claim) and waits until the
// pod Succeeded. It returns the pod's UID and when its create returned.
func (b *bench) runNodePod(ctx context.Context, pod *corev1.Pod, then ...func()) (types.UID, time.Time, error) {
	created, err := b.client.CoreV1().Pods(nodeLocalNS).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return "", time.Time{}, fmt.Errorf("creating pod %s: %w", pod.Name, err)
	}
	at := time.Now()
	for _, f := range then {
		f()
	}
	var phase corev1.PodPhase
	err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		p, err := b.client.CoreV1().Pods(nodeLocalNS).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		phase = p.Status.Phase
		return phase == corev1.PodSucceeded || phase == corev1.PodFailed, nil
	})
	if err == nil && phase == corev1.PodFailed {
		err = fmt.Errorf("pod %s failed", pod.Name)
	}
	if err != nil {
		return "", time.Time{}, fmt.Errorf("running pod %s (phase %q): %w", pod.Name, phase, err)
	}
	return created.UID, at, nil
}
