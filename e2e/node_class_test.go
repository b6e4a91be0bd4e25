//go:build e2e

package e2e

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/utils/ptr"

	"github.com/reclaimable/reclaimable/e2e/cluster"
	"github.com/reclaimable/reclaimable/e2e/framework"
	"github.com/reclaimable/reclaimable/e2e/objects"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// A class pool on the real node, in front of the tests' CSI driver as the
// node's own CSI plugin: the kubelet mounts each volume through the driver
// (NodePublishVolume), so the data a pod leaves is in the driver's volume.

type nodeClassCase struct {
	ns, pool    string
	driver      *framework.CSIDriver
	inv         *framework.Invariants
	controllers *framework.Process
}

// newNodeClassCase runs the controllers with a pool class of onRelease,
// binding mode and parameters in front of a class of a driver of the test's
// own on the real node.
func newNodeClassCase(t *testing.T, onRelease string, binding storagev1.VolumeBindingMode, parameters map[string]string) *nodeClassCase {
	t.Helper()
	framework.RealNode(t)
	t.Parallel()
	c := &nodeClassCase{ns: framework.Namespace(t), driver: framework.StartCSIDriverOnRealNode(t)}
	helpers := framework.Namespace(t)
	id := framework.Name("nodeclass")
	provisioner := "nodeclass.reclaimable/" + id
	backing := framework.CreateClass(t, objects.NewClass(framework.Name("csi"), c.driver.Name, func(sc *storagev1.StorageClass) {
		sc.ReclaimPolicy, sc.VolumeBindingMode = ptr.To(corev1.PersistentVolumeReclaimDelete), &binding
	}))
	params := map[string]string{"backend": "class", "backingClass": backing, wellknown.OnRelease: onRelease}
	maps.Copy(params, parameters)
	c.pool = createClass(t, "pool", id, provisioner, corev1.PersistentVolumeReclaimRetain, binding, params)
	c.inv = framework.WatchInvariants(t, framework.Scope{ControllerID: id, Classes: []string{c.pool}, Namespaces: []string{c.ns}, NamespaceScoped: []string{c.pool},
		Scrubbed: classIf(onRelease == wellknown.OnReleaseScrub, c.pool)})
	c.controllers = framework.StartController(t, "all", "--controller-id="+id, "--provisioner-name="+provisioner, "--namespace="+c.ns,
		"--backing-claim-namespace="+c.ns, "--lifecycle-namespace="+helpers, "--lifecycle-image="+cluster.ReclaimableImage,
		"--cleanup-interval=5s", "--release-interval=5s")
	c.controllers.WaitReady(t)
	return c
}

// dataDir is where the driver keeps the data of volume, on this machine.
func (c *nodeClassCase) dataDir(volume *corev1.PersistentVolume) string {
	return filepath.Join(c.driver.Dir, "data", volume.Spec.CSI.VolumeHandle)
}

// The next pod of the workload reads, through the driver's mount, what the
// first one wrote, and the driver made one volume for both.
func TestNodeClassPoolCarriesDataThroughTheDriversMount(t *testing.T) {
	c := newNodeClassCase(t, wellknown.OnReleaseKeep, storagev1.VolumeBindingImmediate, nil)
	const claim = "build-cache"
	first := "written by uid 1000\n"
	log := runToCompletion(t, c.ns, nodePod("writer", claim, c.pool, 1000, "write", "/cache/log", first))
	if want := fmt.Sprintf("uid=1000 wrote /cache/log: %q", first); !strings.Contains(log, want) {
		t.Fatalf("writer's log %q lacks %q", log, want)
	}
	volume := boundVolume(t, c.ns, claim)
	if volume.Spec.CSI == nil || volume.Spec.CSI.Driver != c.driver.Name {
		t.Fatalf("volume %s has source %+v, want one of driver %s", volume.Name, volume.Spec.PersistentVolumeSource, c.driver.Name)
	}
	deletePod(t, c.ns, "writer", claim)
	waitInPool(t, volume.Name)

	second := "appended by uid 2000\n"
	log = runToCompletion(t, c.ns, nodePod("reader", claim, c.pool, 2000, "append", "/cache/log", second))
	for _, want := range []string{fmt.Sprintf("uid=2000 read /cache/log: %q", first), fmt.Sprintf("uid=2000 appended /cache/log: %q", second)} {
		if !strings.Contains(log, want) {
			t.Errorf("reader's log %q lacks %q", log, want)
		}
	}
	if got := boundVolume(t, c.ns, claim); got.Name != volume.Name {
		t.Errorf("the second pod's claim got volume %s, want %s, the first pod's", got.Name, volume.Name)
	}
	b, err := os.ReadFile(filepath.Join(c.dataDir(volume), "log"))
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != first+second {
		t.Errorf("the driver's volume holds %q, want %q", b, first+second)
	}
	deletePod(t, c.ns, "reader", claim)
	if calls := c.driver.Calls(t); len(calls.Created) != 1 {
		t.Errorf("the driver made %v for the workload's two pods, want one volume", calls.Created)
	}
	c.inv.Check(t, 10*time.Second)
}

// Under onRelease Scrub, the scrub pod empties a class member through the
// driver's mount before the next claim has it.
func TestNodeClassPoolScrubsThroughTheDriversMount(t *testing.T) {
	c := newNodeClassCase(t, wellknown.OnReleaseScrub, storagev1.VolumeBindingImmediate, nil)
	const claim = "cache"
	runToCompletion(t, c.ns, nodePod("builder", claim, c.pool, 1000, "fill", "/cache"))
	volume := boundVolume(t, c.ns, claim)
	deletePod(t, c.ns, "builder", claim)
	waitEmptied(t, volume.Name, c.dataDir(volume))
	framework.WaitEvent(t, 30*time.Second, framework.EventQuery{Namespace: "default", Kind: "PersistentVolume", Name: volume.Name, Reason: "Scrubbed"})
	c.inv.Check(t, 10*time.Second)
}

// A pool class that waits for the first consumer, in front of a driver's
// class that does too: the backing claim carries the node the scheduler
// chose for the pod, the driver makes the volume there, and the pod runs
// on it.
func TestNodeClassPoolWaitsForTheFirstConsumer(t *testing.T) {
	c := newNodeClassCase(t, wellknown.OnReleaseKeep, storagev1.VolumeBindingWaitForFirstConsumer, nil)
	const claim = "cache"
	runToCompletion(t, c.ns, nodePod("first", claim, c.pool, 1000, "write", "/cache/log", "first\n"))
	volume := boundVolume(t, c.ns, claim)
	if volume.Spec.CSI == nil || volume.Spec.CSI.Driver != c.driver.Name {
		t.Fatalf("volume %s has source %+v, want one of driver %s", volume.Name, volume.Spec.PersistentVolumeSource, c.driver.Name)
	}
	inZone(t, volume, cluster.RealNodeZone)
	deletePod(t, c.ns, "first", claim)
	c.inv.Check(t, 10*time.Second)
}
