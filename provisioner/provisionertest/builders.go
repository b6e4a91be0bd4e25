// Package provisionertest holds what the tests of the provisioner and of
// the packages beside it (classpool, ahead, evict, scrub, match) share: a
// fake API server with the informer caches they read, which a test feeds
// as the informers would (Cluster); a stand-in for the provisioner as
// those packages ask things of it (Flow, ClassFlow); and the builders of
// the volumes, claims and classes they work on.
package provisionertest

import (
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	lib "sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// Provisioner is the provisioner's name in the tests: the classes name it,
// and the volumes it made say so.
const Provisioner = "vendor/reclaimable"

// T0 is the tests' "now", the moment the clocks they set start at.
func T0() time.Time { return time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC) }

// Volume builds a pool member of class "pool" that this provisioner made,
// Available, with the given capacity.
func Volume(name, size string, mods ...func(*corev1.PersistentVolume)) *corev1.PersistentVolume {
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{
			Name:            name,
			ResourceVersion: "1",
			Annotations:     map[string]string{wellknown.ProvisionedBy: Provisioner},
		},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              "pool",
		},
		Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeAvailable},
	}
	for _, m := range mods {
		m(pv)
	}
	return pv
}

// Released makes pv Released from the claim ns/name with the given UID, at t.
func Released(ns, name, uid string, t time.Time) func(*corev1.PersistentVolume) {
	return func(pv *corev1.PersistentVolume) {
		pv.Spec.ClaimRef = &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: ns, Name: name, UID: types.UID(uid)}
		pv.Status.Phase = corev1.VolumeReleased
		pv.Status.LastPhaseTransitionTime = &metav1.Time{Time: t}
	}
}

// Returned makes pv Available again after the releaser returned it from the
// claim last ("<namespace>/<name>") at t.
func Returned(last string, t time.Time) func(*corev1.PersistentVolume) {
	return func(pv *corev1.PersistentVolume) {
		pv.Annotations[wellknown.LastClaim] = last
		pv.Annotations[wellknown.ReleasedAt] = t.UTC().Format(time.RFC3339)
	}
}

// Keyed records on pv the cache key it was last issued under.
func Keyed(key string) func(*corev1.PersistentVolume) {
	return func(pv *corev1.PersistentVolume) { pv.Annotations[wellknown.LastKey] = key }
}

// ReservedFor makes pv reserved by the releaser for the claim ns/name
// until until, as it leaves a volume of a class with reserveFor.
func ReservedFor(ns, name string, until time.Time) func(*corev1.PersistentVolume) {
	return func(pv *corev1.PersistentVolume) {
		pv.Spec.ClaimRef = &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: ns, Name: name}
		pv.Annotations[wellknown.ReservedUntil] = until.UTC().Format(time.RFC3339)
	}
}

// Bound makes pv Bound to the claim ns/name with the given UID.
func Bound(ns, name, uid string) func(*corev1.PersistentVolume) {
	return func(pv *corev1.PersistentVolume) {
		pv.Spec.ClaimRef = &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: ns, Name: name, UID: types.UID(uid)}
		pv.Status.Phase = corev1.VolumeBound
	}
}

// ClaimFor builds a ReadWriteOnce claim of class "pool" for size, with the
// UID "uid-<ns>-<name>".
func ClaimFor(ns, name, size string, mods ...func(*corev1.PersistentVolumeClaim)) *corev1.PersistentVolumeClaim {
	c := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name)},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To("pool"),
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)},
			},
		},
	}
	for _, m := range mods {
		m(c)
	}
	return c
}

// DirectoryClass is the class "pool" of this provisioner, of the directory
// backend with its share at root (hostPath /mnt/pool), reclaim policy
// Retain; extra adds or overrides parameters.
func DirectoryClass(root string, extra map[string]string) *storagev1.StorageClass {
	params := map[string]string{"backend": "directory", "baseDir": root, "source": "hostPath", "hostPath": "/mnt/pool"}
	maps.Copy(params, extra)
	return &storagev1.StorageClass{
		ObjectMeta:    metav1.ObjectMeta{Name: "pool"},
		Provisioner:   Provisioner,
		Parameters:    params,
		ReclaimPolicy: ptr.To(corev1.PersistentVolumeReclaimRetain),
	}
}

// HasEvent reports whether one of events, each "<type> <reason> <message>",
// starts with prefix.
func HasEvent(events []string, prefix string) bool {
	for _, e := range events {
		if strings.HasPrefix(e, prefix) {
			return true
		}
	}
	return false
}

// WantIssued fails the test unless err tells the library that pv was
// issued to the claim: the PV controller binds it, and the library must
// make no volume of its own.
func WantIssued(t testing.TB, err error, pv string) {
	t.Helper()
	var ignored *lib.IgnoredError
	if !errors.As(err, &ignored) || !strings.Contains(ignored.Reason, pv) {
		t.Fatalf("Provision = %v, want the library told that %s was issued", err, pv)
	}
}

// ClassMember is an Available member of the class pool "pool" of
// provisioner, a CSI volume its backing class (driver's) made.
func ClassMember(provisioner, driver, backingClass string) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pvc-member", ResourceVersion: "7", Annotations: map[string]string{
			wellknown.ProvisionedBy: provisioner, wellknown.Backend: "class", wellknown.BackingProvisioner: driver, wellknown.BackingClass: backingClass}},
		Spec: corev1.PersistentVolumeSpec{
			StorageClassName:              "pool",
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: "vol-1"}},
		},
		Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeAvailable},
	}
}
