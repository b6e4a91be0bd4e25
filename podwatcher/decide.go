package podwatcher

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// The decisions of the podwatcher that need no client and no cache, so that
// every state is a row in a table test. decideGate (gate.go) is the other.

// claimAction is what becomes of a managed claim.
type claimAction int

const (
	// leaveClaim: not ours to delete, or not yet known to be orphaned.
	leaveClaim claimAction = iota
	// waitForCollector: the garbage collector is expected to delete the
	// claim; look again once the grace has passed.
	waitForCollector
	// deleteClaim: the owner is gone and nobody else will delete the claim.
	deleteClaim
)

// claimVerdict is decideClaim's answer; wait is set with waitForCollector.
type claimVerdict struct {
	action claimAction
	wait   time.Duration
}

// decideClaim judges a claim of this controller ID whose owner was found
// gone at goneSince (ownerGone false: it exists, or cannot be told). A claim
// that still references its owner is the garbage collector's to delete:
// deleting it too would cost a request and an event, and fail with a
// conflict whenever the collector is first; only a collector that has not
// acted within grace is stood in for. A claim without that reference (the
// owner was deleted with propagationPolicy Orphan, or the reference was
// removed) is deleted at once.
func decideClaim(claim *corev1.PersistentVolumeClaim, controllerID string, ownerGone bool, goneSince, now time.Time, grace time.Duration) claimVerdict {
	if claim.Labels[wellknown.ClaimManagedBy] != controllerID || claim.DeletionTimestamp != nil || !ownerGone {
		return claimVerdict{action: leaveClaim}
	}
	if referencesOwner(claim) {
		if wait := goneSince.Add(grace).Sub(now); wait > 0 {
			return claimVerdict{action: waitForCollector, wait: wait}
		}
	}
	return claimVerdict{action: deleteClaim}
}
