package provisioner

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestCheckDirNameRefusesHostileNames(t *testing.T) {
	hostile := []string{
		"",
		".",
		"..",
		"../etc",
		"a/../../b",
		"a/b",
		"/etc",
		`a\b`,
		"a\x00b",
		".hidden",
		"-rf",
		"pvc-ÄÖ",
		"PVC-UPPER",
		"a b",
		"a..b",
		"~",
		"$(reboot)",
		strings.Repeat("a", 254),
	}
	for _, name := range hostile {
		if err := checkDirName(name); err == nil {
			t.Errorf("checkDirName(%q) accepted a hostile name", name)
		}
	}
	for _, name := range []string{"pvc-0b5e6f7a-1c2d-4e5f-8a9b-0c1d2e3f4a5b", "a", "pool-7.v2"} {
		if err := checkDirName(name); err != nil {
			t.Errorf("checkDirName(%q) = %v, want nil", name, err)
		}
	}
}

func TestDirectoriesStayInsideTheRoot(t *testing.T) {
	root := t.TempDir()
	base := filepath.Join(root, "caches")
	outside := t.TempDir()
	if err := os.Mkdir(base, 0o755); err != nil {
		t.Fatal(err)
	}
	d := directories{root: root}

	// A link planted where a volume directory will be: neither create nor
	// remove may follow it out of the base directory.
	if err := os.Symlink(outside, filepath.Join(base, "pvc-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "precious"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := d.create(base, "pvc-link", 0o777); err == nil {
		t.Error("create accepted a symbolic link as a volume directory")
	}
	if err := d.remove(base, "pvc-link"); err != nil {
		t.Errorf("remove of a link: %v", err)
	}
	if _, err := os.Stat(filepath.Join(outside, "precious")); err != nil {
		t.Errorf("remove followed a link out of the base directory: %v", err)
	}

	// A base directory that is a link out of the root is refused.
	if err := os.Symlink(outside, filepath.Join(root, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := d.create(filepath.Join(root, "escape"), "pvc-a", 0o777); err == nil {
		t.Error("create went through a base directory that links out of the root")
	}
	if _, err := os.Stat(filepath.Join(outside, "pvc-a")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a directory was created outside the root: %v", err)
	}

	for _, tt := range []struct{ baseDir, name string }{
		{"/etc", "pvc-a"},
		{root + "/../x", "pvc-a"},
		{base, "../../x"},
		{base, "/tmp/x"},
		{"caches", "pvc-a"},
	} {
		if err := d.create(tt.baseDir, tt.name, 0o777); err == nil {
			t.Errorf("create(%q, %q) accepted a path outside the root", tt.baseDir, tt.name)
		}
		if err := d.remove(tt.baseDir, tt.name); err == nil {
			t.Errorf("remove(%q, %q) accepted a path outside the root", tt.baseDir, tt.name)
		}
	}
}

func TestDirectoriesCreateAndRemove(t *testing.T) {
	root := t.TempDir()
	d := directories{root: root}
	dir := filepath.Join(root, "pvc-1")

	if err := d.create(root, "pvc-1", 0o770|fs.ModeSetgid); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode() & (fs.ModePerm | fs.ModeSetgid); got != 0o770|fs.ModeSetgid {
		t.Errorf("mode = %v, want %v (the umask must not apply)", got, 0o770|fs.ModeSetgid)
	}
	// A second attempt for the same volume reuses the directory as it is.
	if err := os.WriteFile(filepath.Join(dir, "data"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := d.create(root, "pvc-1", 0o777); err != nil {
		t.Fatalf("create is not idempotent: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "data")); err != nil {
		t.Errorf("a repeated create lost data: %v", err)
	}
	// A file where the directory should be is an error, not a volume.
	if err := os.WriteFile(filepath.Join(root, "pvc-file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := d.create(root, "pvc-file", 0o777); err == nil {
		t.Error("create accepted a file as a volume directory")
	}

	if err := d.remove(root, "pvc-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("directory still there after remove: %v", err)
	}
	if err := d.remove(root, "pvc-1"); err != nil {
		t.Errorf("remove of a directory already gone: %v", err)
	}
	// A missing base directory (a share that is not mounted) is an error:
	// the volume's data may well still exist.
	if err := d.remove(filepath.Join(root, "unmounted"), "pvc-1"); err == nil {
		t.Error("remove reported success for a base directory that does not exist")
	}
}

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
