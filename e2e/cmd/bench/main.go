// Command bench measures the full volume cycle of reclaimable on a local
// control plane, against the floor of the API server and the PV controller,
// and against the pod floor, the same with a pod (see package e2e/bench). `make bench` runs it; BENCH_FLAGS passes flags.
// The Markdown report goes to stdout, progress to stderr, JSON to --out.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/reclaimable/reclaimable/e2e/bench"
)

func main() {
	cfg, out, keep := parseFlags()
	removeDir := false
	if cfg.Dir == "" {
		dir, err := os.MkdirTemp("", "reclaimable-bench-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		cfg.Dir, removeDir = dir, !keep
	}
	cfg.Log = os.Stderr

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	report, err := bench.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench failed: %v\nlogs kept in %s\n", err, cfg.Dir)
		os.Exit(1)
	}
	report.Markdown(os.Stdout)
	if err := report.WriteJSON(out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "JSON report written to %s\n", out)
	if removeDir && len(report.Notes) == 0 {
		_ = os.RemoveAll(cfg.Dir)
	} else {
		fmt.Fprintf(os.Stderr, "logs kept in %s\n", cfg.Dir)
	}
}

// parseFlags reads the command line: the run's settings, where the JSON
// report goes, and whether the working directory is kept. A bad value
// exits with status 2.
func parseFlags() (cfg bench.Config, out string, keep bool) {
	var levels, limits string
	flag.IntVar(&cfg.Cycles, "cycles", 200, "cycles of the latency and API cost phase (ours, and as many for the floor and the pod floor)")
	flag.IntVar(&cfg.Concurrency, "concurrency", 10, "cycles in flight during the latency phase")
	flag.IntVar(&cfg.MissEvery, "miss-every", 5, "one latency cycle in this many asks for a size no pool volume has (a pool miss)")
	flag.StringVar(&levels, "throughput-levels", "1,10,50", "concurrencies of the throughput phase, comma-separated; empty skips it")
	flag.DurationVar(&cfg.ThroughputDuration, "throughput-duration", 30*time.Second, "how long throughput is counted at each level, for ours and for the floor")
	flag.IntVar(&cfg.Scale, "scale", 2000, "annotated pods, with as many claims and volumes, present for the start-up and memory phase; 0 skips it")
	flag.IntVar(&cfg.ScalePlain, "scale-plain", 20000, "plain pods (no annotation, no volume) present beside them in the scale phase (100000 for a large cluster's)")
	flag.DurationVar(&cfg.ScaleSettle, "scale-settle", 65*time.Second, "how long the controllers run with the scale objects before their memory is read (longer than one periodic sweep)")
	flag.StringVar(&limits, "scale-limits", "", "memory limits (Kubernetes quantities, comma-separated) under which the controllers are measured again at the end of the scale phase, each given as MEMORY_LIMIT as the Deployments do; empty skips it")
	flag.BoolVar(&cfg.PodFloor, "pod-floor", true, "also run the pod floor (the floor's cycle with a pod, no controllers) and set latency and throughput against it; false skips it (about as long as the floor)")
	flag.IntVar(&cfg.SchedulingCycles, "scheduling-cycles", 50, "cycles of each variant of the scheduling phase (pod created -> scheduled with and without the claims gate, and claim first) at concurrency 1 and 10; 0 skips it")
	flag.IntVar(&cfg.RecurringCycles, "recurring-cycles", 300, "cycles of the recurring-workload run (20 claim names that come back in random order, 10 in flight, on a class with --reserve-for), and of each one-off-names run (new names, with --reserve-for and with 0); 0 skips them")
	flag.StringVar(&cfg.ReserveFor, "reserve-for", "10m", "reserveFor of the recurring-workload run's class")
	flag.IntVar(&cfg.NodeLocalCycles, "node-local-cycles", 20, "cycles of each kind of the node-local run (claim -> Bound on a real node for a pool miss, a hit and the floor); 0 skips it. It needs root, as the e2e tests' real node does")
	flag.IntVar(&cfg.MadeAheadCycles, "made-ahead-cycles", 100, "cycles of each part of the made-ahead run (claims of a size no member has, at --concurrency: on a class without a VolumePool, then on one with minAvailable at --concurrency); 0 skips it")
	flag.IntVar(&cfg.ClassPoolCycles, "class-pool-cycles", 100, "cycles of each part of the class-pool run (claims on a CSI class, the tests' driver behind the real external-provisioner; then on a pool of the class backend in front of it, misses then hits, at --concurrency; then the same binding on first consumer, with zonal volumes and each pod in one of two zones in turn); 0 skips it")
	flag.IntVar(&cfg.KeyCycles, "key-cycles", 200, "runs of each setting of the CI-runs-by-key run (5 cache keys drawn at random, 3 in flight, at most 8 volumes, claims of generated names, after a warm-up run per key: without keyLabel, then keyLabel under keyPolicy Prefer and Require); 0 skips it")
	flag.IntVar(&cfg.EvictCycles, "evict-cycles", 20, "cycles of each part of the eviction run (one claim at a time at a pool's maximum of one volume: one that takes the free member, one that fits none and has it evicted, evictForClaims); 0 skips it")
	flag.BoolVar(&cfg.Failover, "failover", true, "measure how long a killed leader's standby takes to act (about 17 s)")
	flag.StringVar(&out, "out", "_output/bench.json", "where the JSON report is written")
	flag.StringVar(&cfg.Dir, "dir", "", "working directory for the control plane and the controllers' logs; default a temporary one, removed after a successful run")
	flag.BoolVar(&keep, "keep", false, "keep the working directory (logs) after a successful run")
	flag.Parse()

	cfg.ThroughputLevels = throughputLevels(levels)
	cfg.ScaleLimits = scaleLimits(limits)
	if cfg.Cycles <= 0 || cfg.Concurrency <= 0 || cfg.Scale < 0 || cfg.ScalePlain < 0 {
		fmt.Fprintln(os.Stderr, "--cycles and --concurrency must be positive, --scale and --scale-plain not negative")
		os.Exit(2)
	}
	return cfg, out, keep
}

// throughputLevels parses --throughput-levels, positive concurrencies.
func throughputLevels(levels string) []int {
	var out []int
	for _, f := range strings.Split(levels, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			fmt.Fprintf(os.Stderr, "bad --throughput-levels %q\n", levels)
			os.Exit(2)
		}
		out = append(out, n)
	}
	return out
}

// scaleLimits parses --scale-limits, positive quantities.
func scaleLimits(limits string) []string {
	var out []string
	for _, f := range strings.Split(limits, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		if q, err := resource.ParseQuantity(f); err != nil || q.Sign() <= 0 {
			fmt.Fprintf(os.Stderr, "bad --scale-limits %q: want positive quantities such as 128Mi\n", limits)
			os.Exit(2)
		}
		out = append(out, f)
	}
	return out
}
