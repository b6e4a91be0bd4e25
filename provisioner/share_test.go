package provisioner

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

func TestShareSize(t *testing.T) {
	ahead := func(pv *corev1.PersistentVolume) {
		pv.Spec.ClaimRef = pools.AheadClaimRef(pv.Name)
		pv.Annotations[wellknown.MadeAhead] = "true"
	}
	members := []*corev1.PersistentVolume{
		volume("bound-a", "1Gi", bound("a", "c1", "u1")),
		volume("held-a", "1Gi", heldFor("a")),
		volume("reserved-a", "1Gi", reservedFor("a", "c2", t0())),
		volume("released-a", "1Gi", bound("a", "gone", "u2"), func(pv *corev1.PersistentVolume) { pv.Status.Phase = corev1.VolumeReleased }),
		volume("last-a", "1Gi", returned("a/old", t0())),
		volume("bound-b", "1Gi", bound("b", "c1", "u3")),
		volume("never-used", "1Gi"),
		volume("made-ahead", "1Gi", ahead),
	}
	for _, tt := range []struct {
		name        string
		namespace   string
		taken, made []string
		want        int
	}{
		{"bound, held, reserved, released and last used in the namespace", "a", nil, nil, 5},
		{"another namespace's", "b", nil, nil, 1},
		{"none", "c", nil, nil, 0},
		{"a member taken for the namespace, not shown yet", "b", []string{"never-used"}, nil, 2},
		{"a member taken that the cache shows already", "a", []string{"held-a"}, nil, 5},
		{"a take in another class", "b", []string{"elsewhere"}, nil, 1},
		{"a volume being made for the namespace", "c", nil, []string{"pvc-new"}, 1},
		{"a volume made, that the cache shows", "b", nil, []string{"bound-b"}, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := shareSize(members, tt.namespace, tt.taken, tt.made); got != tt.want {
				t.Errorf("shareSize(%s) = %d, want %d", tt.namespace, got, tt.want)
			}
		})
	}
	got := withinShare(members, "a")
	names := make([]string, 0, len(got))
	for _, pv := range got {
		names = append(names, pv.Name)
	}
	if want := "bound-a held-a reserved-a released-a last-a"; strings.Join(names, " ") != want {
		t.Errorf("withinShare(a) = %v, want %s", names, want)
	}
}

// A namespace at maxVolumesPerNamespace waits, with an event, while
// another namespace is served; it may still have a member held for it,
// and never one no claim has had.
func TestProvisionKeepsANamespaceToItsShare(t *testing.T) {
	a1, a2, b1 := claimFor("tenant-a", "one", "1Gi"), claimFor("tenant-a", "two", "1Gi"), claimFor("tenant-b", "one", "1Gi")
	f := newFixture(t, []*corev1.PersistentVolume{volume("never-used", "1Gi"), volume("bound-a", "1Gi", bound("tenant-a", "one", string(a1.UID)))}, a1, a2, b1)
	class := f.directoryClass(map[string]string{wellknown.MaxVolumesPerNamespace: "1", "maxVolumes": "10"})

	pv, _, err := f.provision(class, a2)
	if pv != nil || !errors.Is(err, errAtShare) {
		t.Fatalf("a claim of a namespace at its maximum = %v, %v; want it to wait", nameOf(pv), err)
	}
	if ev := f.events(); !hasEvent(ev, "Warning NamespaceAtMaximum namespace tenant-a has 1 of at most 1 volumes of class pool (maxVolumesPerNamespace=1)") {
		t.Errorf("events = %v", ev)
	}
	if ref := f.server("never-used").Spec.ClaimRef; ref != nil {
		t.Errorf("the member no claim had went to a namespace at its maximum: claimRef %+v", ref)
	}
	if got := f.p.Waiting(class.Name); got != 0 {
		t.Errorf("claims waiting for a full pool = %d, want 0: the pool is not exhausted", got)
	}
	if got := len(f.p.atShare.Still(class.Name, f.p.stillWaiting)); got != 1 {
		t.Errorf("claims waiting at their namespace's maximum = %d, want 1", got)
	}

	_, _, err = f.provision(class, b1)
	wantIssued(t, err, "never-used")

	// tenant-a's claim lets go of its member: the releaser holds it for
	// tenant-a, whose waiting claim may have it.
	released := f.server("bound-a")
	heldFor("tenant-a")(released)
	if _, err := f.client.CoreV1().PersistentVolumes().Update(t.Context(), released, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.volumes.Update(released)
	_, _, err = f.provision(class, a2)
	wantIssued(t, err, "bound-a")
}

// The share counts what this provisioner gave a namespace before its
// cache shows it: two claims of a namespace one after the other, the
// cache still showing neither write, get one volume between them.
func TestShareCountsWritesTheCacheDoesNotShowYet(t *testing.T) {
	for _, tt := range []struct {
		name    string
		members []*corev1.PersistentVolume
	}{
		{"a member taken", []*corev1.PersistentVolume{volume("never-used", "1Gi")}},
		{"a volume made", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a1, a2 := claimFor("tenant-a", "one", "1Gi"), claimFor("tenant-a", "two", "1Gi")
			f := newFixture(t, tt.members, a1, a2)
			class := f.directoryClass(map[string]string{wellknown.MaxVolumesPerNamespace: "1"})
			pv, _, err := f.provision(class, a1)
			if pv == nil && !strings.Contains(errString(err), "issued") {
				t.Fatalf("the first claim = %v, %v; want a volume", nameOf(pv), err)
			}
			// The cache is not told of the write.
			pv, _, err = f.provision(class, a2)
			if pv != nil || !errors.Is(err, errAtShare) {
				t.Fatalf("the second claim, the cache behind = %v, %v; want it to wait", nameOf(pv), err)
			}
			if ev := f.events(); !hasEvent(ev, "Warning NamespaceAtMaximum namespace tenant-a has 1 of at most 1") {
				t.Errorf("events = %v", ev)
			}
		})
	}
}

// nameOf names pv, "<none>" for nil.
func nameOf(pv *corev1.PersistentVolume) string {
	if pv == nil {
		return "<none>"
	}
	return pv.Name
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
