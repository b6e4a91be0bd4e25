//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/reclaimable/reclaimable/apis/reclaimable/v1alpha1"
	"github.com/reclaimable/reclaimable/e2e/cluster"
	"github.com/reclaimable/reclaimable/e2e/framework"
	"github.com/reclaimable/reclaimable/e2e/objects"
	"github.com/reclaimable/reclaimable/e2e/process"
	"github.com/reclaimable/reclaimable/internal/pools"
)

// upgradeFrom is the release an installation is upgraded from in place:
// the last whose free members could be left without a claimRef under
// reuseScope namespace (a member emptied by a scrub, a static member).
const upgradeFrom = "f63db8e43d6ad3b5c63ad5fa1f8d6e93be863ef9"

// earlier is a release of the repository's history: its tree and its
// binary.
type earlier struct{ dir, binary string }

// earlierRelease checks out commit of the repository's history into a
// directory of the test's and builds its binary there.
func earlierRelease(t *testing.T, commit string) earlier {
	t.Helper()
	e := earlier{dir: t.TempDir()}
	archive := exec.Command("git", "-C", process.RepoRoot(), "archive", "--format=tar", commit)
	extract := exec.Command("tar", "-x", "-C", e.dir)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	extract.Stdin = pipe
	if err := extract.Start(); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	archive.Stderr = &stderr
	if err := archive.Run(); err != nil {
		t.Fatalf("git archive %s (the repository's history must hold it): %v\n%s", commit, err, stderr.String())
	}
	if err := extract.Wait(); err != nil {
		t.Fatalf("extracting %s: %v", commit, err)
	}
	// The controllers run as their Deployments' users: the binary's
	// directory must be open to them.
	bin, err := os.MkdirTemp("", "reclaimable-release-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(bin) })
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	e.binary = filepath.Join(bin, "reclaimable")
	if err := cluster.GoBuild(context.Background(), e.dir, "./cmd/reclaimable", e.binary); err != nil {
		t.Fatalf("building %s: %v", commit, err)
	}
	return e
}

// applyManifests applies the kustomization in dir, as an upgrade does.
func applyManifests(t *testing.T, dir string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, _, err := kubectl(ctx, "apply", "-k", dir); err != nil {
		t.Fatal(err)
	}
}

// An installation of upgradeFrom, its manifests applied and its binary
// run as they render it, with members in every state (bound, held for a
// namespace, reserved for a claim's name, made ahead, marked for scrub
// while bound, and free without a claimRef after a scrub), upgraded in
// place (the current manifests applied over it, its controllers replaced)
// loses no member and no data: each member is served or held as before,
// and the member left without a claimRef is issued by the provisioner
// alone from then on. Not parallel: it applies the earlier release's
// cluster-scoped objects, which the current manifests then replace.
func TestInstallUpgradeKeepsEveryMember(t *testing.T) {
	framework.RealNode(t)
	old := earlierRelease(t, upgradeFrom)
	oldManifests := filepath.Join(old.dir, "manifests")
	upgraded := false
	t.Cleanup(func() {
		if !upgraded { // the tests after this one want the current installation
			applyManifests(t, manifestsDir())
		}
	})
	applyManifests(t, oldManifests)
	c := newInstalledCycle(t, kustomized(t, oldManifests))
	other := framework.Namespace(t)
	kept := c.newClass(t, "kept", c.shareDir(t, "kept"), true)
	reserved := c.newClass(t, "reserved", c.shareDir(t, "reserved"), true)
	createPool(t, v1alpha1.VolumePoolSpec{StorageClassName: kept, MinAvailable: ptr.To[int32](1), MaxVolumes: ptr.To[int32](8)})
	createPool(t, v1alpha1.VolumePoolSpec{StorageClassName: reserved, ReserveFor: &metav1.Duration{Duration: time.Hour}})
	inv := framework.WatchInvariants(t, framework.Scope{ControllerID: c.id, Classes: []string{kept, reserved}, Namespaces: []string{c.ns, other},
		NamespaceScoped: []string{kept, reserved}})
	c.start(t, kustomized(t, oldManifests), old.binary)

	// The earlier release makes every state.
	u := &upgradeCase{t: t, c: c, markers: map[string]string{}}
	bound := u.claimWithData(kept, "bound")
	held := u.claimWithData(kept, "held")
	marked := u.claimWithData(kept, "marked")
	freed := u.claimWithData(kept, "freed")
	reservedFor := u.claimWithData(reserved, "reserved")
	for _, name := range []string{"held", "freed", "reserved"} {
		deleteClaim(t, c.ns, name)
	}
	waitHeldFor(t, held, c.ns)
	waitHeldFor(t, freed, c.ns)
	waitReserved(t, reservedFor, c.ns, "reserved")
	markForScrub(t, freed)
	framework.WaitEvent(t, 2*time.Minute, framework.EventQuery{Namespace: metav1.NamespaceDefault, Kind: "PersistentVolume", Name: freed, Reason: "Scrubbed"})
	delete(u.markers, freed)
	framework.Eventually(t, time.Minute, func(ctx context.Context) (bool, error) {
		pv, err := framework.Client().CoreV1().PersistentVolumes().Get(ctx, freed, metav1.GetOptions{})
		return err == nil && pv.Spec.ClaimRef == nil && pv.Status.Phase == corev1.VolumeAvailable, err
	}, "volume "+freed+", emptied by the earlier release, to be free without a claimRef")
	markForScrub(t, marked)
	ahead := waitMadeAhead(t, kept, 1)[0].Name
	members := u.members(kept, reserved)

	// The upgrade: the current manifests over the earlier ones, the
	// controllers replaced by the current binary.
	c.stop()
	applyManifests(t, manifestsDir())
	upgraded = true
	c.start(t, kustomized(t, manifestsDir()), "")

	// The member the earlier release left without a claimRef now names a
	// claim that never exists; the one made ahead still does.
	for _, name := range []string{freed, ahead} {
		framework.Eventually(t, time.Minute, func(ctx context.Context) (bool, error) {
			pv, err := framework.Client().CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
			return err == nil && pools.Unissued(pv) && pools.StateOf(pv) == pools.StateFree, err
		}, "member "+name+" to be free, issued by the provisioner alone")
	}
	// Bound: still its claim's.
	if got := boundVolume(t, c.ns, "bound"); got.Name != bound {
		t.Errorf("claim bound has volume %s after the upgrade, want %s", got.Name, bound)
	}
	// Held: a claim of another namespace, of its last claim's very name,
	// does not get it; its own namespace's does, with its data.
	u.create(other, kept, "held")
	if got := boundVolume(t, other, "held"); got.Name == held || got.Name == bound || got.Name == marked {
		t.Errorf("claim %s/held got volume %s, of namespace %s", other, got.Name, c.ns)
	}
	u.create(c.ns, kept, "held")
	if got := boundVolume(t, c.ns, "held"); got.Name != held {
		t.Errorf("claim held got volume %s after the upgrade, want %s, held for it", got.Name, held)
	}
	// Reserved: its claim's name gets it back.
	u.create(c.ns, reserved, "reserved")
	if got := boundVolume(t, c.ns, "reserved"); got.Name != reservedFor {
		t.Errorf("claim reserved got volume %s after the upgrade, want %s, reserved for it", got.Name, reservedFor)
	}
	// Marked for scrub while bound: emptied once its claim goes, as the
	// administrator asked, and then free.
	deleteClaim(t, c.ns, "marked")
	delete(u.markers, marked)
	framework.WaitEvent(t, 2*time.Minute, framework.EventQuery{Namespace: metav1.NamespaceDefault, Kind: "PersistentVolume", Name: marked, Reason: "Scrubbed"})
	framework.Eventually(t, time.Minute, func(ctx context.Context) (bool, error) {
		pv, err := framework.Client().CoreV1().PersistentVolumes().Get(ctx, marked, metav1.GetOptions{})
		return err == nil && pools.Unissued(pv) && pools.StateOf(pv) == pools.StateFree, err
	}, "member "+marked+", emptied after the upgrade, to be free, issued by the provisioner alone")

	// No member lost, no data lost.
	for name, uid := range members {
		if pv, err := framework.Client().CoreV1().PersistentVolumes().Get(context.Background(), name, metav1.GetOptions{}); err != nil || pv.UID != uid {
			t.Errorf("member %s after the upgrade: %v; want the member of uid %s", name, err, uid)
		}
	}
	for volume, file := range u.markers {
		if b, err := os.ReadFile(file); err != nil || string(b) != volume {
			t.Errorf("volume %s after the upgrade holds %q (%v), want its data", volume, b, err)
		}
		inv.Marker(volume, file)
	}
	inv.Check(t, 10*time.Second)
}

// upgradeCase is the state an upgrade must keep.
type upgradeCase struct {
	t *testing.T
	c *installedCycle
	// markers are the files of data written into volumes, by volume.
	markers map[string]string
}

func (u *upgradeCase) create(ns, class, name string) {
	u.t.Helper()
	framework.CreateClaim(u.t, objects.NewClaim(ns, name, class, "1Gi"))
}

// claimWithData creates the claim name of class in the case's namespace,
// writes data into its volume and returns the volume's name.
func (u *upgradeCase) claimWithData(class, name string) string {
	u.t.Helper()
	u.create(u.c.ns, class, name)
	pv := boundVolume(u.t, u.c.ns, name)
	file := filepath.Join(pv.Spec.HostPath.Path, "data")
	if err := os.WriteFile(file, []byte(pv.Name), 0o644); err != nil {
		u.t.Fatal(err)
	}
	u.markers[pv.Name] = file
	return pv.Name
}

// members are the volumes of classes, by name, with their UIDs.
func (u *upgradeCase) members(classes ...string) map[string]types.UID {
	u.t.Helper()
	list, err := framework.Client().CoreV1().PersistentVolumes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		u.t.Fatal(err)
	}
	out := map[string]types.UID{}
	for _, pv := range list.Items {
		for _, class := range classes {
			if pv.Spec.StorageClassName == class {
				out[pv.Name] = pv.UID
			}
		}
	}
	return out
}
