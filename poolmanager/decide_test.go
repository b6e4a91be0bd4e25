package poolmanager

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/reclaimable/reclaimable/apis/reclaimable/v1alpha1"
	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

const testProvisioner = "vendor/reclaimable"

var (
	t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	t1 = t0.Add(time.Hour)
)

func pool(name string, mutate ...func(*v1alpha1.VolumePool)) *v1alpha1.VolumePool {
	p := &v1alpha1.VolumePool{ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 1}, Spec: v1alpha1.VolumePoolSpec{StorageClassName: "cache"}}
	for _, m := range mutate {
		m(p)
	}
	return p
}

// observed gives the pool a status written for its generation, Ready and
// not Exhausted, with reuseScope scope.
func observed(scope string) func(*v1alpha1.VolumePool) {
	return func(p *v1alpha1.VolumePool) {
		p.Status.ObservedGeneration = p.Generation
		p.Status.ReuseScope = scope
		p.Status.Conditions = []metav1.Condition{
			{Type: ConditionReady, Status: metav1.ConditionTrue, Reason: condReady, LastTransitionTime: metav1.NewTime(t0)},
			{Type: ConditionExhausted, Status: metav1.ConditionFalse, Reason: condNoClaimWaiting, LastTransitionTime: metav1.NewTime(t0)},
		}
	}
}

func class(params map[string]string) *storagev1.StorageClass {
	return &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "cache"}, Provisioner: testProvisioner, Parameters: params}
}

func member(name string, phase corev1.PersistentVolumePhase, mutate ...func(*corev1.PersistentVolume)) *corev1.PersistentVolume {
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{}},
		Spec: corev1.PersistentVolumeSpec{StorageClassName: "cache", PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		Status: corev1.PersistentVolumeStatus{Phase: phase},
	}
	for _, m := range mutate {
		m(pv)
	}
	return pv
}

func claimRef(uid string) func(*corev1.PersistentVolume) {
	return func(pv *corev1.PersistentVolume) {
		pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "ns", Name: "job", UID: types.UID(uid)}
	}
}

func annotate(key, value string) func(*corev1.PersistentVolume) {
	return func(pv *corev1.PersistentVolume) { pv.Annotations[key] = value }
}

func transitioned(at time.Time) func(*corev1.PersistentVolume) {
	return func(pv *corev1.PersistentVolume) { pv.Status.LastPhaseTransitionTime = &metav1.Time{Time: at} }
}

func minAvailable(n int32) func(*v1alpha1.VolumePool) {
	return func(p *v1alpha1.VolumePool) {
		p.Spec.MaxVolumes, p.Spec.MinAvailable = ptr.To[int32](10), ptr.To(n)
	}
}

// aheadMember is a member made ahead of claims, its storage made or not.
func aheadMember(name string, pending bool) *corev1.PersistentVolume {
	pv := member(name, corev1.VolumeAvailable, annotate(wellknown.MadeAhead, "p"))
	pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "kube-system", Name: wellknown.MadeAheadClaim(name)}
	if pending {
		pv.Annotations[wellknown.StoragePending] = "true"
	}
	return pv
}

// A member of every state, counted once each.
func everyState() []*corev1.PersistentVolume {
	return []*corev1.PersistentVolume{
		member("free", corev1.VolumeAvailable, annotate(wellknown.ReleasedAt, t0.Format(time.RFC3339))),
		member("held", corev1.VolumeAvailable, claimRef(""), annotate(wellknown.HeldForNamespace, "ns")),
		member("reserved", corev1.VolumeAvailable, claimRef(""), annotate(wellknown.ReservedUntil, t1.Format(time.RFC3339))),
		member("prebound", corev1.VolumeAvailable, claimRef("")),
		member("bound", corev1.VolumeBound, claimRef("u1"), transitioned(t1)),
		member("binding", corev1.VolumeAvailable, claimRef("u2")),
		member("released", corev1.VolumeReleased, claimRef("u3"), annotate(wellknown.ReleasedAt, t1.Add(-time.Minute).Format(time.RFC3339))),
		member("failed", corev1.VolumeFailed, claimRef("u4")),
		member("scrubbing", corev1.VolumeReleased, claimRef("u5"), annotate(wellknown.Scrub, wellknown.ScrubRequested)),
		member("scrub-failed", corev1.VolumeAvailable, claimRef(""), annotate(wellknown.Scrub, wellknown.ScrubRunning), annotate(wellknown.ScrubFailed, "exit 1")),
	}
}

func TestDecide(t *testing.T) {
	ready := class(map[string]string{"backend": "directory"})
	tests := []struct {
		name string
		v    view
		// want: the status's counts as free/held/reserved/bound/released/total.
		want       [6]int32
		capacity   string
		ready      metav1.ConditionStatus
		readyWhy   string
		exhausted  metav1.ConditionStatus
		events     []string // reasons
		lastIssued *time.Time
		scope      string
		makeAhead  int
		madeAhead  int32
		// scrubbing and scrubFailed: the status's counts.
		scrubbing, scrubFailed int32
	}{
		{
			name: "in force: every state counted once",
			v:    view{pool: pool("p", observed("namespace")), class: ready, members: everyState()},
			want: [6]int32{1, 1, 2, 2, 1, 10}, capacity: "10Gi", scrubbing: 2, scrubFailed: 1, ready: metav1.ConditionTrue, readyWhy: condReady, exhausted: metav1.ConditionFalse,
			lastIssued: &t1, scope: "namespace",
		},
		{
			name: "first status: no event but what is wrong",
			v:    view{pool: pool("p"), class: ready},
			want: [6]int32{}, capacity: "0", ready: metav1.ConditionTrue, readyWhy: condReady, exhausted: metav1.ConditionFalse, scope: "namespace",
		},
		{
			name:  "a second pool for the class: no effect, no members, the owner named",
			v:     view{pool: pool("second", observed("namespace")), owner: pool("first"), class: ready, members: everyState()},
			ready: metav1.ConditionFalse, readyWhy: reasonClassOwnedByOtherPool, exhausted: metav1.ConditionFalse,
			events: []string{reasonClassOwnedByOtherPool}, scope: "namespace",
		},
		{
			name:  "no class",
			v:     view{pool: pool("p")},
			ready: metav1.ConditionFalse, readyWhy: reasonClassNotFound, exhausted: metav1.ConditionFalse, events: []string{reasonClassNotFound},
		},
		{
			name:  "another provisioner's class",
			v:     view{pool: pool("p"), class: &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "cache"}, Provisioner: "other"}},
			ready: metav1.ConditionFalse, readyWhy: reasonClassOfOtherProvisioner, exhausted: metav1.ConditionFalse, events: []string{reasonClassOfOtherProvisioner},
		},
		{
			name: "settings refused, reported once",
			v: view{pool: pool("p", func(p *v1alpha1.VolumePool) {
				p.Status.Conditions = []metav1.Condition{{Type: ConditionReady, Status: metav1.ConditionFalse, Reason: reasonInvalidSettings}}
			}), class: ready, settingsErr: errors.New("maxVolumesPerNode needs the local backend")},
			ready: metav1.ConditionFalse, readyWhy: reasonInvalidSettings, exhausted: metav1.ConditionFalse,
		},
		{
			name: "claims wait: Exhausted, reported as it starts",
			v:    view{pool: pool("p", observed("namespace")), class: ready, members: everyState()[4:5], waiting: 2},
			want: [6]int32{0, 0, 0, 1, 0, 1}, capacity: "1Gi", ready: metav1.ConditionTrue, readyWhy: condReady, exhausted: metav1.ConditionTrue,
			events: []string{reasonPoolExhausted}, lastIssued: &t1, scope: "namespace",
		},
		{
			name: "claims still wait: no second event",
			v: view{pool: pool("p", observed("namespace"), func(p *v1alpha1.VolumePool) {
				meta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{Type: ConditionExhausted, Status: metav1.ConditionTrue, Reason: condClaimsWaiting})
			}), class: ready, waiting: 1},
			capacity: "0", ready: metav1.ConditionTrue, readyWhy: condReady, exhausted: metav1.ConditionTrue, scope: "namespace",
		},
		{
			name: "reuseScope widened to cluster",
			v: view{pool: pool("p", observed("namespace"), func(p *v1alpha1.VolumePool) { p.Spec.ReuseScope = "cluster" }),
				class: ready, members: everyState()[1:2]},
			want: [6]int32{0, 1, 0, 0, 0, 1}, capacity: "1Gi", ready: metav1.ConditionTrue, readyWhy: condReady, exhausted: metav1.ConditionFalse,
			events: []string{reasonReuseScopeWidened}, scope: "cluster",
		},
		{
			name: "a new spec that overrides the class's parameters",
			v: view{pool: pool("p", observed("namespace"), func(p *v1alpha1.VolumePool) {
				p.Generation = 2
				p.Spec.MaxVolumes = ptr.To[int32](80)
			}), class: class(map[string]string{"backend": "directory", "maxVolumes": "50"})},
			capacity: "0", ready: metav1.ConditionTrue, readyWhy: condReady, exhausted: metav1.ConditionFalse,
			events: []string{reasonSettingsOverrideClass}, scope: "namespace",
		},
		{
			name: "the same spec again: no second event",
			v: view{pool: pool("p", observed("namespace"), func(p *v1alpha1.VolumePool) { p.Spec.MaxVolumes = ptr.To[int32](80) }),
				class: class(map[string]string{"backend": "directory", "maxVolumes": "50"})},
			capacity: "0", ready: metav1.ConditionTrue, readyWhy: condReady, exhausted: metav1.ConditionFalse, scope: "namespace",
		},
		{
			name: "minAvailable: three short, one being made, one waiting for its storage",
			v: view{pool: pool("p", observed("namespace"), minAvailable(4)), class: ready, making: 1,
				members: []*corev1.PersistentVolume{aheadMember("a1", false), aheadMember("a2", true)}},
			want: [6]int32{1, 0, 0, 0, 0, 2}, capacity: "2Gi", ready: metav1.ConditionFalse, readyWhy: condBelowMinAvailable, exhausted: metav1.ConditionFalse,
			scope: "namespace", makeAhead: 1, madeAhead: 2,
		},
		{
			name: "minAvailable short at the maximum: none to make",
			v: view{pool: pool("p", observed("namespace"), minAvailable(2), func(p *v1alpha1.VolumePool) { p.Spec.MaxVolumes = ptr.To[int32](2) }), class: ready,
				members: []*corev1.PersistentVolume{member("b1", corev1.VolumeBound, claimRef("u1")), member("b2", corev1.VolumeBound, claimRef("u2"))}},
			want: [6]int32{0, 0, 0, 2, 0, 2}, capacity: "2Gi", ready: metav1.ConditionFalse, readyWhy: condBelowMinAvailable, exhausted: metav1.ConditionFalse,
			scope: "namespace", makeAhead: 0,
		},
		{
			name: "minAvailable met",
			v: view{pool: pool("p", observed("namespace"), minAvailable(1)), class: ready,
				members: []*corev1.PersistentVolume{aheadMember("a1", false), member("bound", corev1.VolumeBound, claimRef("u1"), annotate(wellknown.MadeAhead, "p"))}},
			want: [6]int32{1, 0, 0, 1, 0, 2}, capacity: "2Gi", ready: metav1.ConditionTrue, readyWhy: condReady, exhausted: metav1.ConditionFalse,
			scope: "namespace", madeAhead: 1,
		},
		{
			name:     "minAvailable a static pool cannot keep",
			v:        view{pool: pool("p", observed("namespace"), minAvailable(2)), class: ready, aheadErr: errors.New("the static backend makes no volumes")},
			capacity: "0", ready: metav1.ConditionFalse, readyWhy: reasonMinAvailableRefused, exhausted: metav1.ConditionFalse,
			events: []string{reasonMinAvailableRefused}, scope: "namespace",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.v.provisioner, tt.v.now = testProvisioner, metav1.NewTime(t1)
			r := decide(tt.v)
			s := r.status
			if got := [6]int32{s.Free, s.Held, s.Reserved, s.Bound, s.Released, s.Total}; got != tt.want {
				t.Errorf("free/held/reserved/bound/released/total = %v, want %v", got, tt.want)
			}
			if tt.capacity == "" && s.Capacity != nil || tt.capacity != "" && (s.Capacity == nil || s.Capacity.Cmp(resource.MustParse(tt.capacity)) != 0) {
				t.Errorf("capacity = %v, want %q", s.Capacity, tt.capacity)
			}
			if c := meta.FindStatusCondition(s.Conditions, ConditionReady); c == nil || c.Status != tt.ready || c.Reason != tt.readyWhy {
				t.Errorf("Ready = %+v, want %s %s", c, tt.ready, tt.readyWhy)
			} else if c.Status == metav1.ConditionFalse && !strings.Contains(c.Message, "cache") {
				t.Errorf("Ready message %q does not name the class", c.Message)
			}
			if c := meta.FindStatusCondition(s.Conditions, ConditionExhausted); c == nil || c.Status != tt.exhausted {
				t.Errorf("Exhausted = %+v, want %s", c, tt.exhausted)
			}
			var reasons []string
			for _, e := range r.events {
				reasons = append(reasons, e.Reason)
			}
			if strings.Join(reasons, ",") != strings.Join(tt.events, ",") {
				t.Errorf("events %v, want %v", reasons, tt.events)
			}
			if tt.lastIssued != nil && (s.LastIssued == nil || !s.LastIssued.Time.Equal(*tt.lastIssued)) {
				t.Errorf("lastIssued = %v, want %v", s.LastIssued, tt.lastIssued)
			}
			if s.Scrubbing != tt.scrubbing || s.ScrubFailed != tt.scrubFailed {
				t.Errorf("scrubbing %d, scrubFailed %d; want %d, %d", s.Scrubbing, s.ScrubFailed, tt.scrubbing, tt.scrubFailed)
			}
			if r.makeAhead != tt.makeAhead || s.MadeAhead != tt.madeAhead {
				t.Errorf("makeAhead %d, status madeAhead %d; want %d, %d", r.makeAhead, s.MadeAhead, tt.makeAhead, tt.madeAhead)
			}
			if s.ReuseScope != tt.scope {
				t.Errorf("reuseScope = %q, want %q", s.ReuseScope, tt.scope)
			}
			if s.ObservedGeneration != tt.v.pool.Generation {
				t.Errorf("observedGeneration = %d, want %d", s.ObservedGeneration, tt.v.pool.Generation)
			}
			var sum int
			for _, n := range r.counts {
				sum += n
			}
			if int32(sum) != s.Total {
				t.Errorf("the gauge's counts sum to %d, the status's total is %d", sum, s.Total)
			}
		})
	}
}

// The last issue and release times only move forward: a member bound
// earlier than the pool last issued one, or released again, leaves the
// later time in place.
func TestDecideKeepsTheLatestTimes(t *testing.T) {
	p := pool("p", observed("namespace"), func(p *v1alpha1.VolumePool) {
		p.Status.LastIssued = &metav1.Time{Time: t1}
		p.Status.LastReleased = &metav1.Time{Time: t1}
	})
	members := []*corev1.PersistentVolume{
		member("bound", corev1.VolumeBound, claimRef("u1"), transitioned(t0)),
		member("free", corev1.VolumeAvailable, annotate(wellknown.ReleasedAt, t0.Format(time.RFC3339))),
	}
	s := decide(view{pool: p, class: class(nil), provisioner: testProvisioner, members: members, now: metav1.NewTime(t1)}).status
	if !s.LastIssued.Time.Equal(t1) || !s.LastReleased.Time.Equal(t1) {
		t.Errorf("lastIssued %v, lastReleased %v, want both %v", s.LastIssued, s.LastReleased, t1)
	}
	if s.Bound != 1 || s.Free != 1 || pools.StateOf(members[0]) != pools.StateBound {
		t.Errorf("status %+v", s)
	}
}

// Installations that share a cluster never undo each other's status
// writes: each keeps the pools of its own classes, and tells a pool of
// another provisioner's class so only while nobody has.
func TestManages(t *testing.T) {
	ours, theirs := class(nil), &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "cache"}, Provisioner: "other"}
	old := func(p *v1alpha1.VolumePool) { p.CreationTimestamp = metav1.NewTime(t0) }
	withReady := func(status metav1.ConditionStatus, reason string) *v1alpha1.VolumePool {
		return pool("p", old, func(p *v1alpha1.VolumePool) {
			p.Status.Conditions = []metav1.Condition{{Type: ConditionReady, Status: status, Reason: reason}}
		})
	}
	for _, tt := range []struct {
		name  string
		pool  *v1alpha1.VolumePool
		class *storagev1.StorageClass
		want  bool
	}{
		{"our class", withReady(metav1.ConditionTrue, condReady), ours, true},
		{"our class, told otherwise before", withReady(metav1.ConditionFalse, reasonClassOfOtherProvisioner), ours, true},
		{"no class: the same status from everyone", withReady(metav1.ConditionTrue, condReady), nil, true},
		{"another provisioner's class, no status yet", pool("p", old), theirs, true},
		{"another provisioner's class, a new pool: left to its own installation first", pool("p", func(p *v1alpha1.VolumePool) { p.CreationTimestamp = metav1.NewTime(t1.Add(-time.Minute)) }), theirs, false},
		{"another provisioner's class, its class was missing", withReady(metav1.ConditionFalse, reasonClassNotFound), theirs, true},
		{"another provisioner's class, already told", withReady(metav1.ConditionFalse, reasonClassOfOtherProvisioner), theirs, false},
		{"another installation's pool", withReady(metav1.ConditionTrue, condReady), theirs, false},
		{"another installation's second pool", withReady(metav1.ConditionFalse, reasonClassOwnedByOtherPool), theirs, false},
	} {
		if got := manages(tt.pool, tt.class, testProvisioner, t1); got != tt.want {
			t.Errorf("%s: manages = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// The status says the maximum in force, for kubectl get vpool's Max
// column: the pool's, else its class's parameter, else none.
func TestDecideSaysTheMaximumInForce(t *testing.T) {
	for _, tt := range []struct {
		name  string
		pool  *v1alpha1.VolumePool
		class *storagev1.StorageClass
		want  *int32
	}{
		{"the pool's", pool("p", func(p *v1alpha1.VolumePool) { p.Spec.MaxVolumes = ptr.To[int32](7) }), class(map[string]string{"backend": "directory", wellknown.MaxVolumes: "3"}), ptr.To[int32](7)},
		{"the class's", pool("p"), class(map[string]string{"backend": "directory", wellknown.MaxVolumes: "3"}), ptr.To[int32](3)},
		{"none", pool("p"), class(map[string]string{"backend": "directory"}), nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := decide(view{pool: tt.pool, owner: tt.pool, class: tt.class, provisioner: testProvisioner, now: metav1.NewTime(t1)})
			if got := r.status.MaxVolumes; (got == nil) != (tt.want == nil) || got != nil && *got != *tt.want {
				t.Errorf("maxVolumes %v, want %v", ptr.Deref(got, -1), ptr.Deref(tt.want, -1))
			}
		})
	}
}
