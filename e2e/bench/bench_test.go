package bench

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

func TestPercentile(t *testing.T) {
	ms := func(vs ...int) []time.Duration {
		out := make([]time.Duration, len(vs))
		for i, v := range vs {
			out[i] = time.Duration(v) * time.Millisecond
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = i + 1
	}
	tests := []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{"empty", nil, 50, 0},
		{"one value is every percentile", ms(7), 99, 7 * time.Millisecond},
		{"median of an odd count", ms(1, 2, 3), 50, 2 * time.Millisecond},
		{"median of an even count is the lower middle", ms(1, 2, 3, 4), 50, 2 * time.Millisecond},
		{"p99 of 100 values is the 99th", ms(hundred...), 99, 99 * time.Millisecond},
		{"p95 of 100 values is the 95th", ms(hundred...), 95, 95 * time.Millisecond},
		{"p99 of 10 values is the largest", ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 99, 10 * time.Millisecond},
		{"p100 is the largest", ms(1, 5, 9), 100, 9 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Percentile(tt.sorted, tt.p); got != tt.want {
				t.Errorf("Percentile(%v, %v) = %v, want %v", tt.sorted, tt.p, got, tt.want)
			}
		})
	}
}

func TestSummarizeSortsACopy(t *testing.T) {
	in := []time.Duration{3 * time.Millisecond, 1 * time.Millisecond, 2500 * time.Microsecond}
	s := Summarize(in)
	want := Summary{N: 3, P50ms: 2.5, P95ms: 3, P99ms: 3, MaxMs: 3}
	if s != want {
		t.Errorf("Summarize = %+v, want %+v", s, want)
	}
	if in[0] != 3*time.Millisecond {
		t.Errorf("Summarize reordered its input: %v", in)
	}
	if (Summarize(nil) != Summary{}) {
		t.Errorf("Summarize(nil) = %+v, want zero", Summarize(nil))
	}
}

const scrapeBefore = `# HELP reclaimable_api_requests_total Requests sent to the API server.
# TYPE reclaimable_api_requests_total counter
reclaimable_api_requests_total{code="200",resource="leases",verb="update"} 10
reclaimable_api_requests_total{code="201",resource="persistentvolumeclaims",verb="create"} 4
reclaimable_api_requests_total{code="200",resource="pods",verb="list"} 1
reclaimable_other_total{code="500",resource="pods",verb="get"} 99
`

const scrapeAfter = `reclaimable_api_requests_total{code="200",resource="leases",verb="update"} 40
reclaimable_api_requests_total{code="201",resource="persistentvolumeclaims",verb="create"} 24
reclaimable_api_requests_total{code="409",resource="persistentvolumeclaims",verb="create"} 2
reclaimable_api_requests_total{code="200",resource="pods",verb="list"} 1
reclaimable_api_requests_total{code="201",resource="events",verb="create"} 5
reclaimable_api_requests_total{code="404",resource="pods",verb="get"} 3
reclaimable_api_requests_total{code="error",resource="persistentvolumes",verb="update"} 1
`

func TestParseRequests(t *testing.T) {
	got, err := ParseRequests(scrapeBefore)
	if err != nil {
		t.Fatal(err)
	}
	want := Requests{
		{Verb: "update", Resource: "leases", Code: "200"}:                 10,
		{Verb: "create", Resource: "persistentvolumeclaims", Code: "201"}: 4,
		{Verb: "list", Resource: "pods", Code: "200"}:                     1,
	}
	if len(got) != len(want) {
		t.Fatalf("got %d series %v, want %d", len(got), got, len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%+v = %v, want %v", k, got[k], v)
		}
	}
	for _, bad := range []string{
		`reclaimable_api_requests_total{code="200" 3`,
		`reclaimable_api_requests_total{code="200"}`,
		`reclaimable_api_requests_total{code="200"} many`,
		`reclaimable_api_requests_total{code=200} 1`,
	} {
		if _, err := ParseRequests(bad); err == nil {
			t.Errorf("ParseRequests(%q) succeeded, want an error", bad)
		}
	}
}

func TestCostOfAPhase(t *testing.T) {
	before, _ := ParseRequests(scrapeBefore)
	after, _ := ParseRequests(scrapeAfter)
	diff := map[string]Requests{"podwatcher": after.Sub(before)}
	if _, ok := diff["podwatcher"][RequestKey{Verb: "list", Resource: "pods", Code: "200"}]; ok {
		t.Error("a series that did not move is in the difference")
	}
	requests, failedWrites := CycleCost(diff)
	// create claims 20+2, events 5, get pods 3, update volumes 1; leases and lists left out.
	if requests != 31 {
		t.Errorf("requests = %v, want 31", requests)
	}
	// The 409 create and the unanswered update; a failed get is not a write.
	if failedWrites != 3 {
		t.Errorf("failed writes = %v, want 3", failedWrites)
	}
	rows := CostRows(diff, 10)
	var got []string
	for _, r := range rows {
		got = append(got, r.Verb+" "+r.Resource)
	}
	// Per controller: the cycle's requests by resource, then the background ones.
	want := []string{"create events", "create persistentvolumeclaims", "update persistentvolumes", "get pods", "update leases"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("rows = %v, want %v", got, want)
	}
	claims := rows[1]
	if claims.Total != 22 || claims.PerCycle != 2.2 || claims.Failed["409"] != 2 {
		t.Errorf("claims row = %+v, want 22 in all, 2.2 per cycle, 2 failed with 409", claims)
	}
	if rows[4].PerCycle != 3 {
		t.Errorf("leases row = %+v, want 3 per cycle", rows[4])
	}
}

func TestSubCountsARestartedProcessFromZero(t *testing.T) {
	k := RequestKey{Verb: "get", Resource: "pods", Code: "200"}
	got := Requests{k: 3}.Sub(Requests{k: 10})
	if got[k] != 3 {
		t.Errorf("Sub after a restart = %v, want 3", got[k])
	}
}

func TestSteps(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ours := []cycleTimes{
		{start: at(0), ownerCreated: at(10), ownerDeleted: at(500), claim: claimRecord{uid: types.UID("a"),
			created: at(40), bound: at(240), hit: true, gone: at(700), released: at(750), available: at(900)}},
		{start: at(0), ownerCreated: at(10), ownerDeleted: at(2000), claim: claimRecord{uid: types.UID("b"),
			created: at(30), bound: at(1030), hit: false, gone: at(2100), released: at(2150), available: at(2300)}},
	}
	floor := []cycleTimes{
		{start: at(0), ownerCreated: at(5), ownerDeleted: at(400), claim: claimRecord{
			created: at(6), bound: at(206), gone: at(420), released: at(470), available: at(620)}},
	}
	// Pod created at 10, its claim seen at 15, Bound at 115; the pod
	// deleted at 300, the claim (deleted right after) gone at 360.
	podFloor := []cycleTimes{
		{start: at(0), ownerCreated: at(10), ownerDeleted: at(300), claim: claimRecord{
			created: at(15), bound: at(115), gone: at(360), released: at(400), available: at(480)}},
	}
	steps := Steps(ours, floor, podFloor)
	byName := map[string]Step{}
	for _, s := range steps {
		byName[s.Name] = s
	}
	check := func(name string, wantOurs float64, wantFloor float64) {
		t.Helper()
		s, ok := byName[name]
		if !ok {
			t.Fatalf("no step %q", name)
		}
		if s.Ours.P99ms != wantOurs {
			t.Errorf("%s: ours p99 = %v, want %v", name, s.Ours.P99ms, wantOurs)
		}
		if wantFloor < 0 {
			if s.Floor != nil {
				t.Errorf("%s: has a floor, want none", name)
			}
			return
		}
		if s.Floor == nil || s.Floor.P99ms != wantFloor {
			t.Errorf("%s: floor = %+v, want p99 %v", name, s.Floor, wantFloor)
		}
	}
	check(StepPodToClaim, 30, -1)
	check(StepBoundHit, 200, 200)
	check(StepBoundMiss, 1000, 200)
	check(StepDeletedToGone, 200, 20)
	check(StepGoneToReleased, 50, 50)
	check(StepReleasedToAvail, 150, 150)
	check(StepGoneToAvailable, 200, 200)
	check(StepWhole, 2300, 620)
	if byName[StepBoundHit].Ours.N != 1 || byName[StepBoundMiss].Ours.N != 1 {
		t.Errorf("hits and misses not split: %+v / %+v", byName[StepBoundHit].Ours, byName[StepBoundMiss].Ours)
	}
	if r := byName[StepBoundMiss].P99Ratio(); r != 5 {
		t.Errorf("miss p99 ratio = %v, want 5", r)
	}

	podFloorP99 := map[string]float64{
		StepPodToClaim:      5,
		StepBoundHit:        100,
		StepBoundMiss:       100, // the pod floor binds an Available volume: both compare with it
		StepDeletedToGone:   60,
		StepGoneToReleased:  40,
		StepReleasedToAvail: 80,
		StepGoneToAvailable: 120,
		StepWhole:           480,
	}
	for name, want := range podFloorP99 {
		s := byName[name]
		if s.PodFloor == nil || s.PodFloor.P99ms != want {
			t.Errorf("%s: pod floor = %+v, want p99 %v", name, s.PodFloor, want)
		}
		if s.PodFloorName == "" {
			t.Errorf("%s: pod floor step unnamed", name)
		}
	}
	if r := byName[StepBoundMiss].P99RatioPodFloor(); r != 10 {
		t.Errorf("miss p99 ratio to the pod floor = %v, want 10", r)
	}

	for _, s := range Steps(ours, floor, nil) {
		if s.PodFloor != nil || s.PodFloorName != "" || s.P99RatioPodFloor() != 0 {
			t.Errorf("%s: has a pod floor (%q, %+v) when none was run", s.Name, s.PodFloorName, s.PodFloor)
		}
	}
}

func TestParseProc(t *testing.T) {
	stat := "1234 (reclaimable (x)) S 1 1234 1234 0 -1 4194560 2000 0 0 0 250 130 0 0 20 0 12 0 100 0 0"
	cpu, err := parseStatCPU(stat)
	if err != nil {
		t.Fatal(err)
	}
	if cpu != 3.8 {
		t.Errorf("cpu = %v, want 3.8 (380 ticks)", cpu)
	}
	if _, err := parseStatCPU("1234 (x) S 1"); err == nil {
		t.Error("a short stat parsed")
	}
	rss, peak := parseStatusMemory("Name:\treclaimable\nVmHWM:\t   61440 kB\nVmRSS:\t   40960 kB\n")
	if rss != 40 || peak != 60 {
		t.Errorf("rss, peak = %v, %v; want 40, 60", rss, peak)
	}
}

func sampleReport() *Report {
	floor := Summary{N: 200, P50ms: 150, P95ms: 190, P99ms: 200, MaxMs: 210}
	r := &Report{
		Settings: Settings{Cycles: 200, Concurrency: 10, MissEvery: 5, ThroughputLevels: []int{1, 10}, ThroughputDuration: "30s"},
		Steps: []Step{
			{Name: StepPodToClaim, Ours: Summary{N: 200, P50ms: 20, P95ms: 60, P99ms: 90, MaxMs: 95}},
			{Name: StepBoundHit, Ours: Summary{N: 160, P50ms: 180, P95ms: 250, P99ms: 290}, FloorName: "claim created -> Bound to an Available PV", Floor: &floor},
			{Name: StepBoundMiss, Ours: Summary{N: 40, P50ms: 700, P95ms: 900, P99ms: 1000}, FloorName: "claim created -> Bound to an Available PV", Floor: &floor},
			{Name: StepGoneToAvailable, Ours: Summary{N: 200, P50ms: 200, P95ms: 280, P99ms: 310}, FloorName: "claim gone -> PV Available", Floor: &floor},
		},
		Throughput: []Throughput{
			{Concurrency: 1, Ours: 30, Floor: 40, OursVsFloorPct: 75, WindowSeconds: 30},
			{Concurrency: 10, Ours: 190, Floor: 200, OursVsFloorPct: 95, WindowSeconds: 30},
		},
		Cost: Cost{Cycles: 200, PerCycle: 5.5, FailedWrites: 0, FloorPerCycle: 3,
			Rows: []CostRow{{Controller: "podwatcher", Verb: "create", Resource: "persistentvolumeclaims", Total: 200, PerCycle: 1},
				{Controller: "releaser", Verb: "update", Resource: "persistentvolumes", Total: 210, PerCycle: 1.05, Failed: map[string]float64{"409": 10}}}},
		Scale: &Scale{PlainPods: 20000, Pods: 2000, Claims: 2000, Volumes: 2000, Bound: 2000,
			Baseline: []ProcessStats{
				{Controller: "podwatcher", RSSMiB: 30, ReadySeconds: 1},
				{Controller: "releaser", RSSMiB: 30, ReadySeconds: 1},
			},
			PlainOnly: []ProcessStats{
				{Controller: "podwatcher", RSSMiB: 40, HeapMiB: 8, ReadySeconds: 1.2},
				{Controller: "releaser", RSSMiB: 30, HeapMiB: 6, ReadySeconds: 1},
			},
			Controllers: []ProcessStats{
				{Controller: "podwatcher", RSSMiB: 44, PeakRSSMiB: 50, HeapMiB: 20, ReadySeconds: 1.5},
				{Controller: "releaser", RSSMiB: 38, PeakRSSMiB: 40, HeapMiB: 15, ReadySeconds: 2},
			},
			AtLimits: []LimitRun{
				{Limit: "96Mi", Controllers: []ProcessStats{{Controller: "podwatcher", RSSMiB: 41, PeakRSSMiB: 45, HeapMiB: 19, ReadySeconds: 1.6, RestartSeconds: 1.4}}},
				{Limit: "32Mi", Error: "podwatcher: not ready in 2m0s"},
			}},
	}
	r.Evaluate()
	return r
}

func TestEvaluate(t *testing.T) {
	r := sampleReport()
	met := map[string]string{}
	for _, tg := range r.Targets {
		switch {
		case tg.Met == nil:
			met[tg.Name] = "unmeasured"
		case *tg.Met:
			met[tg.Name] = "yes"
		default:
			met[tg.Name] = "no"
		}
	}
	want := map[string]string{
		"pod created -> claim created, p99 (10 in flight)": "yes", // 90 < 100
		StepGoneToAvailable + ", p99 vs floor":             "no",  // 1.55x
		StepBoundHit + ", p99 vs floor":                    "yes", // 1.45x
		StepBoundMiss + ", p99 vs floor":                   "no",  // 5x
		"throughput at concurrency 1 vs floor":             "no",
		"throughput at concurrency 10 vs floor":            "yes",
		"requests per full cycle, events included":         "yes",
		"failed writes in steady state":                    "yes",
		"claims re-created after their owner was deleted":  "yes",
		// podwatcher: 10 MiB RSS for 20,000 plain pods, 4 MiB RSS and 12
		// MiB live heap for 2,000 annotated; releaser: 0, 8 and 9 MiB.
		"memory per plain pod": "no", // 0.51 KiB
		"memory per annotated pod with its claim and volume (live heap)": "no", // 6.14 KiB
		"controllers' RSS at 20000 annotated pods, claims and volumes":   "no", // releaser 38 + 18,000 x 4.1 KiB
		"start-up sync at 20000, the three at once":                      "no", // releaser 1 s + 10 x 1 s
		"killed leader's replacement acting":                             "unmeasured",
	}
	for name, w := range want {
		if met[name] != w {
			t.Errorf("target %q: met = %q, want %q", name, met[name], w)
		}
	}
	if len(met) != len(want) {
		t.Errorf("targets %v, want exactly %d", met, len(want))
	}
}

// withPodFloor is sampleReport with the pod floor run.
func withPodFloor() *Report {
	r := sampleReport()
	r.Settings.PodFloor = true
	podFloor := Summary{N: 200, P50ms: 250, P95ms: 300, P99ms: 320, MaxMs: 330}
	toClaim := Summary{N: 200, P50ms: 4, P95ms: 8, P99ms: 9, MaxMs: 10}
	for i := range r.Steps {
		st := &r.Steps[i]
		st.PodFloorName = st.Name
		st.PodFloor = &podFloor
		if st.Name == StepPodToClaim {
			st.PodFloor = &toClaim
		}
	}
	r.Throughput[1].PodFloor, r.Throughput[1].OursVsPodFloorPct, r.Throughput[1].PodFloorFailures = 250, 76, 2
	// At concurrency 1 every pod floor cycle failed: no figure.
	r.Throughput[0].PodFloorFailures = 3
	r.Evaluate()
	return r
}

func TestEvaluateWithPodFloor(t *testing.T) {
	r := withPodFloor()
	targets := map[string]Target{}
	for _, tg := range r.Targets {
		targets[tg.Name] = tg
	}
	// The targets against the floor are unchanged by the pod floor.
	if tg := targets[StepBoundHit+", p99 vs floor"]; tg.Reference || tg.Met == nil || !*tg.Met {
		t.Errorf("pool hit target vs floor = %+v, want met, not a reference", tg)
	}
	if tg := targets["throughput at concurrency 10 vs floor"]; tg.Reference || tg.Met == nil || !*tg.Met {
		t.Errorf("throughput target vs floor = %+v, want met, not a reference", tg)
	}
	want := map[string]string{
		StepGoneToAvailable + ", p99 vs pod floor":  "0.97x (310 ms vs 320 ms)",
		StepBoundMiss + ", p99 vs pod floor":        "3.12x (1000 ms vs 320 ms)",
		"throughput at concurrency 1 vs pod floor":  "not measured",
		"throughput at concurrency 10 vs pod floor": "76% (190.0 vs 250.0 cycles/min)",
	}
	for name, measured := range want {
		tg, ok := targets[name]
		if !ok {
			t.Errorf("no line %q", name)
			continue
		}
		if tg.Measured != measured || !tg.Reference || tg.Met != nil || tg.Goal != referenceGoal {
			t.Errorf("%q = %+v, want a reference measuring %q, goal %q, met nil", name, tg, measured, referenceGoal)
		}
	}
	references := 0
	for _, tg := range r.Targets {
		if tg.Reference {
			references++
		}
	}
	if references != len(want) {
		t.Errorf("%d reference lines, want %d", references, len(want))
	}
	// A pool hit is also set against the pod floor as a target.
	if tg := targets[StepBoundHit+", p99 vs pod floor (10 in flight)"]; tg.Reference || tg.Met == nil || !*tg.Met || tg.Measured != "0.91x (290 ms vs 320 ms)" {
		t.Errorf("pool hit target vs pod floor = %+v, want met at 0.91x", tg)
	}
	if len(r.Targets) != len(sampleReport().Targets)+len(want)+1 {
		t.Errorf("%d lines, want the %d targets, %d references and the pod floor's target", len(r.Targets), len(sampleReport().Targets), len(want))
	}
}

func TestMarkdownWithPodFloor(t *testing.T) {
	var buf bytes.Buffer
	withPodFloor().Markdown(&buf)
	out := buf.String()
	for _, want := range []string{
		"pod floor run,",
		"| step | n | p50 | p95 | p99 | floor step | floor p50 | floor p99 | p99 ratio | pod floor p50 | pod floor p99 | p99 ratio to pod floor |",
		// No floor for the claim of a pod, but a pod floor.
		"| pod created -> claim created | 200 | 20.0 ms | 60.0 ms | 90.0 ms | - | - | - | - | 4.0 ms | 9.0 ms | 10.00x |",
		"| claim created -> Bound, pool miss | 40 | 700 ms | 900 ms | 1000 ms | claim created -> Bound to an Available PV | 150 ms | 200 ms | 5.00x | 250 ms | 320 ms | 3.12x |",
		"| concurrency | ours | floor | ours / floor | pod floor | ours / pod floor | window |",
		"| 1 | 30.0 | 40.0 | 75% | 0.0 | - | 30 s (failed cycles: ours 0, floor 0, pod floor 3) |",
		"| 10 | 190.0 | 200.0 | 95% | 250.0 | 76% | 30 s (failed cycles: ours 0, floor 0, pod floor 2) |",
		"| claim created -> Bound, pool miss, p99 vs floor | <= 1.5x | 5.00x (1000 ms vs 200 ms) | **no** |",
		"| claim created -> Bound, pool miss, p99 vs pod floor | for reference | 3.12x (1000 ms vs 320 ms) | - |",
		"| throughput at concurrency 10 vs pod floor | for reference | 76% (190.0 vs 250.0 cycles/min) | - |",
		"Lines \"vs pod floor\" (goal: for reference) are not targets",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("Markdown lacks %q; got:\n%s", want, out)
		}
	}
}

func TestMarkdown(t *testing.T) {
	var buf bytes.Buffer
	sampleReport().Markdown(&buf)
	out := buf.String()
	for _, want := range []string{
		"| pod created -> claim created | 200 | 20.0 ms | 60.0 ms | 90.0 ms | - | - | - | - |",
		"| claim created -> Bound, pool miss | 40 | 700 ms | 900 ms | 1000 ms | claim created -> Bound to an Available PV | 150 ms | 200 ms | 5.00x |",
		"| 10 | 190.0 | 200.0 | 95% | 30 s |",
		"| releaser | update | persistentvolumes | 1.05 | 210 | 10 x 409 |",
		"**5.50** requests (floor: 3)",
		"| releaser | and the annotated | 2.00 s | 0.00 s | 0.00 s | 38.0 MiB | 40.0 MiB | 15.0 MiB | 0.0 |",
		"| 96Mi | podwatcher | 1.60 s | 1.40 s | 0.00 s | 41.0 MiB | 45.0 MiB | 19.0 MiB | 0.0 |",
		"| 32Mi | all | podwatcher: not ready in 2m0s | | | | | |",
		"| podwatcher | 0.51 KiB | 6.14 KiB | 2.05 KiB | 128.0 MiB | 80.0 MiB | 6.00 s |",
		"| killed leader's replacement acting | < 20 s | not measured | not measured |",
		"| start-up sync at 20000, the three at once | < 10 s | 11.00 s (slowest, projected from 2000) | **no** |",
		"pod floor skipped,",
		"| step | n | p50 | p95 | p99 | floor step | floor p50 | floor p99 | p99 ratio |\n",
		"| concurrency | ours | floor | ours / floor | window |\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("Markdown lacks %q; got:\n%s", want, out)
		}
	}
	if strings.Contains(out, "pod floor p50") || strings.Contains(out, "vs pod floor") {
		t.Errorf("Markdown of a run without the pod floor mentions it:\n%s", out)
	}
}

func TestEventRows(t *testing.T) {
	before := map[[2]string]float64{{"reclaimable-releaser", "Released"}: 10, {"reclaimable-podwatcher", "ClaimCreated"}: 5}
	after := map[[2]string]float64{
		{"reclaimable-releaser", "Released"}:       30,
		{"reclaimable-releaser", "Associated"}:     20,
		{"reclaimable-podwatcher", "ClaimCreated"}: 5,
	}
	rows := EventRows(after, before, 20)
	want := []EventRow{
		{Component: "reclaimable-releaser", Reason: "Associated", Total: 20, PerCycle: 1},
		{Component: "reclaimable-releaser", Reason: "Released", Total: 20, PerCycle: 1},
	}
	if len(rows) != len(want) {
		t.Fatalf("rows = %+v, want %+v", rows, want)
	}
	for i := range want {
		if rows[i] != want[i] {
			t.Errorf("row %d = %+v, want %+v", i, rows[i], want[i])
		}
	}
}

func TestOurComponent(t *testing.T) {
	for comp, want := range map[string]bool{
		"reclaimable-podwatcher":      true,
		provisionerName:               true,
		"persistentvolume-controller": false,
		"default-scheduler":           false,
	} {
		e := &corev1.Event{Source: corev1.EventSource{Component: comp}}
		if _, got := ourComponent(e); got != want {
			t.Errorf("ourComponent(%q) = %v, want %v", comp, got, want)
		}
	}
	e := &corev1.Event{ReportingController: "reclaimable-releaser"}
	if c, ok := ourComponent(e); !ok || c != "reclaimable-releaser" {
		t.Errorf("an event with only a reporting controller: %q, %v", c, ok)
	}
}

func TestRunCount(t *testing.T) {
	var seq atomic.Int64
	var mu sync.Mutex
	seen := map[int]bool{}
	results, errs := runCount(context.Background(), 4, 25, &seq, func(_ context.Context, worker, s int) (cycleTimes, error) {
		mu.Lock()
		defer mu.Unlock()
		if seen[s] {
			t.Errorf("sequence number %d given twice", s)
		}
		seen[s] = true
		if s%5 == 0 {
			return cycleTimes{}, errors.New("failed")
		}
		return cycleTimes{}, nil
	})
	if len(results)+len(errs) != 25 {
		t.Errorf("ran %d cycles, want 25", len(results)+len(errs))
	}
	if len(errs) != 5 {
		t.Errorf("%d failures, want 5 (every fifth)", len(errs))
	}
}

func TestRunWindowCountsOnlyCyclesEndingInTheWindow(t *testing.T) {
	var seq atomic.Int64
	start := time.Now()
	n, errs, window := runWindow(context.Background(), 2, 100*time.Millisecond, time.Second, &seq, func(ctx context.Context, _, _ int) (cycleTimes, error) {
		time.Sleep(10 * time.Millisecond) // the cycle's own work
		var t cycleTimes
		// Every cycle claims to have ended before the run began: none is in the window.
		t.claim.available = start.Add(-time.Second)
		return t, nil
	})
	if n != 0 || len(errs) != 0 {
		t.Errorf("completed %d (errors %v), want 0: no cycle ended in the window", n, errs)
	}
	if window < 100*time.Millisecond {
		t.Errorf("window %v shorter than asked", window)
	}
	n, _, _ = runWindow(context.Background(), 2, 100*time.Millisecond, time.Second, &seq, func(ctx context.Context, _, _ int) (cycleTimes, error) {
		time.Sleep(10 * time.Millisecond)
		var t cycleTimes
		t.claim.available = time.Now()
		return t, nil
	})
	// Two workers, 10 ms cycles, 100 ms: about 20; at least some, at most 22.
	if n == 0 || n > 22 {
		t.Errorf("completed %d cycles in the window, want between 1 and 22", n)
	}
}

func TestRecorderFollowsACycle(t *testing.T) {
	r := newRecorder()
	pv := func(name string, phase corev1.PersistentVolumePhase, claim types.UID) *corev1.PersistentVolume {
		v := &corev1.PersistentVolume{Status: corev1.PersistentVolumeStatus{Phase: phase}}
		v.Name = name
		if claim != "" {
			v.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "ns", Name: "c", UID: claim}
		}
		return v
	}
	claim := func(uid types.UID, phase corev1.PersistentVolumeClaimPhase, volume string) *corev1.PersistentVolumeClaim {
		c := &corev1.PersistentVolumeClaim{Spec: corev1.PersistentVolumeClaimSpec{VolumeName: volume}, Status: corev1.PersistentVolumeClaimStatus{Phase: phase}}
		c.Namespace, c.Name, c.UID = "ns", "c", uid
		return c
	}
	r.volume(pv("pool", corev1.VolumeAvailable, ""))
	r.claim(claim("u1", corev1.ClaimPending, ""), false)
	r.volume(pv("pool", corev1.VolumeBound, "u1"))
	r.claim(claim("u1", corev1.ClaimBound, "pool"), false)
	r.claim(cache.DeletedFinalStateUnknown{Obj: claim("u1", corev1.ClaimBound, "pool")}, true)
	r.volume(pv("pool", corev1.VolumeReleased, "u1"))
	r.volume(pv("pool", corev1.VolumeReleased, "")) // claimRef cleared
	r.volume(pv("pool", corev1.VolumeAvailable, ""))
	// The next claim of the same name gets a volume made for it.
	r.claim(claim("u2", corev1.ClaimPending, ""), false)
	r.volume(pv("new", corev1.VolumePending, "u2"))
	r.claim(claim("u2", corev1.ClaimBound, "new"), false)

	c := r.snapshot("u1")
	if !c.hit || c.volume != "pool" {
		t.Errorf("first claim: hit %v on %q, want a pool hit on pool", c.hit, c.volume)
	}
	for name, at := range map[string]time.Time{"created": c.created, "bound": c.bound, "gone": c.gone, "released": c.released, "available": c.available} {
		if at.IsZero() {
			t.Errorf("first claim: %s not recorded", name)
		}
	}
	if c.available.Before(c.released) || c.released.Before(c.gone) || c.gone.Before(c.bound) {
		t.Errorf("first claim's moments out of order: %+v", c)
	}
	if c2 := r.snapshot("u2"); c2.hit || c2.volume != "new" {
		t.Errorf("second claim: hit %v on %q, want a miss on new", c2.hit, c2.volume)
	}
	r.mu.Lock()
	latest := r.latestLocked("ns", "c")
	r.mu.Unlock()
	if latest == nil || latest.uid != "u2" {
		t.Errorf("latest claim named ns/c = %+v, want u2", latest)
	}
	// u2 was created after its name's owner was deleted (at u1's bound time), and is a second claim of the name.
	if n := r.recreated(map[string]time.Time{"ns/c": c.bound}); n != 1 {
		t.Errorf("recreated = %d, want 1", n)
	}
	if n := r.recreated(map[string]time.Time{"ns/other": c.bound}); n != 0 {
		t.Errorf("recreated for a name never deleted = %d, want 0", n)
	}
}

// A volume whose claimRef is cleared can be bound to a waiting claim before
// the PV controller marks it Available: the cycle of its previous claim
// ends when it is issued again.
func TestRecorderVolumeReissuedBeforeAvailable(t *testing.T) {
	r := newRecorder()
	pv := &corev1.PersistentVolume{}
	pv.Name = "pool"
	set := func(phase corev1.PersistentVolumePhase, claim types.UID) {
		v := pv.DeepCopy()
		v.Status.Phase, v.Spec.ClaimRef = phase, nil
		if claim != "" {
			v.Spec.ClaimRef = &corev1.ObjectReference{UID: claim}
		}
		r.volume(v)
	}
	first := &corev1.PersistentVolumeClaim{Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "pool"}, Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound}}
	first.Namespace, first.Name, first.UID = "ns", "a", "u1"
	set(corev1.VolumeAvailable, "")
	r.claim(first, false)
	set(corev1.VolumeBound, "u1")
	set(corev1.VolumeBound, "u1")
	r.claim(first, true)
	if got := r.snapshot("u1"); !got.available.IsZero() {
		t.Fatalf("available recorded while the volume is still Bound to the claim: %+v", got)
	}
	set(corev1.VolumeReleased, "u1")
	set(corev1.VolumeReleased, "")
	set(corev1.VolumeBound, "u2")
	got := r.snapshot("u1")
	if got.available.IsZero() || got.available.Before(got.released) {
		t.Errorf("a volume issued again did not end its previous claim's cycle: %+v", got)
	}
}

func TestMarkdownNodeLocal(t *testing.T) {
	r := sampleReport()
	ms := func(p50, p95, p99 float64) Summary {
		return Summary{N: 20, P50ms: p50, P95ms: p95, P99ms: p99, MaxMs: p99}
	}
	r.NodeLocal = &NodeLocal{
		Cycles:     20,
		Miss:       NodeLocalRow{Bound: ms(2000, 4000, 4100), Provisioned: ms(1500, 1900, 2000), Scheduled: ms(2100, 4500, 5000), Failed: 1},
		Hit:        NodeLocalRow{Bound: ms(26, 40, 48), Scheduled: ms(1100, 1900, 2000)},
		Floor:      NodeLocalRow{Bound: ms(22, 1200, 1400), Scheduled: ms(1000, 2400, 2500)},
		KeepToPool: ms(40, 60, 80), ScrubToPool: ms(3000, 3500, 3900),
	}
	var buf bytes.Buffer
	r.Markdown(&buf)
	out := buf.String()
	for _, want := range []string{
		"### Node-local pool on a real node (20 cycles of each, one pod at a time)",
		"| miss: a create pod makes the directory (1 failed, 0 served otherwise) | 2000 ms | 4000 ms | 4100 ms | 1500 ms | 2000 ms | 2100 ms | 5000 ms |",
		"| hit: the workload's volume, free on the node | 26.0 ms | 40.0 ms | 48.0 ms | - | - | 1100 ms | 2000 ms |",
		"| floor: a free local volume, no provisioner | 22.0 ms | 1200 ms | 1400 ms | - | - | 1000 ms | 2500 ms |",
		"| Keep: the data stays | 40.0 ms | 60.0 ms | 80.0 ms |",
		"| Scrub: a scrub pod empties it on the node | 3000 ms | 3500 ms | 3900 ms |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("Markdown lacks %q; got:\n%s", want, out)
		}
	}
	buf.Reset()
	sampleReport().Markdown(&buf)
	if strings.Contains(buf.String(), "Node-local") {
		t.Errorf("Markdown of a run without the node-local run mentions it:\n%s", buf.String())
	}
}

func TestMarkdownMadeAhead(t *testing.T) {
	r := withPodFloor()
	r.MadeAhead = &MadeAhead{Concurrency: 10, Cycles: 100, MinAvailable: 10,
		Without: Summary{N: 100, P50ms: 600, P95ms: 900, P99ms: 1100}, With: Summary{N: 100, P50ms: 30, P95ms: 45, P99ms: 60}, WithWarmPct: 100}
	r.Evaluate()
	var buf bytes.Buffer
	r.Markdown(&buf)
	out := buf.String()
	for _, want := range []string{
		"### Claims no member fits, without and with members made ahead (100 cycles of each, 10 in flight)",
		"| no VolumePool: a new volume for each | 600 ms | 900 ms | 1100 ms | - |",
		"| minAvailable 10, members of 4Gi made ahead | 30.0 ms | 45.0 ms | 60.0 ms | 100% |",
		"| claim no member fits, created -> Bound p99: without / with minAvailable vs pod floor's bind | for reference | 1100 ms / 60.0 ms vs 320 ms |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("Markdown lacks %q; got:\n%s", want, out)
		}
	}
}

func TestMarkdownClassPool(t *testing.T) {
	r := withPodFloor()
	r.ClassPool = &ClassPool{Concurrency: 10, Cycles: 100, ClassRuns: ClassRuns{
		Direct: Summary{N: 100, P50ms: 300, P95ms: 400, P99ms: 500}, Miss: Summary{N: 100, P50ms: 700, P95ms: 900, P99ms: 1100},
		Hit: Summary{N: 100, P50ms: 150, P95ms: 200, P99ms: 250}, HitPct: 100, MissCreates: 100},
		Zoned: &ZonedClassPool{Zones: []string{"zone-a", "zone-b"}, ClassRuns: ClassRuns{Direct: Summary{N: 100, P50ms: 350, P95ms: 450, P99ms: 550},
			Miss: Summary{N: 100, P50ms: 750}, Hit: Summary{N: 100, P50ms: 40}, HitPct: 100, MissCreates: 100}}}
	var buf bytes.Buffer
	r.Markdown(&buf)
	out := buf.String()
	for _, want := range []string{
		"### A pool in front of a CSI class, against the CSI class itself (100 cycles of each, 10 in flight)",
		"| the CSI class: a new volume each | 300 ms | 400 ms | 500 ms | 100 |",
		"| the pool, miss: a new volume through the CSI class | 700 ms | 900 ms | 1100 ms | 100 |",
		"| the pool, hit: a free member (100% of them) | 150 ms | 200 ms | 250 ms | 0 |",
		"In zones [zone-a zone-b], binding on first consumer",
		"| the CSI class: a new volume in the pod's zone | 350 ms | 450 ms | 550 ms | 100 |",
		"| the pool, hit: a free member of the pod's zone (100% of them) | 40.0 ms |",
		"0 claims bound to a volume of another zone than their pod's.",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("Markdown lacks %q; got:\n%s", want, out)
		}
	}
}

// At 20,000 sets the start-up is judged twice: the three restarted at once,
// and each alone (a rollout of one Deployment), the slowest of each.
func TestEvaluateStartUpAlone(t *testing.T) {
	r := &Report{Scale: &Scale{Pods: ScaleTarget, Controllers: []ProcessStats{
		{Controller: "podwatcher", ReadySeconds: 7, RestartSeconds: 11, RestartAloneSeconds: 4},
		{Controller: "releaser", ReadySeconds: 6, RestartSeconds: 9, RestartAloneSeconds: 10.5},
	}}}
	r.Evaluate()
	got := map[string]Target{}
	for _, tg := range r.Targets {
		got[tg.Name] = tg
	}
	for name, want := range map[string]struct {
		value string
		met   bool
	}{
		"start-up sync at 20000, the three at once":              {"11.00 s (slowest restart, measured)", false},
		"start-up sync at 20000, one controller restarted alone": {"10.50 s (slowest, measured)", false},
	} {
		tg, ok := got[name]
		switch {
		case !ok:
			t.Errorf("no target %q among %v", name, r.Targets)
		case tg.Measured != want.value || tg.Met == nil || *tg.Met != want.met:
			t.Errorf("target %q = %q, met %v; want %q, met %v", name, tg.Measured, tg.Met, want.value, want.met)
		}
	}
}
