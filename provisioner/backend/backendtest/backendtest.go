// Package backendtest holds every backend to the promises the provisioner's
// flow relies on: a valid class of each, and the contract a backend, a new
// one or a test's own, must keep.
package backendtest

import (
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/reclaimable/reclaimable/internal/wellknown"
	"github.com/reclaimable/reclaimable/provisioner/backend"
	"github.com/reclaimable/reclaimable/provisioner/lifecycle"
)

// Provisioner is the provisioner name the classes name.
const Provisioner = "vendor/reclaimable"

// Deps builds the backends with root as --directory-root, a lifecycle
// image, and a backing class "backing" of a CSI driver for the class
// backend.
func Deps(t *testing.T, root string) backend.Deps {
	t.Helper()
	classes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := classes.Add(&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "backing"}, Provisioner: "csi.example.com",
		ReclaimPolicy: ptr.To(corev1.PersistentVolumeReclaimDelete)}); err != nil {
		t.Fatal(err)
	}
	return backend.Deps{Provisioner: Provisioner, Classes: storagelisters.NewStorageClassLister(classes), DirectoryRoot: root,
		Pods: lifecycle.NewPods(nil, "lifecycle", "reclaimable:test", time.Minute, nil, nil)}
}

// Classes has a valid class of each backend registered here, by name, its
// shares under root: a backend without one fails Contract's callers.
func Classes(root string) map[string]*storagev1.StorageClass {
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	class := func(params map[string]string, mods ...func(*storagev1.StorageClass)) *storagev1.StorageClass {
		c := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "pool"}, Provisioner: Provisioner, Parameters: params,
			ReclaimPolicy: ptr.To(corev1.PersistentVolumeReclaimRetain)}
		for _, m := range mods {
			m(c)
		}
		return c
	}
	return map[string]*storagev1.StorageClass{
		"directory": class(map[string]string{"backend": "directory", "baseDir": root, "source": "hostPath", "hostPath": "/mnt/pool"}),
		"local":     class(map[string]string{"backend": "local", "nodePath": "/var/lib/pool"}, func(c *storagev1.StorageClass) { c.VolumeBindingMode = &wffc }),
		"static":    class(map[string]string{"backend": "static"}),
		"class":     class(map[string]string{"backend": "class", "backingClass": "backing"}),
	}
}

// Contract holds b, with class a valid class of it, to what the flow relies
// on: it takes class; no volume of another provisioner is a member; a pool
// grows through a maker or a backing class, not both, or says what an
// administrator can do; a backend that never evicts says why, one that does
// gives no error; one that does not measure says so when asked to.
func Contract(t *testing.T, b backend.Backend, class *storagev1.StorageClass) {
	t.Helper()
	seen := map[string]bool{}
	for _, p := range b.Parameters() {
		if seen[p] {
			t.Errorf("Parameters() lists %q twice", p)
		}
		seen[p] = true
	}
	pool, errs := b.ForClass(class)
	if len(errs) > 0 || pool == nil {
		t.Fatalf("ForClass of its valid class: %v", errs)
	}
	foreign := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "foreign", Annotations: map[string]string{wellknown.ProvisionedBy: "other/provisioner"}},
		Spec: corev1.PersistentVolumeSpec{StorageClassName: class.Name, PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain}}
	if pool.IsMember(foreign) {
		t.Error("IsMember takes a volume of another provisioner")
	}
	maker, advice := pool.Maker()
	switch {
	case maker == nil && pool.BackingClass() == nil && advice == "":
		t.Error("a pool that cannot grow must say what an administrator can do (Maker's advice)")
	case maker != nil && pool.BackingClass() != nil:
		t.Error("a pool grows either through a maker or through a backing class, not both")
	}
	switch how, err := b.Evicts(); {
	case how == backend.EvictNever && err == nil:
		t.Error("Evicts() says never without saying why")
	case how != backend.EvictNever && err != nil:
		t.Errorf("Evicts() can evict, yet gives an error: %v", err)
	}
	if !b.Measures() {
		if _, _, err := b.Usage(foreign, time.Now().Add(time.Minute)); !errors.Is(err, backend.ErrNotMeasured) {
			t.Errorf("Measures() is false, yet Usage gives %v, want ErrNotMeasured", err)
		}
	}
}
