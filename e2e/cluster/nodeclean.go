package cluster

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The kernel settings the node changes: the kubelet at start (it sets them
// unless protectKernelDefaults, which would refuse to start instead), and
// the CNI bridge plugin for the pods' gateway (forwarding). The node
// records them before its kubelet starts and puts them back when it is
// cleaned.
var kubeletSysctls = []string{"vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops", "net/ipv4/ip_forward"}

// nodeRecords holds a record per node started on this machine, removed
// when the node is cleaned: a node whose test run was killed is found and
// cleaned by the next start, even if its directory is gone. It is on
// tmpfs, as what it records (processes, mounts, cgroups, kernel settings)
// does not survive a reboot either.
const nodeRecords = "/run/reclaimable-e2e/nodes"

// nodeRecord is the record of the node in dir: the directory's path in
// file "dir", and the kernel settings from before its kubelet started.
func nodeRecord(dir string) string {
	sum := sha256.Sum256([]byte(dir))
	return filepath.Join(nodeRecords, hex.EncodeToString(sum[:])[:16])
}

const (
	recordDir   = "dir"
	sysctlsFile = "sysctls-before"
)

const cgroupMount = "/sys/fs/cgroup"

// record writes the node's machine-wide record with the kernel settings as
// they are before the kubelet runs. cleanNode removed any earlier record,
// putting back the settings it held.
func (n *Node) record() error {
	rec := nodeRecord(n.Dir)
	if err := os.MkdirAll(rec, 0o755); err != nil {
		return err
	}
	var b strings.Builder
	for _, key := range kubeletSysctls {
		v, err := os.ReadFile(filepath.Join("/proc/sys", key))
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %s\n", key, strings.TrimSpace(string(v)))
	}
	if err := os.WriteFile(filepath.Join(rec, sysctlsFile), []byte(b.String()), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(rec, recordDir), []byte(n.Dir), 0o644)
}

// cleanAbandonedNodes cleans every node recorded on this machine whose
// kubelet and containerd are no longer running: what a killed run left.
// Nodes of runs still going are left alone.
func cleanAbandonedNodes() error {
	records, _ := filepath.Glob(filepath.Join(nodeRecords, "*"))
	var errs []error
	for _, rec := range records {
		b, err := os.ReadFile(filepath.Join(rec, recordDir))
		if err != nil {
			// Written before its directory's name: a start killed at once.
			b = nil
		}
		dir := string(b)
		if dir != "" && Running(dir) {
			continue
		}
		if dir == "" {
			errs = append(errs, restoreSysctls(rec))
			continue
		}
		if err := cleanNode(dir); err != nil {
			errs = append(errs, fmt.Errorf("cleaning the abandoned node in %s: %w", dir, err))
		}
	}
	return errors.Join(errs...)
}

// makeCgroupRoot creates the node's cgroup in every cgroup v1 hierarchy
// (the kubelet requires its cgroup root to exist), with the cpus and
// memory nodes of its parent so that tasks may join it.
func makeCgroupRoot(root string) error {
	hierarchies, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	for _, h := range hierarchies {
		dir := filepath.Join(h, root)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if filepath.Base(h) != "cpuset" {
			continue
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			v, err := os.ReadFile(filepath.Join(h, f))
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
				return fmt.Errorf("setting %s of the node's cgroup: %w", f, err)
			}
		}
	}
	return nil
}

// cgroupHierarchies are the mounted cgroup v1 hierarchies, or the unified
// hierarchy alone on cgroup v2.
func cgroupHierarchies() ([]string, error) {
	if _, err := os.Stat(filepath.Join(cgroupMount, "cgroup.controllers")); err == nil {
		return []string{cgroupMount}, nil
	}
	entries, err := os.ReadDir(cgroupMount)
	if err != nil {
		return nil, err
	}
	var hs []string
	for _, e := range entries {
		if e.IsDir() {
			hs = append(hs, filepath.Join(cgroupMount, e.Name()))
		}
	}
	return hs, nil
}

// Down stops a cluster started in dir by another process (cluster up): its
// real nodes first, cleaned of all they left on the machine, then the
// control plane.
func Down(dir string, grace time.Duration) error {
	var errs []error
	nodes, _ := filepath.Glob(filepath.Join(dir, "nodes", "*"))
	for _, n := range nodes {
		if err := cleanNode(n); err != nil {
			errs = append(errs, fmt.Errorf("node %s: %w", filepath.Base(n), err))
		}
	}
	if err := StopDir(dir, grace); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// cleanNode removes what a node in dir left on the machine, whether it was
// stopped or killed, from what is on disk and in the kernel alone: the
// kubelet and containerd recorded in its pids file, every process in its
// cgroup (pod containers), the containerd shims serving its socket, their
// sockets, the mounts under dir, its cgroups and the kernel settings the
// kubelet changed. Safe to repeat; a directory without a node is left as
// it is.
func cleanNode(dir string) error {
	var errs []error
	if _, err := os.Stat(filepath.Join(dir, pidFile)); err == nil {
		if err := StopDir(dir, 10*time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	root := nodeCgroupRoot(dir)
	if err := killCgroup(root); err != nil {
		errs = append(errs, err)
	}
	socket := filepath.Join(dir, "containerd", "containerd.sock")
	if err := killShims(socket); err != nil {
		errs = append(errs, err)
	}
	if err := removeShimSockets(filepath.Join(dir, "containerd", "state")); err != nil {
		errs = append(errs, err)
	}
	if err := unmountUnder(dir); err != nil {
		errs = append(errs, err)
	}
	if err := removeCgroup(root); err != nil {
		errs = append(errs, err)
	}
	if err := removeLink(nodeBridge(dir)); err != nil {
		errs = append(errs, err)
	}
	if err := removeServiceAddress(); err != nil {
		errs = append(errs, err)
	}
	if err := removeMachineEntries(dir); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		// The record goes last: until everything else is clean, the next
		// start must still find this node.
		if err := restoreSysctls(nodeRecord(dir)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// killCgroup kills every process in the cgroup root and below, until none
// is left.
func killCgroup(root string) error {
	hierarchies, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	return killUntilGone("processes of cgroup "+root, func() ([]int, error) {
		var pids []int
		for _, h := range hierarchies {
			_ = filepath.WalkDir(filepath.Join(h, root), func(path string, d os.DirEntry, err error) error {
				if err != nil || !d.IsDir() {
					return nil
				}
				b, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
				if err != nil {
					return nil
				}
				for _, f := range strings.Fields(string(b)) {
					if pid, err := strconv.Atoi(f); err == nil && running(pid) {
						pids = append(pids, pid)
					}
				}
				return nil
			})
		}
		return pids, nil
	})
}

// killShims kills the containerd shims started for the containerd that
// listens on socket: they outlive containerd on purpose.
func killShims(socket string) error {
	return killUntilGone("containerd shims", func() ([]int, error) { return processesWithArgs(shim, socket) })
}

// killUntilGone sends SIGKILL to the processes list finds until it finds
// none, for up to ten seconds; what names them in the error.
func killUntilGone(what string, list func() ([]int, error)) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids, err := list()
		if err != nil || len(pids) == 0 {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s %v did not die", what, pids)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// processesWithArgs lists the running processes whose executable is named
// name and whose arguments include arg.
func processesWithArgs(name, arg string) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) == 0 || filepath.Base(args[0]) != name {
			continue
		}
		for _, a := range args[1:] {
			if a == arg && running(pid) {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids, nil
}

// removeShimSockets removes the sockets that shims killed without a
// chance to clean up left in the machine-wide socket directory; each
// task's bootstrap.json in containerd's state says where its shim's is.
func removeShimSockets(state string) error {
	matches, _ := filepath.Glob(filepath.Join(state, "io.containerd.runtime.v2.task", "*", "*", "bootstrap.json"))
	var errs []error
	for _, m := range matches {
		b, err := os.ReadFile(m)
		if err != nil {
			continue
		}
		var boot struct{ Address string }
		if json.Unmarshal(b, &boot) != nil {
			continue
		}
		path, ok := strings.CutPrefix(boot.Address, "unix://")
		if !ok || !strings.HasPrefix(path, "/run/containerd/s/") {
			continue
		}
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// unmountUnder unmounts every mount point under dir, deepest first.
func unmountUnder(dir string) error {
	for range 10 {
		points, err := mountPointsUnder(dir)
		if err != nil || len(points) == 0 {
			return err
		}
		sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
		for _, p := range points {
			_ = syscall.Unmount(p, syscall.MNT_DETACH)
		}
	}
	points, err := mountPointsUnder(dir)
	if err == nil && len(points) > 0 {
		err = fmt.Errorf("still mounted: %s", strings.Join(points, ", "))
	}
	return err
}

func mountPointsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var points []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 5 {
			continue
		}
		// Mount points escape spaces and other bytes as octal.
		p := unescapeMountPoint(fields[4])
		if p == dir || strings.HasPrefix(p, dir+"/") {
			points = append(points, p)
		}
	}
	return points, s.Err()
}

func unescapeMountPoint(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Machine-wide directories where the kubelet, containerd and the CNI
// plugins leave an entry per container whatever they are configured with.
const (
	containerLogLinks = "/var/log/containers"
	cniResults        = "/var/lib/cni/results"
)

// removeMachineEntries removes the entries the node in dir left in the
// machine-wide directories: the kubelet's links to its container logs and
// the CNI plugins' cached results of its sandboxes. The directories stay:
// other nodes and runtimes may use them.
func removeMachineEntries(dir string) error {
	var errs []error
	links, _ := filepath.Glob(filepath.Join(containerLogLinks, "*.log"))
	for _, l := range links {
		if target, err := os.Readlink(l); err == nil && strings.HasPrefix(target, dir+"/") {
			errs = append(errs, removeIfThere(l))
		}
	}
	sandboxes, _ := os.ReadDir(filepath.Join(dir, "containerd", "root", "io.containerd.grpc.v1.cri", "sandboxes"))
	for _, sb := range sandboxes {
		results, _ := filepath.Glob(filepath.Join(cniResults, "*-"+sb.Name()+"-*"))
		for _, r := range results {
			errs = append(errs, removeIfThere(r))
		}
	}
	return errors.Join(errs...)
}

func removeIfThere(path string) error {
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

// removeLink deletes the network link name if there is one.
func removeLink(name string) error {
	if _, err := net.InterfaceByName(name); err != nil {
		return nil
	}
	if out, err := exec.Command("ip", "link", "delete", name).CombinedOutput(); err != nil {
		return fmt.Errorf("deleting link %s: %w: %s", name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// removeCgroup removes the cgroup root and everything below it, deepest
// first, in every hierarchy.
func removeCgroup(root string) error {
	hierarchies, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	var errs []error
	for _, h := range hierarchies {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(h, root), func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("removing cgroup %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// restoreSysctls puts back the kernel settings of the node record rec,
// then removes the record.
func restoreSysctls(rec string) error {
	b, err := os.ReadFile(filepath.Join(rec, sysctlsFile))
	if os.IsNotExist(err) {
		return os.RemoveAll(rec)
	} else if err != nil {
		return err
	}
	var errs []error
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		key, value, ok := strings.Cut(line, " ")
		if !ok || !slices.Contains(kubeletSysctls, key) {
			continue
		}
		if err := os.WriteFile(filepath.Join("/proc/sys", key), []byte(value), 0o644); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		return os.RemoveAll(rec)
	}
	return errors.Join(errs...)
}
