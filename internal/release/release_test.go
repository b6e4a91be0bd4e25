package release

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// repoRoot is the repository's root, from this package's directory.
const repoRoot = "../.."

// VERSION, the manifests' image tags, kustomize's newTag and the chart's
// version and appVersion say one version; no image is latest.
func TestOneVersionEverywhere(t *testing.T) {
	if err := Check(repoRoot); err != nil {
		t.Fatalf("%v\nmake release VERSION=... writes one version everywhere", err)
	}
	for _, dir := range stamped {
		err := filepath.WalkDir(filepath.Join(repoRoot, dir), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := os.ReadFile(path)
			if err == nil && strings.Contains(string(b), Repository+":latest") {
				t.Errorf("%s installs %s:latest", path, Repository)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// Stamping a copy of the repository's files writes the new version
// everywhere the check looks, and nothing of the old one is left.
func TestStampWritesOneVersion(t *testing.T) {
	old, err := Version(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if err := os.CopyFS(filepath.Join(root, "manifests"), os.DirFS(filepath.Join(repoRoot, "manifests"))); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(filepath.Join(root, "charts"), os.DirFS(filepath.Join(repoRoot, "charts"))); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, VersionFile), []byte(old+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Stamp(root, "not-a-version"); err == nil {
		t.Fatal("Stamp took a version that is not one")
	}
	const next = "v9.8.7-rc.1"
	for range 2 { // again: nothing changes
		if err := Stamp(root, next); err != nil {
			t.Fatal(err)
		}
		if v, err := Version(root); err != nil || v != next {
			t.Fatalf("VERSION after stamping %s: %q, %v", next, v, err)
		}
		if err := Check(root); err != nil {
			t.Fatal(err)
		}
	}
	chart, err := os.ReadFile(filepath.Join(root, "charts", "reclaimable", "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(chart), "\nversion: 9.8.7-rc.1\n") || !strings.Contains(string(chart), "\nappVersion: "+next+"\n") {
		t.Errorf("Chart.yaml after stamping:\n%s", chart)
	}
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err == nil && strings.Contains(string(b), strings.TrimPrefix(old, "v")) {
			t.Errorf("%s still names %s", path, old)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The check finds a tag that is not VERSION's.
func TestCheckFindsAnotherVersion(t *testing.T) {
	root := t.TempDir()
	for _, dir := range stamped {
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, VersionFile), []byte("v1.2.3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "manifests", "d.yaml"), []byte("image: "+Repository+":latest\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := Check(root)
	if err == nil || !strings.Contains(err.Error(), "manifests/d.yaml: image "+Repository+" tag latest, want v1.2.3") {
		t.Fatalf("Check = %v", err)
	}
}
