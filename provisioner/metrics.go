package provisioner

import (
	"github.com/prometheus/client_golang/prometheus"
	libmetrics "sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller/metrics"

	"github.com/reclaimable/reclaimable/internal/controller"
	"github.com/reclaimable/reclaimable/provisioner/lifecycle"
)

const subsystem = "provisioner"

// metrics count what the provisioner decided, per StorageClass. The library
// adds its own provision and delete counters and durations under the same
// prefix (reclaimable_provisioner_persistentvolume*).
type metrics struct {
	issued    *prometheus.CounterVec
	early     *prometheus.CounterVec
	created   *prometheus.CounterVec
	exhausted *prometheus.CounterVec
	// namespaceAtMaximum counts the attempts refused for a namespace at
	// maxVolumesPerNamespace, by class.
	namespaceAtMaximum *prometheus.CounterVec
	conflicts          *prometheus.CounterVec
	issues             *prometheus.CounterVec
	lifecycle          *prometheus.HistogramVec
	madeAhead          *prometheus.HistogramVec
	// scrubFailures counts failed scrubs by class.
	scrubFailures *prometheus.CounterVec
	// evictions counts the members fenced for eviction, by class and cause.
	evictions *prometheus.CounterVec
	// firstConsumer counts the claims that waited for their first
	// consumer, by class and how they were served on its node.
	firstConsumer *prometheus.CounterVec
	// members reports the pool volumes by class, state and namespace.
	members *scrapedGauge
	// waiting reports the claims waiting for a full pool, by class.
	waiting *scrapedGauge
	lib     libmetrics.Metrics
}

// newMetrics registers the provisioner's metrics and the library's. The
// scraped gauges (pool_members, claims_waiting) report nothing until
// the provisioner sets what they collect.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	class := []string{"class"}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: controller.Namespace, Subsystem: subsystem, Name: name, Help: help,
		}, class)
	}
	m := &metrics{
		issued: counter("pool_issued_total",
			"Claims given a volume from the retained pool, data included."),
		early: counter("pool_issued_early_total",
			"Of pool_issued_total, the claims given a member as soon as the provisioner saw them created, before the PV controller marked them for it (the early hand-off)."),
		created: counter("volumes_created_total",
			"Volumes created because the pool had none that fits (pool misses)."),
		exhausted: counter("pool_exhausted_total",
			"Provisioning attempts refused because the pool had nothing to give and could not grow."),
		namespaceAtMaximum: counter("namespace_at_maximum_total",
			"Provisioning attempts refused because the claim's namespace had maxVolumesPerNamespace members of the class and none of them was free for the claim; the claim waits."),
		conflicts: counter("pool_take_conflicts_total",
			"Pool volumes another writer changed first while this provisioner tried to take them; the next one was tried."),
		issues: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: controller.Namespace, Subsystem: subsystem, Name: "issues_total",
			Help: "Volumes given to claims, by class, kind (same-claim: the claim that used it last came back; other-member: a warm volume of the pool; made-ahead; new-volume) and key (own: last issued under the claim's cache key; other: under another key or none; fresh: no claim had it; none: the claim has no key)."},
			[]string{"class", "kind", "key"}),
		lifecycle: lifecycle.NewDurations(subsystem),
		madeAhead: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: controller.Namespace, Subsystem: subsystem, Name: "made_ahead_duration_seconds",
			Help:    "Members made ahead of claims for a VolumePool's minAvailable, by class: the time to make one, from its volume object to its storage ready.",
			Buckets: []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120}},
			[]string{"class"}),
		scrubFailures: counter("scrub_failures_total",
			"Scrubs that failed (the volume stays out of the pool, and the scrub is retried with back-off); the durations of scrub pods are lifecycle_pod_duration_seconds{op=\"scrub\"}."),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: controller.Namespace, Subsystem: subsystem, Name: "evictions_total",
			Help: "Members removed from their pool with their data, by class and cause: idle (evictAfter), above-maximum (shrinkToMaximum), for-claim (evictForClaims), above-bytes (evictAboveBytes)."},
			[]string{"class", "cause"}),
		firstConsumer: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: controller.Namespace, Subsystem: subsystem, Name: "first_consumer_claims_total",
			Help: "Claims that waited for their first consumer (WaitForFirstConsumer), by class and how they were served on the node the scheduler chose: member (a pool member reachable there, in its zone or on the node), grew (a new volume: no free member fits the claim), grew-out-of-reach (a new volume, while free members that fit the claim are out of the node's reach: in another zone, or on another node)."},
			[]string{"class", "result"}),
		members: &scrapedGauge{desc: prometheus.NewDesc(prometheus.BuildFQName(controller.Namespace, subsystem, "pool_members"),
			"Volumes of this provisioner's pools, by class and state: free, reserved (for a claim's name, reserveFor), bound, released; a free or reserved one by the namespace whose claims alone may have it (reuseScope namespace), \"\" for any.",
			[]string{"class", "state", "namespace"}, nil)},
		waiting: &scrapedGauge{desc: prometheus.NewDesc(prometheus.BuildFQName(controller.Namespace, subsystem, "claims_waiting"),
			"Claims of each class waiting for their pool: none fits them and the pool cannot grow (at maxVolumes, or a static pool), counted at each scrape. Above 0 for long: the pool is exhausted.",
			[]string{"class"}, nil)},
		lib: libmetrics.New(controller.Namespace + "_" + subsystem),
	}
	if err := controller.Register(reg,
		m.issued, m.early, m.created, m.exhausted, m.namespaceAtMaximum, m.conflicts, m.issues, m.lifecycle, m.madeAhead, m.scrubFailures, m.evictions, m.firstConsumer, m.members, m.waiting,
		m.lib.PersistentVolumeClaimProvisionTotal,
		m.lib.PersistentVolumeClaimProvisionFailedTotal,
		m.lib.PersistentVolumeClaimProvisionDurationSeconds,
		m.lib.PersistentVolumeDeleteTotal,
		m.lib.PersistentVolumeDeleteFailedTotal,
		m.lib.PersistentVolumeDeleteDurationSeconds,
	); err != nil {
		return nil, err
	}
	return m, nil
}

// scrapedGauge reports a gauge counted at each scrape from what the
// provisioner remembers (the volume cache, the waiting claims), so that it
// is never stale; collect is set once that exists.
type scrapedGauge struct {
	desc *prometheus.Desc
	// collect calls sample for each series: its value and label values.
	collect func(sample func(value int, labelValues ...string))
}

func (c *scrapedGauge) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *scrapedGauge) Collect(ch chan<- prometheus.Metric) {
	if c.collect == nil {
		return
	}
	c.collect(func(value int, labelValues ...string) {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(value), labelValues...)
	})
}
