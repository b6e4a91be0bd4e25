package framework

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reclaimable/reclaimable/e2e/cluster"
)

// The CSI parts, built once per run (see run).
var csiDriverBinary, externalProvisionerBinary string

// CSIDriver is a CSI driver with the real external-provisioner in front of
// it, run for one test beside the control plane, as a cluster runs a cloud
// disk driver's controller: the sidecar creates a volume of the driver for
// each claim of a class that names the driver as its provisioner, and
// deletes it when a Released volume of reclaim policy Delete names the
// driver. Its volumes hold no data: it has no node service.
type CSIDriver struct {
	// Name is the driver's name: the provisioner of its StorageClasses, and
	// what pv.kubernetes.io/provisioned-by and spec.csi.driver of its
	// volumes say.
	Name  string
	state string
}

// StartCSIDriver starts a driver of a name of its own and its sidecar; both
// stop at cleanup, their logs printed if the test failed.
func StartCSIDriver(t testing.TB) *CSIDriver {
	t.Helper()
	// A unix socket's path is at most 107 bytes: not under t.TempDir.
	dir, err := os.MkdirTemp("", "csi-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	d := &CSIDriver{Name: fmt.Sprintf("e2e-%d.csi.reclaimable.io", counter.Add(1)), state: dir}
	socket := filepath.Join(dir, "csi.sock")
	d.start(t, "driver", csiDriverBinary, "--endpoint="+socket, "--name="+d.Name, "--state="+dir)
	d.start(t, "sidecar", externalProvisionerBinary, "--csi-address="+socket, "--kubeconfig="+Kubeconfig(), "--v=3",
		// Its defaults (5 and 10) make claims wait in its client's queue.
		"--kube-api-qps=100", "--kube-api-burst=200")
	return d
}

func (d *CSIDriver) start(t testing.TB, what, binary string, args ...string) {
	t.Helper()
	log := filepath.Join(d.state, what+".log")
	cmd, done, err := cluster.StartLogged(binary, args, nil, log, &syscall.SysProcAttr{Setpgid: true})
	if err != nil {
		t.Fatalf("starting the CSI %s: %v", what, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("log of the CSI %s %s:\n%s", what, d.Name, cluster.Tail(log, 100))
		}
	})
}

// Calls are the volumes the driver made (CreateVolume) and removed
// (DeleteVolume), in order; a call that found its work done is not in them.
type Calls struct{ Created, Deleted []string }

// Calls reads what the driver did so far.
func (d *CSIDriver) Calls(t testing.TB) Calls {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(d.state, "calls"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var c Calls
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		switch call, volume, _ := strings.Cut(line, " "); call {
		case "CreateVolume":
			c.Created = append(c.Created, volume)
		case "DeleteVolume":
			c.Deleted = append(c.Deleted, volume)
		}
	}
	return c
}

// buildCSI builds the driver into dir and the sidecar into the cache.
func buildCSI(ctx context.Context, dir string) error {
	var err error
	if csiDriverBinary, err = cluster.BuildCSIDriver(ctx, dir); err != nil {
		return err
	}
	externalProvisionerBinary, err = cluster.EnsureExternalProvisioner(ctx, os.Stderr)
	return err
}
