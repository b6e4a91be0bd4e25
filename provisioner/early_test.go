package provisioner

import (
	"context"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/reclaimable/reclaimable/internal/controllertest"
)

// earlyFixture is f with the early hand-off over class.
func earlyFixture(f *fixture, class *storagev1.StorageClass) *earlyHandOff {
	classes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := classes.Add(class); err != nil {
		f.t.Fatal(err)
	}
	return newEarlyHandOff(f.p, storagelisters.NewStorageClassLister(classes), 1)
}

func (f *fixture) earlySync(e *earlyHandOff, claim *corev1.PersistentVolumeClaim) {
	f.t.Helper()
	if err := e.sync(context.Background(), types.NamespacedName{Namespace: claim.Namespace, Name: claim.Name}); err != nil {
		f.t.Fatal(err)
	}
}

// A claim the pool serves with a member the PV controller would not bind it
// to (held for another name) gets it as soon as it is seen.
func TestEarlyHandOffIssuesAHeldMember(t *testing.T) {
	claim := claimFor("ns", "new", "1Gi")
	f := newFixture(t, []*corev1.PersistentVolume{volume("held", "1Gi", reservedFor("ns", "old", t0()))}, claim)
	e := earlyFixture(f, f.directoryClass(nil))
	f.earlySync(e, claim)
	if ref := f.server("held").Spec.ClaimRef; ref == nil || ref.UID != claim.UID {
		t.Fatalf("claimRef = %+v, want the claim", ref)
	}
	if ev := f.events(); len(ev) != 1 || !hasEvent(ev, "Normal IssuedFromPool Volume held issued from the pool of class pool") {
		t.Errorf("events = %q", ev)
	}
	if n := controllertest.Metric(t, f.reg, "reclaimable_provisioner_pool_issued_early_total", "class", "pool"); n != 1 {
		t.Errorf("early issues = %v", n)
	}
	// The library's way then finds the claim served.
	if f.p.ShouldProvision(context.Background(), claim) {
		t.Error("the library would provision the claim again")
	}
}

// The early hand-off leaves alone what the library's way does better, and
// writes nothing for it.
func TestEarlyHandOffLeavesTheRestToTheLibrary(t *testing.T) {
	wffc := func(f *fixture) *storagev1.StorageClass {
		c := f.directoryClass(nil)
		c.VolumeBindingMode = ptr.To(storagev1.VolumeBindingWaitForFirstConsumer)
		return c
	}
	tests := []struct {
		name    string
		members []*corev1.PersistentVolume
		claim   *corev1.PersistentVolumeClaim
		class   func(*fixture) *storagev1.StorageClass
	}{
		{"a member the PV controller binds by itself fits", []*corev1.PersistentVolume{
			volume("held", "1Gi", reservedFor("ns", "old", t0())), volume("free", "2Gi")}, claimFor("ns", "new", "1Gi"), nil},
		{"nothing fits: the pool grows", []*corev1.PersistentVolume{volume("small", "512Mi", reservedFor("ns", "old", t0()))}, claimFor("ns", "new", "1Gi"), nil},
		{"the claim's own volume is on its way back", []*corev1.PersistentVolume{
			volume("its-own", "1Gi", bound("ns", "new", "earlier")), volume("held", "1Gi", reservedFor("ns", "old", t0()))}, claimFor("ns", "new", "1Gi"), nil},
		{"the claim waits for its first consumer", []*corev1.PersistentVolume{volume("held", "1Gi", reservedFor("ns", "old", t0()))}, claimFor("ns", "new", "1Gi"), wffc},
		{"the claim has a selector", []*corev1.PersistentVolume{volume("held", "1Gi", reservedFor("ns", "old", t0()))},
			claimFor("ns", "new", "1Gi", func(c *corev1.PersistentVolumeClaim) {
				c.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}}
			}), nil},
		{"the claim is bound", []*corev1.PersistentVolume{volume("held", "1Gi", reservedFor("ns", "old", t0()))},
			claimFor("ns", "new", "1Gi", func(c *corev1.PersistentVolumeClaim) { c.Spec.VolumeName = "elsewhere" }), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, tt.members, tt.claim)
			class := f.directoryClass(nil)
			if tt.class != nil {
				class = tt.class(f)
			}
			f.earlySync(earlyFixture(f, class), tt.claim)
			if n := f.writes(); n != 0 {
				t.Errorf("%d writes, want none: %v", n, f.client.Actions())
			}
			if ev := f.events(); len(ev) != 0 {
				t.Errorf("events = %q", ev)
			}
		})
	}
}

// The library's worker and the early hand-off acting on one claim at once
// give it one member, never two.
func TestEarlyHandOffAndTheLibraryGiveOneMember(t *testing.T) {
	for range 20 {
		claim := claimFor("ns", "new", "1Gi")
		f := newFixture(t, []*corev1.PersistentVolume{
			volume("held-a", "1Gi", reservedFor("ns", "a", t0())),
			volume("held-b", "1Gi", reservedFor("ns", "b", t0())),
		}, claim)
		class := f.directoryClass(nil)
		e := earlyFixture(f, class)
		var wg sync.WaitGroup
		wg.Go(func() { f.earlySync(e, claim) })
		wg.Go(func() { _, _, _ = f.provision(class, claim) })
		wg.Wait()
		taken := 0
		for _, name := range []string{"held-a", "held-b"} {
			if ref := f.server(name).Spec.ClaimRef; ref != nil && ref.UID == claim.UID {
				taken++
			}
		}
		if taken != 1 {
			t.Fatalf("the claim was given %d members, want 1", taken)
		}
	}
}
