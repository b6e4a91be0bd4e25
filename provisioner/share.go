package provisioner

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	lib "sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/reclaimable/reclaimable/internal/eviction"
	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/internal/wellknown"
	"github.com/reclaimable/reclaimable/provisioner/backend"
	"github.com/reclaimable/reclaimable/provisioner/match"
)

// This file holds maxVolumesPerNamespace: the share of a pool one
// namespace may have, so that one busy namespace cannot take every member
// of a pool many share. A namespace's share is every member bound to its
// claims or held for it (reuseScope namespace, which the setting needs:
// every way a member comes to a namespace then passes the provisioner).
// At its maximum a claim may still have a member of its own namespace's
// share, which changes no share, or under evictForClaims a new volume in
// the place of the share's least recently used idle member; it never has a
// member no claim has had, nor one emptied or evicted from another
// namespace.

// reasonNamespaceAtMaximum: the claim waits, its namespace at
// maxVolumesPerNamespace.
const reasonNamespaceAtMaximum = "NamespaceAtMaximum"

// errAtShare marks a claim that waits with its namespace at its maximum:
// a volume freed in its class wakes it, as one waiting for a full pool.
var errAtShare = errors.New("namespace at its maximum")

// share names one namespace's share of a class's pool.
type share struct{ class, namespace string }

// countsFor reports whether pv is in the share of namespace: bound to a
// claim of it, released by one, or held or reserved for it. A member no
// claim has had yet (one made ahead among them) is in no share.
func countsFor(pv *corev1.PersistentVolume, namespace string) bool {
	return match.LastNamespace(pv) == namespace
}

// shareSize counts the members in the share of namespace: those the cache
// shows in it, the members in taken (this process gave them to claims of
// the namespace; the cache may not show it yet) and the volumes in made
// (being made for claims of the namespace, not in the cache yet), each
// once.
func shareSize(members []*corev1.PersistentVolume, namespace string, taken, made []string) int {
	in := sets.New[string](made...)
	pool := sets.New[string]()
	for _, pv := range members {
		pool.Insert(pv.Name)
		if countsFor(pv, namespace) {
			in.Insert(pv.Name)
		}
	}
	for _, name := range taken {
		if pool.Has(name) {
			in.Insert(name)
		}
	}
	return in.Len()
}

// withinShare keeps the candidates in the share of namespace already: all
// a claim of a namespace at its maximum may have.
func withinShare(cands []*corev1.PersistentVolume, namespace string) []*corev1.PersistentVolume {
	out := make([]*corev1.PersistentVolume, 0, len(cands))
	for _, pv := range cands {
		if countsFor(pv, namespace) {
			out = append(out, pv)
		}
	}
	return out
}

// lockShare, for a class with maxVolumesPerNamespace, has one worker at a
// time decide for the claims of claim's namespace and returns the unlock,
// which the decision calls once the member or the new volume's place is
// recorded (takes, pending), and the namespace's share with it; and
// reports whether the namespace is at its maximum, counting those
// records. Without the setting it locks nothing.
func (p *provisioner) lockShare(class string, params *backend.Params, claim *corev1.PersistentVolumeClaim) (unlock func(), size int, atMax bool) {
	if params.MaxVolumesPerNamespace == 0 {
		return func() {}, 0, false
	}
	unlock = p.shareLocks.Lock(share{class: class, namespace: claim.Namespace})
	size = shareSize(p.members(class, params.Pool), claim.Namespace, p.takes.TakenFor(claim.Namespace), p.pending.MadeFor(class, claim.Namespace))
	return unlock, size, size >= params.MaxVolumesPerNamespace
}

// evictWithinShare makes room for claim, whose namespace is at its maximum
// (size, its share) and has no member that fits it (another key's under
// keyPolicy Require, a smaller one), once growth has checked the claim as
// for any new volume (admit): under evictForClaims the least recently used
// idle member of the namespace's own share goes (eviction.Victim), and the
// claim waits, woken when it is gone; its new volume then takes the
// member's place, and no share changes. A member of the share being
// evicted already is room enough: a claim retried meanwhile evicts no
// second one. Never another namespace's member, which would only grow the
// share, nor one this provisioner has just issued; on a class whose
// members cannot be evicted the claim waits at its maximum. Only reached
// under evictForClaims: without it growOrWait has the claim wait first.
func (p *provisioner) evictWithinShare(ctx context.Context, claim *corev1.PersistentVolumeClaim, class *storagev1.StorageClass, params *backend.Params, size int, state match.State) (*corev1.PersistentVolume, lib.ProvisioningState, error) {
	if how, err := p.backends[params.Backend].Evicts(); err != nil || how == backend.EvictNever {
		return p.namespaceAtMaximum(claim, class, params, size, state)
	}
	msg := fmt.Sprintf("namespace %s has %d of at most %d volumes of class %s (%s=%d) and none of them fits the claim (pool: %s)",
		claim.Namespace, size, params.MaxVolumesPerNamespace, class.Name, wellknown.MaxVolumesPerNamespace, params.MaxVolumesPerNamespace, state)
	taken := sets.New(p.takes.TakenFor(claim.Namespace)...)
	var share []*corev1.PersistentVolume
	for _, pv := range p.members(class.Name, params.Pool) {
		switch {
		case !countsFor(pv, claim.Namespace) || taken.Has(pv.Name):
		case pools.Evicting(pv):
			p.metrics.namespaceAtMaximum.WithLabelValues(class.Name).Inc()
			p.recorder.Eventf(claim, corev1.EventTypeNormal, reasonEvictingForClaim, "%s; it waits for volume %s of the namespace, being evicted, to be gone (evictForClaims)", msg, pv.Name)
			return nil, lib.ProvisioningFinished, reportedError{fmt.Errorf("%w: %s; member %s of the namespace is being evicted", errAtShare, msg, pv.Name)}
		default:
			share = append(share, pv)
		}
	}
	victim := eviction.Victim(share)
	if victim == nil {
		return p.namespaceAtMaximum(claim, class, params, size, state)
	}
	if err := p.evictFor(ctx, claim, class, victim, msg, fmt.Sprintf("namespace %s is at maxVolumesPerNamespace %d", claim.Namespace, params.MaxVolumesPerNamespace)); err != nil {
		return nil, lib.ProvisioningFinished, err
	}
	return nil, lib.ProvisioningFinished, reportedError{fmt.Errorf("%w: %s; a member of the namespace is being evicted to make room for it", errAtShare, msg)}
}

// namespaceAtMaximum reports that claim waits: its namespace has
// maxVolumesPerNamespace members of the class and none is free for it.
// It stays among the claims a volume freed in the class wakes, apart from
// those a full pool keeps waiting: the pool is not exhausted for them.
func (p *provisioner) namespaceAtMaximum(claim *corev1.PersistentVolumeClaim, class *storagev1.StorageClass, params *backend.Params, size int, state match.State) (*corev1.PersistentVolume, lib.ProvisioningState, error) {
	p.metrics.namespaceAtMaximum.WithLabelValues(class.Name).Inc()
	msg := fmt.Sprintf("namespace %s has %d of at most %d volumes of class %s (%s=%d) and none of them is free for the claim (pool: %s); the claim gets one once a claim of the namespace lets go of it, or raise %s",
		claim.Namespace, size, params.MaxVolumesPerNamespace, class.Name, wellknown.MaxVolumesPerNamespace, params.MaxVolumesPerNamespace, state, wellknown.MaxVolumesPerNamespace)
	p.recorder.Event(claim, corev1.EventTypeWarning, reasonNamespaceAtMaximum, msg)
	return nil, lib.ProvisioningFinished, reportedError{fmt.Errorf("%w: %s", errAtShare, msg)}
}
