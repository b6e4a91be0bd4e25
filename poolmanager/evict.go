package poolmanager

import (
	"cmp"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/reclaimable/reclaimable/apis/reclaimable/v1alpha1"
	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// Which members to evict is the pools' one eviction policy
// (internal/eviction); the status keeps what they held.

// usageOf lists what the free, held and reserved members held when they
// last came back to the pool, by volume name: measured now (measured), or
// before and kept in the status (prev), if of that same return.
func usageOf(members []*corev1.PersistentVolume, measured map[string]v1alpha1.MemberUsage, prev []v1alpha1.MemberUsage) []v1alpha1.MemberUsage {
	before := make(map[string]v1alpha1.MemberUsage, len(prev))
	for _, u := range prev {
		before[u.Volume] = u
	}
	var out []v1alpha1.MemberUsage
	for _, pv := range members {
		switch pools.StateOf(pv) {
		case pools.StateFree, pools.StateHeld, pools.StateReserved:
		default:
			continue
		}
		returned := pv.Annotations[wellknown.ReleasedAt]
		if u, ok := measured[pv.Name]; ok && u.Returned == returned {
			out = append(out, u)
			continue
		}
		if u, ok := before[pv.Name]; ok && u.Returned == returned {
			out = append(out, u)
		}
	}
	slices.SortFunc(out, func(a, b v1alpha1.MemberUsage) int { return cmp.Compare(a.Volume, b.Volume) })
	return out
}
