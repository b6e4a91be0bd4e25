package backend

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/utils/ptr"

	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/provisioner/lifecycle"
)

// paramsBackends are the backends, their shares under root.
func paramsBackends(root string) map[string]Backend {
	return New(Deps{Provisioner: testProvisioner, DirectoryRoot: root, Pods: lifecycle.NewPods(nil, "lifecycle", "reclaimable:test", 0, nil, nil)})
}

func TestParseParameters(t *testing.T) {
	const root = "/var/lib/reclaimable"
	hostPathClass := func(extra map[string]string) map[string]string {
		m := map[string]string{"backend": "directory", "baseDir": root + "/caches", "source": "hostPath", "hostPath": "/mnt/caches"}
		for k, v := range extra {
			if v == "" {
				delete(m, k)
			} else {
				m[k] = v
			}
		}
		return m
	}
	tests := []struct {
		name    string
		params  map[string]string
		policy  corev1.PersistentVolumeReclaimPolicy
		wffc    bool // volumeBindingMode WaitForFirstConsumer
		want    *Params
		wantErr []string // substrings, all expected
	}{
		{
			name:   "hostPath with defaults",
			params: hostPathClass(nil),
			want:   &Params{ReserveFor: pools.DefaultReserveFor, Namespaced: true, Backend: "directory", SelectorKeys: sets.New[string]()},
		},
		{
			name: "nfs with every option",
			params: map[string]string{"backend": "directory", "baseDir": root, "source": "nfs", "nfsServer": "nfs.example.com",
				"nfsPath": "/export/caches", "maxVolumes": "20", "directoryMode": "2775", "selectorKeys": "cache, example.com/team"},
			want: &Params{ReserveFor: pools.DefaultReserveFor, Namespaced: true, Backend: "directory", SelectorKeys: sets.New("cache", "example.com/team"), MaxVolumes: 20},
		},
		{
			name:   "reserveFor on any backend",
			params: map[string]string{"backend": "static", "reserveFor": "10m"},
			want:   &Params{Namespaced: true, Backend: "static", SelectorKeys: sets.New[string](), ReserveFor: 10 * time.Minute},
		},
		{
			name:   "reuseScope cluster",
			params: map[string]string{"backend": "static", "reuseScope": "cluster"},
			want:   &Params{ReserveFor: pools.DefaultReserveFor, Backend: "static", SelectorKeys: sets.New[string]()},
		},
		{
			name:   "reuseScope namespace",
			params: map[string]string{"backend": "static", "reuseScope": "namespace"},
			want:   &Params{ReserveFor: pools.DefaultReserveFor, Namespaced: true, Backend: "static", SelectorKeys: sets.New[string]()},
		},
		{
			name:   "local",
			params: map[string]string{"backend": "local", "nodePath": "/var/lib/caches", "directoryMode": "0775", "maxVolumes": "10", "maxVolumesPerNode": "3"}, wffc: true,
			want: &Params{ReserveFor: pools.DefaultReserveFor, Namespaced: true, Backend: "local", SelectorKeys: sets.New[string](), MaxVolumes: 10, MaxVolumesPerNode: 3},
		},
		{name: "local lifecycleTemplates not a name", params: map[string]string{"backend": "local", "nodePath": "/var/lib/caches", "lifecycleTemplates": "../x"}, wffc: true, wantErr: []string{`"lifecycleTemplates" must name a ConfigMap`}},
		{name: "local maxVolumesPerNode zero", params: map[string]string{"backend": "local", "nodePath": "/var/lib/caches", "maxVolumesPerNode": "0"}, wffc: true, wantErr: []string{`"maxVolumesPerNode" must be a positive integer`}},
		{name: "maxVolumesPerNode on a shared directory", params: hostPathClass(map[string]string{"maxVolumesPerNode": "3"}), wantErr: []string{`unknown parameter "maxVolumesPerNode"`}},
		{name: "local binds at once", params: map[string]string{"backend": "local", "nodePath": "/var/lib/caches"}, wantErr: []string{"needs volumeBindingMode WaitForFirstConsumer"}},
		{name: "local nodePath relative", params: map[string]string{"backend": "local", "nodePath": "caches"}, wffc: true, wantErr: []string{`"nodePath" must be an absolute path`}},
		{name: "local nodePath root", params: map[string]string{"backend": "local", "nodePath": "/"}, wffc: true, wantErr: []string{`"nodePath" must be an absolute path in clean form below /`}},
		{name: "local nodePath unclean", params: map[string]string{"backend": "local", "nodePath": "/var/lib/../../etc"}, wffc: true, wantErr: []string{`"nodePath"`}},
		{name: "local parameter of another backend", params: map[string]string{"backend": "local", "nodePath": "/var/lib/caches", "baseDir": "/x"}, wffc: true, wantErr: []string{`"baseDir"`}},
		{
			name:   "keyLabel, preferred",
			params: map[string]string{"backend": "static", "keyLabel": "tekton.dev/pipeline"},
			want:   &Params{ReserveFor: pools.DefaultReserveFor, Namespaced: true, Backend: "static", SelectorKeys: sets.New[string](), KeyLabel: "tekton.dev/pipeline"},
		},
		{
			name:   "keyLabel, required",
			params: map[string]string{"backend": "static", "keyLabel": "team", "keyPolicy": "Require", "reuseScope": "namespace"},
			want:   &Params{ReserveFor: pools.DefaultReserveFor, Namespaced: true, Backend: "static", SelectorKeys: sets.New[string](), KeyLabel: "team", KeyRequired: true},
		},
		{name: "keyLabel not a label key", params: hostPathClass(map[string]string{"keyLabel": "my key"}), wantErr: []string{`keyLabel: "my key" is not a label key`}},
		{name: "keyPolicy unknown", params: hostPathClass(map[string]string{"keyLabel": "team", "keyPolicy": "require"}), wantErr: []string{`parameter "keyPolicy" must be "Prefer"`, `or "Require"`}},
		{name: "keyPolicy Require without keyLabel", params: hostPathClass(map[string]string{"keyPolicy": "Require"}), wantErr: []string{`"keyPolicy" Require needs parameter "keyLabel"`}},
		{name: "keyPolicy Require under cluster scope", params: hostPathClass(map[string]string{"keyLabel": "team", "keyPolicy": "Require", "reuseScope": "cluster"}),
			wantErr: []string{`"keyPolicy" Require needs "reuseScope" namespace`}},
		{
			name:   "maxVolumesPerNamespace",
			params: map[string]string{"backend": "static", "maxVolumesPerNamespace": "3"},
			want:   &Params{ReserveFor: pools.DefaultReserveFor, Namespaced: true, Backend: "static", SelectorKeys: sets.New[string](), MaxVolumesPerNamespace: 3},
		},
		{name: "maxVolumesPerNamespace zero", params: hostPathClass(map[string]string{"maxVolumesPerNamespace": "0"}), wantErr: []string{`"maxVolumesPerNamespace" must be a positive integer, not "0"`}},
		{name: "maxVolumesPerNamespace under cluster scope", params: hostPathClass(map[string]string{"maxVolumesPerNamespace": "2", "reuseScope": "cluster"}),
			wantErr: []string{`"maxVolumesPerNamespace" needs reuseScope "namespace"`}},
		{name: "reuseScope unknown", params: hostPathClass(map[string]string{"reuseScope": "tenant"}), wantErr: []string{`parameter "reuseScope" must be "namespace"`, `or "cluster"`}},
		{name: "reserveFor not a duration", params: hostPathClass(map[string]string{"reserveFor": "ten minutes"}), wantErr: []string{`"reserveFor" must be a duration`}},
		{name: "reserveFor negative", params: hostPathClass(map[string]string{"reserveFor": "-1m"}), wantErr: []string{`"reserveFor" must be a duration`}},
		{name: "reserveFor over a week", params: hostPathClass(map[string]string{"reserveFor": "200h"}), wantErr: []string{`"reserveFor" must be a duration`}},
		{
			name:   "static",
			params: map[string]string{"backend": "static", "selectorKeys": "cache"},
			want:   &Params{ReserveFor: pools.DefaultReserveFor, Namespaced: true, Backend: "static", SelectorKeys: sets.New("cache")},
		},
		{name: "no backend", params: map[string]string{}, wantErr: []string{`"backend" must be`}},
		{name: "unknown backend", params: map[string]string{"backend": "ceph"}, wantErr: []string{`not "ceph"`}},
		{name: "unknown parameter", params: hostPathClass(map[string]string{"basedir": "/x"}), wantErr: []string{`unknown parameter "basedir"`}},
		{name: "directory parameter on a static class", params: map[string]string{"backend": "static", "maxVolumes": "3"},
			wantErr: []string{`unknown parameter "maxVolumes" for backend "static"`}},
		{name: "baseDir missing", params: hostPathClass(map[string]string{"baseDir": ""}), wantErr: []string{`"baseDir" is required`}},
		{name: "baseDir relative", params: hostPathClass(map[string]string{"baseDir": "caches"}), wantErr: []string{"absolute path"}},
		{name: "baseDir not clean", params: hostPathClass(map[string]string{"baseDir": root + "/a/../../../etc"}), wantErr: []string{"clean form"}},
		{name: "baseDir outside the root", params: hostPathClass(map[string]string{"baseDir": "/etc"}), wantErr: []string{"outside the provisioner's --directory-root"}},
		{name: "baseDir a sibling of the root", params: hostPathClass(map[string]string{"baseDir": root + "-evil"}), wantErr: []string{"outside"}},
		{name: "baseDir is the root", params: hostPathClass(map[string]string{"baseDir": root})},
		{name: "source missing", params: hostPathClass(map[string]string{"source": ""}), wantErr: []string{`"source" must be`}},
		{name: "hostPath missing", params: hostPathClass(map[string]string{"hostPath": ""}), wantErr: []string{`"hostPath" must be an absolute path`}},
		{name: "hostPath relative", params: hostPathClass(map[string]string{"hostPath": "mnt"}), wantErr: []string{`"hostPath" must be an absolute path`}},
		{name: "nfs parameter with hostPath", params: hostPathClass(map[string]string{"nfsServer": "x"}), wantErr: []string{`"nfsServer" is only valid with source "nfs"`}},
		{name: "nfs without server or path", params: map[string]string{"backend": "directory", "baseDir": root, "source": "nfs"},
			wantErr: []string{`"nfsServer" must be`, `"nfsPath" must be`}},
		{name: "nfs with hostPath", params: map[string]string{"backend": "directory", "baseDir": root, "source": "nfs", "nfsServer": "s", "nfsPath": "/e", "hostPath": "/h"},
			wantErr: []string{`"hostPath" is only valid with source "hostPath"`}},
		{name: "maxVolumes zero", params: hostPathClass(map[string]string{"maxVolumes": "0"}), wantErr: []string{`"maxVolumes" must be a positive integer`}},
		{name: "maxCapacity not a size", params: hostPathClass(map[string]string{"maxCapacity": "big"}), wantErr: []string{`"maxCapacity" must be a positive size`}},
		{name: "maxCapacity zero", params: hostPathClass(map[string]string{"maxCapacity": "0"}), wantErr: []string{`"maxCapacity" must be a positive size`}},
		{name: "maxCapacity beyond a byte count", params: hostPathClass(map[string]string{"maxCapacity": "100Ei"}), wantErr: []string{`"maxCapacity" must be a positive size`}},
		{name: "maxVolumes not a number", params: hostPathClass(map[string]string{"maxVolumes": "ten"}), wantErr: []string{`"maxVolumes"`}},
		{name: "directoryMode not octal", params: hostPathClass(map[string]string{"directoryMode": "0789"}), wantErr: []string{`"directoryMode"`}},
		{name: "directoryMode too large", params: hostPathClass(map[string]string{"directoryMode": "17777"}), wantErr: []string{`"directoryMode"`}},
		{name: "selector key invalid", params: hostPathClass(map[string]string{"selectorKeys": "cache,bad key"}), wantErr: []string{`"bad key" is not a label key`}},
		{name: "Recycle", params: hostPathClass(nil), policy: corev1.PersistentVolumeReclaimRecycle, wantErr: []string{"Recycle is not supported"}},
		{name: "every problem at once", params: hostPathClass(map[string]string{"baseDir": "/etc", "maxVolumes": "-1", "colour": "blue"}),
			wantErr: []string{"outside", "maxVolumes", `"colour"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			class := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "c"}, Parameters: tt.params}
			if tt.policy != "" {
				class.ReclaimPolicy = ptr.To(tt.policy)
			}
			if tt.wffc {
				class.VolumeBindingMode = ptr.To(storagev1.VolumeBindingWaitForFirstConsumer)
			}
			got, err := ParseParameters(class, paramsBackends(root))
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if tt.want != nil && !equalParams(got, tt.want) {
					t.Errorf("params = %+v, want %+v", got, tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want one containing %q", tt.wantErr)
			}
			for _, s := range tt.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
		})
	}
}

// equalParams compares the parameters every class shares; the backend's
// view of the class (pool) is the backend's to test.
func equalParams(a, b *Params) bool {
	return a.Pool != nil && a.Backend == b.Backend && a.SelectorKeys.Equal(b.SelectorKeys) && a.MaxVolumes == b.MaxVolumes &&
		a.MaxVolumesPerNode == b.MaxVolumesPerNode && a.ReserveFor == b.ReserveFor && a.Namespaced == b.Namespaced &&
		a.KeyLabel == b.KeyLabel && a.KeyRequired == b.KeyRequired && a.MaxVolumesPerNamespace == b.MaxVolumesPerNamespace
}

func TestNodeAffinity(t *testing.T) {
	if got := NodeAffinity(&storagev1.StorageClass{}); got != nil {
		t.Errorf("no allowedTopologies: affinity %v, want none", got)
	}
	class := &storagev1.StorageClass{AllowedTopologies: []corev1.TopologySelectorTerm{
		{MatchLabelExpressions: []corev1.TopologySelectorLabelRequirement{{Key: "zone", Values: []string{"a", "b"}}, {Key: "share", Values: []string{"yes"}}}},
		{MatchLabelExpressions: []corev1.TopologySelectorLabelRequirement{{Key: "kubernetes.io/hostname", Values: []string{"n1"}}}},
	}}
	got := NodeAffinity(class)
	node := func(l map[string]string) *corev1.Node { return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: l}} }
	pv := &corev1.PersistentVolume{Spec: corev1.PersistentVolumeSpec{NodeAffinity: got}}
	for _, tt := range []struct {
		labels map[string]string
		want   bool
	}{
		{map[string]string{"zone": "b", "share": "yes"}, true},
		{map[string]string{"zone": "b"}, false},
		{map[string]string{"zone": "c", "share": "yes"}, false},
		{map[string]string{"kubernetes.io/hostname": "n1"}, true},
		{map[string]string{}, false},
	} {
		if ok, err := corev1helpers.MatchNodeSelectorTerms(node(tt.labels), pv.Spec.NodeAffinity.Required); err != nil || ok != tt.want {
			t.Errorf("node with %v fits = %v, want %v", tt.labels, ok, tt.want)
		}
	}
}
