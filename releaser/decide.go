package releaser

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	volumehelpers "k8s.io/component-helpers/storage/volume"

	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// The decisions of the releaser, kept free of clients and caches so that
// every state a volume, its claim and its class can be in is a table row in
// the tests.

// rule says why a volume belongs to this installation. Its value labels the
// associations metric.
type rule string

const (
	// ruleManagedClaim: the volume's claim was created by this installation's
	// podwatcher.
	ruleManagedClaim rule = "managed-claim"
	// ruleStorageClass: the volume's StorageClass names this controller ID.
	ruleStorageClass rule = "storage-class"
	// ruleProvisioner: this installation's provisioner created the volume.
	ruleProvisioner rule = "provisioner"
)

// policy is the configuration the decisions depend on.
type policy struct {
	controllerID    string
	provisionerName string
	// claimRule enables association through a managed claim; it is off with
	// --disable-automatic-association.
	claimRule bool
}

// describe says, for the Associated event, what made the volume ours.
func (p policy) describe(r rule, pv *corev1.PersistentVolume) string {
	switch r {
	case ruleManagedClaim:
		ref := pv.Spec.ClaimRef
		return fmt.Sprintf("its claim %s/%s has label %s=%s", ref.Namespace, ref.Name, wellknown.ClaimManagedBy, p.controllerID)
	case ruleStorageClass:
		return fmt.Sprintf("its StorageClass %q has annotation %s=%s", volumehelpers.GetPersistentVolumeClass(pv), wellknown.ClassControllerID, p.controllerID)
	case ruleProvisioner:
		return fmt.Sprintf("it was provisioned by %s", p.provisionerName)
	}
	return string(r)
}

// associationRule reports whether pv is to be associated with this
// installation now, and by which rule. class is pv's StorageClass and claim
// the managed claim with the namespace and name of pv's claimRef, each nil
// when there is none.
//
// Only a Bound or Released volume is associated. One without a claimRef has
// nothing to release, and it is associated (if at all) once a claim binds it,
// which saves a write for every volume that sits in the pool. One that is
// being bound (claimRef set, phase not yet Bound) is left to the PV
// controller until it has finished: a write then would only race with its
// status update.
func (p policy) associationRule(pv *corev1.PersistentVolume, class *storagev1.StorageClass, claim *corev1.PersistentVolumeClaim) (rule, bool) {
	if _, labelled := pv.Labels[wellknown.VolumeManagedBy]; labelled {
		return "", false
	}
	if pv.DeletionTimestamp != nil || pv.Spec.ClaimRef == nil {
		return "", false
	}
	if pv.Status.Phase != corev1.VolumeBound && pv.Status.Phase != corev1.VolumeReleased {
		return "", false
	}
	if p.claimRule && claim != nil && claim.Labels[wellknown.ClaimManagedBy] == p.controllerID && sameClaim(pv.Spec.ClaimRef, claim) {
		return ruleManagedClaim, true
	}
	return p.volumeRule(pv, class)
}

// volumeRule reports which of the rules that read the volume and its class
// only, not its claim, holds for pv. class is pv's StorageClass, nil when
// there is none.
func (p policy) volumeRule(pv *corev1.PersistentVolume, class *storagev1.StorageClass) (rule, bool) {
	if class != nil && class.Name == volumehelpers.GetPersistentVolumeClass(pv) && class.Annotations[wellknown.ClassControllerID] == p.controllerID {
		return ruleStorageClass, true
	}
	if pv.Annotations[wellknown.ProvisionedBy] == p.provisionerName {
		return ruleProvisioner, true
	}
	return "", false
}

// keepsAssociation reports whether releasing pv leaves its association label
// in place, and the rule that makes it stay. The StorageClass and
// provisioner rules hold whatever claim binds the volume next, so removing
// the label would only have it written back, with an Associated event, at
// the next binding. The managed-claim rule holds for one claim only: a
// volume associated through it alone, or labelled by hand, or whose class
// has lost the annotation since, loses the label, so that the next claim
// decides again. class is pv's StorageClass as the cache has it now.
func (p policy) keepsAssociation(pv *corev1.PersistentVolume, class *storagev1.StorageClass) (rule, bool) {
	if pv.Labels[wellknown.VolumeManagedBy] != p.controllerID {
		return "", false // not this installation's label to keep
	}
	return p.volumeRule(pv, class)
}

// reason says why a volume is not released.
type reason string

const (
	notOurs         reason = "not associated with this controller ID"
	beingDeleted    reason = "being deleted"
	notRetained     reason = "reclaim policy is not Retain"
	notReleased     reason = "not in phase Released"
	noClaimRef      reason = "no claimRef"
	invalidClaimRef reason = "claimRef lacks a namespace or name"
	preBound        reason = "claimRef names no claim's UID"
	beingScrubbed   reason = "handed to the scrub"
)

// releasable reports whether pv is a candidate for release by the releaser
// with controller ID id. A candidate is released only once its claim is known
// not to exist (see claimGone); that check needs the API server, so it is not
// part of this function.
func releasable(pv *corev1.PersistentVolume, id string) (bool, reason) {
	switch {
	case pv.Labels[wellknown.VolumeManagedBy] != id:
		return false, notOurs
	case pv.DeletionTimestamp != nil:
		return false, beingDeleted
	case pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimRetain:
		// Its provisioner deletes it once Released: made Available, it
		// would stay, the storage with it, in no pool.
		return false, notRetained
	case pools.Scrubbing(pv):
		// The provisioner's scrubber returns it to the pool, emptied.
		return false, beingScrubbed
	case pv.Status.Phase != corev1.VolumeReleased:
		// Bound above all: the claimRef of a Bound volume is never touched.
		return false, notReleased
	case pv.Spec.ClaimRef == nil:
		// The PV controller makes it Available by itself.
		return false, noClaimRef
	case pv.Spec.ClaimRef.Namespace == "" || pv.Spec.ClaimRef.Name == "":
		// No claim can be looked up, so none can be proven gone.
		return false, invalidClaimRef
	case pv.Spec.ClaimRef.UID == "":
		// Pre-bound by name (a hold, a reservation, a member made ahead),
		// and Released only until the PV controller, which makes such a
		// volume Available, sees it: no claim of it is gone.
		return false, preBound
	}
	return true, ""
}

// scrubOnRelease tells whether a volume whose claim is gone is emptied
// before any claim may have it, under its class's onRelease (as
// pools.OnReleaseOf reads it) and the outcome recorded of the claim's
// consumer ("" where none is known), and why, for the event. Under
// ScrubUnlessSucceeded only a consumer known to have succeeded hands its
// data on: a failed one may have left it half written, and one whose end
// nobody saw (deleted while it ran, a claim the podwatcher did not make,
// an outcome the releaser did not see) may have too.
func scrubOnRelease(onRelease, outcome string) (bool, string) {
	switch {
	case onRelease == wellknown.OnReleaseKeep:
		return false, ""
	case onRelease == wellknown.OnReleaseScrubUnlessSucceeded && outcome == wellknown.OutcomeSucceeded:
		return false, ""
	case onRelease == wellknown.OnReleaseScrubUnlessSucceeded && outcome == wellknown.OutcomeFailed:
		return true, "its consumer failed, and the class's pool has onRelease " + wellknown.OnReleaseScrubUnlessSucceeded
	case onRelease == wellknown.OnReleaseScrubUnlessSucceeded:
		return true, "its consumer is not known to have succeeded, and the class's pool has onRelease " + wellknown.OnReleaseScrubUnlessSucceeded
	}
	return true, "the class's pool has onRelease " + wellknown.OnReleaseScrub
}

// reservation is how long releasing a volume of class keeps it for its last
// claim's namespace and name (the class's reserveFor), given whether the
// volume stays associated. Only a volume that stays associated is reserved:
// the releaser must see it again to end the reservation. Only our
// provisioner's classes reserve: nothing else would hand a reserved volume
// to a claim of another name when no other member is free, and the pool
// would grow instead. An invalid value reserves nothing; the provisioner
// reports it on the class's claims.
//
// Under keyPolicy Require nothing is reserved: the PV controller binds a
// reserved volume to the next claim of its name, whatever that claim's
// key. The provisioner ranks the volume first for that name all the same.
func (p policy) reservation(class *storagev1.StorageClass, kept bool) time.Duration {
	if !kept || class == nil || class.Provisioner != p.provisionerName || pools.KeyRequired(class, p.provisionerName) {
		return 0
	}
	d, err := pools.ReserveFor(class)
	if err != nil {
		return 0
	}
	return d
}

// heldNamespace is the namespace a volume of class released from a claim of
// namespace ns stays held for (reuseScope namespace), or "" when any claim
// may have it. Like a reservation, a hold needs the association kept: the
// releaser must see the volume again to keep its hold in line with the
// class.
func (p policy) heldNamespace(class *storagev1.StorageClass, kept bool, ns string) string {
	if !kept || !pools.NamespaceScoped(class, p.provisionerName) {
		return ""
	}
	return ns
}

// heldName is the name the claimRef of a volume of class, held after a
// claim of that name, gives: the claim's, so that the PV controller binds
// the volume to a new claim of that name at once; under keyPolicy Require
// a name no claim has (wellknown.HeldClaim), since a new claim of that name may
// carry another key. pv is the volume's name.
func (p policy) heldName(class *storagev1.StorageClass, pv, name string) string {
	if pools.KeyRequired(class, p.provisionerName) {
		return wellknown.HeldClaim(pv)
	}
	return name
}

// rescope is what a free volume of ours needs so that its hold matches its
// class's reuseScope.
type rescope int

const (
	scopeFits rescope = iota
	// scopeHold: a namespace-scoped volume free to any claim (freed before
	// its class was scoped, or its claimRef cleared by hand) is held for the
	// namespace of its last claim again; one held or reserved by its last
	// claim's name under keyPolicy Require (set since) is held by a name no
	// claim has instead.
	scopeHold
	// scopeLetGo: a hold the class no longer asks for (it was recreated
	// with reuseScope cluster) is dropped, unless a reservation still runs;
	// its end drops both.
	scopeLetGo
)

// rescopeOf says whether pv, free, needs its hold changed, and for a hold,
// the namespace and name of the last claim it names. class is pv's
// StorageClass as the cache has it now.
func (p policy) rescopeOf(pv *corev1.PersistentVolume, class *storagev1.StorageClass) (rescope, string, string) {
	if pv.DeletionTimestamp != nil || pv.Status.Phase != corev1.VolumeAvailable || pools.Scrubbing(pv) {
		return scopeFits, "", ""
	}
	_, kept := p.keepsAssociation(pv, class)
	_, held := pools.HeldFor(pv)
	switch {
	case pv.Spec.ClaimRef == nil && kept && pools.NamespaceScoped(class, p.provisionerName):
		ns, name, ok := strings.Cut(pv.Annotations[wellknown.LastClaim], "/")
		if !ok || ns == "" || name == "" {
			return scopeFits, "", "" // never bound: belongs to no namespace yet
		}
		return scopeHold, ns, p.heldName(class, pv.Name, name)
	case (held || pools.Reserved(pv)) && kept && pv.Labels[wellknown.VolumeManagedBy] == p.controllerID &&
		pools.KeyRequired(class, p.provisionerName) && pv.Spec.ClaimRef.Name != wellknown.HeldClaim(pv.Name):
		return scopeHold, pv.Spec.ClaimRef.Namespace, wellknown.HeldClaim(pv.Name)
	case held && pv.Labels[wellknown.VolumeManagedBy] == p.controllerID && !pools.Reserved(pv) && class != nil && !pools.NamespaceScoped(class, p.provisionerName):
		return scopeLetGo, "", ""
	}
	return scopeFits, "", ""
}

// reservedUntil reports whether pv is a volume this releaser reserved for
// its last claim and still holds so (claimRef by namespace and name only,
// nobody bound it since), and until when. A reservation whose time cannot be
// read ends at once: the volume is the pool's.
func reservedUntil(pv *corev1.PersistentVolume, id string) (time.Time, bool) {
	if !pools.Reserved(pv) || pv.Labels[wellknown.VolumeManagedBy] != id || pv.DeletionTimestamp != nil {
		return time.Time{}, false
	}
	until, err := time.Parse(time.RFC3339, pv.Annotations[wellknown.ReservedUntil])
	if err != nil {
		return time.Time{}, true
	}
	return until, true
}

// sameClaim reports whether claim is the one ref points at. A claim recreated
// with the namespace and name of a deleted one has a new UID: it is another
// claim. A ref without UID (a volume pre-bound by name) points at whichever
// claim has that name.
func sameClaim(ref *corev1.ObjectReference, claim *corev1.PersistentVolumeClaim) bool {
	return ref.Namespace == claim.Namespace && ref.Name == claim.Name && (ref.UID == "" || ref.UID == claim.UID)
}

// deletionReported reports whether claim, taken from a DELETED event of the
// managed-claims watch, was deleted rather than merely stripped of the
// managed-by label: a label-selected watch reports both as DELETED, with the
// claim's last content. A deleted claim always shows a deletionTimestamp
// there, because in-use protection gives every claim a finalizer and the API
// server removes it when the last finalizer goes, without storing that last
// change. The one thing this cannot tell apart, a terminating claim that
// lost the label, is harmless: its volume is released only once Released,
// and the PV controller checks with the API server that the claim is gone
// before it marks a volume Released. A claim without deletionTimestamp
// (deleted without finalizers, or relabelled) is left to a live lookup.
func deletionReported(claim *corev1.PersistentVolumeClaim) bool {
	return claim.DeletionTimestamp != nil
}
