package releaser

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// deletedClaims remembers the UIDs of claims the API server reported deleted
// on the managed-claims watch, so that releasing their volumes needs no
// lookup: UIDs are never reused, so a deleted UID stays deleted. It is
// bounded; a UID it forgot or never held costs one GET, nothing worse.
type deletedClaims struct {
	mu    sync.Mutex
	ttl   time.Duration
	max   int
	clock clock.PassiveClock
	uids  map[types.UID]time.Time
}

func newDeletedClaims(ttl time.Duration, max int, clk clock.PassiveClock) *deletedClaims {
	return &deletedClaims{ttl: ttl, max: max, clock: clk, uids: map[types.UID]time.Time{}}
}

func (d *deletedClaims) add(uid types.UID) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.uids) >= d.max {
		d.pruneLocked()
	}
	if len(d.uids) < d.max {
		d.uids[uid] = d.clock.Now()
	}
}

func (d *deletedClaims) has(uid types.UID) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	at, ok := d.uids[uid]
	return ok && d.clock.Now().Sub(at) < d.ttl
}

// prune forgets UIDs older than the ttl: by then the volumes of those claims
// have long been released.
func (d *deletedClaims) prune() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.pruneLocked()
}

func (d *deletedClaims) pruneLocked() {
	now := d.clock.Now()
	for uid, at := range d.uids {
		if now.Sub(at) >= d.ttl {
			delete(d.uids, uid)
		}
	}
}

// ownWrites remembers, per volume, the resourceVersion that the releaser's
// last write replaced, until the informer delivers a newer version. A sync
// that finds the replaced version in the cache would decide again from what
// the releaser has already changed and fail on the resourceVersion
// precondition; it waits for the informer instead, which queues the volume
// again when the newer version arrives.
type ownWrites struct {
	mu       sync.Mutex
	replaced map[string]string // volume name -> resourceVersion replaced
}

func newOwnWrites() *ownWrites { return &ownWrites{replaced: map[string]string{}} }

func (w *ownWrites) wrote(name, replacedVersion string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.replaced[name] = replacedVersion
}

// stale reports whether the cached version of a volume is one the releaser
// has already replaced. The cache only moves forward, so any other version
// is at least as new as the write, and the record is dropped.
func (w *ownWrites) stale(name, cachedVersion string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	replaced, ok := w.replaced[name]
	if !ok {
		return false
	}
	if replaced == cachedVersion {
		return true
	}
	delete(w.replaced, name)
	return false
}

func (w *ownWrites) forget(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.replaced, name)
}

// warnings remembers the Warning last reported for each volume version, so
// that a volume that stays wrong is not reported again by every sweep.
type warnings struct {
	mu   sync.Mutex
	last map[string]string // volume name -> reason@resourceVersion
}

func newWarnings() *warnings { return &warnings{last: map[string]string{}} }

// first reports whether reason has not been reported yet for this version
// of the volume, and records it.
func (w *warnings) first(name, resourceVersion, reason string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	key := reason + "@" + resourceVersion
	if w.last[name] == key {
		return false
	}
	w.last[name] = key
	return true
}

func (w *warnings) forget(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.last, name)
}
