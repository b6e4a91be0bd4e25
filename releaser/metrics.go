package releaser

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/reclaimable/reclaimable/internal/controller"
)

// Reasons of the errors metric (and of the Warning events where a user can act).
const (
	errConflict        = "Conflict"
	errAssociate       = "AssociateFailed"
	errRelease         = "ReleaseFailed"
	errClaimCheck      = "ClaimCheckFailed"
	errInvalidClaimRef = "InvalidClaimRef"
)

type metrics struct {
	associations *prometheus.CounterVec
	releases     prometheus.Counter
	errors       *prometheus.CounterVec
}

// newMetrics registers the releaser's metrics. oldest returns the age in
// seconds of the oldest volume that is associated with this installation and
// Released: a value that keeps growing means a volume is stuck.
func newMetrics(reg prometheus.Registerer, oldest func() float64) (*metrics, error) {
	const sub = "releaser"
	m := &metrics{
		associations: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: controller.Namespace, Subsystem: sub,
			Name: "associations_total", Help: "Volumes associated with this controller ID, by the rule that matched."}, []string{"rule"}),
		releases: prometheus.NewCounter(prometheus.CounterOpts{Namespace: controller.Namespace, Subsystem: sub,
			Name: "releases_total", Help: "Released volumes returned to the pool."}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: controller.Namespace, Subsystem: sub,
			Name: "errors_total", Help: "Failed associations, releases and claim checks, by reason."}, []string{"reason"}),
	}
	gauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: controller.Namespace, Subsystem: sub,
		Name: "oldest_released_seconds",
		Help: "Age of the oldest volume associated with this controller ID that is still Released; 0 if none."}, oldest)
	for _, r := range []rule{ruleManagedClaim, ruleStorageClass, ruleProvisioner} {
		m.associations.WithLabelValues(string(r))
	}
	for _, r := range []string{errConflict, errAssociate, errRelease, errClaimCheck, errInvalidClaimRef} {
		m.errors.WithLabelValues(r)
	}
	if err := controller.Register(reg, m.associations, m.releases, m.errors, gauge); err != nil {
		return nil, err
	}
	return m, nil
}

// oldestReleasedSeconds is the oldest_released_seconds gauge: the age of the
// oldest volume of this controller ID that is still Released.
func (c *Controller) oldestReleasedSeconds() float64 {
	objs, err := c.volumeIndex.ByIndex(byReleased, c.policy.controllerID)
	if err != nil {
		return 0
	}
	pvs := make([]*corev1.PersistentVolume, 0, len(objs))
	for _, obj := range objs {
		if pv, ok := obj.(*corev1.PersistentVolume); ok {
			pvs = append(pvs, pv)
		}
	}
	return c.releasedTime.oldest(pvs, c.clock.Now()).Seconds()
}

// releasedClock tells since when a volume has been Released. The PV
// controller records the time of every phase change in
// status.lastPhaseTransitionTime; for a volume without it (an older cluster)
// the first time the releaser saw it Released stands in.
type releasedClock struct {
	mu        sync.Mutex
	firstSeen map[types.UID]time.Time
}

// oldest returns the age of the oldest of pvs, all Released, and forgets
// volumes that are no longer among them.
func (r *releasedClock) oldest(pvs []*corev1.PersistentVolume, now time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := make(map[types.UID]time.Time, len(r.firstSeen))
	var oldest time.Duration
	for _, pv := range pvs {
		var since time.Time
		if t := pv.Status.LastPhaseTransitionTime; t != nil {
			since = t.Time
		} else {
			since = now
			if t, ok := r.firstSeen[pv.UID]; ok {
				since = t
			}
			seen[pv.UID] = since
		}
		if age := now.Sub(since); age > oldest {
			oldest = age
		}
	}
	r.firstSeen = seen
	return oldest
}
