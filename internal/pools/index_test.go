package pools

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
)

// The provisioner and the releaser both ask for the index on the one
// volume informer of a process running both.
func TestIndexVolumesByClassOnce(t *testing.T) {
	volumes := informers.NewSharedInformerFactory(fake.NewClientset(), 0).Core().V1().PersistentVolumes().Informer()
	for range 2 {
		if err := IndexVolumesByClass(volumes); err != nil {
			t.Fatal(err)
		}
	}
	beta := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "b", Annotations: map[string]string{corev1.BetaStorageClassAnnotation: "old"}},
		Spec: corev1.PersistentVolumeSpec{StorageClassName: "new"}}
	for _, pv := range []*corev1.PersistentVolume{
		{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Spec: corev1.PersistentVolumeSpec{StorageClassName: "pool"}},
		beta,
		{ObjectMeta: metav1.ObjectMeta{Name: "none"}},
	} {
		if err := volumes.GetIndexer().Add(pv); err != nil {
			t.Fatal(err)
		}
	}
	for class, want := range map[string]string{"pool": "a", "old": "b"} {
		objs, err := volumes.GetIndexer().ByIndex(VolumesByClass, class)
		if err != nil || len(objs) != 1 || objs[0].(*corev1.PersistentVolume).Name != want {
			t.Errorf("volumes of class %s = %v, %v; want %s", class, objs, err, want)
		}
	}
	if values := volumes.GetIndexer().ListIndexFuncValues(VolumesByClass); len(values) != 2 {
		t.Errorf("index values %v, want pool and old only", values)
	}
}
