package framework

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/reclaimable/reclaimable/e2e/cluster"
)

// The CSI parts, built once per run (see run).
var csiDriverBinary, externalProvisionerBinary string

// StartCSIDriver starts a CSI driver of a name of its own with the real
// external-provisioner in front of it (cluster.CSI); both stop at cleanup,
// their logs printed if the test failed.
func StartCSIDriver(t testing.TB) *CSIDriver {
	t.Helper()
	// A unix socket's path is at most 107 bytes: not under t.TempDir.
	dir, err := os.MkdirTemp("", "csi-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	c, err := cluster.StartCSI(csiDriverBinary, externalProvisionerBinary, Kubeconfig(), fmt.Sprintf("e2e-%d.csi.reclaimable.io", counter.Add(1)), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Stop()
		if t.Failed() {
			for _, what := range []string{"driver", "sidecar"} {
				t.Logf("log of the CSI %s %s:\n%s", what, c.Name, cluster.Tail(c.LogPath(what), 100))
			}
		}
	})
	return &CSIDriver{CSI: c}
}

// CSIDriver is a CSI driver and its sidecar run for one test.
type CSIDriver struct{ *cluster.CSI }

// Calls reads what the driver did so far.
func (d *CSIDriver) Calls(t testing.TB) cluster.CSICalls {
	t.Helper()
	c, err := d.CSI.Calls()
	if err != nil {
		t.Fatal(err)
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
