package framework

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	volumehelpers "k8s.io/component-helpers/storage/volume"

	"github.com/reclaimable/reclaimable/client/clientset/versioned"
	"github.com/reclaimable/reclaimable/internal/controller"
	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// Scope says which objects an invariant checker looks at, so that tests
// sharing a cluster do not see each other's objects.
type Scope struct {
	// ControllerID of the installation under test.
	ControllerID string
	// Classes are the StorageClasses whose volumes and claims are checked.
	Classes []string
	// Namespaces hold the claims and owners that are checked.
	Namespaces []string
	// NamespaceScoped are the classes of Classes with reuseScope namespace:
	// a volume of theirs is bound only in the namespace it was bound in
	// first.
	NamespaceScoped []string
	// Scrubbed are the classes of Classes whose pool says onRelease
	// Scrub: a volume released from a claim is bound to no claim but its
	// scrub claim until its scrub is done.
	Scrubbed []string
	// ScrubbedUnlessSucceeded are the classes of Classes whose pool says
	// onRelease ScrubUnlessSucceeded: as Scrubbed, for a volume released
	// from a claim not seen to say its consumer succeeded.
	ScrubbedUnlessSucceeded []string
	// KeyRequired are the classes of Classes whose pool says keyPolicy
	// Require, each with its keyLabel: a volume of theirs goes only to
	// claims of the key it was last bound under (13).
	KeyRequired map[string]string
	// MaxPerNamespace are the classes of Classes whose pool says
	// maxVolumesPerNamespace, each with it: no namespace's share (the
	// members whose claimRef names a claim of it, whoever wrote it) is
	// ever seen above it (14).
	MaxPerNamespace map[string]int
	// StuckAfter bounds how long a member may wait for its storage (made
	// ahead, wellknown.StoragePending) or for its eviction to end (invariant
	// 12); 0 means six minutes, three times the default --lifecycle-timeout.
	StuckAfter time.Duration
}

// Invariants watches a scenario from its start and checks, at its end, the
// fourteen invariants of the product (docs: "Invariants"):
//
//  1. no volume is bound to two claims, and no claim to two volumes;
//  2. no volume whose claim still exists is released;
//  3. no data is removed from a Retain volume (registered marker files survive),
//     but by a scrub;
//  4. every claim the podwatcher created is deleted once its owner is gone,
//     and none before;
//  5. no associated volume whose claim is gone stays Released;
//  6. no claim is bound to a volume that does not fit it;
//  7. no volume of a namespace-scoped class (reuseScope namespace) is bound
//     in a namespace other than the one it was last bound in, unless it was
//     scrubbed since (its scrub claim is no consumer's);
//  8. no VolumePool of a class in scope reports more members of a state, or
//     in all, than the class has volumes in that state;
//  9. no volume of a Scrubbed class is bound to a claim between its release
//     and the success of its scrub, but to its scrub claim; nor one of a
//     ScrubbedUnlessSucceeded class released from a claim that never said
//     its consumer succeeded;
//  10. no member is both issued and evicted: none being deleted for
//     eviction names a claim's UID, and no claim loses its volume (Lost);
//  11. no volume an administrator pre-bound (a claimRef by name that is no
//     reservation, hold or member made ahead) is fenced for eviction;
//  12. no member stays storage-pending, or fenced for eviction and being
//     deleted, past Scope.StuckAfter;
//  13. no volume of a KeyRequired class is bound to a claim of another
//     cache key than the claim it was last bound to, unless it was scrubbed
//     since: the key of a claim being its keyLabel's value on the claim,
//     else on the Pod that owns it, as this checker reads them;
//  14. no namespace holds more members of a MaxPerNamespace class than its
//     maximum: members whose claimRef names a claim of the namespace
//     (bound, released, held or reserved), whether the provisioner or the
//     PV controller wrote it.
//
// 1, 2, 4 ("none before"), 7, 11, 13 and 14 are checked as the scenario runs, from
// watch events confirmed against the API server; the rest at the end.
type Invariants struct {
	scope   Scope
	factory informers.SharedInformerFactory
	cancel  context.CancelFunc

	mu         sync.Mutex
	violations []string
	markers    map[string][]string  // volume name -> files that must survive
	boundTo    map[types.UID]string // claim UID -> the volume it was first seen Bound to
	boundIn    map[string]string    // volume -> the namespace it was last seen Bound in
	keyedBy    map[string]string    // volume of a KeyRequired class -> the key of the claim it was last seen Bound to
	claimKeys  map[types.UID]string // claims of KeyRequired classes -> their key, read once
	unscrubbed map[string]string    // volume of a Scrubbed class -> the claim it was released from, until scrubbed
	succeeded  map[types.UID]bool   // claims seen saying their consumer succeeded
	scrubState map[string]string    // volume -> its scrub annotation as last seen
	scrubs     int                  // volumes of the scope seen scrubbed
	shares     map[string]share     // volume of a MaxPerNamespace class -> the share it is in
	overShare  map[share]bool       // shares seen above their maximum, reported once
}

// share is one namespace's share of a class's pool.
type share struct{ class, namespace string }

// Scrubs is how many times a volume of the scope was seen scrubbed so far.
func (inv *Invariants) Scrubs() int {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	return inv.scrubs
}

// WatchInvariants starts watching the cluster for scope. Call Check at the
// end of the scenario; it is also called at cleanup if the test did not.
func WatchInvariants(t testing.TB, scope Scope) *Invariants {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	inv := &Invariants{
		scope:      scope,
		factory:    informers.NewSharedInformerFactory(Client(), 0),
		cancel:     cancel,
		markers:    map[string][]string{},
		boundTo:    map[types.UID]string{},
		boundIn:    map[string]string{},
		keyedBy:    map[string]string{},
		claimKeys:  map[types.UID]string{},
		unscrubbed: map[string]string{},
		succeeded:  map[types.UID]bool{},
		scrubState: map[string]string{},
		shares:     map[string]share{},
		overShare:  map[share]bool{},
	}
	pvs := inv.factory.Core().V1().PersistentVolumes().Informer()
	claims := inv.factory.Core().V1().PersistentVolumeClaims().Informer()
	if _, err := pvs.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			inv.checkBinding(obj.(*corev1.PersistentVolume))
			inv.checkScrub(obj.(*corev1.PersistentVolume))
			inv.checkEviction(obj.(*corev1.PersistentVolume))
			inv.checkPreBound(obj.(*corev1.PersistentVolume))
			inv.checkShare(obj.(*corev1.PersistentVolume), false)
		},
		UpdateFunc: func(old, cur any) {
			inv.checkRelease(ctx, old.(*corev1.PersistentVolume), cur.(*corev1.PersistentVolume))
			inv.checkBinding(cur.(*corev1.PersistentVolume))
			inv.checkScrub(cur.(*corev1.PersistentVolume))
			inv.checkEviction(cur.(*corev1.PersistentVolume))
			inv.checkPreBound(cur.(*corev1.PersistentVolume))
			inv.checkShare(cur.(*corev1.PersistentVolume), false)
		},
		DeleteFunc: func(obj any) {
			if pv, ok := obj.(*corev1.PersistentVolume); ok {
				inv.checkShare(pv, true)
			}
		},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := claims.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			inv.noteOutcome(obj)
			inv.noteKey(obj)
		},
		UpdateFunc: func(_, obj any) {
			inv.noteOutcome(obj)
			inv.noteKey(obj)
			inv.checkLost(obj)
		},
		DeleteFunc: func(obj any) {
			inv.noteOutcome(obj)
			inv.noteKey(obj)
			if c, ok := obj.(*corev1.PersistentVolumeClaim); ok {
				inv.checkClaimDeletion(ctx, c)
			}
		},
	}); err != nil {
		t.Fatal(err)
	}
	inv.factory.Start(ctx.Done())
	for typ, ok := range inv.factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("invariant checker: cache for %v did not sync", typ)
		}
	}
	t.Cleanup(cancel)
	return inv
}

// Marker registers a file that holds data of volume pv: it must still
// exist at Check if the volume does and has reclaim policy Retain.
func (inv *Invariants) Marker(pv, path string) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	inv.markers[pv] = append(inv.markers[pv], path)
}

func (inv *Invariants) stuckAfter() time.Duration {
	if inv.scope.StuckAfter > 0 {
		return inv.scope.StuckAfter
	}
	return 6 * time.Minute
}

func (inv *Invariants) violate(format string, args ...any) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	inv.violations = append(inv.violations, fmt.Sprintf(format, args...))
}

func (inv *Invariants) inClass(class string) bool { return slices.Contains(inv.scope.Classes, class) }
func (inv *Invariants) inNamespace(ns string) bool {
	return slices.Contains(inv.scope.Namespaces, ns)
}

// checkBinding (1): a claim is only ever Bound to one volume. Every watch
// event of a Bound volume is checked against the volume the claim was first
// seen Bound to; a claim's volume never changes in its lifetime, so this
// also catches two bindings that the watch shows one after the other.
//
// Only phase Bound counts: the PV controller sets it once the claim names
// the volume too. A claimRef alone is a reservation, and two of them for one
// claim are the race every external provisioner has with the PV controller
// (a volume is provisioned while the PV controller binds the claim to
// another one); the PV controller then clears the spare reservation, and
// the claim only ever uses one volume.
func (inv *Invariants) checkBinding(pv *corev1.PersistentVolume) {
	if !inv.inClass(pv.Spec.StorageClassName) || !bound(pv) {
		return
	}
	ref := pv.Spec.ClaimRef
	inv.mu.Lock()
	first, seen := inv.boundTo[ref.UID]
	if !seen {
		inv.boundTo[ref.UID] = pv.Name
	}
	inv.mu.Unlock()
	if seen && first != pv.Name {
		inv.violate("invariant 1: claim %s/%s (uid %s) is bound to volume %s, and was bound to volume %s", ref.Namespace, ref.Name, ref.UID, pv.Name, first)
	}
	inv.checkNamespace(pv)
	inv.checkKey(pv)
}

// checkKey (13): a volume of a KeyRequired class, seen Bound to a claim of
// one key, is never seen Bound to a claim of another. The key is read once
// per claim, from the API server: the claim's label or annotation, else
// its owning Pod's.
func (inv *Invariants) checkKey(pv *corev1.PersistentVolume) {
	label, required := inv.scope.KeyRequired[pv.Spec.StorageClassName]
	ref := pv.Spec.ClaimRef
	if !required || ref.Name == wellknown.ScrubClaim(pv.Name) {
		return
	}
	key, known := inv.keyOf(ref.UID)
	if !known {
		var err error
		if key, err = keyOfClaim(context.Background(), ref.Namespace, ref.Name, ref.UID, label); err != nil {
			// Gone already (a claim deleted as soon as it was bound):
			// the claims' watch shows it, with its labels, soon.
			if key, known = inv.awaitKey(ref.UID); !known {
				inv.violate("invariant 13: volume %s is bound to claim %s/%s, whose key cannot be read: %v", pv.Name, ref.Namespace, ref.Name, err)
				return
			}
		}
	}
	inv.mu.Lock()
	inv.claimKeys[ref.UID] = key
	last, seen := inv.keyedBy[pv.Name]
	inv.keyedBy[pv.Name] = key
	inv.mu.Unlock()
	if seen && last != key {
		inv.violate("invariant 13: volume %s of class %s (keyPolicy Require) is bound to claim %s/%s of key %q, and was last bound under key %q", pv.Name, pv.Spec.StorageClassName, ref.Namespace, ref.Name, key, last)
	}
}

// noteKey records the key of a claim of a KeyRequired class as the
// claims' watch shows it, where the claim alone says it: its keyLabel's
// label or annotation, or none without a Pod that owns it.
func (inv *Invariants) noteKey(obj any) {
	c, ok := controller.Object[*corev1.PersistentVolumeClaim](obj)
	if !ok || c.Spec.StorageClassName == nil {
		return
	}
	label, required := inv.scope.KeyRequired[*c.Spec.StorageClassName]
	if !required {
		return
	}
	key := pools.CacheKey(label, c.Labels, c.Annotations)
	if owner := metav1.GetControllerOf(c); key == "" && owner != nil && owner.Kind == "Pod" {
		return // the Pod's: read from the API server when needed
	}
	inv.mu.Lock()
	inv.claimKeys[c.UID] = key
	inv.mu.Unlock()
}

func (inv *Invariants) keyOf(uid types.UID) (string, bool) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	key, known := inv.claimKeys[uid]
	return key, known
}

// awaitKey waits a little for the claims' watch to show the key of the
// claim of uid.
func (inv *Invariants) awaitKey(uid types.UID) (key string, known bool) {
	_ = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		key, known = inv.keyOf(uid)
		return known, nil
	})
	return key, known
}

// keyOfClaim reads the cache key of the claim ns/name (UID uid) under
// keyLabel label: its label or annotation, else that of the Pod that owns
// it.
func keyOfClaim(ctx context.Context, ns, name string, uid types.UID, label string) (string, error) {
	claim, err := Client().CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case err != nil:
		return "", err
	case claim.UID != uid:
		return "", fmt.Errorf("claim %s/%s is another claim now (uid %s)", ns, name, claim.UID)
	}
	if key := pools.CacheKey(label, claim.Labels, claim.Annotations); key != "" {
		return key, nil
	}
	owner := metav1.GetControllerOf(claim)
	if owner == nil || owner.Kind != "Pod" {
		return "", nil
	}
	pod, err := Client().CoreV1().Pods(ns).Get(ctx, owner.Name, metav1.GetOptions{})
	if err != nil || pod.UID != owner.UID {
		return "", fmt.Errorf("the pod %s that owns claim %s/%s: %v", owner.Name, ns, name, err)
	}
	return pools.CacheKey(label, pod.Labels, pod.Annotations), nil
}

// checkNamespace (7): a volume of a namespace-scoped class, seen Bound in one
// namespace, is never seen Bound in another.
func (inv *Invariants) checkNamespace(pv *corev1.PersistentVolume) {
	if !slices.Contains(inv.scope.NamespaceScoped, pv.Spec.StorageClassName) {
		return
	}
	if pv.Spec.ClaimRef.Name == wellknown.ScrubClaim(pv.Name) {
		return // the scrub's own claim, in the lifecycle namespace: no consumer's
	}
	ns := pv.Spec.ClaimRef.Namespace
	inv.mu.Lock()
	last, seen := inv.boundIn[pv.Name]
	inv.boundIn[pv.Name] = ns
	inv.mu.Unlock()
	if seen && last != ns {
		inv.violate("invariant 7: volume %s of namespace-scoped class %s is bound in namespace %s, and was last bound in %s", pv.Name, pv.Spec.StorageClassName, ns, last)
	}
}

// checkShare (14): the members of a MaxPerNamespace class whose claimRef
// names a claim of one namespace never outnumber its maximum. The watch
// shows the volumes one change at a time in the order they were made, so
// the count is that of a moment the cluster was in. A member made ahead
// (or emptied, and issued by the provisioner alone) names a claim of no
// namespace; one being scrubbed, its scrub claim in the lifecycle
// namespace, is in no consumer's share either.
func (inv *Invariants) checkShare(pv *corev1.PersistentVolume, gone bool) {
	max, limited := inv.scope.MaxPerNamespace[pv.Spec.StorageClassName]
	if !limited {
		return
	}
	inv.mu.Lock()
	defer inv.mu.Unlock()
	ref := pv.Spec.ClaimRef
	if gone || ref == nil || pools.Unissued(pv) || ref.Name == wellknown.ScrubClaim(pv.Name) {
		delete(inv.shares, pv.Name)
		return
	}
	s := share{pv.Spec.StorageClassName, ref.Namespace}
	inv.shares[pv.Name] = s
	var in []string
	for name, of := range inv.shares {
		if of == s {
			in = append(in, name)
		}
	}
	if len(in) > max && !inv.overShare[s] {
		inv.overShare[s] = true
		slices.Sort(in)
		inv.violations = append(inv.violations, fmt.Sprintf("invariant 14: namespace %s holds %d members of class %s (%s), above its maximum of %d",
			s.namespace, len(in), s.class, strings.Join(in, ", "), max))
	}
}

// checkRelease (2): a volume that drops or replaces its claimRef must not
// have a claim that still exists and uses it: the volume was Bound to it, or
// the claim names the volume. A claim seen by a GET after the change existed
// when the change was made: UIDs never come back. Dropping a reservation
// the claim never took (see checkBinding) takes nothing from it.
func (inv *Invariants) checkRelease(ctx context.Context, old, cur *corev1.PersistentVolume) {
	before := old.Spec.ClaimRef
	if !inv.inClass(cur.Spec.StorageClassName) || before == nil || before.UID == "" {
		return
	}
	if after := cur.Spec.ClaimRef; after != nil && after.UID == before.UID {
		return
	}
	claim, err := Client().CoreV1().PersistentVolumeClaims(before.Namespace).Get(ctx, before.Name, metav1.GetOptions{})
	if err == nil && claim.UID == before.UID && (bound(old) || claim.Spec.VolumeName == cur.Name) {
		inv.violate("invariant 2: volume %s was taken from claim %s/%s (uid %s), which still exists", cur.Name, before.Namespace, before.Name, before.UID)
	}
}

// bound reports whether the PV controller has bound pv to the claim its
// claimRef names.
func bound(pv *corev1.PersistentVolume) bool {
	return pv.Status.Phase == corev1.VolumeBound && pv.Spec.ClaimRef != nil && pv.Spec.ClaimRef.UID != ""
}

// checkClaimDeletion (4, "none before"): a claim the podwatcher created is
// deleted only when its owner is gone or going.
func (inv *Invariants) checkClaimDeletion(ctx context.Context, claim *corev1.PersistentVolumeClaim) {
	if !inv.inNamespace(claim.Namespace) || claim.Labels[wellknown.ClaimManagedBy] != inv.scope.ControllerID {
		return
	}
	for _, ref := range claim.OwnerReferences {
		if state, err := lookupOwner(ctx, claim.Namespace, ref); err == nil && state == ownerAlive {
			inv.violate("invariant 4: claim %s/%s was deleted while its owner %s %s (uid %s) still exists", claim.Namespace, claim.Name, ref.Kind, ref.Name, ref.UID)
		}
	}
}

// ownerState is what the API server says of a claim's owner: gone (absent,
// or another object under its name), terminating, or alive.
type ownerState int

const (
	ownerGone ownerState = iota
	ownerTerminating
	ownerAlive
)

func lookupOwner(ctx context.Context, ns string, ref metav1.OwnerReference) (ownerState, error) {
	var meta metav1.Object
	var err error
	switch ref.Kind {
	case "Pod":
		meta, err = Client().CoreV1().Pods(ns).Get(ctx, ref.Name, metav1.GetOptions{})
	case "Job":
		meta, err = Client().BatchV1().Jobs(ns).Get(ctx, ref.Name, metav1.GetOptions{})
	default:
		return ownerGone, fmt.Errorf("unknown owner kind %q", ref.Kind)
	}
	switch {
	case apierrors.IsNotFound(err):
		return ownerGone, nil
	case err != nil:
		return ownerGone, err
	case meta.GetUID() != ref.UID:
		return ownerGone, nil
	case meta.GetDeletionTimestamp() != nil:
		return ownerTerminating, nil
	}
	return ownerAlive, nil
}

// Check evaluates the end-state invariants and fails the test with every
// violation seen since WatchInvariants. Call it once the scenario is quiet:
// it waits up to settle for the end state to be reached (volumes Released
// only briefly, claims of gone owners deleted), so a controller that is
// merely slow is not reported, one that is stuck is. It returns how many
// it reported.
func (inv *Invariants) Check(t testing.TB, settle time.Duration) int {
	t.Helper()
	ctx := context.Background()
	var last []string
	deadline := time.Now().Add(settle)
	for {
		last = inv.endState(ctx)
		if len(last) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(Interval)
	}
	inv.cancel()
	inv.mu.Lock()
	all := append(append([]string(nil), inv.violations...), last...)
	inv.mu.Unlock()
	for _, v := range all {
		t.Error(v)
	}
	return len(all)
}

// Violations returns the count of violations seen so far during the run
// plus those of the current end state.
func (inv *Invariants) Violations(ctx context.Context) int {
	inv.mu.Lock()
	n := len(inv.violations)
	inv.mu.Unlock()
	return n + len(inv.endState(ctx))
}

// endState lists, sorted, what breaks an end-state invariant now: of each
// volume of the scope's classes, of volumes and claims taken together, of
// the pools' status, and of the claims' owners.
func (inv *Invariants) endState(ctx context.Context) []string {
	pvList, err := Client().CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return []string{"listing volumes: " + err.Error()}
	}
	claims, err := inv.claimsByUID(ctx)
	if err != nil {
		return []string{"listing claims: " + err.Error()}
	}
	var out []string
	byClaim := map[types.UID][]string{}
	for i := range pvList.Items {
		pv := &pvList.Items[i]
		if !inv.inClass(pv.Spec.StorageClassName) {
			continue
		}
		if bound(pv) {
			byClaim[pv.Spec.ClaimRef.UID] = append(byClaim[pv.Spec.ClaimRef.UID], pv.Name)
		}
		out = append(out, inv.volumeEndState(pv, claims)...)
	}
	out = append(out, onePerOne(byClaim, claims)...)
	out = append(out, inv.poolStatus(ctx, pvList.Items)...)
	out = append(out, claimsOutlivingOwners(ctx, inv.scope.ControllerID, claims)...)
	sort.Strings(out)
	return out
}

// claimsByUID lists the claims of the scope's namespaces by UID.
func (inv *Invariants) claimsByUID(ctx context.Context) (map[types.UID]*corev1.PersistentVolumeClaim, error) {
	claims := map[types.UID]*corev1.PersistentVolumeClaim{}
	for _, ns := range inv.scope.Namespaces {
		list, err := Client().CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		for i := range list.Items {
			claims[list.Items[i].UID] = &list.Items[i]
		}
	}
	return claims, nil
}

// volumeEndState lists what of pv, a volume of the scope's classes, breaks
// invariants 5, 12, 6 and 3 at rest; claims are the scope's by UID.
func (inv *Invariants) volumeEndState(pv *corev1.PersistentVolume, claims map[types.UID]*corev1.PersistentVolumeClaim) []string {
	var out []string
	ref := pv.Spec.ClaimRef
	// 5: associated (by label or class) and Released for good. A volume
	// whose claimRef is already cleared is on its way to Available.
	if pv.Status.Phase == corev1.VolumeReleased && pv.Spec.PersistentVolumeReclaimPolicy == corev1.PersistentVolumeReclaimRetain {
		if ref == nil {
			out = append(out, fmt.Sprintf("invariant 5: volume %s is Released without a claimRef and not yet Available", pv.Name))
		} else if _, exists := claims[ref.UID]; !exists {
			out = append(out, fmt.Sprintf("invariant 5: volume %s is still Released (claim %s/%s gone)", pv.Name, ref.Namespace, ref.Name))
		}
	}
	if why := stuck(pv, inv.stuckAfter(), time.Now()); why != "" {
		out = append(out, why)
	}
	// 6: a bound pair fits.
	if claim, ok := claims[refUID(ref)]; ok && claim.Spec.VolumeName == pv.Name {
		if why := misfit(claim, pv); why != "" {
			out = append(out, fmt.Sprintf("invariant 6: claim %s/%s is bound to volume %s that does not fit: %s", claim.Namespace, claim.Name, pv.Name, why))
		}
	}
	// 3: data of a Retain volume survives.
	if pv.Spec.PersistentVolumeReclaimPolicy == corev1.PersistentVolumeReclaimRetain {
		inv.mu.Lock()
		files := inv.markers[pv.Name]
		inv.mu.Unlock()
		for _, f := range files {
			if _, err := os.Stat(f); err != nil {
				out = append(out, fmt.Sprintf("invariant 3: data of Retain volume %s lost: %v", pv.Name, err))
			}
		}
	}
	return out
}

// onePerOne (1): at rest, one volume per claim, one claim per volume.
// byClaim are the names of the bound volumes of each claim UID; claims are
// the scope's by UID.
func onePerOne(byClaim map[types.UID][]string, claims map[types.UID]*corev1.PersistentVolumeClaim) []string {
	var out []string
	for uid, names := range byClaim {
		if len(names) > 1 {
			sort.Strings(names)
			out = append(out, fmt.Sprintf("invariant 1: claim uid %s is named by volumes %s", uid, strings.Join(names, ", ")))
		}
	}
	byVolume := map[string][]string{}
	for _, c := range claims {
		if c.Spec.VolumeName != "" {
			byVolume[c.Spec.VolumeName] = append(byVolume[c.Spec.VolumeName], c.Namespace+"/"+c.Name)
		}
	}
	for v, names := range byVolume {
		if len(names) > 1 {
			sort.Strings(names)
			out = append(out, fmt.Sprintf("invariant 1: volume %s is named by claims %s", v, strings.Join(names, ", ")))
		}
	}
	return out
}

// claimsOutlivingOwners (4): no claim of controllerID's outlives its
// owner; claims are the scope's by UID.
func claimsOutlivingOwners(ctx context.Context, controllerID string, claims map[types.UID]*corev1.PersistentVolumeClaim) []string {
	var out []string
	for _, c := range claims {
		if c.Labels[wellknown.ClaimManagedBy] != controllerID || c.DeletionTimestamp != nil {
			continue
		}
		for _, ref := range c.OwnerReferences {
			// An owner being deleted keeps its claim until it is gone.
			if state, err := lookupOwner(ctx, c.Namespace, ref); err == nil && state == ownerGone {
				out = append(out, fmt.Sprintf("invariant 4: claim %s/%s outlives its owner %s %s", c.Namespace, c.Name, ref.Kind, ref.Name))
			}
		}
	}
	return out
}

// checkPreBound (11): no volume pre-bound by an administrator is fenced
// for eviction. Kubernetes never deletes a pre-bound volume.
func (inv *Invariants) checkPreBound(pv *corev1.PersistentVolume) {
	if inv.inClass(pv.Spec.StorageClassName) && pools.PreBound(pv) && pools.Evicting(pv) {
		inv.violate("invariant 11: volume %s, pre-bound to claim %s/%s, is fenced for eviction (%s)", pv.Name, pv.Spec.ClaimRef.Namespace, pv.Spec.ClaimRef.Name, pv.Annotations[wellknown.Evicting])
	}
}

// stuck (12) says why pv waits past bound at now, or "".
func stuck(pv *corev1.PersistentVolume, bound time.Duration, now time.Time) string {
	switch {
	case pools.StoragePending(pv) && pv.DeletionTimestamp == nil && now.Sub(pv.CreationTimestamp.Time) > bound:
		return fmt.Sprintf("invariant 12: volume %s has waited for its storage since %s, more than %s", pv.Name, pv.CreationTimestamp.UTC().Format(time.RFC3339), bound)
	case pools.Evicting(pv) && pv.DeletionTimestamp != nil && now.Sub(pv.DeletionTimestamp.Time) > bound:
		return fmt.Sprintf("invariant 12: volume %s has been evicted (%s) since %s and is not gone after %s", pv.Name, pv.Annotations[wellknown.Evicting], pv.DeletionTimestamp.UTC().Format(time.RFC3339), bound)
	}
	return ""
}

// checkEviction (10): a member being deleted for eviction names no
// claim's UID: a claim that had it would lose it.
func (inv *Invariants) checkEviction(pv *corev1.PersistentVolume) {
	if !inv.inClass(pv.Spec.StorageClassName) || pv.DeletionTimestamp == nil || !pools.Evicting(pv) {
		return
	}
	if ref := pv.Spec.ClaimRef; ref != nil && ref.UID != "" {
		inv.violate("invariant 10: volume %s is being evicted (%s) while bound to claim %s/%s (uid %s)", pv.Name, pv.Annotations[wellknown.Evicting], ref.Namespace, ref.Name, ref.UID)
	}
}

// checkLost (10): no claim of the scope loses its volume.
func (inv *Invariants) checkLost(obj any) {
	c, ok := obj.(*corev1.PersistentVolumeClaim)
	if !ok || c.Status.Phase != corev1.ClaimLost || c.Spec.StorageClassName == nil || !inv.inClass(*c.Spec.StorageClassName) {
		return
	}
	inv.violate("invariant 10: claim %s/%s lost its volume %s", c.Namespace, c.Name, c.Spec.VolumeName)
}

// noteOutcome remembers the claims that said their consumer succeeded:
// under ScrubUnlessSucceeded their volumes may go on unscrubbed.
func (inv *Invariants) noteOutcome(obj any) {
	if c, ok := obj.(*corev1.PersistentVolumeClaim); ok && c.Annotations[wellknown.ConsumerOutcome] == wellknown.OutcomeSucceeded {
		inv.mu.Lock()
		inv.succeeded[c.UID] = true
		inv.mu.Unlock()
	}
}

// checkScrub (9): a volume of a Scrubbed class seen Released from a claim
// it was seen Bound to (of a ScrubbedUnlessSucceeded class, from a claim
// never seen to say its consumer succeeded) is unscrubbed until it is seen
// scrubbed (a volume handed to a claim is Released a moment from the claim
// it is given to: the PV controller has yet to bind them)
// (wellknown.ScrubDone); seen Bound meanwhile to any claim but its scrub claim,
// its data went on.
func (inv *Invariants) checkScrub(pv *corev1.PersistentVolume) {
	inv.mu.Lock()
	if state := pv.Annotations[wellknown.Scrub]; state != inv.scrubState[pv.Name] {
		if state == wellknown.ScrubDone && inv.inClass(pv.Spec.StorageClassName) {
			inv.scrubs++
		}
		inv.scrubState[pv.Name] = state
	}
	inv.mu.Unlock()
	if pv.Annotations[wellknown.Scrub] == wellknown.ScrubDone {
		// Emptied, by any pool's rule or by hand: it belongs to no
		// namespace any more (7), and its data went as an administrator
		// asked (3): the files registered so far are not expected.
		inv.mu.Lock()
		delete(inv.boundIn, pv.Name)
		delete(inv.keyedBy, pv.Name)
		delete(inv.markers, pv.Name)
		inv.mu.Unlock()
	}
	always := slices.Contains(inv.scope.Scrubbed, pv.Spec.StorageClassName)
	if !always && !slices.Contains(inv.scope.ScrubbedUnlessSucceeded, pv.Spec.StorageClassName) {
		return
	}
	ref := pv.Spec.ClaimRef
	scrubClaim := ref != nil && ref.Name == wellknown.ScrubClaim(pv.Name)
	inv.mu.Lock()
	from, unscrubbed := inv.unscrubbed[pv.Name]
	switch {
	case pv.Annotations[wellknown.Scrub] == wellknown.ScrubDone:
		delete(inv.unscrubbed, pv.Name)
	case pv.Status.Phase == corev1.VolumeReleased && ref != nil && !scrubClaim && ref.UID != "" && inv.boundTo[ref.UID] == pv.Name && (always || !inv.succeeded[ref.UID]):
		inv.unscrubbed[pv.Name] = ref.Namespace + "/" + ref.Name
	case unscrubbed && pv.Status.Phase == corev1.VolumeBound && ref != nil && !scrubClaim:
		inv.mu.Unlock()
		inv.violate("invariant 9: volume %s, released from claim %s under onRelease Scrub (or unsucceeded under ScrubUnlessSucceeded), is bound to claim %s/%s before its scrub succeeded", pv.Name, from, ref.Namespace, ref.Name)
		return
	}
	inv.mu.Unlock()
}

// poolStatus (8): each state's count in a pool's status is at most the
// volumes of its class in that state. The class's volumes are a superset
// of the pool's members, so the check holds whichever the backend counts;
// a status that lags behind a change is caught only if it stays behind
// past the settle time of Check.
func (inv *Invariants) poolStatus(ctx context.Context, pvs []corev1.PersistentVolume) []string {
	client, err := versioned.NewForConfig(Config())
	if err != nil {
		return []string{"building the VolumePool client: " + err.Error()}
	}
	list, err := client.ReclaimableV1alpha1().VolumePools().List(ctx, metav1.ListOptions{})
	if err != nil {
		return []string{"listing VolumePools: " + err.Error()}
	}
	var out []string
	for _, pool := range list.Items {
		class := pool.Spec.StorageClassName
		if !inv.inClass(class) {
			continue
		}
		counts, total := map[pools.MemberState]int32{}, int32(0)
		for i := range pvs {
			if pvs[i].Spec.StorageClassName == class {
				counts[pools.StateOf(&pvs[i])]++
				total++
			}
		}
		s := pool.Status
		for _, c := range []struct {
			state    string
			reported int32
			exist    int32
		}{
			{"free", s.Free, counts[pools.StateFree]},
			{"held", s.Held, counts[pools.StateHeld]},
			{"reserved", s.Reserved, counts[pools.StateReserved]},
			{"bound", s.Bound, counts[pools.StateBound]},
			{"released", s.Released, counts[pools.StateReleased]},
			{"total", s.Total, total},
		} {
			if c.reported > c.exist {
				out = append(out, fmt.Sprintf("invariant 8: VolumePool %s reports %d %s members; class %s has %d such volumes", pool.Name, c.reported, c.state, class, c.exist))
			}
		}
	}
	return out
}

func refUID(ref *corev1.ObjectReference) types.UID {
	if ref == nil {
		return ""
	}
	return ref.UID
}

// misfit says why pv does not satisfy claim, or "" if it does.
func misfit(claim *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume) string {
	if claim.Spec.StorageClassName != nil && *claim.Spec.StorageClassName != pv.Spec.StorageClassName {
		return fmt.Sprintf("class %q, claim wants %q", pv.Spec.StorageClassName, *claim.Spec.StorageClassName)
	}
	want := claim.Spec.Resources.Requests[corev1.ResourceStorage]
	have := pv.Spec.Capacity[corev1.ResourceStorage]
	if have.Cmp(want) < 0 {
		return fmt.Sprintf("capacity %s < request %s", have.String(), want.String())
	}
	for _, m := range claim.Spec.AccessModes {
		if !slices.Contains(pv.Spec.AccessModes, m) {
			return fmt.Sprintf("access mode %s missing", m)
		}
	}
	if mode(claim.Spec.VolumeMode) != mode(pv.Spec.VolumeMode) {
		return fmt.Sprintf("volume mode %s, claim wants %s", mode(pv.Spec.VolumeMode), mode(claim.Spec.VolumeMode))
	}
	if node := claim.Annotations[volumehelpers.AnnSelectedNode]; node != "" && pv.Spec.NodeAffinity != nil && pv.Spec.NodeAffinity.Required != nil {
		n, err := Client().CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err == nil {
			if ok, _ := corev1helpers.MatchNodeSelectorTerms(n, pv.Spec.NodeAffinity.Required); !ok {
				return fmt.Sprintf("node affinity excludes selected node %s", node)
			}
		}
	}
	if sel := claim.Spec.Selector; sel != nil {
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil || !s.Matches(labels.Set(pv.Labels)) {
			return "labels do not match the claim's selector"
		}
	}
	return ""
}

func mode(m *corev1.PersistentVolumeMode) corev1.PersistentVolumeMode {
	if m == nil {
		return corev1.PersistentVolumeFilesystem
	}
	return *m
}
