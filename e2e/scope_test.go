//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	volumehelpers "k8s.io/component-helpers/storage/volume"

	"github.com/reclaimable/reclaimable/e2e/framework"
	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// fill writes a file into volume's directory, as a consumer would, and
// registers it with the invariant checker: it must survive the cycle.
func (r *poolCase) fill(volume string) string {
	r.t.Helper()
	path := filepath.Join(r.directory(volume), "token")
	if err := os.WriteFile(path, []byte("tenant data"), 0o600); err != nil {
		r.t.Fatal(err)
	}
	r.inv.Marker(volume, path)
	return filepath.Base(path)
}

// holds reports whether volume's directory has the file name.
func (r *poolCase) holds(volume, name string) bool {
	r.t.Helper()
	_, err := os.Stat(filepath.Join(r.directory(volume), name))
	if err != nil && !os.IsNotExist(err) {
		r.t.Fatal(err)
	}
	return err == nil
}

func (r *poolCase) directory(volume string) string {
	r.t.Helper()
	pv, err := framework.Client().CoreV1().PersistentVolumes().Get(context.Background(), volume, metav1.GetOptions{})
	if err != nil {
		r.t.Fatal(err)
	}
	if pv.Spec.HostPath == nil {
		r.t.Fatalf("volume %s is not a host path", volume)
	}
	return pv.Spec.HostPath.Path
}

// filledAndHeld has a claim ns/cache bound, fills its volume and deletes
// the claim: the volume is back in the pool, held for ns. It returns the
// volume and the file's name.
func (r *poolCase) filledAndHeld(ns string) (volume, file string) {
	r.t.Helper()
	r.create(ns, "cache")
	volume = r.boundTo(ns, "cache")
	file = r.fill(volume)
	r.deleteGone(ns, "cache")
	r.heldFor(volume, ns)
	return volume, file
}

// heldFor waits until volume is back in the pool, held for the claims of
// namespace ns alone.
func (r *poolCase) heldFor(volume, ns string) {
	r.t.Helper()
	waitHeldFor(r.t, volume, ns)
}

// waitHeldFor waits until volume is back in the pool, held for the claims
// of namespace ns alone.
func waitHeldFor(t *testing.T, volume, ns string) {
	t.Helper()
	framework.Eventually(t, 30*time.Second, func(ctx context.Context) (bool, error) {
		pv, err := framework.Client().CoreV1().PersistentVolumes().Get(ctx, volume, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		held, ok := pools.HeldFor(pv)
		return pv.Status.Phase == corev1.VolumeAvailable && ok && held == ns && pv.Spec.ClaimRef.Namespace == ns, nil
	}, fmt.Sprintf("volume %s to be held for namespace %s", volume, ns))
}

// Under the default reuseScope, namespace, a volume filled in one namespace
// goes back to that namespace only: a claim of another namespace, even of
// the same name and arriving together with one of the volume's namespace,
// gets a new volume and never sees the data; the volume's namespace still
// gets it back warm.
func TestReuseScopeNamespaceKeepsAVolumeInItsNamespace(t *testing.T) {
	t.Parallel()
	a, b := framework.Namespace(t), framework.Namespace(t)
	r := newPoolCase(t, nil, a, b)
	filled, file := r.filledAndHeld(a)

	r.create(b, "cache")
	r.create(a, "build")
	other := r.boundTo(b, "cache")
	if other == filled {
		t.Fatalf("claim %s/cache got volume %s, last bound in namespace %s", b, filled, a)
	}
	if r.holds(other, file) {
		t.Errorf("the claim of namespace %s sees the file of namespace %s", b, a)
	}
	if got := r.boundTo(a, "build"); got != filled {
		t.Errorf("claim %s/build got volume %s, want %s of its own namespace, warm", a, got, filled)
	} else if !r.holds(got, file) {
		t.Errorf("volume %s came back to namespace %s without its data", got, a)
	}
	r.inv.Check(t, 10*time.Second)
}

// The PV controller binds an Available volume with an empty claimRef to any
// claim that names it in spec.volumeName. A held volume names its last
// claim, so a claim made by hand in another namespace stays Pending.
func TestReuseScopeNamespaceRefusesAClaimThatNamesTheVolume(t *testing.T) {
	t.Parallel()
	a, b := framework.Namespace(t), framework.Namespace(t)
	r := newPoolCase(t, nil, a, b)
	filled, _ := r.filledAndHeld(a)

	createClaim(t, b, "by-hand", r.class, "1Gi", filled)
	waitEvent(t, b, "PersistentVolumeClaim", "by-hand", "FailedBinding")
	c, err := framework.Client().CoreV1().PersistentVolumeClaims(b).Get(context.Background(), "by-hand", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Status.Phase != corev1.ClaimPending {
		t.Errorf("claim %s/by-hand naming volume %s is %s, want Pending", b, filled, c.Status.Phase)
	}
	r.heldFor(filled, a)
	r.inv.Check(t, 10*time.Second)
}

// The hold is in the volume, not in a controller's memory: with the
// provisioner and the releaser down after the release, the PV controller
// still passes the volume over for a claim of another namespace, which gets
// a new volume once they are back.
func TestReuseScopeNamespaceHoldsWhileControllersAreDown(t *testing.T) {
	t.Parallel()
	a, b := framework.Namespace(t), framework.Namespace(t)
	r := newPoolCase(t, nil, a, b)
	filled, _ := r.filledAndHeld(a)
	r.provisioner.Stop()
	r.releaser.Stop()

	r.create(b, "cache")
	// The PV controller found nothing to bind and handed the claim to the
	// provisioner, which is down.
	framework.Eventually(t, 30*time.Second, func(ctx context.Context) (bool, error) {
		c, err := framework.Client().CoreV1().PersistentVolumeClaims(b).Get(ctx, "cache", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return c.Annotations[volumehelpers.AnnStorageProvisioner] == r.provisionerName, nil
	}, "the PV controller to hand the claim to the provisioner")
	r.start()
	if got := r.boundTo(b, "cache"); got == filled {
		t.Errorf("claim %s/cache got volume %s, last bound in namespace %s", b, filled, a)
	}
	r.inv.Check(t, 10*time.Second)
}

// Under reuseScope cluster a released volume is free for any claim, data
// included, as docs/releaser.md warns.
func TestReuseScopeClusterSharesAcrossNamespaces(t *testing.T) {
	t.Parallel()
	a, b := framework.Namespace(t), framework.Namespace(t)
	clusterScopeShares(t, newPoolCase(t, map[string]string{wellknown.ReuseScope: wellknown.ReuseScopeCluster}, a, b), a, b)
}

// The same with reuseScope on the class's VolumePool.
func TestVolumePoolReuseScopeClusterSharesAcrossNamespaces(t *testing.T) {
	t.Parallel()
	a, b := framework.Namespace(t), framework.Namespace(t)
	clusterScopeShares(t, newVolumePoolCase(t, map[string]string{wellknown.ReuseScope: wellknown.ReuseScopeCluster}, a, b), a, b)
}

func clusterScopeShares(t *testing.T, r *poolCase, a, b string) {
	r.create(a, "cache")
	filled := r.boundTo(a, "cache")
	file := r.fill(filled)
	r.deleteGone(a, "cache")
	// Reserved for a/cache (the default reserveFor), not held for a: a
	// claim of b takes the reservation rather than grow the pool.
	r.reservedFor(filled, a, "cache")
	if pv, err := framework.Client().CoreV1().PersistentVolumes().Get(context.Background(), filled, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	} else if _, held := pools.HeldFor(pv); held {
		t.Errorf("volume %s is held for a namespace under reuseScope cluster: %v", filled, pv.Annotations)
	}

	r.create(b, "cache")
	if got := r.boundTo(b, "cache"); got != filled {
		t.Errorf("claim %s/cache got volume %s, want %s, the pool's only member", b, got, filled)
	} else if !r.holds(got, file) {
		t.Errorf("volume %s reached namespace %s without its data", got, b)
	}
	r.inv.Check(t, 10*time.Second)
}
