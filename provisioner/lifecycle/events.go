package lifecycle

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/reclaimable/reclaimable/internal/controller"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// Events follows the lifecycle pods, so that a wait for one reads
// a cache and wakes on its changes instead of asking the API server again
// and again. The informer is its own, not the process's shared pod
// informer: that one trims pods to what the podwatcher reads, and a failed
// lifecycle pod's termination message is in the container statuses it
// drops. It runs only while the provisioner leads.
type Events struct {
	informer cache.SharedIndexInformer
	pods     corelisters.PodNamespaceLister

	mu      sync.Mutex
	changed chan struct{}
}

func NewEvents(client kubernetes.Interface, namespace string) *Events {
	f := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = wellknown.Lifecycle }),
		informers.WithTransform(func(obj any) (any, error) {
			if p, ok := obj.(*corev1.Pod); ok {
				p.ManagedFields = nil
			}
			return obj, nil
		}))
	pods := f.Core().V1().Pods()
	e := &Events{informer: pods.Informer(), pods: pods.Lister().Pods(namespace), changed: make(chan struct{})}
	// Registering on an informer not yet started fails for nothing.
	_ = controller.Handle(e.informer, func(controller.Event[*corev1.Pod]) { e.notify() })
	return e
}

// start runs the informer until ctx is done and waits for its first list.
func (e *Events) Start(ctx context.Context) error {
	go e.informer.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), e.informer.HasSynced) {
		return fmt.Errorf("syncing the lifecycle pods' cache: %w", ctx.Err())
	}
	return nil
}

// next returns a channel that is closed at the next change of any lifecycle
// pod. Take it before reading the cache, so that no change is missed.
func (e *Events) next() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.changed
}

func (e *Events) notify() {
	e.mu.Lock()
	defer e.mu.Unlock()
	close(e.changed)
	e.changed = make(chan struct{})
}
