package provisioner

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

	"github.com/reclaimable/reclaimable/internal/keys"
	"github.com/reclaimable/reclaimable/provisioner/lifecycle"
	"github.com/reclaimable/reclaimable/provisioner/lifecycle/lifecycletest"
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
		ObjectMeta: metav1.ObjectMeta{Name: "pvc-1", Annotations: map[string]string{keys.BaseDir: "/share/caches", keys.Directory: "pvc-1"}},
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
			_, err := b.delete(context.Background(), tt.pv)
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
