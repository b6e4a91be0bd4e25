package framework

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/reclaimable/reclaimable/e2e/cluster"
)

// The CSI parts, built once per run (see run).
var csiDriverBinary, externalProvisionerBinary string

// StartCSIDriver starts a CSI driver of a name of its own with the real
// external-provisioner in front of it (cluster.CSI); both stop at cleanup,
// their logs printed if the test failed.
func StartCSIDriver(t testing.TB) *CSIDriver {
	t.Helper()
	return startCSIDriver(t, nil)
}

// StartCSIDriverOnRealNode starts a driver as StartCSIDriver does, that is
// also the real node's CSI plugin: registered with its kubelet, it mounts
// a volume's directory (of this machine) into the pods that use it. Its
// volumes are zonal, the real node in cluster.RealNodeZone (see
// CreateZoneNode for a second zone). Its CSIDriver object says it needs no
// attach; it goes at cleanup.
func StartCSIDriverOnRealNode(t testing.TB) *CSIDriver {
	t.Helper()
	node := RealNode(t)
	d := startCSIDriver(t, node)
	ctx := context.Background()
	obj := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: d.Name}, Spec: storagev1.CSIDriverSpec{
		AttachRequired: ptr.To(false), PodInfoOnMount: ptr.To(false),
		VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent},
	}}
	if _, err := Client().StorageV1().CSIDrivers().Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = Client().StorageV1().CSIDrivers().Delete(context.Background(), d.Name, metav1.DeleteOptions{})
	})
	// The kubelet has registered the driver once the node's CSINode
	// names it.
	Eventually(t, time.Minute, func(ctx context.Context) (bool, error) {
		n, err := Client().StorageV1().CSINodes().Get(ctx, node.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, dr := range n.Spec.Drivers {
			if dr.Name == d.Name {
				return true, nil
			}
		}
		return false, nil
	}, "the real node's kubelet to register CSI driver "+d.Name)
	return d
}

func startCSIDriver(t testing.TB, node *cluster.Node) *CSIDriver {
	t.Helper()
	// A unix socket's path is at most 107 bytes: not under t.TempDir.
	dir, err := os.MkdirTemp("", "csi-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	c, err := cluster.StartCSI(csiDriverBinary, externalProvisionerBinary, Kubeconfig(), fmt.Sprintf("e2e-%d.csi.reclaimable.io", counter.Add(1)), dir, node, node != nil)
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

// ZoneNodeTaint is on the fake nodes of CreateZoneNode: only the pods of
// the test that made one tolerate it (with the node's name as value).
const ZoneNodeTaint = "e2e.reclaimable/zone-node"

// CreateZoneNode adds a fake node in zone where the volumes that the
// driver (of StartCSIDriverOnRealNode, whose volumes are zonal) makes in
// that zone are reachable: the node has the zone label, and a CSINode
// naming the driver with the zone as its topology key, as the kubelet
// writes for a registered driver. The node carries ZoneNodeTaint, so that
// no other test's pod lands there; it stays for the rest of the run, its
// CSINode goes at cleanup. It returns the node's name.
func (d *CSIDriver) CreateZoneNode(t testing.TB, zone string) string {
	t.Helper()
	name := Name(zone)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	taint := corev1.Taint{Key: ZoneNodeTaint, Value: name, Effect: corev1.TaintEffectNoSchedule}
	if err := current.CreateZoneNode(ctx, name, zone, d.Name, taint); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = Client().StorageV1().CSINodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	return name
}

// ZoneNodeToleration lets a pod onto the zone node named node.
func ZoneNodeToleration(node string) corev1.Toleration {
	return corev1.Toleration{Key: ZoneNodeTaint, Operator: corev1.TolerationOpEqual, Value: node, Effect: corev1.TaintEffectNoSchedule}
}

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
