package controller

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"github.com/reclaimable/reclaimable/internal/wellknown"
)

func TestPodRecordKeepsWhatTrimKeeps(t *testing.T) {
	now := metav1.Now()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u", ResourceVersion: "7", DeletionTimestamp: &now,
			Annotations:     map[string]string{wellknown.EnabledKey("cache"): "true", wellknown.EnabledKey("scratch"): "true", "other": "x"},
			OwnerReferences: []metav1.OwnerReference{{Kind: "Job", Name: "j", UID: "ju"}}},
		Spec: corev1.PodSpec{
			Volumes: []corev1.Volume{{Name: "cache", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}},
				// Named by a claim annotation, not a claim: its name is kept.
				{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			SchedulingGates: []corev1.PodSchedulingGate{{Name: wellknown.ClaimsGate}},
			Containers:      []corev1.Container{{Name: "build"}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodFailed, Message: "OOMKilled"},
	}
	trimmed, _ := trim(pod.DeepCopy())
	rec := PodRecordOf(pod)
	if pod.Annotations["other"] != "x" {
		t.Fatal("PodRecordOf changed the pod it was given")
	}
	got, ok := AsPod(rec)
	if !ok || !reflect.DeepEqual(got, withKind(trimmed.(*corev1.Pod))) {
		t.Errorf("the record read as a pod = %+v, want the trimmed pod %+v", got, trimmed)
	}
	if again, _ := trimToRecord(rec); again != rec {
		t.Error("a record transformed again is not passed through")
	}
	if m, ok := any(rec).(metav1.Object); !ok || m.GetUID() != "u" || m.GetNamespace() != "ns" {
		t.Error("a record is not read as the pod's metadata")
	}
	cp := rec.DeepCopyObject().(*PodRecord)
	cp.Annotations[wellknown.EnabledKey("cache")] = "false"
	cp.Volumes[0].ClaimName = "changed"
	if rec.Annotations[wellknown.EnabledKey("cache")] != "true" || rec.Volumes[0].ClaimName != "c" {
		t.Error("DeepCopyObject shares what it copies")
	}
	if tomb, ok := AsPod(cache.DeletedFinalStateUnknown{Key: "ns/p", Obj: rec}); !ok || tomb.Name != "p" {
		t.Error("AsPod does not unwrap a tombstone")
	}
	if _, ok := AsPod(&corev1.Service{}); ok {
		t.Error("AsPod takes a Service for a pod")
	}
}

func withKind(p *corev1.Pod) *corev1.Pod {
	p.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
	return p
}

func TestPodRecordLister(t *testing.T) {
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, p := range []*corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "one"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "two"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "one"}},
	} {
		if err := indexer.Add(PodRecordOf(p)); err != nil {
			t.Fatal(err)
		}
	}
	l := PodRecordLister(indexer)
	if got, err := l.Pods("b").Get("one"); err != nil || got.Namespace != "b" {
		t.Errorf("Get b/one = %v, %v", got, err)
	}
	if _, err := l.Pods("b").Get("two"); !apierrors.IsNotFound(err) {
		t.Errorf("Get of a pod not cached: %v, want NotFound", err)
	}
	all, _ := l.List(labels.Everything())
	inA, _ := l.Pods("a").List(labels.Everything())
	if len(all) != 3 || len(inA) != 2 {
		t.Errorf("listed %d pods in all, %d in a; want 3 and 2", len(all), len(inA))
	}
}
