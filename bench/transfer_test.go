package main

import (
	"bytes"
	"math"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/procsched/scheduler/bench/internal/report"
	"github.com/procsched/scheduler/bench/internal/workload"
)

// TestMeasureTransfer: with two cores the measurement is a positive,
// finite time per move, and the responder goroutine is gone when it
// returns (TestMain checks for leaks); with one processor for Go there is
// nothing to measure.
func TestMeasureTransfer(t *testing.T) {
	if runtime.NumCPU() < 2 {
		require.Zero(t, measureTransfer(), "one logical CPU: no second core")
		return
	}
	ns := measureTransfer()
	t.Logf("a cache line moved between two cores in %.1f ns", ns)
	require.Greater(t, ns, 0.0)
	require.False(t, math.IsInf(ns, 0) || math.IsNaN(ns), "%v ns", ns)

	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	require.Zero(t, measureTransfer(), "one processor for Go: the two threads could not run at once")
}

// TestSummarizeTransfers: the report gives the median and range of the
// transfer times measured before the rounds, one per workload and round
// however many runs a round has, and counts per workload the rounds
// measured at more than twice the fastest.
func TestSummarizeTransfers(t *testing.T) {
	res := func(w, impl string, round int, transfer float64) workload.Result {
		return workload.Result{Workload: w, Impl: impl, NS: 100, Ops: 1, OK: true, Round: round, TransferNS: transfer}
	}
	results := []workload.Result{
		res("spawn", "sched", 1, 30), res("spawn", "goroutines", 1, 30),
		res("spawn", "sched", 2, 170), res("spawn", "goroutines", 2, 170),
		res("spawn", "sched", 3, 61), res("spawn", "goroutines", 3, 61),
		res("ring", "sched", 1, 28), res("ring", "goroutines", 1, 28),
		res("ring", "sched", 2, 55), res("ring", "goroutines", 2, 55),
	}
	cfg := config{workloads: []string{"ring", "spawn"}, impls: []string{"sched", "goroutines"}, rounds: 3, scale: 1}
	table, _ := summarize(cfg, report.Machine{}, results)
	m := table.Machine
	require.Equal(t, 5, m.Transfer.N, "one figure per workload and round")
	require.Equal(t, 28.0, m.Transfer.Min)
	require.Equal(t, 55.0, m.Transfer.Median)
	require.Equal(t, 170.0, m.Transfer.Max)
	require.Equal(t, []string{"spawn 2 of 3"}, m.SlowRounds, "61 and 170 are more than twice 28; 55 is not")

	var b bytes.Buffer
	require.NoError(t, report.WriteMarkdown(&b, table))
	require.Contains(t, b.String(), "A cache line moved between two cores in 55 ns (median of 5 rounds; 28 ns – 170 ns). Rounds measured at more than twice the fastest: spawn 2 of 3")

	// A saved run from before the measurement has none: no line.
	table, _ = summarize(cfg, report.Machine{}, []workload.Result{res("ring", "sched", 0, 0)})
	require.Zero(t, table.Machine.Transfer.N)
	b.Reset()
	require.NoError(t, report.WriteMarkdown(&b, table))
	require.NotContains(t, b.String(), "cache line")
}

// TestSummarizeTransfersOfTheReportedWorkloads: a report of some of a
// saved run's workloads (-from with -workloads) gives the transfer times
// of their rounds only, and counts slow rounds against the fastest of
// those.
func TestSummarizeTransfersOfTheReportedWorkloads(t *testing.T) {
	res := func(w string, round int, transfer float64) workload.Result {
		return workload.Result{Workload: w, Impl: "sched", NS: 100, Ops: 1, OK: true, Round: round, TransferNS: transfer}
	}
	results := []workload.Result{
		res("spawn", 1, 10), res("spawn", 2, 900), res("spawn", 3, 1000),
		res("ring", 1, 30), res("ring", 2, 40), res("ring", 3, 70),
	}
	cfg := config{workloads: []string{"ring"}, impls: []string{"sched"}, rounds: 3, scale: 1}
	table, _ := summarize(cfg, report.Machine{}, results)
	m := table.Machine
	require.Equal(t, 3, m.Transfer.N, "the three rounds of ring")
	require.Equal(t, 30.0, m.Transfer.Min)
	require.Equal(t, 40.0, m.Transfer.Median)
	require.Equal(t, 70.0, m.Transfer.Max)
	require.Equal(t, []string{"ring 1 of 3"}, m.SlowRounds, "70 is more than twice ring's fastest, 30")
}
