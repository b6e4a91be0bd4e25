package podwatcher

import (
	"context"
	"github.com/spf13/pflag"
	"strings"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/prometheus/client_golang/prometheus"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/reclaimable/reclaimable/internal/controller"
	"github.com/reclaimable/reclaimable/internal/controllertest"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

const (
	testID    = "test-id"
	testGrace = 30 * time.Second
)

type fixture struct {
	t        *testing.T
	client   *fake.Clientset
	c        *Controller
	recorder *record.FakeRecorder
	reg      *prometheus.Registry
	all      informers.SharedInformerFactory
	ours     informers.SharedInformerFactory
}

// metric reads a sample of the podwatcher's metrics, as /metrics shows it.
func (f *fixture) metric(name string, labelPairs ...string) float64 {
	f.t.Helper()
	return controllertest.Metric(f.t, f.reg, name, labelPairs...)
}

// newFixture builds a controller whose caches hold cached and whose API
// server holds cached and live. Informers are not started: tests put
// objects into the caches and call sync themselves.
func newFixture(t *testing.T, cached []runtime.Object, live ...runtime.Object) *fixture {
	t.Helper()
	client := fake.NewClientset(append(append([]runtime.Object{}, cached...), live...)...)
	f := &fixture{
		t:        t,
		client:   client,
		recorder: record.NewFakeRecorder(100),
		reg:      prometheus.NewRegistry(),
		all:      informers.NewSharedInformerFactory(client, 0),
		ours:     informers.NewSharedInformerFactory(client, 0),
	}
	c, err := newController(client, testID, Config{CleanupInterval: time.Minute, Workers: 1, GarbageCollectionGrace: testGrace}, f.all.Core().V1().Pods().Informer(), f.all, f.ours.Core().V1().PersistentVolumeClaims(), f.recorder, f.reg)
	if err != nil {
		t.Fatal(err)
	}
	f.c = c
	for _, o := range cached {
		f.cache(o)
	}
	client.ClearActions()
	return f
}

func (f *fixture) cache(o runtime.Object) {
	f.t.Helper()
	var err error
	switch o := o.(type) {
	case *corev1.Pod:
		// As the informer of KeptPods caches it.
		rec := controller.PodRecordOf(o)
		err = f.c.podIndexer.Add(rec)
		f.c.podsWanting.OnAdd(rec, false)
	case *batchv1.Job:
		err = f.c.jobIndexer.Add(o)
		f.c.jobsWanting.OnAdd(o, false)
	case *corev1.PersistentVolumeClaim:
		if o.Labels[wellknown.ClaimManagedBy] == testID {
			err = f.c.claimIndexer.Add(o)
			f.c.claimedBy.OnAdd(o, false)
		}
	}
	if err != nil {
		f.t.Fatal(err)
	}
}

// The events of the watches, delivered as they are: the refs they map to
// are queued.
func (f *fixture) deliver(refs []ref) {
	for _, k := range refs {
		f.c.queue.Add(k)
	}
}

func (f *fixture) ownerAdded(kind string, owner metav1.Object, initial bool) {
	f.deliver(f.c.ownerChanged(kind)(controller.Event[metav1.Object]{Type: controller.Added, Obj: owner, Initial: initial}))
}

// ownerDeleted delivers the deletion of owner, or of the owner a tombstone
// holds (a deletion the watch missed).
func (f *fixture) ownerDeleted(obj any) {
	tomb, missed := obj.(cache.DeletedFinalStateUnknown)
	if missed {
		obj = tomb.Obj
	}
	f.deliver(f.c.ownerChanged(kindPod)(controller.Event[metav1.Object]{Type: controller.Deleted, Obj: obj.(metav1.Object), Missed: missed}))
}

func (f *fixture) claimAdded(claim *corev1.PersistentVolumeClaim, initial bool) {
	f.deliver(f.c.claimChanged(controller.Event[*corev1.PersistentVolumeClaim]{Type: controller.Added, Obj: claim, Initial: initial}))
}

func (f *fixture) claimUpdated(old, cur *corev1.PersistentVolumeClaim) {
	f.deliver(f.c.claimChanged(controller.Event[*corev1.PersistentVolumeClaim]{Type: controller.Updated, Obj: cur, Old: old}))
}

func (f *fixture) claimDeleted(claim *corev1.PersistentVolumeClaim) {
	f.deliver(f.c.claimChanged(controller.Event[*corev1.PersistentVolumeClaim]{Type: controller.Deleted, Obj: claim}))
}

func (f *fixture) sync(k ref) error {
	return f.c.sync(context.Background(), k)
}

// writes returns the actions that are not reads, as "verb resource".
func (f *fixture) actions() []string {
	return controllertest.Actions(f.client)
}

func (f *fixture) expectActions(want ...string) {
	f.t.Helper()
	if got := f.actions(); strings.Join(got, ",") != strings.Join(want, ",") {
		f.t.Errorf("actions = %v, want %v", got, want)
	}
	f.client.ClearActions()
}

func (f *fixture) events() []string {
	return controllertest.Events(f.recorder)
}

// expectEvents checks the events recorded since the last call by their
// "<type> <reason>" prefix.
func (f *fixture) expectEvents(want ...string) {
	f.t.Helper()
	got := f.events()
	ok := len(got) == len(want)
	for i := 0; ok && i < len(want); i++ {
		ok = strings.HasPrefix(got[i], want[i]+" ")
	}
	if !ok {
		f.t.Errorf("events = %q, want %q", got, want)
	}
}

func annotatedPod(name string, uid types.UID, annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: uid, Annotations: annotations},
		Spec:       corev1.PodSpec{Volumes: []corev1.Volume{claimVolume("cache", name+"-cache")}},
		Status:     corev1.PodStatus{Phase: corev1.PodPending},
	}
}

func managedClaim(name string, ownerKind string, ownerName string, ownerUID types.UID) *corev1.PersistentVolumeClaim {
	apiVersion := "v1"
	if ownerKind == kindJob {
		apiVersion = "batch/v1"
	}
	yes := true
	return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{
		Namespace: "ns", Name: name, UID: types.UID("claim-" + name), ResourceVersion: "7",
		Labels:          map[string]string{wellknown.ClaimManagedBy: testID, wellknown.ClaimedBy: string(ownerUID)},
		Annotations:     map[string]string{ownerAnnotation: ownerKind + "/" + ownerName},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: apiVersion, Kind: ownerKind, Name: ownerName, UID: ownerUID, Controller: &yes}},
	}}
}

func podRef(name string) ref { return ref{kindPod, "ns", name} }

func TestPodGetsClaimOnce(t *testing.T) {
	pod := annotatedPod("p", "uid-p", ask("cache", "true", validYAML))
	f := newFixture(t, []runtime.Object{pod})

	if err := f.sync(podRef("p")); err != nil {
		t.Fatal(err)
	}
	created := f.client.Actions()
	f.expectActions("create persistentvolumeclaims")
	f.expectEvents("Normal ClaimCreated")
	claim := created[0].(k8stesting.CreateAction).GetObject().(*corev1.PersistentVolumeClaim)
	if claim.Name != "p-cache" || claim.Labels[wellknown.ClaimManagedBy] != testID || claim.Labels[wellknown.ClaimedBy] != "uid-p" ||
		claim.Labels["team"] != "build" || len(claim.OwnerReferences) != 1 || claim.OwnerReferences[0].UID != "uid-p" {
		t.Errorf("created claim = %+v", claim.ObjectMeta)
	}
	if got := f.metric("reclaimable_podwatcher_claims_created_total"); got != 1 {
		t.Errorf("claims_created_total = %v", got)
	}

	// Pod status updates before the informer shows the claim: no second create.
	if err := f.sync(podRef("p")); err != nil {
		t.Fatal(err)
	}
	f.expectActions()

	// Once the informer shows it, the cache answers.
	f.cache(claim)
	f.claimAdded(claim, true)
	if err := f.sync(podRef("p")); err != nil {
		t.Fatal(err)
	}
	f.expectActions()
	f.expectEvents()
}

func TestExpectationExpires(t *testing.T) {
	pod := annotatedPod("p", "uid-p", ask("cache", "true", validYAML))
	f := newFixture(t, []runtime.Object{pod})
	now := time.Now()
	clk := testingclock.NewFakeClock(now)
	f.c.useClock(clk)
	if err := f.sync(podRef("p")); err != nil {
		t.Fatal(err)
	}
	f.expectActions("create persistentvolumeclaims")
	// The claim never shows up in the cache (and was deleted meanwhile).
	if err := f.client.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("persistentvolumeclaims"), "ns", "p-cache"); err != nil {
		t.Fatal(err)
	}
	clk.SetTime(now.Add(expectationTTL + time.Second))
	if err := f.sync(podRef("p")); err != nil {
		t.Fatal(err)
	}
	f.expectActions("create persistentvolumeclaims")
}

func TestOwnersThatNeedNoClaim(t *testing.T) {
	now := metav1.Now()
	deleting := annotatedPod("deleting", "u1", ask("cache", "true", validYAML))
	deleting.DeletionTimestamp = &now
	succeeded := annotatedPod("succeeded", "u2", ask("cache", "true", validYAML))
	succeeded.Status.Phase = corev1.PodSucceeded
	failed := annotatedPod("failed", "u3", ask("cache", "true", validYAML))
	failed.Status.Phase = corev1.PodFailed
	off := annotatedPod("off", "u4", ask("cache", "false", validYAML))
	plain := annotatedPod("plain", "u5", nil)
	hasClaim := annotatedPod("has-claim", "u6", ask("cache", "true", validYAML))
	otherOwnersClaim := managedClaim("has-claim-cache", kindPod, "previous", "u-previous")
	finishedJob := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "done", UID: "u7", Annotations: ask("cache", "true", validYAML)},
		Spec:       batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Volumes: []corev1.Volume{claimVolume("cache", "done-cache")}}}},
		Status:     batchv1.JobStatus{Conditions: []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}},
	}
	f := newFixture(t, []runtime.Object{deleting, succeeded, failed, off, plain, hasClaim, otherOwnersClaim, finishedJob})
	for _, k := range []ref{podRef("deleting"), podRef("succeeded"), podRef("failed"), podRef("off"), podRef("plain"), podRef("has-claim"), podRef("missing"), {kindJob, "ns", "done"}} {
		if err := f.sync(k); err != nil {
			t.Errorf("%s: %v", k, err)
		}
	}
	f.expectActions()
	f.expectEvents()
}

func TestForeignClaimIsLeftAlone(t *testing.T) {
	pod := annotatedPod("p", "uid-p", ask("cache", "true", validYAML))
	foreign := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p-cache", UID: "foreign"}}
	f := newFixture(t, []runtime.Object{pod}, foreign)

	if err := f.sync(podRef("p")); err != nil {
		t.Fatal(err)
	}
	f.expectActions("create persistentvolumeclaims", "get persistentvolumeclaims")
	f.expectEvents("Normal ClaimExists")

	// Further pod updates neither retry the create nor repeat the event.
	if err := f.sync(podRef("p")); err != nil {
		t.Fatal(err)
	}
	f.expectActions()
	f.expectEvents()
}

func TestRejectionReportedOnce(t *testing.T) {
	pod := annotatedPod("p", "uid-p", ask("cache", "yes", validYAML))
	f := newFixture(t, []runtime.Object{pod})
	for range 3 {
		if err := f.sync(podRef("p")); err != nil {
			t.Fatal(err)
		}
	}
	f.expectActions()
	f.expectEvents("Warning " + ReasonInvalidEnabled)
	if got := f.metric("reclaimable_podwatcher_rejections_total", "reason", ReasonInvalidEnabled); got != 1 {
		t.Errorf("rejections_total{reason=%s} = %v, want 1", ReasonInvalidEnabled, got)
	}

	// A different mistake is a new problem; after the owner's delete event
	// its memory is gone.
	pod2 := pod.DeepCopy()
	pod2.Annotations = ask("cache", "true", "kind: Pod\n")
	f.cache(pod2)
	if err := f.sync(podRef("p")); err != nil {
		t.Fatal(err)
	}
	f.expectEvents("Warning " + ReasonNotAClaim)
	f.ownerDeleted(pod2)
	if n := f.c.owners.len(); n != 0 {
		t.Errorf("memory of %d deleted owners kept", n)
	}
}

func TestAPIServerRefusalIsNotRetriedUntilTemplateChanges(t *testing.T) {
	pod := annotatedPod("p", "uid-p", ask("cache", "true", validYAML))
	f := newFixture(t, []runtime.Object{pod})
	f.client.PrependReactor("create", "persistentvolumeclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewInvalid(schema.GroupKind{Kind: "PersistentVolumeClaim"}, "p-cache",
			field.ErrorList{field.Required(field.NewPath("spec", "resources", "requests", "storage"), "")})
	})
	for range 2 {
		if err := f.sync(podRef("p")); err != nil {
			t.Fatal(err)
		}
	}
	f.expectActions("create persistentvolumeclaims")
	f.expectEvents("Warning ClaimRejected")

	changed := pod.DeepCopy()
	changed.Annotations = ask("cache", "true", validJSON)
	f.cache(changed)
	if err := f.sync(podRef("p")); err != nil {
		t.Fatal(err)
	}
	f.expectActions("create persistentvolumeclaims")
}

func TestTransientCreateErrorIsRetried(t *testing.T) {
	pod := annotatedPod("p", "uid-p", ask("cache", "true", validYAML))
	f := newFixture(t, []runtime.Object{pod})
	fail := true
	f.client.PrependReactor("create", "persistentvolumeclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
		if fail {
			return true, nil, apierrors.NewServiceUnavailable("etcd")
		}
		return false, nil, nil
	})
	if err := f.sync(podRef("p")); err == nil {
		t.Fatal("a failed create must fail the sync, so that it is retried")
	}
	fail = false
	if err := f.sync(podRef("p")); err != nil {
		t.Fatal(err)
	}
	f.expectActions("create persistentvolumeclaims", "create persistentvolumeclaims")
}

func TestJobPodsShareTheJobsClaim(t *testing.T) {
	annotations := ask("cache", "true", validYAML)
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "build", UID: "uid-job", Annotations: annotations},
		Spec:       batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Volumes: []corev1.Volume{claimVolume("cache", "build-cache")}}}},
	}
	yes := true
	jobRef := []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "build", UID: "uid-job", Controller: &yes}}
	// Annotations copied from the pod template as well: still the Job's claim.
	pod := annotatedPod("build-x", "uid-pod", annotations)
	pod.Spec.Volumes = job.Spec.Template.Spec.Volumes
	pod.OwnerReferences = jobRef
	// A pod of a Job that the cache does not know yet waits for it.
	orphanPod := annotatedPod("other-x", "uid-pod2", annotations)
	orphanPod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "other", UID: "uid-other", Controller: &yes}}

	f := newFixture(t, []runtime.Object{job, pod, orphanPod})
	for _, k := range []ref{podRef("build-x"), podRef("other-x")} {
		if err := f.sync(k); err != nil {
			t.Fatal(err)
		}
	}
	f.expectActions()

	if err := f.sync(ref{kindJob, "ns", "build"}); err != nil {
		t.Fatal(err)
	}
	created := f.client.Actions()
	f.expectActions("create persistentvolumeclaims")
	claim := created[0].(k8stesting.CreateAction).GetObject().(*corev1.PersistentVolumeClaim)
	ref := claim.OwnerReferences[0]
	if claim.Name != "build-cache" || ref.APIVersion != "batch/v1" || ref.Kind != "Job" || ref.UID != "uid-job" || claim.Labels[wellknown.ClaimedBy] != "uid-job" {
		t.Errorf("claim = %+v", claim.ObjectMeta)
	}
}

// orphaned returns a claim whose ownerReference was removed, as the garbage
// collector does when the owner is deleted with propagationPolicy Orphan.
func orphaned(c *corev1.PersistentVolumeClaim) *corev1.PersistentVolumeClaim {
	c.OwnerReferences = nil
	return c
}

// TestCleanup examines a claim once, right after its owner was found gone or
// not: a claim that still references its gone owner is left to the garbage
// collector; one that no longer does is deleted at once.
func TestCleanup(t *testing.T) {
	pod := annotatedPod("p", "uid-p", nil)
	samePodLive := annotatedPod("p", "uid-p", nil)
	replacement := annotatedPod("p", "uid-new", nil)
	tests := []struct {
		name        string
		cached      []runtime.Object
		live        []runtime.Object
		seenDeleted bool
		claim       *corev1.PersistentVolumeClaim
		want        []string
		leftToGC    bool
	}{
		{name: "owner in cache", cached: []runtime.Object{pod}, claim: managedClaim("c", kindPod, "p", "uid-p")},
		{name: "owner delete event seen: no GET, left to the garbage collector", seenDeleted: true, claim: managedClaim("c", kindPod, "p", "uid-p"),
			leftToGC: true},
		{name: "owner absent from cache and API: left to the garbage collector", claim: managedClaim("c", kindPod, "p", "uid-p"),
			want: []string{"get pods"}, leftToGC: true},
		{name: "owner absent from cache but live: cache is behind", live: []runtime.Object{samePodLive}, claim: managedClaim("c", kindPod, "p", "uid-p"),
			want: []string{"get pods"}},
		{name: "owner replaced by one of the same name: left to the garbage collector", cached: []runtime.Object{replacement}, claim: managedClaim("c", kindPod, "p", "uid-p"),
			want: []string{"get pods"}, leftToGC: true},
		{name: "job owner gone: left to the garbage collector", claim: managedClaim("c", kindJob, "j", "uid-j"),
			want: []string{"get jobs"}, leftToGC: true},
		{name: "owner delete event seen, owner reference removed", seenDeleted: true, claim: orphaned(managedClaim("c", kindPod, "p", "uid-p")),
			want: []string{"delete persistentvolumeclaims"}},
		{name: "owner reference removed, annotation names the gone owner", claim: orphaned(managedClaim("c", kindJob, "j", "uid-j")),
			want: []string{"get jobs", "delete persistentvolumeclaims"}},
		{name: "owner replaced, owner reference removed", cached: []runtime.Object{replacement}, claim: orphaned(managedClaim("c", kindPod, "p", "uid-p")),
			want: []string{"get pods", "delete persistentvolumeclaims"}},
		{name: "owner reference removed, owner live", live: []runtime.Object{samePodLive}, claim: orphaned(managedClaim("c", kindPod, "p", "uid-p")),
			want: []string{"get pods"}},
		{name: "owner reference and annotation removed", claim: func() *corev1.PersistentVolumeClaim {
			c := orphaned(managedClaim("c", kindPod, "p", "uid-p"))
			c.Annotations = nil
			return c
		}()},
		{name: "no claimed-by label", claim: func() *corev1.PersistentVolumeClaim {
			c := managedClaim("c", kindPod, "p", "uid-p")
			delete(c.Labels, wellknown.ClaimedBy)
			return c
		}()},
		{name: "annotation names another kind", claim: func() *corev1.PersistentVolumeClaim {
			c := orphaned(managedClaim("c", kindPod, "p", "uid-p"))
			c.Annotations[ownerAnnotation] = "ConfigMap/p"
			return c
		}()},
		{name: "owner reference of another kind", claim: func() *corev1.PersistentVolumeClaim {
			c := managedClaim("c", kindPod, "p", "uid-p")
			c.OwnerReferences[0].Kind = "ConfigMap"
			return c
		}()},
		{name: "already being deleted, owner reference removed, owner delete event seen", seenDeleted: true, claim: func() *corev1.PersistentVolumeClaim {
			c := orphaned(managedClaim("c", kindPod, "p", "uid-p"))
			now := metav1.Now()
			c.DeletionTimestamp = &now
			return c
		}()},
		{name: "another installation's claim", seenDeleted: true, claim: func() *corev1.PersistentVolumeClaim {
			c := orphaned(managedClaim("c", kindPod, "p", "uid-p"))
			c.Labels[wellknown.ClaimManagedBy] = "other-id"
			return c
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, append(tt.cached, tt.claim), tt.live...)
			// The cache holds every claim given, even foreign ones, to
			// prove that the label is checked again at sync.
			if err := f.c.claimIndexer.Add(tt.claim); err != nil {
				t.Fatal(err)
			}
			if tt.seenDeleted {
				f.ownerDeleted(pod)
			}
			if err := f.sync(ref{kindClaim, "ns", "c"}); err != nil {
				t.Fatal(err)
			}
			actions := f.client.Actions()
			f.expectActions(tt.want...)
			deleted := len(tt.want) > 0 && strings.HasPrefix(tt.want[len(tt.want)-1], "delete")
			if deleted {
				del := actions[len(actions)-1].(k8stesting.DeleteAction)
				pre := del.GetDeleteOptions().Preconditions
				if pre == nil || pre.UID == nil || *pre.UID != tt.claim.UID || pre.ResourceVersion == nil || *pre.ResourceVersion != "7" {
					t.Errorf("delete without UID and resourceVersion preconditions: %+v", pre)
				}
				f.expectEvents("Normal ClaimDeleted")
			} else {
				f.expectEvents()
			}
			if got, want := f.metric("reclaimable_podwatcher_claims_deleted_total"), b2f(deleted); got != want {
				t.Errorf("claims_deleted_total = %v, want %v", got, want)
			}
			if got, want := f.metric("reclaimable_podwatcher_claims_left_to_garbage_collector_total"), b2f(tt.leftToGC); got != want {
				t.Errorf("claims_left_to_garbage_collector_total = %v, want %v", got, want)
			}
		})
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// A claim that still references its gone owner is deleted by the
// podwatcher only if the garbage collector has not deleted it within the
// grace, counted from when the owner was found gone, by its delete event or
// by a GET.
func TestGarbageCollectorIsGivenTheGrace(t *testing.T) {
	for _, tt := range []struct {
		name        string
		seenDeleted bool
		firstSync   []string
	}{
		{name: "owner delete event", seenDeleted: true},
		{name: "owner found gone by a GET", firstSync: []string{"get pods"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			claim := managedClaim("c", kindPod, "p", "uid-p")
			f := newFixture(t, nil, claim)
			t0 := time.Now()
			now := t0
			clk := testingclock.NewFakeClock(now)
			f.c.useClock(clk)
			if tt.seenDeleted {
				// Before the claim is cached, so that the event queues
				// nothing and the queue shows only what the sync queued.
				f.ownerDeleted(annotatedPod("p", "uid-p", nil))
			}
			f.cache(claim)
			k := ref{kindClaim, "ns", "c"}

			if err := f.sync(k); err != nil {
				t.Fatal(err)
			}
			f.expectActions(tt.firstSync...)
			if f.c.queue.Len() != 0 {
				t.Error("a claim left to the garbage collector was queued for an immediate sync")
			}

			// Examined again (a sweep, say) within the grace, still
			// measured from the first finding: no GET, no delete.
			clk.SetTime(t0.Add(testGrace - 20*time.Millisecond))
			if err := f.sync(k); err != nil {
				t.Fatal(err)
			}
			f.expectActions()
			f.expectEvents()
			// The remaining 20ms are waited for by the queue, not by a sleep.
			if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true,
				func(context.Context) (bool, error) { return f.c.queue.Len() == 1, nil }); err != nil {
				t.Fatal("the claim was not queued again at the end of the grace")
			}

			clk.SetTime(t0.Add(testGrace))
			if err := f.sync(k); err != nil {
				t.Fatal(err)
			}
			f.expectActions("delete persistentvolumeclaims")
			f.expectEvents("Normal ClaimDeleted")
			if got := f.metric("reclaimable_podwatcher_claims_deleted_total"); got != 1 {
				t.Errorf("claims_deleted_total = %v, want 1", got)
			}
			if got := f.metric("reclaimable_podwatcher_claims_left_to_garbage_collector_total"); got != 1 {
				t.Errorf("claims_left_to_garbage_collector_total = %v, want 1 (counted once)", got)
			}
		})
	}
}

// A claim the garbage collector started deleting during the grace is not
// deleted again at its end.
func TestTerminatingClaimIsNotDeletedAfterTheGrace(t *testing.T) {
	claim := managedClaim("c", kindPod, "p", "uid-p")
	f := newFixture(t, []runtime.Object{claim})
	t0 := time.Now()
	now := t0
	clk := testingclock.NewFakeClock(now)
	f.c.useClock(clk)
	f.ownerDeleted(annotatedPod("p", "uid-p", nil))
	k := ref{kindClaim, "ns", "c"}
	if err := f.sync(k); err != nil {
		t.Fatal(err)
	}

	terminating := claim.DeepCopy()
	terminating.ResourceVersion = "8"
	terminating.DeletionTimestamp = &metav1.Time{Time: t0.Add(time.Second)}
	f.cache(terminating)
	f.claimUpdated(claim, terminating)
	clk.SetTime(t0.Add(2 * testGrace))
	if err := f.sync(k); err != nil {
		t.Fatal(err)
	}
	f.expectActions()
	f.expectEvents()
}

// When the garbage collector removes the ownerReference instead of deleting
// the claim (the owner was deleted with propagationPolicy Orphan), the
// update itself queues the claim, which is then deleted without waiting for
// the grace or a sweep.
func TestOwnerReferenceRemovedQueuesClaim(t *testing.T) {
	claim := managedClaim("c", kindPod, "p", "uid-p")
	f := newFixture(t, nil, claim)
	// Before the claim is cached, so that the event queues nothing and the
	// queue shows only what the updates queued.
	f.ownerDeleted(annotatedPod("p", "uid-p", nil))
	f.cache(claim)
	k := ref{kindClaim, "ns", "c"}
	if err := f.sync(k); err != nil {
		t.Fatal(err)
	}
	f.expectActions()

	relabelled := claim.DeepCopy()
	relabelled.ResourceVersion = "8"
	relabelled.Labels["team"] = "build"
	f.claimUpdated(claim, relabelled)
	if got := f.c.queue.Len(); got != 0 {
		t.Errorf("queue length after an update that kept the ownerReference = %d, want 0", got)
	}

	stripped := relabelled.DeepCopy()
	stripped.ResourceVersion = "9"
	stripped.OwnerReferences = nil
	f.cache(stripped)
	f.claimUpdated(relabelled, stripped)
	if got := f.c.queue.Len(); got != 1 {
		t.Fatalf("queue length after the ownerReference was removed = %d, want 1", got)
	}
	if err := f.sync(k); err != nil {
		t.Fatal(err)
	}
	actions := f.client.Actions()
	f.expectActions("delete persistentvolumeclaims")
	if pre := actions[0].(k8stesting.DeleteAction).GetDeleteOptions().Preconditions; pre == nil || pre.ResourceVersion == nil || *pre.ResourceVersion != "9" {
		t.Errorf("delete preconditions = %+v, want the stripped claim's resourceVersion 9", pre)
	}
	f.expectEvents("Normal ClaimDeleted")

	// Later updates of a claim without the reference queue nothing more.
	later := stripped.DeepCopy()
	later.ResourceVersion = "10"
	f.claimUpdated(stripped, later)
	if got := f.c.queue.Len(); got != 1 {
		t.Errorf("queue length after an update of a claim without ownerReference = %d, want still 1", got)
	}
}

func TestConfigValidate(t *testing.T) {
	var defaults Config
	defaults.AddFlags(pflag.NewFlagSet("test", pflag.ContinueOnError))
	if err := defaults.validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
	for _, mutate := range []func(*Config){
		func(c *Config) { c.CleanupInterval = 0 },
		func(c *Config) { c.Workers = 0 },
		func(c *Config) { c.GarbageCollectionGrace = 0 },
		func(c *Config) { c.GarbageCollectionGrace = -time.Second },
	} {
		c := defaults
		mutate(&c)
		if err := c.validate(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

func TestDeleteConflictIsRetried(t *testing.T) {
	f := newFixture(t, nil)
	f.cache(orphaned(managedClaim("c", kindPod, "p", "uid-p")))
	f.ownerDeleted(annotatedPod("p", "uid-p", nil))
	f.client.PrependReactor("delete", "persistentvolumeclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "persistentvolumeclaims"}, "c", nil)
	})
	if err := f.sync(ref{kindClaim, "ns", "c"}); err == nil {
		t.Fatal("a delete refused by its preconditions must be retried")
	}
	f.expectEvents()
}

func TestHandlersEnqueue(t *testing.T) {
	wanter := annotatedPod("p", "uid-p", ask("cache", "true", validYAML))
	f := newFixture(t, []runtime.Object{wanter})
	mine := managedClaim("a", kindPod, "gone", "uid-gone")
	mine2 := managedClaim("b", kindPod, "gone", "uid-gone")
	others := managedClaim("c", kindPod, "p", "uid-p")
	for _, c := range []*corev1.PersistentVolumeClaim{mine, mine2, others} {
		f.cache(c)
	}

	// An owner's delete event queues exactly its claims.
	f.ownerDeleted(cache.DeletedFinalStateUnknown{Key: "ns/gone", Obj: annotatedPod("gone", "uid-gone", nil)})
	if got := f.c.queue.Len(); got != 2 {
		t.Errorf("queue length after owner delete = %d, want 2", got)
	}
	if _, ok := f.c.gone.goneSince("uid-gone"); ok {
		t.Error("a tombstone must not count as confirmed deletion")
	}

	// A claim deleted while an owner still wants it queues that owner.
	f.claimDeleted(&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p-cache"}})
	if got := f.c.queue.Len(); got != 3 {
		t.Errorf("queue length after claim delete = %d, want 3", got)
	}

	// Pods without claim annotations are not queued.
	f.ownerAdded(kindPod, annotatedPod("plain", "uid-plain", map[string]string{"x": "y"}), false)
	if got := f.c.queue.Len(); got != 3 {
		t.Errorf("queue length after an unannotated pod = %d, want 3", got)
	}
}

func TestOnlyUpdatesThatMayChangeClaimsAreQueued(t *testing.T) {
	pod := annotatedPod("p", "uid-p", ask("cache", "true", validYAML))
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "j", UID: "uid-j", Annotations: ask("cache", "true", validYAML)},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Volumes: []corev1.Volume{claimVolume("cache", "j-cache")},
		}}},
	}
	now := metav1.Now()
	for _, tc := range []struct {
		name   string
		old    metav1.Object
		change func(o metav1.Object)
		want   bool
	}{
		{"pod status", pod, func(o metav1.Object) { o.(*corev1.Pod).Status.Phase = corev1.PodRunning }, false},
		{"pod resourceVersion and labels", pod, func(o metav1.Object) { o.SetResourceVersion("2"); o.SetLabels(map[string]string{"a": "b"}) }, false},
		{"pod deletion starts", pod, func(o metav1.Object) { o.SetDeletionTimestamp(&now) }, false},
		{"pod annotation", pod, func(o metav1.Object) { o.SetAnnotations(ask("cache", "false", validYAML)) }, true},
		{"pod volume", pod, func(o metav1.Object) { o.(*corev1.Pod).Spec.Volumes[0].PersistentVolumeClaim.ClaimName = "other" }, true},
		{"pod owner", pod, func(o metav1.Object) {
			o.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "batch/v1", Kind: kindJob, Name: "j", UID: "uid-j"}})
		}, true},
		{"pod succeeds", pod, func(o metav1.Object) { o.(*corev1.Pod).Status.Phase = corev1.PodSucceeded }, true},
		{"pod fails", pod, func(o metav1.Object) { o.(*corev1.Pod).Status.Phase = corev1.PodFailed }, true},
		{"job status", job, func(o metav1.Object) { o.(*batchv1.Job).Status.Active = 1 }, false},
		{"job completes", job, func(o metav1.Object) {
			o.(*batchv1.Job).Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
		}, true},
		{"job template volume", job, func(o metav1.Object) { o.(*batchv1.Job).Spec.Template.Spec.Volumes = nil }, true},
		{"job annotation", job, func(o metav1.Object) { o.SetAnnotations(nil) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cur := tc.old.(runtime.Object).DeepCopyObject().(metav1.Object)
			tc.change(cur)
			if got := claimsMayChange(tc.old, cur); got != tc.want {
				t.Errorf("claimsMayChange = %v, want %v", got, tc.want)
			}
		})
	}
}

// Only the pods the podwatcher acts on are cached: those that ask for
// claims, and those at the claims gate (a Job's pods may carry it alone).
func TestConcernedPods(t *testing.T) {
	gated := func(name string) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{SchedulingGates: []corev1.PodSchedulingGate{{Name: name}}}}
	}
	tests := []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"plain", &corev1.Pod{}, false},
		{"other annotations", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"example.com/x": "y"}}}, false},
		{"asks for a claim", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{wellknown.EnabledKey("cache"): "true"}}}, true},
		{"at the claims gate", gated(wellknown.ClaimsGate), true},
		{"at a gate of a look-alike name", gated("reclaimable.kubernetes.io/claims"), false},
		{"at another gate", gated("example.com/gate"), false},
	}
	for _, tt := range tests {
		if got := concerned(tt.pod); got != tt.want {
			t.Errorf("%s: concerned = %v, want %v", tt.name, got, tt.want)
		}
	}
}
