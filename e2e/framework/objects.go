package framework

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The tests create the objects of package objects through these, which
// clean up after the test.

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
