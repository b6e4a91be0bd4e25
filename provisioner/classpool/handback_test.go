package classpool_test

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"github.com/reclaimable/reclaimable/internal/wellknown"
	"github.com/reclaimable/reclaimable/provisioner/provisionertest"
)

// A free member of a class pool is evicted by handing it back to its
// driver in one update: Released by a claimRef that names no claim,
// reclaim policy Delete, provisioned-by the driver again, which deletes
// it. A member that changed since the decision is left alone.
func TestEvictingAClassMemberHandsItBackToItsDriver(t *testing.T) {
	member := provisionertest.ClassMember(testProvisioner, testDriver, testBackingClass)
	f := newFixture(t, clock.RealClock{}, []*corev1.PersistentVolume{member})

	stale := member.DeepCopy()
	stale.ResourceVersion = "6"
	if evicted, err := f.pools.HandBack(context.Background(), stale, wellknown.EvictForClaim); err != nil || evicted {
		t.Fatalf("HandBack of a stale copy = %v, %v; want it left alone", evicted, err)
	}
	if evicted, err := f.pools.HandBack(context.Background(), member, wellknown.EvictForClaim); err != nil || !evicted {
		t.Fatalf("HandBack = %v, %v", evicted, err)
	}
	pv := f.Server(member.Name)
	if pv.Annotations[wellknown.ProvisionedBy] != testDriver || pv.Spec.StorageClassName != testBackingClass ||
		pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete || pv.Annotations[wellknown.Evicting] != wellknown.EvictForClaim {
		t.Errorf("evicted = provisioned-by %s, class %s, policy %s, annotations %v; want the driver's to delete",
			pv.Annotations[wellknown.ProvisionedBy], pv.Spec.StorageClassName, pv.Spec.PersistentVolumeReclaimPolicy, pv.Annotations)
	}
	if ref := pv.Spec.ClaimRef; ref == nil || ref.UID == "" || ref.Namespace != testBackingNS {
		t.Errorf("claimRef = %+v, want a claim of its own that no one has, so that it is Released", ref)
	}
	if pv.DeletionTimestamp != nil || slices.Contains(pv.Finalizers, wellknown.EvictFinalizer) {
		t.Errorf("evicted member fenced for deletion: %v %v; the driver deletes only what is not being deleted", pv.DeletionTimestamp, pv.Finalizers)
	}
}
