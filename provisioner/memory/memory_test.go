package memory

import (
	"maps"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"
)

func TestTakes(t *testing.T) {
	clk := testingclock.NewFakePassiveClock(t0())
	tk := NewTakes(clk)
	tk.Expect("u1", "ns-a", "pv-a")
	tk.Expect("u2", "ns-b", "pv-b")
	if got := tk.TakenFor("ns-a"); len(got) != 1 || got[0] != "pv-a" {
		t.Errorf("takenFor(ns-a) = %v, want [pv-a]", got)
	}
	if got := tk.IssuedTo("u1"); got != "pv-a" {
		t.Errorf("issuedTo(u1) = %q, want pv-a", got)
	}
	if m := tk.Members(); !m["pv-a"] || !m["pv-b"] || len(m) != 2 {
		t.Errorf("members = %v", m)
	}
	// The cache shows pv-a pointing at another claim: not this expectation.
	tk.Observe(&corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-a"}, Spec: corev1.PersistentVolumeSpec{ClaimRef: &corev1.ObjectReference{UID: "u9"}}})
	if tk.IssuedTo("u1") != "pv-a" {
		t.Error("an expectation dropped by another claim's volume")
	}
	tk.Observe(&corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-a"}, Spec: corev1.PersistentVolumeSpec{ClaimRef: &corev1.ObjectReference{UID: "u1"}}})
	if tk.IssuedTo("u1") != "" {
		t.Error("an expectation kept once the cache met it")
	}
	clk.SetTime(t0().Add(expectationTTL + time.Second))
	if m := tk.Members(); len(m) != 0 {
		t.Errorf("members past their ttl: %v", m)
	}
	if got := tk.TakenFor("ns-b"); len(got) != 0 {
		t.Errorf("takenFor(ns-b) past its ttl = %v", got)
	}
}

func TestPendingMadeFor(t *testing.T) {
	clk := testingclock.NewFakePassiveClock(t0())
	v := NewPending(clk)
	none := func() map[string]string { return map[string]string{} }
	for _, name := range []string{"for-a", "for-b", "ahead"} {
		if _, _, ok := v.Reserve("pool", name, "", 0, 0, none); !ok {
			t.Fatalf("reserve(%s) refused", name)
		}
	}
	v.MarkFor("for-a", "ns-a")
	v.MarkFor("for-b", "ns-b")
	v.MarkAhead("ahead")
	if got := v.MadeFor("pool", "ns-a"); len(got) != 1 || got[0] != "for-a" {
		t.Errorf("madeFor(pool, ns-a) = %v, want [for-a]", got)
	}
	if got := v.MadeFor("other", "ns-a"); len(got) != 0 {
		t.Errorf("madeFor(other, ns-a) = %v: another class's volume", got)
	}
	v.Rename("for-a", "backed")
	if got := v.MadeFor("pool", "ns-a"); len(got) != 1 || got[0] != "backed" {
		t.Errorf("after a rename, madeFor(pool, ns-a) = %v, want [backed]", got)
	}
	clk.SetTime(t0().Add(expectationTTL + time.Second))
	if got := v.MadeFor("pool", "ns-b"); len(got) != 0 {
		t.Errorf("madeFor past the ttl = %v", got)
	}
}

func TestPendingVolumes(t *testing.T) {
	clk := testingclock.NewFakePassiveClock(t0())
	v := NewPending(clk)
	cached := map[string]string{"old": ""}
	inCache := func() map[string]string { return maps.Clone(cached) }
	if n, _, ok := v.Reserve("pool", "new-1", "", 2, 0, inCache); !ok || n != 1 {
		t.Fatalf("reserve(new-1) = %d, %v; want 1, true", n, ok)
	}
	if n, _, ok := v.Reserve("pool", "new-2", "", 2, 0, inCache); ok || n != 2 {
		t.Fatalf("reserve(new-2) = %d, %v; want 2, false: one cached, one pending", n, ok)
	}
	if n, _, ok := v.Reserve("pool", "new-1", "", 2, 0, inCache); !ok || n != 1 {
		t.Errorf("a retry for new-1 = %d, %v; want its place back", n, ok)
	}
	if _, _, ok := v.Reserve("other", "x", "", 1, 0, func() map[string]string { return map[string]string{} }); !ok {
		t.Error("another class's pending volume counted")
	}
	v.Unreserve("new-1")
	if _, _, ok := v.Reserve("pool", "new-2", "", 2, 0, inCache); !ok {
		t.Error("a place given up is not free")
	}
	clk.SetTime(t0().Add(expectationTTL + time.Second))
	if n, _, ok := v.Reserve("pool", "new-3", "", 2, 0, inCache); !ok || n != 1 {
		t.Errorf("reserve after the pending one expired = %d, %v; want 1, true", n, ok)
	}
}

func TestPendingVolumesPerNode(t *testing.T) {
	v := NewPending(testingclock.NewFakePassiveClock(t0()))
	cached := map[string]string{"a1": "a", "b1": "b"}
	inCache := func() map[string]string { return maps.Clone(cached) }
	for _, tt := range []struct {
		name, node   string
		wantOnNode   int
		wantReserved bool
		why          string
	}{
		{"a2", "a", 1, true, "one cached on a, limit 2"},
		{"a3", "a", 2, false, "one cached and one pending on a"},
		{"b2", "b", 1, true, "node b has room"},
		{"a2", "a", 1, true, "a retry gets its place back"},
		{"c1", "c", 0, false, "the class limit (4) is reached whatever the node"},
	} {
		_, onNode, ok := v.Reserve("pool", tt.name, tt.node, 4, 2, inCache)
		if onNode != tt.wantOnNode || ok != tt.wantReserved {
			t.Errorf("reserve(%s on %s) = %d on node, %v; want %d, %v: %s", tt.name, tt.node, onNode, ok, tt.wantOnNode, tt.wantReserved, tt.why)
		}
	}
	if _, _, ok := v.Reserve("other", "x", "", 0, 1, func() map[string]string { return map[string]string{"y": ""} }); !ok {
		t.Error("a volume on no node counted against a per-node limit")
	}
}

func TestWaitingClaims(t *testing.T) {
	w := NewWaiting()
	claim := func(name string) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("u-" + name)}}
	}
	w.Add("pool", claim("a"))
	w.Add("pool", claim("b"))
	w.Add("other", claim("c"))
	w.Remove("pool", "u-b")
	live := func(uid types.UID, key types.NamespacedName) *corev1.PersistentVolumeClaim {
		if key.Name == "gone" {
			return nil
		}
		return claim(key.Name)
	}
	w.Add("pool", claim("gone"))
	got := w.Still("pool", live)
	if len(got) != 1 || got[0].Name != "a" {
		t.Fatalf("still waiting = %v, want a", got)
	}
	if again := w.Still("pool", live); len(again) != 1 {
		t.Errorf("a waiting claim forgotten when woken: %v", again)
	}
	if len(w.byClass["pool"]) != 1 {
		t.Errorf("the gone claim is remembered: %v", w.byClass["pool"])
	}
}

// A class whose waiting claims are all gone is forgotten with them: the
// waiting gauge lists no class that has none (a deleted class, say).
func TestWaitingClaimsForgetAClassWithNoneLeft(t *testing.T) {
	w := NewWaiting()
	w.Add("deleted", &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "gone", UID: "u-gone"}})
	if got := w.Still("deleted", func(types.UID, types.NamespacedName) *corev1.PersistentVolumeClaim { return nil }); len(got) != 0 {
		t.Fatalf("still waiting = %v, want none", got)
	}
	if got := w.Classes(); len(got) != 0 {
		t.Errorf("classes with claims waiting = %v, want none", got)
	}
}

// A member one worker is taking is passed over by the others until it is
// done with it.
func TestTakesTrying(t *testing.T) {
	tk := NewTakes(testingclock.NewFakePassiveClock(time.Now()))
	if !tk.Try("pv-1") {
		t.Fatal("first try refused")
	}
	if tk.Try("pv-1") {
		t.Error("a member being taken was offered to a second worker")
	}
	if !tk.Try("pv-2") {
		t.Error("another member refused")
	}
	tk.Done("pv-1")
	if !tk.Try("pv-1") {
		t.Error("a member was not offered again once its take was done")
	}
}

func t0() time.Time { return time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC) }
