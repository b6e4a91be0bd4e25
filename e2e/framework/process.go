package framework

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/reclaimable/reclaimable/e2e/cluster"
)

// Process is a reclaimable controller process under test.
type Process struct {
	t       testing.TB
	args    []string
	logPath string
	// HealthAddr and MetricsAddr are where it serves /healthz, /readyz and /metrics.
	HealthAddr, MetricsAddr string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// StartController runs the reclaimable binary: args[0] is the subcommand
// (podwatcher, provisioner, releaser, all), the rest its flags. The process
// talks to the cluster as an administrator unless args name another
// --kubeconfig, serves health and metrics on free loopback ports, and uses
// short leader-election timings (a later flag in args overrides any of
// these). It is stopped at cleanup; its log is printed if the test failed.
func StartController(t testing.TB, args ...string) *Process {
	t.Helper()
	if len(args) == 0 {
		t.Fatal("StartController needs a subcommand")
	}
	p := &Process{t: t, HealthAddr: freeAddr(t), MetricsAddr: freeAddr(t)}
	p.args = append([]string{args[0],
		"--kubeconfig=" + Kubeconfig(),
		"--health-addr=" + p.HealthAddr,
		"--metrics-addr=" + p.MetricsAddr,
		"--leader-elect-namespace=default",
		"--leader-elect-lease-duration=4s",
		"--leader-elect-renew-deadline=3s",
		"--leader-elect-retry-period=500ms",
		"-v=2",
	}, args[1:]...)
	f, err := os.CreateTemp("", "reclaimable-"+args[0]+"-*.log")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	p.logPath = f.Name()
	p.Start()
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("log of reclaimable %s (%s):\n%s", args[0], p.logPath, p.tail(200))
		} else {
			_ = os.Remove(p.logPath)
		}
	})
	return p
}

// Start starts the process again after Stop or Kill, with the same flags.
func (p *Process) Start() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !p.exitedLocked() {
		p.t.Fatal("process is already running")
	}
	logFile, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		p.t.Fatal(err)
	}
	defer logFile.Close()
	fmt.Fprintf(logFile, "=== start: %s %s\n", filepath.Base(Binary()), strings.Join(p.args, " "))
	cmd := exec.Command(Binary(), p.args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		p.t.Fatalf("starting reclaimable: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	p.cmd, p.done = cmd, done
}

// Stop sends SIGTERM and waits for the process to exit (killing it after
// 30 s): the clean shutdown a Deployment's rollout does.
func (p *Process) Stop() { p.signal(syscall.SIGTERM, 30*time.Second) }

// Kill sends SIGKILL, as a crash or an OOM kill would, and waits for the exit.
func (p *Process) Kill() { p.signal(syscall.SIGKILL, 30*time.Second) }

func (p *Process) signal(sig syscall.Signal, grace time.Duration) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-done
	}
}

// Exited reports whether the process has exited, and its exit code.
func (p *Process) Exited() (bool, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.exitedLocked() {
		return false, 0
	}
	return true, p.cmd.ProcessState.ExitCode()
}

func (p *Process) exitedLocked() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Log returns everything the process has logged so far.
func (p *Process) Log() string {
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}

func (p *Process) tail(n int) string { return cluster.Tail(p.logPath, n) }

// Get fetches a path (/healthz, /readyz on HealthAddr; /metrics on
// MetricsAddr) and returns the status code and body.
func (p *Process) Get(ctx context.Context, addr, path string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// WaitReady waits until the process reports ready (its caches synced).
func (p *Process) WaitReady(t testing.TB) {
	t.Helper()
	Eventually(t, 30*time.Second, func(ctx context.Context) (bool, error) {
		if exited, code := p.Exited(); exited {
			return false, fmt.Errorf("reclaimable exited with code %d:\n%s", code, p.tail(30))
		}
		code, _, err := p.Get(ctx, p.HealthAddr, "/readyz")
		return err == nil && code == http.StatusOK, nil
	}, "the controller to report ready")
}

func freeAddr(t testing.TB) string {
	t.Helper()
	addr, err := cluster.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}
