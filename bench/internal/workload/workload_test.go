package workload

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestSizesFor(t *testing.T) {
	full := SizesFor(1)
	if full.PingPongMessages != 1_000_000 || full.SkynetLeaves != 1_000_000 || full.SpawnProcesses != 1_000_000 ||
		full.FanOutReceivers != 1000 || full.FanOutMessages != 1_000_000 || full.IdleProcesses != 1_000_000 ||
		full.RingNodes*full.RingLaps != 1_000_000 || full.YieldProcesses*full.YieldsPerProcess != 1_000_000 || full.FibN != 27 {
		t.Errorf("SizesFor(1) = %+v, want the full sizes", full)
	}
	if got := SizesFor(0); got != full {
		t.Errorf("SizesFor(0) = %+v, want the full sizes", got)
	}
	quick := SizesFor(0.01)
	if quick.SkynetLeaves != 10_000 || quick.PingPongMessages != 10_000 || quick.FanOutMessages%quick.FanOutReceivers != 0 {
		t.Errorf("SizesFor(0.01) = %+v", quick)
	}
	if quick.FibN >= full.FibN {
		t.Errorf("fib n at scale 0.01 = %d, want below %d", quick.FibN, full.FibN)
	}
	if full.RemoteRoundTrips != 20_000 || full.RemoteEchoMessages != 1_000_000 || full.RemoteEchoWindow != 1000 ||
		full.RemotePairs != 1000 || full.RemotePairRoundTrips != 500 {
		t.Errorf("SizesFor(1) remote sizes = %+v", full)
	}
	if quick.RemoteRoundTrips != 200 || quick.RemoteEchoMessages != 10_000 || quick.RemoteEchoWindow != 1000 ||
		quick.RemotePairs != 1000 || quick.RemotePairRoundTrips != 5 {
		t.Errorf("SizesFor(0.01) remote sizes = %+v", quick)
	}
	if tiny := SizesFor(1e-6); tiny.RemoteEchoMessages < tiny.RemoteEchoWindow || tiny.RemoteRoundTrips < 100 || tiny.RemotePairRoundTrips < 1 {
		t.Errorf("SizesFor(1e-6) remote sizes too small to mean anything: %+v", tiny)
	}
}

func TestRemoteOps(t *testing.T) {
	sz := SizesFor(1)
	for _, tt := range []struct {
		workload string
		want     int64
	}{
		{RemotePingPong, 40_000}, // two messages per round trip
		{RemoteEcho, 2_000_000},  // each message and its echo
		{RemotePairs, 1_000_000}, // 1,000 pairs × 500 round trips × 2
		{PingPong, 1_000_000},    // unchanged: local hops
	} {
		if got := sz.Ops(tt.workload); got != tt.want {
			t.Errorf("Ops(%s) = %d, want %d", tt.workload, got, tt.want)
		}
	}
	var remote []string
	for _, w := range Names {
		if IsRemote(w) {
			remote = append(remote, w)
		}
	}
	if want := []string{RemotePingPong, RemoteEcho, RemotePairs}; strings.Join(remote, " ") != strings.Join(want, " ") {
		t.Errorf("remote workloads = %v, want %v", remote, want)
	}
	if !slices.Equal(Names[:8], []string{PingPong, Ring, Skynet, Spawn, FanOut, Yield, Fib, Idle}) {
		t.Errorf("the local workloads changed: %v", Names[:8])
	}
}

func TestLatencies(t *testing.T) {
	l := NewLatencies(200)
	if l.Summary() != nil {
		t.Error("Summary of nothing recorded is not nil")
	}
	for i := 200; i >= 1; i-- { // 1..200 µs, out of order
		l.Add(time.Duration(i) * time.Microsecond)
	}
	l.Add(time.Hour) // beyond the room: not recorded
	got := l.Summary()
	want := &Latency{Samples: 200, P50NS: 100_000, P99NS: 198_000, MeanNS: 100_500, MaxNS: 200_000}
	if *got != *want {
		t.Errorf("Summary() = %+v, want %+v", *got, *want)
	}
	seven := NewLatencies(7) // ranks that are not whole: ceil(3.5) = 4, ceil(6.93) = 7
	for i := 7; i >= 1; i-- {
		seven.Add(time.Duration(i))
	}
	if got := seven.Summary(); got.P50NS != 4 || got.P99NS != 7 || got.MeanNS != 4 {
		t.Errorf("seven samples 1..7: %+v, want p50 4, p99 7, mean 4", got)
	}
	one := NewLatencies(1)
	one.Add(7)
	if got := one.Summary(); got.P50NS != 7 || got.P99NS != 7 || got.MaxNS != 7 {
		t.Errorf("one sample: %+v", got)
	}
	if allocs := testing.AllocsPerRun(100, func() { l.Add(time.Millisecond) }); allocs != 0 {
		t.Errorf("Add allocates %v times", allocs)
	}
}

func TestSeq(t *testing.T) {
	b := make([]byte, SeqSize)
	PutSeq(b, 1<<40+3)
	if n, ok := Seq(b); !ok || n != 1<<40+3 {
		t.Errorf("Seq(PutSeq(2^40+3)) = %d, %v", n, ok)
	}
	if _, ok := Seq(b[:7]); ok {
		t.Error("Seq of 7 bytes is ok")
	}
	if _, ok := Seq(append(b, 0)); ok {
		t.Error("Seq of 9 bytes is ok")
	}
}

func TestAnswers(t *testing.T) {
	if got := SkynetSum(1_000_000); got != 499999500000 {
		t.Errorf("SkynetSum(1e6) = %d", got)
	}
	if got := SkynetNodes(1_000_000); got != 1_111_111 {
		t.Errorf("SkynetNodes(1e6) = %d", got)
	}
	for n, want := range []int64{0, 1, 1, 2, 3, 5, 8, 13} {
		if got := FibValue(n); got != want {
			t.Errorf("FibValue(%d) = %d, want %d", n, got, want)
		}
	}
	// calls(n) = calls(n-1) + calls(n-2) + 1, calls(0) = calls(1) = 1.
	calls := []int64{1, 1}
	for n := 2; n <= 20; n++ {
		calls = append(calls, calls[n-1]+calls[n-2]+1)
	}
	for n, want := range calls {
		if got := FibCalls(n); got != want {
			t.Errorf("FibCalls(%d) = %d, want %d", n, got, want)
		}
	}
	if got := SpawnSum(4); got != 6 {
		t.Errorf("SpawnSum(4) = %d, want 6", got)
	}
}

func TestThousands(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -1234: "-1,234"} {
		if got := Thousands(n); got != want {
			t.Errorf("Thousands(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestLabelsAndOps(t *testing.T) {
	sz := SizesFor(1)
	for _, w := range Names {
		if sz.Label(w) == "" || sz.Ops(w) <= 0 || OpUnit(w) == "op" || Describe(w) == w {
			t.Errorf("workload %s lacks a label, ops, unit or description", w)
		}
	}
}

func TestRunPrintsResult(t *testing.T) {
	entries := []Entry{
		{Workload: Ring, Run: func(m *Meter, sz Sizes) (Outcome, error) {
			m.Start()
			m.Stop()
			return Outcome{Detail: "fine"}, nil
		}},
		{Workload: Ring, Variant: "wrong", Run: func(m *Meter, sz Sizes) (Outcome, error) {
			m.Start()
			m.Stop()
			return Outcome{}, Check("hops", 1, 2)
		}},
		{Workload: Fib, Run: func(*Meter, Sizes) (Outcome, error) { panic("boom") }},
		{Workload: Idle, Run: func(*Meter, Sizes) (Outcome, error) { return Outcome{}, nil }},
	}
	decode := func(b []byte) Result {
		t.Helper()
		var r Result
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("output %q: %v", b, err)
		}
		return r
	}
	for _, tt := range []struct {
		args    []string
		code    int
		ok      bool
		errText string
	}{
		{[]string{"-workload", Ring, "-scale", "0.5"}, 0, true, ""},
		{[]string{"-workload", Ring, "-variant", "wrong"}, 1, false, "hops: got 1, want 2"},
		{[]string{"-workload", Fib}, 1, false, "panic: boom"},
		{[]string{"-workload", Idle}, 1, false, "Meter.Start"},
	} {
		var out, errOut bytes.Buffer
		if code := run("test", entries, tt.args, &out, &errOut); code != tt.code {
			t.Errorf("%v: exit code %d, want %d (stderr %q)", tt.args, code, tt.code, errOut.String())
		}
		r := decode(out.Bytes())
		if r.OK != tt.ok || !strings.Contains(r.Error, tt.errText) || r.Impl != "test" || r.PeakRSS == 0 {
			t.Errorf("%v: result %+v", tt.args, r)
		}
	}

	// The CPU time of the measured part: a run that spins until the
	// process has used 5 ms of CPU reports at least that much.
	const burn = 5 * time.Millisecond
	spin := []Entry{{Workload: Skynet, Run: func(m *Meter, sz Sizes) (Outcome, error) {
		m.Start()
		for from := processCPU(); processCPU()-from < burn; {
		}
		m.Stop()
		return Outcome{}, nil
	}}}
	var spun bytes.Buffer
	if code := run("test", spin, []string{"-workload", Skynet}, &spun, &spun); code != 0 {
		t.Fatalf("spin: exit code %d: %s", code, spun.String())
	}
	if r := decode(spun.Bytes()); r.CPUNS < burn.Nanoseconds() {
		t.Errorf("a run that used %v of CPU reports %v", burn, time.Duration(r.CPUNS))
	}

	var out bytes.Buffer
	if code := run("test", entries, []string{"-list"}, &out, &out); code != 0 {
		t.Fatalf("-list: exit code %d", code)
	}
	var l Listing
	if err := json.Unmarshal(out.Bytes(), &l); err != nil {
		t.Fatal(err)
	}
	if want := []string{"ring", "ring/wrong", "fib", "idle"}; strings.Join(l.Entries, " ") != strings.Join(want, " ") {
		t.Errorf("-list entries = %v, want %v", l.Entries, want)
	}
	if code := run("test", entries, []string{"-workload", "nope"}, &out, &out); code != 2 {
		t.Errorf("unknown workload: exit code %d, want 2", code)
	}
	// A scale the sizes cannot be made of is refused, not run at
	// another size under its name.
	for _, scale := range []string{"0", "-1", "NaN", "+Inf", "1e13"} {
		out.Reset()
		if code := run("test", entries, []string{"-workload", Ring, "-scale", scale}, &out, &out); code != 2 || !strings.Contains(out.String(), "-scale") {
			t.Errorf("-scale %s: exit code %d, output %q; want 2 and a message naming -scale", scale, code, out.String())
		}
	}
}

func TestCheck(t *testing.T) {
	if err := Check("x", 1, 1); err != nil {
		t.Error(err)
	}
	if err := Check("x", 1, 2); err == nil || err.Error() != "x: got 1, want 2" {
		t.Errorf("Check(1, 2) = %v", err)
	}
}

// TestProfilesWritten: -cpuprofile and -trace write a CPU profile and an
// execution trace of the run.
func TestProfilesWritten(t *testing.T) {
	entries := []Entry{{Workload: Ring, Run: func(m *Meter, sz Sizes) (Outcome, error) {
		m.Start()
		m.Stop()
		return Outcome{Detail: "fine"}, nil
	}}}
	dir := t.TempDir()
	cpu, tr := filepath.Join(dir, "cpu.pprof"), filepath.Join(dir, "run.trace")
	var out, errOut bytes.Buffer
	if code := run("test", entries, []string{"-workload", Ring, "-cpuprofile", cpu, "-trace", tr}, &out, &errOut); code != 0 {
		t.Fatalf("exit code %d: %s", code, errOut.String())
	}
	if b, err := os.ReadFile(cpu); err != nil || len(b) == 0 {
		t.Errorf("CPU profile: %d bytes, %v", len(b), err)
	}
	b, err := os.ReadFile(tr)
	if err != nil || !bytes.HasPrefix(b, []byte("go 1.")) {
		t.Errorf("trace: %q..., %v; want a Go execution trace", b[:min(len(b), 16)], err)
	}
	if code := run("test", entries, []string{"-workload", Ring, "-trace", filepath.Join(dir, "no", "such", "dir")}, &out, &errOut); code != 1 {
		t.Errorf("a trace that cannot be written: exit code %d, want 1", code)
	}
}

// TestRunRefusesBadArguments: a benchmark binary refuses a stray
// argument, and a workload or variant it does not run, with exit status
// 2, no result, and a message naming the argument, or the entries it
// runs; it runs nothing.
func TestRunRefusesBadArguments(t *testing.T) {
	ran := false
	entries := []Entry{
		{Workload: Ring, Run: func(m *Meter, sz Sizes) (Outcome, error) { ran = true; m.Start(); m.Stop(); return Outcome{}, nil }},
		{Workload: Ring, Variant: "fast", Run: func(m *Meter, sz Sizes) (Outcome, error) { ran = true; m.Start(); m.Stop(); return Outcome{}, nil }},
	}
	for _, tt := range []struct {
		args []string
		says string
	}{
		{[]string{"-workload", Ring, "extra"}, `unexpected arguments ["extra"]`},
		{[]string{"-list", "extra"}, `unexpected arguments ["extra"]`},
		{[]string{"-workload", "nope"}, `no workload "nope" (it runs: ring, ring/fast)`},
		{[]string{"-workload", Ring, "-variant", "slow"}, `no workload "ring/slow" (it runs: ring, ring/fast)`},
	} {
		var out, errOut bytes.Buffer
		code := run("test", entries, tt.args, &out, &errOut)
		if code != 2 || out.Len() != 0 || !strings.Contains(errOut.String(), tt.says) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2, nothing on stdout, and a message with %q", tt.args, code, out.String(), errOut.String(), tt.says)
		}
	}
	if ran {
		t.Error("a workload ran")
	}
}
