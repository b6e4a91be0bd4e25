package poolmanager

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/reclaimable/reclaimable/internal/controller"
	"github.com/reclaimable/reclaimable/internal/keys"
)

// eviction is a member to remove from its pool with its data, why (a
// keys.Evict* cause), and the event that says so on the pool.
type eviction struct {
	pv      *corev1.PersistentVolume
	cause   string
	message string
}

// lastUsed is when pv was last returned to the pool (the releaser's
// released-at: binds by the PV controller record nothing the provisioner
// could read), or made, if no claim has had it since.
func lastUsed(pv *corev1.PersistentVolume) time.Time {
	if t, err := time.Parse(time.RFC3339, keys.Value(pv.Annotations, keys.ReleasedAt)); err == nil {
		return t
	}
	return pv.CreationTimestamp.Time
}

// idle returns the members to evict now because no claim has had them
// for after: free and held ones, least recently used first, keeping
// minAvailable free members. A reserved member waits for its reservation
// to end. It also returns how soon the next member comes due, 0 if none
// will without a change.
func idle(members []*corev1.PersistentVolume, after time.Duration, minAvailable int, now time.Time) ([]eviction, time.Duration) {
	var idle []*corev1.PersistentVolume
	free := 0
	for _, pv := range members {
		switch controller.StateOf(pv) {
		case controller.StateFree:
			free++
			idle = append(idle, pv)
		case controller.StateHeld:
			idle = append(idle, pv)
		}
	}
	slices.SortFunc(idle, func(a, b *corev1.PersistentVolume) int {
		if c := lastUsed(a).Compare(lastUsed(b)); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	var out []eviction
	var next time.Duration
	spare := free - minAvailable
	for _, pv := range idle {
		isFree := controller.StateOf(pv) == controller.StateFree
		if isFree && spare <= 0 {
			continue
		}
		unused := now.Sub(lastUsed(pv))
		if unused < after {
			if wait := after - unused; next == 0 || wait < next {
				next = wait
			}
			continue
		}
		if isFree {
			spare--
		}
		out = append(out, eviction{pv: pv, cause: keys.EvictIdle, message: fmt.Sprintf(
			"Evicted volume %s (%s), with its data: no claim has had it for %s (evictAfter %s)", pv.Name, controller.StateOf(pv), unused.Truncate(time.Second), after)})
	}
	return out, next
}
