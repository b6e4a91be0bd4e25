package classpool_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	lib "sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/reclaimable/reclaimable/internal/wellknown"
	"github.com/reclaimable/reclaimable/provisioner/ahead"
	"github.com/reclaimable/reclaimable/provisioner/classpool"
	"github.com/reclaimable/reclaimable/provisioner/provisionertest"
)

const (
	testProvisioner    = provisionertest.Provisioner
	testBackingNS      = provisionertest.BackingNamespace
	testDriver         = provisionertest.Driver
	testBackingClass   = provisionertest.BackingClass
	testBackingVolume  = provisionertest.BackingVolume
	testBackingClaimID = provisionertest.BackingClaimUID
)

var (
	claimFor = provisionertest.ClaimFor
	hasEvent = provisionertest.HasEvent
	t0       = provisionertest.T0
)

// fixture is the class pools of a pool class ("pool") in front of a
// backing class of a CSI driver, on a provisionertest.Cluster.
type fixture struct {
	*provisionertest.Cluster
	pools *classpool.Pools
	flow  *provisionertest.ClassFlow
	// class is the pool class, backing its backing class.
	class, backing *storagev1.StorageClass
}

// newFixture serves pvs and claims from both the caches and the API server;
// the class pools tell time on clk.
func newFixture(t *testing.T, clk clock.PassiveClock, pvs []*corev1.PersistentVolume, claims ...*corev1.PersistentVolumeClaim) *fixture {
	t.Helper()
	c := provisionertest.NewCluster(t, pvs, claims...)
	pools, flow := c.ClassPools(clk)
	return &fixture{
		Cluster: c, pools: pools, flow: flow,
		class: &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "pool"}, Provisioner: testProvisioner,
			Parameters: map[string]string{"backend": "class", "backingClass": testBackingClass}, ReclaimPolicy: ptr.To(corev1.PersistentVolumeReclaimRetain)},
		backing: &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: testBackingClass}, Provisioner: testDriver,
			ReclaimPolicy: ptr.To(corev1.PersistentVolumeReclaimDelete)},
	}
}

// grow takes claim, which no member of the pool fits, one step of the
// hand-over further, as the provisioner does on each of the claim's
// retries.
func (f *fixture) grow(claim *corev1.PersistentVolumeClaim) (lib.ProvisioningState, bool, error) {
	return f.pools.Grow(context.Background(), classpool.Request{Claim: claim, Class: f.class, Backing: f.backing})
}

// aheadInFlight counts the members of class made ahead that are on their
// way, as the pool manager is told of them (ahead.Members.InFlight): the
// places held in the provisioner's memory that the caches do not show yet,
// and the backing claims and kept volumes they do.
func (f *fixture) aheadInFlight(class string) int {
	return ahead.New(ahead.Config{Volumes: f.Volumes, Classes: f.pools, Pending: f.flow.Pending}).InFlight(class)
}

// A volume another installation's provisioner kept for one of its claims
// is none of this one's business, whatever its annotations say.
func TestAVolumeAnotherProvisionerKeptIsLeftAlone(t *testing.T) {
	theirs := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pvc-theirs", ResourceVersion: "3", Annotations: map[string]string{
			wellknown.ProvisionedBy: testDriver, wellknown.KeptBy: "other.example.com/provisioner", wellknown.BackingForUID: "their-claim",
			wellknown.PoolClass: "pool", wellknown.MadeAhead: "pool"}},
		Spec:   corev1.PersistentVolumeSpec{StorageClassName: testBackingClass, PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain},
		Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeReleased},
	}
	f := newFixture(t, clock.RealClock{}, []*corev1.PersistentVolume{theirs})
	if uids := f.pools.KeptUIDs(); len(uids) != 0 {
		t.Errorf("keptUIDs = %v, want none of another provisioner's", uids)
	}
	if err := f.pools.Sync(context.Background(), "their-claim"); err != nil {
		t.Fatal(err)
	}
	if n := f.Writes(); n != 0 {
		t.Errorf("%d writes, want none", n)
	}
	if n := f.aheadInFlight("pool"); n != 0 {
		t.Errorf("AheadInFlight = %d, want another provisioner's volume not counted", n)
	}
}
