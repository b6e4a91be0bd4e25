package controller

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/reclaimable/reclaimable/internal/wellknown"
)

func keptPod(name string, kept bool) *corev1.Pod {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: k8stypes.UID("uid-" + name)}}
	if kept {
		pod.Annotations = map[string]string{"keep": "yes"}
	}
	return pod
}

func keepAnnotated(pod *corev1.Pod) bool { return pod.Annotations["keep"] == "yes" }

func cachedNames(inf cache.SharedIndexInformer) []string {
	names := inf.GetStore().ListKeys()
	slices.Sort(names)
	return names
}

// waitCached waits until the cache holds exactly want.
func waitCached(t *testing.T, inf cache.SharedIndexInformer, want ...string) {
	t.Helper()
	slices.Sort(want)
	err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return slices.Equal(cachedNames(inf), want), nil
	})
	if err != nil {
		t.Fatalf("cache holds %v, want %v", cachedNames(inf), want)
	}
}

// Pods that are not kept never reach the cache; a pod kept once stays until
// deleted, even when it no longer would be kept.
func TestKeptPodsCachesOnlyThePodsKept(t *testing.T) {
	client := fake.NewClientset(keptPod("plain", false), keptPod("asks", true))
	inf := NewKeptPodsInformer(client, "", keepAnnotated)
	// Its readers index it as they need.
	if err := inf.AddIndexers(cache.Indexers{"by-name": func(obj any) ([]string, error) { return []string{obj.(*PodRecord).Name}, nil }}); err != nil {
		t.Fatal(err)
	}
	go inf.RunWithContext(t.Context())
	if !cache.WaitForCacheSync(t.Context().Done(), inf.HasSynced) {
		t.Fatal("not synced")
	}
	if got := cachedNames(inf); !slices.Equal(got, []string{"ns/asks"}) {
		t.Fatalf("after the list the cache holds %v, want the kept pod alone", got)
	}
	pods := client.CoreV1().Pods("ns")
	ctx := t.Context()
	// The watch delivers in order: once the kept pod is cached, the plain
	// one created before it has been seen, and dropped.
	if _, err := pods.Create(ctx, keptPod("plain-2", false), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pods.Create(ctx, keptPod("asks-2", true), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitCached(t, inf, "ns/asks", "ns/asks-2")

	// A plain pod that comes to ask is cached; a kept pod that stops
	// asking stays, with its new state.
	if _, err := pods.Update(ctx, keptPod("plain", true), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	stopped := keptPod("asks", false)
	stopped.Annotations = map[string]string{wellknown.Domain + "/changed": "yes"}
	if _, err := pods.Update(ctx, stopped, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitCached(t, inf, "ns/asks", "ns/asks-2", "ns/plain")
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		obj, ok, err := inf.GetStore().GetByKey("ns/asks")
		return ok && err == nil && obj.(*PodRecord).Annotations[wellknown.Domain+"/changed"] == "yes", err
	})
	if err != nil {
		t.Fatalf("the pod that stopped asking was not updated in the cache: %v", err)
	}

	for _, name := range []string{"plain-2", "asks"} {
		if err := pods.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitCached(t, inf, "ns/asks-2", "ns/plain")
}

// The list goes page by page, each page filtered, and the result carries
// the first page's resourceVersion, from which the watch starts.
func TestKeptPodsListsPageByPage(t *testing.T) {
	all := []*corev1.Pod{keptPod("a", true), keptPod("b", false), keptPod("c", false), keptPod("d", true), keptPod("e", false)}
	client := fake.NewClientset()
	var asked []metav1.ListOptions
	client.PrependReactor("list", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		opts := action.(k8stesting.ListActionImpl).ListOptions
		asked = append(asked, opts)
		// Two pods a page, whatever the limit.
		from := 0
		if opts.Continue != "" {
			from, _ = strconv.Atoi(opts.Continue)
		}
		page := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: fmt.Sprint(100 + from)}}
		for _, p := range all[from:min(from+2, len(all))] {
			page.Items = append(page.Items, *p)
		}
		if from+2 < len(all) {
			page.Continue = strconv.Itoa(from + 2)
		}
		return true, page, nil
	})
	k := keptPods(client, "", keepAnnotated)
	obj, err := k.listKept(t.Context(), metav1.ListOptions{ResourceVersion: "0", Limit: 7})
	if err != nil {
		t.Fatal(err)
	}
	list := obj.(*corev1.PodList)
	var names []string
	for _, p := range list.Items {
		names = append(names, p.Name)
	}
	if !slices.Equal(names, []string{"a", "d"}) || list.ResourceVersion != "100" || list.Continue != "" {
		t.Errorf("list = %v at resourceVersion %q (continue %q), want a and d at 100", names, list.ResourceVersion, list.Continue)
	}
	if len(asked) != 3 || asked[0].Limit != listPage || asked[0].ResourceVersion != "" || asked[2].Continue != "4" {
		t.Errorf("requests %+v, want three pages of %d from the latest resourceVersion", asked, listPage)
	}
	if !k.kept.Has("ns/a") || !k.kept.Has("ns/d") || k.kept.Len() != 2 {
		t.Errorf("kept = %v", k.kept)
	}
}

// A claim is cached while it waits for a volume, and leaves the cache, as
// if deleted, once it has one.
func TestWaitingClaimsDropsBoundClaims(t *testing.T) {
	claim := func(name, volume string) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Spec: corev1.PersistentVolumeClaimSpec{VolumeName: volume}}
	}
	client := fake.NewClientset(claim("waits", ""), claim("bound", "pv-1"))
	inf := NewWaitingClaimsInformer(client)
	var mu sync.Mutex
	var deleted []string
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) {
		mu.Lock()
		defer mu.Unlock()
		deleted = append(deleted, obj.(*corev1.PersistentVolumeClaim).Name)
	}}); err != nil {
		t.Fatal(err)
	}
	go inf.RunWithContext(t.Context())
	if !cache.WaitForCacheSync(t.Context().Done(), inf.HasSynced) {
		t.Fatal("not synced")
	}
	waitCached(t, inf, "ns/waits")
	claims := client.CoreV1().PersistentVolumeClaims("ns")
	if _, err := claims.Create(t.Context(), claim("new", ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := claims.Update(t.Context(), claim("waits", "pv-2"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitCached(t, inf, "ns/new")
	err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return slices.Equal(deleted, []string{"waits"}), nil
	})
	if err != nil {
		mu.Lock()
		defer mu.Unlock()
		t.Errorf("delete events for %v, want the claim that got its volume", deleted)
	}
}

// A streamed list (a watch's initial events) rebuilds what is kept, as a
// list does: a sticky pod deleted while the watch was down is forgotten.
func TestKeptPodsStreamedListRebuildsWhatIsKept(t *testing.T) {
	k := keptPods(fake.NewClientset(), "", keepAnnotated)
	k.kept.Insert("ns/gone", "ns/stays")
	w := watch.NewFake()
	k.watch = func(context.Context, metav1.ListOptions) (watch.Interface, error) { return w, nil }
	filtered, err := k.watchKept(t.Context(), metav1.ListOptions{SendInitialEvents: ptr.To(true)})
	if err != nil {
		t.Fatal(err)
	}
	defer filtered.Stop()
	go func() {
		w.Add(keptPod("stays", false)) // kept before: sticky
		w.Add(keptPod("plain", false))
		w.Add(keptPod("asks", true))
		w.Action(watch.Bookmark, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}})
	}()
	var got []string
	for ev := range filtered.ResultChan() {
		if ev.Type == watch.Bookmark {
			break
		}
		got = append(got, ev.Object.(*corev1.Pod).Name)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if !slices.Equal(got, []string{"stays", "asks"}) || !k.kept.Equal(sets.New("ns/stays", "ns/asks")) {
		t.Errorf("passed on %v and kept %v, want stays and asks, and gone forgotten", got, sets.List(k.kept))
	}
}
