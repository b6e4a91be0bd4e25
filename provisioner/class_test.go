package provisioner

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	volumehelpers "k8s.io/component-helpers/storage/volume"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	lib "sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/reclaimable/reclaimable/apis/reclaimable/v1alpha1"
	"github.com/reclaimable/reclaimable/internal/keys"
	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/provisioner/ahead"
	"github.com/reclaimable/reclaimable/provisioner/backend"
)

const (
	testDriver         = "disk.csi.example.com"
	testBackingNS      = "reclaimable-system"
	testBackingClass   = "disk"
	testBackingVolume  = "pvc-made-by-the-driver"
	testBackingClaimID = types.UID("backing-uid")
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
	f.p.controllerID = "id"
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
	return f.client.CoreV1().PersistentVolumeClaims(testBackingNS).Get(context.Background(), "pvc-"+string(claim.UID), metav1.GetOptions{})
}

// catchUp has the caches show what the API server has of the backing
// claims and of volume name.
func (f *classFixture) catchUp(name string) {
	f.t.Helper()
	ctx := context.Background()
	for _, o := range f.backing.List() {
		_ = f.backing.Delete(o)
	}
	claims, err := f.client.CoreV1().PersistentVolumeClaims(testBackingNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	for i := range claims.Items {
		if err := f.backing.Add(&claims.Items[i]); err != nil {
			f.t.Fatal(err)
		}
	}
	if err := f.volumes.Update(f.server(name)); err != nil {
		f.t.Fatal(err)
	}
}

// driverMade has the driver's sidecar make a volume for backing and the PV
// controller bind them, as the cache and the API server then show.
func (f *classFixture) driverMade(backing *corev1.PersistentVolumeClaim) *corev1.PersistentVolume {
	f.t.Helper()
	bound := backing.DeepCopy()
	bound.UID = testBackingClaimID
	bound.Spec.VolumeName = testBackingVolume
	bound.Status.Phase = corev1.ClaimBound
	if _, err := f.client.CoreV1().PersistentVolumeClaims(testBackingNS).Update(context.Background(), bound, metav1.UpdateOptions{}); err != nil {
		f.t.Fatal(err)
	}
	if err := f.backing.Add(bound); err != nil {
		f.t.Fatal(err)
	}
	return f.add(&corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: testBackingVolume, ResourceVersion: "1",
			Annotations: map[string]string{keys.ProvisionedBy: testDriver}, Finalizers: []string{backend.ExternalFinalizer, "kubernetes.io/pv-protection"}},
		Spec: corev1.PersistentVolumeSpec{
			StorageClassName:              testBackingClass,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			Capacity:                      bound.Spec.Resources.Requests,
			AccessModes:                   bound.Spec.AccessModes,
			ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: testBackingNS, Name: bound.Name, UID: bound.UID},
			PersistentVolumeSource:        corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: testDriver, VolumeHandle: "vol-1"}},
		},
		Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeBound},
	})
}

// A claim the pool cannot serve gets a backing claim in the backing class;
// once the driver's volume is bound to it, the volume's reclaim policy
// becomes Retain first, while it is still bound, and then one update makes
// it a member issued to the claim; the backing claim goes.
func TestAClassPoolAsksItsBackingClassThenHandsTheVolumeOver(t *testing.T) {
	claim := claimFor("ns", "cache", "1Gi")
	f := newClassFixture(t, nil, nil, claim)

	_, state, err := f.provision(f.pool, claim)
	if state != lib.ProvisioningInBackground || err == nil {
		t.Fatalf("Provision = %v, %v; want it waiting in the background for the backing class", state, err)
	}
	backing, err := f.backingClaim(claim)
	if err != nil {
		t.Fatalf("no backing claim: %v", err)
	}
	if ptr.Deref(backing.Spec.StorageClassName, "") != testBackingClass || backing.Labels[keys.BackingClaimOf] != "id" ||
		backing.Annotations[keys.BackingFor] != "ns/cache" || backing.Annotations[keys.BackingForUID] != string(claim.UID) ||
		!backing.Spec.Resources.Requests.Storage().Equal(*claim.Spec.Resources.Requests.Storage()) {
		t.Fatalf("backing claim = %+v", backing)
	}
	if !hasEvent(f.events(), "Normal AskedBackingClass") {
		t.Error("no event says the backing class was asked")
	}
	// A retry before the driver is done asks nothing again.
	if _, state, _ := f.provision(f.pool, claim); state != lib.ProvisioningInBackground {
		t.Fatalf("retry: state %v", state)
	}

	f.driverMade(backing)

	// Kept: Retain, and marked for the claim, still bound to the backing
	// claim, which is then deleted.
	_, state, err = f.provision(f.pool, claim)
	if state != lib.ProvisioningInBackground || err == nil {
		t.Fatalf("Provision = %v, %v; want it waiting for the backing claim to go", state, err)
	}
	kept := f.server(testBackingVolume)
	if kept.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimRetain || kept.Spec.ClaimRef.UID != testBackingClaimID ||
		kept.Annotations[keys.ProvisionedBy] != testDriver || kept.Annotations[keys.BackingForUID] != string(claim.UID) || kept.Annotations[keys.PoolClass] != "pool" {
		t.Fatalf("kept volume = policy %s, claimRef %v, annotations %v; want Retain and marked for the claim, still the backing claim's",
			kept.Spec.PersistentVolumeReclaimPolicy, kept.Spec.ClaimRef, kept.Annotations)
	}
	if _, err := f.backingClaim(claim); !apierrors.IsNotFound(err) {
		t.Fatalf("backing claim not deleted: %v", err)
	}

	// Handed over once the backing claim is gone, the cache showing it
	// still or not.
	f.catchUp(testBackingVolume)
	_, state, err = f.provision(f.pool, claim)
	wantIssued(t, err, testBackingVolume)
	if state != lib.ProvisioningFinished {
		t.Errorf("state = %v", state)
	}
	pv := f.server(testBackingVolume)
	if ref := pv.Spec.ClaimRef; ref == nil || ref.UID != claim.UID || ref.Name != "cache" || ref.Namespace != "ns" {
		t.Errorf("claimRef = %+v, want the claim", ref)
	}
	if pv.Spec.StorageClassName != "pool" || pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimRetain ||
		pv.Annotations[keys.ProvisionedBy] != testProvisioner || pv.Annotations[keys.BackingProvisioner] != testDriver ||
		pv.Annotations[keys.BackingClass] != testBackingClass || pv.Annotations[keys.Backend] != "class" ||
		pv.Annotations[keys.LastClaim] != "ns/cache" || pv.Annotations[keys.BackingForUID] != "" || pv.Spec.CSI.VolumeHandle != "vol-1" {
		t.Errorf("member = class %s, policy %s, annotations %v, source %+v", pv.Spec.StorageClassName, pv.Spec.PersistentVolumeReclaimPolicy, pv.Annotations, pv.Spec.PersistentVolumeSource)
	}
	if !slices.Equal(pv.Finalizers, []string{"kubernetes.io/pv-protection"}) {
		t.Errorf("finalizers = %v, want the sidecar's gone and the others kept", pv.Finalizers)
	}
	if !hasEvent(f.events(), "Normal ProvisioningSucceeded") {
		t.Error("no event says the volume was issued")
	}
}

// A backing claim whose claim went away before its volume was handed over
// gives the volume back to its driver: reclaim policy Delete again (it was
// kept), then the backing claim deleted, which releases it.
func TestABackingClaimNoClaimWantsGivesItsVolumeBack(t *testing.T) {
	claim := claimFor("ns", "gone", "1Gi")
	f := newClassFixture(t, nil, nil)
	f.provision(f.pool, claim) // step 1: the backing claim
	backing, err := f.backingClaim(claim)
	if err != nil {
		t.Fatal(err)
	}
	pv := f.driverMade(backing)
	// Step 3, as a provisioner stopped right after it left it.
	kept := pv.DeepCopy()
	kept.Annotations[keys.BackingFor], kept.Annotations[keys.BackingForUID] = "ns/gone", string(claim.UID)
	kept.Annotations[keys.PoolClass], kept.Annotations[keys.KeptBy] = "pool", testProvisioner
	kept.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimRetain
	if _, err := f.client.CoreV1().PersistentVolumes().Update(context.Background(), kept, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.catchUp(pv.Name)

	if err := f.p.classes.Sync(context.Background(), claim.UID); err != nil {
		t.Fatal(err)
	}
	if got := f.server(pv.Name); got.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete || got.Annotations[keys.BackingForUID] != "" {
		t.Errorf("volume = policy %s, annotations %v; want Delete and unmarked: its driver deletes it", got.Spec.PersistentVolumeReclaimPolicy, got.Annotations)
	}
	if _, err := f.backingClaim(claim); !apierrors.IsNotFound(err) {
		t.Errorf("backing claim still there: %v", err)
	}
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

// A free member of a class pool is evicted by handing it back to its
// driver in one update: Released by a claimRef that names no claim,
// reclaim policy Delete, provisioned-by the driver again, which deletes
// it. A member that changed since the decision is left alone.
func TestEvictingAClassMemberHandsItBackToItsDriver(t *testing.T) {
	member := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pvc-member", ResourceVersion: "7", Annotations: map[string]string{
			keys.ProvisionedBy: testProvisioner, keys.Backend: "class", keys.BackingProvisioner: testDriver, keys.BackingClass: testBackingClass}},
		Spec: corev1.PersistentVolumeSpec{
			StorageClassName:              "pool",
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: testDriver, VolumeHandle: "vol-1"}},
		},
		Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeAvailable},
	}
	f := newClassFixture(t, nil, []*corev1.PersistentVolume{member})

	stale := member.DeepCopy()
	stale.ResourceVersion = "6"
	if evicted, err := f.p.Evict(context.Background(), stale, keys.EvictForClaim); err != nil || evicted {
		t.Fatalf("Evict of a stale copy = %v, %v; want it left alone", evicted, err)
	}
	if evicted, err := f.p.Evict(context.Background(), member, keys.EvictForClaim); err != nil || !evicted {
		t.Fatalf("Evict = %v, %v", evicted, err)
	}
	pv := f.server(member.Name)
	if pv.Annotations[keys.ProvisionedBy] != testDriver || pv.Spec.StorageClassName != testBackingClass ||
		pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete || pv.Annotations[keys.Evicting] != keys.EvictForClaim {
		t.Errorf("evicted = provisioned-by %s, class %s, policy %s, annotations %v; want the driver's to delete",
			pv.Annotations[keys.ProvisionedBy], pv.Spec.StorageClassName, pv.Spec.PersistentVolumeReclaimPolicy, pv.Annotations)
	}
	if ref := pv.Spec.ClaimRef; ref == nil || ref.UID == "" || ref.Namespace != testBackingNS {
		t.Errorf("claimRef = %+v, want a claim of its own that no one has, so that it is Released", ref)
	}
	if pv.DeletionTimestamp != nil || slices.Contains(pv.Finalizers, keys.EvictFinalizer) {
		t.Errorf("evicted member fenced for deletion: %v %v; the driver deletes only what is not being deleted", pv.DeletionTimestamp, pv.Finalizers)
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

// Members made ahead of claims (minAvailable) come through backing claims
// too, of the pool's template, and become free members made ahead: the
// steps of the hand-over, without a claim.
func TestAClassPoolMakesMembersAheadThroughItsBackingClass(t *testing.T) {
	f := newClassFixture(t, nil, nil)
	pool := &v1alpha1.VolumePool{ObjectMeta: metav1.ObjectMeta{Name: "pool"}, Spec: v1alpha1.VolumePoolSpec{StorageClassName: "pool", MinAvailable: ptr.To[int32](1)}}
	if err := f.p.ahead().Check(f.pool, pool); err != nil {
		t.Fatalf("CheckAhead = %v", err)
	}
	if made, err := f.p.ahead().Make(context.Background(), f.pool, pool, 1); made != 1 || err != nil {
		t.Fatalf("MakeAhead = %d, %v", made, err)
	}
	claims, err := f.client.CoreV1().PersistentVolumeClaims(testBackingNS).List(context.Background(), metav1.ListOptions{})
	if err != nil || len(claims.Items) != 1 {
		t.Fatalf("backing claims = %v, %v; want one", claims, err)
	}
	backing := &claims.Items[0]
	uid := types.UID(backing.Annotations[keys.BackingForUID])
	if backing.Annotations[keys.MadeAhead] != "pool" || uid == "" || !backing.Spec.Resources.Requests.Storage().Equal(ahead.DefaultCapacity) {
		t.Fatalf("backing claim = %+v, want one of the pool's template, made ahead", backing)
	}
	if n := f.p.ahead().InFlight("pool"); n != 1 {
		t.Errorf("AheadInFlight = %d, want the one asked for", n)
	}

	f.driverMade(backing)
	if err := f.p.classes.Sync(context.Background(), uid); err != nil {
		t.Fatal(err)
	}
	if kept := f.server(testBackingVolume); kept.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimRetain || kept.Annotations[keys.MadeAhead] != "pool" {
		t.Fatalf("kept volume = policy %s, annotations %v", kept.Spec.PersistentVolumeReclaimPolicy, kept.Annotations)
	}
	f.catchUp(testBackingVolume)
	if n := f.p.ahead().InFlight("pool"); n != 1 {
		t.Errorf("AheadInFlight, kept = %d, want 1", n)
	}
	if err := f.p.classes.Sync(context.Background(), uid); err != nil {
		t.Fatal(err)
	}
	pv := f.server(testBackingVolume)
	if !pools.Unissued(pv) || pv.Spec.StorageClassName != "pool" || pv.Annotations[keys.ProvisionedBy] != testProvisioner ||
		pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimRetain || pv.Annotations[keys.BackingForUID] != "" {
		t.Fatalf("member = class %s, policy %s, claimRef %+v, annotations %v; want a free member made ahead",
			pv.Spec.StorageClassName, pv.Spec.PersistentVolumeReclaimPolicy, pv.Spec.ClaimRef, pv.Annotations)
	}
	f.catchUp(testBackingVolume)
	if n := f.p.ahead().InFlight("pool"); n != 0 {
		t.Errorf("AheadInFlight, made = %d, want 0", n)
	}
}

// A volume another installation's provisioner kept for one of its claims
// is none of this one's business, whatever its annotations say.
func TestAVolumeAnotherProvisionerKeptIsLeftAlone(t *testing.T) {
	theirs := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pvc-theirs", ResourceVersion: "3", Annotations: map[string]string{
			keys.ProvisionedBy: testDriver, keys.KeptBy: "other.example.com/provisioner", keys.BackingForUID: "their-claim",
			keys.PoolClass: "pool", keys.MadeAhead: "pool"}},
		Spec:   corev1.PersistentVolumeSpec{StorageClassName: testBackingClass, PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain},
		Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeReleased},
	}
	f := newClassFixture(t, nil, []*corev1.PersistentVolume{theirs})
	if uids := f.p.classes.KeptUIDs(); len(uids) != 0 {
		t.Errorf("keptUIDs = %v, want none of another provisioner's", uids)
	}
	if err := f.p.classes.Sync(context.Background(), "their-claim"); err != nil {
		t.Fatal(err)
	}
	if n := f.writes(); n != 0 {
		t.Errorf("%d writes, want none", n)
	}
	if n := f.p.ahead().InFlight("pool"); n != 0 {
		t.Errorf("AheadInFlight = %d, want another provisioner's volume not counted", n)
	}
}

// A class pool that binds on first consumer makes its members ahead in
// the zones its pool names, each for a Ready node of the zone with the
// fewest free members; it refuses minAvailable without zones, and zones on
// a class that binds at once.
func TestAZonedClassPoolMakesMembersAheadWhereFewestAreFree(t *testing.T) {
	inZoneA := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pvc-free-a", Annotations: map[string]string{keys.ProvisionedBy: testProvisioner}},
		Spec: corev1.PersistentVolumeSpec{StorageClassName: "pool", PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			NodeAffinity: zoneAffinity("zone-a")},
		Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeAvailable},
	}
	f := newClassFixture(t, nil, []*corev1.PersistentVolume{inZoneA})
	wffc := ptr.To(storagev1.VolumeBindingWaitForFirstConsumer)
	f.pool.VolumeBindingMode = wffc
	classes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := classes.Add(&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: testBackingClass}, Provisioner: testDriver,
		ReclaimPolicy: ptr.To(corev1.PersistentVolumeReclaimDelete), VolumeBindingMode: wffc}); err != nil {
		t.Fatal(err)
	}
	f.p.useClasses(storagelisters.NewStorageClassLister(classes))
	nodes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, n := range []*corev1.Node{zoneNode("a-1", "zone-a", true), zoneNode("b-0", "zone-b", false), zoneNode("b-1", "zone-b", true), zoneNode("c-1", "zone-c", true)} {
		if err := nodes.Add(n); err != nil {
			t.Fatal(err)
		}
	}
	f.p.nodes = corelisters.NewNodeLister(nodes)
	pool := func(zones ...string) *v1alpha1.VolumePool {
		return &v1alpha1.VolumePool{ObjectMeta: metav1.ObjectMeta{Name: "pool"}, Spec: v1alpha1.VolumePoolSpec{StorageClassName: "pool",
			MinAvailable: ptr.To[int32](3), MaxVolumes: ptr.To[int32](10), Template: &v1alpha1.VolumePoolTemplate{Zones: zones}}}
	}
	for _, tt := range []struct {
		name  string
		err   error
		wants string
	}{
		{"no zones", f.p.ahead().Check(f.pool, pool()), "names no zones"},
		{"zones without a Ready node", f.p.ahead().Check(f.pool, pool("zone-d")), "no Ready, schedulable node"},
		{"zones on a class of another backend", f.p.ahead().Check(f.directoryClass(nil), pool("zone-a")), "only a class of the class backend that binds on first consumer"},
		{"two zones", f.p.ahead().Check(f.pool, pool("zone-a", "zone-b")), ""},
	} {
		if (tt.wants == "") != (tt.err == nil) || tt.err != nil && !strings.Contains(tt.err.Error(), tt.wants) {
			t.Errorf("%s: CheckAhead = %v, want %q", tt.name, tt.err, tt.wants)
		}
	}

	if made, err := f.p.ahead().Make(context.Background(), f.pool, pool("zone-a", "zone-b"), 3); made != 3 || err != nil {
		t.Fatalf("MakeAhead = %d, %v", made, err)
	}
	claims, err := f.client.CoreV1().PersistentVolumeClaims(testBackingNS).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, c := range claims.Items {
		got[c.Annotations[volumehelpers.AnnSelectedNode]]++
	}
	// zone-a has one free member: two go to zone-b's Ready node, one to zone-a's.
	if want := map[string]int{"a-1": 1, "b-1": 2}; !maps.Equal(got, want) {
		t.Errorf("backing claims by selected node = %v, want %v", got, want)
	}
}

func zoneNode(name, zone string, ready bool) *corev1.Node {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelTopologyZone: zone}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}}}}
}

func zoneAffinity(zone string) *corev1.VolumeNodeAffinity {
	return &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{zone}}},
	}}}}
}

// A backing claim asked for a member made ahead that the backing class does
// not bind is not waited for without end: once it has waited three times
// --lifecycle-timeout, or at once when its pool is gone or wants no member
// made ahead any more, it is deleted (it holds no data: nothing was bound)
// and its place under maxVolumes is given back.
func TestAMemberAheadTheBackingClassDoesNotMakeIsGivenUp(t *testing.T) {
	for _, tt := range []struct {
		name  string
		age   time.Duration
		pool  *v1alpha1.VolumePool
		given bool
		event string
	}{
		{"waiting within the bound", time.Minute, aheadPoolNamed("pool", 1), false, ""},
		{"waiting past the bound", 3*time.Minute + time.Second, aheadPoolNamed("pool", 1), true, "Warning MemberNotMade Class disk did not bind a volume to claim"},
		{"its pool wants none ahead", time.Minute, aheadPoolNamed("pool", 0), true, "Normal MemberNotMade Asking class disk for a member ahead of claims is cancelled"},
		{"its pool is gone", time.Minute, nil, true, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newClassFixture(t, nil, nil)
			f.useClock(testingclock.NewFakePassiveClock(t0()))
			pool := aheadPoolNamed("pool", 1)
			if made, err := f.p.ahead().Make(context.Background(), f.pool, pool, 1); made != 1 || err != nil {
				t.Fatalf("MakeAhead = %d, %v", made, err)
			}
			if tt.pool != nil {
				if err := f.p.pools.Add(tt.pool); err != nil {
					t.Fatal(err)
				}
			}
			claims, err := f.client.CoreV1().PersistentVolumeClaims(testBackingNS).List(context.Background(), metav1.ListOptions{})
			if err != nil || len(claims.Items) != 1 {
				t.Fatalf("backing claims = %v, %v; want one", claims, err)
			}
			backing := claims.Items[0].DeepCopy()
			backing.UID = "uid-backing"
			backing.CreationTimestamp = metav1.NewTime(t0().Add(-tt.age))
			if _, err := f.client.CoreV1().PersistentVolumeClaims(testBackingNS).Update(context.Background(), backing, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := f.backing.Add(backing); err != nil {
				t.Fatal(err)
			}
			if err := f.p.classes.Sync(context.Background(), types.UID(backing.Annotations[keys.BackingForUID])); err != nil {
				t.Fatalf("Sync: %v", err)
			}
			_, err = f.client.CoreV1().PersistentVolumeClaims(testBackingNS).Get(context.Background(), backing.Name, metav1.GetOptions{})
			if given := apierrors.IsNotFound(err); given != tt.given {
				t.Fatalf("backing claim deleted %v (%v), want %v", given, err, tt.given)
			}
			if tt.given {
				_ = f.backing.Delete(backing)
				if n := f.p.ahead().InFlight("pool"); n != 0 {
					t.Errorf("AheadInFlight = %d, want the place given back", n)
				}
			}
			if tt.event != "" && !hasEvent(f.events(), tt.event) {
				t.Errorf("events %q, want one starting %q", f.events(), tt.event)
			}
		})
	}
}

func aheadPoolNamed(name string, min int32) *v1alpha1.VolumePool {
	return &v1alpha1.VolumePool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.VolumePoolSpec{StorageClassName: "pool", MinAvailable: ptr.To(min)}}
}

// A claim that waits for its backing class looks at what the backing
// provisioner said of its backing claim on each retry until it finds a
// failure, which reaches the claim at once; once it relayed one, not again
// for relayInterval: the retries meanwhile cost no LIST.
func TestWaitingForTheBackingClassListsItsEventsOncePerInterval(t *testing.T) {
	claim := claimFor("ns", "cache", "1Gi")
	f := newClassFixture(t, nil, nil, claim)
	clock := testingclock.NewFakePassiveClock(t0())
	f.useClock(clock)
	lists := func() int {
		n := 0
		for _, a := range f.client.Actions() {
			if a.GetVerb() == "list" && a.GetResource().Resource == "events" {
				n++
			}
		}
		return n
	}
	retry := func() {
		t.Helper()
		if _, state, err := f.provision(f.pool, claim); state != lib.ProvisioningInBackground || err == nil {
			t.Fatalf("Provision = %v, %v; want it waiting for the backing class", state, err)
		}
		// The cache shows the backing claim, as it soon would.
		claims, err := f.client.CoreV1().PersistentVolumeClaims(testBackingNS).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range claims.Items {
			if err := f.backing.Update(&claims.Items[i]); err != nil {
				t.Fatal(err)
			}
		}
	}
	retry()
	retry()
	if n := lists(); n != 2 {
		t.Errorf("%d event lists for two retries before the driver said anything, want 2", n)
	}
	if _, err := f.client.CoreV1().Events(testBackingNS).Create(context.Background(), &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: "refused", Namespace: testBackingNS}, Type: corev1.EventTypeWarning,
		Reason: "ProvisioningFailed", Message: "no disk of that size", LastTimestamp: metav1.NewTime(t0()),
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	retry()
	if !hasEvent(f.events(), "Warning BackingClassFailed") {
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
