package provisioner

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/types"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/klog/v2"

	"github.com/reclaimable/reclaimable/internal/controller"
	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/provisioner/backend"
	"github.com/reclaimable/reclaimable/provisioner/match"
)

// The early hand-off. The library provisions a claim once the PV controller
// has found no volume to bind it to and marked it for this provisioner: a
// sync of the PV controller, a write of the claim and a turn of the
// library's queue before a pool member is taken. Most pool hits need none
// of that: the member is held or reserved by name for a claim of another
// name, or Released, which the PV controller never binds to a new claim by
// itself. Such a member is taken as soon as the claim is seen; the library
// then finds the claim served (ShouldProvision). Any claim the early
// hand-off leaves, or fails for, takes the library's way, which reports
// what went wrong: the early one is silent.

// earlyHandOff follows the claims the provisioner sees created.
type earlyHandOff struct {
	p       *provisioner
	classes storagelisters.StorageClassLister
	loop    *controller.Loop[*corev1.PersistentVolumeClaim, types.NamespacedName]
}

func newEarlyHandOff(p *provisioner, classes storagelisters.StorageClassLister, workers int) *earlyHandOff {
	e := &earlyHandOff{p: p, classes: classes}
	e.loop = &controller.Loop[*corev1.PersistentVolumeClaim, types.NamespacedName]{
		Name: "provisioner-early", Ref: claimName, Wants: mayBeEarly, Sync: e.sync, Workers: workers,
	}
	return e
}

func claimName(claim *corev1.PersistentVolumeClaim) (types.NamespacedName, bool) {
	return types.NamespacedName{Namespace: claim.Namespace, Name: claim.Name}, true
}

// mayBeEarly tells a claim that may be one for the early hand-off: only its
// creation is, since a claim that waited any longer is the library's.
func mayBeEarly(old, cur *corev1.PersistentVolumeClaim) bool {
	return old == nil && cur.Spec.VolumeName == "" && cur.Spec.StorageClassName != nil
}

// sync issues the claim of key a pool member, if the claim is one for the
// early hand-off and the pool has one the PV controller would not bind it to.
// Errors are not returned: the library's way retries and reports them.
func (e *earlyHandOff) sync(ctx context.Context, key types.NamespacedName) error {
	claim, err := e.p.claims.PersistentVolumeClaims(key.Namespace).Get(key.Name)
	if err != nil {
		return nil // gone, or bound and out of the cache
	}
	class, ok := e.classOf(claim)
	if !ok {
		return nil
	}
	class = pools.EffectiveClass(class, pools.PoolOf(e.p.pools, class.Name))
	params, err := backend.ParseParameters(class, e.p.backends)
	if err != nil {
		return nil
	}
	defer e.p.claimLocks.Lock(claim.UID)()
	if e.p.issuedTo(claim) != "" {
		return nil
	}
	cacheKey, err := e.p.keyOf(ctx, claim, params.KeyLabel)
	if err != nil {
		return nil // the library's way reads it again, and reports it
	}
	rules := match.RulesOf(params)
	cands := earlyCandidates(e.p.members(class.Name, params.Pool), claim, cacheKey, rules)
	if params.MaxVolumesPerNamespace > 0 {
		// Only members the namespace has already, which change no share:
		// the library's way counts the namespace's share for any other.
		cands = withinShare(cands, claim.Namespace)
	}
	if len(cands) == 0 {
		return nil
	}
	pv, result, err := e.p.issueFromPool(ctx, claim, cacheKey, class.Name, params.Namespaced, cands, func(live *corev1.PersistentVolume) bool {
		return match.Misfit(live, claim, nil, nil) == "" && (!rules.KeyRequired || match.KeyFits(live, cacheKey))
	})
	if err != nil || result != taken {
		klog.FromContext(ctx).V(4).Info("Early hand-off left the claim to the library", "claim", klog.KObj(claim), "err", err)
		return nil
	}
	e.p.metrics.early.WithLabelValues(class.Name).Inc()
	klog.FromContext(ctx).V(4).Info("Issued a pool volume on the claim's creation", "claim", klog.KObj(claim), "pv", pv)
	return nil
}

// classOf returns the class of claim if it is a class of this provisioner
// whose claims are bound at once: a claim that waits for its first consumer
// needs the node the scheduler picks, which only the library's way has.
// Claims with a selector or a data source take the library's way too, which
// refuses or serves them with the reasons said.
func (e *earlyHandOff) classOf(claim *corev1.PersistentVolumeClaim) (*storagev1.StorageClass, bool) {
	if claim.Spec.VolumeName != "" || claim.DeletionTimestamp != nil || claim.Spec.Selector != nil ||
		claim.Spec.DataSource != nil || claim.Spec.DataSourceRef != nil || claim.Spec.StorageClassName == nil {
		return nil, false
	}
	class, err := e.classes.Get(*claim.Spec.StorageClassName)
	if err != nil || class.Provisioner != e.p.name {
		return nil, false
	}
	if m := class.VolumeBindingMode; m != nil && *m == storagev1.VolumeBindingWaitForFirstConsumer {
		return nil, false
	}
	return class, true
}

// earlyCandidates are the members the early hand-off may issue claim, in
// the library's order: none while the claim's own volume is on its way back
// (the library's way waits for it) or while a member fits that the PV
// controller binds by itself, one with no claimRef: taking another then would
// give the claim two.
func earlyCandidates(members []*corev1.PersistentVolume, claim *corev1.PersistentVolumeClaim, key string, rules match.Rules) []*corev1.PersistentVolume {
	cands, state := match.Candidates(members, claim, key, rules, nil, nil)
	if state.Returning != nil {
		return nil
	}
	for _, pv := range cands {
		if pv.Spec.ClaimRef == nil {
			return nil
		}
	}
	return cands
}
