package unissued

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/reclaimable/reclaimable/apis/reclaimable/v1alpha1"
	"github.com/reclaimable/reclaimable/internal/controllertest"
	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

const provisioner = "vendor/reclaimable"

func member(name string, mods ...func(*corev1.PersistentVolume)) *corev1.PersistentVolume {
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "1", Labels: map[string]string{wellknown.Pool: "static"}, Annotations: map[string]string{}},
		Spec: corev1.PersistentVolumeSpec{
			StorageClassName:              "static",
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
		},
		Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeAvailable},
	}
	for _, m := range mods {
		m(pv)
	}
	return pv
}

func annotated(k string) func(*corev1.PersistentVolume) {
	return func(pv *corev1.PersistentVolume) { pv.Annotations[k] = "x" }
}

func TestLoose(t *testing.T) {
	now := metav1.NewTime(time.Now())
	for _, tt := range []struct {
		name string
		pv   *corev1.PersistentVolume
		want bool
	}{
		{"a static member no claim has had", member("a"), true},
		{"a member this provisioner made", member("a", func(pv *corev1.PersistentVolume) {
			pv.Labels = nil
			pv.Annotations[wellknown.ProvisionedBy] = provisioner
		}), true},
		{"a volume of no pool", member("a", func(pv *corev1.PersistentVolume) { pv.Labels = nil }), false},
		{"a volume of reclaim policy Delete", member("a", func(pv *corev1.PersistentVolume) {
			pv.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimDelete
		}), false},
		{"a member with a last claim, which the releaser holds for its namespace", member("a", annotated(wellknown.LastClaim)), false},
		{"a member that names a claim", member("a", func(pv *corev1.PersistentVolume) {
			pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "ns", Name: "c"}
		}), false},
		{"a member being deleted", member("a", func(pv *corev1.PersistentVolume) { pv.DeletionTimestamp = &now }), false},
		{"a Failed member", member("a", func(pv *corev1.PersistentVolume) { pv.Status.Phase = corev1.VolumeFailed }), false},
		{"a member marked for scrub", member("a", annotated(wellknown.Scrub)), false},
		{"a member being evicted", member("a", annotated(wellknown.Evicting)), false},
		{"a member whose storage is being made", member("a", annotated(wellknown.StoragePending)), false},
	} {
		if got := Loose(tt.pv, provisioner); got != tt.want {
			t.Errorf("%s: Loose = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// keeper is a keeper over a fake API server holding pvs, with the static
// class of parameters, made over by a VolumePool of reuseScope poolScope
// ("" none).
func keeper(t *testing.T, parameters map[string]string, poolScope string, pvs ...*corev1.PersistentVolume) (*Keeper, *fake.Clientset) {
	t.Helper()
	client := fake.NewClientset()
	controllertest.ResourceVersionPreconditions(client, corev1.SchemeGroupVersion.WithResource("persistentvolumes"))
	volumes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, pv := range pvs {
		if _, err := client.CoreV1().PersistentVolumes().Create(t.Context(), pv, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := volumes.Add(pv); err != nil {
			t.Fatal(err)
		}
	}
	classes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := classes.Add(&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "static"}, Provisioner: provisioner,
		Parameters: mergeParams(map[string]string{"backend": "static"}, parameters)}); err != nil {
		t.Fatal(err)
	}
	vp := pools.NoPools()
	if poolScope != "" {
		if err := vp.Add(&v1alpha1.VolumePool{ObjectMeta: metav1.ObjectMeta{Name: "static"},
			Spec: v1alpha1.VolumePoolSpec{StorageClassName: "static", ReuseScope: poolScope}}); err != nil {
			t.Fatal(err)
		}
	}
	return New(Config{Provisioner: provisioner, Client: client, Volumes: volumes, Classes: storagelisters.NewStorageClassLister(classes), Pools: vp, Workers: 1}), client
}

func mergeParams(a, b map[string]string) map[string]string {
	for k, v := range b {
		a[k] = v
	}
	return a
}

func TestSync(t *testing.T) {
	for _, tt := range []struct {
		name       string
		parameters map[string]string
		poolScope  string
		pv         *corev1.PersistentVolume
		wantRef    bool
	}{
		{"a loose member of a class held to namespaces by default", nil, "", member("a"), true},
		{"a loose member of a class that shares members across namespaces", map[string]string{wellknown.ReuseScope: wellknown.ReuseScopeCluster}, "", member("a"), false},
		{"a loose member of a class whose pool holds members to namespaces", map[string]string{wellknown.ReuseScope: wellknown.ReuseScopeCluster}, wellknown.ReuseScopeNamespace, member("a"), true},
		{"a loose member of a class whose pool shares members across namespaces", nil, wellknown.ReuseScopeCluster, member("a"), false},
		{"a volume of another provisioner's class", nil, "", member("a", func(pv *corev1.PersistentVolume) { pv.Spec.StorageClassName = "other" }), false},
		{"a member marked for scrub", nil, "", member("a", annotated(wellknown.Scrub)), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			k, client := keeper(t, tt.parameters, tt.poolScope, tt.pv)
			if err := k.Sync(t.Context(), "a"); err != nil {
				t.Fatal(err)
			}
			got, err := client.CoreV1().PersistentVolumes().Get(t.Context(), "a", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if pools.Unissued(got) != tt.wantRef || (!tt.wantRef && got.Spec.ClaimRef != nil) {
				t.Errorf("claimRef %+v; want one naming a claim that never exists: %v", got.Spec.ClaimRef, tt.wantRef)
			}
			if tt.wantRef && pools.StateOf(got) != pools.StateFree {
				t.Errorf("state %s, want free", pools.StateOf(got))
			}
		})
	}
}

// The PV controller may bind a loose member before the keeper names a
// claim in it: the write, guarded by the resourceVersion the cache showed,
// must not take the member from the claim it got.
func TestSyncLeavesAMemberBoundMeanwhile(t *testing.T) {
	k, client := keeper(t, nil, "", member("a"))
	bound := member("a", func(pv *corev1.PersistentVolume) {
		pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "ns", Name: "c", UID: "uc"}
	})
	live, err := client.CoreV1().PersistentVolumes().Update(t.Context(), bound, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if live.ResourceVersion == "1" {
		t.Fatal("the bind kept the resourceVersion the cache shows")
	}
	if err := k.Sync(t.Context(), "a"); err != nil {
		t.Fatal(err)
	}
	got, err := client.CoreV1().PersistentVolumes().Get(t.Context(), "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ref := got.Spec.ClaimRef; ref == nil || ref.UID != "uc" {
		t.Errorf("claimRef %+v, want the claim the PV controller bound it to", ref)
	}
}
