package provisioner

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	volumehelpers "k8s.io/component-helpers/storage/volume"
	"k8s.io/klog/v2"
	lib "sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/internal/wellknown"
	"github.com/reclaimable/reclaimable/provisioner/backend"
	"github.com/reclaimable/reclaimable/provisioner/match"
)

// This file holds how a pool grows: the checks every new volume passes, the
// count against maxVolumes, and the PersistentVolume around what the
// backend made.

// growth is a new volume's place among its class's volumes, which admit
// holds for it: the labels and node affinity it gets.
type growth struct {
	labels   map[string]string
	affinity *corev1.VolumeNodeAffinity
	// count is how many volumes the class had besides it.
	count int
}

// verdict is what Provision returns, when a check decides it.
type verdict struct {
	pv    *corev1.PersistentVolume
	state lib.ProvisioningState
	err   error
}

func decided(pv *corev1.PersistentVolume, state lib.ProvisioningState, err error) *verdict {
	return &verdict{pv: pv, state: state, err: err}
}

// grow makes a new volume for claim, of cache key key, through the class's
// backend, within the class's growth limits.
func (p *provisioner) grow(ctx context.Context, opts lib.ProvisionOptions, params *backend.Params, maker backend.Maker, selector labels.Selector, state match.State, key string, placed func()) (*corev1.PersistentVolume, lib.ProvisioningState, error) {
	claim, class := opts.PVC, opts.StorageClass
	if reason, err := maker.Refuse(claim); err != nil {
		return p.refuse(claim, reason, err)
	}
	g, v := p.admit(ctx, opts, params, selector, state)
	// The place is held, and counted in the namespace's share: making the
	// storage (a lifecycle pod, seconds) holds up no other claim.
	placed()
	if v != nil {
		return v.pv, v.state, v.err
	}
	made, err := maker.Create(ctx, backend.NewVolume{Name: opts.PVName, Claim: claim, Node: opts.SelectedNode})
	if err != nil {
		p.pending.Unreserve(opts.PVName)
		if remains := (*backend.StorageMayRemain)(nil); errors.As(err, &remains) {
			return nil, lib.ProvisioningInBackground, err
		}
		return nil, lib.ProvisioningFinished, err
	}
	pv := backend.VolumeObject(class, params.Backend, backend.NewVolume{Name: opts.PVName, Claim: claim}, made, g.affinity, wellknown.Map(
		wellknown.LastClaim, match.ClaimName(claim),
		wellknown.IssuedAt, p.clock.Now().UTC().Format(time.RFC3339),
		// See take: a volume whose claim got bound elsewhere returns to
		// the pool.
		volumehelpers.AnnBoundByController, "yes",
	))
	setLastKey(pv.Annotations, key)
	pv.Labels = p.ownLabels(g.labels)
	p.metrics.created.WithLabelValues(class.Name).Inc()
	p.metrics.issues.WithLabelValues(class.Name, string(match.IssueNewVolume), string(match.KeyFresh)).Inc()
	p.countFirstConsumer(class.Name, opts.SelectedNode, state, false)
	klog.FromContext(ctx).V(2).Info("Created a volume", "pv", pv.Name, "backend", params.Backend, "volumes", g.count+1)
	return pv, lib.ProvisioningFinished, nil
}

// admit runs the checks every new volume of a class passes, whatever makes
// it, and holds its place (under opts.PVName) within the class's growth
// limits; or returns what Provision says instead.
func (p *provisioner) admit(ctx context.Context, opts lib.ProvisionOptions, params *backend.Params, selector labels.Selector, state match.State) (growth, *verdict) {
	claim, class := opts.PVC, opts.StorageClass
	// A size beyond what a byte count holds is no real request (and would
	// overflow the consumers' arithmetic); a class may set a lower bound.
	request := claim.Spec.Resources.Requests[corev1.ResourceStorage]
	if request.CmpInt64(math.MaxInt64) >= 0 { // Quantity saturates at the largest int64
		return growth{}, decided(p.refuse(claim, reasonUnsupportedCapacity, fmt.Errorf("the claim requests %s, at least 8 EiB, more than any volume holds", request.String())))
	}
	if max := params.MaxCapacity; max != nil && request.Cmp(*max) > 0 {
		return growth{}, decided(p.refuse(claim, reasonUnsupportedCapacity, fmt.Errorf("the claim requests %s; new volumes of class %s hold at most %s (parameter %s)", request.String(), class.Name, max.String(), backend.MaxCapacity)))
	}
	volumeLabels, err := match.LabelsFor(selector)
	if err != nil {
		return growth{}, decided(p.refuse(claim, reasonUnsupportedSelector, err))
	}
	affinity := backend.NodeAffinity(class)
	if node := opts.SelectedNode; node != nil && affinity != nil {
		if ok, err := corev1helpers.MatchNodeSelectorTerms(node, affinity.Required); err != nil || !ok {
			return growth{}, decided(nil, lib.ProvisioningReschedule, fmt.Errorf("node %s is outside the allowedTopologies of class %s", node.Name, class.Name))
		}
	}

	var node string
	if opts.SelectedNode != nil {
		node = opts.SelectedNode.Name
	}
	count, onNode, ok := p.reserve(class.Name, opts.PVName, node, params.MaxVolumes, params.MaxVolumesPerNode)
	if state.AtShare > 0 && (ok || params.MaxVolumes > 0 && count >= params.MaxVolumes) {
		// The namespace is at its maximum: the new volume may only take
		// the place of a member of its share, which makes room in the
		// pool as well.
		if ok {
			p.pending.Unreserve(opts.PVName)
		}
		return growth{}, decided(p.evictWithinShare(ctx, claim, class, params, state.AtShare, state))
	}
	switch {
	case !ok && params.MaxVolumes > 0 && count >= params.MaxVolumes:
		msg := fmt.Sprintf("class %s has %d of at most %d volumes (%s=%d) and its pool has nothing that fits: %s; free a volume or raise %s",
			class.Name, count, params.MaxVolumes, backend.MaxVolumes, params.MaxVolumes, state, backend.MaxVolumes)
		if params.EvictForClaims {
			return growth{}, decided(p.evictForClaim(ctx, claim, class, params, state, msg))
		}
		return growth{}, decided(p.exhausted(ctx, claim, class, state, msg))
	case !ok:
		return growth{}, decided(p.exhausted(ctx, claim, class, state, fmt.Sprintf("class %s has %d of at most %d volumes on node %s (%s=%d) and its pool has nothing that fits there: %s; free a volume on that node or raise %s",
			class.Name, onNode, params.MaxVolumesPerNode, node, backend.MaxVolumesPerNode, params.MaxVolumesPerNode, state, backend.MaxVolumesPerNode)))
	}
	// The new volume is in the claim's namespace's share from now on.
	p.pending.MarkFor(opts.PVName, claim.Namespace)
	return growth{labels: volumeLabels, affinity: affinity, count: count}, nil
}

// ownLabels adds to labels the one that associates a volume with this
// installation.
func (p *provisioner) ownLabels(labels map[string]string) map[string]string {
	return pools.SetManagedBy(labels, p.controllerID)
}
