package controller

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/reclaimable/reclaimable/internal/keys"
)

// MemberState is what a pool member is doing, read from the volume alone.
// It is defined once, here: a VolumePool's status, the members gauge and
// the invariant checker all count with StateOf.
type MemberState string

const (
	// StateFree: no claim named (Available, or about to be).
	StateFree MemberState = "free"
	// StateHeld: free for the claims of one namespace only (reuseScope
	// namespace): a claimRef by namespace and name, no UID, and the
	// held-for-namespace annotation.
	StateHeld MemberState = "held"
	// StateReserved: kept for one claim's namespace and name, by the
	// releaser (reserveFor) or pre-bound by an administrator: a claimRef
	// without UID, without a hold.
	StateReserved MemberState = "reserved"
	// StateBound: a claim's UID in the claimRef (Bound, or being bound).
	StateBound MemberState = "bound"
	// StateReleased: its claim is gone, and it is not back in the pool yet.
	StateReleased MemberState = "released"
	// StateOther: Failed, being deleted, or made ahead with its storage
	// not made yet; counted in the total only.
	StateOther MemberState = "other"
)

// MemberStates lists the states in the order the status and docs give them.
var MemberStates = []MemberState{StateFree, StateHeld, StateReserved, StateBound, StateReleased, StateOther}

// StateOf says what pv is doing. A reservation and a hold are read before
// the phase: the releaser writes them into a Released volume, which the PV
// controller makes Available a moment later.
func StateOf(pv *corev1.PersistentVolume) MemberState {
	ref := pv.Spec.ClaimRef
	switch {
	case pv.DeletionTimestamp != nil || pv.Status.Phase == corev1.VolumeFailed || StoragePending(pv):
		return StateOther
	case MadeAhead(pv):
		return StateFree
	case Reserved(pv):
		return StateReserved
	case ref != nil && ref.UID == "":
		if _, held := HeldFor(pv); held {
			return StateHeld
		}
		return StateReserved
	case pv.Status.Phase == corev1.VolumeReleased:
		return StateReleased
	case ref != nil:
		return StateBound
	}
	return StateFree
}

// MadeAhead reports whether pv was made ahead of any claim and no claim has
// had it yet: its claimRef still names keys.MadeAheadClaim.
func MadeAhead(pv *corev1.PersistentVolume) bool {
	ref := pv.Spec.ClaimRef
	_, marked := pv.Annotations[keys.MadeAhead]
	return marked && ref != nil && ref.UID == "" && ref.Name == keys.MadeAheadClaim(pv.Name)
}

// StoragePending reports whether pv, made ahead, still waits for its
// storage.
func StoragePending(pv *corev1.PersistentVolume) bool {
	_, pending := pv.Annotations[keys.StoragePending]
	return pending
}
