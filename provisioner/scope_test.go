package provisioner

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// Under reuseScope namespace a claim passes over the free members of other
// namespaces: it gets its own namespace's, or a new volume, or at
// maxVolumes a Warning that names the parameter that would share them.
func TestProvisionKeepsToTheNamespace(t *testing.T) {
	heldFor := func(ns string) func(*corev1.PersistentVolume) {
		return func(pv *corev1.PersistentVolume) {
			pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: ns, Name: "old"}
			pv.Annotations[wellknown.HeldForNamespace] = ns
			pv.Annotations[wellknown.LastClaim] = ns + "/old"
		}
	}
	b, b2 := claimFor("tenant-b", "c", "1Gi"), claimFor("tenant-b", "d", "1Gi")
	f := newFixture(t, []*corev1.PersistentVolume{volume("of-a", "1Gi", heldFor("tenant-a"))}, b, b2)
	class := f.directoryClass(map[string]string{"maxVolumes": "2"})

	pv, _, err := f.provision(class, b)
	if err != nil || pv == nil {
		t.Fatalf("a claim of tenant-b with free members of tenant-a only = %v, %v; want a new volume", pv, err)
	}
	if _, held := pv.Annotations[wellknown.HeldForNamespace]; held {
		t.Errorf("a new volume belongs to no namespace until its first claim binds; annotations %v", pv.Annotations)
	}
	if ref := f.server("of-a").Spec.ClaimRef; ref.UID != "" {
		t.Errorf("the member of tenant-a was taken: claimRef %+v", ref)
	}
	f.volumes.Update(pv)

	_, _, err = f.provision(class, b2)
	if err == nil || !strings.Contains(err.Error(), "pool exhausted") {
		t.Fatalf("Provision at maxVolumes = %v", err)
	}
	if ev := f.events(); !hasEvent(ev, "Warning FreeVolumesInOtherNamespaces class pool has 2 of at most 2 volumes") ||
		!strings.Contains(strings.Join(ev, "\n"), `1 free volumes were last bound in other namespaces and hold their data, and reuseScope "namespace" gives a volume only to claims of the namespace it was last bound in (reuseScope "cluster" would share them`) {
		t.Errorf("events = %v", ev)
	}

	// Under reuseScope cluster the same member serves tenant-b.
	cluster := f.directoryClass(map[string]string{"maxVolumes": "2", wellknown.ReuseScope: wellknown.ReuseScopeCluster})
	_, _, err = f.provision(cluster, b2)
	wantIssued(t, err, "of-a")
}
