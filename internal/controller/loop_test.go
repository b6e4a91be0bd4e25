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
		Ref:   func(pv *corev1.PersistentVolume) (string, bool) { return pv.Name, true },
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

// A loop queues the keys other objects' events map to, each after Delay,
// and Handle tells the objects of the initial list from later ones.
func TestWatchMappedQueuesTheKeysOfOtherObjects(t *testing.T) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "before"}}
	client := fake.NewClientset(ns)
	factory := informers.NewSharedInformerFactory(client, 0)
	namespaces := factory.Core().V1().Namespaces().Informer()
	var mu sync.Mutex
	synced := map[string]time.Time{}
	initial := map[string]bool{}
	loop := &Loop[*corev1.PersistentVolume, string]{
		Name:  "test",
		Delay: 100 * time.Millisecond,
		Sync: func(_ context.Context, key string) error {
			mu.Lock()
			defer mu.Unlock()
			synced[key] = time.Now()
			return nil
		},
	}
	err := WatchMapped(loop, namespaces, func(e Event[*corev1.Namespace]) []string {
		mu.Lock()
		defer mu.Unlock()
		if e.Type == Added {
			initial[e.Obj.Name] = e.Initial
		}
		return []string{"pv-of-" + e.Obj.Name}
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory.Start(ctx.Done())
	go loop.Run(ctx)
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return !synced["pv-of-before"].IsZero() }, "the initial namespace's volume synced")

	created := time.Now()
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "after"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return !synced["pv-of-after"].IsZero() }, "the new namespace's volume synced")
	mu.Lock()
	defer mu.Unlock()
	if waited := synced["pv-of-after"].Sub(created); waited < loop.Delay {
		t.Errorf("the key was synced %s after the event, before the loop's delay of %s", waited, loop.Delay)
	}
	if !initial["before"] || initial["after"] {
		t.Errorf("initial additions: %v; want before only", initial)
	}
}
