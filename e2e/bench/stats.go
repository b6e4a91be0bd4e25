package bench

import (
	"math"
	"slices"
	"time"
)

// Summary describes a set of durations by its percentiles, in milliseconds
// so that the JSON report reads without unit conversions.
type Summary struct {
	N     int     `json:"n"`
	P50ms float64 `json:"p50_ms"`
	P95ms float64 `json:"p95_ms"`
	P99ms float64 `json:"p99_ms"`
	MaxMs float64 `json:"max_ms"`
}

// Percentile returns the nearest-rank percentile p (0 < p <= 100) of
// sorted: the smallest value that at least p% of the values do not exceed.
// Nearest rank never interpolates, so every figure reported is a duration
// that was actually measured.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = max(1, min(rank, len(sorted)))
	return sorted[rank-1]
}

// Summarize sorts a copy of ds and returns its percentiles.
func Summarize(ds []time.Duration) Summary {
	if len(ds) == 0 {
		return Summary{}
	}
	sorted := slices.Clone(ds)
	slices.Sort(sorted)
	return Summary{
		N:     len(sorted),
		P50ms: ms(Percentile(sorted, 50)),
		P95ms: ms(Percentile(sorted, 95)),
		P99ms: ms(Percentile(sorted, 99)),
		MaxMs: ms(sorted[len(sorted)-1]),
	}
}

func ms(d time.Duration) float64 {
	return math.Round(float64(d)/float64(time.Microsecond)) / 1000
}
