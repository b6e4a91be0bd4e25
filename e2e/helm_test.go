//go:build e2e

package e2e

// charts/reclaimable, installed on the local control plane with the Helm
// SDK (the command of the e2e/chart module), as an administrator would
// install it with helm.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/reclaimable/reclaimable/e2e/cluster"
	"github.com/reclaimable/reclaimable/e2e/framework"
	"github.com/reclaimable/reclaimable/e2e/process"
)

// The release's settings: all renamed, apart from the kustomize
// installation's.
const (
	helmNamespace   = "reclaimable-helm"
	helmLifecycle   = "reclaimable-helm-lifecycle"
	helmID          = "helm"
	helmProvisioner = "helm.example.com/reclaimable"
)

// The chart installs, renamed (namespace, lifecycle namespace, controller
// ID and provisioner name), the controllers run as it renders them run the
// cycle under its ServiceAccounts, an upgrade with other values keeps the
// pool's volume and its data (the workload's next pod gets them back), a
// volume used in one namespace never goes to another's claim and a pool
// that says Scrub empties a volume before the next claim, and
// uninstalling removes the release but for the VolumePool CRD. Not
// parallel: the chart makes the cluster-wide objects the kustomize
// installation of the parallel tests makes too (ClusterRoles, admission
// policies), and is gone before they start.
func TestHelmChartRunsTheCycleAndAnUpgradeKeepsTheData(t *testing.T) {
	framework.RealNode(t)
	values := map[string]any{"namespace": helmNamespace, "lifecycleNamespace": helmLifecycle, "controllerID": helmID, "provisionerName": helmProvisioner,
		"imagePullSecrets": []any{map[string]any{"name": lifecyclePullSecret}}}
	helm(t, "install", values)
	uninstalled := false
	t.Cleanup(func() {
		if !uninstalled {
			helm(t, "uninstall", nil)
		}
	})
	ctx := context.Background()
	client := framework.Client()

	c := startInstalled(t, charted(t, values))
	c.wantSettings(t, helmNamespace, helmID, helmProvisioner, helmLifecycle)
	first := c.cycle(t, "build-1")

	// A values change: one podwatcher, more verbose logs.
	values["podwatcher"] = map[string]any{"replicas": 1}
	values["logging"] = map[string]any{"verbosity": 2}
	helm(t, "upgrade", values)
	d, err := client.AppsV1().Deployments(helmNamespace).Get(ctx, "reclaimable-podwatcher", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r := deref(d.Spec.Replicas, 0); r != 1 || !slices.Contains(d.Spec.Template.Spec.Containers[0].Args, "--v=2") {
		t.Fatalf("after the upgrade the podwatcher has %d replicas and arguments %v, want 1 and --v=2", r, d.Spec.Template.Spec.Containers[0].Args)
	}
	second := c.cycle(t, "build-2")
	if second.Name != first.Name {
		t.Fatalf("after the upgrade the workload's claim got volume %s, want %s, its volume before", second.Name, first.Name)
	}
	if b, err := os.ReadFile(filepath.Join(first.Spec.HostPath.Path, "cache-entry")); err != nil || string(b) != "kept" {
		t.Fatalf("the volume's data after the upgrade: %q, %v; want what the first pod left", b, err)
	}
	c.inv.Check(t, 10*time.Second)
	c.keepsNamespacesApartAndScrubs(t)

	c.stop()
	helm(t, "uninstall", nil)
	uninstalled = true
	for _, ns := range []string{helmNamespace, helmLifecycle} {
		if _, err := client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("namespace %s after uninstall: %v, want it gone", ns, err)
		}
	}
	if _, err := client.RbacV1().ClusterRoles().Get(ctx, "reclaimable-provisioner", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("ClusterRole reclaimable-provisioner after uninstall: %v, want it gone", err)
	}
	if _, err := client.CoreV1().PersistentVolumes().Get(ctx, first.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("the pool's volume %s after uninstall: %v, want it kept", first.Name, err)
	}
	// Kept, and so every VolumePool: Helm deletes no CRD of a chart's
	// crds/.
	if crd, err := volumePoolCRD(ctx); err != nil || crd.DeletionTimestamp != nil {
		t.Errorf("the VolumePool CRD after uninstall: %v, want it kept", err)
	}
}

// volumePoolCRD is the metadata of the VolumePool CRD.
func volumePoolCRD(ctx context.Context) (*metav1.PartialObjectMetadata, error) {
	const crd = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/volumepools.reclaimable.github.io"
	b, err := framework.Client().Discovery().RESTClient().Get().AbsPath(crd).DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	var obj metav1.PartialObjectMetadata
	return &obj, yaml.Unmarshal(b, &obj)
}

var chartCommand struct {
	once sync.Once
	path string
	err  error
}

// helm runs verb (install, upgrade, uninstall) on the release with values,
// through the e2e/chart module's command, built once per run.
func helm(t *testing.T, verb string, values map[string]any) {
	t.Helper()
	t.Logf("chart %s: %s", verb, chart(t, verb, values))
}

// chart runs the e2e/chart module's command, built once per run, with verb
// (install, upgrade, uninstall, template) on the release and values, and
// returns its standard output.
func chart(t *testing.T, verb string, values map[string]any) string {
	t.Helper()
	chartCommand.once.Do(func() {
		dir, err := os.MkdirTemp("", "chart-")
		if err != nil {
			chartCommand.err = err
			return
		}
		chartCommand.path = filepath.Join(dir, "chart")
		if err := cluster.GoBuild(context.Background(), filepath.Join(process.RepoRoot(), "e2e", "chart"), "./cmd/chart", chartCommand.path); err != nil {
			chartCommand.err = fmt.Errorf("building the chart command: %w", err)
		}
	})
	if chartCommand.err != nil {
		t.Fatal(chartCommand.err)
	}
	args := []string{verb, "--kubeconfig=" + framework.Kubeconfig(), "--chart=" + filepath.Join(process.RepoRoot(), "charts", "reclaimable")}
	if values != nil {
		b, err := yaml.Marshal(values)
		if err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(t.TempDir(), "values.yaml")
		if err := os.WriteFile(f, b, 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--values="+f)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, chartCommand.path, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chart %s: %v\n%s%s", verb, err, stdout.String(), stderr.String())
	}
	return stdout.String()
}
