package releaser

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/reclaimable/reclaimable/internal/wellknown"
)

const (
	testID          = "ours"
	testProvisioner = "vendor/reclaimable"
	testClass       = "pool"
)

var testPolicy = policy{controllerID: testID, provisionerName: testProvisioner, claimRule: true}

// volume builds a PersistentVolume of class testClass; mutate adjusts it.
func volume(phase corev1.PersistentVolumePhase, mutate ...func(*corev1.PersistentVolume)) *corev1.PersistentVolume {
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv-1", UID: "pv-uid", ResourceVersion: "10"},
		Spec: corev1.PersistentVolumeSpec{
			StorageClassName:              testClass,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: "ns", Name: "data", UID: "claim-uid"},
		},
		Status: corev1.PersistentVolumeStatus{Phase: phase},
	}
	for _, m := range mutate {
		m(pv)
	}
	return pv
}

func labelled(id string) func(*corev1.PersistentVolume) {
	return func(pv *corev1.PersistentVolume) {
		if pv.Labels == nil {
			pv.Labels = map[string]string{}
		}
		pv.Labels[wellknown.VolumeManagedBy] = id
	}
}

func provisionedBy(name string) func(*corev1.PersistentVolume) {
	return func(pv *corev1.PersistentVolume) {
		pv.Annotations = map[string]string{wellknown.ProvisionedBy: name}
	}
}

func withoutClaimRef(pv *corev1.PersistentVolume) { pv.Spec.ClaimRef = nil }

func deleting(pv *corev1.PersistentVolume) {
	now := metav1.Now()
	pv.DeletionTimestamp = &now
	pv.Finalizers = []string{"kubernetes.io/pv-protection"}
}

func class(id string) *storagev1.StorageClass {
	c := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: testClass}, Provisioner: "kubernetes.io/no-provisioner"}
	if id != "" {
		c.Annotations = map[string]string{wellknown.ClassControllerID: id}
	}
	return c
}

// claim builds the claim ns/data with the given UID and managed-by label ("" for none).
func claim(uid types.UID, managedBy string) *corev1.PersistentVolumeClaim {
	c := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "data", UID: uid, ResourceVersion: "5"}}
	if managedBy != "" {
		c.Labels = map[string]string{wellknown.ClaimManagedBy: managedBy}
	}
	return c
}

func TestAssociationRule(t *testing.T) {
	noClaimRule := testPolicy
	noClaimRule.claimRule = false
	tests := []struct {
		name   string
		policy policy
		pv     *corev1.PersistentVolume
		class  *storagev1.StorageClass
		claim  *corev1.PersistentVolumeClaim
		want   rule // "" for no association
	}{
		{name: "bound to a managed claim", pv: volume(corev1.VolumeBound), class: class(""), claim: claim("claim-uid", testID), want: ruleManagedClaim},
		{name: "managed claim rule disabled", policy: noClaimRule, pv: volume(corev1.VolumeBound), class: class(""), claim: claim("claim-uid", testID)},
		{name: "claim managed by another ID", pv: volume(corev1.VolumeBound), class: class(""), claim: claim("claim-uid", "theirs")},
		{name: "managed claim recreated with a new UID is another claim", pv: volume(corev1.VolumeReleased), class: class(""), claim: claim("new-uid", testID)},
		{name: "pre-bound by name to a managed claim", pv: volume(corev1.VolumeBound, func(pv *corev1.PersistentVolume) { pv.Spec.ClaimRef.UID = "" }), claim: claim("claim-uid", testID), want: ruleManagedClaim},
		{name: "class names this ID", pv: volume(corev1.VolumeBound), class: class(testID), want: ruleStorageClass},
		{name: "class names this ID, claim long gone", pv: volume(corev1.VolumeReleased), class: class(testID), want: ruleStorageClass},
		{name: "class names another ID", pv: volume(corev1.VolumeReleased), class: class("theirs")},
		{name: "class passed is not the volume's class", pv: volume(corev1.VolumeReleased, func(pv *corev1.PersistentVolume) { pv.Spec.StorageClassName = "other" }), class: class(testID)},
		{name: "class named by the beta annotation", pv: volume(corev1.VolumeReleased, func(pv *corev1.PersistentVolume) {
			pv.Spec.StorageClassName = ""
			pv.Annotations = map[string]string{corev1.BetaStorageClassAnnotation: testClass}
		}), class: class(testID), want: ruleStorageClass},
		{name: "provisioned by this installation", pv: volume(corev1.VolumeReleased, provisionedBy(testProvisioner)), want: ruleProvisioner},
		{name: "provisioned by another provisioner", pv: volume(corev1.VolumeReleased, provisionedBy("vendor/other"))},
		{name: "claim rule wins when several match", pv: volume(corev1.VolumeBound, provisionedBy(testProvisioner)), class: class(testID), claim: claim("claim-uid", testID), want: ruleManagedClaim},
		{name: "already associated with this ID", pv: volume(corev1.VolumeBound, labelled(testID)), class: class(testID), claim: claim("claim-uid", testID)},
		{name: "already associated with another ID", pv: volume(corev1.VolumeReleased, labelled("theirs")), class: class(testID), claim: claim("claim-uid", testID)},
		{name: "association label with an empty value is another's", pv: volume(corev1.VolumeReleased, labelled("")), class: class(testID)},
		{name: "no claimRef: nothing to release", pv: volume(corev1.VolumeAvailable, withoutClaimRef, provisionedBy(testProvisioner)), class: class(testID)},
		{name: "being bound: phase not yet Bound", pv: volume(corev1.VolumeAvailable), class: class(testID), claim: claim("claim-uid", testID)},
		{name: "pending", pv: volume(corev1.VolumePending, provisionedBy(testProvisioner))},
		{name: "failed", pv: volume(corev1.VolumeFailed), class: class(testID)},
		{name: "being deleted", pv: volume(corev1.VolumeReleased, deleting), class: class(testID)},
		{name: "no rule matches", pv: volume(corev1.VolumeBound), class: class(""), claim: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.policy
			if p == (policy{}) {
				p = testPolicy
			}
			got, ok := p.associationRule(tt.pv, tt.class, tt.claim)
			if ok != (tt.want != "") || got != tt.want {
				t.Errorf("associationRule() = %q, %v; want %q, %v", got, ok, tt.want, tt.want != "")
			}
		})
	}
}

func TestKeepsAssociation(t *testing.T) {
	noClaimRule := testPolicy
	noClaimRule.claimRule = false
	tests := []struct {
		name   string
		policy policy
		pv     *corev1.PersistentVolume
		class  *storagev1.StorageClass
		want   rule // "" when the release removes the label
	}{
		{name: "class names this ID", pv: volume(corev1.VolumeReleased, labelled(testID)), class: class(testID), want: ruleStorageClass},
		{name: "class named by the beta annotation", pv: volume(corev1.VolumeReleased, labelled(testID), func(pv *corev1.PersistentVolume) {
			pv.Spec.StorageClassName = ""
			pv.Annotations = map[string]string{corev1.BetaStorageClassAnnotation: testClass}
		}), class: class(testID), want: ruleStorageClass},
		{name: "provisioned by this installation", pv: volume(corev1.VolumeReleased, labelled(testID), provisionedBy(testProvisioner)), class: class(""), want: ruleProvisioner},
		{name: "provisioned here, class not in the cache", pv: volume(corev1.VolumeReleased, labelled(testID), provisionedBy(testProvisioner)), want: ruleProvisioner},
		{name: "class rule first when both hold", pv: volume(corev1.VolumeReleased, labelled(testID), provisionedBy(testProvisioner)), class: class(testID), want: ruleStorageClass},
		{name: "kept with the managed-claim rule disabled", policy: noClaimRule, pv: volume(corev1.VolumeReleased, labelled(testID)), class: class(testID), want: ruleStorageClass},
		{name: "associated through its claim only, or the class annotation removed since", pv: volume(corev1.VolumeReleased, labelled(testID)), class: class("")},
		{name: "class now names another ID", pv: volume(corev1.VolumeReleased, labelled(testID)), class: class("theirs")},
		{name: "class not in the cache", pv: volume(corev1.VolumeReleased, labelled(testID))},
		{name: "class passed is not the volume's class", pv: volume(corev1.VolumeReleased, labelled(testID), func(pv *corev1.PersistentVolume) { pv.Spec.StorageClassName = "other" }), class: class(testID)},
		{name: "provisioned by another provisioner", pv: volume(corev1.VolumeReleased, labelled(testID), provisionedBy("vendor/other")), class: class("")},
		{name: "label of another ID is not this installation's to keep", pv: volume(corev1.VolumeReleased, labelled("theirs")), class: class(testID)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.policy
			if p == (policy{}) {
				p = testPolicy
			}
			got, ok := p.keepsAssociation(tt.pv, tt.class)
			if ok != (tt.want != "") || got != tt.want {
				t.Errorf("keepsAssociation() = %q, %v; want %q, %v", got, ok, tt.want, tt.want != "")
			}
		})
	}
}

func TestReleasable(t *testing.T) {
	tests := []struct {
		name string
		pv   *corev1.PersistentVolume
		want bool
		why  reason
	}{
		{name: "ours and Released", pv: volume(corev1.VolumeReleased, labelled(testID)), want: true},
		{name: "not associated", pv: volume(corev1.VolumeReleased), why: notOurs},
		{name: "associated with another ID", pv: volume(corev1.VolumeReleased, labelled("theirs")), why: notOurs},
		{name: "Bound", pv: volume(corev1.VolumeBound, labelled(testID)), why: notReleased},
		{name: "Available, pre-bound", pv: volume(corev1.VolumeAvailable, labelled(testID)), why: notReleased},
		{name: "Failed", pv: volume(corev1.VolumeFailed, labelled(testID)), why: notReleased},
		{name: "being deleted", pv: volume(corev1.VolumeReleased, labelled(testID), deleting), why: beingDeleted},
		{name: "reclaim policy Delete", pv: volume(corev1.VolumeReleased, labelled(testID), func(pv *corev1.PersistentVolume) {
			pv.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimDelete
		}), why: notRetained},
		{name: "no claimRef", pv: volume(corev1.VolumeReleased, labelled(testID), withoutClaimRef), why: noClaimRef},
		{name: "claimRef without name", pv: volume(corev1.VolumeReleased, labelled(testID), func(pv *corev1.PersistentVolume) { pv.Spec.ClaimRef.Name = "" }), why: invalidClaimRef},
		{name: "pre-bound by name, Released a moment more", pv: volume(corev1.VolumeReleased, labelled(testID), func(pv *corev1.PersistentVolume) { pv.Spec.ClaimRef.UID = "" }), why: preBound},
		{name: "claimRef without namespace", pv: volume(corev1.VolumeReleased, labelled(testID), func(pv *corev1.PersistentVolume) { pv.Spec.ClaimRef.Namespace = "" }), why: invalidClaimRef},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, why := releasable(tt.pv, testID)
			if got != tt.want || why != tt.why {
				t.Errorf("releasable() = %v, %q; want %v, %q", got, why, tt.want, tt.why)
			}
		})
	}
}

func TestSameClaim(t *testing.T) {
	ref := func(ns, name string, uid types.UID) *corev1.ObjectReference {
		return &corev1.ObjectReference{Namespace: ns, Name: name, UID: uid}
	}
	tests := []struct {
		name string
		ref  *corev1.ObjectReference
		want bool
	}{
		{name: "same namespace, name and UID", ref: ref("ns", "data", "claim-uid"), want: true},
		{name: "recreated: same name, new UID", ref: ref("ns", "data", "old-uid")},
		{name: "other name", ref: ref("ns", "other", "claim-uid")},
		{name: "other namespace", ref: ref("other", "data", "claim-uid")},
		{name: "ref without UID", ref: ref("ns", "data", ""), want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := sameClaim(tt.ref, claim("claim-uid", "")); got != tt.want {
				t.Errorf("sameClaim() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestDeletionReported(t *testing.T) {
	now := metav1.NewTime(time.Now())
	tests := []struct {
		name       string
		deletion   *metav1.Time
		finalizers []string
		want       bool
	}{
		{name: "deleted: last content still lists the finalizer", deletion: &now, finalizers: []string{"kubernetes.io/pvc-protection"}, want: true},
		{name: "deleted: finalizers gone", deletion: &now, want: true},
		{name: "lost the label, or deleted without finalizers: cannot tell", deletion: nil},
		{name: "lost the label with finalizers", deletion: nil, finalizers: []string{"kubernetes.io/pvc-protection"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := claim("u", testID)
			c.DeletionTimestamp, c.Finalizers = tt.deletion, tt.finalizers
			if got := deletionReported(c); got != tt.want {
				t.Errorf("deletionReported() = %v, want %v", got, tt.want)
			}
		})
	}
}
