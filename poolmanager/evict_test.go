package poolmanager

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/reclaimable/reclaimable/apis/reclaimable/v1alpha1"
	"github.com/reclaimable/reclaimable/internal/keys"
)

// releasedAgo is a member returned to the pool d before t1.
func releasedAgo(d time.Duration) func(*corev1.PersistentVolume) {
	return annotate(keys.ReleasedAt, t1.Add(-d).Format(time.RFC3339))
}

func TestIdle(t *testing.T) {
	const after = 10 * time.Minute
	free := func(name string, ago time.Duration) *corev1.PersistentVolume {
		return member(name, corev1.VolumeAvailable, releasedAgo(ago))
	}
	held := func(name string, ago time.Duration) *corev1.PersistentVolume {
		return member(name, corev1.VolumeAvailable, claimRef(""), annotate(keys.HeldForNamespace, "ns"), releasedAgo(ago))
	}
	neverUsed := aheadMember("ahead", false)
	neverUsed.CreationTimestamp = metav1.NewTime(t1.Add(-time.Hour))
	for _, tt := range []struct {
		name    string
		members []*corev1.PersistentVolume
		min     int
		want    []string
		next    time.Duration
	}{
		// The releaser records whole seconds: a member counts as released
		// at the end of its second.
		{"none idle: look again when the first comes due", []*corev1.PersistentVolume{free("a", time.Minute), free("b", 4*time.Minute)}, 0, nil, 6*time.Minute + time.Second},
		{"idle ones, least recently used first", []*corev1.PersistentVolume{free("new", time.Minute), free("old", time.Hour), free("older", 2*time.Hour)}, 0,
			[]string{"older", "old"}, 9*time.Minute + time.Second},
		{"exactly due", []*corev1.PersistentVolume{free("a", after+time.Second)}, 0, []string{"a"}, 0},
		{"due within the second of its release", []*corev1.PersistentVolume{free("a", after)}, 0, nil, time.Second},
		{"never below minAvailable free members: the most recently used stay", []*corev1.PersistentVolume{free("a", time.Hour), free("b", 2*time.Hour), free("c", 3*time.Hour)}, 2,
			[]string{"c"}, 0},
		{"held members are not free ones: the minimum does not keep them", []*corev1.PersistentVolume{held("h", time.Hour), free("f", time.Hour)}, 1,
			[]string{"h"}, 0},
		{"a member never issued counts from its making", []*corev1.PersistentVolume{neverUsed}, 0, []string{"ahead"}, 0},
		{"bound, reserved, released, scrubbing and evicting members stay", []*corev1.PersistentVolume{
			member("bound", corev1.VolumeBound, claimRef("u1"), releasedAgo(time.Hour)),
			member("reserved", corev1.VolumeAvailable, claimRef(""), annotate(keys.ReservedUntil, t1.Format(time.RFC3339)), releasedAgo(time.Hour)),
			member("released", corev1.VolumeReleased, claimRef("u3"), releasedAgo(time.Hour)),
			member("scrubbing", corev1.VolumeAvailable, annotate(keys.Scrub, keys.ScrubRequested), releasedAgo(time.Hour)),
			member("evicting", corev1.VolumeAvailable, annotate(keys.Evicting, keys.EvictIdle), releasedAgo(time.Hour)),
		}, 0, nil, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, next := idle(tt.members, after, tt.min, t1)
			var names []string
			for _, e := range got {
				names = append(names, e.pv.Name)
				if e.cause != keys.EvictIdle || e.message == "" {
					t.Errorf("eviction of %s: cause %q, message %q", e.pv.Name, e.cause, e.message)
				}
			}
			if !slices.Equal(names, tt.want) || next != tt.next {
				t.Errorf("idle = %v, next in %s; want %v, next in %s", names, next, tt.want, tt.next)
			}
		})
	}
}

func TestDecideEvictsIdleMembers(t *testing.T) {
	evictAfter := func(p *v1alpha1.VolumePool) { p.Spec.EvictAfter = &metav1.Duration{Duration: time.Minute} }
	members := []*corev1.PersistentVolume{member("idle", corev1.VolumeAvailable, releasedAgo(time.Hour)), member("fresh", corev1.VolumeAvailable, releasedAgo(time.Second))}
	now := metav1.NewTime(t1)
	ready := class(map[string]string{"backend": "directory"})

	r := decide(view{pool: pool("p", observed("namespace"), evictAfter), class: ready, provisioner: testProvisioner, members: members, now: now})
	if len(r.evict) != 1 || r.evict[0].pv.Name != "idle" || r.recheck != time.Minute {
		t.Errorf("evict %v, recheck %s; want idle, and a look again in 1m", r.evict, r.recheck)
	}

	r = decide(view{pool: pool("p", observed("namespace")), class: ready, provisioner: testProvisioner, members: members, now: now})
	if len(r.evict) != 0 || r.recheck != 0 {
		t.Errorf("without evictAfter: evict %v, recheck %s; want nothing", r.evict, r.recheck)
	}

	r = decide(view{pool: pool("p", observed("namespace"), evictAfter), class: ready, provisioner: testProvisioner, members: members, now: now, evictErr: errors.New("the static backend removes no storage")})
	c := meta.FindStatusCondition(r.status.Conditions, ConditionReady)
	if len(r.evict) != 0 || c.Status != metav1.ConditionFalse || c.Reason != reasonEvictionRefused || len(r.events) != 1 || r.events[0].Reason != reasonEvictionRefused {
		t.Errorf("a class that cannot evict: evict %v, Ready %s/%s, events %v; want nothing evicted, Ready False %s and its event", r.evict, c.Status, c.Reason, r.events, reasonEvictionRefused)
	}

	evicting := member("going", corev1.VolumeAvailable, annotate(keys.Evicting, keys.EvictIdle))
	r = decide(view{pool: pool("p", observed("namespace")), class: ready, provisioner: testProvisioner, members: []*corev1.PersistentVolume{evicting}, now: now})
	if r.status.Evicting != 1 || r.status.Free != 0 {
		t.Errorf("status evicting %d, free %d; want 1 and 0", r.status.Evicting, r.status.Free)
	}
}

func TestAboveMaximum(t *testing.T) {
	sized := func(name, size string, ago time.Duration, mods ...func(*corev1.PersistentVolume)) *corev1.PersistentVolume {
		pv := member(name, corev1.VolumeAvailable, append([]func(*corev1.PersistentVolume){releasedAgo(ago)}, mods...)...)
		pv.Spec.Capacity[corev1.ResourceStorage] = resource.MustParse(size)
		return pv
	}
	bound := func(name string) *corev1.PersistentVolume {
		return member(name, corev1.VolumeBound, claimRef("u-"+name))
	}
	heldBy := claimRef("")
	for _, tt := range []struct {
		name    string
		members []*corev1.PersistentVolume
		limit   int
		want    []string
		surplus int
	}{
		{"at the maximum", []*corev1.PersistentVolume{sized("a", "1Gi", time.Hour), bound("b")}, 2, nil, 0},
		{"largest first, then least recently used", []*corev1.PersistentVolume{
			sized("small-old", "1Gi", 3*time.Hour), sized("big", "3Gi", time.Minute), sized("mid-new", "2Gi", time.Minute), sized("mid-old", "2Gi", time.Hour), bound("b"),
		}, 2, []string{"big", "mid-old", "mid-new"}, 3},
		{"never a bound, reserved, released or scrubbing one: the rest of the surplus waits", []*corev1.PersistentVolume{
			bound("b1"), bound("b2"),
			member("reserved", corev1.VolumeAvailable, heldBy, annotate(keys.ReservedUntil, t1.Format(time.RFC3339))),
			member("released", corev1.VolumeReleased, claimRef("u3")),
			member("scrubbing", corev1.VolumeAvailable, annotate(keys.Scrub, keys.ScrubRequested)),
			sized("held", "1Gi", time.Hour, heldBy, annotate(keys.HeldForNamespace, "ns")),
		}, 1, []string{"held"}, 5},
		{"members being evicted count no more", []*corev1.PersistentVolume{
			sized("going", "5Gi", time.Hour, annotate(keys.Evicting, keys.EvictAboveMaximum)), sized("a", "1Gi", time.Hour), bound("b"),
		}, 2, nil, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var names []string
			for _, e := range aboveMaximum(tt.members, tt.limit) {
				names = append(names, e.pv.Name)
				if e.cause != keys.EvictAboveMaximum {
					t.Errorf("cause %q", e.cause)
				}
			}
			if !slices.Equal(names, tt.want) {
				t.Errorf("aboveMaximum = %v, want %v", names, tt.want)
			}
			if got := surplus(tt.members, tt.limit); got != tt.surplus {
				t.Errorf("surplus = %d, want %d", got, tt.surplus)
			}
		})
	}
	if got := surplus([]*corev1.PersistentVolume{bound("b")}, 0); got != 0 {
		t.Errorf("surplus without a maximum = %d, want 0", got)
	}
}

// Above its maximum a pool reports the surplus, and removes it only with
// shrinkToMaximum; an idle member already chosen is not chosen twice.
func TestDecideShrinksOnlyWhenAllowed(t *testing.T) {
	members := []*corev1.PersistentVolume{
		member("a", corev1.VolumeAvailable, releasedAgo(time.Hour)),
		member("b", corev1.VolumeAvailable, releasedAgo(2*time.Hour)),
		member("bound", corev1.VolumeBound, claimRef("u1")),
	}
	ready := class(map[string]string{"backend": "directory", keys.MaxVolumes: "2"})
	for _, tt := range []struct {
		name   string
		mutate func(*v1alpha1.VolumePool)
		want   []string
	}{
		{"default: kept", func(*v1alpha1.VolumePool) {}, nil},
		{"shrinkToMaximum", func(p *v1alpha1.VolumePool) { p.Spec.ShrinkToMaximum = true }, []string{"b"}},
		{"shrinkToMaximum and evictAfter", func(p *v1alpha1.VolumePool) {
			p.Spec.ShrinkToMaximum = true
			p.Spec.EvictAfter = &metav1.Duration{Duration: time.Minute}
		}, []string{"b", "a"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := decide(view{pool: pool("p", observed("namespace"), tt.mutate), class: ready, provisioner: testProvisioner, members: members, now: metav1.NewTime(t1)})
			var names []string
			for _, e := range r.evict {
				names = append(names, e.pv.Name)
			}
			if !slices.Equal(names, tt.want) || r.status.Surplus != 1 {
				t.Errorf("evict %v, surplus %d; want %v and 1", names, r.status.Surplus, tt.want)
			}
		})
	}
}

func TestAboveBytes(t *testing.T) {
	const mi = int64(1 << 20)
	free := func(name string, ago time.Duration) *corev1.PersistentVolume {
		return member(name, corev1.VolumeAvailable, releasedAgo(ago))
	}
	usage := func(kv ...any) []v1alpha1.MemberUsage {
		var out []v1alpha1.MemberUsage
		for i := 0; i < len(kv); i += 2 {
			out = append(out, v1alpha1.MemberUsage{Volume: kv[i].(string), Bytes: int64(kv[i+1].(int)) * mi})
		}
		return out
	}
	three := []*corev1.PersistentVolume{free("a", 3*time.Hour), free("b", 2*time.Hour), free("c", time.Hour)}
	for _, tt := range []struct {
		name    string
		members []*corev1.PersistentVolume
		usage   []v1alpha1.MemberUsage
		min     int
		want    []string
	}{
		{"below the high watermark", three, usage("a", 30, "b", 30, "c", 30), 0, nil},
		// 120 above 100: a goes (80); b would leave 40, below 60.
		{"above it: the least recently used, not below the low one", three, usage("a", 40, "b", 40, "c", 40), 0, []string{"a"}},
		// 150: a (130), b (110), c (90 at most 100, and 90-10 leaves 80).
		{"down to the high one, on toward the low one", []*corev1.PersistentVolume{free("a", 4*time.Hour), free("b", 3*time.Hour), free("c", 2*time.Hour), free("d", time.Hour)},
			usage("a", 20, "b", 20, "c", 100, "d", 10), 0, []string{"a", "b", "c"}},
		{"one huge member goes, whatever the low watermark", []*corev1.PersistentVolume{free("a", time.Hour)}, usage("a", 150), 0, []string{"a"}},
		{"minAvailable free members stay", three, usage("a", 40, "b", 40, "c", 40), 3, nil},
		{"unmeasured members are not chosen", three, usage("b", 60, "c", 60), 0, []string{"b"}},
		{"a bound member is never chosen", []*corev1.PersistentVolume{member("bound", corev1.VolumeBound, claimRef("u")), free("a", time.Hour)},
			usage("bound", 90, "a", 20), 0, []string{"a"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var names []string
			for _, e := range aboveBytes(tt.members, tt.usage, 100*mi, 60*mi, tt.min) {
				names = append(names, e.pv.Name)
				if e.cause != keys.EvictAboveBytes {
					t.Errorf("cause %q", e.cause)
				}
			}
			if !slices.Equal(names, tt.want) {
				t.Errorf("aboveBytes = %v, want %v", names, tt.want)
			}
		})
	}
}

// The status keeps what members held when they came back: the measure of
// that same return, from the provisioner or from the status before; none
// for a member since issued again, or not measured.
func TestUsageOf(t *testing.T) {
	at := t1.Format(time.RFC3339)
	members := []*corev1.PersistentVolume{
		member("new", corev1.VolumeAvailable, annotate(keys.ReleasedAt, at)),
		member("kept", corev1.VolumeAvailable, annotate(keys.ReleasedAt, at)),
		member("reused", corev1.VolumeAvailable, annotate(keys.ReleasedAt, at)),
		member("bound", corev1.VolumeBound, claimRef("u"), annotate(keys.ReleasedAt, at)),
		member("unmeasured", corev1.VolumeAvailable, annotate(keys.ReleasedAt, at)),
	}
	measured := map[string]v1alpha1.MemberUsage{"new": {Volume: "new", Bytes: 1, Returned: at}}
	prev := []v1alpha1.MemberUsage{
		{Volume: "kept", Bytes: 2, Returned: at},
		{Volume: "reused", Bytes: 3, Returned: t0.Format(time.RFC3339)},
		{Volume: "bound", Bytes: 4, Returned: at},
	}
	var got []string
	for _, u := range usageOf(members, measured, prev) {
		got = append(got, fmt.Sprintf("%s=%d", u.Volume, u.Bytes))
	}
	if want := []string{"kept=2", "new=1"}; !slices.Equal(got, want) {
		t.Errorf("usageOf = %v, want %v", got, want)
	}
}

// The byte watermarks count only what stays in the pool: members that
// idleness or the maximum chose in the same pass hold nothing any more.
func TestEvictionsCountOnlyTheBytesThatStay(t *testing.T) {
	const mi = int64(1 << 20)
	members := []*corev1.PersistentVolume{
		member("idle", corev1.VolumeAvailable, releasedAgo(2*time.Hour)),
		member("recent", corev1.VolumeAvailable, releasedAgo(time.Minute)),
		member("older", corev1.VolumeAvailable, releasedAgo(2*time.Minute)),
	}
	high, low := resource.NewQuantity(10*mi, resource.BinarySI), resource.NewQuantity(8*mi, resource.BinarySI)
	r := evictRules{after: &metav1.Duration{Duration: time.Hour}, high: high, low: low, usage: []v1alpha1.MemberUsage{
		{Volume: "idle", Bytes: 6 * mi}, {Volume: "recent", Bytes: 4 * mi}, {Volume: "older", Bytes: 3 * mi},
	}}
	got, _ := evictions(members, r, t1)
	var names []string
	for _, e := range got {
		names = append(names, e.pv.Name+"/"+e.cause)
	}
	// Without the idle member the pool holds 7 MiB, under both marks.
	if want := []string{"idle/" + keys.EvictIdle}; !slices.Equal(names, want) {
		t.Errorf("evictions = %v, want %v", names, want)
	}
}
