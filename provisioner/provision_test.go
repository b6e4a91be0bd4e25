package provisioner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	volumehelpers "k8s.io/component-helpers/storage/volume"
	"k8s.io/utils/ptr"
	lib "sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/reclaimable/reclaimable/internal/controllertest"
	"github.com/reclaimable/reclaimable/internal/keys"
)

type fixture struct {
	t        *testing.T
	p        *provisioner
	client   *fake.Clientset
	volumes  cache.Indexer // what the informer shows; tests decide when it catches up
	claims   cache.Indexer
	recorder *record.FakeRecorder
	root     string

	mu       sync.Mutex
	requeued []string
}

// newFixture serves pvs and claims from both the cache and the API server.
// The fake API server enforces resourceVersion preconditions on PV updates.
func newFixture(t *testing.T, pvs []*corev1.PersistentVolume, claims ...*corev1.PersistentVolumeClaim) *fixture {
	t.Helper()
	f := &fixture{
		t:        t,
		volumes:  cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{indexClass: indexByClass, indexClaimUID: indexByClaimUID}),
		claims:   cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}),
		recorder: record.NewFakeRecorder(1000),
		root:     t.TempDir(),
	}
	var objs []runtime.Object
	for _, pv := range pvs {
		objs = append(objs, pv.DeepCopy())
		if err := f.volumes.Add(pv); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range claims {
		objs = append(objs, c.DeepCopy())
		if err := f.claims.Add(c); err != nil {
			t.Fatal(err)
		}
	}
	f.client = fake.NewClientset(objs...)
	gvr := corev1.SchemeGroupVersion.WithResource("persistentvolumes")
	f.client.PrependReactor("update", "persistentvolumes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		pv := a.(k8stesting.UpdateAction).GetObject().(*corev1.PersistentVolume).DeepCopy()
		cur, err := f.client.Tracker().Get(gvr, "", pv.Name)
		if err != nil {
			return true, nil, err
		}
		old := cur.(*corev1.PersistentVolume).ResourceVersion
		if pv.ResourceVersion != old {
			return true, nil, apierrors.NewConflict(gvr.GroupResource(), pv.Name, errors.New("the object has been modified"))
		}
		n, _ := strconv.Atoi(old)
		pv.ResourceVersion = strconv.Itoa(n + 1)
		return true, pv, f.client.Tracker().Update(gvr, pv, "")
	})
	f.p = newProvisioner(testProvisioner, f.client, f.volumes, corelisters.NewPersistentVolumeClaimLister(f.claims), f.recorder, newMetrics(), f.root)
	f.p.requeue = func(c *corev1.PersistentVolumeClaim) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.requeued = append(f.requeued, c.Name)
	}
	return f
}

func (f *fixture) directoryClass(extra map[string]string) *storagev1.StorageClass {
	params := map[string]string{"backend": "directory", "baseDir": f.root, "source": "hostPath", "hostPath": "/mnt/pool"}
	for k, v := range extra {
		params[k] = v
	}
	return &storagev1.StorageClass{
		ObjectMeta:    metav1.ObjectMeta{Name: "pool"},
		Provisioner:   testProvisioner,
		Parameters:    params,
		ReclaimPolicy: ptr.To(corev1.PersistentVolumeReclaimRetain),
	}
}

func (f *fixture) provision(class *storagev1.StorageClass, claim *corev1.PersistentVolumeClaim) (*corev1.PersistentVolume, lib.ProvisioningState, error) {
	return f.p.Provision(context.Background(), lib.ProvisionOptions{
		StorageClass: class, PVName: "pvc-" + string(claim.UID), PVC: claim,
	})
}

// server returns the PV as the API server has it.
func (f *fixture) server(name string) *corev1.PersistentVolume {
	f.t.Helper()
	pv, err := f.client.CoreV1().PersistentVolumes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return pv
}

// events drains the recorded events.
func (f *fixture) events() []string {
	return controllertest.Events(f.recorder)
}

func (f *fixture) writes() int {
	n := 0
	for _, a := range f.client.Actions() {
		if a.GetVerb() != "get" && a.GetVerb() != "list" && a.GetVerb() != "watch" {
			n++
		}
	}
	return n
}

func t0() time.Time { return time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC) }

func wantIssued(t *testing.T, err error, pv string) {
	t.Helper()
	var ignored *lib.IgnoredError
	if !errors.As(err, &ignored) || !strings.Contains(ignored.Reason, pv) {
		t.Fatalf("Provision = %v, want the library told that %s was issued", err, pv)
	}
}

func hasEvent(events []string, prefix string) bool {
	for _, e := range events {
		if strings.HasPrefix(e, prefix) {
			return true
		}
	}
	return false
}

func TestProvisionIssuesPoolMember(t *testing.T) {
	claim := claimFor("ns", "cache", "1Gi")
	f := newFixture(t, []*corev1.PersistentVolume{
		volume("smaller-free", "1Gi"),
		volume("last-used-by-it", "2Gi", released("ns", "cache", "gone-uid", t0())),
	}, claim)

	_, state, err := f.provision(f.directoryClass(nil), claim)
	wantIssued(t, err, "last-used-by-it")
	if state != lib.ProvisioningFinished {
		t.Errorf("state = %v", state)
	}
	pv := f.server("last-used-by-it")
	if ref := pv.Spec.ClaimRef; ref == nil || ref.UID != claim.UID || ref.Name != "cache" || ref.Namespace != "ns" || ref.Kind != "PersistentVolumeClaim" {
		t.Errorf("claimRef = %+v, want the claim with its UID", ref)
	}
	if pv.Annotations[keys.LastClaim] != "ns/cache" || pv.Annotations[annIssuedAt] == "" || pv.Annotations[volumehelpers.AnnBoundByController] != "yes" {
		t.Errorf("annotations = %v", pv.Annotations)
	}
	if f.server("smaller-free").Spec.ClaimRef != nil {
		t.Error("a second volume was taken")
	}
	if ev := f.events(); !hasEvent(ev, "Normal IssuedFromPool Volume last-used-by-it issued from the pool of class pool with the data of its last use (claim cache)") {
		t.Errorf("events = %v", ev)
	}
	if n := testutil.ToFloat64(f.p.metrics.issued.WithLabelValues("pool")); n != 1 {
		t.Errorf("issued metric = %v", n)
	}
}

func TestProvisionLeavesMembersWhoseClaimExists(t *testing.T) {
	claim := claimFor("ns", "new", "1Gi")
	// The cache has not seen the claim that still holds "held"; the API
	// server has.
	holder := claimFor("ns", "holder", "1Gi")
	f := newFixture(t, []*corev1.PersistentVolume{
		volume("held", "1Gi", released("ns", "holder", string(holder.UID), t0())),
		volume("other", "2Gi"),
	}, claim)
	if _, err := f.client.CoreV1().PersistentVolumeClaims("ns").Create(context.Background(), holder, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A claim recreated under the name of another member's claim is a
	// different claim: that member is free.
	recreated := claimFor("ns", "recreated", "1Gi")
	f2 := newFixture(t, []*corev1.PersistentVolume{
		volume("was-recreated", "1Gi", released("ns", "recreated", "the-first-uid", t0())),
	}, recreated)

	_, _, err := f.provision(f.directoryClass(nil), claim)
	wantIssued(t, err, "other")
	if f.server("held").Spec.ClaimRef.UID != holder.UID {
		t.Error("a volume whose claim exists was taken")
	}

	_, _, err = f2.provision(f2.directoryClass(nil), recreated)
	wantIssued(t, err, "was-recreated")
}

func TestProvisionTriesTheNextMemberOnConflict(t *testing.T) {
	claim := claimFor("ns", "c", "1Gi")
	f := newFixture(t, []*corev1.PersistentVolume{volume("a", "1Gi"), volume("b", "1Gi")}, claim)
	// Someone else took "a" since the cache saw it.
	a := f.server("a")
	a.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "ns", Name: "other", UID: "other-uid"}
	if _, err := f.client.CoreV1().PersistentVolumes().Update(context.Background(), a, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	_, _, err := f.provision(f.directoryClass(nil), claim)
	wantIssued(t, err, "b")
	if got := f.server("a").Spec.ClaimRef.UID; got != "other-uid" {
		t.Errorf("the volume another writer took now points at %q", got)
	}
	if n := testutil.ToFloat64(f.p.metrics.conflicts.WithLabelValues("pool")); n != 1 {
		t.Errorf("conflict metric = %v, want 1", n)
	}
}

func TestProvisionConflictWithThePVController(t *testing.T) {
	// The PV controller bound the claim to the Available member itself
	// while the provisioner tried to: the claim has its volume, and no
	// other is taken or created.
	claim := claimFor("ns", "c", "1Gi")
	f := newFixture(t, []*corev1.PersistentVolume{volume("a", "1Gi"), volume("b", "1Gi")}, claim)
	a := f.server("a")
	a.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "ns", Name: "c", UID: claim.UID}
	if _, err := f.client.CoreV1().PersistentVolumes().Update(context.Background(), a, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, _, err := f.provision(f.directoryClass(nil), claim)
	var ignored *lib.IgnoredError
	if !errors.As(err, &ignored) || !strings.Contains(ignored.Reason, "bound volume a") {
		t.Fatalf("Provision = %v, want the claim left to its binding", err)
	}
	if f.server("b").Spec.ClaimRef != nil {
		t.Error("a second volume was taken")
	}
	if f.p.ShouldProvision(context.Background(), claim) {
		t.Error("ShouldProvision = true before the cache shows the binding")
	}
	entries, _ := os.ReadDir(f.root)
	if len(entries) != 0 {
		t.Error("a volume was created")
	}

	// Only the member's status changed since the cache saw it: still free,
	// so it is taken on a second try.
	f2 := newFixture(t, []*corev1.PersistentVolume{volume("a", "1Gi"), volume("b", "2Gi")}, claim)
	a = f2.server("a")
	a.Status.Phase = corev1.VolumeAvailable
	a.Annotations["unrelated"] = "change"
	if _, err := f2.client.CoreV1().PersistentVolumes().Update(context.Background(), a, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, _, err = f2.provision(f2.directoryClass(nil), claim)
	wantIssued(t, err, "a")
	if f2.server("a").Spec.ClaimRef.UID != claim.UID || f2.server("b").Spec.ClaimRef != nil {
		t.Error("the member changed meanwhile was not taken")
	}
}

func TestProvisionIsIdempotent(t *testing.T) {
	claim := claimFor("ns", "c", "1Gi")
	f := newFixture(t, []*corev1.PersistentVolume{volume("a", "1Gi"), volume("b", "1Gi")}, claim)
	class := f.directoryClass(nil)

	_, _, err := f.provision(class, claim)
	wantIssued(t, err, "a")
	writes := f.writes()

	// The library calls again before the cache shows the take.
	_, _, err = f.provision(class, claim)
	wantIssued(t, err, "a")
	if f.p.ShouldProvision(context.Background(), claim) {
		t.Error("ShouldProvision = true for a claim a volume was issued to")
	}
	// And again once it does.
	old, _, _ := f.volumes.GetByKey("a")
	if err := f.volumes.Update(f.server("a")); err != nil {
		t.Fatal(err)
	}
	f.p.onVolume(old.(*corev1.PersistentVolume), f.server("a"))
	if len(f.p.takes) != 0 {
		t.Errorf("expectations kept after the cache showed the take: %v", f.p.takes)
	}
	_, _, err = f.provision(class, claim)
	wantIssued(t, err, "a")

	if w := f.writes(); w != writes {
		t.Errorf("repeated calls wrote %d times more", w-writes)
	}
	if f.server("b").Spec.ClaimRef != nil {
		t.Error("a repeated call took a second volume")
	}
}

func TestProvisionGrowsTheDirectoryPool(t *testing.T) {
	claim := claimFor("ns", "c", "3Gi", func(c *corev1.PersistentVolumeClaim) {
		c.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}
		c.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"cache": "go"}}
	})
	f := newFixture(t, []*corev1.PersistentVolume{
		volume("too-small", "1Gi", func(pv *corev1.PersistentVolume) {
			pv.Labels = map[string]string{"cache": "go"}
			pv.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}
		}),
	}, claim)
	class := f.directoryClass(map[string]string{"selectorKeys": "cache", "directoryMode": "0750"})
	class.MountOptions = []string{"noatime"}
	class.AllowedTopologies = []corev1.TopologySelectorTerm{{MatchLabelExpressions: []corev1.TopologySelectorLabelRequirement{{Key: "share", Values: []string{"yes"}}}}}

	pv, state, err := f.provision(class, claim)
	if err != nil || state != lib.ProvisioningFinished {
		t.Fatalf("Provision = %v, %v", state, err)
	}
	name := "pvc-" + string(claim.UID)
	if pv.Name != name {
		t.Errorf("name = %q, want %q", pv.Name, name)
	}
	size := pv.Spec.Capacity[corev1.ResourceStorage]
	if size.String() != "3Gi" || pv.Spec.AccessModes[0] != corev1.ReadWriteMany || pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimRetain {
		t.Errorf("spec = %+v", pv.Spec)
	}
	if pv.Labels["cache"] != "go" {
		t.Errorf("labels = %v, want the selector's", pv.Labels)
	}
	if pv.Spec.HostPath.Path != "/mnt/pool/"+name || pv.Spec.MountOptions[0] != "noatime" || pv.Spec.StorageClassName != "pool" {
		t.Errorf("source = %+v, mount options = %v", pv.Spec.HostPath, pv.Spec.MountOptions)
	}
	if pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required.NodeSelectorTerms[0].MatchExpressions[0].Key != "share" {
		t.Errorf("node affinity = %+v, want the class's allowedTopologies", pv.Spec.NodeAffinity)
	}
	want := map[string]string{annBackend: "directory", annBaseDir: f.root, annDirectory: name, keys.LastClaim: "ns/c"}
	for k, v := range want {
		if pv.Annotations[k] != v {
			t.Errorf("annotation %s = %q, want %q", k, pv.Annotations[k], v)
		}
	}
	fi, err := os.Stat(filepath.Join(f.root, name))
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o750 {
		t.Errorf("directory: %v, %v", fi, err)
	}
	if n := testutil.ToFloat64(f.p.metrics.created.WithLabelValues("pool")); n != 1 {
		t.Errorf("created metric = %v", n)
	}

	// A class without a reclaim policy keeps its volumes.
	noPolicy := f.directoryClass(nil)
	noPolicy.ReclaimPolicy = nil
	pv, _, err = f.provision(noPolicy, claimFor("ns", "d", "1Gi"))
	if err != nil || pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimRetain {
		t.Errorf("reclaim policy = %v, %v", pv, err)
	}
}

func TestProvisionStopsAtMaxVolumes(t *testing.T) {
	created := func(name string) *corev1.PersistentVolume {
		return volume(name, "1Gi", bound("ns", "user-"+name, "uid-"+name))
	}
	a, b, c := claimFor("ns", "a", "1Gi"), claimFor("ns", "b", "1Gi"), claimFor("ns", "c", "1Gi")
	f := newFixture(t, []*corev1.PersistentVolume{
		created("v1"),
		// A Delete volume counts against the limit but is no pool member.
		created("v2"), volume("not-ours", "1Gi", func(pv *corev1.PersistentVolume) { pv.Annotations = nil }),
	}, a, b, c)
	f.volumes.Update(func() *corev1.PersistentVolume {
		pv := created("v2")
		pv.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimDelete
		return pv
	}())
	class := f.directoryClass(map[string]string{"maxVolumes": "3"})

	if _, _, err := f.provision(class, a); err != nil {
		t.Fatalf("growing to the limit: %v", err)
	}
	// The library retries before its PV shows in the cache: not a new volume.
	if _, _, err := f.provision(class, a); err != nil {
		t.Fatalf("a retry counted twice: %v", err)
	}
	_, _, err := f.provision(class, b)
	if err == nil || !strings.Contains(err.Error(), "pool exhausted") {
		t.Fatalf("Provision beyond the limit = %v", err)
	}
	ev := f.events()
	if !hasEvent(ev, "Warning PoolExhausted class pool has 3 of at most 3 volumes") || !strings.Contains(strings.Join(ev, "\n"), "1 volumes, 1 in use, 0 free") {
		t.Errorf("events = %v", ev)
	}
	if _, err := os.Stat(filepath.Join(f.root, "pvc-"+string(b.UID))); err == nil {
		t.Error("a directory was created beyond the limit")
	}

	// Freeing a volume of the class wakes the waiting claim.
	freed := created("v1")
	freed.Status.Phase = corev1.VolumeReleased
	f.p.onVolume(created("v1"), freed)
	if len(f.requeued) != 1 || f.requeued[0] != "b" {
		t.Errorf("requeued = %v, want [b]", f.requeued)
	}
	// Deleting one makes room.
	f.volumes.Delete(created("v1"))
	if _, _, err := f.provision(class, b); err != nil {
		t.Errorf("Provision after a volume was deleted: %v", err)
	}
}

func TestProvisionStaticPool(t *testing.T) {
	static := func(name string, mods ...func(*corev1.PersistentVolume)) *corev1.PersistentVolume {
		return volume(name, "1Gi", append([]func(*corev1.PersistentVolume){func(pv *corev1.PersistentVolume) {
			pv.Annotations = map[string]string{}
			pv.Labels = map[string]string{PoolLabel: "pool"}
		}}, mods...)...)
	}
	claim := claimFor("ns", "c", "1Gi")
	f := newFixture(t, []*corev1.PersistentVolume{
		static("busy", bound("ns", "x", "ux")),
		volume("unlabelled", "1Gi"),
	}, claim)
	class := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "pool"}, Parameters: map[string]string{"backend": "static"}}

	_, _, err := f.provision(class, claim)
	if err == nil || !strings.Contains(err.Error(), "pool exhausted") {
		t.Fatalf("Provision = %v, want the pool exhausted", err)
	}
	if ev := f.events(); !hasEvent(ev, "Warning PoolExhausted the static pool of class pool has no free volume that fits: 1 volumes, 1 in use") ||
		!strings.Contains(ev[0], PoolLabel+"=pool") {
		t.Errorf("events = %v", ev)
	}
	if f.server("unlabelled").Spec.ClaimRef != nil {
		t.Error("a volume outside the static pool was taken")
	}

	// An administrator labels a free volume into the pool.
	joined := static("joined")
	f.p.onVolume(volume("joined", "1Gi"), joined)
	if len(f.requeued) != 1 {
		t.Errorf("requeued = %v, want the waiting claim", f.requeued)
	}
	if _, err := f.client.CoreV1().PersistentVolumes().Create(context.Background(), joined, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.volumes.Add(joined)
	_, _, err = f.provision(class, claim)
	wantIssued(t, err, "joined")
	if f.server("joined").Annotations[keys.ProvisionedBy] != "" {
		t.Error("a static volume was marked as created by the provisioner")
	}
}

func TestProvisionRefusesWhatItCannotHonour(t *testing.T) {
	tests := []struct {
		name   string
		params map[string]string
		claim  func(*corev1.PersistentVolumeClaim)
		reason string
	}{
		{"unknown parameter", map[string]string{"colour": "blue"}, nil, "InvalidStorageClassParameters"},
		{"selector on an unknown key", nil, func(c *corev1.PersistentVolumeClaim) {
			c.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"region": "east"}}
		}, "UnsupportedSelector"},
		{"selector a new volume cannot match", map[string]string{"selectorKeys": "cache"}, func(c *corev1.PersistentVolumeClaim) {
			c.Spec.Selector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "cache", Operator: metav1.LabelSelectorOpExists}}}
		}, "UnsupportedSelector"},
		{"data source", nil, func(c *corev1.PersistentVolumeClaim) {
			c.Spec.DataSource = &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "src"}
		}, "UnsupportedDataSource"},
		{"block volume", nil, func(c *corev1.PersistentVolumeClaim) { c.Spec.VolumeMode = ptr.To(corev1.PersistentVolumeBlock) }, "UnsupportedVolumeMode"},
		{"volume attributes class", nil, func(c *corev1.PersistentVolumeClaim) { c.Spec.VolumeAttributesClassName = ptr.To("gold") }, "UnsupportedVolumeAttributesClass"},
		{"size beyond any volume", nil, func(c *corev1.PersistentVolumeClaim) {
			c.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("99999999999999999999999999999Ei")
		}, "UnsupportedCapacity"},
		{"size beyond maxCapacity", map[string]string{"maxCapacity": "100Gi"}, func(c *corev1.PersistentVolumeClaim) {
			c.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("101Gi")
		}, "UnsupportedCapacity"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mods []func(*corev1.PersistentVolumeClaim)
			if tt.claim != nil {
				mods = append(mods, tt.claim)
			}
			claim := claimFor("ns", "c", "1Gi", mods...)
			f := newFixture(t, []*corev1.PersistentVolume{volume("free", "1Gi")}, claim)
			pv, _, err := f.provision(f.directoryClass(tt.params), claim)
			if err == nil || pv != nil {
				t.Fatalf("Provision = %v, %v; want a refusal", pv, err)
			}
			if ev := f.events(); !hasEvent(ev, "Warning "+tt.reason) {
				t.Errorf("events = %v, want %s", ev, tt.reason)
			}
			if f.writes() != 0 {
				t.Errorf("a refused claim caused %d writes", f.writes())
			}
			entries, _ := os.ReadDir(f.root)
			if len(entries) != 0 {
				t.Errorf("a refused claim left %d directories", len(entries))
			}
		})
	}
}

func TestProvisionRacingClaimsNeverShareAVolume(t *testing.T) {
	var pvs []*corev1.PersistentVolume
	for i := range 5 {
		pvs = append(pvs, volume(fmt.Sprintf("member-%d", i), "1Gi", released("ns", fmt.Sprintf("gone-%d", i), fmt.Sprintf("gone-uid-%d", i), t0())))
	}
	var claims []*corev1.PersistentVolumeClaim
	for i := range 20 {
		claims = append(claims, claimFor("ns", fmt.Sprintf("c%d", i), "1Gi"))
	}
	f := newFixture(t, pvs, claims...)
	class := f.directoryClass(nil)

	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		grown  int
		issued = map[string]types.UID{}
	)
	for _, c := range claims {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pv, _, err := f.provision(class, c)
			mu.Lock()
			defer mu.Unlock()
			var ignored *lib.IgnoredError
			switch {
			case err == nil:
				grown++
			case errors.As(err, &ignored):
				issued[c.Name] = c.UID
			default:
				t.Errorf("claim %s: %v", c.Name, err)
			}
			_ = pv
		}()
	}
	wg.Wait()

	if grown != 15 || len(issued) != 5 {
		t.Errorf("grown %d, issued %d; want 15 and 5", grown, len(issued))
	}
	owners := map[types.UID]string{}
	for _, pv := range pvs {
		ref := f.server(pv.Name).Spec.ClaimRef
		if prev, ok := owners[ref.UID]; ok {
			t.Errorf("claim %s holds %s and %s", ref.Name, prev, pv.Name)
		}
		owners[ref.UID] = pv.Name
		if issued[ref.Name] != ref.UID {
			t.Errorf("%s points at %s, which was not told it got a pool volume", pv.Name, ref.Name)
		}
	}
}

func TestDelete(t *testing.T) {
	created := func(policy corev1.PersistentVolumeReclaimPolicy, mods ...func(*corev1.PersistentVolume)) *corev1.PersistentVolume {
		return volume("pvc-1", "1Gi", append([]func(*corev1.PersistentVolume){func(pv *corev1.PersistentVolume) {
			pv.Spec.PersistentVolumeReclaimPolicy = policy
			pv.Annotations[annBackend] = backendDirectory
			pv.Annotations[annDirectory] = "pvc-1"
			pv.Spec.HostPath = &corev1.HostPathVolumeSource{Path: "/mnt/pool/pvc-1"}
		}}, mods...)...)
	}
	tests := []struct {
		name        string
		pv          *corev1.PersistentVolume
		wantIgnored bool
		wantErr     bool
		wantGone    bool
	}{
		{"created here with Delete", created(corev1.PersistentVolumeReclaimDelete), false, false, true},
		{"Retain", created(corev1.PersistentVolumeReclaimRetain), true, false, false},
		{"another provisioner's", created(corev1.PersistentVolumeReclaimDelete, func(pv *corev1.PersistentVolume) {
			pv.Annotations[keys.ProvisionedBy] = "other/x"
		}), true, false, false},
		{"not made by the directory backend", created(corev1.PersistentVolumeReclaimDelete, func(pv *corev1.PersistentVolume) {
			delete(pv.Annotations, annBackend)
		}), true, false, false},
		{"directory annotation naming another volume", created(corev1.PersistentVolumeReclaimDelete, func(pv *corev1.PersistentVolume) {
			pv.Annotations[annDirectory] = "pvc-2"
		}), false, true, false},
		{"source pointing elsewhere", created(corev1.PersistentVolumeReclaimDelete, func(pv *corev1.PersistentVolume) {
			pv.Spec.HostPath.Path = "/mnt/pool/pvc-2"
		}), false, true, false},
		{"base directory outside the root", created(corev1.PersistentVolumeReclaimDelete, func(pv *corev1.PersistentVolume) {
			pv.Annotations[annBaseDir] = "/"
		}), false, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, nil)
			if tt.pv.Annotations[annBaseDir] == "" {
				tt.pv.Annotations[annBaseDir] = f.root
			}
			for _, d := range []string{"pvc-1", "pvc-2"} {
				if err := os.MkdirAll(filepath.Join(f.root, d, "sub"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			err := f.p.Delete(context.Background(), tt.pv)
			var ignored *lib.IgnoredError
			if got := errors.As(err, &ignored); got != tt.wantIgnored {
				t.Errorf("Delete = %v, want ignored %v", err, tt.wantIgnored)
			}
			if got := err != nil && !errors.As(err, &ignored); got != tt.wantErr {
				t.Errorf("Delete = %v, want error %v", err, tt.wantErr)
			}
			_, statErr := os.Stat(filepath.Join(f.root, "pvc-1"))
			if gone := statErr != nil; gone != tt.wantGone {
				t.Errorf("directory gone = %v, want %v", gone, tt.wantGone)
			}
			if _, err := os.Stat(filepath.Join(f.root, "pvc-2", "sub")); err != nil {
				t.Errorf("another volume's data was touched: %v", err)
			}
		})
	}
}

func TestDescribeLastUseHidesOtherNamespaces(t *testing.T) {
	claim := claimFor("team", "cache", "1Gi")
	for last, want := range map[string]string{
		"":             "never used",
		"team/build":   "claim build",
		"team-b/build": "a claim of another namespace",
		"other/secret": "a claim of another namespace",
	} {
		if got := describeLastUse(last, claim); got != want {
			t.Errorf("describeLastUse(%q) = %q, want %q", last, got, want)
		}
	}
}
