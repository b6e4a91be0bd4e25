package releaser

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// reserved makes pv reserved for ns/data until until, as release leaves it.
func reserved(until string) func(*corev1.PersistentVolume) {
	return func(pv *corev1.PersistentVolume) {
		pv.Spec.ClaimRef = &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: "ns", Name: "data"}
		if pv.Annotations == nil {
			pv.Annotations = map[string]string{}
		}
		pv.Annotations[wellknown.ReservedUntil] = until
	}
}

// reservingClass is a class of our provisioner that names this controller
// ID, with reserveFor.
func reservingClass(reserveFor string) *storagev1.StorageClass {
	c := class(testID)
	c.Provisioner = testProvisioner
	c.Parameters = map[string]string{wellknown.ReserveFor: reserveFor}
	return c
}

func TestReservation(t *testing.T) {
	foreign := reservingClass("10m")
	foreign.Provisioner = "vendor/other"
	for _, tt := range []struct {
		name  string
		class *storagev1.StorageClass
		kept  bool
		want  time.Duration
	}{
		{"our class with reserveFor", reservingClass("10m"), true, 10 * time.Minute},
		{"association not kept: nobody would end it", reservingClass("10m"), false, 0},
		{"no reserveFor on our class: the default", scopedClass(""), true, pools.DefaultReserveFor},
		{"no reserveFor on another provisioner's class", class(testID), true, 0},
		{"zero", reservingClass("0s"), true, 0},
		{"invalid value", reservingClass("soon"), true, 0},
		{"beyond the maximum", reservingClass("200h"), true, 0},
		{"another provisioner's class: nothing would hand it to another name", foreign, true, 0},
		{"class not in the cache", nil, true, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := testPolicy.reservation(tt.class, tt.kept); got != tt.want {
				t.Errorf("reservation = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestReservedUntil(t *testing.T) {
	at := testNow.Add(time.Minute).UTC()
	stamp := at.Format(time.RFC3339)
	for _, tt := range []struct {
		name     string
		pv       *corev1.PersistentVolume
		want     time.Time
		reserved bool
	}{
		{"reserved", volume(corev1.VolumeAvailable, labelled(testID), reserved(stamp)), at, true},
		{"unreadable time: ends at once", volume(corev1.VolumeAvailable, labelled(testID), reserved("soon")), time.Time{}, true},
		{"taken by its claim", volume(corev1.VolumeBound, labelled(testID), reserved(stamp), func(pv *corev1.PersistentVolume) { pv.Spec.ClaimRef.UID = "new-uid" }), time.Time{}, false},
		{"another installation's", volume(corev1.VolumeAvailable, labelled("other"), reserved(stamp)), time.Time{}, false},
		{"pre-bound by hand, not by us", volume(corev1.VolumeAvailable, labelled(testID), func(pv *corev1.PersistentVolume) { pv.Spec.ClaimRef.UID = "" }), time.Time{}, false},
		{"being deleted", volume(corev1.VolumeAvailable, labelled(testID), reserved(stamp), deleting), time.Time{}, false},
		{"free", volume(corev1.VolumeAvailable, labelled(testID), withoutClaimRef), time.Time{}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := reservedUntil(tt.pv, testID)
			if ok != tt.reserved || !got.Equal(tt.want) {
				t.Errorf("reservedUntil = %s, %v; want %s, %v", got, ok, tt.want, tt.reserved)
			}
		})
	}
}

// With reserveFor, a released volume keeps its last claim's namespace and
// name without UID, and the reservation ends when its time has come: the
// volume is then free for any claim, or under reuseScope namespace stays
// held for its namespace.
func TestSyncReservesAndEndsTheReservation(t *testing.T) {
	for _, scope := range []string{wellknown.ReuseScopeCluster, wellknown.ReuseScopeNamespace} {
		t.Run(scope, func(t *testing.T) {
			class := reservingClass("10m")
			class.Parameters[wellknown.ReuseScope] = scope
			f := newFixture(t, testPolicy, volume(corev1.VolumeReleased, labelled(testID)), class)
			if err := f.sync("pv-1"); err != nil {
				t.Fatal(err)
			}
			wantCalls(t, f.calls(), "get persistentvolumeclaims", "update persistentvolumes")
			wantEvents(t, f.events(), "Normal Reserved")
			got := f.stored("pv-1")
			if ref := got.Spec.ClaimRef; ref == nil || ref.UID != "" || ref.Namespace != "ns" || ref.Name != "data" {
				t.Fatalf("claimRef after the release = %+v, want ns/data without UID", ref)
			}
			want := testNow.Add(10 * time.Minute).UTC().Format(wellknown.ReservedUntilFormat)
			if until := got.Annotations[wellknown.ReservedUntil]; until != want || got.Labels[wellknown.VolumeManagedBy] != testID {
				t.Fatalf("reserved until %q (labels %v), want %q and still associated", until, got.Labels, want)
			}
			f.catchUp("pv-1")

			// The PV controller makes a pre-bound volume Available; within the
			// reservation the releaser only looks again at its end.
			f.change("pv-1", func(pv *corev1.PersistentVolume) { pv.Status.Phase = corev1.VolumeAvailable })
			f.queued()
			if err := f.sync("pv-1"); err != nil {
				t.Fatal(err)
			}
			wantCalls(t, f.calls())
			f.c.clock.(*testingclock.FakePassiveClock).SetTime(testNow.Add(10 * time.Minute))
			if err := f.sync("pv-1"); err != nil {
				t.Fatal(err)
			}
			wantCalls(t, f.calls(), "update persistentvolumes")
			wantEvents(t, f.events(), "Normal ReservationExpired")
			got = f.stored("pv-1")
			if got.Annotations[wellknown.ReservedUntil] != "" || got.Annotations[wellknown.LastClaim] != "ns/data" {
				t.Errorf("after the reservation: annotations %v; want no reservation, last claim kept", got.Annotations)
			}
			ns, held := pools.HeldFor(got)
			switch {
			case scope == wellknown.ReuseScopeCluster && got.Spec.ClaimRef != nil:
				t.Errorf("after the reservation: claimRef %+v, want free for any claim", got.Spec.ClaimRef)
			case scope == wellknown.ReuseScopeNamespace && (!held || ns != "ns" || got.Spec.ClaimRef.Name != "data"):
				t.Errorf("after the reservation: claimRef %+v, annotations %v; want held for namespace ns", got.Spec.ClaimRef, got.Annotations)
			}
		})
	}
}

// A claim of the reserved name that took the volume just before the end
// wins: the end's update carries the older resourceVersion and fails.
func TestReservationEndLosesToTheClaim(t *testing.T) {
	stamp := testNow.UTC().Format(time.RFC3339)
	f := newFixture(t, testPolicy, volume(corev1.VolumeAvailable, labelled(testID), reserved(stamp)), reservingClass("10m"))
	// Written on the server only: the cache still shows the reservation.
	stored := f.stored("pv-1").DeepCopy()
	stored.Spec.ClaimRef.UID, stored.ResourceVersion = "new-uid", "11"
	if err := f.client.Tracker().Update(pvResource, stored, ""); err != nil {
		t.Fatal(err)
	}
	if err := f.sync("pv-1"); err != nil {
		t.Fatal(err)
	}
	if ref := f.stored("pv-1").Spec.ClaimRef; ref == nil || ref.UID != "new-uid" {
		t.Errorf("claimRef = %+v, want the claim that took it", ref)
	}
	if n := f.metric("reclaimable_releaser_errors_total", "reason", errConflict); n != 1 {
		t.Errorf("conflicts = %v, want 1", n)
	}
}

// Without the association kept (only the claim rule made it ours), the
// volume is not reserved: nobody would end the reservation.
func TestNoReservationWithoutAssociation(t *testing.T) {
	c := reservingClass("10m")
	c.Annotations = nil
	f := newFixture(t, testPolicy, volume(corev1.VolumeReleased, labelled(testID)), c)
	if err := f.sync("pv-1"); err != nil {
		t.Fatal(err)
	}
	wantEvents(t, f.events(), "Normal Released")
	if ref := f.stored("pv-1").Spec.ClaimRef; ref != nil {
		t.Errorf("claimRef = %+v, want none", ref)
	}
}
