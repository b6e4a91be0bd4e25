package process

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The benchmark, the demo and the other commands under e2e/cmd are
// programs, not tests: they must not link the testing package (and with it
// its flags and its init).
func TestCommandsDoNotLinkTesting(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "./e2e/cmd/...")
	cmd.Dir = RepoRoot()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	if deps := strings.Fields(string(out)); slices.Contains(deps, "testing") {
		t.Errorf("a command under e2e/cmd links testing; see go list -deps ./e2e/cmd/...")
	}
}
