package backend

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	storagelisters "k8s.io/client-go/listers/storage/v1"

	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// The class backend puts a pool in front of another StorageClass, the
// backing class, whose provisioner (a CSI driver's external-provisioner,
// typically) makes and deletes the storage. The pool decides who gets which
// volume; the driver still makes every disk and deletes it.
//
// A new member is obtained through a claim of the provisioner's own in the
// backing class (a backing claim; provisioner/classpool) and handed over to
// the user's claim once the backing provisioner has bound it. A member is marked as
// this provisioner's like any other: pv.kubernetes.io/provisioned-by names
// this provisioner, so the backing provisioner, which deletes only the
// Released volumes of reclaim policy Delete that name it there, leaves it
// alone; wellknown.BackingProvisioner and wellknown.BackingClass record where it came
// from, and where it goes back to be deleted.

const (
	backendClass      = "class"
	paramBackingClass = "backingClass"
	noProvisioner     = "kubernetes.io/no-provisioner"
	ExternalFinalizer = "external-provisioner.volume.kubernetes.io/finalizer"
)

func init() {
	Register(backendClass, func(d Deps) Backend {
		return &classPoolBackend{provisioner: d.Provisioner, client: d.Client, classes: d.Classes}
	})
}

type classPoolBackend struct {
	// The storage is the backing driver's, out of the provisioner's reach.
	Unmeasured
	provisioner string
	client      kubernetes.Interface
	classes     storagelisters.StorageClassLister
}

func (*classPoolBackend) Parameters() []string {
	return []string{paramBackingClass, MaxVolumes, MaxCapacity}
}

// backedClass is a validated class-backend class.
type backedClass struct {
	*classPoolBackend
	// backing is the backing class, as it was when the pool class was
	// validated.
	backing *storagev1.StorageClass
}

func (b *classPoolBackend) ForClass(class *storagev1.StorageClass) (Class, []error) {
	name := class.Parameters[paramBackingClass]
	if name == "" {
		return nil, []error{fmt.Errorf("parameter %q is required: the StorageClass whose provisioner makes the pool's volumes", paramBackingClass)}
	}
	backing, err := b.classes.Get(name)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, []error{fmt.Errorf("%s %q: there is no StorageClass of that name", paramBackingClass, name)}
		}
		return nil, []error{fmt.Errorf("%s %q: %w", paramBackingClass, name, err)}
	}
	return &backedClass{classPoolBackend: b, backing: backing}, backingClassErrors(class, backing, b.provisioner)
}

// backingClassErrors says why backing cannot back the pool class, if it
// cannot: each problem an administrator fixes on one of the two classes.
func backingClassErrors(class, backing *storagev1.StorageClass, provisioner string) []error {
	var errs []error
	switch backing.Provisioner {
	case provisioner:
		errs = append(errs, fmt.Errorf("%s %q is a class of this provisioner: name the class whose provisioner makes the storage, a CSI driver's for instance", paramBackingClass, backing.Name))
	case noProvisioner:
		errs = append(errs, fmt.Errorf("%s %q has provisioner %s, which makes no volumes", paramBackingClass, backing.Name, noProvisioner))
	}
	if mode, backingMode := BindingMode(class), BindingMode(backing); mode != backingMode {
		errs = append(errs, fmt.Errorf("volumeBindingMode %s does not match %s of %s %q: a pool whose claims wait for their first consumer needs a backing class that makes volumes on the node chosen for it, and the other way round", mode, backingMode, paramBackingClass, backing.Name))
	}
	// A volume the backing provisioner made for a claim that went away
	// before the pool took it goes back to it to be deleted; under Retain
	// it would stay behind, reachable by no one.
	if p := backing.ReclaimPolicy; p != nil && *p != corev1.PersistentVolumeReclaimDelete {
		errs = append(errs, fmt.Errorf("%s %q has reclaimPolicy %s: it must be Delete, so that a volume it made that the pool did not take is not left behind (the pool class's reclaimPolicy decides what becomes of its members)", paramBackingClass, backing.Name, *p))
	}
	return errs
}

func BindingMode(class *storagev1.StorageClass) storagev1.VolumeBindingMode {
	if class.VolumeBindingMode == nil {
		return storagev1.VolumeBindingImmediate
	}
	return *class.VolumeBindingMode
}

func (c *backedClass) IsMember(pv *corev1.PersistentVolume) bool {
	return pv.Annotations[wellknown.ProvisionedBy] == c.provisioner
}

func (c *backedClass) SelectorKeys() []string { return nil }

// backingClass: the pool grows through claims of the backing class.
func (c *backedClass) BackingClass() *storagev1.StorageClass { return c.backing }

// aheadPlacement: a class that binds on first consumer (as its backing
// class does: backingClassErrors) has each member made for a node, of one
// of the pool's zones; the driver decides otherwise.
func (c *backedClass) AheadPlacement() Placement {
	if BindingMode(c.backing) == storagev1.VolumeBindingWaitForFirstConsumer {
		return PlaceInZone
	}
	return PlaceAnywhere
}

// Evicts: a member goes back to the provisioner of its storage
// (classpool.Pools.HandBack).
func (*classPoolBackend) Evicts() (EvictionKind, error) { return EvictHandingBack, nil }

// Maker is nil: the flow grows a class pool through its backing class
// (classpool.Pools.Grow), not through a Maker.
func (c *backedClass) Maker() (Maker, string) { return nil, "" }

// delete hands pv back to the provisioner that made its storage, as it was
// before the pool took it: named in provisioned-by, of the backing class.
// Released with reclaim policy Delete, it is then that provisioner's to
// delete, storage and volume object.
func (b *classPoolBackend) Delete(ctx context.Context, pv *corev1.PersistentVolume) (Deletion, error) {
	back, backer, err := HandedBackCopy(pv)
	if err != nil {
		return 0, err
	}
	if _, err := b.client.CoreV1().PersistentVolumes().Update(ctx, back, metav1.UpdateOptions{}); err != nil {
		return 0, fmt.Errorf("handing volume %s back to provisioner %s to be deleted: %w", pv.Name, backer, err)
	}
	return HandedBack, nil
}

// handedBackCopy is a copy of pv, a member of a class pool, as the
// provisioner that made its storage had it: named in provisioned-by, of
// the backing class (where recorded). It returns that provisioner too.
func HandedBackCopy(pv *corev1.PersistentVolume) (*corev1.PersistentVolume, string, error) {
	backer := pv.Annotations[wellknown.BackingProvisioner]
	if backer == "" {
		return nil, "", fmt.Errorf("volume %s does not say which provisioner made its storage (annotation %s)", pv.Name, wellknown.BackingProvisioner)
	}
	back := pv.DeepCopy()
	back.Annotations[wellknown.ProvisionedBy] = backer
	if class := back.Annotations[wellknown.BackingClass]; class != "" {
		back.Spec.StorageClassName = class
	}
	return back, backer, nil
}

// Member is pv, a volume of a backing class kept for a pool, made a member
// of the pool class named class, provisioned by provisioner, with policy:
// its backing provisioner and class recorded, the backing provisioner's
// finalizer gone (it drops it from a Retain volume, but may not have yet).
// Its labels, claimRef and the marks of the keep are the caller's.
func Member(pv *corev1.PersistentVolume, provisioner, class string, policy corev1.PersistentVolumeReclaimPolicy) *corev1.PersistentVolume {
	member := pv.DeepCopy()
	backer := pv.Annotations[wellknown.ProvisionedBy]
	if backer == "" && pv.Spec.CSI != nil {
		backer = pv.Spec.CSI.Driver
	}
	member.Annotations[wellknown.BackingProvisioner] = backer
	member.Annotations[wellknown.BackingClass] = pv.Spec.StorageClassName
	member.Annotations[wellknown.ProvisionedBy] = provisioner
	member.Annotations[wellknown.Backend] = backendClass
	member.Finalizers = slices.DeleteFunc(member.Finalizers, func(f string) bool { return f == ExternalFinalizer })
	member.Spec.StorageClassName = class
	member.Spec.PersistentVolumeReclaimPolicy = policy
	return member
}
