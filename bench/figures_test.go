package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/procsched/scheduler/bench/internal/report"
	"github.com/procsched/scheduler/bench/internal/workload"
)

// fakeRun is one round's result for the summary tests: ops operations
// in ns nanoseconds, with CPU time, allocations, bytes and peak RSS
// given per run so that each figure's median can be told apart.
type fakeRun struct {
	w, impl, variant            string
	ns, cpu, allocs, bytes, rss int64
	ops                         int64
	failed                      bool
	bytesPerProc                float64
	round                       int
}

func (f fakeRun) result() workload.Result {
	r := workload.Result{
		Workload: f.w, Impl: f.impl, Variant: f.variant, Ops: f.ops,
		NS: f.ns, CPUNS: f.cpu, Allocs: uint64(f.allocs), AllocBytes: uint64(f.bytes), PeakRSS: uint64(f.rss),
		BytesPerProc: f.bytesPerProc, Round: f.round, OK: !f.failed,
	}
	if f.failed {
		r.Error = "sum: got 1, want 2"
	}
	return r
}

func results(runs ...fakeRun) []workload.Result {
	out := make([]workload.Result, len(runs))
	for i, r := range runs {
		out[i] = r.result()
	}
	return out
}

// rowFor returns the row of impl on workload w, failing if there is none.
func rowFor(t *testing.T, table report.Table, w, impl string) report.Row {
	t.Helper()
	for _, r := range table.Rows {
		if r.Workload == w && r.Impl == impl {
			return r
		}
	}
	t.Fatalf("no row for %s on %s in %+v", impl, w, table.Rows)
	return report.Row{}
}

// TestSummarizeFiguresEvenCount: with an even number of good rounds,
// every median is the mean of the middle two, each figure taken over its
// own rounds, and the per-operation figures divide those medians by the
// operations of one run.
func TestSummarizeFiguresEvenCount(t *testing.T) {
	const ops = 100
	rs := results(
		// sched: times 100, 400, 200, 300 -> median 250; CPU 300, 100,
		// 200, 900 -> 250; allocs 10, 40, 20, 30 -> 25; bytes 1000, 3000,
		// 2000, 4000 -> 2500; RSS 5, 1, 3, 7 MiB -> 4 MiB.
		fakeRun{w: "ring", impl: "sched", ops: ops, ns: 100, cpu: 300, allocs: 10, bytes: 1000, rss: 5 << 20},
		fakeRun{w: "ring", impl: "goroutines", ops: ops, ns: 800, cpu: 800, allocs: 0, bytes: 0, rss: 1 << 20},
		fakeRun{w: "ring", impl: "sched", ops: ops, ns: 400, cpu: 100, allocs: 40, bytes: 3000, rss: 1 << 20},
		fakeRun{w: "ring", impl: "goroutines", ops: ops, ns: 1000, cpu: 1000, rss: 1 << 20},
		fakeRun{w: "ring", impl: "sched", ops: ops, ns: 200, cpu: 200, allocs: 20, bytes: 2000, rss: 3 << 20},
		fakeRun{w: "ring", impl: "goroutines", ops: ops, ns: 600, cpu: 600, rss: 1 << 20},
		fakeRun{w: "ring", impl: "sched", ops: ops, ns: 300, cpu: 900, allocs: 30, bytes: 4000, rss: 7 << 20},
		fakeRun{w: "ring", impl: "goroutines", ops: ops, ns: 1200, cpu: 1200, rss: 1 << 20},
	)
	cfg := config{workloads: []string{"ring"}, impls: []string{"sched", "goroutines"}, rounds: 4, scale: 1}
	table, chart := summarize(cfg, report.Machine{}, rs)

	sched := rowFor(t, table, "ring", "sched")
	require.Equal(t, 4, sched.Primary.N)
	require.Equal(t, 250.0, sched.Primary.Median, "mean of the middle two, 200 and 300")
	require.Equal(t, 100.0, sched.Primary.Min)
	require.Equal(t, 400.0, sched.Primary.Max)
	require.Equal(t, 2.5, sched.PerOpNS, "median time 250 ns over 100 hops")
	require.Equal(t, 2.5, sched.CPUPerOpNS, "median CPU time 250 ns (200 and 300) over 100 hops")
	require.Equal(t, 0.25, sched.AllocsPerOp, "median 25 allocations over 100 hops")
	require.Equal(t, 25.0, sched.BytesPerOp, "median 2,500 bytes over 100 hops")
	require.Equal(t, float64(4<<20), sched.PeakRSS, "median of 1, 3, 5 and 7 MiB; not per operation")
	require.Equal(t, "hop", sched.OpUnit)
	require.Equal(t, "1,000 processes × 1,000 laps", sched.Size)
	require.Equal(t, 4, sched.Runs)
	require.Zero(t, sched.Failed)

	gor := rowFor(t, table, "ring", "goroutines")
	require.True(t, gor.Baseline)
	require.Equal(t, 900.0, gor.Primary.Median, "mean of 800 and 1000")
	require.Equal(t, 3.6, sched.Ratio, "the baseline's median 900 over sched's 250")
	require.Equal(t, 1.0, gor.Ratio)

	require.Equal(t, []report.Point{{Group: "ring", Series: "sched", Value: 3.6}}, chart.Points, "one bar, sched's; none for the baseline")

	var b bytes.Buffer
	require.NoError(t, report.WriteMarkdown(&b, table))
	require.Contains(t, b.String(), "| **ring** (1,000 processes × 1,000 laps) | sched | 250 ns | 100 ns – 400 ns | 2.5 ns/hop | 2.5 ns | **3.60×** | 0.25 | 25 | 4 MiB | 4 ok |")
	require.Contains(t, b.String(), "|  | goroutines | 900 ns | 600 ns – 1.2 µs | 9 ns/hop | 9 ns | 1 (baseline) | 0.00 | 0.00 | 1 MiB | 4 ok |")
}

// TestSummarizeFiguresFailedRounds: a failed round counts in the runs
// column and gives its error, but none of its figures count; a variant
// with a failed round is not kept while one without qualifies, even if
// it was faster; of two variants with the same median the first is
// kept; one good round is its own median, minimum and maximum.
func TestSummarizeFiguresFailedRounds(t *testing.T) {
	const ops = 10
	rs := results(
		fakeRun{w: "fib", impl: "sched", ops: ops, ns: 300, cpu: 300, allocs: 30},
		fakeRun{w: "fib", impl: "goroutines", variant: "unbuffered", ops: ops, ns: 1000, cpu: 1000},
		fakeRun{w: "fib", impl: "goroutines", variant: "buffered", ops: ops, ns: 10, failed: true},
		fakeRun{w: "fib", impl: "pond", variant: "cpu", ops: ops, ns: 500},
		fakeRun{w: "fib", impl: "pond", variant: "wide", ops: ops, ns: 700},

		fakeRun{w: "fib", impl: "sched", ops: ops, ns: 1, cpu: 1, allocs: 1, failed: true}, // a wrong answer: no figure counts
		fakeRun{w: "fib", impl: "goroutines", variant: "unbuffered", ops: ops, ns: 2000, cpu: 2000},
		fakeRun{w: "fib", impl: "goroutines", variant: "buffered", ops: ops, ns: 20},
		fakeRun{w: "fib", impl: "pond", variant: "cpu", ops: ops, ns: 700},
		fakeRun{w: "fib", impl: "pond", variant: "wide", ops: ops, ns: 500},

		fakeRun{w: "fib", impl: "sched", ops: ops, ns: 500, cpu: 700, allocs: 50},
		fakeRun{w: "fib", impl: "goroutines", variant: "unbuffered", ops: ops, ns: 1500, cpu: 1500},
		fakeRun{w: "fib", impl: "goroutines", variant: "buffered", ops: ops, ns: 30},
		fakeRun{w: "fib", impl: "pond", variant: "cpu", ops: ops, ns: 600},
		fakeRun{w: "fib", impl: "pond", variant: "wide", ops: ops, ns: 600},

		fakeRun{w: "fib", impl: "ants", variant: "cpu", ops: ops, ns: 3000, allocs: 70},
	)
	cfg := config{workloads: []string{"fib"}, impls: []string{"sched", "goroutines", "ants", "pond"}, rounds: 3, scale: 1}
	table, chart := summarize(cfg, report.Machine{}, rs)

	var impls []string
	for _, r := range table.Rows {
		impls = append(impls, r.Impl)
	}
	require.Equal(t, []string{"sched", "goroutines", "ants", "pond"}, impls, "rows in the order of the implementations")

	sched := rowFor(t, table, "fib", "sched")
	require.Equal(t, 3, sched.Runs)
	require.Equal(t, 1, sched.Failed)
	require.Equal(t, "sum: got 1, want 2", sched.Error)
	require.Equal(t, 2, sched.Primary.N)
	require.Equal(t, 400.0, sched.Primary.Median, "300 and 500; the failed round's 1 ns does not count")
	require.Equal(t, 300.0, sched.Primary.Min)
	require.Equal(t, 40.0, sched.PerOpNS)
	require.Equal(t, 50.0, sched.CPUPerOpNS, "300 and 700 over 10 calls")
	require.Equal(t, 4.0, sched.AllocsPerOp, "30 and 50 over 10 calls")

	gor := rowFor(t, table, "fib", "goroutines")
	require.Equal(t, "unbuffered", gor.Variant, "buffered was faster but failed a round")
	require.True(t, gor.Baseline)
	require.Equal(t, 1500.0, gor.Primary.Median, "odd count: the middle one")
	require.Equal(t, 3.75, sched.Ratio, "1500 / 400")

	pond := rowFor(t, table, "fib", "pond")
	require.Equal(t, "cpu", pond.Variant, "cpu and wide tie at a median of 600: the first is kept")
	require.Equal(t, 2.5, pond.Ratio, "1500 / 600")

	ants := rowFor(t, table, "fib", "ants")
	require.Empty(t, ants.Variant, "one variant: not named")
	require.Equal(t, 1, ants.Primary.N)
	require.Equal(t, 3000.0, ants.Primary.Median)
	require.Equal(t, 3000.0, ants.Primary.Min)
	require.Equal(t, 3000.0, ants.Primary.Max)
	require.Equal(t, 0.5, ants.Ratio, "1500 / 3000")
	require.Equal(t, 1, ants.Runs)

	require.Equal(t, []report.Point{
		{Group: "fib", Series: "sched", Value: 3.75},
		{Group: "fib", Series: "ants", Value: 0.5},
		{Group: "fib", Series: "pond", Value: 2.5},
	}, chart.Points)
	require.Equal(t, []string{"sched", "ants", "pond"}, chart.Series, "the baseline is no series")

	// The note says why the faster variant was not kept: its median is
	// that of its good rounds, and one failed.
	require.Equal(t, []string{
		"fib, goroutines: unbuffered 1.5 µs (kept); buffered 25 ns, 1 of 3 rounds failed",
		"fib, pond: cpu 600 ns (kept); wide 600 ns",
	}, table.Notes)

	var b bytes.Buffer
	require.NoError(t, report.WriteMarkdown(&b, table))
	out := b.String()
	require.Contains(t, out, "| **fib** (fib(27), 635,621 calls) | sched | 400 ns | 300 ns – 500 ns | 40 ns/call | 50 ns | **3.75×** | 4.00 | 0.00 | – | 1/3 FAILED: sum: got 1, want 2 |")
	require.Contains(t, out, "|  | ants | 3 µs | 3 µs – 3 µs | 300 ns/call | – | 0.50× | 7.00 | 0.00 | – | 1 ok |")
}

// TestSummarizeFiguresNoBaseline: without a good round of the baseline
// there is no ratio: not in the table, not in the chart. The baseline
// is goroutines for a local workload and raw NATS for a remote one,
// whatever else ran.
func TestSummarizeFiguresNoBaseline(t *testing.T) {
	rs := results(
		fakeRun{w: "spawn", impl: "sched", ops: 10, ns: 100},
		fakeRun{w: "spawn", impl: "pond", ops: 10, ns: 200},
		fakeRun{w: "spawn", impl: "goroutines", ops: 10, ns: 50, failed: true},
		fakeRun{w: "skynet", impl: "sched", ops: 10, ns: 100},
		fakeRun{w: "skynet", impl: "nats", ops: 10, ns: 400}, // not the baseline of a local workload
		fakeRun{w: "remote-echo", impl: "sched", ops: 10, ns: 100},
		fakeRun{w: "remote-echo", impl: "goroutines", ops: 10, ns: 400}, // not the baseline of a remote one
	)
	cfg := config{workloads: []string{"skynet", "spawn", "remote-echo"}, impls: []string{"sched", "goroutines", "pond", "nats"}, rounds: 1, scale: 1}
	table, chart := summarize(cfg, report.Machine{}, rs)
	for _, r := range table.Rows {
		require.Zero(t, r.Ratio, "%s on %s has no baseline to be compared with", r.Impl, r.Workload)
		require.False(t, r.Baseline, "%s on %s", r.Impl, r.Workload)
	}
	require.Empty(t, chart.Points)
	require.Equal(t, []string{"skynet", "spawn", "remote-echo"}, chart.Groups)

	var b bytes.Buffer
	require.NoError(t, report.WriteMarkdown(&b, table))
	require.Contains(t, b.String(), "|  | goroutines | – | – | – | – | – | – | – | – | 1/1 FAILED: sum: got 1, want 2 |")
}

// TestSummarizeFiguresIdleAndRemote: idle memory is judged by bytes per
// process, fewer being better; a remote workload by time against raw
// NATS, with its messages per second.
func TestSummarizeFiguresIdleAndRemote(t *testing.T) {
	rs := results(
		fakeRun{w: "idle", impl: "sched", ops: 1000, ns: 4000, bytesPerProc: 120},
		fakeRun{w: "idle", impl: "goroutines", ops: 1000, ns: 1000, bytesPerProc: 2700},
		fakeRun{w: "idle", impl: "sched", ops: 1000, ns: 6000, bytesPerProc: 121},
		fakeRun{w: "idle", impl: "goroutines", ops: 1000, ns: 1000, bytesPerProc: 2701},
		fakeRun{w: "remote-pairs", impl: "sched", ops: 4000, ns: 2e6},
		fakeRun{w: "remote-pairs", impl: "nats", ops: 4000, ns: 5e6},
	)
	cfg := config{workloads: []string{"idle", "remote-pairs"}, impls: []string{"sched", "goroutines", "nats"}, rounds: 2, scale: 1}
	table, _ := summarize(cfg, report.Machine{}, rs)

	idle := rowFor(t, table, "idle", "sched")
	require.True(t, idle.Memory)
	require.Equal(t, 120.5, idle.Primary.Median)
	require.Equal(t, 5.0, idle.PerOpNS, "per op is still time: 5,000 ns over 1,000 processes")
	require.Equal(t, 2700.5/120.5, idle.Ratio, "the baseline's bytes over sched's")

	pairs := rowFor(t, table, "remote-pairs", "sched")
	require.True(t, pairs.Remote)
	require.Equal(t, 2.5, pairs.Ratio, "raw NATS's 5 ms over 2 ms")
	require.Equal(t, 2e6, pairs.Rate, "4,000 messages in 2 ms")
	require.True(t, rowFor(t, table, "remote-pairs", "nats").Baseline)

	var b bytes.Buffer
	require.NoError(t, report.WriteMarkdown(&b, table))
	out := b.String()
	require.Contains(t, out, "| **idle** (1,000,000 processes) | sched | 120 B/proc | 120 – 121 B | 5 ns/proc |")
	require.Contains(t, out, "| **22.41×** |")
	require.Contains(t, out, "| **remote-pairs** (1,000 pairs × 500 round trips) | sched | 2 ms | 2 ms – 2 ms | 2 M | – | – | – | **2.50×** |")
	require.True(t, strings.Index(out, "**idle**") < strings.Index(out, "**remote-pairs**"))
}
