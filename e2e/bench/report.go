package bench

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// Report is everything one run measured. It is written as JSON, and
// rendered as Markdown by Markdown.
type Report struct {
	Started  time.Time `json:"started"`
	Duration string    `json:"duration"`
	Machine  Machine   `json:"machine"`
	Settings Settings  `json:"settings"`

	// Steps are the cycle's latencies, ours next to the floor's and the pod
	// floor's matching steps.
	Steps []Step `json:"steps"`
	// Throughput is full cycles per minute at each concurrency.
	Throughput []Throughput `json:"throughput"`
	Cost       Cost         `json:"api_cost"`
	// Recreated counts claims created again after their owner was deleted.
	Recreated int `json:"claims_recreated"`
	// Resources are the controllers' CPU and memory over the cycle phases,
	// which completed ResourceCycles cycles.
	Resources      []ProcessStats `json:"resources"`
	ResourceCycles int            `json:"resource_cycles"`
	// Scheduling is pod created -> scheduled, with and without the claims
	// gate, against a floor that creates the claim first.
	Scheduling []SchedulingRow `json:"scheduling,omitempty"`
	// Recurring is the recurring-workload run (reserveFor).
	Recurring *Recurring `json:"recurring,omitempty"`
	// OneOff is what a reservation costs claims whose names never come
	// back: the class of the recurring run, and the same without reserveFor.
	OneOff []OneOff `json:"one_off,omitempty"`
	// MadeAhead is the made-ahead run (claims no member fits, without and
	// with a pool's minAvailable).
	MadeAhead *MadeAhead `json:"made_ahead,omitempty"`
	// Keys is the CI-runs-by-key run: without a key, and with keyLabel
	// under each keyPolicy.
	Keys []KeyRuns `json:"keys,omitempty"`
	// Eviction is the eviction run (a claim at the maximum, evictForClaims).
	Eviction *Eviction `json:"eviction,omitempty"`
	// ClassPool is the class-pool run (a pool in front of a CSI class,
	// against the CSI class itself).
	ClassPool *ClassPool `json:"class_pool,omitempty"`
	// NodeLocal is the node-local run (a local class on a real node).
	NodeLocal *NodeLocal `json:"node_local,omitempty"`
	Failover  *Failover  `json:"failover,omitempty"`
	Scale     *Scale     `json:"scale,omitempty"`
	Targets   []Target   `json:"targets"`
	// Notes say what went wrong or was left out; a report with notes is
	// still a report.
	Notes []string `json:"notes,omitempty"`
}

// Machine is where the figures were taken.
type Machine struct {
	CPUs       int    `json:"cpus"`
	CPUModel   string `json:"cpu_model"`
	MemoryMiB  int    `json:"memory_mib"`
	Kernel     string `json:"kernel"`
	GoVersion  string `json:"go_version"`
	Kubernetes string `json:"kubernetes"`
}

// Settings are the run's parameters.
type Settings struct {
	Cycles             int    `json:"cycles"`
	Concurrency        int    `json:"concurrency"`
	MissEvery          int    `json:"miss_every"`
	ThroughputLevels   []int  `json:"throughput_levels"`
	ThroughputDuration string `json:"throughput_duration"`
	Scale              int    `json:"scale"`
	ScalePlain         int    `json:"scale_plain"`
	// PodFloor: the pod floor was run (the floor's cycle with a pod).
	PodFloor          bool   `json:"pod_floor"`
	SchedulingCycles  int    `json:"scheduling_cycles"`
	SchedulingLevels  []int  `json:"scheduling_levels,omitempty"`
	RecurringCycles   int    `json:"recurring_cycles"`
	NodeLocalCycles   int    `json:"node_local_cycles"`
	MadeAheadCycles   int    `json:"made_ahead_cycles,omitempty"`
	EvictCycles       int    `json:"evict_cycles,omitempty"`
	KeyCycles         int    `json:"key_cycles,omitempty"`
	ClassPoolCycles   int    `json:"class_pool_cycles,omitempty"`
	ControllerManager string `json:"controller_manager"`
}

// Step is one step of the cycle. Floor is nil where the floor has no
// matching step (it has no pod, so no claim created for one); PodFloor is
// nil when the pod floor was not run.
type Step struct {
	Name         string   `json:"name"`
	Ours         Summary  `json:"ours"`
	FloorName    string   `json:"floor_name,omitempty"`
	Floor        *Summary `json:"floor,omitempty"`
	PodFloorName string   `json:"pod_floor_name,omitempty"`
	PodFloor     *Summary `json:"pod_floor,omitempty"`
}

// P99Ratio is ours over the floor's p99, or 0 without a floor.
func (s Step) P99Ratio() float64 { return p99Ratio(s.Ours, s.Floor) }

// P99RatioPodFloor is ours over the pod floor's p99, or 0 without one.
func (s Step) P99RatioPodFloor() float64 { return p99Ratio(s.Ours, s.PodFloor) }

func p99Ratio(ours Summary, floor *Summary) float64 {
	if floor == nil || floor.P99ms == 0 || ours.N == 0 {
		return 0
	}
	return ours.P99ms / floor.P99ms
}

// Throughput is full cycles per minute at one concurrency.
type Throughput struct {
	Concurrency    int     `json:"concurrency"`
	Ours           float64 `json:"ours_per_min"`
	Floor          float64 `json:"floor_per_min"`
	OursCycles     int     `json:"ours_cycles"`
	FloorCycles    int     `json:"floor_cycles"`
	WindowSeconds  float64 `json:"window_seconds"`
	OursFailures   int     `json:"ours_failures,omitempty"`
	FloorFailures  int     `json:"floor_failures,omitempty"`
	OursVsFloorPct float64 `json:"ours_vs_floor_pct"`
	// The pod floor's, zero when it was not run.
	PodFloor          float64 `json:"pod_floor_per_min,omitempty"`
	PodFloorCycles    int     `json:"pod_floor_cycles,omitempty"`
	PodFloorFailures  int     `json:"pod_floor_failures,omitempty"`
	OursVsPodFloorPct float64 `json:"ours_vs_pod_floor_pct,omitempty"`
}

// Cost is what our controllers asked of the API server during the
// latency phase.
type Cost struct {
	Cycles int       `json:"cycles"`
	Rows   []CostRow `json:"rows"`
	// PerCycle counts every request except leases, lists and watches.
	PerCycle float64 `json:"per_cycle"`
	// FailedWrites are writes answered with >= 400 (or not at all).
	FailedWrites float64 `json:"failed_writes"`
	// FloorPerCycle is what the floor's cycle costs: create, delete, patch.
	FloorPerCycle float64 `json:"floor_per_cycle"`
	// Seconds is the length of the phase, to read the background rows.
	Seconds float64 `json:"seconds"`
	// Events are the events behind the events rows, by reason.
	Events []EventRow `json:"events,omitempty"`
}

// ProcessStats are one controller process's resources.
type ProcessStats struct {
	Controller string  `json:"controller"`
	CPUSeconds float64 `json:"cpu_seconds"`
	RSSMiB     float64 `json:"rss_mib"`
	PeakRSSMiB float64 `json:"peak_rss_mib"`
	// HeapMiB is the live heap after a collection (scale phase only).
	HeapMiB float64 `json:"heap_mib,omitempty"`
	// ReadySeconds is from process start to /readyz answering 200.
	ReadySeconds float64 `json:"ready_seconds,omitempty"`
	// RestartSeconds is the same for a second start, once the first has
	// run the settle window (scale phase): a restart on a settled
	// cluster, as a rollout or a failover meets it. The first start comes
	// right after the phase created its objects, while the control plane
	// still works through them.
	RestartSeconds float64 `json:"restart_seconds,omitempty"`
	// RestartAloneSeconds is the same for a start of this controller
	// alone, the other two stopped: a rollout of its Deployment alone.
	RestartAloneSeconds float64 `json:"restart_alone_seconds,omitempty"`
}

// startSeconds is the restart's time to ready where one was measured, else
// the first start's.
func (p ProcessStats) startSeconds() float64 {
	if p.RestartSeconds > 0 {
		return p.RestartSeconds
	}
	return p.ReadySeconds
}

// Failover is how long the standby of each controller took to act after
// its leader was killed (SIGKILL), with the deployed lease timings.
type Failover struct {
	LeaseDuration      string  `json:"lease_duration"`
	PodwatcherSeconds  float64 `json:"podwatcher_seconds"`
	ProvisionerSeconds float64 `json:"provisioner_seconds"`
	ReleaserSeconds    float64 `json:"releaser_seconds"`
}

// Scale is the controllers' start-up and memory with many objects present.
type Scale struct {
	// PlainPods have no annotation and no volume; Pods are annotated.
	PlainPods     int     `json:"plain_pods"`
	Pods          int     `json:"pods"`
	Claims        int     `json:"claims"`
	Volumes       int     `json:"volumes"`
	Bound         int     `json:"bound"`
	CreateSeconds float64 `json:"create_seconds"`
	SettleSeconds float64 `json:"settle_seconds"`
	// Baseline is the controllers with none of the phase's objects present,
	// PlainOnly with the plain pods alone, Controllers with everything.
	Baseline    []ProcessStats `json:"baseline"`
	PlainOnly   []ProcessStats `json:"plain_only,omitempty"`
	Controllers []ProcessStats `json:"controllers"`
	// Requests are what the controllers sent from start to the end of the
	// settle window, by verb and resource (not per cycle: there are none).
	Requests []CostRow `json:"requests"`
	// AtLimits are the controllers with everything present again, under
	// each of the run's ScaleLimits.
	AtLimits []LimitRun `json:"at_limits,omitempty"`
}

// LimitRun is the controllers under one memory limit.
type LimitRun struct {
	Limit       string         `json:"limit"`
	Controllers []ProcessStats `json:"controllers,omitempty"`
	// Error is why the run has no figures: most often a controller not
	// ready within the start's deadline.
	Error string `json:"error,omitempty"`
}

// ScaleTarget is the number of annotated pods, claims and volumes the
// memory and start-up targets are set at.
const ScaleTarget = 20000

func statsOf(stats []ProcessStats, controller string) (ProcessStats, bool) {
	for _, s := range stats {
		if s.Controller == controller {
			return s, true
		}
	}
	return ProcessStats{}, false
}

// PerPlainKiB is what one plain pod adds to controller's RSS.
func (s *Scale) PerPlainKiB(controller string) float64 {
	base, ok1 := statsOf(s.Baseline, controller)
	plain, ok2 := statsOf(s.PlainOnly, controller)
	if !ok1 || !ok2 || s.PlainPods == 0 {
		return 0
	}
	return max(0, plain.RSSMiB-base.RSSMiB) * 1024 / float64(s.PlainPods)
}

// PerAnnotatedKiB is what one annotated pod with its claim and volume adds
// to controller's live heap (after a collection): what it keeps for them.
func (s *Scale) PerAnnotatedKiB(controller string) float64 {
	return s.perAnnotated(controller, func(p ProcessStats) float64 { return p.HeapMiB })
}

// PerAnnotatedRSSKiB is what one annotated pod with its claim and volume
// adds to controller's RSS: the live heap, and the headroom the Go runtime
// takes beside it.
func (s *Scale) PerAnnotatedRSSKiB(controller string) float64 {
	return s.perAnnotated(controller, func(p ProcessStats) float64 { return p.RSSMiB })
}

func (s *Scale) perAnnotated(controller string, mib func(ProcessStats) float64) float64 {
	before, ok1 := statsOf(s.PlainOnly, controller)
	if s.PlainPods == 0 {
		before, ok1 = statsOf(s.Baseline, controller)
	}
	all, ok2 := statsOf(s.Controllers, controller)
	if !ok1 || !ok2 || s.Pods == 0 {
		return 0
	}
	return max(0, mib(all)-mib(before)) * 1024 / float64(s.Pods)
}

// RSSAt is controller's RSS with n annotated pods, claims and volumes and
// the run's plain pods: measured when the run had n, else projected from
// the cost of one.
func (s *Scale) RSSAt(controller string, n int) float64 {
	all, _ := statsOf(s.Controllers, controller)
	if s.Pods == n {
		return all.RSSMiB
	}
	return all.RSSMiB + float64(n-s.Pods)*s.PerAnnotatedRSSKiB(controller)/1024
}

// HeapAt is controller's live heap with n annotated pods, claims and
// volumes, measured or projected as RSSAt is.
func (s *Scale) HeapAt(controller string, n int) float64 {
	all, _ := statsOf(s.Controllers, controller)
	if s.Pods == n {
		return all.HeapMiB
	}
	return all.HeapMiB + float64(n-s.Pods)*s.PerAnnotatedKiB(controller)/1024
}

// ReadyAt is controller's start-up time (a restart on the settled cluster
// where one was measured) with n annotated pods, claims and volumes:
// measured when the run had n, else projected linearly from the
// baseline's.
func (s *Scale) ReadyAt(controller string, n int) float64 {
	all, _ := statsOf(s.Controllers, controller)
	base, ok := statsOf(s.Baseline, controller)
	if s.Pods == n || !ok || s.Pods == 0 {
		return all.startSeconds()
	}
	return base.startSeconds() + max(0, all.startSeconds()-base.startSeconds())*float64(n)/float64(s.Pods)
}

// Target is one of the project's performance targets and how this run did.
type Target struct {
	Name     string `json:"name"`
	Goal     string `json:"goal"`
	Measured string `json:"measured"`
	// Met is nil when the run did not measure it, or for a reference.
	Met *bool `json:"met"`
	// Reference marks a line that is not a target: the same figure set
	// against the pod floor, to read next to the target's.
	Reference bool `json:"reference,omitempty"`
}

// referenceGoal is the goal column of a line that is not a target.
const referenceGoal = "for reference"

// Evaluate compares the report with the targets. Targets are reported,
// never enforced: a run that misses one still succeeds.
func (r *Report) Evaluate() {
	r.Targets = nil
	r.latencyTargets()
	r.throughputTargets()
	r.schedulingTargets()
	r.recurringTargets()
	r.keyTargets(r.addTarget)
	r.madeAheadTargets()
	r.costTargets()
	r.scaleTargets()
	r.failoverTargets()
}

// addTarget adds a target; met is nil when the run did not measure it.
func (r *Report) addTarget(name, goal, measured string, met *bool) {
	r.Targets = append(r.Targets, Target{Name: name, Goal: goal, Measured: measured, Met: met})
}

// addReference adds a line that is not a target, set against the pod
// floor: only when the run had one.
func (r *Report) addReference(name, measured string) {
	if r.Settings.PodFloor {
		r.Targets = append(r.Targets, Target{Name: name, Goal: referenceGoal, Measured: measured, Reference: true})
	}
}

func yes(b bool) *bool { return &b }

// step is the step of the cycle of that name, nil if the run has none.
func (r *Report) step(name string) *Step {
	for i := range r.Steps {
		if r.Steps[i].Name == name {
			return &r.Steps[i]
		}
	}
	return nil
}

// latencyTargets: the podwatcher's claim within 100 ms, and each step of
// ours within 1.5 times the floor's, the hit's within 1.5 times the pod
// floor's too.
func (r *Report) latencyTargets() {
	conc := fmt.Sprintf(" (%d in flight)", r.Settings.Concurrency)
	if s := r.step(StepPodToClaim); s != nil && s.Ours.N > 0 {
		r.addTarget("pod created -> claim created, p99"+conc, "< 100 ms", fmtMs(s.Ours.P99ms), yes(s.Ours.P99ms < 100))
	} else {
		r.addTarget("pod created -> claim created, p99"+conc, "< 100 ms", "not measured", nil)
	}
	for _, name := range []string{StepGoneToAvailable, StepBoundHit, StepBoundMiss} {
		s := r.step(name)
		if s == nil || s.Ours.N == 0 || s.Floor == nil || s.Floor.N == 0 {
			r.addTarget(name+", p99 vs floor", "<= 1.5x", "not measured", nil)
		} else {
			ratio := s.P99Ratio()
			r.addTarget(name+", p99 vs floor", "<= 1.5x", fmt.Sprintf("%.2fx (%s vs %s)", ratio, fmtMs(s.Ours.P99ms), fmtMs(s.Floor.P99ms)), yes(ratio <= 1.5))
		}
		measured := s != nil && s.Ours.N > 0 && s.PodFloor != nil && s.PodFloor.N > 0
		switch {
		case name == StepBoundHit && measured:
			// A hit for a claim name that never comes back takes the
			// provisioner's way: set against a plain bind with the pod.
			ratio := s.P99RatioPodFloor()
			r.addTarget(name+", p99 vs pod floor"+conc, "<= 1.5x", fmt.Sprintf("%.2fx (%s vs %s)", ratio, fmtMs(s.Ours.P99ms), fmtMs(s.PodFloor.P99ms)), yes(ratio <= 1.5))
		case name == StepBoundHit && r.Settings.PodFloor:
			r.addTarget(name+", p99 vs pod floor"+conc, "<= 1.5x", "not measured", nil)
		case name == StepBoundHit:
		case measured:
			r.addReference(name+", p99 vs pod floor", fmt.Sprintf("%.2fx (%s vs %s)", s.P99RatioPodFloor(), fmtMs(s.Ours.P99ms), fmtMs(s.PodFloor.P99ms)))
		default:
			r.addReference(name+", p99 vs pod floor", "not measured")
		}
	}
}

// throughputTargets: at each level, at least 90% of the floor's full
// cycles per minute.
func (r *Report) throughputTargets() {
	for _, t := range r.Throughput {
		name := fmt.Sprintf("throughput at concurrency %d vs floor", t.Concurrency)
		if t.Floor == 0 {
			r.addTarget(name, ">= 90%", "not measured", nil)
		} else {
			r.addTarget(name, ">= 90%", fmt.Sprintf("%.0f%% (%.1f vs %.1f cycles/min)", t.OursVsFloorPct, t.Ours, t.Floor), yes(t.OursVsFloorPct >= 90))
		}
		name = fmt.Sprintf("throughput at concurrency %d vs pod floor", t.Concurrency)
		if t.PodFloor == 0 {
			r.addReference(name, "not measured")
		} else {
			r.addReference(name, fmt.Sprintf("%.0f%% (%.1f vs %.1f cycles/min)", t.OursVsPodFloorPct, t.Ours, t.PodFloor))
		}
	}
}

// schedulingTargets: with the claims gate, pod created -> scheduled within
// 1.5 times the claim-first floor's at each level, and one at a time at
// least 90% of its cycles per minute.
func (r *Report) schedulingTargets() {
	gated := map[int]SchedulingRow{}
	for _, row := range r.Scheduling {
		if row.Variant == VariantGated {
			gated[row.Concurrency] = row
		}
	}
	for _, level := range r.Settings.SchedulingLevels {
		name := fmt.Sprintf("pod created -> scheduled with the claims gate, p99 vs claim-first floor, concurrency %d", level)
		if row, ok := gated[level]; !ok || row.P99VsFloor == 0 {
			r.addTarget(name, "<= 1.5x", "not measured", nil)
		} else {
			r.addTarget(name, "<= 1.5x", fmt.Sprintf("%.2fx (%s)", row.P99VsFloor, fmtMs(row.Scheduled.P99ms)), yes(row.P99VsFloor <= 1.5))
		}
	}
	if r.Settings.SchedulingCycles > 0 {
		name := "sequential cycles with the claims gate vs claim-first floor"
		if row, ok := gated[1]; !ok || row.RateVsFloor == 0 {
			r.addTarget(name, ">= 90%", "not measured", nil)
		} else {
			r.addTarget(name, ">= 90%", fmt.Sprintf("%.0f%% (%.1f cycles/min)", row.RateVsFloor, row.PerMinute), yes(row.RateVsFloor >= 90))
		}
	}
}

// recurringTargets: recurring claims get their own volume back and are
// served warm.
func (r *Report) recurringTargets() {
	if rc := r.Recurring; rc != nil && rc.Cycles > 0 {
		r.addTarget("recurring claims that got their own volume back (of those whose volume was free)", ">= 95%", fmt.Sprintf("%.1f%%", rc.OwnPct), yes(rc.OwnPct >= 95))
		r.addTarget("recurring claims served warm from the pool", "100%", fmt.Sprintf("%.1f%%", rc.WarmPct), yes(rc.WarmPct == 100))
		if s := r.step(StepBoundHit); s != nil && s.PodFloor != nil && s.PodFloor.N > 0 {
			r.addReference("recurring claim created -> Bound vs pod floor's bind, p50 / p99", fmt.Sprintf("%s / %s vs %s / %s",
				fmtMs(rc.Bound.P50ms), fmtMs(rc.Bound.P99ms), fmtMs(s.PodFloor.P50ms), fmtMs(s.PodFloor.P99ms)))
		}
	} else if r.Settings.RecurringCycles > 0 {
		r.addTarget("recurring claims that got their own volume back", ">= 95%", "not measured", nil)
	}
}

// madeAheadTargets sets the made-ahead run against the pod floor's bind,
// for reference.
func (r *Report) madeAheadTargets() {
	if m := r.MadeAhead; m != nil && m.With.N > 0 {
		if s := r.step(StepBoundHit); s != nil && s.PodFloor != nil && s.PodFloor.N > 0 {
			r.addReference("claim no member fits, created -> Bound p99: without / with minAvailable vs pod floor's bind", fmt.Sprintf("%s / %s vs %s",
				fmtMs(m.Without.P99ms), fmtMs(m.With.P99ms), fmtMs(s.PodFloor.P99ms)))
		}
	}
}

// costTargets: the requests of a full cycle, no failed write, and no claim
// created again after its owner was deleted.
func (r *Report) costTargets() {
	if r.Cost.Cycles > 0 {
		r.addTarget("requests per full cycle, events included", "<= 6", fmt.Sprintf("%.2f", r.Cost.PerCycle), yes(r.Cost.PerCycle <= 6))
		r.addTarget("failed writes in steady state", "0", fmt.Sprintf("%.0f", r.Cost.FailedWrites), yes(r.Cost.FailedWrites == 0))
		r.addTarget("claims re-created after their owner was deleted", "0", fmt.Sprint(r.Recreated), yes(r.Recreated == 0))
	} else {
		r.addTarget("requests per full cycle, events included", "<= 6", "not measured", nil)
		r.addTarget("failed writes in steady state", "0", "not measured", nil)
		r.addTarget("claims re-created after their owner was deleted", "0", "not measured", nil)
	}
}

// scaleTargets: memory per pod, the controllers' RSS and their start-up at
// ScaleTarget annotated pods, measured or projected, the largest or
// slowest of the three.
func (r *Report) scaleTargets() {
	sc := r.Scale
	if sc == nil || len(sc.Controllers) == 0 || sc.Pods == 0 {
		r.addTarget("memory per annotated pod with its claim and volume", "<= 3 KiB", "not measured", nil)
		r.addTarget("memory per plain pod", "<= 0.25 KiB", "not measured", nil)
		r.addTarget("controllers' RSS at scale", "< 100 MiB", "not measured", nil)
		r.addTarget("start-up sync at scale", "< 10 s", "not measured", nil)
		return
	}
	var perSet, perPlain, rss, ready, alone float64
	restarted := ""
	for _, c := range sc.Controllers {
		perSet = max(perSet, sc.PerAnnotatedKiB(c.Controller))
		perPlain = max(perPlain, sc.PerPlainKiB(c.Controller))
		rss = max(rss, sc.RSSAt(c.Controller, ScaleTarget))
		ready = max(ready, sc.ReadyAt(c.Controller, ScaleTarget))
		alone = max(alone, c.RestartAloneSeconds)
		if c.RestartSeconds > 0 {
			restarted = " restart"
		}
	}
	how := "measured"
	if sc.Pods != ScaleTarget {
		how = fmt.Sprintf("projected from %d", sc.Pods)
	}
	r.addTarget("memory per annotated pod with its claim and volume (live heap)", "<= 3 KiB", fmt.Sprintf("%.2f KiB (largest of three)", perSet), yes(perSet <= 3))
	if sc.PlainPods > 0 {
		r.addTarget("memory per plain pod", "<= 0.25 KiB", fmt.Sprintf("%.2f KiB (largest of three)", perPlain), yes(perPlain <= 0.25))
	} else {
		r.addTarget("memory per plain pod", "<= 0.25 KiB", "not measured", nil)
	}
	r.addTarget(fmt.Sprintf("controllers' RSS at %d annotated pods, claims and volumes", ScaleTarget), "< 100 MiB", fmt.Sprintf("%.1f MiB (largest, %s)", rss, how), yes(rss < 100))
	r.addTarget(fmt.Sprintf("start-up sync at %d, the three at once", ScaleTarget), "< 10 s", fmt.Sprintf("%.2f s (slowest%s, %s)", ready, restarted, how), yes(ready < 10))
	if alone > 0 && sc.Pods == ScaleTarget {
		r.addTarget(fmt.Sprintf("start-up sync at %d, one controller restarted alone", ScaleTarget), "< 10 s", fmt.Sprintf("%.2f s (slowest, measured)", alone), yes(alone < 10))
	}
}

// failoverTargets: the slowest standby acts within 20 s of its leader's
// kill.
func (r *Report) failoverTargets() {
	if f := r.Failover; f != nil {
		worst := max(f.PodwatcherSeconds, f.ProvisionerSeconds, f.ReleaserSeconds)
		r.addTarget("killed leader's replacement acting", "< 20 s", fmt.Sprintf("%.1f s (slowest of three)", worst), yes(worst > 0 && worst < 20))
	} else {
		r.addTarget("killed leader's replacement acting", "< 20 s", "not measured", nil)
	}
}

func fmtMs(v float64) string {
	switch {
	case v >= 10000:
		return fmt.Sprintf("%.1f s", v/1000)
	case v >= 100:
		return fmt.Sprintf("%.0f ms", v)
	default:
		return fmt.Sprintf("%.1f ms", v)
	}
}

// Markdown renders the report as Markdown tables.
func (r *Report) Markdown(w io.Writer) {
	p := printer(func(format string, args ...any) { fmt.Fprintf(w, format, args...) })
	r.header(p)
	r.latencySection(p)
	r.throughputSection(p)
	r.costSection(p)
	r.resourcesSection(p)
	r.scaleSection(p)
	r.schedulingSection(p)
	r.reservationsSection(p)
	r.madeAheadSection(p)
	r.classPoolSection(p)
	r.keysSection(p)
	r.evictionSection(p)
	r.nodeLocalSection(p)
	r.failoverSection(p)
	r.targetsSection(p)
}

// printer writes one formatted piece of the report.
type printer func(format string, args ...any)

// ratio formats a ratio to a floor, "-" without one.
func ratio(v float64) string {
	if v > 0 {
		return fmt.Sprintf("%.2fx", v)
	}
	return "-"
}

// header writes the title, the machine and the settings.
func (r *Report) header(p printer) {
	m := r.Machine
	p("## reclaimable benchmark\n\n")
	p("%s, %d CPUs (%s), %d MiB memory, %s, Kubernetes %s, kernel %s. Run took %s.\n\n",
		r.Started.UTC().Format("2006-01-02 15:04 MST"), m.CPUs, m.CPUModel, m.MemoryMiB, m.GoVersion, m.Kubernetes, m.Kernel, r.Duration)
	s := r.Settings
	podFloor := "pod floor skipped"
	if s.PodFloor {
		podFloor = "pod floor run"
	}
	p("Settings: %d cycles at concurrency %d (one in %d asks for a size no pool volume has: a pool miss), throughput for %s at each of %s, scale %d annotated and %d plain pods, %s, %s.\n\n",
		s.Cycles, s.Concurrency, s.MissEvery, s.ThroughputDuration, joinInts(s.ThroughputLevels), s.Scale, s.ScalePlain, podFloor, s.ControllerManager)
}

// latencySection writes each step of the cycle against the floors.
func (r *Report) latencySection(p printer) {
	s := r.Settings
	p("### Cycle latency (concurrency %d)\n\n", s.Concurrency)
	if s.PodFloor {
		p("Floor: the cycle with no pod and no controllers (the issue's reference). Pod floor: the floor's cycle with the pod ours has, still without our controllers; " +
			"the benchmark creates the claim right after the pod and deletes it right after the pod, and each step is ours with the benchmark in place of our controllers.\n\n")
		p("| step | n | p50 | p95 | p99 | floor step | floor p50 | floor p99 | p99 ratio | pod floor p50 | pod floor p99 | p99 ratio to pod floor |\n|---|--:|--:|--:|--:|---|--:|--:|--:|--:|--:|--:|\n")
	} else {
		p("| step | n | p50 | p95 | p99 | floor step | floor p50 | floor p99 | p99 ratio |\n|---|--:|--:|--:|--:|---|--:|--:|--:|\n")
	}
	for _, st := range r.Steps {
		cols := "| - | - | - | -"
		if st.Floor != nil {
			cols = fmt.Sprintf("| %s | %s | %s | %s", st.FloorName, fmtMs(st.Floor.P50ms), fmtMs(st.Floor.P99ms), ratio(st.P99Ratio()))
		}
		if s.PodFloor {
			if st.PodFloor != nil && st.PodFloor.N > 0 {
				cols += fmt.Sprintf(" | %s | %s | %s", fmtMs(st.PodFloor.P50ms), fmtMs(st.PodFloor.P99ms), ratio(st.P99RatioPodFloor()))
			} else {
				cols += " | - | - | -"
			}
		}
		if st.Ours.N == 0 {
			p("| %s | 0 | - | - | - %s |\n", st.Name, cols)
			continue
		}
		p("| %s | %d | %s | %s | %s %s |\n", st.Name, st.Ours.N, fmtMs(st.Ours.P50ms), fmtMs(st.Ours.P95ms), fmtMs(st.Ours.P99ms), cols)
	}
}

// throughputSection writes full cycles per minute at each concurrency.
func (r *Report) throughputSection(p printer) {
	s := r.Settings
	p("\n### Throughput (full cycles per minute)\n\n")
	if s.PodFloor {
		p("| concurrency | ours | floor | ours / floor | pod floor | ours / pod floor | window |\n|--:|--:|--:|--:|--:|--:|--:|\n")
	} else {
		p("| concurrency | ours | floor | ours / floor | window |\n|--:|--:|--:|--:|--:|\n")
	}
	for _, t := range r.Throughput {
		fail := ""
		if t.OursFailures+t.FloorFailures+t.PodFloorFailures > 0 {
			fail = fmt.Sprintf(" (failed cycles: ours %d, floor %d", t.OursFailures, t.FloorFailures)
			if s.PodFloor {
				fail += fmt.Sprintf(", pod floor %d", t.PodFloorFailures)
			}
			fail += ")"
		}
		pod := ""
		if s.PodFloor {
			pct := "-"
			if t.PodFloor > 0 {
				pct = fmt.Sprintf("%.0f%%", t.OursVsPodFloorPct)
			}
			pod = fmt.Sprintf(" %.1f | %s |", t.PodFloor, pct)
		}
		p("| %d | %.1f | %.1f | %.0f%% |%s %.0f s%s |\n", t.Concurrency, t.Ours, t.Floor, t.OursVsFloorPct, pod, t.WindowSeconds, fail)
	}
}

// costSection writes the requests and events per cycle.
func (r *Report) costSection(p printer) {
	c := r.Cost
	p("\n### API cost (requests our controllers sent, per full cycle, over %d cycles in %.0f s)\n\n", c.Cycles, c.Seconds)
	p("| controller | verb | resource | per cycle | total | answered >= 400 |\n|---|---|---|--:|--:|---|\n")
	for _, row := range c.Rows {
		if (RequestKey{Verb: row.Verb, Resource: row.Resource}).Background() {
			p("| %s | %s | %s (background) | - | %.0f | %s |\n", row.Controller, row.Verb, row.Resource, row.Total, fmtFailed(row.Failed))
			continue
		}
		p("| %s | %s | %s | %.2f | %.0f | %s |\n", row.Controller, row.Verb, row.Resource, row.PerCycle, row.Total, fmtFailed(row.Failed))
	}
	if len(c.Events) > 0 {
		parts := make([]string, len(c.Events))
		for i, e := range c.Events {
			parts[i] = fmt.Sprintf("%s %s %.2f", e.Component, e.Reason, e.PerCycle)
		}
		p("\nEvents recorded per cycle, by reason (an event repeated counts each time, whether created or patched): %s.\n", strings.Join(parts, "; "))
	}
	p("\nPer full cycle, leases, lists and watches left out: **%.2f** requests (floor: %.0f); failed writes: **%.0f**; claims re-created after their owner was deleted: **%d**.\n",
		c.PerCycle, c.FloorPerCycle, c.FailedWrites, r.Recreated)
}

// resourcesSection writes the controllers' CPU and memory.
func (r *Report) resourcesSection(p printer) {
	p("\n### Resources during the cycle phases (%d cycles)\n\n| controller | CPU seconds | CPU ms per cycle | RSS | peak RSS |\n|---|--:|--:|--:|--:|\n", r.ResourceCycles)
	for _, pr := range r.Resources {
		perCycle := "-"
		if r.ResourceCycles > 0 {
			perCycle = fmt.Sprintf("%.1f", 1000*pr.CPUSeconds/float64(r.ResourceCycles))
		}
		p("| %s | %.1f | %s | %.1f MiB | %.1f MiB |\n", pr.Controller, pr.CPUSeconds, perCycle, pr.RSSMiB, pr.PeakRSSMiB)
	}
}

// scaleSection writes start-up and memory with many objects present.
func (r *Report) scaleSection(p printer) {
	if sc := r.Scale; sc != nil {
		p("\n### At scale: %d annotated pods, %d claims (%d Bound), %d PVs and %d plain pods present (annotated created in %.0f s)\n\n", sc.Pods, sc.Claims, sc.Bound, sc.Volumes, sc.PlainPods, sc.CreateSeconds)
		p("Each step starts the three controllers afresh and reads them after %.0f s; the live heap is after a collection. "+
			"Then it starts them again (restart), then each alone, the others stopped (restart alone, as a rollout of one Deployment): the first start follows the step's objects' creation, while the control plane still works through them.\n\n", sc.SettleSeconds)
		p("| controller | step | start -> ready (caches synced) | restart -> ready | restart alone -> ready | RSS | peak RSS | live heap | CPU seconds |\n|---|---|--:|--:|--:|--:|--:|--:|--:|\n")
		for _, step := range []struct {
			name  string
			stats []ProcessStats
		}{{"none present", sc.Baseline}, {fmt.Sprintf("%d plain pods", sc.PlainPods), sc.PlainOnly}, {"and the annotated", sc.Controllers}} {
			for _, pr := range step.stats {
				p("| %s | %s | %.2f s | %.2f s | %.2f s | %.1f MiB | %.1f MiB | %.1f MiB | %.1f |\n", pr.Controller, step.name, pr.ReadySeconds, pr.RestartSeconds, pr.RestartAloneSeconds, pr.RSSMiB, pr.PeakRSSMiB, pr.HeapMiB, pr.CPUSeconds)
			}
		}
		p("\n| controller | per plain pod (RSS) | per annotated pod, claim and volume (live heap) | same (RSS) | live heap at %d annotated | RSS at %d | start-up at %d |\n|---|--:|--:|--:|--:|--:|--:|\n", ScaleTarget, ScaleTarget, ScaleTarget)
		for _, pr := range sc.Controllers {
			p("| %s | %.2f KiB | %.2f KiB | %.2f KiB | %.1f MiB | %.1f MiB | %.2f s |\n", pr.Controller, sc.PerPlainKiB(pr.Controller), sc.PerAnnotatedKiB(pr.Controller), sc.PerAnnotatedRSSKiB(pr.Controller),
				sc.HeapAt(pr.Controller, ScaleTarget), sc.RSSAt(pr.Controller, ScaleTarget), sc.ReadyAt(pr.Controller, ScaleTarget))
		}
		if len(sc.AtLimits) > 0 {
			p("\nUnder memory limits (MEMORY_LIMIT, of which 90%% is the Go runtime's soft limit), everything present, each a fresh start read after %.0f s:\n\n", sc.SettleSeconds)
			p("| limit | controller | start -> ready | restart -> ready | restart alone -> ready | RSS | peak RSS | live heap | CPU seconds |\n|---|---|--:|--:|--:|--:|--:|--:|--:|\n")
			for _, run := range sc.AtLimits {
				if run.Error != "" {
					p("| %s | all | %s | | | | | | |\n", run.Limit, strings.ReplaceAll(run.Error, "|", "/"))
					continue
				}
				for _, pr := range run.Controllers {
					p("| %s | %s | %.2f s | %.2f s | %.2f s | %.1f MiB | %.1f MiB | %.1f MiB | %.1f |\n", run.Limit, pr.Controller, pr.ReadySeconds, pr.RestartSeconds, pr.RestartAloneSeconds, pr.RSSMiB, pr.PeakRSSMiB, pr.HeapMiB, pr.CPUSeconds)
				}
			}
		}
		p("\nHeap profiles of each step are in the working directory's controllers/ (`--keep`): `go tool pprof -sample_index=inuse_space -top <dir>/controllers/<controller>-scale-annotated.pprof`.\n")
		if len(sc.Requests) > 0 {
			p("\nRequests from start to the end of the window: ")
			parts := make([]string, 0, len(sc.Requests))
			for _, row := range sc.Requests {
				s := fmt.Sprintf("%s %s %s %.0f", row.Controller, row.Verb, row.Resource, row.Total)
				if len(row.Failed) > 0 {
					s += " (failed " + fmtFailed(row.Failed) + ")"
				}
				parts = append(parts, s)
			}
			p("%s.\n", strings.Join(parts, "; "))
		}
	}
}

// schedulingSection writes pod created -> scheduled.
func (r *Report) schedulingSection(p printer) {
	s := r.Settings
	if len(r.Scheduling) > 0 {
		p("\n### Pod created -> scheduled (%d cycles each)\n\n", s.SchedulingCycles)
		p("Whole cycles: the pod is deleted once scheduled, and the next cycle starts once its volume is back in the pool. " +
			"The floor has no controller: it creates the claim, then the pod.\n\n")
		p("| concurrency | variant | p50 | p95 | p99 | p99 / floor | cycles/min | / floor |\n|--:|---|--:|--:|--:|--:|--:|--:|\n")
		for _, row := range r.Scheduling {
			vs := "-"
			if row.RateVsFloor > 0 {
				vs = fmt.Sprintf("%.0f%%", row.RateVsFloor)
			}
			fail := ""
			if row.Failures > 0 {
				fail = fmt.Sprintf(" (%d failed)", row.Failures)
			}
			p("| %d | %s%s | %s | %s | %s | %s | %.1f | %s |\n", row.Concurrency, row.Variant, fail, fmtMs(row.Scheduled.P50ms), fmtMs(row.Scheduled.P95ms),
				fmtMs(row.Scheduled.P99ms), ratio(row.P99VsFloor), row.PerMinute, vs)
		}
	}
}

// reservationsSection writes the recurring and one-off runs.
func (r *Report) reservationsSection(p printer) {
	if rc := r.Recurring; rc != nil {
		p("\n### Recurring workload (%d claim names in random order, %d in flight, %d cycles, reserveFor %s)\n\n", rc.Names, rc.Concurrency, rc.Cycles, rc.ReserveFor)
		p("| own previous volume (of those whose volume was free) | served warm from the pool | claim -> Bound p50 | p99 |\n|--:|--:|--:|--:|\n")
		p("| %.1f%% | %.1f%% | %s | %s |\n", rc.OwnPct, rc.WarmPct, fmtMs(rc.Bound.P50ms), fmtMs(rc.Bound.P99ms))
	}
	if len(r.OneOff) > 0 {
		p("\n### One-off claim names (every claim a new name, %d in flight, on a pool of %d warm volumes)\n\n", recurringConcurrency, recurringNames)
		p("| reserveFor | reuseScope | cycles | served warm from the pool | claim -> Bound p50 | p99 | through the provisioner | of which created -> handed off p50 | handed off -> issued p50 | issued -> Bound p50 |\n|---|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
		for _, o := range r.OneOff {
			fail := ""
			if o.Failed > 0 {
				fail = fmt.Sprintf(" (%d failed)", o.Failed)
			}
			p("| %s | %s | %d%s | %.1f%% | %s | %s | %d | %s | %s | %s |\n", o.ReserveFor, o.ReuseScope, o.Cycles, fail, o.WarmPct, fmtMs(o.Bound.P50ms), fmtMs(o.Bound.P99ms),
				o.HandedOff, fmtMs(o.ToHandOff.P50ms), fmtMs(o.ToIssue.P50ms), fmtMs(o.ToBind.P50ms))
		}
	}
}

// nodeLocalSection writes the node-local run.
// madeAheadSection writes the made-ahead run.
func (r *Report) madeAheadSection(p printer) {
	m := r.MadeAhead
	if m == nil {
		return
	}
	p("\n### Claims no member fits, without and with members made ahead (%d cycles of each, %d in flight)\n\n", m.Cycles, m.Concurrency)
	p("| pool | claim created -> Bound p50 | p95 | p99 | served by a volume that existed |\n|---|--:|--:|--:|--:|\n")
	p("| no VolumePool: a new volume for each | %s | %s | %s | - |\n", fmtMs(m.Without.P50ms), fmtMs(m.Without.P95ms), fmtMs(m.Without.P99ms))
	p("| minAvailable %d, members of %s made ahead | %s | %s | %s | %.0f%% |\n", m.MinAvailable, aheadCapacity, fmtMs(m.With.P50ms), fmtMs(m.With.P95ms), fmtMs(m.With.P99ms), m.WithWarmPct)
	if m.Failed > 0 {
		p("\n%d cycles failed.\n", m.Failed)
	}
}

// classPoolSection writes the class-pool run.
func (r *Report) classPoolSection(p printer) {
	c := r.ClassPool
	if c == nil {
		return
	}
	p("\n### A pool in front of a CSI class, against the CSI class itself (%d cycles of each, %d in flight)\n\n", c.Cycles, c.Concurrency)
	p("The tests' CSI driver behind the real external-provisioner.\n\n")
	c.ClassRuns.table(p, "a new volume each", "a new volume through the CSI class", "a free member")
	if c.Failed > 0 {
		p("\n%d cycles failed.\n", c.Failed)
	}
	z := c.Zoned
	if z == nil {
		return
	}
	p("\nIn zones %v, binding on first consumer: each claim's pod on a node of the next zone in turn.\n\n", z.Zones)
	z.ClassRuns.table(p, "a new volume in the pod's zone", "a new volume in the pod's zone", "a free member of the pod's zone")
	p("\n%d claims bound to a volume of another zone than their pod's.\n", z.OutOfZone)
	if z.Failed > 0 {
		p("\n%d cycles failed.\n", z.Failed)
	}
}

// table writes the figures of r, each row said as the run's claims were
// served: direct on the CSI class, miss and hit on the pool.
func (r ClassRuns) table(p printer, direct, miss, hit string) {
	p("| claims | claim created -> Bound p50 | p95 | p99 | volumes the driver made |\n|---|--:|--:|--:|--:|\n")
	p("| the CSI class: %s | %s | %s | %s | %d |\n", direct, fmtMs(r.Direct.P50ms), fmtMs(r.Direct.P95ms), fmtMs(r.Direct.P99ms), r.Direct.N)
	p("| the pool, miss: %s | %s | %s | %s | %d |\n", miss, fmtMs(r.Miss.P50ms), fmtMs(r.Miss.P95ms), fmtMs(r.Miss.P99ms), r.MissCreates)
	p("| the pool, hit: %s (%.0f%% of them) | %s | %s | %s | %d |\n", hit, r.HitPct, fmtMs(r.Hit.P50ms), fmtMs(r.Hit.P95ms), fmtMs(r.Hit.P99ms), r.HitCreates)
}

func (r *Report) nodeLocalSection(p printer) {
	if n := r.NodeLocal; n != nil {
		p("\n### Node-local pool on a real node (%d cycles of each, one pod at a time)\n\n", n.Cycles)
		p("| cycle | claim -> Bound p50 | p95 | p99 | of which node selected -> Bound p50 | p99 | pod created -> scheduled p50 | p99 |\n|---|--:|--:|--:|--:|--:|--:|--:|\n")
		for _, row := range []struct {
			name string
			r    NodeLocalRow
		}{
			{"miss: a create pod makes the directory", n.Miss},
			{"hit: the workload's volume, free on the node", n.Hit},
			{"floor: a free local volume, no provisioner", n.Floor},
		} {
			extra := ""
			if row.r.Failed > 0 || row.r.Unexpected > 0 {
				extra = fmt.Sprintf(" (%d failed, %d served otherwise)", row.r.Failed, row.r.Unexpected)
			}
			selected := [2]string{"-", "-"}
			if row.r.Provisioned.N > 0 {
				selected = [2]string{fmtMs(row.r.Provisioned.P50ms), fmtMs(row.r.Provisioned.P99ms)}
			}
			p("| %s%s | %s | %s | %s | %s | %s | %s | %s |\n", row.name, extra, fmtMs(row.r.Bound.P50ms), fmtMs(row.r.Bound.P95ms), fmtMs(row.r.Bound.P99ms),
				selected[0], selected[1], fmtMs(row.r.Scheduled.P50ms), fmtMs(row.r.Scheduled.P99ms))
		}
		if n.ScrubToPool.N > 0 || n.ScrubFailed > 0 {
			failed := ""
			if n.ScrubFailed > 0 {
				failed = fmt.Sprintf(" (%d failed)", n.ScrubFailed)
			}
			p("\n| onRelease | claim gone -> volume free again p50 | p95 | p99 |\n|---|--:|--:|--:|\n")
			p("| Keep: the data stays | %s | %s | %s |\n", fmtMs(n.KeepToPool.P50ms), fmtMs(n.KeepToPool.P95ms), fmtMs(n.KeepToPool.P99ms))
			p("| Scrub: a scrub pod empties it on the node%s | %s | %s | %s |\n", failed, fmtMs(n.ScrubToPool.P50ms), fmtMs(n.ScrubToPool.P95ms), fmtMs(n.ScrubToPool.P99ms))
		}
	}
}

// failoverSection writes how long each standby took to act.
func (r *Report) failoverSection(p printer) {
	if f := r.Failover; f != nil {
		p("\n### Failover (leader killed with SIGKILL, lease duration %s)\n\n| controller | kill -> standby acts |\n|---|--:|\n", f.LeaseDuration)
		p("| podwatcher (claim created) | %.1f s |\n| provisioner (volume created) | %.1f s |\n| releaser (volume Available) | %.1f s |\n",
			f.PodwatcherSeconds, f.ProvisionerSeconds, f.ReleaserSeconds)
	}
}

// targetsSection writes the targets and the notes.
func (r *Report) targetsSection(p printer) {
	s := r.Settings
	p("\n### Targets (reported, not enforced)\n\n")
	if s.PodFloor {
		p("The targets are set against the floor. Lines \"vs pod floor\" (goal: %s) are not targets: they set the same figure against the pod floor, to tell what our controllers add from what the pod costs.\n\n", referenceGoal)
	}
	p("| target | goal | measured | met |\n|---|---|---|---|\n")
	for _, t := range r.Targets {
		met := "not measured"
		switch {
		case t.Reference:
			met = "-"
		case t.Met != nil:
			met = map[bool]string{true: "yes", false: "**no**"}[*t.Met]
		}
		p("| %s | %s | %s | %s |\n", t.Name, t.Goal, t.Measured, met)
	}
	if len(r.Notes) > 0 {
		p("\nNotes:\n\n")
		for _, n := range r.Notes {
			p("- %s\n", n)
		}
	}
}

func fmtFailed(f map[string]float64) string {
	if len(f) == 0 {
		return ""
	}
	codes := make([]string, 0, len(f))
	for c := range f {
		codes = append(codes, c)
	}
	sort.Strings(codes)
	parts := make([]string, len(codes))
	for i, c := range codes {
		parts[i] = fmt.Sprintf("%.0f x %s", f[c], c)
	}
	return strings.Join(parts, ", ")
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, ", ")
}
