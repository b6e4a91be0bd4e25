package provisioner

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/reclaimable/reclaimable/internal/keys"
)

// This file holds the provisioner's record of its own writes that the
// informer does not show yet (members taken, volumes being created), so
// that a stale cache never offers a taken member again or lets a class grow
// past maxVolumes.

// expectationTTL bounds how long the provisioner trusts its own record of a
// write over the informer: far longer than a watch takes to deliver it, and
// longer than the library's retries of a PV create (5 x 10 s).
const expectationTTL = 5 * time.Minute

type pendingVolume struct {
	class string
	at    time.Time
}

type take struct {
	pv string
	at time.Time
}

// issuedTo names the volume already pointing at claim, if any, trusting the
// provisioner's own recent takes over a cache that has not caught up.
func (p *provisioner) issuedTo(claim *corev1.PersistentVolumeClaim) string {
	if objs, _ := p.volumes.ByIndex(indexClaimUID, string(claim.UID)); len(objs) > 0 {
		return objs[0].(*corev1.PersistentVolume).Name
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.expireTakes()
	return p.takes[claim.UID].pv
}

// staleTakes names the members taken whose new state the cache does not show
// yet; trying them again could only fail.
func (p *provisioner) staleTakes() map[string]bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.expireTakes()
	stale := map[string]bool{}
	for _, t := range p.takes {
		stale[t.pv] = true
	}
	return stale
}

func (p *provisioner) expectTake(claim types.UID, pv string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.takes[claim] = take{pv: pv, at: p.clock.Now()}
}

// observe drops the expectation the cache now meets: pv points at its claim.
func (p *provisioner) observe(pv *corev1.PersistentVolume) {
	if pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if t, ok := p.takes[pv.Spec.ClaimRef.UID]; ok && t.pv == pv.Name {
		delete(p.takes, pv.Spec.ClaimRef.UID)
	}
}

// expireTakes forgets takes the cache never showed (the volume was deleted,
// say). Callers hold p.mu.
func (p *provisioner) expireTakes() {
	for uid, t := range p.takes {
		if p.clock.Now().Sub(t.at) > expectationTTL {
			delete(p.takes, uid)
		}
	}
}

// reserve counts the volumes of class this provisioner created, including the
// ones on their way, and holds a place for name unless that would exceed max
// (0: no limit). A retry for a name already counted always gets its place back.
func (p *provisioner) reserve(class, name string, max int) (count int, ok bool) {
	p.mu.Lock()
	lock, found := p.growing[class]
	if !found {
		lock = &sync.Mutex{}
		p.growing[class] = lock
	}
	p.mu.Unlock()
	lock.Lock()
	defer lock.Unlock()

	names := map[string]bool{}
	objs, _ := p.volumes.ByIndex(indexClass, class)
	for _, o := range objs {
		if pv := o.(*corev1.PersistentVolume); pv.Annotations[keys.ProvisionedBy] == p.name {
			names[pv.Name] = true
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for n, v := range p.pending {
		switch {
		case names[n] || p.clock.Now().Sub(v.at) > expectationTTL:
			delete(p.pending, n)
		case v.class == class:
			names[n] = true
		}
	}
	if names[name] {
		return len(names) - 1, true
	}
	if max > 0 && len(names) >= max {
		return len(names), false
	}
	p.pending[name] = pendingVolume{class: class, at: p.clock.Now()}
	return len(names), true
}

func (p *provisioner) unreserve(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.pending, name)
}
