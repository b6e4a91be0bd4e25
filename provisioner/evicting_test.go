package provisioner

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/reclaimable/reclaimable/apis/reclaimable/v1alpha1"
	"github.com/reclaimable/reclaimable/internal/wellknown"
	"github.com/reclaimable/reclaimable/provisioner/backend"
	"github.com/reclaimable/reclaimable/provisioner/lifecycle"
	"github.com/reclaimable/reclaimable/provisioner/provisionertest"
)

// directoryMember is a free member of the directory backend whose
// directory, under root, holds a file.
func directoryMember(t *testing.T, root, name string, mods ...func(*corev1.PersistentVolume)) *corev1.PersistentVolume {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(root, name, "objects"), 0o755); err != nil {
		t.Fatal(err)
	}
	return volume(name, "1Gi", append([]func(*corev1.PersistentVolume){func(pv *corev1.PersistentVolume) {
		pv.UID = "uid-" + types.UID(name)
		pv.Annotations[wellknown.Backend] = "directory"
		pv.Annotations[wellknown.Directory] = name
		pv.Annotations[wellknown.BaseDir] = root
		pv.Spec.HostPath = &corev1.HostPathVolumeSource{Path: "/mnt/pool/" + name}
	}}, mods...)...)
}

// Evict fences a free member (cause and finalizer in one write guarded by
// the version decided on), then deletes it guarded by the fence's version.
func TestEvictFencesThenDeletes(t *testing.T) {
	f := newFixture(t, nil)
	pv := f.add(directoryMember(t, f.root, "pv-1", returned("ns/old", t0())))
	var deleteRV string
	f.client.PrependReactor("delete", "persistentvolumes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if p := a.(k8stesting.DeleteAction).GetDeleteOptions().Preconditions; p != nil && p.ResourceVersion != nil {
			deleteRV = *p.ResourceVersion
		}
		return false, nil, nil
	})
	var fenced *corev1.PersistentVolume
	f.client.PrependReactor("update", "persistentvolumes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		fenced = a.(k8stesting.UpdateAction).GetObject().(*corev1.PersistentVolume).DeepCopy()
		return false, nil, nil
	})
	evicted, err := f.p.Evict(context.Background(), pv, wellknown.EvictIdle)
	if err != nil || !evicted {
		t.Fatalf("Evict = %v, %v; want true", evicted, err)
	}
	if fenced == nil || fenced.Annotations[wellknown.Evicting] != wellknown.EvictIdle || !slices.Contains(fenced.Finalizers, wellknown.EvictFinalizer) {
		t.Fatalf("the fence = %+v, want the cause and the finalizer", fenced)
	}
	if deleteRV == "" || deleteRV == pv.ResourceVersion {
		t.Errorf("the delete was guarded by version %q, want the fence's, not the decision's %q", deleteRV, pv.ResourceVersion)
	}
	if _, err := f.client.CoreV1().PersistentVolumes().Get(context.Background(), pv.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("volume after Evict: %v, want it deleted", err)
	}
	if _, err := os.Stat(filepath.Join(f.root, pv.Name)); err != nil {
		t.Errorf("the directory went before its volume object was gone: %v", err)
	}
}

// A member that changed since the decision (a claim had it) is left alone;
// members no claim may lose are never fenced.
func TestEvictLeavesWhatItMayNotTake(t *testing.T) {
	f := newFixture(t, nil)
	free := directoryMember(t, f.root, "pv-1")
	for _, tt := range []struct {
		name string
		pv   *corev1.PersistentVolume
		// server is the member as the API server has it, if not pv.
		server *corev1.PersistentVolume
	}{
		{"issued since the decision", free, directoryMember(t, f.root, "pv-1", bound("ns", "job", "u1"), func(pv *corev1.PersistentVolume) { pv.ResourceVersion = "2" })},
		{"bound", directoryMember(t, f.root, "pv-1", bound("ns", "job", "u1")), nil},
		{"released", directoryMember(t, f.root, "pv-1", released("ns", "job", "u1", t0())), nil},
		{"scrubbing", directoryMember(t, f.root, "pv-1", func(pv *corev1.PersistentVolume) { pv.Annotations[wellknown.Scrub] = wellknown.ScrubRequested }), nil},
		{"being evicted", directoryMember(t, f.root, "pv-1", func(pv *corev1.PersistentVolume) { pv.Annotations[wellknown.Evicting] = wellknown.EvictIdle }), nil},
		{"static", volume("pv-1", "1Gi", func(pv *corev1.PersistentVolume) { pv.Annotations[wellknown.Backend] = "static" }), nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			server := tt.pv
			if tt.server != nil {
				server = tt.server
			}
			f := newFixture(t, []*corev1.PersistentVolume{server})
			evicted, err := f.p.Evict(context.Background(), tt.pv, wellknown.EvictIdle)
			if err != nil || evicted {
				t.Errorf("Evict = %v, %v; want false", evicted, err)
			}
			if got := f.server("pv-1"); got.ResourceVersion != server.ResourceVersion || len(got.Finalizers) > 0 {
				t.Errorf("the member was written: %+v", got.ObjectMeta)
			}
		})
	}
}

func TestCheckEvict(t *testing.T) {
	f := newFixture(t, nil)
	if err := f.p.CheckEvict(f.directoryClass(nil)); err != nil {
		t.Errorf("directory class: %v, want nil", err)
	}
	static := f.directoryClass(nil)
	static.Parameters = map[string]string{"backend": "static"}
	if err := f.p.CheckEvict(static); !errors.Is(err, backend.ErrCannotEvict) {
		t.Errorf("static class: %v, want %v", err, backend.ErrCannotEvict)
	}
}

// RemoveStorage, the evictor's last step but one, removes the storage of an
// evicted member through the backend that made it: a directory member's
// directory goes; a local member whose node is gone cannot be reached, and
// says which node and which directory, which the evictor tells an
// administrator of.
func TestRemoveStorageGoesThroughTheBackend(t *testing.T) {
	now := metav1.Now()
	f := newFixture(t, nil)
	deleted := func(pv *corev1.PersistentVolume) {
		pv.Annotations[wellknown.Evicting] = wellknown.EvictIdle
		pv.Finalizers = []string{wellknown.EvictFinalizer}
		pv.DeletionTimestamp = &now
	}
	if err := f.p.RemoveStorage(context.Background(), directoryMember(t, f.root, "pv-1", deleted)); err != nil {
		t.Errorf("RemoveStorage of a directory member = %v", err)
	}
	if _, err := os.Stat(filepath.Join(f.root, "pv-1")); !os.IsNotExist(err) {
		t.Errorf("directory of the directory member: %v, want it gone", err)
	}

	typ := corev1.HostPathDirectory
	local := volume("pv-2", "1Gi", deleted, func(pv *corev1.PersistentVolume) {
		pv.Annotations[wellknown.Backend] = "local"
		pv.Annotations[wellknown.Node], pv.Annotations[wellknown.NodePath], pv.Annotations[wellknown.Directory] = "n1", "/var/lib/caches", "pv-2"
		pv.Spec.HostPath = &corev1.HostPathVolumeSource{Path: "/var/lib/caches/pv-2", Type: &typ}
	})
	var gone *lifecycle.NodeGoneError
	if err := f.p.RemoveStorage(context.Background(), local); !errors.As(err, &gone) || gone.Node != "n1" || gone.Dir != "/var/lib/caches/pv-2" {
		t.Errorf("RemoveStorage of a local member whose node is gone = %v, want a NodeGoneError naming node n1 and /var/lib/caches/pv-2", err)
	}
}

// A member the measurer is asked about is measured when its backend
// measures its members: the directory backend does.
func TestMeasuresAsTheBackendSays(t *testing.T) {
	f := newFixture(t, nil)
	if member := directoryMember(t, f.root, "pv-1"); !f.p.Measures(member) {
		t.Error("Measures of a directory member = false, want true")
	}
	if member := volume("pv-2", "1Gi"); f.p.Measures(member) {
		t.Error("Measures of a volume that names no backend = true, want false")
	}
}

// A free member of a class pool is evicted by handing it back to its
// driver (provisioner/classpool), not fenced and deleted as other members
// are: the driver deletes only what is not being deleted.
func TestEvictHandsAClassMemberBackToItsDriver(t *testing.T) {
	member := provisionertest.ClassMember(testProvisioner, testDriver, testBackingClass)
	f := newClassFixture(t, nil, []*corev1.PersistentVolume{member})
	if evicted, err := f.p.Evict(context.Background(), member, wellknown.EvictForClaim); err != nil || !evicted {
		t.Fatalf("Evict = %v, %v", evicted, err)
	}
	pv := f.server(member.Name)
	if pv.Annotations[wellknown.ProvisionedBy] != testDriver || pv.Annotations[wellknown.Evicting] != wellknown.EvictForClaim {
		t.Errorf("evicted = annotations %v; want it handed back to the driver", pv.Annotations)
	}
	if pv.DeletionTimestamp != nil || slices.Contains(pv.Finalizers, wellknown.EvictFinalizer) {
		t.Errorf("evicted member fenced for deletion: %v %v", pv.DeletionTimestamp, pv.Finalizers)
	}
}

// At its maximum, a pool with evictForClaims evicts its least recently
// used member for a claim that no free member fits, and the claim waits
// for it to go; retried meanwhile, it evicts no second one. Without the
// setting the claim only waits.
func TestClaimAtTheMaximumEvictsTheLeastRecentlyUsedMember(t *testing.T) {
	for _, tt := range []struct {
		name        string
		evict       bool
		alreadyGone bool // a member is being evicted already
		want        string
	}{
		{"evictForClaims", true, false, "old"},
		{"one being evicted already", true, true, ""},
		{"without it", false, false, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			made := func(pv *corev1.PersistentVolume) { pv.Annotations[wellknown.Backend] = "directory" }
			members := []*corev1.PersistentVolume{volume("old", "1Gi", made, returned("ns/a", t0())), volume("new", "1Gi", made, returned("ns/b", t0().Add(time.Hour)))}
			if tt.alreadyGone {
				members[1].Annotations[wellknown.Evicting] = wellknown.EvictForClaim
			}
			claim := claimFor("ns", "big", "5Gi")
			f := newFixture(t, members, claim)
			if err := f.p.pools.Add(aheadPool(func(p *v1alpha1.VolumePool) {
				p.Spec.MinAvailable, p.Spec.MaxVolumes, p.Spec.EvictForClaims = nil, ptr.To[int32](2), tt.evict
			})); err != nil {
				t.Fatal(err)
			}
			f.client.PrependReactor("*", "persistentvolumes", func(a k8stesting.Action) (bool, runtime.Object, error) {
				if a.GetVerb() == "update" || a.GetVerb() == "delete" {
					if name := actionName(a); name != tt.want {
						t.Errorf("%s of volume %s, want no write but to %q", a.GetVerb(), name, tt.want)
					}
				}
				return false, nil, nil
			})
			_, _, err := f.provision(f.directoryClass(map[string]string{"maxVolumes": "2"}), claim)
			if !errors.Is(err, errExhausted) {
				t.Fatalf("Provision: %v, want the claim to wait", err)
			}
			_, gone := f.client.CoreV1().PersistentVolumes().Get(context.Background(), "old", metav1.GetOptions{})
			if apierrors.IsNotFound(gone) != (tt.want == "old") {
				t.Errorf("member old: %v, want evicted %v", gone, tt.want == "old")
			}
			if got := hasEvent(f.events(), "Normal EvictingForClaim"); got != (tt.want != "") {
				t.Errorf("EvictingForClaim event: %v, want %v", got, tt.want != "")
			}
		})
	}
}

// A claim whose namespace is at maxVolumesPerNamespace, which no member of
// its namespace fits, lets go of its namespace's own least recently used
// idle member under evictForClaims: no share changes. Never another
// namespace's member, however long idle: that would only grow the share;
// and without evictForClaims nothing goes.
func TestClaimAtItsNamespacesMaximumEvictsItsOwnMember(t *testing.T) {
	for _, tt := range []struct {
		name  string
		evict bool
		want  string
	}{
		{"evictForClaims", true, "old"},
		{"without it", false, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			made := func(pv *corev1.PersistentVolume) { pv.Annotations[wellknown.Backend] = "directory" }
			members := []*corev1.PersistentVolume{
				volume("old", "1Gi", made, returned("ns/a", t0())),
				volume("new", "1Gi", made, returned("ns/b", t0().Add(time.Hour))),
				volume("elsewhere", "1Gi", made, returned("other/x", t0().Add(-time.Hour))),
			}
			claim := claimFor("ns", "big", "5Gi")
			f := newFixture(t, members, claim)
			if err := f.p.pools.Add(aheadPool(func(p *v1alpha1.VolumePool) {
				p.Spec.MinAvailable, p.Spec.MaxVolumes, p.Spec.EvictForClaims = nil, ptr.To[int32](10), tt.evict
				p.Spec.ReuseScope, p.Spec.MaxVolumesPerNamespace = wellknown.ReuseScopeNamespace, ptr.To[int32](2)
			})); err != nil {
				t.Fatal(err)
			}
			f.client.PrependReactor("*", "persistentvolumes", func(a k8stesting.Action) (bool, runtime.Object, error) {
				if a.GetVerb() == "update" || a.GetVerb() == "delete" {
					if name := actionName(a); name != tt.want {
						t.Errorf("%s of volume %s, want no write but to %q", a.GetVerb(), name, tt.want)
					}
				}
				return false, nil, nil
			})
			class := f.directoryClass(map[string]string{"maxVolumes": "10"})
			for range 2 { // retried meanwhile, it evicts no second one
				if _, _, err := f.provision(class, claim); !errors.Is(err, errAtShare) {
					t.Fatalf("Provision: %v, want the claim to wait at its namespace's maximum", err)
				}
				// The cache shows the fence (the finalizer keeps the member
				// until its storage is gone).
				fenced := members[0].DeepCopy()
				fenced.Annotations[wellknown.Evicting] = wellknown.EvictForClaim
				if tt.want != "" {
					f.volumes.Update(fenced)
				}
			}
			_, gone := f.client.CoreV1().PersistentVolumes().Get(context.Background(), "old", metav1.GetOptions{})
			if apierrors.IsNotFound(gone) != (tt.want == "old") {
				t.Errorf("member old: %v, want evicted %v", gone, tt.want == "old")
			}
			if ev := f.events(); hasEvent(ev, "Normal EvictingForClaim") != (tt.want != "") {
				t.Errorf("events = %v, want an EvictingForClaim event: %v", ev, tt.want != "")
			}
		})
	}
}

// A claim at its namespace's maximum that no new volume could serve (a
// block volume of a directory class) is refused, and evicts nothing for it.
func TestClaimNoVolumeServesEvictsNothingAtItsNamespacesMaximum(t *testing.T) {
	made := func(pv *corev1.PersistentVolume) { pv.Annotations[wellknown.Backend] = "directory" }
	claim := claimFor("ns", "raw", "5Gi", func(c *corev1.PersistentVolumeClaim) {
		c.Spec.VolumeMode = ptr.To(corev1.PersistentVolumeBlock)
	})
	f := newFixture(t, []*corev1.PersistentVolume{volume("old", "1Gi", made, returned("ns/a", t0()))}, claim)
	if err := f.p.pools.Add(aheadPool(func(p *v1alpha1.VolumePool) {
		p.Spec.MinAvailable, p.Spec.MaxVolumes, p.Spec.EvictForClaims = nil, ptr.To[int32](10), true
		p.Spec.ReuseScope, p.Spec.MaxVolumesPerNamespace = wellknown.ReuseScopeNamespace, ptr.To[int32](1)
	})); err != nil {
		t.Fatal(err)
	}
	f.client.PrependReactor("*", "persistentvolumes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetVerb() == "update" || a.GetVerb() == "delete" {
			t.Errorf("%s of volume %s, want none", a.GetVerb(), actionName(a))
		}
		return false, nil, nil
	})
	if _, _, err := f.provision(f.directoryClass(map[string]string{"maxVolumes": "10"}), claim); err == nil || errors.Is(err, errAtShare) {
		t.Fatalf("Provision: %v, want the claim refused", err)
	}
	if ev := f.events(); hasEvent(ev, "Normal EvictingForClaim") {
		t.Errorf("events = %v, want no eviction", ev)
	}
}

// Under keyPolicy Require, a namespace at its maximum whose only member
// was last used under another key lets go of it for a claim of a new key
// (evictForClaims), which then gets a new member: it does not wait beside
// an idle member for ever.
func TestRequiredKeyAtTheNamespacesMaximumEvictsAnotherKeysMember(t *testing.T) {
	made := func(pv *corev1.PersistentVolume) { pv.Annotations[wellknown.Backend] = "directory" }
	claim := claimFor("t", "c2", "1Gi", labelledClaim("team", "b"))
	f := newFixture(t, []*corev1.PersistentVolume{volume("team-a", "1Gi", made, returned("t/c1", t0()), keyed("team=a"), heldFor("t"))}, claim)
	if err := f.p.pools.Add(aheadPool(func(p *v1alpha1.VolumePool) {
		p.Spec.MinAvailable, p.Spec.MaxVolumes, p.Spec.EvictForClaims = nil, ptr.To[int32](10), true
		p.Spec.ReuseScope, p.Spec.MaxVolumesPerNamespace = wellknown.ReuseScopeNamespace, ptr.To[int32](1)
	})); err != nil {
		t.Fatal(err)
	}
	class := f.directoryClass(map[string]string{wellknown.KeyLabel: "team", wellknown.KeyPolicy: wellknown.KeyPolicyRequire})
	if _, _, err := f.provision(class, claim); !errors.Is(err, errAtShare) {
		t.Fatalf("Provision: %v, want the claim to wait for the member being evicted", err)
	}
	if _, err := f.client.CoreV1().PersistentVolumes().Get(context.Background(), "team-a", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("member of team a: %v, want it evicted", err)
	}
	// Gone from the cache as well: the claim gets a new member of its key.
	f.volumes.Delete(volume("team-a", "1Gi"))
	pv, _, err := f.provision(class, claim)
	if err != nil || pv == nil {
		t.Fatalf("Provision = %v, %v; want a new volume", nameOf(pv), err)
	}
	if got := pv.Annotations[wellknown.LastKey]; got != "team=b" {
		t.Errorf("new volume's last key = %q, want team=b", got)
	}
}

func actionName(a k8stesting.Action) string {
	switch a := a.(type) {
	case k8stesting.UpdateAction:
		return a.GetObject().(*corev1.PersistentVolume).Name
	case k8stesting.DeleteAction:
		return a.GetName()
	}
	return ""
}

// A volume made and deleted again before any count saw it in the cache (a
// member evicted soon after it was made) holds no place in the class's
// count once its deletion is seen.
func TestAVolumeGoneBeforeACountSawItHoldsNoPlace(t *testing.T) {
	a, b := claimFor("ns", "a", "1Gi"), claimFor("ns", "b", "1Gi")
	f := newFixture(t, nil, a, b)
	class := f.directoryClass(map[string]string{"maxVolumes": "1"})
	made, _, err := f.provision(class, a)
	if err != nil {
		t.Fatal(err)
	}
	f.p.onVolume(made, nil) // deleted; the cache never had it
	if _, _, err := f.provision(class, b); err != nil {
		t.Errorf("Provision after the only volume was deleted: %v", err)
	}
}
