package bench

import (
	"bufio"
	"fmt"
	"slices"
	"strconv"
	"strings"
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
	out := Requests{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, requestMetric+"{")
		if !ok {
			continue
		}
		end := strings.LastIndexByte(rest, '}')
		if end < 0 {
			return nil, fmt.Errorf("malformed series %q", line)
		}
		labels, err := parseLabels(rest[:end])
		if err != nil {
			return nil, fmt.Errorf("malformed series %q: %w", line, err)
		}
		fields := strings.Fields(rest[end+1:])
		if len(fields) == 0 {
			return nil, fmt.Errorf("series without a value: %q", line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return nil, fmt.Errorf("series %q: %w", line, err)
		}
		out[RequestKey{Verb: labels["verb"], Resource: labels["resource"], Code: labels["code"]}] += v
	}
	return out, sc.Err()
}

// parseLabels reads `a="x",b="y"` with the escapes of the text format.
func parseLabels(s string) (map[string]string, error) {
	labels := map[string]string{}
	for len(s) > 0 {
		eq := strings.IndexByte(s, '=')
		if eq < 0 || eq+1 >= len(s) || s[eq+1] != '"' {
			return nil, fmt.Errorf("label without a quoted value in %q", s)
		}
		name := strings.TrimSpace(s[:eq])
		var val strings.Builder
		i := eq + 2
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] == '\\' && i+1 < len(s) {
				i++
				switch s[i] {
				case 'n':
					val.WriteByte('\n')
				default:
					val.WriteByte(s[i])
				}
				continue
			}
			val.WriteByte(s[i])
		}
		if i >= len(s) {
			return nil, fmt.Errorf("unterminated value in %q", s)
		}
		labels[name] = val.String()
		s = strings.TrimPrefix(strings.TrimSpace(s[i+1:]), ",")
	}
	return labels, nil
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
