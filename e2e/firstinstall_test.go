//go:build e2e && peer

package e2e

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/reclaimable/reclaimable/e2e/framework"
)

// The control plane of the peer build starts without the project's CRDs,
// as a new cluster: the chart's first install runs on it before the peer
// suite installs with kustomize.
func init() { framework.WithoutCRDs = true }

// firstInstall* name the release of the first install, apart from the
// peer suite's installation.
const (
	firstInstallNamespace = "first-system"
	firstInstallLifecycle = "first-lifecycle"
	firstInstallClass     = "first-cache"
)

// A first helm install on a cluster without the VolumePool CRD, with a
// VolumePool among its objects (examples.volumePools), installs the CRD
// first and the pool with it; uninstalling removes the pool, which belongs
// to the release, and leaves the CRD, which no release deletes (deleting it
// would delete every pool).
func TestHelmFirstInstallMakesTheCRDBeforeItsPools(t *testing.T) {
	ctx := context.Background()
	if _, err := volumePoolCRD(ctx); !apierrors.IsNotFound(err) {
		t.Fatalf("the VolumePool CRD before the install: %v, want none (framework.WithoutCRDs)", err)
	}
	const pool = "first-pool"
	helm(t, "install", map[string]any{
		"namespace": firstInstallNamespace, "lifecycleNamespace": firstInstallLifecycle,
		"controllerID": "first", "provisionerName": "first.example.com/reclaimable",
		// Its pods run on the real node, the one untainted: the share
		// is a directory of the test's, not the README's.
		"share": map[string]any{"hostPath": framework.ControllerDir(t)},
		"examples": map[string]any{
			"storageClasses": []any{map[string]any{
				"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": map[string]any{"name": firstInstallClass},
				"provisioner": "first.example.com/reclaimable", "reclaimPolicy": "Retain", "volumeBindingMode": "WaitForFirstConsumer",
				"parameters": map[string]any{"baseDir": "/var/lib/reclaimable/first"},
			}},
			"volumePools": []any{map[string]any{
				"apiVersion": "reclaimable.github.io/v1alpha1", "kind": "VolumePool", "metadata": map[string]any{"name": pool},
				"spec": map[string]any{"storageClassName": firstInstallClass, "maxVolumes": 2},
			}},
		},
	})
	if _, err := volumePools(t).Get(ctx, pool, metav1.GetOptions{}); err != nil {
		t.Fatalf("VolumePool %s after the first install: %v", pool, err)
	}
	helm(t, "uninstall", nil)
	if _, err := volumePools(t).Get(ctx, pool, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("VolumePool %s after uninstall: %v, want it gone with its release", pool, err)
	}
	if crd, err := volumePoolCRD(ctx); err != nil || crd.DeletionTimestamp != nil {
		t.Errorf("the VolumePool CRD after uninstall: %v, want it kept", err)
	}
	_ = framework.Client().StorageV1().StorageClasses().Delete(ctx, firstInstallClass, metav1.DeleteOptions{})
}
