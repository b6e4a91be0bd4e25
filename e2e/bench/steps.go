package bench

import "time"

// The steps of the cycle, as the report names them.
const (
	StepPodToClaim      = "pod created -> claim created"
	StepBoundHit        = "claim created -> Bound, pool hit"
	StepBoundMiss       = "claim created -> Bound, pool miss"
	StepDeletedToGone   = "pod deleted -> claim gone"
	StepGoneToReleased  = "claim gone -> PV Released"
	StepReleasedToAvail = "PV Released -> Available"
	StepGoneToAvailable = "claim gone -> PV Available"
	StepWhole           = "whole cycle"
)

// Steps turns the cycles' moments into the latency table: ours against the
// floor's matching step. The floor always binds an Available volume, so its
// one binding step is what both pool hits and misses are compared with.
func Steps(ours, floor []cycleTimes) []Step {
	var (
		podToClaim, hit, miss, delGone, goneRel, relAvail, goneAvail, whole []time.Duration
		fBound, fDelGone, fGoneRel, fRelAvail, fGoneAvail, fWhole           []time.Duration
	)
	for _, t := range ours {
		c := t.claim
		podToClaim = append(podToClaim, c.created.Sub(t.ownerCreated))
		if c.hit {
			hit = append(hit, c.bound.Sub(c.created))
		} else {
			miss = append(miss, c.bound.Sub(c.created))
		}
		delGone = append(delGone, c.gone.Sub(t.ownerDeleted))
		goneAvail = append(goneAvail, c.available.Sub(c.gone))
		if !c.released.IsZero() {
			goneRel = append(goneRel, c.released.Sub(c.gone))
			relAvail = append(relAvail, c.available.Sub(c.released))
		}
		whole = append(whole, c.available.Sub(t.start))
	}
	for _, t := range floor {
		c := t.claim
		fBound = append(fBound, c.bound.Sub(c.created))
		fDelGone = append(fDelGone, c.gone.Sub(t.ownerDeleted))
		fGoneAvail = append(fGoneAvail, c.available.Sub(c.gone))
		if !c.released.IsZero() {
			fGoneRel = append(fGoneRel, c.released.Sub(c.gone))
			fRelAvail = append(fRelAvail, c.available.Sub(c.released))
		}
		fWhole = append(fWhole, c.available.Sub(t.start))
	}
	withFloor := func(name string, ds []time.Duration, floorName string, fds []time.Duration) Step {
		s := Step{Name: name, Ours: Summarize(ds), FloorName: floorName}
		if len(floor) > 0 {
			f := Summarize(fds)
			s.Floor = &f
		}
		return s
	}
	return []Step{
		{Name: StepPodToClaim, Ours: Summarize(podToClaim)},
		withFloor(StepBoundHit, hit, "claim created -> Bound to an Available PV", fBound),
		withFloor(StepBoundMiss, miss, "claim created -> Bound to an Available PV", fBound),
		withFloor(StepDeletedToGone, delGone, "claim deleted -> gone", fDelGone),
		withFloor(StepGoneToReleased, goneRel, "claim gone -> PV Released", fGoneRel),
		withFloor(StepReleasedToAvail, relAvail, "Released -> claimRef cleared -> Available", fRelAvail),
		withFloor(StepGoneToAvailable, goneAvail, "claim gone -> PV Available", fGoneAvail),
		withFloor(StepWhole, whole, "whole cycle", fWhole),
	}
}
