package match

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/reclaimable/reclaimable/internal/wellknown"
)

func TestCandidatesPreference(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	claim := claimFor("team", "cache", "1Gi")
	tests := []struct {
		name    string
		rules   Rules
		key     string // the claim's cache key
		members []*corev1.PersistentVolume
		want    []string
	}{
		{
			name: "same namespace and name first, then same key, then same namespace, then the rest",
			key:  "ci=a",
			members: []*corev1.PersistentVolume{
				volume("other", "1Gi", returned("else/x", t0), keyed("ci=b")),
				volume("same-ns", "1Gi", returned("team/y", t0), keyed("ci=b")),
				volume("same-key", "5Gi", returned("else/z", t0), keyed("ci=a")),
				volume("same-name", "5Gi", returned("team/cache", t0), keyed("ci=b")),
			},
			want: []string{"same-name", "same-key", "same-ns", "other"},
		},
		{
			name: "a key written under another keyLabel, or none, is not the claim's",
			key:  "ci=a",
			members: []*corev1.PersistentVolume{
				volume("other-label", "1Gi", returned("else/x", t0), keyed("team=a")),
				volume("no-key", "1Gi", returned("else/y", t0.Add(time.Hour))),
				volume("same-key", "1Gi", returned("else/z", t0.Add(-time.Hour)), keyed("ci=a")),
			},
			want: []string{"same-key", "no-key", "other-label"},
		},
		{
			name:  "a reservation for another name of the claim's key ranks with its key, after the unreserved",
			rules: Rules{Reserving: true},
			key:   "ci=a",
			members: []*corev1.PersistentVolume{
				volume("reserved-other-key", "1Gi", reservedFor("team", "b", t0), keyed("ci=b")),
				volume("released-same-key", "1Gi", released("team", "c", "u", t0.Add(time.Hour)), keyed("ci=a")),
				volume("reserved-same-key", "1Gi", reservedFor("team", "d", t0), keyed("ci=a")),
				volume("free-same-key", "1Gi", returned("team/e", t0), keyed("ci=a")),
				volume("free-other-key", "1Gi", returned("team/f", t0), keyed("ci=b")),
			},
			want: []string{"free-same-key", "released-same-key", "reserved-same-key", "free-other-key", "reserved-other-key"},
		},
		{
			name:  "keyPolicy Require: only members of the claim's key and those never used or emptied since",
			rules: Rules{KeyRequired: true, Namespaced: true, Reserving: true},
			key:   "ci=a",
			members: []*corev1.PersistentVolume{
				volume("other-key", "1Gi", returned("team/x", t0), keyed("ci=b")),
				volume("other-key-released", "1Gi", released("team", "y", "u", t0), keyed("ci=b")),
				volume("other-key-returning", "1Gi", released("team", "cache", "old", t0), keyed("ci=b")),
				volume("other-key-reserved", "1Gi", reservedFor("team", "z", t0), keyed("ci=b")),
				volume("used-without-key", "1Gi", returned("team/w", t0)),
				volume("never-used", "2Gi"),
				volume("scrubbed", "2Gi", func(pv *corev1.PersistentVolume) { pv.Annotations[wellknown.ReleasedAt] = t0.Format(time.RFC3339) }),
				volume("same-key", "3Gi", returned("team/v", t0), keyed("ci=a")),
			},
			want: []string{"same-key", "scrubbed", "never-used"},
		},
		{
			name:  "keyPolicy Require, a claim without a key: members used without one, and those never used",
			rules: Rules{KeyRequired: true, Namespaced: true},
			members: []*corev1.PersistentVolume{
				volume("keyed", "1Gi", returned("team/x", t0), keyed("ci=b")),
				volume("used-without-key", "2Gi", returned("team/w", t0)),
				volume("never-used", "1Gi"),
			},
			want: []string{"used-without-key", "never-used"},
		},
		{
			name:  "under reserveFor, a member still Released for another name is the newest reservation; for this name, its own",
			rules: Rules{Reserving: true},
			members: []*corev1.PersistentVolume{
				volume("just-released", "1Gi", released("team", "b", "u", t0.Add(2*time.Hour))),
				volume("reserved", "1Gi", reservedFor("team", "a", t0)),
				volume("free", "1Gi", returned("else/x", t0)),
				volume("own-released", "1Gi", released("team", "cache", "u2", t0)),
			},
			want: []string{"own-released", "free", "reserved", "just-released"},
		},
		{
			name: "reserved for this claim first; reserved for others last, oldest reservation first; pre-bound by hand never",
			members: []*corev1.PersistentVolume{
				volume("reserved-later", "1Gi", reservedFor("team", "b", t0.Add(time.Hour))),
				volume("reserved-sooner", "5Gi", reservedFor("team", "a", t0)),
				volume("free", "1Gi", returned("else/x", t0)),
				volume("by-hand", "1Gi", func(pv *corev1.PersistentVolume) {
					pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "team", Name: "z"}
				}),
				volume("own", "1Gi", reservedFor("team", "cache", t0)),
			},
			want: []string{"own", "free", "reserved-sooner", "reserved-later"},
		},
		{
			name: "same namespace and name first, then same namespace, then the rest",
			members: []*corev1.PersistentVolume{
				volume("other-ns", "1Gi", returned("else/cache", t0)),
				volume("same-ns", "1Gi", returned("team/build", t0)),
				volume("same-name", "5Gi", released("team", "cache", "old-uid", t0)),
			},
			want: []string{"same-name", "same-ns", "other-ns"},
		},
		{
			name: "a namespace that merely starts like the claim's is another namespace",
			members: []*corev1.PersistentVolume{
				volume("prefix", "1Gi", returned("team-b/cache", t0)),
				volume("exact", "2Gi", returned("team/x", t0)),
			},
			want: []string{"exact", "prefix"},
		},
		{
			name: "then the smallest that fits",
			members: []*corev1.PersistentVolume{
				volume("big", "10Gi"),
				volume("small", "1Gi"),
				volume("medium", "2Gi"),
			},
			want: []string{"small", "medium", "big"},
		},
		{
			name: "then one back in the pool before one still Released, then the most recently released",
			members: []*corev1.PersistentVolume{
				volume("old", "1Gi", returned("x/a", t0)),
				volume("newest", "1Gi", released("x", "b", "u", t0.Add(2*time.Hour))),
				volume("newer", "1Gi", returned("x/c", t0.Add(time.Hour))),
				volume("never-used", "1Gi"),
				volume("released-before", "1Gi", released("x", "d", "u2", t0.Add(-time.Hour))),
			},
			want: []string{"newer", "old", "never-used", "newest", "released-before"},
		},
		{
			name: "then by name",
			members: []*corev1.PersistentVolume{
				volume("b", "1Gi"), volume("a", "1Gi"), volume("c", "1Gi"),
			},
			want: []string{"a", "b", "c"},
		},
		{
			name: "in use and unfit members are left out",
			members: []*corev1.PersistentVolume{
				volume("bound", "1Gi", bound("team", "cache", "x")),
				volume("small", "500Mi"),
				volume("fits", "1Gi"),
			},
			want: []string{"fits"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _ := Candidates(tt.members, claim, tt.key, tt.rules, nil, nil)
			var names []string
			for _, pv := range got {
				names = append(names, pv.Name)
			}
			if !slices.Equal(names, tt.want) {
				t.Errorf("order = %v, want %v", names, tt.want)
			}
		})
	}
}

func TestCandidatesState(t *testing.T) {
	members := []*corev1.PersistentVolume{
		volume("bound", "1Gi", bound("ns", "x", "u")),
		volume("small", "500Mi"),
		volume("rwx", "1Gi", func(pv *corev1.PersistentVolume) {
			pv.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}
		}),
	}
	_, state := Candidates(members, claimFor("ns", "c", "1Gi"), "", Rules{Namespaced: true}, nil, nil)
	want := "3 volumes, 1 in use, 2 free (not fitting: 1 by access modes, 1 by capacity)"
	if got := state.String(); got != want {
		t.Errorf("state = %q, want %q", got, want)
	}
	members = append(members, volume("other-key", "1Gi", returned("ns/y", time.Now()), keyed("ci=b")))
	_, state = Candidates(members, claimFor("ns", "c", "1Gi"), "ci=a", Rules{Namespaced: true, KeyRequired: true}, nil, nil)
	want = "4 volumes, 1 in use, 2 free, 1 free for other keys only (keyPolicy Require) (not fitting: 1 by access modes, 1 by capacity)"
	if got := state.String(); got != want {
		t.Errorf("state = %q, want %q", got, want)
	}
}
