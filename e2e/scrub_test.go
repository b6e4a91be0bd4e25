//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/reclaimable/reclaimable/apis/reclaimable/v1alpha1"
	"github.com/reclaimable/reclaimable/e2e/cluster"
	"github.com/reclaimable/reclaimable/e2e/framework"
	"github.com/reclaimable/reclaimable/e2e/objects"
	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// scrubCase is a class of one volume at most, on the real node, whose
// VolumePool says onRelease, with the three controllers running as the
// manifests run them.
type scrubCase struct {
	ns, helpers, class, pool string
	inv                      *framework.Invariants
	// controllers is the process of the three controllers (directory
	// cases).
	controllers *framework.Process
}

// newDirectoryScrubCase is a scrubCase of the directory backend; params
// are added to the class's.
func newDirectoryScrubCase(t *testing.T, onRelease string, params map[string]string, pool ...func(*v1alpha1.VolumePoolSpec)) *scrubCase {
	t.Helper()
	framework.RealNode(t)
	t.Parallel()
	c := &scrubCase{ns: framework.Namespace(t), helpers: framework.Namespace(t)}
	id := framework.Name("scrub")
	provisioner := "scrub.reclaimable/" + id
	base := framework.ControllerDir(t, "pool")
	policy, binding := corev1.PersistentVolumeReclaimRetain, storagev1.VolumeBindingImmediate
	c.class = framework.CreateClass(t, objects.NewClass(framework.Name("scrub"), provisioner, func(sc *storagev1.StorageClass) {
		sc.Annotations = map[string]string{wellknown.ClassControllerID: id}
		sc.ReclaimPolicy, sc.VolumeBindingMode = &policy, &binding
		sc.Parameters = map[string]string{"backend": "directory", "source": "hostPath", "baseDir": base, "hostPath": base}
		for k, v := range params {
			sc.Parameters[k] = v
		}
		// The share is a directory of this machine, which the real node is.
		sc.AllowedTopologies = realNodeTopology()
	}))
	c.pool = c.createPool(t, onRelease, pool...)
	c.inv = framework.WatchInvariants(t, framework.Scope{ControllerID: id, Classes: []string{c.class}, Namespaces: []string{c.ns}, NamespaceScoped: []string{c.class},
		Scrubbed: classIf(onRelease == wellknown.OnReleaseScrub, c.class), ScrubbedUnlessSucceeded: classIf(onRelease == wellknown.OnReleaseScrubUnlessSucceeded, c.class)})
	c.controllers = framework.StartController(t, "all", "--controller-id="+id, "--provisioner-name="+provisioner, "--namespace="+c.ns,
		"--directory-root="+filepath.Dir(base), "--lifecycle-namespace="+c.helpers, "--lifecycle-image="+cluster.ReclaimableImage,
		"--cleanup-interval=5s", "--release-interval=5s", "--pool-status-interval=1s")
	c.controllers.WaitReady(t)
	return c
}

func classIf(cond bool, class string) []string {
	if cond {
		return []string{class}
	}
	return nil
}

// createPool makes the class's VolumePool: one volume at most, so that the
// next claim gets the last one's volume.
func (c *scrubCase) createPool(t *testing.T, onRelease string, mutate ...func(*v1alpha1.VolumePoolSpec)) string {
	t.Helper()
	spec := v1alpha1.VolumePoolSpec{StorageClassName: c.class, OnRelease: onRelease, MaxVolumes: ptr.To[int32](1)}
	for _, m := range mutate {
		m(&spec)
	}
	return createPool(t, spec)
}

// leaveData has pods of two users leave in the volume of claim what only
// root could remove: a file, a hidden file, a directory of mode 0555 with a
// file in it, and a file of another user; then deletes them, and with them
// the claim. It returns the volume.
func (c *scrubCase) leaveData(t *testing.T, claim string) *corev1.PersistentVolume {
	t.Helper()
	runToCompletion(t, c.ns, nodePod("builder", claim, c.class, 1000, "fill", "/cache"))
	runToCompletion(t, c.ns, nodePod("other", claim, c.class, 2000, "write", "/cache/.hidden", "another user's secret\n"))
	volume := boundVolume(t, c.ns, claim)
	consumersTree(t, volume.Spec.HostPath.Path)
	if err := framework.Client().CoreV1().Pods(c.ns).Delete(context.Background(), "builder", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deletePod(t, c.ns, "other", claim)
	return volume
}

// runJob runs a Job of one pod, no retry, that asks for claim by
// annotation and runs the consumer with args on the real node; waits
// until the Job has ended and the podwatcher has recorded how on the
// claim (outcome); then deletes the Job, and with it the claim. It
// returns the volume, which holds the consumer's tree.
func (c *scrubCase) runJob(t *testing.T, claim, outcome string, args ...string) *corev1.PersistentVolume {
	t.Helper()
	ctx := context.Background()
	client := framework.Client()
	spec := nodePodSpec(claim, 1000, args...)
	job, err := client.BatchV1().Jobs(c.ns).Create(ctx, &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "build", Annotations: soakOwnerAnnotations("cache", c.class)},
		Spec:       batchv1.JobSpec{BackoffLimit: ptr.To[int32](0), Template: corev1.PodTemplateSpec{Spec: spec}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 2*time.Minute, func(ctx context.Context) (bool, error) {
		pvc, err := client.CoreV1().PersistentVolumeClaims(c.ns).Get(ctx, claim, metav1.GetOptions{})
		return err == nil && pvc.Annotations[wellknown.ConsumerOutcome] == outcome, nil
	}, fmt.Sprintf("the Job to end and its claim to say %s", outcome))
	volume := boundVolume(t, c.ns, claim)
	consumersTree(t, volume.Spec.HostPath.Path)
	background := metav1.DeletePropagationBackground
	if err := client.BatchV1().Jobs(c.ns).Delete(ctx, job.Name, metav1.DeleteOptions{PropagationPolicy: &background}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, time.Minute, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().PersistentVolumeClaims(c.ns).Get(ctx, claim, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}, "the Job's claim to go with the Job")
	return volume
}

// nothingLeft waits until no scrub pod or scrub claim is left in the
// lifecycle namespace. The next pod's own release may have started a
// scrub of its own (onRelease Scrub), whose pod takes seconds on a busy
// node.
func (c *scrubCase) nothingLeft(t *testing.T) {
	t.Helper()
	framework.Eventually(t, 2*time.Minute, func(ctx context.Context) (bool, error) {
		pods, err := framework.Client().CoreV1().Pods(c.helpers).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		claims, err := framework.Client().CoreV1().PersistentVolumeClaims(c.helpers).List(ctx, metav1.ListOptions{})
		return err == nil && len(pods.Items) == 0 && len(claims.Items) == 0, err
	}, "no scrub pod or scrub claim to be left")
}

// next runs the next pod of the workload, which writes a file of its own,
// and returns the volume it got and what the volume then held, by name.
func (c *scrubCase) next(t *testing.T, claim string) (*corev1.PersistentVolume, []string) {
	t.Helper()
	runToCompletion(t, c.ns, nodePod("next", claim, c.class, 3000, "write", "/cache/mine", "the next pod's\n"))
	volume := boundVolume(t, c.ns, claim)
	names := entryNames(t, volume.Spec.HostPath.Path)
	deletePod(t, c.ns, "next", claim)
	return volume, names
}

// entryNames lists what dir holds, by name, sorted.
func entryNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	return names
}

// Under onRelease Scrub a released volume is emptied by a scrub pod on the
// node before the next claim gets it: the same volume, holding only what
// the next pod wrote. Under Keep the data is handed on.
func TestNodeScrubEmptiesAVolumeBeforeTheNextClaim(t *testing.T) {
	for _, tt := range []struct {
		onRelease string
		want      []string
	}{
		{wellknown.OnReleaseScrub, []string{"mine"}},
		{wellknown.OnReleaseKeep, []string{".hidden", "mine", "objects", "readonly", "top.txt"}},
	} {
		t.Run(tt.onRelease, func(t *testing.T) {
			c := newDirectoryScrubCase(t, tt.onRelease, nil)
			const claim = "cache"
			first := c.leaveData(t, claim)
			got, held := c.next(t, claim)
			if got.Name != first.Name {
				t.Errorf("the next claim got volume %s, want %s: the pool holds one", got.Name, first.Name)
			}
			if !slices.Equal(held, tt.want) {
				t.Errorf("the next pod found the volume holding %v (with its own file), want %v", held, tt.want)
			}
			if tt.onRelease == wellknown.OnReleaseScrub {
				framework.WaitEvent(t, 30*time.Second, framework.EventQuery{Namespace: "default", Kind: "PersistentVolume", Name: first.Name, Reason: "Scrubbed"})
				c.nothingLeft(t)
			}
			c.inv.Check(t, 10*time.Second)
		})
	}
}

// Under onRelease ScrubUnlessSucceeded the volume of a Job that failed,
// its work half written, is emptied before the next claim has it; that of
// a Job that succeeded goes on with its data.
func TestNodeScrubOnlyAfterAConsumerThatDidNotSucceed(t *testing.T) {
	for _, tt := range []struct {
		outcome string
		args    []string
		want    []string
	}{
		{wellknown.OutcomeFailed, []string{"crash", "/cache"}, []string{"mine"}},
		{wellknown.OutcomeSucceeded, []string{"fill", "/cache"}, []string{"mine", "objects", "readonly", "top.txt"}},
	} {
		t.Run(tt.outcome, func(t *testing.T) {
			c := newDirectoryScrubCase(t, wellknown.OnReleaseScrubUnlessSucceeded, nil)
			const claim = "cache"
			first := c.runJob(t, claim, tt.outcome, tt.args...)
			got, held := c.next(t, claim)
			if got.Name != first.Name || !slices.Equal(held, tt.want) {
				t.Errorf("after a Job that %s the next claim got %s holding %v, want %s holding %v", tt.outcome, got.Name, held, first.Name, tt.want)
			}
			if tt.outcome == wellknown.OutcomeFailed {
				framework.WaitEvent(t, 30*time.Second, framework.EventQuery{Namespace: "default", Kind: "PersistentVolume", Name: first.Name, Reason: "HandedToScrub", Message: "its consumer failed"})
			}
			c.inv.Check(t, 10*time.Second)
		})
	}
}

// A scrub pod that fails keeps the volume out of the pool, with a Warning
// on it and a count in the pool's status; once the template is fixed the
// retry empties it, and the next claim gets it.
func TestNodeFailedScrubKeepsTheVolumeOutOfThePool(t *testing.T) {
	c := newDirectoryScrubCase(t, wellknown.OnReleaseScrub, map[string]string{"lifecycleTemplates": "templates"})
	ctx := context.Background()
	cms := framework.Client().CoreV1().ConfigMaps(c.helpers)
	broken := `{"spec":{"containers":[{"name":"scrub","image":"` + cluster.ReclaimableImage + `","imagePullPolicy":"IfNotPresent","args":["lifecycle","refuse"],"volumeMounts":[{"name":"pool","mountPath":"/pool"}]}]}}`
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "templates"}, Data: map[string]string{"scrub": broken}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const claim = "cache"
	first := c.leaveData(t, claim)
	ev := framework.WaitEvent(t, 2*time.Minute, framework.EventQuery{Namespace: "default", Kind: "PersistentVolume", Name: first.Name, Reason: "ScrubFailed", Message: "unknown lifecycle operation"})
	t.Logf("event: %s", ev.Message)
	framework.Eventually(t, 30*time.Second, func(ctx context.Context) (bool, error) {
		p, err := volumePools(t).Get(ctx, c.pool, metav1.GetOptions{})
		return err == nil && p.Status.Scrubbing == 1 && p.Status.ScrubFailed == 1 && p.Status.Free == 0, err
	}, "the pool's status to count the volume scrubbing, its scrub failed")
	if _, err := os.Stat(filepath.Join(first.Spec.HostPath.Path, ".hidden")); err != nil {
		t.Fatalf("the failed scrub removed data: %v", err)
	}

	if err := cms.Delete(ctx, "templates", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "templates"}, Data: map[string]string{}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, held := c.next(t, claim)
	if got.Name != first.Name || !slices.Equal(held, []string{"mine"}) {
		t.Errorf("after the fix the next claim got %s holding %v, want %s holding [mine]", got.Name, held, first.Name)
	}
	c.inv.Check(t, 10*time.Second)
}

// Node-local: the scrub pod runs on the volume's node, which alone holds
// its directory, and empties it there: after any consumer under Scrub,
// after a failed Job under ScrubUnlessSucceeded; a succeeded Job's data
// goes on.
func TestNodeLocalScrubEmptiesTheVolumeOnItsNode(t *testing.T) {
	for _, tt := range []struct {
		name, onRelease, outcome string
		want                     []string
	}{
		{"Scrub", wellknown.OnReleaseScrub, "", []string{"mine"}},
		{"ScrubUnlessSucceeded/Failed", wellknown.OnReleaseScrubUnlessSucceeded, wellknown.OutcomeFailed, []string{"mine"}},
		{"ScrubUnlessSucceeded/Succeeded", wellknown.OnReleaseScrubUnlessSucceeded, wellknown.OutcomeSucceeded, []string{"mine", "objects", "readonly", "top.txt"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := newLocalCase(t, corev1.PersistentVolumeReclaimRetain, nil)
			c := &scrubCase{ns: l.ns, helpers: l.helpers, class: l.class, inv: l.inv}
			c.pool = c.createPool(t, tt.onRelease)
			const claim = "cache"
			var first *corev1.PersistentVolume
			switch tt.outcome {
			case "":
				first = c.leaveData(t, claim)
			case wellknown.OutcomeFailed:
				first = c.runJob(t, claim, tt.outcome, "crash", "/cache")
			default:
				first = c.runJob(t, claim, tt.outcome, "fill", "/cache")
			}
			got, held := c.next(t, claim)
			if got.Name != first.Name || !slices.Equal(held, tt.want) {
				t.Errorf("the next claim got %s holding %v, want %s holding %v", got.Name, held, first.Name, tt.want)
			}
			l.onTheNode(t, got)
			l.noHelperLeft(t)
			c.inv.Check(t, 10*time.Second)
		})
	}
}

// An administrator empties one member by hand, with the annotation: a
// free one at once, a bound one once its claim is gone.
func TestNodeScrubOnDemand(t *testing.T) {
	c := newDirectoryScrubCase(t, wellknown.OnReleaseKeep, nil)
	const claim = "cache"
	volume := c.leaveData(t, claim)
	dir := volume.Spec.HostPath.Path
	markForScrub(t, volume.Name)
	waitEmptied(t, volume.Name, dir)

	runToCompletion(t, c.ns, nodePod("writer", claim, c.class, 1000, "write", "/cache/mine", "kept while bound\n"))
	if got := boundVolume(t, c.ns, claim); got.Name != volume.Name {
		t.Fatalf("the claim got %s, want %s", got.Name, volume.Name)
	}
	markForScrub(t, volume.Name)
	// Bound: nothing happens until the claim goes.
	framework.Eventually(t, 10*time.Second, func(ctx context.Context) (bool, error) {
		pv, err := framework.Client().CoreV1().PersistentVolumes().Get(ctx, volume.Name, metav1.GetOptions{})
		return err == nil && pv.Annotations[wellknown.Scrub] == wellknown.ScrubRequested && pv.Status.Phase == corev1.VolumeBound, err
	}, "the bound volume to stay bound, marked")
	if _, err := os.Stat(filepath.Join(dir, "mine")); err != nil {
		t.Fatalf("a bound volume lost its data to a scrub: %v", err)
	}
	deletePod(t, c.ns, "writer", claim)
	waitEmptied(t, volume.Name, dir)
	c.inv.Check(t, 10*time.Second)
}

func markForScrub(t *testing.T, volume string) {
	t.Helper()
	updateVolume(t, volume, func(pv *corev1.PersistentVolume) { pv.Annotations[wellknown.Scrub] = wellknown.ScrubRequested })
}

// waitEmptied waits until volume is back in the pool, scrubbed, its
// directory dir empty.
func waitEmptied(t *testing.T, volume, dir string) {
	t.Helper()
	framework.Eventually(t, 2*time.Minute, func(ctx context.Context) (bool, error) {
		pv, err := framework.Client().CoreV1().PersistentVolumes().Get(ctx, volume, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		_, marked := pv.Annotations[wellknown.Scrub]
		return !marked && pools.StateOf(pv) == pools.StateFree && pv.Status.Phase == corev1.VolumeAvailable, nil
	}, "volume "+volume+" to be scrubbed and free")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Errorf("the scrubbed volume holds %d entries, want none", len(entries))
	}
}

// At its maximum, under reuseScope namespace with scrubAcrossNamespaces,
// a claim of namespace B gets the volume held for namespace A once it is
// emptied: the disk is shared, A's data never reaches B.
func TestNodeScrubLetsAnotherNamespaceHaveAHeldVolume(t *testing.T) {
	c := newDirectoryScrubCase(t, wellknown.OnReleaseKeep, map[string]string{wellknown.ReserveFor: "0"},
		func(s *v1alpha1.VolumePoolSpec) { s.ScrubAcrossNamespaces = ptr.To(true) })
	const claim = "cache"
	held := c.leaveData(t, claim)
	framework.Eventually(t, 30*time.Second, func(ctx context.Context) (bool, error) {
		pv, err := framework.Client().CoreV1().PersistentVolumes().Get(ctx, held.Name, metav1.GetOptions{})
		return err == nil && pv.Annotations[wellknown.HeldForNamespace] == c.ns && pv.Status.Phase == corev1.VolumeAvailable, err
	}, "the volume to be held for its namespace")

	b := framework.Namespace(t)
	if _, err := framework.Client().CoreV1().PersistentVolumeClaims(b).Create(context.Background(), claimOf(c.class, "other"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.WaitEvent(t, time.Minute, framework.EventQuery{Namespace: b, Kind: "PersistentVolumeClaim", Name: "other", Reason: "ScrubbingToShare", Message: held.Name})
	got := boundVolume(t, b, "other")
	if got.Name != held.Name {
		t.Fatalf("namespace %s's claim got %s, want %s, emptied", b, got.Name, held.Name)
	}
	entries, err := os.ReadDir(got.Spec.HostPath.Path)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Errorf("the volume came to namespace %s holding %d entries of namespace %s's", b, len(entries), c.ns)
	}
	c.inv.Check(t, 10*time.Second)
}

// The controllers killed (SIGKILL) while a scrub pod runs: the restarted
// provisioner waits for that pod or runs the scrub again, never returns
// the volume unscrubbed (invariant 9), and leaves no scrub pod or claim.
// The scrub template waits a few seconds first, so that the kill lands
// while the pod runs.
func TestNodeScrubSurvivesAKill(t *testing.T) {
	c := newDirectoryScrubCase(t, wellknown.OnReleaseScrub, map[string]string{"lifecycleTemplates": "templates"})
	ctx := context.Background()
	slow := `{"spec":{"initContainers":[{"name":"wait","image":"` + cluster.ConsumerImage + `","imagePullPolicy":"Never","args":["sleep","5s"]}],` +
		`"containers":[{"name":"scrub","image":"` + cluster.ReclaimableImage + `","imagePullPolicy":"IfNotPresent","args":["lifecycle","scrub"],` +
		`"securityContext":{"runAsUser":0,"allowPrivilegeEscalation":false,"capabilities":{"drop":["ALL"],"add":["CHOWN","FOWNER","DAC_OVERRIDE","FSETID"]}},` +
		`"volumeMounts":[{"name":"pool","mountPath":"/pool"}]}]}}`
	if _, err := framework.Client().CoreV1().ConfigMaps(c.helpers).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "templates"}, Data: map[string]string{"scrub": slow}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const claim = "cache"
	first := c.leaveData(t, claim)
	framework.Eventually(t, time.Minute, func(ctx context.Context) (bool, error) {
		_, err := framework.Client().CoreV1().Pods(c.helpers).Get(ctx, "scrub-"+first.Name, metav1.GetOptions{})
		return err == nil, nil
	}, "the scrub pod to run")
	c.controllers.Kill()
	c.controllers.Start()
	c.controllers.WaitReady(t)

	got, held := c.next(t, claim)
	if got.Name != first.Name || !slices.Equal(held, []string{"mine"}) {
		t.Errorf("after the kill the next claim got %s holding %v, want %s holding [mine]", got.Name, held, first.Name)
	}
	c.nothingLeft(t)
	c.inv.Check(t, 10*time.Second)
}

// A member emptied by a scrub, under keyPolicy Require, is issued by the
// provisioner, which records the key of the claim it goes to: were it left
// without a claimRef, the PV controller would bind it to the next claim
// that fits, record no key, and once released its data would be held as
// used without one, for claims without a key.
func TestNodeScrubbedMemberRemembersItsNextKey(t *testing.T) {
	c := newDirectoryScrubCase(t, wellknown.OnReleaseScrub, nil, func(spec *v1alpha1.VolumePoolSpec) {
		spec.ReuseScope, spec.KeyLabel, spec.KeyPolicy = wellknown.ReuseScopeNamespace, "team", wellknown.KeyPolicyRequire
	})
	claims := framework.Client().CoreV1().PersistentVolumeClaims(c.ns)
	create := func(name, team string) {
		if _, err := claims.Create(context.Background(), objects.NewClaim(c.ns, name, c.class, "1Mi", func(pvc *corev1.PersistentVolumeClaim) {
			pvc.Labels = map[string]string{"team": team}
		}), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create("a1", "a")
	volume := boundVolume(t, c.ns, "a1")
	if err := claims.Delete(context.Background(), "a1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitEmptied(t, volume.Name, volume.Spec.HostPath.Path)

	create("b1", "b")
	if got := boundVolume(t, c.ns, "b1"); got.Name != volume.Name {
		t.Fatalf("claim b1 got volume %s, want %s, the pool's one member, emptied", got.Name, volume.Name)
	} else if key := got.Annotations[wellknown.LastKey]; key != "team=b" {
		t.Errorf("the emptied member, bound to a claim of key team=b, remembers key %q, want team=b", key)
	}
	c.inv.Check(t, 10*time.Second)
}

const scrubPolicy = "reclaimable-scrub-before-bind"

// A volume marked for scrub is bound to no claim before it is emptied. The
// mark keeps the provisioner away, but the PV controller binds a free
// volume to any claim that fits, and a held or reserved one to the claim it
// names, between the mark and the scrub's write of its own claimRef: the
// installation's policy refuses that bind. The test makes the race
// certain: nothing scrubs the volume (its class is no provisioner's), and
// a claim that fits it only is made after the mark. The bind is tried as
// the PV controller writes it, then by the PV controller itself, and again
// for a claim of the user's namespace named as the scrub claim; once the
// mark goes, the claim is bound.
//
// It runs alone, after the installation tests (it counts the policy's
// refusals): the renamed installations of installed_test.go remove their
// cluster-scoped objects when they are done.
func TestInstallNoClaimIsBoundToAVolumeMarkedForScrub(t *testing.T) {
	install(t)
	ctx := context.Background()
	ns := framework.Namespace(t)
	client := framework.Client()
	class := "marked-" + ns // no StorageClass: the PV controller binds at once, and no provisioner scrubs
	pv, err := client.CoreV1().PersistentVolumes().Create(ctx, objects.NewVolume(class, class, "1Mi", "/tmp/"+class, func(pv *corev1.PersistentVolume) {
		pv.Annotations = map[string]string{wellknown.Scrub: wellknown.ScrubRequested}
	}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.CoreV1().PersistentVolumes().Delete(context.Background(), pv.Name, metav1.DeleteOptions{})
	})
	framework.Eventually(t, time.Minute, func(ctx context.Context) (bool, error) {
		got, err := client.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
		return err == nil && got.Status.Phase == corev1.VolumeAvailable, err
	}, "the marked volume to be Available")
	// The API server loads a new policy within moments of its creation; a
	// dry run shows when, without changing the volume.
	bindTo := func(ctx context.Context, name string, uid types.UID, opts metav1.UpdateOptions) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur, err := client.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			cur.Spec.ClaimRef = &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: ns, Name: name, UID: uid}
			_, err = client.CoreV1().PersistentVolumes().Update(ctx, cur, opts)
			return err
		})
	}
	framework.Eventually(t, 30*time.Second, func(ctx context.Context) (bool, error) {
		return deniedBy(scrubPolicy)(bindTo(ctx, "probe", "probe", metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})), nil
	}, "the scrub policy to be in force")
	refused := refusals(t)

	claim, err := client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, objects.NewClaim(ns, "data", class, "1Mi"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The PV controller's bind: the claim's reference, UID included.
	err = bindTo(ctx, claim.Name, claim.UID, metav1.UpdateOptions{})
	if !deniedBy(scrubPolicy)(err) {
		t.Fatalf("binding the marked volume to claim %s/%s: %v, want the refusal of %s", ns, claim.Name, err, scrubPolicy)
	}
	// The PV controller tries as well: at least one more refusal.
	framework.Eventually(t, time.Minute, func(context.Context) (bool, error) {
		return refusals(t) >= refused+2, nil
	}, "the PV controller's bind to be refused")
	got, err := client.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ref := got.Spec.ClaimRef; ref != nil && ref.UID != "" {
		t.Fatalf("marked volume bound to claim %s/%s", ref.Namespace, ref.Name)
	}

	// A claim named as the scrub's, but in a namespace of a user's: only
	// the scrub claim the volume already names may be bound to it, and a
	// user could make one of that name in any namespace.
	impostor := objects.NewClaim(ns, wellknown.ScrubClaim(pv.Name), class, "1Mi")
	impostor.Spec.VolumeName = pv.Name
	impostor, err = client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, impostor, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := bindTo(ctx, impostor.Name, impostor.UID, metav1.UpdateOptions{}); !deniedBy(scrubPolicy)(err) {
		t.Fatalf("binding the marked volume to claim %s/%s: %v, want the refusal of %s", ns, impostor.Name, err, scrubPolicy)
	}
	if err := client.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, impostor.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, time.Minute, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, impostor.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}, "the claim named as the scrub's to be gone")
	got, err = client.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ref := got.Spec.ClaimRef; ref != nil && ref.UID != "" {
		t.Fatalf("marked volume bound to claim %s/%s", ref.Namespace, ref.Name)
	}

	// Emptied (here: the mark removed), the volume is the claim's.
	if _, err := client.CoreV1().PersistentVolumes().Patch(ctx, pv.Name, types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"`+wellknown.Scrub+`":null}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, time.Minute, func(ctx context.Context) (bool, error) {
		c, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim.Name, metav1.GetOptions{})
		return err == nil && c.Status.Phase == corev1.ClaimBound && c.Spec.VolumeName == pv.Name, err
	}, "the claim to be bound to the volume once the mark is gone")
}

// refusals is how many updates the API server's scrub policy refused so
// far, from its apiserver_validating_admission_policy_check_total.
func refusals(t *testing.T) int {
	t.Helper()
	body, err := framework.Client().CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("reading the API server's metrics: %v", err)
	}
	n := 0
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, "apiserver_validating_admission_policy_check_total{") ||
			!strings.Contains(line, `enforcement_action="deny"`) || !strings.Contains(line, `policy="`+scrubPolicy+`"`) {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		n += int(v)
	}
	return n
}
