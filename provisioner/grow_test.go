package provisioner

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	lib "sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/reclaimable/reclaimable/internal/controllertest"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

func TestProvisionGrowsTheDirectoryPool(t *testing.T) {
	claim := claimFor("ns", "c", "3Gi", func(c *corev1.PersistentVolumeClaim) {
		c.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}
		c.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"cache": "go"}}
	})
	f := newFixture(t, []*corev1.PersistentVolume{
		volume("too-small", "1Gi", func(pv *corev1.PersistentVolume) {
			pv.Labels = map[string]string{"cache": "go"}
			pv.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}
		}),
	}, claim)
	class := f.directoryClass(map[string]string{"selectorKeys": "cache", "directoryMode": "0750"})
	class.MountOptions = []string{"noatime"}
	class.AllowedTopologies = []corev1.TopologySelectorTerm{{MatchLabelExpressions: []corev1.TopologySelectorLabelRequirement{{Key: "share", Values: []string{"yes"}}}}}

	pv, state, err := f.provision(class, claim)
	if err != nil || state != lib.ProvisioningFinished {
		t.Fatalf("Provision = %v, %v", state, err)
	}
	name := "pvc-" + string(claim.UID)
	if pv.Name != name {
		t.Errorf("name = %q, want %q", pv.Name, name)
	}
	size := pv.Spec.Capacity[corev1.ResourceStorage]
	if size.String() != "3Gi" || pv.Spec.AccessModes[0] != corev1.ReadWriteMany || pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimRetain {
		t.Errorf("spec = %+v", pv.Spec)
	}
	if pv.Labels["cache"] != "go" {
		t.Errorf("labels = %v, want the selector's", pv.Labels)
	}
	if pv.Spec.HostPath.Path != "/mnt/pool/"+name || pv.Spec.MountOptions[0] != "noatime" || pv.Spec.StorageClassName != "pool" {
		t.Errorf("source = %+v, mount options = %v", pv.Spec.HostPath, pv.Spec.MountOptions)
	}
	if pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required.NodeSelectorTerms[0].MatchExpressions[0].Key != "share" {
		t.Errorf("node affinity = %+v, want the class's allowedTopologies", pv.Spec.NodeAffinity)
	}
	want := map[string]string{wellknown.Backend: "directory", wellknown.BaseDir: f.root, wellknown.Directory: name, wellknown.LastClaim: "ns/c"}
	for k, v := range want {
		if pv.Annotations[k] != v {
			t.Errorf("annotation %s = %q, want %q", k, pv.Annotations[k], v)
		}
	}
	fi, err := os.Stat(filepath.Join(f.root, name))
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o750 {
		t.Errorf("directory: %v, %v", fi, err)
	}
	if n := controllertest.Metric(t, f.reg, "reclaimable_provisioner_volumes_created_total", "class", "pool"); n != 1 {
		t.Errorf("created metric = %v", n)
	}

	// A class without a reclaim policy keeps its volumes.
	noPolicy := f.directoryClass(nil)
	noPolicy.ReclaimPolicy = nil
	pv, _, err = f.provision(noPolicy, claimFor("ns", "d", "1Gi"))
	if err != nil || pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimRetain {
		t.Errorf("reclaim policy = %v, %v", pv, err)
	}
}

func TestProvisionStopsAtMaxVolumes(t *testing.T) {
	created := func(name string) *corev1.PersistentVolume {
		return volume(name, "1Gi", bound("ns", "user-"+name, "uid-"+name))
	}
	a, b, c := claimFor("ns", "a", "1Gi"), claimFor("ns", "b", "1Gi"), claimFor("ns", "c", "1Gi")
	f := newFixture(t, []*corev1.PersistentVolume{
		created("v1"),
		// A Delete volume counts against the limit but is no pool member.
		created("v2"), volume("not-ours", "1Gi", func(pv *corev1.PersistentVolume) { pv.Annotations = nil }),
	}, a, b, c)
	f.volumes.Update(func() *corev1.PersistentVolume {
		pv := created("v2")
		pv.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimDelete
		return pv
	}())
	class := f.directoryClass(map[string]string{"maxVolumes": "3"})

	if _, _, err := f.provision(class, a); err != nil {
		t.Fatalf("growing to the limit: %v", err)
	}
	// The library retries before its PV shows in the cache: not a new volume.
	if _, _, err := f.provision(class, a); err != nil {
		t.Fatalf("a retry counted twice: %v", err)
	}
	_, _, err := f.provision(class, b)
	if err == nil || !strings.Contains(err.Error(), "pool exhausted") {
		t.Fatalf("Provision beyond the limit = %v", err)
	}
	ev := f.events()
	if !hasEvent(ev, "Warning PoolExhausted class pool has 3 of at most 3 volumes") || !strings.Contains(strings.Join(ev, "\n"), "1 volumes, 1 in use, 0 free") {
		t.Errorf("events = %v", ev)
	}
	if _, err := os.Stat(filepath.Join(f.root, "pvc-"+string(b.UID))); err == nil {
		t.Error("a directory was created beyond the limit")
	}

	// Freeing a volume of the class wakes the waiting claim.
	freed := created("v1")
	freed.Status.Phase = corev1.VolumeReleased
	f.p.onVolume(created("v1"), freed)
	if len(f.requeued) != 1 || f.requeued[0] != "b" {
		t.Errorf("requeued = %v, want [b]", f.requeued)
	}
	// Deleting one makes room.
	f.volumes.Delete(created("v1"))
	if _, _, err := f.provision(class, b); err != nil {
		t.Errorf("Provision after a volume was deleted: %v", err)
	}
}

func TestProvisionRefusesWhatItCannotHonour(t *testing.T) {
	tests := []struct {
		name   string
		params map[string]string
		claim  func(*corev1.PersistentVolumeClaim)
		reason string
	}{
		{"unknown parameter", map[string]string{"colour": "blue"}, nil, "InvalidStorageClassParameters"},
		{"selector on an unknown key", nil, func(c *corev1.PersistentVolumeClaim) {
			c.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"region": "east"}}
		}, "UnsupportedSelector"},
		{"selector a new volume cannot match", map[string]string{"selectorKeys": "cache"}, func(c *corev1.PersistentVolumeClaim) {
			c.Spec.Selector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "cache", Operator: metav1.LabelSelectorOpExists}}}
		}, "UnsupportedSelector"},
		{"data source", nil, func(c *corev1.PersistentVolumeClaim) {
			c.Spec.DataSource = &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "src"}
		}, "UnsupportedDataSource"},
		{"block volume", nil, func(c *corev1.PersistentVolumeClaim) { c.Spec.VolumeMode = ptr.To(corev1.PersistentVolumeBlock) }, "UnsupportedVolumeMode"},
		{"volume attributes class", nil, func(c *corev1.PersistentVolumeClaim) { c.Spec.VolumeAttributesClassName = ptr.To("gold") }, "UnsupportedVolumeAttributesClass"},
		{"size beyond any volume", nil, func(c *corev1.PersistentVolumeClaim) {
			c.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("99999999999999999999999999999Ei")
		}, "UnsupportedCapacity"},
		{"size beyond maxCapacity", map[string]string{"maxCapacity": "100Gi"}, func(c *corev1.PersistentVolumeClaim) {
			c.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("101Gi")
		}, "UnsupportedCapacity"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mods []func(*corev1.PersistentVolumeClaim)
			if tt.claim != nil {
				mods = append(mods, tt.claim)
			}
			claim := claimFor("ns", "c", "1Gi", mods...)
			f := newFixture(t, []*corev1.PersistentVolume{volume("free", "1Gi")}, claim)
			pv, _, err := f.provision(f.directoryClass(tt.params), claim)
			if err == nil || pv != nil {
				t.Fatalf("Provision = %v, %v; want a refusal", pv, err)
			}
			if ev := f.events(); !hasEvent(ev, "Warning "+tt.reason) {
				t.Errorf("events = %v, want %s", ev, tt.reason)
			}
			if f.writes() != 0 {
				t.Errorf("a refused claim caused %d writes", f.writes())
			}
			entries, _ := os.ReadDir(f.root)
			if len(entries) != 0 {
				t.Errorf("a refused claim left %d directories", len(entries))
			}
		})
	}
}
