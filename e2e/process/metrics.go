package process

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metrics are the metric families of one scrape, by name.
type Metrics map[string]*dto.MetricFamily

// ParseMetrics reads a Prometheus text exposition.
func ParseMetrics(r io.Reader) (Metrics, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parsing metrics: %w", err)
	}
	return families, nil
}

// ScrapeMetrics reads the /metrics that a controller serves at addr.
func ScrapeMetrics(ctx context.Context, addr string) (Metrics, error) {
	code, body, err := Get(ctx, addr, "/metrics")
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("/metrics answered %d", code)
	}
	return ParseMetrics(strings.NewReader(body))
}

// Samples calls f with the labels and value of every sample of the counter,
// gauge or untyped metric name.
func (m Metrics) Samples(name string, f func(labels map[string]string, value float64)) {
	family := m[name]
	if family == nil {
		return
	}
	for _, s := range family.Metric {
		labels := make(map[string]string, len(s.Label))
		for _, l := range s.Label {
			labels[l.GetName()] = l.GetValue()
		}
		switch {
		case s.Counter != nil:
			f(labels, s.Counter.GetValue())
		case s.Gauge != nil:
			f(labels, s.Gauge.GetValue())
		case s.Untyped != nil:
			f(labels, s.Untyped.GetValue())
		}
	}
}

// Sum is the sum of name's samples whose labels include labels: a total
// over the labels not named.
func (m Metrics) Sum(name string, labels map[string]string) float64 {
	sum := 0.0
	m.Samples(name, func(l map[string]string, v float64) {
		for k, want := range labels {
			if l[k] != want {
				return
			}
		}
		sum += v
	})
	return sum
}

// Value is the value of name's sample with exactly labels (none for nil),
// and whether there is one.
func (m Metrics) Value(name string, labels map[string]string) (float64, bool) {
	var (
		value float64
		found bool
	)
	m.Samples(name, func(l map[string]string, v float64) {
		if maps.Equal(l, labels) || len(l) == 0 && len(labels) == 0 {
			value, found = v, true
		}
	})
	return value, found
}
