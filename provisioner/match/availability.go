package match

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	volumehelpers "k8s.io/component-helpers/storage/volume"
	"k8s.io/utils/ptr"

	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/internal/wellknown"
	"github.com/reclaimable/reclaimable/provisioner/backend"
)

// This file holds which volumes form a class's pool, and which of them a
// claim may have: free to it, and fitting it.

// IsMember reports whether pv belongs to the pool of class, whose backend
// says which of the class's volumes are in it. Only Retain volumes are
// pooled: a Delete volume is gone once released.
func IsMember(pv *corev1.PersistentVolume, class string, pool backend.Class) bool {
	if volumehelpers.GetPersistentVolumeClass(pv) != class || pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimRetain {
		return false
	}
	return pool.IsMember(pv)
}

// Availability says whether a pool member can be given to a claim.
type Availability int

const (
	// InUse: bound, being bound, or reserved for another claim.
	InUse Availability = iota
	// Free: no claim (Available), or reserved by name for this very claim.
	Free
	// FreeIfGone: Released; free once the API server confirms that the
	// claim it names is gone.
	FreeIfGone
	// ReservedForOther: reserved by the releaser for another claim's name
	// (reserveFor); taken only when no other member fits, so that a
	// reservation never makes a claim wait or the pool grow.
	ReservedForOther
	// OtherNamespace: free, but under reuseScope namespace for claims of
	// the namespace it was last bound in, not this claim's.
	OtherNamespace
	// OtherKey: free, but last used under another cache key than the
	// claim's, which keyPolicy Require keeps it from.
	OtherKey
	// Returning: still bound to an earlier claim of this claim's namespace
	// and name, which is therefore gone (names are unique): the PV
	// controller is about to release it, with the data the claim left.
	Returning
)

// AvailabilityOf says whether pv can be given to claim; namespaced is the
// class's reuseScope namespace.
func AvailabilityOf(pv *corev1.PersistentVolume, claim *corev1.PersistentVolumeClaim, namespaced bool) Availability {
	a := availabilityByClaimRef(pv, claim)
	if namespaced && a != InUse {
		if ns := LastNamespace(pv); ns != "" && ns != claim.Namespace {
			return OtherNamespace
		}
	}
	return a
}

// Issuable reports whether a member of availability a may be issued to the
// claim it was judged for.
func Issuable(a Availability) bool { return a == Free || a == FreeIfGone || a == ReservedForOther }

// LastNamespace is the namespace pv was last bound in: its claimRef's, or
// with none, its last claim's; "" for a volume never bound, which belongs
// to no namespace yet.
func LastNamespace(pv *corev1.PersistentVolume) string {
	if pools.Unissued(pv) {
		return "" // its claimRef names no claim's namespace
	}
	if ref := pv.Spec.ClaimRef; ref != nil {
		return ref.Namespace
	}
	ns, _, _ := strings.Cut(pv.Annotations[wellknown.LastClaim], "/")
	return ns
}

func availabilityByClaimRef(pv *corev1.PersistentVolume, claim *corev1.PersistentVolumeClaim) Availability {
	switch {
	case pv.DeletionTimestamp != nil || pools.StoragePending(pv) || pools.Scrubbing(pv) || pools.Evicting(pv):
		return InUse
	case pools.Unissued(pv):
		return Free
	}
	ref := pv.Spec.ClaimRef
	switch {
	case ref == nil:
		// Also a volume still Released whose claimRef the releaser (or an
		// administrator) just cleared, before the PV controller makes it
		// Available; but not one a failed recycle left behind.
		if pv.Status.Phase == corev1.VolumeFailed {
			return InUse
		}
		return Free
	case ref.UID == "":
		// Pre-bound by name: kept for a claim of that namespace and name.
		// One the releaser reserved or holds for a namespace may go to
		// another claim; one an administrator pre-bound may not.
		_, held := pools.HeldFor(pv)
		switch {
		case KeptForName(pv, claim):
			return Free
		case pools.Reserved(pv):
			return ReservedForOther
		case held:
			return Free
		}
		return InUse
	case pv.Status.Phase == corev1.VolumeReleased:
		return FreeIfGone
	case ref.Namespace == claim.Namespace && ref.Name == claim.Name && ref.UID != claim.UID:
		return Returning
	}
	return InUse
}

// KeptForName reports whether pv names claim by namespace and name without
// a UID: a claim of that name, this one, is what the PV controller binds it
// to.
func KeptForName(pv *corev1.PersistentVolume, claim *corev1.PersistentVolumeClaim) bool {
	ref := pv.Spec.ClaimRef
	return ref != nil && ref.UID == "" && ref.Namespace == claim.Namespace && ref.Name == claim.Name
}

// Misfit says why pv cannot serve claim on node (nil: no node selected), or
// "" when it can. It checks what the PV controller checks before it binds a
// pre-bound volume, so that a volume given to a claim is never refused.
func Misfit(pv *corev1.PersistentVolume, claim *corev1.PersistentVolumeClaim, node *corev1.Node, selector labels.Selector) string {
	want := claim.Spec.Resources.Requests[corev1.ResourceStorage]
	have := pv.Spec.Capacity[corev1.ResourceStorage]
	switch {
	case have.Cmp(want) < 0:
		return "capacity"
	case !volumehelpers.CheckAccessModes(claim, pv):
		return "access modes"
	case volumehelpers.CheckVolumeModeMismatches(&claim.Spec, &pv.Spec):
		return "volume mode"
	case ptr.Deref(claim.Spec.VolumeAttributesClassName, "") != ptr.Deref(pv.Spec.VolumeAttributesClassName, ""):
		return "volume attributes class"
	case selector != nil && !selector.Matches(labels.Set(pv.Labels)):
		return "selector"
	case node != nil && !pools.FitsNode(pv, node):
		return "node"
	}
	return ""
}
