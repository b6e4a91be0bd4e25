package provisioner

import (
	"errors"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// returnFixture has the claim ns/cache, created at t0 and asking again
// for its volume "its-own", still bound to the earlier claim of that name,
// beside a free member; the provisioner's clock reads t0 + age.
func returnFixture(t *testing.T, age time.Duration, ownSize string) (*fixture, *corev1.PersistentVolumeClaim, *[]time.Duration) {
	claim := claimFor("ns", "cache", "1Gi", func(c *corev1.PersistentVolumeClaim) {
		c.CreationTimestamp = metav1.NewTime(t0())
	})
	f := newFixture(t, []*corev1.PersistentVolume{
		volume("its-own", ownSize, bound("ns", "cache", "earlier-uid")),
		volume("free", "1Gi"),
	}, claim)
	f.useClock(testingclock.NewFakePassiveClock(t0().Add(age)))
	var waits []time.Duration
	f.p.after = func(d time.Duration, fn func()) { waits = append(waits, d); fn() }
	return f, claim, &waits
}

// A claim that comes back under its name while its volume is still bound
// to the earlier claim waits for that volume, and gets it once the PV
// controller releases it, rather than the free member.
func TestProvisionAwaitsItsVolumeStillBoundToTheEarlierClaim(t *testing.T) {
	f, claim, waits := returnFixture(t, time.Second, "1Gi")
	class := f.directoryClass(nil)

	_, _, err := f.provision(class, claim)
	if !errors.Is(err, errAwaitingReturn) {
		t.Fatalf("Provision = %v, want it to await its volume", err)
	}
	if f.server("free").Spec.ClaimRef != nil || f.writes() != 0 {
		t.Errorf("a volume was written while the claim awaits its own: %d writes", f.writes())
	}
	if ev := f.events(); len(ev) != 1 || !hasEvent(ev, "Normal AwaitingItsVolume Volume its-own, which the earlier claim of this name used, is being released") {
		t.Errorf("events = %q", ev)
	}
	if !slices.Equal(*waits, []time.Duration{returnWait - time.Second}) {
		t.Errorf("woken after %v, want once, at the end of the wait", *waits)
	}
	if f.p.Waiting("pool") != 0 {
		t.Error("the claim counts as waiting for room in the pool")
	}

	// Asked again before the release: it waits on, without a second event.
	f.requeued = nil
	if _, _, err := f.provision(class, claim); !errors.Is(err, errAwaitingReturn) {
		t.Fatalf("Provision = %v, want it to await its volume", err)
	}
	if ev := f.events(); len(ev) != 0 || len(*waits) != 1 {
		t.Errorf("events %q, timers %v: want neither again", ev, *waits)
	}

	old := f.server("its-own")
	cur := old.DeepCopy()
	released("ns", "cache", "earlier-uid", t0())(cur)
	cur.ResourceVersion = "2"
	if err := f.volumes.Update(cur); err != nil {
		t.Fatal(err)
	}
	if err := f.client.Tracker().Update(corev1.SchemeGroupVersion.WithResource("persistentvolumes"), cur, ""); err != nil {
		t.Fatal(err)
	}
	f.p.onVolume(old, cur)
	if !slices.Equal(f.requeued, []string{"cache"}) {
		t.Errorf("requeued %v when its volume was released, want the claim", f.requeued)
	}
	_, _, err = f.provision(class, claim)
	wantIssued(t, err, "its-own")
	if ref := f.server("its-own").Spec.ClaimRef; ref == nil || ref.UID != claim.UID {
		t.Errorf("claimRef = %+v, want the claim", ref)
	}
	if len(f.p.returns.Classes()) != 0 {
		t.Errorf("still remembered as waiting: %v", f.p.returns.Classes())
	}
}

// The wait is bounded, and only for a volume that the claim could have and
// whose data it would find.
func TestProvisionAwaitsItsVolumeOnlyWhenItCouldHaveIt(t *testing.T) {
	tests := []struct {
		name    string
		age     time.Duration
		ownSize string
		params  map[string]string
	}{
		{"the wait is over", returnWait, "1Gi", nil},
		{"its volume is too small now", time.Second, "512Mi", nil},
		{"its class empties released volumes", time.Second, "1Gi", map[string]string{wellknown.OnRelease: wellknown.OnReleaseScrub}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, claim, waits := returnFixture(t, tt.age, tt.ownSize)
			_, _, err := f.provision(f.directoryClass(tt.params), claim)
			wantIssued(t, err, "free")
			if len(*waits) != 0 || hasEvent(f.events(), "Normal AwaitingItsVolume") {
				t.Error("the claim waited")
			}
		})
	}
}
