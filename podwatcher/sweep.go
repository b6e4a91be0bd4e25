package podwatcher

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/reclaimable/reclaimable/internal/controller"
)

// The sweep: the safety net for every event a replica did not see, and at
// start the only way the objects of the informers' initial lists are
// queued.

// sweepRoom is how many keys a sweep lets wait in the queue at once.
const sweepRoom = 256

// sweep queues every gated pod (first: a user waits for it), every owner
// that asks for claims (to catch claims missing for any reason) and every
// managed claim (to catch owners gone unseen): at start, the objects of the
// initial lists, which the handlers leave to it. It queues them as the
// queue has room (sweepRoom), so that the queue's bookkeeping stays the
// size of the room, not of the caches.
func (c *Controller) sweep(ctx context.Context) {
	var owners, claims int
	add := func(k ref) bool {
		if !c.queue.WaitForRoom(ctx, sweepRoom) {
			return false
		}
		c.queue.Add(k)
		return true
	}
	gated, _ := c.podIndexer.ByIndex(gatedIndex, "")
	for _, o := range gated {
		if pod, ok := controller.AsPodRecord(o); ok {
			if !add(ref{kindPod, pod.Namespace, pod.Name}) {
				return
			}
			owners++
		}
	}
	for _, kind := range []string{kindPod, kindJob} {
		for _, k := range c.ownerIndexer(kind).ListKeys() {
			obj, exists, _ := c.ownerIndexer(kind).GetByKey(k)
			if !exists || !ownerConcerned(kind, obj) || kind == kindPod && isGated(obj) {
				continue
			}
			meta := obj.(metav1.Object)
			if !add(ref{kind, meta.GetNamespace(), meta.GetName()}) {
				return
			}
			owners++
		}
	}
	for _, k := range c.claimIndexer.ListKeys() {
		ns, name, _ := cache.SplitMetaNamespaceKey(k)
		if !add(ref{kindClaim, ns, name}) {
			return
		}
		claims++
	}
	klog.FromContext(ctx).V(4).Info("Sweep queued claims and owners", "claims", claims, "owners", owners)
}

func (c *Controller) ownerIndexer(kind string) cache.Indexer {
	if kind == kindJob {
		return c.jobIndexer
	}
	return c.podIndexer
}
