package backend

import (
	"context"
	"io/fs"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/reclaimable/reclaimable/internal/wellknown"
	"github.com/reclaimable/reclaimable/provisioner/lifecycle"
	"github.com/reclaimable/reclaimable/provisioner/lifecycle/lifecycletest"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"
)

func TestVolumeSource(t *testing.T) {
	hp := (&directoryClass{source: sourceHostPath, hostPath: "/mnt/caches"}).volumeSource("pvc-1")
	if hp.HostPath == nil || hp.HostPath.Path != "/mnt/caches/pvc-1" || *hp.HostPath.Type != corev1.HostPathDirectory {
		t.Errorf("hostPath source = %+v", hp.HostPath)
	}
	nfs := (&directoryClass{source: sourceNFS, nfsServer: "10.0.0.1", nfsPath: "/export"}).volumeSource("pvc-1")
	if nfs.NFS == nil || nfs.NFS.Server != "10.0.0.1" || nfs.NFS.Path != "/export/pvc-1" {
		t.Errorf("nfs source = %+v", nfs.NFS)
	}
	if got := sourceDirName(&corev1.PersistentVolume{Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: nfs}}); got != "pvc-1" {
		t.Errorf("sourceDirName = %q", got)
	}
}

// A volume whose directory holds what the provisioner's user may not remove
// (a consumer's 0755 subdirectories, its files in them) is removed through
// a delete pod on a node that reaches the share, then checked gone.
func TestDirectoryDeleteThroughLifecyclePod(t *testing.T) {
	hostPath := corev1.HostPathDirectory
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pvc-1", Annotations: map[string]string{wellknown.BaseDir: "/share/caches", wellknown.Directory: "pvc-1"}},
		Spec: corev1.PersistentVolumeSpec{
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/mnt/caches/pvc-1", Type: &hostPath}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "example.com/cache-disk", Operator: corev1.NodeSelectorOpIn, Values: []string{"true"}}},
			}}}},
		},
	}
	nfs := pv.DeepCopy()
	nfs.Spec.PersistentVolumeSource = corev1.PersistentVolumeSource{NFS: &corev1.NFSVolumeSource{Server: "nfs.example.com", Path: "/export/caches/pvc-1"}}
	nfs.Spec.NodeAffinity = nil
	denied := &fs.PathError{Op: "unlinkat", Path: "pvc-1/objects/a.o", Err: fs.ErrPermission}

	for _, tt := range []struct {
		name string
		pv   *corev1.PersistentVolume
		// removals: what each call of remove returns, in turn.
		removals []error
		image    string
		pod      corev1.PodPhase
		wantErr  string
		wantPod  func(t *testing.T, p *corev1.Pod)
	}{
		{name: "removed by the provisioner itself", pv: pv, removals: []error{nil}, image: "reclaimable:test"},
		{name: "host path share: a pod where the volume's affinity admits", pv: pv, removals: []error{denied, nil}, image: "reclaimable:test", pod: corev1.PodSucceeded,
			wantPod: func(t *testing.T, p *corev1.Pod) {
				if hp := p.Spec.Volumes[0].HostPath; hp == nil || hp.Path != "/mnt/caches" {
					t.Errorf("pod mounts %+v, want the host path /mnt/caches that holds the volume", p.Spec.Volumes[0].VolumeSource)
				}
				if p.Spec.NodeName != "" || p.Spec.Affinity == nil || p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[0].Key != "example.com/cache-disk" {
					t.Errorf("pod placed by node %q, affinity %+v; want the scheduler to choose within the volume's node affinity", p.Spec.NodeName, p.Spec.Affinity)
				}
				if len(p.Spec.Tolerations) != 1 || p.Spec.Tolerations[0].Effect != corev1.TaintEffectNoSchedule {
					t.Errorf("tolerations %+v, want NoSchedule taints only", p.Spec.Tolerations)
				}
			}},
		{name: "NFS share: a pod that mounts the export", pv: nfs, removals: []error{denied, nil}, image: "reclaimable:test", pod: corev1.PodSucceeded,
			wantPod: func(t *testing.T, p *corev1.Pod) {
				if n := p.Spec.Volumes[0].NFS; n == nil || n.Server != "nfs.example.com" || n.Path != "/export/caches" {
					t.Errorf("pod mounts %+v, want nfs.example.com:/export/caches", p.Spec.Volumes[0].VolumeSource)
				}
				if p.Spec.Affinity != nil {
					t.Errorf("affinity %+v for a share every node reaches", p.Spec.Affinity)
				}
			}},
		{name: "the pod's success is checked", pv: pv, removals: []error{denied, denied}, image: "reclaimable:test", pod: corev1.PodSucceeded, wantErr: "succeeded, yet"},
		{name: "the pod fails", pv: pv, removals: []error{denied}, image: "reclaimable:test", pod: corev1.PodFailed, wantErr: "removing it through a lifecycle pod"},
		{name: "no lifecycle image", pv: pv, removals: []error{denied}, wantErr: "without --lifecycle-image"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// The reactor goes in before anything reads the client: the
			// informer and the kubelet's stand-in run alongside.
			client := fake.NewClientset()
			var seen *corev1.Pod
			client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
				seen = a.(k8stesting.CreateAction).GetObject().(*corev1.Pod).DeepCopy()
				return false, nil, nil
			})
			calls := 0
			b := &directoryBackend{
				pods: lifecycle.NewPods(client, "lifecycle", tt.image, time.Minute, startedEvents(t, client), nil),
				remove: func(baseDir, name string) error {
					if baseDir != "/share/caches" || name != "pvc-1" {
						t.Errorf("remove(%q, %q), want the volume's base directory and name", baseDir, name)
					}
					calls++
					if calls > len(tt.removals) {
						t.Fatalf("remove called %d times, want %d", calls, len(tt.removals))
					}
					return tt.removals[calls-1]
				},
			}
			if tt.pod != "" {
				lifecycletest.Finish(t, client, "delete-pvc-1", tt.pod, "")
			}
			_, err := b.Delete(context.Background(), tt.pv)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("delete: %v, want an error containing %q", err, tt.wantErr)
			}
			if calls != len(tt.removals) {
				t.Errorf("remove called %d times, want %d", calls, len(tt.removals))
			}
			if tt.wantPod != nil {
				if seen == nil {
					t.Fatal("no lifecycle pod was created")
				}
				if got := seen.Spec.Containers[0].Args; !slices.Equal(got, []string{"lifecycle", lifecycle.Delete}) {
					t.Errorf("pod runs %v, want lifecycle delete", got)
				}
				tt.wantPod(t, seen)
			} else if tt.pod == "" && len(client.Actions()) > 2 {
				t.Errorf("requests %v, want no pod", client.Actions())
			}
		})
	}
}

func TestBackingClassErrors(t *testing.T) {
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	immediate := storagev1.VolumeBindingImmediate
	class := func(provisioner string, mode *storagev1.VolumeBindingMode, policy corev1.PersistentVolumeReclaimPolicy) *storagev1.StorageClass {
		return &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "c"}, Provisioner: provisioner, VolumeBindingMode: mode, ReclaimPolicy: &policy}
	}
	pool := class(testProvisioner, &wffc, corev1.PersistentVolumeReclaimRetain)
	for _, tt := range []struct {
		name    string
		pool    *storagev1.StorageClass
		backing *storagev1.StorageClass
		want    []string
	}{
		{"a driver's class", pool, class(testDriver, &wffc, corev1.PersistentVolumeReclaimDelete), nil},
		{"Immediate in front of Immediate (unset is Immediate)", class(testProvisioner, nil, corev1.PersistentVolumeReclaimRetain), class(testDriver, &immediate, corev1.PersistentVolumeReclaimDelete), nil},
		{"a pool class of this provisioner", pool, class(testProvisioner, &wffc, corev1.PersistentVolumeReclaimDelete), []string{"is a class of this provisioner"}},
		{"a class that makes no volumes", pool, class(noProvisioner, &wffc, corev1.PersistentVolumeReclaimDelete), []string{"makes no volumes"}},
		{"binding modes differ", pool, class(testDriver, &immediate, corev1.PersistentVolumeReclaimDelete), []string{"volumeBindingMode WaitForFirstConsumer does not match Immediate"}},
		{"a backing class that keeps what it made", pool, class(testDriver, &wffc, corev1.PersistentVolumeReclaimRetain), []string{"reclaimPolicy Retain: it must be Delete"}},
		{"all at once", pool, class(testProvisioner, &immediate, corev1.PersistentVolumeReclaimRetain), []string{"is a class of this provisioner", "does not match", "must be Delete"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			errs := backingClassErrors(tt.pool, tt.backing, testProvisioner)
			if len(errs) != len(tt.want) {
				t.Fatalf("errors = %v, want %d: %v", errs, len(tt.want), tt.want)
			}
			for i, want := range tt.want {
				if !strings.Contains(errs[i].Error(), want) {
					t.Errorf("error %d = %q, want it to say %q", i, errs[i], want)
				}
			}
		})
	}
}

// Reclaim policy Delete: the delete pod runs on the volume's node; a node
// that is gone, or annotations that do not name the volume's directory,
// leave the volume with an error that says what to do.
func TestLocalDelete(t *testing.T) {
	pv := func(mods ...func(*corev1.PersistentVolume)) *corev1.PersistentVolume {
		typ := corev1.HostPathDirectory
		v := volume("pvc-1", "1Gi", func(pv *corev1.PersistentVolume) {
			pv.Annotations[wellknown.Node], pv.Annotations[wellknown.NodePath], pv.Annotations[wellknown.Directory] = "n1", "/var/lib/caches", "pvc-1"
			pv.Spec.HostPath = &corev1.HostPathVolumeSource{Path: "/var/lib/caches/pvc-1", Type: &typ}
			pv.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimDelete
		})
		for _, m := range mods {
			m(v)
		}
		return v
	}
	newBackend := func(objs ...runtime.Object) (*localBackend, *fake.Clientset) {
		client := fake.NewClientset(objs...)
		return &localBackend{provisioner: testProvisioner, client: client, pods: lifecycle.NewPods(client, "lifecycle", "reclaimable:test", time.Minute, startedEvents(t, client), nil)}, client
	}

	b, client := newBackend(node("n1"))
	lifecycletest.Finish(t, client, "delete-pvc-1", corev1.PodSucceeded, "")
	if _, err := b.Delete(context.Background(), pv()); err != nil {
		t.Fatalf("delete on a live node: %v", err)
	}

	b, _ = newBackend()
	_, err := b.Delete(context.Background(), pv())
	if err == nil || !strings.Contains(err.Error(), "node n1, which holds the directory of volume pvc-1, is gone: remove /var/lib/caches/pvc-1 from its disk if it comes back, then delete the volume") {
		t.Errorf("delete on a gone node = %v", err)
	}

	b, _ = newBackend(node("n1"))
	_, err = b.Delete(context.Background(), pv(func(pv *corev1.PersistentVolume) { pv.Spec.HostPath.Path = "/etc" }))
	if err == nil || !strings.Contains(err.Error(), "refusing to delete the data of volume pvc-1") {
		t.Errorf("delete of a volume whose source is not its directory = %v", err)
	}
}

const testProvisioner = "vendor/reclaimable"
const testDriver = "disk.csi.example.com"

// startedEvents is a cache of the lifecycle pods on client, running until
// the test ends.
func startedEvents(t *testing.T, client kubernetes.Interface) *lifecycle.Events {
	t.Helper()
	e := lifecycle.NewEvents(client, "lifecycle")
	if err := e.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	return e
}

func node(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name + "-host"}}}
}

// volume is a member of class "pool" made by this provisioner.
func volume(name, size string, mods ...func(*corev1.PersistentVolume)) *corev1.PersistentVolume {
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "1", Annotations: map[string]string{wellknown.ProvisionedBy: testProvisioner}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              "pool",
		},
		Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeAvailable},
	}
	for _, m := range mods {
		m(pv)
	}
	return pv
}
