package provisioner

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/reclaimable/reclaimable/apis/reclaimable/v1alpha1"
	"github.com/reclaimable/reclaimable/internal/keys"
)

// The measurer measures a member back in the pool once per return, and
// takes a measure of the same return from the pool's status instead.
func TestMeasurerMeasuresEachReturnOnce(t *testing.T) {
	f := newFixture(t, nil)
	pv := f.add(directoryMember(t, f.root, "pv-1", returned("ns/old", t0())))
	at := pv.Annotations[keys.ReleasedAt]
	walks := 0
	m := measurerFor(f, func(*corev1.PersistentVolume, time.Time) (int64, bool, error) { walks++; return 42, false, nil })
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
	pool := aheadPool()
	pool.Spec.MinAvailable = nil
	pool.Status.Usage = []v1alpha1.MemberUsage{{Volume: "pv-1", Bytes: 7, Returned: at}}
	if err := f.p.pools.Add(pool); err != nil {
		t.Fatal(err)
	}
	m2 := measurerFor(f, func(*corev1.PersistentVolume, time.Time) (int64, bool, error) {
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
	f := newFixture(t, nil)
	pv := f.add(directoryMember(t, f.root, "pv-1", returned("ns/old", t0()), func(pv *corev1.PersistentVolume) {
		pv.Annotations[keys.ProvisionedBy] = "other/provisioner"
	}))
	m := measurerFor(f, func(*corev1.PersistentVolume, time.Time) (int64, bool, error) {
		t.Error("measured")
		return 0, false, nil
	})
	if err := m.Sync(context.Background(), pv.Name); err != nil {
		t.Fatal(err)
	}
}
