package poolmanager

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	corev1 "k8s.io/api/core/v1"

	"github.com/reclaimable/reclaimable/apis/reclaimable/v1alpha1"
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

// evictRules are a pool's eviction settings, and what its members hold.
type evictRules struct {
	after        *metav1.Duration
	shrink       bool
	limit        int // maxVolumes, 0 for none
	minAvailable int
	high, low    *resource.Quantity
	usage        []v1alpha1.MemberUsage
}

func (r evictRules) any() bool { return r.after != nil || r.shrink || r.high != nil }

// evictions returns the members of a pool to evict now: those above its
// maximum (shrink), those idle for after, those above the byte
// watermarks, each member once; and when to look again for the next idle
// one.
func evictions(members []*corev1.PersistentVolume, r evictRules, now time.Time) ([]eviction, time.Duration) {
	var out []eviction
	rest := func() []*corev1.PersistentVolume {
		return slices.DeleteFunc(slices.Clone(members), func(pv *corev1.PersistentVolume) bool {
			return slices.ContainsFunc(out, func(e eviction) bool { return e.pv.Name == pv.Name })
		})
	}
	if r.shrink && r.limit > 0 {
		out = aboveMaximum(members, r.limit)
	}
	var next time.Duration
	if r.after != nil {
		var more []eviction
		more, next = idle(rest(), r.after.Duration, r.minAvailable, now)
		out = append(out, more...)
	}
	if r.high != nil && r.low != nil {
		out = append(out, aboveBytes(rest(), r.usage, r.high.Value(), r.low.Value(), r.minAvailable)...)
	}
	return out, next
}

// usageOf lists what the free, held and reserved members held when they
// last came back to the pool, by volume name: measured now (measured), or
// before and kept in the status (prev), if of that same return.
func usageOf(members []*corev1.PersistentVolume, measured map[string]v1alpha1.MemberUsage, prev []v1alpha1.MemberUsage) []v1alpha1.MemberUsage {
	var out []v1alpha1.MemberUsage
	for _, pv := range members {
		switch controller.StateOf(pv) {
		case controller.StateFree, controller.StateHeld, controller.StateReserved:
		default:
			continue
		}
		returned := pv.Annotations[keys.ReleasedAt]
		if u, ok := measured[pv.Name]; ok && u.Returned == returned {
			out = append(out, u)
			continue
		}
		if i := slices.IndexFunc(prev, func(u v1alpha1.MemberUsage) bool { return u.Volume == pv.Name && u.Returned == returned }); i >= 0 {
			out = append(out, prev[i])
		}
	}
	slices.SortFunc(out, func(a, b v1alpha1.MemberUsage) int { return cmp.Compare(a.Volume, b.Volume) })
	return out
}

// aboveBytes returns the members to evict while the bytes the measured
// members hold are above high: free and held ones, least recently used
// first, until the sum is at most high, and on while removing the next
// would leave at least low; never below minAvailable free members. Only
// members counts: one already chosen for eviction holds nothing any more.
func aboveBytes(members []*corev1.PersistentVolume, usage []v1alpha1.MemberUsage, high, low int64, minAvailable int) []eviction {
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
		state := controller.StateOf(pv)
		if state == controller.StateFree {
			free++
		}
		if _, measured := bytes[pv.Name]; measured && (state == controller.StateFree || state == controller.StateHeld) {
			candidates = append(candidates, pv)
		}
	}
	byLastUse(candidates)
	var out []eviction
	spare := free - minAvailable
	for _, pv := range candidates {
		if sum <= high && sum-bytes[pv.Name] < low {
			break
		}
		isFree := controller.StateOf(pv) == controller.StateFree
		if isFree && spare <= 0 {
			continue
		}
		if isFree {
			spare--
		}
		before := sum
		sum -= bytes[pv.Name]
		out = append(out, eviction{pv: pv, cause: keys.EvictAboveBytes, message: fmt.Sprintf(
			"Evicted volume %s (%s, %s used), with its data: the pool's members held %s, above evictAboveBytes %s (down toward evictDownToBytes %s)",
			pv.Name, controller.StateOf(pv), quantity(bytes[pv.Name]), quantity(before), quantity(high), quantity(low))})
	}
	return out
}

func quantity(n int64) string { return resource.NewQuantity(n, resource.BinarySI).String() }

// byLastUse orders pvs least recently used first, then by name.
func byLastUse(pvs []*corev1.PersistentVolume) {
	slices.SortFunc(pvs, func(a, b *corev1.PersistentVolume) int {
		if c := lastUsed(a).Compare(lastUsed(b)); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
}

// lastUsed is when pv was last returned to the pool (the releaser's
// released-at: binds by the PV controller record nothing the provisioner
// could read), or made, if no claim has had it since; rounded up to the
// end of its second, which is all the annotation and the object keep, so
// that no member is taken for idle sooner than it was.
func lastUsed(pv *corev1.PersistentVolume) time.Time {
	if t, err := time.Parse(time.RFC3339, pv.Annotations[keys.ReleasedAt]); err == nil {
		return t.Add(time.Second)
	}
	return pv.CreationTimestamp.Time.Add(time.Second)
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
	byLastUse(idle)
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

// aboveMaximum returns the members to evict so that the pool has at most
// limit members, those being evicted aside: free and held ones only, the
// largest first (the most storage back), then the least recently used.
// The rest of the surplus waits for members to be freed.
func aboveMaximum(members []*corev1.PersistentVolume, limit int) []eviction {
	var candidates []*corev1.PersistentVolume
	count := 0
	for _, pv := range members {
		switch controller.StateOf(pv) {
		case controller.StateEvicting:
			continue
		case controller.StateFree, controller.StateHeld:
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
		if c := lastUsed(a).Compare(lastUsed(b)); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	var out []eviction
	for _, pv := range candidates[:min(over, len(candidates))] {
		c := capacity(pv)
		out = append(out, eviction{pv: pv, cause: keys.EvictAboveMaximum, message: fmt.Sprintf(
			"Evicted volume %s (%s, %s), with its data: the pool has %d members, above maxVolumes %d (shrinkToMaximum)", pv.Name, controller.StateOf(pv), c.String(), count, limit)})
	}
	return out
}

func capacity(pv *corev1.PersistentVolume) resource.Quantity {
	return pv.Spec.Capacity[corev1.ResourceStorage]
}

// surplus is how many members the pool has above limit, those being
// evicted aside; 0 without a maximum (limit 0).
func surplus(members []*corev1.PersistentVolume, limit int) int {
	if limit <= 0 {
		return 0
	}
	count := 0
	for _, pv := range members {
		if controller.StateOf(pv) != controller.StateEvicting {
			count++
		}
	}
	return max(0, count-limit)
}
