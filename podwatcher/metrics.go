package podwatcher

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/reclaimable/reclaimable/internal/controller"
)

type metrics struct {
	created      prometheus.Counter
	deleted      prometheus.Counter
	leftToGC     prometheus.Counter
	gatesRemoved prometheus.Counter
	rejections   *prometheus.CounterVec
	apiErrors    *prometheus.CounterVec
}

// newMetrics registers the podwatcher's metrics. gated counts the pods held
// by the claims gate and tells the age of the oldest, read from the cache
// at each scrape.
func newMetrics(registry prometheus.Registerer, gated func() (int, time.Duration)) (*metrics, error) {
	const subsystem = "podwatcher"
	m := &metrics{
		created: prometheus.NewCounter(prometheus.CounterOpts{Namespace: controller.Namespace, Subsystem: subsystem, Name: "claims_created_total",
			Help: "Claims created for annotated Pods and Jobs."}),
		deleted: prometheus.NewCounter(prometheus.CounterOpts{Namespace: controller.Namespace, Subsystem: subsystem, Name: "claims_deleted_total",
			Help: "Claims the podwatcher deleted because the Pod or Job they were created for no longer exists."}),
		leftToGC: prometheus.NewCounter(prometheus.CounterOpts{Namespace: controller.Namespace, Subsystem: subsystem, Name: "claims_left_to_garbage_collector_total",
			Help: "Claims of a Pod or Job found gone that still referenced it and were left to the garbage collector to delete (each claim counted once)."}),
		gatesRemoved: prometheus.NewCounter(prometheus.CounterOpts{Namespace: controller.Namespace, Subsystem: subsystem, Name: "scheduling_gates_removed_total",
			Help: "Claims gates removed from pods whose claims all exist."}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: controller.Namespace, Subsystem: subsystem, Name: "rejections_total",
			Help: "Claim requests refused, by the reason of the Warning event on the Pod or Job (each problem counted once)."}, []string{"reason"}),
		apiErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: controller.Namespace, Subsystem: subsystem, Name: "api_errors_total",
			Help: "Requests to the API server that failed unexpectedly, by operation."}, []string{"operation"}),
	}
	gatedPods := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: controller.Namespace, Subsystem: subsystem, Name: "gated_pods",
		Help: "Pods held by the claims scheduling gate."}, func() float64 {
		n, _ := gated()
		return float64(n)
	})
	oldestGated := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: controller.Namespace, Subsystem: subsystem, Name: "oldest_gated_seconds",
		Help: "Age of the oldest pod held by the claims scheduling gate (0: none); it grows while a pod waits for a claim that does not come."}, func() float64 {
		_, oldest := gated()
		return oldest.Seconds()
	})
	if err := controller.Register(registry, m.created, m.deleted, m.leftToGC, m.gatesRemoved, m.rejections, m.apiErrors, gatedPods, oldestGated); err != nil {
		return nil, err
	}
	return m, nil
}
