package provisioner

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	lib "sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/reclaimable/reclaimable/internal/wellknown"
)

func TestDelete(t *testing.T) {
	created := func(policy corev1.PersistentVolumeReclaimPolicy, mods ...func(*corev1.PersistentVolume)) *corev1.PersistentVolume {
		return volume("pvc-1", "1Gi", append([]func(*corev1.PersistentVolume){func(pv *corev1.PersistentVolume) {
			pv.Spec.PersistentVolumeReclaimPolicy = policy
			pv.Annotations[wellknown.Backend] = "directory"
			pv.Annotations[wellknown.Directory] = "pvc-1"
			pv.Spec.HostPath = &corev1.HostPathVolumeSource{Path: "/mnt/pool/pvc-1"}
		}}, mods...)...)
	}
	tests := []struct {
		name        string
		pv          *corev1.PersistentVolume
		wantIgnored bool
		wantErr     bool
		wantGone    bool
	}{
		{"created here with Delete", created(corev1.PersistentVolumeReclaimDelete), false, false, true},
		{"Retain", created(corev1.PersistentVolumeReclaimRetain), true, false, false},
		{"another provisioner's", created(corev1.PersistentVolumeReclaimDelete, func(pv *corev1.PersistentVolume) {
			pv.Annotations[wellknown.ProvisionedBy] = "other/x"
		}), true, false, false},
		{"not made by the directory backend", created(corev1.PersistentVolumeReclaimDelete, func(pv *corev1.PersistentVolume) {
			delete(pv.Annotations, wellknown.Backend)
		}), true, false, false},
		{"directory annotation naming another volume", created(corev1.PersistentVolumeReclaimDelete, func(pv *corev1.PersistentVolume) {
			pv.Annotations[wellknown.Directory] = "pvc-2"
		}), false, true, false},
		{"source pointing elsewhere", created(corev1.PersistentVolumeReclaimDelete, func(pv *corev1.PersistentVolume) {
			pv.Spec.HostPath.Path = "/mnt/pool/pvc-2"
		}), false, true, false},
		{"base directory outside the root", created(corev1.PersistentVolumeReclaimDelete, func(pv *corev1.PersistentVolume) {
			pv.Annotations[wellknown.BaseDir] = "/"
		}), false, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, nil)
			if tt.pv.Annotations[wellknown.BaseDir] == "" {
				tt.pv.Annotations[wellknown.BaseDir] = f.root
			}
			for _, d := range []string{"pvc-1", "pvc-2"} {
				if err := os.MkdirAll(filepath.Join(f.root, d, "sub"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			err := f.p.Delete(context.Background(), tt.pv)
			var ignored *lib.IgnoredError
			if got := errors.As(err, &ignored); got != tt.wantIgnored {
				t.Errorf("Delete = %v, want ignored %v", err, tt.wantIgnored)
			}
			if got := err != nil && !errors.As(err, &ignored); got != tt.wantErr {
				t.Errorf("Delete = %v, want error %v", err, tt.wantErr)
			}
			_, statErr := os.Stat(filepath.Join(f.root, "pvc-1"))
			if gone := statErr != nil; gone != tt.wantGone {
				t.Errorf("directory gone = %v, want %v", gone, tt.wantGone)
			}
			if _, err := os.Stat(filepath.Join(f.root, "pvc-2", "sub")); err != nil {
				t.Errorf("another volume's data was touched: %v", err)
			}
		})
	}
}
