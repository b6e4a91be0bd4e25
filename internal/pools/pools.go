// Package pools holds the rules of the pools that every controller reads
// alike: what a member is doing (StateOf), a VolumePool over its class
// (PoolOf, EffectiveClass), reservations and holds (ReserveFor, HeldFor),
// the reuse scope, onRelease, and the indexes of volumes and pools by
// class, with the shared VolumePool informer and client.
package pools

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"

	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/reclaimable/reclaimable/apis/reclaimable/v1alpha1"
	"github.com/reclaimable/reclaimable/client/clientset/versioned"
	poolscheme "github.com/reclaimable/reclaimable/client/clientset/versioned/scheme"
	poolinformers "github.com/reclaimable/reclaimable/client/informers/externalversions"
	"github.com/reclaimable/reclaimable/internal/controller"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// Events on VolumePools name their kind from the scheme the recorders use,
// as kubernetes/sample-controller registers its types.
func init() {
	utilruntime.Must(poolscheme.AddToScheme(scheme.Scheme))
}

// PoolsByClass indexes VolumePools by the class they are the pool of.
const PoolsByClass = "reclaimable/pools-by-class"

// Informer returns the shared informer on VolumePools of env's process,
// indexed by class, so that the controllers of one process share its
// watch; env starts it and waits for it to sync. Call it before env.Run.
func Informer(env *controller.Env) (cache.SharedIndexInformer, error) {
	inf, err := env.Shared("volumepools", func() (any, error) {
		client, err := poolClient(env.Config)
		if err != nil {
			return nil, err
		}
		factory := poolinformers.NewSharedInformerFactory(client, 0)
		inf := factory.Reclaimable().V1alpha1().VolumePools().Informer()
		if err := inf.AddIndexers(cache.Indexers{PoolsByClass: poolClass}); err != nil {
			return nil, err
		}
		env.AddFactory(factory, inf.HasSynced)
		return inf, nil
	})
	if err != nil {
		return nil, err
	}
	return inf.(cache.SharedIndexInformer), nil
}

// ClientFor returns the VolumePool client controller writes with, as
// env.ClientFor does for the built-in APIs (its field manager).
func ClientFor(env *controller.Env, controller string) (versioned.Interface, error) {
	return poolClient(env.ConfigFor(controller))
}

// poolClient builds a VolumePool client on cfg in JSON: custom resources
// have no protobuf encoding, which cfg prefers for the built-in APIs.
func poolClient(cfg *rest.Config) (versioned.Interface, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.ContentType = runtime.ContentTypeJSON
	cfg.AcceptContentTypes = runtime.ContentTypeJSON
	client, err := versioned.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("building the VolumePool client: %w", err)
	}
	return client, nil
}

func poolClass(obj any) ([]string, error) {
	if class := poolClassName(obj); class != "" {
		return []string{class}, nil
	}
	return nil, nil
}

// poolClassName is the class of a VolumePool, or of the last state of a
// deleted one; "" for anything else.
func poolClassName(obj any) string {
	if p, ok := controller.Object[*v1alpha1.VolumePool](obj); ok {
		return p.Spec.StorageClassName
	}
	return ""
}

// PoolOf returns the pool of the class named class, from pools (an indexer
// with PoolsByClass): the oldest, by creation and then by name, when there
// are several, so that a second pool for a class changes nothing.
func PoolOf(pools cache.Indexer, class string) *v1alpha1.VolumePool {
	objs, err := pools.ByIndex(PoolsByClass, class)
	if err != nil || len(objs) == 0 {
		return nil
	}
	var all []*v1alpha1.VolumePool
	for _, o := range objs {
		if p, ok := o.(*v1alpha1.VolumePool); ok {
			all = append(all, p)
		}
	}
	if len(all) == 0 {
		return nil
	}
	return slices.MinFunc(all, func(a, b *v1alpha1.VolumePool) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
}

// EffectiveClass is class as its pool says it is: a copy with the pool's
// settings written over the class's parameters of the same names, or class
// itself when it has no pool. StorageClass parameters cannot be changed
// once the class exists; a pool's can. Every rule that reads a class's
// parameters reads the effective class, so a pool's setting acts exactly
// as the parameter would.
func EffectiveClass(class *storagev1.StorageClass, pool *v1alpha1.VolumePool) *storagev1.StorageClass {
	if class == nil || pool == nil {
		return class
	}
	s := pool.Spec
	if s.MaxVolumes == nil && s.MaxVolumesPerNode == nil && s.MaxVolumesPerNamespace == nil && s.ReserveFor == nil && s.ReuseScope == "" && s.OnRelease == "" && s.ScrubAcrossNamespaces == nil && s.KeyLabel == "" && s.KeyPolicy == "" {
		return class
	}
	out := class.DeepCopy()
	if out.Parameters == nil {
		out.Parameters = map[string]string{}
	}
	if s.MaxVolumes != nil {
		out.Parameters[wellknown.MaxVolumes] = strconv.Itoa(int(*s.MaxVolumes))
	}
	if s.MaxVolumesPerNode != nil {
		out.Parameters[wellknown.MaxVolumesPerNode] = strconv.Itoa(int(*s.MaxVolumesPerNode))
	}
	if s.MaxVolumesPerNamespace != nil {
		out.Parameters[wellknown.MaxVolumesPerNamespace] = strconv.Itoa(int(*s.MaxVolumesPerNamespace))
	}
	if s.ReserveFor != nil {
		out.Parameters[wellknown.ReserveFor] = s.ReserveFor.Duration.String()
	}
	if s.ReuseScope != "" {
		out.Parameters[wellknown.ReuseScope] = s.ReuseScope
	}
	if s.OnRelease != "" {
		out.Parameters[wellknown.OnRelease] = s.OnRelease
	}
	if s.ScrubAcrossNamespaces != nil {
		out.Parameters[wellknown.ScrubAcrossNamespaces] = strconv.FormatBool(*s.ScrubAcrossNamespaces)
	}
	if s.KeyLabel != "" {
		out.Parameters[wellknown.KeyLabel] = s.KeyLabel
	}
	if s.KeyPolicy != "" {
		out.Parameters[wellknown.KeyPolicy] = s.KeyPolicy
	}
	return out
}

// ClassesOf names the classes whose settings a change of a pool changes:
// its class, and the class it had before if that changed (which admission
// refuses), so that a controller acts on a class's new settings.
func ClassesOf(e controller.Event[*v1alpha1.VolumePool]) []string {
	var classes []string
	if e.Type == controller.Updated && e.Old.Spec.StorageClassName != e.Obj.Spec.StorageClassName && e.Old.Spec.StorageClassName != "" {
		classes = append(classes, e.Old.Spec.StorageClassName)
	}
	if e.Obj.Spec.StorageClassName != "" {
		classes = append(classes, e.Obj.Spec.StorageClassName)
	}
	return classes
}

// NoPools is an empty pool index, for a controller built without pools.
func NoPools() cache.Indexer {
	return cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{PoolsByClass: poolClass})
}
