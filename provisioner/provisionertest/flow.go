package provisionertest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/utils/clock"

	"github.com/reclaimable/reclaimable/internal/controller"
	"github.com/reclaimable/reclaimable/provisioner/classpool"
	"github.com/reclaimable/reclaimable/provisioner/memory"
)

// Flow plays the provisioner that the evictor, the measurer and the
// scrubber run in (evict.Provisioner, scrub.Provisioner), on a Cluster's
// API server: it writes volumes and tells a claim gone as their contract
// says, and removes storage and measures members as the test has it.
type Flow struct {
	Client kubernetes.Interface
	// Remove is what removing the storage of an evicted member gives; nil
	// for success.
	Remove func(*corev1.PersistentVolume) error
	// Walk measures a member; nil when no member's backend measures.
	Walk func(*corev1.PersistentVolume, time.Time) (int64, bool, error)

	mu      sync.Mutex
	removed []string
}

// UpdateVolume writes pv guarded by the resourceVersion it carries: nil,
// nil once the volume is gone, and a controller.Wait when it changed
// meanwhile.
func (f *Flow) UpdateVolume(ctx context.Context, pv *corev1.PersistentVolume, what string) (*corev1.PersistentVolume, error) {
	res, err := f.Client.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{})
	switch {
	case apierrors.IsConflict(err):
		return nil, controller.Wait("volume %s changed since the cache showed it", pv.Name)
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return res, nil
}

// ClaimGone reports whether the claim pv's claimRef names is gone from the
// API server, or was replaced by another of its name.
func (f *Flow) ClaimGone(ctx context.Context, pv *corev1.PersistentVolume) (bool, error) {
	ref := pv.Spec.ClaimRef
	if ref == nil || ref.UID == "" {
		return true, nil
	}
	claim, err := f.Client.CoreV1().PersistentVolumeClaims(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, err
	}
	return claim.UID != ref.UID, nil
}

// RemoveStorage records that the storage of pv was asked to go, and gives
// what Remove says.
func (f *Flow) RemoveStorage(_ context.Context, pv *corev1.PersistentVolume) error {
	f.mu.Lock()
	f.removed = append(f.removed, pv.Name)
	f.mu.Unlock()
	if f.Remove != nil {
		return f.Remove(pv)
	}
	return nil
}

// Removed names the volumes whose storage was asked to go, in order.
func (f *Flow) Removed() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.removed)
}

// Measures reports whether pv's backend measures its members: whether the
// test gave a Walk.
func (f *Flow) Measures(*corev1.PersistentVolume) bool { return f.Walk != nil }

// Measure walks pv with Walk.
func (f *Flow) Measure(pv *corev1.PersistentVolume, deadline time.Time) (int64, bool, error) {
	return f.Walk(pv, deadline)
}

// The class pools of the tests make their backing claims in
// BackingNamespace, labelled for installation ControllerID.
const (
	BackingNamespace = "reclaimable-system"
	ControllerID     = "id"
)

// AheadBound is how long a member made ahead may wait for its storage in
// the tests: three times their lifecycle timeout of a minute, as the
// provisioner has it.
const AheadBound = 3 * time.Minute

// ClassFlow plays the provisioner the class pools grow for
// (classpool.Provisioner). It holds the places of the volumes on their way
// in Pending, the record the class pools share with it, and counts against
// a maximum those places and what the pools have in flight: a test that
// counts the volumes the provisioner made as well is the provisioner's. It
// records the claims requeued and the volumes issued.
type ClassFlow struct {
	Pending *memory.Pending
	Pools   *classpool.Pools

	mu       sync.Mutex
	requeued []string
	issued   []string
}

// Reserve holds a place for name among the volumes of class.
func (f *ClassFlow) Reserve(class, name string, maxVolumes int) bool {
	_, _, ok := f.Pending.Reserve(class, name, "", maxVolumes, 0, func() map[string]string { return f.Pools.Pending(class) })
	return ok
}

// Requeue records claim, as "<namespace>/<name>", as handed back to the
// library's queue.
func (f *ClassFlow) Requeue(claim *corev1.PersistentVolumeClaim) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requeued = append(f.requeued, claim.Namespace+"/"+claim.Name)
}

// Issued records pv as issued.
func (f *ClassFlow) Issued(_ *corev1.PersistentVolumeClaim, _, pv string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.issued = append(f.issued, pv)
}

// Requeued lists the claims handed back to the library's queue, in order.
func (f *ClassFlow) Requeued() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.requeued)
}

// IssuedVolumes lists the volumes issued, in order.
func (f *ClassFlow) IssuedVolumes() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.issued)
}

// ClassPools builds class pools on c as the provisioner builds its own:
// named Provisioner, of installation ControllerID, their backing claims in
// BackingNamespace, telling time on clk. The ClassFlow plays the
// provisioner they grow for.
func (c *Cluster) ClassPools(clk clock.PassiveClock) (*classpool.Pools, *ClassFlow) {
	flow := &ClassFlow{Pending: memory.NewPending(clk)}
	flow.Pools = classpool.New(classpool.Config{
		Name: Provisioner, ControllerID: ControllerID, Namespace: BackingNamespace, Client: c.Client, Volumes: c.Volumes,
		BackingClaims: corelisters.NewPersistentVolumeClaimLister(c.BackingClaims), Claims: corelisters.NewPersistentVolumeClaimLister(c.Claims),
		Pools: c.Pools, Pending: flow.Pending, Recorder: c.Recorder, Clock: clk, AheadBound: AheadBound,
		Created:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "created"}, []string{"class"}),
		Evictions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "evictions"}, []string{"class", "cause"}),
	}, flow)
	return flow.Pools, flow
}
