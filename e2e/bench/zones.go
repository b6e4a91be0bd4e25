package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/reclaimable/reclaimable/e2e/cluster"
	"github.com/reclaimable/reclaimable/e2e/objects"
)

// The zoned part of the class-pool run: the tests' driver with zonal
// volumes, behind the real external-provisioner, and two fake nodes in two
// zones with the CSINode the kubelet would write for it. Claims of a
// CSI class and of a pool class in front of it, both binding on first
// consumer, each used by a pod pinned to a node of one zone or the other
// in turn: claim created -> Bound, where the scheduler selects the node
// first and the volume must be of that node's zone.

// ZonedClassPool is the zoned part's report: the pool's hits are claims a
// free member of their zone serves, its misses new volumes in their zone.
type ZonedClassPool struct {
	Zones []string `json:"zones"`
	ClassRuns
	// OutOfZone counts the claims bound to a volume of another zone than
	// their pod's node: a pod that would never start.
	OutOfZone int `json:"out_of_zone"`
}

// The zoned part's classes, driver and zones.
const (
	zonalCSIClass  = "bench-csi-zonal"
	zonalPoolClass = "bench-classpool-zonal"
	zonalDriver    = "bench-zonal.csi.reclaimable.io"
)

var benchZones = []string{cluster.RealNodeZone, "zone-b"}

// zonedClassPool runs cycles claims at concurrency on the zonal CSI class,
// then on the pool (classRuns), each pod on the node of the next zone in
// turn.
func (b *bench) zonedClassPool(ctx context.Context, cycles, concurrency int) (*ZonedClassPool, error) {
	r := &ZonedClassPool{Zones: benchZones}
	csi, err := b.startCSI(ctx, zonalDriver, true)
	if err != nil {
		return nil, err
	}
	defer b.stopCSI(csi)
	nodes, err := b.zoneNodes(ctx)
	if err != nil {
		return nil, err
	}
	if err := b.csiClasses(ctx, zonalCSIClass, zonalPoolClass, zonalDriver, storagev1.VolumeBindingWaitForFirstConsumer); err != nil {
		return nil, err
	}
	var outOfZone atomic.Int64
	r.ClassRuns = b.classRuns(ctx, csi, cycles, concurrency, zonalCSIClass, zonalPoolClass, func(ctx context.Context, seq int, name, class, size string, pool bool) (cycleTimes, error) {
		zone := benchZones[seq%len(benchZones)]
		t, wrong, err := b.zonedCycle(ctx, name, class, size, nodes[zone], zone, pool)
		if wrong {
			outOfZone.Add(1)
		}
		return t, err
	})
	r.OutOfZone = int(outOfZone.Load())
	if r.Failed > 0 || r.OutOfZone > 0 {
		return r, fmt.Errorf("%d cycles failed, %d claims bound out of their pod's zone", r.Failed, r.OutOfZone)
	}
	return r, nil
}

// zoneNodes makes a fake node in each zone, with the driver's CSINode,
// and returns their names by zone.
func (b *bench) zoneNodes(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	for _, zone := range benchZones {
		name := "bench-" + zone
		if err := b.cluster.CreateZoneNode(ctx, name, zone, zonalDriver); err != nil {
			return nil, err
		}
		out[zone] = name
	}
	return out, nil
}

// zonedCycle creates claim name of class and a pod that uses it on node,
// in zone, waits for the claim to be bound, then deletes both; for a pool
// claim, it waits until the volume is back in the pool. It reports
// whether the volume is of another zone.
func (b *bench) zonedCycle(ctx context.Context, name, class, size, node, zone string, pool bool) (cycleTimes, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, cycleTimeout)
	defer cancel()
	var t cycleTimes
	t.start = time.Now()
	created, err := b.client.CoreV1().PersistentVolumeClaims(b.ns).Create(ctx, objects.NewClaim(b.ns, name, class, size), metav1.CreateOptions{})
	if err != nil {
		return t, false, fmt.Errorf("creating claim %s: %w", name, err)
	}
	uid := created.UID
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: b.ns},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{corev1.LabelHostname: node},
			Containers:   []corev1.Container{{Name: "build", Image: "build", VolumeMounts: []corev1.VolumeMount{{Name: "cache", MountPath: "/cache"}}}},
			Volumes:      []corev1.Volume{objects.ClaimVolume("cache", name)},
		},
	}
	if _, err := b.client.CoreV1().Pods(b.ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return t, false, fmt.Errorf("creating pod %s: %w", name, err)
	}
	if err := b.rec.wait(ctx, func() bool { c := b.rec.claims[uid]; return c != nil && !c.bound.IsZero() }); err != nil {
		return t, false, fmt.Errorf("waiting for claim %s to be bound: %w", name, err)
	}
	t.claim = b.rec.snapshot(uid)
	pv, err := b.client.CoreV1().PersistentVolumes().Get(ctx, t.claim.volume, metav1.GetOptions{})
	if err != nil {
		return t, false, err
	}
	wrong := !inZone(pv, zone)
	if err := b.client.CoreV1().Pods(b.ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		return t, wrong, fmt.Errorf("deleting pod %s: %w", name, err)
	}
	if err := b.client.CoreV1().PersistentVolumeClaims(b.ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return t, wrong, fmt.Errorf("deleting claim %s: %w", name, err)
	}
	if pool {
		if err := b.rec.wait(ctx, func() bool { c := b.rec.claims[uid]; return !c.gone.IsZero() && !c.available.IsZero() }); err != nil {
			return t, wrong, fmt.Errorf("waiting for the volume of claim %s to be back in the pool: %w", name, err)
		}
	}
	return t, wrong, nil
}

// inZone reports whether pv's node affinity admits zone, and no other.
func inZone(pv *corev1.PersistentVolume, zone string) bool {
	a := pv.Spec.NodeAffinity
	if a == nil || a.Required == nil || len(a.Required.NodeSelectorTerms) != 1 {
		return false
	}
	for _, e := range a.Required.NodeSelectorTerms[0].MatchExpressions {
		if e.Key == corev1.LabelTopologyZone {
			return e.Operator == corev1.NodeSelectorOpIn && len(e.Values) == 1 && e.Values[0] == zone
		}
	}
	return false
}
