// Package releaser returns the Released volumes of one installation to the
// pool. It associates a PersistentVolume with the installation's controller
// ID (a label) while the reason to do so can still be seen, and once the
// volume is Released and its claim is gone, it clears the volume's claimRef:
// the PV controller then makes it Available to the next claim, data included.
package releaser

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/labels"
	coreinformers "k8s.io/client-go/informers/core/v1"
	storageinformers "k8s.io/client-go/informers/storage/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/reclaimable/reclaimable/apis/reclaimable/v1alpha1"
	"github.com/reclaimable/reclaimable/internal/controller"
	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

const (
	// Names of the indexes the releaser adds to the shared volume informer.
	byReleased = "releaser/released-by" // association label of a Released volume

	// deletedClaimTTL is how long a claim deletion seen on the watch spares
	// a lookup, and how long a claim's consumer outcome is kept after its
	// last version was seen. Its volume is Released within a second of the
	// deletion.
	deletedClaimTTL = 5 * time.Minute
	// maxDeletedClaims bounds each memory of claims.
	maxDeletedClaims = 10000
	// defaultConflictRecheck is when a volume whose write met a newer
	// version is looked at again if no event has queued it by then.
	defaultConflictRecheck = time.Second
)

// Controller is the releaser.
type Controller struct {
	client   kubernetes.Interface
	policy   policy
	cfg      Config
	recorder record.EventRecorder
	metrics  *metrics
	queue    *controller.Loop[*corev1.PersistentVolume, string]
	clock    clock.PassiveClock

	conflictRecheck time.Duration

	volumes     corelisters.PersistentVolumeLister
	volumeIndex cache.Indexer
	// byClaim finds the volumes whose claimRef names a claim: one each.
	byClaim      *controller.Refs[cache.ObjectName]
	classes      storagelisters.StorageClassLister
	claims       corelisters.PersistentVolumeClaimLister // managed claims only
	releasedTime releasedClock

	deleted *claimMemory[struct{}]
	// outcomes holds how the consumers of managed claims ended
	// (wellknown.ConsumerOutcome), kept past their claim's deletion for
	// onRelease ScrubUnlessSucceeded.
	outcomes *claimMemory[string]
	writes   *ownWrites
	warned   *warnings
	// pools holds the VolumePools, whose settings override their class's.
	pools cache.Indexer
}

// New builds the releaser on env's informers.
func New(env *controller.Env, cfg Config) (*Controller, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	all := env.InformerFactory("", "")
	p := policy{controllerID: env.ControllerID, provisionerName: env.ProvisionerName, claimRule: !cfg.DisableAutomaticAssociation}
	client, err := env.ClientFor("releaser")
	if err != nil {
		return nil, err
	}
	c, err := newController(client, p, cfg,
		all.Core().V1().PersistentVolumes(), all.Storage().V1().StorageClasses(),
		// The podwatcher reads the same cache when both run in one process.
		env.ManagedClaims(""),
		env.Recorder("reclaimable-releaser"), env.Registry)
	if err != nil {
		return nil, err
	}
	poolInformer, err := pools.Informer(env)
	if err != nil {
		return nil, err
	}
	c.pools = poolInformer.GetIndexer()
	// A pool's reserveFor and reuseScope change what its class's volumes
	// should be: look at them again.
	env.WaitFor(c.byClaim.HasSynced)
	if err := controller.WatchMapped(c.queue, poolInformer, func(e controller.Event[*v1alpha1.VolumePool]) []string {
		var names []string
		for _, class := range pools.ClassesOf(e) {
			names = append(names, c.wantedIndexed(pools.VolumesByClass, class)...)
		}
		return names
	}); err != nil {
		return nil, err
	}
	return c, nil
}

func newController(client kubernetes.Interface, p policy, cfg Config,
	volumes coreinformers.PersistentVolumeInformer, classes storageinformers.StorageClassInformer,
	claims coreinformers.PersistentVolumeClaimInformer, recorder record.EventRecorder, reg prometheus.Registerer,
) (*Controller, error) {
	c := &Controller{
		client:          client,
		policy:          p,
		cfg:             cfg,
		recorder:        recorder,
		conflictRecheck: defaultConflictRecheck,
		pools:           pools.NoPools(),
		volumes:         volumes.Lister(),
		volumeIndex:     volumes.Informer().GetIndexer(),
		classes:         classes.Lister(),
		claims:          claims.Lister(),
		writes:          newOwnWrites(),
		warned:          newWarnings(),
	}
	c.useClock(clock.RealClock{})
	c.queue = &controller.Loop[*corev1.PersistentVolume, string]{
		Name: "releaser", Ref: controller.NameRef[*corev1.PersistentVolume],
		Wants: func(_, pv *corev1.PersistentVolume) bool { return c.wants(pv) },
		Gone:  c.volumeDeleted, Sync: c.sync, Workers: cfg.Workers,
		Sweep: cfg.ReleaseInterval, Sweeper: c.sweep,
	}
	var err error
	if c.metrics, err = newMetrics(reg, c.oldestReleasedSeconds); err != nil {
		return nil, fmt.Errorf("registering releaser metrics: %w", err)
	}

	if err := pools.IndexVolumesByClass(volumes.Informer()); err != nil {
		return nil, fmt.Errorf("indexing volumes: %w", err)
	}
	if err := volumes.Informer().AddIndexers(cache.Indexers{
		byReleased: indexByReleased,
	}); err != nil {
		return nil, fmt.Errorf("indexing volumes: %w", err)
	}
	if c.byClaim, err = controller.RefsOf(volumes.Informer(), volumeClaim); err != nil {
		return nil, err
	}
	if err := c.queue.Watch(volumes.Informer()); err != nil {
		return nil, err
	}
	if err := controller.WatchMapped(c.queue, claims.Informer(), c.claimChanged); err != nil {
		return nil, err
	}
	if err := controller.WatchMapped(c.queue, classes.Informer(), c.classChanged); err != nil {
		return nil, err
	}
	return c, nil
}

// useClock builds the memories on clk, which tells their time.
func (c *Controller) useClock(clk clock.PassiveClock) {
	c.clock = clk
	c.deleted = newClaimMemory[struct{}](deletedClaimTTL, maxDeletedClaims, clk)
	c.outcomes = newClaimMemory[string](deletedClaimTTL, maxDeletedClaims, clk)
}

// Name names the controller's lease and logs.
func (c *Controller) Name() string { return "releaser" }

// Run handles volumes until ctx is done. The queue already holds every
// volume the informers reported while this replica waited for the lease.
func (c *Controller) Run(ctx context.Context) error {
	klog.FromContext(ctx).Info("Releasing volumes", "releaseInterval", c.cfg.ReleaseInterval,
		"automaticAssociation", c.policy.claimRule, "workers", c.cfg.Workers)
	c.queue.Run(ctx)
	return nil
}

// volumeClaim is the claim a volume's claimRef names.
func volumeClaim(obj any) []cache.ObjectName {
	pv, ok := obj.(*corev1.PersistentVolume)
	if !ok || pv.Spec.ClaimRef == nil {
		return nil
	}
	return []cache.ObjectName{{Namespace: pv.Spec.ClaimRef.Namespace, Name: pv.Spec.ClaimRef.Name}}
}

func indexByReleased(obj any) ([]string, error) {
	pv, ok := obj.(*corev1.PersistentVolume)
	if !ok || pv.Status.Phase != corev1.VolumeReleased {
		return nil, nil
	}
	if id, ok := pv.Labels[wellknown.VolumeManagedBy]; ok {
		return []string{id}, nil
	}
	return nil, nil
}

// wants reports whether a sync of pv may have something to do, from the
// caches alone, so that events about other volumes cost nothing.
func (c *Controller) wants(pv *corev1.PersistentVolume) bool {
	if pv.Labels[wellknown.VolumeManagedBy] == c.policy.controllerID {
		if pv.Status.Phase == corev1.VolumeAvailable {
			fix, _, _ := c.policy.rescopeOf(pv, c.classOf(pv))
			return fix != scopeFits
		}
		return pv.Status.Phase == corev1.VolumeReleased && pv.DeletionTimestamp == nil
	}
	_, ok := c.policy.associationRule(pv, c.classOf(pv), c.managedClaim(pv))
	return ok
}

func (c *Controller) volumeDeleted(pv *corev1.PersistentVolume) {
	c.writes.forget(pv.Name)
	c.warned.forget(pv.Name)
}

// claimChanged queues the volumes of a managed claim that is new or gone.
// A watch event that reports a deletion also spares their release a
// lookup; a tombstone (the deletion was missed and inferred from a relist)
// does not.
func (c *Controller) claimChanged(e controller.Event[*corev1.PersistentVolumeClaim]) []string {
	if e.Type == controller.Deleted && !e.Missed && deletionReported(e.Obj) {
		c.deleted.add(e.Obj.UID, struct{}{})
	}
	c.rememberOutcome(e.Obj)
	if e.Type == controller.Updated {
		return nil
	}
	return c.claimedVolumes(e.Obj)
}

// rememberOutcome keeps how a claim's consumer ended, as the podwatcher
// recorded it on the claim, for when the claim is gone and its volume is
// released. It is remembered from every version seen, so that a release
// handled before the claim's delete event still finds it; the last
// version, at the deletion, starts its time to be forgotten.
func (c *Controller) rememberOutcome(claim *corev1.PersistentVolumeClaim) {
	if result := claim.Annotations[wellknown.ConsumerOutcome]; result != "" {
		c.outcomes.add(claim.UID, result)
	}
}

// classChanged queues the volumes of a class that has just been given this
// controller ID, or created again for our provisioner (its parameters, such
// as reuseScope, can only change so).
func (c *Controller) classChanged(e controller.Event[*storagev1.StorageClass]) []string {
	class := e.Obj
	switch {
	case e.Type == controller.Deleted:
		return nil
	case e.Type == controller.Added && class.Provisioner == c.policy.provisionerName:
		return c.wantedIndexed(pools.VolumesByClass, class.Name)
	case class.Annotations[wellknown.ClassControllerID] != c.policy.controllerID:
		return nil
	case e.Type == controller.Updated && e.Old.Annotations[wellknown.ClassControllerID] == c.policy.controllerID:
		return nil
	}
	return c.wantedIndexed(pools.VolumesByClass, class.Name)
}

// claimedVolumes names the volumes bound or pre-bound to claim's name that
// a sync wants.
func (c *Controller) claimedVolumes(claim *corev1.PersistentVolumeClaim) []string {
	var names []string
	for _, name := range c.byClaim.Get(cache.ObjectName{Namespace: claim.Namespace, Name: claim.Name}) {
		if pv, err := c.volumes.Get(name.Name); err == nil && c.wants(pv) {
			names = append(names, pv.Name)
		}
	}
	return names
}

// wantedIndexed names the volumes of index value that a sync wants.
func (c *Controller) wantedIndexed(index, value string) []string {
	objs, err := c.volumeIndex.ByIndex(index, value)
	if err != nil {
		return nil // only an unknown index fails, and the indexes are added in newController
	}
	var names []string
	for _, obj := range objs {
		if pv, ok := obj.(*corev1.PersistentVolume); ok && c.wants(pv) {
			names = append(names, pv.Name)
		}
	}
	return names
}

// sweep queues every volume that may need association or release, from the
// cache. It is the safety net for events this replica never saw.
func (c *Controller) sweep(ctx context.Context) {
	c.deleted.prune()
	c.outcomes.prune()
	pvs, err := c.volumes.List(labels.Everything())
	if err != nil {
		klog.FromContext(ctx).Error(err, "Listing volumes from the cache")
		return
	}
	for _, pv := range pvs {
		if c.wants(pv) {
			c.queue.Add(pv.Name)
		}
	}
}
