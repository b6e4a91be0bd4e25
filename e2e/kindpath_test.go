//go:build e2e && peer

package e2e

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/reclaimable/reclaimable/e2e/framework"
	"github.com/reclaimable/reclaimable/e2e/process"
)

// readmeSection is the heading of README.md's path from git clone to a
// reused cache, whose first sh block the test runs.
const readmeSection = "## Try it on kind"

// readmeMaxCommands bounds that path: a command is one shell command, and
// a && b counts two.
const readmeMaxCommands = 15

// README.md's kind path, run as written, top to bottom, on the control
// plane of the peer build: its real node, untainted, runs the
// installation's own pods (the fake nodes are tainted), as kind's one node
// would. The kind and Docker steps are done as this test bed does them:
// kind create cluster is the test bed, kind load is the node's ctr images
// import of the same archive, docker exec runs its command on the machine
// of the real node. busybox:1.36, which no registry here serves, is the
// peer images' busybox under that name. Every other command runs as
// written, with the test bed's kubectl and kubeconfig; the last must say
// that the second pod found the first one's file.
func TestReadmeKindPathRunsTopToBottom(t *testing.T) {
	node := framework.RealNode(t)
	ctx := context.Background()
	commands := readmeCommands(t)
	if len(commands) > readmeMaxCommands {
		t.Errorf("README.md %q has %d commands, want %d at most: %q", readmeSection, len(commands), readmeMaxCommands, commands)
	}
	for _, c := range commands {
		// Without one, a reader waits for ever on what never comes.
		if (strings.Contains(c, " rollout status ") || strings.HasPrefix(c, "kubectl wait ")) && !strings.Contains(c, "--timeout=") {
			t.Errorf("README.md %q: %q waits without --timeout", readmeSection, c)
		}
	}
	if err := node.ImportBusyBox(ctx, os.Stderr, "docker.io/library/busybox:1.36"); err != nil {
		t.Fatal(err)
	}
	const share = "/var/lib/reclaimable"
	if _, err := os.Stat(share); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s exists before the README makes it (%v): a leftover of another run?", share, err)
	}
	t.Cleanup(func() { readmeCleanup(t, share) })

	kubectlDir := filepath.Dir(framework.Cluster().Kubectl())
	env := append(os.Environ(), "KUBECONFIG="+framework.Kubeconfig(), "PATH="+kubectlDir+":"+os.Getenv("PATH"))
	dockerExec := regexp.MustCompile(`^docker exec kind-control-plane sh -c '([^']*)'$`)
	var last string
	for _, c := range commands {
		switch {
		case strings.HasPrefix(c, "git clone "), strings.HasPrefix(c, "cd "), c == "kind create cluster":
			t.Logf("%s: the test bed, in this clone", c)
			continue
		case strings.HasPrefix(c, "kind load image-archive "):
			archive := filepath.Join(process.RepoRoot(), strings.TrimPrefix(c, "kind load image-archive "))
			if err := node.ImportImage(ctx, archive); err != nil {
				t.Fatalf("%s: %v", c, err)
			}
			continue
		case strings.HasPrefix(c, "docker exec "):
			m := dockerExec.FindStringSubmatch(c)
			if m == nil {
				t.Fatalf("%s: not a command on kind's node that the test knows", c)
			}
			c = m[1]
		case strings.HasPrefix(c, "kubectl ") || c == "make image":
		default:
			t.Fatalf("%s: a command the test does not know how to run here", c)
		}
		last = readmeRun(t, env, c)
	}
	if !strings.Contains(last, "written by reuse-1") {
		t.Errorf("the last command said %q, want the first pod's file, read by the second", last)
	}
}

// readmeCommands are the commands of the first sh block under readmeSection,
// comments left out, a && b split in two.
func readmeCommands(t *testing.T) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(process.RepoRoot(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var commands []string
	section, block := false, false
	for sc := bufio.NewScanner(f); sc.Scan(); {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "## "):
			section = line == readmeSection
		case section && !block && line == "```sh":
			block = true
		case block && line == "```":
			return commands
		case block:
			// A comment starts at " # " in these lines: none is in quotes.
			if i := strings.Index(line, " # "); i >= 0 {
				line = line[:i]
			}
			if line = strings.TrimSpace(line); line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			commands = append(commands, splitAnd(line)...)
		}
	}
	t.Fatalf("README.md has no sh block under %q", readmeSection)
	return nil
}

// splitAnd splits a shell line at each && outside quotes.
func splitAnd(line string) []string {
	var out []string
	var quote rune
	start := 0
	for i, r := range line {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case strings.HasPrefix(line[i:], "&&"):
			out = append(out, strings.TrimSpace(line[start:i]))
			start = i + 2
		}
	}
	return append(out, strings.TrimSpace(line[start:]))
}

// readmeRun runs command with sh in the repository, as a reader would, and
// returns its output.
func readmeRun(t *testing.T, env []string, command string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", command)
	cmd.Dir, cmd.Env = process.RepoRoot(), env
	out, err := cmd.CombinedOutput()
	t.Logf("$ %s\n%s", command, out)
	if err != nil {
		t.Fatalf("%s: %v", command, err)
	}
	return string(out)
}

// example is the path of manifests/examples/file.
func example(file string) string { return filepath.Join(manifestsDir(), "examples", file) }

// readmeCleanup removes what the README's path made: its pods and class,
// the installation (the peer suite installs its own), the pool's volumes,
// which its class retains, and the share.
func readmeCleanup(t *testing.T, share string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, args := range [][]string{
		{"delete", "--ignore-not-found", "--wait", "-f", example("reuse-1.yaml"), "-f", example("reuse-2.yaml")},
		{"delete", "--ignore-not-found", "--wait", "pvc", "reuse-cache"},
		{"delete", "--ignore-not-found", "--wait", "-k", manifestsDir()},
		{"delete", "--ignore-not-found", "--wait", "-f", example("storageclass.yaml")},
		{"delete", "--ignore-not-found", "--wait", "pv", "-l", "reclaimable-pv-releaser.kubernetes.io/managed-by=reclaimable"},
	} {
		if _, _, err := kubectl(ctx, args...); err != nil {
			t.Error(err)
		}
	}
	if err := os.RemoveAll(share); err != nil {
		t.Error(err)
	}
}
