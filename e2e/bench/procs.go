package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/reclaimable/reclaimable/e2e/cluster"
)

// clockTicks is USER_HZ, the unit of the CPU times in /proc/<pid>/stat; it
// is 100 on every Linux architecture Go supports.
const clockTicks = 100

// controllerProcess is one reclaimable process, run the way a Deployment
// runs it: one controller per process, its own health and metrics ports.
type controllerProcess struct {
	name        string // podwatcher, provisioner or releaser
	cmd         *exec.Cmd
	done        chan struct{}
	healthAddr  string
	metricsAddr string
	logPath     string
	started     time.Time
}

// startController starts `binary <name> args...` with loopback health and
// metrics ports, logging to a file in logDir.
func startController(binary, name, logDir string, args ...string) (*controllerProcess, error) {
	health, err := cluster.FreeAddr()
	if err != nil {
		return nil, err
	}
	metrics, err := cluster.FreeAddr()
	if err != nil {
		return nil, err
	}
	logFile, err := os.CreateTemp(logDir, name+"-*.log")
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	full := append([]string{name, "--health-addr=" + health, "--metrics-addr=" + metrics}, args...)
	cmd := exec.Command(binary, full...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// The controllers must not outlive the benchmark if it dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &controllerProcess{name: name, healthAddr: health, metricsAddr: metrics, logPath: logFile.Name(), done: make(chan struct{})}
	p.started = time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p.cmd = cmd
	go func() { _ = cmd.Wait(); close(p.done) }()
	return p, nil
}

func (p *controllerProcess) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitReady polls /readyz (caches synced) and returns the time from process
// start until it first answered 200. Polling is fine here: 20 ms resolution
// on a figure measured in seconds.
func (p *controllerProcess) waitReady(ctx context.Context, timeout time.Duration) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	for {
		if p.exited() {
			return 0, fmt.Errorf("%s exited; its log:\n%s", p.name, p.tail(20))
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.healthAddr+"/readyz", nil)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Since(p.started), nil
			}
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("%s not ready after %s; its log:\n%s", p.name, timeout, p.tail(20))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// requests scrapes the process's request counter.
func (p *controllerProcess) requests(ctx context.Context) (Requests, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.metricsAddr+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", p.name, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return ParseRequests(string(b))
}

// stats reads CPU time and memory from /proc.
func (p *controllerProcess) stats() (ProcessStats, error) {
	st := ProcessStats{Controller: p.name}
	pid := p.cmd.Process.Pid
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
func (p *controllerProcess) stop() { p.signal(syscall.SIGTERM) }
func (p *controllerProcess) kill() { p.signal(syscall.SIGKILL) }

func (p *controllerProcess) signal(sig syscall.Signal) {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *controllerProcess) tail(n int) string { return cluster.Tail(p.logPath, n) }

// installation is the three controllers of one installation, each in its
// own process.
type installation struct {
	binary, logDir string
	args           []string
	// extra are the flags of one controller alone.
	extra map[string][]string
	procs []*controllerProcess
}

var controllerNames = []string{"podwatcher", "provisioner", "releaser"}

// start starts the three processes and waits until each is ready; it
// returns each one's time from start to ready.
func (in *installation) start(ctx context.Context) (map[string]time.Duration, error) {
	var procs []*controllerProcess
	for _, name := range controllerNames {
		p, err := startController(in.binary, name, in.logDir, append(append([]string{}, in.args...), in.extra[name]...)...)
		if err != nil {
			stopAll(procs)
			return nil, err
		}
		procs = append(procs, p)
	}
	ready := map[string]time.Duration{}
	for _, p := range procs {
		d, err := p.waitReady(ctx, 2*time.Minute)
		if err != nil {
			stopAll(procs)
			return nil, err
		}
		ready[p.name] = d
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
