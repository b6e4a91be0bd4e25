package provisioner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
	volumehelpers "k8s.io/component-helpers/storage/volume"
	lib "sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/reclaimable/reclaimable/internal/controllertest"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// Under reuseScope cluster the issue binds as the PV controller would. Under
// namespace, should the claim end up on another volume, the PV controller
// must unbind this one without clearing its claimRef (no bound-by-controller
// mark), and the volume stays held for the claim's namespace.
func TestProvisionIssuesPoolMember(t *testing.T) {
	for _, scope := range []string{wellknown.ReuseScopeCluster, wellknown.ReuseScopeNamespace} {
		t.Run(scope, func(t *testing.T) { testProvisionIssuesPoolMember(t, scope) })
	}
}

func testProvisionIssuesPoolMember(t *testing.T, scope string) {
	claim := claimFor("ns", "cache", "1Gi")
	f := newFixture(t, []*corev1.PersistentVolume{
		volume("smaller-free", "1Gi"),
		volume("last-used-by-it", "2Gi", released("ns", "cache", "gone-uid", t0())),
	}, claim)

	_, state, err := f.provision(f.directoryClass(map[string]string{wellknown.ReuseScope: scope}), claim)
	wantIssued(t, err, "last-used-by-it")
	if state != lib.ProvisioningFinished {
		t.Errorf("state = %v", state)
	}
	pv := f.server("last-used-by-it")
	if ref := pv.Spec.ClaimRef; ref == nil || ref.UID != claim.UID || ref.Name != "cache" || ref.Namespace != "ns" || ref.Kind != "PersistentVolumeClaim" {
		t.Errorf("claimRef = %+v, want the claim with its UID", ref)
	}
	if pv.Annotations[wellknown.LastClaim] != "ns/cache" || pv.Annotations[wellknown.IssuedAt] == "" {
		t.Errorf("annotations = %v", pv.Annotations)
	}
	_, boundByController := pv.Annotations[volumehelpers.AnnBoundByController]
	held, marked := pv.Annotations[wellknown.HeldForNamespace]
	if namespaced := scope == wellknown.ReuseScopeNamespace; boundByController == namespaced || marked != namespaced || (marked && held != "ns") {
		t.Errorf("annotations = %v, want bound-by-controller %v and held for ns %v", pv.Annotations, !namespaced, namespaced)
	}
	if f.server("smaller-free").Spec.ClaimRef != nil {
		t.Error("a second volume was taken")
	}
	if ev := f.events(); !hasEvent(ev, "Normal IssuedFromPool Volume last-used-by-it issued from the pool of class pool with the data of its last use (claim cache)") {
		t.Errorf("events = %v", ev)
	}
	if n := controllertest.Metric(t, f.reg, "reclaimable_provisioner_pool_issued_total", "class", "pool"); n != 1 {
		t.Errorf("issued metric = %v", n)
	}
}

func TestProvisionLeavesMembersWhoseClaimExists(t *testing.T) {
	claim := claimFor("ns", "new", "1Gi")
	// The cache has not seen the claim that still holds "held"; the API
	// server has.
	holder := claimFor("ns", "holder", "1Gi")
	f := newFixture(t, []*corev1.PersistentVolume{
		volume("held", "1Gi", released("ns", "holder", string(holder.UID), t0())),
		volume("other", "2Gi"),
	}, claim)
	if _, err := f.client.CoreV1().PersistentVolumeClaims("ns").Create(context.Background(), holder, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A claim recreated under the name of another member's claim is a
	// different claim: that member is free.
	recreated := claimFor("ns", "recreated", "1Gi")
	f2 := newFixture(t, []*corev1.PersistentVolume{
		volume("was-recreated", "1Gi", released("ns", "recreated", "the-first-uid", t0())),
	}, recreated)

	_, _, err := f.provision(f.directoryClass(nil), claim)
	wantIssued(t, err, "other")
	if f.server("held").Spec.ClaimRef.UID != holder.UID {
		t.Error("a volume whose claim exists was taken")
	}

	_, _, err = f2.provision(f2.directoryClass(nil), recreated)
	wantIssued(t, err, "was-recreated")
}

func TestProvisionTriesTheNextMemberOnConflict(t *testing.T) {
	claim := claimFor("ns", "c", "1Gi")
	f := newFixture(t, []*corev1.PersistentVolume{volume("a", "1Gi"), volume("b", "1Gi")}, claim)
	// Someone else took "a" since the cache saw it.
	a := f.server("a")
	a.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "ns", Name: "other", UID: "other-uid"}
	if _, err := f.client.CoreV1().PersistentVolumes().Update(context.Background(), a, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	_, _, err := f.provision(f.directoryClass(nil), claim)
	wantIssued(t, err, "b")
	if got := f.server("a").Spec.ClaimRef.UID; got != "other-uid" {
		t.Errorf("the volume another writer took now points at %q", got)
	}
	if n := controllertest.Metric(t, f.reg, "reclaimable_provisioner_pool_take_conflicts_total", "class", "pool"); n != 1 {
		t.Errorf("conflict metric = %v, want 1", n)
	}
}

func TestProvisionConflictWithThePVController(t *testing.T) {
	// The PV controller bound the claim to the Available member itself
	// while the provisioner tried to: the claim has its volume, and no
	// other is taken or created.
	claim := claimFor("ns", "c", "1Gi")
	f := newFixture(t, []*corev1.PersistentVolume{volume("a", "1Gi"), volume("b", "1Gi")}, claim)
	a := f.server("a")
	a.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "ns", Name: "c", UID: claim.UID}
	if _, err := f.client.CoreV1().PersistentVolumes().Update(context.Background(), a, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, _, err := f.provision(f.directoryClass(nil), claim)
	var ignored *lib.IgnoredError
	if !errors.As(err, &ignored) || !strings.Contains(ignored.Reason, "bound volume a") {
		t.Fatalf("Provision = %v, want the claim left to its binding", err)
	}
	if f.server("b").Spec.ClaimRef != nil {
		t.Error("a second volume was taken")
	}
	if f.p.ShouldProvision(context.Background(), claim) {
		t.Error("ShouldProvision = true before the cache shows the binding")
	}
	entries, _ := os.ReadDir(f.root)
	if len(entries) != 0 {
		t.Error("a volume was created")
	}

	// Only the member's status changed since the cache saw it: still free,
	// so it is taken on a second try.
	f2 := newFixture(t, []*corev1.PersistentVolume{volume("a", "1Gi"), volume("b", "2Gi")}, claim)
	a = f2.server("a")
	a.Status.Phase = corev1.VolumeAvailable
	a.Annotations["unrelated"] = "change"
	if _, err := f2.client.CoreV1().PersistentVolumes().Update(context.Background(), a, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, _, err = f2.provision(f2.directoryClass(nil), claim)
	wantIssued(t, err, "a")
	if f2.server("a").Spec.ClaimRef.UID != claim.UID || f2.server("b").Spec.ClaimRef != nil {
		t.Error("the member changed meanwhile was not taken")
	}
}

// A claim made again under its name while its volume comes back: the
// releaser reserves the volume for the name while the provisioner takes
// it, and the PV controller writes it once more before the second try.
// The PV controller binds a volume kept for the claim's name to the claim
// on its own: the provisioner leaves the claim to that binding rather than
// take the member reserved for another name as well.
func TestProvisionLeavesAClaimToTheVolumeKeptForItsName(t *testing.T) {
	claim := claimFor("ns", "cache", "1Gi")
	f := newFixture(t, []*corev1.PersistentVolume{
		volume("own", "1Gi", returned("ns/cache", t0()), released("ns", "cache", "earlier-uid", t0())),
		volume("spare", "1Gi", reservedFor("ns", "other", t0())),
	}, claim)
	own := f.server("own")
	own.Spec.ClaimRef = &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: "ns", Name: "cache"}
	own.Annotations[wellknown.ReservedUntil] = t0().Add(time.Hour).UTC().Format(time.RFC3339)
	if _, err := f.client.CoreV1().PersistentVolumes().Update(context.Background(), own, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The PV controller's status write, between the provisioner's read of
	// the reserved member and its second write.
	writes := 0
	f.client.PrependReactor("update", "persistentvolumes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if u, ok := a.(k8stesting.UpdateAction); !ok || u.GetObject().(*corev1.PersistentVolume).Name != "own" || u.GetSubresource() != "" {
			return false, nil, nil
		}
		if writes++; writes == 2 {
			live, err := f.client.Tracker().Get(corev1.SchemeGroupVersion.WithResource("persistentvolumes"), "", "own")
			if err != nil {
				return true, nil, err
			}
			pv := live.(*corev1.PersistentVolume).DeepCopy()
			pv.Status.Phase = corev1.VolumeAvailable
			pv.ResourceVersion += "0"
			if err := f.client.Tracker().Update(corev1.SchemeGroupVersion.WithResource("persistentvolumes"), pv, ""); err != nil {
				return true, nil, err
			}
		}
		return false, nil, nil
	})
	_, _, err := f.provision(f.directoryClass(nil), claim)
	var ignored *lib.IgnoredError
	if !errors.As(err, &ignored) || !strings.Contains(ignored.Reason, "bound volume own") {
		t.Errorf("Provision = %v, want the claim left to the PV controller's binding of its own volume", err)
	}
	if ref := f.server("spare").Spec.ClaimRef; ref.UID != "" || ref.Name != "other" {
		t.Errorf("the member reserved for another name was taken: claimRef %+v", ref)
	}
}

func TestProvisionIsIdempotent(t *testing.T) {
	claim := claimFor("ns", "c", "1Gi")
	f := newFixture(t, []*corev1.PersistentVolume{volume("a", "1Gi"), volume("b", "1Gi")}, claim)
	class := f.directoryClass(nil)

	_, _, err := f.provision(class, claim)
	wantIssued(t, err, "a")
	writes := f.writes()

	// The library calls again before the cache shows the take.
	_, _, err = f.provision(class, claim)
	wantIssued(t, err, "a")
	if f.p.ShouldProvision(context.Background(), claim) {
		t.Error("ShouldProvision = true for a claim a volume was issued to")
	}
	// And again once it does.
	old, _, _ := f.volumes.GetByKey("a")
	if err := f.volumes.Update(f.server("a")); err != nil {
		t.Fatal(err)
	}
	f.p.onVolume(old.(*corev1.PersistentVolume), f.server("a"))
	if taken := f.p.takes.Members(); len(taken) != 0 {
		t.Errorf("expectations kept after the cache showed the take: %v", taken)
	}
	_, _, err = f.provision(class, claim)
	wantIssued(t, err, "a")

	if w := f.writes(); w != writes {
		t.Errorf("repeated calls wrote %d times more", w-writes)
	}
	if f.server("b").Spec.ClaimRef != nil {
		t.Error("a repeated call took a second volume")
	}
}

// The handlers of the volume informer run on goroutines of their own: the
// one that wakes waiting claims may see a member pointed at its claim
// before issued does. Until issued shows it, the record of the take
// stands, or the claim would look as if it had no volume and be issued a
// second one (the library's call and the early hand-off each took one).
func TestTakeStandsUntilIssuedShowsIt(t *testing.T) {
	claim := claimFor("ns", "c", "1Gi")
	f := newFixture(t, []*corev1.PersistentVolume{volume("a", "1Gi"), volume("b", "1Gi")}, claim)
	class := f.directoryClass(nil)
	_, _, err := f.provision(class, claim)
	wantIssued(t, err, "a")

	old, _, _ := f.volumes.GetByKey("a")
	f.p.onVolume(old.(*corev1.PersistentVolume), f.server("a"))
	if got := f.p.issuedTo(claim); got != "a" {
		t.Fatalf("issuedTo = %q once the waking handler saw the take, before issued did; want a", got)
	}
	_, _, err = f.provision(class, claim)
	wantIssued(t, err, "a")
	if f.server("b").Spec.ClaimRef != nil {
		t.Fatal("a second volume was issued to the claim")
	}

	if err := f.volumes.Update(f.server("a")); err != nil {
		t.Fatal(err)
	}
	if got := f.p.issuedTo(claim); got != "a" {
		t.Errorf("issuedTo = %q once issued shows the take, want a", got)
	}
	if taken := f.p.takes.Members(); len(taken) != 0 {
		t.Errorf("the record of the take kept once issued shows it: %v", taken)
	}
}

func TestProvisionRacingClaimsNeverShareAVolume(t *testing.T) {
	var pvs []*corev1.PersistentVolume
	for i := range 5 {
		pvs = append(pvs, volume(fmt.Sprintf("member-%d", i), "1Gi", released("ns", fmt.Sprintf("gone-%d", i), fmt.Sprintf("gone-uid-%d", i), t0())))
	}
	var claims []*corev1.PersistentVolumeClaim
	for i := range 20 {
		claims = append(claims, claimFor("ns", fmt.Sprintf("c%d", i), "1Gi"))
	}
	f := newFixture(t, pvs, claims...)
	class := f.directoryClass(nil)

	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		grown  int
		issued = map[string]types.UID{}
	)
	for _, c := range claims {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pv, _, err := f.provision(class, c)
			mu.Lock()
			defer mu.Unlock()
			var ignored *lib.IgnoredError
			switch {
			case err == nil:
				grown++
			case errors.As(err, &ignored):
				issued[c.Name] = c.UID
			default:
				t.Errorf("claim %s: %v", c.Name, err)
			}
			_ = pv
		}()
	}
	wg.Wait()

	if grown != 15 || len(issued) != 5 {
		t.Errorf("grown %d, issued %d; want 15 and 5", grown, len(issued))
	}
	owners := map[types.UID]string{}
	for _, pv := range pvs {
		ref := f.server(pv.Name).Spec.ClaimRef
		if prev, ok := owners[ref.UID]; ok {
			t.Errorf("claim %s holds %s and %s", ref.Name, prev, pv.Name)
		}
		owners[ref.UID] = pv.Name
		if issued[ref.Name] != ref.UID {
			t.Errorf("%s points at %s, which was not told it got a pool volume", pv.Name, ref.Name)
		}
	}
}

func TestDescribeLastUseHidesOtherNamespaces(t *testing.T) {
	claim := claimFor("team", "cache", "1Gi")
	for last, want := range map[string]string{
		"":             "never used",
		"team/build":   "claim build",
		"team-b/build": "a claim of another namespace",
		"other/secret": "a claim of another namespace",
	} {
		if got := describeLastUse(last, claim); got != want {
			t.Errorf("describeLastUse(%q) = %q, want %q", last, got, want)
		}
	}
}

// Every failed attempt leaves exactly one Warning on the claim: a refusal
// under its own reason, anything else under the library's reason and in its
// words (the library's copy is left out, see libevents.go).
func TestProvisionReportsEachFailureOnce(t *testing.T) {
	claim := claimFor("ns", "c", "1Gi")
	f := newFixture(t, []*corev1.PersistentVolume{volume("free", "1Gi")}, claim)

	_, _, err := f.provision(f.directoryClass(map[string]string{"baseDir": "/etc"}), claim)
	if err == nil {
		t.Fatal("a class with its baseDir outside the root was accepted")
	}
	if ev := f.events(); len(ev) != 1 || !strings.HasPrefix(ev[0], "Warning "+reasonInvalidParameters+" ") {
		t.Errorf("events of a refusal = %q, want one %s", ev, reasonInvalidParameters)
	}

	f.client.PrependReactor("update", "persistentvolumes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("etcd is down")
	})
	if _, _, err = f.provision(f.directoryClass(nil), claim); err == nil {
		t.Fatal("Provision succeeded although every update failed")
	}
	want := `Warning ProvisioningFailed failed to provision volume with StorageClass "pool": issuing volume free: etcd is down`
	if ev := f.events(); len(ev) != 1 || ev[0] != want {
		t.Errorf("events of a failed write = %q, want [%q]", ev, want)
	}
	if !leftOut(&corev1.Event{Type: corev1.EventTypeWarning, Reason: "ProvisioningFailed", Message: strings.TrimPrefix(want, "Warning ProvisioningFailed ")}) {
		t.Errorf("the library's copy of %q would be recorded too", want)
	}
}

// A claim finds every free member reserved for other claims' names: it
// takes the oldest reservation rather than grow the pool, never a volume an
// administrator pre-bound, and the volume is no longer reserved.
func TestProvisionTakesAReservationBeforeGrowing(t *testing.T) {
	claim := claimFor("ns", "new-job", "1Gi")
	f := newFixture(t, []*corev1.PersistentVolume{
		volume("reserved-later", "1Gi", reservedFor("ns", "b", t0().Add(time.Hour))),
		volume("reserved-sooner", "1Gi", reservedFor("ns", "a", t0())),
		volume("by-hand", "1Gi", func(pv *corev1.PersistentVolume) {
			pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "ns", Name: "z"}
		}),
	}, claim)
	_, _, err := f.provision(f.directoryClass(nil), claim)
	wantIssued(t, err, "reserved-sooner")
	got := f.server("reserved-sooner")
	if ref := got.Spec.ClaimRef; ref == nil || ref.UID != claim.UID || got.Annotations[wellknown.ReservedUntil] != "" {
		t.Errorf("taken member: claimRef %+v, annotations %v; want the claim and no reservation", ref, got.Annotations)
	}
	if ev := f.events(); len(ev) != 1 || !hasEvent(ev, "Normal IssuedFromPool Volume reserved-sooner issued from the pool of class pool with the data of its last use (claim a); it was reserved for the next claim of that name (reserveFor), and no other free volume of the class fits") {
		t.Errorf("events = %q", ev)
	}
}

// A claim passes over the member another worker is taking and gets the
// next, rather than race for it and pay a conflict.
func TestProvisionPassesOverAMemberBeingTaken(t *testing.T) {
	claim := claimFor("ns", "c", "1Gi")
	f := newFixture(t, []*corev1.PersistentVolume{volume("best", "1Gi"), volume("next", "2Gi")}, claim)
	if !f.p.takes.Try("best") {
		t.Fatal("try refused")
	}
	_, _, err := f.provision(f.directoryClass(nil), claim)
	wantIssued(t, err, "next")
}

// A volume that cannot be handed to the scrub for a claim is not hidden
// behind "the pool is exhausted": a refusal of the API server is a Warning
// on the claim, and the claim is tried again with back-off; a volume that
// changed since the cache showed it is looked at again, without a Warning.
func TestExhaustedPoolSaysWhyItCannotScrubForTheClaim(t *testing.T) {
	for _, tt := range []struct {
		name    string
		err     error
		warning string
	}{
		{"refused", apierrors.NewForbidden(schema.GroupResource{Resource: "persistentvolumes"}, "a", errors.New("no")),
			`Warning ProvisioningFailed failed to provision volume with StorageClass "pool": handing volume a, held for another namespace, to the scrub for this claim (scrubAcrossNamespaces):`},
		{"changed meanwhile", apierrors.NewConflict(schema.GroupResource{Resource: "persistentvolumes"}, "a", errors.New("changed")), ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			claim := claimFor("tenant-b", "job", "1Gi")
			f := newFixture(t, []*corev1.PersistentVolume{volume("a", "1Gi", heldFor("tenant-a"))}, claim)
			f.client.PrependReactor("update", "persistentvolumes", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, tt.err
			})
			_, _, err := f.provision(f.directoryClass(map[string]string{"maxVolumes": "1", wellknown.ScrubAcrossNamespaces: "true"}), claim)
			if err == nil || errors.Is(err, errExhausted) {
				t.Fatalf("Provision: %v, want an error that the library retries, not a wait for a freed volume", err)
			}
			var warnings []string
			for _, e := range f.events() {
				if strings.HasPrefix(e, "Warning ") {
					warnings = append(warnings, e)
				}
			}
			switch {
			case tt.warning == "" && len(warnings) > 0:
				t.Errorf("warnings %q, want none", warnings)
			case tt.warning != "" && (len(warnings) != 1 || !strings.HasPrefix(warnings[0], tt.warning)):
				t.Errorf("warnings %q, want one starting %q", warnings, tt.warning)
			}
			if hasEvent(f.events(), "Normal ScrubbingToShare") {
				t.Error("ScrubbingToShare said, though nothing is being emptied")
			}
		})
	}
}

// At its maximum, a pool with scrubAcrossNamespaces hands the volume held
// for another namespace longest to the scrub for a claim that finds
// nothing, and the claim waits for it; without the setting it only waits.
// A volume being emptied already is waited for, not joined by another.
func TestExhaustedPoolScrubsAVolumeOfAnotherNamespaceForTheClaim(t *testing.T) {
	for _, tt := range []struct {
		name    string
		across  string
		members []*corev1.PersistentVolume
		marked  string
	}{
		{"scrubAcrossNamespaces", "true", []*corev1.PersistentVolume{volume("a", "1Gi", heldFor("tenant-a")), volume("c", "1Gi", heldFor("tenant-c"))}, "a"},
		{"without it", "false", []*corev1.PersistentVolume{volume("a", "1Gi", heldFor("tenant-a")), volume("c", "1Gi", heldFor("tenant-c"))}, ""},
		{"one being emptied already", "true", []*corev1.PersistentVolume{volume("a", "1Gi", heldFor("tenant-a"), func(pv *corev1.PersistentVolume) {
			pv.Annotations[wellknown.Scrub] = wellknown.ScrubRunning
		}), volume("c", "1Gi", heldFor("tenant-c"))}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			claim := claimFor("tenant-b", "job", "1Gi")
			f := newFixture(t, tt.members, claim)
			_, _, err := f.provision(f.directoryClass(map[string]string{"maxVolumes": "2", wellknown.ScrubAcrossNamespaces: tt.across}), claim)
			if !errors.Is(err, errExhausted) {
				t.Fatalf("Provision: %v, want the claim to wait", err)
			}
			for _, pv := range tt.members {
				want := pv.Annotations[wellknown.Scrub]
				if pv.Name == tt.marked {
					want = wellknown.ScrubRequested
				}
				if got := f.server(pv.Name).Annotations[wellknown.Scrub]; got != want {
					t.Errorf("volume %s: scrub %q, want %q", pv.Name, got, want)
				}
			}
			if got := hasEvent(f.events(), "Normal ScrubbingToShare"); got != (tt.marked != "") {
				t.Errorf("ScrubbingToShare event: %v, want %v", got, tt.marked != "")
			}
		})
	}
}
