package match

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/internal/wellknown"
	"github.com/reclaimable/reclaimable/provisioner/backend"
)

// This file holds which members a claim may take, in what order it tries
// them, and how the pool stands for it.

// Rules are the class's parameters that decide who may have a member.
type Rules struct {
	// Namespaced: reuseScope namespace.
	Namespaced bool
	// Scrub: onRelease Scrub. A Released member waits for the releaser to
	// hand it to the scrub; no claim may have its data.
	Scrub bool
	// Reserving: reserveFor above 0.
	Reserving bool
	// KeyRequired: keyPolicy Require. A member last used under another
	// key than the claim's is no candidate.
	KeyRequired bool
}

// RulesOf are the parameters of a class that decide who may have a member.
func RulesOf(p *backend.Params) Rules {
	return Rules{Namespaced: p.Namespaced, Reserving: p.ReserveFor > 0, Scrub: p.Scrub, KeyRequired: p.KeyRequired}
}

// maxTime sorts after any reservation's end.
var maxTime = time.Unix(1<<62, 0)

// State counts a pool's members for events and decisions.
type State struct {
	Members int
	InUse   int
	// OtherNamespace counts free members held for other namespaces
	// (reuseScope namespace).
	OtherNamespace int
	// OtherKey counts free members last used under another key than the
	// claim's (keyPolicy Require).
	OtherKey int
	// Unfit counts free members that do not fit the claim, by reason.
	Unfit map[string]int
	// Returning is the member still bound to the earlier claim of the
	// claim's name, if it fits the claim: the claim waits for it.
	Returning *corev1.PersistentVolume
	// Crossable, under scrubAcrossNamespaces, is the member held for
	// another namespace that fits the claim and was released longest ago:
	// emptied, it may go to the claim. Nil when there is none, or one is
	// being emptied already.
	Crossable *corev1.PersistentVolume
	// AtShare is the size of the share of the claim's namespace when it is
	// at maxVolumesPerNamespace, 0 below: a new volume may then only take
	// the place of a member of the share (evictForClaims).
	AtShare int
}

func (s State) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d volumes, %d in use, %d free", s.Members, s.InUse, s.Members-s.InUse-s.OtherNamespace-s.OtherKey)
	if s.OtherNamespace > 0 {
		fmt.Fprintf(&b, ", %d free for other namespaces only", s.OtherNamespace)
	}
	if s.OtherKey > 0 {
		fmt.Fprintf(&b, ", %d free for other keys only (%s %s)", s.OtherKey, wellknown.KeyPolicy, wellknown.KeyPolicyRequire)
	}
	if len(s.Unfit) > 0 {
		reasons := make([]string, 0, len(s.Unfit))
		for r, n := range s.Unfit {
			reasons = append(reasons, fmt.Sprintf("%d by %s", n, r))
		}
		slices.Sort(reasons)
		fmt.Fprintf(&b, " (not fitting: %s)", strings.Join(reasons, ", "))
	}
	return b.String()
}

// Candidates returns the members claim, of cache key key, may take, best
// first, and the state of the pool. Released members still need their
// claim confirmed gone. Members reserved for other claims come last, the
// oldest reservation first: they are taken only when nothing else fits,
// before the pool grows; but one reserved for a claim of the claim's own
// key ranks with its key (rank): with generated claim names, the name it
// is reserved for never comes back, and the key is what the data is for.
//
// Under reserveFor a member still Released for a claim of another name is
// about to be reserved for that name: it counts as the newest reservation.
func Candidates(members []*corev1.PersistentVolume, claim *corev1.PersistentVolumeClaim, key string, rules Rules, node *corev1.Node, selector labels.Selector) ([]*corev1.PersistentVolume, State) {
	state := State{Members: len(members), Unfit: map[string]int{}}
	var out, reserved []*corev1.PersistentVolume
	for _, pv := range members {
		a := AvailabilityOf(pv, claim, rules.Namespaced)
		if rules.Scrub && (a == FreeIfGone || a == Returning) {
			// Released, it goes to the releaser, which may empty it.
			a = InUse
		}
		if rules.KeyRequired && a != InUse && a != OtherNamespace && !KeyFits(pv, key) {
			a = OtherKey
		}
		switch a {
		case InUse:
			state.InUse++
			continue
		case Returning:
			state.InUse++
			if state.Returning == nil && Misfit(pv, claim, node, selector) == "" {
				state.Returning = pv
			}
			continue
		case OtherNamespace:
			state.OtherNamespace++
			continue
		case OtherKey:
			state.OtherKey++
			continue
		}
		if reason := Misfit(pv, claim, node, selector); reason != "" {
			state.Unfit[reason]++
			continue
		}
		if (a == ReservedForOther || (rules.Reserving && a == FreeIfGone && LastClaim(pv) != ClaimName(claim))) && !sameKey(pv, key) {
			reserved = append(reserved, pv)
			continue
		}
		out = append(out, pv)
	}
	rank(out, claim, key)
	until := func(pv *corev1.PersistentVolume) time.Time {
		if pv.Status.Phase == corev1.VolumeReleased {
			return maxTime
		}
		t, _ := time.Parse(time.RFC3339, pv.Annotations[wellknown.ReservedUntil])
		return t
	}
	slices.SortStableFunc(reserved, func(a, b *corev1.PersistentVolume) int {
		if c := until(a).Compare(until(b)); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	return append(out, reserved...), state
}

// rank orders the volumes claim, of cache key key, may take: last used by
// a claim of the same namespace and name (a recreated claim finds its data
// again), then under the same key, then by the same namespace; within
// each, one reserved for another claim's name last, then the smallest,
// then the most recently released (its data is the freshest), then by
// name so that the order is stable.
func rank(pvs []*corev1.PersistentVolume, claim *corev1.PersistentVolumeClaim, key string) {
	name := ClaimName(claim)
	score := func(pv *corev1.PersistentVolume) int {
		last := LastClaim(pv)
		switch {
		case last == name:
			return 0
		case sameKey(pv, key):
			return 1
		case strings.HasPrefix(last, claim.Namespace+"/"):
			return 2
		}
		return 3
	}
	reservedForOther := func(pv *corev1.PersistentVolume) int {
		if pools.Reserved(pv) && LastClaim(pv) != name {
			return 1
		}
		return 0
	}
	slices.SortStableFunc(pvs, func(a, b *corev1.PersistentVolume) int {
		if c := cmp.Compare(score(a), score(b)); c != 0 {
			return c
		}
		if c := cmp.Compare(reservedForOther(a), reservedForOther(b)); c != 0 {
			return c
		}
		qa, qb := a.Spec.Capacity[corev1.ResourceStorage], b.Spec.Capacity[corev1.ResourceStorage]
		if c := qa.Cmp(qb); c != 0 {
			return c
		}
		// A member still Released costs a read of its claim and races the
		// releaser, which is returning it at that moment.
		if c := cmp.Compare(stillReleased(a), stillReleased(b)); c != 0 {
			return c
		}
		if c := releasedAt(b).Compare(releasedAt(a)); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
}

func stillReleased(pv *corev1.PersistentVolume) int {
	if pv.Status.Phase == corev1.VolumeReleased {
		return 1
	}
	return 0
}

// Crossable returns the member of members held for a namespace other than
// claim's that fits claim on node and was released longest ago, for a
// scrub that lets claim have it; nil when none fits, or when a member is
// being emptied already (it is free soon, and wakes the claims waiting).
func Crossable(members []*corev1.PersistentVolume, claim *corev1.PersistentVolumeClaim, node *corev1.Node, selector labels.Selector) *corev1.PersistentVolume {
	var best *corev1.PersistentVolume
	for _, pv := range members {
		if pools.Scrubbing(pv) {
			return nil
		}
		if AvailabilityOf(pv, claim, true) != OtherNamespace || pools.Reserved(pv) || Misfit(pv, claim, node, selector) != "" {
			continue
		}
		if best == nil || releasedAt(pv).Before(releasedAt(best)) || releasedAt(pv).Equal(releasedAt(best)) && pv.Name < best.Name {
			best = pv
		}
	}
	return best
}
