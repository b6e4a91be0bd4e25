package match

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// This file holds what a member tells of its last use: the claim it went
// to, when it came back, and the cache key it was issued under.

// ClaimName is "<namespace>/<name>" of claim, as wellknown.LastClaim records it.
func ClaimName(claim *corev1.PersistentVolumeClaim) string {
	return claim.Namespace + "/" + claim.Name
}

// LastClaim is "<namespace>/<name>" of the claim pv was last issued to. A
// Released volume still names it in its claimRef; a volume the releaser
// returned to the pool carries it in an annotation.
func LastClaim(pv *corev1.PersistentVolume) string {
	if pools.Unissued(pv) {
		return "" // no claim had it yet
	}
	if ref := pv.Spec.ClaimRef; ref != nil && ref.Name != "" && ref.Name != wellknown.HeldClaim(pv.Name) {
		return ref.Namespace + "/" + ref.Name
	}
	return pv.Annotations[wellknown.LastClaim]
}

// releasedAt is when pv was last released, or the zero time if unknown. A
// Released volume became so at its last phase transition; an Available one
// carries the time the releaser released it.
func releasedAt(pv *corev1.PersistentVolume) time.Time {
	if pv.Status.Phase != corev1.VolumeReleased {
		if t, err := time.Parse(time.RFC3339, pv.Annotations[wellknown.ReleasedAt]); err == nil {
			return t
		}
	}
	if t := pv.Status.LastPhaseTransitionTime; t != nil {
		return t.Time
	}
	return time.Time{}
}

// lastKey is the cache key pv was last issued under, and whether it was
// issued at all since it was made or emptied: a volume never issued (or
// scrubbed since) holds nobody's data and fits every key.
func lastKey(pv *corev1.PersistentVolume) (string, bool) {
	if LastClaim(pv) == "" {
		return "", false
	}
	return pv.Annotations[wellknown.LastKey], true
}

// KeyFits reports whether pv may go to a claim of key under keyPolicy
// Require: it was last issued under that key (none, for a claim without
// one), or never.
func KeyFits(pv *corev1.PersistentVolume, key string) bool {
	last, used := lastKey(pv)
	return !used || last == key
}

// sameKey reports whether pv was last issued under key, a key of a claim
// ("" none: a claim without a key prefers no member for it).
func sameKey(pv *corev1.PersistentVolume, key string) bool {
	last, used := lastKey(pv)
	return key != "" && used && last == key
}
