package provisioner

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/reclaimable/reclaimable/provisioner/lifecycle"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/client-go/kubernetes"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
)

// A backend is where the volumes of a class come from. The Provision flow
// does what every pool needs (it takes free members, counts, wakes waiting
// claims); a backend says which volumes form a class's pool, makes new ones
// if it can, and removes them. A class names its backend with the parameter
// "backend".
type backend interface {
	// parameters names the class parameters the backend reads, on top of
	// "backend" and "selectorKeys", which every class may set.
	parameters() []string
	// forClass validates those parameters of class and returns the
	// backend's view of it, or every problem at once.
	forClass(class *storagev1.StorageClass) (classBackend, []error)
	// delete ends pv, a volume this backend made (its keys.Backend annotation
	// names the backend) with reclaim policy Delete: it removes the
	// storage, after which the library deletes the volume object
	// (storageRemoved), or gives the volume to the provisioner that made
	// its storage, which deletes both (handedBack).
	delete(ctx context.Context, pv *corev1.PersistentVolume) (deletion, error)
	// evicts says how a member the backend made leaves its pool with its
	// data (a VolumePool's eviction settings, evictForClaims), or why it
	// cannot: an error an administrator reads on the pool.
	evicts() (evictionKind, error)
	// usage adds up the bytes member pv holds, until deadline; partial says
	// it stopped there or at what it could not read. A backend that cannot
	// measure a member cheaply at each return to the pool returns
	// errNotMeasured, and measures reports false.
	usage(pv *corev1.PersistentVolume, deadline time.Time) (bytes int64, partial bool, err error)
	measures() bool
}

// evictionKind is how a backend's members are evicted (evict.go).
type evictionKind int

const (
	// evictNever: the backend keeps no storage of its own to remove.
	evictNever evictionKind = iota
	// evictRemoving: fenced, deleted, and the storage removed by the
	// backend's delete before the fence's finalizer goes.
	evictRemoving
	// evictHandingBack: handed back, in one write, to the provisioner that
	// made the storage, which deletes storage and object.
	evictHandingBack
)

// errNotMeasured: the backend does not measure its members.
var errNotMeasured = errors.New("the backend does not measure its members")

// unmeasured is the usage of a backend that does not measure its members.
type unmeasured struct{}

func (unmeasured) usage(*corev1.PersistentVolume, time.Time) (int64, bool, error) {
	return 0, false, errNotMeasured
}
func (unmeasured) measures() bool { return false }

// placement is where a member made ahead of claims goes.
type placement int

const (
	// placeAnywhere: the backend or its driver decides.
	placeAnywhere placement = iota
	// placeOnNode: on one node's disk, chosen by the flow among the nodes
	// the class and the pool's template allow (aheadNodes).
	placeOnNode
	// placeInZone: for a node of one of the pool's template zones
	// (zones.go).
	placeInZone
)

// deletion is how a backend ended a volume.
type deletion int

const (
	// storageRemoved: the volume object is the library's to delete.
	storageRemoved deletion = iota
	// handedBack: another provisioner deletes the storage and the object.
	handedBack
)

// classBackend is a backend's view of one StorageClass.
type classBackend interface {
	// isMember reports whether pv, a Retain volume of the class, is in the
	// class's pool.
	isMember(pv *corev1.PersistentVolume) bool
	// selectorKeys names the label keys a claim's selector may use on top
	// of the class's selectorKeys.
	selectorKeys() []string
	// maker returns what makes new volumes for the class, or nil and what an
	// administrator can do to add volumes to a pool that cannot grow.
	maker() (volumeMaker, string)
	// backingClass is the StorageClass whose provisioner makes the pool's
	// new volumes, for a pool that grows through claims of another class
	// (backing.go) rather than a maker; nil for the others.
	backingClass() *storagev1.StorageClass
	// aheadPlacement says where a member made ahead of claims goes.
	aheadPlacement() placement
}

// volumeMaker makes the storage of new volumes for one class.
type volumeMaker interface {
	// refuse says why no volume of the backend can serve claim (an event
	// reason and the message), or returns "" and nil.
	refuse(claim *corev1.PersistentVolumeClaim) (string, error)
	// create makes the storage of v. It is idempotent: a retry for the
	// same name reuses what an earlier attempt made.
	create(ctx context.Context, v newVolume) (madeVolume, error)
	// plan says what create will make of v, without making it, so that the
	// volume object of a member made ahead exists before its storage.
	plan(v newVolume) (madeVolume, error)
}

// newVolume is a volume a backend is asked to make.
type newVolume struct {
	name string
	// claim is the claim it is for; for a member made ahead, a claim of
	// the pool's template that exists nowhere.
	claim *corev1.PersistentVolumeClaim
	// node is the node the scheduler selected for a claim that waits for
	// its first consumer, else nil.
	node *corev1.Node
}

// Errors a backend may return that the flow acts on.

// storageMayRemain says a failed create may have left storage behind that
// nothing removed yet: the claim's provisioning is not over (Provision says
// ProvisioningInBackground), so that the library calls it again even once
// the claim is gone, and deletes the volume it then returns.
type storageMayRemain struct{ error }

func (e *storageMayRemain) Unwrap() error { return e.error }

// madeVolume is what a backend made.
type madeVolume struct {
	// source points a PersistentVolume at the storage.
	source corev1.PersistentVolumeSource
	// annotations let delete find the storage without the class.
	annotations map[string]string
	// nodeAffinity, for storage that some nodes alone reach, replaces the
	// class's allowedTopologies.
	nodeAffinity *corev1.VolumeNodeAffinity
}

// backendDeps is what a backend is built with.
type backendDeps struct {
	// provisioner is the provisioner's own name.
	provisioner string
	client      kubernetes.Interface
	// classes are the StorageClasses, for a backend that reads others.
	classes storagelisters.StorageClassLister
	cfg     Config
	// pods runs lifecycle pods on nodes and shares.
	pods lifecycle.Pods
}

// registered holds what builds each backend, by the name a class gives it.
// A backend's file adds it (register, from its init): adding a backend is
// a file of its own and its tests.
var registered = map[string]func(backendDeps) backend{}

// register adds the backend a class names name; build makes it.
func register(name string, build func(backendDeps) backend) {
	if _, dup := registered[name]; dup {
		panic("backend " + name + " registered twice")
	}
	registered[name] = build
}

// newBackends builds every registered backend by the name a class gives it.
// provisionerName is the provisioner's own name; client runs the backends'
// lifecycle pods, events follows them, and lifecycle (if not nil) times
// them.
func newBackends(provisionerName string, client kubernetes.Interface, classes storagelisters.StorageClassLister, cfg Config, events *lifecycle.Events, lifecycle *prometheus.HistogramVec) map[string]backend {
	if classes == nil {
		classes = storagelisters.NewStorageClassLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}))
	}
	deps := backendDeps{provisioner: provisionerName, client: client, classes: classes, cfg: cfg, pods: newLifecyclePods(client, cfg, events, lifecycle)}
	out := make(map[string]backend, len(registered))
	for name, build := range registered {
		out[name] = build(deps)
	}
	return out
}

// newLifecyclePods runs lifecycle pods as cfg says, through client; events
// follows them and durations (if not nil) times them.
func newLifecyclePods(client kubernetes.Interface, cfg Config, events *lifecycle.Events, durations *prometheus.HistogramVec) lifecycle.Pods {
	return lifecycle.NewPods(client, cfg.LifecycleNamespace, cfg.LifecycleImage, cfg.LifecycleTimeout, events, durations)
}

// backendNames lists the registered backends for a message, sorted: `"a",
// "b" or "c"`.
func backendNames(backends map[string]backend) string {
	names := make([]string, 0, len(backends))
	for n := range backends {
		names = append(names, `"`+n+`"`)
	}
	slices.Sort(names)
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}
