package lifecycle

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
		if err := CheckDirName(name); err == nil {
			t.Errorf("CheckDirName(%q) accepted a hostile name", name)
		}
	}
	for _, name := range []string{"pvc-0b5e6f7a-1c2d-4e5f-8a9b-0c1d2e3f4a5b", "a", "pool-7.v2"} {
		if err := CheckDirName(name); err != nil {
			t.Errorf("CheckDirName(%q) = %v, want nil", name, err)
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
	d := Dirs{Root: root}

	// A link planted where a volume directory will be: neither create nor
	// remove may follow it out of the base directory.
	if err := os.Symlink(outside, filepath.Join(base, "pvc-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "precious"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := d.Create(base, "pvc-link", 0o777); err == nil {
		t.Error("create accepted a symbolic link as a volume directory")
	}
	if err := d.Remove(base, "pvc-link"); err != nil {
		t.Errorf("remove of a link: %v", err)
	}
	if _, err := os.Stat(filepath.Join(outside, "precious")); err != nil {
		t.Errorf("remove followed a link out of the base directory: %v", err)
	}

	// A base directory that is a link out of the root is refused.
	if err := os.Symlink(outside, filepath.Join(root, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := d.Create(filepath.Join(root, "escape"), "pvc-a", 0o777); err == nil {
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
		if err := d.Create(tt.baseDir, tt.name, 0o777); err == nil {
			t.Errorf("create(%q, %q) accepted a path outside the root", tt.baseDir, tt.name)
		}
		if err := d.Remove(tt.baseDir, tt.name); err == nil {
			t.Errorf("remove(%q, %q) accepted a path outside the root", tt.baseDir, tt.name)
		}
	}
}

func TestDirectoriesCreateAndRemove(t *testing.T) {
	root := t.TempDir()
	d := Dirs{Root: root}
	dir := filepath.Join(root, "pvc-1")

	if err := d.Create(root, "pvc-1", 0o770|fs.ModeSetgid); err != nil {
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
	if err := d.Create(root, "pvc-1", 0o777); err != nil {
		t.Fatalf("create is not idempotent: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "data")); err != nil {
		t.Errorf("a repeated create lost data: %v", err)
	}
	// A file where the directory should be is an error, not a volume.
	if err := os.WriteFile(filepath.Join(root, "pvc-file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := d.Create(root, "pvc-file", 0o777); err == nil {
		t.Error("create accepted a file as a volume directory")
	}

	if err := d.Remove(root, "pvc-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("directory still there after remove: %v", err)
	}
	if err := d.Remove(root, "pvc-1"); err != nil {
		t.Errorf("remove of a directory already gone: %v", err)
	}
	// A missing base directory (a share that is not mounted) is an error:
	// the volume's data may well still exist.
	if err := d.Remove(filepath.Join(root, "unmounted"), "pvc-1"); err == nil {
		t.Error("remove reported success for a base directory that does not exist")
	}
}

// A member's directory is measured by the blocks its files take, links
// not followed; a walk out of time is partial.
func TestDirectoryUsage(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "pv-1")
	if err := os.MkdirAll(filepath.Join(dir, "objects"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "objects", "blob"), make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(outside, make([]byte, 4<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	d := Dirs{Root: root}
	bytes, partial, err := d.Usage(root, "pv-1", time.Now().Add(time.Minute))
	if err != nil || partial || bytes < 1<<20 || bytes >= 2<<20 {
		t.Errorf("usage = %d, partial %v, %v; want about 1 MiB, complete, the link not followed", bytes, partial, err)
	}
	if _, partial, err := d.Usage(root, "pv-1", time.Now().Add(-time.Second)); err != nil || !partial {
		t.Errorf("usage out of time: partial %v, %v; want partial", partial, err)
	}
	if _, _, err := d.Usage(root, "../escape", time.Now().Add(time.Minute)); err == nil {
		t.Error("usage of a name outside the base: no error")
	}
}
