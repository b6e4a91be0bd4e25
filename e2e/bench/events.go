package bench

import (
	"context"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// EventRow counts the events one controller recorded with one reason.
type EventRow struct {
	Component string  `json:"component"`
	Reason    string  `json:"reason"`
	Total     float64 `json:"total"`
	PerCycle  float64 `json:"per_cycle"`
}

// ourComponent reports whether an event was recorded by our controllers:
// our own recorders ("reclaimable-<controller>"), or the provisioner
// library's, whose component is "<provisioner name>_<host>_<uuid>" (named
// here after the provisioner alone, so that replicas add up).
func ourComponent(e *corev1.Event) (string, bool) {
	c := e.Source.Component
	if c == "" {
		c = e.ReportingController
	}
	if c == provisionerName || strings.HasPrefix(c, provisionerName+"_") {
		return provisionerName + " (library)", true
	}
	return c, strings.HasPrefix(c, "reclaimable-")
}

// eventCounts sums the occurrences (an event repeated is counted with its
// count) of our controllers' events by component and reason.
func (b *bench) eventCounts(ctx context.Context) (map[[2]string]float64, error) {
	list, err := b.client.CoreV1().Events("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[[2]string]float64{}
	for i := range list.Items {
		e := &list.Items[i]
		comp, ok := ourComponent(e)
		if !ok {
			continue
		}
		out[[2]string{comp, e.Reason}] += float64(max(e.Count, 1))
	}
	return out, nil
}

// EventRows is the difference of two eventCounts, per cycle.
func EventRows(after, before map[[2]string]float64, cycles int) []EventRow {
	var rows []EventRow
	for k, v := range after {
		d := v - before[k]
		if d <= 0 {
			continue
		}
		r := EventRow{Component: k[0], Reason: k[1], Total: d}
		if cycles > 0 {
			r.PerCycle = d / float64(cycles)
		}
		rows = append(rows, r)
	}
	slices.SortFunc(rows, func(a, b EventRow) int {
		if c := strings.Compare(a.Component, b.Component); c != 0 {
			return c
		}
		return strings.Compare(a.Reason, b.Reason)
	})
	return rows
}
