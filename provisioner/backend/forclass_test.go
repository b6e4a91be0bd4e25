package backend

import (
	"io/fs"
	"path"
	"path/filepath"
	"strings"
	"testing"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/reclaimable/reclaimable/provisioner/lifecycle"
)

const testRoot = "/var/lib/reclaimable"

func forClass(t *testing.T, params map[string]string, wffc bool) (Class, []error) {
	t.Helper()
	class := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "c"}, Parameters: params}
	if wffc {
		mode := storagev1.VolumeBindingWaitForFirstConsumer
		class.VolumeBindingMode = &mode
	}
	deps := Deps{Provisioner: testProvisioner, DirectoryRoot: testRoot, Pods: lifecycle.NewPods(nil, "lifecycle", "reclaimable:test", 0, nil, nil)}
	return New(deps)[params["backend"]].ForClass(class)
}

// Each backend reads its own parameters into its view of the class.
func TestForClassReadsItsParameters(t *testing.T) {
	for _, tt := range []struct {
		name   string
		params map[string]string
		wffc   bool
		want   Class
	}{
		{"directory, hostPath, defaults", map[string]string{"backend": "directory", "baseDir": testRoot + "/caches", "source": "hostPath", "hostPath": "/mnt/caches"}, false,
			&directoryClass{baseDir: testRoot + "/caches", source: "hostPath", hostPath: "/mnt/caches", directoryMode: 0o777}},
		{"directory, nfs, every option", map[string]string{"backend": "directory", "baseDir": testRoot, "source": "nfs", "nfsServer": "nfs.example.com",
			"nfsPath": "/export/caches", "directoryMode": "2775"}, false,
			&directoryClass{baseDir: testRoot, source: "nfs", nfsServer: "nfs.example.com", nfsPath: "/export/caches", directoryMode: 0o775 | fs.ModeSetgid}},
		{"local", map[string]string{"backend": "local", "nodePath": "/var/lib/caches", "directoryMode": "0775"}, true,
			&localClass{nodePath: "/var/lib/caches", directoryMode: 0o775}},
		{"static", map[string]string{"backend": "static"}, false, staticClass{name: "c"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, errs := forClass(t, tt.params, tt.wffc)
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			if !sameClass(got, tt.want) {
				t.Errorf("ForClass = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func sameClass(a, b Class) bool {
	switch x := a.(type) {
	case *directoryClass:
		y, ok := b.(*directoryClass)
		return ok && x.baseDir == y.baseDir && x.source == y.source && x.hostPath == y.hostPath &&
			x.nfsServer == y.nfsServer && x.nfsPath == y.nfsPath && x.directoryMode == y.directoryMode
	case *localClass:
		y, ok := b.(*localClass)
		return ok && x.nodePath == y.nodePath && x.directoryMode == y.directoryMode
	}
	return a == b
}

// FuzzForClass feeds arbitrary parameters to the backends. Whatever the
// input, none may panic, and a class one accepts keeps every volume inside
// the directory root (directory) or below a clean node path (local).
func FuzzForClass(f *testing.F) {
	for _, seed := range []string{
		"backend=directory\nbaseDir=/var/lib/reclaimable/caches\nsource=hostPath\nhostPath=/mnt/caches",
		"backend=directory\nbaseDir=/var/lib/reclaimable/../../etc\nsource=hostPath\nhostPath=/etc",
		"backend=directory\nbaseDir=/var/lib/reclaimable/x\nsource=nfs\nnfsServer=nfs.example.com\nnfsPath=/export\ndirectoryMode=2775",
		"backend=static",
		"backend=local\nnodePath=/var/lib/caches\ndirectoryMode=0775",
		"backend=local\nnodePath=/var/lib/../../etc",
		"backend=local\nnodePath=/",
		"backend=local\nnodePath=/x\nlifecycleTemplates=quota",
		"backend=directory\ndirectoryMode=99999999999999999999",
		"backend=directory\nbaseDir=/var/lib/reclaimable\x00/x\nsource=hostPath\nhostPath=relative",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, input string) {
		in := fuzzParameters(input)
		if b := in["backend"]; b != "directory" && b != "local" && b != "static" {
			return
		}
		pool, errs := forClass(t, in, true)
		if len(errs) > 0 {
			return
		}
		switch c := pool.(type) {
		case *localClass:
			if !path.IsAbs(c.nodePath) || path.Clean(c.nodePath) != c.nodePath || c.nodePath == "/" {
				t.Fatalf("accepted nodePath %q", c.nodePath)
			}
		case *directoryClass:
			if !filepath.IsAbs(c.baseDir) || filepath.Clean(c.baseDir) != c.baseDir || !lifecycle.Within(testRoot, c.baseDir) {
				t.Fatalf("accepted baseDir %q outside %s", c.baseDir, testRoot)
			}
			if c.directoryMode&^(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != 0 {
				t.Fatalf("accepted directory mode %o", c.directoryMode)
			}
		}
	})
}

// fuzzParameters reads a fuzzer's input as StorageClass parameters, one
// key=value per line.
func fuzzParameters(input string) map[string]string {
	in := map[string]string{}
	for _, line := range strings.Split(input, "\n") {
		k, v, _ := strings.Cut(line, "=")
		in[k] = v
	}
	return in
}
