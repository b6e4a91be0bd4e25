// Package scrub is the scrubber: it empties the volumes handed to it
// (onRelease Scrub) before any claim may have them, and returns them to the
// pool.
package scrub

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	volumehelpers "k8s.io/component-helpers/storage/volume"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/reclaimable/reclaimable/internal/controller"
	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/internal/wellknown"
	"github.com/reclaimable/reclaimable/provisioner/lifecycle"
	"github.com/reclaimable/reclaimable/provisioner/unissued"
)

// The scrubber empties the volumes handed to it (wellknown.Scrub) before any
// claim may have them, and returns them to the pool. The releaser hands a
// volume over once its claim is proven gone, leaving it Released with the
// gone claim in its claimRef, which neither the PV controller nor the
// provisioner gives to anyone. Then, each step one write that is safe to
// repeat, and each found again by its name after a restart:
//
//  1. requested: the volume's claimRef is set to its scrub claim
//     (lifecycle namespace, wellknown.ScrubClaim), by name: running.
//  2. running: the scrub claim is created with the volume's name, the PV
//     controller binds the two, and a scrub pod that mounts the claim
//     empties the volume; once it succeeded: done. A pod that fails leaves
//     the volume running, its error in wellknown.ScrubFailed, and is tried again
//     with back-off.
//  3. done: the scrub claim is deleted; once it is gone the scrub's and
//     its last claim's annotations go, and the volume's claimRef is
//     cleared, or under reuseScope namespace names a claim that never
//     exists (pools.AheadClaimRef): the volume is free, and empty.
//
// It runs in the provisioner, which alone may run pods in the lifecycle
// namespace, while the provisioner leads.

const (
	reasonScrubFailed = "ScrubFailed"
	reasonScrubbed    = "Scrubbed"
)

// Provisioner is what the scrubber asks of the provisioner it runs in.
type Provisioner interface {
	// ClaimGone reports whether the claim pv's claimRef names is gone, as
	// the API server confirms.
	ClaimGone(ctx context.Context, pv *corev1.PersistentVolume) (bool, error)
	// UpdateVolume writes pv guarded by the resourceVersion the cache
	// showed: nil, nil once the volume is gone, and a controller.Wait when
	// it changed meanwhile. what says the write in an error.
	UpdateVolume(ctx context.Context, pv *corev1.PersistentVolume, what string) (*corev1.PersistentVolume, error)
}

// Config is what the scrubber works with.
type Config struct {
	// Provisioner is the provisioner's name: only the volumes of its
	// classes are scrubbed here.
	Provisioner string
	Client      kubernetes.Interface
	// Volumes is the shared volume informer's cache.
	Volumes cache.Indexer
	Classes storagelisters.StorageClassLister
	// Pools is the shared VolumePool informer's cache: a pool's settings
	// override its class's parameters.
	Pools    cache.Indexer
	Pods     lifecycle.Pods
	Recorder record.EventRecorder
	Clock    clock.PassiveClock
	// Failures counts failed scrubs by class.
	Failures *prometheus.CounterVec
	Workers  int
}

// Scrubber empties the volumes handed to it.
type Scrubber struct {
	p    Provisioner
	cfg  Config
	loop *controller.Loop[*corev1.PersistentVolume, string]
}

// New builds the scrubber of p; Watch has it follow the volumes.
func New(p Provisioner, cfg Config) *Scrubber {
	s := &Scrubber{p: p, cfg: cfg}
	// Only a change of what the scrub goes by queues a volume: the
	// failure it records itself must not bring a retry before its
	// back-off. A sweep now and then finds a step that failed or that a
	// restart interrupted.
	s.loop = &controller.Loop[*corev1.PersistentVolume, string]{
		Name: "scrubber", Ref: controller.NameRef[*corev1.PersistentVolume],
		Wants: func(old, cur *corev1.PersistentVolume) bool {
			return pools.Scrubbing(cur) && (old == nil || scrubStep(old) != scrubStep(cur))
		},
		Sync: s.Sync, Sweep: time.Minute, List: controller.ListOf[*corev1.PersistentVolume](cfg.Volumes), Workers: cfg.Workers,
	}
	return s
}

// Watch queues the volumes of the shared informer volumes as their scrub
// needs a step.
func (s *Scrubber) Watch(volumes cache.SharedIndexInformer) error { return s.loop.Watch(volumes) }

// scrubStep is what the scrubber's next step depends on.
func scrubStep(pv *corev1.PersistentVolume) string {
	ref := ""
	if r := pv.Spec.ClaimRef; r != nil {
		ref = r.Namespace + "/" + r.Name + "/" + string(r.UID)
	}
	return pv.Annotations[wellknown.Scrub] + " " + ref + " " + string(pv.Status.Phase)
}

// Run scrubs until ctx is done.
func (s *Scrubber) Run(ctx context.Context) { s.loop.Run(ctx) }

// Sync takes the volume called name one step of its scrub further.
func (s *Scrubber) Sync(ctx context.Context, name string) error {
	obj, exists, err := s.cfg.Volumes.GetByKey(name)
	if err != nil || !exists {
		return err
	}
	pv := obj.(*corev1.PersistentVolume)
	if !pools.Scrubbing(pv) || pv.DeletionTimestamp != nil {
		return nil
	}
	// Only the volumes of this provisioner's classes: another
	// installation scrubs its own.
	if class, err := s.cfg.Classes.Get(volumehelpers.GetPersistentVolumeClass(pv)); err != nil || class.Provisioner != s.cfg.Provisioner {
		return nil
	}
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("pv", name))
	switch {
	case pv.Annotations[wellknown.Scrub] == wellknown.ScrubDone:
		return s.finish(ctx, pv)
	case !s.scrubClaimRef(pv):
		return s.take(ctx, pv)
	}
	return s.scrub(ctx, pv)
}

// scrubClaimRef reports whether pv's claimRef names its scrub claim.
func (s *Scrubber) scrubClaimRef(pv *corev1.PersistentVolume) bool {
	ref := pv.Spec.ClaimRef
	return ref != nil && ref.Namespace == s.cfg.Pods.Namespace() && ref.Name == wellknown.ScrubClaim(pv.Name)
}

// take pre-binds pv to its scrub claim, once no claim has it: one write,
// guarded by the resourceVersion, after which the PV controller binds it to
// no other claim.
func (s *Scrubber) take(ctx context.Context, pv *corev1.PersistentVolume) error {
	if pv.Status.Phase == corev1.VolumeBound {
		return nil // marked by hand while in use: scrubbed once its claim goes
	}
	if gone, err := s.p.ClaimGone(ctx, pv); err != nil || !gone {
		return err
	}
	if pv.Spec.VolumeMode != nil && *pv.Spec.VolumeMode == corev1.PersistentVolumeBlock {
		return s.failed(ctx, pv, fmt.Errorf("a block volume is not scrubbed: it has no files to remove, and overwriting a device is not done here; delete the volume, or remove %s by hand to return it with its data", wellknown.Scrub), false)
	}
	updated := pv.DeepCopy()
	updated.Spec.ClaimRef = &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: s.cfg.Pods.Namespace(), Name: wellknown.ScrubClaim(pv.Name)}
	updated.Annotations[wellknown.Scrub] = wellknown.ScrubRunning
	// A newer version may differ only where the scrub does not look,
	// which queues nothing: UpdateVolume has it looked at again.
	_, err := s.p.UpdateVolume(ctx, updated, "setting the claimRef of volume "+pv.Name+" to its scrub claim")
	return err
}

// scrub runs the scrub pod of pv, which is pre-bound to its scrub claim,
// and marks the volume done once the pod succeeded.
func (s *Scrubber) scrub(ctx context.Context, pv *corev1.PersistentVolume) error {
	if !s.cfg.Pods.Runs() {
		return s.failed(ctx, pv, fmt.Errorf("the provisioner was started without --lifecycle-image or --lifecycle-pod-template, and a scrub pod runs the reclaimable image"), true)
	}
	if err := s.ensureClaim(ctx, pv); err != nil {
		return err
	}
	class, err := s.cfg.Classes.Get(volumehelpers.GetPersistentVolumeClass(pv))
	if err != nil {
		return err
	}
	job := lifecycle.Job{Op: lifecycle.Scrub, Volume: pv.Name, Claim: wellknown.ScrubClaim(pv.Name)}
	job.Templates, _ = lifecycle.Templates(class.Parameters)
	klog.FromContext(ctx).V(2).Info("Scrubbing a volume")
	if err := s.cfg.Pods.Run(ctx, job); err != nil {
		return s.failed(ctx, pv, err, true)
	}
	updated := pv.DeepCopy()
	updated.Annotations[wellknown.Scrub] = wellknown.ScrubDone
	delete(updated.Annotations, wellknown.ScrubFailed)
	// A conflict: the volume changed meanwhile, and the next sync scrubs
	// it again, which finds it empty.
	if _, err := s.cfg.Client.CoreV1().PersistentVolumes().Update(ctx, updated, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("marking volume %s scrubbed: %w", pv.Name, err)
	}
	return nil
}

// ensureClaim creates pv's scrub claim, which asks for pv by name.
func (s *Scrubber) ensureClaim(ctx context.Context, pv *corev1.PersistentVolume) error {
	class := volumehelpers.GetPersistentVolumeClass(pv)
	mode := corev1.PersistentVolumeFilesystem
	modes := pv.Spec.AccessModes
	if len(modes) > 1 {
		modes = modes[:1]
	}
	claim := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: wellknown.ScrubClaim(pv.Name), Namespace: s.cfg.Pods.Namespace(),
			Labels: wellknown.Map(wellknown.Lifecycle, lifecycle.Scrub, "app.kubernetes.io/managed-by", "reclaimable")},
		Spec: corev1.PersistentVolumeClaimSpec{
			VolumeName: pv.Name, StorageClassName: &class, AccessModes: modes, VolumeMode: &mode,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: capacityOf(pv)}},
		},
	}
	_, err := s.cfg.Client.CoreV1().PersistentVolumeClaims(s.cfg.Pods.Namespace()).Create(ctx, claim, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the scrub claim of volume %s: %w", pv.Name, err)
	}
	return nil
}

// namespaced reports whether the pool of pv, as its VolumePool makes its
// class, holds members to namespaces (reuseScope namespace, the default).
// A class gone counts as namespaced: its member then waits for the
// provisioner rather than go to any claim.
func (s *Scrubber) namespaced(pv *corev1.PersistentVolume) bool {
	class, err := s.cfg.Classes.Get(volumehelpers.GetPersistentVolumeClass(pv))
	return err != nil || unissued.Namespaced(class, s.cfg.Pools)
}

func capacityOf(pv *corev1.PersistentVolume) resource.Quantity {
	return pv.Spec.Capacity[corev1.ResourceStorage]
}

// finish deletes pv's scrub claim and, once it is gone, returns the volume
// to the pool: free for any claim, empty.
func (s *Scrubber) finish(ctx context.Context, pv *corev1.PersistentVolume) error {
	claims := s.cfg.Client.CoreV1().PersistentVolumeClaims(s.cfg.Pods.Namespace())
	name := wellknown.ScrubClaim(pv.Name)
	err := claims.Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting the scrub claim of volume %s: %w", pv.Name, err)
	}
	if _, err := claims.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		if err != nil {
			return fmt.Errorf("reading the scrub claim of volume %s: %w", pv.Name, err)
		}
		// Still there: its protection finalizer goes once no pod uses
		// it, which no event of the volume tells.
		return controller.Wait("scrub claim %s/%s is being deleted", s.cfg.Pods.Namespace(), name)
	}
	updated := pv.DeepCopy()
	free := "free for any claim"
	if s.scrubClaimRef(pv) {
		updated.Spec.ClaimRef = nil
		if s.namespaced(pv) {
			// Without a claimRef the PV controller would bind it to any
			// claim that fits, past keys (keyPolicy Require) and shares
			// (maxVolumesPerNamespace): it names a claim that never
			// exists, as a member made ahead does, and the provisioner
			// alone issues it.
			updated.Spec.ClaimRef = pools.AheadClaimRef(pv.Name)
			free = "free for any claim, issued by the provisioner"
		}
	}
	for _, k := range []string{wellknown.Scrub, wellknown.ScrubFailed} {
		delete(updated.Annotations, k)
	}
	delete(updated.Annotations, wellknown.LastClaim)
	delete(updated.Annotations, wellknown.LastKey)
	delete(updated.Annotations, wellknown.HeldForNamespace)
	delete(updated.Annotations, wellknown.ReservedUntil)
	updated.Annotations[wellknown.ReleasedAt] = s.cfg.Clock.Now().UTC().Format(time.RFC3339)
	res, err := s.p.UpdateVolume(ctx, updated, "returning scrubbed volume "+pv.Name+" to the pool")
	if res == nil {
		return err
	}
	s.cfg.Recorder.Event(res, corev1.EventTypeNormal, reasonScrubbed, "Emptied and returned to the pool, "+free)
	klog.FromContext(ctx).Info("Scrubbed a volume")
	return nil
}

// failed records why pv's scrub failed, on the volume (kept until a scrub
// succeeds) and as a Warning, and returns it for the queue's back-off when
// retry.
func (s *Scrubber) failed(ctx context.Context, pv *corev1.PersistentVolume, err error, retry bool) error {
	s.cfg.Failures.WithLabelValues(volumehelpers.GetPersistentVolumeClass(pv)).Inc()
	msg := err.Error()
	if len(msg) > 1024 {
		msg = msg[:1024]
	}
	s.cfg.Recorder.Event(pv, corev1.EventTypeWarning, reasonScrubFailed, "Kept out of the pool: "+msg)
	if pv.Annotations[wellknown.ScrubFailed] != msg {
		updated := pv.DeepCopy()
		updated.Annotations[wellknown.ScrubFailed] = msg
		if _, uerr := s.cfg.Client.CoreV1().PersistentVolumes().Update(ctx, updated, metav1.UpdateOptions{}); uerr != nil && !apierrors.IsConflict(uerr) && !apierrors.IsNotFound(uerr) {
			klog.FromContext(ctx).Error(uerr, "Recording a failed scrub")
		}
	}
	if !retry {
		return nil
	}
	return fmt.Errorf("scrubbing volume %s: %w", pv.Name, err)
}
