// Package provisioner is the external provisioner of reclaimable. It gives a
// claim a volume from the retained pool of its StorageClass (data included),
// grows the pool through the class's backend when nothing fits, and deletes
// the volumes it created with reclaim policy Delete.
//
// It runs on sigs.k8s.io/sig-storage-lib-external-provisioner, which watches
// claims and volumes and calls Provision and Delete; this package decides.
package provisioner

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	lib "sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/reclaimable/reclaimable/apis/reclaimable/v1alpha1"
	"github.com/reclaimable/reclaimable/internal/controller"
	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/provisioner/classpool"
	"github.com/reclaimable/reclaimable/provisioner/evict"
	"github.com/reclaimable/reclaimable/provisioner/lifecycle"
	"github.com/reclaimable/reclaimable/provisioner/scrub"
	"github.com/reclaimable/reclaimable/provisioner/unissued"
)

// Controller is the provisioner.
type Controller struct {
	lib       *lib.ProvisionController
	lifecycle *lifecycle.Events
	// provisioner decides; the pool manager asks it about pools.
	provisioner *provisioner
	// early issues pool members to claims as they are created.
	early *earlyHandOff
	// scrubber empties the volumes of onRelease Scrub pools.
	scrubber *scrub.Scrubber
	// unissued keeps free members of pools held to namespaces out of the
	// PV controller's reach.
	unissued *unissued.Keeper
	// evictor removes the storage of evicted members.
	evictor *evict.Evictor
}

// New builds the provisioner on env's shared informers.
func New(env *controller.Env, cfg Config) (*Controller, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	client, err := env.ClientFor("provisioner")
	if err != nil {
		return nil, err
	}
	poolInformer, err := pools.Informer(env)
	if err != nil {
		return nil, err
	}
	ns := cfg.BackingClaimNamespace
	if ns == "" {
		ns = env.Namespace()
	}
	c, err := newController(client, sources{
		factory: env.InformerFactory("", ""),
		// Only the claims that wait for a volume: a bound claim asks
		// nothing of a provisioner, and most of a cluster's claims are
		// bound.
		claims:       env.WaitingClaims(),
		pools:        poolInformer,
		backing:      env.InformerFactory(ns, classpool.BackingClaimSelector(env.ControllerID)).Core().V1().PersistentVolumeClaims().Informer(),
		backingNS:    ns,
		controllerID: env.ControllerID,
	}, env.Recorder("reclaimable-provisioner"), env.Registry, env.ProvisionerName, cfg)
	if err != nil {
		return nil, err
	}
	env.WaitFor(c.provisioner.issued.HasSynced)
	return c, nil
}

// NotifyPools has notify told of each class whose pool changed in a way
// the informers do not show: a claim started or stopped waiting for a
// member, a member was measured. The pool manager listens; call it before
// Run.
func (c *Controller) NotifyPools(notify func(class string)) {
	c.provisioner.onWaitingChange = notify
	c.provisioner.measurer.OnMeasured(notify)
}

// sources are the informers the provisioner reads.
type sources struct {
	factory informers.SharedInformerFactory
	// claims are the claims that wait for a volume; pools the VolumePools
	// (nil: none).
	claims, pools cache.SharedIndexInformer
	// backing are the backing claims of the class pools, in backingNS,
	// labelled for controllerID.
	backing      cache.SharedIndexInformer
	backingNS    string
	controllerID string
}

// newController wires the provisioner to the library on src's informers.
// Options in extra override the library's settings made here.
func newController(client kubernetes.Interface, src sources, recorder record.EventRecorder, registry prometheus.Registerer,
	name string, cfg Config, extra ...func(*lib.ProvisionController) error) (*Controller, error) {
	factory, claimInf := src.factory, src.claims
	m, err := newMetrics(registry)
	if err != nil {
		return nil, fmt.Errorf("registering provisioner metrics: %w", err)
	}
	volumes := factory.Core().V1().PersistentVolumes().Informer()
	if err := indexVolumes(volumes); err != nil {
		return nil, fmt.Errorf("indexing volumes: %w", err)
	}
	claims := &claimInformer{SharedIndexInformer: claimInf}
	classes := factory.Storage().V1().StorageClasses()

	p := newProvisioner(name, client, volumes.GetIndexer(), corelisters.NewPersistentVolumeClaimLister(claimInf.GetIndexer()), recorder, m, cfg)
	// The record of members taken may be dropped only once issued shows
	// them: in between, a claim would look as if it had no volume.
	if p.issued, err = controller.RefsOfThen(volumes, volumeClaimUID, p.observeTaken); err != nil {
		return nil, err
	}
	p.requeue = claims.requeue
	p.controllerID = src.controllerID
	p.nodes = factory.Core().V1().Nodes().Lister()
	p.useClasses(classes.Lister())
	early := newEarlyHandOff(p, classes.Lister(), cfg.Workers)
	if src.pools != nil {
		p.pools = src.pools.GetIndexer()
	}
	p.useBackingClaims(corelisters.NewPersistentVolumeClaimLister(src.backing.GetIndexer()), src.backingNS)
	if err := p.classes.Watch(src.backing, claimInf, volumes); err != nil {
		return nil, err
	}
	if err := early.loop.Watch(claimInf); err != nil {
		return nil, fmt.Errorf("watching claims: %w", err)
	}
	if err := p.watch(volumes, src.pools); err != nil {
		return nil, err
	}
	opts := []func(*lib.ProvisionController) error{
		// The process already elects a leader per controller (Lease
		// "<controller-id>-provisioner") and calls Run only while it leads.
		lib.LeaderElection(false),
		lib.ClaimsInformer(claims),
		lib.VolumesInformer(volumes),
		lib.ClassesInformer(classes.Informer()),
		lib.NodesLister(factory.Core().V1().Nodes().Lister()),
		// The shared informers do not resync: failures are retried through
		// the library's rate-limited queue, forever, and claims waiting for
		// a full pool are woken when a volume of their class is freed.
		lib.ResyncPeriod(0),
		lib.FailedProvisionThreshold(0),
		lib.FailedDeleteThreshold(0),
		lib.Threadiness(cfg.Workers),
		// Served with the process's other metrics, not on a port of its own.
		lib.MetricsInstance(m.lib),
		lib.MetricsPort(0),
	}
	logger := klog.Background().WithValues("controller", "provisioner")
	c := &Controller{lib: lib.NewProvisionController(logger, libClient{client}, name, p, append(opts, extra...)...),
		lifecycle: p.lifecycle, provisioner: p, early: early}
	if err := c.buildLoops(volumes, classes.Lister(), cfg); err != nil {
		return nil, err
	}
	return c, nil
}

// indexVolumes adds the provisioner's indexes to the volume informer.
func indexVolumes(volumes cache.SharedIndexInformer) error {
	if err := pools.IndexVolumesByClass(volumes); err != nil {
		return err
	}
	if err := volumes.AddIndexers(classpool.Indexers()); err != nil {
		return err
	}
	return nil
}

// watch has p follow volumes, to wake the claims waiting for room, and
// pools (nil without them), whose new maximum may serve those claims.
func (p *provisioner) watch(volumes, poolInformer cache.SharedIndexInformer) error {
	if poolInformer != nil {
		err := controller.Handle(poolInformer, func(e controller.Event[*v1alpha1.VolumePool]) {
			for _, class := range pools.ClassesOf(e) {
				p.wake(class)
			}
		})
		if err != nil {
			return fmt.Errorf("watching pools: %w", err)
		}
	}
	err := controller.Handle(volumes, func(e controller.Event[*corev1.PersistentVolume]) {
		switch e.Type {
		case controller.Added:
			p.onVolume(nil, e.Obj)
		case controller.Updated:
			p.onVolume(e.Old, e.Obj)
		case controller.Deleted:
			p.onVolume(e.Obj, nil)
		}
	})
	if err != nil {
		return fmt.Errorf("watching volumes: %w", err)
	}
	return nil
}

// buildLoops builds the loops that run beside the library's while the
// provisioner leads: the scrubber, the keeper of unissued members, the
// evictor and the measurer.
func (c *Controller) buildLoops(volumes cache.SharedIndexInformer, classes storagelisters.StorageClassLister, cfg Config) error {
	p, m := c.provisioner, c.provisioner.metrics
	c.scrubber = scrub.New(p, scrub.Config{
		Provisioner: p.name, Client: p.client, Volumes: volumes.GetIndexer(), Classes: classes, Pools: p.pools,
		Pods: newLifecyclePods(p.client, cfg, p.lifecycle, m.lifecycle), Recorder: p.recorder, Clock: p.clock, Failures: m.scrubFailures, Workers: cfg.Workers,
	})
	if err := c.scrubber.Watch(volumes); err != nil {
		return fmt.Errorf("watching volumes to scrub: %w", err)
	}
	c.unissued = unissued.New(unissued.Config{Provisioner: p.name, Client: p.client, Volumes: volumes.GetIndexer(), Classes: classes, Pools: p.pools, Workers: cfg.Workers})
	if err := c.unissued.Watch(volumes); err != nil {
		return fmt.Errorf("watching volumes without a claimRef: %w", err)
	}
	c.evictor = evict.NewEvictor(p, evict.Config{
		Provisioner: p.name, Client: p.client, Volumes: volumes.GetIndexer(), Pools: p.pools, Nodes: p.nodes,
		Recorder: p.recorder, Clock: p.clock, AheadBound: p.aheadBound, Evictions: m.evictions, Workers: cfg.Workers,
	})
	if err := c.evictor.Watch(volumes); err != nil {
		return fmt.Errorf("watching volumes to evict: %w", err)
	}
	p.measurer = evict.NewMeasurer(p, evict.MeasurerConfig{Provisioner: p.name, Volumes: volumes.GetIndexer(), Pools: p.pools, Timeout: cfg.MeasureTimeout})
	if err := p.measurer.Watch(volumes); err != nil {
		return fmt.Errorf("watching volumes to measure: %w", err)
	}
	return nil
}

// Name names the controller's lease and logs.
func (c *Controller) Name() string { return "provisioner" }

// Start starts the cache of lifecycle pods, before the provisioner or the
// pool manager beside it (controller.Together) runs one.
func (c *Controller) Start(ctx context.Context) error { return c.lifecycle.Start(ctx) }

// Run provisions and deletes until ctx is done; Start comes first.
func (c *Controller) Run(ctx context.Context) error {
	// The early hand-off, the scrubber, the keeper of unissued members, the
	// evictor, the measurer and the class pools' loop run while the
	// provisioner leads: they act on what the provisioner and the pool
	// manager, which runs beside it under the same lease, decide.
	var wg sync.WaitGroup
	wg.Go(func() { c.early.loop.Run(ctx) })
	wg.Go(func() { c.scrubber.Run(ctx) })
	wg.Go(func() { c.unissued.Run(ctx) })
	wg.Go(func() { c.evictor.Run(ctx) })
	wg.Go(func() { c.provisioner.measurer.Run(ctx) })
	wg.Go(func() { c.provisioner.classes.Run(ctx) })
	c.lib.Run(ctx)
	wg.Wait()
	return nil
}

// claimInformer is the shared claim informer as the library sees it. It keeps
// the handler the library registers, the only way to put a claim back into
// the library's queue: the library offers no call for it.
type claimInformer struct {
	cache.SharedIndexInformer
	mu      sync.Mutex
	handler cache.ResourceEventHandler
}

func (i *claimInformer) AddEventHandlerWithResyncPeriod(h cache.ResourceEventHandler, resync time.Duration) (cache.ResourceEventHandlerRegistration, error) {
	i.mu.Lock()
	i.handler = h
	i.mu.Unlock()
	return i.SharedIndexInformer.AddEventHandlerWithResyncPeriod(h, resync)
}

// requeue has the library sync claim as if it had just changed.
func (i *claimInformer) requeue(claim *corev1.PersistentVolumeClaim) {
	i.mu.Lock()
	h := i.handler
	i.mu.Unlock()
	if h != nil {
		h.OnUpdate(claim, claim)
	}
}
