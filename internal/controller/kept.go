package controller

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// listPage is how many objects one list request asks for: the objects a
// page brings are decoded in full before they are filtered, so the page
// bounds what a list costs in memory, whatever the size of the cluster.
const listPage = 500

// KeptPods returns an informer on the pods of namespace ("" for all) that
// caches only those keep accepts, as PodRecords (read them with AsPod and
// PodRecordLister). Most pods of a cluster ask nothing of a
// controller: they go through the watch and are dropped on arrival, costing
// no memory. A pod once accepted stays in the cache until it is deleted,
// even when keep no longer accepts it, so that no controller takes a pod
// that changed for one that is gone. Call it before Run, which starts it.
func (e *Env) KeptPods(namespace string, keep func(*corev1.Pod) bool) cache.SharedIndexInformer {
	return e.run(NewKeptPodsInformer(e.Client, namespace, keep))
}

// WaitingClaims returns an informer on the claims of the cluster that have
// no volume yet (spec.volumeName empty): a claim leaves it, as if deleted,
// once it has one. Bound claims, most of a cluster's, are left to the API
// server: a provisioner has nothing to do for them. Call it before Run.
func (e *Env) WaitingClaims() cache.SharedIndexInformer {
	return e.run(NewWaitingClaimsInformer(e.Client))
}

func (e *Env) run(inf cache.SharedIndexInformer) cache.SharedIndexInformer {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.informers = append(e.informers, inf)
	return inf
}

// NewKeptPodsInformer is the informer KeptPods returns, not yet started.
func NewKeptPodsInformer(client kubernetes.Interface, namespace string, keep func(*corev1.Pod) bool) cache.SharedIndexInformer {
	return newKeptInformer(keptPods(client, namespace, keep), &corev1.Pod{}, trimToRecord)
}

func keptPods(client kubernetes.Interface, namespace string, keep func(*corev1.Pod) bool) *kept {
	pods := client.CoreV1().Pods(namespace)
	return &kept{
		list: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return pods.List(ctx, opts)
		},
		watch:     pods.Watch,
		keep:      func(obj runtime.Object) bool { return keep(obj.(*corev1.Pod)) },
		sticky:    true,
		emptyList: &corev1.PodList{},
		kept:      sets.New[string](),
	}
}

// NewWaitingClaimsInformer is the informer WaitingClaims returns, not yet
// started.
func NewWaitingClaimsInformer(client kubernetes.Interface) cache.SharedIndexInformer {
	claims := client.CoreV1().PersistentVolumeClaims(metav1.NamespaceAll)
	return newKeptInformer(&kept{
		list: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return claims.List(ctx, opts)
		},
		watch:     claims.Watch,
		keep:      func(obj runtime.Object) bool { return obj.(*corev1.PersistentVolumeClaim).Spec.VolumeName == "" },
		emptyList: &corev1.PersistentVolumeClaimList{},
		kept:      sets.New[string](),
	}, &corev1.PersistentVolumeClaim{}, trim)
}

// newKeptInformer builds the informer of k, whose objects are of the type
// of example, and cached as transform makes them. It has no
// namespace index: a controller reads these by key, and adds the indexes
// it needs.
func newKeptInformer(k *kept, example runtime.Object, transform cache.TransformFunc) cache.SharedIndexInformer {
	inf := cache.NewSharedIndexInformerWithOptions(
		&cache.ListWatch{ListWithContextFunc: k.listKept, WatchFuncWithContext: k.watchKept, DisableChunking: true},
		example, cache.SharedIndexInformerOptions{Indexers: cache.Indexers{}})
	_ = inf.SetTransform(transform) // fails only once the informer runs
	return inf
}

// kept lists and watches objects and passes on the ones kept. kept holds
// the keys of the objects passed on and not deleted (or dropped) since: the
// informer's cache has exactly those.
type kept struct {
	list  func(context.Context, metav1.ListOptions) (runtime.Object, error)
	watch func(context.Context, metav1.ListOptions) (watch.Interface, error)
	keep  func(runtime.Object) bool
	// sticky keeps an object once kept until it is deleted; else one that
	// keep stops accepting leaves the cache as if deleted.
	sticky    bool
	emptyList runtime.Object

	mu   sync.Mutex
	kept sets.Set[string]
	// initial collects the keys kept from a watch's initial events (a
	// streamed list, WatchListClient): at their end they replace kept, as
	// a list's do.
	initial sets.Set[string]
}

func keyOf(obj runtime.Object) string {
	m, err := meta.Accessor(obj)
	if err != nil {
		return ""
	}
	return cache.ObjectName{Namespace: m.GetNamespace(), Name: m.GetName()}.String()
}

func (k *kept) keeps(obj runtime.Object) bool {
	return k.keep(obj) || k.sticky && k.kept.Has(keyOf(obj))
}

// listKept lists page by page, each page filtered before the next is asked
// for. Paging needs a list at the latest resourceVersion, which is never
// older than the one the reflector asks for.
func (k *kept) listKept(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	opts.Limit, opts.ResourceVersion, opts.ResourceVersionMatch, opts.Continue = listPage, "", "", ""
	k.mu.Lock()
	defer k.mu.Unlock()
	var items []runtime.Object
	var resourceVersion string
	keys := sets.New[string]()
	for {
		page, err := k.list(ctx, opts)
		if err != nil {
			return nil, err
		}
		pageMeta, err := meta.ListAccessor(page)
		if err != nil {
			return nil, err
		}
		if resourceVersion == "" {
			resourceVersion = pageMeta.GetResourceVersion()
		}
		objs, err := meta.ExtractList(page)
		if err != nil {
			return nil, err
		}
		for _, obj := range objs {
			if k.keeps(obj) {
				keys.Insert(keyOf(obj))
				items = append(items, obj)
			}
		}
		if pageMeta.GetContinue() == "" {
			break
		}
		opts.Continue = pageMeta.GetContinue()
	}
	out := k.emptyList.DeepCopyObject()
	if err := meta.SetList(out, items); err != nil {
		return nil, err
	}
	outMeta, err := meta.ListAccessor(out)
	if err != nil {
		return nil, err
	}
	outMeta.SetResourceVersion(resourceVersion)
	k.kept = keys
	return out, nil
}

func (k *kept) watchKept(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	w, err := k.watch(ctx, opts)
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	k.initial = nil
	if opts.SendInitialEvents != nil && *opts.SendInitialEvents {
		k.initial = sets.New[string]()
	}
	k.mu.Unlock()
	return watch.Filter(w, k.filter), nil
}

// filter passes on the events of the objects kept, and of those that become
// kept (added, for the cache, as an update of an unknown object is); an
// object that stops being kept is passed on deleted, unless sticky.
func (k *kept) filter(ev watch.Event) (watch.Event, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if ev.Type == watch.Bookmark && k.initial != nil {
		if m, err := meta.Accessor(ev.Object); err == nil && m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
			k.kept, k.initial = k.initial, nil
		}
	}
	if ev.Type != watch.Added && ev.Type != watch.Modified && ev.Type != watch.Deleted {
		return ev, true // bookmarks and errors
	}
	key := keyOf(ev.Object)
	switch {
	case ev.Type == watch.Deleted || !k.keeps(ev.Object):
		if !k.kept.Has(key) {
			return ev, false
		}
		k.kept.Delete(key)
		ev.Type = watch.Deleted
	default:
		k.kept.Insert(key)
		if k.initial != nil {
			k.initial.Insert(key)
		}
	}
	return ev, true
}
