package provisionertest

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/reclaimable/reclaimable/internal/wellknown"
	"github.com/reclaimable/reclaimable/provisioner/backend"
)

// The backing class of the tests' class pools, of a CSI driver, and what
// its driver makes for a backing claim.
const (
	Driver       = "disk.csi.example.com"
	BackingClass = "disk"
	// BackingVolume is the volume the driver makes, bound to the backing
	// claim of UID BackingClaimUID.
	BackingVolume   = "pvc-made-by-the-driver"
	BackingClaimUID = types.UID("backing-uid")
)

// BackingClaim returns the backing claim the API server has for claim.
func (c *Cluster) BackingClaim(claim *corev1.PersistentVolumeClaim) (*corev1.PersistentVolumeClaim, error) {
	return c.Client.CoreV1().PersistentVolumeClaims(BackingNamespace).Get(context.Background(), "pvc-"+string(claim.UID), metav1.GetOptions{})
}

// ServedBackingClaims lists the backing claims the API server has.
func (c *Cluster) ServedBackingClaims() []corev1.PersistentVolumeClaim {
	c.t.Helper()
	claims, err := c.Client.CoreV1().PersistentVolumeClaims(BackingNamespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	return claims.Items
}

// CatchUp has the caches show what the API server has of the backing
// claims and of the volume called name.
func (c *Cluster) CatchUp(name string) {
	c.t.Helper()
	for _, o := range c.BackingClaims.List() {
		_ = c.BackingClaims.Delete(o)
	}
	claims := c.ServedBackingClaims()
	for i := range claims {
		if err := c.BackingClaims.Add(&claims[i]); err != nil {
			c.t.Fatal(err)
		}
	}
	if err := c.Volumes.Update(c.Server(name)); err != nil {
		c.t.Fatal(err)
	}
}

// DriverMade has the driver's sidecar make BackingVolume for backing and
// the PV controller bind them, as the caches and the API server then show.
func (c *Cluster) DriverMade(backing *corev1.PersistentVolumeClaim) *corev1.PersistentVolume {
	c.t.Helper()
	bound := backing.DeepCopy()
	bound.UID = BackingClaimUID
	bound.Spec.VolumeName = BackingVolume
	bound.Status.Phase = corev1.ClaimBound
	if _, err := c.Client.CoreV1().PersistentVolumeClaims(BackingNamespace).Update(context.Background(), bound, metav1.UpdateOptions{}); err != nil {
		c.t.Fatal(err)
	}
	if err := c.BackingClaims.Add(bound); err != nil {
		c.t.Fatal(err)
	}
	return c.Add(&corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: BackingVolume, ResourceVersion: "1",
			Annotations: map[string]string{wellknown.ProvisionedBy: Driver}, Finalizers: []string{backend.ExternalFinalizer, "kubernetes.io/pv-protection"}},
		Spec: corev1.PersistentVolumeSpec{
			StorageClassName:              BackingClass,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			Capacity:                      bound.Spec.Resources.Requests,
			AccessModes:                   bound.Spec.AccessModes,
			ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: BackingNamespace, Name: bound.Name, UID: bound.UID},
			PersistentVolumeSource:        corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: Driver, VolumeHandle: "vol-1"}},
		},
		Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeBound},
	})
}
