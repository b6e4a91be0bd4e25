package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/reclaimable/reclaimable/e2e/process"
)

// clockTicks is USER_HZ, the unit of the CPU times in /proc/<pid>/stat; it
// is 100 on every Linux architecture Go supports.
const clockTicks = 100

// controllerProcess is one reclaimable process, run the way a Deployment
// runs it: one controller per process, its own health and metrics ports.
type controllerProcess struct {
	*process.Controller
	name string // podwatcher, provisioner or releaser
}

// startController starts `binary <name> args...` with env added to the
// environment, loopback health and metrics ports, logging to a file in
// logDir.
func startController(binary, name, logDir string, env []string, args ...string) (*controllerProcess, error) {
	logFile, err := os.CreateTemp(logDir, name+"-*.log")
	if err != nil {
		return nil, err
	}
	logFile.Close()
	c, err := process.NewController(binary, logFile.Name(), append([]string{name}, args...)...)
	if err != nil {
		return nil, err
	}
	c.Env = env
	if err := c.Start(); err != nil {
		return nil, err
	}
	return &controllerProcess{Controller: c, name: name}, nil
}

// requests scrapes the process's request counter.
func (p *controllerProcess) requests(ctx context.Context) (Requests, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, body, err := process.Get(ctx, p.MetricsAddr, "/metrics")
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", p.name, err)
	}
	return ParseRequests(body)
}

// stats reads CPU time and memory from /proc.
func (p *controllerProcess) stats() (ProcessStats, error) {
	st := ProcessStats{Controller: p.name}
	pid := p.Pid()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return st, err
	}
	cpu, err := parseStatCPU(string(b))
	if err != nil {
		return st, err
	}
	st.CPUSeconds = cpu
	b, err = os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return st, err
	}
	st.RSSMiB, st.PeakRSSMiB = parseStatusMemory(string(b))
	return st, nil
}

// parseStatCPU returns utime+stime in seconds from /proc/<pid>/stat. The
// command name (field 2) may hold spaces and parentheses, so fields are
// counted from the last ')'.
func parseStatCPU(stat string) (float64, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed stat %q", stat)
	}
	fields := strings.Fields(stat[i+1:])
	// fields[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(fields) < 13 {
		return 0, fmt.Errorf("short stat %q", stat)
	}
	utime, err1 := strconv.ParseUint(fields[11], 10, 64)
	stime, err2 := strconv.ParseUint(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("malformed stat times %q %q", fields[11], fields[12])
	}
	return float64(utime+stime) / clockTicks, nil
}

// parseStatusMemory returns VmRSS and VmHWM (peak) in MiB from
// /proc/<pid>/status.
func parseStatusMemory(status string) (rss, peak float64) {
	for _, line := range strings.Split(status, "\n") {
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		fields := strings.Fields(val)
		if len(fields) == 0 {
			continue
		}
		kb, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			continue
		}
		switch key {
		case "VmRSS":
			rss = kb / 1024
		case "VmHWM":
			peak = kb / 1024
		}
	}
	return rss, peak
}

// stop sends SIGTERM (the Lease is given up) and waits; kill sends SIGKILL
// (the Lease is left to expire), as a crash does.
func (p *controllerProcess) stop() { p.Signal(syscall.SIGTERM, 30*time.Second) }
func (p *controllerProcess) kill() { p.Signal(syscall.SIGKILL, 30*time.Second) }

// installation is the three controllers of one installation, each in its
// own process.
type installation struct {
	binary, logDir string
	args           []string
	// extra are the flags of one controller alone; env its environment
	// besides the machine's.
	extra, env map[string][]string
	procs      []*controllerProcess
}

var controllerNames = []string{"podwatcher", "provisioner", "releaser"}

// start starts the three processes and waits until each is ready; it
// returns each one's time from start to ready.
func (in *installation) start(ctx context.Context) (map[string]time.Duration, error) {
	return in.startSome(ctx, controllerNames)
}

// startSome is start for the processes of names only.
func (in *installation) startSome(ctx context.Context, names []string) (map[string]time.Duration, error) {
	var procs []*controllerProcess
	for _, name := range names {
		p, err := startController(in.binary, name, in.logDir, in.env[name], append(append([]string{}, in.args...), in.extra[name]...)...)
		if err != nil {
			stopAll(procs)
			return nil, err
		}
		procs = append(procs, p)
	}
	// Waited for side by side: one after the other, a process ready
	// before the one waited for first would be read as late as it.
	ready := map[string]time.Duration{}
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Go(func() {
			d, err := p.WaitReady(ctx, 2*time.Minute)
			mu.Lock()
			defer mu.Unlock()
			ready[p.name] = d
			if err != nil {
				errs = append(errs, err)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		stopAll(procs)
		return nil, err
	}
	in.procs = procs
	return ready, nil
}

func (in *installation) requests(ctx context.Context) (map[string]Requests, error) {
	out := map[string]Requests{}
	for _, p := range in.procs {
		r, err := p.requests(ctx)
		if err != nil {
			return nil, err
		}
		out[p.name] = r
	}
	return out, nil
}

// heapProfiles writes each process's heap profile to
// <logDir>/<name>-<tag>.pprof (`go tool pprof -sample_index=inuse_space`
// reads it) and sets stats' HeapMiB to its live heap: the profile is taken
// after a collection, so the heap in use is what the process keeps.
func (in *installation) heapProfiles(ctx context.Context, stats []ProcessStats, tag string) error {
	for _, p := range in.procs {
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		code, body, err := process.Get(pctx, p.MetricsAddr, "/debug/pprof/heap?gc=1")
		cancel()
		if err == nil && code != 200 {
			err = fmt.Errorf("status %d", code)
		}
		if err != nil {
			return fmt.Errorf("heap profile of %s: %w", p.name, err)
		}
		if err := os.WriteFile(filepath.Join(in.logDir, p.name+"-"+tag+".pprof"), []byte(body), 0o644); err != nil {
			return err
		}
		mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, metrics, err := process.Get(mctx, p.MetricsAddr, "/metrics")
		cancel()
		if err != nil {
			return fmt.Errorf("scraping %s: %w", p.name, err)
		}
		for i := range stats {
			if stats[i].Controller == p.name {
				stats[i].HeapMiB = gaugeValue(metrics, "go_memstats_heap_alloc_bytes") / (1 << 20)
			}
		}
	}
	return nil
}

// gaugeValue reads an unlabelled gauge from a Prometheus text exposition.
func gaugeValue(body, name string) float64 {
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
}

func (in *installation) stats() ([]ProcessStats, error) {
	var out []ProcessStats
	for _, p := range in.procs {
		s, err := p.stats()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.name, err)
		}
		out = append(out, s)
	}
	return out, nil
}

func (in *installation) stop() { stopAll(in.procs); in.procs = nil }

func stopAll(procs []*controllerProcess) {
	for _, p := range procs {
		p.stop()
	}
}

func diffRequests(after, before map[string]Requests) map[string]Requests {
	out := map[string]Requests{}
	for name, a := range after {
		out[name] = a.Sub(before[name])
	}
	return out
}

func logDirFor(dir string) string { return filepath.Join(dir, "controllers") }
