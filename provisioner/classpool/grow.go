package classpool

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	volumehelpers "k8s.io/component-helpers/storage/volume"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	lib "sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// This file holds how a class pool grows: through a claim of the
// provisioner's own in the backing class, whose volume it hands over to the
// user's claim. The writes, in order, each safe to repeat after a crash at
// any point (Grow finds where the last attempt stopped):
//
//  1. The backing claim is created in the backing-claim namespace, named
//     as the library names the user's volume (pvc-<claim UID>): a retry
//     finds it, and a claim never has two.
//  2. The backing provisioner makes a volume for it, which the PV
//     controller binds to it.
//  3. One update keeps the volume, still bound: reclaim policy Retain, and
//     annotations that say which claim of which pool class it is for.
//     From then on nothing deletes it (the backing provisioner deletes only
//     Released volumes of reclaim policy Delete, and drops its finalizer
//     from a Retain one), and the volume itself says where it goes.
//  4. The backing claim is deleted: the volume is Released, and kept.
//  5. Once the API server confirms the backing claim gone, one update
//     hands the volume over: provisioned-by this provisioner, the pool class
//     and its reclaim policy, the backing provisioner and class recorded,
//     claimRef the user's claim, which the PV controller then binds to it.
//     The backing provisioner no longer answers for it.
//
// No volume is ever taken from a claim that still exists, the backing claim
// included, and none is Released with reclaim policy Delete while the pool
// still wants it. Should the user's claim go away or get another volume
// before step 5, the volume goes back: reclaim policy Delete again if step
// 3 happened, the backing claim deleted if it is still there, and the
// backing provisioner deletes the volume so released.

const (
	// reasonAskedBackingClass: no member fits and a new volume was asked of
	// the backing class.
	reasonAskedBackingClass = "AskedBackingClass"
	// reasonBackingClassFailed: the backing provisioner reported a failure
	// on the backing claim.
	reasonBackingClassFailed = "BackingClassFailed"
	// reasonProvisioningSucceeded is the library's reason for a new volume.
	reasonProvisioningSucceeded = "ProvisioningSucceeded"
)

// Request is a claim of a pool class that needs a new volume, with the
// place the provisioner holds for it among the class's volumes.
type Request struct {
	Claim *corev1.PersistentVolumeClaim
	// Class is the pool class, as its pool makes it; Backing its backing
	// class.
	Class, Backing *storagev1.StorageClass
	// SelectedNode is the node the scheduler chose for the claim, if any.
	SelectedNode *corev1.Node
	// Labels are the new member's; Count is how many volumes the class had
	// besides it.
	Labels map[string]string
	Count  int
	// Key is the claim's cache key (wellknown.LastKey), "" none.
	Key string
}

// WaitingError is Grow's error while the claim waits for the backing class or
// for the API server: nothing went wrong, and the changes of the backing
// claim and of the volume bring the claim back to the library's queue.
type WaitingError struct{ error }

func (w WaitingError) Unwrap() error { return w.error }

func waiting(format string, args ...any) (lib.ProvisioningState, bool, error) {
	return lib.ProvisioningInBackground, false, WaitingError{fmt.Errorf(format, args...)}
}

// Grow gives r's claim a new volume of the backing class, one step (see the
// top of this file) per call, and reports whether this call asked the
// backing class for it. Once the volume is issued it returns the library's
// IgnoredError: the PV controller binds it.
func (b *Pools) Grow(ctx context.Context, r Request) (lib.ProvisioningState, bool, error) {
	claim := r.Claim
	if kept := b.keptVolume(claim.UID); kept != nil {
		backing, err := b.backingClaimLive(ctx, claim.UID)
		switch {
		case err != nil:
			return lib.ProvisioningInBackground, false, err
		case backing != nil:
			b.deleteBackingClaim(ctx, backing) // step 4
			crashPoint(stepReleased)
			return waiting("waiting for backing claim %s/%s to be gone before its volume %s is issued", backing.Namespace, backing.Name, kept.Name)
		}
		state, err := b.handOver(ctx, r, kept) // step 5
		return state, false, err
	}
	backing, asked, err := b.ensureBackingClaim(ctx, r) // step 1
	if err != nil {
		return lib.ProvisioningFinished, false, err
	}
	pv, err := b.backingVolume(ctx, backing)
	switch {
	case err != nil:
		return lib.ProvisioningInBackground, asked, err
	case pv == nil: // step 2
		b.relayBackingFailure(ctx, claim, backing)
		state, _, err := waiting("waiting for class %s to make a volume for claim %s/%s", r.Backing.Name, backing.Namespace, backing.Name)
		return state, asked, err
	}
	if err := b.keep(ctx, pv, forClaim(claim, r.Class.Name)); err != nil { // step 3
		return lib.ProvisioningInBackground, asked, err
	}
	crashPoint(stepKept)
	b.deleteBackingClaim(ctx, backing) // step 4
	crashPoint(stepReleased)
	state, _, err := waiting("waiting for backing claim %s/%s to be gone before its volume %s is issued", backing.Namespace, backing.Name, pv.Name)
	return state, asked, err
}

// ensureBackingClaim returns the backing claim for r's claim, made if it is
// not yet, and whether this call made it.
func (b *Pools) ensureBackingClaim(ctx context.Context, r Request) (*corev1.PersistentVolumeClaim, bool, error) {
	claim, ns := r.Claim, b.cfg.Namespace
	name := backingClaimName(claim.UID)
	if c, err := b.cfg.BackingClaims.PersistentVolumeClaims(ns).Get(name); err == nil {
		return c, false, nil
	}
	want := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: ns,
			Labels:      map[string]string{wellknown.BackingClaimOf: b.cfg.ControllerID},
			Annotations: forClaim(claim, r.Class.Name),
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To(r.Backing.Name),
			AccessModes:      claim.Spec.AccessModes,
			VolumeMode:       claim.Spec.VolumeMode,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: claim.Spec.Resources.Requests[corev1.ResourceStorage]}},
		},
	}
	if node := r.SelectedNode; node != nil {
		// No pod will use the backing claim: the node the scheduler chose
		// for the user's claim is the one its volume is made for.
		want.Annotations[volumehelpers.AnnSelectedNode] = node.Name
	}
	created, err := b.cfg.Client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, want, metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
		c, err := b.cfg.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
		return c, false, err
	case err != nil:
		return nil, false, fmt.Errorf("asking class %s for a volume through claim %s/%s: %w", r.Backing.Name, ns, name, err)
	}
	crashPoint(stepAsked)
	b.cfg.Recorder.Eventf(claim, corev1.EventTypeNormal, reasonAskedBackingClass,
		"No free volume of the pool of class %s fits; asked class %s (provisioner %s) for a new one through claim %s/%s", r.Class.Name, r.Backing.Name, r.Backing.Provisioner, created.Namespace, created.Name)
	return created, true, nil
}

// forClaim are the annotations that say which claim, of which pool class,
// a backing claim or a kept volume is for.
func forClaim(claim *corev1.PersistentVolumeClaim, poolClass string) map[string]string {
	return map[string]string{wellknown.BackingFor: claim.Namespace + "/" + claim.Name, wellknown.BackingForUID: string(claim.UID), wellknown.PoolClass: poolClass}
}

// forClaimKeys are the annotations of a kept volume, which the hand-over
// removes.
var forClaimKeys = []string{wellknown.BackingFor, wellknown.BackingForUID, wellknown.PoolClass, wellknown.KeptBy}

// relayTimes holds, by backing claim name, when its events were last read.
type relayTimes struct {
	mu sync.Mutex
	at map[string]time.Time
}

// relayInterval is how long after relaying a failure of its backing claim
// a claim that waits for its backing class reads the backing provisioner's
// events again: a LIST of the API server's events.
const relayInterval = 30 * time.Second

// recent reports whether a failure of backing claim name was relayed less
// than relayInterval before now; it forgets those relayed longer ago.
func (r *relayTimes) recent(name string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for n, t := range r.at {
		if now.Sub(t) >= relayInterval {
			delete(r.at, n)
		}
	}
	_, ok := r.at[name]
	return ok
}

// relayed records that a failure of backing claim name was relayed at now.
func (r *relayTimes) relayed(name string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.at == nil {
		r.at = map[string]time.Time{}
	}
	r.at[name] = now
}

// relayBackingFailure tells the claim what the backing provisioner last
// said went wrong with its backing claim: the claim's owner may not read the
// events of the backing claim's namespace, and only the driver knows what
// it cannot make (an access mode, a size, a zone). The recorder counts a
// message repeated on each retry as one event.
func (b *Pools) relayBackingFailure(ctx context.Context, claim, backing *corev1.PersistentVolumeClaim) {
	// A failure relayed is news enough for relayInterval: the retries
	// meanwhile cost no LIST. Until the driver reports one, each retry
	// looks, so that the first failure reaches the claim at once.
	now := b.cfg.Clock.Now()
	if b.relayed.recent(backing.Name, now) {
		return
	}
	events, err := b.cfg.Client.CoreV1().Events(backing.Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.AndSelectors(
			fields.OneTermEqualSelector("involvedObject.uid", string(backing.UID)),
			fields.OneTermEqualSelector("type", corev1.EventTypeWarning)).String(),
	})
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Cannot read the events of a backing claim", "claim", klog.KObj(backing), "err", err)
		return
	}
	var last *corev1.Event
	for i := range events.Items {
		if e := &events.Items[i]; last == nil || eventTime(e).After(eventTime(last)) {
			last = e
		}
	}
	if last != nil {
		b.relayed.relayed(backing.Name, now)
		b.cfg.Recorder.Eventf(claim, corev1.EventTypeWarning, reasonBackingClassFailed, "Class %s has not made a volume for the claim (backing claim %s/%s): %s: %s",
			ptr.Deref(backing.Spec.StorageClassName, ""), backing.Namespace, backing.Name, last.Reason, last.Message)
	}
}

func eventTime(e *corev1.Event) time.Time {
	switch {
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	}
	return e.FirstTimestamp.Time
}

// backingClaimLive returns the backing claim for the claim of uid as the
// API server has it, or nil if it is gone: the cache may not show a
// deletion yet, and a volume is never taken from a claim that exists.
func (b *Pools) backingClaimLive(ctx context.Context, uid types.UID) (*corev1.PersistentVolumeClaim, error) {
	name, ns := backingClaimName(uid), b.cfg.Namespace
	c, err := b.cfg.BackingClaims.PersistentVolumeClaims(ns).Get(name)
	if err == nil && c.DeletionTimestamp == nil {
		return c, nil
	}
	c, err = b.cfg.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading backing claim %s/%s: %w", ns, name, err)
	}
	return c, nil
}

// backingVolume returns the volume bound to backing, or nil while there is
// none yet.
func (b *Pools) backingVolume(ctx context.Context, backing *corev1.PersistentVolumeClaim) (*corev1.PersistentVolume, error) {
	pv, err := b.volumeNamed(ctx, backing.Spec.VolumeName)
	if err != nil || pv == nil {
		return nil, err
	}
	if ref := pv.Spec.ClaimRef; ref == nil || ref.UID != backing.UID {
		return nil, nil // not bound to it (yet)
	}
	return pv, nil
}

// keep makes pv, bound to its backing claim, safe from deletion and says
// which claim of which pool class it is for (step 3).
func (b *Pools) keep(ctx context.Context, pv *corev1.PersistentVolume, annotations map[string]string) error {
	kept := pv.DeepCopy()
	if kept.Annotations == nil {
		kept.Annotations = map[string]string{}
	}
	maps.Copy(kept.Annotations, annotations)
	kept.Annotations[wellknown.KeptBy] = b.cfg.Name
	kept.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimRetain
	if _, err := b.cfg.Client.CoreV1().PersistentVolumes().Update(ctx, kept, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("keeping volume %s for the claim: %w", pv.Name, err)
	}
	return nil
}

// handOver makes pv, kept for r's claim, a member of r's class issued to
// the claim (step 5).
func (b *Pools) handOver(ctx context.Context, r Request, pv *corev1.PersistentVolume) (lib.ProvisioningState, error) {
	claim, class := r.Claim, r.Class
	// Bound as the PV controller binds, its bound-by-controller mark
	// included: a volume whose claim got bound elsewhere returns to the
	// pool.
	member, _, err := volumehelpers.GetBindVolumeToClaim(b.memberOf(pv, class.Name, ptr.Deref(class.ReclaimPolicy, corev1.PersistentVolumeReclaimDelete), r.Labels), claim)
	if err != nil {
		return lib.ProvisioningFinished, err
	}
	member.Annotations[wellknown.LastClaim] = claim.Namespace + "/" + claim.Name
	if r.Key != "" {
		member.Annotations[wellknown.LastKey] = r.Key
	}
	member.Annotations[wellknown.IssuedAt] = b.cfg.Clock.Now().UTC().Format(time.RFC3339)
	if _, err := b.cfg.Client.CoreV1().PersistentVolumes().Update(ctx, member, metav1.UpdateOptions{}); err != nil {
		return lib.ProvisioningInBackground, fmt.Errorf("issuing volume %s of class %s to the claim: %w", pv.Name, pv.Spec.StorageClassName, err)
	}
	crashPoint(stepHandedOver)
	b.cfg.Pending.Rename(backingClaimName(claim.UID), pv.Name)
	b.p.Issued(claim, class.Name, pv.Name)
	b.cfg.Created.WithLabelValues(class.Name).Inc()
	b.cfg.Recorder.Eventf(claim, corev1.EventTypeNormal, reasonProvisioningSucceeded,
		"Volume %s made by class %s issued as a new member of the pool of class %s", pv.Name, pv.Spec.StorageClassName, class.Name)
	klog.FromContext(ctx).V(2).Info("Issued a volume of the backing class", "pv", pv.Name, "backingClass", pv.Spec.StorageClassName, "volumes", r.Count+1)
	return lib.ProvisioningFinished, &lib.IgnoredError{Reason: fmt.Sprintf("volume %s of class %s was issued to the claim; the PV controller binds it", pv.Name, pv.Spec.StorageClassName)}
}

// deleteBackingClaim deletes backing, if it is still the one given; its
// deletion requeues the claim it was made for, and a failure is retried.
func (b *Pools) deleteBackingClaim(ctx context.Context, backing *corev1.PersistentVolumeClaim) {
	if backing.DeletionTimestamp != nil {
		return
	}
	err := b.cfg.Client.CoreV1().PersistentVolumeClaims(backing.Namespace).Delete(ctx, backing.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &backing.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		klog.FromContext(ctx).Info("Deleting a backing claim failed; retrying", "claim", klog.KObj(backing), "err", err)
		if uid, ok := backingFor(backing); ok {
			b.queue.AddAfter(uid, time.Second)
		}
	}
}

// Sync looks at what was made for the claim of uid: a backing claim, a
// kept volume. While the claim waits for a volume, a change of either
// brings it back to the library's queue; once it no longer does (gone,
// bound elsewhere), both go back to the backing provisioner. A member made
// ahead of claims is taken a step further (syncAhead).
func (b *Pools) Sync(ctx context.Context, uid types.UID) error {
	backing, err := b.cfg.BackingClaims.PersistentVolumeClaims(b.cfg.Namespace).Get(backingClaimName(uid))
	if err != nil {
		backing = nil
	}
	kept := b.keptVolume(uid)
	var key string
	switch {
	case kept != nil && kept.Annotations[wellknown.MadeAhead] != "", backing != nil && backing.Annotations[wellknown.MadeAhead] != "":
		return b.syncAhead(ctx, uid, backing, kept)
	case kept != nil:
		key = kept.Annotations[wellknown.BackingFor]
	case backing != nil:
		key = backing.Annotations[wellknown.BackingFor]
	default:
		return nil
	}
	claim, wanted, err := b.wantsVolume(ctx, key, uid)
	if err != nil {
		return err
	}
	if wanted {
		b.p.Requeue(claim)
		return nil
	}
	if kept != nil {
		// Step 3 happened: the volume goes back to be deleted.
		undo := kept.DeepCopy()
		for _, k := range forClaimKeys {
			delete(undo.Annotations, k)
		}
		undo.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimDelete
		if _, err := b.cfg.Client.CoreV1().PersistentVolumes().Update(ctx, undo, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("giving volume %s back to its provisioner: %w", kept.Name, err)
		}
	}
	if backing != nil {
		b.deleteBackingClaim(ctx, backing)
	}
	klog.FromContext(ctx).V(2).Info("Gave back what was made for a claim that no longer wants it", "claim", key)
	return nil
}

// volumeNamed returns the volume of that name, from the cache or else the
// API server; nil for "" or none.
func (b *Pools) volumeNamed(ctx context.Context, name string) (*corev1.PersistentVolume, error) {
	if name == "" {
		return nil, nil
	}
	if obj, ok, _ := b.cfg.Volumes.GetByKey(name); ok {
		return obj.(*corev1.PersistentVolume), nil
	}
	pv, err := b.cfg.Client.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return pv, err
}

// wantsVolume reports whether the claim key ("<namespace>/<name>") of uid
// still waits for a volume, which only the API server can say for sure of
// a claim gone from the cache.
func (b *Pools) wantsVolume(ctx context.Context, key string, uid types.UID) (*corev1.PersistentVolumeClaim, bool, error) {
	ns, name, ok := strings.Cut(key, "/")
	if !ok || ns == "" || name == "" {
		return nil, false, nil
	}
	claim, err := b.cfg.Claims.PersistentVolumeClaims(ns).Get(name)
	if err != nil || claim.UID != uid {
		claim, err = b.cfg.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, fmt.Errorf("reading claim %s: %w", key, err)
		}
	}
	return claim, claim.UID == uid && claim.DeletionTimestamp == nil && claim.Spec.VolumeName == "", nil
}
