package poolmanager

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/reclaimable/reclaimable/apis/reclaimable/v1alpha1"
	"github.com/reclaimable/reclaimable/internal/eviction"
	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// The decisions of the pool manager, kept free of clients and caches: from
// a pool, its class and its members to the pool's status and the events
// that report a change of it. Every case is a table row in the tests.

// Condition types of a VolumePool.
const (
	// ConditionReady: the pool's settings are in force for its class.
	ConditionReady = "Ready"
	// ConditionExhausted: claims of the class wait, and the pool cannot
	// grow for them.
	ConditionExhausted = "Exhausted"
)

// Reasons of the Ready condition turning False, recorded as events too.
const (
	reasonClassNotFound           = "ClassNotFound"
	reasonClassOfOtherProvisioner = "ClassOfAnotherProvisioner"
	reasonClassOwnedByOtherPool   = "ClassOwnedByAnotherPool"
	reasonInvalidSettings         = "InvalidSettings"
	// reasonMinAvailableRefused: the class cannot keep members made ahead.
	reasonMinAvailableRefused = "MinAvailableRefused"
	// reasonEvictionRefused: the class's members cannot be evicted.
	reasonEvictionRefused = "EvictionRefused"
	// reasonMembersNotMade: making members ahead of claims, or finishing
	// those half made, fails.
	reasonMembersNotMade = "MembersNotMade"
)

// Events that report a change without a condition of its own.
const (
	// reasonPoolExhausted: the Exhausted condition turned True.
	reasonPoolExhausted = "PoolExhausted"
	// reasonSettingsOverrideClass: a new spec sets what the class's
	// parameters set too; the pool's value counts.
	reasonSettingsOverrideClass = "SettingsOverrideClass"
	// reasonReuseScopeWidened: reuseScope went from namespace to cluster.
	reasonReuseScopeWidened = "ReuseScopeWidened"
	// reasonMakeAheadFailed: making a member ahead of claims failed; it is
	// retried with back-off.
	reasonMakeAheadFailed = "MakeAheadFailed"
	// reasonMemberEvicted: a member was removed with its data.
	reasonMemberEvicted = "MemberEvicted"
)

// Reasons of conditions that are never events.
const (
	condReady          = "SettingsInForce"
	condClaimsWaiting  = "ClaimsWaiting"
	condNoClaimWaiting = "NoClaimWaiting"
	// condBelowMinAvailable: fewer free members than minAvailable, more
	// being made.
	condBelowMinAvailable = "BelowMinAvailable"
)

// view is what the status of one pool is decided from.
type view struct {
	pool *v1alpha1.VolumePool
	// owner is the pool of the class (pools.PoolOf): the oldest of
	// those naming it.
	owner *v1alpha1.VolumePool
	// class is the pool's StorageClass, nil when there is none.
	class       *storagev1.StorageClass
	provisioner string
	// members of the class's pool, and settingsErr the provisioner's
	// refusal of the class as the pool makes it; read only for the owner
	// of a class of this provisioner.
	members     []*corev1.PersistentVolume
	settingsErr error
	// waiting counts the claims of the class refused for want of a member.
	waiting int
	// aheadErr says why the class cannot keep members made ahead
	// (minAvailable); making counts those being made that members do not
	// show yet.
	aheadErr error
	making   int
	// aheadFailed says why making members ahead, or finishing those half
	// made, failed last; nil once it succeeds.
	aheadFailed error
	// evictErr says why the class's members cannot be evicted, or nil.
	evictErr error
	// usage holds what members held when they came back to the pool, by
	// name, as the provisioner measured it (the status keeps the rest).
	usage map[string]v1alpha1.MemberUsage
	now   metav1.Time
}

// event is one event to record on the pool.
type event struct {
	Type, Reason, Message string
}

// result is the status a pool should have, what to report of the change,
// its members by state (for the gauge), and what to make.
type result struct {
	status v1alpha1.VolumePoolStatus
	events []event
	counts map[pools.MemberState]int
	// makeAhead is how many members to make ahead of claims now.
	makeAhead int
	// evict are the members to remove now, and recheck when to look
	// again for the next to come due (0: at the next change).
	evict   []eviction.Eviction
	recheck time.Duration
}

// decide returns the status of v.pool. It starts from the pool's current
// status, so that condition transition times and the last issue and
// release times carry over, and counts members only while the pool is in
// force: a pool without effect owns no volume.
func decide(v view) result {
	prev := v.pool.Status
	s := v1alpha1.VolumePoolStatus{
		ObservedGeneration: v.pool.Generation,
		ReuseScope:         prev.ReuseScope,
		LastIssued:         prev.LastIssued,
		LastReleased:       prev.LastReleased,
		Conditions:         append([]metav1.Condition(nil), prev.Conditions...),
	}
	r := result{counts: map[pools.MemberState]int{}}
	ready := readiness(v)
	exhausted := metav1.Condition{Type: ConditionExhausted, Status: metav1.ConditionFalse, Reason: condNoClaimWaiting,
		Message: "no claim waits for a member", ObservedGeneration: v.pool.Generation, LastTransitionTime: v.now}
	if ready.Status == metav1.ConditionTrue {
		effective := pools.EffectiveClass(v.class, v.pool)
		pending := countMembers(v.members, &s, r.counts)
		limit, _ := strconv.Atoi(effective.Parameters[wellknown.MaxVolumes])
		if limit > 0 {
			s.MaxVolumes = ptr.To(int32(limit))
		}
		s.Surplus = int32(eviction.Surplus(v.members, limit))
		measured := usageOf(v.members, v.usage, prev.Usage)
		s.Usage, s.UsedBytes, s.Measured = usage(measured)
		r.evict, r.recheck = evictions(v, limit, measured, &ready)
		r.makeAhead = keepMinAvailable(v, r.counts[pools.StateFree], pending, limit, &ready)
		if v.waiting > 0 {
			exhausted.Status, exhausted.Reason = metav1.ConditionTrue, condClaimsWaiting
			exhausted.Message = fmt.Sprintf("%d claims of StorageClass %s wait: no free member fits them and the pool cannot grow (%s); their events say what to change",
				v.waiting, v.pool.Spec.StorageClassName, limitOf(effective))
			if old := meta.FindStatusCondition(prev.Conditions, ConditionExhausted); old == nil || old.Status != metav1.ConditionTrue {
				r.events = append(r.events, event{corev1.EventTypeWarning, reasonPoolExhausted, exhausted.Message})
			}
		}
		r.events = append(r.events, settingEvents(v, effective, s.Held)...)
		s.ReuseScope = reuseScope(effective)
	}
	// A pool briefly below its minimum (a claim took a member) is no news:
	// only the reasons that need an administrator are events.
	if old := meta.FindStatusCondition(prev.Conditions, ConditionReady); ready.Status == metav1.ConditionFalse && ready.Reason != condBelowMinAvailable &&
		(old == nil || old.Status != ready.Status || old.Reason != ready.Reason) {
		r.events = append(r.events, event{corev1.EventTypeWarning, ready.Reason, ready.Message})
	}
	meta.SetStatusCondition(&s.Conditions, ready)
	meta.SetStatusCondition(&s.Conditions, exhausted)
	r.status = s
	return r
}

// readiness is the pool's Ready condition before its members are looked
// at: True when its settings are in force for its class, else why not.
func readiness(v view) metav1.Condition {
	ready := metav1.Condition{Type: ConditionReady, Status: metav1.ConditionFalse, ObservedGeneration: v.pool.Generation, LastTransitionTime: v.now}
	className := v.pool.Spec.StorageClassName
	switch {
	case v.owner != nil && v.owner.Name != v.pool.Name:
		ready.Reason = reasonClassOwnedByOtherPool
		ready.Message = fmt.Sprintf("StorageClass %s is the pool of VolumePool %s, made first; this pool has no effect: delete it, or edit %s", className, v.owner.Name, v.owner.Name)
	case v.class == nil:
		ready.Reason = reasonClassNotFound
		ready.Message = fmt.Sprintf("StorageClass %s does not exist; the pool takes effect once it does", className)
	case v.class.Provisioner != v.provisioner:
		ready.Reason = reasonClassOfOtherProvisioner
		ready.Message = fmt.Sprintf("StorageClass %s is provisioned by %s, not %s: the pool's settings do not apply to it", className, v.class.Provisioner, v.provisioner)
	case v.settingsErr != nil:
		ready.Reason = reasonInvalidSettings
		ready.Message = fmt.Sprintf("with this pool's settings, StorageClass %s is refused, and its claims with it: %v", className, v.settingsErr)
	default:
		ready.Status, ready.Reason = metav1.ConditionTrue, condReady
		ready.Message = fmt.Sprintf("the pool's settings are in force for StorageClass %s", className)
	}
	return ready
}

// countMembers counts members by state into counts and into s (and their
// capacity, the scrubs that failed, those made ahead, the last issue and
// release), and returns how many made ahead still wait for their storage.
func countMembers(members []*corev1.PersistentVolume, s *v1alpha1.VolumePoolStatus, counts map[pools.MemberState]int) int {
	capacity := resource.Quantity{Format: resource.BinarySI}
	pending := 0
	for _, pv := range members {
		state := pools.StateOf(pv)
		counts[state]++
		if _, failed := pv.Annotations[wellknown.ScrubFailed]; failed && pools.Scrubbing(pv) {
			s.ScrubFailed++
		}
		if _, ahead := pv.Annotations[wellknown.MadeAhead]; ahead && (pools.Unissued(pv) || pools.StoragePending(pv)) {
			s.MadeAhead++
			if pools.StoragePending(pv) {
				pending++
			}
		}
		if c, ok := pv.Spec.Capacity[corev1.ResourceStorage]; ok {
			capacity.Add(c)
		}
		if t := pv.Status.LastPhaseTransitionTime; state == pools.StateBound && pv.Status.Phase == corev1.VolumeBound && t != nil {
			s.LastIssued = later(s.LastIssued, t.Time)
		}
		if t, err := time.Parse(time.RFC3339, pv.Annotations[wellknown.ReleasedAt]); err == nil {
			s.LastReleased = later(s.LastReleased, t)
		}
	}
	s.Free, s.Held, s.Reserved = int32(counts[pools.StateFree]), int32(counts[pools.StateHeld]), int32(counts[pools.StateReserved])
	s.Bound, s.Released, s.Total = int32(counts[pools.StateBound]), int32(counts[pools.StateReleased]), int32(len(members))
	s.Capacity = &capacity
	s.Scrubbing = int32(counts[pools.StateScrubbing])
	s.Evicting = int32(counts[pools.StateEvicting])
	return pending
}

// maxUsageListed bounds status.usage (and its CRD's maxItems): a status
// is written whole, and one of every member's measure would pass etcd's
// largest request (1.5 MiB by default) at some 12,000 members, and the
// pool's status, eviction included, would stop there.
const maxUsageListed = 1000

// usage is what the status says of the members' measures (usageOf): those
// of the maxUsageListed members that hold the most, by name, the sum of
// all and how many they are. Only members of a class whose backend
// measures them are counted; a pool with none has no usedBytes rather than
// a false 0.
func usage(measured []v1alpha1.MemberUsage) ([]v1alpha1.MemberUsage, *resource.Quantity, int32) {
	if len(measured) == 0 {
		return nil, nil, 0
	}
	var sum int64
	for _, u := range measured {
		sum += u.Bytes
	}
	listed := measured
	if len(listed) > maxUsageListed {
		// The largest are kept: they weigh most against the watermarks and
		// cost most to measure again after a restart.
		listed = slices.Clone(measured)
		slices.SortFunc(listed, func(a, b v1alpha1.MemberUsage) int {
			return cmp.Or(cmp.Compare(b.Bytes, a.Bytes), cmp.Compare(a.Volume, b.Volume))
		})
		listed = listed[:maxUsageListed]
		slices.SortFunc(listed, func(a, b v1alpha1.MemberUsage) int { return cmp.Compare(a.Volume, b.Volume) })
	}
	return listed, resource.NewQuantity(sum, resource.BinarySI), int32(len(measured))
}

// evictions are the members the pool's eviction settings remove now, and
// when to look again; or none, with Ready set False, when the settings
// cannot be kept.
func evictions(v view, limit int, usage []v1alpha1.MemberUsage, ready *metav1.Condition) ([]eviction.Eviction, time.Duration) {
	spec := v.pool.Spec
	rules := eviction.Rules{After: spec.EvictAfter, Shrink: spec.ShrinkToMaximum, Limit: limit, MinAvailable: int(ptr.Deref(spec.MinAvailable, 0)),
		High: spec.EvictAboveBytes, Low: spec.EvictDownToBytes, Usage: usage}
	switch {
	case !rules.Any():
		return nil, 0
	case v.evictErr != nil:
		ready.Status, ready.Reason = metav1.ConditionFalse, reasonEvictionRefused
		ready.Message = fmt.Sprintf("evictAfter, shrinkToMaximum and the byte watermarks cannot be kept for StorageClass %s: %v", spec.StorageClassName, v.evictErr)
		return nil, 0
	case rules.High != nil && rules.Low != nil && rules.Low.Cmp(*rules.High) > 0:
		ready.Status, ready.Reason = metav1.ConditionFalse, reasonInvalidSettings
		ready.Message = fmt.Sprintf("evictDownToBytes %s is above evictAboveBytes %s: the low watermark must be at most the high one", rules.Low.String(), rules.High.String())
		return nil, 0
	}
	return eviction.Plan(v.members, rules, v.now.Time)
}

// keepMinAvailable returns how many members to make ahead of claims now
// for the pool's minAvailable, given free members, pending ones made ahead
// still waiting for their storage and the maximum (0: none); Ready turns
// False while the pool is below its minimum or cannot keep it.
func keepMinAvailable(v view, free, pending, limit int, ready *metav1.Condition) int {
	want := int(ptr.Deref(v.pool.Spec.MinAvailable, 0))
	if want == 0 {
		return 0
	}
	className := v.pool.Spec.StorageClassName
	switch {
	case v.aheadErr != nil:
		ready.Status, ready.Reason = metav1.ConditionFalse, reasonMinAvailableRefused
		ready.Message = fmt.Sprintf("minAvailable %d cannot be kept for StorageClass %s: %v", want, className, v.aheadErr)
	case v.aheadFailed != nil:
		ready.Status, ready.Reason = metav1.ConditionFalse, reasonMembersNotMade
		ready.Message = fmt.Sprintf("members of StorageClass %s made ahead of claims (minAvailable %d) cannot be made: %v; retried with back-off, and a member whose storage is not made within three times --lifecycle-timeout, or whose node is gone, is removed (MemberNotMade)",
			className, want, v.aheadFailed)
	case free < want:
		makeAhead := max(0, want-free-pending-v.making)
		if limit > 0 {
			// At the maximum nothing can be made until a member goes:
			// asking would only be refused again.
			makeAhead = min(makeAhead, max(0, limit-len(v.members)-v.making))
		}
		ready.Status, ready.Reason = metav1.ConditionFalse, condBelowMinAvailable
		ready.Message = fmt.Sprintf("StorageClass %s has %d free members of at least %d (minAvailable); %d being made, within maxVolumes", className, free, want, pending+v.making+makeAhead)
		return makeAhead
	}
	return 0
}

// settingEvents report a change of the pool's settings: reuseScope widened
// from namespace to cluster (held members counts those it frees), and, at
// a new generation, the class parameters the pool overrides.
func settingEvents(v view, effective *storagev1.StorageClass, held int32) []event {
	var events []event
	prev := v.pool.Status
	if scope := reuseScope(effective); prev.ReuseScope == wellknown.ReuseScopeNamespace && scope == wellknown.ReuseScopeCluster {
		events = append(events, event{corev1.EventTypeWarning, reasonReuseScopeWidened, fmt.Sprintf(
			"%s is now %s: the volumes held for a namespace (%d now) go to claims of any namespace, data included", wellknown.ReuseScope, scope, held)})
	}
	if prev.ObservedGeneration != v.pool.Generation {
		if o := overrides(v.pool, v.class); len(o) > 0 {
			events = append(events, event{corev1.EventTypeNormal, reasonSettingsOverrideClass, fmt.Sprintf(
				"StorageClass %s sets these parameters too; the pool's values count: %s", v.pool.Spec.StorageClassName, strings.Join(o, ", "))})
		}
	}
	return events
}

// manages reports whether the pool manager of provisioner keeps the status
// of pool, whose class is class (nil: none). Several installations may
// share a cluster, each with its own provisioner name, and each sees every
// pool: only the one whose provisioner the class names writes its status.
// A pool whose class is missing gets the same status from each, so they
// never undo one another's writes. A pool whose class another provisioner
// serves is told so once, by whichever installation sees it first, unless
// a status already shows it is served or told: the installation that
// serves the class writes Ready, and no other overwrites it; a pool newer
// than foreignGrace is left to it, which may not have seen it yet.
func manages(pool *v1alpha1.VolumePool, class *storagev1.StorageClass, provisioner string, now time.Time) bool {
	if class == nil || class.Provisioner == provisioner {
		return true
	}
	ready := meta.FindStatusCondition(pool.Status.Conditions, ConditionReady)
	return (ready == nil || ready.Reason == reasonClassNotFound) && now.Sub(pool.CreationTimestamp.Time) > foreignGrace
}

// foreignGrace is how long a pool whose class another provisioner serves
// is left for that provisioner's installation to write its status first.
const foreignGrace = 2 * resyncPeriod

// later returns the later of t and u, to the second (as the API stores it).
func later(t *metav1.Time, u time.Time) *metav1.Time {
	u = u.Truncate(time.Second)
	if t != nil && !t.Time.Before(u) {
		return t
	}
	return &metav1.Time{Time: u}
}

// reuseScope is the scope class (as its pool makes it) issues volumes in.
func reuseScope(class *storagev1.StorageClass) string {
	if s := class.Parameters[wellknown.ReuseScope]; s != "" {
		return s
	}
	return wellknown.ReuseScopeNamespace
}

// limitOf says what keeps the pool of class from growing, for a message.
func limitOf(class *storagev1.StorageClass) string {
	if m, ok := class.Parameters[wellknown.MaxVolumes]; ok {
		return fmt.Sprintf("%s %s", wellknown.MaxVolumes, m)
	}
	return "a pool of fixed members, or maxVolumesPerNode"
}

// overrides lists the settings pool and class both set, as "name: pool's
// value (class: class's value)".
func overrides(pool *v1alpha1.VolumePool, class *storagev1.StorageClass) []string {
	effective := pools.EffectiveClass(class, pool)
	var out []string
	for _, name := range []string{wellknown.MaxVolumes, wellknown.MaxVolumesPerNode, wellknown.MaxVolumesPerNamespace, wellknown.ReserveFor, wellknown.ReuseScope} {
		own, set := class.Parameters[name]
		if !set || !poolSets(pool, name) {
			continue
		}
		out = append(out, fmt.Sprintf("%s %s (class: %s)", name, effective.Parameters[name], own))
	}
	return out
}

// poolSets reports whether pool sets the class parameter name.
func poolSets(pool *v1alpha1.VolumePool, name string) bool {
	s := pool.Spec
	switch name {
	case wellknown.MaxVolumes:
		return s.MaxVolumes != nil
	case wellknown.MaxVolumesPerNode:
		return s.MaxVolumesPerNode != nil
	case wellknown.MaxVolumesPerNamespace:
		return s.MaxVolumesPerNamespace != nil
	case wellknown.ReserveFor:
		return s.ReserveFor != nil
	case wellknown.ReuseScope:
		return s.ReuseScope != ""
	}
	return false
}
