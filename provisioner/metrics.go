package provisioner

import (
	"github.com/prometheus/client_golang/prometheus"
	libmetrics "sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller/metrics"

	"github.com/reclaimable/reclaimable/internal/controller"
)

const subsystem = "provisioner"

// metrics count what the provisioner decided, per StorageClass. The library
// adds its own provision and delete counters and durations under the same
// prefix (reclaimable_provisioner_persistentvolume*).
type metrics struct {
	issued    *prometheus.CounterVec
	created   *prometheus.CounterVec
	exhausted *prometheus.CounterVec
	conflicts *prometheus.CounterVec
	lib       libmetrics.Metrics
}

func newMetrics() *metrics {
	class := []string{"class"}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: controller.Namespace, Subsystem: subsystem, Name: name, Help: help,
		}, class)
	}
	return &metrics{
		issued: counter("pool_issued_total",
			"Claims given a volume from the retained pool, data included."),
		created: counter("volumes_created_total",
			"Volumes created because the pool had none that fits (pool misses)."),
		exhausted: counter("pool_exhausted_total",
			"Provisioning attempts refused because the pool had nothing to give and could not grow."),
		conflicts: counter("pool_take_conflicts_total",
			"Pool volumes another writer changed first while this provisioner tried to take them; the next one was tried."),
		lib: libmetrics.New(controller.Namespace + "_" + subsystem),
	}
}

func (m *metrics) register(r prometheus.Registerer) error {
	return controller.Register(r,
		m.issued, m.created, m.exhausted, m.conflicts,
		m.lib.PersistentVolumeClaimProvisionTotal,
		m.lib.PersistentVolumeClaimProvisionFailedTotal,
		m.lib.PersistentVolumeClaimProvisionDurationSeconds,
		m.lib.PersistentVolumeDeleteTotal,
		m.lib.PersistentVolumeDeleteFailedTotal,
		m.lib.PersistentVolumeDeleteDurationSeconds,
	)
}
