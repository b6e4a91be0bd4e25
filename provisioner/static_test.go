package provisioner

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/reclaimable/reclaimable/internal/wellknown"
)

func TestProvisionStaticPool(t *testing.T) {
	static := func(name string, mods ...func(*corev1.PersistentVolume)) *corev1.PersistentVolume {
		return volume(name, "1Gi", append([]func(*corev1.PersistentVolume){func(pv *corev1.PersistentVolume) {
			pv.Annotations = map[string]string{}
			pv.Labels = map[string]string{wellknown.Pool: "pool"}
		}}, mods...)...)
	}
	claim := claimFor("ns", "c", "1Gi")
	f := newFixture(t, []*corev1.PersistentVolume{
		static("busy", bound("ns", "x", "ux")),
		volume("unlabelled", "1Gi"),
	}, claim)
	class := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "pool"}, Parameters: map[string]string{"backend": "static"}}

	_, _, err := f.provision(class, claim)
	if err == nil || !strings.Contains(err.Error(), "pool exhausted") {
		t.Fatalf("Provision = %v, want the pool exhausted", err)
	}
	if ev := f.events(); !hasEvent(ev, "Warning PoolExhausted the static pool of class pool has no free volume that fits: 1 volumes, 1 in use") ||
		!strings.Contains(ev[0], wellknown.Pool+"=pool") {
		t.Errorf("events = %v", ev)
	}
	if f.server("unlabelled").Spec.ClaimRef != nil {
		t.Error("a volume outside the static pool was taken")
	}

	// An administrator labels a free volume into the pool.
	joined := static("joined")
	f.p.onVolume(volume("joined", "1Gi"), joined)
	if len(f.requeued) != 1 {
		t.Errorf("requeued = %v, want the waiting claim", f.requeued)
	}
	if _, err := f.client.CoreV1().PersistentVolumes().Create(context.Background(), joined, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.volumes.Add(joined)
	_, _, err = f.provision(class, claim)
	wantIssued(t, err, "joined")
	if f.server("joined").Annotations[wellknown.ProvisionedBy] != "" {
		t.Error("a static volume was marked as created by the provisioner")
	}
}
