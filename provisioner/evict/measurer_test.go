package evict_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/reclaimable/reclaimable/apis/reclaimable/v1alpha1"
	"github.com/reclaimable/reclaimable/internal/wellknown"
	"github.com/reclaimable/reclaimable/provisioner/evict"
	"github.com/reclaimable/reclaimable/provisioner/provisionertest"
)

// measurerOn is the measurer of the provisioner a provisionertest.Flow
// plays on c, walking members with walk, with a queue that nothing runs.
func measurerOn(c *provisionertest.Cluster, walk func(*corev1.PersistentVolume, time.Time) (int64, bool, error)) *evict.Measurer {
	return evict.NewMeasurer(&provisionertest.Flow{Client: c.Client, Walk: walk},
		evict.MeasurerConfig{Provisioner: provisionertest.Provisioner, Volumes: c.Volumes, Pools: c.Pools, Timeout: time.Minute})
}

// The measurer measures a member back in the pool once per return, and
// takes a measure of the same return from the pool's status instead.
func TestMeasurerMeasuresEachReturnOnce(t *testing.T) {
	c := provisionertest.NewCluster(t, nil)
	pv := c.Add(member("pv-1", returned("ns/old", t0())))
	at := pv.Annotations[wellknown.ReleasedAt]
	walks := 0
	m := measurerOn(c, func(*corev1.PersistentVolume, time.Time) (int64, bool, error) { walks++; return 42, false, nil })
	for range 2 {
		if err := m.Sync(context.Background(), "pv-1"); err != nil {
			t.Fatal(err)
		}
	}
	if u, ok := m.Usage(pv); !ok || u.Bytes != 42 || u.Returned != at || walks != 1 {
		t.Errorf("Usage = %+v, %v after %d walks; want 42 bytes of the return at %s, one walk", u, ok, walks, at)
	}
	issued := pv.DeepCopy()
	issued.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "ns", Name: "new", UID: "u2"}
	issued.Status.Phase = corev1.VolumeBound
	if _, ok := m.Usage(issued); ok {
		t.Error("a member issued again still has its measure")
	}

	// After a restart: the pool's status has the measure.
	pool := &v1alpha1.VolumePool{ObjectMeta: metav1.ObjectMeta{Name: "warm"}, Spec: v1alpha1.VolumePoolSpec{StorageClassName: "pool", MaxVolumes: ptr.To[int32](3)},
		Status: v1alpha1.VolumePoolStatus{Usage: []v1alpha1.MemberUsage{{Volume: "pv-1", Bytes: 7, Returned: at}}}}
	if err := c.Pools.Add(pool); err != nil {
		t.Fatal(err)
	}
	m2 := measurerOn(c, func(*corev1.PersistentVolume, time.Time) (int64, bool, error) {
		t.Error("measured again")
		return 0, false, nil
	})
	if err := m2.Sync(context.Background(), "pv-1"); err != nil {
		t.Fatal(err)
	}
	if u, ok := m2.Usage(pv); !ok || u.Bytes != 7 {
		t.Errorf("Usage after a restart = %+v, %v; want the status's 7 bytes", u, ok)
	}
}

// Another installation's volumes are not measured: their share may not be
// mounted here.
func TestMeasurerLeavesOtherInstallationsVolumes(t *testing.T) {
	c := provisionertest.NewCluster(t, nil)
	pv := c.Add(member("pv-1", returned("ns/old", t0()), func(pv *corev1.PersistentVolume) {
		pv.Annotations[wellknown.ProvisionedBy] = "other/provisioner"
	}))
	m := measurerOn(c, func(*corev1.PersistentVolume, time.Time) (int64, bool, error) {
		t.Error("measured")
		return 0, false, nil
	})
	if err := m.Sync(context.Background(), pv.Name); err != nil {
		t.Fatal(err)
	}
}
