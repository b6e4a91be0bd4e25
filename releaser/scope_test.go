package releaser

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// scopedClass is a class of our provisioner that names this controller ID,
// with reuseScope scope ("" for none: namespace).
func scopedClass(scope string) *storagev1.StorageClass {
	c := class(testID)
	c.Provisioner = testProvisioner
	c.Parameters = map[string]string{}
	if scope != "" {
		c.Parameters[wellknown.ReuseScope] = scope
	}
	return c
}

func annotated(key, value string) func(*corev1.PersistentVolume) {
	return func(pv *corev1.PersistentVolume) {
		if pv.Annotations == nil {
			pv.Annotations = map[string]string{}
		}
		pv.Annotations[key] = value
	}
}

func heldByName(pv *corev1.PersistentVolume) {
	pv.Spec.ClaimRef.UID = ""
	annotated(wellknown.HeldForNamespace, "ns")(pv)
}

func TestHeldNamespace(t *testing.T) {
	foreign := scopedClass("")
	foreign.Provisioner = "vendor/other"
	for _, tt := range []struct {
		name  string
		class *storagev1.StorageClass
		kept  bool
		want  string
	}{
		{"default scope is the namespace", scopedClass(""), true, "ns"},
		{"namespace", scopedClass(wellknown.ReuseScopeNamespace), true, "ns"},
		{"cluster", scopedClass(wellknown.ReuseScopeCluster), true, ""},
		{"invalid value: the side that leaks nothing", scopedClass("tenant"), true, "ns"},
		{"association not kept: nobody would keep the hold in line", scopedClass(""), false, ""},
		{"another provisioner's class: only ours can scope an issue", foreign, true, ""},
		{"class not in the cache", nil, true, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := testPolicy.heldNamespace(tt.class, tt.kept, "ns"); got != tt.want {
				t.Errorf("heldNamespace = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestRescopeOf(t *testing.T) {
	free := func(pv *corev1.PersistentVolume) { pv.Spec.ClaimRef = nil }
	lastClaim := annotated(wellknown.LastClaim, "ns/data")
	for _, tt := range []struct {
		name  string
		pv    *corev1.PersistentVolume
		class *storagev1.StorageClass
		want  rescope
	}{
		{"free, last bound in ns, namespace scope: hold", volume(corev1.VolumeAvailable, labelled(testID), free, lastClaim), scopedClass(""), scopeHold},
		{"free, never bound: belongs to no namespace yet", volume(corev1.VolumeAvailable, labelled(testID), free), scopedClass(""), scopeFits},
		{"free, unreadable last claim", volume(corev1.VolumeAvailable, labelled(testID), free, annotated(wellknown.LastClaim, "data")), scopedClass(""), scopeFits},
		{"free, cluster scope", volume(corev1.VolumeAvailable, labelled(testID), free, lastClaim), scopedClass(wellknown.ReuseScopeCluster), scopeFits},
		{"free, not ours", volume(corev1.VolumeAvailable, free, lastClaim), scopedClass(""), scopeFits},
		{"free, being deleted", volume(corev1.VolumeAvailable, labelled(testID), free, lastClaim, deleting), scopedClass(""), scopeFits},
		{"held, namespace scope", volume(corev1.VolumeAvailable, labelled(testID), heldByName, lastClaim), scopedClass(""), scopeFits},
		{"held, class now cluster: let go", volume(corev1.VolumeAvailable, labelled(testID), heldByName, lastClaim), scopedClass(wellknown.ReuseScopeCluster), scopeLetGo},
		{"held and reserved, class now cluster: the reservation's end lets go", volume(corev1.VolumeAvailable, labelled(testID), heldByName, annotated(wellknown.ReservedUntil, "2026-11-25T10:00:00.000Z")), scopedClass(wellknown.ReuseScopeCluster), scopeFits},
		{"held, class not in the cache: kept", volume(corev1.VolumeAvailable, labelled(testID), heldByName), nil, scopeFits},
		{"held by another installation", volume(corev1.VolumeAvailable, labelled("theirs"), heldByName), scopedClass(wellknown.ReuseScopeCluster), scopeFits},
		{"pre-bound by an administrator", volume(corev1.VolumeAvailable, labelled(testID), func(pv *corev1.PersistentVolume) { pv.Spec.ClaimRef.UID = "" }), scopedClass(wellknown.ReuseScopeCluster), scopeFits},
		{"bound", volume(corev1.VolumeBound, labelled(testID), lastClaim), scopedClass(""), scopeFits},
		{"Released: the release decides", volume(corev1.VolumeReleased, labelled(testID), free, lastClaim), scopedClass(""), scopeFits},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, ns, name := testPolicy.rescopeOf(tt.pv, tt.class)
			if got != tt.want {
				t.Fatalf("rescopeOf = %v, want %v", got, tt.want)
			}
			if got == scopeHold && (ns != "ns" || name != "data") {
				t.Errorf("hold for %s/%s, want ns/data", ns, name)
			}
		})
	}
}

// Under reuseScope namespace a released volume names its last claim without
// UID, so that the PV controller binds it to no claim of another namespace,
// and carries the namespace for the provisioner.
func TestSyncReleaseHoldsForTheNamespace(t *testing.T) {
	class := scopedClass("")
	class.Parameters[wellknown.ReserveFor] = "0"
	f := newFixture(t, testPolicy, volume(corev1.VolumeReleased, labelled(testID)), class)
	if err := f.sync("pv-1"); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, f.calls(), "get persistentvolumeclaims", "update persistentvolumes")
	wantEvents(t, f.events(), "Normal Released Returned to the pool with its data: claim ns/data (UID claim-uid) no longer exists; only claims of namespace ns may have it")
	got := f.stored("pv-1")
	if ns, held := pools.HeldFor(got); !held || ns != "ns" || got.Spec.ClaimRef.Name != "data" || pools.Reserved(got) {
		t.Errorf("after the release: claimRef %+v, annotations %v; want held for namespace ns by name, not reserved", got.Spec.ClaimRef, got.Annotations)
	}
}

// A free volume of a namespace-scoped class (freed before the class was
// scoped, or its claimRef cleared by hand) is held again; a hold the class
// no longer asks for is let go.
func TestSyncRescopes(t *testing.T) {
	for _, tt := range []struct {
		name      string
		pv        *corev1.PersistentVolume
		class     *storagev1.StorageClass
		event     string
		wantHeld  bool
		wantNoRef bool
	}{
		{"hold", volume(corev1.VolumeAvailable, labelled(testID), withoutClaimRef, annotated(wellknown.LastClaim, "ns/data")), scopedClass(""), "Normal HeldForNamespace", true, false},
		{"let go", volume(corev1.VolumeAvailable, labelled(testID), heldByName, annotated(wellknown.LastClaim, "ns/data")), scopedClass(wellknown.ReuseScopeCluster), "Normal HoldEnded", false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// A class's parameters change only with the class created
			// again, which queues its volumes, as their own events do.
			for event, fire := range map[string]func(f *fixture){
				"volume event":        func(f *fixture) { f.volumeChanged(tt.pv) },
				"class created again": func(f *fixture) { f.classChanged(nil, tt.class) },
			} {
				f := newFixture(t, testPolicy, tt.pv, tt.class)
				fire(f)
				if q := f.queued(); len(q) != 1 {
					t.Fatalf("queued %v after a %s, want the volume", q, event)
				}
			}
			f := newFixture(t, testPolicy, tt.pv, tt.class)
			if err := f.sync("pv-1"); err != nil {
				t.Fatal(err)
			}
			wantCalls(t, f.calls(), "update persistentvolumes")
			wantEvents(t, f.events(), tt.event)
			got := f.stored("pv-1")
			if ns, held := pools.HeldFor(got); held != tt.wantHeld || (held && ns != "ns") {
				t.Errorf("held = %q, %v; want %v", ns, held, tt.wantHeld)
			}
			if tt.wantNoRef && got.Spec.ClaimRef != nil {
				t.Errorf("claimRef %+v, want none", got.Spec.ClaimRef)
			}
			f.catchUp("pv-1")
			if err := f.sync("pv-1"); err != nil {
				t.Fatal(err)
			}
			wantCalls(t, f.calls())
		})
	}
}

// keyedClass is a namespace-scoped class of ours under keyPolicy Require.
func keyedClass() *storagev1.StorageClass {
	c := scopedClass(wellknown.ReuseScopeNamespace)
	c.Parameters[wellknown.KeyLabel] = "ci"
	c.Parameters[wellknown.KeyPolicy] = wellknown.KeyPolicyRequire
	return c
}

// Under keyPolicy Require a volume is held by a name no claim has: the PV
// controller would bind one held by its last claim's name to a new claim
// of that name, whatever that claim's key.
func TestRescopeOfUnderKeyRequire(t *testing.T) {
	free := func(pv *corev1.PersistentVolume) { pv.Spec.ClaimRef = nil }
	lastClaim := annotated(wellknown.LastClaim, "ns/data")
	heldByKey := func(pv *corev1.PersistentVolume) {
		heldByName(pv)
		pv.Spec.ClaimRef.Name = wellknown.HeldClaim(pv.Name)
	}
	reserved := annotated(wellknown.ReservedUntil, "2026-11-25T10:00:00.000Z")
	cluster := keyedClass()
	cluster.Parameters[wellknown.ReuseScope] = wellknown.ReuseScopeCluster
	for _, tt := range []struct {
		name     string
		pv       *corev1.PersistentVolume
		class    *storagev1.StorageClass
		want     rescope
		wantName string
	}{
		{"free: held by key", volume(corev1.VolumeAvailable, labelled(testID), free, lastClaim), keyedClass(), scopeHold, "held-pv-1"},
		{"held by its last claim's name: by key now", volume(corev1.VolumeAvailable, labelled(testID), heldByName, lastClaim), keyedClass(), scopeHold, "held-pv-1"},
		{"reserved for its last claim's name: held by key now", volume(corev1.VolumeAvailable, labelled(testID), heldByName, reserved, lastClaim), keyedClass(), scopeHold, "held-pv-1"},
		{"held by key", volume(corev1.VolumeAvailable, labelled(testID), heldByKey, lastClaim), keyedClass(), scopeFits, ""},
		{"held by name, another installation's", volume(corev1.VolumeAvailable, labelled("theirs"), heldByName, lastClaim), keyedClass(), scopeFits, ""},
		{"pre-bound by an administrator", volume(corev1.VolumeAvailable, labelled(testID), func(pv *corev1.PersistentVolume) { pv.Spec.ClaimRef.UID = "" }), keyedClass(), scopeFits, ""},
		{"Require under cluster scope does not hold, and is refused", volume(corev1.VolumeAvailable, labelled(testID), free, lastClaim), cluster, scopeFits, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, ns, name := testPolicy.rescopeOf(tt.pv, tt.class)
			if got != tt.want {
				t.Fatalf("rescopeOf = %v, want %v", got, tt.want)
			}
			if got == scopeHold && (ns != "ns" || name != tt.wantName) {
				t.Errorf("hold for %s/%s, want ns/%s", ns, name, tt.wantName)
			}
		})
	}
}

// Released under keyPolicy Require, a volume is held for its namespace by a
// name no claim has, and not reserved for its last claim's name, though
// the class reserves by default.
func TestSyncReleaseHoldsByKey(t *testing.T) {
	f := newFixture(t, testPolicy, volume(corev1.VolumeReleased, labelled(testID)), keyedClass())
	if err := f.sync("pv-1"); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, f.calls(), "get persistentvolumeclaims", "update persistentvolumes")
	got := f.stored("pv-1")
	if ns, held := pools.HeldFor(got); !held || ns != "ns" || got.Spec.ClaimRef.Name != wellknown.HeldClaim("pv-1") || pools.Reserved(got) || got.Annotations[wellknown.LastClaim] != "ns/data" {
		t.Errorf("after the release: claimRef %+v, annotations %v; want held for namespace ns by %s, not reserved, last claim ns/data", got.Spec.ClaimRef, got.Annotations, wellknown.HeldClaim("pv-1"))
	}
}
