package provisioner

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	lib "sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/reclaimable/reclaimable/internal/controller"
	"github.com/reclaimable/reclaimable/internal/wellknown"
	"github.com/reclaimable/reclaimable/provisioner/backend"
	"github.com/reclaimable/reclaimable/provisioner/evict"
	"github.com/reclaimable/reclaimable/provisioner/lifecycle"
	"github.com/reclaimable/reclaimable/provisioner/provisionertest"
)

// The builders the provisioner's tests share with those of the packages
// beside it (provisionertest), by their short names here.
const testProvisioner = provisionertest.Provisioner

var (
	volume      = provisionertest.Volume
	released    = provisionertest.Released
	returned    = provisionertest.Returned
	keyed       = provisionertest.Keyed
	reservedFor = provisionertest.ReservedFor
	bound       = provisionertest.Bound
	claimFor    = provisionertest.ClaimFor
	t0          = provisionertest.T0
	hasEvent    = provisionertest.HasEvent
	wantIssued  = provisionertest.WantIssued
)

// heldFor makes pv a member held for namespace ns: last issued there, and
// Available again with the releaser's claimRef.
func heldFor(ns string) func(*corev1.PersistentVolume) {
	return func(pv *corev1.PersistentVolume) {
		pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: ns, Name: "old"}
		pv.Annotations[wellknown.HeldForNamespace] = ns
		pv.Status.Phase = corev1.VolumeAvailable
	}
}

// fixture is a provisioner on a provisionertest.Cluster: the fake API
// server and the caches it reads, which the test feeds.
type fixture struct {
	cluster  *provisionertest.Cluster
	t        *testing.T
	p        *provisioner
	client   *fake.Clientset
	volumes  *volumeStore // what the informer shows; tests decide when it catches up
	claims   cache.Indexer
	backing  cache.Indexer // the backing claims the cache shows
	recorder *record.FakeRecorder
	reg      *prometheus.Registry
	root     string

	mu       sync.Mutex
	requeued []string
}

// newFixture serves pvs and claims from both the cache and the API server.
// The fake API server enforces resourceVersion preconditions on PV updates.
func newFixture(t *testing.T, pvs []*corev1.PersistentVolume, claims ...*corev1.PersistentVolumeClaim) *fixture {
	t.Helper()
	store := newVolumeStore()
	c := provisionertest.NewClusterOn(t, store, pvs, claims...)
	f := &fixture{
		cluster: c, t: t, client: c.Client, volumes: store, claims: c.Claims, backing: c.BackingClaims, recorder: c.Recorder,
		root: t.TempDir(),
	}
	f.reg = prometheus.NewRegistry()
	m, err := newMetrics(f.reg)
	if err != nil {
		t.Fatal(err)
	}
	f.p = newProvisioner(testProvisioner, f.client, f.volumes, corelisters.NewPersistentVolumeClaimLister(f.claims), f.recorder, m, Config{DirectoryRoot: f.root, LifecycleNamespace: "lifecycle", LifecycleImage: "reclaimable:test", LifecycleTimeout: time.Minute})
	f.p.pools = c.Pools
	f.p.issued = f.volumes.issued
	f.volumes.then = f.p.observeTaken
	if err := f.p.lifecycle.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	f.p.requeue = func(c *corev1.PersistentVolumeClaim) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.requeued = append(f.requeued, c.Name)
	}
	f.useBacking()
	return f
}

// volumeStore is the volume informer's cache with what the provisioner's
// handlers keep beside it, fed as the informer would.
type volumeStore struct {
	cache.Indexer
	issued *controller.Refs[types.UID]
	// then is what RefsOfThen calls once issued shows an object.
	then func(obj any)
}

func newVolumeStore() *volumeStore {
	return &volumeStore{Indexer: provisionertest.VolumeCache(), issued: controller.NewRefs(volumeClaimUID)}
}

func (s *volumeStore) Add(obj any) error { return s.Update(obj) }

func (s *volumeStore) Update(obj any) error {
	old, known, _ := s.Get(obj)
	if err := s.Indexer.Update(obj); err != nil {
		return err
	}
	if known {
		s.issued.OnUpdate(old, obj)
	} else {
		s.issued.OnAdd(obj, false)
	}
	if s.then != nil {
		s.then(obj)
	}
	return nil
}

func (s *volumeStore) Delete(obj any) error {
	if err := s.Indexer.Delete(obj); err != nil {
		return err
	}
	s.issued.OnDelete(obj)
	return nil
}

// useBacking builds the provisioner's class pools on the fixture's backing
// claims (namespace testBackingNS), with the provisioner's ID, clock and
// memories as they are now.
func (f *fixture) useBacking() {
	f.p.useBackingClaims(corelisters.NewPersistentVolumeClaimLister(f.backing), testBackingNS)
}

// useClock has the provisioner, its class pools included, tell time on clk,
// with memories afresh.
func (f *fixture) useClock(clk clock.PassiveClock) {
	f.p.useClock(clk)
	f.useBacking()
}

// add puts pv into the cache and the API server, and returns it.
func (f *fixture) add(pv *corev1.PersistentVolume) *corev1.PersistentVolume {
	f.t.Helper()
	return f.cluster.Add(pv)
}

func (f *fixture) directoryClass(extra map[string]string) *storagev1.StorageClass {
	return provisionertest.DirectoryClass(f.root, extra)
}

func (f *fixture) provision(class *storagev1.StorageClass, claim *corev1.PersistentVolumeClaim) (*corev1.PersistentVolume, lib.ProvisioningState, error) {
	return f.p.Provision(context.Background(), lib.ProvisionOptions{
		StorageClass: class, PVName: "pvc-" + string(claim.UID), PVC: claim,
	})
}

// server returns the PV as the API server has it.
func (f *fixture) server(name string) *corev1.PersistentVolume {
	f.t.Helper()
	return f.cluster.Server(name)
}

// events drains the recorded events.
func (f *fixture) events() []string { return f.cluster.Events() }

func (f *fixture) writes() int { return f.cluster.Writes() }

// startedEvents is a cache of the lifecycle pods on client, running until
// the test ends.
func startedEvents(t *testing.T, client kubernetes.Interface) *lifecycle.Events {
	t.Helper()
	e := lifecycle.NewEvents(client, "lifecycle")
	if err := e.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	return e
}

// evictorFor is the evictor of f's provisioner, with a queue that nothing
// runs: a test calls Sync itself.
func evictorFor(f *fixture) *evict.Evictor {
	return evict.NewEvictor(f.p, evict.Config{
		Provisioner: testProvisioner, Client: f.client, Volumes: f.volumes, Pools: f.p.pools, Nodes: f.p.nodes,
		Recorder: f.recorder, Clock: f.p.clock, AheadBound: f.p.aheadBound, Evictions: f.p.metrics.evictions, Workers: 1,
	})
}

// measurerFor is the measurer of f's provisioner, walking members through
// their backend, with a queue that nothing runs.
func measurerFor(f *fixture) *evict.Measurer {
	return evict.NewMeasurer(f.p, evict.MeasurerConfig{Provisioner: testProvisioner, Volumes: f.volumes, Pools: f.p.pools, Timeout: time.Minute})
}

// newBackends builds every registered backend by the name a class gives it,
// as the provisioner does.
// provisionerName is the provisioner's own name; client runs the backends'
// lifecycle pods, events follows them, and lifecycle (if not nil) times
// them.
func newBackends(provisionerName string, client kubernetes.Interface, classes storagelisters.StorageClassLister, cfg Config, events *lifecycle.Events, durations *prometheus.HistogramVec) map[string]backend.Backend {
	return backend.New(backendDeps(provisionerName, client, classes, cfg, events, durations))
}
