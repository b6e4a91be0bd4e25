package provisioner

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/reclaimable/reclaimable/internal/controllertest"
	"github.com/reclaimable/reclaimable/internal/wellknown"
	"github.com/reclaimable/reclaimable/provisioner/match"
)

// The gauge counts the pool's members by state from the cache, and an
// update that gives a member to a claim counts its kind, whoever wrote it.
func TestPoolMetrics(t *testing.T) {
	f := newFixture(t, []*corev1.PersistentVolume{
		volume("free", "1Gi"),
		volume("reserved", "1Gi", reservedFor("ns", "job", t0())),
		volume("bound", "1Gi", bound("ns", "x", "u1")),
		volume("released", "1Gi", released("ns", "y", "u3", t0())),
		volume("not-ours", "1Gi", func(pv *corev1.PersistentVolume) { pv.Annotations = map[string]string{} }),
		volume("held", "1Gi", func(pv *corev1.PersistentVolume) {
			pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "tenant-a", Name: "old"}
			pv.Annotations[wellknown.HeldForNamespace] = "tenant-a"
		}),
	})
	reg := f.reg
	for _, tt := range []struct {
		state, namespace string
		want             float64
	}{{"free", "", 1}, {"held", "tenant-a", 1}, {"reserved", "", 1}, {"bound", "", 1}, {"released", "", 1}} {
		if got := controllertest.Metric(t, reg, "reclaimable_provisioner_pool_members", "class", "pool", "state", tt.state, "namespace", tt.namespace); got != tt.want {
			t.Errorf("pool_members{state=%s,namespace=%q} = %v, want %v", tt.state, tt.namespace, got, tt.want)
		}
	}
	old := volume("reserved", "1Gi", reservedFor("ns", "job", t0()))
	cur := volume("reserved", "1Gi", bound("ns", "job", "u9"))
	f.p.onVolume(old, cur)
	if got := controllertest.Metric(t, reg, "reclaimable_provisioner_issues_total", "class", "pool", "kind", string(match.IssueSameClaim), "key", string(match.KeyNone)); got != 1 {
		t.Errorf("issues_total{kind=same-claim,key=none} = %v, want 1", got)
	}
}

// A claim that waited for its first consumer is counted by how it was
// served on its node; any other claim is not counted.
func TestCountFirstConsumer(t *testing.T) {
	f := newFixture(t, nil)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}
	outOfReach := match.State{Unfit: map[string]int{"node": 1}}
	otherwise := match.State{Unfit: map[string]int{"capacity": 1}}
	f.p.countFirstConsumer("pool", node, otherwise, true)
	f.p.countFirstConsumer("pool", node, outOfReach, true)
	f.p.countFirstConsumer("pool", node, otherwise, false)
	f.p.countFirstConsumer("pool", node, outOfReach, false)
	f.p.countFirstConsumer("pool", nil, outOfReach, false)
	for result, want := range map[string]float64{placedMember: 2, placedGrew: 1, placedGrewOutReach: 1} {
		if got := testutil.ToFloat64(f.p.metrics.firstConsumer.WithLabelValues("pool", result)); got != want {
			t.Errorf("first_consumer_claims_total{result=%q} = %v, want %v", result, got, want)
		}
	}
}
