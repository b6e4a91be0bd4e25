package releaser

import (
	"context"
	"errors"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/reclaimable/reclaimable/internal/controller"
	"github.com/reclaimable/reclaimable/internal/controllertest"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

var (
	pvResource    = corev1.SchemeGroupVersion.WithResource("persistentvolumes")
	claimResource = corev1.SchemeGroupVersion.WithResource("persistentvolumeclaims")
	testNow       = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
)

// fixture is a releaser on a fake API server whose caches are filled by
// hand, so that a test controls exactly what the releaser sees.
type fixture struct {
	t        *testing.T
	ctx      context.Context
	client   *fake.Clientset
	c        *Controller
	recorder *record.FakeRecorder
	reg      *prometheus.Registry
	volumes  cache.Indexer
	classes  cache.Indexer
	claims   cache.Indexer

	mu   sync.Mutex
	keys []string // taken from the queue
}

// newFixture stores objs in the API server and in the caches (claims only
// when they carry this installation's managed-by label, like the real
// managed-claims informer).
func newFixture(t *testing.T, p policy, objs ...runtime.Object) *fixture {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	client := fake.NewClientset(objs...)
	controllertest.ResourceVersionPreconditions(client, pvResource)
	factory := informers.NewSharedInformerFactory(client, 0)
	volumes := factory.Core().V1().PersistentVolumes()
	classes := factory.Storage().V1().StorageClasses()
	claims := factory.Core().V1().PersistentVolumeClaims()
	f := &fixture{
		t: t, ctx: ctx, client: client,
		recorder: record.NewFakeRecorder(100),
		reg:      prometheus.NewRegistry(),
		volumes:  volumes.Informer().GetIndexer(),
		classes:  classes.Informer().GetIndexer(),
		claims:   claims.Informer().GetIndexer(),
	}
	c, err := newController(client, p, Config{ReleaseInterval: time.Minute, Workers: 1}, volumes, classes, claims, f.recorder, f.reg)
	if err != nil {
		t.Fatalf("newController: %v", err)
	}
	c.useClock(testingclock.NewFakePassiveClock(testNow))
	c.conflictRecheck = 0
	// The queue only records keys, so that a test can see what was queued.
	c.queue.Sync = func(_ context.Context, name string) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.keys = append(f.keys, name)
		return nil
	}
	f.c = c
	for _, obj := range objs {
		switch o := obj.(type) {
		case *corev1.PersistentVolume:
			f.cache(f.volumes, o)
		case *storagev1.StorageClass:
			f.cache(f.classes, o)
		case *corev1.PersistentVolumeClaim:
			if o.Labels[wellknown.ClaimManagedBy] == p.controllerID {
				f.cache(f.claims, o)
			}
		}
	}
	return f
}

func (f *fixture) cache(store cache.Indexer, obj runtime.Object) {
	f.t.Helper()
	old, known, _ := store.Get(obj)
	if err := store.Update(obj); err != nil {
		f.t.Fatal(err)
	}
	if store != f.volumes {
		return
	}
	// What the volumes' event handlers keep besides the cache.
	if known {
		f.c.byClaim.OnUpdate(old, obj)
	} else {
		f.c.byClaim.OnAdd(obj, false)
	}
}

// catchUp copies the API server's version of a volume into the cache, as
// the informer eventually does.
func (f *fixture) catchUp(name string) {
	f.cache(f.volumes, f.stored(name))
}

// change applies another writer's change (the PV controller's) to a volume
// in the API server and, as its informer would, in the cache.
func (f *fixture) change(name string, mutate func(*corev1.PersistentVolume)) {
	f.t.Helper()
	pv := f.stored(name).DeepCopy()
	mutate(pv)
	rv, _ := strconv.Atoi(pv.ResourceVersion)
	pv.ResourceVersion = strconv.Itoa(rv + 1)
	if err := f.client.Tracker().Update(pvResource, pv, ""); err != nil {
		f.t.Fatal(err)
	}
	f.cache(f.volumes, pv)
}

// deleteClaim removes a claim from the API server and the cache.
func (f *fixture) deleteClaim(c *corev1.PersistentVolumeClaim) {
	f.t.Helper()
	if err := f.client.Tracker().Delete(claimResource, c.Namespace, c.Name); err != nil {
		f.t.Fatal(err)
	}
	if err := f.claims.Delete(c); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) stored(name string) *corev1.PersistentVolume {
	f.t.Helper()
	obj, err := f.client.Tracker().Get(pvResource, "", name)
	if err != nil {
		f.t.Fatalf("getting volume %s: %v", name, err)
	}
	return obj.(*corev1.PersistentVolume)
}

// The events of the watches, delivered as they are: the volumes they
// concern are queued.
func (f *fixture) deliver(names []string) {
	for _, name := range names {
		f.c.queue.Add(name)
	}
}

// volumeChanged delivers an addition or change of pv, queued as the loop's
// Wants says.
func (f *fixture) volumeChanged(pv *corev1.PersistentVolume) {
	if f.c.wants(pv) {
		f.c.queue.Add(pv.Name)
	}
}

func (f *fixture) claimEvent(typ controller.EventType, claim *corev1.PersistentVolumeClaim) {
	f.deliver(f.c.claimChanged(controller.Event[*corev1.PersistentVolumeClaim]{Type: typ, Obj: claim, Old: claim}))
}

// classChanged delivers the change of a class from old, or its addition if
// old is nil.
func (f *fixture) classChanged(old, cur *storagev1.StorageClass) {
	e := controller.Event[*storagev1.StorageClass]{Type: controller.Updated, Obj: cur, Old: old}
	if old == nil {
		e.Type = controller.Added
	}
	f.deliver(f.c.classChanged(e))
}

// queued returns the keys queued so far, sorted, and empties the queue.
func (f *fixture) queued() []string {
	f.t.Helper()
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.c.queue.Run(ctx)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for f.c.queue.Len() > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	cancel() // workers finish the keys they hold before Run returns
	<-done
	f.mu.Lock()
	defer f.mu.Unlock()
	keys := f.keys
	f.keys = nil
	sort.Strings(keys)
	return keys
}

func (f *fixture) sync(name string) error {
	f.client.ClearActions()
	return f.c.sync(f.ctx, name)
}

// calls lists the API requests of the last sync as "verb resource".
func (f *fixture) calls() []string {
	return controllertest.Actions(f.client)
}

func (f *fixture) events() []string {
	return controllertest.Events(f.recorder)
}

// metric returns the value of one sample of a metric of the releaser.
func (f *fixture) metric(name string, labelPairs ...string) float64 {
	f.t.Helper()
	return controllertest.Metric(f.t, f.reg, name, labelPairs...)
}

func wantCalls(t *testing.T, got []string, want ...string) {
	t.Helper()
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("API requests = %q, want %q", got, want)
	}
}

func wantEvents(t *testing.T, got []string, prefixes ...string) {
	t.Helper()
	if len(got) != len(prefixes) {
		t.Errorf("events = %q, want %d starting with %q", got, len(prefixes), prefixes)
		return
	}
	for i, p := range prefixes {
		if !strings.HasPrefix(got[i], p) {
			t.Errorf("event %d = %q, want prefix %q", i, got[i], p)
		}
	}
}

func TestSyncAssociatesWithoutTouchingTheSpec(t *testing.T) {
	tests := []struct {
		name   string
		pv     *corev1.PersistentVolume
		class  *storagev1.StorageClass
		claim  *corev1.PersistentVolumeClaim
		rule   rule
		detail string
	}{
		{name: "Bound to a managed claim", pv: volume(corev1.VolumeBound), class: class(""), claim: claim("claim-uid", testID),
			rule: ruleManagedClaim, detail: "its claim ns/data has label " + wellknown.ClaimManagedBy + "=" + testID},
		{name: "Bound, class names this ID", pv: volume(corev1.VolumeBound), class: class(testID), claim: claim("claim-uid", ""),
			rule: ruleStorageClass, detail: `its StorageClass "pool" has annotation ` + wellknown.ClassControllerID + "=" + testID},
		{name: "Bound, provisioned here", pv: volume(corev1.VolumeBound, provisionedBy(testProvisioner)), class: class(""), claim: claim("claim-uid", ""),
			rule: ruleProvisioner, detail: "it was provisioned by " + testProvisioner},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.pv.Labels = map[string]string{"team": "build"}
			f := newFixture(t, testPolicy, tt.pv, tt.class, tt.claim)
			if err := f.sync(tt.pv.Name); err != nil {
				t.Fatalf("sync: %v", err)
			}
			wantCalls(t, f.calls(), "update persistentvolumes")
			got := f.stored(tt.pv.Name)
			if want := map[string]string{"team": "build", wellknown.VolumeManagedBy: testID}; !reflect.DeepEqual(got.Labels, want) {
				t.Errorf("labels = %v, want %v", got.Labels, want)
			}
			if !reflect.DeepEqual(got.Spec, tt.pv.Spec) || !reflect.DeepEqual(got.Annotations, tt.pv.Annotations) {
				t.Errorf("association changed more than the label:\nspec %+v\nwant %+v", got.Spec, tt.pv.Spec)
			}
			wantEvents(t, f.events(), "Normal Associated Associated with controller ID "+testID+": "+tt.detail)
			if v := f.metric("reclaimable_releaser_associations_total", "rule", string(tt.rule)); v != 1 {
				t.Errorf("associations_total{rule=%s} = %v, want 1", tt.rule, v)
			}

			// Once the cache has the label, a sync has nothing to do.
			f.catchUp(tt.pv.Name)
			if err := f.sync(tt.pv.Name); err != nil {
				t.Fatalf("second sync: %v", err)
			}
			wantCalls(t, f.calls())
		})
	}
}

func TestSyncDoesNotAssociate(t *testing.T) {
	noClaimRule := testPolicy
	noClaimRule.claimRule = false
	tests := []struct {
		name   string
		policy policy
		objs   []runtime.Object
	}{
		{name: "automatic association disabled", policy: noClaimRule, objs: []runtime.Object{volume(corev1.VolumeBound), class(""), claim("claim-uid", testID)}},
		{name: "claim of another installation", objs: []runtime.Object{volume(corev1.VolumeBound), class(""), claim("claim-uid", "theirs")}},
		{name: "volume of another installation", objs: []runtime.Object{volume(corev1.VolumeBound, labelled("theirs")), class(testID), claim("claim-uid", testID)}},
		{name: "volume being bound", objs: []runtime.Object{volume(corev1.VolumeAvailable), class(testID)}},
		{name: "pool volume without claimRef", objs: []runtime.Object{volume(corev1.VolumeAvailable, withoutClaimRef, provisionedBy(testProvisioner)), class(testID)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.policy
			if p == (policy{}) {
				p = testPolicy
			}
			f := newFixture(t, p, tt.objs...)
			if err := f.sync("pv-1"); err != nil {
				t.Fatalf("sync: %v", err)
			}
			wantCalls(t, f.calls())
			wantEvents(t, f.events())
		})
	}
}

func TestSyncRelease(t *testing.T) {
	ours := func(phase corev1.PersistentVolumePhase, mutate ...func(*corev1.PersistentVolume)) *corev1.PersistentVolume {
		pv := volume(phase, append([]func(*corev1.PersistentVolume){labelled(testID)}, mutate...)...)
		pv.Labels["team"] = "build"
		return pv
	}
	// claimDeleted is the last content of a deleted claim, as its DELETED
	// event carries it.
	claimDeleted := func(c *corev1.PersistentVolumeClaim) *corev1.PersistentVolumeClaim {
		now := metav1.Now()
		c.DeletionTimestamp = &now
		c.Finalizers = []string{"kubernetes.io/pvc-protection"}
		return c
	}
	tests := []struct {
		name string
		pv   *corev1.PersistentVolume
		// api holds the claims the API server has; managed claims among them are cached too.
		api []*corev1.PersistentVolumeClaim
		// watchDeleted is a claim reported by a DELETED event of the managed-claims watch.
		watchDeleted *corev1.PersistentVolumeClaim
		// classID is the controller-id annotation of the volume's class ("" for none).
		classID      string
		wantCalls    []string
		wantReleased bool
		// wantKept: the release leaves the association label in place.
		wantKept bool
	}{
		{name: "claim gone", pv: ours(corev1.VolumeReleased),
			wantCalls: []string{"get persistentvolumeclaims", "update persistentvolumes"}, wantReleased: true},
		{name: "claim recreated with the same name and a new UID", pv: ours(corev1.VolumeReleased), api: []*corev1.PersistentVolumeClaim{claim("new-uid", "")},
			wantCalls: []string{"get persistentvolumeclaims", "update persistentvolumes"}, wantReleased: true},
		{name: "managed claim recreated with a new UID", pv: ours(corev1.VolumeReleased), api: []*corev1.PersistentVolumeClaim{claim("new-uid", testID)},
			wantCalls: []string{"get persistentvolumeclaims", "update persistentvolumes"}, wantReleased: true},
		{name: "deletion seen on the watch spares the lookup", pv: ours(corev1.VolumeReleased), watchDeleted: claimDeleted(claim("claim-uid", testID)),
			wantCalls: []string{"update persistentvolumes"}, wantReleased: true},
		{name: "claim that lost the label is looked up and still exists", pv: ours(corev1.VolumeReleased),
			api: []*corev1.PersistentVolumeClaim{claim("claim-uid", "")}, watchDeleted: claim("claim-uid", testID),
			wantCalls: []string{"get persistentvolumeclaims"}},
		{name: "claim still exists (API server)", pv: ours(corev1.VolumeReleased), api: []*corev1.PersistentVolumeClaim{claim("claim-uid", "")},
			wantCalls: []string{"get persistentvolumeclaims"}},
		{name: "managed claim still exists (cache)", pv: ours(corev1.VolumeReleased), api: []*corev1.PersistentVolumeClaim{claim("claim-uid", testID)}},
		{name: "claim gone, class names this ID: association kept", pv: ours(corev1.VolumeReleased), classID: testID,
			wantCalls: []string{"get persistentvolumeclaims", "update persistentvolumes"}, wantReleased: true, wantKept: true},
		{name: "claim gone, provisioned here: association kept", pv: ours(corev1.VolumeReleased, provisionedBy(testProvisioner)),
			wantCalls: []string{"get persistentvolumeclaims", "update persistentvolumes"}, wantReleased: true, wantKept: true},
		{name: "claim gone, class names another ID", pv: ours(corev1.VolumeReleased), classID: "theirs",
			wantCalls: []string{"get persistentvolumeclaims", "update persistentvolumes"}, wantReleased: true},
		{name: "claim gone, provisioned by another provisioner", pv: ours(corev1.VolumeReleased, provisionedBy("vendor/other")),
			wantCalls: []string{"get persistentvolumeclaims", "update persistentvolumes"}, wantReleased: true},
		{name: "Bound", pv: ours(corev1.VolumeBound)},
		{name: "Bound, claim gone from the cache", pv: ours(corev1.VolumeBound), watchDeleted: claimDeleted(claim("claim-uid", testID))},
		{name: "Available, pre-bound", pv: ours(corev1.VolumeAvailable)},
		{name: "another controller ID", pv: volume(corev1.VolumeReleased, labelled("theirs"))},
		{name: "being deleted", pv: ours(corev1.VolumeReleased, deleting)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs := []runtime.Object{tt.pv, class(tt.classID)}
			for _, c := range tt.api {
				objs = append(objs, c)
			}
			f := newFixture(t, testPolicy, objs...)
			if tt.watchDeleted != nil {
				f.claimEvent(controller.Deleted, tt.watchDeleted)
			}
			if err := f.sync(tt.pv.Name); err != nil {
				t.Fatalf("sync: %v", err)
			}
			wantCalls(t, f.calls(), tt.wantCalls...)
			got := f.stored(tt.pv.Name)
			if !tt.wantReleased {
				if got.ResourceVersion != tt.pv.ResourceVersion {
					t.Errorf("volume was written: %+v", got)
				}
				wantEvents(t, f.events())
				return
			}
			if got.Spec.ClaimRef != nil {
				t.Errorf("claimRef = %+v, want none", got.Spec.ClaimRef)
			}
			wantLabels := map[string]string{"team": "build"}
			if tt.wantKept {
				wantLabels[wellknown.VolumeManagedBy] = testID
			}
			if !reflect.DeepEqual(got.Labels, wantLabels) {
				t.Errorf("labels = %v, want %v", got.Labels, wantLabels)
			}
			wantAnnotations := wellknown.Map(wellknown.LastClaim, "ns/data", wellknown.ReleasedAt, "2025-03-01T12:00:00Z")
			for k, v := range tt.pv.Annotations {
				wantAnnotations[k] = v
			}
			if !reflect.DeepEqual(got.Annotations, wantAnnotations) {
				t.Errorf("annotations = %v, want %v", got.Annotations, wantAnnotations)
			}
			wantEvents(t, f.events(), "Normal Released Returned to the pool with its data: claim ns/data (UID claim-uid) no longer exists")
			if v := f.metric("reclaimable_releaser_releases_total"); v != 1 {
				t.Errorf("releases_total = %v, want 1", v)
			}
		})
	}
}

// boundTo gives claim the volume named volume.
func boundTo(c *corev1.PersistentVolumeClaim, volume string) *corev1.PersistentVolumeClaim {
	c.Spec.VolumeName = volume
	return c
}

// A release that would keep the claim's name (a reservation, a hold) waits,
// with the queue's back-off, while a new claim of that name is not bound
// yet: the PV controller would bind it to this volume while the provisioner
// gives it another. One that clears the claimRef does not wait, nor one
// whose new claim has waited replacementWait: no volume is being made for
// it (a full pool, a scrub class), and this one is the claim's way out.
func TestSyncReleaseWaitsForARecreatedClaimToBind(t *testing.T) {
	created := func(c *corev1.PersistentVolumeClaim, ago time.Duration) *corev1.PersistentVolumeClaim {
		c.CreationTimestamp = metav1.NewTime(testNow.Add(-ago))
		return c
	}
	for _, tt := range []struct {
		name     string
		class    *storagev1.StorageClass
		claim    *corev1.PersistentVolumeClaim
		released bool
	}{
		{"reserving class, new claim not bound", reservingClass("10m"), created(claim("new-uid", testID), time.Second), false},
		{"reserving class, new claim not bound, seen only live", reservingClass("10m"), created(claim("new-uid", ""), time.Second), false},
		{"reserving class, new claim unbound for longer than the wait", reservingClass("10m"), created(claim("new-uid", testID), replacementWait), true},
		{"reserving class, new claim bound", reservingClass("10m"), boundTo(claim("new-uid", testID), "pv-2"), true},
		{"class that keeps no name", class(testID), created(claim("new-uid", testID), time.Second), true},
		// The managed claims cache keeps metadata only: bound or not is
		// the API server's to say.
		{"reserving class, new claim bound, the old one's deletion seen", reservingClass("10m"), boundTo(claim("new-uid", testID), "pv-2"), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pv := volume(corev1.VolumeReleased, labelled(testID), provisionedBy(testProvisioner))
			f := newFixture(t, testPolicy, pv, tt.class, tt.claim)
			if strings.HasSuffix(tt.name, "the old one's deletion seen") {
				old := claim("claim-uid", testID)
				now := metav1.Now()
				old.DeletionTimestamp = &now
				f.claimEvent(controller.Deleted, old)
				metadataOnly := tt.claim.DeepCopy()
				metadataOnly.Spec = corev1.PersistentVolumeClaimSpec{}
				f.cache(f.claims, metadataOnly)
			}
			err := f.sync(pv.Name)
			if tt.released && err != nil {
				t.Fatalf("sync: %v", err)
			}
			if !tt.released && !controller.IsWait(err) {
				t.Fatalf("sync returned %v, want a wait that the queue retries with back-off", err)
			}
			got := f.stored(pv.Name)
			if released := got.Spec.ClaimRef == nil || got.Spec.ClaimRef.UID == ""; released != tt.released {
				t.Errorf("released %v (claimRef %+v), want %v", released, got.Spec.ClaimRef, tt.released)
			}
		})
	}
}

func TestSyncAssociatesAndReleasesAnOrphan(t *testing.T) {
	// The claim vanished while no releaser ran, so nothing labelled the
	// volume; its class still says whose it is.
	f := newFixture(t, testPolicy, volume(corev1.VolumeReleased), class(testID))
	if err := f.sync("pv-1"); err != nil {
		t.Fatalf("sync: %v", err)
	}
	wantCalls(t, f.calls(), "update persistentvolumes", "get persistentvolumeclaims", "update persistentvolumes")
	got := f.stored("pv-1")
	if got.Spec.ClaimRef != nil {
		t.Errorf("volume not released: claimRef %+v", got.Spec.ClaimRef)
	}
	// The class still names this ID, so the volume stays associated.
	if got.Labels[wellknown.VolumeManagedBy] != testID {
		t.Errorf("labels = %v, want the association kept", got.Labels)
	}
	wantEvents(t, f.events(), "Normal Associated", "Normal Released")
}

// A volume goes round the cycle twice: bound, claim deleted, released,
// Available, bound to the next claim. One associated by its class or by its
// provisioner stays associated, so the next binding costs the releaser
// nothing; one associated only through its managed claim is associated
// afresh for the next claim.
func TestSyncKeepsAssociationAcrossCycles(t *testing.T) {
	tests := []struct {
		name string
		pv   *corev1.PersistentVolume
		// classID is the controller-id annotation of the volume's class ("" for none).
		classID string
		// managedBy is the managed-by label of both claims ("" for none).
		managedBy string
		rule      rule
		wantKept  bool
	}{
		{name: "provisioned here", pv: volume(corev1.VolumeBound, provisionedBy(testProvisioner)), rule: ruleProvisioner, wantKept: true},
		{name: "class names this ID", pv: volume(corev1.VolumeBound), classID: testID, rule: ruleStorageClass, wantKept: true},
		{name: "managed claim only", pv: volume(corev1.VolumeBound), managedBy: testID, rule: ruleManagedClaim},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			first := claim("claim-uid", tt.managedBy)
			f := newFixture(t, testPolicy, tt.pv, class(tt.classID), first)
			if err := f.sync("pv-1"); err != nil {
				t.Fatalf("sync: %v", err)
			}
			wantCalls(t, f.calls(), "update persistentvolumes")
			wantEvents(t, f.events(), "Normal Associated")
			f.catchUp("pv-1")

			// The first claim is deleted; the PV controller marks the volume Released.
			f.deleteClaim(first)
			f.change("pv-1", func(pv *corev1.PersistentVolume) { pv.Status.Phase = corev1.VolumeReleased })
			if err := f.sync("pv-1"); err != nil {
				t.Fatalf("sync: %v", err)
			}
			wantCalls(t, f.calls(), "get persistentvolumeclaims", "update persistentvolumes")
			wantEvents(t, f.events(), "Normal Released")
			got := f.stored("pv-1")
			if got.Spec.ClaimRef != nil {
				t.Fatalf("volume not released: claimRef %+v", got.Spec.ClaimRef)
			}
			if id, labelled := got.Labels[wellknown.VolumeManagedBy]; labelled != tt.wantKept || (labelled && id != testID) {
				t.Errorf("after release labels = %v, want association kept: %v", got.Labels, tt.wantKept)
			}
			f.catchUp("pv-1")

			// The PV controller makes it Available, then binds the next claim.
			f.change("pv-1", func(pv *corev1.PersistentVolume) { pv.Status.Phase = corev1.VolumeAvailable })
			second := claim("claim2-uid", tt.managedBy)
			if err := f.client.Tracker().Add(second); err != nil {
				t.Fatal(err)
			}
			if tt.managedBy == testID {
				f.cache(f.claims, second)
			}
			f.change("pv-1", func(pv *corev1.PersistentVolume) {
				pv.Spec.ClaimRef = &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: "ns", Name: "data", UID: second.UID}
				pv.Status.Phase = corev1.VolumeBound
			})
			f.volumeChanged(f.stored("pv-1"))
			queued := f.queued()
			if err := f.sync("pv-1"); err != nil {
				t.Fatalf("sync: %v", err)
			}
			associations := f.metric("reclaimable_releaser_associations_total", "rule", string(tt.rule))
			if tt.wantKept {
				if len(queued) != 0 {
					t.Errorf("binding the next claim queued %q, want nothing", queued)
				}
				wantCalls(t, f.calls())
				wantEvents(t, f.events())
				if associations != 1 {
					t.Errorf("associations_total{rule=%s} = %v after two bindings, want 1", tt.rule, associations)
				}
				return
			}
			if !reflect.DeepEqual(queued, []string{"pv-1"}) {
				t.Errorf("binding the next claim queued %q, want the volume", queued)
			}
			wantCalls(t, f.calls(), "update persistentvolumes")
			wantEvents(t, f.events(), "Normal Associated Associated with controller ID "+testID+": its claim ns/data")
			if associations != 2 {
				t.Errorf("associations_total{rule=%s} = %v after two bindings, want 2", tt.rule, associations)
			}
		})
	}
}

func TestSyncConflictDecidesAgainFromTheNewerVersion(t *testing.T) {
	pv := volume(corev1.VolumeReleased, labelled(testID))
	f := newFixture(t, testPolicy, pv, class(""))
	newer := pv.DeepCopy()
	newer.ResourceVersion = "11"
	if err := f.client.Tracker().Update(pvResource, newer, ""); err != nil {
		t.Fatal(err)
	}
	if err := f.sync("pv-1"); err != nil {
		t.Fatalf("sync: %v, want none: a conflict is not a failure", err)
	}
	wantCalls(t, f.calls(), "get persistentvolumeclaims", "update persistentvolumes")
	wantEvents(t, f.events())
	if v := f.metric("reclaimable_releaser_errors_total", "reason", errConflict); v != 1 {
		t.Errorf("errors_total{reason=Conflict} = %v, want 1", v)
	}
	if got := f.queued(); !reflect.DeepEqual(got, []string{"pv-1"}) {
		t.Fatalf("queued %q, want the volume queued again", got)
	}
	f.catchUp("pv-1")
	if err := f.sync("pv-1"); err != nil {
		t.Fatalf("sync: %v", err)
	}
	if got := f.stored("pv-1"); got.Spec.ClaimRef != nil {
		t.Errorf("volume not released from the newer version")
	}
}

func TestSyncWaitsForItsOwnWriteInTheCache(t *testing.T) {
	f := newFixture(t, testPolicy, volume(corev1.VolumeReleased, labelled(testID)), class(""))
	if err := f.sync("pv-1"); err != nil {
		t.Fatalf("sync: %v", err)
	}
	wantCalls(t, f.calls(), "get persistentvolumeclaims", "update persistentvolumes")
	f.events()

	// The cache still has the version the release replaced: deciding from it
	// would write again and fail.
	if err := f.sync("pv-1"); err != nil {
		t.Fatalf("sync on a stale cache: %v", err)
	}
	wantCalls(t, f.calls())

	f.catchUp("pv-1")
	if err := f.sync("pv-1"); err != nil {
		t.Fatalf("sync: %v", err)
	}
	wantCalls(t, f.calls())
	wantEvents(t, f.events())
}

func TestSyncInvalidClaimRefIsReportedOnce(t *testing.T) {
	pv := volume(corev1.VolumeReleased, labelled(testID), func(pv *corev1.PersistentVolume) { pv.Spec.ClaimRef.Name = "" })
	f := newFixture(t, testPolicy, pv, class(""))
	for range 2 {
		if err := f.sync("pv-1"); err != nil {
			t.Fatalf("sync: %v", err)
		}
		wantCalls(t, f.calls())
	}
	wantEvents(t, f.events(), "Warning InvalidClaimRef Not released: spec.claimRef names no claim")
	if v := f.metric("reclaimable_releaser_errors_total", "reason", errInvalidClaimRef); v != 1 {
		t.Errorf("errors_total{reason=InvalidClaimRef} = %v, want 1", v)
	}
}

func TestSyncWriteFailures(t *testing.T) {
	tests := []struct {
		name    string
		pv      *corev1.PersistentVolume
		err     error
		reason  string
		warning bool
	}{
		{name: "release forbidden", pv: volume(corev1.VolumeReleased, labelled(testID)),
			err: apierrors.NewForbidden(schema.GroupResource{Resource: "persistentvolumes"}, "pv-1", errors.New("no RBAC")), reason: errRelease, warning: true},
		{name: "release times out", pv: volume(corev1.VolumeReleased, labelled(testID)),
			err: apierrors.NewServerTimeout(schema.GroupResource{Resource: "persistentvolumes"}, "update", 1), reason: errRelease},
		{name: "association forbidden", pv: volume(corev1.VolumeBound, provisionedBy(testProvisioner)),
			err: apierrors.NewForbidden(schema.GroupResource{Resource: "persistentvolumes"}, "pv-1", errors.New("no RBAC")), reason: errAssociate, warning: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, testPolicy, tt.pv, class(""))
			f.client.PrependReactor("update", "persistentvolumes", func(clienttesting.Action) (bool, runtime.Object, error) {
				return true, nil, tt.err
			})
			for range 2 {
				if err := f.sync("pv-1"); err == nil {
					t.Fatalf("sync succeeded, want the error so that the queue retries")
				}
			}
			if got := f.stored("pv-1"); got.ResourceVersion != tt.pv.ResourceVersion {
				t.Errorf("volume was written")
			}
			var want []string
			if tt.warning {
				want = []string{"Warning " + tt.reason + " Cannot"} // once, not once per retry
			}
			wantEvents(t, f.events(), want...)
			if v := f.metric("reclaimable_releaser_errors_total", "reason", tt.reason); v != 2 {
				t.Errorf("errors_total{reason=%s} = %v, want 2", tt.reason, v)
			}
		})
	}
}

func TestSyncClaimCheckFailureKeepsTheVolume(t *testing.T) {
	f := newFixture(t, testPolicy, volume(corev1.VolumeReleased, labelled(testID)), class(""))
	f.client.PrependReactor("get", "persistentvolumeclaims", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewInternalError(errors.New("etcd unavailable"))
	})
	if err := f.sync("pv-1"); err == nil {
		t.Fatal("sync succeeded, want the error so that the queue retries")
	}
	wantCalls(t, f.calls(), "get persistentvolumeclaims")
	if v := f.metric("reclaimable_releaser_errors_total", "reason", errClaimCheck); v != 1 {
		t.Errorf("errors_total{reason=ClaimCheckFailed} = %v, want 1", v)
	}
}

func TestSyncVolumeGone(t *testing.T) {
	f := newFixture(t, testPolicy)
	if err := f.sync("pv-1"); err != nil {
		t.Fatalf("sync: %v", err)
	}
	wantCalls(t, f.calls())
}

func TestHandlersQueueOnlyWhatMayNeedWork(t *testing.T) {
	named := func(name string, pv *corev1.PersistentVolume) *corev1.PersistentVolume {
		pv.Name, pv.UID = name, types.UID(name)
		pv.Spec.ClaimRef.Name = name + "-claim"
		pv.Spec.ClaimRef.UID = types.UID(name + "-claim")
		return pv
	}
	releasedOurs := named("released-ours", volume(corev1.VolumeReleased, labelled(testID)))
	boundOurs := named("bound-ours", volume(corev1.VolumeBound, labelled(testID)))
	theirs := named("theirs", volume(corev1.VolumeReleased, labelled("theirs")))
	orphan := named("orphan", volume(corev1.VolumeReleased, provisionedBy(testProvisioner)))
	unmanaged := named("unmanaged", volume(corev1.VolumeBound))
	managedClaim := claim("unmanaged-claim", testID)
	managedClaim.Name = "unmanaged-claim"

	tests := []struct {
		name  string
		event func(f *fixture)
		want  []string
	}{
		{name: "volume events", event: func(f *fixture) {
			for _, pv := range []*corev1.PersistentVolume{releasedOurs, boundOurs, theirs, orphan, unmanaged} {
				f.volumeChanged(pv)
			}
		}, want: []string{"orphan", "released-ours"}},
		{name: "sweep", event: func(f *fixture) { f.c.sweep(f.ctx) }, want: []string{"orphan", "released-ours"}},
		{name: "managed claim added", event: func(f *fixture) {
			f.cache(f.claims, managedClaim)
			f.claimEvent(controller.Added, managedClaim)
		}, want: []string{"unmanaged"}},
		{name: "managed claim deleted", event: func(f *fixture) {
			c := claim("released-ours-claim", testID)
			c.Name = "released-ours-claim"
			f.claimEvent(controller.Deleted, c)
		}, want: []string{"released-ours"}},
		{name: "class given this controller ID", event: func(f *fixture) {
			f.classChanged(class(""), class(testID))
		}, want: []string{"orphan", "released-ours", "unmanaged"}},
		{name: "class keeps this controller ID", event: func(f *fixture) {
			f.classChanged(class(testID), class(testID))
		}},
		{name: "class given another controller ID", event: func(f *fixture) {
			f.classChanged(nil, class("theirs"))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, testPolicy, releasedOurs, boundOurs, theirs, orphan, unmanaged, class(""))
			if strings.HasPrefix(tt.name, "class given this") {
				f.cache(f.classes, class(testID))
			}
			tt.event(f)
			if got := f.queued(); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("queued %q, want %q", got, tt.want)
			}
		})
	}
}

func TestOldestReleasedSeconds(t *testing.T) {
	releasedFor := func(name string, age time.Duration, mutate ...func(*corev1.PersistentVolume)) *corev1.PersistentVolume {
		pv := volume(corev1.VolumeReleased, mutate...)
		pv.Name, pv.UID = name, types.UID(name)
		if age >= 0 {
			pv.Status.LastPhaseTransitionTime = &metav1.Time{Time: testNow.Add(-age)}
		}
		return pv
	}
	f := newFixture(t, testPolicy,
		releasedFor("ours-30s", 30*time.Second, labelled(testID)),
		releasedFor("ours-90s", 90*time.Second, labelled(testID)),
		releasedFor("theirs-5m", 5*time.Minute, labelled("theirs")),
		releasedFor("unassociated-5m", 5*time.Minute),
	)
	bound := volume(corev1.VolumeBound, labelled(testID))
	bound.Status.LastPhaseTransitionTime = &metav1.Time{Time: testNow.Add(-time.Hour)}
	f.cache(f.volumes, bound)
	if v := f.metric("reclaimable_releaser_oldest_released_seconds"); v != 90 {
		t.Errorf("oldest_released_seconds = %v, want 90", v)
	}

	// Without a phase transition time, the age counts from the first time
	// the releaser saw the volume Released.
	for _, name := range []string{"ours-30s", "ours-90s"} {
		if err := f.volumes.Delete(releasedFor(name, 0)); err != nil {
			t.Fatal(err)
		}
	}
	f.cache(f.volumes, releasedFor("ours-no-time", -1, labelled(testID)))
	if v := f.metric("reclaimable_releaser_oldest_released_seconds"); v != 0 {
		t.Errorf("oldest_released_seconds = %v at first sight, want 0", v)
	}
	f.c.clock.(*testingclock.FakePassiveClock).SetTime(testNow.Add(10 * time.Second))
	if v := f.metric("reclaimable_releaser_oldest_released_seconds"); v != 10 {
		t.Errorf("oldest_released_seconds = %v ten seconds later, want 10", v)
	}

	if err := f.volumes.Delete(releasedFor("ours-no-time", 0)); err != nil {
		t.Fatal(err)
	}
	if v := f.metric("reclaimable_releaser_oldest_released_seconds"); v != 0 {
		t.Errorf("oldest_released_seconds = %v with none Released, want 0", v)
	}
}

func TestDeletedClaimsAreForgotten(t *testing.T) {
	clk := testingclock.NewFakePassiveClock(testNow)
	d := newClaimMemory[struct{}](time.Minute, 2, clk)
	d.add("a", struct{}{})
	d.add("b", struct{}{})
	d.add("c", struct{}{}) // over the bound: not remembered, its volume costs a lookup
	if !d.has("a") || !d.has("b") || d.has("c") {
		t.Errorf("has(a, b, c) = %v, %v, %v; want true, true, false", d.has("a"), d.has("b"), d.has("c"))
	}
	clk.SetTime(testNow.Add(time.Minute))
	if d.has("a") {
		t.Error("a is remembered past its ttl")
	}
	d.add("c", struct{}{}) // expired ones make room
	if !d.has("c") {
		t.Error("c is not remembered after the expired ones were pruned")
	}
}
