package provisioner

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/reclaimable/reclaimable/provisioner/backend"
	"github.com/reclaimable/reclaimable/provisioner/lifecycle"
)

// backendDeps is what the backends are built with.
func backendDeps(provisionerName string, client kubernetes.Interface, classes storagelisters.StorageClassLister, cfg Config, events *lifecycle.Events, durations *prometheus.HistogramVec) backend.Deps {
	if classes == nil {
		classes = storagelisters.NewStorageClassLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}))
	}
	return backend.Deps{Provisioner: provisionerName, Client: client, Classes: classes, DirectoryRoot: cfg.DirectoryRoot,
		Pods: newLifecyclePods(client, cfg, events, durations)}
}

// newLifecyclePods runs lifecycle pods as cfg says, through client; events
// follows them and durations (if not nil) times them.
func newLifecyclePods(client kubernetes.Interface, cfg Config, events *lifecycle.Events, durations *prometheus.HistogramVec) lifecycle.Pods {
	return lifecycle.NewPods(client, cfg.LifecycleNamespace, cfg.LifecycleImage, cfg.LifecycleTimeout, events, durations).
		WithTemplate(cfg.LifecyclePodTemplate)
}
