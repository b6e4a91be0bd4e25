package provisioner

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/reclaimable/reclaimable/internal/controller"
	"github.com/reclaimable/reclaimable/internal/keys"
	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/provisioner/lifecycle"
	"github.com/reclaimable/reclaimable/provisioner/scrub"
)

func heldFor(ns string) func(*corev1.PersistentVolume) {
	return func(pv *corev1.PersistentVolume) {
		pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: ns, Name: "old"}
		pv.Annotations[keys.HeldForNamespace] = ns
		pv.Status.Phase = corev1.VolumeAvailable
	}
}

// A volume that cannot be handed to the scrub for a claim is not hidden
// behind "the pool is exhausted": a refusal of the API server is a Warning
// on the claim, and the claim is tried again with back-off; a volume that
// changed since the cache showed it is looked at again, without a Warning.
func TestExhaustedPoolSaysWhyItCannotScrubForTheClaim(t *testing.T) {
	for _, tt := range []struct {
		name    string
		err     error
		warning string
	}{
		{"refused", apierrors.NewForbidden(schema.GroupResource{Resource: "persistentvolumes"}, "a", errors.New("no")),
			`Warning ProvisioningFailed failed to provision volume with StorageClass "pool": handing volume a, held for another namespace, to the scrub for this claim (scrubAcrossNamespaces):`},
		{"changed meanwhile", apierrors.NewConflict(schema.GroupResource{Resource: "persistentvolumes"}, "a", errors.New("changed")), ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			claim := claimFor("tenant-b", "job", "1Gi")
			f := newFixture(t, []*corev1.PersistentVolume{volume("a", "1Gi", heldFor("tenant-a"))}, claim)
			f.client.PrependReactor("update", "persistentvolumes", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, tt.err
			})
			_, _, err := f.provision(f.directoryClass(map[string]string{"maxVolumes": "1", keys.ScrubAcrossNamespaces: "true"}), claim)
			if err == nil || errors.Is(err, errExhausted) {
				t.Fatalf("Provision: %v, want an error that the library retries, not a wait for a freed volume", err)
			}
			var warnings []string
			for _, e := range f.events() {
				if strings.HasPrefix(e, "Warning ") {
					warnings = append(warnings, e)
				}
			}
			switch {
			case tt.warning == "" && len(warnings) > 0:
				t.Errorf("warnings %q, want none", warnings)
			case tt.warning != "" && (len(warnings) != 1 || !strings.HasPrefix(warnings[0], tt.warning)):
				t.Errorf("warnings %q, want one starting %q", warnings, tt.warning)
			}
			if hasEvent(f.events(), "Normal ScrubbingToShare") {
				t.Error("ScrubbingToShare said, though nothing is being emptied")
			}
		})
	}
}

// At its maximum, a pool with scrubAcrossNamespaces hands the volume held
// for another namespace longest to the scrub for a claim that finds
// nothing, and the claim waits for it; without the setting it only waits.
// A volume being emptied already is waited for, not joined by another.
func TestExhaustedPoolScrubsAVolumeOfAnotherNamespaceForTheClaim(t *testing.T) {
	for _, tt := range []struct {
		name    string
		across  string
		members []*corev1.PersistentVolume
		marked  string
	}{
		{"scrubAcrossNamespaces", "true", []*corev1.PersistentVolume{volume("a", "1Gi", heldFor("tenant-a")), volume("c", "1Gi", heldFor("tenant-c"))}, "a"},
		{"without it", "false", []*corev1.PersistentVolume{volume("a", "1Gi", heldFor("tenant-a")), volume("c", "1Gi", heldFor("tenant-c"))}, ""},
		{"one being emptied already", "true", []*corev1.PersistentVolume{volume("a", "1Gi", heldFor("tenant-a"), func(pv *corev1.PersistentVolume) {
			pv.Annotations[keys.Scrub] = keys.ScrubRunning
		}), volume("c", "1Gi", heldFor("tenant-c"))}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			claim := claimFor("tenant-b", "job", "1Gi")
			f := newFixture(t, tt.members, claim)
			_, _, err := f.provision(f.directoryClass(map[string]string{"maxVolumes": "2", keys.ScrubAcrossNamespaces: tt.across}), claim)
			if !errors.Is(err, errExhausted) {
				t.Fatalf("Provision: %v, want the claim to wait", err)
			}
			for _, pv := range tt.members {
				want := pv.Annotations[keys.Scrub]
				if pv.Name == tt.marked {
					want = keys.ScrubRequested
				}
				if got := f.server(pv.Name).Annotations[keys.Scrub]; got != want {
					t.Errorf("volume %s: scrub %q, want %q", pv.Name, got, want)
				}
			}
			if got := hasEvent(f.events(), "Normal ScrubbingToShare"); got != (tt.marked != "") {
				t.Errorf("ScrubbingToShare event: %v, want %v", got, tt.marked != "")
			}
		})
	}
}

// scrubberFor returns the scrubber of f's provisioner for class, with a
// queue that nothing runs: a test calls Sync itself.
func scrubberFor(f *fixture, class *storagev1.StorageClass) *scrub.Scrubber {
	classes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := classes.Add(class); err != nil {
		f.t.Fatal(err)
	}
	return scrub.New(f.p, scrub.Config{
		Provisioner: testProvisioner, Client: f.client, Volumes: f.volumes, Classes: storagelisters.NewStorageClassLister(classes), Pools: f.p.pools,
		Pods: lifecycle.NewPods(f.client, "lifecycle", "reclaimable:test", 0, nil, nil), Recorder: f.recorder, Clock: f.p.clock,
		Failures: f.p.metrics.scrubFailures, Workers: 1,
	})
}

// A volume that changed between the cache's version and the write that
// hands it to its scrub claim is looked at again with the queue's back-off,
// not left until the next sweep: a change of an annotation that the scrub
// does not go by queues nothing.
func TestScrubTakeLooksAgainAfterAConflict(t *testing.T) {
	marked := volume("a", "1Gi", func(pv *corev1.PersistentVolume) {
		pv.Annotations[keys.Scrub] = keys.ScrubRequested
		pv.ResourceVersion = "1"
	})
	f := newFixture(t, []*corev1.PersistentVolume{marked})
	newer := marked.DeepCopy()
	newer.Annotations["example.com/note"] = "changed"
	newer.ResourceVersion = "2"
	if err := f.client.Tracker().Update(corev1.SchemeGroupVersion.WithResource("persistentvolumes"), newer, ""); err != nil {
		t.Fatal(err)
	}
	s := scrubberFor(f, f.directoryClass(nil))

	err := s.Sync(t.Context(), "a")
	if !controller.IsWait(err) {
		t.Fatalf("sync from a stale version returned %v, want a wait the queue retries with back-off", err)
	}
	if err := f.volumes.Update(f.server("a")); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(t.Context(), "a"); err != nil {
		t.Fatalf("sync from the newer version: %v", err)
	}
	if ref := f.server("a").Spec.ClaimRef; ref == nil || ref.Name != keys.ScrubClaim("a") {
		t.Errorf("claimRef %+v, want the scrub claim", ref)
	}
}

// A scrubbed volume whose scrub claim is still there (its protection
// finalizer waits for the scrub pod to go) is looked at again with the
// queue's back-off, and returned to the pool once the claim is gone.
func TestScrubFinishWaitsForTheScrubClaimWithBackOff(t *testing.T) {
	done := volume("a", "1Gi", func(pv *corev1.PersistentVolume) {
		pv.Annotations[keys.Scrub] = keys.ScrubDone
		pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "lifecycle", Name: keys.ScrubClaim("a")}
	})
	f := newFixture(t, []*corev1.PersistentVolume{done})
	scrubClaim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "lifecycle", Name: keys.ScrubClaim("a"), Finalizers: []string{"kubernetes.io/pvc-protection"}}}
	if err := f.client.Tracker().Add(scrubClaim); err != nil {
		t.Fatal(err)
	}
	protected := true
	f.client.PrependReactor("delete", "persistentvolumeclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
		return protected, nil, nil // deletion requested; the finalizer keeps the claim
	})
	s := scrubberFor(f, f.directoryClass(nil))

	if err := s.Sync(t.Context(), "a"); !controller.IsWait(err) {
		t.Fatalf("sync while the scrub claim is still there returned %v, want a wait the queue retries with back-off", err)
	}
	protected = false
	if err := s.Sync(t.Context(), "a"); err != nil {
		t.Fatalf("sync once the claim can go: %v", err)
	}
	if got := f.server("a"); !pools.Unissued(got) || pools.StateOf(got) != pools.StateFree || got.Annotations[keys.Scrub] != "" {
		t.Errorf("claimRef %+v, scrub %q: want the volume free, issued by the provisioner alone", got.Spec.ClaimRef, got.Annotations[keys.Scrub])
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
		{keys.ReuseScopeNamespace, true},
		{keys.ReuseScopeCluster, false},
	} {
		t.Run(tt.scope, func(t *testing.T) {
			done := volume("a", "1Gi", returned("ns/job", t0()), keyed("team=a"), func(pv *corev1.PersistentVolume) {
				pv.Annotations[keys.Scrub] = keys.ScrubDone
				pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "lifecycle", Name: keys.ScrubClaim("a")}
			})
			f := newFixture(t, []*corev1.PersistentVolume{done})
			s := scrubberFor(f, f.directoryClass(map[string]string{keys.ReuseScope: tt.scope}))
			if err := s.Sync(t.Context(), "a"); err != nil {
				t.Fatal(err)
			}
			got := f.server("a")
			if pools.Unissued(got) != tt.unissued || (!tt.unissued && got.Spec.ClaimRef != nil) {
				t.Errorf("claimRef %+v, want one naming a claim that never exists: %v", got.Spec.ClaimRef, tt.unissued)
			}
			if pools.StateOf(got) != pools.StateFree || lastClaim(got) != "" || got.Annotations[keys.LastKey] != "" {
				t.Errorf("state %s, last claim %q, last key %q: want a free member no claim has had", pools.StateOf(got), lastClaim(got), got.Annotations[keys.LastKey])
			}
		})
	}
}

// A claim waiting for a full pool is woken when a scrub returns a member:
// the member was Released, and so looked freed, all through its scrub, and
// its return (with a claimRef naming no claim, which the PV controller
// binds to nobody) is the change that frees it.
func TestScrubbedMemberWakesTheClaimsWaiting(t *testing.T) {
	claim := claimFor("ns", "c", "1Gi")
	scrubbing := volume("a", "1Gi", returned("ns/job", t0()), released("lifecycle", keys.ScrubClaim("a"), "scrub-uid", t0()), func(pv *corev1.PersistentVolume) {
		pv.Annotations[keys.Scrub] = keys.ScrubDone
	})
	f := newFixture(t, []*corev1.PersistentVolume{scrubbing}, claim)
	class := f.directoryClass(map[string]string{"maxVolumes": "1"})
	if _, _, err := f.provision(class, claim); err == nil || !strings.Contains(err.Error(), "pool exhausted") {
		t.Fatalf("Provision while the only member is scrubbed = %v, want the pool exhausted", err)
	}
	f.requeued = nil
	done := scrubbing.DeepCopy()
	delete(done.Annotations, keys.Scrub)
	delete(done.Annotations, keys.LastClaim)
	done.Spec.ClaimRef = pools.AheadClaimRef("a")
	f.p.onVolume(scrubbing, done)
	if len(f.requeued) != 1 || f.requeued[0] != "c" {
		t.Errorf("requeued = %v once the member was emptied, want [c]", f.requeued)
	}
}
