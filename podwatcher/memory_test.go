package podwatcher

import (
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

func TestExpectations(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	e := newExpectations(clk)
	if !e.send("ns/a") || e.send("ns/a") {
		t.Fatal("a second create of ns/a may be sent while the first is expected")
	}
	e.failed("ns/a")
	if !e.send("ns/a") {
		t.Fatal("a refused create blocks the next one")
	}
	if e.created("ns/a") {
		t.Error("created before the API server answered")
	}
	e.confirm("ns/a")
	if !e.created("ns/a") {
		t.Error("not created after the API server answered")
	}
	e.observed("ns/a")
	if e.created("ns/a") || !e.send("ns/a") {
		t.Error("still expected once the cache showed the claim")
	}
	e.confirm("ns/a")
	clk.Step(expectationTTL + time.Second)
	if e.created("ns/a") || !e.send("ns/a") {
		t.Error("an expectation outlived its ttl")
	}
}

func TestGoneOwners(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := testingclock.NewFakeClock(t0)
	g := newGoneOwners(clk, time.Minute)
	if _, ok := g.goneSince("u"); ok {
		t.Fatal("gone before it was marked")
	}
	if got := g.mark("u"); !got.Equal(t0) {
		t.Errorf("mark = %s, want %s", got, t0)
	}
	clk.Step(10 * time.Second)
	if got := g.mark("u"); !got.Equal(t0) {
		t.Errorf("marked again: since %s, want the first time %s", got, t0)
	}
	if since, ok := g.goneSince("u"); !ok || !since.Equal(t0) {
		t.Errorf("goneSince = %s, %v", since, ok)
	}
	clk.Step(time.Minute)
	if _, ok := g.goneSince("u"); ok {
		t.Error("remembered past its ttl")
	}
}

func TestUIDSet(t *testing.T) {
	s := newUIDSet()
	if !s.add("u") || s.add("u") {
		t.Error("a UID counted twice")
	}
	s.forget("u")
	if !s.add("u") {
		t.Error("a forgotten UID is not new")
	}
}

func TestOwnerMemories(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := newOwnerMemories()
	if !m.firstReport("u", "R", "cache", "msg") || m.firstReport("u", "R", "cache", "msg") {
		t.Error("a problem reported twice")
	}
	if !m.firstReport("u", "R", "cache", "other msg") || !m.firstReport("v", "R", "cache", "msg") {
		t.Error("another problem, or another owner's, taken for one reported")
	}
	req := claimRequest{Volume: "cache", ClaimName: "c", Source: "v1"}
	if !m.mayCreate("u", req, t0, time.Minute) {
		t.Error("nothing known, yet no create")
	}
	m.foreignFound("u", "c", t0)
	if m.mayCreate("u", req, t0.Add(30*time.Second), time.Minute) || !m.mayCreate("u", req, t0.Add(time.Minute), time.Minute) {
		t.Error("a claim found someone else's is not looked at again once per recheck period")
	}
	m.refusedTemplate("u", "cache", "v1")
	if m.mayCreate("u", req, t0.Add(time.Hour), time.Minute) {
		t.Error("a refused template sent again")
	}
	req.Source = "v2"
	if !m.mayCreate("u", req, t0.Add(time.Hour), time.Minute) {
		t.Error("a changed template not sent")
	}
	m.forget("u")
	if m.len() != 1 {
		t.Errorf("%d owners remembered, want only v", m.len())
	}
}
