package eviction

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/reclaimable/reclaimable/apis/reclaimable/v1alpha1"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

var (
	t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	t1 = t0.Add(time.Hour)
)

func member(name string, phase corev1.PersistentVolumePhase, mutate ...func(*corev1.PersistentVolume)) *corev1.PersistentVolume {
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{}},
		Spec: corev1.PersistentVolumeSpec{StorageClassName: "cache", PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		Status: corev1.PersistentVolumeStatus{Phase: phase},
	}
	for _, m := range mutate {
		m(pv)
	}
	return pv
}

func claimRef(uid string) func(*corev1.PersistentVolume) {
	return func(pv *corev1.PersistentVolume) {
		pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "ns", Name: "job", UID: types.UID(uid)}
	}
}

func annotate(key, value string) func(*corev1.PersistentVolume) {
	return func(pv *corev1.PersistentVolume) { pv.Annotations[key] = value }
}

// releasedAgo is a member returned to the pool d before t1.
func releasedAgo(d time.Duration) func(*corev1.PersistentVolume) {
	return annotate(wellknown.ReleasedAt, t1.Add(-d).Format(time.RFC3339))
}

// madeAgo is a member made d before t1.
func madeAgo(d time.Duration) func(*corev1.PersistentVolume) {
	return func(pv *corev1.PersistentVolume) { pv.CreationTimestamp = metav1.NewTime(t1.Add(-d)) }
}

// transitioned is a member whose phase last changed at at.
func transitioned(at time.Time) func(*corev1.PersistentVolume) {
	return func(pv *corev1.PersistentVolume) { pv.Status.LastPhaseTransitionTime = &metav1.Time{Time: at} }
}

// aheadMember is a member made ahead of claims, its storage made.
func aheadMember(name string) *corev1.PersistentVolume {
	pv := member(name, corev1.VolumeAvailable, annotate(wellknown.MadeAhead, "p"))
	pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "kube-system", Name: wellknown.MadeAheadClaim(name)}
	return pv
}

// held is a free member kept for namespace ns (reuseScope namespace).
func held(ns string) func(*corev1.PersistentVolume) {
	return func(pv *corev1.PersistentVolume) {
		pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: ns, Name: "old"}
		pv.Annotations[wellknown.HeldForNamespace] = ns
	}
}

// reserved is a member the releaser reserves for the claim ns/old.
func reserved(pv *corev1.PersistentVolume) {
	pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "ns", Name: "old"}
	pv.Annotations[wellknown.ReservedUntil] = t1.Add(time.Hour).Format(time.RFC3339)
}

// preBound is a member an administrator pre-bound to a claim to come.
func preBound(pv *corev1.PersistentVolume) {
	pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "ns", Name: "coming"}
}

// One clock for every eviction: released-at, else the member's making,
// rounded up to the end of its second. The last phase transition is not
// read: it moves with binds the pool does not count as use.
func TestLastUsed(t *testing.T) {
	for _, tt := range []struct {
		name string
		pv   *corev1.PersistentVolume
		want time.Time
	}{
		{"returned", member("a", corev1.VolumeAvailable, releasedAgo(time.Hour), madeAgo(2*time.Hour)), t0.Add(time.Second)},
		{"never returned: its making", member("a", corev1.VolumeAvailable, madeAgo(2*time.Hour), transitioned(t1)), t1.Add(-2*time.Hour + time.Second)},
		{"an unreadable released-at: its making", member("a", corev1.VolumeAvailable, annotate(wellknown.ReleasedAt, "yesterday"), madeAgo(time.Hour)), t0.Add(time.Second)},
	} {
		if got := LastUsed(tt.pv); !got.Equal(tt.want) {
			t.Errorf("%s: LastUsed = %s, want %s", tt.name, got, tt.want)
		}
	}
}

func TestEvictable(t *testing.T) {
	now := metav1.NewTime(t1)
	for _, tt := range []struct {
		name string
		pv   *corev1.PersistentVolume
		want bool
	}{
		{"free", member("a", corev1.VolumeAvailable), true},
		{"held for a namespace", member("a", corev1.VolumeAvailable, held("ns")), true},
		{"reserved by the releaser", member("a", corev1.VolumeAvailable, reserved), true},
		{"made ahead", aheadMember("a"), true},
		{"bound", member("a", corev1.VolumeBound, claimRef("u")), false},
		{"being given to a claim (a UID in its claimRef)", member("a", corev1.VolumeAvailable, claimRef("u")), false},
		{"released", member("a", corev1.VolumeReleased, claimRef("u")), false},
		{"pre-bound by an administrator", member("a", corev1.VolumeAvailable, preBound), false},
		{"scrubbing", member("a", corev1.VolumeAvailable, annotate(wellknown.Scrub, wellknown.ScrubRequested)), false},
		{"storage pending", member("a", corev1.VolumeAvailable, annotate(wellknown.StoragePending, "true")), false},
		{"being evicted", member("a", corev1.VolumeAvailable, annotate(wellknown.Evicting, wellknown.EvictIdle)), false},
		{"being deleted", member("a", corev1.VolumeAvailable, func(pv *corev1.PersistentVolume) { pv.DeletionTimestamp = &now }), false},
	} {
		if got := Evictable(tt.pv); got != tt.want {
			t.Errorf("%s: Evictable = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestVictim(t *testing.T) {
	free := func(name string, ago time.Duration) *corev1.PersistentVolume {
		return member(name, corev1.VolumeAvailable, releasedAgo(ago))
	}
	heldOne := func(name string, ago time.Duration) *corev1.PersistentVolume {
		return member(name, corev1.VolumeAvailable, releasedAgo(ago), held("other"))
	}
	for _, tt := range []struct {
		name    string
		members []*corev1.PersistentVolume
		want    string
	}{
		{"the least recently used free member", []*corev1.PersistentVolume{free("new", time.Minute), free("old", time.Hour), heldOne("held", 2*time.Hour)}, "old"},
		{"held or reserved only when no free member can go", []*corev1.PersistentVolume{
			heldOne("held-new", time.Minute), heldOne("held-old", time.Hour), member("bound", corev1.VolumeBound, claimRef("u1")),
		}, "held-old"},
		{"a reservation of the releaser's may go", []*corev1.PersistentVolume{member("reserved", corev1.VolumeAvailable, releasedAgo(time.Hour), reserved)}, "reserved"},
		// The one clock: a member never returned counts from its making,
		// whatever its last phase transition says.
		{"never returned: by its making, not its last phase transition", []*corev1.PersistentVolume{
			member("made-long-ago", corev1.VolumeAvailable, madeAgo(3*time.Hour), transitioned(t1)),
			free("returned", 2*time.Hour),
		}, "made-long-ago"},
		// Kubernetes never deletes a volume an administrator pre-bound (a
		// claimRef by name, without the releaser's marks): neither may a pool.
		{"never an administrator's pre-bind", []*corev1.PersistentVolume{member("prebound", corev1.VolumeAvailable, releasedAgo(time.Hour), preBound)}, ""},
		{"never a bound, released, scrubbing or evicting one", []*corev1.PersistentVolume{
			member("bound", corev1.VolumeBound, claimRef("u1")),
			member("released", corev1.VolumeReleased, claimRef("u2")),
			member("scrubbing", corev1.VolumeAvailable, annotate(wellknown.Scrub, wellknown.ScrubRequested)),
			member("evicting", corev1.VolumeAvailable, annotate(wellknown.Evicting, wellknown.EvictIdle)),
		}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := ""
			if pv := Victim(tt.members); pv != nil {
				got = pv.Name
			}
			if got != tt.want {
				t.Errorf("Victim = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestIdle(t *testing.T) {
	const after = 10 * time.Minute
	free := func(name string, ago time.Duration) *corev1.PersistentVolume {
		return member(name, corev1.VolumeAvailable, releasedAgo(ago))
	}
	held := func(name string, ago time.Duration) *corev1.PersistentVolume {
		return member(name, corev1.VolumeAvailable, claimRef(""), annotate(wellknown.HeldForNamespace, "ns"), releasedAgo(ago))
	}
	neverUsed := aheadMember("ahead")
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
			member("reserved", corev1.VolumeAvailable, claimRef(""), annotate(wellknown.ReservedUntil, t1.Format(time.RFC3339)), releasedAgo(time.Hour)),
			member("released", corev1.VolumeReleased, claimRef("u3"), releasedAgo(time.Hour)),
			member("scrubbing", corev1.VolumeAvailable, annotate(wellknown.Scrub, wellknown.ScrubRequested), releasedAgo(time.Hour)),
			member("evicting", corev1.VolumeAvailable, annotate(wellknown.Evicting, wellknown.EvictIdle), releasedAgo(time.Hour)),
		}, 0, nil, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, next := Idle(tt.members, after, tt.min, t1)
			var names []string
			for _, e := range got {
				names = append(names, e.PV.Name)
				if e.Cause != wellknown.EvictIdle || e.Message == "" {
					t.Errorf("eviction of %s: cause %q, message %q", e.PV.Name, e.Cause, e.Message)
				}
			}
			if !slices.Equal(names, tt.want) || next != tt.next {
				t.Errorf("Idle = %v, next in %s; want %v, next in %s", names, next, tt.want, tt.next)
			}
		})
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
			member("reserved", corev1.VolumeAvailable, heldBy, annotate(wellknown.ReservedUntil, t1.Format(time.RFC3339))),
			member("released", corev1.VolumeReleased, claimRef("u3")),
			member("scrubbing", corev1.VolumeAvailable, annotate(wellknown.Scrub, wellknown.ScrubRequested)),
			sized("held", "1Gi", time.Hour, heldBy, annotate(wellknown.HeldForNamespace, "ns")),
		}, 1, []string{"held"}, 5},
		{"members being evicted count no more", []*corev1.PersistentVolume{
			sized("going", "5Gi", time.Hour, annotate(wellknown.Evicting, wellknown.EvictAboveMaximum)), sized("a", "1Gi", time.Hour), bound("b"),
		}, 2, nil, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var names []string
			for _, e := range AboveMaximum(tt.members, tt.limit) {
				names = append(names, e.PV.Name)
				if e.Cause != wellknown.EvictAboveMaximum {
					t.Errorf("cause %q", e.Cause)
				}
			}
			if !slices.Equal(names, tt.want) {
				t.Errorf("AboveMaximum = %v, want %v", names, tt.want)
			}
			if got := Surplus(tt.members, tt.limit); got != tt.surplus {
				t.Errorf("Surplus = %d, want %d", got, tt.surplus)
			}
		})
	}
	if got := Surplus([]*corev1.PersistentVolume{bound("b")}, 0); got != 0 {
		t.Errorf("Surplus without a maximum = %d, want 0", got)
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
			for _, e := range AboveBytes(tt.members, tt.usage, 100*mi, 60*mi, tt.min) {
				names = append(names, e.PV.Name)
				if e.Cause != wellknown.EvictAboveBytes {
					t.Errorf("cause %q", e.Cause)
				}
			}
			if !slices.Equal(names, tt.want) {
				t.Errorf("AboveBytes = %v, want %v", names, tt.want)
			}
		})
	}
}

// The byte watermarks count only what stays in the pool: members that
// idleness or the maximum chose in the same pass hold nothing any more.
func TestPlanCountsOnlyTheBytesThatStay(t *testing.T) {
	const mi = int64(1 << 20)
	members := []*corev1.PersistentVolume{
		member("idle", corev1.VolumeAvailable, releasedAgo(2*time.Hour)),
		member("recent", corev1.VolumeAvailable, releasedAgo(time.Minute)),
		member("older", corev1.VolumeAvailable, releasedAgo(2*time.Minute)),
	}
	high, low := resource.NewQuantity(10*mi, resource.BinarySI), resource.NewQuantity(8*mi, resource.BinarySI)
	r := Rules{After: &metav1.Duration{Duration: time.Hour}, High: high, Low: low, Usage: []v1alpha1.MemberUsage{
		{Volume: "idle", Bytes: 6 * mi}, {Volume: "recent", Bytes: 4 * mi}, {Volume: "older", Bytes: 3 * mi},
	}}
	got, _ := Plan(members, r, t1)
	var names []string
	for _, e := range got {
		names = append(names, e.PV.Name+"/"+e.Cause)
	}
	// Without the idle member the pool holds 7 MiB, under both marks.
	if want := []string{"idle/" + wellknown.EvictIdle}; !slices.Equal(names, want) {
		t.Errorf("Plan = %v, want %v", names, want)
	}
}
