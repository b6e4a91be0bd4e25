package poolmanager

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/reclaimable/reclaimable/apis/reclaimable/v1alpha1"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// releasedAgo is a member returned to the pool d before t1.
func releasedAgo(d time.Duration) func(*corev1.PersistentVolume) {
	return annotate(wellknown.ReleasedAt, t1.Add(-d).Format(time.RFC3339))
}

func TestDecideEvictsIdleMembers(t *testing.T) {
	evictAfter := func(p *v1alpha1.VolumePool) { p.Spec.EvictAfter = &metav1.Duration{Duration: time.Minute} }
	members := []*corev1.PersistentVolume{member("idle", corev1.VolumeAvailable, releasedAgo(time.Hour)), member("fresh", corev1.VolumeAvailable, releasedAgo(time.Second))}
	now := metav1.NewTime(t1)
	ready := class(map[string]string{"backend": "directory"})

	r := decide(view{pool: pool("p", observed("namespace"), evictAfter), class: ready, provisioner: testProvisioner, members: members, now: now})
	if len(r.evict) != 1 || r.evict[0].PV.Name != "idle" || r.recheck != time.Minute {
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

	evicting := member("going", corev1.VolumeAvailable, annotate(wellknown.Evicting, wellknown.EvictIdle))
	r = decide(view{pool: pool("p", observed("namespace")), class: ready, provisioner: testProvisioner, members: []*corev1.PersistentVolume{evicting}, now: now})
	if r.status.Evicting != 1 || r.status.Free != 0 {
		t.Errorf("status evicting %d, free %d; want 1 and 0", r.status.Evicting, r.status.Free)
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
	ready := class(map[string]string{"backend": "directory", wellknown.MaxVolumes: "2"})
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
				names = append(names, e.PV.Name)
			}
			if !slices.Equal(names, tt.want) || r.status.Surplus != 1 {
				t.Errorf("evict %v, surplus %d; want %v and 1", names, r.status.Surplus, tt.want)
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
		member("new", corev1.VolumeAvailable, annotate(wellknown.ReleasedAt, at)),
		member("kept", corev1.VolumeAvailable, annotate(wellknown.ReleasedAt, at)),
		member("reused", corev1.VolumeAvailable, annotate(wellknown.ReleasedAt, at)),
		member("bound", corev1.VolumeBound, claimRef("u"), annotate(wellknown.ReleasedAt, at)),
		member("unmeasured", corev1.VolumeAvailable, annotate(wellknown.ReleasedAt, at)),
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
