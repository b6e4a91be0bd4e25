package backend

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	lib "sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// staticBackend serves a pool that an administrator fills by labelling
// existing PersistentVolumes with wellknown.Pool; it never makes or removes one.
type staticBackend struct{ Unmeasured }

const backendStatic = "static"

func init() {
	Register(backendStatic, func(Deps) Backend { return staticBackend{} })
}

// ErrCannotEvict says the static backend keeps no storage it could remove.
var ErrCannotEvict = errors.New("the static backend removes no storage: label volumes out of the pool by hand")

func (staticBackend) Evicts() (EvictionKind, error) { return EvictNever, ErrCannotEvict }

func (staticBackend) Parameters() []string { return nil }

func (staticBackend) ForClass(class *storagev1.StorageClass) (Class, []error) {
	return staticClass{name: class.Name}, nil
}

func (staticBackend) Delete(context.Context, *corev1.PersistentVolume) (Deletion, error) {
	return StorageRemoved, &lib.IgnoredError{Reason: "the static backend makes no volumes and removes none"}
}

type staticClass struct{ name string }

func (c staticClass) IsMember(pv *corev1.PersistentVolume) bool {
	return pv.Labels[wellknown.Pool] == c.name
}

// A claim may pick a static pool's volumes by the pool label too.
func (staticClass) SelectorKeys() []string { return []string{wellknown.Pool} }

func (staticClass) BackingClass() *storagev1.StorageClass { return nil }
func (staticClass) AheadPlacement() Placement             { return PlaceAnywhere }

func (c staticClass) Maker() (Maker, string) {
	return nil, fmt.Sprintf("label more PersistentVolumes of the class with %s=%s, or free one", wellknown.Pool, c.name)
}
