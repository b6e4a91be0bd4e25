package poolmanager

import (
	"errors"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
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
		{"none idle: look again when the first comes due", []*corev1.PersistentVolume{free("a", time.Minute), free("b", 4*time.Minute)}, 0, nil, 6 * time.Minute},
		{"idle ones, least recently used first", []*corev1.PersistentVolume{free("new", time.Minute), free("old", time.Hour), free("older", 2*time.Hour)}, 0,
			[]string{"older", "old"}, 9 * time.Minute},
		{"exactly due", []*corev1.PersistentVolume{free("a", after)}, 0, []string{"a"}, 0},
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
	if len(r.evict) != 1 || r.evict[0].pv.Name != "idle" || r.recheck != 59*time.Second {
		t.Errorf("evict %v, recheck %s; want idle, and a look again in 59s", r.evict, r.recheck)
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
