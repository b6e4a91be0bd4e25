package cluster

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ExternalProvisionerVersion is the CSI external-provisioner sidecar the
// tests run in front of their CSI driver, as clusters run it in front of
// theirs.
const ExternalProvisionerVersion = "v6.4.0"

// Binary names of the CSI parts.
const (
	ExternalProvisioner = "csi-provisioner"
	CSIDriver           = "csidriver"
)

const externalProvisionerModule = "github.com/kubernetes-csi/external-provisioner/v6"

// CSIDriverDir is the e2e/csidriver module: the tests' CSI driver.
func CSIDriverDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "csidriver")
}

// EnsureExternalProvisioner returns the path of the external-provisioner
// sidecar, built from the Go module proxy on first use and cached by
// version. It pins k8s.io/* versions of its own through replace
// directives, so it builds in its own module root, never in one of ours.
func EnsureExternalProvisioner(ctx context.Context, log io.Writer) (string, error) {
	dir, err := cacheDir("external-provisioner-" + ExternalProvisionerVersion)
	if err != nil {
		return "", err
	}
	what := "the CSI external-provisioner " + ExternalProvisionerVersion
	err = ensureCached(ctx, dir, []string{ExternalProvisioner}, what, log, buildExternalProvisioner)
	return filepath.Join(dir, ExternalProvisioner), err
}

func buildExternalProvisioner(ctx context.Context, out string, log io.Writer) error {
	neutral, err := os.MkdirTemp("", "csi-provisioner-download-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(neutral)
	dir, err := moduleDir(ctx, neutral, externalProvisionerModule+"@"+ExternalProvisionerVersion, log)
	if err != nil {
		return err
	}
	ldflags := "-s -w -X main.version=" + ExternalProvisionerVersion
	if err := goCommand(ctx, dir, log, []string{"CGO_ENABLED=0"}, "build", "-trimpath", "-ldflags", ldflags,
		"-o", filepath.Join(out, ExternalProvisioner), "./cmd/"+ExternalProvisioner); err != nil {
		return fmt.Errorf("building the external-provisioner: %w", err)
	}
	return nil
}

// BuildCSIDriver builds the tests' CSI driver into dir and returns its
// path. It is part of the tests, so it is built on every run, as the
// reclaimable binary is (Go's build cache makes that quick).
func BuildCSIDriver(ctx context.Context, dir string) (string, error) {
	out := filepath.Join(dir, CSIDriver)
	if err := GoBuild(ctx, CSIDriverDir(), ".", out, "CGO_ENABLED=0"); err != nil {
		return "", fmt.Errorf("building the CSI driver: %w", err)
	}
	return out, nil
}

// GoBuild builds the package pkg of the module in moduleDir into out, with
// env added to the environment; the error carries go build's output.
func GoBuild(ctx context.Context, moduleDir, pkg, out string, env ...string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = moduleDir
	cmd.Env = append(os.Environ(), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%w\n%s", err, b)
	}
	return nil
}

// CSI is a CSI driver with the real external-provisioner in front of it,
// run as processes beside the control plane, as a cluster runs a cloud disk
// driver's controller: the sidecar creates a volume of the driver for each
// claim of a class that names the driver as its provisioner, and deletes
// it when a Released volume of reclaim policy Delete names the driver.
// Without a node service (StartCSI without a node) its volumes hold no data
// a pod can reach.
type CSI struct {
	// Name is the driver's name: the provisioner of its StorageClasses, and
	// what pv.kubernetes.io/provisioned-by and spec.csi.driver of its
	// volumes say.
	Name string
	// Dir holds the driver's state, its calls file and both logs.
	Dir   string
	procs []*csiProcess
}

type csiProcess struct {
	what string
	cmd  *exec.Cmd
	done chan struct{}
}

// StartCSI starts the driver (driverBinary, see BuildCSIDriver) named name
// and the sidecar (sidecarBinary, see EnsureExternalProvisioner) in dir,
// which must be short: the driver's socket is in it, and a unix socket's
// path is at most 107 bytes. With node, the driver is also that node's
// CSI plugin: it registers with its kubelet and mounts its volumes there.
// Zonal, its volumes are reachable in the zone the external-provisioner
// asks for first, its node in RealNodeZone.
func StartCSI(driverBinary, sidecarBinary, kubeconfig, name, dir string, node *Node, zonal bool) (*CSI, error) {
	c := &CSI{Name: name, Dir: dir}
	socket := filepath.Join(dir, "csi.sock")
	driverArgs := []string{"--endpoint=" + socket, "--name=" + name, "--state=" + dir}
	if node != nil {
		driverArgs = append(driverArgs, "--node-id="+node.Name, "--registration-dir="+node.PluginRegistrationDir())
	}
	if zonal {
		driverArgs = append(driverArgs, "--zone="+RealNodeZone)
	}
	for _, p := range []struct {
		what, binary string
		args         []string
	}{
		{"driver", driverBinary, driverArgs},
		// Its client's defaults (5 QPS, burst 10) make claims wait in its queue.
		{"sidecar", sidecarBinary, []string{"--csi-address=" + socket, "--kubeconfig=" + kubeconfig, "--v=3", "--kube-api-qps=100", "--kube-api-burst=200"}},
	} {
		cmd, done, err := StartLogged(p.binary, p.args, nil, c.LogPath(p.what), &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL})
		if err != nil {
			c.Stop()
			return nil, fmt.Errorf("starting the CSI %s: %w", p.what, err)
		}
		c.procs = append(c.procs, &csiProcess{what: p.what, cmd: cmd, done: done})
	}
	return c, nil
}

// LogPath is the log of "driver" or "sidecar".
func (c *CSI) LogPath(what string) string { return filepath.Join(c.Dir, what+".log") }

// Stop stops the sidecar, then the driver, and waits for both.
func (c *CSI) Stop() {
	for i := len(c.procs) - 1; i >= 0; i-- {
		p := c.procs[i]
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	c.procs = nil
}

// CSICalls are the volumes the driver made (CreateVolume) and removed
// (DeleteVolume), in order; a call that found its work done is not in them.
type CSICalls struct{ Created, Deleted []string }

// Calls reads what the driver did so far.
func (c *CSI) Calls() (CSICalls, error) {
	b, err := os.ReadFile(filepath.Join(c.Dir, "calls"))
	if err != nil && !os.IsNotExist(err) {
		return CSICalls{}, err
	}
	var calls CSICalls
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		switch call, volume, _ := strings.Cut(line, " "); call {
		case "CreateVolume":
			calls.Created = append(calls.Created, volume)
		case "DeleteVolume":
			calls.Deleted = append(calls.Deleted, volume)
		}
	}
	return calls, nil
}

// CreateZoneNode adds a fake node in zone (label corev1.LabelTopologyZone)
// where the zonal volumes of driver in that zone are reachable: it has the
// CSINode naming driver with the zone as its topology key, which the
// kubelet writes for a registered driver.
func (c *Cluster) CreateZoneNode(ctx context.Context, name, zone, driver string, taints ...corev1.Taint) error {
	if err := c.CreateNode(ctx, name, map[string]string{corev1.LabelTopologyZone: zone}, taints...); err != nil {
		return err
	}
	n := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{
		Name: driver, NodeID: name, TopologyKeys: []string{corev1.LabelTopologyZone},
	}}}}
	if _, err := c.Client.StorageV1().CSINodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the CSINode of %s: %w", name, err)
	}
	return nil
}
