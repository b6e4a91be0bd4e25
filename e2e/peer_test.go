//go:build e2e && peer

package e2e

import (
	"bytes"
	"context"
	"encoding/xml"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"

	"github.com/reclaimable/reclaimable/e2e/cluster"
	"github.com/reclaimable/reclaimable/e2e/framework"
	"github.com/reclaimable/reclaimable/e2e/objects"
	"github.com/reclaimable/reclaimable/e2e/process"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// This file, built with the tag peer (make peer), runs Kubernetes' own
// storage tests (k8s.io/kubernetes/test/e2e/storage/external, the suite
// every storage driver runs) against the project's provisioner: the peer
// suite of the module e2e/peer, one driver definition per backend, each a
// Delete class of the kustomize installation, whose controllers run as
// their Deployments run them. The control plane and the real node start as
// that suite needs them (framework.Peer).
func init() { framework.Peer = true }

var (
	peerFocus = flag.String("peer.focus", "", "run only the peer tests whose names match this regular expression (all by default)")
	peerProcs = flag.Int("peer.procs", 4, "how many processes run the peer tests in parallel")
)

// peerSkips are the tests of the selected patterns that do not run, each
// with its reason. A reason is something the test bed or a pool cannot or
// should not do; a pool that could but does not is a gap, not a reason.
var peerSkips = []struct{ name, why string }{
	{`disruptive \[Disruptive\] \[LinuxOnly\] Should test that pv (written before kubelet restart|used in a pod that is (force )?deleted while the kubelet is down)`,
		"stops and starts the kubelet over SSH; the test bed's node is a process of this machine, with no SSH"},
	{`subPath should unmount if pod is (force|gracefully) deleted while kubelet is down`,
		"stops and starts the kubelet over SSH; the test bed's node is a process of this machine, with no SSH"},
	{`\[Driver: reclaimable-class\] \[Testpattern: Generic Ephemeral-volume \(default fs\) \(immediate-binding\)\]`,
		"the test gives the pool class Immediate binding, its backing class stays WaitForFirstConsumer: a class pool's binding mode must be its backing class's, else its backing claims would never bind (docs/pools.md), and the claim is refused with InvalidStorageClassParameters"},
	{`volumeMode should not mount / map unused volumes in a pod`,
		"looks for the pod's volumes under /var/lib/kubelet on the node, through nsenter; the test bed's kubelet keeps its pods in a directory of its own (--root-dir), so that it leaves nothing behind on the machine"},
	{`\[Driver: reclaimable-(directory|local)\] .*read-write-once-pod .*should block a second pod from using an in-use ReadWriteOncePod volume on the same node`,
		"the second pod is given the node by name, past the scheduler, and the test waits for the kubelet to refuse the mount; the kubelet refuses it only through a CSI driver (NodePublish), and directory and local volumes are hostPath and local volumes, which it mounts itself. Through the scheduler the access mode holds: the preemption test of the same suite passes"},
	{`provisioning should provision storage with any volume data source`,
		"a pool's volume comes with what its last consumer left, so the provisioner refuses every claim with a data source (UnsupportedDataSource, docs/pools.md) rather than populate over it; the test's populator and validator images are in no registry the test bed reaches either"},
	{`\[Driver: reclaimable-local\] \[Testpattern: Generic Ephemeral-volume \(default fs\) \(immediate-binding\)\]`,
		"the test gives the class Immediate binding: a local volume is made on the node of its first consumer, which Immediate binding does not know yet (docs/pools.md), and the claim is refused with InvalidStorageClassParameters"},
}

func TestPeerKubernetesStorageTests(t *testing.T) {
	node := framework.RealNode(t)
	ctx := context.Background()
	out := filepath.Join(process.RepoRoot(), "_output", "peer")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	suite, ginkgo := filepath.Join(out, "peer.test"), filepath.Join(out, "ginkgo")
	for _, build := range [][]string{{"test", "-c", "-o", suite, "."}, {"build", "-o", ginkgo, "github.com/onsi/ginkgo/v2/ginkgo"}} {
		cmd := exec.CommandContext(ctx, "go", build...)
		cmd.Dir = cluster.PeerDir()
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building the peer suite: go %s: %v\n%s", strings.Join(build, " "), err, b)
		}
	}
	list := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes")
	list.Dir = cluster.PeerDir()
	source, err := list.Output()
	if err != nil {
		t.Fatalf("the Kubernetes module's directory: %v", err)
	}
	if err := node.ImportPeerImages(ctx, os.Stderr); err != nil {
		t.Fatal(err)
	}

	r := kustomized(t, manifestsDir())
	applyWithoutDeployments(t, r)
	c := startInstalled(t, r)
	csi := framework.StartCSIDriverOnRealNode(t)
	backing := framework.CreateClass(t, objects.NewClass(framework.Name("csi"), csi.Name, func(sc *storagev1.StorageClass) {
		sc.ReclaimPolicy = ptr.To(corev1.PersistentVolumeReclaimDelete)
		sc.VolumeBindingMode = ptr.To(storagev1.VolumeBindingWaitForFirstConsumer)
	}))
	drivers := []string{
		c.peerClass(t, "peer-directory", map[string]string{"backend": "directory", "source": "hostPath"}),
		c.peerClass(t, "peer-local", map[string]string{"backend": "local", "nodePath": t.TempDir()}),
		c.peerClass(t, "peer-class", map[string]string{"backend": "class", "backingClass": backing}),
	}

	focus := "External.Storage"
	if *peerFocus != "" {
		focus = *peerFocus
	}
	var skips []string
	for _, s := range peerSkips {
		skips = append(skips, s.name)
		t.Logf("skipped by name: %s: %s", s.name, s.why)
	}
	// ginkgo runs the tests in parallel processes, the [Serial] ones alone
	// at the end, as Kubernetes' own jobs run them: most of a test is
	// waiting for pods and volumes.
	args := []string{
		"--procs=" + strconv.Itoa(*peerProcs), "--focus=" + focus, "--skip=" + strings.Join(skips, "|"),
		"--junit-report=junit.xml", "--output-dir=" + out, "--timeout=2h", "--no-color", "--poll-progress-after=5m",
		suite, "--",
		"-kubeconfig=" + framework.Kubeconfig(),
		"-repo-root=" + strings.TrimSpace(string(source)),
		"-non-blocking-taints=" + cluster.FakeNodeTaint,
	}
	for _, d := range drivers {
		args = append(args, "-storage.testdriver="+d)
	}
	logPath := filepath.Join(out, "peer.log")
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	run := exec.CommandContext(ctx, ginkgo, args...)
	// Ginkgo's progress (a mark per test, each failure in full) in the
	// test's output as well.
	run.Stdout, run.Stderr = io.MultiWriter(log, os.Stdout), log
	t.Logf("running ginkgo %s (log in %s)", strings.Join(args, " "), logPath)
	if err := run.Run(); err != nil {
		t.Errorf("Kubernetes' storage tests: %v; the log is %s, the JUnit report %s", err, logPath, filepath.Join(out, "junit.xml"))
	}
	if err := summarizePeer(filepath.Join(out, "junit.xml"), filepath.Join(out, "summary.md")); err != nil {
		t.Errorf("summarizing the JUnit report: %v", err)
	}
	c.inv.Check(t, 10*time.Second)
}

// applyWithoutDeployments applies the rendered installation but for its
// Deployments: the real node, the one schedulable node, would run them,
// and the tests run the controllers as processes (startInstalled).
func applyWithoutDeployments(t *testing.T, r rendered) {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewYAMLSerializer(json.DefaultMetaFactory, scheme.Scheme, scheme.Scheme)
	for _, obj := range r {
		if _, ok := obj.(*appsv1.Deployment); ok {
			continue
		}
		buf.WriteString("---\n")
		if err := enc.Encode(obj.(runtime.Object), &buf); err != nil {
			t.Fatal(err)
		}
	}
	file := filepath.Join(t.TempDir(), "installation.yaml")
	if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, _, err := kubectl(ctx, "apply", "--server-side", "-f", file); err != nil {
		t.Fatal(err)
	}
	// The control plane started without the CRD (framework.WithoutCRDs):
	// the controllers watch VolumePools once it is served.
	if _, _, err := kubectl(ctx, "wait", "--for=condition=Established", "--timeout=60s", "crd/volumepools.reclaimable.github.io"); err != nil {
		t.Fatal(err)
	}
}

// peerClass creates the Delete class name of the installation, of
// parameters (the directory backend's share, a directory of the test's, is
// added), whose driver definition, e2e/peer/drivers/<backend>.yaml, names
// it; it returns that definition's path.
func (c *installedCycle) peerClass(t *testing.T, name string, params map[string]string) string {
	t.Helper()
	if params["backend"] == "directory" {
		base := c.shareDir(t, name)
		params["baseDir"], params["hostPath"] = base, base
	}
	framework.CreateClass(t, objects.NewClass(name, c.provisioner, func(sc *storagev1.StorageClass) {
		sc.Annotations = map[string]string{wellknown.ClassControllerID: c.id}
		sc.Parameters = params
		sc.ReclaimPolicy = ptr.To(corev1.PersistentVolumeReclaimDelete)
		sc.VolumeBindingMode = ptr.To(storagev1.VolumeBindingWaitForFirstConsumer)
		if params["backend"] == "directory" {
			// The share is a directory of this machine, which the real node
			// is: its volumes, and their lifecycle pods, go there.
			sc.AllowedTopologies = realNodeTopology()
		}
	}))
	return filepath.Join(cluster.PeerDir(), "drivers", params["backend"]+".yaml")
}

// junitReport is the part of Ginkgo's JUnit report the summary reads.
type junitReport struct {
	Suites []struct {
		Cases []struct {
			Name    string  `xml:"name,attr"`
			Status  string  `xml:"status,attr"`
			Time    float64 `xml:"time,attr"`
			Skipped *struct {
				Message string `xml:"message,attr"`
			} `xml:"skipped"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

var peerName = regexp.MustCompile(`External Storage \[Driver: ([^\]]+)\] \[Testpattern: (.+?)\] (\S+)`)

// summarizePeer writes, from the JUnit report, a table per driver of what
// ran, passed, failed and was skipped, by test pattern and suite, with the
// skips' reasons: the table docs/reliability.md gives.
func summarizePeer(report, out string) error {
	b, err := os.ReadFile(report)
	if err != nil {
		return err
	}
	var r junitReport
	if err := xml.Unmarshal(b, &r); err != nil {
		return err
	}
	type row struct {
		passed, failed, skipped int
		why                     map[string]int
	}
	rows := map[[3]string]*row{}
	for _, s := range r.Suites {
		for _, c := range s.Cases {
			m := peerName.FindStringSubmatch(c.Name)
			if m == nil {
				continue
			}
			key := [3]string{m[1], m[2], m[3]}
			if rows[key] == nil {
				rows[key] = &row{why: map[string]int{}}
			}
			switch c.Status {
			case "passed":
				rows[key].passed++
			case "skipped":
				rows[key].skipped++
				if c.Skipped != nil {
					rows[key].why[skipReason(c.Skipped.Message)]++
				}
			default:
				rows[key].failed++
			}
		}
	}
	keys := slices.SortedFunc(maps.Keys(rows), func(a, b [3]string) int {
		return strings.Compare(strings.Join(a[:], "\x00"), strings.Join(b[:], "\x00"))
	})
	var w strings.Builder
	fmt.Fprintln(&w, "| driver | pattern | suite | passed | failed | skipped | why skipped |")
	fmt.Fprintln(&w, "|---|---|---|---|---|---|---|")
	for _, k := range keys {
		r := rows[k]
		var why []string
		for _, reason := range slices.Sorted(maps.Keys(r.why)) {
			why = append(why, fmt.Sprintf("%s (%d)", reason, r.why[reason]))
		}
		fmt.Fprintf(&w, "| %s | %s | %s | %d | %d | %d | %s |\n", k[0], k[1], k[2], r.passed, r.failed, r.skipped, strings.Join(why, "; "))
	}
	return os.WriteFile(out, []byte(w.String()), 0o644)
}

// skipReason is the first line of a skip's message, without Ginkgo's
// prefix and the location.
func skipReason(msg string) string {
	msg, _, _ = strings.Cut(msg, "\n")
	msg = strings.TrimPrefix(msg, "skipped - ")
	return strings.ReplaceAll(strings.TrimSpace(msg), "|", "/")
}
