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
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/reclaimable/reclaimable/e2e/cluster"
	"github.com/reclaimable/reclaimable/e2e/process"
)

var (
	current *cluster.Cluster
	binary  string
	// controllerKubeconfig is an administrator's kubeconfig that the
	// controllers' user may read.
	controllerKubeconfig string
	// realNode is the real node, nil when it did not start; then
	// realNodeErr says why.
	realNode    *cluster.Node
	realNodeErr error
	keep        = flag.Bool("keep-cluster", false, "leave the control plane running after the tests (its directory is printed)")
)

// Peer makes Main start the control plane and the real node as Kubernetes'
// own storage tests need them (cluster.Options.Peer). The runner of that
// suite, a test file built only with the tag peer, sets it before Main.
var Peer bool

// WithoutCRDs makes Main start the control plane without the project's
// CRDs (cluster.Options.WithoutCRDs), as a new cluster: the first test
// installs them, as the installation does. A test file built with a tag of
// its own sets it before Main.
var WithoutCRDs bool

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
	// The controllers' user runs the binary from here.
	if err := os.Chmod(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := strayKubeconfig(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if binary, err = process.Build(ctx, dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := buildCSI(ctx, dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	current, err = cluster.Start(ctx, cluster.Options{Dir: filepath.Join(dir, "cluster"), Log: os.Stderr, Peer: Peer, WithoutCRDs: WithoutCRDs})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if controllerKubeconfig, err = writeControllerKubeconfig(filepath.Join(dir, "controllers")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		current.Stop()
		return 1
	}
	realNode, realNodeErr = startRealNode(ctx)
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

// RealNodeName is the real node's name in every test run.
const RealNodeName = "real-node"

// startRealNode starts the real node unless the machine cannot run one and
// the run says it knows (cluster.NoRealNodeEnv); then it returns nil and
// the reason, and the tests that need the node say it.
func startRealNode(ctx context.Context) (*cluster.Node, error) {
	if err := cluster.NodeUnsupported(); err != nil {
		return nil, err
	}
	n, err := current.StartNode(ctx, RealNodeName)
	if err != nil {
		fmt.Fprintf(os.Stderr, "The real node did not start: %v\n", err)
	}
	return n, err
}

// RealNode is the real node, for a test that runs pods on it. Where it
// did not start, the test fails with the reason, or, when the machine
// cannot run one and cluster.NoRealNodeEnv gives a reason to go without,
// is skipped with both reasons.
func RealNode(t testing.TB) *cluster.Node {
	t.Helper()
	if realNode != nil {
		return realNode
	}
	if why := os.Getenv(cluster.NoRealNodeEnv); why != "" && cluster.NodeUnsupported() != nil {
		t.Skipf("no real node: %v; %s=%q", realNodeErr, cluster.NoRealNodeEnv, why)
	}
	t.Fatalf("no real node: %v (on a machine that cannot run one, set %s to the reason to skip the tests that need it)", realNodeErr, cluster.NoRealNodeEnv)
	return nil
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

// strayKubeconfig sets KUBECONFIG, for the whole run, to a kubeconfig of a
// cluster that is not there, as a developer's shell often names another
// cluster: nothing the test bed starts may follow it instead of the flags
// that name the local control plane (cluster.Environ).
func strayKubeconfig(dir string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["elsewhere"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1"}
	cfg.AuthInfos["elsewhere"] = &clientcmdapi.AuthInfo{Token: "not-this-cluster"}
	cfg.Contexts["elsewhere"] = &clientcmdapi.Context{Cluster: "elsewhere", AuthInfo: "elsewhere"}
	cfg.CurrentContext = "elsewhere"
	path := filepath.Join(dir, "stray.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return err
	}
	return os.Setenv(clientcmd.RecommendedConfigPathEnvVar, path)
}
