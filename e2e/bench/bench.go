// Package bench measures the full volume cycle on a local control plane:
// latency of each step, throughput, the API requests our controllers send,
// their CPU and memory, start-up and memory with many objects present, and
// leader failover. Every figure is set against a floor: the same cycle done
// with the fewest requests and no controllers, which is what the API server
// and the PV controller need anyway. The latency and throughput figures are
// also set against a pod floor: the floor's cycle with the pod ours has, so
// that what any pod with a claim costs is not read as our controllers' work.
package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/reclaimable/reclaimable/apis/reclaimable/v1alpha1"
	"github.com/reclaimable/reclaimable/client/clientset/versioned"
	"github.com/reclaimable/reclaimable/e2e/cluster"
	"github.com/reclaimable/reclaimable/e2e/objects"
	"github.com/reclaimable/reclaimable/e2e/process"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// Config shapes a run.
type Config struct {
	// Cycles at Concurrency make the latency and API cost phase, for ours
	// and for the floor.
	Cycles, Concurrency int
	// MissEvery: one cycle in MissEvery of the latency phase asks for a size
	// no pool volume has (a pool miss); the others can be served from the pool.
	MissEvery int
	// ThroughputLevels are the concurrencies of the throughput phase, each
	// measured over ThroughputDuration.
	ThroughputLevels   []int
	ThroughputDuration time.Duration
	// Scale annotated pods, with as many claims and volumes, for the
	// start-up and memory phase, beside ScalePlain plain pods; 0 skips
	// it. ScaleSettle is how long the controllers run with them before
	// their memory is read.
	Scale       int
	ScalePlain  int
	ScaleSettle time.Duration
	// ScaleLimits are memory limits (Kubernetes quantities) under which
	// the controllers are measured again with every scale object present,
	// each a fresh start with the limit as MEMORY_LIMIT, as the
	// Deployments' downward API would give it: what to size a limit by.
	ScaleLimits []string
	// Failover measures a killed leader's replacement.
	Failover bool
	// PodFloor runs the pod floor's latency and throughput phases.
	PodFloor bool
	// SchedulingCycles of each variant of the scheduling phase (pod created
	// -> scheduled, with and without the claims gate, and claim first) at
	// each of SchedulingLevels; 0 skips it.
	SchedulingCycles int
	SchedulingLevels []int
	// RecurringCycles of the recurring-workload run (claim names that come
	// back, on a class with reserveFor ReserveFor); 0 skips it.
	RecurringCycles int
	ReserveFor      string
	// NodeLocalCycles of each kind of the node-local run (a miss, a hit and
	// the floor, on a real node); 0 skips it.
	NodeLocalCycles int
	// MadeAheadCycles of each part of the made-ahead run (claims no member
	// fits, without and with a pool's minAvailable); 0 skips it.
	MadeAheadCycles int
	// ClassPoolCycles of each part of the class-pool run (claims on a CSI
	// class, then misses and hits of a pool in front of it); 0 skips it.
	ClassPoolCycles int
	// KeyCycles of each setting of the CI-runs-by-key run (claims of
	// generated names under a few cache keys); 0 skips it.
	KeyCycles int
	// EvictCycles of each part of the eviction run (a claim at a pool's
	// maximum that takes the free member, or evicts it); 0 skips it.
	EvictCycles int
	// Dir holds the control plane, the binary and the controllers' logs.
	Dir string
	// Log receives progress lines.
	Log io.Writer
}

// Defaults fills what is unset.
func (c *Config) Defaults() {
	if c.Cycles == 0 {
		c.Cycles = 200
	}
	if c.Concurrency == 0 {
		c.Concurrency = 10
	}
	if c.MissEvery == 0 {
		c.MissEvery = 5
	}
	if c.ThroughputDuration == 0 {
		c.ThroughputDuration = 30 * time.Second
	}
	if c.ScaleSettle == 0 {
		c.ScaleSettle = 65 * time.Second
	}
	if c.ReserveFor == "" {
		c.ReserveFor = "10m"
	}
	if c.SchedulingCycles > 0 && len(c.SchedulingLevels) == 0 {
		c.SchedulingLevels = []int{1, 10}
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
}

// The installation under test, as the manifests deploy it (default lease
// timings), but on a private control plane.
const (
	controllerID    = "bench"
	provisionerName = "vendor/reclaimable"
)

type bench struct {
	cfg        Config
	client     kubernetes.Interface
	cluster    *cluster.Cluster
	rec        *recorder
	inst       *installation
	ns         string
	class      string
	floorNS    string
	floorClass string
	// The pod floor's namespace and class (with a pool of its own).
	podFloorNS    string
	podFloorClass string
	base          string
	missSeq       atomic.Int64
	seq           atomic.Int64
	// ourCycles counts the cycles through the controllers that completed.
	ourCycles atomic.Int64

	mu      sync.Mutex
	deleted map[string]time.Time // owners deleted, "namespace/claim name"
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.cfg.Log, "%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func (b *bench) ownerDeleted(key string, at time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.deleted[key] = at
}

// Run starts a control plane, runs every phase and returns the report.
// A phase that fails leaves a note and the report goes on without it;
// only a control plane or binary that cannot start is an error.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg.Defaults()
	r := newReport(cfg)
	b, stop, err := start(ctx, cfg, r)
	if err != nil {
		return nil, err
	}
	defer stop()

	floors := b.floors(ctx, r)
	if err := b.latencyAndCost(ctx, r, floors); err != nil {
		return nil, err
	}
	b.throughput(ctx, r, floors)
	b.resources(r)
	b.scheduling(ctx, r)
	b.reservations(ctx, r)
	b.keyRuns(ctx, r)
	b.runPhases(ctx, r)

	r.Duration = time.Since(r.Started).Round(time.Second).String()
	r.Evaluate()
	return r, nil
}

func newReport(cfg Config) *Report {
	return &Report{Started: time.Now(), Machine: machine(), Settings: Settings{
		Cycles: cfg.Cycles, Concurrency: cfg.Concurrency, MissEvery: cfg.MissEvery,
		ThroughputLevels: cfg.ThroughputLevels, ThroughputDuration: cfg.ThroughputDuration.String(),
		Scale: cfg.Scale, ScalePlain: cfg.ScalePlain, PodFloor: cfg.PodFloor,
		SchedulingCycles: cfg.SchedulingCycles, SchedulingLevels: cfg.SchedulingLevels, RecurringCycles: cfg.RecurringCycles,
		NodeLocalCycles: cfg.NodeLocalCycles, MadeAheadCycles: cfg.MadeAheadCycles, EvictCycles: cfg.EvictCycles, ClassPoolCycles: cfg.ClassPoolCycles,
		KeyCycles: cfg.KeyCycles,
	}}
}

// note records in the report, and logs, what went wrong or was left out.
func (b *bench) note(r *Report, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	b.logf("NOTE: %s", msg)
	r.Notes = append(r.Notes, msg)
}

// start builds the binary, starts the control plane and the recorder, and
// creates the namespaces, classes and floors' volumes. The controllers are
// prepared, not started: the floors run without them. stop ends all of it.
func start(ctx context.Context, cfg Config, r *Report) (_ *bench, stop func(), err error) {
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, nil, err
	}
	b := &bench{cfg: cfg, rec: newRecorder(), deleted: map[string]time.Time{},
		ns: "bench", class: "bench", floorNS: "floor", floorClass: "bench-floor",
		podFloorNS: "podfloor", podFloorClass: "bench-podfloor",
		base: filepath.Join(cfg.Dir, "volumes", "pool")}
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()

	b.logf("Building reclaimable")
	binary, err := process.Build(ctx, cfg.Dir)
	if err != nil {
		return nil, nil, err
	}
	b.logf("Starting the local control plane")
	opts := cluster.Options{Dir: filepath.Join(cfg.Dir, "cluster"), Log: cfg.Log, ControllerManagerQPS: 200}
	c, err := cluster.Start(ctx, opts)
	if err != nil {
		return nil, nil, err
	}
	stops = append(stops, c.Stop)
	r.Settings.ControllerManager = fmt.Sprintf("controller-manager client %d QPS / %d burst, PV controller resync 5s", opts.ControllerManagerQPS, 2*opts.ControllerManagerQPS)
	b.cluster, b.client = c, c.Client
	recCtx, stopRec := context.WithCancel(ctx)
	stops = append(stops, stopRec)
	b.rec.start(recCtx, b.client)
	if err := b.setup(ctx); err != nil {
		return nil, nil, err
	}
	b.inst = &installation{binary: binary, logDir: logDirFor(cfg.Dir), args: []string{
		"--kubeconfig=" + c.Kubeconfig,
		"--controller-id=" + controllerID,
		"--provisioner-name=" + provisionerName,
		"--leader-elect-resource-namespace=default",
		"--profiling",
	}, extra: map[string][]string{"provisioner": {"--directory-root=" + filepath.Dir(b.base)}}}
	// Processes, not pods: each is given the memory limit its Deployment
	// would give it.
	if b.inst.env, err = manifestEnv(); err != nil {
		return nil, nil, err
	}
	if cfg.NodeLocalCycles > 0 {
		b.inst.extra["provisioner"] = append(b.inst.extra["provisioner"], nodeLocalFlags()...)
	}
	if err := os.MkdirAll(b.inst.logDir, 0o755); err != nil {
		return nil, nil, err
	}
	stops = append(stops, func() { b.inst.stop() })
	return b, stop, nil
}

// floorFigures are what the floors measured, for ours to be set against.
type floorFigures struct {
	latency, podLatency []cycleTimes
	throughput          map[int]Throughput
}

// floors runs the floor, then the pod floor, with no controller of ours
// running: latency at the run's concurrency, then throughput at each level.
func (b *bench) floors(ctx context.Context, r *Report) floorFigures {
	f := floorFigures{throughput: map[int]Throughput{}}
	f.latency = b.latencyRun(ctx, r, "Floor", "floor ", b.floorCycle)
	for level, run := range b.throughputRuns(ctx, r, "Floor", "floor ", b.floorCycle) {
		f.throughput[level] = Throughput{Concurrency: level, Floor: run.perMinute(), FloorCycles: run.n, FloorFailures: run.failed, WindowSeconds: run.window.Seconds()}
	}
	if !b.cfg.PodFloor {
		return f
	}
	f.podLatency = b.latencyRun(ctx, r, "Pod floor", "pod floor ", b.podFloorCycle)
	for level, run := range b.throughputRuns(ctx, r, "Pod floor", "pod floor ", b.podFloorCycle) {
		t := f.throughput[level]
		t.PodFloor, t.PodFloorCycles, t.PodFloorFailures = run.perMinute(), run.n, run.failed
		f.throughput[level] = t
	}
	return f
}

// latencyRun runs the run's cycles of cycle at its concurrency; who names
// them in the log, notePrefix in the notes of the first failures.
func (b *bench) latencyRun(ctx context.Context, r *Report, who, notePrefix string, cycle cycleFunc) []cycleTimes {
	b.logf("%s: %d cycles at concurrency %d", who, b.cfg.Cycles, b.cfg.Concurrency)
	times, errs := runCount(ctx, b.cfg.Concurrency, b.cfg.Cycles, &b.seq, cycle)
	for _, e := range first(errs, 3) {
		b.note(r, "%scycle failed: %v", notePrefix, e)
	}
	return times
}

// levelRun is one throughput window: the cycles that ended in it, those
// that failed, and its length.
type levelRun struct {
	n, failed int
	window    time.Duration
}

func (l levelRun) perMinute() float64 { return perMinute(l.n, l.window) }

// throughputRuns counts cycle's full cycles in a window at each throughput
// level; who and notePrefix as for latencyRun.
func (b *bench) throughputRuns(ctx context.Context, r *Report, who, notePrefix string, cycle cycleFunc) map[int]levelRun {
	runs := map[int]levelRun{}
	for _, level := range b.cfg.ThroughputLevels {
		b.logf("%s: throughput at concurrency %d for %s", who, level, b.cfg.ThroughputDuration)
		n, errs, window := runWindow(ctx, level, b.cfg.ThroughputDuration, 30*time.Second, &b.seq, cycle)
		for _, e := range first(errs, 3) {
			b.note(r, "%scycle failed at concurrency %d: %v", notePrefix, level, e)
		}
		runs[level] = levelRun{n: n, failed: len(errs), window: window}
	}
	return runs
}

// latencyAndCost starts the controllers and runs our cycles at the run's
// concurrency, one in MissEvery a pool miss: each step's latency against
// the floors', and the requests and events the controllers sent.
func (b *bench) latencyAndCost(ctx context.Context, r *Report, floors floorFigures) error {
	cfg := b.cfg
	b.logf("Starting the controllers (one process each)")
	if _, err := b.inst.start(ctx); err != nil {
		return err
	}
	if err := b.waitLeases(ctx); err != nil {
		return err
	}
	before, err := b.inst.requests(ctx)
	if err != nil {
		return err
	}
	eventsBefore, err := b.eventCounts(ctx)
	if err != nil {
		return err
	}
	b.logf("Ours: %d cycles at concurrency %d, one in %d a pool miss", cfg.Cycles, cfg.Concurrency, cfg.MissEvery)
	phaseStart := time.Now()
	ours, errs := runCount(ctx, cfg.Concurrency, cfg.Cycles, &b.seq, func(ctx context.Context, _ int, seq int) (cycleTimes, error) {
		return b.ourCycle(ctx, seq, cfg.MissEvery > 0 && seq%cfg.MissEvery == 0)
	})
	// Event writes leave the processes asynchronously: give the last
	// cycles' a moment before the counters are read.
	time.Sleep(2 * time.Second)
	phaseSeconds := time.Since(phaseStart).Seconds()
	for _, e := range first(errs, 3) {
		b.note(r, "cycle failed: %v", e)
	}
	if len(errs) > 0 {
		b.note(r, "%d of %d cycles failed", len(errs), cfg.Cycles)
	}
	after, err := b.inst.requests(ctx)
	if err != nil {
		return err
	}
	cost := diffRequests(after, before)
	r.Cost = Cost{Cycles: len(ours), Rows: CostRows(cost, len(ours)), FloorPerCycle: 3, Seconds: phaseSeconds}
	if eventsAfter, err := b.eventCounts(ctx); err != nil {
		b.note(r, "counting events: %v", err)
	} else {
		r.Cost.Events = EventRows(eventsAfter, eventsBefore, len(ours))
	}
	r.Cost.PerCycle, r.Cost.FailedWrites = CycleCost(cost)
	if len(ours) > 0 {
		r.Cost.PerCycle /= float64(len(ours))
	}
	r.Steps = Steps(ours, floors.latency, floors.podLatency)
	return nil
}

// throughput counts our full cycles per minute at each level, against the
// floors'.
func (b *bench) throughput(ctx context.Context, r *Report, floors floorFigures) {
	runs := b.throughputRuns(ctx, r, "Ours", "", func(ctx context.Context, _ int, seq int) (cycleTimes, error) {
		return b.ourCycle(ctx, seq, false)
	})
	for _, level := range b.cfg.ThroughputLevels {
		run := runs[level]
		t := floors.throughput[level]
		t.Concurrency, t.Ours, t.OursCycles, t.OursFailures = level, run.perMinute(), run.n, run.failed
		if t.Floor > 0 {
			t.OursVsFloorPct = 100 * t.Ours / t.Floor
		}
		if t.PodFloor > 0 {
			t.OursVsPodFloorPct = 100 * t.Ours / t.PodFloor
		}
		r.Throughput = append(r.Throughput, t)
	}
}

// resources reads the controllers' CPU and memory over the cycle phases,
// and counts the claims created again after their owner was deleted.
func (b *bench) resources(r *Report) {
	var err error
	if r.Resources, err = b.inst.stats(); err != nil {
		b.note(r, "reading the controllers' resources: %v", err)
	}
	r.ResourceCycles = int(b.ourCycles.Load())
	// Claims re-created after their owner was deleted, with a moment for
	// late ones to show up.
	time.Sleep(2 * time.Second)
	b.mu.Lock()
	deleted := maps(b.deleted)
	b.mu.Unlock()
	r.Recreated = b.rec.recreated(deleted)
}

// scheduling measures pod created -> scheduled, with and without the
// claims gate, against a floor that creates the claim first.
func (b *bench) scheduling(ctx context.Context, r *Report) {
	if b.cfg.SchedulingCycles > 0 {
		r.Scheduling = b.schedulingPhase(ctx, b.cfg.SchedulingCycles, b.cfg.SchedulingLevels, func(format string, args ...any) { b.note(r, format, args...) })
	}
}

// reservations runs the recurring workload (claim names that come back) and
// the one-off runs (names that never do) under each reserveFor and
// reuseScope.
func (b *bench) reservations(ctx context.Context, r *Report) {
	cfg := b.cfg
	if cfg.RecurringCycles == 0 {
		return
	}
	b.logf("Recurring workload: %d claim names, %d in flight, %d cycles, reserveFor %s", recurringNames, recurringConcurrency, cfg.RecurringCycles, cfg.ReserveFor)
	rec, err := b.recurring(ctx, recurringNames, recurringConcurrency, cfg.RecurringCycles, cfg.ReserveFor)
	if err != nil {
		b.note(r, "recurring workload: %v", err)
	}
	r.Recurring = rec
	for _, run := range [][2]string{{cfg.ReserveFor, wellknown.ReuseScopeCluster}, {"0", wellknown.ReuseScopeCluster}, {"0", wellknown.ReuseScopeNamespace}} {
		rf, scope := run[0], run[1]
		class := fmt.Sprintf("bench-one-off-%d", len(r.OneOff))
		b.logf("One-off claim names: %d in flight, %d cycles, reserveFor %s, reuseScope %s", recurringConcurrency, cfg.RecurringCycles, rf, scope)
		o, err := b.oneOff(ctx, class, recurringNames, recurringConcurrency, cfg.RecurringCycles, rf, scope)
		if err != nil {
			b.note(r, "one-off claim names, reserveFor %s, reuseScope %s: %v", rf, scope, err)
		}
		if o != nil {
			r.OneOff = append(r.OneOff, *o)
		}
	}
}

// A phase is one of the runs after the cycle phases, each of its own
// settings: skipped unless they ask for it, announced in the log as it
// starts, and, when it fails, a note, the report keeping what the run
// measured before it failed.
type phase struct {
	// on says whether the settings, and what the phases before it
	// measured, call for it.
	on func(cfg Config, r *Report) bool
	// starting is its line in the log as it starts.
	starting func(cfg Config) string
	// note starts the note of its failure.
	note string
	// run measures and sets its part of the report, failed or not.
	run func(ctx context.Context, b *bench, r *Report) error
}

// phases are the runs after the cycle phases, in the order they run. The
// scale phase comes last: it stops the controllers for starts of its own
// and leaves the cluster full of its objects. The failover, which leaves
// the standbys leading, comes right before it.
var phases = []phase{{
	// Claims no member fits, without and with members made ahead.
	on: func(cfg Config, _ *Report) bool { return cfg.MadeAheadCycles > 0 },
	starting: func(cfg Config) string {
		return fmt.Sprintf("Made ahead: %d claims no member fits at concurrency %d, without a pool, then with minAvailable %d", cfg.MadeAheadCycles, cfg.Concurrency, cfg.Concurrency)
	},
	note: "made-ahead run",
	run: func(ctx context.Context, b *bench, r *Report) (err error) {
		r.MadeAhead, err = b.madeAhead(ctx, b.cfg.MadeAheadCycles, b.cfg.Concurrency)
		return err
	},
}, {
	// A pool in front of a CSI class, against the class.
	on: func(cfg Config, _ *Report) bool { return cfg.ClassPoolCycles > 0 },
	starting: func(cfg Config) string {
		return fmt.Sprintf("Class pool: %d claims each on a CSI class, then misses and hits of a pool in front of it, at concurrency %d", cfg.ClassPoolCycles, cfg.Concurrency)
	},
	note: "class-pool run",
	run: func(ctx context.Context, b *bench, r *Report) (err error) {
		r.ClassPool, err = b.classPool(ctx, b.cfg.ClassPoolCycles, b.cfg.Concurrency)
		return err
	},
}, {
	// The same in zones, beside the class pool's figures: only when the
	// class-pool run has them.
	on: func(_ Config, r *Report) bool { return r.ClassPool != nil },
	starting: func(Config) string {
		return fmt.Sprintf("Class pool in zones: the same, each claim's pod on a node of one of the zones %v in turn", benchZones)
	},
	note: "zoned class-pool run",
	run: func(ctx context.Context, b *bench, r *Report) (err error) {
		r.ClassPool.Zoned, err = b.zonedClassPool(ctx, b.cfg.ClassPoolCycles, b.cfg.Concurrency)
		return err
	},
}, {
	// A claim at a pool's maximum that takes the free member, or evicts it.
	on: func(cfg Config, _ *Report) bool { return cfg.EvictCycles > 0 },
	starting: func(cfg Config) string {
		return fmt.Sprintf("Eviction: %d claims that take the free member of a pool of one, then %d that fit no member and evict it", cfg.EvictCycles, cfg.EvictCycles)
	},
	note: "eviction run",
	run: func(ctx context.Context, b *bench, r *Report) (err error) {
		r.Eviction, err = b.eviction(ctx, b.cfg.EvictCycles)
		return err
	},
}, {
	// A local class on a real node.
	on: func(cfg Config, _ *Report) bool { return cfg.NodeLocalCycles > 0 },
	starting: func(cfg Config) string {
		return fmt.Sprintf("Node-local: %d cycles each of a miss, a hit and the floor, on a real node", cfg.NodeLocalCycles)
	},
	note: "node-local run",
	run: func(ctx context.Context, b *bench, r *Report) (err error) {
		r.NodeLocal, err = b.nodeLocal(ctx, b.cfg.NodeLocalCycles)
		return err
	},
}, {
	// Each leader killed, its standby timed.
	on:       func(cfg Config, _ *Report) bool { return cfg.Failover },
	starting: func(Config) string { return "Failover: killing each leader, standbys waiting" },
	note:     "failover phase failed",
	run: func(ctx context.Context, b *bench, r *Report) (err error) {
		r.Failover, err = b.failover(ctx)
		return err
	},
}, {
	// Start-up and memory with many objects present.
	on: func(cfg Config, _ *Report) bool { return cfg.Scale > 0 },
	starting: func(cfg Config) string {
		return fmt.Sprintf("Scale: %d annotated pods, claims and PVs, %d plain pods", cfg.Scale, cfg.ScalePlain)
	},
	note: "scale phase failed",
	run: func(ctx context.Context, b *bench, r *Report) (err error) {
		r.Scale, err = b.scale(ctx, b.cfg.Scale, b.cfg.ScalePlain)
		return err
	},
}}

// runPhases runs each of phases its settings call for, in turn.
func (b *bench) runPhases(ctx context.Context, r *Report) {
	for _, p := range phases {
		if !p.on(b.cfg, r) {
			continue
		}
		b.logf("%s", p.starting(b.cfg))
		if err := p.run(ctx, b, r); err != nil {
			b.note(r, "%s: %v", p.note, err)
		}
	}
}

func first(errs []error, n int) []error {
	if len(errs) > n {
		return errs[:n]
	}
	return errs
}

func maps(m map[string]time.Time) map[string]time.Time {
	out := make(map[string]time.Time, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func perMinute(n int, window time.Duration) float64 {
	if window <= 0 {
		return 0
	}
	return float64(n) / window.Minutes()
}

// setup creates the namespaces, the classes and the floors' volumes.
func (b *bench) setup(ctx context.Context) error {
	if err := os.MkdirAll(b.base, 0o755); err != nil {
		return err
	}
	namespaces := []string{b.ns, b.floorNS}
	// The scheduling phase's floor uses the pod floor's namespace and pool.
	podFloor := b.cfg.PodFloor || b.cfg.SchedulingCycles > 0
	if podFloor {
		namespaces = append(namespaces, b.podFloorNS)
	}
	for _, ns := range namespaces {
		if _, err := b.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	classes := []*storagev1.StorageClass{
		objects.NewClass(b.class, provisionerName, func(sc *storagev1.StorageClass) {
			sc.Annotations = map[string]string{wellknown.ClassControllerID: controllerID}
			sc.Parameters = map[string]string{"backend": "directory", "baseDir": b.base, "source": "hostPath", "hostPath": b.base}
		}),
		objects.NewClass(b.floorClass, "kubernetes.io/no-provisioner"),
	}
	// A class of its own keeps the pod floor's claims off the floor's
	// volumes: the PV controller binds a claim to any Available volume of
	// its class.
	pools := map[string]func(int) string{b.floorClass: floorVolume}
	if podFloor {
		classes = append(classes, objects.NewClass(b.podFloorClass, "kubernetes.io/no-provisioner"))
		pools[b.podFloorClass] = podFloorVolume
	}
	for _, sc := range classes {
		if _, err := b.client.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	// A VolumePool that changes no setting: its status writes (at most one
	// per --pool-status-interval) are part of the cost of a cycle.
	poolClient, err := versioned.NewForConfig(b.cluster.Config)
	if err != nil {
		return err
	}
	if _, err := poolClient.ReclaimableV1alpha1().VolumePools().Create(ctx, &v1alpha1.VolumePool{
		ObjectMeta: metav1.ObjectMeta{Name: b.class}, Spec: v1alpha1.VolumePoolSpec{StorageClassName: b.class},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	workers := b.cfg.Concurrency
	for _, l := range slices.Concat(b.cfg.ThroughputLevels, b.cfg.SchedulingLevels) {
		workers = max(workers, l)
	}
	for class, volume := range pools {
		for w := range workers {
			pv := objects.NewVolume(volume(w), class, "1Gi", filepath.Join(b.cfg.Dir, "volumes", class, volume(w)))
			if _, err := b.client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
				return err
			}
		}
	}
	// The floors' volumes must be Available before their first cycle.
	return b.rec.wait(ctx, func() bool {
		for _, volume := range pools {
			for w := range workers {
				if v := b.rec.volumes[volume(w)]; v == nil || v.phase != corev1.VolumeAvailable {
					return false
				}
			}
		}
		return true
	})
}

// waitLeases waits until each controller's Lease has a holder, so that the
// first cycle is not timed against an election.
func (b *bench) waitLeases(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for _, name := range controllerNames {
		for {
			l, err := b.client.CoordinationV1().Leases("default").Get(ctx, controllerID+"-"+name, metav1.GetOptions{})
			if err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("no leader for %s: %w", name, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

// WriteJSON writes the report to path, creating its directory.
func (r *Report) WriteJSON(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func machine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), Kubernetes: cluster.KubernetesVersion}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "MemTotal:") {
				fmt.Sscanf(strings.TrimPrefix(line, "MemTotal:"), "%d", &kb)
			}
		}
		m.MemoryMiB = kb / 1024
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = "Linux " + strings.TrimSpace(string(b))
	}
	return m
}
