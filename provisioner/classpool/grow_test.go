package classpool_test

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	lib "sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/reclaimable/reclaimable/internal/wellknown"
	"github.com/reclaimable/reclaimable/provisioner/provisionertest"
)

// A claim the pool cannot serve gets a backing claim in the backing class;
// once the driver's volume is bound to it, the volume's reclaim policy
// becomes Retain first, while it is still bound, and then one update makes
// it a member issued to the claim; the backing claim goes.
func TestAClassPoolAsksItsBackingClassThenHandsTheVolumeOver(t *testing.T) {
	claim := claimFor("ns", "cache", "1Gi")
	f := newFixture(t, clock.RealClock{}, nil, claim)

	state, asked, err := f.grow(claim)
	if state != lib.ProvisioningInBackground || err == nil || !asked {
		t.Fatalf("Grow = %v, %v, %v; want it asking the backing class and waiting in the background", state, asked, err)
	}
	backing, err := f.BackingClaim(claim)
	if err != nil {
		t.Fatalf("no backing claim: %v", err)
	}
	if ptr.Deref(backing.Spec.StorageClassName, "") != testBackingClass || backing.Labels[wellknown.BackingClaimOf] != provisionertest.ControllerID ||
		backing.Annotations[wellknown.BackingFor] != "ns/cache" || backing.Annotations[wellknown.BackingForUID] != string(claim.UID) ||
		!backing.Spec.Resources.Requests.Storage().Equal(*claim.Spec.Resources.Requests.Storage()) {
		t.Fatalf("backing claim = %+v", backing)
	}
	if !hasEvent(f.Events(), "Normal AskedBackingClass") {
		t.Error("no event says the backing class was asked")
	}
	// A retry before the driver is done asks nothing again.
	if state, asked, _ := f.grow(claim); state != lib.ProvisioningInBackground || asked {
		t.Fatalf("retry: state %v, asked %v", state, asked)
	}

	f.DriverMade(backing)

	// Kept: Retain, and marked for the claim, still bound to the backing
	// claim, which is then deleted.
	state, _, err = f.grow(claim)
	if state != lib.ProvisioningInBackground || err == nil {
		t.Fatalf("Grow = %v, %v; want it waiting for the backing claim to go", state, err)
	}
	kept := f.Server(testBackingVolume)
	if kept.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimRetain || kept.Spec.ClaimRef.UID != testBackingClaimID ||
		kept.Annotations[wellknown.ProvisionedBy] != testDriver || kept.Annotations[wellknown.BackingForUID] != string(claim.UID) || kept.Annotations[wellknown.PoolClass] != "pool" {
		t.Fatalf("kept volume = policy %s, claimRef %v, annotations %v; want Retain and marked for the claim, still the backing claim's",
			kept.Spec.PersistentVolumeReclaimPolicy, kept.Spec.ClaimRef, kept.Annotations)
	}
	if _, err := f.BackingClaim(claim); !apierrors.IsNotFound(err) {
		t.Fatalf("backing claim not deleted: %v", err)
	}

	// Handed over once the backing claim is gone, the cache showing it
	// still or not.
	f.CatchUp(testBackingVolume)
	state, _, err = f.grow(claim)
	provisionertest.WantIssued(t, err, testBackingVolume)
	if state != lib.ProvisioningFinished {
		t.Errorf("state = %v", state)
	}
	pv := f.Server(testBackingVolume)
	if ref := pv.Spec.ClaimRef; ref == nil || ref.UID != claim.UID || ref.Name != "cache" || ref.Namespace != "ns" {
		t.Errorf("claimRef = %+v, want the claim", ref)
	}
	if pv.Spec.StorageClassName != "pool" || pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimRetain ||
		pv.Annotations[wellknown.ProvisionedBy] != testProvisioner || pv.Annotations[wellknown.BackingProvisioner] != testDriver ||
		pv.Annotations[wellknown.BackingClass] != testBackingClass || pv.Annotations[wellknown.Backend] != "class" ||
		pv.Annotations[wellknown.LastClaim] != "ns/cache" || pv.Annotations[wellknown.BackingForUID] != "" || pv.Spec.CSI.VolumeHandle != "vol-1" {
		t.Errorf("member = class %s, policy %s, annotations %v, source %+v", pv.Spec.StorageClassName, pv.Spec.PersistentVolumeReclaimPolicy, pv.Annotations, pv.Spec.PersistentVolumeSource)
	}
	if !slices.Equal(pv.Finalizers, []string{"kubernetes.io/pv-protection"}) {
		t.Errorf("finalizers = %v, want the sidecar's gone and the others kept", pv.Finalizers)
	}
	if !hasEvent(f.Events(), "Normal ProvisioningSucceeded") {
		t.Error("no event says the volume was issued")
	}
	if issued := f.flow.IssuedVolumes(); !slices.Equal(issued, []string{testBackingVolume}) {
		t.Errorf("the provisioner was told of %v issued, want %s", issued, testBackingVolume)
	}
}

// A backing claim whose claim went away before its volume was handed over
// gives the volume back to its driver: reclaim policy Delete again (it was
// kept), then the backing claim deleted, which releases it.
func TestABackingClaimNoClaimWantsGivesItsVolumeBack(t *testing.T) {
	claim := claimFor("ns", "gone", "1Gi")
	f := newFixture(t, clock.RealClock{}, nil)
	f.grow(claim) // step 1: the backing claim
	backing, err := f.BackingClaim(claim)
	if err != nil {
		t.Fatal(err)
	}
	pv := f.DriverMade(backing)
	// Step 3, as a provisioner stopped right after it left it.
	kept := pv.DeepCopy()
	kept.Annotations[wellknown.BackingFor], kept.Annotations[wellknown.BackingForUID] = "ns/gone", string(claim.UID)
	kept.Annotations[wellknown.PoolClass], kept.Annotations[wellknown.KeptBy] = "pool", testProvisioner
	kept.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimRetain
	if _, err := f.Client.CoreV1().PersistentVolumes().Update(context.Background(), kept, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.CatchUp(pv.Name)

	if err := f.pools.Sync(context.Background(), claim.UID); err != nil {
		t.Fatal(err)
	}
	if got := f.Server(pv.Name); got.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete || got.Annotations[wellknown.BackingForUID] != "" {
		t.Errorf("volume = policy %s, annotations %v; want Delete and unmarked: its driver deletes it", got.Spec.PersistentVolumeReclaimPolicy, got.Annotations)
	}
	if _, err := f.BackingClaim(claim); !apierrors.IsNotFound(err) {
		t.Errorf("backing claim still there: %v", err)
	}
}

// A claim that waits for its backing class looks at what the backing
// provisioner said of its backing claim on each retry until it finds a
// failure, which reaches the claim at once; once it relayed one, not again
// for relayInterval: the retries meanwhile cost no LIST.
func TestWaitingForTheBackingClassListsItsEventsOncePerInterval(t *testing.T) {
	claim := claimFor("ns", "cache", "1Gi")
	clock := testingclock.NewFakePassiveClock(t0())
	f := newFixture(t, clock, nil, claim)
	lists := func() int {
		n := 0
		for _, a := range f.Client.Actions() {
			if a.GetVerb() == "list" && a.GetResource().Resource == "events" {
				n++
			}
		}
		return n
	}
	retry := func() {
		t.Helper()
		if state, _, err := f.grow(claim); state != lib.ProvisioningInBackground || err == nil {
			t.Fatalf("Grow = %v, %v; want it waiting for the backing class", state, err)
		}
		// The cache shows the backing claim, as it soon would.
		claims := f.ServedBackingClaims()
		for i := range claims {
			if err := f.BackingClaims.Update(&claims[i]); err != nil {
				t.Fatal(err)
			}
		}
	}
	retry()
	retry()
	if n := lists(); n != 2 {
		t.Errorf("%d event lists for two retries before the driver said anything, want 2", n)
	}
	if _, err := f.Client.CoreV1().Events(testBackingNS).Create(context.Background(), &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: "refused", Namespace: testBackingNS}, Type: corev1.EventTypeWarning,
		Reason: "ProvisioningFailed", Message: "no disk of that size", LastTimestamp: metav1.NewTime(t0()),
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	retry()
	if !hasEvent(f.Events(), "Warning BackingClassFailed") {
		t.Error("the driver's failure was not relayed to the claim")
	}
	retry()
	retry()
	if n := lists(); n != 3 {
		t.Errorf("%d event lists after a failure was relayed, want 3: none within the interval", n)
	}
	clock.SetTime(t0().Add(30 * time.Second)) // the relay interval
	retry()
	if n := lists(); n != 4 {
		t.Errorf("%d event lists once the interval passed, want 4", n)
	}
}
