package provisionertest

import (
	"context"
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/reclaimable/reclaimable/internal/controllertest"
	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/provisioner/classpool"
)

// Cluster is a fake API server and the informer caches the provisioner and
// the packages beside it read. Nothing feeds the caches but the test: it
// decides when they catch up with the API server, as an informer would,
// late or not at all.
type Cluster struct {
	t      testing.TB
	Client *fake.Clientset
	// Volumes is the volume cache, with the indexes the provisioner adds
	// (VolumeIndexers) unless the test gave its own.
	Volumes cache.Indexer
	// Claims are the claims that wait for a volume; BackingClaims the class
	// pools' backing claims, by namespace; Pools the VolumePools.
	Claims, BackingClaims, Pools cache.Indexer
	Recorder                     *record.FakeRecorder
}

// VolumeIndexers are the indexes the provisioner adds to the volume
// informer: volumes by class, and those the class pools keep for a claim.
func VolumeIndexers() cache.Indexers {
	out := cache.Indexers{pools.VolumesByClass: pools.VolumeClass}
	maps.Copy(out, classpool.Indexers())
	return out
}

// VolumeCache is an empty volume cache with VolumeIndexers.
func VolumeCache() cache.Indexer {
	return cache.NewIndexer(cache.MetaNamespaceKeyFunc, VolumeIndexers())
}

// NewCluster serves pvs and claims from both the caches and the API server,
// the volumes from a VolumeCache.
func NewCluster(t testing.TB, pvs []*corev1.PersistentVolume, claims ...*corev1.PersistentVolumeClaim) *Cluster {
	t.Helper()
	return NewClusterOn(t, VolumeCache(), pvs, claims...)
}

// NewClusterOn is NewCluster with volumes as the volume cache, for a test
// that keeps something beside it: the provisioner's, say, which follows
// the volumes the informer shows. The fake API server enforces
// resourceVersion preconditions on volume updates, as the real one does.
func NewClusterOn(t testing.TB, volumes cache.Indexer, pvs []*corev1.PersistentVolume, claims ...*corev1.PersistentVolumeClaim) *Cluster {
	t.Helper()
	c := &Cluster{
		t:             t,
		Volumes:       volumes,
		Claims:        cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}),
		BackingClaims: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}),
		Pools:         pools.NoPools(),
		Recorder:      record.NewFakeRecorder(1000),
	}
	var objs []runtime.Object
	for _, pv := range pvs {
		objs = append(objs, pv.DeepCopy())
		if err := c.Volumes.Add(pv); err != nil {
			t.Fatal(err)
		}
	}
	for _, claim := range claims {
		objs = append(objs, claim.DeepCopy())
		if err := c.Claims.Add(claim); err != nil {
			t.Fatal(err)
		}
	}
	c.Client = fake.NewClientset(objs...)
	controllertest.ResourceVersionPreconditions(c.Client, corev1.SchemeGroupVersion.WithResource("persistentvolumes"))
	return c
}

// Add puts pv into the volume cache and the API server, and returns it.
func (c *Cluster) Add(pv *corev1.PersistentVolume) *corev1.PersistentVolume {
	c.t.Helper()
	if err := c.Volumes.Add(pv); err != nil {
		c.t.Fatal(err)
	}
	if err := c.Client.Tracker().Add(pv.DeepCopy()); err != nil {
		c.t.Fatal(err)
	}
	return pv
}

// Server returns the volume called name as the API server has it.
func (c *Cluster) Server(name string) *corev1.PersistentVolume {
	c.t.Helper()
	pv, err := c.Client.CoreV1().PersistentVolumes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	return pv
}

// Events drains the events recorded so far.
func (c *Cluster) Events() []string { return controllertest.Events(c.Recorder) }

// Writes counts the requests the API server received that would change
// something: all but reads.
func (c *Cluster) Writes() int {
	n := 0
	for _, a := range c.Client.Actions() {
		if a.GetVerb() != "get" && a.GetVerb() != "list" && a.GetVerb() != "watch" {
			n++
		}
	}
	return n
}
