package match

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	"github.com/reclaimable/reclaimable/internal/wellknown"
	"github.com/reclaimable/reclaimable/provisioner/backend"
	"github.com/reclaimable/reclaimable/provisioner/backend/backendtest"
)

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
		{"other provisioner", volume("a", "1Gi", func(pv *corev1.PersistentVolume) { pv.Annotations[wellknown.ProvisionedBy] = "other/x" }), "directory", false},
		{"static, labelled", volume("a", "1Gi", func(pv *corev1.PersistentVolume) {
			delete(pv.Annotations, wellknown.ProvisionedBy)
			pv.Labels = map[string]string{wellknown.Pool: "pool"}
		}), "static", true},
		{"static, labelled for another class", volume("a", "1Gi", func(pv *corev1.PersistentVolume) {
			pv.Labels = map[string]string{wellknown.Pool: "other"}
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
			if got := IsMember(tt.pv, "pool", pool); got != tt.want {
				t.Errorf("IsMember = %v, want %v", got, tt.want)
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
			pv.Annotations[wellknown.HeldForNamespace] = ns
		}
	}
	lastIn := func(ns string) func(*corev1.PersistentVolume) {
		return func(pv *corev1.PersistentVolume) { pv.Annotations[wellknown.LastClaim] = ns + "/x" }
	}
	tests := []struct {
		name string
		pv   *corev1.PersistentVolume
		want Availability
		// wantNamespaced under reuseScope namespace; want itself if unset.
		wantNamespaced *Availability
	}{
		{"Available without claim", volume("a", "1Gi"), Free, nil},
		{"Pending, just created", volume("a", "1Gi", func(pv *corev1.PersistentVolume) { pv.Status.Phase = corev1.VolumePending }), Free, nil},
		{"Released, claimRef just cleared", volume("a", "1Gi", func(pv *corev1.PersistentVolume) { pv.Status.Phase = corev1.VolumeReleased }), Free, nil},
		{"Failed", volume("a", "1Gi", func(pv *corev1.PersistentVolume) { pv.Status.Phase = corev1.VolumeFailed }), InUse, nil},
		{"Bound", volume("a", "1Gi", bound("ns", "other", "u1")), InUse, nil},
		{"Released", volume("a", "1Gi", released("ns", "old", "u0", now)), FreeIfGone, nil},
		{"bound to the earlier claim of this name", volume("a", "1Gi", bound("ns", "c", "earlier")), Returning, nil},
		{"Released by the earlier claim of this name", volume("a", "1Gi", released("ns", "c", "earlier", now)), FreeIfGone, nil},
		{"bound to this very claim", volume("a", "1Gi", bound("ns", "c", string(claim.UID))), InUse, nil},
		{"bound to a claim of this name in another namespace", volume("a", "1Gi", bound("other", "c", "u1")), InUse, nil},
		{"being deleted", volume("a", "1Gi", func(pv *corev1.PersistentVolume) { pv.DeletionTimestamp = &metav1.Time{Time: now} }), InUse, nil},
		{"taken for another claim, not bound yet", volume("a", "1Gi", func(pv *corev1.PersistentVolume) {
			pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "ns", Name: "x", UID: "u2"}
		}), InUse, nil},
		{"pre-bound to this claim's name", volume("a", "1Gi", func(pv *corev1.PersistentVolume) {
			pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "ns", Name: "c"}
		}), Free, nil},
		{"pre-bound to another name", volume("a", "1Gi", func(pv *corev1.PersistentVolume) {
			pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "ns", Name: "x"}
		}), InUse, nil},
		{"reserved for this claim's name", volume("a", "1Gi", reservedFor("ns", "c", t0())), Free, nil},
		{"reserved for another name", volume("a", "1Gi", reservedFor("ns", "x", t0())), ReservedForOther, nil},
		{"reserved for the name in another namespace", volume("a", "1Gi", reservedFor("other", "c", t0())), ReservedForOther, ptr.To(OtherNamespace)},
		{"held for this namespace", volume("a", "1Gi", heldFor("ns", "x")), Free, nil},
		{"held for another namespace", volume("a", "1Gi", heldFor("other", "x")), Free, ptr.To(OtherNamespace)},
		{"held for this namespace under this claim's name", volume("a", "1Gi", heldFor("ns", "c")), Free, nil},
		{"held and reserved for another name of this namespace", volume("a", "1Gi", reservedFor("ns", "x", t0()), heldFor("ns", "x")), ReservedForOther, nil},
		{"free, last bound in this namespace", volume("a", "1Gi", lastIn("ns")), Free, nil},
		{"free, last bound in another namespace", volume("a", "1Gi", lastIn("other")), Free, ptr.To(OtherNamespace)},
		{"Released from a claim of another namespace", volume("a", "1Gi", released("other", "old", "u0", now)), FreeIfGone, ptr.To(OtherNamespace)},
		{"bound in another namespace", volume("a", "1Gi", bound("other", "x", "u1")), InUse, nil},
		{"pre-bound by hand to a name in another namespace", volume("a", "1Gi", func(pv *corev1.PersistentVolume) {
			pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "other", Name: "x"}
		}), InUse, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := AvailabilityOf(tt.pv, claim, false); got != tt.want {
				t.Errorf("AvailabilityOf under reuseScope cluster = %v, want %v", got, tt.want)
			}
			want := tt.want
			if tt.wantNamespaced != nil {
				want = *tt.wantNamespaced
			}
			if got := AvailabilityOf(tt.pv, claim, true); got != want {
				t.Errorf("AvailabilityOf under reuseScope namespace = %v, want %v", got, want)
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
			if got := Misfit(tt.pv, tt.claim, tt.node, sel); got != tt.want {
				t.Errorf("Misfit = %q, want %q", got, tt.want)
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
