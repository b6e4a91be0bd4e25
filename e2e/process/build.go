package process

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/reclaimable/reclaimable/e2e/cluster"
)

// RepoRoot is the root of the reclaimable module.
func RepoRoot() string { return cluster.RepoRoot() }

// Build builds cmd/reclaimable into dir, as CI builds it, and returns the
// binary's path.
func Build(ctx context.Context, dir string) (string, error) {
	out := filepath.Join(dir, "reclaimable")
	if err := cluster.GoBuild(ctx, RepoRoot(), "./cmd/reclaimable", out); err != nil {
		return "", fmt.Errorf("building reclaimable: %w", err)
	}
	return out, nil
}
