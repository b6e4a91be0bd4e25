// Package process runs and builds reclaimable for the end-to-end tests, the
// benchmark and the demo. It does not import testing, so that the
// benchmark and demo binaries do not link it.
package process

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/reclaimable/reclaimable/e2e/cluster"
)

// Controller is one reclaimable process started by the end-to-end tests,
// the benchmark or the demo. It serves health and metrics on free loopback
// ports, so that several can run side by side, and its output goes to a
// log file that outlives it, for failure messages.
type Controller struct {
	// Binary is the reclaimable binary; Args its subcommand and flags.
	Binary string
	Args   []string
	// HealthAddr serves /healthz and /readyz, MetricsAddr /metrics.
	HealthAddr, MetricsAddr string
	// LogPath is the file the output is appended to, across restarts.
	LogPath string
	// OwnProcessGroup starts the process in a process group of its own, so
	// that a Ctrl-C meant for the terminal's foreground group reaches only
	// the command that started it, which then stops it in order.
	OwnProcessGroup bool
	// OutliveParent lets the process keep running when the command that
	// started it exits, for a demo left running on purpose. Otherwise it
	// is killed with its parent: a crashed test or benchmark must not
	// leave controllers behind that act on the next run's cluster.
	OutliveParent bool
	// Credential, if not nil, is the user and groups the process runs as:
	// those of its Deployment, for a test of what it may do as deployed.
	Credential *syscall.Credential
	// Env is the environment of the next start besides the machine's
	// (cluster.Environ).
	Env []string
	// OwnEnv makes Env the process's whole environment, as a container's
	// is: not even the machine's.
	OwnEnv bool

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	started time.Time
}

// NewController prepares `binary args...` (args[0] is the subcommand:
// podwatcher, provisioner, releaser or all) with free loopback health and
// metrics ports. Their flags come right after the subcommand, so a later
// --health-addr or --metrics-addr in args overrides them. The process is
// not started.
func NewController(binary, logPath string, args ...string) (*Controller, error) {
	if len(args) == 0 {
		return nil, errors.New("reclaimable needs a subcommand")
	}
	health, err := cluster.FreeAddr()
	if err != nil {
		return nil, err
	}
	metrics, err := cluster.FreeAddr()
	if err != nil {
		return nil, err
	}
	full := append([]string{args[0], "--health-addr=" + health, "--metrics-addr=" + metrics}, args[1:]...)
	return &Controller{Binary: binary, Args: full, HealthAddr: health, MetricsAddr: metrics, LogPath: logPath}, nil
}

// Start starts the process, or starts it again after it exited, with the
// same flags and the same log.
func (c *Controller) Start() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.runningLocked() {
		return fmt.Errorf("reclaimable %s is already running", c.Args[0])
	}
	attr := &syscall.SysProcAttr{Setpgid: c.OwnProcessGroup, Credential: c.Credential}
	if !c.OutliveParent {
		attr.Pdeathsig = syscall.SIGKILL
	}
	started := time.Now()
	start := cluster.StartLogged
	if c.OwnEnv {
		start = cluster.StartLoggedIn
	}
	cmd, done, err := start(c.Binary, c.Args, c.Env, c.LogPath, attr)
	if err != nil {
		return fmt.Errorf("starting reclaimable %s: %w", c.Args[0], err)
	}
	c.cmd, c.done, c.started = cmd, done, started
	return nil
}

// Pid is the process's ID (0 before the first Start).
func (c *Controller) Pid() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd == nil {
		return 0
	}
	return c.cmd.Process.Pid
}

// Running reports whether the process has been started and has not exited.
func (c *Controller) Running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runningLocked()
}

func (c *Controller) runningLocked() bool { return c.cmd != nil && !closed(c.done) }

// Exited reports whether the process has exited, and its exit code.
func (c *Controller) Exited() (bool, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd == nil || !closed(c.done) {
		return false, 0
	}
	return true, c.cmd.ProcessState.ExitCode()
}

// Signal sends sig (SIGTERM for the clean shutdown a rollout does, SIGKILL
// for a crash or an OOM kill) and waits for the process to exit, killing it
// if it has not after grace.
func (c *Controller) Signal(sig syscall.Signal, grace time.Duration) {
	c.mu.Lock()
	cmd, done := c.cmd, c.done
	c.mu.Unlock()
	if cmd == nil || closed(done) {
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

// WaitReady polls /readyz (caches synced) and returns the time from the
// last Start until it first answered 200. Polling is fine: 20 ms resolution
// on a figure measured in seconds. The error, if the process exits or is
// not ready within timeout, holds the end of its log.
func (c *Controller) WaitReady(ctx context.Context, timeout time.Duration) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		if exited, code := c.Exited(); exited {
			return 0, fmt.Errorf("reclaimable %s exited with code %d; its log:\n%s", c.Args[0], code, cluster.Tail(c.LogPath, 30))
		}
		if c.ready(ctx) {
			c.mu.Lock()
			defer c.mu.Unlock()
			return time.Since(c.started), nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("reclaimable %s not ready after %s (%w); its log:\n%s", c.Args[0], timeout, context.Cause(ctx), cluster.Tail(c.LogPath, 30))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (c *Controller) ready(ctx context.Context) bool {
	// A server that accepts the connection but hangs must not use up the
	// whole timeout in one attempt.
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	code, _, err := Get(ctx, c.HealthAddr, "/readyz")
	return err == nil && code == http.StatusOK
}

// Get fetches http://addr/path and returns the status code and body.
func Get(ctx context.Context, addr, path string) (int, string, error) {
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

// closed reports whether done is closed: the process it stands for exited.
func closed(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}
