package evict_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/internal/wellknown"
	"github.com/reclaimable/reclaimable/provisioner/evict"
	"github.com/reclaimable/reclaimable/provisioner/lifecycle"
	"github.com/reclaimable/reclaimable/provisioner/provisionertest"
)

var (
	volume   = provisionertest.Volume
	bound    = provisionertest.Bound
	returned = provisionertest.Returned
	t0       = provisionertest.T0
)

// member is a free member of the directory backend called name, with a
// UID: its deletion is guarded by it.
func member(name string, mods ...func(*corev1.PersistentVolume)) *corev1.PersistentVolume {
	return volume(name, "1Gi", append([]func(*corev1.PersistentVolume){func(pv *corev1.PersistentVolume) {
		pv.UID = types.UID("uid-" + name)
		pv.Annotations[wellknown.Backend] = "directory"
	}}, mods...)...)
}

// evictorOn is the evictor of the provisioner p plays on c, telling time
// on clk, with nodes as its node cache (nil: none) and a queue that nothing
// runs: a test calls Sync itself.
func evictorOn(c *provisionertest.Cluster, p evict.Provisioner, nodes corelisters.NodeLister, clk clock.PassiveClock) *evict.Evictor {
	return evict.NewEvictor(p, evict.Config{
		Provisioner: provisionertest.Provisioner, Client: c.Client, Volumes: c.Volumes, Pools: c.Pools, Nodes: nodes,
		Recorder: c.Recorder, Clock: clk, AheadBound: provisionertest.AheadBound, Workers: 1,
		Evictions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "evictions"}, []string{"class", "cause"}),
	})
}

// The evictor completes each step a stopped provisioner left: it deletes
// a fenced member still free, takes down the fence of one a claim had
// meanwhile, and removes the storage of a deleted one, then its finalizer.
func TestEvictorCompletesEvictions(t *testing.T) {
	now := metav1.Now()
	fence := func(pv *corev1.PersistentVolume) {
		pv.Annotations[wellknown.Evicting] = wellknown.EvictIdle
		pv.Finalizers = []string{"kubernetes.io/pv-protection", wellknown.EvictFinalizer}
	}
	for _, tt := range []struct {
		name string
		mods []func(*corev1.PersistentVolume)
		// want: what is left of the volume object: "gone", "fenced" or "unfenced".
		want           string
		storageRemoved bool
	}{
		{"fenced and free: deleted", []func(*corev1.PersistentVolume){fence}, "gone", false},
		{"fenced, a claim had it: unfenced", []func(*corev1.PersistentVolume){fence, bound("ns", "job", "u1")}, "unfenced", false},
		{"fenced, then pre-bound by an administrator: unfenced", []func(*corev1.PersistentVolume){fence, func(pv *corev1.PersistentVolume) {
			pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "ns", Name: "wanted"}
		}}, "unfenced", false},
		{"deleted: storage, then finalizer", []func(*corev1.PersistentVolume){fence, func(pv *corev1.PersistentVolume) { pv.DeletionTimestamp = &now }}, "no finalizer", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := provisionertest.NewCluster(t, nil)
			c.Add(member("pv-1", tt.mods...))
			p := &provisionertest.Flow{Client: c.Client, Remove: func(pv *corev1.PersistentVolume) error {
				if !slices.Contains(c.Server(pv.Name).Finalizers, wellknown.EvictFinalizer) {
					t.Errorf("the storage of %s is removed after its finalizer went: the volume object may be gone first", pv.Name)
				}
				return nil
			}}
			if err := evictorOn(c, p, nil, clock.RealClock{}).Sync(context.Background(), "pv-1"); err != nil {
				t.Fatalf("sync: %v", err)
			}
			got, err := c.Client.CoreV1().PersistentVolumes().Get(context.Background(), "pv-1", metav1.GetOptions{})
			switch tt.want {
			case "gone":
				if !apierrors.IsNotFound(err) {
					t.Errorf("volume: %v, want it deleted", err)
				}
			case "unfenced":
				if err != nil || pools.Evicting(got) || slices.Contains(got.Finalizers, wellknown.EvictFinalizer) || !slices.Contains(got.Finalizers, "kubernetes.io/pv-protection") {
					t.Errorf("volume %+v (%v): want its fence, and only it, gone", got, err)
				}
			case "no finalizer":
				if err != nil || slices.Contains(got.Finalizers, wellknown.EvictFinalizer) {
					t.Errorf("volume %+v (%v): want its finalizer gone", got, err)
				}
			}
			if removed := p.Removed(); slices.Equal(removed, []string{"pv-1"}) != tt.storageRemoved || len(removed) > 1 {
				t.Errorf("storage removed of %v, want that of pv-1: %v", removed, tt.storageRemoved)
			}
		})
	}
}

// A local member being evicted whose node is gone is let go: its directory
// cannot be reached, the pool asked for its data to go, and retrying would
// keep the volume Terminating for good. The finalizer goes, and a Warning
// says where the directory stays should the node come back; it does not
// ask for a deletion already under way, as the error of the backend does.
func TestEvictorLetsGoOfALocalMemberWhoseNodeIsGone(t *testing.T) {
	now := metav1.Now()
	typ := corev1.HostPathDirectory
	c := provisionertest.NewCluster(t, nil)
	c.Add(volume("pv-1", "1Gi", func(pv *corev1.PersistentVolume) {
		pv.Annotations[wellknown.Backend] = "local"
		pv.Annotations[wellknown.Node], pv.Annotations[wellknown.NodePath], pv.Annotations[wellknown.Directory] = "n1", "/var/lib/caches", "pv-1"
		pv.Annotations[wellknown.Evicting] = wellknown.EvictIdle
		pv.Spec.HostPath = &corev1.HostPathVolumeSource{Path: "/var/lib/caches/pv-1", Type: &typ}
		pv.Finalizers = []string{wellknown.EvictFinalizer}
		pv.DeletionTimestamp = &now
	}))
	// What the local backend says of a member whose node is gone.
	p := &provisionertest.Flow{Client: c.Client, Remove: func(*corev1.PersistentVolume) error {
		return &lifecycle.NodeGoneError{Node: "n1", Dir: "/var/lib/caches/pv-1",
			Msg: "node n1, which holds the directory of volume pv-1, is gone: remove /var/lib/caches/pv-1 from its disk if it comes back, then delete the volume"}
	}}
	if err := evictorOn(c, p, nil, clock.RealClock{}).Sync(context.Background(), "pv-1"); err != nil {
		t.Fatalf("sync: %v, want the member let go", err)
	}
	got, err := c.Client.CoreV1().PersistentVolumes().Get(context.Background(), "pv-1", metav1.GetOptions{})
	if err == nil && slices.Contains(got.Finalizers, wellknown.EvictFinalizer) {
		t.Errorf("finalizers %v: want %s gone", got.Finalizers, wellknown.EvictFinalizer)
	}
	events := c.Events()
	want := "Warning EvictedFromGoneNode Node n1 is gone: the directory /var/lib/caches/pv-1 stays on its disk; remove it should the node come back"
	if !slices.ContainsFunc(events, func(e string) bool { return strings.HasPrefix(e, want) }) {
		t.Errorf("events %q, want one starting %q", events, want)
	}
	for _, e := range events {
		if strings.Contains(e, "delete the volume") {
			t.Errorf("event %q asks for a deletion already under way", e)
		}
	}
}

// A member made ahead whose storage is not made within the bound (three
// times --lifecycle-timeout), or whose node is gone, is removed with
// whatever of its storage was made, and says why: it had no claim and no
// data, and otherwise it would count against maxVolumes for good. One
// still within the bound is looked at again when the bound ends.
func TestEvictorRemovesAMemberWhoseStorageIsNotMadeInTime(t *testing.T) {
	nodes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := nodes.Add(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name    string
		age     time.Duration
		node    string
		removed bool
		why     string
	}{
		{"within the bound", time.Minute, "", false, ""},
		{"past the bound", 3*time.Minute + time.Second, "", true, "its storage was not made within 3m0s (three times --lifecycle-timeout)"},
		{"on a node that is gone, within the bound", time.Second, "n2", true, "its node n2 is gone"},
		{"on a node that is there, within the bound", time.Second, "n1", false, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := provisionertest.NewCluster(t, nil)
			pending := c.Add(member("pvc-half", func(pv *corev1.PersistentVolume) {
				pv.CreationTimestamp = metav1.NewTime(t0().Add(-tt.age))
				pv.Annotations[wellknown.MadeAhead] = "warm"
				pv.Annotations[wellknown.StoragePending] = "true"
				if tt.node != "" {
					pv.Annotations[wellknown.Node] = tt.node
				}
				pv.Spec.ClaimRef = pools.AheadClaimRef("pvc-half")
			}))
			e := evictorOn(c, &provisionertest.Flow{Client: c.Client}, corelisters.NewNodeLister(nodes), testingclock.NewFakePassiveClock(t0()))
			if !e.Wants(pending) {
				t.Fatalf("a storage-pending member is not queued for the evictor")
			}
			if err := e.Sync(context.Background(), "pvc-half"); err != nil {
				t.Fatalf("sync: %v", err)
			}
			_, err := c.Client.CoreV1().PersistentVolumes().Get(context.Background(), "pvc-half", metav1.GetOptions{})
			if removed := apierrors.IsNotFound(err); removed != tt.removed {
				t.Fatalf("removed %v (%v), want %v", removed, err, tt.removed)
			}
			want := "Warning MemberNotMade Made ahead of claims, but " + tt.why
			if got := provisionertest.HasEvent(c.Events(), want); got != tt.removed {
				t.Errorf("event %q: %v, want %v", want, got, tt.removed)
			}
		})
	}
}
