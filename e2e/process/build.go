package process

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
)

// RepoRoot is the root of the reclaimable module.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Build builds cmd/reclaimable into dir, as CI builds it, and returns the
// binary's path.
func Build(ctx context.Context, dir string) (string, error) {
	out := filepath.Join(dir, "reclaimable")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/reclaimable")
	cmd.Dir = RepoRoot()
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building reclaimable: %w\n%s", err, b)
	}
	return out, nil
}
