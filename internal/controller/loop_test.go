package controller

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
)

func TestObjectUnwrapsTombstones(t *testing.T) {
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "a"}}
	for _, obj := range []any{pv, cache.DeletedFinalStateUnknown{Key: "a", Obj: pv}} {
		if got, ok := Object[*corev1.PersistentVolume](obj); !ok || got != pv {
			t.Errorf("Object(%T) = %v, %v; want the volume", obj, got, ok)
		}
	}
	if _, ok := Object[*corev1.PersistentVolume](&corev1.Node{}); ok {
		t.Error("Object took a node for a volume")
	}
}

// A loop syncs the objects Wants, hears of deletions, and sweeps again.
func TestLoopSyncsWhatItWants(t *testing.T) {
	client := fake.NewClientset()
	factory := informers.NewSharedInformerFactory(client, 0)
	volumes := factory.Core().V1().PersistentVolumes().Informer()
	var mu sync.Mutex
	synced, gone := map[string]int{}, map[string]bool{}
	loop := &Loop[*corev1.PersistentVolume, string]{
		Name:  "test",
		Key:   func(pv *corev1.PersistentVolume) (string, bool) { return pv.Name, true },
		Wants: func(_, cur *corev1.PersistentVolume) bool { return cur.Labels["wanted"] == "yes" },
		Gone: func(pv *corev1.PersistentVolume) {
			mu.Lock()
			defer mu.Unlock()
			gone[pv.Name] = true
		},
		Sync: func(_ context.Context, name string) error {
			mu.Lock()
			defer mu.Unlock()
			synced[name]++
			return nil
		},
		Sweep: 50 * time.Millisecond,
		List: func() []*corev1.PersistentVolume {
			var out []*corev1.PersistentVolume
			for _, o := range volumes.GetIndexer().List() {
				out = append(out, o.(*corev1.PersistentVolume))
			}
			return out
		},
	}
	if err := loop.Watch(volumes); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory.Start(ctx.Done())
	go loop.Run(ctx)

	for _, name := range []string{"wanted", "unwanted"} {
		labels := map[string]string{"wanted": "no"}
		if name == "wanted" {
			labels["wanted"] = "yes"
		}
		if _, err := client.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Synced on its addition, then again by a sweep.
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return synced["wanted"] >= 2 }, "the wanted volume synced twice")
	if err := client.CoreV1().PersistentVolumes().Delete(ctx, "wanted", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return gone["wanted"] }, "the deletion heard")
	mu.Lock()
	defer mu.Unlock()
	if synced["unwanted"] != 0 {
		t.Errorf("the unwanted volume was synced %d times", synced["unwanted"])
	}
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen within 10s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
