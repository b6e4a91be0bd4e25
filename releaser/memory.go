package releaser

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// claimMemory remembers, for a while, something about claims by UID: the
// claims the API server reported deleted on the managed-claims watch, so
// that releasing their volumes needs no lookup (UIDs are never reused, so a
// deleted UID stays deleted), and how the consumer of a claim ended, which
// the claim no longer says once it is gone. It is bounded; a UID it forgot
// or never held costs a lookup, or a scrub, nothing worse.
type claimMemory[V any] struct {
	mu      sync.Mutex
	ttl     time.Duration
	max     int
	clock   clock.PassiveClock
	entries map[types.UID]remembered[V]
}

type remembered[V any] struct {
	value V
	at    time.Time
}

func newClaimMemory[V any](ttl time.Duration, max int, clk clock.PassiveClock) *claimMemory[V] {
	return &claimMemory[V]{ttl: ttl, max: max, clock: clk, entries: map[types.UID]remembered[V]{}}
}

// add remembers v for uid from now on.
func (m *claimMemory[V]) add(uid types.UID, v V) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, known := m.entries[uid]; !known && len(m.entries) >= m.max {
		m.pruneLocked()
	}
	if _, known := m.entries[uid]; known || len(m.entries) < m.max {
		m.entries[uid] = remembered[V]{value: v, at: m.clock.Now()}
	}
}

func (m *claimMemory[V]) get(uid types.UID) (V, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[uid]
	if !ok || m.clock.Now().Sub(e.at) >= m.ttl {
		var zero V
		return zero, false
	}
	return e.value, true
}

func (m *claimMemory[V]) has(uid types.UID) bool {
	_, ok := m.get(uid)
	return ok
}

// prune forgets UIDs older than the ttl: by then the volumes of those claims
// have long been released.
func (m *claimMemory[V]) prune() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pruneLocked()
}

func (m *claimMemory[V]) pruneLocked() {
	now := m.clock.Now()
	for uid, e := range m.entries {
		if now.Sub(e.at) >= m.ttl {
			delete(m.entries, uid)
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
