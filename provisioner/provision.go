package provisioner

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	volumehelpers "k8s.io/component-helpers/storage/volume"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	lib "sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/reclaimable/reclaimable/internal/keys"
)

// Event reasons, on the claim unless said otherwise.
const (
	reasonInvalidParameters     = "InvalidStorageClassParameters"
	reasonUnsupportedSelector   = "UnsupportedSelector"
	reasonUnsupportedDataSource = "UnsupportedDataSource"
	reasonUnsupportedVolumeMode = "UnsupportedVolumeMode"
	reasonUnsupportedAttributes = "UnsupportedVolumeAttributesClass"
	reasonUnsupportedCapacity   = "UnsupportedCapacity"
	reasonPoolExhausted         = "PoolExhausted"
	reasonIssuedFromPool        = "IssuedFromPool"
)

// Indexes this provisioner adds to the shared PersistentVolume informer.
const (
	indexClass    = "reclaimable-provisioner/class"
	indexClaimUID = "reclaimable-provisioner/claim-uid"
)

// expectationTTL bounds how long the provisioner trusts its own record of a
// write over the informer: far longer than a watch takes to deliver it, and
// longer than the library's retries of a PV create (5 x 10 s).
const expectationTTL = 5 * time.Minute

// provisioner implements the library's Provisioner: it issues pool members,
// grows pools through their backend and deletes what it created.
type provisioner struct {
	name     string
	client   kubernetes.Interface
	volumes  cache.Indexer
	claims   corelisters.PersistentVolumeClaimLister
	recorder record.EventRecorder
	metrics  *metrics
	dirs     directories
	now      func() time.Time

	// requeue hands a claim back to the library's work queue.
	requeue func(*corev1.PersistentVolumeClaim)

	mu sync.Mutex
	// growing serialises growth per class, so that maxVolumes holds with
	// several workers.
	growing map[string]*sync.Mutex
	// pending holds the volumes returned for creation that the informer has
	// not shown yet, so that they count against maxVolumes.
	pending map[string]pendingVolume
	// takes holds, by claim UID, the pool members pointed at a claim that
	// the informer has not shown so yet: until it does, the cache would
	// offer them as free, and the claim as still without a volume.
	takes map[types.UID]take
	// waiting holds, per class, the claims refused because the pool had
	// nothing to give; a volume freed in the class wakes them.
	waiting map[string]map[types.UID]types.NamespacedName
}

type pendingVolume struct {
	class string
	at    time.Time
}

type take struct {
	pv string
	at time.Time
}

func newProvisioner(name string, client kubernetes.Interface, volumes cache.Indexer, claims corelisters.PersistentVolumeClaimLister,
	recorder record.EventRecorder, m *metrics, directoryRoot string) *provisioner {
	return &provisioner{
		name: name, client: client, volumes: volumes, claims: claims, recorder: recorder, metrics: m,
		dirs:    directories{root: directoryRoot},
		now:     time.Now,
		requeue: func(*corev1.PersistentVolumeClaim) {},
		growing: map[string]*sync.Mutex{},
		pending: map[string]pendingVolume{},
		takes:   map[types.UID]take{},
		waiting: map[string]map[types.UID]types.NamespacedName{},
	}
}

var (
	_ lib.Provisioner      = &provisioner{}
	_ lib.Qualifier        = &provisioner{}
	_ lib.BlockProvisioner = &provisioner{}
)

// SupportsBlock is true because a static pool may hold block volumes; the
// directory backend refuses block claims itself.
func (p *provisioner) SupportsBlock(context.Context) bool { return true }

// ShouldProvision skips claims that a pool member already points at: the PV
// controller is about to bind them, and the library would otherwise report
// "Provisioning" again on every update of the claim until it does.
func (p *provisioner) ShouldProvision(_ context.Context, claim *corev1.PersistentVolumeClaim) bool {
	return p.issuedTo(claim) == ""
}

// Provision gives claim a volume: a pool member if one fits, else a new one.
//
// A pool member is taken by writing the claim into its claimRef, which is all
// the PV controller needs to bind them. There is nothing left for the library
// to create, so Provision then returns IgnoredError: the library stops
// working on the claim without a PV create that could only fail with
// AlreadyExists.
func (p *provisioner) Provision(ctx context.Context, opts lib.ProvisionOptions) (_ *corev1.PersistentVolume, _ lib.ProvisioningState, err error) {
	claim, class := opts.PVC, opts.StorageClass
	logger := klog.FromContext(ctx).WithValues("claim", klog.KObj(claim), "class", class.Name)
	ctx = klog.NewContext(ctx, logger)

	if pv := p.issuedTo(claim); pv != "" {
		return nil, lib.ProvisioningFinished, &lib.IgnoredError{Reason: fmt.Sprintf("volume %s is already issued to the claim", pv)}
	}
	params, err := parseParameters(class, p.dirs.root)
	if err != nil {
		return p.refuse(claim, reasonInvalidParameters, fmt.Errorf("StorageClass %s: %w", class.Name, err))
	}
	if claim.Spec.DataSource != nil || claim.Spec.DataSourceRef != nil {
		return p.refuse(claim, reasonUnsupportedDataSource, errors.New("a claim of this class cannot be populated from a data source; its volume comes from a pool or is created empty"))
	}
	allowed := params.selectorKeys.Clone()
	if params.backend == backendStatic {
		allowed.Insert(PoolLabel)
	}
	selector, err := claimSelector(claim, allowed)
	if err != nil {
		return p.refuse(claim, reasonUnsupportedSelector, err)
	}

	// Wait for a volume of the class to be freed from before the pool is
	// looked at, so that no freeing goes unnoticed; stop unless exhausted.
	p.startWaiting(class.Name, claim)
	defer func() {
		if !errors.Is(err, errExhausted) {
			p.stopWaiting(class.Name, claim.UID)
		}
	}()

	cands, state := candidates(p.members(class.Name, params.backend), claim, opts.SelectedNode, selector)
	stale := p.staleTakes()
	for _, pv := range cands {
		if stale[pv.Name] {
			continue
		}
		last := lastClaim(pv)
		result, err := p.take(ctx, pv, claim, func(live *corev1.PersistentVolume) bool {
			return misfit(live, claim, opts.SelectedNode, selector) == ""
		})
		if err != nil {
			return nil, lib.ProvisioningFinished, err
		}
		switch result {
		case lost:
			continue
		case boundMeanwhile:
			return nil, lib.ProvisioningFinished, &lib.IgnoredError{Reason: fmt.Sprintf("the PV controller bound volume %s to the claim", pv.Name)}
		}
		p.metrics.issued.WithLabelValues(class.Name).Inc()
		p.recorder.Eventf(claim, corev1.EventTypeNormal, reasonIssuedFromPool,
			"Volume %s issued from the pool of class %s with the data of its last use (%s)", pv.Name, class.Name, describeLastUse(last, claim))
		logger.V(2).Info("Issued a pool volume", "pv", pv.Name, "lastClaim", last)
		return nil, lib.ProvisioningFinished, &lib.IgnoredError{Reason: fmt.Sprintf("volume %s was issued from the pool; the PV controller binds it", pv.Name)}
	}

	if params.backend == backendStatic {
		if opts.SelectedNode != nil && state.unfit["node"] > 0 {
			// A free volume exists elsewhere: let the scheduler pick another node.
			return nil, lib.ProvisioningReschedule, fmt.Errorf("no free volume of the static pool of class %s is reachable from node %s (%s)", class.Name, opts.SelectedNode.Name, state)
		}
		return p.exhausted(claim, class, fmt.Sprintf("the static pool of class %s has no free volume that fits: %s; label more PersistentVolumes of the class with %s=%s, or free one",
			class.Name, state, PoolLabel, class.Name))
	}
	return p.grow(ctx, opts, params, selector, state)
}

// outcome is what became of an attempt to take a pool member.
type outcome int

const (
	// lost: the member is not free for the claim (any more); try the next.
	lost outcome = iota
	// taken: the member now points at the claim.
	taken
	// boundMeanwhile: the PV controller bound the claim to the member first,
	// as it does with Available volumes.
	boundMeanwhile
)

// take points pv at claim, if pv is still free and fits (fits re-checks a
// fresher copy). Two claims never win the same member: the update carries
// the resourceVersion the member had when it was judged free.
func (p *provisioner) take(ctx context.Context, pv *corev1.PersistentVolume, claim *corev1.PersistentVolumeClaim, fits func(*corev1.PersistentVolume) bool) (outcome, error) {
	logger := klog.FromContext(ctx)
	for retried := false; ; retried = true {
		if gone, err := p.claimGone(ctx, pv); err != nil || !gone {
			return lost, err
		}
		// Bind as the PV controller would, including its bound-by-controller
		// mark: should the claim end up bound to another volume anyway, the
		// PV controller then returns this one to the pool rather than keeping
		// it reserved for the claim's name.
		updated, _, err := volumehelpers.GetBindVolumeToClaim(pv, claim)
		if err != nil {
			return lost, err
		}
		metav1.SetMetaDataAnnotation(&updated.ObjectMeta, keys.LastClaim, claimKey(claim))
		metav1.SetMetaDataAnnotation(&updated.ObjectMeta, annIssuedAt, p.now().UTC().Format(time.RFC3339))
		_, err = p.client.CoreV1().PersistentVolumes().Update(ctx, updated, metav1.UpdateOptions{})
		switch {
		case err == nil:
			p.expectTake(claim.UID, pv.Name)
			return taken, nil
		case apierrors.IsNotFound(err):
			return lost, nil
		case !apierrors.IsConflict(err):
			return lost, fmt.Errorf("issuing volume %s: %w", pv.Name, err)
		}
		p.metrics.conflicts.WithLabelValues(volumehelpers.GetPersistentVolumeClass(pv)).Inc()

		// Someone changed the member first: the PV controller binding this
		// very claim to it, another claim taking it, or just a status update.
		live, err := p.client.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return lost, nil
		case err != nil:
			return lost, fmt.Errorf("reading volume %s: %w", pv.Name, err)
		case live.Spec.ClaimRef != nil && live.Spec.ClaimRef.UID == claim.UID:
			p.expectTake(claim.UID, pv.Name)
			return boundMeanwhile, nil
		case retried || availabilityOf(live, claim) == inUse || !fits(live):
			logger.V(2).Info("Pool volume taken meanwhile, trying the next", "pv", pv.Name)
			return lost, nil
		}
		pv = live
	}
}

// claimGone reports whether the claim a Released volume names is gone, which
// only the API server can say for sure; the cache can only say it is not.
func (p *provisioner) claimGone(ctx context.Context, pv *corev1.PersistentVolume) (bool, error) {
	ref := pv.Spec.ClaimRef
	if ref == nil || ref.UID == "" {
		return true, nil
	}
	if c, err := p.claims.PersistentVolumeClaims(ref.Namespace).Get(ref.Name); err == nil && c.UID == ref.UID {
		return false, nil
	}
	live, err := p.client.CoreV1().PersistentVolumeClaims(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("checking whether claim %s/%s of volume %s still exists: %w", ref.Namespace, ref.Name, pv.Name, err)
	}
	return live.UID != ref.UID, nil
}

// grow creates a new volume for claim with the directory backend.
func (p *provisioner) grow(ctx context.Context, opts lib.ProvisionOptions, params *params, selector labels.Selector, state poolState) (*corev1.PersistentVolume, lib.ProvisioningState, error) {
	claim, class := opts.PVC, opts.StorageClass
	if volumehelpers.CheckVolumeModeMismatches(&claim.Spec, &corev1.PersistentVolumeSpec{}) {
		return p.refuse(claim, reasonUnsupportedVolumeMode, errors.New("the directory backend makes filesystem volumes only, and no free block volume fits"))
	}
	if ptr.Deref(claim.Spec.VolumeAttributesClassName, "") != "" {
		return p.refuse(claim, reasonUnsupportedAttributes, errors.New("the directory backend has no volume attributes classes, and no free volume of that class fits"))
	}
	// A size beyond what a byte count holds is no real request (and would
	// overflow the consumers' arithmetic); a class may set a lower bound.
	request := claim.Spec.Resources.Requests[corev1.ResourceStorage]
	if request.CmpInt64(math.MaxInt64) >= 0 { // Quantity saturates at the largest int64
		return p.refuse(claim, reasonUnsupportedCapacity, fmt.Errorf("the claim requests %s, at least 8 EiB, more than any volume holds", request.String()))
	}
	if max := params.maxCapacity; max != nil && request.Cmp(*max) > 0 {
		return p.refuse(claim, reasonUnsupportedCapacity, fmt.Errorf("the claim requests %s; new volumes of class %s hold at most %s (parameter %s)", request.String(), class.Name, max.String(), paramMaxCapacity))
	}
	volumeLabels, err := labelsFor(selector)
	if err != nil {
		return p.refuse(claim, reasonUnsupportedSelector, err)
	}
	affinity := nodeAffinity(class)
	if node := opts.SelectedNode; node != nil && affinity != nil {
		if ok, err := corev1helpers.MatchNodeSelectorTerms(node, affinity.Required); err != nil || !ok {
			return nil, lib.ProvisioningReschedule, fmt.Errorf("node %s is outside the allowedTopologies of class %s", node.Name, class.Name)
		}
	}

	count, ok := p.reserve(class.Name, opts.PVName, params.maxVolumes)
	if !ok {
		return p.exhausted(claim, class, fmt.Sprintf("class %s has %d of at most %d volumes (%s=%d) and its pool has nothing that fits: %s; free a volume or raise %s",
			class.Name, count, params.maxVolumes, paramMaxVolumes, params.maxVolumes, state, paramMaxVolumes))
	}
	if err := p.dirs.create(params.baseDir, opts.PVName, params.directoryMode); err != nil {
		p.unreserve(opts.PVName)
		return nil, lib.ProvisioningFinished, err
	}

	policy := corev1.PersistentVolumeReclaimRetain
	if class.ReclaimPolicy != nil {
		policy = *class.ReclaimPolicy
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{
			Name:   opts.PVName,
			Labels: volumeLabels,
			Annotations: map[string]string{
				annBackend:     backendDirectory,
				annBaseDir:     params.baseDir,
				annDirectory:   opts.PVName,
				keys.LastClaim: claimKey(claim),
				annIssuedAt:    p.now().UTC().Format(time.RFC3339),
				// See take: a volume whose claim got bound elsewhere
				// returns to the pool.
				volumehelpers.AnnBoundByController: "yes",
			},
		},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: claim.Spec.Resources.Requests[corev1.ResourceStorage]},
			AccessModes:                   claim.Spec.AccessModes,
			VolumeMode:                    ptr.To(corev1.PersistentVolumeFilesystem),
			PersistentVolumeReclaimPolicy: policy,
			StorageClassName:              class.Name,
			MountOptions:                  class.MountOptions,
			NodeAffinity:                  affinity,
			PersistentVolumeSource:        params.volumeSource(opts.PVName),
		},
	}
	p.metrics.created.WithLabelValues(class.Name).Inc()
	klog.FromContext(ctx).V(2).Info("Created a volume", "pv", pv.Name, "baseDir", params.baseDir, "volumes", count+1)
	return pv, lib.ProvisioningFinished, nil
}

// Delete removes the directory of a volume this provisioner created with
// reclaim policy Delete. Anything else is left alone: the library then keeps
// the PV too.
func (p *provisioner) Delete(ctx context.Context, pv *corev1.PersistentVolume) error {
	p.unreserve(pv.Name)
	if pv.Annotations[keys.ProvisionedBy] != p.name || pv.Annotations[annBackend] != backendDirectory {
		return &lib.IgnoredError{Reason: "the volume was not created by the directory backend of this provisioner"}
	}
	if pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete {
		return &lib.IgnoredError{Reason: "the volume's reclaim policy is not Delete, its data is kept"}
	}
	name, baseDir := pv.Annotations[annDirectory], pv.Annotations[annBaseDir]
	if name != pv.Name || sourceDirName(pv) != name {
		return fmt.Errorf("refusing to delete the data of volume %s: its %s annotation %q does not name the directory its source points at", pv.Name, annDirectory, name)
	}
	if err := p.dirs.remove(baseDir, name); err != nil {
		return err
	}
	klog.FromContext(ctx).V(2).Info("Deleted the directory of a volume", "pv", pv.Name, "baseDir", baseDir)
	return nil
}

// describeLastUse says who used a volume last, naming the claim only if it
// was in the same namespace: claim names of other namespaces are not for
// this one to read.
func describeLastUse(last string, claim *corev1.PersistentVolumeClaim) string {
	switch {
	case last == "":
		return "never used"
	case strings.HasPrefix(last, claim.Namespace+"/"):
		return "claim " + strings.TrimPrefix(last, claim.Namespace+"/")
	}
	return "a claim of another namespace"
}

// refuse reports a problem the claim or its class must fix, on the claim.
func (p *provisioner) refuse(claim *corev1.PersistentVolumeClaim, reason string, err error) (*corev1.PersistentVolume, lib.ProvisioningState, error) {
	p.recorder.Event(claim, corev1.EventTypeWarning, reason, err.Error())
	return nil, lib.ProvisioningFinished, err
}

// errExhausted marks a refusal that waits for a volume to be freed.
var errExhausted = errors.New("pool exhausted")

// exhausted reports that the pool of class has nothing for claim and cannot
// grow; the claim stays among those woken when a volume of the class is freed.
func (p *provisioner) exhausted(claim *corev1.PersistentVolumeClaim, class *storagev1.StorageClass, msg string) (*corev1.PersistentVolume, lib.ProvisioningState, error) {
	p.metrics.exhausted.WithLabelValues(class.Name).Inc()
	p.recorder.Event(claim, corev1.EventTypeWarning, reasonPoolExhausted, msg)
	return nil, lib.ProvisioningFinished, fmt.Errorf("%w: %s", errExhausted, msg)
}

func (p *provisioner) startWaiting(class string, claim *corev1.PersistentVolumeClaim) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.waiting[class] == nil {
		p.waiting[class] = map[types.UID]types.NamespacedName{}
	}
	p.waiting[class][claim.UID] = types.NamespacedName{Namespace: claim.Namespace, Name: claim.Name}
}

func (p *provisioner) stopWaiting(class string, uid types.UID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.waiting[class], uid)
}

// wake hands the claims waiting for class back to the library, which calls
// Provision for them at once instead of after its back-off.
func (p *provisioner) wake(class string) {
	p.mu.Lock()
	var wake []*corev1.PersistentVolumeClaim
	for uid, key := range p.waiting[class] {
		c, err := p.claims.PersistentVolumeClaims(key.Namespace).Get(key.Name)
		if err != nil || c.UID != uid || c.Spec.VolumeName != "" {
			delete(p.waiting[class], uid)
			continue
		}
		wake = append(wake, c)
	}
	p.mu.Unlock()
	for _, c := range wake {
		p.requeue(c)
	}
}

// members lists the pool of class.
func (p *provisioner) members(class, backend string) []*corev1.PersistentVolume {
	objs, _ := p.volumes.ByIndex(indexClass, class)
	out := make([]*corev1.PersistentVolume, 0, len(objs))
	for _, o := range objs {
		if pv, ok := o.(*corev1.PersistentVolume); ok && isMember(pv, class, backend, p.name) {
			out = append(out, pv)
		}
	}
	return out
}

// issuedTo names the volume already pointing at claim, if any, trusting the
// provisioner's own recent takes over a cache that has not caught up.
func (p *provisioner) issuedTo(claim *corev1.PersistentVolumeClaim) string {
	if objs, _ := p.volumes.ByIndex(indexClaimUID, string(claim.UID)); len(objs) > 0 {
		return objs[0].(*corev1.PersistentVolume).Name
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.expireTakes()
	return p.takes[claim.UID].pv
}

// staleTakes names the members taken whose new state the cache does not show
// yet; trying them again could only fail.
func (p *provisioner) staleTakes() map[string]bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.expireTakes()
	stale := map[string]bool{}
	for _, t := range p.takes {
		stale[t.pv] = true
	}
	return stale
}

func (p *provisioner) expectTake(claim types.UID, pv string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.takes[claim] = take{pv: pv, at: p.now()}
}

// observe drops the expectation the cache now meets: pv points at its claim.
func (p *provisioner) observe(pv *corev1.PersistentVolume) {
	if pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if t, ok := p.takes[pv.Spec.ClaimRef.UID]; ok && t.pv == pv.Name {
		delete(p.takes, pv.Spec.ClaimRef.UID)
	}
}

// expireTakes forgets takes the cache never showed (the volume was deleted,
// say). Callers hold p.mu.
func (p *provisioner) expireTakes() {
	for uid, t := range p.takes {
		if p.now().Sub(t.at) > expectationTTL {
			delete(p.takes, uid)
		}
	}
}

// reserve counts the volumes of class this provisioner created, including the
// ones on their way, and holds a place for name unless that would exceed max
// (0: no limit). A retry for a name already counted always gets its place back.
func (p *provisioner) reserve(class, name string, max int) (count int, ok bool) {
	p.mu.Lock()
	lock, found := p.growing[class]
	if !found {
		lock = &sync.Mutex{}
		p.growing[class] = lock
	}
	p.mu.Unlock()
	lock.Lock()
	defer lock.Unlock()

	names := map[string]bool{}
	objs, _ := p.volumes.ByIndex(indexClass, class)
	for _, o := range objs {
		if pv := o.(*corev1.PersistentVolume); pv.Annotations[keys.ProvisionedBy] == p.name {
			names[pv.Name] = true
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for n, v := range p.pending {
		switch {
		case names[n] || p.now().Sub(v.at) > expectationTTL:
			delete(p.pending, n)
		case v.class == class:
			names[n] = true
		}
	}
	if names[name] {
		return len(names) - 1, true
	}
	if max > 0 && len(names) >= max {
		return len(names), false
	}
	p.pending[name] = pendingVolume{class: class, at: p.now()}
	return len(names), true
}

func (p *provisioner) unreserve(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.pending, name)
}

// onVolume wakes the claims waiting for a class when one of its volumes is
// freed or deleted, or a free one joins.
func (p *provisioner) onVolume(old, cur *corev1.PersistentVolume) {
	if cur != nil {
		p.observe(cur)
	}
	switch {
	case cur == nil:
		p.wake(volumehelpers.GetPersistentVolumeClass(old))
	case isFreed(cur) && (old == nil || !isFreed(old) || old.Labels[PoolLabel] != cur.Labels[PoolLabel]):
		p.wake(volumehelpers.GetPersistentVolumeClass(cur))
	}
}

// isFreed reports whether pv no longer serves a claim.
func isFreed(pv *corev1.PersistentVolume) bool {
	if pv.DeletionTimestamp != nil || pv.Status.Phase == corev1.VolumeFailed {
		return false
	}
	return pv.Spec.ClaimRef == nil || pv.Status.Phase == corev1.VolumeReleased
}

// Index functions for the PersistentVolume informer.

func indexByClass(obj any) ([]string, error) {
	pv, ok := obj.(*corev1.PersistentVolume)
	if !ok {
		return nil, nil
	}
	if class := volumehelpers.GetPersistentVolumeClass(pv); class != "" {
		return []string{class}, nil
	}
	return nil, nil
}

func indexByClaimUID(obj any) ([]string, error) {
	pv, ok := obj.(*corev1.PersistentVolume)
	if !ok || pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID == "" {
		return nil, nil
	}
	return []string{string(pv.Spec.ClaimRef.UID)}, nil
}

// claimKey is "<namespace>/<name>", as keys.LastClaim records it.
func claimKey(claim *corev1.PersistentVolumeClaim) string {
	return claim.Namespace + "/" + claim.Name
}
