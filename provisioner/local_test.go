package provisioner

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	lib "sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/reclaimable/reclaimable/internal/wellknown"
	"github.com/reclaimable/reclaimable/provisioner/backend"
	"github.com/reclaimable/reclaimable/provisioner/lifecycle/lifecycletest"
)

func localStorageClass(params map[string]string) *storagev1.StorageClass {
	p := map[string]string{"backend": "local", "nodePath": "/var/lib/caches"}
	for k, v := range params {
		p[k] = v
	}
	return &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: "pool"},
		Provisioner:       testProvisioner,
		Parameters:        p,
		ReclaimPolicy:     ptr.To(corev1.PersistentVolumeReclaimRetain),
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer),
	}
}

func node(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name + "-host"}}}
}

// A local volume is made by a create pod on the selected node and pinned to
// that node; a node with maxVolumesPerNode volumes gets no more, while
// another node does.
func TestProvisionLocalPerNode(t *testing.T) {
	onN1 := volume("v1", "1Gi", bound("ns", "user", "uid-user"), func(pv *corev1.PersistentVolume) { pv.Annotations[wellknown.Node] = "n1" })
	a, b := claimFor("ns", "a", "1Gi"), claimFor("ns", "b", "1Gi")
	f := newFixture(t, []*corev1.PersistentVolume{onN1}, a, b)
	class := localStorageClass(map[string]string{"maxVolumesPerNode": "1", "directoryMode": "0770"})
	provisionOn := func(claim *corev1.PersistentVolumeClaim, n string) (*corev1.PersistentVolume, error) {
		pv, _, err := f.p.Provision(context.Background(), lib.ProvisionOptions{
			StorageClass: class, PVName: "pvc-" + string(claim.UID), PVC: claim, SelectedNode: node(n),
		})
		return pv, err
	}

	if _, err := provisionOn(a, "n1"); err == nil || !strings.Contains(err.Error(), "pool exhausted") {
		t.Fatalf("Provision on a full node = %v, want pool exhausted", err)
	}
	if !hasEvent(f.events(), "Warning PoolExhausted class pool has 1 of at most 1 volumes on node n1 (maxVolumesPerNode=1)") {
		t.Errorf("events = %v", f.events())
	}
	if pods, _ := f.client.CoreV1().Pods("lifecycle").List(context.Background(), metav1.ListOptions{}); len(pods.Items) != 0 {
		t.Errorf("a lifecycle pod was started on a full node: %v", pods.Items)
	}

	lifecycletest.Finish(t, f.client, "create-pvc-"+string(b.UID), corev1.PodSucceeded, "")
	pv, err := provisionOn(b, "n2")
	if err != nil {
		t.Fatal(err)
	}
	if pv.Spec.HostPath == nil || pv.Spec.HostPath.Path != "/var/lib/caches/"+pv.Name {
		t.Errorf("source %v, want the directory in nodePath", pv.Spec.PersistentVolumeSource)
	}
	if got := pv.Spec.NodeAffinity.Required.NodeSelectorTerms[0].MatchExpressions[0]; got.Key != corev1.LabelHostname || len(got.Values) != 1 || got.Values[0] != "n2-host" {
		t.Errorf("node affinity %v, want node n2's hostname", got)
	}
	if pv.Annotations[wellknown.Node] != "n2" || pv.Annotations[wellknown.NodePath] != "/var/lib/caches" || pv.Annotations[wellknown.Directory] != pv.Name {
		t.Errorf("annotations %v", pv.Annotations)
	}
}

// A claim of a local class that did not wait for its first consumer has
// no node to be made on.
func TestProvisionLocalNeedsANode(t *testing.T) {
	a := claimFor("ns", "a", "1Gi")
	f := newFixture(t, nil, a)
	_, _, err := f.p.Provision(context.Background(), lib.ProvisionOptions{StorageClass: localStorageClass(nil), PVName: "pvc-a", PVC: a})
	if err == nil || !strings.Contains(err.Error(), "has no node selected") {
		t.Fatalf("Provision without a selected node = %v", err)
	}
}

// A create pod that has not ended by its deadline may still make the
// directory after it, so the claim's provisioning stays in the background:
// the library calls Provision again even once the claim is gone, and
// deletes what it then returns, rather than leave a directory no volume
// names. A pod that failed, its leftovers removed, or one on a node that
// is gone makes nothing more: that is final.
func TestProvisionLocalLeavesNoDirectoryBehindALatePod(t *testing.T) {
	for _, tt := range []struct {
		name     string
		phase    corev1.PodPhase
		nodeGone bool
		want     lib.ProvisioningState
	}{
		{"past its deadline", "", false, lib.ProvisioningInBackground},
		{"past its deadline, on a node that is gone", "", true, lib.ProvisioningFinished},
		{"failed", corev1.PodFailed, false, lib.ProvisioningFinished},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := claimFor("ns", "a", "1Gi")
			f := newFixture(t, nil, a)
			if !tt.nodeGone {
				if err := f.client.Tracker().Add(node("n1")); err != nil {
					t.Fatal(err)
				}
			}
			f.p.backendDeps.Pods = f.p.backendDeps.Pods.WithTimeout(100 * time.Millisecond)
			f.p.backends = backend.New(f.p.backendDeps)
			if tt.phase != "" {
				lifecycletest.Finish(t, f.client, "create-pvc-"+string(a.UID), tt.phase, "mkdir: permission denied")
				lifecycletest.Finish(t, f.client, "delete-pvc-"+string(a.UID), corev1.PodSucceeded, "")
			}
			_, state, err := f.p.Provision(context.Background(), lib.ProvisionOptions{
				StorageClass: localStorageClass(nil), PVName: "pvc-" + string(a.UID), PVC: a, SelectedNode: node("n1"),
			})
			if err == nil || state != tt.want {
				t.Errorf("Provision = %v, %v; want an error and state %v", state, err, tt.want)
			}
		})
	}
}
