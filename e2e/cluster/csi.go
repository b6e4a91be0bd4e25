package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
)

// ExternalProvisionerVersion is the CSI external-provisioner sidecar the
// tests run in front of their CSI driver, as clusters run it in front of
// theirs.
const ExternalProvisionerVersion = "v6.4.0"

// Binary names of the CSI parts.
const (
	ExternalProvisioner = "csi-provisioner"
	CSIDriver           = "csidriver"
)

const externalProvisionerModule = "github.com/kubernetes-csi/external-provisioner/v6"

// CSIDriverDir is the e2e/csidriver module: the tests' CSI driver.
func CSIDriverDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "csidriver")
}

// EnsureExternalProvisioner returns the path of the external-provisioner
// sidecar, built from the Go module proxy on first use and cached by
// version. It pins k8s.io/* versions of its own through replace
// directives, so it builds in its own module root, never in one of ours.
func EnsureExternalProvisioner(ctx context.Context, log io.Writer) (string, error) {
	dir, err := cacheDir("external-provisioner-" + ExternalProvisionerVersion)
	if err != nil {
		return "", err
	}
	what := "the CSI external-provisioner " + ExternalProvisionerVersion
	err = ensureCached(ctx, dir, []string{ExternalProvisioner}, what, log, buildExternalProvisioner)
	return filepath.Join(dir, ExternalProvisioner), err
}

func buildExternalProvisioner(ctx context.Context, out string, log io.Writer) error {
	neutral, err := os.MkdirTemp("", "csi-provisioner-download-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(neutral)
	var dl bytes.Buffer
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", externalProvisionerModule+"@"+ExternalProvisionerVersion)
	cmd.Dir, cmd.Stdout, cmd.Stderr = neutral, &dl, log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("downloading the external-provisioner: %w", err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(dl.Bytes(), &mod); err != nil || mod.Dir == "" {
		return errors.Join(errors.New("locating the external-provisioner's module directory"), err)
	}
	ldflags := "-s -w -X main.version=" + ExternalProvisionerVersion
	if err := goCommand(ctx, mod.Dir, log, []string{"CGO_ENABLED=0"}, "build", "-trimpath", "-ldflags", ldflags,
		"-o", filepath.Join(out, ExternalProvisioner), "./cmd/"+ExternalProvisioner); err != nil {
		return fmt.Errorf("building the external-provisioner: %w", err)
	}
	return nil
}

// BuildCSIDriver builds the tests' CSI driver into dir and returns its
// path. It is part of the tests, so it is built on every run, as the
// reclaimable binary is (Go's build cache makes that quick).
func BuildCSIDriver(ctx context.Context, dir string) (string, error) {
	out := filepath.Join(dir, CSIDriver)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, ".")
	cmd.Dir = CSIDriverDir()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the CSI driver: %w\n%s", err, b)
	}
	return out, nil
}
