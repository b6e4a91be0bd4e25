package evict

import (
	"context"
	"errors"
	"io/fs"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	volumehelpers "k8s.io/component-helpers/storage/volume"
	"k8s.io/klog/v2"

	"github.com/reclaimable/reclaimable/apis/reclaimable/v1alpha1"
	"github.com/reclaimable/reclaimable/internal/controller"
	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// The measurer finds out how many bytes each member of a backend that
// measures its members (the directory backend, through the share the
// provisioner has mounted) holds when it comes back to the pool: its data
// does not change until a claim has it again, so one walk per return is
// enough. The results live in memory and in the
// pool's status, which the pool manager writes (a write on the volume per
// return would cost a request per cycle and race the releaser); a
// restarted provisioner reads them back from there. Members of the local
// backend are not measured: their directory is on their node, and a pod
// per return is no cheap measure.

// MeasurerConfig is what the measurer works with.
type MeasurerConfig struct {
	// Provisioner is the provisioner's name: another installation's
	// volumes are its own to measure (their share may not be mounted
	// here).
	Provisioner string
	// Volumes and Pools are the shared informers' caches.
	Volumes cache.Indexer
	Pools   cache.Indexer
	// Timeout bounds one walk.
	Timeout time.Duration
}

// Measurer measures the members of the provisioner's pools whose backend
// measures them.
type Measurer struct {
	p    Provisioner
	cfg  MeasurerConfig
	loop *controller.Loop[*corev1.PersistentVolume, string]
	// measured notifies the pool manager that a member of class was
	// measured.
	measured func(class string)

	mu    sync.Mutex
	usage map[string]v1alpha1.MemberUsage // by volume name
}

// NewMeasurer builds the measurer of p; Watch has it follow the volumes.
func NewMeasurer(p Provisioner, cfg MeasurerConfig) *Measurer {
	m := &Measurer{p: p, cfg: cfg, usage: map[string]v1alpha1.MemberUsage{}, measured: func(string) {}}
	m.loop = &controller.Loop[*corev1.PersistentVolume, string]{
		Name: "measurer", Ref: controller.NameRef[*corev1.PersistentVolume],
		Wants: func(_, pv *corev1.PersistentVolume) bool { return m.wants(pv) },
		Gone:  m.forget, Sync: m.Sync, Workers: 1,
	}
	return m
}

// OnMeasured has notify told of the class of each member measured; call it
// before Run.
func (m *Measurer) OnMeasured(notify func(class string)) { m.measured = notify }

// Watch queues the members of the shared informer volumes back in the
// pool, and forgets those deleted.
func (m *Measurer) Watch(volumes cache.SharedIndexInformer) error { return m.loop.Watch(volumes) }

// forget drops what pv, deleted, held.
func (m *Measurer) forget(pv *corev1.PersistentVolume) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.usage, pv.Name)
}

// measurable reports whether pv is a member of a backend that measures its
// members (Provisioner.Measures), back in the pool, and the return its measure
// would be of.
func (m *Measurer) measurable(pv *corev1.PersistentVolume) (string, bool) {
	if !m.p.Measures(pv) || pv.Status.Phase != corev1.VolumeAvailable {
		return "", false
	}
	switch pools.StateOf(pv) {
	case pools.StateFree, pools.StateHeld, pools.StateReserved:
		return pv.Annotations[wellknown.ReleasedAt], true
	}
	return "", false
}

// wants reports whether pv is a member of this installation (another's
// share may not even be mounted here) back in the pool whose return is not
// measured yet.
func (m *Measurer) wants(pv *corev1.PersistentVolume) bool {
	if pv.Annotations[wellknown.ProvisionedBy] != m.cfg.Provisioner {
		return false
	}
	if _, known := m.Usage(pv); known {
		return false
	}
	_, ok := m.measurable(pv)
	return ok
}

// Usage returns what pv held when it last came back to the pool, if that
// return was measured.
func (m *Measurer) Usage(pv *corev1.PersistentVolume) (v1alpha1.MemberUsage, bool) {
	returned, ok := m.measurable(pv)
	if !ok {
		return v1alpha1.MemberUsage{}, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	u, known := m.usage[pv.Name]
	return u, known && u.Returned == returned
}

// Run measures until ctx is done, one member at a time.
func (m *Measurer) Run(ctx context.Context) { m.loop.Run(ctx) }

// Sync measures the volume called name, if it is a member back in the pool
// whose return is not measured yet.
func (m *Measurer) Sync(ctx context.Context, name string) error {
	obj, exists, err := m.cfg.Volumes.GetByKey(name)
	if err != nil || !exists {
		return err
	}
	pv := obj.(*corev1.PersistentVolume)
	returned, ok := m.measurable(pv)
	if _, known := m.Usage(pv); !ok || known || pv.Annotations[wellknown.ProvisionedBy] != m.cfg.Provisioner {
		return nil
	}
	class := volumehelpers.GetPersistentVolumeClass(pv)
	// Measured before a restart: the pool's status has it.
	if pool := pools.PoolOf(m.cfg.Pools, class); pool != nil {
		for _, u := range pool.Status.Usage {
			if u.Volume == name && u.Returned == returned {
				m.remember(u)
				return nil
			}
		}
	}
	start := time.Now()
	bytes, partial, err := m.p.Measure(pv, start.Add(m.cfg.Timeout))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		// Unreadable in part: what was read is a lower bound.
		klog.FromContext(ctx).V(2).Info("Measuring a member stopped at what it could not read", "pv", name, "err", err)
		partial = true
	}
	m.remember(v1alpha1.MemberUsage{Volume: name, Bytes: bytes, Returned: returned, Partial: partial})
	klog.FromContext(ctx).V(2).Info("Measured a member back in the pool", "pv", name, "bytes", bytes, "partial", partial, "took", time.Since(start))
	m.measured(class)
	return nil
}

func (m *Measurer) remember(u v1alpha1.MemberUsage) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.usage[u.Volume] = u
}
