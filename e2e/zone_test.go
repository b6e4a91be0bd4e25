//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/reclaimable/reclaimable/e2e/cluster"
	"github.com/reclaimable/reclaimable/e2e/framework"
	"github.com/reclaimable/reclaimable/internal/keys"
)

// Zones: the tests' driver on the real node makes zonal volumes, reachable
// in the zone the external-provisioner asks for first; the real node is in
// cluster.RealNodeZone, and a test adds a fake node in a second zone with
// the CSINode the kubelet would write there. A pod on the fake node never
// runs; what the test checks there is which volume its claim gets.

const zoneB = "zone-b"

// TestNodeClassPoolKeepsMembersInTheirZone: a claim whose pod runs in zone
// B never gets the free member of zone A (the pool grows there instead),
// and a claim in zone A gets the free zone-A member, data included, rather
// than a new volume; each zone's member goes to its zone's next claim.
func TestNodeClassPoolKeepsMembersInTheirZone(t *testing.T) {
	c := newNodeClassCase(t, keys.OnReleaseKeep, storagev1.VolumeBindingWaitForFirstConsumer, nil)
	nodeB := c.driver.CreateZoneNode(t, zoneB)

	runToCompletion(t, c.ns, nodePod("a1", "a1", c.pool, 1000, "write", "/cache/log", "zone a\n"))
	memberA := boundVolume(t, c.ns, "a1")
	inZone(t, memberA, cluster.RealNodeZone)
	deletePod(t, c.ns, "a1", "a1")
	waitInPool(t, memberA.Name)

	memberB := c.onZoneNode(t, "b1", nodeB)
	if memberB.Name == memberA.Name {
		t.Fatalf("claim b1, whose pod runs in %s, got the %s member %s", zoneB, cluster.RealNodeZone, memberA.Name)
	}
	inZone(t, memberB, zoneB)

	runToCompletion(t, c.ns, nodePod("a2", "a2", c.pool, 2000, "expect", "/cache/log", "zone a\n"))
	if got := boundVolume(t, c.ns, "a2"); got.Name != memberA.Name {
		t.Fatalf("claim a2 in %s got volume %s, want the free member %s of its zone", cluster.RealNodeZone, got.Name, memberA.Name)
	}
	deletePod(t, c.ns, "a2", "a2")
	if got := c.onZoneNode(t, "b2", nodeB); got.Name != memberB.Name {
		t.Fatalf("claim b2 in %s got volume %s, want the free member %s of its zone", zoneB, got.Name, memberB.Name)
	}
	if calls := c.driver.Calls(t); len(calls.Created) != 2 {
		t.Errorf("the driver made %v for four claims in two zones, want one volume per zone", calls.Created)
	}
	c.inv.Check(t, 10*time.Second)
}

// TestNodeClassPoolFreeMemberDrawsAPodToItsZone: a free member kept for no
// claim (reuseScope cluster, no reservation) in zone A draws a pod that may
// run in zone A or B to zone A, although the empty zone-B node has more
// room: the test bed's scheduler scores a node where a free volume fits
// the claim, configured as docs/pools.md says.
func TestNodeClassPoolFreeMemberDrawsAPodToItsZone(t *testing.T) {
	c := newNodeClassCase(t, keys.OnReleaseKeep, storagev1.VolumeBindingWaitForFirstConsumer,
		map[string]string{keys.ReuseScope: keys.ReuseScopeCluster, keys.ReserveFor: "0"})
	nodeB := c.driver.CreateZoneNode(t, zoneB)
	drawnToTheVolume(t, c.ns, c.pool, "first-workload", "second-workload", nodeB)
	if calls := c.driver.Calls(t); len(calls.Created) != 1 {
		t.Errorf("the driver made %v for two claims, want one volume", calls.Created)
	}
	c.inv.Check(t, 10*time.Second)
}

// onZoneNode runs a pod of claim on the fake zone node (kwok has it
// running) and returns the volume its claim got, once the pod and its
// claim are gone again and the volume is back in the pool.
func (c *nodeClassCase) onZoneNode(t *testing.T, claim, node string) *corev1.PersistentVolume {
	t.Helper()
	pod := nodePod(claim, claim, c.pool, 1000, "write", "/cache/log", "zone b\n")
	pod.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
	pod.Spec.Tolerations = []corev1.Toleration{framework.ZoneNodeToleration(node)}
	if _, err := framework.Client().CoreV1().Pods(c.ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	volume := boundVolume(t, c.ns, claim)
	if p := waitPod(t, c.ns, claim, corev1.PodRunning); p.Spec.NodeName != node {
		t.Fatalf("pod %s runs on %s, want %s", claim, p.Spec.NodeName, node)
	}
	deletePod(t, c.ns, claim, claim)
	waitInPool(t, volume.Name)
	return volume
}

// inZone checks that volume is reachable in zone, and only there.
func inZone(t *testing.T, volume *corev1.PersistentVolume, zone string) {
	t.Helper()
	want := corev1.NodeSelectorRequirement{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{zone}}
	a := volume.Spec.NodeAffinity
	if a == nil || a.Required == nil || len(a.Required.NodeSelectorTerms) != 1 || len(a.Required.NodeSelectorTerms[0].MatchExpressions) != 1 ||
		!equality.Semantic.DeepEqual(a.Required.NodeSelectorTerms[0].MatchExpressions[0], want) {
		t.Fatalf("volume %s has node affinity %+v, want %v alone", volume.Name, a, want)
	}
}
