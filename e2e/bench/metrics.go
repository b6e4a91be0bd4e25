package bench

import (
	"slices"
	"strconv"
	"strings"

	"github.com/reclaimable/reclaimable/e2e/process"
)

// requestMetric is the counter every reclaimable process keeps of the
// requests it sends to the API server.
const requestMetric = "reclaimable_api_requests_total"

// RequestKey identifies one series of requestMetric.
type RequestKey struct {
	Verb, Resource, Code string
}

// Failed reports whether the request was refused or never answered.
func (k RequestKey) Failed() bool {
	if k.Code == "error" {
		return true
	}
	code, err := strconv.Atoi(k.Code)
	return err != nil || code >= 400
}

// Write reports whether the verb changes something.
func (k RequestKey) Write() bool {
	switch k.Verb {
	case "create", "update", "patch", "delete":
		return true
	}
	return false
}

// Background reports whether the request is independent of the cycles:
// leader-election renewals (paced by time) and the informers' lists and
// watches (paced by the API server's watch timeouts).
func (k RequestKey) Background() bool {
	return k.Resource == "leases" || k.Verb == "list" || k.Verb == "watch"
}

// Requests are request counts by series.
type Requests map[RequestKey]float64

// ParseRequests reads requestMetric from a Prometheus text exposition.
func ParseRequests(text string) (Requests, error) {
	m, err := process.ParseMetrics(strings.NewReader(text))
	if err != nil {
		return nil, err
	}
	out := Requests{}
	m.Samples(requestMetric, func(labels map[string]string, v float64) {
		out[RequestKey{Verb: labels["verb"], Resource: labels["resource"], Code: labels["code"]}] += v
	})
	return out, nil
}

// Sub returns r minus before, series by series; series that did not move
// are left out. A counter that went down (the process restarted) counts
// from zero.
func (r Requests) Sub(before Requests) Requests {
	out := Requests{}
	for k, v := range r {
		d := v - before[k]
		if d < 0 {
			d = v
		}
		if d != 0 {
			out[k] = d
		}
	}
	return out
}

// Add returns the sum of r and o.
func (r Requests) Add(o Requests) Requests {
	out := Requests{}
	for k, v := range r {
		out[k] += v
	}
	for k, v := range o {
		out[k] += v
	}
	return out
}

// CostRow is one line of the API cost table.
type CostRow struct {
	Controller string  `json:"controller"`
	Verb       string  `json:"verb"`
	Resource   string  `json:"resource"`
	Total      float64 `json:"total"`
	PerCycle   float64 `json:"per_cycle"`
	// Failed counts the requests answered with a code >= 400 or not at all,
	// by code.
	Failed map[string]float64 `json:"failed,omitempty"`
}

// CostRows groups the requests of each controller by verb and resource,
// divides them by the number of cycles, and sorts them for reading:
// controller, then the cycle's requests before the background ones.
func CostRows(byController map[string]Requests, cycles int) []CostRow {
	type rk struct{ c, verb, res string }
	rows := map[rk]*CostRow{}
	for c, reqs := range byController {
		for k, v := range reqs {
			key := rk{c, k.Verb, k.Resource}
			row := rows[key]
			if row == nil {
				row = &CostRow{Controller: c, Verb: k.Verb, Resource: k.Resource}
				rows[key] = row
			}
			row.Total += v
			if k.Failed() {
				if row.Failed == nil {
					row.Failed = map[string]float64{}
				}
				row.Failed[k.Code] += v
			}
		}
	}
	out := make([]CostRow, 0, len(rows))
	for _, r := range rows {
		if cycles > 0 {
			r.PerCycle = r.Total / float64(cycles)
		}
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b CostRow) int {
		if c := strings.Compare(a.Controller, b.Controller); c != 0 {
			return c
		}
		ab, bb := RequestKey{Verb: a.Verb, Resource: a.Resource}.Background(), RequestKey{Verb: b.Verb, Resource: b.Resource}.Background()
		if ab != bb {
			if ab {
				return 1
			}
			return -1
		}
		if c := strings.Compare(a.Resource, b.Resource); c != 0 {
			return c
		}
		return strings.Compare(a.Verb, b.Verb)
	})
	return out
}

// CycleCost sums what the cycles cost: every request except the background
// ones, and the failed writes among them.
func CycleCost(byController map[string]Requests) (requests, failedWrites float64) {
	for _, reqs := range byController {
		for k, v := range reqs {
			if k.Background() {
				continue
			}
			requests += v
			if k.Write() && k.Failed() {
				failedWrites += v
			}
		}
	}
	return requests, failedWrites
}
