package provisioner

import (
	"context"
	"errors"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	lib "sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/reclaimable/reclaimable/provisioner/backend"
	"github.com/reclaimable/reclaimable/provisioner/classpool"
	"github.com/reclaimable/reclaimable/provisioner/match"
)

// What the flow does for pools of the class backend (provisioner/backend),
// whose growth, members made ahead and eviction provisioner/classpool
// carries out.

// useClasses gives the backends the StorageClasses they read (the class
// backend's backing classes).
func (p *provisioner) useClasses(classes storagelisters.StorageClassLister) {
	p.backendDeps.Classes = classes
	p.backends = backend.New(p.backendDeps)
}

// useBackingClaims builds the class pools, which make their backing claims
// in namespace and read them from lister. They share the provisioner's
// clock and memories: useClock comes first.
func (p *provisioner) useBackingClaims(lister corelisters.PersistentVolumeClaimLister, namespace string) {
	p.classes = classpool.New(classpool.Config{
		Name: p.name, ControllerID: p.controllerID, Namespace: namespace,
		Client: p.client, Volumes: p.volumes, BackingClaims: lister, Claims: p.claims, Pools: p.pools,
		Pending: p.pending, Recorder: p.recorder, Clock: p.clock, AheadBound: p.aheadBound,
		Created: p.metrics.created, Evictions: p.metrics.evictions,
	}, classFlow{p})
}

// classFlow is what the class pools ask of the provisioner.
type classFlow struct{ p *provisioner }

func (f classFlow) Reserve(class, name string, maxVolumes int) bool {
	_, _, ok := f.p.reserve(class, name, "", maxVolumes, 0)
	return ok
}

func (f classFlow) Requeue(claim *corev1.PersistentVolumeClaim) { f.p.requeue(claim) }

func (f classFlow) Issued(claim *corev1.PersistentVolumeClaim, class, pv string) {
	f.p.takes.Expect(claim.UID, claim.Namespace, pv)
	f.p.metrics.issues.WithLabelValues(class, string(match.IssueNewVolume), string(match.KeyFresh)).Inc()
}

// growThrough gives claim a new volume of backingClass, the backing class
// of its pool, one step of the class pool's hand-over per call: the
// changes of the backing claim and of the volume bring the claim back to
// the library's queue.
func (p *provisioner) growThrough(ctx context.Context, opts lib.ProvisionOptions, params *backend.Params, backingClass *storagev1.StorageClass, selector labels.Selector, state match.State, key string, placed func()) (*corev1.PersistentVolume, lib.ProvisioningState, error) {
	claim, class := opts.PVC, opts.StorageClass
	if claim.Spec.VolumeAttributesClassName != nil {
		return p.refuse(claim, reasonUnsupportedAttributes, errors.New("a claim of a pool class cannot ask for a VolumeAttributesClass: its volume may come from the pool, made for another claim"))
	}
	g, v := p.admit(ctx, opts, params, selector, state)
	placed() // see grow
	if v != nil {
		return v.pv, v.state, v.err
	}
	result, asked, err := p.classes.Grow(ctx, classpool.Request{Claim: claim, Class: class, Backing: backingClass,
		SelectedNode: opts.SelectedNode, Labels: g.labels, Count: g.count, Key: key})
	if asked {
		p.countFirstConsumer(class.Name, opts.SelectedNode, state, false)
	}
	if errors.As(err, new(classpool.WaitingError)) {
		err = reportedError{err} // nothing to report: it waits
	}
	return nil, result, err
}
