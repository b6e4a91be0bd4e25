// Package framework runs the end-to-end tests of a test binary against one
// local control plane (package cluster) and the real reclaimable binary.
//
// A test package calls Main from TestMain; each test then works in its own
// namespace, with its own StorageClasses, controller ID and provisioner name,
// so that tests can share the cluster and run in parallel.
package framework

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/reclaimable/reclaimable/e2e/cluster"
)

var (
	current *cluster.Cluster
	binary  string
	keep    = flag.Bool("keep-cluster", false, "leave the control plane running after the tests (its directory is printed)")
)

// Main starts a control plane, builds the reclaimable binary, runs the
// tests and stops everything. The exit code is the tests'.
func Main(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "reclaimable-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if binary, err = BuildBinary(ctx, dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	current, err = cluster.Start(ctx, cluster.Options{Dir: filepath.Join(dir, "cluster"), Log: os.Stderr})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	if *keep {
		fmt.Fprintf(os.Stderr, "Control plane left running: export KUBECONFIG=%s\n", current.Kubeconfig)
		return code
	}
	current.Stop()
	if code == 0 {
		_ = os.RemoveAll(dir)
	} else {
		fmt.Fprintf(os.Stderr, "Control plane logs kept in %s\n", filepath.Join(dir, "cluster", "logs"))
	}
	return code
}

// RepoRoot is the root of the reclaimable module.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// BuildBinary builds cmd/reclaimable into dir, as CI builds it.
func BuildBinary(ctx context.Context, dir string) (string, error) {
	out := filepath.Join(dir, "reclaimable")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/reclaimable")
	cmd.Dir = RepoRoot()
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building reclaimable: %w\n%s", err, b)
	}
	return out, nil
}

// Cluster is the running control plane.
func Cluster() *cluster.Cluster { return current }

// Client is an administrator's client.
func Client() kubernetes.Interface { return current.Client }

// Config is an administrator's client configuration.
func Config() *rest.Config { return rest.CopyConfig(current.Config) }

// Kubeconfig is the path of an administrator's kubeconfig.
func Kubeconfig() string { return current.Kubeconfig }

// Binary is the path of the reclaimable binary under test.
func Binary() string { return binary }

var counter atomic.Int64

// Name returns a name unique within the test run, usable for any object.
func Name(prefix string) string {
	return fmt.Sprintf("%s-%d-%s", prefix, counter.Add(1), rand.String(4))
}

// Namespace creates a namespace for the test and deletes it at cleanup.
func Namespace(t testing.TB) string {
	t.Helper()
	name := Name(strings.ToLower(sanitize(t.Name())))
	ctx := context.Background()
	_, err := Client().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	t.Cleanup(func() {
		_ = Client().CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

// sanitize turns a test name into a DNS label prefix.
func sanitize(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case b.Len() > 0 && !strings.HasSuffix(b.String(), "-"):
			b.WriteByte('-')
		}
	}
	out := strings.Trim(b.String(), "-")
	if len(out) > 40 {
		out = strings.Trim(out[:40], "-")
	}
	if out == "" {
		out = "t"
	}
	return out
}

// CreateNode adds a fake node managed by kwok and waits until it is Ready.
// Nodes are cluster-wide and stay for the rest of the run.
func CreateNode(t testing.TB, name string, labels map[string]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := current.CreateNode(ctx, name, labels); err != nil {
		t.Fatal(err)
	}
}
