package provisioner

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/reclaimable/reclaimable/internal/wellknown"
	"github.com/reclaimable/reclaimable/provisioner/backend"
	"github.com/reclaimable/reclaimable/provisioner/backend/backendtest"
	"k8s.io/utils/ptr"
)

// A backend as a newcomer adds one: this file alone declares and registers
// it, and the flow makes, issues, measures, evicts and deletes its volumes
// without a line elsewhere naming it.

const fakeBackendName = "fake"

// withFakeBackend registers the fake backend for the test: registered at
// init it would be in every test's list of backends.
func withFakeBackend(t *testing.T) *fakeBackend {
	t.Helper()
	b := &fakeBackend{}
	backend.Register(fakeBackendName, func(d backend.Deps) backend.Backend { b.provisioner = d.Provisioner; return b })
	t.Cleanup(func() { backend.Unregister(fakeBackendName) })
	return b
}

// fakeClassOf is a valid class of the fake backend.
func fakeClassOf() *storagev1.StorageClass {
	return &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "pool"}, Provisioner: testProvisioner,
		Parameters: map[string]string{"backend": fakeBackendName}, ReclaimPolicy: ptr.To(corev1.PersistentVolumeReclaimRetain)}
}

type fakeBackend struct {
	provisioner string
	mu          sync.Mutex
	made        []string
	deleted     []string
}

func (*fakeBackend) Parameters() []string { return []string{backend.MaxVolumes} }

func (b *fakeBackend) ForClass(*storagev1.StorageClass) (backend.Class, []error) {
	return fakeClass{b}, nil
}

func (b *fakeBackend) Delete(_ context.Context, pv *corev1.PersistentVolume) (backend.Deletion, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.deleted = append(b.deleted, pv.Name)
	return backend.StorageRemoved, nil
}

func (*fakeBackend) Evicts() (backend.EvictionKind, error) { return backend.EvictRemoving, nil }

func (*fakeBackend) Usage(*corev1.PersistentVolume, time.Time) (int64, bool, error) {
	return 42, false, nil
}

func (*fakeBackend) Measures() bool { return true }

type fakeClass struct{ b *fakeBackend }

func (c fakeClass) IsMember(pv *corev1.PersistentVolume) bool {
	return pv.Annotations[wellknown.ProvisionedBy] == c.b.provisioner
}
func (fakeClass) SelectorKeys() []string                               { return nil }
func (c fakeClass) Maker() (backend.Maker, string)                     { return c, "" }
func (fakeClass) BackingClass() *storagev1.StorageClass                { return nil }
func (fakeClass) AheadPlacement() backend.Placement                    { return backend.PlaceAnywhere }
func (fakeClass) Refuse(*corev1.PersistentVolumeClaim) (string, error) { return "", nil }

func (c fakeClass) Create(_ context.Context, v backend.NewVolume) (backend.MadeVolume, error) {
	c.b.mu.Lock()
	defer c.b.mu.Unlock()
	c.b.made = append(c.b.made, v.Name)
	return c.Plan(v)
}

func (fakeClass) Plan(v backend.NewVolume) (backend.MadeVolume, error) {
	return backend.MadeVolume{Source: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/fake/" + v.Name}}}, nil
}

// The fake backend keeps the contract every backend keeps.
func TestTheFakeBackendKeepsTheContract(t *testing.T) {
	backendtest.Contract(t, &fakeBackend{provisioner: testProvisioner}, fakeClassOf())
}

// The fake backend, registered in this file alone, serves a class: a claim
// gets a new volume it made, the volume comes back and is measured, it is
// evicted (fenced, deleted, its storage removed by the backend), and a
// Delete volume's storage goes through it too.
func TestABackendDeclaredInOneFileWorks(t *testing.T) {
	fake := withFakeBackend(t)
	f := newFixture(t, nil)
	class := fakeClassOf()

	claim := claimFor("ns", "c", "1Gi")
	pv, _, err := f.provision(class, claim)
	if err != nil || pv == nil {
		t.Fatalf("Provision = %v, %v; want a new volume", pv, err)
	}
	if pv.Annotations[wellknown.Backend] != fakeBackendName || pv.Spec.HostPath == nil || len(fake.made) != 1 {
		t.Fatalf("volume %s: backend %q, source %+v, made %v; want the fake backend's", pv.Name, pv.Annotations[wellknown.Backend], pv.Spec.PersistentVolumeSource, fake.made)
	}

	// Back in the pool: measured through the backend.
	pv = pv.DeepCopy()
	pv.ResourceVersion, pv.UID = "1", "uid-fake"
	pv.Annotations[wellknown.ProvisionedBy] = testProvisioner // as the library writes it
	pv.Status.Phase = corev1.VolumeAvailable
	returned("ns/c", t0())(pv)
	f.add(pv)
	m := measurerFor(f)
	if err := m.Sync(context.Background(), pv.Name); err != nil {
		t.Fatal(err)
	}
	if u, ok := m.Usage(pv); !ok || u.Bytes != 42 {
		t.Errorf("Usage = %+v, %v; want the fake backend's 42 bytes", u, ok)
	}

	// Evicted: fenced and deleted; the evictor has the backend remove the
	// storage of the deleted volume, then takes its finalizer off.
	if err := f.p.CheckEvict(class); err != nil {
		t.Errorf("CheckEvict = %v, want nil", err)
	}
	fenced := make(chan *corev1.PersistentVolume, 1)
	f.client.PrependReactor("update", "persistentvolumes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		select {
		case fenced <- a.(k8stesting.UpdateAction).GetObject().(*corev1.PersistentVolume).DeepCopy():
		default:
		}
		return false, nil, nil
	})
	if evicted, err := f.p.Evict(context.Background(), pv, wellknown.EvictIdle); err != nil || !evicted {
		t.Fatalf("Evict = %v, %v; want the member evicted", evicted, err)
	}
	deleting := <-fenced
	now := metav1.Now()
	deleting.DeletionTimestamp = &now
	if err := f.volumes.Update(deleting); err != nil {
		t.Fatal(err)
	}
	if err := f.client.Tracker().Add(deleting); err != nil {
		t.Fatal(err)
	}
	if err := evictorFor(f).Sync(context.Background(), pv.Name); err != nil {
		t.Fatalf("evictor: %v", err)
	}
	if len(fake.deleted) != 1 || fake.deleted[0] != pv.Name {
		t.Errorf("the backend deleted %v, want the evicted %s", fake.deleted, pv.Name)
	}

	// A Delete volume it made: its storage goes through it.
	gone := volume("pv-delete", "1Gi", func(pv *corev1.PersistentVolume) {
		pv.Annotations[wellknown.Backend] = fakeBackendName
		pv.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimDelete
	}, released("ns", "gone", "uid-gone", t0()))
	if err := f.p.Delete(context.Background(), gone); err != nil {
		t.Fatalf("Delete = %v", err)
	}
	if len(fake.deleted) != 2 || fake.deleted[1] != "pv-delete" {
		t.Errorf("the backend deleted %v, want pv-delete too", fake.deleted)
	}
}
