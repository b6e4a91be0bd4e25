package controller

import (
	"fmt"
	"reflect"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/reclaimable/reclaimable/internal/wellknown"
)

func TestTrimKeepsWhatControllersRead(t *testing.T) {
	volumes := []corev1.Volume{
		{Name: "cache", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}},
		{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}},
	}
	now := metav1.Now()
	meta := metav1.ObjectMeta{
		Name: "p", Namespace: "ns", UID: "u", DeletionTimestamp: &now,
		Annotations:     map[string]string{"a": "b", wellknown.EnabledKey("scratch"): "true", corev1.LastAppliedConfigAnnotation: "{...}"},
		OwnerReferences: []metav1.OwnerReference{{Kind: "Job", Name: "j", UID: "ju"}},
		ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
	}
	pod := &corev1.Pod{
		ObjectMeta: *meta.DeepCopy(),
		Spec: corev1.PodSpec{Volumes: volumes, Containers: []corev1.Container{{Name: "build", Image: "busybox"}},
			SchedulingGates: []corev1.PodSchedulingGate{{Name: "example.com/gate"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady}}},
	}
	out, err := trim(pod)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*corev1.Pod)
	if len(got.Spec.Containers) != 0 || len(got.Status.Conditions) != 0 || got.ManagedFields != nil || got.Annotations[corev1.LastAppliedConfigAnnotation] != "" {
		t.Errorf("pod not trimmed: %+v", got)
	}
	if want := []corev1.Volume{{Name: "cache", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}}, {Name: "scratch"}}; !reflect.DeepEqual(got.Spec.Volumes, want) {
		t.Errorf("pod volumes = %+v, want the claim volumes with their source, and the names of those a claim annotation names: %+v", got.Spec.Volumes, want)
	}
	if got.Labels != nil || got.Annotations["a"] != "" {
		t.Errorf("pod keeps labels or annotations of others, which the podwatcher never reads: %v %v", got.Labels, got.Annotations)
	}
	if got.Status.Phase != corev1.PodRunning || got.Annotations[wellknown.EnabledKey("scratch")] != "true" || len(got.Spec.SchedulingGates) != 1 ||
		got.UID != "u" || got.DeletionTimestamp == nil || len(got.OwnerReferences) != 1 {
		t.Errorf("pod lost what the podwatcher reads: %+v", got)
	}

	job := &batchv1.Job{
		ObjectMeta: *meta.DeepCopy(),
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"x": "y"}},
			Spec:       corev1.PodSpec{Volumes: volumes, Containers: []corev1.Container{{Name: "build"}}},
		}},
		Status: batchv1.JobStatus{Succeeded: 1, Conditions: []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}},
	}
	out, err = trim(job)
	if err != nil {
		t.Fatal(err)
	}
	gotJob := out.(*batchv1.Job)
	if len(gotJob.Spec.Template.Spec.Containers) != 0 || gotJob.Status.Succeeded != 0 || gotJob.ManagedFields != nil {
		t.Errorf("job not trimmed: %+v", gotJob)
	}
	if len(gotJob.Spec.Template.Spec.Volumes) != 2 || gotJob.Spec.Template.Spec.Volumes[1].EmptyDir != nil || len(gotJob.Status.Conditions) != 1 ||
		gotJob.Annotations[wellknown.EnabledKey("scratch")] != "true" || gotJob.Annotations["a"] != "" {
		t.Errorf("job lost what the podwatcher reads, or kept what it does not: %+v", gotJob)
	}

	pv := &corev1.PersistentVolume{ObjectMeta: *meta.DeepCopy(), Spec: corev1.PersistentVolumeSpec{StorageClassName: "pool"}}
	out, _ = trim(pv)
	if gotPV := out.(*corev1.PersistentVolume); gotPV.ManagedFields != nil || gotPV.Spec.StorageClassName != "pool" || gotPV.Annotations[corev1.LastAppliedConfigAnnotation] == "" {
		t.Errorf("a volume is only stripped of managedFields: %+v", gotPV)
	}
}

func TestTrimToMetadataKeepsOnlyMetadata(t *testing.T) {
	now := metav1.Now()
	meta := metav1.ObjectMeta{
		Name: "c", Namespace: "ns", UID: "u", ResourceVersion: "7", DeletionTimestamp: &now,
		Labels:          map[string]string{"l": "v"},
		Annotations:     map[string]string{"a": "b", wellknown.ConsumerOutcome: "Succeeded", corev1.LastAppliedConfigAnnotation: "{...}"},
		OwnerReferences: []metav1.OwnerReference{{Kind: "Pod", Name: "p", UID: "pu"}},
		Finalizers:      []string{"kubernetes.io/pvc-protection"},
		ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
	}
	claim := &corev1.PersistentVolumeClaim{
		ObjectMeta: *meta.DeepCopy(),
		Spec:       corev1.PersistentVolumeClaimSpec{VolumeName: "pv", AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}},
		Status:     corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound},
	}
	out, err := trimToMetadata(claim)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*corev1.PersistentVolumeClaim)
	want := meta.DeepCopy()
	want.ManagedFields, want.Finalizers = nil, nil
	want.Annotations = map[string]string{wellknown.ConsumerOutcome: "Succeeded"}
	if !reflect.DeepEqual(got.ObjectMeta, *want) {
		t.Errorf("metadata = %+v, want %+v", got.ObjectMeta, *want)
	}
	if !reflect.DeepEqual(got.Spec, corev1.PersistentVolumeClaimSpec{}) || !reflect.DeepEqual(got.Status, corev1.PersistentVolumeClaimStatus{}) {
		t.Errorf("spec and status kept: %+v, %+v", got.Spec, got.Status)
	}
}

// A claim waiting for its volume, the only kind cached whole, keeps all
// the provisioner and the library read of it.
func TestTrimKeepsAWaitingClaimWhole(t *testing.T) {
	class := "pool"
	meta := metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: "u",
		Labels:      map[string]string{"l": "v"},
		Annotations: map[string]string{"volume.kubernetes.io/storage-provisioner": "vendor/reclaimable", wellknown.ConsumerOutcome: "Failed"}}
	spec := corev1.PersistentVolumeClaimSpec{StorageClassName: &class, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}
	waiting := &corev1.PersistentVolumeClaim{ObjectMeta: *meta.DeepCopy(), Spec: *spec.DeepCopy(), Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending}}
	out, _ := trim(waiting.DeepCopy())
	if !reflect.DeepEqual(out, waiting) {
		t.Errorf("a claim without a volume was trimmed: %+v", out)
	}
}

// Volumes of one size share one capacity map in the caches; a size written
// another way keeps its own.
func TestTrimSharesCapacities(t *testing.T) {
	pv := func(size string) *corev1.PersistentVolume {
		return &corev1.PersistentVolume{Spec: corev1.PersistentVolumeSpec{Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}}}
	}
	capacity := func(obj any) corev1.ResourceList {
		out, _ := trim(obj)
		return out.(*corev1.PersistentVolume).Spec.Capacity
	}
	a, b, other, sameValue := capacity(pv("3Gi")), capacity(pv("3Gi")), capacity(pv("4Gi")), capacity(pv("3221225472"))
	if reflect.ValueOf(a).UnsafePointer() != reflect.ValueOf(b).UnsafePointer() {
		t.Error("two volumes of 3Gi keep two maps")
	}
	if reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(other).UnsafePointer() || reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(sameValue).UnsafePointer() {
		t.Error("a volume shares the map of another size, or of the same size written otherwise")
	}
	if q := sameValue[corev1.ResourceStorage]; q.String() != "3221225472" {
		t.Errorf("capacity reformatted to %s", q.String())
	}
}

func TestTrimSharesLabelsAnnotationsAndFinalizers(t *testing.T) {
	same := func(a, b any) bool { return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer() }
	pv := func(name, managedBy string) *corev1.PersistentVolume {
		out, _ := trim(&corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels:      map[string]string{wellknown.VolumeManagedBy: managedBy},
			Annotations: map[string]string{wellknown.ProvisionedBy: "vendor/reclaimable", "pv.kubernetes.io/bound-by-controller": "yes"},
			Finalizers:  []string{"kubernetes.io/pv-protection"},
		}})
		return out.(*corev1.PersistentVolume)
	}
	a, b, other := pv("a", "reclaimable"), pv("b", "reclaimable"), pv("c", "other")
	if !same(a.Labels, b.Labels) || !same(a.Annotations, b.Annotations) || !same(a.Finalizers, b.Finalizers) {
		t.Error("two volumes with the same labels, annotations and finalizers keep their own")
	}
	if same(a.Labels, other.Labels) || other.Labels[wellknown.VolumeManagedBy] != "other" {
		t.Errorf("volumes of different labels share them: %v", other.Labels)
	}
	if a.Name != "a" || b.Name != "b" || b.Annotations["pv.kubernetes.io/bound-by-controller"] != "yes" {
		t.Errorf("sharing changed what a volume says: %+v %+v", a.ObjectMeta, b.ObjectMeta)
	}

	// Keys and values cannot run into each other to make two maps one.
	s := newInterner[map[string]string]()
	if x, y := intern(s, map[string]string{"a": "bc"}), intern(s, map[string]string{"ab": "c"}); same(x, y) {
		t.Error(`{a: bc} and {ab: c} share a map`)
	}
	if intern(s, map[string]string{}) != nil {
		t.Error("an empty map is kept")
	}
	// Full, it starts afresh: maps seen since are shared again.
	for i := range maxInterned + 1 {
		intern(s, map[string]string{"job-name": fmt.Sprint(i)})
	}
	if len(s.m) > maxInterned {
		t.Errorf("holds %d maps, more than %d", len(s.m), maxInterned)
	}
	if x, y := intern(s, map[string]string{"late": "1"}), intern(s, map[string]string{"late": "1"}); !same(x, y) {
		t.Error("once full, new maps are no longer shared")
	}

	claim, _ := trimToMetadata(&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{
		Labels:      map[string]string{wellknown.ClaimedBy: "uid-1"},
		Annotations: map[string]string{wellknown.ConsumerOutcome: "Succeeded", "volume.kubernetes.io/storage-provisioner": "x"},
	}})
	claim2, _ := trimToMetadata(&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{
		Labels:      map[string]string{wellknown.ClaimedBy: "uid-1"},
		Annotations: map[string]string{wellknown.ConsumerOutcome: "Succeeded"},
	}})
	c1, c2 := claim.(*corev1.PersistentVolumeClaim), claim2.(*corev1.PersistentVolumeClaim)
	if !same(c1.Annotations, c2.Annotations) || len(c1.Annotations) != 1 {
		t.Errorf("the own annotations of claims are not shared: %v %v", c1.Annotations, c2.Annotations)
	}
	if same(c1.Labels, c2.Labels) {
		t.Error("claims' labels, each with its owner's UID, are interned for nothing")
	}
}
