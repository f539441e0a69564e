package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/procsched/scheduler/bench/internal/report"
	"github.com/procsched/scheduler/bench/internal/workload"
)

func TestMain(m *testing.M) {
	// The test binary also serves as the load process of -load (see
	// startLoad, which runs its own executable).
	if len(os.Args) == 3 && os.Args[1] == busyArg {
		os.Exit(busyLoad(os.Args[2]))
	}
	// A child that TestInterrupt started runs the harness's main with
	// the arguments it was given instead of the tests.
	if raw, ok := os.LookupEnv(mainArgsEnv); ok {
		var args []string
		if err := json.Unmarshal([]byte(raw), &args); err != nil {
			fmt.Fprintf(os.Stderr, "the arguments %q: %v\n", raw, err)
			os.Exit(3)
		}
		os.Args = append([]string{"bench"}, args...)
		main()
		os.Exit(0) // main exits itself
	}
	goleak.VerifyTestMain(m)
}

// mainArgsEnv holds, in a child that a test started, the arguments (a
// JSON list) its main runs with.
const mainArgsEnv = "BENCH_TEST_MAIN_ARGS"

// TestLoadProcess: -load runs a separate process that spins until it is
// stopped, and the report says so.
func TestLoadProcess(t *testing.T) {
	l, err := startLoad(2)
	require.NoError(t, err)
	require.NotNil(t, l)
	require.NoError(t, l.cmd.Process.Signal(syscall.Signal(0)), "the load process runs")
	if runtime.GOOS == "linux" {
		// The load is there when the run starts: startLoad returns once
		// the goroutines spin, each on a thread that is running or
		// ready to run.
		require.GreaterOrEqual(t, runningThreads(t, l.cmd.Process.Pid), 2, "threads of the load process running when startLoad returns")
	}
	require.NoError(t, l.stop())
	require.NotNil(t, l.cmd.ProcessState)
	require.True(t, l.cmd.ProcessState.Exited(), "stopped by closing its input, not killed")
	require.Equal(t, 0, l.cmd.ProcessState.ExitCode())

	// A load process that dies during the run is reported by stop, so
	// that the run is not taken as loaded throughout.
	killed, err := startLoad(1)
	require.NoError(t, err)
	require.NoError(t, killed.cmd.Process.Kill())
	require.ErrorContains(t, killed.stop(), "the load process ended during the run")

	none, err := startLoad(0)
	require.NoError(t, err)
	require.Nil(t, none, "-load 0 starts nothing")
	require.NoError(t, none.stop())
	require.Equal(t, 2, busyLoad("zero"))

	var b bytes.Buffer
	require.NoError(t, report.WriteMarkdown(&b, report.Table{Machine: report.Machine{Busy: 2}}))
	require.Contains(t, b.String(), "2 busy-looping goroutines in another process")
}

// runningThreads returns how many threads of process pid are running or
// ready to run (state R in /proc).
func runningThreads(t *testing.T, pid int) int {
	t.Helper()
	dirs, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	require.NoError(t, err)
	n := 0
	for _, d := range dirs {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, d.Name()))
		if err != nil {
			continue // the thread ended
		}
		// The state follows the command name, which is in parentheses.
		if _, rest, ok := strings.Cut(string(b), ") "); ok && strings.HasPrefix(rest, "R") {
			n++
		}
	}
	return n
}

// TestQuick runs the harness end to end as CI does (-quick): this
// scheduler and the goroutine baseline on the local workloads, and this
// scheduler's remote module and raw NATS on the remote ones. It builds
// their binaries, runs every workload once at size 0.01, and every run
// must check out.
func TestQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the benchmark binaries")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"-quick", "-impls", "sched,goroutines,nats", "-out", dir}, &stdout, &stderr)
	require.Equal(t, 0, code, "exit code; progress:\n%s", stderr.String())

	for _, w := range workload.Names {
		require.Contains(t, stderr.String(), w+" ", "progress output names every workload")
	}
	require.Contains(t, stderr.String(), "round 1/1")

	raw, err := os.ReadFile(filepath.Join(dir, "latest.json"))
	require.NoError(t, err)
	var doc struct {
		Scale float64           `json:"scale"`
		Runs  []workload.Result `json:"runs"`
	}
	require.NoError(t, json.Unmarshal(raw, &doc))
	require.Equal(t, 0.01, doc.Scale)
	sz := workload.SizesFor(0.01)
	ran := map[string]bool{}
	for _, r := range doc.Runs {
		require.True(t, r.OK, "run %s %s/%s failed: %s", r.Workload, r.Impl, r.Variant, r.Error)
		require.NotEmpty(t, r.Detail, "run %s %s says what it checked", r.Workload, r.Impl)
		require.Positive(t, r.NS)
		if r.Workload == workload.RemotePingPong {
			require.NotNil(t, r.Latency, "%s records its round trips", r.Impl)
			require.Equal(t, sz.RemoteRoundTrips, r.Latency.Samples, "%s records every round trip", r.Impl)
			require.True(t, 0 < r.Latency.P50NS && r.Latency.P50NS <= r.Latency.P99NS && r.Latency.P99NS <= r.Latency.MaxNS,
				"%s: percentiles in order: %+v", r.Impl, r.Latency)
		} else {
			require.Nil(t, r.Latency, "%s %s records no round trips", r.Workload, r.Impl)
		}
		ran[r.Workload+" "+r.Impl] = true
	}
	for _, w := range workload.Names {
		impls := []string{"sched", "goroutines"}
		if workload.IsRemote(w) {
			impls = []string{"sched", "nats"}
		}
		for _, impl := range impls {
			require.True(t, ran[w+" "+impl], "no run of %s on %s", w, impl)
		}
	}
	require.False(t, ran[workload.RemoteEcho+" goroutines"], "goroutines has no remote binary")

	md, err := os.ReadFile(filepath.Join(dir, "latest.md"))
	require.NoError(t, err)
	require.Equal(t, stdout.String()+"\n![ratio to the baseline](latest.svg)\n", string(md), "latest.md is the printed table plus the chart")
	rows := 0
	for _, line := range strings.Split(string(md), "\n") {
		if strings.HasPrefix(line, "| ") && !strings.HasPrefix(line, "| workload") {
			rows++
		}
	}
	require.Equal(t, 2*len(workload.Names), rows, "one table row per workload and implementation:\n%s", md)
	require.Contains(t, string(md), "## Remote workloads")
	require.Contains(t, string(md), "| × nats |")

	svg, err := os.ReadFile(filepath.Join(dir, "latest.svg"))
	require.NoError(t, err)
	require.Equal(t, len(workload.Names), strings.Count(string(svg), `class="bar"`), "one bar (sched) per workload")
}

// TestBinaries: every implementation has a binary, every binary a main
// package, and the binaries built are those the selection needs.
func TestBinaries(t *testing.T) {
	for _, impl := range implNames {
		require.True(t, binaryFor(impl, workload.Ring) != "" || binaryFor(impl, workload.RemoteEcho) != "", "%s has no binary", impl)
	}
	for _, b := range binaries {
		require.Contains(t, implNames, b.impl)
		_, err := os.Stat(filepath.Join("impl", b.dir, "main.go"))
		require.NoError(t, err, "binary %s", b.dir)
	}
	require.Equal(t, "sched", binaryFor("sched", workload.Ring))
	require.Equal(t, "sched-remote", binaryFor("sched", workload.RemotePairs))
	require.Equal(t, "", binaryFor("goroutines", workload.RemotePairs))
	require.Equal(t, "", binaryFor("nats", workload.PingPong))

	for _, tt := range []struct {
		workloads, impls string
		want             []string
	}{
		{"ring", "sched,nats", []string{"sched"}},
		{"remote-echo", "sched,goroutines,nats", []string{"sched-remote", "nats"}},
		{"ring,remote-echo", "sched", []string{"sched", "sched-remote"}},
	} {
		cfg, err := parseFlags([]string{"-workloads", tt.workloads, "-impls", tt.impls}, &bytes.Buffer{})
		require.NoError(t, err)
		require.Equal(t, tt.want, binariesFor(cfg), "-workloads %s -impls %s", tt.workloads, tt.impls)
	}
	// parseFlags refuses such a selection (TestParseFlags).
	require.Nil(t, binariesFor(config{workloads: []string{"remote-echo"}, impls: []string{"goroutines", "ants"}}))
	cfg, err := parseFlags(nil, &bytes.Buffer{})
	require.NoError(t, err)
	require.Len(t, binariesFor(cfg), len(binaries), "everything needs every binary")

	require.Equal(t, "goroutines", baselineOf(workload.Fib))
	require.Equal(t, "nats", baselineOf(workload.RemotePingPong))
}

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    config
		wantErr string
	}{
		{name: "defaults", args: nil,
			want: config{workloads: workload.Names, impls: implNames, rounds: 3, scale: 1, out: "results", name: "latest", timeout: 10 * time.Minute}},
		{name: "quick", args: []string{"-quick"},
			want: config{workloads: workload.Names, impls: implNames, rounds: 1, scale: 0.01, quick: true, name: "latest", timeout: 10 * time.Minute}},
		{name: "quick with explicit values", args: []string{"-quick", "-rounds", "2", "-size", "0.1", "-out", "x"},
			want: config{workloads: workload.Names, impls: implNames, rounds: 2, scale: 0.1, quick: true, out: "x", name: "latest", timeout: 10 * time.Minute}},
		{name: "selection keeps report order", args: []string{"-workloads", "fib, ring", "-impls", "goroutines,sched"},
			want: config{workloads: []string{"ring", "fib"}, impls: []string{"sched", "goroutines"}, rounds: 3, scale: 1, out: "results", name: "latest", timeout: 10 * time.Minute}},
		{name: "remote workloads and a name", args: []string{"-workloads", "remote-pairs,remote-pingpong", "-impls", "nats,sched", "-name", "remote"},
			want: config{workloads: []string{"remote-pingpong", "remote-pairs"}, impls: []string{"sched", "nats"}, rounds: 3, scale: 1, out: "results", name: "remote", timeout: 10 * time.Minute}},
		{name: "name with a directory", args: []string{"-name", "../x"}, wantErr: "need a plain file name"},
		{name: "empty name", args: []string{"-name", ""}, wantErr: "need a plain file name"},
		{name: "unknown workload", args: []string{"-workloads", "nope"}, wantErr: `unknown workload "nope"`},
		{name: "no implementation", args: []string{"-impls", ""}, wantErr: `-impls "": name one or more implementations, or all (known: sched, goroutines, ants, pond, protoactor, hollywood, nats)`},
		{name: "no workload", args: []string{"-workloads", " "}, wantErr: `-workloads " ": name one or more workloads, or all (known: pingpong, ring,`},
		{name: "unknown implementation", args: []string{"-impls", "akka"}, wantErr: `unknown implementation "akka"`},
		{name: "no rounds", args: []string{"-rounds", "0"}, wantErr: "-rounds 0: need 1 to 1000"},
		{name: "most rounds", args: []string{"-rounds", "1000", "-workloads", "ring"},
			want: config{workloads: []string{"ring"}, impls: implNames, rounds: 1000, scale: 1, out: "results", name: "latest", timeout: 10 * time.Minute}},
		{name: "rounds past planning", args: []string{"-rounds", "1000000000"}, wantErr: "-rounds 1000000000: need 1 to 1000"},
		{name: "bad size", args: []string{"-size", "-1"}, wantErr: "positive factor"},
		{name: "zero size", args: []string{"-size", "0"}, wantErr: "positive factor"},
		{name: "infinite size", args: []string{"-size", "+Inf"}, wantErr: "positive factor"},
		{name: "size not a number", args: []string{"-size", "NaN"}, wantErr: "positive factor"},
		{name: "size past every count", args: []string{"-size", "1e13"}, wantErr: "positive factor"},
		{name: "largest size", args: []string{"-size", "1000"},
			want: config{workloads: workload.Names, impls: implNames, rounds: 3, scale: 1000, out: "results", name: "latest", timeout: 10 * time.Minute}},
		{name: "no timeout", args: []string{"-timeout", "0s"}, wantErr: "positive duration"},
		{name: "unknown flag", args: []string{"-sizes", "1"}, wantErr: "flag provided but not defined"},
		{name: "stray argument", args: []string{"extra"}, wantErr: "unexpected arguments"},
		{name: "load", args: []string{"-load", "2"},
			want: config{workloads: workload.Names, impls: implNames, rounds: 3, scale: 1, out: "results", name: "latest", timeout: 10 * time.Minute, load: 2}},
		{name: "no selected implementation runs a selected workload", args: []string{"-workloads", "remote-echo,remote-pairs", "-impls", "goroutines,pond"},
			wantErr: "-impls goroutines,pond runs none of -workloads remote-echo,remote-pairs: the local workloads run on sched, goroutines, ants, pond, protoactor, hollywood; the remote ones on sched, protoactor, hollywood, nats"},
		{name: "only the local baseline for local workloads", args: []string{"-workloads", "fib", "-impls", "nats"},
			wantErr: "-impls nats runs none of -workloads fib"},
		{name: "from a saved run", args: []string{"-from", "x.json", "-workloads", "fib", "-name", "old"},
			want: config{workloads: []string{"fib"}, impls: implNames, rounds: 3, scale: 1, out: "results", name: "old", timeout: 10 * time.Minute, from: "x.json"}},
		{name: "rounds with from", args: []string{"-from", "x.json", "-rounds", "5"}, wantErr: "-rounds: -from runs nothing, so -rounds, -size, -quick, -timeout, -load, -pgo, -cpuprofile, -memprofile and -trace do not apply"},
		{name: "load and pgo with from", args: []string{"-load", "2", "-pgo", "-from", "x.json"}, wantErr: "-load, -pgo: -from runs nothing"},
		{name: "negative load", args: []string{"-load", "-1"}, wantErr: "-load -1: need 0 to 9000"},
		{name: "largest load", args: []string{"-load", "9000"},
			want: config{workloads: workload.Names, impls: implNames, rounds: 3, scale: 1, out: "results", name: "latest", timeout: 10 * time.Minute, load: 9000}},
		{name: "load past the thread limit", args: []string{"-load", "9001"}, wantErr: "-load 9001: need 0 to 9000"},
		{name: "huge load", args: []string{"-load", "100000000"}, wantErr: "-load 100000000: need 0 to 9000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseFlags(tt.args, &bytes.Buffer{})
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestPlanInterleaves(t *testing.T) {
	cfg := config{workloads: []string{"pingpong", "fib"}, impls: []string{"sched", "goroutines", "ants"}, rounds: 2}
	entries := map[string][]string{
		"sched":      {"pingpong", "fib"},
		"goroutines": {"pingpong/unbuffered", "pingpong/buffered", "fib/unbuffered"},
		"ants":       {"fib/cpu"},
	}
	var got []string
	for _, j := range plan(cfg, entries) {
		got = append(got, j.workload+" "+j.label()+" "+string(rune('0'+j.round)))
	}
	want := []string{
		"pingpong sched 1", "pingpong goroutines/unbuffered 1", "pingpong goroutines/buffered 1",
		"pingpong sched 2", "pingpong goroutines/unbuffered 2", "pingpong goroutines/buffered 2",
		"fib sched 1", "fib goroutines/unbuffered 1", "fib ants/cpu 1",
		"fib sched 2", "fib goroutines/unbuffered 2", "fib ants/cpu 2",
	}
	require.Equal(t, want, got)
}

func TestSummarize(t *testing.T) {
	res := func(w, impl, variant string, ns int64, ok bool) workload.Result {
		r := workload.Result{Workload: w, Impl: impl, Variant: variant, NS: ns, CPUNS: 2 * ns, Ops: 1000, OK: ok, PeakRSS: 1 << 20}
		if !ok {
			r.Error = "wrong answer"
		}
		if w == workload.Idle {
			r.BytesPerProc = float64(ns)
		}
		return r
	}
	results := []workload.Result{
		res("ring", "sched", "", 100, true),
		res("ring", "goroutines", "unbuffered", 400, true),
		res("ring", "goroutines", "buffered", 200, true),
		res("ring", "sched", "", 120, true),
		res("ring", "goroutines", "unbuffered", 420, true),
		res("ring", "goroutines", "buffered", 50, false), // fastest, but wrong: not kept
		res("idle", "sched", "", 250, true),
		res("idle", "goroutines", "", 2500, true),
		res("idle", "hollywood", "", 0, false),
	}
	cfg := config{workloads: []string{"ring", "idle"}, impls: []string{"sched", "goroutines", "hollywood"}, rounds: 2, scale: 1}
	table, chart := summarize(cfg, report.Machine{CPU: "test"}, results)

	require.Len(t, table.Rows, 5)
	sched, gor := table.Rows[0], table.Rows[1]
	require.Equal(t, "goroutines", gor.Impl)
	require.Equal(t, "unbuffered", gor.Variant, "the failing variant is not kept")
	require.True(t, gor.Baseline)
	require.Equal(t, 410.0, gor.Primary.Median)
	require.InDelta(t, 410.0/110.0, sched.Ratio, 1e-9)
	require.Equal(t, 0.11, sched.PerOpNS)
	require.Equal(t, 0.22, sched.CPUPerOpNS, "the median of the rounds' CPU time, per operation")

	idle := table.Rows[2]
	require.True(t, idle.Memory)
	require.InDelta(t, 10.0, idle.Ratio, 1e-9)
	broken := table.Rows[4]
	require.Equal(t, 1, broken.Failed)
	require.Equal(t, "wrong answer", broken.Error)
	require.Zero(t, broken.Ratio)

	require.Equal(t, []string{"ring", "idle"}, chart.Groups)
	require.Equal(t, []string{"sched", "hollywood"}, chart.Series)
	require.Len(t, chart.Points, 2, "a bar for sched on each workload; none for the baseline or a failure")
	require.Len(t, table.Notes, 1)
	require.Contains(t, table.Notes[0], "unbuffered 410 ns (kept)")
}

// TestSummarizeRemote: remote workloads are compared with raw NATS,
// report their message rate and the medians of their round-trip
// figures, and go in a table and chart of their own.
func TestSummarizeRemote(t *testing.T) {
	res := func(w, impl, variant string, ns int64, lat *workload.Latency) workload.Result {
		return workload.Result{Workload: w, Impl: impl, Variant: variant, NS: ns, Ops: 2000, Allocs: 1000, OK: true, Latency: lat}
	}
	lat := func(p50 int64) *workload.Latency {
		return &workload.Latency{Samples: 1000, P50NS: p50, P99NS: 3 * p50, MeanNS: 2 * p50, MaxNS: 10 * p50}
	}
	results := []workload.Result{
		res("remote-pingpong", "sched", "", 1e9, lat(50_000)),
		res("remote-pingpong", "nats", "", 5e8, lat(20_000)),
		res("remote-pingpong", "sched", "", 3e9, lat(70_000)),
		res("remote-pingpong", "nats", "", 7e8, lat(40_000)),
		res("remote-pingpong", "sched", "", 2e9, lat(60_000)),
		res("remote-pingpong", "nats", "", 6e8, lat(30_000)),
		res("remote-pairs", "sched", "", 1e9, nil),
		res("remote-pairs", "nats", "subjects", 4e9, nil),
		res("remote-pairs", "nats", "wildcard", 2e9, nil),
		res("ring", "sched", "", 100, nil),
		res("ring", "goroutines", "", 400, nil),
	}
	cfg := config{workloads: []string{"ring", "remote-pingpong", "remote-pairs"}, impls: []string{"sched", "goroutines", "nats"}, rounds: 3, scale: 1}
	table, chart := summarize(cfg, report.Machine{}, results)

	require.Len(t, table.Rows, 6)
	ring, ping, natsPing, pairs, natsPairs := table.Rows[0], table.Rows[2], table.Rows[3], table.Rows[4], table.Rows[5]
	require.False(t, ring.Remote)
	require.InDelta(t, 4.0, ring.Ratio, 1e-9, "local workloads keep goroutines as baseline")

	require.True(t, ping.Remote)
	require.True(t, natsPing.Baseline, "raw NATS is the remote baseline")
	require.False(t, ping.Baseline)
	require.Equal(t, 2e9, ping.Primary.Median)
	require.InDelta(t, 6e8/2e9, ping.Ratio, 1e-9)
	require.InDelta(t, 1000.0, ping.Rate, 1e-9, "2,000 messages in the median 2 s")
	require.Equal(t, 60_000.0, ping.P50NS, "median of the rounds' p50")
	require.Equal(t, 180_000.0, ping.P99NS)
	require.Equal(t, 120_000.0, ping.MeanNS)
	require.Equal(t, 0.5, ping.AllocsPerOp, "allocations per message")

	require.Zero(t, pairs.P50NS, "no round trips recorded")
	require.Equal(t, "wildcard", natsPairs.Variant)
	require.InDelta(t, 2.0, pairs.Ratio, 1e-9, "against the faster raw NATS variant")

	require.Equal(t, []string{"ring", "remote-pingpong", "remote-pairs"}, chart.Groups)
	require.Equal(t, []string{"sched"}, chart.Series, "neither baseline is a series")
	require.Len(t, chart.Points, 3)
	require.Contains(t, chart.Title, "raw NATS for remote workloads")

	_, remoteOnly := summarize(config{workloads: []string{"remote-pairs"}, impls: []string{"sched", "ants", "nats"}, rounds: 3, scale: 1}, report.Machine{}, results)
	require.Equal(t, "Relative to raw NATS (higher is better)", remoteOnly.Title)
	require.Equal(t, []string{"sched"}, remoteOnly.Series, "ants ran none of the charted workloads: not in the legend")
	_, localOnly := summarize(config{workloads: []string{"ring"}, impls: []string{"sched", "goroutines"}, rounds: 3, scale: 1}, report.Machine{}, results)
	require.Equal(t, "Relative to goroutines + channels (higher is better)", localOnly.Title)

	partial, _ := summarize(config{workloads: []string{"remote-pingpong"}, impls: []string{"sched"}, rounds: 3, scale: 1}, report.Machine{}, []workload.Result{
		res("remote-pingpong", "sched", "", 1e9, lat(10_000)),
		res("remote-pingpong", "sched", "", 1e9, nil),
		res("remote-pingpong", "sched", "", 1e9, lat(30_000)),
	})
	require.Equal(t, 20_000.0, partial.Rows[0].P50NS, "a round without round trips does not count in their median")

	var md bytes.Buffer
	require.NoError(t, report.WriteMarkdown(&md, table))
	require.Contains(t, md.String(), "| **remote-pingpong** (20,000 round trips) | sched | 2 s | 1 s – 3 s | 1 k | 60 µs | 180 µs | 120 µs | 0.30× | 0.50 |")
}

func TestFromRerendersASavedRun(t *testing.T) {
	dir := t.TempDir()
	sv := saved{
		Machine: report.Machine{CPU: "saved CPU", Cores: 2},
		Scale:   0.5,
		Rounds:  1,
		Runs: []workload.Result{
			{Impl: "sched", Workload: "ring", Ops: 100, NS: 1000, OK: true},
			{Impl: "goroutines", Variant: "buffered", Workload: "ring", Ops: 100, NS: 3000, OK: true},
		},
	}
	raw, err := json.Marshal(sv)
	require.NoError(t, err)
	in := filepath.Join(dir, "in.json")
	require.NoError(t, os.WriteFile(in, raw, 0o644))

	var stdout, stderr bytes.Buffer
	out := filepath.Join(dir, "out")
	code := run(context.Background(), []string{"-from", in, "-out", out}, &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())
	require.Contains(t, stdout.String(), "saved CPU")
	require.Contains(t, stdout.String(), "Scale 0.5, 1 round(s)")
	require.Contains(t, stdout.String(), "| **3.00×** |")
	code = run(context.Background(), []string{"-from", in, "-out", out, "-name", "other"}, &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())
	for _, f := range []string{"other.md", "other.svg", "other.json"} {
		_, err := os.Stat(filepath.Join(out, f))
		require.NoError(t, err, "-name other writes %s", f)
	}
	again, err := os.ReadFile(filepath.Join(out, "latest.json"))
	require.NoError(t, err)
	var back saved
	require.NoError(t, json.Unmarshal(again, &back))
	require.Equal(t, sv, back, "the saved runs are written back unchanged")
}

// TestRevisionIgnoresItsOwnReports: the report's revision is the
// commit's hash, marked dirty by a change to any tracked file but the
// harness's own reports under bench/results.
func TestRevisionIgnoresItsOwnReports(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("git is needed to name the revision: %v", err)
	}
	dir := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=bench", "-c", "user.email=bench@example.com"}, args...)...)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "git %v: %s", args, out)
		return strings.TrimSpace(string(out))
	}
	write := func(name, text string) {
		t.Helper()
		path := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
	}
	ctx := context.Background()
	require.Equal(t, "", revision(ctx, dir), "not a checkout yet")

	git("init", "-q")
	write("lib.go", "package lib\n")
	write("bench/results/latest.md", "# old run\n")
	git("add", ".")
	git("commit", "-q", "-m", "first")
	head := git("rev-parse", "--short=12", "HEAD")
	require.Equal(t, head, revision(ctx, dir), "a clean checkout")

	write("bench/results/latest.md", "# new run\n")
	require.Equal(t, head, revision(ctx, dir), "the harness's own reports changed")

	write("bench/results/untracked.json", "{}\n")
	write("notes.txt", "not tracked\n")
	require.Equal(t, head, revision(ctx, dir), "untracked files, as git describe --dirty ignores them")

	write("lib.go", "package lib // changed\n")
	require.Equal(t, head+"-dirty", revision(ctx, dir), "a tracked source file changed")

	git("checkout", "--", "lib.go")
	write("bench/other.go", "package bench\n")
	git("add", "bench/other.go")
	require.Equal(t, head+"-dirty", revision(ctx, dir), "a staged new file")
}

// TestExecuteChecksTheResult: a run's result counts only if it is the
// result of the job that was run, at its size: a binary that reports
// another workload, implementation or variant, or another number of
// operations, fails the run, as does one that reports nothing.
func TestExecuteChecksTheResult(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the fake binary is a shell script")
	}
	sz := workload.SizesFor(0.01)
	good := workload.Result{Impl: "sched", Workload: workload.Ring, Scale: 0.01, Ops: sz.Ops(workload.Ring), NS: 1, OK: true, Detail: "hops"}
	for _, tt := range []struct {
		name    string
		mutate  func(*workload.Result)
		wantErr string // "" for a run that counts
	}{
		{"the job's result", func(*workload.Result) {}, ""},
		{"another workload", func(r *workload.Result) { r.Workload = workload.Fib }, "fib"},
		{"another implementation", func(r *workload.Result) { r.Impl = "goroutines" }, "goroutines"},
		{"another variant", func(r *workload.Result) { r.Variant = "fast" }, "fast"},
		{"fewer operations", func(r *workload.Result) { r.Ops /= 2 }, "operations"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := good
			tt.mutate(&r)
			line, err := json.Marshal(r)
			require.NoError(t, err)
			dir := t.TempDir()
			script := "#!/bin/sh\necho '" + string(line) + "'\n"
			require.NoError(t, os.WriteFile(filepath.Join(dir, "sched"), []byte(script), 0o755))
			cfg := config{scale: 0.01, timeout: time.Minute}
			res, _ := execute(context.Background(), cfg, dir, job{workload: workload.Ring, impl: "sched", round: 1})
			if tt.wantErr == "" {
				require.True(t, res.OK, "result %+v", res)
				return
			}
			require.False(t, res.OK, "a run that reported %+v counted", r)
			require.Contains(t, res.Error, tt.wantErr)
			require.Equal(t, "sched", res.Impl, "the failed run is the job's")
			require.Equal(t, workload.Ring, res.Workload, "the failed run is the job's")
		})
	}

	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "sched"), []byte("#!/bin/sh\nexit 0\n"), 0o755))
	res, _ := execute(context.Background(), config{scale: 0.01, timeout: time.Minute}, dir, job{workload: workload.Ring, impl: "sched", round: 1})
	require.False(t, res.OK, "a run that reported nothing counted")
	require.Contains(t, res.Error, "no result")
}

// TestExitCodes: -h prints the flags and exits 0; a bad flag or value is
// refused with a message and exit status 2; a run that failed its check
// makes the exit status 1, after the report is printed and written.
func TestExitCodes(t *testing.T) {
	ctx := context.Background()
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, run(ctx, []string{"-h"}, &stdout, &stderr))
	require.Contains(t, stderr.String(), "-workloads")

	for _, args := range [][]string{{"-rounds", "0"}, {"-nope"}, {"-impls", "akka"}, {"-size", "0"}, {"stray"}} {
		stdout.Reset()
		stderr.Reset()
		require.Equal(t, 2, run(ctx, args, &stdout, &stderr), "%q", args)
		require.Empty(t, stdout.String(), "%q", args)
		require.NotEmpty(t, stderr.String(), "%q says why", args)
	}

	dir := t.TempDir()
	sv := saved{Scale: 1, Rounds: 1, Runs: []workload.Result{
		{Impl: "sched", Workload: "ring", Ops: 100, NS: 1000, OK: true},
		{Impl: "goroutines", Workload: "ring", Ops: 100, OK: false, Error: "hops: got 1, want 2"},
	}}
	raw, err := json.Marshal(sv)
	require.NoError(t, err)
	in := filepath.Join(dir, "in.json")
	require.NoError(t, os.WriteFile(in, raw, 0o644))
	stdout.Reset()
	stderr.Reset()
	out := filepath.Join(dir, "out")
	require.Equal(t, 1, run(ctx, []string{"-from", in, "-out", out}, &stdout, &stderr))
	require.Contains(t, stderr.String(), errFailedRuns.Error())
	require.Contains(t, stdout.String(), "hops: got 1, want 2", "the table says which run failed and why")
	_, err = os.Stat(filepath.Join(out, "latest.md"))
	require.NoError(t, err, "the report is written even though a run failed")
}

// TestSelectionThatListsNothing: a selection whose implementations have
// binaries of the workloads' kind but do not list any of the workloads
// (ants runs no ping-pong) is refused as a usage error once the binaries
// are asked what they run, before any run, with what each one runs.
func TestSelectionThatListsNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a benchmark binary")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"-workloads", "pingpong,ring", "-impls", "ants", "-out", ""}, &stdout, &stderr)
	require.Equal(t, 2, code, "exit code; stderr:\n%s", stderr.String())
	require.Empty(t, stdout.String(), "no report")
	require.Contains(t, stderr.String(), "-impls ants runs none of -workloads pingpong,ring: ants runs skynet, spawn, fanout, fib")
	require.NotContains(t, stderr.String(), "running ", "no run started")
}

// TestInterrupt: an interrupt (Ctrl-C) during the runs stops the harness
// with a message and a non-zero status; it kills the run in progress,
// writes no report (the runs so far are not the rounds asked for, and
// the files may hold a full run), and removes its build directory. The
// harness runs as a child process, this test binary again, and gets
// SIGINT once its first run has started.
func TestInterrupt(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a benchmark binary")
	}
	if runtime.GOOS == "windows" {
		t.Skip("no SIGINT to send")
	}
	tmp, out := t.TempDir(), t.TempDir()
	raw, err := json.Marshal([]string{"-workloads", "ring", "-impls", "sched", "-rounds", "1000", "-size", "0.01", "-out", out})
	require.NoError(t, err)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), mainArgsEnv+"="+string(raw), "TMPDIR="+tmp)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	var said bytes.Buffer
	started := make(chan struct{})
	go func() {
		// Read what the harness says; once a run has started, say so.
		buf := make([]byte, 4096)
		told := false
		for {
			n, err := stderr.Read(buf)
			said.Write(buf[:n])
			if !told && bytes.Contains(said.Bytes(), []byte("round 1/1000")) {
				close(started)
				told = true
			}
			if err != nil {
				exited <- cmd.Wait()
				return
			}
		}
	}()
	select {
	case <-started:
	case <-time.After(5 * time.Minute):
		_ = cmd.Process.Kill()
		<-exited
		t.Fatalf("the first run did not start within five minutes; the harness said:\n%s", said.String())
	}
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	var exit *exec.ExitError
	select {
	case err = <-exited:
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		<-exited
		t.Fatalf("the harness did not end within a minute of the interrupt; it said:\n%s", said.String())
	}
	require.ErrorAs(t, err, &exit, "the harness exits non-zero; it said:\n%s", said.String())
	require.True(t, exit.Exited(), "the harness ends by itself, not by the signal (%v); it said:\n%s", exit, said.String())
	require.Equal(t, 1, exit.ExitCode())
	require.Contains(t, said.String(), "bench: interrupted")
	require.Empty(t, stdout.String(), "no report")
	written, err := os.ReadDir(out)
	require.NoError(t, err)
	require.Empty(t, written, "no report files")
	left, err := os.ReadDir(tmp)
	require.NoError(t, err)
	require.Empty(t, left, "the build directory is removed")
}

// TestOutCheckedFirst: an -out the report cannot be written to (here a
// directory under a file), or a profile or trace directory that cannot
// be made, is refused as a usage error before anything is built or run,
// not found once every run is done (or once the binaries are built).
func TestOutCheckedFirst(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	bad := filepath.Join(file, "dir")
	for _, tt := range []struct{ flag, says string }{
		{"-out", "-out " + bad + ": cannot write the report there"},
		{"-cpuprofile", "-cpuprofile " + bad + ": "},
		{"-memprofile", "-memprofile " + bad + ": "},
		{"-trace", "-trace " + bad + ": "},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), []string{"-workloads", "ring", "-impls", "sched", "-rounds", "1", "-size", "0.01", "-out", "", tt.flag, bad}, &stdout, &stderr)
		require.Equal(t, 2, code, "%s: exit code; stderr:\n%s", tt.flag, stderr.String())
		require.Contains(t, stderr.String(), tt.says)
		require.NotContains(t, stderr.String(), "building", "%s: nothing built", tt.flag)
		require.Empty(t, stdout.String(), "%s: no report", tt.flag)
	}
}

// TestFromRefusesWhatIsNotASavedRun: -from names a file the harness
// wrote; a file that is not one (no runs, no valid size or rounds, not
// JSON, missing), or that holds no run of the selected workloads and
// implementations, is refused as a usage error, and no report is written
// over the files in -out.
func TestFromRefusesWhatIsNotASavedRun(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, v any) string {
		raw, err := json.Marshal(v)
		require.NoError(t, err)
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, raw, 0o644))
		return p
	}
	ring := []workload.Result{{Impl: "sched", Workload: "ring", Ops: 100, NS: 1000, OK: true}}
	notJSON := filepath.Join(dir, "notes.txt")
	require.NoError(t, os.WriteFile(notJSON, []byte("not a run"), 0o644))
	for _, tt := range []struct {
		name string
		args []string
		says string
	}{
		{"empty object", []string{"-from", write("empty.json", map[string]any{})}, "not a saved run: no runs"},
		{"no size", []string{"-from", write("nosize.json", saved{Rounds: 1, Runs: ring})}, "not a saved run: size 0"},
		{"no rounds", []string{"-from", write("norounds.json", saved{Scale: 1, Runs: ring})}, "not a saved run: 0 rounds"},
		{"not JSON", []string{"-from", notJSON}, "-from " + notJSON},
		{"missing", []string{"-from", filepath.Join(dir, "missing.json")}, "-from " + filepath.Join(dir, "missing.json")},
		{"nothing selected", []string{"-from", write("ring.json", saved{Scale: 1, Rounds: 1, Runs: ring}), "-workloads", "fib"}, "holds no run of -workloads fib"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(dir, "out-"+strings.ReplaceAll(tt.name, " ", "-"))
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), append(tt.args, "-out", out), &stdout, &stderr)
			require.Equal(t, 2, code, "exit code; stderr:\n%s", stderr.String())
			require.Contains(t, stderr.String(), tt.says)
			require.Empty(t, stdout.String(), "no report")
			written, _ := os.ReadDir(out)
			require.Empty(t, written, "no report files")
		})
	}
}

// TestInterruptBeforeTheRuns: an interrupt that comes before the runs
// (here, before anything started) ends the harness with status 1 and
// says it was interrupted, whatever step it stopped.
func TestInterruptBeforeTheRuns(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"-workloads", "ring", "-impls", "sched", "-out", ""}, &stdout, &stderr)
	require.Equal(t, 1, code, "exit code; stderr:\n%s", stderr.String())
	require.Contains(t, stderr.String(), "bench: interrupted")
	require.NotContains(t, stderr.String(), "running ", "no run started")
	require.Empty(t, stdout.String(), "no report")
}
