package provisioner

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	lib "sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/reclaimable/reclaimable/provisioner/backend"
	"github.com/reclaimable/reclaimable/provisioner/provisionertest"
)

// The flow of a claim of a class pool (classes.go): the provisioner holds
// its place among the class's volumes and the class pools
// (provisioner/classpool, whose own tests take the hand-over step by step)
// grow it.

const (
	testDriver        = provisionertest.Driver
	testBackingNS     = provisionertest.BackingNamespace
	testBackingClass  = provisionertest.BackingClass
	testBackingVolume = provisionertest.BackingVolume
)

// classFixture is a fixture with a backing class of a CSI driver, a pool
// class in front of it, and the provisioner's backing claims cache.
type classFixture struct {
	*fixture
	pool *storagev1.StorageClass
}

func newClassFixture(t *testing.T, params map[string]string, pvs []*corev1.PersistentVolume, claims ...*corev1.PersistentVolumeClaim) *classFixture {
	t.Helper()
	f := &classFixture{fixture: newFixture(t, pvs, claims...)}
	classes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := classes.Add(&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: testBackingClass}, Provisioner: testDriver, ReclaimPolicy: ptr.To(corev1.PersistentVolumeReclaimDelete)}); err != nil {
		t.Fatal(err)
	}
	f.p.useClasses(storagelisters.NewStorageClassLister(classes))
	f.p.controllerID = provisionertest.ControllerID
	f.useBacking()
	all := map[string]string{"backend": "class", "backingClass": testBackingClass}
	for k, v := range params {
		all[k] = v
	}
	f.pool = &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "pool"}, Provisioner: testProvisioner, Parameters: all, ReclaimPolicy: ptr.To(corev1.PersistentVolumeReclaimRetain)}
	return f
}

// backingClaim returns the backing claim the API server has for claim.
func (f *classFixture) backingClaim(claim *corev1.PersistentVolumeClaim) (*corev1.PersistentVolumeClaim, error) {
	return f.cluster.BackingClaim(claim)
}

// catchUp has the caches show what the API server has of the backing
// claims and of volume name.
func (f *classFixture) catchUp(name string) { f.cluster.CatchUp(name) }

// driverMade has the driver's sidecar make a volume for backing and the PV
// controller bind them, as the cache and the API server then show.
func (f *classFixture) driverMade(backing *corev1.PersistentVolumeClaim) *corev1.PersistentVolume {
	return f.cluster.DriverMade(backing)
}

// The backing claims still on their way count against maxVolumes, by the
// name the library gives the volume: a restarted provisioner, which has no
// other record of them, does not grow the pool past its maximum.
func TestBackingClaimsCountAgainstMaxVolumes(t *testing.T) {
	earlier, claim := claimFor("ns", "earlier", "1Gi"), claimFor("ns", "later", "1Gi")
	f := newClassFixture(t, map[string]string{backend.MaxVolumes: "1"}, nil, earlier, claim)
	f.provision(f.pool, earlier) // its backing claim
	backing, err := f.backingClaim(earlier)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.backing.Add(backing); err != nil {
		t.Fatal(err)
	}
	f.useClock(f.p.clock) // forget what this provisioner reserved: as after a restart

	_, _, err = f.provision(f.pool, claim)
	if !errors.Is(err, errExhausted) {
		t.Fatalf("Provision = %v, want the pool at its maximum", err)
	}
	if _, err := f.backingClaim(claim); !apierrors.IsNotFound(err) {
		t.Errorf("a backing claim was made past the maximum: %v", err)
	}
}

// A volume grown through the backing class is counted once against
// maxVolumes: as the place held for the claim until it is handed over, as
// the member it is from then on.
func TestAClassMemberIsCountedOnce(t *testing.T) {
	first, second := claimFor("ns", "first", "1Gi"), claimFor("ns", "second", "1Gi")
	f := newClassFixture(t, map[string]string{backend.MaxVolumes: "2"}, nil, first, second)
	if _, state, _ := f.provision(f.pool, first); state != lib.ProvisioningInBackground {
		t.Fatalf("first claim: state %v", state)
	}
	backing, err := f.backingClaim(first)
	if err != nil {
		t.Fatal(err)
	}
	f.driverMade(backing)
	f.provision(f.pool, first) // kept, backing claim deleted
	f.catchUp(testBackingVolume)
	_, _, err = f.provision(f.pool, first)
	wantIssued(t, err, testBackingVolume)
	f.catchUp(testBackingVolume)

	if _, state, err := f.provision(f.pool, second); state != lib.ProvisioningInBackground || errors.Is(err, errExhausted) {
		t.Fatalf("second claim = %v, %v; want a backing claim for it: the class has one volume of two", state, err)
	}
	if _, err := f.backingClaim(second); err != nil {
		t.Errorf("no backing claim for the second claim: %v", err)
	}
}
