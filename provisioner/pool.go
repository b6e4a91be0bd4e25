package provisioner

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/sets"
	volumehelpers "k8s.io/component-helpers/storage/volume"
	"k8s.io/utils/ptr"

	"github.com/reclaimable/reclaimable/internal/keys"
	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/provisioner/backend"
)

// This file holds the decisions of the provisioner, free of any I/O: which
// volumes form a class's pool, which of them a claim may take, in what order
// it tries them, and which selectors it understands.

// isMember reports whether pv belongs to the pool of class, whose backend
// says which of the class's volumes are in it. Only Retain volumes are
// pooled: a Delete volume is gone once released.
func isMember(pv *corev1.PersistentVolume, class string, pool backend.Class) bool {
	if volumehelpers.GetPersistentVolumeClass(pv) != class || pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimRetain {
		return false
	}
	return pool.IsMember(pv)
}

// availability says whether a pool member can be given to a claim.
type availability int

const (
	// inUse: bound, being bound, or reserved for another claim.
	inUse availability = iota
	// free: no claim (Available), or reserved by name for this very claim.
	free
	// freeIfGone: Released; free once the API server confirms that the
	// claim it names is gone.
	freeIfGone
	// reservedForOther: reserved by the releaser for another claim's name
	// (reserveFor); taken only when no other member fits, so that a
	// reservation never makes a claim wait or the pool grow.
	reservedForOther
	// otherNamespace: free, but under reuseScope namespace for claims of
	// the namespace it was last bound in, not this claim's.
	otherNamespace
	// otherKey: free, but last used under another cache key than the
	// claim's, which keyPolicy Require keeps it from.
	otherKey
	// returning: still bound to an earlier claim of this claim's namespace
	// and name, which is therefore gone (names are unique): the PV
	// controller is about to release it, with the data the claim left.
	returning
)

// availabilityOf says whether pv can be given to claim; namespaced is the
// class's reuseScope namespace.
func availabilityOf(pv *corev1.PersistentVolume, claim *corev1.PersistentVolumeClaim, namespaced bool) availability {
	a := availabilityByClaimRef(pv, claim)
	if namespaced && a != inUse {
		if ns := lastNamespace(pv); ns != "" && ns != claim.Namespace {
			return otherNamespace
		}
	}
	return a
}

// poolRules are the class's parameters that decide who may have a member.
type poolRules struct {
	// namespaced: reuseScope namespace.
	namespaced bool
	// scrub: onRelease Scrub. A Released member waits for the releaser to
	// hand it to the scrub; no claim may have its data.
	scrub bool
	// reserving: reserveFor above 0.
	reserving bool
	// keyRequired: keyPolicy Require. A member last used under another
	// key than the claim's is no candidate.
	keyRequired bool
}

// maxTime sorts after any reservation's end.
var maxTime = time.Unix(1<<62, 0)

// issuable reports whether a member of availability a may be issued to the
// claim it was judged for.
func issuable(a availability) bool { return a == free || a == freeIfGone || a == reservedForOther }

// lastNamespace is the namespace pv was last bound in: its claimRef's, or
// with none, its last claim's; "" for a volume never bound, which belongs
// to no namespace yet.
func lastNamespace(pv *corev1.PersistentVolume) string {
	if pools.Unissued(pv) {
		return "" // its claimRef names no claim's namespace
	}
	if ref := pv.Spec.ClaimRef; ref != nil {
		return ref.Namespace
	}
	ns, _, _ := strings.Cut(pv.Annotations[keys.LastClaim], "/")
	return ns
}

func availabilityByClaimRef(pv *corev1.PersistentVolume, claim *corev1.PersistentVolumeClaim) availability {
	switch {
	case pv.DeletionTimestamp != nil || pools.StoragePending(pv) || pools.Scrubbing(pv) || pools.Evicting(pv):
		return inUse
	case pools.Unissued(pv):
		return free
	}
	ref := pv.Spec.ClaimRef
	switch {
	case ref == nil:
		// Also a volume still Released whose claimRef the releaser (or an
		// administrator) just cleared, before the PV controller makes it
		// Available; but not one a failed recycle left behind.
		if pv.Status.Phase == corev1.VolumeFailed {
			return inUse
		}
		return free
	case ref.UID == "":
		// Pre-bound by name: kept for a claim of that namespace and name.
		// One the releaser reserved or holds for a namespace may go to
		// another claim; one an administrator pre-bound may not.
		_, held := pools.HeldFor(pv)
		switch {
		case keptForName(pv, claim):
			return free
		case pools.Reserved(pv):
			return reservedForOther
		case held:
			return free
		}
		return inUse
	case pv.Status.Phase == corev1.VolumeReleased:
		return freeIfGone
	case ref.Namespace == claim.Namespace && ref.Name == claim.Name && ref.UID != claim.UID:
		return returning
	}
	return inUse
}

// misfit says why pv cannot serve claim on node (nil: no node selected), or
// "" when it can. It checks what the PV controller checks before it binds a
// pre-bound volume, so that a volume given to a claim is never refused.
func misfit(pv *corev1.PersistentVolume, claim *corev1.PersistentVolumeClaim, node *corev1.Node, selector labels.Selector) string {
	want := claim.Spec.Resources.Requests[corev1.ResourceStorage]
	have := pv.Spec.Capacity[corev1.ResourceStorage]
	switch {
	case have.Cmp(want) < 0:
		return "capacity"
	case !volumehelpers.CheckAccessModes(claim, pv):
		return "access modes"
	case volumehelpers.CheckVolumeModeMismatches(&claim.Spec, &pv.Spec):
		return "volume mode"
	case ptr.Deref(claim.Spec.VolumeAttributesClassName, "") != ptr.Deref(pv.Spec.VolumeAttributesClassName, ""):
		return "volume attributes class"
	case selector != nil && !selector.Matches(labels.Set(pv.Labels)):
		return "selector"
	case node != nil && !pools.FitsNode(pv, node):
		return "node"
	}
	return ""
}

// poolState counts a pool's members for events and decisions.
type poolState struct {
	members int
	inUse   int
	// otherNamespace counts free members held for other namespaces
	// (reuseScope namespace).
	otherNamespace int
	// otherKey counts free members last used under another key than the
	// claim's (keyPolicy Require).
	otherKey int
	// unfit counts free members that do not fit the claim, by reason.
	unfit map[string]int
	// returning is the member still bound to the earlier claim of the
	// claim's name, if it fits the claim: the claim waits for it.
	returning *corev1.PersistentVolume
	// crossable, under scrubAcrossNamespaces, is the member held for
	// another namespace that fits the claim and was released longest ago:
	// emptied, it may go to the claim. Nil when there is none, or one is
	// being emptied already.
	crossable *corev1.PersistentVolume
	// atShare is the size of the share of the claim's namespace when it is
	// at maxVolumesPerNamespace, 0 below: a new volume may then only take
	// the place of a member of the share (evictForClaims).
	atShare int
}

func (s poolState) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d volumes, %d in use, %d free", s.members, s.inUse, s.members-s.inUse-s.otherNamespace-s.otherKey)
	if s.otherNamespace > 0 {
		fmt.Fprintf(&b, ", %d free for other namespaces only", s.otherNamespace)
	}
	if s.otherKey > 0 {
		fmt.Fprintf(&b, ", %d free for other keys only (%s %s)", s.otherKey, keys.KeyPolicy, keys.KeyPolicyRequire)
	}
	if len(s.unfit) > 0 {
		reasons := make([]string, 0, len(s.unfit))
		for r, n := range s.unfit {
			reasons = append(reasons, fmt.Sprintf("%d by %s", n, r))
		}
		slices.Sort(reasons)
		fmt.Fprintf(&b, " (not fitting: %s)", strings.Join(reasons, ", "))
	}
	return b.String()
}

// candidates returns the members claim, of cache key key, may take, best
// first, and the state of the pool. Released members still need their
// claim confirmed gone. Members reserved for other claims come last, the
// oldest reservation first: they are taken only when nothing else fits,
// before the pool grows; but one reserved for a claim of the claim's own
// key ranks with its key (rank): with generated claim names, the name it
// is reserved for never comes back, and the key is what the data is for.
//
// Under reserveFor a member still Released for a claim of another name is
// about to be reserved for that name: it counts as the newest reservation.
func candidates(members []*corev1.PersistentVolume, claim *corev1.PersistentVolumeClaim, key string, rules poolRules, node *corev1.Node, selector labels.Selector) ([]*corev1.PersistentVolume, poolState) {
	state := poolState{members: len(members), unfit: map[string]int{}}
	var out, reserved []*corev1.PersistentVolume
	for _, pv := range members {
		a := availabilityOf(pv, claim, rules.namespaced)
		if rules.scrub && (a == freeIfGone || a == returning) {
			// Released, it goes to the releaser, which may empty it.
			a = inUse
		}
		if rules.keyRequired && a != inUse && a != otherNamespace && !keyFits(pv, key) {
			a = otherKey
		}
		switch a {
		case inUse:
			state.inUse++
			continue
		case returning:
			state.inUse++
			if state.returning == nil && misfit(pv, claim, node, selector) == "" {
				state.returning = pv
			}
			continue
		case otherNamespace:
			state.otherNamespace++
			continue
		case otherKey:
			state.otherKey++
			continue
		}
		if reason := misfit(pv, claim, node, selector); reason != "" {
			state.unfit[reason]++
			continue
		}
		if (a == reservedForOther || (rules.reserving && a == freeIfGone && lastClaim(pv) != claimKey(claim))) && !sameKey(pv, key) {
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
		t, _ := time.Parse(time.RFC3339, pv.Annotations[keys.ReservedUntil])
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
	name := claimKey(claim)
	score := func(pv *corev1.PersistentVolume) int {
		last := lastClaim(pv)
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
		if pools.Reserved(pv) && lastClaim(pv) != name {
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

// lastClaim is "<namespace>/<name>" of the claim pv was last issued to. A
// Released volume still names it in its claimRef; a volume the releaser
// returned to the pool carries it in an annotation.
func lastClaim(pv *corev1.PersistentVolume) string {
	if pools.Unissued(pv) {
		return "" // no claim had it yet
	}
	if ref := pv.Spec.ClaimRef; ref != nil && ref.Name != "" && ref.Name != keys.HeldClaim(pv.Name) {
		return ref.Namespace + "/" + ref.Name
	}
	return pv.Annotations[keys.LastClaim]
}

// releasedAt is when pv was last released, or the zero time if unknown. A
// Released volume became so at its last phase transition; an Available one
// carries the time the releaser released it.
func releasedAt(pv *corev1.PersistentVolume) time.Time {
	if pv.Status.Phase != corev1.VolumeReleased {
		if t, err := time.Parse(time.RFC3339, pv.Annotations[keys.ReleasedAt]); err == nil {
			return t
		}
	}
	if t := pv.Status.LastPhaseTransitionTime; t != nil {
		return t.Time
	}
	return time.Time{}
}

// claimSelector parses claim's selector and refuses keys outside allowed:
// the provisioner must be able to give a claim a volume whose labels match,
// which it can only promise for labels it knows the meaning of.
func claimSelector(claim *corev1.PersistentVolumeClaim, allowed sets.Set[string]) (labels.Selector, error) {
	if claim.Spec.Selector == nil {
		return nil, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(claim.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("invalid selector: %w", err)
	}
	reqs, _ := sel.Requirements()
	var unknown []string
	for _, r := range reqs {
		if !allowed.Has(r.Key()) {
			unknown = append(unknown, r.Key())
		}
	}
	if len(unknown) > 0 {
		known := "none"
		if allowed.Len() > 0 {
			known = strings.Join(sets.List(allowed), ", ")
		}
		return nil, fmt.Errorf("the selector uses label keys this class does not know: %s (known: %s)", strings.Join(unknown, ", "), known)
	}
	return sel, nil
}

// labelsFor returns labels a new volume must carry to match selector. A
// requirement that names one value sets that value; one that excludes values
// or the key is met by leaving the label out. A requirement that leaves the
// value open ("key exists", "key in (a, b)") cannot be met by choice.
func labelsFor(selector labels.Selector) (map[string]string, error) {
	if selector == nil {
		return nil, nil
	}
	reqs, _ := selector.Requirements()
	out := map[string]string{}
	for _, r := range reqs {
		values := r.ValuesUnsorted()
		switch r.Operator() {
		case selection.Equals, selection.DoubleEquals, selection.In:
			if len(values) != 1 {
				return nil, fmt.Errorf("a new volume cannot be labelled to match %q: name exactly one value", r.String())
			}
			if v, ok := out[r.Key()]; ok && v != values[0] {
				return nil, fmt.Errorf("the selector asks for two values of %q", r.Key())
			}
			out[r.Key()] = values[0]
		case selection.NotEquals, selection.NotIn, selection.DoesNotExist:
		default:
			return nil, fmt.Errorf("a new volume cannot be labelled to match %q: name exactly one value", r.String())
		}
	}
	if !selector.Matches(labels.Set(out)) {
		return nil, fmt.Errorf("no set of labels matches the selector %q", selector.String())
	}
	return out, nil
}

// issueKind says how a member went to a claim, for the issues metric: to
// the claim that used it last (its namespace and name came back), to
// another claim, or new.
type issueKind string

const (
	issueSameClaim   issueKind = "same-claim"
	issueOtherMember issueKind = "other-member"
	issueNewVolume   issueKind = "new-volume"
	// issueMadeAhead: a member made ahead for minAvailable, its first claim.
	issueMadeAhead issueKind = "made-ahead"
)

// keyResult says how a member issued to a claim stood to the claim's
// cache key, for the issues metric: one of the claim's key (own), of
// another key or of none (other), one no claim had (fresh: new, made
// ahead, or emptied by a scrub), or one that went to a claim without a
// key (none). Four values whatever the keys: never a label per key.
type keyResult string

const (
	keyOwn   keyResult = "own"
	keyOther keyResult = "other"
	keyFresh keyResult = "fresh"
	keyNone  keyResult = "none"
)

// keyResultOf is the keyResult of cur, the update of old that issued it:
// the claim's key is what cur records (the take writes it), the member's
// what old did.
func keyResultOf(old, cur *corev1.PersistentVolume) keyResult {
	last, used := lastKey(old)
	key := cur.Annotations[keys.LastKey]
	switch {
	case !used:
		return keyFresh
	case key == "":
		return keyNone
	case last == key:
		return keyOwn
	}
	return keyOther
}

// issuedNow reports whether cur, the update of a pool member old, gave it to
// a claim, and how. Whoever wrote the claim's UID into the claimRef (this
// provisioner, or the PV controller for a volume reserved by name) counts.
func issuedNow(old, cur *corev1.PersistentVolume) (issueKind, bool) {
	was, is := old.Spec.ClaimRef, cur.Spec.ClaimRef
	if is == nil || is.UID == "" || (was != nil && was.UID != "") {
		return "", false
	}
	switch {
	case pools.Unissued(old) && old.Annotations[keys.MadeAhead] != "":
		return issueMadeAhead, true
	case lastClaim(old) == is.Namespace+"/"+is.Name:
		return issueSameClaim, true
	}
	return issueOtherMember, true
}

// memberState is what a pool member is doing (pools.StateOf, as a
// VolumePool's status counts it), for the members gauge, and for a held or
// reserved one kept for a namespace (reuseScope namespace), that namespace.
func memberState(pv *corev1.PersistentVolume) (state, namespace string) {
	namespace, _ = pools.HeldFor(pv)
	return string(pools.StateOf(pv)), namespace
}

// crossable returns the member of members held for a namespace other than
// claim's that fits claim on node and was released longest ago, for a
// scrub that lets claim have it; nil when none fits, or when a member is
// being emptied already (it is free soon, and wakes the claims waiting).
func crossable(members []*corev1.PersistentVolume, claim *corev1.PersistentVolumeClaim, node *corev1.Node, selector labels.Selector) *corev1.PersistentVolume {
	var best *corev1.PersistentVolume
	for _, pv := range members {
		if pools.Scrubbing(pv) {
			return nil
		}
		if availabilityOf(pv, claim, true) != otherNamespace || pools.Reserved(pv) || misfit(pv, claim, node, selector) != "" {
			continue
		}
		if best == nil || releasedAt(pv).Before(releasedAt(best)) || releasedAt(pv).Equal(releasedAt(best)) && pv.Name < best.Name {
			best = pv
		}
	}
	return best
}

// rulesOf are the parameters of a class that decide who may have a member.
func rulesOf(p *backend.Params) poolRules {
	return poolRules{namespaced: p.Namespaced, reserving: p.ReserveFor > 0, scrub: p.Scrub, keyRequired: p.KeyRequired}
}
