package provisioner

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	lib "sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/reclaimable/reclaimable/internal/keys"
)

// staticBackend serves a pool that an administrator fills by labelling
// existing PersistentVolumes with keys.Pool; it never makes or removes one.
type staticBackend struct{ unmeasured }

const backendStatic = "static"

func init() {
	register(backendStatic, func(backendDeps) backend { return staticBackend{} })
}

// errCannotEvict says the static backend keeps no storage it could remove.
var errCannotEvict = errors.New("the static backend removes no storage: label volumes out of the pool by hand")

func (staticBackend) evicts() (evictionKind, error) { return evictNever, errCannotEvict }

func (staticBackend) parameters() []string { return nil }

func (staticBackend) forClass(class *storagev1.StorageClass) (classBackend, []error) {
	return staticClass{name: class.Name}, nil
}

func (staticBackend) delete(context.Context, *corev1.PersistentVolume) (deletion, error) {
	return storageRemoved, &lib.IgnoredError{Reason: "the static backend makes no volumes and removes none"}
}

type staticClass struct{ name string }

func (c staticClass) isMember(pv *corev1.PersistentVolume) bool {
	return pv.Labels[keys.Pool] == c.name
}

// A claim may pick a static pool's volumes by the pool label too.
func (staticClass) selectorKeys() []string { return []string{keys.Pool} }

func (staticClass) backingClass() *storagev1.StorageClass { return nil }
func (staticClass) aheadPlacement() placement             { return placeAnywhere }

func (c staticClass) maker() (volumeMaker, string) {
	return nil, fmt.Sprintf("label more PersistentVolumes of the class with %s=%s, or free one", keys.Pool, c.name)
}
