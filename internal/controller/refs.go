package controller

import (
	"slices"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// Refs finds the objects of an informer by a value almost every object has
// alone: the claim a pod mounts, the owner UID of a claim, the claim a
// volume is bound to. client-go's indexes keep a set of keys per value, a
// map of its own, which for a value one object has costs more than that
// object's trimmed metadata: with tens of thousands of objects, such an
// index is a second cache. Refs keeps one name per value, sharing the
// object's own strings, and a list only for the rare value several objects
// share.
//
// It is kept by an event handler of the informer, so it follows the cache as
// the handlers do: a handler of another informer may consult it a moment
// before it shows an object the cache already has, as with any event not
// yet delivered. Indexes whose values many objects share (a class, a phase)
// or that few objects have cost little in client-go's form and stay there.
type Refs[V comparable] struct {
	valuesOf func(obj any) []V
	synced   cache.InformerSynced
	// then, if set, sees each object added or updated once Refs shows it.
	then func(obj any)

	mu   sync.RWMutex
	one  map[V]cache.ObjectName
	more map[V][]cache.ObjectName
}

// RefsOf indexes inf's objects by valuesOf, which returns nothing for an
// object it does not index (one of another type among them).
func RefsOf[V comparable](inf cache.SharedInformer, valuesOf func(obj any) []V) (*Refs[V], error) {
	return RefsOfThen(inf, valuesOf, nil)
}

// RefsOfThen is RefsOf, calling then (unless nil) with each object added
// or updated once Refs shows it: for a record of one's own writes that may be dropped
// only when Refs has taken over. Another handler of inf runs on a goroutine
// of its own and may see the object before Refs does.
func RefsOfThen[V comparable](inf cache.SharedInformer, valuesOf func(obj any) []V, then func(obj any)) (*Refs[V], error) {
	r := NewRefs(valuesOf)
	r.then = then
	reg, err := inf.AddEventHandler(r)
	if err != nil {
		return nil, err
	}
	r.synced = reg.HasSynced
	return r, nil
}

// NewRefs indexes by valuesOf the objects shown to its handler methods:
// RefsOf's, or a test's store.
func NewRefs[V comparable](valuesOf func(obj any) []V) *Refs[V] {
	return &Refs[V]{valuesOf: valuesOf, one: map[V]cache.ObjectName{}, more: map[V][]cache.ObjectName{}}
}

// HasSynced reports whether Refs has every object of the informer's first
// list: wait for it, as for the informer, before trusting an absence.
func (r *Refs[V]) HasSynced() bool { return r.synced == nil || r.synced() }

// Get returns the names of the objects with value v.
func (r *Refs[V]) Get(v V) []cache.ObjectName {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if n, ok := r.one[v]; ok {
		return []cache.ObjectName{n}
	}
	return slices.Clone(r.more[v])
}

// Values returns every value some object has.
func (r *Refs[V]) Values() []V {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]V, 0, len(r.one)+len(r.more))
	for v := range r.one {
		out = append(out, v)
	}
	for v := range r.more {
		out = append(out, v)
	}
	return out
}

// OnAdd indexes obj: Refs is the informer's event handler (and a test's
// way to show it an object without running an informer).
func (r *Refs[V]) OnAdd(obj any, _ bool) { r.update(nil, obj) }

// OnUpdate moves obj from the values of old to its own.
func (r *Refs[V]) OnUpdate(old, obj any) { r.update(old, obj) }

// OnDelete forgets obj, which may come as a tombstone with its last state.
func (r *Refs[V]) OnDelete(obj any) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	r.update(obj, nil)
}

// update moves an object from the values of old to those of cur; either
// may be nil (added, deleted).
func (r *Refs[V]) update(old, cur any) {
	r.move(old, cur)
	if r.then != nil && cur != nil {
		r.then(cur)
	}
}

func (r *Refs[V]) move(old, cur any) {
	var was, is []V
	var name cache.ObjectName
	if old != nil {
		was = r.valuesOf(old)
		name = nameOf(old)
	}
	if cur != nil {
		is = r.valuesOf(cur)
		name = nameOf(cur)
	}
	if len(was) == 0 && len(is) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, v := range was {
		if !slices.Contains(is, v) {
			r.remove(v, name)
		}
	}
	for _, v := range is {
		r.add(v, name)
	}
}

func nameOf(obj any) cache.ObjectName {
	if m, ok := obj.(metav1.Object); ok {
		return cache.ObjectName{Namespace: m.GetNamespace(), Name: m.GetName()}
	}
	return cache.ObjectName{}
}

func (r *Refs[V]) add(v V, name cache.ObjectName) {
	if n, ok := r.one[v]; ok {
		if n == name {
			return
		}
		delete(r.one, v)
		r.more[v] = []cache.ObjectName{n, name}
		return
	}
	if names, ok := r.more[v]; ok {
		if !slices.Contains(names, name) {
			r.more[v] = append(names, name)
		}
		return
	}
	r.one[v] = name
}

func (r *Refs[V]) remove(v V, name cache.ObjectName) {
	if n, ok := r.one[v]; ok {
		if n == name {
			delete(r.one, v)
		}
		return
	}
	names := slices.DeleteFunc(slices.Clone(r.more[v]), func(n cache.ObjectName) bool { return n == name })
	switch len(names) {
	case 0:
		delete(r.more, v)
	case 1:
		delete(r.more, v)
		r.one[v] = names[0]
	default:
		r.more[v] = names
	}
}
