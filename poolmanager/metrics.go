package poolmanager

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/reclaimable/reclaimable/apis/reclaimable/v1alpha1"
	"github.com/reclaimable/reclaimable/internal/controller"
	"github.com/reclaimable/reclaimable/internal/pools"
)

const subsystem = "volumepool"

// metrics report each pool as its status does, from the same decision.
type metrics struct {
	members   *prometheus.GaugeVec
	exhausted *prometheus.GaugeVec
	usedBytes *prometheus.GaugeVec
	// minAvailable is each pool's spec.minAvailable, so that an alert can
	// compare its free members with it.
	minAvailable *prometheus.GaugeVec
	writes       prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		members: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: controller.Namespace, Subsystem: subsystem, Name: "members",
			Help: "Members of each VolumePool in force, by state: free, held, reserved, bound, released, scrubbing, evicting, other (Failed or being deleted); as its status counts them."},
			[]string{"pool", "state"}),
		exhausted: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: controller.Namespace, Subsystem: subsystem, Name: "exhausted",
			Help: "1 while claims of the pool's class wait and the pool cannot grow (its Exhausted condition), else 0."},
			[]string{"pool"}),
		usedBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: controller.Namespace, Subsystem: subsystem, Name: "used_bytes",
			Help: "Bytes the free, held and reserved members of each VolumePool held when they came back to the pool (status.usedBytes); only pools whose backend measures its members (directory)."},
			[]string{"pool"}),
		minAvailable: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: controller.Namespace, Subsystem: subsystem, Name: "min_available",
			Help: "Each VolumePool's minAvailable (0 when unset): compare with members{state=\"free\"}."},
			[]string{"pool"}),
		writes: prometheus.NewCounter(prometheus.CounterOpts{Namespace: controller.Namespace, Subsystem: subsystem, Name: "status_writes_total",
			Help: "VolumePool status writes, at most one per pool per --pool-status-interval."}),
	}
	if err := controller.Register(reg, m.members, m.exhausted, m.usedBytes, m.minAvailable, m.writes); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *metrics) set(pool string, minAvailable int32, counts map[pools.MemberState]int, status v1alpha1.VolumePoolStatus) {
	m.minAvailable.WithLabelValues(pool).Set(float64(minAvailable))
	for _, s := range pools.MemberStates {
		m.members.WithLabelValues(pool, string(s)).Set(float64(counts[s]))
	}
	exhausted := 0.0
	if meta.IsStatusConditionTrue(status.Conditions, ConditionExhausted) {
		exhausted = 1
	}
	m.exhausted.WithLabelValues(pool).Set(exhausted)
	if status.UsedBytes != nil {
		m.usedBytes.WithLabelValues(pool).Set(float64(status.UsedBytes.Value()))
	} else {
		m.usedBytes.DeleteLabelValues(pool)
	}
}

// forget drops the series of a deleted pool.
func (m *metrics) forget(pool string) {
	m.members.DeletePartialMatch(prometheus.Labels{"pool": pool})
	m.exhausted.DeleteLabelValues(pool)
	m.usedBytes.DeleteLabelValues(pool)
	m.minAvailable.DeleteLabelValues(pool)
}
