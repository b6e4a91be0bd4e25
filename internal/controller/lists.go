package controller

import (
	"os"
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/features"
	"k8s.io/client-go/rest"
)

// streamListsEnv is the variable through which client-go lets a user turn
// its WatchListClient feature on or off; when it is set, its word stands.
const streamListsEnv = "KUBE_FEATURE_" + string(features.WatchListClient)

var streamListsOnce sync.Once

// StreamInitialLists makes informers fill their caches from a watch that
// sends the existing objects one at a time (the API server's streaming
// lists), instead of from one LIST response that holds them all: with
// thousands of Pods the decoded response, garbage the moment the cache is
// filled, is what sets a controller's peak memory. An API server that cannot
// stream makes client-go fall back to LIST by itself.
// It replaces client-go's feature gates for the whole process, so main
// decides it, before any informer starts.
func StreamInitialLists() {
	streamListsOnce.Do(func() {
		if _, set := os.LookupEnv(streamListsEnv); set {
			return
		}
		features.ReplaceFeatureGates(watchListGates{features.FeatureGates()})
	})
}

type watchListGates struct{ features.Gates }

func (g watchListGates) Enabled(f features.Feature) bool {
	return f == features.WatchListClient || g.Gates.Enabled(f)
}

// useProtobuf has cfg speak protobuf, as the Kubernetes components do for
// built-in types: decoding it costs a fraction of the CPU and garbage of
// JSON.
func useProtobuf(cfg *rest.Config) {
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
}
