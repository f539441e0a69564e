package workload

import (
	"slices"
	"time"
)

// Latency summarises the round-trip times of one run, in nanoseconds.
// Percentiles are nearest-rank: P99 is the smallest time that at least
// 99 % of the round trips did not exceed.
type Latency struct {
	Samples int   `json:"samples"` // round trips recorded
	P50NS   int64 `json:"p50_ns"`  // median round trip
	P99NS   int64 `json:"p99_ns"`  // 99th percentile
	MeanNS  int64 `json:"mean_ns"` // mean
	MaxNS   int64 `json:"max_ns"`  // slowest
}

// Latencies records the duration of every round trip of a run into
// memory allocated up front, so that recording costs no allocation in
// the measured part. The zero value records nothing; make one with
// [NewLatencies]. Not safe for concurrent use: one goroutine (or one
// process or actor at a time) records.
type Latencies struct {
	ns []int64
}

// NewLatencies returns a recorder with room for n round trips.
func NewLatencies(n int) *Latencies {
	return &Latencies{ns: make([]int64, 0, n)}
}

// Add records one round trip. Beyond the room it was made with, it
// records nothing more, so that it never allocates.
func (l *Latencies) Add(d time.Duration) {
	if len(l.ns) < cap(l.ns) {
		l.ns = append(l.ns, int64(d))
	}
}

// Len returns the number of round trips recorded.
func (l *Latencies) Len() int { return len(l.ns) }

// Summary sorts the recorded times and summarises them; nil if none
// were recorded.
func (l *Latencies) Summary() *Latency {
	n := len(l.ns)
	if n == 0 {
		return nil
	}
	slices.Sort(l.ns)
	var sum int64
	for _, v := range l.ns {
		sum += v
	}
	return &Latency{
		Samples: n,
		P50NS:   rank(l.ns, 50),
		P99NS:   rank(l.ns, 99),
		MeanNS:  sum / int64(n),
		MaxNS:   l.ns[n-1],
	}
}

// rank returns the nearest-rank pct-th percentile of sorted.
func rank(sorted []int64, pct int) int64 {
	i := (len(sorted)*pct + 99) / 100 // ceil(n * pct / 100), 1-based
	return sorted[max(i, 1)-1]
}
