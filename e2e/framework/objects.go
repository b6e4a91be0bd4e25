package framework

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The tests' objects, built in one place: each builder makes the common
// shape, and mods change it.

// NewClass is a StorageClass of provisioner, reclaim policy Retain, binding
// Immediate.
func NewClass(name, provisioner string, mods ...func(*storagev1.StorageClass)) *storagev1.StorageClass {
	sc := &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: name},
		Provisioner:       provisioner,
		ReclaimPolicy:     ptr.To(corev1.PersistentVolumeReclaimRetain),
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingImmediate),
	}
	for _, m := range mods {
		m(sc)
	}
	return sc
}

// NewVolume is a volume of class and size on the host path path, reclaim
// policy Retain, ReadWriteOnce.
func NewVolume(name, class, size, path string, mods ...func(*corev1.PersistentVolume)) *corev1.PersistentVolume {
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			StorageClassName:              class,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)},
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path}},
		},
	}
	for _, m := range mods {
		m(pv)
	}
	return pv
}

// NewClaim is a ReadWriteOnce claim for size of class.
func NewClaim(ns, name, class, size string, mods ...func(*corev1.PersistentVolumeClaim)) *corev1.PersistentVolumeClaim {
	c := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: &class,
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
		},
	}
	for _, m := range mods {
		m(c)
	}
	return c
}

// ClaimVolume is a pod's volume name that mounts claim.
func ClaimVolume(name, claim string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim},
	}}
}

// CreateClass creates sc and, at cleanup, deletes it and the volumes of its
// class. It returns the class's name.
func CreateClass(t testing.TB, sc *storagev1.StorageClass) string {
	t.Helper()
	client := Client()
	if _, err := client.StorageV1().StorageClasses().Create(context.Background(), sc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_ = client.StorageV1().StorageClasses().Delete(ctx, sc.Name, metav1.DeleteOptions{})
		pvs, err := client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return
		}
		for _, pv := range pvs.Items {
			if pv.Spec.StorageClassName == sc.Name {
				_ = client.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{})
			}
		}
	})
	return sc.Name
}

// CreateVolume creates pv, deleted at cleanup, and returns it as created.
func CreateVolume(t testing.TB, pv *corev1.PersistentVolume) *corev1.PersistentVolume {
	t.Helper()
	created, err := Client().CoreV1().PersistentVolumes().Create(context.Background(), pv, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = Client().CoreV1().PersistentVolumes().Delete(context.Background(), created.Name, metav1.DeleteOptions{})
	})
	return created
}

// CreateClaim creates c and returns it as created; its namespace goes at
// cleanup, and it with it.
func CreateClaim(t testing.TB, c *corev1.PersistentVolumeClaim) *corev1.PersistentVolumeClaim {
	t.Helper()
	created, err := Client().CoreV1().PersistentVolumeClaims(c.Namespace).Create(context.Background(), c, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}
