package controller

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// claimsOf indexes a pod by the claims it mounts.
func claimsOf(obj any) []string {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil
	}
	var out []string
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			out = append(out, v.PersistentVolumeClaim.ClaimName)
		}
	}
	return out
}

func mounting(name string, claims ...string) *corev1.Pod {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
	for _, c := range claims {
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: c, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c}}})
	}
	return pod
}

func names(ns ...string) []cache.ObjectName {
	var out []cache.ObjectName
	for _, n := range ns {
		out = append(out, cache.ObjectName{Namespace: "ns", Name: n})
	}
	return out
}

func TestRefsFollowAddsUpdatesAndDeletes(t *testing.T) {
	r := NewRefs(claimsOf)
	want := func(step, claim string, pods ...string) {
		t.Helper()
		got := r.Get(claim)
		slices.SortFunc(got, func(a, b cache.ObjectName) int { return cmpName(a, b) })
		if !slices.Equal(got, names(pods...)) {
			t.Errorf("%s: pods mounting %s = %v, want %v", step, claim, got, pods)
		}
	}
	a := mounting("a", "one", "shared")
	r.update(nil, a)
	want("a added", "one", "a")
	want("a added", "shared", "a")
	want("a added", "none")

	b := mounting("b", "shared")
	r.update(nil, b)
	r.update(b, b) // a resync changes nothing
	want("b added", "shared", "a", "b")
	if len(r.more) != 1 || len(r.one) != 1 {
		t.Errorf("one value shared by two is in the list form alone: one %v, more %v", r.one, r.more)
	}

	a2 := mounting("a", "two", "shared")
	r.update(a, a2)
	want("a now mounts two", "one")
	want("a now mounts two", "two", "a")
	want("a now mounts two", "shared", "a", "b")

	r.update(b, nil)
	want("b deleted", "shared", "a")
	if _, ok := r.more["shared"]; ok {
		t.Error("a value back to one object is kept as a list")
	}
	r.update(a2, nil)
	want("a deleted", "shared")
	want("a deleted", "two")
	if len(r.one)+len(r.more) != 0 || len(r.Values()) != 0 {
		t.Errorf("left after every object is deleted: one %v, more %v", r.one, r.more)
	}
	r.update(nil, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "other"}})
	if len(r.Values()) != 0 {
		t.Error("an object valuesOf does not index was indexed")
	}
}

func cmpName(a, b cache.ObjectName) int {
	if a.String() < b.String() {
		return -1
	}
	if a.String() > b.String() {
		return 1
	}
	return 0
}

func TestRefsForgetTombstones(t *testing.T) {
	inf := cache.NewSharedIndexInformer(&cache.ListWatch{}, &corev1.Pod{}, 0, cache.Indexers{})
	r, err := RefsOf(inf, claimsOf)
	if err != nil {
		t.Fatal(err)
	}
	if r.HasSynced() {
		t.Error("synced before the informer ran")
	}
	r.update(nil, mounting("a", "one"))
	// A delete the informer missed comes as a tombstone with the last state.
	r.OnDelete(cache.DeletedFinalStateUnknown{Key: "ns/a", Obj: mounting("a", "one")})
	if got := r.Get("one"); len(got) != 0 {
		t.Fatalf("a tombstone's object is still indexed: %v", got)
	}
}

// then sees each object added or updated once Refs shows it, and nothing
// of a delete.
func TestRefsThenSeesWhatRefsShows(t *testing.T) {
	r := NewRefs(claimsOf)
	var seen []string
	r.then = func(obj any) {
		pod := obj.(*corev1.Pod)
		for _, c := range claimsOf(pod) {
			if !slices.Contains(r.Get(c), cache.ObjectName{Namespace: "ns", Name: pod.Name}) {
				t.Errorf("then saw %s before Refs showed it mounting %s", pod.Name, c)
			}
		}
		seen = append(seen, pod.Name)
	}
	a := mounting("a", "one")
	r.OnAdd(a, false)
	a2 := mounting("a", "two")
	r.OnUpdate(a, a2)
	r.OnDelete(a2)
	if !slices.Equal(seen, []string{"a", "a"}) {
		t.Errorf("then saw %v, want the add and the update of a", seen)
	}
}
