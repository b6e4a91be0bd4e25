//go:build e2e

// Package e2e holds the end-to-end tests: each runs the real reclaimable
// binary against a real local control plane (see package cluster).
package e2e

import (
	"testing"

	"github.com/reclaimable/reclaimable/e2e/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }
