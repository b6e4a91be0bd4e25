package podwatcher

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	utilcache "k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/utils/clock"
)

// The podwatcher's memories, each a type of its own so that each is read,
// bounded and tested on its own, as the releaser's are (releaser/memory.go).
// Entries that expire live in apimachinery's expiring cache, which drops
// them by itself.

// expectations remembers the claims this podwatcher created that its cache
// does not show yet, so that no create is sent twice and a pod's gate can go
// without waiting for the cache. An entry lasts until the cache shows the
// claim, or expectationTTL: past it, the owner is examined afresh.
type expectations struct {
	mu sync.Mutex
	// sent: a create was sent (it may still be in flight).
	sent *utilcache.Expiring
	// confirmed: the API server answered the create.
	confirmed *utilcache.Expiring
}

func newExpectations(clk clock.Clock) *expectations {
	return &expectations{sent: utilcache.NewExpiringWithClock(clk), confirmed: utilcache.NewExpiringWithClock(clk)}
}

// send records that a create of claim "<namespace>/<name>" is about to be
// sent, and reports false if one already was.
func (e *expectations) send(claim string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.sent.Get(claim); ok {
		return false
	}
	e.sent.Set(claim, struct{}{}, expectationTTL)
	return true
}

// failed forgets a create that the API server refused.
func (e *expectations) failed(claim string) { e.sent.Delete(claim) }

// confirm records that the API server created claim.
func (e *expectations) confirm(claim string) { e.confirmed.Set(claim, struct{}{}, expectationTTL) }

// created reports whether the API server created claim and the cache does
// not show it yet.
func (e *expectations) created(claim string) bool {
	_, ok := e.confirmed.Get(claim)
	return ok
}

// observed forgets claim: the cache shows it now, or shows it deleted.
func (e *expectations) observed(claim string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.sent.Delete(claim)
	e.confirmed.Delete(claim)
}

// goneOwners remembers the UIDs of owners the API server said no longer
// exist (by the watch's delete event or by a GET), with the time it first
// said so, from which the garbage collection grace counts. An entry is kept
// past the grace: forgotten earlier, a claim examined at the end of its
// grace would find its owner gone anew and wait again.
type goneOwners struct {
	mu    sync.Mutex
	clock clock.PassiveClock
	ttl   time.Duration
	since *utilcache.Expiring
}

func newGoneOwners(clk clock.Clock, ttl time.Duration) *goneOwners {
	return &goneOwners{clock: clk, ttl: ttl, since: utilcache.NewExpiringWithClock(clk)}
}

// mark records that the owner uid is gone and returns since when it is
// known: the first time it was marked.
func (g *goneOwners) mark(uid types.UID) time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	if t, ok := g.since.Get(uid); ok {
		return t.(time.Time)
	}
	now := g.clock.Now()
	g.since.Set(uid, now, g.ttl)
	return now
}

// goneSince reports whether uid is known gone, and since when.
func (g *goneOwners) goneSince(uid types.UID) (time.Time, bool) {
	t, ok := g.since.Get(uid)
	if !ok {
		return time.Time{}, false
	}
	return t.(time.Time), true
}

// uidSet remembers UIDs until they are forgotten: the claims counted as
// left to the garbage collector, each counted once however often it is
// examined. A claim's UID is forgotten when the claim is deleted.
type uidSet struct {
	mu   sync.Mutex
	uids map[types.UID]struct{}
}

func newUIDSet() *uidSet { return &uidSet{uids: map[types.UID]struct{}{}} }

// add reports whether uid is new.
func (s *uidSet) add(uid types.UID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.uids[uid]; ok {
		return false
	}
	s.uids[uid] = struct{}{}
	return true
}

func (s *uidSet) forget(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.uids, uid)
}

// ownerMemories remembers, per live owner, what was already reported and
// what must not be retried. An owner's memory is forgotten with the owner.
type ownerMemories struct {
	mu     sync.Mutex
	owners map[types.UID]*ownerMemory
}

type ownerMemory struct {
	// reported holds reason+volume+message of events already recorded.
	reported map[string]struct{}
	// foreign holds claim names found to exist without our label, with the
	// time they were last checked.
	foreign map[string]time.Time
	// refused holds, per volume, the template the API server refused.
	refused map[string]string
}

func newOwnerMemories() *ownerMemories {
	return &ownerMemories{owners: map[types.UID]*ownerMemory{}}
}

// memory returns the memory of uid; m.mu must be held.
func (m *ownerMemories) memoryLocked(uid types.UID) *ownerMemory {
	o := m.owners[uid]
	if o == nil {
		o = &ownerMemory{reported: map[string]struct{}{}, foreign: map[string]time.Time{}, refused: map[string]string{}}
		m.owners[uid] = o
	}
	return o
}

// firstReport tells whether this problem is new for the owner, so that an
// event is recorded once and not on every status update of a pod.
func (m *ownerMemories) firstReport(uid types.UID, reason, volume, message string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	reported := m.memoryLocked(uid).reported
	id := reason + "\x00" + volume + "\x00" + message
	if _, ok := reported[id]; ok {
		return false
	}
	reported[id] = struct{}{}
	return true
}

// foreignFound records that claim exists and is not ours, at now.
func (m *ownerMemories) foreignFound(uid types.UID, claim string, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.memoryLocked(uid).foreign[claim] = now
}

// refusedTemplate records that the API server refused source for volume.
func (m *ownerMemories) refusedTemplate(uid types.UID, volume, source string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.memoryLocked(uid).refused[volume] = source
}

// mayCreate reports whether a claim for req may be created for the owner:
// not if it was found someone else's within recheck of now, nor if the API
// server refused this very template.
func (m *ownerMemories) mayCreate(uid types.UID, req claimRequest, now time.Time, recheck time.Duration) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	o := m.owners[uid]
	if o == nil {
		return true
	}
	if t, ok := o.foreign[req.ClaimName]; ok && now.Sub(t) < recheck {
		return false
	}
	if src, ok := o.refused[req.Volume]; ok && src == req.Source {
		return false
	}
	return true
}

func (m *ownerMemories) forget(uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.owners, uid)
}

// len is how many owners are remembered.
func (m *ownerMemories) len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.owners)
}
