package evict_test

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/reclaimable/reclaimable/internal/wellknown"
	"github.com/reclaimable/reclaimable/provisioner/evict"
	"github.com/reclaimable/reclaimable/provisioner/provisionertest"
)

// The fence is one write guarded by the version the decision was made on:
// a member that changed since is left alone. The delete is guarded by the
// fence's version and UID, so that a bind that came between the two makes
// it fail; a member already gone needs no delete.
func TestFenceThenDeleteFenced(t *testing.T) {
	pv := member("pv-1", returned("ns/old", t0()))
	c := provisionertest.NewCluster(t, []*corev1.PersistentVolume{pv})
	var guard *metav1.Preconditions
	c.Client.PrependReactor("delete", "persistentvolumes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		guard = a.(k8stesting.DeleteAction).GetDeleteOptions().Preconditions
		return false, nil, nil
	})

	stale := pv.DeepCopy()
	stale.ResourceVersion = "0"
	if res, err := evict.Fence(context.Background(), c.Client, stale, wellknown.EvictIdle); res != nil || err != nil {
		t.Fatalf("Fence of a stale copy = %v, %v; want nil, nil", res, err)
	}
	if got := c.Server("pv-1"); got.ResourceVersion != pv.ResourceVersion || len(got.Finalizers) > 0 {
		t.Fatalf("a stale copy was fenced: %+v", got.ObjectMeta)
	}

	fenced, err := evict.Fence(context.Background(), c.Client, pv, wellknown.EvictIdle)
	if err != nil || fenced == nil || fenced.Annotations[wellknown.Evicting] != wellknown.EvictIdle || !slices.Contains(fenced.Finalizers, wellknown.EvictFinalizer) {
		t.Fatalf("Fence = %+v, %v; want the cause and the finalizer", fenced, err)
	}
	if err := evict.DeleteFenced(context.Background(), c.Client, fenced); err != nil {
		t.Fatalf("DeleteFenced = %v", err)
	}
	if guard == nil || guard.ResourceVersion == nil || *guard.ResourceVersion != fenced.ResourceVersion || *guard.ResourceVersion == pv.ResourceVersion ||
		guard.UID == nil || *guard.UID != pv.UID {
		t.Errorf("the delete was guarded by %+v, want the fence's version %q and the UID %q", guard, fenced.ResourceVersion, pv.UID)
	}
	if _, err := c.Client.CoreV1().PersistentVolumes().Get(context.Background(), "pv-1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("volume after DeleteFenced: %v, want it deleted", err)
	}
	if err := evict.DeleteFenced(context.Background(), c.Client, fenced); err != nil {
		t.Errorf("DeleteFenced of a volume gone = %v, want nil", err)
	}
}
