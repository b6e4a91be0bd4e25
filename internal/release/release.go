// Package release names, versions and builds the reclaimable image. The
// version is the file VERSION at the repository's root; make image, make
// release and the end-to-end test bed's node build the image with this
// code, so the image a user loads is the one the tests run.
package release

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/reclaimable/reclaimable/internal/ociimage"
)

// Repository is the image's repository, as the manifests and the chart
// name it.
const Repository = "ghcr.io/reclaimable/reclaimable"

// VersionFile is the one place of the version, relative to the root.
const VersionFile = "VERSION"

// semver is a version: vMAJOR.MINOR.PATCH, with an optional pre-release.
var semver = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`)

// ValidVersion says why version is not a version, or nil.
func ValidVersion(version string) error {
	if !semver.MatchString(version) {
		return fmt.Errorf("version %q is not vMAJOR.MINOR.PATCH[-PRERELEASE]", version)
	}
	return nil
}

// Version reads the version of the repository at root.
func Version(root string) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, VersionFile))
	if err != nil {
		return "", err
	}
	v := strings.TrimSpace(string(b))
	return v, ValidVersion(v)
}

// Ref is the image of version.
func Ref(version string) string { return Repository + ":" + version }

// BuildImage builds cmd/reclaimable of the module at root for linux on
// each of archs, as make build builds it with version stamped, into
// binDir, and returns the image layout of ref: the static binary as
// /reclaimable, run as user 65532, one manifest per platform.
func BuildImage(ctx context.Context, root, version, ref string, archs []string, binDir string) (ociimage.Layout, error) {
	var images []ociimage.Image
	for _, arch := range archs {
		bin := filepath.Join(binDir, "reclaimable-linux-"+arch)
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w -X main.version="+version, "-o", bin, "./cmd/reclaimable")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("building reclaimable for linux/%s: %w\n%s", arch, err, out)
		}
		b, err := os.ReadFile(bin)
		if err != nil {
			return nil, err
		}
		images = append(images, ociimage.Image{OS: "linux", Arch: arch, Name: "reclaimable", Program: b, User: "65532:65532"})
	}
	return ociimage.Build(ref, images...)
}

// The places a version is written besides VERSION: the image's tag in the
// manifests and the chart, kustomize's newTag, the chart's version and
// appVersion.
var (
	imageTag   = regexp.MustCompile(regexp.QuoteMeta(Repository) + `:([^\s"'@]+)`)
	newTag     = regexp.MustCompile(`(?m)^(\s*newTag:\s*)(\S+)$`)
	chartLines = regexp.MustCompile(`(?m)^(version|appVersion):\s*(\S+)$`)
)

// stamped are the directories whose YAML files name the version.
var stamped = []string{"manifests", "charts"}

// Stamp writes version into VERSION and everywhere the manifests and the
// chart name it; each file is replaced whole, so a crash leaves every file
// either as it was or stamped, and stamping again finishes the job.
func Stamp(root, version string) error {
	if err := ValidVersion(version); err != nil {
		return err
	}
	err := walkYAML(root, func(path string, b []byte) error {
		out := imageTag.ReplaceAll(b, []byte(Repository+":"+version))
		out = newTag.ReplaceAll(out, []byte("${1}"+version))
		if filepath.Base(path) == "Chart.yaml" {
			out = chartLines.ReplaceAllFunc(out, func(line []byte) []byte {
				key, _, _ := strings.Cut(string(line), ":")
				if key == "version" {
					return []byte("version: " + strings.TrimPrefix(version, "v"))
				}
				return []byte("appVersion: " + version)
			})
		}
		if string(out) == string(b) {
			return nil
		}
		return writeFile(path, out)
	})
	if err != nil {
		return err
	}
	return writeFile(filepath.Join(root, VersionFile), []byte(version+"\n"))
}

// Check says where the manifests and the chart of root name a version
// other than VERSION's, or an image tag that is no version (latest).
func Check(root string) error {
	version, err := Version(root)
	if err != nil {
		return err
	}
	var errs []error
	found := 0
	err = walkYAML(root, func(path string, b []byte) error {
		rel, _ := filepath.Rel(root, path)
		check := func(what, got, want string) {
			found++
			if got != want {
				errs = append(errs, fmt.Errorf("%s: %s %s, want %s (%s)", rel, what, got, want, VersionFile))
			}
		}
		for _, m := range imageTag.FindAllSubmatch(b, -1) {
			check("image "+Repository+" tag", string(m[1]), version)
		}
		for _, m := range newTag.FindAllSubmatch(b, -1) {
			check("newTag", string(m[2]), version)
		}
		if filepath.Base(path) == "Chart.yaml" {
			for _, m := range chartLines.FindAllSubmatch(b, -1) {
				want := version
				if string(m[1]) == "version" {
					want = strings.TrimPrefix(version, "v")
				}
				check(string(m[1]), string(m[2]), want)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if found == 0 {
		errs = append(errs, fmt.Errorf("no file under %v names a version", stamped))
	}
	return errors.Join(errs...)
}

// walkYAML calls f with each YAML file under the stamped directories of
// root and its content.
func walkYAML(root string, f func(path string, b []byte) error) error {
	for _, dir := range stamped {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || (filepath.Ext(path) != ".yaml" && filepath.Ext(path) != ".yml") {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			return f(path, b)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// writeFile replaces path with b through a rename: never half written.
func writeFile(path string, b []byte) error {
	fi, err := os.Stat(path)
	mode := fs.FileMode(0o644)
	if err == nil {
		mode = fi.Mode().Perm()
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), mode); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
