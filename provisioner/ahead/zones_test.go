package ahead

import (
	"context"
	"maps"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	volumehelpers "k8s.io/component-helpers/storage/volume"
	"k8s.io/utils/ptr"

	"github.com/reclaimable/reclaimable/apis/reclaimable/v1alpha1"
	"github.com/reclaimable/reclaimable/internal/wellknown"
	"github.com/reclaimable/reclaimable/provisioner/backend/backendtest"
	"github.com/reclaimable/reclaimable/provisioner/provisionertest"
)

func TestLeastServedZone(t *testing.T) {
	a, b := zoneNode("a-1", "zone-a"), zoneNode("b-1", "zone-b")
	nodes := map[string][]*corev1.Node{"zone-a": {a}, "zone-b": {b}}
	for _, tt := range []struct {
		name  string
		zones []string
		free  map[string]int
		want  string
	}{
		{"none free: the first named", []string{"zone-b", "zone-a"}, nil, "zone-b"},
		{"the fewest free", []string{"zone-a", "zone-b"}, map[string]int{"zone-a": 2, "zone-b": 1}, "zone-b"},
		{"a tie: the first named", []string{"zone-a", "zone-b"}, map[string]int{"zone-a": 1, "zone-b": 1}, "zone-a"},
		{"a zone without a node is passed over", []string{"zone-c", "zone-a"}, nil, "zone-a"},
		{"no zone with a node", []string{"zone-c"}, nil, ""},
	} {
		zone, node, ok := leastServedZone(tt.zones, tt.free, nodes)
		if zone != tt.want || ok != (tt.want != "") || ok && node != nodes[zone][0] {
			t.Errorf("%s: leastServedZone = %q, %v, %v; want %q", tt.name, zone, node, ok, tt.want)
		}
	}
}

func zoneNode(name, zone string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelTopologyZone: zone}}}
}

// readyZoneNode is zoneNode, Ready or not.
func readyZoneNode(name, zone string, ready bool) *corev1.Node {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	n := zoneNode(name, zone)
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}}
	return n
}

func zoneAffinity(zone string) *corev1.VolumeNodeAffinity {
	return &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{zone}}},
	}}}}
}

// A class pool that binds on first consumer makes its members ahead in
// the zones its pool names, each for a Ready node of the zone with the
// fewest free members; it refuses minAvailable without zones, and zones on
// a class that binds at once.
func TestAZonedClassPoolMakesMembersAheadWhereFewestAreFree(t *testing.T) {
	inZoneA := provisionertest.Volume("pvc-free-a", "1Gi", func(pv *corev1.PersistentVolume) { pv.Spec.NodeAffinity = zoneAffinity("zone-a") })
	c := provisionertest.NewCluster(t, []*corev1.PersistentVolume{inZoneA})
	wffc := ptr.To(storagev1.VolumeBindingWaitForFirstConsumer)
	classes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := classes.Add(&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: provisionertest.BackingClass}, Provisioner: provisionertest.Driver,
		ReclaimPolicy: ptr.To(corev1.PersistentVolumeReclaimDelete), VolumeBindingMode: wffc}); err != nil {
		t.Fatal(err)
	}
	nodes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, n := range []*corev1.Node{readyZoneNode("a-1", "zone-a", true), readyZoneNode("b-0", "zone-b", false), readyZoneNode("b-1", "zone-b", true), readyZoneNode("c-1", "zone-c", true)} {
		if err := nodes.Add(n); err != nil {
			t.Fatal(err)
		}
	}
	root := t.TempDir()
	deps := backendtest.Deps(t, root)
	deps.Classes = storagelisters.NewStorageClassLister(classes)
	m := newMembers(t, c, deps, corelisters.NewNodeLister(nodes))
	class := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "pool"}, Provisioner: provisionertest.Provisioner,
		Parameters: map[string]string{"backend": "class", "backingClass": provisionertest.BackingClass}, ReclaimPolicy: ptr.To(corev1.PersistentVolumeReclaimRetain), VolumeBindingMode: wffc}
	pool := func(zones ...string) *v1alpha1.VolumePool {
		return &v1alpha1.VolumePool{ObjectMeta: metav1.ObjectMeta{Name: "pool"}, Spec: v1alpha1.VolumePoolSpec{StorageClassName: "pool",
			MinAvailable: ptr.To[int32](3), MaxVolumes: ptr.To[int32](10), Template: &v1alpha1.VolumePoolTemplate{Zones: zones}}}
	}
	for _, tt := range []struct {
		name  string
		err   error
		wants string
	}{
		{"no zones", m.Check(class, pool()), "names no zones"},
		{"zones without a Ready node", m.Check(class, pool("zone-d")), "no Ready, schedulable node"},
		{"zones on a class of another backend", m.Check(provisionertest.DirectoryClass(root, nil), pool("zone-a")), "only a class of the class backend that binds on first consumer"},
		{"two zones", m.Check(class, pool("zone-a", "zone-b")), ""},
	} {
		if (tt.wants == "") != (tt.err == nil) || tt.err != nil && !strings.Contains(tt.err.Error(), tt.wants) {
			t.Errorf("%s: CheckAhead = %v, want %q", tt.name, tt.err, tt.wants)
		}
	}

	if made, err := m.Make(context.Background(), class, pool("zone-a", "zone-b"), 3); made != 3 || err != nil {
		t.Fatalf("MakeAhead = %d, %v", made, err)
	}
	claims, err := c.Client.CoreV1().PersistentVolumeClaims(provisionertest.BackingNamespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, claim := range claims.Items {
		if claim.Annotations[wellknown.MadeAhead] != "pool" {
			t.Errorf("backing claim %s is not one made ahead for the pool: %v", claim.Name, claim.Annotations)
		}
		got[claim.Annotations[volumehelpers.AnnSelectedNode]]++
	}
	// zone-a has one free member: two go to zone-b's Ready node, one to zone-a's.
	if want := map[string]int{"a-1": 1, "b-1": 2}; !maps.Equal(got, want) {
		t.Errorf("backing claims by selected node = %v, want %v", got, want)
	}
}
