package provisioner

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/reclaimable/reclaimable/apis/reclaimable/v1alpha1"
	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/internal/wellknown"
	"github.com/reclaimable/reclaimable/provisioner/ahead"
	"github.com/reclaimable/reclaimable/provisioner/backend"
	"github.com/reclaimable/reclaimable/provisioner/match"
)

// The members made ahead as the pool manager has the provisioner make and
// finish them (poolmanager.go), through the flow: counted against the
// class's maximum as the provisioner counts its volumes, and issued to
// claims as any member. provisioner/ahead's own tests take the rest.

// aheadPool is the VolumePool "warm" of class "pool": two members made
// ahead, of at most three.
func aheadPool(mutate ...func(*v1alpha1.VolumePool)) *v1alpha1.VolumePool {
	p := &v1alpha1.VolumePool{ObjectMeta: metav1.ObjectMeta{Name: "warm"},
		Spec: v1alpha1.VolumePoolSpec{StorageClassName: "pool", MaxVolumes: ptr.To[int32](3), MinAvailable: ptr.To[int32](2)}}
	for _, m := range mutate {
		m(p)
	}
	return p
}

// cached lists the volumes the API server has into the cache, as the
// informer would.
func (f *fixture) cached() []*corev1.PersistentVolume {
	f.t.Helper()
	list, err := f.client.CoreV1().PersistentVolumes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	var out []*corev1.PersistentVolume
	for i := range list.Items {
		pv := &list.Items[i]
		if err := f.volumes.Update(pv); err != nil {
			f.t.Fatal(err)
		}
		out = append(out, pv)
	}
	return out
}

// A member made ahead is a volume object whose claimRef names a claim that
// never exists, with the pool's template and a directory of its own: free,
// counted against maxVolumes, issued to a claim that fits as any member.
func TestMakeAheadMakesFreeMembersWithinTheMaximum(t *testing.T) {
	f := newFixture(t, nil)
	class := f.directoryClass(map[string]string{"maxVolumes": "3"})
	pool := aheadPool(func(p *v1alpha1.VolumePool) {
		p.Spec.Template = &v1alpha1.VolumePoolTemplate{Capacity: ptr.To(resource.MustParse("2Gi")), AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}}
	})
	made, err := f.p.ahead().Make(context.Background(), class, pool, 2)
	if err != nil || made != 2 {
		t.Fatalf("MakeAhead = %d, %v; want 2", made, err)
	}
	if n := f.p.ahead().InFlight("pool"); n != 2 {
		t.Errorf("in flight before the cache shows them: %d, want 2", n)
	}
	// Not cached yet, they still count against the maximum: one more only.
	if made, err := f.p.ahead().Make(context.Background(), class, pool, 5); err != nil || made != 1 {
		t.Fatalf("MakeAhead at the maximum = %d, %v; want 1", made, err)
	}
	pvs := f.cached()
	if len(pvs) != 3 || f.p.ahead().InFlight("pool") != 0 {
		t.Fatalf("%d volumes, %d in flight; want 3 and 0", len(pvs), f.p.ahead().InFlight("pool"))
	}
	for _, pv := range pvs {
		if !pools.Unissued(pv) || pools.StoragePending(pv) || pools.StateOf(pv) != pools.StateFree {
			t.Errorf("volume %s: made ahead %v, pending %v, state %s; want a free member", pv.Name, pools.Unissued(pv), pools.StoragePending(pv), pools.StateOf(pv))
		}
		if pv.Annotations[wellknown.ProvisionedBy] != testProvisioner || pv.Annotations[wellknown.MadeAhead] != "warm" || pv.Spec.ClaimRef.Namespace != metav1.NamespaceSystem {
			t.Errorf("volume %s: annotations %v, claimRef %+v", pv.Name, pv.Annotations, pv.Spec.ClaimRef)
		}
		if c := pv.Spec.Capacity[corev1.ResourceStorage]; c.String() != "2Gi" || pv.Spec.AccessModes[0] != corev1.ReadWriteMany {
			t.Errorf("volume %s: %s %v, want the template's 2Gi ReadWriteMany", pv.Name, c.String(), pv.Spec.AccessModes)
		}
		if _, err := os.Stat(filepath.Join(f.root, pv.Name)); err != nil {
			t.Errorf("volume %s has no directory: %v", pv.Name, err)
		}
	}

	// A claim that fits takes one, and the metric says how.
	claim := claimFor("ns", "job", "1Gi", func(c *corev1.PersistentVolumeClaim) {
		c.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}
	})
	if err := f.claims.Add(claim); err != nil {
		t.Fatal(err)
	}
	_, _, err = f.provision(class, claim)
	wantIssued(t, err, "")
	var issued *corev1.PersistentVolume
	for _, pv := range pvs {
		if live := f.server(pv.Name); live.Spec.ClaimRef.UID == claim.UID {
			issued = live
		}
	}
	if issued == nil {
		t.Fatal("no member made ahead was issued to the claim")
	}
	if kind, ok := match.IssuedNow(pvs[0], issued); !ok || kind != match.IssueMadeAhead {
		t.Errorf("match.IssuedNow = %q, %v; want %q", kind, ok, match.IssueMadeAhead)
	}
	if ev := f.events(); !hasEvent(ev, "Normal IssuedFromPool") || !strings.Contains(strings.Join(ev, "\n"), "never used") {
		t.Errorf("events %v, want IssuedFromPool saying never used", ev)
	}
}

// A provisioner stopped after the volume object and before its storage
// leaves a member marked storage-pending, which is issued to no claim and
// which FinishAhead completes.
func TestFinishAheadCompletesAMemberLeftHalfMade(t *testing.T) {
	f := newFixture(t, nil)
	class := f.directoryClass(nil)
	params, err := backend.ParseParameters(class, f.p.backends)
	if err != nil {
		t.Fatal(err)
	}
	maker, _ := params.Pool.Maker()
	half := backend.VolumeObject(class, "directory", backend.NewVolume{Name: "pvc-half", Claim: ahead.Claim(aheadPool(), "pvc-half")}, backend.MadeVolume{}, nil,
		map[string]string{wellknown.ProvisionedBy: testProvisioner, wellknown.MadeAhead: "warm", wellknown.StoragePending: "true"})
	plan, _ := maker.Plan(backend.NewVolume{Name: "pvc-half"})
	half.Spec.PersistentVolumeSource = plan.Source
	half.Spec.ClaimRef = &corev1.ObjectReference{Namespace: metav1.NamespaceSystem, Name: wellknown.MadeAheadClaim("pvc-half")}
	if _, err := f.client.CoreV1().PersistentVolumes().Create(context.Background(), half, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pv := f.cached()[0]
	claim := claimFor("ns", "job", "1Gi")
	if a := match.AvailabilityOf(pv, claim, true); a != match.InUse || pools.StateOf(pv) != pools.StateOther {
		t.Errorf("half made: availability %v, state %s; want in use, other", a, pools.StateOf(pv))
	}
	if err := f.p.ahead().Finish(context.Background(), class); err != nil {
		t.Fatal(err)
	}
	pv = f.cached()[0]
	if pools.StoragePending(pv) || pools.StateOf(pv) != pools.StateFree {
		t.Errorf("finished: annotations %v, state %s; want free", pv.Annotations, pools.StateOf(pv))
	}
	if _, err := os.Stat(filepath.Join(f.root, "pvc-half")); err != nil {
		t.Errorf("finished without its directory: %v", err)
	}
	if a := match.AvailabilityOf(pv, claim, true); a != match.Free {
		t.Errorf("finished: availability %v, want free to a claim of any namespace", a)
	}
}
