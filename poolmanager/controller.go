// Package poolmanager keeps the status of each VolumePool in line with its
// members: how many are free, held, reserved, bound and released, their
// capacity, and whether the pool is in force and whether claims wait at
// its limit. It runs in the provisioner's process, while the provisioner
// leads: the provisioner knows which volumes form a class's pool (its
// backends) and which claims wait.
package poolmanager

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	storageinformers "k8s.io/client-go/informers/storage/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	volumehelpers "k8s.io/component-helpers/storage/volume"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/reclaimable/reclaimable/apis/reclaimable/v1alpha1"
	"github.com/reclaimable/reclaimable/client/clientset/versioned"
	poollisters "github.com/reclaimable/reclaimable/client/listers/reclaimable/v1alpha1"
	"github.com/reclaimable/reclaimable/internal/controller"
	"github.com/reclaimable/reclaimable/internal/eviction"
	"github.com/reclaimable/reclaimable/internal/pools"
)

// resyncPeriod is how often every pool is looked at without an event: a
// waiting claim that is deleted changes no volume, and its pool would stay
// Exhausted.
const resyncPeriod = time.Minute

// Provisioner is what the pool manager asks of the provisioner.
type Provisioner interface {
	// Members lists the pool of class, a class of this provisioner as its
	// VolumePool makes it, or says why the provisioner refuses the class.
	Members(class *storagev1.StorageClass) ([]*corev1.PersistentVolume, error)
	// Waiting counts the claims of the class named class that wait for a
	// member because the pool cannot grow.
	Waiting(class string) int

	// CheckAhead says why the pool of class, as pool makes it, cannot keep
	// members made ahead of claims (minAvailable), or nil.
	CheckAhead(class *storagev1.StorageClass, pool *v1alpha1.VolumePool) error
	// AheadInFlight counts the members of the class named class being
	// made ahead that Members does not list yet.
	AheadInFlight(class string) int
	// MakeAhead makes up to n members of class's pool ahead of claims,
	// within its maximum, and returns how many it made.
	MakeAhead(ctx context.Context, class *storagev1.StorageClass, pool *v1alpha1.VolumePool, n int) (int, error)
	// FinishAhead completes the members of class made ahead that a
	// stopped provisioner left without their storage.
	FinishAhead(ctx context.Context, class *storagev1.StorageClass) error

	// CheckEvict says why the members of class, as its pool makes it,
	// cannot be evicted, or nil.
	CheckEvict(class *storagev1.StorageClass) error
	// Evict removes member pv, as the cache showed it, with its data, for
	// cause (a keys.Evict* value), unless it changed since; it reports
	// whether it did. Its storage goes in the background.
	Evict(ctx context.Context, pv *corev1.PersistentVolume, cause string) (bool, error)
	// Usage returns what member pv held when it last came back to the
	// pool, if the provisioner measured that return.
	Usage(pv *corev1.PersistentVolume) (v1alpha1.MemberUsage, bool)
}

// Controller is the pool manager.
type Controller struct {
	client      versioned.Interface
	provisioner Provisioner
	name        string
	recorder    record.EventRecorder
	metrics     *metrics
	clock       clock.PassiveClock
	// interval batches status writes: at most one per pool per interval.
	interval time.Duration
	queue    *controller.Loop[*v1alpha1.VolumePool, string]
	// ahead makes the members of each pool ahead of claims and finishes
	// those left half made: lifecycle pods, each up to --lifecycle-timeout,
	// on a queue of their own, so that status and eviction never wait for
	// a node.
	ahead *controller.Loop[*v1alpha1.VolumePool, string]

	mu sync.Mutex
	// aheadFailed holds, by pool, why its members made ahead could not be
	// made, until they can: the Ready condition says it.
	aheadFailed map[string]error

	pools     poollisters.VolumePoolLister
	poolIndex cache.Indexer
	classes   storagelisters.StorageClassLister
}

// Config holds the flags of the pool manager.
type Config struct {
	// StatusInterval batches the writes of a VolumePool's status: at most
	// one per pool per interval, however many members change.
	StatusInterval time.Duration
}

// AddFlags registers the flags of the pool manager on fs.
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&c.StatusInterval, "pool-status-interval", 5*time.Second,
		"Longest a VolumePool's status lags behind its members: changes within it are written at once, at most one status write per pool per interval.")
}

// New builds the pool manager of env's provisioner on env's shared
// informers. It runs while the provisioner p leads (controller.Together):
// p knows which volumes form a class's pool and which claims wait.
func New(env *controller.Env, p Provisioner, cfg Config) (*Controller, error) {
	if cfg.StatusInterval <= 0 {
		return nil, fmt.Errorf("--pool-status-interval must be positive, not %s", cfg.StatusInterval)
	}
	poolInformer, err := pools.Informer(env)
	if err != nil {
		return nil, err
	}
	client, err := pools.ClientFor(env, "poolmanager")
	if err != nil {
		return nil, err
	}
	factory := env.InformerFactory("", "")
	volumes := factory.Core().V1().PersistentVolumes().Informer()
	if err := pools.IndexVolumesByClass(volumes); err != nil {
		return nil, fmt.Errorf("indexing volumes: %w", err)
	}
	return newController(client, poolInformer, factory.Storage().V1().StorageClasses(), volumes,
		p, env.ProvisionerName, env.Recorder("reclaimable-poolmanager"), env.Registry, cfg.StatusInterval)
}

// newController builds the pool manager of the provisioner named
// provisionerName on shared informers: pools (indexed by
// pools.PoolsByClass), classes and volumes (indexed by
// pools.VolumesByClass).
func newController(client versioned.Interface, poolInformer cache.SharedIndexInformer, classes storageinformers.StorageClassInformer, volumes cache.SharedIndexInformer,
	p Provisioner, provisionerName string, recorder record.EventRecorder, reg prometheus.Registerer, interval time.Duration) (*Controller, error) {
	if interval <= 0 {
		return nil, fmt.Errorf("the status interval must be positive, not %s", interval)
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("registering pool manager metrics: %w", err)
	}
	c := &Controller{
		client: client, provisioner: p, name: provisionerName, recorder: recorder, metrics: m,
		clock: clock.RealClock{}, interval: interval, aheadFailed: map[string]error{},
		pools:     poollisters.NewVolumePoolLister(poolInformer.GetIndexer()),
		poolIndex: poolInformer.GetIndexer(),
		classes:   classes.Lister(),
	}
	// Every change within the interval costs one status write.
	c.queue = &controller.Loop[*v1alpha1.VolumePool, string]{
		Name: "poolmanager", Sync: c.sync, Delay: interval, Workers: 1,
		Sweep: resyncPeriod, List: controller.ListOf[*v1alpha1.VolumePool](poolInformer.GetIndexer()),
		Ref: controller.NameRef[*v1alpha1.VolumePool],
	}
	c.ahead = &controller.Loop[*v1alpha1.VolumePool, string]{Name: "poolmanager-ahead", Sync: c.syncAhead, Workers: 1}
	// A pool is looked at on a change of any pool of its class (a second
	// pool of a class takes over when the first goes), of the class, or
	// of a volume of the class.
	if err := controller.WatchMapped(c.queue, poolInformer, func(e controller.Event[*v1alpha1.VolumePool]) []string {
		var names []string
		for _, class := range pools.ClassesOf(e) {
			names = append(names, c.poolsOf(class)...)
		}
		return names
	}); err != nil {
		return nil, err
	}
	if err := controller.WatchMapped(c.queue, classes.Informer(), func(e controller.Event[*storagev1.StorageClass]) []string {
		return c.poolsOf(e.Obj.Name)
	}); err != nil {
		return nil, err
	}
	if err := controller.WatchMapped(c.queue, volumes, func(e controller.Event[*corev1.PersistentVolume]) []string {
		return c.poolsOf(volumehelpers.GetPersistentVolumeClass(e.Obj))
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// Name names the controller's logs and queue.
func (c *Controller) Name() string { return "poolmanager" }

// Run keeps the pools' status until ctx is done.
func (c *Controller) Run(ctx context.Context) error {
	klog.FromContext(ctx).Info("Managing VolumePools", "statusInterval", c.interval)
	go c.ahead.Run(ctx)
	c.queue.Run(ctx)
	return nil
}

// Notify says that something the informers do not show changed for the
// class named class: a claim started waiting for its pool.
func (c *Controller) Notify(class string) {
	for _, name := range c.poolsOf(class) {
		c.queue.AddAfter(name, c.interval)
	}
}

// poolsOf names the pools of class.
func (c *Controller) poolsOf(class string) []string {
	if class == "" {
		return nil
	}
	objs, err := c.poolIndex.ByIndex(pools.PoolsByClass, class)
	if err != nil {
		return nil // only an unknown index fails, and the informer has it
	}
	var names []string
	for _, o := range objs {
		if pool, ok := o.(*v1alpha1.VolumePool); ok {
			names = append(names, pool.Name)
		}
	}
	return names
}

// sync writes the status of the pool named name, if it changed, and then
// records the events of the change: a write lost to a conflict is decided
// again, and its events with it, so none is recorded twice. It evicts what
// is due, and hands what must be made ahead of claims to the ahead queue:
// a status the API server refuses otherwise (too large, a webhook, etcd
// away) is retried with back-off, and holds up neither, since they are
// decided from the members and the pool's spec, not from its status.
func (c *Controller) sync(ctx context.Context, name string) error {
	pool, err := c.pools.Get(name)
	if apierrors.IsNotFound(err) {
		c.metrics.forget(name)
		c.setAheadFailure(name, nil)
		return nil
	}
	if err != nil {
		return err
	}
	v, effective, ok := c.look(pool)
	if !ok {
		c.metrics.forget(name)
		return nil
	}
	r := decide(v)
	written, writeErr := c.writeStatus(ctx, pool, r)
	if writeErr == nil && !written {
		return nil // the pool changed meanwhile: decided again from its newer spec
	}
	if r.recheck > 0 {
		c.queue.AddAfter(name, r.recheck)
	}
	// A pool whose members failed to be made is retried by the ahead
	// queue's back-off, which an Add here would cut short.
	if effective != nil && v.aheadErr == nil && v.aheadFailed == nil && (r.makeAhead > 0 || storagePending(v.members)) {
		c.ahead.Add(name)
	}
	return errors.Join(writeErr, c.evict(ctx, pool, r.evict))
}

// evict removes the members decided, each with an event on the pool.
func (c *Controller) evict(ctx context.Context, pool *v1alpha1.VolumePool, evictions []eviction.Eviction) error {
	for _, e := range evictions {
		evicted, err := c.provisioner.Evict(ctx, e.PV, e.Cause)
		if err != nil {
			return err
		}
		if evicted {
			c.recorder.Event(pool, corev1.EventTypeNormal, reasonMemberEvicted, e.Message)
		}
	}
	return nil
}

// look gathers what the status of pool is decided from; it reports false
// when another installation keeps the pool's status. effective is the
// pool's class with the pool's settings over its parameters, nil unless
// the pool is in force for a class of this provisioner.
func (c *Controller) look(pool *v1alpha1.VolumePool) (view, *storagev1.StorageClass, bool) {
	v := view{pool: pool, provisioner: c.name, now: metav1.NewTime(c.clock.Now())}
	v.owner = pools.PoolOf(c.poolIndex, pool.Spec.StorageClassName)
	if class, err := c.classes.Get(pool.Spec.StorageClassName); err == nil {
		v.class = class
	}
	if !manages(pool, v.class, c.name, c.clock.Now()) {
		return v, nil, false
	}
	if v.class == nil || v.class.Provisioner != c.name || v.owner == nil || v.owner.Name != pool.Name {
		return v, nil, true
	}
	effective := pools.EffectiveClass(v.class, pool)
	if ptr.Deref(pool.Spec.MinAvailable, 0) > 0 {
		v.aheadErr = c.provisioner.CheckAhead(effective, pool)
		v.making = c.provisioner.AheadInFlight(v.class.Name)
		v.aheadFailed = c.aheadFailure(pool.Name)
	}
	if pool.Spec.EvictAfter != nil || pool.Spec.ShrinkToMaximum || pool.Spec.EvictAboveBytes != nil {
		v.evictErr = c.provisioner.CheckEvict(effective)
	}
	v.members, v.settingsErr = c.provisioner.Members(effective)
	v.waiting = c.provisioner.Waiting(v.class.Name)
	v.usage = map[string]v1alpha1.MemberUsage{}
	for _, pv := range v.members {
		if u, ok := c.provisioner.Usage(pv); ok {
			v.usage[pv.Name] = u
		}
	}
	return v, effective, true
}

// syncAhead finishes the members of the pool named name that were left
// half made, then makes as many ahead of claims as its status lacks. A
// failure is retried with the queue's back-off, and said by the pool's
// Ready condition until the members can be made.
func (c *Controller) syncAhead(ctx context.Context, name string) error {
	pool, err := c.pools.Get(name)
	if apierrors.IsNotFound(err) {
		c.setAheadFailure(name, nil)
		return nil
	}
	if err != nil {
		return err
	}
	v, effective, ok := c.look(pool)
	if !ok || effective == nil || ptr.Deref(pool.Spec.MinAvailable, 0) == 0 || v.aheadErr != nil {
		c.setAheadFailure(name, nil)
		return nil
	}
	// Members a stopped provisioner left half made are finished before
	// more are made.
	if err := c.provisioner.FinishAhead(ctx, effective); err != nil {
		c.setAheadFailure(name, err)
		return fmt.Errorf("finishing the members of VolumePool %s made ahead: %w", name, err)
	}
	// The view from before stands: a member finished is counted as being
	// made until the cache shows it free, so none is made twice.
	v.aheadFailed = nil
	r := decide(v)
	if r.makeAhead > 0 {
		made, err := c.provisioner.MakeAhead(ctx, effective, pool, r.makeAhead)
		klog.FromContext(ctx).V(2).Info("Made members ahead of claims", "pool", name, "made", made, "wanted", r.makeAhead)
		if err != nil {
			c.recorder.Eventf(pool, corev1.EventTypeWarning, reasonMakeAheadFailed, "Made %d of %d members ahead of claims: %v", made, r.makeAhead, err)
			c.setAheadFailure(name, err)
			return fmt.Errorf("making members of VolumePool %s ahead: %w", name, err)
		}
	}
	c.setAheadFailure(name, nil)
	return nil
}

// aheadFailure is why the members of pool made ahead could not be made.
func (c *Controller) aheadFailure(pool string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.aheadFailed[pool]
}

// setAheadFailure records why the members of pool made ahead could not be
// made (nil: they could), and has the status say it when that changed.
func (c *Controller) setAheadFailure(pool string, err error) {
	c.mu.Lock()
	old, had := c.aheadFailed[pool]
	if err == nil {
		delete(c.aheadFailed, pool)
	} else {
		c.aheadFailed[pool] = err
	}
	c.mu.Unlock()
	if had != (err != nil) || (had && old.Error() != err.Error()) {
		c.queue.Add(pool)
	}
}

// storagePending reports whether a member still waits for its storage.
func storagePending(members []*corev1.PersistentVolume) bool {
	return slices.ContainsFunc(members, pools.StoragePending)
}

// writeStatus writes the status r decided for pool, if it changed, and
// then records the events of the change. It reports whether the pool
// has that status now: not when it changed meanwhile, and then it is
// decided again, from its newer spec.
func (c *Controller) writeStatus(ctx context.Context, pool *v1alpha1.VolumePool, r result) (bool, error) {
	name := pool.Name
	c.metrics.set(pool.Name, ptr.Deref(pool.Spec.MinAvailable, 0), r.counts, r.status)
	if equality.Semantic.DeepEqual(pool.Status, r.status) {
		return true, nil
	}
	updated := pool.DeepCopy()
	updated.Status = r.status
	// The update carries the cached resourceVersion: a status written from
	// a stale cache is refused, and decided again from the newer pool.
	if _, err := c.client.ReclaimableV1alpha1().VolumePools().UpdateStatus(ctx, updated, metav1.UpdateOptions{}); err != nil {
		switch {
		case apierrors.IsNotFound(err):
			return false, nil
		case apierrors.IsConflict(err):
			c.queue.AddAfter(name, c.interval)
			return false, nil
		}
		return false, fmt.Errorf("writing the status of VolumePool %s: %w", name, err)
	}
	c.metrics.writes.Inc()
	klog.FromContext(ctx).V(2).Info("Wrote pool status", "pool", name, "free", r.status.Free, "held", r.status.Held,
		"reserved", r.status.Reserved, "bound", r.status.Bound, "released", r.status.Released, "total", r.status.Total)
	for _, e := range r.events {
		c.recorder.Event(pool, e.Type, e.Reason, e.Message)
	}
	return true, nil
}
