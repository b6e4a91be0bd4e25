// Package eviction is the pools' one eviction policy: which members may
// be evicted at all, which go when a pool is idle, above its maximum or
// above its byte watermarks (the pool manager decides), and which one goes
// to make room for a claim at the maximum (the provisioner decides). Pure
// functions over members, with one clock of last use.
package eviction

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/reclaimable/reclaimable/apis/reclaimable/v1alpha1"
	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// Eviction is a member to remove from its pool with its data, why (a
// wellknown.Evict* cause), and the event that says so on the pool.
type Eviction struct {
	PV      *corev1.PersistentVolume
	Cause   string
	Message string
}

// Rules are a pool's eviction settings, and what its members hold.
type Rules struct {
	After        *metav1.Duration
	Shrink       bool
	Limit        int // maxVolumes, 0 for none
	MinAvailable int
	High, Low    *resource.Quantity
	Usage        []v1alpha1.MemberUsage
}

// Any reports whether the rules evict anything on their own.
func (r Rules) Any() bool { return r.After != nil || r.Shrink || r.High != nil }

// LastUsed is when pv was last returned to the pool (the releaser's
// released-at: binds by the PV controller record nothing the controllers
// could read), or made, if no claim has had it since; rounded up to the end
// of its second, which is all the annotation and the object keep, so that
// no member is taken for idle sooner than it was. It is the one clock of
// every eviction.
func LastUsed(pv *corev1.PersistentVolume) time.Time {
	if t, err := time.Parse(time.RFC3339, pv.Annotations[wellknown.ReleasedAt]); err == nil {
		return t.Add(time.Second)
	}
	return pv.CreationTimestamp.Time.Add(time.Second)
}

// ByLastUse orders pvs least recently used first, then by name.
func ByLastUse(pvs []*corev1.PersistentVolume) {
	slices.SortFunc(pvs, compareLastUse)
}

func compareLastUse(a, b *corev1.PersistentVolume) int {
	if c := LastUsed(a).Compare(LastUsed(b)); c != 0 {
		return c
	}
	return cmp.Compare(a.Name, b.Name)
}

// Unclaimed reports whether no claim has pv or is being given it: it is
// Available, and its claimRef names no claim's UID.
func Unclaimed(pv *corev1.PersistentVolume) bool {
	ref := pv.Spec.ClaimRef
	return pv.Status.Phase == corev1.VolumeAvailable && (ref == nil || ref.UID == "")
}

// Evictable reports whether pv may be fenced for eviction: a member no
// claim has or is being given, not pre-bound by an administrator, not
// scrubbing, not being made, not being deleted or evicted, Available.
func Evictable(pv *corev1.PersistentVolume) bool {
	return pv.DeletionTimestamp == nil && Unclaimed(pv) && !pools.PreBound(pv) &&
		!pools.Scrubbing(pv) && !pools.StoragePending(pv) && !pools.Evicting(pv)
}

// Victim returns the member of members to evict so that a claim that no
// free member fits gets a new volume at the pool's maximum (evictForClaims):
// the least recently used free member (it fits no claim waiting, or it
// would have been taken), else the least recently used one held for
// another namespace or reserved by the releaser for another claim's name,
// never one an administrator pre-bound; nil when none may go.
func Victim(members []*corev1.PersistentVolume) *corev1.PersistentVolume {
	tier := func(pv *corev1.PersistentVolume) int {
		if pools.StateOf(pv) == pools.StateFree {
			return 0
		}
		return 1
	}
	var best *corev1.PersistentVolume
	for _, pv := range members {
		switch pools.StateOf(pv) {
		case pools.StateFree, pools.StateHeld, pools.StateReserved:
		default:
			continue
		}
		// An administrator's pre-bind is no reservation of ours to end.
		if !Evictable(pv) {
			continue
		}
		if best == nil {
			best = pv
			continue
		}
		if c := cmp.Compare(tier(pv), tier(best)); c < 0 || c == 0 && compareLastUse(pv, best) < 0 {
			best = pv
		}
	}
	return best
}

// Plan returns the members of a pool to evict now: those above its
// maximum (Shrink), those idle for After, those above the byte watermarks,
// each member once; and when to look again for the next idle one.
func Plan(members []*corev1.PersistentVolume, r Rules, now time.Time) ([]Eviction, time.Duration) {
	var out []Eviction
	// rest are the members not chosen yet: a set, since a large pool may
	// see thousands chosen at once.
	rest := func() []*corev1.PersistentVolume {
		chosen := make(map[string]bool, len(out))
		for _, e := range out {
			chosen[e.PV.Name] = true
		}
		return slices.DeleteFunc(slices.Clone(members), func(pv *corev1.PersistentVolume) bool { return chosen[pv.Name] })
	}
	if r.Shrink && r.Limit > 0 {
		out = AboveMaximum(members, r.Limit)
	}
	var next time.Duration
	if r.After != nil {
		var more []Eviction
		more, next = Idle(rest(), r.After.Duration, r.MinAvailable, now)
		out = append(out, more...)
	}
	if r.High != nil && r.Low != nil {
		out = append(out, AboveBytes(rest(), r.Usage, r.High.Value(), r.Low.Value(), r.MinAvailable)...)
	}
	return out, next
}

// Idle returns the members to evict now because no claim has had them
// for after: free and held ones, least recently used first, keeping
// minAvailable free members. A reserved member waits for its reservation
// to end. It also returns how soon the next member comes due, 0 if none
// will without a change.
func Idle(members []*corev1.PersistentVolume, after time.Duration, minAvailable int, now time.Time) ([]Eviction, time.Duration) {
	var idle []*corev1.PersistentVolume
	free := 0
	for _, pv := range members {
		switch pools.StateOf(pv) {
		case pools.StateFree:
			free++
			idle = append(idle, pv)
		case pools.StateHeld:
			idle = append(idle, pv)
		}
	}
	ByLastUse(idle)
	var out []Eviction
	var next time.Duration
	spare := free - minAvailable
	for _, pv := range idle {
		isFree := pools.StateOf(pv) == pools.StateFree
		if isFree && spare <= 0 {
			continue
		}
		unused := now.Sub(LastUsed(pv))
		if unused < after {
			if wait := after - unused; next == 0 || wait < next {
				next = wait
			}
			continue
		}
		if isFree {
			spare--
		}
		out = append(out, Eviction{PV: pv, Cause: wellknown.EvictIdle, Message: fmt.Sprintf(
			"Evicted volume %s (%s), with its data: no claim has had it for %s (evictAfter %s)", pv.Name, pools.StateOf(pv), unused.Truncate(time.Second), after)})
	}
	return out, next
}

// AboveMaximum returns the members to evict so that the pool has at most
// limit members, those being evicted aside: free and held ones only, the
// largest first (the most storage back), then the least recently used.
// The rest of the surplus waits for members to be freed.
func AboveMaximum(members []*corev1.PersistentVolume, limit int) []Eviction {
	var candidates []*corev1.PersistentVolume
	count := 0
	for _, pv := range members {
		switch pools.StateOf(pv) {
		case pools.StateEvicting:
			continue
		case pools.StateFree, pools.StateHeld:
			candidates = append(candidates, pv)
		}
		count++
	}
	over := count - limit
	if over <= 0 {
		return nil
	}
	slices.SortFunc(candidates, func(a, b *corev1.PersistentVolume) int {
		ca, cb := capacity(a), capacity(b)
		if c := cb.Cmp(ca); c != 0 {
			return c
		}
		return compareLastUse(a, b)
	})
	var out []Eviction
	for _, pv := range candidates[:min(over, len(candidates))] {
		c := capacity(pv)
		out = append(out, Eviction{PV: pv, Cause: wellknown.EvictAboveMaximum, Message: fmt.Sprintf(
			"Evicted volume %s (%s, %s), with its data: the pool has %d members, above maxVolumes %d (shrinkToMaximum)", pv.Name, pools.StateOf(pv), c.String(), count, limit)})
	}
	return out
}

// Surplus is how many members the pool has above limit, those being
// evicted aside; 0 without a maximum (limit 0).
func Surplus(members []*corev1.PersistentVolume, limit int) int {
	if limit <= 0 {
		return 0
	}
	count := 0
	for _, pv := range members {
		if pools.StateOf(pv) != pools.StateEvicting {
			count++
		}
	}
	return max(0, count-limit)
}

// AboveBytes returns the members to evict while the bytes the measured
// members hold are above high: free and held ones, least recently used
// first, until the sum is at most high, and on while removing the next
// would leave at least low; never below minAvailable free members. Only
// members counts: one already chosen for eviction holds nothing any more.
func AboveBytes(members []*corev1.PersistentVolume, usage []v1alpha1.MemberUsage, high, low int64, minAvailable int) []Eviction {
	in := make(map[string]bool, len(members))
	for _, pv := range members {
		in[pv.Name] = true
	}
	bytes := map[string]int64{}
	var sum int64
	for _, u := range usage {
		if in[u.Volume] {
			bytes[u.Volume] = u.Bytes
			sum += u.Bytes
		}
	}
	if sum <= high {
		return nil
	}
	var candidates []*corev1.PersistentVolume
	free := 0
	for _, pv := range members {
		state := pools.StateOf(pv)
		if state == pools.StateFree {
			free++
		}
		if _, measured := bytes[pv.Name]; measured && (state == pools.StateFree || state == pools.StateHeld) {
			candidates = append(candidates, pv)
		}
	}
	ByLastUse(candidates)
	var out []Eviction
	spare := free - minAvailable
	for _, pv := range candidates {
		if sum <= high && sum-bytes[pv.Name] < low {
			break
		}
		isFree := pools.StateOf(pv) == pools.StateFree
		if isFree && spare <= 0 {
			continue
		}
		if isFree {
			spare--
		}
		before := sum
		sum -= bytes[pv.Name]
		out = append(out, Eviction{PV: pv, Cause: wellknown.EvictAboveBytes, Message: fmt.Sprintf(
			"Evicted volume %s (%s, %s used), with its data: the pool's members held %s, above evictAboveBytes %s (down toward evictDownToBytes %s)",
			pv.Name, pools.StateOf(pv), quantity(bytes[pv.Name]), quantity(before), quantity(high), quantity(low))})
	}
	return out
}

func quantity(n int64) string { return resource.NewQuantity(n, resource.BinarySI).String() }

func capacity(pv *corev1.PersistentVolume) resource.Quantity {
	return pv.Spec.Capacity[corev1.ResourceStorage]
}
