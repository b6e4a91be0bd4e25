package match

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// This file holds what a member given to a claim was to it, and what a
// member is doing, for the metrics.

// IssueKind says how a member went to a claim, for the issues metric: to
// the claim that used it last (its namespace and name came back), to
// another claim, or new.
type IssueKind string

const (
	IssueSameClaim   IssueKind = "same-claim"
	IssueOtherMember IssueKind = "other-member"
	IssueNewVolume   IssueKind = "new-volume"
	// IssueMadeAhead: a member made ahead for minAvailable, its first claim.
	IssueMadeAhead IssueKind = "made-ahead"
)

// KeyResult says how a member issued to a claim stood to the claim's
// cache key, for the issues metric: one of the claim's key (own), of
// another key or of none (other), one no claim had (fresh: new, made
// ahead, or emptied by a scrub), or one that went to a claim without a
// key (none). Four values whatever the keys: never a label per key.
type KeyResult string

const (
	KeyOwn   KeyResult = "own"
	KeyOther KeyResult = "other"
	KeyFresh KeyResult = "fresh"
	KeyNone  KeyResult = "none"
)

// KeyResultOf is the KeyResult of cur, the update of old that issued it:
// the claim's key is what cur records (the take writes it), the member's
// what old did.
func KeyResultOf(old, cur *corev1.PersistentVolume) KeyResult {
	last, used := lastKey(old)
	key := cur.Annotations[wellknown.LastKey]
	switch {
	case !used:
		return KeyFresh
	case key == "":
		return KeyNone
	case last == key:
		return KeyOwn
	}
	return KeyOther
}

// IssuedNow reports whether cur, the update of a pool member old, gave it to
// a claim, and how. Whoever wrote the claim's UID into the claimRef (this
// provisioner, or the PV controller for a volume reserved by name) counts.
func IssuedNow(old, cur *corev1.PersistentVolume) (IssueKind, bool) {
	was, is := old.Spec.ClaimRef, cur.Spec.ClaimRef
	if is == nil || is.UID == "" || (was != nil && was.UID != "") {
		return "", false
	}
	switch {
	case pools.Unissued(old) && old.Annotations[wellknown.MadeAhead] != "":
		return IssueMadeAhead, true
	case LastClaim(old) == is.Namespace+"/"+is.Name:
		return IssueSameClaim, true
	}
	return IssueOtherMember, true
}

// MemberState is what a pool member is doing (pools.StateOf, as a
// VolumePool's status counts it), for the members gauge, and for a held or
// reserved one kept for a namespace (reuseScope namespace), that namespace.
func MemberState(pv *corev1.PersistentVolume) (state, namespace string) {
	namespace, _ = pools.HeldFor(pv)
	return string(pools.StateOf(pv)), namespace
}
