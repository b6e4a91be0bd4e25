package bench

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	volumehelpers "k8s.io/component-helpers/storage/volume"
)

// claimRecord is what the benchmark saw happen to one claim (one UID) and
// to the volume it was bound to, each time taken when the watch event
// arrived.
type claimRecord struct {
	namespace, name string
	uid             types.UID
	created         time.Time
	// handedOff is when the PV controller handed the claim to an external
	// provisioner (it found no volume to bind), issued when a volume's
	// claimRef first named the claim with its UID.
	handedOff, issued time.Time
	bound             time.Time
	volume            string
	// hit: the volume existed before the claim (a pool volume); a miss is
	// a volume created for it.
	hit      bool
	gone     time.Time
	released time.Time
	// available is when the volume was seen Available again, or issued to
	// another claim, whichever came first.
	available time.Time
}

type volumeRecord struct {
	firstSeen time.Time
	phase     corev1.PersistentVolumePhase
	// lastClaim is the UID the volume's claimRef last named, kept after
	// the releaser clears the claimRef.
	lastClaim types.UID
}

// recorder watches claims and volumes and notes the time each transition
// is first seen. Watches rather than polling: the figures then have the
// resolution of the event stream, not of a poll interval.
type recorder struct {
	mu      sync.Mutex
	claims  map[types.UID]*claimRecord
	byName  map[string][]*claimRecord // "namespace/name"
	volumes map[string]*volumeRecord
	// pods holds when each pod was first seen bound to a node.
	pods    map[types.UID]time.Time
	changed chan struct{}
}

func newRecorder() *recorder {
	return &recorder{
		claims:  map[types.UID]*claimRecord{},
		byName:  map[string][]*claimRecord{},
		volumes: map[string]*volumeRecord{},
		pods:    map[types.UID]time.Time{},
		changed: make(chan struct{}),
	}
}

// start runs the informers until ctx is done and waits for their sync.
func (r *recorder) start(ctx context.Context, client kubernetes.Interface) {
	f := informers.NewSharedInformerFactory(client, 0)
	claims := f.Core().V1().PersistentVolumeClaims().Informer()
	volumes := f.Core().V1().PersistentVolumes().Informer()
	_, _ = claims.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.claim(obj, false) },
		UpdateFunc: func(_, obj any) { r.claim(obj, false) },
		DeleteFunc: func(obj any) { r.claim(obj, true) },
	})
	_, _ = volumes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.volume(obj) },
		UpdateFunc: func(_, obj any) { r.volume(obj) },
	})
	pods := f.Core().V1().Pods().Informer()
	// Only whether a pod is scheduled is read: the scale phase's thousands
	// of pods stay small.
	_ = pods.SetTransform(func(obj any) (any, error) {
		if p, ok := obj.(*corev1.Pod); ok {
			return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, UID: p.UID, ResourceVersion: p.ResourceVersion},
				Spec: corev1.PodSpec{NodeName: p.Spec.NodeName}}, nil
		}
		return obj, nil
	})
	_, _ = pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    r.pod,
		UpdateFunc: func(_, obj any) { r.pod(obj) },
	})
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
}

func (r *recorder) pod(obj any) {
	now := time.Now()
	p, ok := obj.(*corev1.Pod)
	if !ok || p.Spec.NodeName == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, seen := r.pods[p.UID]; !seen {
		r.pods[p.UID] = now
		r.notifyLocked()
	}
}

func (r *recorder) notifyLocked() {
	close(r.changed)
	r.changed = make(chan struct{})
}

func (r *recorder) claim(obj any, deleted bool) {
	now := time.Now()
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	c, ok := obj.(*corev1.PersistentVolumeClaim)
	if !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := r.claims[c.UID]
	if rec == nil {
		rec = &claimRecord{namespace: c.Namespace, name: c.Name, uid: c.UID, created: now}
		r.claims[c.UID] = rec
		key := c.Namespace + "/" + c.Name
		r.byName[key] = append(r.byName[key], rec)
	}
	if _, ok := c.Annotations[volumehelpers.AnnStorageProvisioner]; ok && rec.handedOff.IsZero() {
		rec.handedOff = now
	}
	if deleted {
		if rec.gone.IsZero() {
			rec.gone = now
		}
	} else if c.Status.Phase == corev1.ClaimBound && rec.bound.IsZero() {
		rec.bound, rec.volume = now, c.Spec.VolumeName
		v := r.volumes[c.Spec.VolumeName]
		rec.hit = v != nil && v.firstSeen.Before(rec.created)
	}
	r.notifyLocked()
}

func (r *recorder) volume(obj any) {
	now := time.Now()
	pv, ok := obj.(*corev1.PersistentVolume)
	if !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	v := r.volumes[pv.Name]
	if v == nil {
		v = &volumeRecord{firstSeen: now}
		r.volumes[pv.Name] = v
	}
	if ref := pv.Spec.ClaimRef; ref != nil && ref.UID != "" {
		// Issued to another claim before it was seen Available: the PV
		// controller (or the provisioner) took it from the pool as soon as
		// its claimRef was cleared. It was back in the pool by then.
		if c := r.claims[v.lastClaim]; c != nil && ref.UID != v.lastClaim && c.available.IsZero() {
			c.available = now
			if c.released.IsZero() {
				c.released = now
			}
		}
		v.lastClaim = ref.UID
		if c := r.claims[ref.UID]; c != nil && c.issued.IsZero() {
			c.issued = now
		}
	}
	if pv.Status.Phase != v.phase {
		v.phase = pv.Status.Phase
		if c := r.claims[v.lastClaim]; c != nil {
			switch v.phase {
			case corev1.VolumeReleased:
				if c.released.IsZero() {
					c.released = now
				}
			case corev1.VolumeAvailable:
				if c.available.IsZero() {
					c.available = now
				}
			}
		}
	}
	r.notifyLocked()
}

// wait blocks until cond, called with the lock held, returns true.
func (r *recorder) wait(ctx context.Context, cond func() bool) error {
	for {
		r.mu.Lock()
		ok := cond()
		ch := r.changed
		r.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// latest returns the newest record of a claim name; call with the lock held.
func (r *recorder) latestLocked(namespace, name string) *claimRecord {
	recs := r.byName[namespace+"/"+name]
	if len(recs) == 0 {
		return nil
	}
	return recs[len(recs)-1]
}

// snapshot copies a claim's record.
func (r *recorder) snapshot(uid types.UID) claimRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.claims[uid]; c != nil {
		return *c
	}
	return claimRecord{}
}

// recreated counts the claims in namespace created after their name's
// owner was deleted (deleted maps "namespace/name" to that time), and
// names with more than one claim.
func (r *recorder) recreated(deleted map[string]time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for key, recs := range r.byName {
		at, ok := deleted[key]
		if !ok {
			continue
		}
		for i, c := range recs {
			if i > 0 || c.created.After(at) {
				n++
			}
		}
	}
	return n
}

// volumeFirstSeen is when the volume was first seen, or zero.
func (r *recorder) volumeFirstSeen(name string) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if v := r.volumes[name]; v != nil {
		return v.firstSeen
	}
	return time.Time{}
}
