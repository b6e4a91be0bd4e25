// Package podwatcher creates the claims that annotated Pods and Jobs ask for
// and deletes them once their owner is gone.
//
// A Pod or Job asks for a claim for its volume V with the annotations
// "dynamic-pvc-provisioner.kubernetes.io/V.enabled" and ".../V.pvc" (see
// docs/podwatcher.md). The claim gets the name the volume's persistentVolumeClaim
// names, the labels managed-by (the controller ID) and claimed-by (the
// owner's UID) and an ownerReference to the owner. A claim without the
// managed-by label of this controller's ID is never touched.
//
// A claim whose owner no longer exists is deleted. The ownerReference lets
// Kubernetes' garbage collector do that in the common case, so the
// podwatcher, which examines the claim on the owner's delete event, on the
// claim's updates and on a periodic sweep, deletes it only where the
// collector will not or does not: at once when the claim no longer
// references the owner (the owner was deleted with propagationPolicy
// Orphan, or the reference was removed), and otherwise once the collector
// has left it for a grace period after the owner was found gone. Deleting
// what the collector is deleting would cost a request and an event for
// nothing and fail with a conflict when the collector gets there first.
package podwatcher

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	batchlisters "k8s.io/client-go/listers/batch/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/reclaimable/reclaimable/internal/controller"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

const (
	kindPod   = "Pod"
	kindJob   = "Job"
	kindClaim = "PersistentVolumeClaim"

	// expectationTTL bounds how long a create we made is trusted before the
	// informer shows the claim; past it the owner is examined afresh.
	expectationTTL = time.Minute
	// goneTTL is how long the UID of an owner found gone is remembered past
	// the garbage collection grace, which is measured from that moment. Its
	// claims are normally deleted within seconds of it or of the grace.
	goneTTL = 5 * time.Minute
	// jobWait is how soon a pod of a Job not yet in the cache is looked at
	// again: until the Job is known, the pod's annotations might be the
	// Job's, whose claim must not be made twice.
	jobWait = 2 * time.Second
)

// ref is what the queue holds: an owner (Pod or Job) or a claim.
type ref struct {
	Kind, Namespace, Name string
}

func (k ref) String() string { return k.Kind + " " + k.Namespace + "/" + k.Name }

// Controller is the podwatcher.
type Controller struct {
	client       kubernetes.Interface
	controllerID string
	cfg          Config
	recorder     record.EventRecorder
	metrics      *metrics

	pods         corelisters.PodLister
	podIndexer   cache.Indexer
	jobs         batchlisters.JobLister
	jobIndexer   cache.Indexer
	claims       corelisters.PersistentVolumeClaimLister
	claimIndexer cache.Indexer

	// claimedBy finds the claims of an owner UID, so that an owner's
	// delete event costs no list; podsWanting and jobsWanting find the
	// owners that ask for a claim, so that a claim deleted while still
	// wanted is created again. Each value belongs to one object or
	// almost: controller.Refs, not client-go indexes.
	claimedBy   *controller.Refs[string]
	podsWanting *controller.Refs[cache.ObjectName]
	jobsWanting *controller.Refs[cache.ObjectName]

	// queue syncs owners and claims by ref; its sweep, at start and every
	// CleanupInterval, queues them a few at a time (sweep).
	queue *controller.Loop[metav1.Object, ref]
	clock clock.Clock

	// What the podwatcher remembers between syncs (memory.go).
	expect   *expectations
	gone     *goneOwners
	leftToGC *uidSet
	owners   *ownerMemories
}

// New builds the podwatcher on env's informers.
func New(env *controller.Env, cfg Config) (*Controller, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	client, err := env.ClientFor("podwatcher")
	if err != nil {
		return nil, err
	}
	c, err := newController(client, env.ControllerID, cfg,
		// Only the pods that ask for claims or wait at the gate: most pods
		// of a cluster do neither, and cost nothing but the watch.
		env.KeptPods(cfg.Namespace, concerned),
		env.InformerFactory(cfg.Namespace, ""),
		// Only our claims are cached: a cluster's other claims are none of
		// our business, and a claim without our label is never touched.
		env.ManagedClaims(cfg.Namespace),
		env.Recorder("reclaimable-podwatcher"), env.Registry)
	if err != nil {
		return nil, err
	}
	env.WaitFor(c.claimedBy.HasSynced, c.podsWanting.HasSynced, c.jobsWanting.HasSynced)
	return c, nil
}

func newController(client kubernetes.Interface, controllerID string, cfg Config,
	podInformer cache.SharedIndexInformer, all informers.SharedInformerFactory, claimInformer coreinformers.PersistentVolumeClaimInformer, recorder record.EventRecorder, registry prometheus.Registerer) (*Controller, error) {
	jobInformer := all.Batch().V1().Jobs()

	if err := podInformer.AddIndexers(cache.Indexers{gatedOnIndex: podGatedOn, gatedIndex: podGated}); err != nil {
		return nil, fmt.Errorf("adding pod index: %w", err)
	}

	c := &Controller{
		client:       client,
		controllerID: controllerID,
		cfg:          cfg,
		recorder:     recorder,
		pods:         controller.PodRecordLister(podInformer.GetIndexer()),
		podIndexer:   podInformer.GetIndexer(),
		jobs:         jobInformer.Lister(),
		jobIndexer:   jobInformer.Informer().GetIndexer(),
		claims:       claimInformer.Lister(),
		claimIndexer: claimInformer.Informer().GetIndexer(),
	}
	var err error
	if c.podsWanting, err = controller.RefsOf(podInformer, podWantsClaims); err != nil {
		return nil, err
	}
	if c.jobsWanting, err = controller.RefsOf(jobInformer.Informer(), jobWantsClaims); err != nil {
		return nil, err
	}
	if c.claimedBy, err = controller.RefsOf(claimInformer.Informer(), claimedBy); err != nil {
		return nil, err
	}
	c.useClock(clock.RealClock{})
	c.queue = &controller.Loop[metav1.Object, ref]{
		Name: "podwatcher", Sync: c.sync, Workers: cfg.Workers,
		Sweep: cfg.CleanupInterval, Sweeper: c.sweep, SweepFirst: true,
	}
	if c.metrics, err = newMetrics(registry, c.gatedPods); err != nil {
		return nil, fmt.Errorf("registering podwatcher metrics: %w", err)
	}

	if err := controller.WatchMapped(c.queue, podInformer, c.ownerChanged(kindPod)); err != nil {
		return nil, err
	}
	if err := controller.WatchMapped(c.queue, jobInformer.Informer(), c.ownerChanged(kindJob)); err != nil {
		return nil, err
	}
	if err := controller.WatchMapped(c.queue, claimInformer.Informer(), c.claimChanged); err != nil {
		return nil, err
	}
	return c, nil
}

// Name names the controller's lease and logs.
func (c *Controller) Name() string { return "podwatcher" }

// Run processes the queue and sweeps periodically until ctx is done, the
// first time at once: the watches leave the objects of the initial lists
// to it.
func (c *Controller) Run(ctx context.Context) error {
	c.queue.Run(ctx)
	return nil
}

// --- watches: they only remember facts and map events to refs ---

// ownerChanged maps the events of owners of kind to the refs they queue:
// an owner that asks for claims or waits at the gate, and the claims of
// one deleted. The objects of the initial lists are left to the sweep Run
// starts with, which queues them a few at a time (sweep).
func (c *Controller) ownerChanged(kind string) func(controller.Event[metav1.Object]) []ref {
	return func(e controller.Event[metav1.Object]) []ref {
		switch {
		case e.Type == controller.Deleted:
			return c.ownerDeleted(e.Obj, !e.Missed)
		case e.Type == controller.Added && e.Initial,
			e.Type == controller.Updated && !claimsMayChange(e.Old, e.Obj),
			!ownerConcerned(kind, e.Obj):
			return nil
		}
		return []ref{{kind, e.Obj.GetNamespace(), e.Obj.GetName()}}
	}
}

// claimsMayChange tells whether an update of an owner may change the claims
// it needs, or what they record of it: only its annotations, volumes and
// owner references say which claims, and its end how it went. The rest of
// a pod's updates (scheduling, status, the start of its deletion)
// outnumber those several times over, and can only make a sync a no-op.
func claimsMayChange(old, cur any) bool {
	o, ok1 := old.(metav1.Object)
	n, ok2 := cur.(metav1.Object)
	if !ok1 || !ok2 {
		return true
	}
	if outcome(old) != outcome(cur) {
		return true
	}
	if !maps.Equal(o.GetAnnotations(), n.GetAnnotations()) || !equality.Semantic.DeepEqual(o.GetOwnerReferences(), n.GetOwnerReferences()) {
		return true
	}
	switch o := old.(type) {
	case *controller.PodRecord:
		n, ok := cur.(*controller.PodRecord)
		return !ok || !slices.Equal(o.Volumes, n.Volumes)
	case *corev1.Pod:
		n, ok := cur.(*corev1.Pod)
		return !ok || !equality.Semantic.DeepEqual(o.Spec.Volumes, n.Spec.Volumes)
	case *batchv1.Job:
		n, ok := cur.(*batchv1.Job)
		return !ok || !equality.Semantic.DeepEqual(o.Spec.Template.Spec.Volumes, n.Spec.Template.Spec.Volumes)
	}
	return true
}

// ownerConcerned tells whether an owner of kind is worth a sync: it asks
// for claims, or it is a pod at the claims gate.
func ownerConcerned(kind string, obj any) bool {
	meta, ok := obj.(metav1.Object)
	if !ok {
		return false
	}
	if asksForClaims(meta.GetAnnotations()) {
		return true
	}
	return kind == kindPod && isGated(obj)
}

// ownerDeleted forgets what was remembered of an owner, and queues its
// claims. A watch DELETE is definite; a tombstone only says the cache
// missed the object, and is confirmed with a GET like the sweep.
func (c *Controller) ownerDeleted(owner metav1.Object, definite bool) []ref {
	uid := owner.GetUID()
	c.owners.forget(uid)
	if definite {
		c.gone.mark(uid)
	}
	var queued []ref
	for _, claim := range c.claimedBy.Get(string(uid)) {
		queued = append(queued, ref{kindClaim, claim.Namespace, claim.Name})
	}
	return queued
}

// claimChanged maps the events of managed claims to the refs they queue.
func (c *Controller) claimChanged(e controller.Event[*corev1.PersistentVolumeClaim]) []ref {
	claim := e.Obj
	name := claim.Namespace + "/" + claim.Name
	c.expect.observed(name)
	self := []ref{{kindClaim, claim.Namespace, claim.Name}}
	switch e.Type {
	case controller.Added:
		// Examine every claim once as it enters the cache: after a start
		// this finds the claims whose owner went away while no replica
		// ran. The sweep Run starts with does so for the initial list.
		if e.Initial {
			return nil
		}
		return append(self, c.gatedOn(name)...)
	case controller.Updated:
		// A claim whose reference to its owner was just removed: the
		// garbage collector does so when the owner is deleted with
		// propagationPolicy Orphan, and then leaves the claim to the
		// podwatcher.
		if referencesOwner(e.Old) && !referencesOwner(claim) {
			return self
		}
		return nil
	}
	c.leftToGC.forget(claim.UID)
	// An owner that still wants a claim of this name gets it again.
	return c.ownersWanting(cache.ObjectName{Namespace: claim.Namespace, Name: claim.Name})
}

// ownersWanting is the refs of the owners that ask for a claim of name.
func (c *Controller) ownersWanting(claim cache.ObjectName) []ref {
	var queued []ref
	for _, owners := range c.wanting() {
		for _, o := range owners.refs.Get(claim) {
			queued = append(queued, ref{owners.kind, o.Namespace, o.Name})
		}
	}
	return queued
}

// wanting is the owners that ask for claims, by kind.
func (c *Controller) wanting() []struct {
	kind string
	refs *controller.Refs[cache.ObjectName]
} {
	return []struct {
		kind string
		refs *controller.Refs[cache.ObjectName]
	}{{kindPod, c.podsWanting}, {kindJob, c.jobsWanting}}
}

// isGated tells whether a cached pod holds the claims gate.
func isGated(obj any) bool {
	rec, ok := controller.AsPodRecord(obj)
	return ok && holdsClaimsGate(rec.SchedulingGates)
}

// useClock builds the memories on clk, which tells their time.
func (c *Controller) useClock(clk clock.Clock) {
	c.clock = clk
	c.expect = newExpectations(clk)
	c.gone = newGoneOwners(clk, c.cfg.GarbageCollectionGrace+goneTTL)
	c.leftToGC = newUIDSet()
	c.owners = newOwnerMemories()
}

// --- indexes ---

// asksForClaims tells whether an object has any ".enabled" annotation, so
// that the handlers ignore the great majority of pods cheaply.
func asksForClaims(annotations map[string]string) bool {
	for k := range annotations {
		if _, ok := enabledVolume(k); ok {
			return true
		}
	}
	return false
}

// wantedClaims names the claims an owner asks for, in its own strings.
func wantedClaims(namespace string, annotations map[string]string, volumes []controller.RecordVolume) []cache.ObjectName {
	var names []cache.ObjectName
	for _, v := range volumes {
		if v.ClaimName == "" {
			continue
		}
		if _, ok := annotations[wellknown.EnabledKey(v.Name)]; ok {
			names = append(names, cache.ObjectName{Namespace: namespace, Name: v.ClaimName})
		}
	}
	return names
}

// concerned reports whether the podwatcher has anything to do with pod:
// it asks for claims, or waits at the claims gate (a pod of a Job that
// asks for claims may carry the gate without annotations of its own).
func concerned(pod *corev1.Pod) bool {
	return asksForClaims(pod.Annotations) || hasGate(pod)
}

func podWantsClaims(obj any) []cache.ObjectName {
	pod, ok := controller.AsPodRecord(obj)
	if !ok || !asksForClaims(pod.Annotations) {
		return nil
	}
	return wantedClaims(pod.Namespace, pod.Annotations, pod.Volumes)
}

func jobWantsClaims(obj any) []cache.ObjectName {
	job, ok := obj.(*batchv1.Job)
	if !ok || !asksForClaims(job.Annotations) {
		return nil
	}
	return wantedClaims(job.Namespace, job.Annotations, controller.RecordVolumes(job.Spec.Template.Spec.Volumes))
}

func claimedBy(obj any) []string {
	claim, ok := obj.(*corev1.PersistentVolumeClaim)
	if !ok {
		return nil
	}
	if uid := claim.Labels[wellknown.ClaimedBy]; uid != "" {
		return []string{uid}
	}
	return nil
}
