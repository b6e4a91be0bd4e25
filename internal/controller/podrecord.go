package controller

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// PodRecord is what the cache of KeptPods holds of a pod: its metadata
// (trimmed as trim does) and the few fields of its spec and status the
// podwatcher reads. A corev1.Pod weighs some 1.1 KiB before any of its
// maps and strings, nearly all of it the empty structs of a spec and a
// status trimmed away; a PodRecord a third of that. Controllers read it as
// a *corev1.Pod through AsPod and PodRecordLister, which build one that
// shares the record's maps: read-only, as every cached object.
type PodRecord struct {
	metav1.ObjectMeta
	Volumes         []RecordVolume
	SchedulingGates []corev1.PodSchedulingGate
	Phase           corev1.PodPhase
}

// RecordVolume is a volume trim keeps (claimVolumes): its name, and its
// claim's name if it is a persistentVolumeClaim volume. A corev1.Volume
// is some 250 bytes of pointers to the sources it might have.
type RecordVolume struct{ Name, ClaimName string }

var _ metav1.Object = &PodRecord{}

// GetObjectKind is that of a Pod: the record stands for one.
func (r *PodRecord) GetObjectKind() schema.ObjectKind {
	return &metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
}

// DeepCopyObject copies the record whole.
func (r *PodRecord) DeepCopyObject() runtime.Object {
	return recordOf(r.Pod().DeepCopy())
}

// Pod is the pod the record keeps, as a *corev1.Pod sharing its maps.
func (r *PodRecord) Pod() *corev1.Pod {
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: r.ObjectMeta,
		Spec:       corev1.PodSpec{Volumes: r.volumes(), SchedulingGates: r.SchedulingGates},
		Status:     corev1.PodStatus{Phase: r.Phase},
	}
}

func (r *PodRecord) volumes() []corev1.Volume {
	if len(r.Volumes) == 0 {
		return nil
	}
	out := make([]corev1.Volume, len(r.Volumes))
	for i, v := range r.Volumes {
		out[i].Name = v.Name
		if v.ClaimName != "" {
			out[i].PersistentVolumeClaim = &corev1.PersistentVolumeClaimVolumeSource{ClaimName: v.ClaimName}
		}
	}
	return out
}

// recordOf keeps of a trimmed pod what a PodRecord holds.
func recordOf(pod *corev1.Pod) *PodRecord {
	return &PodRecord{ObjectMeta: pod.ObjectMeta, Volumes: RecordVolumes(pod.Spec.Volumes), SchedulingGates: pod.Spec.SchedulingGates, Phase: pod.Status.Phase}
}

// trimToRecord is the transform of KeptPods: trim, then a record. It
// passes a record through, should it see one again.
func trimToRecord(obj any) (any, error) {
	if pod, ok := obj.(*corev1.Pod); ok {
		if _, err := trim(pod); err != nil {
			return nil, err
		}
		return recordOf(pod), nil
	}
	return trim(obj)
}

// PodRecordOf is the record KeptPods would cache of pod (pod is left as
// it is): a test's way to fill a cache as the informer does.
func PodRecordOf(pod *corev1.Pod) *PodRecord {
	rec, _ := trimToRecord(pod.DeepCopy())
	return rec.(*PodRecord)
}

// AsPod is obj as a pod, whether a cache holds it as a record or whole,
// unwrapping a deletion's tombstone.
func AsPod(obj any) (*corev1.Pod, bool) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	switch o := obj.(type) {
	case *PodRecord:
		return o.Pod(), true
	case *corev1.Pod:
		return o, true
	}
	return nil, false
}

// AsPodRecord is obj as the record a cache of KeptPods holds, unwrapping a
// deletion's tombstone. Indexes and event handlers, which run for every
// event of every kept pod, read it rather than AsPod: building a Pod costs
// several allocations of a kilobyte or more each time, garbage by the next
// event. A whole Pod (a test's fixture) is made into a record.
func AsPodRecord(obj any) (*PodRecord, bool) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	switch o := obj.(type) {
	case *PodRecord:
		return o, true
	case *corev1.Pod:
		return recordOf(o), true
	}
	return nil, false
}

// RecordVolumes are volumes as a PodRecord keeps them.
func RecordVolumes(volumes []corev1.Volume) []RecordVolume {
	var out []RecordVolume
	for _, v := range volumes {
		rv := RecordVolume{Name: v.Name}
		if v.PersistentVolumeClaim != nil {
			rv.ClaimName = v.PersistentVolumeClaim.ClaimName
		}
		out = append(out, rv)
	}
	return out
}

// PodRecordLister lists the pods of an indexer that holds PodRecords (or
// Pods) as Pods.
func PodRecordLister(indexer cache.Indexer) corelisters.PodLister { return podRecords{indexer, ""} }

type podRecords struct {
	indexer   cache.Indexer
	namespace string
}

func (l podRecords) List(selector labels.Selector) (ret []*corev1.Pod, err error) {
	each := func(obj any) {
		if pod, ok := AsPod(obj); ok && selector.Matches(labels.Set(pod.Labels)) {
			ret = append(ret, pod)
		}
	}
	if l.namespace == "" {
		for _, obj := range l.indexer.List() {
			each(obj)
		}
		return ret, nil
	}
	for _, key := range l.indexer.ListKeys() {
		if ns, _, _ := cache.SplitMetaNamespaceKey(key); ns == l.namespace {
			if obj, ok, _ := l.indexer.GetByKey(key); ok {
				each(obj)
			}
		}
	}
	return ret, nil
}

func (l podRecords) Pods(namespace string) corelisters.PodNamespaceLister {
	return podRecords{l.indexer, namespace}
}

func (l podRecords) Get(name string) (*corev1.Pod, error) {
	obj, ok, err := l.indexer.GetByKey(cache.ObjectName{Namespace: l.namespace, Name: name}.String())
	if err != nil {
		return nil, err
	}
	pod, isPod := AsPod(obj)
	if !ok || !isPod {
		return nil, errors.NewNotFound(corev1.Resource("pods"), name)
	}
	return pod, nil
}
