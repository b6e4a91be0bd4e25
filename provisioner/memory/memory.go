// Package memory holds the provisioner's memories, each a type of its own, as
// the releaser's are (releaser/memory.go). Two record its own writes that the
// informer does not show yet, so that a stale cache never offers a taken
// member again or lets a class grow past maxVolumes (Takes, Pending); Waiting
// the claims that wait for a full pool or for their own volume; Locks has one
// caller at a time act on a claim. None reads the API: the provisioner asks
// them with what its caches show.
package memory

import (
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// expectationTTL bounds how long the provisioner trusts its own record of a
// write over the informer: far longer than a watch takes to deliver it, and
// longer than the library's retries of a PV create (5 x 10 s).
const expectationTTL = 5 * time.Minute

// Takes remembers, by claim UID, the pool member pointed at the claim until
// the cache shows it so: until then the cache offers the member as free and
// the claim as without a volume. Members taken are listed, so entries expire
// on reading rather than in an expiring cache, which cannot list.
type Takes struct {
	mu      sync.Mutex
	clock   clock.PassiveClock
	byClaim map[types.UID]take
	// trying names the members a worker of this process is taking now:
	// the others pass them over rather than race for them. Workers rank
	// members alike, so without it every claim in flight tries the same
	// member, and all but one pay a conflict and a read for it.
	trying map[string]bool
}

type take struct {
	pv string
	// namespace is the claim's: the member counts for it from the take
	// on (maxVolumesPerNamespace).
	namespace string
	at        time.Time
}

// NewTakes remembers takes on clk.
func NewTakes(clk clock.PassiveClock) *Takes {
	return &Takes{clock: clk, byClaim: map[types.UID]take{}, trying: map[string]bool{}}
}

// Expect records that the member pv was pointed at the claim of UID claim,
// in namespace.
func (t *Takes) Expect(claim types.UID, namespace, pv string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.byClaim[claim] = take{pv: pv, namespace: namespace, at: t.clock.Now()}
}

// Try marks pv as being taken by the caller, unless another worker is
// taking it; Done unmarks it.
func (t *Takes) Try(pv string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.trying[pv] {
		return false
	}
	t.trying[pv] = true
	return true
}

// Done unmarks pv: the caller is done taking it.
func (t *Takes) Done(pv string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.trying, pv)
}

// IssuedTo names the member taken for claim, or "".
func (t *Takes) IssuedTo(claim types.UID) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expireLocked()
	return t.byClaim[claim].pv
}

// Members names the members taken whose new state the cache does not show
// yet; trying them again could only fail.
func (t *Takes) Members() map[string]bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expireLocked()
	out := make(map[string]bool, len(t.byClaim))
	for _, tk := range t.byClaim {
		out[tk.pv] = true
	}
	return out
}

// TakenFor names the members taken for claims of namespace whose new
// state the cache does not show yet.
func (t *Takes) TakenFor(namespace string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expireLocked()
	var out []string
	for _, tk := range t.byClaim {
		if tk.namespace == namespace {
			out = append(out, tk.pv)
		}
	}
	return out
}

// Observe drops the expectation the cache now meets: pv points at its claim.
func (t *Takes) Observe(pv *corev1.PersistentVolume) {
	if pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if tk, ok := t.byClaim[pv.Spec.ClaimRef.UID]; ok && tk.pv == pv.Name {
		delete(t.byClaim, pv.Spec.ClaimRef.UID)
	}
}

// expireLocked forgets takes the cache never showed (the volume was
// deleted, say).
func (t *Takes) expireLocked() {
	now := t.clock.Now()
	for uid, tk := range t.byClaim {
		if now.Sub(tk.at) > expectationTTL {
			delete(t.byClaim, uid)
		}
	}
}

// Pending holds the volumes returned to the library for creation that
// the informer has not shown yet, so that they count against maxVolumes, and
// serialises growth per class, so that maxVolumes holds with several
// workers.
type Pending struct {
	mu      sync.Mutex
	clock   clock.PassiveClock
	growing map[string]*sync.Mutex // by class
	pending map[string]pendingVolume
}

type pendingVolume struct {
	class, node string
	at          time.Time
	// ahead: a member made ahead of any claim (minAvailable).
	ahead bool
	// namespace is that of the claim the volume is made for, "" for one
	// made ahead.
	namespace string
}

// NewPending holds volumes pending on clk.
func NewPending(clk clock.PassiveClock) *Pending {
	return &Pending{clock: clk, growing: map[string]*sync.Mutex{}, pending: map[string]pendingVolume{}}
}

// Reserve counts the volumes of class: cached, the names the cache shows
// with the node each is on ("" for none), and those pending; and holds a
// place for name on node unless that would exceed maxVolumes in the class
// or maxPerNode on node (0: no limit). It returns the class's count and the
// node's. A retry for a name already counted always gets its place back.
// cached is called with the class's growth serialised.
func (v *Pending) Reserve(class, name, node string, maxVolumes, maxPerNode int, cached func() map[string]string) (count, onNode int, ok bool) {
	v.mu.Lock()
	lock, found := v.growing[class]
	if !found {
		lock = &sync.Mutex{}
		v.growing[class] = lock
	}
	v.mu.Unlock()
	lock.Lock()
	defer lock.Unlock()

	names := cached()
	v.mu.Lock()
	defer v.mu.Unlock()
	now := v.clock.Now()
	for n, p := range v.pending {
		_, known := names[n]
		switch {
		case known || now.Sub(p.at) > expectationTTL:
			delete(v.pending, n)
		case p.class == class:
			names[n] = p.node
		}
	}
	for n, on := range names {
		if on == node && node != "" && n != name {
			onNode++
		}
	}
	if _, known := names[name]; known {
		return len(names) - 1, onNode, true
	}
	if maxVolumes > 0 && len(names) >= maxVolumes || maxPerNode > 0 && node != "" && onNode >= maxPerNode {
		return len(names), onNode, false
	}
	v.pending[name] = pendingVolume{class: class, node: node, at: now}
	return len(names), onNode, true
}

// MarkAhead marks the place held for name as a member made ahead.
func (v *Pending) MarkAhead(name string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if p, ok := v.pending[name]; ok {
		p.ahead = true
		v.pending[name] = p
	}
}

// MarkFor marks the place held for name as a volume made for a claim of
// namespace.
func (v *Pending) MarkFor(name, namespace string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if p, ok := v.pending[name]; ok {
		p.namespace = namespace
		v.pending[name] = p
	}
}

// MadeFor names the volumes of class made for claims of namespace whose
// place is still held: the cache may not show them yet.
func (v *Pending) MadeFor(class, namespace string) []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []string
	for name, p := range v.pending {
		if p.class == class && p.namespace == namespace && v.clock.Now().Sub(p.at) <= expectationTTL {
			out = append(out, name)
		}
	}
	return out
}

// AheadInFlight counts, by node ("" for none), the members of class made
// ahead whose volume object cached does not report yet.
func (v *Pending) AheadInFlight(class string, cached func(name string) bool) map[string]int {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := map[string]int{}
	for name, p := range v.pending {
		if p.ahead && p.class == class && !cached(name) && v.clock.Now().Sub(p.at) <= expectationTTL {
			out[p.node]++
		}
	}
	return out
}

// Rename moves the place held for name to the volume named to, which a
// class pool's backing class made for it: counted once, under the name
// the cache will show.
func (v *Pending) Rename(name, to string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if p, ok := v.pending[name]; ok {
		delete(v.pending, name)
		v.pending[to] = p
	}
}

// Unreserve gives up the place of name: its creation failed, or it was
// deleted.
func (v *Pending) Unreserve(name string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.pending, name)
}

// Waiting holds claims that wait, by what they wait for: per class,
// the claims refused because the pool had nothing to give, which a volume
// freed in the class wakes; per volume, the claims that wait for their own
// volume to be released (returning), which its next change wakes.
type Waiting struct {
	mu      sync.Mutex
	byClass map[string]map[types.UID]types.NamespacedName
}

// NewWaiting holds no claim yet.
func NewWaiting() *Waiting {
	return &Waiting{byClass: map[string]map[types.UID]types.NamespacedName{}}
}

// Classes lists the classes that have claims waiting.
func (w *Waiting) Classes() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Sorted(maps.Keys(w.byClass))
}

// Add records claim as waiting for class and reports whether it already
// was: refused before for want of a member.
func (w *Waiting) Add(class string, claim *corev1.PersistentVolumeClaim) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byClass[class] == nil {
		w.byClass[class] = map[types.UID]types.NamespacedName{}
	}
	_, was := w.byClass[class][claim.UID]
	w.byClass[class][claim.UID] = types.NamespacedName{Namespace: claim.Namespace, Name: claim.Name}
	return was
}

// Forget removes the claim of uid from whatever it waits for.
func (w *Waiting) Forget(uid types.UID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for class, claims := range w.byClass {
		delete(claims, uid)
		if len(claims) == 0 {
			delete(w.byClass, class)
		}
	}
}

// Remove removes the claim of uid from those waiting for class.
func (w *Waiting) Remove(class string, uid types.UID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.byClass[class], uid)
	if len(w.byClass[class]) == 0 {
		delete(w.byClass, class)
	}
}

// Still returns the claims waiting for class that live says still wait,
// and forgets the others. live returns the claim as the cache has it, or
// nil when it is gone, has another UID or has a volume.
func (w *Waiting) Still(class string, live func(uid types.UID, key types.NamespacedName) *corev1.PersistentVolumeClaim) []*corev1.PersistentVolumeClaim {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []*corev1.PersistentVolumeClaim
	for uid, key := range w.byClass[class] {
		if c := live(uid, key); c != nil {
			out = append(out, c)
			continue
		}
		delete(w.byClass[class], uid)
	}
	if len(w.byClass[class]) == 0 {
		delete(w.byClass, class)
	}
	return out
}

// Locks has one caller at a time act on a key: a claim, or a namespace's
// share of a class.
type Locks[K comparable] struct {
	mu sync.Mutex
	// held closes each channel when its key is unlocked.
	held map[K]chan struct{}
}

// NewLocks holds no key locked.
func NewLocks[K comparable]() *Locks[K] { return &Locks[K]{held: map[K]chan struct{}{}} }

// Lock waits until no one else holds key, takes it, and returns the
// unlock.
func (l *Locks[K]) Lock(key K) (unlock func()) {
	for {
		l.mu.Lock()
		busy, ok := l.held[key]
		if !ok {
			done := make(chan struct{})
			l.held[key] = done
			l.mu.Unlock()
			return func() {
				l.mu.Lock()
				delete(l.held, key)
				l.mu.Unlock()
				close(done)
			}
		}
		l.mu.Unlock()
		<-busy
	}
}
