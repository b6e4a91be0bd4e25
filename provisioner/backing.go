package provisioner

import (
	"context"
	"errors"
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
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	volumehelpers "k8s.io/component-helpers/storage/volume"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	lib "sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/reclaimable/reclaimable/internal/controller"
	"github.com/reclaimable/reclaimable/internal/keys"
)

// This file holds how a class pool (class.go) grows: through a claim of the
// provisioner's own in the backing class, whose volume it hands over to the
// user's claim. The writes, in order, each safe to repeat after a crash at
// any point (growThrough finds where the last attempt stopped):
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
	// indexBackingFor indexes the volumes kept for a claim by its UID.
	indexBackingFor = "reclaimable-provisioner/backing-for"

	// reasonAskedBackingClass: no member fits and a new volume was asked of
	// the backing class.
	reasonAskedBackingClass = "AskedBackingClass"
	// reasonBackingClassFailed: the backing provisioner reported a failure
	// on the backing claim.
	reasonBackingClassFailed = "BackingClassFailed"
	// reasonProvisioningSucceeded is the library's reason for a new volume.
	reasonProvisioningSucceeded = "ProvisioningSucceeded"
)

// backingClaims are the claims this provisioner makes in backing classes.
type backingClaims struct {
	namespace    string
	controllerID string
	lister       corelisters.PersistentVolumeClaimLister
	// queue tidies up, by the UID of the claim they are for, the backing
	// claims and kept volumes no claim wants any more.
	queue *controller.Loop[*corev1.PersistentVolumeClaim, types.UID]
	// relayed remembers when a failure of each backing claim was last
	// relayed.
	relayed relayTimes
}

// relayTimes holds, by backing claim name, when its events were last read.
type relayTimes struct {
	mu sync.Mutex
	at map[string]time.Time
}

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

// useBackingClaims has the provisioner make backing claims in namespace and
// read them from informer, which holds the claims of namespace labelled
// with keys.BackingClaimOf for this installation.
func (p *provisioner) useBackingClaims(informer cache.SharedIndexInformer, namespace string) error {
	b := &backingClaims{namespace: namespace, controllerID: p.controllerID, lister: corelisters.NewPersistentVolumeClaimLister(informer.GetIndexer())}
	b.queue = newBackingQueue(p.syncBacking)
	if err := b.queue.Watch(informer); err != nil {
		return fmt.Errorf("watching backing claims: %w", err)
	}
	p.backing = b
	return nil
}

// sweepBacking looks again at everything a backing claim was made for:
// the steps follow the events of the backing claims and the volumes, and
// a restart, or a watch that missed one, must not leave a volume halfway.
func (p *provisioner) sweepBacking(context.Context) {
	claims, _ := p.backing.lister.PersistentVolumeClaims(p.backing.namespace).List(labels.Everything())
	for _, c := range claims {
		if uid := c.Annotations[keys.BackingForUID]; uid != "" {
			p.backing.queue.Add(types.UID(uid))
		}
	}
	for _, uid := range p.keptUIDs() {
		p.backing.queue.Add(uid)
	}
}

// backingSweep is how often sweepBacking runs.
const backingSweep = 10 * time.Second

// backingClaimSelector selects the backing claims of controllerID.
func backingClaimSelector(controllerID string) string {
	return keys.BackingClaimOf + "=" + controllerID
}

// backingClaimName is the name of the backing claim for claim: the name the
// library gives claim's volume.
func backingClaimName(uid types.UID) string { return "pvc-" + string(uid) }

// newBackingQueue is the queue of the claims backing claims were made
// for, by UID: any change of a backing claim, its deletion included, is
// looked at for its claim.
func newBackingQueue(sync func(context.Context, types.UID) error) *controller.Loop[*corev1.PersistentVolumeClaim, types.UID] {
	q := &controller.Loop[*corev1.PersistentVolumeClaim, types.UID]{Name: "provisioner-backing", Key: backingFor, Sync: sync, Workers: 1}
	q.Gone = func(c *corev1.PersistentVolumeClaim) {
		if uid, ok := backingFor(c); ok {
			q.Add(uid)
		}
	}
	return q
}

// backingFor is the UID of the claim backing was made for.
func backingFor(backing *corev1.PersistentVolumeClaim) (types.UID, bool) {
	uid := backing.Annotations[keys.BackingForUID]
	return types.UID(uid), uid != ""
}

// onKeptVolume looks at a volume kept for a claim (step 3), on every
// change and at start-up: a restarted provisioner finds the volumes a
// crash left between steps.
func (p *provisioner) onKeptVolume(pv *corev1.PersistentVolume) {
	if uid := keptFor(pv); uid != "" && pv.Annotations[keys.KeptBy] == p.name && p.backing != nil {
		p.backing.queue.Add(uid)
	}
}

// onClaimGone looks again at what was made for a claim that no longer
// waits for a volume: deleted, or bound.
func (p *provisioner) onClaimGone(claim *corev1.PersistentVolumeClaim) {
	if p.backing != nil {
		p.backing.queue.Add(claim.UID)
	}
}

// keptFor is the UID of the claim pv is kept for (step 3), if it is one a
// backing provisioner made that was not handed over yet.
func keptFor(pv *corev1.PersistentVolume) types.UID {
	return types.UID(pv.Annotations[keys.BackingForUID])
}

// indexByBackingFor indexes a kept volume by "<provisioner that kept
// it>/<UID of the claim it is kept for>".
func indexByBackingFor(obj any) ([]string, error) {
	if pv, ok := obj.(*corev1.PersistentVolume); ok && keptFor(pv) != "" {
		return []string{pv.Annotations[keys.KeptBy] + "/" + string(keptFor(pv))}, nil
	}
	return nil, nil
}

// keptVolume returns the volume this provisioner kept for the claim of
// uid, if any.
func (p *provisioner) keptVolume(uid types.UID) *corev1.PersistentVolume {
	objs, _ := p.volumes.ByIndex(indexBackingFor, p.name+"/"+string(uid))
	if len(objs) == 0 {
		return nil
	}
	return objs[0].(*corev1.PersistentVolume)
}

// keptUIDs are the UIDs of the claims this provisioner keeps volumes for.
func (p *provisioner) keptUIDs() []types.UID {
	var out []types.UID
	for _, key := range p.volumes.ListIndexFuncValues(indexBackingFor) {
		if uid, ok := strings.CutPrefix(key, p.name+"/"); ok && p.keptVolume(types.UID(uid)) != nil {
			out = append(out, types.UID(uid))
		}
	}
	return out
}

// growThrough gives claim a new volume of the backing class of b, one step
// (see the top of this file) per call: the changes of the backing claim and
// of the volume bring the claim back to the library's queue.
func (p *provisioner) growThrough(ctx context.Context, opts lib.ProvisionOptions, params *params, backingClass *storagev1.StorageClass, selector labels.Selector, state poolState) (*corev1.PersistentVolume, lib.ProvisioningState, error) {
	claim, class := opts.PVC, opts.StorageClass
	if p.backing == nil {
		return nil, lib.ProvisioningFinished, errors.New("the provisioner does not watch backing claims")
	}
	if claim.Spec.VolumeAttributesClassName != nil {
		return p.refuse(claim, reasonUnsupportedAttributes, errors.New("a claim of a pool class cannot ask for a VolumeAttributesClass: its volume may come from the pool, made for another claim"))
	}
	g, v := p.admit(ctx, opts, params, selector, state)
	if v != nil {
		return v.pv, v.state, v.err
	}
	waiting := func(format string, args ...any) (*corev1.PersistentVolume, lib.ProvisioningState, error) {
		return nil, lib.ProvisioningInBackground, reportedError{fmt.Errorf(format, args...)}
	}
	if kept := p.keptVolume(claim.UID); kept != nil {
		backing, err := p.backingClaimLive(ctx, claim.UID)
		switch {
		case err != nil:
			return nil, lib.ProvisioningInBackground, err
		case backing != nil:
			p.deleteBackingClaim(ctx, backing) // step 4
			crashPoint(stepReleased)
			return waiting("waiting for backing claim %s/%s to be gone before its volume %s is issued", backing.Namespace, backing.Name, kept.Name)
		}
		return p.handOver(ctx, claim, class, kept, g) // step 5
	}
	backing, asked, err := p.ensureBackingClaim(ctx, opts, backingClass) // step 1
	if err != nil {
		return nil, lib.ProvisioningFinished, err
	}
	if asked {
		p.countFirstConsumer(class.Name, opts.SelectedNode, state, false)
	}
	pv, err := p.backingVolume(ctx, backing)
	switch {
	case err != nil:
		return nil, lib.ProvisioningInBackground, err
	case pv == nil: // step 2
		p.relayBackingFailure(ctx, claim, backing)
		return waiting("waiting for class %s to make a volume for claim %s/%s", backingClass.Name, backing.Namespace, backing.Name)
	}
	if err := p.keep(ctx, pv, forClaim(claim, class.Name)); err != nil { // step 3
		return nil, lib.ProvisioningInBackground, err
	}
	crashPoint(stepKept)
	p.deleteBackingClaim(ctx, backing) // step 4
	crashPoint(stepReleased)
	return waiting("waiting for backing claim %s/%s to be gone before its volume %s is issued", backing.Namespace, backing.Name, pv.Name)
}

// ensureBackingClaim returns the backing claim for opts.PVC, made if it is
// not yet, and whether this call made it.
func (p *provisioner) ensureBackingClaim(ctx context.Context, opts lib.ProvisionOptions, backing *storagev1.StorageClass) (*corev1.PersistentVolumeClaim, bool, error) {
	claim := opts.PVC
	name := backingClaimName(claim.UID)
	if c, err := p.backing.lister.PersistentVolumeClaims(p.backing.namespace).Get(name); err == nil {
		return c, false, nil
	}
	want := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: p.backing.namespace,
			Labels:      map[string]string{keys.BackingClaimOf: p.backing.controllerID},
			Annotations: forClaim(claim, opts.StorageClass.Name),
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To(backing.Name),
			AccessModes:      claim.Spec.AccessModes,
			VolumeMode:       claim.Spec.VolumeMode,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: claim.Spec.Resources.Requests[corev1.ResourceStorage]}},
		},
	}
	if node := opts.SelectedNode; node != nil {
		// No pod will use the backing claim: the node the scheduler chose
		// for the user's claim is the one its volume is made for.
		want.Annotations[volumehelpers.AnnSelectedNode] = node.Name
	}
	created, err := p.client.CoreV1().PersistentVolumeClaims(p.backing.namespace).Create(ctx, want, metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
		c, err := p.client.CoreV1().PersistentVolumeClaims(p.backing.namespace).Get(ctx, name, metav1.GetOptions{})
		return c, false, err
	case err != nil:
		return nil, false, fmt.Errorf("asking class %s for a volume through claim %s/%s: %w", backing.Name, p.backing.namespace, name, err)
	}
	crashPoint(stepAsked)
	p.recorder.Eventf(claim, corev1.EventTypeNormal, reasonAskedBackingClass,
		"No free volume of the pool of class %s fits; asked class %s (provisioner %s) for a new one through claim %s/%s", opts.StorageClass.Name, backing.Name, backing.Provisioner, created.Namespace, created.Name)
	return created, true, nil
}

// forClaim are the annotations that say which claim, of which pool class,
// a backing claim or a kept volume is for.
func forClaim(claim *corev1.PersistentVolumeClaim, poolClass string) map[string]string {
	return map[string]string{keys.BackingFor: claimKey(claim), keys.BackingForUID: string(claim.UID), keys.PoolClass: poolClass}
}

// forClaimKeys are the annotations of a kept volume, which the hand-over
// removes.
var forClaimKeys = []string{keys.BackingFor, keys.BackingForUID, keys.PoolClass, keys.KeptBy}

// relayBackingFailure tells the claim what the backing provisioner last
// said went wrong with its backing claim: the claim's owner may not read the
// events of the backing claim's namespace, and only the driver knows what
// it cannot make (an access mode, a size, a zone). The recorder counts a
// message repeated on each retry as one event.
func (p *provisioner) relayBackingFailure(ctx context.Context, claim, backing *corev1.PersistentVolumeClaim) {
	// A failure relayed is news enough for relayInterval: the retries
	// meanwhile cost no LIST. Until the driver reports one, each retry
	// looks, so that the first failure reaches the claim at once.
	now := p.clock.Now()
	if p.backing.relayed.recent(backing.Name, now) {
		return
	}
	events, err := p.client.CoreV1().Events(backing.Namespace).List(ctx, metav1.ListOptions{
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
		p.backing.relayed.relayed(backing.Name, now)
		p.recorder.Eventf(claim, corev1.EventTypeWarning, reasonBackingClassFailed, "Class %s has not made a volume for the claim (backing claim %s/%s): %s: %s",
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
func (p *provisioner) backingClaimLive(ctx context.Context, uid types.UID) (*corev1.PersistentVolumeClaim, error) {
	name := backingClaimName(uid)
	c, err := p.backing.lister.PersistentVolumeClaims(p.backing.namespace).Get(name)
	if err == nil && c.DeletionTimestamp == nil {
		return c, nil
	}
	c, err = p.client.CoreV1().PersistentVolumeClaims(p.backing.namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading backing claim %s/%s: %w", p.backing.namespace, name, err)
	}
	return c, nil
}

// backingVolume returns the volume bound to backing, or nil while there is
// none yet.
func (p *provisioner) backingVolume(ctx context.Context, backing *corev1.PersistentVolumeClaim) (*corev1.PersistentVolume, error) {
	pv, err := p.volumeNamed(ctx, backing.Spec.VolumeName)
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
func (p *provisioner) keep(ctx context.Context, pv *corev1.PersistentVolume, annotations map[string]string) error {
	kept := pv.DeepCopy()
	if kept.Annotations == nil {
		kept.Annotations = map[string]string{}
	}
	maps.Copy(kept.Annotations, annotations)
	kept.Annotations[keys.KeptBy] = p.name
	kept.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimRetain
	if _, err := p.client.CoreV1().PersistentVolumes().Update(ctx, kept, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("keeping volume %s for the claim: %w", pv.Name, err)
	}
	return nil
}

// handOver makes pv, kept for claim, a member of class issued to claim
// (step 5).
func (p *provisioner) handOver(ctx context.Context, claim *corev1.PersistentVolumeClaim, class *storagev1.StorageClass, pv *corev1.PersistentVolume, g growth) (*corev1.PersistentVolume, lib.ProvisioningState, error) {
	// Bound as the PV controller binds, its bound-by-controller mark
	// included (see take): a volume whose claim got bound elsewhere
	// returns to the pool.
	member, _, err := volumehelpers.GetBindVolumeToClaim(p.memberOf(pv, class.Name, ptr.Deref(class.ReclaimPolicy, corev1.PersistentVolumeReclaimDelete), g.labels), claim)
	if err != nil {
		return nil, lib.ProvisioningFinished, err
	}
	member.Annotations[keys.LastClaim] = claimKey(claim)
	member.Annotations[keys.IssuedAt] = p.clock.Now().UTC().Format(time.RFC3339)
	if _, err := p.client.CoreV1().PersistentVolumes().Update(ctx, member, metav1.UpdateOptions{}); err != nil {
		return nil, lib.ProvisioningInBackground, fmt.Errorf("issuing volume %s of class %s to the claim: %w", pv.Name, pv.Spec.StorageClassName, err)
	}
	crashPoint(stepHandedOver)
	p.pending.Rename(backingClaimName(claim.UID), pv.Name)
	p.takes.Expect(claim.UID, pv.Name)
	p.metrics.created.WithLabelValues(class.Name).Inc()
	p.metrics.issues.WithLabelValues(class.Name, string(issueNewVolume)).Inc()
	p.recorder.Eventf(claim, corev1.EventTypeNormal, reasonProvisioningSucceeded,
		"Volume %s made by class %s issued as a new member of the pool of class %s", pv.Name, pv.Spec.StorageClassName, class.Name)
	klog.FromContext(ctx).V(2).Info("Issued a volume of the backing class", "pv", pv.Name, "backingClass", pv.Spec.StorageClassName, "volumes", g.count+1)
	return nil, lib.ProvisioningFinished, &lib.IgnoredError{Reason: fmt.Sprintf("volume %s of class %s was issued to the claim; the PV controller binds it", pv.Name, pv.Spec.StorageClassName)}
}

func mergeLabels(a, b map[string]string) map[string]string {
	if len(b) == 0 {
		return a
	}
	out := maps.Clone(a)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, b)
	return out
}

// deleteBackingClaim deletes backing, if it is still the one given; its
// deletion requeues the claim (onBacking), and a failure is retried.
func (p *provisioner) deleteBackingClaim(ctx context.Context, backing *corev1.PersistentVolumeClaim) {
	if backing.DeletionTimestamp != nil {
		return
	}
	err := p.client.CoreV1().PersistentVolumeClaims(backing.Namespace).Delete(ctx, backing.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &backing.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		klog.FromContext(ctx).Info("Deleting a backing claim failed; retrying", "claim", klog.KObj(backing), "err", err)
		if uid := backing.Annotations[keys.BackingForUID]; uid != "" {
			p.backing.queue.AddAfter(types.UID(uid), time.Second)
		}
	}
}

// syncBacking looks at what was made for the claim of uid: a backing claim,
// a kept volume. While the claim waits for a volume, a change of either
// brings it back to the library's queue; once it no longer does (gone,
// bound elsewhere), both go back to the backing provisioner.
func (p *provisioner) syncBacking(ctx context.Context, uid types.UID) error {
	backing, err := p.backing.lister.PersistentVolumeClaims(p.backing.namespace).Get(backingClaimName(uid))
	if err != nil {
		backing = nil
	}
	kept := p.keptVolume(uid)
	var key string
	switch {
	case kept != nil && kept.Annotations[keys.MadeAhead] != "", backing != nil && backing.Annotations[keys.MadeAhead] != "":
		return p.syncAhead(ctx, uid, backing, kept)
	case kept != nil:
		key = kept.Annotations[keys.BackingFor]
	case backing != nil:
		key = backing.Annotations[keys.BackingFor]
	default:
		return nil
	}
	claim, wanted, err := p.wantsVolume(ctx, key, uid)
	if err != nil {
		return err
	}
	if wanted {
		p.requeue(claim)
		return nil
	}
	if kept != nil {
		// Step 3 happened: the volume goes back to be deleted.
		undo := kept.DeepCopy()
		for _, k := range forClaimKeys {
			delete(undo.Annotations, k)
		}
		undo.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimDelete
		if _, err := p.client.CoreV1().PersistentVolumes().Update(ctx, undo, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("giving volume %s back to its provisioner: %w", kept.Name, err)
		}
	}
	if backing != nil {
		p.deleteBackingClaim(ctx, backing)
	}
	klog.FromContext(ctx).V(2).Info("Gave back what was made for a claim that no longer wants it", "claim", key)
	return nil
}

// volumeNamed returns the volume of that name, from the cache or else the
// API server; nil for "" or none.
func (p *provisioner) volumeNamed(ctx context.Context, name string) (*corev1.PersistentVolume, error) {
	if name == "" {
		return nil, nil
	}
	if obj, ok, _ := p.volumes.GetByKey(name); ok {
		return obj.(*corev1.PersistentVolume), nil
	}
	pv, err := p.client.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return pv, err
}

// wantsVolume reports whether the claim key ("<namespace>/<name>") of uid
// still waits for a volume, which only the API server can say for sure of
// a claim gone from the cache.
func (p *provisioner) wantsVolume(ctx context.Context, key string, uid types.UID) (*corev1.PersistentVolumeClaim, bool, error) {
	ns, name, ok := strings.Cut(key, "/")
	if !ok || ns == "" || name == "" {
		return nil, false, nil
	}
	claim, err := p.claims.PersistentVolumeClaims(ns).Get(name)
	if err != nil || claim.UID != uid {
		claim, err = p.client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, fmt.Errorf("reading claim %s: %w", key, err)
		}
	}
	return claim, claim.UID == uid && claim.DeletionTimestamp == nil && claim.Spec.VolumeName == "", nil
}

// pendingBacking names the volumes of class on their way through backing
// claims, with the node each is for, by the name the library gives them
// (the backing claim's). They count against the class's limits.
func (p *provisioner) pendingBacking(class string) map[string]string {
	out := map[string]string{}
	for name, v := range p.inFlight(class) {
		out[name] = v.node
	}
	return out
}

// inFlightVolume is a volume on its way through a backing claim: the node
// it is for, and whether it is a member made ahead of claims.
type inFlightVolume struct {
	node  string
	ahead bool
}

// inFlight lists the volumes of class on their way through backing claims,
// by the backing claim's name: a backing claim, or a volume kept (step 3)
// and not handed over yet, which stands for its backing claim from then on.
func (p *provisioner) inFlight(class string) map[string]inFlightVolume {
	out := map[string]inFlightVolume{}
	if p.backing == nil {
		return out
	}
	claims, _ := p.backing.lister.PersistentVolumeClaims(p.backing.namespace).List(labels.Everything())
	for _, c := range claims {
		if c.Annotations[keys.PoolClass] == class {
			out[c.Name] = inFlightVolume{node: c.Annotations[volumehelpers.AnnSelectedNode], ahead: c.Annotations[keys.MadeAhead] != ""}
		}
	}
	for _, uid := range p.keptUIDs() {
		if pv := p.keptVolume(uid); pv != nil && pv.Annotations[keys.PoolClass] == class {
			out[backingClaimName(uid)] = inFlightVolume{node: nodeOf(pv), ahead: pv.Annotations[keys.MadeAhead] != ""}
		}
	}
	return out
}

// nodeOf is the node a volume's affinity pins it to, if one.
func nodeOf(pv *corev1.PersistentVolume) string {
	if a := pv.Spec.NodeAffinity; a != nil && a.Required != nil && len(a.Required.NodeSelectorTerms) == 1 {
		for _, e := range a.Required.NodeSelectorTerms[0].MatchExpressions {
			if e.Key == corev1.LabelHostname && len(e.Values) == 1 {
				return e.Values[0]
			}
		}
	}
	return ""
}

// relayInterval is how long after relaying a failure of its backing claim
// a claim that waits for its backing class reads the backing provisioner's
// events again: a LIST of the API server's events.
const relayInterval = 30 * time.Second
