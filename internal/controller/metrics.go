package controller

import (
	"regexp"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
)

// Namespace prefixes every metric the controllers export.
const Namespace = "reclaimable"

// Registry is a process's metrics registry. It keeps the collectors
// registered with it, so that Names lists every metric the process exports,
// including a vector that has no sample yet and so is absent from a scrape:
// the metrics reference is checked against that list.
type Registry struct {
	*prometheus.Registry

	mu         sync.Mutex
	collectors []prometheus.Collector
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{Registry: prometheus.NewRegistry()}
}

// Register registers c, and keeps it for Names.
func (r *Registry) Register(c prometheus.Collector) error {
	if err := r.Registry.Register(c); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.collectors = append(r.collectors, c)
	return nil
}

// MustRegister registers each collector, and panics at the first that
// cannot be.
func (r *Registry) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// descName finds a Desc's fully-qualified name in its String form, the only
// place the prometheus client shows it.
var descName = regexp.MustCompile(`fqName: "([^"]*)"`)

// Names returns the sorted names of every metric registered so far.
func (r *Registry) Names() []string {
	r.mu.Lock()
	collectors := slices.Clone(r.collectors)
	r.mu.Unlock()
	ch := make(chan *prometheus.Desc)
	go func() {
		for _, c := range collectors {
			c.Describe(ch)
		}
		close(ch)
	}()
	var names []string
	for d := range ch {
		if m := descName.FindStringSubmatch(d.String()); m != nil {
			names = append(names, m[1])
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// Register registers a controller's collectors with the process's registry,
// stopping at the first that cannot be: two controllers, or two of the same,
// exporting one name.
func Register(reg prometheus.Registerer, collectors ...prometheus.Collector) error {
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

var workqueueProvider struct {
	once sync.Once
	p    *queueMetrics
}

// ExportWorkqueueMetrics exports depth, latency and retries of every
// workqueue made after it, in registry. client-go takes one provider per
// process, so main calls it, once, before the controllers make their
// queues; later calls change nothing.
func ExportWorkqueueMetrics(registry prometheus.Registerer) {
	workqueueProvider.once.Do(func() {
		p := newQueueMetrics()
		registry.MustRegister(p.depth, p.adds, p.latency, p.workDuration, p.unfinished, p.longestRunning, p.retries)
		workqueue.SetProvider(p)
		workqueueProvider.p = p
	})
}

type queueMetrics struct {
	depth, unfinished, longestRunning *prometheus.GaugeVec
	adds, retries                     *prometheus.CounterVec
	latency, workDuration             *prometheus.HistogramVec
}

func newQueueMetrics() *queueMetrics {
	name := []string{"name"}
	buckets := prometheus.ExponentialBuckets(0.001, 4, 10)
	return &queueMetrics{
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Subsystem: "workqueue", Name: "depth",
			Help: "Keys waiting in the workqueue."}, name),
		adds: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Subsystem: "workqueue", Name: "adds_total",
			Help: "Keys added to the workqueue."}, name),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Subsystem: "workqueue", Name: "queue_duration_seconds",
			Help: "Time a key waits in the workqueue before a worker takes it.", Buckets: buckets}, name),
		workDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Subsystem: "workqueue", Name: "work_duration_seconds",
			Help: "Time a sync takes.", Buckets: buckets}, name),
		unfinished: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Subsystem: "workqueue", Name: "unfinished_work_seconds",
			Help: "Seconds of work in progress not yet observed by work_duration."}, name),
		longestRunning: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Subsystem: "workqueue", Name: "longest_running_processor_seconds",
			Help: "Seconds the longest running sync has taken so far."}, name),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Subsystem: "workqueue", Name: "retries_total",
			Help: "Keys retried after a failed sync."}, name),
	}
}

func (m *queueMetrics) NewDepthMetric(n string) workqueue.GaugeMetric {
	return m.depth.WithLabelValues(n)
}
func (m *queueMetrics) NewAddsMetric(n string) workqueue.CounterMetric {
	return m.adds.WithLabelValues(n)
}
func (m *queueMetrics) NewLatencyMetric(n string) workqueue.HistogramMetric {
	return m.latency.WithLabelValues(n)
}
func (m *queueMetrics) NewWorkDurationMetric(n string) workqueue.HistogramMetric {
	return m.workDuration.WithLabelValues(n)
}
func (m *queueMetrics) NewUnfinishedWorkSecondsMetric(n string) workqueue.SettableGaugeMetric {
	return m.unfinished.WithLabelValues(n)
}
func (m *queueMetrics) NewLongestRunningProcessorSecondsMetric(n string) workqueue.SettableGaugeMetric {
	return m.longestRunning.WithLabelValues(n)
}
func (m *queueMetrics) NewRetriesMetric(n string) workqueue.CounterMetric {
	return m.retries.WithLabelValues(n)
}
