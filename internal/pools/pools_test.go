package pools

import (
	"testing"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/reclaimable/reclaimable/apis/reclaimable/v1alpha1"
)

func TestEffectiveClass(t *testing.T) {
	class := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "c"}, Parameters: map[string]string{"backend": "directory", "maxVolumes": "5", "reserveFor": "1h"}}
	for _, tt := range []struct {
		name string
		spec *v1alpha1.VolumePoolSpec
		want map[string]string
	}{
		{"no pool", nil, class.Parameters},
		{"a pool that sets nothing", &v1alpha1.VolumePoolSpec{StorageClassName: "c"}, class.Parameters},
		{"every setting", &v1alpha1.VolumePoolSpec{StorageClassName: "c", MaxVolumes: ptr.To[int32](80), MaxVolumesPerNode: ptr.To[int32](3), MaxVolumesPerNamespace: ptr.To[int32](4),
			ReserveFor: &metav1.Duration{Duration: 10 * time.Minute}, ReuseScope: "namespace"},
			map[string]string{"backend": "directory", "maxVolumes": "80", "maxVolumesPerNode": "3", "maxVolumesPerNamespace": "4", "reserveFor": "10m0s", "reuseScope": "namespace"}},
		{"no reservation", &v1alpha1.VolumePoolSpec{StorageClassName: "c", ReserveFor: &metav1.Duration{}},
			map[string]string{"backend": "directory", "maxVolumes": "5", "reserveFor": "0s"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var pool *v1alpha1.VolumePool
			if tt.spec != nil {
				pool = &v1alpha1.VolumePool{Spec: *tt.spec}
			}
			got := EffectiveClass(class, pool)
			if len(got.Parameters) != len(tt.want) {
				t.Fatalf("parameters %v, want %v", got.Parameters, tt.want)
			}
			for k, v := range tt.want {
				if got.Parameters[k] != v {
					t.Errorf("parameters %v, want %v", got.Parameters, tt.want)
				}
			}
			if class.Parameters["maxVolumes"] != "5" {
				t.Fatal("the class itself was changed")
			}
		})
	}
}

// The oldest pool of a class counts, then the first by name; pools of other
// classes do not.
func TestPoolOf(t *testing.T) {
	at := func(name, class string, minute int) *v1alpha1.VolumePool {
		return &v1alpha1.VolumePool{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(time.Date(2026, 1, 1, 0, minute, 0, 0, time.UTC))},
			Spec: v1alpha1.VolumePoolSpec{StorageClassName: class}}
	}
	pools := NoPools()
	for _, p := range []*v1alpha1.VolumePool{at("late", "c", 5), at("b-early", "c", 1), at("a-early", "c", 1), at("other", "d", 0)} {
		if err := pools.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	if got := PoolOf(pools, "c"); got == nil || got.Name != "a-early" {
		t.Errorf("PoolOf(c) = %v, want a-early", got)
	}
	if got := PoolOf(pools, "none"); got != nil {
		t.Errorf("PoolOf(none) = %v, want nil", got.Name)
	}
}
