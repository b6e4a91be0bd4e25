// Package releaser returns the Released volumes of one installation to the
// pool. It associates a PersistentVolume with the installation's controller
// ID (a label) while the reason to do so can still be seen, and once the
// volume is Released and its claim is gone, it clears the volume's claimRef:
// the PV controller then makes it Available to the next claim, data included.
package releaser

import (
	"context"
	"errors"
	"fmt"
	"github.com/spf13/pflag"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	coreinformers "k8s.io/client-go/informers/core/v1"
	storageinformers "k8s.io/client-go/informers/storage/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	volumehelpers "k8s.io/component-helpers/storage/volume"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/reclaimable/reclaimable/internal/controller"
	"github.com/reclaimable/reclaimable/internal/keys"
)

// Config holds the flags of the releaser.
type Config struct {
	// ReleaseInterval is the period of the sweep that queues every volume
	// that may need association or release, in case an event was missed.
	ReleaseInterval time.Duration
	// DisableAutomaticAssociation turns off association through a claim
	// labelled by this installation's podwatcher.
	DisableAutomaticAssociation bool
	// Workers is the number of volumes handled in parallel.
	Workers int
}

// AddFlags registers the flags of the releaser on fs.
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&c.ReleaseInterval, "release-interval", time.Minute,
		"How often the releaser checks every volume of this controller ID, besides reacting to events.")
	fs.BoolVar(&c.DisableAutomaticAssociation, "disable-automatic-association", false,
		"Do not associate a volume because its claim is labelled "+keys.ClaimManagedBy+"=<controller-id>; the StorageClass annotation and the provisioner still associate.")
	fs.IntVar(&c.Workers, "releaser-workers", 4, "Volumes the releaser handles in parallel.")
}

func (c *Config) validate() error {
	var errs []error
	if c.ReleaseInterval <= 0 {
		errs = append(errs, errors.New("--release-interval must be positive"))
	}
	if c.Workers <= 0 {
		errs = append(errs, errors.New("--releaser-workers must be positive"))
	}
	return errors.Join(errs...)
}

const (
	// Names of the indexes the releaser adds to the shared volume informer.
	byClaim    = "releaser/claim"       // "<namespace>/<name>" of spec.claimRef
	byReleased = "releaser/released-by" // association label of a Released volume

	// deletedClaimTTL is how long a claim deletion seen on the watch spares
	// a lookup. Its volume is Released within a second of the deletion.
	deletedClaimTTL = 5 * time.Minute
	// maxDeletedClaims bounds the memory of deleted claims.
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
	queue    *controller.Queue[string]
	clock    clock.PassiveClock

	conflictRecheck time.Duration

	volumes      corelisters.PersistentVolumeLister
	volumeIndex  cache.Indexer
	classes      storagelisters.StorageClassLister
	claims       corelisters.PersistentVolumeClaimLister // managed claims only
	releasedTime releasedClock

	deleted *deletedClaims
	writes  *ownWrites
	warned  *warnings
}

// New builds the releaser on env's informers.
func New(env *controller.Env, cfg Config) (*Controller, error) {
	all := env.InformerFactory("", "")
	p := policy{controllerID: env.ControllerID, provisionerName: env.ProvisionerName, claimRule: !cfg.DisableAutomaticAssociation}
	client, err := env.ClientFor("releaser")
	if err != nil {
		return nil, err
	}
	return newController(client, p, cfg,
		all.Core().V1().PersistentVolumes(), all.Storage().V1().StorageClasses(),
		// The podwatcher reads the same cache when both run in one process.
		env.ManagedClaims(""),
		env.Recorder("reclaimable-releaser"), env.Registry)
}

func newController(client kubernetes.Interface, p policy, cfg Config,
	volumes coreinformers.PersistentVolumeInformer, classes storageinformers.StorageClassInformer,
	claims coreinformers.PersistentVolumeClaimInformer, recorder record.EventRecorder, reg prometheus.Registerer,
) (*Controller, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := &Controller{
		client:          client,
		policy:          p,
		cfg:             cfg,
		recorder:        recorder,
		clock:           clock.RealClock{},
		conflictRecheck: defaultConflictRecheck,
		volumes:         volumes.Lister(),
		volumeIndex:     volumes.Informer().GetIndexer(),
		classes:         classes.Lister(),
		claims:          claims.Lister(),
		writes:          newOwnWrites(),
		warned:          newWarnings(),
	}
	c.deleted = newDeletedClaims(deletedClaimTTL, maxDeletedClaims, c.clock)
	c.queue = controller.NewQueue("releaser", c.sync)
	var err error
	if c.metrics, err = newMetrics(reg, c.oldestReleasedSeconds); err != nil {
		return nil, fmt.Errorf("registering releaser metrics: %w", err)
	}

	if err := controller.IndexVolumesByClass(volumes.Informer()); err != nil {
		return nil, fmt.Errorf("indexing volumes: %w", err)
	}
	if err := volumes.Informer().AddIndexers(cache.Indexers{
		byClaim:    indexByClaim,
		byReleased: indexByReleased,
	}); err != nil {
		return nil, fmt.Errorf("indexing volumes: %w", err)
	}
	if _, err := volumes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.volumeChanged,
		UpdateFunc: func(_, obj any) { c.volumeChanged(obj) },
		DeleteFunc: c.volumeDeleted,
	}); err != nil {
		return nil, err
	}
	if _, err := claims.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.claimAdded,
		DeleteFunc: c.claimDeleted,
	}); err != nil {
		return nil, err
	}
	if _, err := classes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.classChanged(nil, obj) },
		UpdateFunc: c.classChanged,
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// Name names the controller's lease and logs.
func (c *Controller) Name() string { return "releaser" }

// Run handles volumes until ctx is done. The queue already holds every
// volume the informers reported while this replica waited for the lease.
func (c *Controller) Run(ctx context.Context) error {
	klog.FromContext(ctx).Info("Releasing volumes", "releaseInterval", c.cfg.ReleaseInterval,
		"automaticAssociation", c.policy.claimRule, "workers", c.cfg.Workers)
	go wait.UntilWithContext(ctx, c.sweep, c.cfg.ReleaseInterval)
	c.queue.Run(ctx, c.cfg.Workers)
	return nil
}

func indexByClaim(obj any) ([]string, error) {
	pv, ok := obj.(*corev1.PersistentVolume)
	if !ok || pv.Spec.ClaimRef == nil {
		return nil, nil
	}
	return []string{pv.Spec.ClaimRef.Namespace + "/" + pv.Spec.ClaimRef.Name}, nil
}

func indexByReleased(obj any) ([]string, error) {
	pv, ok := obj.(*corev1.PersistentVolume)
	if !ok || pv.Status.Phase != corev1.VolumeReleased {
		return nil, nil
	}
	if id, ok := pv.Labels[keys.VolumeManagedBy]; ok {
		return []string{id}, nil
	}
	return nil, nil
}

// wants reports whether a sync of pv may have something to do, from the
// caches alone, so that events about other volumes cost nothing.
func (c *Controller) wants(pv *corev1.PersistentVolume) bool {
	if pv.Labels[keys.VolumeManagedBy] == c.policy.controllerID {
		if pv.Status.Phase == corev1.VolumeAvailable {
			fix, _, _ := c.policy.rescopeOf(pv, c.classOf(pv))
			return fix != scopeFits
		}
		return pv.Status.Phase == corev1.VolumeReleased && pv.DeletionTimestamp == nil
	}
	_, ok := c.policy.associationRule(pv, c.classOf(pv), c.managedClaim(pv))
	return ok
}

func (c *Controller) volumeChanged(obj any) {
	if pv, ok := obj.(*corev1.PersistentVolume); ok && c.wants(pv) {
		c.queue.Add(pv.Name)
	}
}

func (c *Controller) volumeDeleted(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	if pv, ok := obj.(*corev1.PersistentVolume); ok {
		c.writes.forget(pv.Name)
		c.warned.forget(pv.Name)
	}
}

func (c *Controller) claimAdded(obj any) {
	if claim, ok := obj.(*corev1.PersistentVolumeClaim); ok {
		c.enqueueIndexed(byClaim, claim.Namespace+"/"+claim.Name)
	}
}

// claimDeleted queues the volumes of a managed claim that is gone. A watch
// event that reports a deletion also spares their release a lookup; a
// tombstone (the deletion was missed and inferred from a relist) does not.
func (c *Controller) claimDeleted(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	} else if claim, ok := obj.(*corev1.PersistentVolumeClaim); ok && deletionReported(claim) {
		c.deleted.add(claim.UID)
	}
	if claim, ok := obj.(*corev1.PersistentVolumeClaim); ok {
		c.enqueueIndexed(byClaim, claim.Namespace+"/"+claim.Name)
	}
}

// classChanged queues the volumes of a class that has just been given this
// controller ID, or created again for our provisioner (its parameters, such
// as reuseScope, can only change so).
func (c *Controller) classChanged(old, obj any) {
	class, ok := obj.(*storagev1.StorageClass)
	if !ok {
		return
	}
	if old == nil && class.Provisioner == c.policy.provisionerName {
		c.enqueueIndexed(controller.VolumesByClass, class.Name)
		return
	}
	if class.Annotations[keys.ClassControllerID] != c.policy.controllerID {
		return
	}
	if prev, ok := old.(*storagev1.StorageClass); ok && prev.Annotations[keys.ClassControllerID] == c.policy.controllerID {
		return
	}
	c.enqueueIndexed(controller.VolumesByClass, class.Name)
}

func (c *Controller) enqueueIndexed(index, value string) {
	objs, err := c.volumeIndex.ByIndex(index, value)
	if err != nil {
		return // only an unknown index fails, and the indexes are added in newController
	}
	for _, obj := range objs {
		c.volumeChanged(obj)
	}
}

// sweep queues every volume that may need association or release, from the
// cache. It is the safety net for events this replica never saw.
func (c *Controller) sweep(ctx context.Context) {
	c.deleted.prune()
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

func (c *Controller) classOf(pv *corev1.PersistentVolume) *storagev1.StorageClass {
	name := volumehelpers.GetPersistentVolumeClass(pv)
	if name == "" {
		return nil
	}
	class, err := c.classes.Get(name)
	if err != nil {
		return nil
	}
	return class
}

// managedClaim returns the managed claim with the namespace and name of pv's
// claimRef, if the cache has one.
func (c *Controller) managedClaim(pv *corev1.PersistentVolume) *corev1.PersistentVolumeClaim {
	ref := pv.Spec.ClaimRef
	if ref == nil || ref.Namespace == "" || ref.Name == "" {
		return nil
	}
	claim, err := c.claims.PersistentVolumeClaims(ref.Namespace).Get(ref.Name)
	if err != nil {
		return nil
	}
	return claim
}

// sync associates one volume if a rule says so, and releases it if it is
// ours, Released, and its claim is gone.
func (c *Controller) sync(ctx context.Context, name string) error {
	logger := klog.FromContext(ctx).WithValues("pv", name)
	ctx = klog.NewContext(ctx, logger)
	pv, err := c.volumes.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if c.writes.stale(pv.Name, pv.ResourceVersion) {
		logger.V(4).Info("Cache predates the releaser's last write, waiting for the newer version")
		return nil
	}

	if r, ok := c.policy.associationRule(pv, c.classOf(pv), c.managedClaim(pv)); ok {
		if pv, err = c.associate(ctx, pv, r); pv == nil || err != nil {
			return err
		}
	}

	switch fix, ns, name := c.policy.rescopeOf(pv, c.classOf(pv)); fix {
	case scopeHold:
		return c.hold(ctx, pv, ns, name)
	case scopeLetGo:
		return c.letGo(ctx, pv)
	}

	if until, reserved := reservedUntil(pv, c.policy.controllerID); reserved {
		if wait := until.Sub(c.clock.Now()); wait > 0 {
			c.queue.AddAfter(name, wait)
			return nil
		}
		return c.endReservation(ctx, pv)
	}

	ok, why := releasable(pv, c.policy.controllerID)
	if !ok {
		// Counted once per version of the volume, like the warning, so
		// that the metric does not grow with every sweep.
		if why == invalidClaimRef && c.warn(pv, errInvalidClaimRef, "Not released: spec.claimRef names no claim (namespace %q, name %q), so the releaser cannot tell whether it still exists; clear spec.claimRef by hand if the volume is free",
			pv.Spec.ClaimRef.Namespace, pv.Spec.ClaimRef.Name) {
			c.metrics.errors.WithLabelValues(errInvalidClaimRef).Inc()
		}
		logger.V(5).Info("Nothing to release", "reason", why)
		return nil
	}
	gone, err := c.claimGone(ctx, pv.Spec.ClaimRef)
	if err != nil {
		c.metrics.errors.WithLabelValues(errClaimCheck).Inc()
		if apierrors.IsForbidden(err) {
			c.warn(pv, errClaimCheck, "Cannot check whether claim %s/%s still exists: %v", pv.Spec.ClaimRef.Namespace, pv.Spec.ClaimRef.Name, err)
		}
		return fmt.Errorf("checking claim %s/%s of volume %s: %w", pv.Spec.ClaimRef.Namespace, pv.Spec.ClaimRef.Name, name, err)
	}
	if !gone {
		logger.V(4).Info("Released volume keeps its claimRef: the claim still exists", "claim", klog.KRef(pv.Spec.ClaimRef.Namespace, pv.Spec.ClaimRef.Name))
		return nil
	}
	return c.release(ctx, pv)
}

// claimGone reports whether the claim ref points at no longer exists with
// that namespace, name and UID. Only the API server can say so: the managed
// claims cache may only prove the claim still exists; a deletion seen on the
// watch stands for the API server's answer.
func (c *Controller) claimGone(ctx context.Context, ref *corev1.ObjectReference) (bool, error) {
	if ref.UID != "" && c.deleted.has(ref.UID) {
		return true, nil
	}
	// Still there: the deletion, when it comes, queues the volume again.
	return controller.Gone(ctx,
		func(claim *corev1.PersistentVolumeClaim) bool { return sameClaim(ref, claim) },
		func() (*corev1.PersistentVolumeClaim, error) {
			return c.claims.PersistentVolumeClaims(ref.Namespace).Get(ref.Name)
		},
		func(ctx context.Context) (*corev1.PersistentVolumeClaim, error) {
			return c.client.CoreV1().PersistentVolumeClaims(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		})
}

// associate labels pv with the controller ID. It changes nothing else, so it
// is safe on a Bound volume. It returns the updated volume, or nil when the
// volume changed or vanished meanwhile.
func (c *Controller) associate(ctx context.Context, pv *corev1.PersistentVolume, r rule) (*corev1.PersistentVolume, error) {
	logger := klog.FromContext(ctx)
	updated := pv.DeepCopy()
	if updated.Labels == nil {
		updated.Labels = map[string]string{}
	}
	updated.Labels[keys.VolumeManagedBy] = c.policy.controllerID
	res, err := c.client.CoreV1().PersistentVolumes().Update(ctx, updated, metav1.UpdateOptions{})
	if err != nil {
		return nil, c.writeFailed(ctx, pv, errAssociate, "associate", err)
	}
	c.writes.wrote(pv.Name, pv.ResourceVersion)
	c.metrics.associations.WithLabelValues(string(r)).Inc()
	msg := c.policy.describe(r, pv)
	c.recorder.Eventf(res, corev1.EventTypeNormal, "Associated", "Associated with controller ID %s: %s", c.policy.controllerID, msg)
	logger.Info("Associated volume", "rule", r)
	return res, nil
}

// release clears pv's claimRef, and its association unless a rule that does
// not depend on the claim still holds, in one update guarded by its
// resourceVersion, and records the claim it was released from. With the
// class's reserveFor, the claimRef keeps the claim's namespace and name
// without its UID instead: the PV controller then binds the volume to the
// next claim of that name and to no other, until the reservation ends.
func (c *Controller) release(ctx context.Context, pv *corev1.PersistentVolume) error {
	logger := klog.FromContext(ctx)
	ref := pv.Spec.ClaimRef
	class := c.classOf(pv)
	updated := pv.DeepCopy()
	updated.Spec.ClaimRef = nil
	keptBy, keep := c.policy.keepsAssociation(pv, class)
	if !keep {
		delete(updated.Labels, keys.VolumeManagedBy)
	}
	if updated.Annotations == nil {
		updated.Annotations = map[string]string{}
	}
	now := c.clock.Now()
	updated.Annotations[keys.LastClaim] = ref.Namespace + "/" + ref.Name
	updated.Annotations[keys.ReleasedAt] = now.UTC().Format(time.RFC3339)
	delete(updated.Annotations, keys.ReservedUntil)
	delete(updated.Annotations, keys.HeldForNamespace)
	reserve := c.policy.reservation(class, keep)
	until := now.Add(reserve)
	heldFor := c.policy.heldNamespace(class, keep, ref.Namespace)
	if reserve > 0 || heldFor != "" {
		updated.Spec.ClaimRef = byName(ref.Namespace, ref.Name)
	}
	if reserve > 0 {
		updated.Annotations[keys.ReservedUntil] = until.UTC().Format(keys.ReservedUntilFormat)
	}
	if heldFor != "" {
		updated.Annotations[keys.HeldForNamespace] = heldFor
	}
	res, err := c.client.CoreV1().PersistentVolumes().Update(ctx, updated, metav1.UpdateOptions{})
	if err != nil {
		return c.writeFailed(ctx, pv, errRelease, "release", err)
	}
	c.writes.wrote(pv.Name, pv.ResourceVersion)
	c.metrics.releases.Inc()
	scope := ""
	if heldFor != "" {
		scope = fmt.Sprintf("; only claims of namespace %s may have it (%s: %s)", heldFor, keys.ReuseScope, keys.ReuseScopeNamespace)
	}
	if reserve > 0 {
		c.recorder.Eventf(res, corev1.EventTypeNormal, "Reserved", "Returned to the pool with its data and reserved for the next claim %s/%s until %s: claim %s/%s (UID %s) no longer exists%s",
			ref.Namespace, ref.Name, until.UTC().Format(keys.ReservedUntilFormat), ref.Namespace, ref.Name, ref.UID, scope)
		c.queue.AddAfter(pv.Name, reserve)
	} else {
		c.recorder.Eventf(res, corev1.EventTypeNormal, "Released", "Returned to the pool with its data: claim %s/%s (UID %s) no longer exists%s", ref.Namespace, ref.Name, ref.UID, scope)
	}
	kv := []any{"claim", klog.KRef(ref.Namespace, ref.Name), "claimUID", ref.UID, "associationKept", keep, "reservedFor", reserve, "heldForNamespace", heldFor}
	if keep {
		kv = append(kv, "rule", keptBy)
	}
	logger.Info("Released volume", kv...)
	return nil
}

// endReservation makes a reserved volume an ordinary free member: it clears
// the claimRef by name, or under reuseScope namespace keeps it as the
// volume's hold, unless a claim of that name took the volume meanwhile,
// which the update's resourceVersion would tell.
func (c *Controller) endReservation(ctx context.Context, pv *corev1.PersistentVolume) error {
	ref := pv.Spec.ClaimRef
	_, kept := c.policy.keepsAssociation(pv, c.classOf(pv))
	heldFor := c.policy.heldNamespace(c.classOf(pv), kept, ref.Namespace)
	updated := pv.DeepCopy()
	delete(updated.Annotations, keys.ReservedUntil)
	scope := "any claim"
	if heldFor != "" {
		updated.Annotations[keys.HeldForNamespace] = heldFor
		scope = "any claim of namespace " + heldFor
	} else {
		updated.Spec.ClaimRef = nil
		delete(updated.Annotations, keys.HeldForNamespace)
	}
	res, err := c.client.CoreV1().PersistentVolumes().Update(ctx, updated, metav1.UpdateOptions{})
	if err != nil {
		return c.writeFailed(ctx, pv, errRelease, "end the reservation of", err)
	}
	c.writes.wrote(pv.Name, pv.ResourceVersion)
	c.recorder.Eventf(res, corev1.EventTypeNormal, "ReservationExpired", "The reservation for claim %s/%s ended unused; the volume is free for %s", ref.Namespace, ref.Name, scope)
	klog.FromContext(ctx).Info("Reservation ended", "claim", klog.KRef(ref.Namespace, ref.Name), "heldForNamespace", heldFor)
	return nil
}

// hold keeps a free volume of a namespace-scoped class for claims of ns
// alone, naming its last claim ns/name by namespace and name so that the PV
// controller binds it to no other claim.
func (c *Controller) hold(ctx context.Context, pv *corev1.PersistentVolume, ns, name string) error {
	return c.rescope(ctx, pv, "hold", func(updated *corev1.PersistentVolume) {
		updated.Spec.ClaimRef = byName(ns, name)
		updated.Annotations[keys.HeldForNamespace] = ns
	}, "HeldForNamespace", fmt.Sprintf("Free for any claim of namespace %s only, where it was last bound (StorageClass parameter %s: %s)", ns, keys.ReuseScope, keys.ReuseScopeNamespace))
}

// letGo makes a held volume free for any claim, its class now saying
// reuseScope cluster.
func (c *Controller) letGo(ctx context.Context, pv *corev1.PersistentVolume) error {
	ns, _ := controller.HeldFor(pv)
	return c.rescope(ctx, pv, "let go of", func(updated *corev1.PersistentVolume) {
		updated.Spec.ClaimRef = nil
		delete(updated.Annotations, keys.HeldForNamespace)
	}, "HoldEnded", fmt.Sprintf("Free for any claim, no longer for namespace %s only (StorageClass parameter %s: %s)", ns, keys.ReuseScope, keys.ReuseScopeCluster))
}

// rescope writes change to a free volume and reports it with an event. The
// update carries the version in which the volume was seen free: if a claim
// took it meanwhile, the write fails and nothing is lost.
func (c *Controller) rescope(ctx context.Context, pv *corev1.PersistentVolume, verb string, change func(*corev1.PersistentVolume), reason, msg string) error {
	updated := pv.DeepCopy()
	change(updated)
	res, err := c.client.CoreV1().PersistentVolumes().Update(ctx, updated, metav1.UpdateOptions{})
	if err != nil {
		return c.writeFailed(ctx, pv, errRelease, verb, err)
	}
	c.writes.wrote(pv.Name, pv.ResourceVersion)
	c.recorder.Event(res, corev1.EventTypeNormal, reason, msg)
	klog.FromContext(ctx).Info("Changed the hold of a free volume", "reason", reason, "claimRef", updated.Spec.ClaimRef)
	return nil
}

// byName is a claimRef that names a claim by namespace and name, without
// UID: the PV controller binds the volume to that claim, should it exist,
// and to no other.
func byName(ns, name string) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: ns, Name: name}
}

// writeFailed handles a failed update of pv. A conflict means a newer
// version exists: its event queues the volume again, and a recheck shortly
// after covers a lost event. A volume that is gone needs nothing. Anything
// else is retried with back-off, and reported on the volume when an
// administrator has to act (missing permission, a volume the API rejects).
func (c *Controller) writeFailed(ctx context.Context, pv *corev1.PersistentVolume, reason, verb string, err error) error {
	switch {
	case apierrors.IsConflict(err):
		c.metrics.errors.WithLabelValues(errConflict).Inc()
		klog.FromContext(ctx).V(2).Info("Volume changed meanwhile, deciding again from the newer version", "action", verb)
		c.queue.AddAfter(pv.Name, c.conflictRecheck)
		return nil
	case apierrors.IsNotFound(err):
		return nil
	}
	c.metrics.errors.WithLabelValues(reason).Inc()
	if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) {
		c.warn(pv, reason, "Cannot %s the volume: %v", verb, err)
	}
	return fmt.Errorf("%s volume %s: %w", verb, pv.Name, err)
}

// warn records a Warning event on pv, once per reason and version of it,
// and reports whether it did.
func (c *Controller) warn(pv *corev1.PersistentVolume, reason, format string, args ...any) bool {
	if !c.warned.first(pv.Name, pv.ResourceVersion, reason) {
		return false
	}
	c.recorder.Eventf(pv, corev1.EventTypeWarning, reason, format, args...)
	return true
}

func (c *Controller) oldestReleasedSeconds() float64 {
	objs, err := c.volumeIndex.ByIndex(byReleased, c.policy.controllerID)
	if err != nil {
		return 0
	}
	pvs := make([]*corev1.PersistentVolume, 0, len(objs))
	for _, obj := range objs {
		if pv, ok := obj.(*corev1.PersistentVolume); ok {
			pvs = append(pvs, pv)
		}
	}
	return c.releasedTime.oldest(pvs, c.clock.Now()).Seconds()
}
