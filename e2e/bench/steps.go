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

// stepDurations are a set of cycles' durations, step by step.
type stepDurations struct {
	podToClaim, bound, hit, miss, delGone, goneRel, relAvail, goneAvail, whole []time.Duration
}

func durations(cycles []cycleTimes) stepDurations {
	var d stepDurations
	for _, t := range cycles {
		c := t.claim
		d.podToClaim = append(d.podToClaim, c.created.Sub(t.ownerCreated))
		d.bound = append(d.bound, c.bound.Sub(c.created))
		if c.hit {
			d.hit = append(d.hit, c.bound.Sub(c.created))
		} else {
			d.miss = append(d.miss, c.bound.Sub(c.created))
		}
		d.delGone = append(d.delGone, c.gone.Sub(t.ownerDeleted))
		d.goneAvail = append(d.goneAvail, c.available.Sub(c.gone))
		if !c.released.IsZero() {
			d.goneRel = append(d.goneRel, c.released.Sub(c.gone))
			d.relAvail = append(d.relAvail, c.available.Sub(c.released))
		}
		d.whole = append(d.whole, c.available.Sub(t.start))
	}
	return d
}

// Steps turns the cycles' moments into the latency table: ours against the
// floor's and the pod floor's matching steps. The floors always bind an
// Available volume, so their one binding step is what both pool hits and
// misses are compared with. The floor has no pod, so nothing to set
// against "pod created -> claim created"; the pod floor has: its claim is
// created right after its pod. Empty floor or podFloor leave theirs out.
func Steps(ours, floor, podFloor []cycleTimes) []Step {
	o, f, p := durations(ours), durations(floor), durations(podFloor)
	const (
		bindName  = "claim created -> Bound to an Available PV"
		availName = "Released -> claimRef cleared -> Available"
	)
	step := func(name string, ds []time.Duration, floorName string, fds []time.Duration, podFloorName string, pds []time.Duration) Step {
		s := Step{Name: name, Ours: Summarize(ds)}
		if floorName != "" && len(floor) > 0 {
			sum := Summarize(fds)
			s.FloorName, s.Floor = floorName, &sum
		}
		if len(podFloor) > 0 {
			sum := Summarize(pds)
			s.PodFloorName, s.PodFloor = podFloorName, &sum
		}
		return s
	}
	return []Step{
		step(StepPodToClaim, o.podToClaim, "", nil, "pod created -> claim created by the benchmark", p.podToClaim),
		step(StepBoundHit, o.hit, bindName, f.bound, bindName, p.bound),
		step(StepBoundMiss, o.miss, bindName, f.bound, bindName, p.bound),
		step(StepDeletedToGone, o.delGone, "claim deleted -> gone", f.delGone, "pod deleted, claim deleted -> gone", p.delGone),
		step(StepGoneToReleased, o.goneRel, "claim gone -> PV Released", f.goneRel, StepGoneToReleased, p.goneRel),
		step(StepReleasedToAvail, o.relAvail, availName, f.relAvail, availName, p.relAvail),
		step(StepGoneToAvailable, o.goneAvail, "claim gone -> PV Available", f.goneAvail, StepGoneToAvailable, p.goneAvail),
		step(StepWhole, o.whole, "whole cycle", f.whole, StepWhole, p.whole),
	}
}
