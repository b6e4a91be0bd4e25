package framework

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reclaimable/reclaimable/e2e/cluster"
	"github.com/reclaimable/reclaimable/e2e/process"
)

// Process is a reclaimable controller process under test.
type Process struct {
	t testing.TB
	c *process.Controller
	// HealthAddr and MetricsAddr are where it serves /healthz, /readyz and /metrics.
	HealthAddr, MetricsAddr string
}

// StartController runs the reclaimable binary: args[0] is the subcommand
// (podwatcher, provisioner, releaser, all), the rest its flags. The process
// runs as the manifests run it (user 65532, no capabilities; see
// deployed.go), talks to the cluster as an administrator unless args name
// another --kubeconfig, serves health and metrics on free loopback ports,
// and uses short leader-election timings (a later flag in args overrides
// any of these). It is stopped at cleanup; its log is printed if the test
// failed.
func StartController(t testing.TB, args ...string) *Process {
	t.Helper()
	return StartControllerWithEnv(t, nil, args...)
}

// StartControllerWithEnv is StartController with env added to the
// process's environment, until SetEnv changes it.
func StartControllerWithEnv(t testing.TB, env []string, args ...string) *Process {
	t.Helper()
	if len(args) == 0 {
		t.Fatal("StartController needs a subcommand")
	}
	return start(t, Binary(), append([]string{args[0],
		"--kubeconfig=" + controllerKubeconfig,
		"--leader-elect-resource-namespace=default",
		"--leader-elect-lease-duration=4s",
		"--leader-elect-renew-deadline=3s",
		"--leader-elect-retry-period=500ms",
		"-v=2",
	}, args[1:]...), env, deployedCredential(), false)
}

// Container is a controller as a rendered Deployment's container runs it:
// its arguments and environment as the kubelet resolves them, and the user
// and groups of its pod's security context.
type Container struct {
	// Binary is the reclaimable binary to run; "" for the work tree's
	// (Binary), another for an earlier release's.
	Binary string
	Args   []string
	Env    []string
	// UID, GID and Groups are the process's user, group and supplementary
	// groups (the pod's fsGroup among them).
	UID, GID uint32
	Groups   []uint32
}

// StartDeployed runs the reclaimable binary exactly as c says, its
// environment c's alone, with nothing added but what a test bed must:
// kubeconfig (the pod's service account) and free loopback listen
// addresses, so that several run side by side. Where the tests do not run
// as root the process keeps their user. It is stopped at cleanup; its log
// is printed if the test failed.
func StartDeployed(t testing.TB, c Container, kubeconfig string) *Process {
	t.Helper()
	if len(c.Args) == 0 {
		t.Fatal("StartDeployed needs a subcommand")
	}
	var cred *syscall.Credential
	if deployedCredential() != nil {
		cred = &syscall.Credential{Uid: c.UID, Gid: c.GID, Groups: c.Groups}
	}
	binary := c.Binary
	if binary == "" {
		binary = Binary()
	}
	return start(t, binary, slices.Concat([]string{c.Args[0], "--kubeconfig=" + kubeconfig}, c.Args[1:]), c.Env, cred, true)
}

// start starts binary with args as user cred with env added to the
// environment, or with ownEnv as its whole environment.
func start(t testing.TB, binary string, args, env []string, cred *syscall.Credential, ownEnv bool) *Process {
	t.Helper()
	f, err := os.CreateTemp("", "reclaimable-"+args[0]+"-*.log")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	c, err := process.NewController(binary, f.Name(), args...)
	if err != nil {
		t.Fatal(err)
	}
	c.Credential = cred
	c.Env, c.OwnEnv = env, ownEnv
	p := &Process{t: t, c: c, HealthAddr: c.HealthAddr, MetricsAddr: c.MetricsAddr}
	p.Start()
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("log of reclaimable %s (%s):\n%s", args[0], c.LogPath, cluster.Tail(c.LogPath, 200))
		} else {
			_ = os.Remove(c.LogPath)
		}
	})
	return p
}

// Start starts the process again after Stop or Kill, with the same flags.
// Each start is marked in the log, which holds every run of the process.
func (p *Process) Start() {
	p.t.Helper()
	if p.c.Running() {
		p.t.Fatal("process is already running")
	}
	logFile, err := os.OpenFile(p.c.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		p.t.Fatal(err)
	}
	fmt.Fprintf(logFile, "=== start: %s %s\n", filepath.Base(p.c.Binary), strings.Join(p.c.Args, " "))
	logFile.Close()
	if err := p.c.Start(); err != nil {
		p.t.Fatal(err)
	}
}

// SetEnv replaces what is added to the environment of the next Start.
func (p *Process) SetEnv(env ...string) { p.c.Env = env }

// Stop sends SIGTERM and waits for the process to exit (killing it after
// 30 s): the clean shutdown a Deployment's rollout does.
func (p *Process) Stop() { p.c.Signal(syscall.SIGTERM, 30*time.Second) }

// Kill sends SIGKILL, as a crash or an OOM kill would, and waits for the exit.
func (p *Process) Kill() { p.c.Signal(syscall.SIGKILL, 30*time.Second) }

// Exited reports whether the process has exited, and its exit code.
func (p *Process) Exited() (bool, int) { return p.c.Exited() }

// Log returns everything the process has logged so far.
func (p *Process) Log() string {
	b, _ := os.ReadFile(p.c.LogPath)
	return string(b)
}

// Get fetches a path (/healthz, /readyz on HealthAddr; /metrics on
// MetricsAddr) and returns the status code and body.
func (p *Process) Get(ctx context.Context, addr, path string) (int, string, error) {
	return process.Get(ctx, addr, path)
}

// WaitReady waits until the process reports ready (its caches synced).
func (p *Process) WaitReady(t testing.TB) {
	t.Helper()
	if _, err := p.c.WaitReady(context.Background(), 30*time.Second); err != nil {
		t.Fatalf("waiting for the controller to report ready: %v", err)
	}
}

// Metric is the value of the process's sample name with exactly labels
// (none for nil), from its /metrics; the test fails if there is none.
func (p *Process) Metric(name string, labels map[string]string) float64 {
	p.t.Helper()
	m, err := process.ScrapeMetrics(context.Background(), p.MetricsAddr)
	if err != nil {
		p.t.Fatal(err)
	}
	v, ok := m.Value(name, labels)
	if !ok {
		p.t.Fatalf("/metrics has no sample %s %v", name, labels)
	}
	return v
}
