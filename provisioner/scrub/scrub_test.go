package scrub_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/reclaimable/reclaimable/internal/controller"
	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/internal/wellknown"
	"github.com/reclaimable/reclaimable/provisioner/lifecycle"
	"github.com/reclaimable/reclaimable/provisioner/provisionertest"
	"github.com/reclaimable/reclaimable/provisioner/scrub"
)

var (
	volume = provisionertest.Volume
	t0     = provisionertest.T0
)

// scrubberOn returns the scrubber of the provisioner a
// provisionertest.Flow plays on c, for class, with a queue that nothing
// runs: a test calls Sync itself. Its scrub claims and pods are in
// namespace "lifecycle".
func scrubberOn(t *testing.T, c *provisionertest.Cluster, class *storagev1.StorageClass) *scrub.Scrubber {
	t.Helper()
	classes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := classes.Add(class); err != nil {
		t.Fatal(err)
	}
	return scrub.New(&provisionertest.Flow{Client: c.Client}, scrub.Config{
		Provisioner: provisionertest.Provisioner, Client: c.Client, Volumes: c.Volumes, Classes: storagelisters.NewStorageClassLister(classes), Pools: c.Pools,
		Pods: lifecycle.NewPods(c.Client, "lifecycle", "reclaimable:test", 0, nil, nil), Recorder: c.Recorder, Clock: clock.RealClock{},
		Failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "scrub_failures"}, []string{"class"}), Workers: 1,
	})
}

// A volume that changed between the cache's version and the write that
// hands it to its scrub claim is looked at again with the queue's back-off,
// not left until the next sweep: a change of an annotation that the scrub
// does not go by queues nothing.
func TestScrubTakeLooksAgainAfterAConflict(t *testing.T) {
	marked := volume("a", "1Gi", func(pv *corev1.PersistentVolume) {
		pv.Annotations[wellknown.Scrub] = wellknown.ScrubRequested
		pv.ResourceVersion = "1"
	})
	c := provisionertest.NewCluster(t, []*corev1.PersistentVolume{marked})
	newer := marked.DeepCopy()
	newer.Annotations["example.com/note"] = "changed"
	newer.ResourceVersion = "2"
	if err := c.Client.Tracker().Update(corev1.SchemeGroupVersion.WithResource("persistentvolumes"), newer, ""); err != nil {
		t.Fatal(err)
	}
	s := scrubberOn(t, c, provisionertest.DirectoryClass(t.TempDir(), nil))

	err := s.Sync(t.Context(), "a")
	if !controller.IsWait(err) {
		t.Fatalf("sync from a stale version returned %v, want a wait the queue retries with back-off", err)
	}
	if err := c.Volumes.Update(c.Server("a")); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(t.Context(), "a"); err != nil {
		t.Fatalf("sync from the newer version: %v", err)
	}
	if ref := c.Server("a").Spec.ClaimRef; ref == nil || ref.Name != wellknown.ScrubClaim("a") {
		t.Errorf("claimRef %+v, want the scrub claim", ref)
	}
}

// A scrubbed volume whose scrub claim is still there (its protection
// finalizer waits for the scrub pod to go) is looked at again with the
// queue's back-off, and returned to the pool once the claim is gone.
func TestScrubFinishWaitsForTheScrubClaimWithBackOff(t *testing.T) {
	done := volume("a", "1Gi", func(pv *corev1.PersistentVolume) {
		pv.Annotations[wellknown.Scrub] = wellknown.ScrubDone
		pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "lifecycle", Name: wellknown.ScrubClaim("a")}
	})
	c := provisionertest.NewCluster(t, []*corev1.PersistentVolume{done})
	scrubClaim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "lifecycle", Name: wellknown.ScrubClaim("a"), Finalizers: []string{"kubernetes.io/pvc-protection"}}}
	if err := c.Client.Tracker().Add(scrubClaim); err != nil {
		t.Fatal(err)
	}
	protected := true
	c.Client.PrependReactor("delete", "persistentvolumeclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
		return protected, nil, nil // deletion requested; the finalizer keeps the claim
	})
	s := scrubberOn(t, c, provisionertest.DirectoryClass(t.TempDir(), nil))

	if err := s.Sync(t.Context(), "a"); !controller.IsWait(err) {
		t.Fatalf("sync while the scrub claim is still there returned %v, want a wait the queue retries with back-off", err)
	}
	protected = false
	if err := s.Sync(t.Context(), "a"); err != nil {
		t.Fatalf("sync once the claim can go: %v", err)
	}
	if got := c.Server("a"); !pools.Unissued(got) || pools.StateOf(got) != pools.StateFree || got.Annotations[wellknown.Scrub] != "" {
		t.Errorf("claimRef %+v, scrub %q: want the volume free, issued by the provisioner alone", got.Spec.ClaimRef, got.Annotations[wellknown.Scrub])
	}
}

// A scrubbed member of a pool that keeps members to namespaces names a
// claim that never exists, as a member made ahead does: without a claimRef
// the PV controller would bind it to any claim that fits, past keys and
// shares. Under reuseScope cluster, where the PV controller binds free
// members to any claim anyway, it has none.
func TestScrubbedMemberIsIssuedByTheProvisionerAlone(t *testing.T) {
	for _, tt := range []struct {
		scope    string
		unissued bool
	}{
		{wellknown.ReuseScopeNamespace, true},
		{wellknown.ReuseScopeCluster, false},
	} {
		t.Run(tt.scope, func(t *testing.T) {
			done := volume("a", "1Gi", provisionertest.Returned("ns/job", t0()), provisionertest.Keyed("team=a"), func(pv *corev1.PersistentVolume) {
				pv.Annotations[wellknown.Scrub] = wellknown.ScrubDone
				pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "lifecycle", Name: wellknown.ScrubClaim("a")}
			})
			c := provisionertest.NewCluster(t, []*corev1.PersistentVolume{done})
			s := scrubberOn(t, c, provisionertest.DirectoryClass(t.TempDir(), map[string]string{wellknown.ReuseScope: tt.scope}))
			if err := s.Sync(t.Context(), "a"); err != nil {
				t.Fatal(err)
			}
			got := c.Server("a")
			if pools.Unissued(got) != tt.unissued || (!tt.unissued && got.Spec.ClaimRef != nil) {
				t.Errorf("claimRef %+v, want one naming a claim that never exists: %v", got.Spec.ClaimRef, tt.unissued)
			}
			if pools.StateOf(got) != pools.StateFree || got.Annotations[wellknown.LastClaim] != "" || got.Annotations[wellknown.LastKey] != "" {
				t.Errorf("state %s, last claim %q, last key %q: want a free member no claim has had", pools.StateOf(got), got.Annotations[wellknown.LastClaim], got.Annotations[wellknown.LastKey])
			}
		})
	}
}
