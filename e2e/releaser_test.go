//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/reclaimable/reclaimable/e2e/framework"
	"github.com/reclaimable/reclaimable/e2e/objects"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// releaserInterval is the releaser's sweep period in these tests: short, so
// that "untouched after two sweeps" takes seconds.
const releaserInterval = 2 * time.Second

// releaserCase is one releaser test's own corner of the shared cluster: a
// namespace, a controller ID and a provisioner name nobody else uses.
type releaserCase struct {
	t      *testing.T
	ctx    context.Context
	client kubernetes.Interface
	ns     string
	id     string
}

func newReleaserCase(t *testing.T) *releaserCase {
	t.Helper()
	t.Parallel()
	return &releaserCase{t: t, ctx: context.Background(), client: framework.Client(), ns: framework.Namespace(t), id: framework.Name("rel")}
}

// invariants watches the product's invariants over this case's namespace and
// the given classes from now on.
func (r *releaserCase) invariants(classes ...string) *framework.Invariants {
	r.t.Helper()
	return framework.WatchInvariants(r.t, framework.Scope{ControllerID: r.id, Classes: classes, Namespaces: []string{r.ns}})
}

// start runs a releaser of this case's controller ID and waits until it is ready.
func (r *releaserCase) start() *framework.Process {
	r.t.Helper()
	p := framework.StartController(r.t, "releaser", "--controller-id="+r.id, "--provisioner-name=example.com/"+r.id,
		"--release-interval="+releaserInterval.String())
	p.WaitReady(r.t)
	return p
}

// class creates a Retain StorageClass; controllerID, when set, is its
// reclaimable-pv-releaser.kubernetes.io/controller-id annotation.
func (r *releaserCase) class(controllerID string) string {
	r.t.Helper()
	return framework.CreateClass(r.t, objects.NewClass(framework.Name("rel-class"), "kubernetes.io/no-provisioner", func(sc *storagev1.StorageClass) {
		if controllerID != "" {
			sc.Annotations = map[string]string{wellknown.ClassControllerID: controllerID}
		}
	}))
}

// volume creates a Retain hostPath volume of class; managedBy, when set,
// is its association label.
func (r *releaserCase) volume(class, managedBy string) *corev1.PersistentVolume {
	r.t.Helper()
	name := framework.Name("rel-pv")
	return framework.CreateVolume(r.t, objects.NewVolume(name, class, "1Gi", "/tmp/"+name, func(pv *corev1.PersistentVolume) {
		if managedBy != "" {
			pv.Labels = map[string]string{wellknown.VolumeManagedBy: managedBy}
		}
	}))
}

// claim creates a claim of class named name; volume, when set, pre-binds
// it to that volume; managedBy, when set, is its podwatcher managed-by label.
func (r *releaserCase) claim(name, class, volume, managedBy string) *corev1.PersistentVolumeClaim {
	r.t.Helper()
	return framework.CreateClaim(r.t, objects.NewClaim(r.ns, name, class, "1Gi", func(c *corev1.PersistentVolumeClaim) {
		c.Spec.VolumeName = volume
		if managedBy != "" {
			c.Labels = map[string]string{wellknown.ClaimManagedBy: managedBy}
		}
	}))
}

// bind creates a claim pre-bound to pv and waits until pv is Bound to it.
func (r *releaserCase) bind(pv *corev1.PersistentVolume, claimName, managedBy string) *corev1.PersistentVolumeClaim {
	r.t.Helper()
	c := r.claim(claimName, pv.Spec.StorageClassName, pv.Name, managedBy)
	r.waitVolume(pv.Name, 30*time.Second, "Bound to claim "+claimName, func(pv *corev1.PersistentVolume) bool {
		return pv.Status.Phase == corev1.VolumeBound && pv.Spec.ClaimRef != nil && pv.Spec.ClaimRef.UID == c.UID
	})
	return c
}

func (r *releaserCase) deleteClaim(name string) {
	r.t.Helper()
	if err := r.client.CoreV1().PersistentVolumeClaims(r.ns).Delete(r.ctx, name, metav1.DeleteOptions{}); err != nil {
		r.t.Fatal(err)
	}
}

func (r *releaserCase) get(name string) *corev1.PersistentVolume {
	r.t.Helper()
	pv, err := r.client.CoreV1().PersistentVolumes().Get(r.ctx, name, metav1.GetOptions{})
	if err != nil {
		r.t.Fatal(err)
	}
	return pv
}

func (r *releaserCase) waitVolume(name string, timeout time.Duration, what string, cond func(*corev1.PersistentVolume) bool) {
	r.t.Helper()
	framework.Eventually(r.t, timeout, func(ctx context.Context) (bool, error) {
		pv, err := r.client.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return cond(pv), nil
	}, "volume "+name+" "+what)
}

func (r *releaserCase) waitAssociated(name string) {
	r.t.Helper()
	r.waitVolume(name, 30*time.Second, "associated with "+r.id, func(pv *corev1.PersistentVolume) bool {
		return pv.Labels[wellknown.VolumeManagedBy] == r.id
	})
}

// associatedAs reports whether pv's association is what a case expects:
// this case's controller ID when associated, no label at all otherwise.
func (r *releaserCase) associatedAs(pv *corev1.PersistentVolume, associated bool) bool {
	id, labelled := pv.Labels[wellknown.VolumeManagedBy]
	if associated {
		return id == r.id
	}
	return !labelled
}

// returnedToPool returns a condition that holds once pv has been released
// from claim: Available, without claimRef, with that claim recorded, and
// still associated or not as the case expects (a release keeps the label
// while the class or provisioner rule holds).
func (r *releaserCase) returnedToPool(claim *corev1.PersistentVolumeClaim, associated bool) func(*corev1.PersistentVolume) bool {
	return func(pv *corev1.PersistentVolume) bool {
		return pv.Status.Phase == corev1.VolumeAvailable && pv.Spec.ClaimRef == nil && r.associatedAs(pv, associated) &&
			pv.Annotations[wellknown.LastClaim] == claim.Namespace+"/"+claim.Name && pv.Annotations[wellknown.ReleasedAt] != ""
	}
}

// checkReleased checks what a release from claim leaves on a volume, whose
// association is kept or removed as associated says, and the event it emits.
func (r *releaserCase) checkReleased(name string, from *corev1.PersistentVolumeClaim, associated bool) {
	r.t.Helper()
	pv := r.get(name)
	if !r.associatedAs(pv, associated) || pv.Spec.ClaimRef != nil || pv.Status.Phase != corev1.VolumeAvailable {
		r.t.Errorf("volume %s: phase %s, claimRef %v, labels %v; want Available, no claimRef, associated with %s: %v", name, pv.Status.Phase, pv.Spec.ClaimRef, pv.Labels, r.id, associated)
	}
	if got, want := pv.Annotations[wellknown.LastClaim], from.Namespace+"/"+from.Name; got != want {
		r.t.Errorf("volume %s: %s = %q, want %q", name, wellknown.LastClaim, got, want)
	}
	if at, err := time.Parse(time.RFC3339, pv.Annotations[wellknown.ReleasedAt]); err != nil || time.Since(at) > 5*time.Minute {
		r.t.Errorf("volume %s: %s = %q, want the RFC 3339 time of the release", name, wellknown.ReleasedAt, pv.Annotations[wellknown.ReleasedAt])
	}
	r.waitEvent(name, "Released", string(from.UID))
}

// waitEvent waits for an event with reason on the volume whose message contains text.
func (r *releaserCase) waitEvent(volume, reason, text string) {
	r.t.Helper()
	framework.WaitEvent(r.t, 30*time.Second, framework.EventQuery{Namespace: metav1.NamespaceDefault, Kind: "PersistentVolume", Name: volume,
		Reason: reason, Message: text, Component: "reclaimable-releaser"})
}

func (r *releaserCase) events(ctx context.Context, volume string) []corev1.Event {
	r.t.Helper()
	list, err := r.client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", volume).String(),
	})
	if err != nil {
		r.t.Fatal(err)
	}
	return list.Items
}

// unchanged returns a condition that holds while none of pvs has been written.
func (r *releaserCase) unchanged(pvs ...*corev1.PersistentVolume) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		for _, pv := range pvs {
			got, err := r.client.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if got.ResourceVersion != pv.ResourceVersion {
				return false, fmt.Errorf("volume %s was written: labels %v, claimRef %v, phase %s", pv.Name, got.Labels, got.Spec.ClaimRef, got.Status.Phase)
			}
		}
		return true, nil
	}
}

// A managed claim bound to a Retain volume is deleted: the releaser has
// associated the volume while the claim existed, and returns it to the pool
// as soon as it is Released.
func TestReleaserReturnsVolumeOfDeletedManagedClaim(t *testing.T) {
	r := newReleaserCase(t)
	class := r.class("")
	inv := r.invariants(class)
	p := r.start()
	pv := r.volume(class, "")
	claim := r.bind(pv, "cache", r.id)
	r.waitAssociated(pv.Name)
	r.waitEvent(pv.Name, "Associated", "its claim "+r.ns+"/cache has label")

	r.deleteClaim(claim.Name)
	deleted := time.Now()
	// Associated through its claim alone: the next claim decides again.
	r.waitVolume(pv.Name, 10*time.Second, "returned to the pool without association", r.returnedToPool(claim, false))
	t.Logf("claim deleted -> volume Available without association: %v", time.Since(deleted).Round(time.Millisecond))
	r.checkReleased(pv.Name, claim, false)

	if got := p.Metric("reclaimable_releaser_associations_total", map[string]string{"rule": "managed-claim"}); got != 1 {
		t.Errorf("associations_total{rule=managed-claim} = %v, want 1", got)
	}
	if got := p.Metric("reclaimable_releaser_releases_total", nil); got != 1 {
		t.Errorf("releases_total = %v, want 1", got)
	}
	if got := p.Metric("reclaimable_releaser_oldest_released_seconds", nil); got != 0 {
		t.Errorf("oldest_released_seconds = %v, want 0", got)
	}
	inv.Check(t, 10*time.Second)
}

// A volume of a class annotated with the controller ID goes round the cycle
// twice and is associated once: its release keeps the label, since the class
// names this installation whatever claim comes next, so the next binding
// needs no write. A volume associated only through its managed claim loses
// the label at release: the next claim may be anyone's.
func TestReleaserKeepsAssociationOfAnnotatedClassAcrossCycles(t *testing.T) {
	r := newReleaserCase(t)
	annotated := r.class(r.id)
	plain := r.class("")
	inv := r.invariants(annotated, plain)
	p := r.start()
	pv := r.volume(annotated, "")
	byClaim := r.volume(plain, "")

	first := r.bind(pv, "first", "")
	managed := r.bind(byClaim, "managed", r.id)
	r.waitAssociated(pv.Name)
	r.waitAssociated(byClaim.Name)
	r.waitEvent(pv.Name, "Associated", "its StorageClass")
	r.waitEvent(byClaim.Name, "Associated", "its claim "+r.ns+"/managed has label")
	// Every later version of the volume comes through this watch, so that
	// the label is seen never to go, not only at the points sampled below.
	since := r.get(pv.Name)
	versions := framework.FollowVolume(t, pv.Name, since.ResourceVersion)

	r.deleteClaim(first.Name)
	r.deleteClaim(managed.Name)
	r.waitVolume(pv.Name, 30*time.Second, "returned to the pool, still associated", r.returnedToPool(first, true))
	r.waitVolume(byClaim.Name, 30*time.Second, "returned to the pool without association", r.returnedToPool(managed, false))
	r.checkReleased(pv.Name, first, true)
	r.checkReleased(byClaim.Name, managed, false)

	second := r.bind(pv, "second", "")
	r.deleteClaim(second.Name)
	r.waitVolume(pv.Name, 30*time.Second, "returned to the pool again, still associated", r.returnedToPool(second, true))
	r.checkReleased(pv.Name, second, true)

	last := r.get(pv.Name).ResourceVersion
	var phases []corev1.PersistentVolumePhase
	if since.ResourceVersion != last {
		phases = framework.VolumePhases(t, versions, 30*time.Second, func(cur *corev1.PersistentVolume) bool {
			if !r.associatedAs(cur, true) {
				t.Errorf("volume %s lost its association at version %s (phase %s, claimRef %v): labels %v",
					pv.Name, cur.ResourceVersion, cur.Status.Phase, cur.Spec.ClaimRef, cur.Labels)
			}
			return cur.ResourceVersion == last
		})
	}
	if want := []corev1.PersistentVolumePhase{corev1.VolumeReleased, corev1.VolumeAvailable, corev1.VolumeBound, corev1.VolumeReleased, corev1.VolumeAvailable}; !slices.Equal(phases, want) {
		t.Errorf("volume %s went through phases %v after its association, want %v", pv.Name, phases, want)
	}

	// The Released event of the second cycle is out, so an Associated event
	// of its binding would be too.
	associated := 0
	for _, e := range r.events(r.ctx, pv.Name) {
		if e.Reason == "Associated" {
			associated += max(int(e.Count), 1)
		}
	}
	if associated != 1 {
		t.Errorf("volume %s has %d Associated events, want 1", pv.Name, associated)
	}
	if got := p.Metric("reclaimable_releaser_associations_total", map[string]string{"rule": "storage-class"}); got != 1 {
		t.Errorf("associations_total{rule=storage-class} = %v, want 1", got)
	}
	if got := p.Metric("reclaimable_releaser_associations_total", map[string]string{"rule": "managed-claim"}); got != 1 {
		t.Errorf("associations_total{rule=managed-claim} = %v, want 1", got)
	}
	if got := p.Metric("reclaimable_releaser_releases_total", nil); got != 3 {
		t.Errorf("releases_total = %v, want 3", got)
	}
	inv.Check(t, 10*time.Second)
}

// Volumes of a class annotated with the controller ID whose claims were
// deleted while the releaser was stopped are released when it starts: one
// it had associated before it stopped, and one it never saw bound.
func TestReleaserReleasesOrphansOfAnnotatedClassAfterStart(t *testing.T) {
	r := newReleaserCase(t)
	class := r.class(r.id)
	inv := r.invariants(class)
	p := r.start()
	seen := r.volume(class, "")
	seenClaim := r.bind(seen, "seen", "")
	r.waitAssociated(seen.Name)
	p.Stop()

	unseen := r.volume(class, "")
	unseenClaim := r.bind(unseen, "unseen", "")
	r.deleteClaim(seenClaim.Name)
	r.deleteClaim(unseenClaim.Name)
	for _, name := range []string{seen.Name, unseen.Name} {
		r.waitVolume(name, 30*time.Second, "Released", func(pv *corev1.PersistentVolume) bool {
			return pv.Status.Phase == corev1.VolumeReleased
		})
	}
	if pv := r.get(unseen.Name); pv.Labels[wellknown.VolumeManagedBy] != "" {
		t.Fatalf("volume %s associated while no releaser ran: %v", unseen.Name, pv.Labels)
	}

	p.Start()
	// The class still names this ID: both stay associated.
	r.waitVolume(seen.Name, 30*time.Second, "returned to the pool, still associated", r.returnedToPool(seenClaim, true))
	r.waitVolume(unseen.Name, 30*time.Second, "returned to the pool, still associated", r.returnedToPool(unseenClaim, true))
	r.checkReleased(seen.Name, seenClaim, true)
	r.checkReleased(unseen.Name, unseenClaim, true)
	r.waitEvent(unseen.Name, "Associated", "its StorageClass")
	inv.Check(t, 10*time.Second)
}

// The releaser leaves alone a Released volume of another controller ID, a
// Bound volume of its own, and one of its own whose claim still exists
// (deleted, but kept by in-use protection while a pod uses it); the last is
// released once the claim is really gone.
func TestReleaserLeavesOthersAndLiveClaimsAlone(t *testing.T) {
	r := newReleaserCase(t)
	class := r.class(r.id)
	// The other installation's volume has a class of its own, out of the
	// invariant checker's scope: staying Released is its expected fate here.
	// Its class names this controller ID too: the label of another ID wins.
	theirsClass := r.class(r.id)
	inv := r.invariants(class)

	theirs := r.volume(theirsClass, framework.Name("other"))
	theirsClaim := r.bind(theirs, "theirs", "")
	r.deleteClaim(theirsClaim.Name)
	r.waitVolume(theirs.Name, 30*time.Second, "Released", func(pv *corev1.PersistentVolume) bool {
		return pv.Status.Phase == corev1.VolumeReleased
	})

	bound := r.volume(class, r.id)
	r.bind(bound, "bound", r.id)

	inUse := r.volume(class, r.id)
	inUseClaim := r.bind(inUse, "in-use", r.id)
	pod, err := r.client.CoreV1().Pods(r.ns).Create(r.ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "consumer"},
		Spec: corev1.PodSpec{
			NodeName:   "node-1",
			Containers: []corev1.Container{{Name: "c", Image: "busybox", VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: inUseClaim.Name},
			}}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 30*time.Second, func(ctx context.Context) (bool, error) {
		p, err := r.client.CoreV1().Pods(r.ns).Get(ctx, pod.Name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, err
	}, "the consumer pod to run")
	r.deleteClaim(inUseClaim.Name)
	framework.Eventually(t, 30*time.Second, func(ctx context.Context) (bool, error) {
		c, err := r.client.CoreV1().PersistentVolumeClaims(r.ns).Get(ctx, inUseClaim.Name, metav1.GetOptions{})
		return err == nil && c.DeletionTimestamp != nil, err
	}, "the claim in use to be terminating")

	untouched := []*corev1.PersistentVolume{r.get(theirs.Name), r.get(bound.Name), r.get(inUse.Name)}
	r.start()
	framework.Consistently(t, 2*releaserInterval+time.Second, r.unchanged(untouched...),
		"volumes of another ID, Bound ones and ones whose claim exists stay untouched over two sweeps")
	if pv := r.get(inUse.Name); pv.Status.Phase != corev1.VolumeBound {
		t.Fatalf("volume %s of the terminating claim is %s, want Bound", inUse.Name, pv.Status.Phase)
	}

	if err := r.client.CoreV1().Pods(r.ns).Delete(r.ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	r.waitVolume(inUse.Name, 30*time.Second, "returned to the pool once its claim is gone", r.returnedToPool(inUseClaim, true))
	r.checkReleased(inUse.Name, inUseClaim, true)
	framework.Consistently(t, time.Second, r.unchanged(untouched[:2]...), "the other volumes stay untouched")
	inv.Check(t, 10*time.Second)
}

// A claim recreated with the namespace and name of the deleted one has a new
// UID: it is another claim, so the old claim's volume is released. The
// releaser is stopped across the deletion, so that it learns of it only from
// the API server, with the new claim already in its cache.
func TestReleaserReleasesVolumeWhenClaimIsRecreatedWithSameName(t *testing.T) {
	r := newReleaserCase(t)
	class := r.class("")
	inv := r.invariants(class)
	p := r.start()
	pv := r.volume(class, "")
	old := r.bind(pv, "cache", r.id)
	r.waitAssociated(pv.Name)
	p.Stop()

	r.deleteClaim(old.Name)
	r.waitVolume(pv.Name, 30*time.Second, "Released", func(pv *corev1.PersistentVolume) bool {
		return pv.Status.Phase == corev1.VolumeReleased
	})
	framework.Eventually(t, 30*time.Second, func(ctx context.Context) (bool, error) {
		_, err := r.client.CoreV1().PersistentVolumeClaims(r.ns).Get(ctx, old.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	}, "the old claim to be gone")
	// The new claim asks for a class without volumes, so that it stays
	// Pending and does not take the released volume.
	recreated := r.claim(old.Name, framework.Name("no-volumes"), "", r.id)
	if recreated.UID == old.UID {
		t.Fatalf("recreated claim kept UID %s", old.UID)
	}

	p.Start()
	r.waitVolume(pv.Name, 30*time.Second, "returned to the pool", r.returnedToPool(old, false))
	r.checkReleased(pv.Name, old, false)
	if c, err := r.client.CoreV1().PersistentVolumeClaims(r.ns).Get(r.ctx, recreated.Name, metav1.GetOptions{}); err != nil || c.UID != recreated.UID {
		t.Fatalf("recreated claim: %v, %v; want it untouched", c, err)
	}
	inv.Check(t, 10*time.Second)
}

// Two replicas with one controller ID: only the Lease holder associates and
// releases; when it is killed, the other takes the Lease over and releases
// the next volume.
func TestReleaserTwoReplicasOneActs(t *testing.T) {
	r := newReleaserCase(t)
	class := r.class("")
	inv := r.invariants(class)
	replicas := []*framework.Process{r.start(), r.start()}

	lease := r.id + "-releaser"
	leaderOf := func() (*framework.Process, *framework.Process, string) {
		t.Helper()
		var holder string
		framework.Eventually(t, 30*time.Second, func(ctx context.Context) (bool, error) {
			l, err := r.client.CoordinationV1().Leases(metav1.NamespaceDefault).Get(ctx, lease, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			if err != nil {
				return false, err
			}
			if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
				return false, nil
			}
			holder = *l.Spec.HolderIdentity
			return true, nil
		}, "Lease "+lease+" to have a holder")
		var leader, standby *framework.Process
		for _, p := range replicas {
			if strings.Contains(p.Log(), `"Started leading" controllerID="`+r.id+`" controller="releaser" lease="`+lease+`" identity="`+holder+`"`) {
				leader = p
			} else {
				standby = p
			}
		}
		if leader == nil || standby == nil {
			t.Fatalf("Lease held by %s, but not exactly one replica logs that it leads as such", holder)
		}
		return leader, standby, holder
	}
	// released lists the volumes a replica's log says it released.
	released := func(p *framework.Process) []string {
		var out []string
		for _, line := range strings.Split(p.Log(), "\n") {
			if strings.Contains(line, `"Released volume"`) {
				if m := regexp.MustCompile(` pv="([^"]+)"`).FindStringSubmatch(line); m != nil {
					out = append(out, m[1])
				}
			}
		}
		return out
	}
	cycle := func(claimName string) *corev1.PersistentVolume {
		t.Helper()
		pv := r.volume(class, "")
		claim := r.bind(pv, claimName, r.id)
		r.waitAssociated(pv.Name)
		r.deleteClaim(claim.Name)
		r.waitVolume(pv.Name, 30*time.Second, "returned to the pool", r.returnedToPool(claim, false))
		r.checkReleased(pv.Name, claim, false)
		return pv
	}

	leader, standby, holder := leaderOf()
	// What the leader alert reads: 1 from the leader, 0 from the standby.
	for p, want := range map[*framework.Process]float64{leader: 1, standby: 0} {
		if got := p.Metric("reclaimable_leader", map[string]string{"controller": "releaser"}); got != want {
			t.Errorf("reclaimable_leader{controller=releaser} = %v from a replica, want %v", got, want)
		}
	}
	first := cycle("first")
	if got := released(leader); len(got) != 1 || got[0] != first.Name {
		t.Errorf("leader released %q, want [%s]", got, first.Name)
	}
	if got := released(standby); len(got) != 0 {
		t.Errorf("standby released %q, want nothing", got)
	}
	if strings.Contains(standby.Log(), `"Associated volume"`) {
		t.Errorf("standby associated a volume")
	}

	leader.Kill()
	framework.Eventually(t, 30*time.Second, func(ctx context.Context) (bool, error) {
		l, err := r.client.CoordinationV1().Leases(metav1.NamespaceDefault).Get(ctx, lease, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" && *l.Spec.HolderIdentity != holder, nil
	}, "the standby to take the Lease over")
	newLeader, _, _ := leaderOf()
	if newLeader != standby {
		t.Fatalf("the Lease went to a replica other than the standby")
	}
	if got := standby.Metric("reclaimable_leader", map[string]string{"controller": "releaser"}); got != 1 {
		t.Errorf("reclaimable_leader{controller=releaser} = %v from the new leader, want 1", got)
	}
	second := cycle("second")
	if got := released(standby); len(got) != 1 || got[0] != second.Name {
		t.Errorf("new leader released %q, want [%s]", got, second.Name)
	}
	inv.Check(t, 10*time.Second)
}
