package provisioner

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"

	"github.com/reclaimable/reclaimable/internal/keys"
	"github.com/reclaimable/reclaimable/provisioner/backend"
	"github.com/reclaimable/reclaimable/provisioner/backend/backendtest"
	"github.com/reclaimable/reclaimable/provisioner/provisionertest"
)

// The builders the provisioner's tests share with those of the packages
// beside it (provisionertest), by their short names here.
const testProvisioner = provisionertest.Provisioner

var (
	volume     = provisionertest.Volume
	released   = provisionertest.Released
	returned   = provisionertest.Returned
	keyed      = provisionertest.Keyed
	bound      = provisionertest.Bound
	claimFor   = provisionertest.ClaimFor
	t0         = provisionertest.T0
	hasEvent   = provisionertest.HasEvent
	wantIssued = provisionertest.WantIssued
)

// heldFor makes pv a member held for namespace ns: last issued there, and
// Available again with the releaser's claimRef.
func heldFor(ns string) func(*corev1.PersistentVolume) {
	return func(pv *corev1.PersistentVolume) {
		pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: ns, Name: "old"}
		pv.Annotations[keys.HeldForNamespace] = ns
		pv.Status.Phase = corev1.VolumeAvailable
	}
}

func TestIsMember(t *testing.T) {
	tests := []struct {
		name    string
		pv      *corev1.PersistentVolume
		backend string
		want    bool
	}{
		{"created here, Retain", volume("a", "1Gi"), "directory", true},
		{"created here, Delete", volume("a", "1Gi", func(pv *corev1.PersistentVolume) {
			pv.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimDelete
		}), "directory", false},
		{"other class", volume("a", "1Gi", func(pv *corev1.PersistentVolume) { pv.Spec.StorageClassName = "other" }), "directory", false},
		{"other provisioner", volume("a", "1Gi", func(pv *corev1.PersistentVolume) { pv.Annotations[keys.ProvisionedBy] = "other/x" }), "directory", false},
		{"static, labelled", volume("a", "1Gi", func(pv *corev1.PersistentVolume) {
			delete(pv.Annotations, keys.ProvisionedBy)
			pv.Labels = map[string]string{keys.Pool: "pool"}
		}), "static", true},
		{"static, labelled for another class", volume("a", "1Gi", func(pv *corev1.PersistentVolume) {
			pv.Labels = map[string]string{keys.Pool: "other"}
		}), "static", false},
		{"static, not labelled though created here", volume("a", "1Gi"), "static", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			class := backendtest.Classes(root)[tt.backend]
			pool, errs := backend.New(backendtest.Deps(t, root))[tt.backend].ForClass(class)
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			if got := isMember(tt.pv, "pool", pool); got != tt.want {
				t.Errorf("isMember = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestAvailability(t *testing.T) {
	claim := claimFor("ns", "c", "1Gi")
	now := time.Now()
	heldFor := func(ns, name string) func(*corev1.PersistentVolume) {
		return func(pv *corev1.PersistentVolume) {
			pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: ns, Name: name}
			pv.Annotations[keys.HeldForNamespace] = ns
		}
	}
	lastIn := func(ns string) func(*corev1.PersistentVolume) {
		return func(pv *corev1.PersistentVolume) { pv.Annotations[keys.LastClaim] = ns + "/x" }
	}
	tests := []struct {
		name string
		pv   *corev1.PersistentVolume
		want availability
		// wantNamespaced under reuseScope namespace; want itself if unset.
		wantNamespaced *availability
	}{
		{"Available without claim", volume("a", "1Gi"), free, nil},
		{"Pending, just created", volume("a", "1Gi", func(pv *corev1.PersistentVolume) { pv.Status.Phase = corev1.VolumePending }), free, nil},
		{"Released, claimRef just cleared", volume("a", "1Gi", func(pv *corev1.PersistentVolume) { pv.Status.Phase = corev1.VolumeReleased }), free, nil},
		{"Failed", volume("a", "1Gi", func(pv *corev1.PersistentVolume) { pv.Status.Phase = corev1.VolumeFailed }), inUse, nil},
		{"Bound", volume("a", "1Gi", bound("ns", "other", "u1")), inUse, nil},
		{"Released", volume("a", "1Gi", released("ns", "old", "u0", now)), freeIfGone, nil},
		{"bound to the earlier claim of this name", volume("a", "1Gi", bound("ns", "c", "earlier")), returning, nil},
		{"Released by the earlier claim of this name", volume("a", "1Gi", released("ns", "c", "earlier", now)), freeIfGone, nil},
		{"bound to this very claim", volume("a", "1Gi", bound("ns", "c", string(claim.UID))), inUse, nil},
		{"bound to a claim of this name in another namespace", volume("a", "1Gi", bound("other", "c", "u1")), inUse, nil},
		{"being deleted", volume("a", "1Gi", func(pv *corev1.PersistentVolume) { pv.DeletionTimestamp = &metav1.Time{Time: now} }), inUse, nil},
		{"taken for another claim, not bound yet", volume("a", "1Gi", func(pv *corev1.PersistentVolume) {
			pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "ns", Name: "x", UID: "u2"}
		}), inUse, nil},
		{"pre-bound to this claim's name", volume("a", "1Gi", func(pv *corev1.PersistentVolume) {
			pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "ns", Name: "c"}
		}), free, nil},
		{"pre-bound to another name", volume("a", "1Gi", func(pv *corev1.PersistentVolume) {
			pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "ns", Name: "x"}
		}), inUse, nil},
		{"reserved for this claim's name", volume("a", "1Gi", reservedFor("ns", "c", t0())), free, nil},
		{"reserved for another name", volume("a", "1Gi", reservedFor("ns", "x", t0())), reservedForOther, nil},
		{"reserved for the name in another namespace", volume("a", "1Gi", reservedFor("other", "c", t0())), reservedForOther, ptr.To(otherNamespace)},
		{"held for this namespace", volume("a", "1Gi", heldFor("ns", "x")), free, nil},
		{"held for another namespace", volume("a", "1Gi", heldFor("other", "x")), free, ptr.To(otherNamespace)},
		{"held for this namespace under this claim's name", volume("a", "1Gi", heldFor("ns", "c")), free, nil},
		{"held and reserved for another name of this namespace", volume("a", "1Gi", reservedFor("ns", "x", t0()), heldFor("ns", "x")), reservedForOther, nil},
		{"free, last bound in this namespace", volume("a", "1Gi", lastIn("ns")), free, nil},
		{"free, last bound in another namespace", volume("a", "1Gi", lastIn("other")), free, ptr.To(otherNamespace)},
		{"Released from a claim of another namespace", volume("a", "1Gi", released("other", "old", "u0", now)), freeIfGone, ptr.To(otherNamespace)},
		{"bound in another namespace", volume("a", "1Gi", bound("other", "x", "u1")), inUse, nil},
		{"pre-bound by hand to a name in another namespace", volume("a", "1Gi", func(pv *corev1.PersistentVolume) {
			pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "other", Name: "x"}
		}), inUse, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := availabilityOf(tt.pv, claim, false); got != tt.want {
				t.Errorf("availabilityOf under reuseScope cluster = %v, want %v", got, tt.want)
			}
			want := tt.want
			if tt.wantNamespaced != nil {
				want = *tt.wantNamespaced
			}
			if got := availabilityOf(tt.pv, claim, true); got != want {
				t.Errorf("availabilityOf under reuseScope namespace = %v, want %v", got, want)
			}
		})
	}
}

func TestMisfit(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-2", Labels: map[string]string{"kubernetes.io/hostname": "node-2"}}}
	onNode := func(host string) func(*corev1.PersistentVolume) {
		return func(pv *corev1.PersistentVolume) {
			pv.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{host}}},
			}}}}
		}
	}
	block := ptr.To(corev1.PersistentVolumeBlock)
	tests := []struct {
		name     string
		pv       *corev1.PersistentVolume
		claim    *corev1.PersistentVolumeClaim
		node     *corev1.Node
		selector string
		want     string
	}{
		{"equal size", volume("a", "1Gi"), claimFor("ns", "c", "1Gi"), nil, "", ""},
		{"larger", volume("a", "2Gi"), claimFor("ns", "c", "1Gi"), nil, "", ""},
		{"smaller", volume("a", "1Gi"), claimFor("ns", "c", "1025Mi"), nil, "", "capacity"},
		{"access mode missing", volume("a", "1Gi"), claimFor("ns", "c", "1Gi", func(c *corev1.PersistentVolumeClaim) {
			c.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}
		}), nil, "", "access modes"},
		{"access modes superset", volume("a", "1Gi", func(pv *corev1.PersistentVolume) {
			pv.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce, corev1.ReadWriteMany}
		}), claimFor("ns", "c", "1Gi", func(c *corev1.PersistentVolumeClaim) {
			c.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}
		}), nil, "", ""},
		{"block claim, filesystem volume", volume("a", "1Gi"), claimFor("ns", "c", "1Gi", func(c *corev1.PersistentVolumeClaim) {
			c.Spec.VolumeMode = block
		}), nil, "", "volume mode"},
		{"block claim, block volume", volume("a", "1Gi", func(pv *corev1.PersistentVolume) { pv.Spec.VolumeMode = block }),
			claimFor("ns", "c", "1Gi", func(c *corev1.PersistentVolumeClaim) { c.Spec.VolumeMode = block }), nil, "", ""},
		{"nil mode is filesystem", volume("a", "1Gi", func(pv *corev1.PersistentVolume) {
			pv.Spec.VolumeMode = ptr.To(corev1.PersistentVolumeFilesystem)
		}), claimFor("ns", "c", "1Gi"), nil, "", ""},
		{"volume attributes class differs", volume("a", "1Gi"), claimFor("ns", "c", "1Gi", func(c *corev1.PersistentVolumeClaim) {
			c.Spec.VolumeAttributesClassName = ptr.To("fast")
		}), nil, "", "volume attributes class"},
		{"selector matches", volume("a", "1Gi", func(pv *corev1.PersistentVolume) { pv.Labels = map[string]string{"cache": "go"} }),
			claimFor("ns", "c", "1Gi"), nil, "cache=go", ""},
		{"selector does not match", volume("a", "1Gi", func(pv *corev1.PersistentVolume) { pv.Labels = map[string]string{"cache": "npm"} }),
			claimFor("ns", "c", "1Gi"), nil, "cache=go", "selector"},
		{"selected node matches", volume("a", "1Gi", onNode("node-2")), claimFor("ns", "c", "1Gi"), node, "", ""},
		{"selected node does not match", volume("a", "1Gi", onNode("node-1")), claimFor("ns", "c", "1Gi"), node, "", "node"},
		{"no node selected: affinity does not matter", volume("a", "1Gi", onNode("node-1")), claimFor("ns", "c", "1Gi"), nil, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var sel labels.Selector
			if tt.selector != "" {
				sel = labels.SelectorFromSet(labels.Set(mustParseSet(t, tt.selector)))
			}
			if got := misfit(tt.pv, tt.claim, tt.node, sel); got != tt.want {
				t.Errorf("misfit = %q, want %q", got, tt.want)
			}
		})
	}
}

func mustParseSet(t *testing.T, s string) labels.Set {
	t.Helper()
	set, err := labels.ConvertSelectorToLabelsMap(s)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func TestCandidatesPreference(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	claim := claimFor("team", "cache", "1Gi")
	tests := []struct {
		name    string
		rules   poolRules
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
			rules: poolRules{reserving: true},
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
			rules: poolRules{keyRequired: true, namespaced: true, reserving: true},
			key:   "ci=a",
			members: []*corev1.PersistentVolume{
				volume("other-key", "1Gi", returned("team/x", t0), keyed("ci=b")),
				volume("other-key-released", "1Gi", released("team", "y", "u", t0), keyed("ci=b")),
				volume("other-key-returning", "1Gi", released("team", "cache", "old", t0), keyed("ci=b")),
				volume("other-key-reserved", "1Gi", reservedFor("team", "z", t0), keyed("ci=b")),
				volume("used-without-key", "1Gi", returned("team/w", t0)),
				volume("never-used", "2Gi"),
				volume("scrubbed", "2Gi", func(pv *corev1.PersistentVolume) { pv.Annotations[keys.ReleasedAt] = t0.Format(time.RFC3339) }),
				volume("same-key", "3Gi", returned("team/v", t0), keyed("ci=a")),
			},
			want: []string{"same-key", "scrubbed", "never-used"},
		},
		{
			name:  "keyPolicy Require, a claim without a key: members used without one, and those never used",
			rules: poolRules{keyRequired: true, namespaced: true},
			members: []*corev1.PersistentVolume{
				volume("keyed", "1Gi", returned("team/x", t0), keyed("ci=b")),
				volume("used-without-key", "2Gi", returned("team/w", t0)),
				volume("never-used", "1Gi"),
			},
			want: []string{"used-without-key", "never-used"},
		},
		{
			name:  "under reserveFor, a member still Released for another name is the newest reservation; for this name, its own",
			rules: poolRules{reserving: true},
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
			got, _ := candidates(tt.members, claim, tt.key, tt.rules, nil, nil)
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
	_, state := candidates(members, claimFor("ns", "c", "1Gi"), "", poolRules{namespaced: true}, nil, nil)
	want := "3 volumes, 1 in use, 2 free (not fitting: 1 by access modes, 1 by capacity)"
	if got := state.String(); got != want {
		t.Errorf("state = %q, want %q", got, want)
	}
	members = append(members, volume("other-key", "1Gi", returned("ns/y", time.Now()), keyed("ci=b")))
	_, state = candidates(members, claimFor("ns", "c", "1Gi"), "ci=a", poolRules{namespaced: true, keyRequired: true}, nil, nil)
	want = "4 volumes, 1 in use, 2 free, 1 free for other keys only (keyPolicy Require) (not fitting: 1 by access modes, 1 by capacity)"
	if got := state.String(); got != want {
		t.Errorf("state = %q, want %q", got, want)
	}
}

func TestClaimSelector(t *testing.T) {
	allowed := sets.New("cache", keys.Pool)
	tests := []struct {
		name    string
		sel     *metav1.LabelSelector
		wantErr string
	}{
		{"no selector", nil, ""},
		{"known key", &metav1.LabelSelector{MatchLabels: map[string]string{"cache": "go"}}, ""},
		{"known key in an expression", &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "cache", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"npm"}},
		}}, ""},
		{"unknown key", &metav1.LabelSelector{MatchLabels: map[string]string{"region": "east"}}, "region"},
		{"unknown key among known ones", &metav1.LabelSelector{
			MatchLabels:      map[string]string{"cache": "go"},
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "zone", Operator: metav1.LabelSelectorOpExists}},
		}, "zone"},
		{"invalid operator", &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "cache", Operator: "Near", Values: []string{"x"}},
		}}, "invalid selector"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			claim := claimFor("ns", "c", "1Gi", func(c *corev1.PersistentVolumeClaim) { c.Spec.Selector = tt.sel })
			_, err := claimSelector(claim, allowed)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("claimSelector error = %v, want containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestLabelsFor(t *testing.T) {
	tests := []struct {
		selector string
		want     map[string]string
		wantErr  bool
	}{
		{"", nil, false},
		{"cache=go", map[string]string{"cache": "go"}, false},
		{"cache in (go)", map[string]string{"cache": "go"}, false},
		{"cache=go,tier!=hot", map[string]string{"cache": "go"}, false},
		{"cache notin (npm),!tier", map[string]string{}, false},
		{"cache in (go,npm)", nil, true},
		{"cache", nil, true},
		{"cache=go,cache=npm", nil, true},
		{"cache=go,cache notin (go)", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.selector, func(t *testing.T) {
			var sel labels.Selector
			if tt.selector != "" {
				var err error
				if sel, err = labels.Parse(tt.selector); err != nil {
					t.Fatal(err)
				}
			}
			got, err := labelsFor(sel)
			if (err != nil) != tt.wantErr {
				t.Fatalf("labelsFor error = %v, want error %v", err, tt.wantErr)
			}
			if !tt.wantErr && !labels.Equals(got, tt.want) {
				t.Errorf("labelsFor = %v, want %v", got, tt.want)
			}
		})
	}
}
