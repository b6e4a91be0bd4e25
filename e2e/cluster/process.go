package cluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// process is one component of the control plane, started with its own
// process group so that it can outlive the command that started it
// (cluster up) and be stopped by PID later (cluster down).
type process struct {
	name string
	path string
	args []string
	log  string
	env  []string // its environment besides the machine's (Environ)
	cmd  *exec.Cmd
	done chan struct{}
}

func (p *process) start(dieWithParent bool) error {
	attr := &syscall.SysProcAttr{Setpgid: true}
	if dieWithParent {
		// A test binary that crashes must not leave a control plane behind.
		attr.Pdeathsig = syscall.SIGKILL
	}
	cmd, done, err := StartLogged(p.path, p.args, p.env, p.log, attr)
	if err != nil {
		return fmt.Errorf("starting %s: %w", p.name, err)
	}
	p.cmd, p.done = cmd, done
	return nil
}

// StartLogged starts path with args, its output appended to the file at
// log, and returns a channel closed once the process has exited and been
// reaped, so that its exit is known without blocking on Wait.
// Its environment is Environ's: what a process needs of this machine's,
// and env.
func StartLogged(path string, args, env []string, log string, attr *syscall.SysProcAttr) (*exec.Cmd, chan struct{}, error) {
	return StartLoggedIn(path, args, Environ(env...), log, attr)
}

// machineEnv are the variables of the caller's environment that the
// processes the test bed starts get: where programs and temporary files
// are, and the home directory.
var machineEnv = []string{"PATH", "HOME", "TMPDIR"}

// Environ is the whole environment of a process the test bed starts: the
// machine's (machineEnv) and env, nothing else of the caller's. A
// developer's shell may say KUBECONFIG, which a component would follow to
// another cluster before its --kubeconfig flag.
func Environ(env ...string) []string {
	out := []string{}
	for _, k := range machineEnv {
		if v, ok := os.LookupEnv(k); ok {
			out = append(out, k+"="+v)
		}
	}
	return append(out, env...)
}

// StartLoggedIn is StartLogged with environ the process's whole
// environment, as a container's is its own.
func StartLoggedIn(path string, args, environ []string, log string, attr *syscall.SysProcAttr) (*exec.Cmd, chan struct{}, error) {
	logFile, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, err
	}
	defer logFile.Close()
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Never nil, which would be this process's environment.
	cmd.Env = append([]string{}, environ...)
	cmd.SysProcAttr = attr
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	return cmd, done, nil
}

func (p *process) exited() bool { return isClosed(p.done) }

// stop asks the process to terminate and kills it if it has not after grace.
func (p *process) stop(grace time.Duration) {
	if p.cmd == nil || p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// tail returns the end of the component's log, for error messages.
func (p *process) tail() string { return Tail(p.log, 20) }

// Tail returns the last n lines of the log file at path ("" if it cannot be
// read), for error messages and test failures.
func Tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

const pidFile = "pids"

// writePIDs records the components' PIDs so that another process can stop them.
func writePIDs(dir string, procs []*process) error {
	var b strings.Builder
	for _, p := range procs {
		if p.cmd != nil {
			fmt.Fprintf(&b, "%s %d\n", p.name, p.cmd.Process.Pid)
		}
	}
	return os.WriteFile(filepath.Join(dir, pidFile), []byte(b.String()), 0o644)
}

// recordedPID is a line of a pids file.
type recordedPID struct {
	name string
	pid  int
}

// readPIDs reads dir's pids file, in start order, leaving out lines that
// name no process other than init.
func readPIDs(dir string) ([]recordedPID, error) {
	b, err := os.ReadFile(filepath.Join(dir, pidFile))
	if err != nil {
		return nil, err
	}
	var out []recordedPID
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		name, pidText, ok := strings.Cut(line, " ")
		if pid, err := strconv.Atoi(pidText); ok && err == nil && pid > 1 {
			out = append(out, recordedPID{name: name, pid: pid})
		}
	}
	return out, nil
}

// Running reports whether a process recorded in dir's pids file (a
// control plane's or a node's) runs.
func Running(dir string) bool {
	recorded, _ := readPIDs(dir)
	for _, r := range recorded {
		if running(r.pid) {
			return true
		}
	}
	return false
}

// StopDir stops the components of a cluster started in dir by another
// process, in reverse start order, and waits until each has really exited:
// a killed process can linger as a zombie until its parent reaps it, so
// /proc/<pid> existing is not enough to say it still runs.
func StopDir(dir string, grace time.Duration) error {
	recorded, err := readPIDs(dir)
	if err != nil {
		return fmt.Errorf("no cluster recorded in %s: %w", dir, err)
	}
	var errs []error
	for i := len(recorded) - 1; i >= 0; i-- {
		name, pid := recorded[i].name, recorded[i].pid
		if !running(pid) {
			continue
		}
		_ = syscall.Kill(pid, syscall.SIGTERM)
		deadline := time.Now().Add(grace)
		for running(pid) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if running(pid) {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			_ = syscall.Kill(pid, syscall.SIGKILL)
			deadline = time.Now().Add(5 * time.Second)
			for running(pid) && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
		}
		if running(pid) {
			errs = append(errs, fmt.Errorf("%s (pid %d) did not stop", name, pid))
		}
	}
	if len(errs) == 0 {
		_ = os.Remove(filepath.Join(dir, pidFile))
	}
	return errors.Join(errs...)
}

// running reports whether pid is alive and not a zombie.
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses and may hold spaces.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return false
	}
	state := s[i+2]
	return state != 'Z' && state != 'X'
}

func isClosed(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}
