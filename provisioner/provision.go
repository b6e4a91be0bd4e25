package provisioner

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	lib "sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/reclaimable/reclaimable/internal/controller"
	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/internal/wellknown"
	"github.com/reclaimable/reclaimable/provisioner/backend"
	"github.com/reclaimable/reclaimable/provisioner/classpool"
	"github.com/reclaimable/reclaimable/provisioner/evict"
	"github.com/reclaimable/reclaimable/provisioner/lifecycle"
	"github.com/reclaimable/reclaimable/provisioner/match"
	"github.com/reclaimable/reclaimable/provisioner/memory"
)

// Event reasons, on the claim unless said otherwise.
const (
	reasonInvalidParameters     = "InvalidStorageClassParameters"
	reasonUnsupportedSelector   = "UnsupportedSelector"
	reasonUnsupportedDataSource = "UnsupportedDataSource"
	reasonUnsupportedAttributes = "UnsupportedVolumeAttributesClass"
	reasonUnsupportedCapacity   = "UnsupportedCapacity"
	reasonPoolExhausted         = "PoolExhausted"
	// reasonOtherNamespaces: exhausted, with free volumes held for other
	// namespaces (reuseScope namespace).
	reasonOtherNamespaces = "FreeVolumesInOtherNamespaces"
	reasonIssuedFromPool  = "IssuedFromPool"
	// reasonScrubbingToShare: exhausted, and a volume held for another
	// namespace is being emptied for the claim (scrubAcrossNamespaces).
	reasonScrubbingToShare = "ScrubbingToShare"
	// reasonEvictingForClaim: at the maximum, a member is being removed
	// for the claim (evictForClaims).
	reasonEvictingForClaim = "EvictingForClaim"
	// reasonAwaitingItsVolume: the claim waits for its volume, still bound
	// to the earlier claim of its name.
	reasonAwaitingItsVolume = "AwaitingItsVolume"
	// reasonProvisioningFailed is the library's reason, for failures
	// without one of their own.
	reasonProvisioningFailed = "ProvisioningFailed"
)

// provisioner implements the library's Provisioner: it issues pool members,
// grows pools through their backend and deletes what it created.
type provisioner struct {
	name string
	// controllerID labels the volumes it creates as this installation's
	// (wellknown.VolumeManagedBy) from the start: the releaser would otherwise
	// write the label, and an event, at their first binding.
	controllerID string
	client       kubernetes.Interface
	volumes      cache.Indexer
	// issued finds the volume whose claimRef names a claim's UID: one, or
	// none.
	issued *controller.Refs[types.UID]
	// pools holds the VolumePools, whose settings override their class's
	// parameters.
	pools  cache.Indexer
	claims corelisters.PersistentVolumeClaimLister
	// nodes are where members of node-local classes are made ahead; nil
	// without a node cache.
	nodes    corelisters.NodeLister
	recorder record.EventRecorder
	metrics  *metrics
	// backends by the name a class gives them, built with backendDeps.
	backends    map[string]backend.Backend
	backendDeps backend.Deps
	clock       clock.PassiveClock
	// aheadBound is how long a member made ahead may wait for its storage
	// before it is removed: three lifecycle pods' time.
	aheadBound time.Duration

	// lifecycle follows the local backend's lifecycle pods; it runs while
	// the provisioner does.
	lifecycle *lifecycle.Events

	// requeue hands a claim back to the library's work queue.
	requeue func(*corev1.PersistentVolumeClaim)
	// onWaitingChange tells the pool manager that a claim of the class
	// started or stopped waiting for its pool.
	onWaitingChange func(class string)

	// measurer knows what members of directory classes held when they came
	// back to the pool; nil until the controller is built.
	measurer *evict.Measurer

	// What the provisioner remembers between calls (package memory).
	takes   *memory.Takes
	pending *memory.Pending
	// claimLocks has one worker at a time act on a claim: the library's
	// and the early hand-off's.
	claimLocks *memory.Locks[types.UID]
	// shareLocks has one worker at a time decide for the claims of one
	// namespace in one class, where maxVolumesPerNamespace bounds it.
	shareLocks *memory.Locks[share]
	waiting    *memory.Waiting
	// atShare holds, by class, the claims that wait with their namespace
	// at maxVolumesPerNamespace: a member freed in the class wakes them
	// too, but the pool is not exhausted for them.
	atShare *memory.Waiting
	// returns holds, by volume, the claims that wait for it to be released
	// by the earlier claim of their name.
	returns *memory.Waiting
	// classes are the class backend's pools, which grow through backing
	// claims; nil until useBackingClaims.
	classes *classpool.Pools
	// after runs f after d, as time.AfterFunc does.
	after func(d time.Duration, f func())
}

func newProvisioner(name string, client kubernetes.Interface, volumes cache.Indexer, claims corelisters.PersistentVolumeClaimLister,
	recorder record.EventRecorder, m *metrics, cfg Config) *provisioner {
	lifecycle := lifecycle.NewEvents(client, cfg.LifecycleNamespace)
	p := &provisioner{
		pools:  pools.NoPools(),
		issued: controller.NewRefs(volumeClaimUID),
		name:   name, client: client, volumes: volumes, claims: claims, recorder: recorder, metrics: m,
		lifecycle:       lifecycle,
		backendDeps:     backendDeps(name, client, nil, cfg, lifecycle, m.lifecycle),
		requeue:         func(*corev1.PersistentVolumeClaim) {},
		onWaitingChange: func(string) {},
		waiting:         memory.NewWaiting(),
		atShare:         memory.NewWaiting(),
		returns:         memory.NewWaiting(),
		claimLocks:      memory.NewLocks[types.UID](),
		shareLocks:      memory.NewLocks[share](),
		after:           func(d time.Duration, f func()) { time.AfterFunc(d, f) },
		aheadBound:      3 * cfg.LifecycleTimeout,
	}
	p.backends = backend.New(p.backendDeps)
	p.useClock(clock.RealClock{})
	m.members.collect = func(sample func(int, ...string)) {
		for k, n := range p.memberStates() {
			sample(n, k[0], k[1], k[2])
		}
	}
	m.waiting.collect = func(sample func(int, ...string)) {
		for _, class := range p.waiting.Classes() {
			sample(p.Waiting(class), class)
		}
	}
	return p
}

// useClock builds the memories that tell time on clk. The class pools
// share them and the clock: it comes before useBackingClaims (the tests'
// fixture.useClock builds the class pools again).
func (p *provisioner) useClock(clk clock.PassiveClock) {
	p.clock = clk
	p.takes = memory.NewTakes(clk)
	p.pending = memory.NewPending(clk)
}

var (
	_ lib.Provisioner      = &provisioner{}
	_ lib.Qualifier        = &provisioner{}
	_ lib.BlockProvisioner = &provisioner{}
)

// SupportsBlock is true because a static pool may hold block volumes; a
// backend that makes filesystem volumes only refuses block claims itself.
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
func (p *provisioner) Provision(ctx context.Context, opts lib.ProvisionOptions) (*corev1.PersistentVolume, lib.ProvisioningState, error) {
	pv, state, err := p.provision(ctx, opts)
	var ignored *lib.IgnoredError
	var reported reportedError
	if err != nil && !errors.As(err, &ignored) && !errors.As(err, &reported) {
		// What the library would have said (see libevents.go).
		p.recorder.Event(opts.PVC, corev1.EventTypeWarning, reasonProvisioningFailed,
			fmt.Sprintf("%s%q: %v", libFailurePrefix, opts.StorageClass.Name, err))
	}
	return pv, state, err
}

func (p *provisioner) provision(ctx context.Context, opts lib.ProvisionOptions) (_ *corev1.PersistentVolume, _ lib.ProvisioningState, err error) {
	claim, class := opts.PVC, pools.EffectiveClass(opts.StorageClass, pools.PoolOf(p.pools, opts.StorageClass.Name))
	logger := klog.FromContext(ctx).WithValues("claim", klog.KObj(claim), "class", class.Name)
	ctx = klog.NewContext(ctx, logger)

	// One claim at a time: the early hand-off (early.go) may be at it.
	defer p.claimLocks.Lock(claim.UID)()
	if pv := p.issuedTo(claim); pv != "" {
		return nil, lib.ProvisioningFinished, &lib.IgnoredError{Reason: fmt.Sprintf("volume %s is already issued to the claim", pv)}
	}
	params, err := backend.ParseParameters(class, p.backends)
	if err != nil {
		return p.refuse(claim, reasonInvalidParameters, fmt.Errorf("StorageClass %s: %w", class.Name, err))
	}
	if pool := pools.PoolOf(p.pools, class.Name); pool != nil {
		params.EvictForClaims = pool.Spec.EvictForClaims
	}
	if claim.Spec.DataSource != nil || claim.Spec.DataSourceRef != nil {
		return p.refuse(claim, reasonUnsupportedDataSource, errors.New("a claim of this class cannot be populated from a data source; its volume comes from a pool or is created empty"))
	}
	allowed := params.SelectorKeys.Clone().Insert(params.Pool.SelectorKeys()...)
	selector, err := match.ClaimSelector(claim, allowed)
	if err != nil {
		return p.refuse(claim, reasonUnsupportedSelector, err)
	}

	// Wait for a volume of the class to be freed from before the pool is
	// looked at, so that no freeing goes unnoticed.
	waited := p.startWaiting(class.Name, claim)
	defer func() { waited(err) }()

	// Under maxVolumesPerNamespace, one worker at a time decides for the
	// namespace, until the member or the new volume's place is recorded.
	unlockShare, shareNow, atMax := p.lockShare(class.Name, params, claim)
	unlockShare = sync.OnceFunc(unlockShare)
	defer unlockShare()

	key, cands, state, err := p.lookAtPool(ctx, claim, class.Name, params, opts.SelectedNode, selector)
	if err != nil {
		return nil, lib.ProvisioningFinished, err
	}
	if atMax {
		// Only a member its namespace has already: no other share changes.
		cands = withinShare(cands, claim.Namespace)
		state.Crossable, state.AtShare = nil, shareNow
	}
	if pv := state.Returning; pv != nil {
		if left := returnWait - p.clock.Since(claim.CreationTimestamp.Time); left > 0 {
			return p.awaitReturn(claim, pv, left)
		}
	}
	pv, result, err := p.issueFromPool(ctx, claim, key, class.Name, params.Namespaced, cands, func(live *corev1.PersistentVolume) bool {
		return match.Misfit(live, claim, opts.SelectedNode, selector) == "" && (!params.KeyRequired || match.KeyFits(live, key))
	})
	switch {
	case err != nil:
		return nil, lib.ProvisioningFinished, err
	case result == boundMeanwhile:
		return nil, lib.ProvisioningFinished, &lib.IgnoredError{Reason: fmt.Sprintf("the PV controller bound volume %s to the claim", pv)}
	case result == taken:
		p.countFirstConsumer(class.Name, opts.SelectedNode, state, true)
		return nil, lib.ProvisioningFinished, &lib.IgnoredError{Reason: fmt.Sprintf("volume %s was issued from the pool; the PV controller binds it", pv)}
	}

	return p.growOrWait(ctx, opts, class, params, selector, state, key, unlockShare)
}

// growOrWait decides for a claim that no member of the pool was issued to:
// a new volume, through the class's backend or its backing class (placed
// once its place is held), or a wait at the pool's or its namespace's
// maximum. class is the claim's class as its pool makes it.
func (p *provisioner) growOrWait(ctx context.Context, opts lib.ProvisionOptions, class *storagev1.StorageClass, params *backend.Params, selector labels.Selector, state match.State, key string, placed func()) (*corev1.PersistentVolume, lib.ProvisioningState, error) {
	claim := opts.PVC
	if state.AtShare > 0 && !params.EvictForClaims {
		return p.namespaceAtMaximum(claim, class, params, state.AtShare, state)
	}
	// With evictForClaims, growth checks the claim as for any new volume
	// before admit evicts a member of the share for it (evictWithinShare).
	if backing := params.Pool.BackingClass(); backing != nil {
		return p.growThrough(ctx, opts, params, backing, selector, state, key, placed)
	}
	maker, advice := params.Pool.Maker()
	if maker == nil {
		if state.AtShare > 0 {
			return p.namespaceAtMaximum(claim, class, params, state.AtShare, state)
		}
		if opts.SelectedNode != nil && state.Unfit["node"] > 0 {
			// A free volume exists elsewhere: let the scheduler pick another node.
			return nil, lib.ProvisioningReschedule, fmt.Errorf("no free volume of the %s pool of class %s is reachable from node %s (%s)", params.Backend, class.Name, opts.SelectedNode.Name, state)
		}
		return p.exhausted(ctx, claim, class, state, fmt.Sprintf("the %s pool of class %s has no free volume that fits: %s; %s", params.Backend, class.Name, state, advice))
	}
	return p.grow(ctx, opts, params, maker, selector, state, key, placed)
}

// startWaiting records claim as waiting for a volume of class to be
// freed, and returns what ends the attempt: given its error, it keeps the
// claim among those that wait for what the error says (a full pool, its
// namespace's share, its own volume) and forgets it everywhere else.
func (p *provisioner) startWaiting(class string, claim *corev1.PersistentVolumeClaim) func(error) {
	was := p.waiting.Add(class, claim)
	return func(err error) {
		if !errors.Is(err, errAwaitingReturn) {
			p.returns.Forget(claim.UID)
		}
		if errors.Is(err, errAtShare) {
			p.atShare.Add(class, claim)
		} else {
			p.atShare.Remove(class, claim.UID)
		}
		if errors.Is(err, errExhausted) {
			return
		}
		p.waiting.Remove(class, claim.UID)
		if was {
			p.onWaitingChange(class) // it waits no more
		}
	}
}

// lookAtPool returns claim's cache key, the members of class it may take,
// best first, and the state of the pool.
func (p *provisioner) lookAtPool(ctx context.Context, claim *corev1.PersistentVolumeClaim, class string, params *backend.Params, node *corev1.Node, selector labels.Selector) (string, []*corev1.PersistentVolume, match.State, error) {
	key, err := p.keyOf(ctx, claim, params.KeyLabel)
	if err != nil {
		return "", nil, match.State{}, err
	}
	members := p.members(class, params.Pool)
	cands, state := match.Candidates(members, claim, key, match.RulesOf(params), node, selector)
	if params.Namespaced && params.ScrubAcross && state.OtherNamespace > 0 {
		state.Crossable = match.Crossable(members, claim, node, selector)
	}
	return key, cands, state, nil
}

// members lists the pool of class.
func (p *provisioner) members(class string, pool backend.Class) []*corev1.PersistentVolume {
	objs, _ := p.volumes.ByIndex(pools.VolumesByClass, class)
	out := make([]*corev1.PersistentVolume, 0, len(objs))
	for _, o := range objs {
		if pv, ok := o.(*corev1.PersistentVolume); ok && match.IsMember(pv, class, pool) {
			out = append(out, pv)
		}
	}
	return out
}

// Index functions for the PersistentVolume informer.

// volumeClaimUID is the UID of the claim a volume's claimRef names.
func volumeClaimUID(obj any) []types.UID {
	pv, ok := obj.(*corev1.PersistentVolume)
	if !ok || pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID == "" {
		return nil
	}
	return []types.UID{pv.Spec.ClaimRef.UID}
}

// isPoolVolume reports whether pv may be a member of one of this
// provisioner's pools (pools.MayBeMember): the metrics need no more.
func (p *provisioner) isPoolVolume(pv *corev1.PersistentVolume) bool {
	return pools.MayBeMember(pv, p.name)
}

// memberStates counts the pool volumes in the cache by class, state and
// the namespace a free one is held for.
func (p *provisioner) memberStates() map[[3]string]int {
	out := map[[3]string]int{}
	for _, class := range p.volumes.ListIndexFuncValues(pools.VolumesByClass) {
		objs, _ := p.volumes.ByIndex(pools.VolumesByClass, class)
		for _, o := range objs {
			if pv, ok := o.(*corev1.PersistentVolume); ok && p.isPoolVolume(pv) {
				state, ns := match.MemberState(pv)
				out[[3]string{class, state, ns}]++
			}
		}
	}
	return out
}

// Members lists the pool of class, a class of this provisioner as its
// VolumePool makes it, or says why the class is refused: what its claims
// are told with InvalidStorageClassParameters.
func (p *provisioner) Members(class *storagev1.StorageClass) ([]*corev1.PersistentVolume, error) {
	params, err := backend.ParseParameters(class, p.backends)
	if err != nil {
		return nil, err
	}
	return p.members(class.Name, params.Pool), nil
}

// markForScrub hands pv, as the cache showed it, to the scrubber: a
// Conflict when it changed since.
func (p *provisioner) markForScrub(ctx context.Context, pv *corev1.PersistentVolume) error {
	updated := pv.DeepCopy()
	if updated.Annotations == nil {
		updated.Annotations = map[string]string{}
	}
	updated.Annotations[wellknown.Scrub] = wellknown.ScrubRequested
	_, err := p.client.CoreV1().PersistentVolumes().Update(ctx, updated, metav1.UpdateOptions{})
	return err
}
