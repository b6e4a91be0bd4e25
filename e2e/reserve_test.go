package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/reclaimable/reclaimable/e2e/framework"
	"github.com/reclaimable/reclaimable/internal/keys"
)

// Claims that come back with the names of earlier ones, in another order,
// each get their own volume back: the releaser reserves a released volume
// for its last claim's namespace and name (reserveFor). A claim of a new
// name, with every member reserved, takes the oldest reservation: the pool
// never grows.
func TestReserveForGivesEachClaimItsOwnVolumeBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := framework.Client()
	ns := framework.Namespace(t)
	id := framework.Name("reserve")
	prov := "reserve.example.com/" + id
	base := t.TempDir()
	retain := corev1.PersistentVolumeReclaimRetain
	immediate := storagev1.VolumeBindingImmediate
	class, err := client.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta:  metav1.ObjectMeta{Name: framework.Name("reserve"), Annotations: map[string]string{keys.ClassControllerID: id}},
		Provisioner: prov, ReclaimPolicy: &retain, VolumeBindingMode: &immediate,
		Parameters: map[string]string{"backend": "directory", "baseDir": base, "source": "hostPath", "hostPath": base, keys.ReserveFor: "10m"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_ = client.StorageV1().StorageClasses().Delete(ctx, class.Name, metav1.DeleteOptions{})
		if pvs, err := client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{}); err == nil {
			for _, pv := range pvs.Items {
				if pv.Spec.StorageClassName == class.Name {
					_ = client.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{})
				}
			}
		}
	})
	inv := framework.WatchInvariants(t, framework.Scope{ControllerID: id, Classes: []string{class.Name}, Namespaces: []string{ns}})
	for _, sub := range []string{"provisioner", "releaser"} {
		args := []string{sub, "--controller-id=" + id, "--provisioner-name=" + prov}
		if sub == "provisioner" {
			args = append(args, "--directory-root="+base)
		}
		framework.StartController(t, args...).WaitReady(t)
	}

	claims := client.CoreV1().PersistentVolumeClaims(ns)
	create := func(name string) {
		t.Helper()
		_, err := claims.Create(ctx, &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PersistentVolumeClaimSpec{
				StorageClassName: &class.Name,
				AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	boundTo := func(name string) string {
		t.Helper()
		var volume string
		framework.Eventually(t, 30*time.Second, func(ctx context.Context) (bool, error) {
			c, err := claims.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			volume = c.Spec.VolumeName
			return c.Status.Phase == corev1.ClaimBound, nil
		}, "claim "+name+" to be Bound")
		return volume
	}

	names := []string{"job-a", "job-b", "job-c", "job-d"}
	first := map[string]string{}
	for _, n := range names {
		create(n)
	}
	for _, n := range names {
		first[n] = boundTo(n)
	}
	deleteAndWaitReserved(t, claims, first, names)

	again := []string{"job-d", "job-b", "job-a", "job-c"}
	for _, n := range again {
		create(n)
	}
	for _, n := range again {
		if got := boundTo(n); got != first[n] {
			t.Errorf("claim %s got volume %s, not its own %s", n, got, first[n])
		}
	}

	// Every member reserved again: a claim of a new name takes one of them
	// (the oldest reservation) rather than grow the pool.
	deleteAndWaitReserved(t, claims, first, again)
	create("job-e")
	if got := boundTo("job-e"); got != first[again[0]] {
		t.Errorf("claim job-e got volume %s, want %s, the oldest reservation", got, first[again[0]])
	}
	pvs, err := client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, pv := range pvs.Items {
		if pv.Spec.StorageClassName == class.Name {
			n++
		}
	}
	if n != len(names) {
		t.Errorf("the class has %d volumes, want %d: the pool grew", n, len(names))
	}
	inv.Check(t, 10*time.Second)
}

// deleteAndWaitReserved deletes the claims names in that order, one after
// the other, and waits until each one's volume (in volumes) is reserved for
// it and the claim is gone.
func deleteAndWaitReserved(t *testing.T, claims typedcorev1.PersistentVolumeClaimInterface, volumes map[string]string, names []string) {
	t.Helper()
	ctx := context.Background()
	for _, n := range names {
		if err := claims.Delete(ctx, n, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		framework.Eventually(t, 30*time.Second, func(ctx context.Context) (bool, error) {
			pv, err := framework.Client().CoreV1().PersistentVolumes().Get(ctx, volumes[n], metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			ref := pv.Spec.ClaimRef
			return ref != nil && ref.UID == "" && ref.Name == n && pv.Annotations[keys.ReservedUntil] != "", nil
		}, fmt.Sprintf("volume %s to be reserved for %s", volumes[n], n))
		framework.Eventually(t, 30*time.Second, func(ctx context.Context) (bool, error) {
			_, err := claims.Get(ctx, n, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		}, "claim "+n+" to be gone")
	}
}
