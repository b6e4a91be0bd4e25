// Command demo shows, on a local control plane, what reclaimable builds on:
// a Retain volume bound to a claim, Released when the claim goes, and made
// Available again for the next claim once its claimRef is cleared.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/reclaimable/reclaimable/e2e/cluster"
)

func main() {
	keep := flag.Bool("keep", false, "leave the control plane running and print how to reach it")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		os.Exit(1)
	}
}

// timeline prints each step with the time since the previous one.
type timeline struct{ start, last time.Time }

func (t *timeline) step(format string, args ...any) {
	now := time.Now()
	fmt.Printf("  %7s  +%-7s  %s\n", now.Sub(t.start).Round(time.Millisecond), now.Sub(t.last).Round(time.Millisecond), fmt.Sprintf(format, args...))
	t.last = now
}

func run(ctx context.Context, keep bool) error {
	dir, err := os.MkdirTemp("", "reclaimable-demo-")
	if err != nil {
		return err
	}
	fmt.Println("Starting a local control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok)...")
	c, err := cluster.Start(ctx, cluster.Options{Dir: filepath.Join(dir, "cluster"), Detach: keep, Log: os.Stdout})
	if err != nil {
		return err
	}
	if keep {
		defer fmt.Printf("\nThe control plane keeps running. Explore it with:\n  export KUBECONFIG=%s\n  export PATH=%s:$PATH\n  kubectl get pv,pvc -A\nStop it with:\n  go run ./e2e/cmd/localcluster down --dir %s\n", c.Kubeconfig, c.BinDir, filepath.Join(dir, "cluster"))
	} else {
		defer func() { c.Stop(); _ = os.RemoveAll(dir) }()
	}
	client := c.Client

	class, ns := "demo-retain", "default"
	retain := corev1.PersistentVolumeReclaimRetain
	immediate := storagev1.VolumeBindingImmediate
	if _, err := client.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: class}, Provisioner: "kubernetes.io/no-provisioner",
		ReclaimPolicy: &retain, VolumeBindingMode: &immediate,
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := client.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "cache-volume"},
		Spec: corev1.PersistentVolumeSpec{
			StorageClassName: class, PersistentVolumeReclaimPolicy: retain,
			AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/cache/demo"}},
		},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}

	fmt.Println("\nTimeline (total, since previous step):")
	tl := &timeline{start: time.Now(), last: time.Now()}
	tl.step("volume cache-volume created by hand (reclaimPolicy Retain)")
	for i, name := range []string{"first-consumer", "second-consumer"} {
		if _, err := client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PersistentVolumeClaimSpec{
				StorageClassName: &class,
				AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			},
		}, metav1.CreateOptions{}); err != nil {
			return err
		}
		tl.step("claim %s created", name)
		if err := waitPhase(ctx, client, corev1.VolumeBound); err != nil {
			return err
		}
		tl.step("volume Bound to %s", name)
		if i == 1 {
			break
		}
		if err := client.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			return err
		}
		tl.step("claim %s deleted", name)
		if err := waitPhase(ctx, client, corev1.VolumeReleased); err != nil {
			return err
		}
		tl.step("volume Released: no claim can bind it until its claimRef is cleared")
		pv, err := client.CoreV1().PersistentVolumes().Get(ctx, "cache-volume", metav1.GetOptions{})
		if err != nil {
			return err
		}
		pv.Spec.ClaimRef = nil
		if _, err := client.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{}); err != nil {
			return err
		}
		tl.step("claimRef cleared (the releaser's job), data left in place")
		if err := waitPhase(ctx, client, corev1.VolumeAvailable); err != nil {
			return err
		}
		tl.step("volume Available again")
	}
	fmt.Println("\nThe same volume, and the data on it, served two consumers one after the other.")
	return nil
}

func waitPhase(ctx context.Context, client kubernetes.Interface, want corev1.PersistentVolumePhase) error {
	return wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pv, err := client.CoreV1().PersistentVolumes().Get(ctx, "cache-volume", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return pv.Status.Phase == want, nil
	})
}
