package provisioner

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	lib "sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/reclaimable/reclaimable/internal/wellknown"
	"github.com/reclaimable/reclaimable/provisioner/match"
)

// What the flow reports of a claim, on the claim and in the metrics: how a
// claim that waited for its first consumer was served, a refusal the claim
// or its class must fix, or a pool that has nothing for it and cannot grow.

// Results of first_consumer_claims_total.
const (
	placedMember       = "member"
	placedGrew         = "grew"
	placedGrewOutReach = "grew-out-of-reach"
)

// countFirstConsumer counts a claim that waited for its first consumer
// (node is the node the scheduler chose; nil for any other claim, which is
// not counted) by how it was served: a member reachable from node (served),
// or a new volume, with or without free members that fit the claim but not
// the node (state.unfit["node"]: in another zone, or on another node).
func (p *provisioner) countFirstConsumer(class string, node *corev1.Node, state match.State, served bool) {
	if node == nil {
		return
	}
	result := placedGrew
	switch {
	case served:
		result = placedMember
	case state.Unfit["node"] > 0:
		result = placedGrewOutReach
	}
	p.metrics.firstConsumer.WithLabelValues(class, result).Inc()
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
	return nil, lib.ProvisioningFinished, reportedError{err}
}

// reportedError is a failure already reported on the claim.
type reportedError struct{ error }

func (e reportedError) Unwrap() error { return e.error }

// errExhausted marks a refusal that waits for a volume to be freed.
var errExhausted = errors.New("pool exhausted")

// exhausted reports that the pool of class has nothing for claim and cannot
// grow; the claim stays among those woken when a volume of the class is freed.
func (p *provisioner) exhausted(ctx context.Context, claim *corev1.PersistentVolumeClaim, class *storagev1.StorageClass, state match.State, msg string) (*corev1.PersistentVolume, lib.ProvisioningState, error) {
	p.metrics.exhausted.WithLabelValues(class.Name).Inc()
	reason := reasonPoolExhausted
	if pv := state.Crossable; pv != nil {
		switch err := p.markForScrub(ctx, pv); {
		case err == nil:
			p.recorder.Eventf(claim, corev1.EventTypeNormal, reasonScrubbingToShare,
				"%s; volume %s, held for another namespace, is being emptied for it (%s): the claim gets it once it is empty, never with the other namespace's data", msg, pv.Name, wellknown.ScrubAcrossNamespaces)
			p.onWaitingChange(class.Name)
			return nil, lib.ProvisioningFinished, reportedError{fmt.Errorf("%w: %s; volume %s is being emptied for it", errExhausted, msg, pv.Name)}
		case apierrors.IsConflict(err):
			// The volume changed since the cache showed it: the library
			// tries the claim again, with back-off, on a newer view.
			return nil, lib.ProvisioningFinished, reportedError{fmt.Errorf("volume %s changed while being handed to the scrub for this claim: %w", pv.Name, err)}
		default:
			// Said on the claim (Provision), and tried again with back-off.
			return nil, lib.ProvisioningFinished, fmt.Errorf("handing volume %s, held for another namespace, to the scrub for this claim (%s): %w", pv.Name, wellknown.ScrubAcrossNamespaces, err)
		}
	}
	if state.OtherNamespace > 0 {
		// The one case an administrator may want to change the class for.
		reason = reasonOtherNamespaces
		msg = fmt.Sprintf("%s; %d free volumes were last bound in other namespaces and hold their data, and %s %q gives a volume only to claims of the namespace it was last bound in (%s %q would share them across namespaces, data included; %s true on the pool would empty one for this claim)",
			msg, state.OtherNamespace, wellknown.ReuseScope, wellknown.ReuseScopeNamespace, wellknown.ReuseScope, wellknown.ReuseScopeCluster, wellknown.ScrubAcrossNamespaces)
	}
	p.recorder.Event(claim, corev1.EventTypeWarning, reason, msg)
	p.onWaitingChange(class.Name)
	return nil, lib.ProvisioningFinished, reportedError{fmt.Errorf("%w: %s", errExhausted, msg)}
}
