package pools

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"

	"github.com/reclaimable/reclaimable/internal/wellknown"
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
	// StateScrubbing: released under onRelease Scrub (or marked by hand),
	// and not yet emptied; no claim may have it.
	StateScrubbing MemberState = "scrubbing"
	// StateEvicting: being removed from the pool with its data
	// (wellknown.Evicting); no claim may have it.
	StateEvicting MemberState = "evicting"
	// StateOther: Failed, being deleted, or made ahead with its storage
	// not made yet; counted in the total only.
	StateOther MemberState = "other"
)

// MemberStates lists the states in the order the status and docs give them.
var MemberStates = []MemberState{StateFree, StateHeld, StateReserved, StateBound, StateReleased, StateScrubbing, StateEvicting, StateOther}

// StateOf says what pv is doing. A reservation and a hold are read before
// the phase: the releaser writes them into a Released volume, which the PV
// controller makes Available a moment later.
func StateOf(pv *corev1.PersistentVolume) MemberState {
	ref := pv.Spec.ClaimRef
	switch {
	case Evicting(pv):
		return StateEvicting
	case pv.DeletionTimestamp != nil || pv.Status.Phase == corev1.VolumeFailed || StoragePending(pv):
		return StateOther
	case Scrubbing(pv):
		return StateScrubbing
	case Unissued(pv):
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

// Unissued reports whether pv is a member no claim has had since it was
// made ahead of claims, or emptied by a scrub under reuseScope namespace:
// its claimRef names a claim that never exists (AheadClaimRef), so that the
// PV controller binds it to no claim and the provisioner alone issues it,
// minding keys and shares.
func Unissued(pv *corev1.PersistentVolume) bool {
	ref := pv.Spec.ClaimRef
	return ref != nil && ref.UID == "" && ref.Namespace == AheadNamespace && ref.Name == wellknown.MadeAheadClaim(pv.Name)
}

// AheadClaimRef is the claimRef of pv, a member no claim has had yet (made
// ahead, or emptied by a scrub): wellknown.MadeAheadClaim in AheadNamespace,
// without UID, a claim that never exists, so that the PV controller binds
// it to nobody.
func AheadClaimRef(pv string) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: AheadNamespace, Name: wellknown.MadeAheadClaim(pv)}
}

// AheadNamespace holds the claims named by members made ahead; none is
// ever made. kube-system: who may create claims there may do far more.
const AheadNamespace = metav1.NamespaceSystem

// FitsNode reports whether pv may be used on node: its node affinity, if
// any, admits the node.
func FitsNode(pv *corev1.PersistentVolume, node *corev1.Node) bool {
	if pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil {
		return true
	}
	ok, err := corev1helpers.MatchNodeSelectorTerms(node, pv.Spec.NodeAffinity.Required)
	return err == nil && ok
}

// SetManagedBy adds to labels the one that has the releaser of controllerID
// look after a volume (wellknown.VolumeManagedBy); none without an ID.
func SetManagedBy(labels map[string]string, controllerID string) map[string]string {
	if controllerID == "" {
		return labels
	}
	if labels == nil {
		labels = map[string]string{}
	}
	labels[wellknown.VolumeManagedBy] = controllerID
	return labels
}

// MayBeMember reports whether pv may be a member of one of provisioner's
// pools: one it made, or one labelled into a static pool, kept on release
// (Retain). Which class it serves is the class's business.
func MayBeMember(pv *corev1.PersistentVolume, provisioner string) bool {
	return pv.Spec.PersistentVolumeReclaimPolicy == corev1.PersistentVolumeReclaimRetain &&
		(pv.Annotations[wellknown.ProvisionedBy] == provisioner || pv.Labels[wellknown.Pool] != "")
}

// StoragePending reports whether pv, made ahead, still waits for its
// storage.
func StoragePending(pv *corev1.PersistentVolume) bool {
	_, pending := pv.Annotations[wellknown.StoragePending]
	return pending
}

// Scrubbing reports whether pv is to be emptied, or being emptied, before
// any claim may have it (wellknown.Scrub).
func Scrubbing(pv *corev1.PersistentVolume) bool {
	_, ok := pv.Annotations[wellknown.Scrub]
	return ok
}

// Evicting reports whether pv is being removed from its pool with its data
// (wellknown.Evicting).
func Evicting(pv *corev1.PersistentVolume) bool {
	_, ok := pv.Annotations[wellknown.Evicting]
	return ok
}

// ParseOnRelease reads the onRelease parameter: "" is Keep. An invalid
// value reads as Scrub, the side that leaks nothing, with the error.
func ParseOnRelease(s string) (string, error) {
	switch s {
	case "", wellknown.OnReleaseKeep:
		return wellknown.OnReleaseKeep, nil
	case wellknown.OnReleaseScrub, wellknown.OnReleaseScrubUnlessSucceeded:
		return s, nil
	}
	return wellknown.OnReleaseScrub, fmt.Errorf("parameter %q must be %q (the next claim gets the data), %q (the volume is emptied first) or %q (emptied unless its consumer succeeded), not %q",
		wellknown.OnRelease, wellknown.OnReleaseKeep, wellknown.OnReleaseScrub, wellknown.OnReleaseScrubUnlessSucceeded, s)
}

// OnReleaseOf is what releasing a volume of class, a class of the
// provisioner named provisioner as its pool makes it, does to its data:
// Keep for any other class, since only that provisioner scrubs. An
// invalid value scrubs; the provisioner reports it on the class's claims.
func OnReleaseOf(class *storagev1.StorageClass, provisioner string) string {
	if class == nil || class.Provisioner != provisioner {
		return wellknown.OnReleaseKeep
	}
	onRelease, _ := ParseOnRelease(class.Parameters[wellknown.OnRelease])
	return onRelease
}
