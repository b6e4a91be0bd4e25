//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/reclaimable/reclaimable/apis/reclaimable/v1alpha1"
	"github.com/reclaimable/reclaimable/e2e/cluster"
	"github.com/reclaimable/reclaimable/e2e/framework"
	"github.com/reclaimable/reclaimable/internal/wellknown"
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
	c := newNodeClassCase(t, wellknown.OnReleaseKeep, storagev1.VolumeBindingWaitForFirstConsumer, nil)
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
	// a1 grew an empty pool, b1 grew beside the zone-A member it could not
	// reach, a2 and b2 were served in their zones.
	for result, want := range map[string]float64{"grew": 1, "grew-out-of-reach": 1, "member": 2} {
		if got := c.controllers.Metric("reclaimable_provisioner_first_consumer_claims_total", map[string]string{"class": c.pool, "result": result}); got != want {
			t.Errorf("first_consumer_claims_total{result=%q} = %v, want %v", result, got, want)
		}
	}
	c.inv.Check(t, 10*time.Second)
}

// TestNodeClassPoolFreeMemberDrawsAPodToItsZone: a free member kept for no
// claim (reuseScope cluster, no reservation) in zone A draws a pod that may
// run in zone A or B to zone A, although the empty zone-B node has more
// room: the test bed's scheduler scores a node where a free volume fits
// the claim, configured as docs/pools.md says.
func TestNodeClassPoolFreeMemberDrawsAPodToItsZone(t *testing.T) {
	c := newNodeClassCase(t, wellknown.OnReleaseKeep, storagev1.VolumeBindingWaitForFirstConsumer,
		map[string]string{wellknown.ReuseScope: wellknown.ReuseScopeCluster, wellknown.ReserveFor: "0"})
	nodeB := c.driver.CreateZoneNode(t, zoneB)
	drawnToTheVolume(t, c.ns, c.pool, "first-workload", "second-workload", nodeB)
	if calls := c.driver.Calls(t); len(calls.Created) != 1 {
		t.Errorf("the driver made %v for two claims, want one volume", calls.Created)
	}
	c.inv.Check(t, 10*time.Second)
}

// TestNodeClassPoolMakesMembersAheadInEachZone: a pool of a class that
// binds on first consumer, with minAvailable and two zones, makes a member
// ahead in each (each goes to the zone with the fewest free), and a claim
// in either zone gets its zone's member made ahead.
func TestNodeClassPoolMakesMembersAheadInEachZone(t *testing.T) {
	c := newNodeClassCase(t, wellknown.OnReleaseKeep, storagev1.VolumeBindingWaitForFirstConsumer, nil)
	// A zone of the test's own: the pool makes members for a node of each
	// zone it names, and other tests' zone nodes lack this driver.
	zone := framework.Name(zoneB)
	nodeB := c.driver.CreateZoneNode(t, zone)
	pools := volumePools(t)
	ctx := context.Background()
	pool, err := pools.Create(ctx, &v1alpha1.VolumePool{ObjectMeta: metav1.ObjectMeta{Name: framework.Name("zoned")},
		Spec: v1alpha1.VolumePoolSpec{StorageClassName: c.pool, MinAvailable: ptr.To[int32](2), MaxVolumes: ptr.To[int32](4),
			Template: &v1alpha1.VolumePoolTemplate{Zones: []string{cluster.RealNodeZone, zone}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pools.Delete(context.Background(), pool.Name, metav1.DeleteOptions{}) })

	ahead := map[string]*corev1.PersistentVolume{}
	for _, pv := range waitMadeAhead(t, c.pool, 2) {
		ahead[zoneOf(t, pv)] = pv
	}
	if ahead[cluster.RealNodeZone] == nil || ahead[zone] == nil {
		t.Fatalf("members made ahead by zone: %v, want one in %s and one in %s", ahead, cluster.RealNodeZone, zone)
	}
	if got := c.onZoneNode(t, "b1", nodeB); got.Name != ahead[zone].Name {
		t.Errorf("claim b1 in %s got volume %s, want %s, made ahead in its zone", zone, got.Name, ahead[zone].Name)
	}
	runToCompletion(t, c.ns, nodePod("a1", "a1", c.pool, 1000, "write", "/cache/log", "into a member made ahead\n"))
	if got := boundVolume(t, c.ns, "a1"); got.Name != ahead[cluster.RealNodeZone].Name {
		t.Errorf("claim a1 in %s got volume %s, want %s, made ahead in its zone", cluster.RealNodeZone, got.Name, ahead[cluster.RealNodeZone].Name)
	}
	deletePod(t, c.ns, "a1", "a1")
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
	if got := zoneOf(t, volume); got != zone {
		t.Fatalf("volume %s is in zone %s, want %s", volume.Name, got, zone)
	}
}

// zoneOf is the one zone the volume is reachable in, as its node affinity
// says; a volume reachable elsewhere than in one zone fails the test.
func zoneOf(t *testing.T, volume *corev1.PersistentVolume) string {
	t.Helper()
	a := volume.Spec.NodeAffinity
	if a == nil || a.Required == nil || len(a.Required.NodeSelectorTerms) != 1 || len(a.Required.NodeSelectorTerms[0].MatchExpressions) != 1 {
		t.Fatalf("volume %s has node affinity %+v, want one zone", volume.Name, a)
	}
	e := a.Required.NodeSelectorTerms[0].MatchExpressions[0]
	if e.Key != corev1.LabelTopologyZone || e.Operator != corev1.NodeSelectorOpIn || len(e.Values) != 1 {
		t.Fatalf("volume %s has node affinity %+v, want one zone", volume.Name, e)
	}
	return e.Values[0]
}
