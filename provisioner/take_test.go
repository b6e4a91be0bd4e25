package provisioner

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/reclaimable/reclaimable/internal/controller"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// UpdateVolume, the write the evictor and the scrubber make through the
// provisioner, is guarded by the resourceVersion the cache showed: a volume
// changed meanwhile is a wait, which the queue retries with back-off (a
// newer version may differ only where no event queues it again); a volume
// gone needs nothing.
func TestUpdateVolume(t *testing.T) {
	marked := volume("a", "1Gi", func(pv *corev1.PersistentVolume) { pv.Annotations[wellknown.Scrub] = wellknown.ScrubRequested })
	f := newFixture(t, []*corev1.PersistentVolume{marked})
	newer := marked.DeepCopy()
	newer.Annotations["example.com/note"] = "changed"
	newer.ResourceVersion = "2"
	if err := f.client.Tracker().Update(corev1.SchemeGroupVersion.WithResource("persistentvolumes"), newer, ""); err != nil {
		t.Fatal(err)
	}
	running := marked.DeepCopy()
	running.Annotations[wellknown.Scrub] = wellknown.ScrubRunning

	if res, err := f.p.UpdateVolume(context.Background(), running, "marking"); res != nil || !controller.IsWait(err) {
		t.Fatalf("UpdateVolume from a stale version = %v, %v; want a wait the queue retries with back-off", res, err)
	}
	running.ResourceVersion = "2"
	res, err := f.p.UpdateVolume(context.Background(), running, "marking")
	if err != nil || res == nil || res.Annotations[wellknown.Scrub] != wellknown.ScrubRunning || f.server("a").Annotations[wellknown.Scrub] != wellknown.ScrubRunning {
		t.Fatalf("UpdateVolume from the newer version = %v, %v; want it stored", res, err)
	}
	if err := f.client.CoreV1().PersistentVolumes().Delete(context.Background(), "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if res, err := f.p.UpdateVolume(context.Background(), res, "marking"); res != nil || err != nil {
		t.Errorf("UpdateVolume of a volume gone = %v, %v; want nil, nil", res, err)
	}
}
