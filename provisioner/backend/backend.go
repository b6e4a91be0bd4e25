// Package backend holds the backends of the provisioner: where the volumes
// of a class come from (a share, a node's disk, another StorageClass, or
// volumes an administrator labelled), each in a file of its own that
// registers it, behind one closed interface the provisioner's flow asks.
package backend

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/reclaimable/reclaimable/internal/wellknown"
	"github.com/reclaimable/reclaimable/provisioner/lifecycle"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/client-go/kubernetes"
	storagelisters "k8s.io/client-go/listers/storage/v1"
)

// A backend is where the volumes of a class come from. The Provision flow
// does what every pool needs (it takes free members, counts, wakes waiting
// claims); a backend says which volumes form a class's pool, makes new ones
// if it can, and removes them. A class names its backend with the parameter
// "backend".
type Backend interface {
	// Parameters names the class parameters the backend reads, on top of
	// "backend" and "selectorKeys", which every class may set.
	Parameters() []string
	// ForClass validates those parameters of class and returns the
	// backend's view of it, or every problem at once.
	ForClass(class *storagev1.StorageClass) (Class, []error)
	// Delete ends pv, a volume this backend made (its wellknown.Backend annotation
	// names the backend) with reclaim policy Delete: it removes the
	// storage, after which the library deletes the volume object
	// (StorageRemoved), or gives the volume to the provisioner that made
	// its storage, which deletes both (HandedBack).
	Delete(ctx context.Context, pv *corev1.PersistentVolume) (Deletion, error)
	// Evicts says how a member the backend made leaves its pool with its
	// data (a VolumePool's eviction settings, evictForClaims), or why it
	// cannot: an error an administrator reads on the pool.
	Evicts() (EvictionKind, error)
	// Usage adds up the bytes member pv holds, until deadline; partial says
	// it stopped there or at what it could not read. A backend that cannot
	// measure a member cheaply at each return to the pool returns
	// ErrNotMeasured, and Measures reports false.
	Usage(pv *corev1.PersistentVolume, deadline time.Time) (bytes int64, partial bool, err error)
	Measures() bool
}

// EvictionKind is how a backend's members are evicted (the provisioner's
// evicting.go).
type EvictionKind int

const (
	// EvictNever: the backend keeps no storage of its own to remove.
	EvictNever EvictionKind = iota
	// EvictRemoving: fenced, deleted, and the storage removed by the
	// backend's delete before the fence's finalizer goes.
	EvictRemoving
	// EvictHandingBack: handed back, in one write, to the provisioner that
	// made the storage, which deletes storage and object.
	EvictHandingBack
)

// ErrNotMeasured: the backend does not measure its members.
var ErrNotMeasured = errors.New("the backend does not measure its members")

// Unmeasured is the usage of a backend that does not measure its members.
type Unmeasured struct{}

func (Unmeasured) Usage(*corev1.PersistentVolume, time.Time) (int64, bool, error) {
	return 0, false, ErrNotMeasured
}
func (Unmeasured) Measures() bool { return false }

// Placement is where a member made ahead of claims goes.
type Placement int

const (
	// PlaceAnywhere: the backend or its driver decides.
	PlaceAnywhere Placement = iota
	// PlaceOnNode: on one node's disk, chosen by the flow among the nodes
	// the class and the pool's template allow (provisioner/ahead).
	PlaceOnNode
	// PlaceInZone: for a node of one of the pool's template zones
	// (provisioner/ahead, zones.go).
	PlaceInZone
)

// Deletion is how a backend ended a volume.
type Deletion int

const (
	// StorageRemoved: the volume object is the library's to delete.
	StorageRemoved Deletion = iota
	// HandedBack: another provisioner deletes the storage and the object.
	HandedBack
)

// Class is a backend's view of one StorageClass.
type Class interface {
	// IsMember reports whether pv, a Retain volume of the class, is in the
	// class's pool.
	IsMember(pv *corev1.PersistentVolume) bool
	// SelectorKeys names the label keys a claim's selector may use on top
	// of the class's selectorKeys.
	SelectorKeys() []string
	// Maker returns what makes new volumes for the class, or nil and what an
	// administrator can do to add volumes to a pool that cannot grow.
	Maker() (Maker, string)
	// BackingClass is the StorageClass whose provisioner makes the pool's
	// new volumes, for a pool that grows through claims of another class
	// (provisioner/classpool) rather than a maker; nil for the others.
	BackingClass() *storagev1.StorageClass
	// AheadPlacement says where a member made ahead of claims goes.
	AheadPlacement() Placement
}

// Maker makes the storage of new volumes for one class.
type Maker interface {
	// Refuse says why no volume of the backend can serve claim (an event
	// reason and the message), or returns "" and nil.
	Refuse(claim *corev1.PersistentVolumeClaim) (string, error)
	// Create makes the storage of v. It is idempotent: a retry for the
	// same name reuses what an earlier attempt made.
	Create(ctx context.Context, v NewVolume) (MadeVolume, error)
	// Plan says what Create will make of v, without making it, so that the
	// volume object of a member made ahead exists before its storage.
	Plan(v NewVolume) (MadeVolume, error)
}

// NewVolume is a volume a backend is asked to make.
type NewVolume struct {
	Name string
	// Claim is the claim it is for; for a member made ahead, a claim of
	// the pool's template that exists nowhere.
	Claim *corev1.PersistentVolumeClaim
	// Node is the node the scheduler selected for a claim that waits for
	// its first consumer, else nil.
	Node *corev1.Node
}

// The growth limits a backend may list among its parameters; the flow
// enforces them for every backend that does.
const (
	MaxVolumes        = wellknown.MaxVolumes
	MaxVolumesPerNode = wellknown.MaxVolumesPerNode
	MaxCapacity       = "maxCapacity"
)

// Event reasons a Maker's Refuse gives, recorded on the claim.
const (
	reasonUnsupportedVolumeMode = "UnsupportedVolumeMode"
	reasonUnsupportedAttributes = "UnsupportedVolumeAttributesClass"
	reasonUnsupportedAccessMode = "UnsupportedAccessMode"
)

// claimKey is "<namespace>/<name>", as wellknown.LastClaim records it.
func claimKey(claim *corev1.PersistentVolumeClaim) string {
	return claim.Namespace + "/" + claim.Name
}

// Errors a backend may return that the flow acts on.

// StorageMayRemain says a failed create may have left storage behind that
// nothing removed yet: the claim's provisioning is not over (Provision says
// ProvisioningInBackground), so that the library calls it again even once
// the claim is gone, and deletes the volume it then returns.
type StorageMayRemain struct{ error }

func (e *StorageMayRemain) Unwrap() error { return e.error }

// MadeVolume is what a backend made.
type MadeVolume struct {
	// Source points a PersistentVolume at the storage.
	Source corev1.PersistentVolumeSource
	// Annotations let Delete find the storage without the class.
	Annotations map[string]string
	// NodeAffinity, for storage that some nodes alone reach, replaces the
	// class's allowedTopologies.
	NodeAffinity *corev1.VolumeNodeAffinity
}

// Deps is what a backend is built with.
type Deps struct {
	// Provisioner is the provisioner's own name.
	Provisioner string
	Client      kubernetes.Interface
	// Classes are the StorageClasses, for a backend that reads others.
	Classes storagelisters.StorageClassLister
	// DirectoryRoot is the directory every baseDir of the directory
	// backend must lie in (--directory-root).
	DirectoryRoot string
	// Pods runs lifecycle pods on nodes and shares.
	Pods lifecycle.Pods
}

// registered holds what builds each backend, by the name a class gives it.
// A backend's file adds it (register, from its init): adding a backend is
// a file of its own and its tests.
var registered = map[string]func(Deps) Backend{}

// register adds the backend a class names name; build makes it.
func Register(name string, build func(Deps) Backend) {
	if _, dup := registered[name]; dup {
		panic("backend " + name + " registered twice")
	}
	registered[name] = build
}

// Names lists the backends for a message, sorted: `"a",
// "b" or "c"`.
func Names(backends map[string]Backend) string {
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

// New builds every registered backend, by the name a class gives it.
func New(deps Deps) map[string]Backend {
	out := make(map[string]Backend, len(registered))
	for name, build := range registered {
		out[name] = build(deps)
	}
	return out
}

// Unregister removes the backend registered as name: for a test that
// registers one of its own.
func Unregister(name string) { delete(registered, name) }
