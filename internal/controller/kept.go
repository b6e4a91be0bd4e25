package controller

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// listPage is how many pods one list request asks for: the pods a page
// brings are decoded in full before they are filtered, so the page bounds
// what a list costs in memory, whatever the size of the cluster.
const listPage = 500

// KeptPods returns an informer on the pods of namespace ("" for all) that
// caches only those keep accepts. Most pods of a cluster ask nothing of a
// controller: they go through the watch and are dropped on arrival, costing
// no memory. A pod once accepted stays in the cache until it is deleted,
// even when keep no longer accepts it, so that no controller takes a pod
// that changed for one that is gone. Call it before Run, which starts it.
func (e *Env) KeptPods(namespace string, keep func(*corev1.Pod) bool) cache.SharedIndexInformer {
	inf := NewKeptPodsInformer(e.Client, namespace, keep)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.informers = append(e.informers, inf)
	return inf
}

// NewKeptPodsInformer is the informer KeptPods returns, not yet started.
// Its objects are trimmed as the shared informers' are.
func NewKeptPodsInformer(client kubernetes.Interface, namespace string, keep func(*corev1.Pod) bool) cache.SharedIndexInformer {
	k := &keptPods{client: client, namespace: namespace, keep: keep, kept: sets.New[string]()}
	inf := cache.NewSharedIndexInformerWithOptions(
		&cache.ListWatch{ListWithContextFunc: k.list, WatchFuncWithContext: k.watch, DisableChunking: true},
		// No namespace index: pods are read by key, and one entry per pod
		// is memory spent for nothing.
		&corev1.Pod{}, cache.SharedIndexInformerOptions{Indexers: cache.Indexers{}})
	_ = inf.SetTransform(trim) // fails only once the informer runs
	return inf
}

// keptPods lists and watches pods and passes on the ones kept. kept holds
// the keys of the pods passed on and not deleted since: the informer's
// cache has exactly those.
type keptPods struct {
	client    kubernetes.Interface
	namespace string
	keep      func(*corev1.Pod) bool

	mu   sync.Mutex
	kept sets.Set[string]
}

func (k *keptPods) keeps(pod *corev1.Pod) bool {
	return k.keep(pod) || k.kept.Has(cache.MetaObjectToName(pod).String())
}

// list lists the pods page by page, each page filtered before the next is
// asked for. Paging needs a list at the latest resourceVersion, which is
// never older than the one the reflector asks for.
func (k *keptPods) list(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	opts.Limit, opts.ResourceVersion, opts.ResourceVersionMatch, opts.Continue = listPage, "", "", ""
	k.mu.Lock()
	defer k.mu.Unlock()
	out := &corev1.PodList{}
	kept := sets.New[string]()
	for {
		page, err := k.client.CoreV1().Pods(k.namespace).List(ctx, opts)
		if err != nil {
			return nil, err
		}
		if out.ResourceVersion == "" {
			out.ListMeta = page.ListMeta
		}
		for i := range page.Items {
			if pod := &page.Items[i]; k.keeps(pod) {
				kept.Insert(cache.MetaObjectToName(pod).String())
				out.Items = append(out.Items, *pod)
			}
		}
		if page.Continue == "" {
			break
		}
		opts.Continue = page.Continue
	}
	out.Continue = ""
	k.kept = kept
	return out, nil
}

func (k *keptPods) watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	w, err := k.client.CoreV1().Pods(k.namespace).Watch(ctx, opts)
	if err != nil {
		return nil, err
	}
	return watch.Filter(w, k.filter), nil
}

// filter passes on the events of the pods kept, and of those that become
// kept (added, for the cache, as an update of an unknown pod is).
func (k *keptPods) filter(ev watch.Event) (watch.Event, bool) {
	pod, ok := ev.Object.(*corev1.Pod)
	if !ok {
		return ev, true // bookmarks and errors
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	name := cache.MetaObjectToName(pod).String()
	switch ev.Type {
	case watch.Added, watch.Modified:
		if !k.keeps(pod) {
			return ev, false
		}
		k.kept.Insert(name)
	case watch.Deleted:
		if !k.kept.Has(name) {
			return ev, false
		}
		k.kept.Delete(name)
	}
	return ev, true
}
