package controller

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// trim keeps out of the shared caches what no controller reads, so that
// memory follows the number of objects, not their size: server-side-apply
// bookkeeping on every object; of Pods and Jobs (the most numerous and
// largest objects cached) everything but their metadata, their claim
// volumes, a Pod's scheduling gates and phase and a Job's conditions, which
// is all the podwatcher reads. Claims are cached whole only while they wait
// for a volume (WaitingClaims), else as metadata (trimToMetadata); volumes
// share their capacity maps. A controller that comes to need more must add
// it here.
func trim(obj any) (any, error) {
	if acc, ok := obj.(metav1.ObjectMetaAccessor); ok {
		acc.GetObjectMeta().SetManagedFields(nil)
	}
	switch o := obj.(type) {
	case *corev1.Pod:
		// Of a pod the podwatcher reads only this project's annotations:
		// its labels and the rest of its annotations (often most of
		// its metadata) go.
		o.Labels, o.Annotations = nil, intern(interned.Annotations, ownAnnotations(o.Annotations))
		o.Spec = corev1.PodSpec{Volumes: claimVolumes(o.Spec.Volumes, o.Annotations), SchedulingGates: o.Spec.SchedulingGates}
		o.Status = corev1.PodStatus{Phase: o.Status.Phase}
	case *batchv1.Job:
		o.Labels, o.Annotations = nil, intern(interned.Annotations, ownAnnotations(o.Annotations))
		o.Spec.Template = corev1.PodTemplateSpec{Spec: corev1.PodSpec{Volumes: claimVolumes(o.Spec.Template.Spec.Volumes, o.Annotations)}}
		o.Status = batchv1.JobStatus{Conditions: o.Status.Conditions}
	case *corev1.PersistentVolume:
		o.Spec.Capacity = internResources(o.Spec.Capacity)
		o.Labels, o.Annotations = intern(interned.Labels, o.Labels), intern(interned.Annotations, o.Annotations)
		o.Finalizers = internFinalizers(o.Finalizers)
	case *corev1.PersistentVolumeClaim:
		// A claim's labels are not shared: the podwatcher's carry the
		// UID of their owner.
		o.Annotations = intern(interned.Annotations, o.Annotations)
		o.Finalizers = internFinalizers(o.Finalizers)
	}
	return obj, nil
}

// interned holds one copy of each set of labels, of annotations and of
// finalizers that the caches hold many times: the volumes of an
// installation carry the same few labels and annotations and the
// pv-protection finalizer, the pods of one template the same claim
// annotations. A map, even of two entries, costs some 300 bytes besides
// its strings. Cached objects are never written in place (a writer copies
// first), so sharing is safe.
var interned = struct {
	Labels, Annotations *interner[map[string]string]
	Finalizers          *interner[[]string]
}{newInterner[map[string]string](), newInterner[map[string]string](), newInterner[[]string]()}

// interner holds one value per key. It holds at most maxInterned; then it
// starts afresh, so that values of a kind seen once (a Job's labels) do
// not keep the ones seen since from being shared. Values already handed
// out stay shared by the objects that have them.
type interner[T any] struct {
	mu sync.Mutex
	m  map[string]T
}

func newInterner[T any]() *interner[T] { return &interner[T]{m: map[string]T{}} }

// share returns the value held for key, or holds v for it.
func (in *interner[T]) share(key string, v T) T {
	in.mu.Lock()
	defer in.mu.Unlock()
	if shared, ok := in.m[key]; ok {
		return shared
	}
	if len(in.m) >= maxInterned {
		clear(in.m)
	}
	in.m[key] = v
	return v
}

// intern shares m with every other map of the same content; an empty map
// becomes nil.
func intern(in *interner[map[string]string], m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	var key strings.Builder
	for _, k := range slices.Sorted(maps.Keys(m)) {
		// Lengths first: no key or value can make two maps one.
		fmt.Fprintf(&key, "%d:%s%d:%s", len(k), k, len(m[k]), m[k])
	}
	return in.share(key.String(), m)
}

func internFinalizers(f []string) []string {
	if len(f) == 0 {
		return f
	}
	return interned.Finalizers.share(strings.Join(f, "\x00"), f)
}

// resourceLists holds one copy of each capacity the caches hold: the
// volumes of a pool come in a few sizes, and the map of a size weighs more
// than the rest of a volume's spec. Cached objects are never
// written in place (a writer copies first), so sharing is safe. Past
// maxInterned sizes, each object keeps its own map.
var resourceLists = struct {
	sync.Mutex
	m map[string]corev1.ResourceList
}{m: map[string]corev1.ResourceList{}}

const maxInterned = 1024

func internResources(l corev1.ResourceList) corev1.ResourceList {
	if len(l) == 0 {
		return l
	}
	var key strings.Builder
	for _, name := range slices.Sorted(maps.Keys(l)) {
		q := l[name]
		// String keeps the quantity's own format: 1Gi and 1073741824
		// share nothing, so that no write from a cached copy reformats it.
		fmt.Fprintf(&key, "%s=%s,", name, q.String())
	}
	resourceLists.Lock()
	defer resourceLists.Unlock()
	if shared, ok := resourceLists.m[key.String()]; ok {
		return shared
	}
	if len(resourceLists.m) < maxInterned {
		resourceLists.m[key.String()] = l
	}
	return l
}

// ownAnnotations keeps the annotations of this project (and of the system
// it replaces): what the PV controller and others write on a claim is read
// by none of the controllers that cache its metadata.
func ownAnnotations(m map[string]string) map[string]string {
	var out map[string]string
	for k, v := range m {
		if strings.HasPrefix(k, wellknown.Domain+"/") || strings.HasPrefix(k, wellknown.ClaimPrefix) {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}

// claimVolumes keeps the persistentVolumeClaim volumes, with their claim's
// name, and of the others the names of those a claim annotation of the
// object names (annotations), which the podwatcher needs to tell a missing
// volume from one of another kind. The rest go: every pod has a projected
// service-account volume that is larger than the rest of its trimmed self.
func claimVolumes(volumes []corev1.Volume, annotations map[string]string) []corev1.Volume {
	var out []corev1.Volume
	for _, v := range volumes {
		switch {
		case v.PersistentVolumeClaim != nil:
			out = append(out, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: v.PersistentVolumeClaim.ClaimName}}})
		case hasKey(annotations, wellknown.EnabledKey(v.Name)):
			out = append(out, corev1.Volume{Name: v.Name})
		}
	}
	return out
}

func hasKey(m map[string]string, key string) bool {
	_, ok := m[key]
	return ok
}

// trimToMetadata keeps of a claim its metadata only, less what trim drops
// from every object; other objects it trims as trim does. It serves the
// cache of ManagedClaims, which holds claims alone.
func trimToMetadata(obj any) (any, error) {
	if o, ok := obj.(*corev1.PersistentVolumeClaim); ok {
		o.Annotations = ownAnnotations(o.Annotations)
		o.Finalizers = nil
		o.Spec = corev1.PersistentVolumeClaimSpec{}
		o.Status = corev1.PersistentVolumeClaimStatus{}
	}
	return trim(obj)
}
