package workload

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Func runs one workload once at sizes sz. It does its setup, calls
// m.Start just before the measured part and m.Stop just after it, checks
// its own answer and returns an error if the answer is wrong, so that a
// fast wrong run fails instead of winning.
type Func func(m *Meter, sz Sizes) (Outcome, error)

// Outcome is what a [Func] reports besides its error.
type Outcome struct {
	// Detail says what was checked, for the JSON result (e.g. "sum=499999500000").
	Detail string
	// BytesPerProcess is set by the idle workload: the growth of heap and
	// stacks per idle process (see [LiveBytes]).
	BytesPerProcess float64
	// Latency is set by the remote ping-pong workload: its round-trip
	// times (see [Latencies]).
	Latency *Latency
}

// Entry is one workload an implementation runs. An implementation may
// offer several variants of one workload (goroutines with unbuffered or
// buffered channels); the report keeps the fastest and says which.
type Entry struct {
	Workload string
	Variant  string // "" when there is only one way
	Run      Func
}

// Result is the JSON line a benchmark binary prints for one run.
type Result struct {
	Impl     string  `json:"impl"`
	Variant  string  `json:"variant,omitempty"`
	Workload string  `json:"workload"`
	Scale    float64 `json:"scale"`
	Ops      int64   `json:"ops"` // unit operations (see Sizes.Ops)

	NS           int64    `json:"ns"`                       // duration of the measured part
	CPUNS        int64    `json:"cpu_ns"`                   // CPU time the process spent in the measured part, user and system, all threads
	Allocs       uint64   `json:"allocs"`                   // heap allocations in the measured part
	AllocBytes   uint64   `json:"alloc_bytes"`              // bytes allocated in the measured part
	PeakRSS      uint64   `json:"peak_rss"`                 // the process's peak resident set, bytes
	BytesPerProc float64  `json:"bytes_per_proc,omitempty"` // idle workload only
	Latency      *Latency `json:"latency,omitempty"`        // remote ping-pong only
	GCs          uint32   `json:"gcs"`                      // garbage collections in the measured part
	GoMaxProcs   int      `json:"gomaxprocs"`
	// Round and TransferNS are set by the harness, not by the run's
	// process: the round the run belongs to (from 1; 0 if not known), and
	// how long a cache line took to move between two cores just before
	// that round, in nanoseconds (0 if not measured).
	Round      int     `json:"round,omitempty"`
	TransferNS float64 `json:"transfer_ns,omitempty"`
	OK         bool    `json:"ok"`
	Detail     string  `json:"detail,omitempty"`
	Error      string  `json:"error,omitempty"`
}

// Meter measures the part of a run between Start and Stop: wall time,
// the CPU time of the whole process (every thread: the workers, the
// runtime's, the collector's), allocations and garbage collections.
// Start forces a collection so that garbage left by the setup is not
// charged to the run.
type Meter struct {
	start, stop       time.Time
	cpuStart, cpuStop time.Duration
	before            runtime.MemStats
	after             runtime.MemStats
	started           bool
	stopped           bool
}

// Start begins the measured part.
func (m *Meter) Start() {
	runtime.GC()
	runtime.ReadMemStats(&m.before)
	m.started = true
	m.cpuStart = processCPU()
	m.start = time.Now()
}

// Stop ends the measured part. A second Stop is ignored.
func (m *Meter) Stop() {
	if m.stopped {
		return
	}
	m.stop = time.Now()
	m.cpuStop = processCPU()
	runtime.ReadMemStats(&m.after)
	m.stopped = true
}

// LiveBytes collects garbage and returns the bytes held by live heap
// objects plus goroutine stacks in use. The idle workload takes it before
// and after starting its processes: stacks are where a parked goroutine's
// memory is, so leaving them out would make goroutines look free.
func LiveBytes() uint64 {
	runtime.GC()
	runtime.GC() // a second cycle frees what the first one's finalizers released
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc + ms.StackInuse
}

// PerProcess returns the growth from before to after divided by n, or 0
// if nothing grew.
func PerProcess(before, after uint64, n int) float64 {
	if after <= before || n <= 0 {
		return 0
	}
	return float64(after-before) / float64(n)
}

// PeakRSS returns the peak resident set size of this process in bytes:
// VmHWM from /proc/self/status where there is one, else getrusage.
func PeakRSS() uint64 {
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			line := sc.Text()
			if rest, ok := bytes.CutPrefix([]byte(line), []byte("VmHWM:")); ok {
				f := bytes.Fields(rest)
				if len(f) >= 1 {
					if kb, err := strconv.ParseUint(string(f[0]), 10, 64); err == nil {
						return kb * 1024
					}
				}
			}
		}
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		return uint64(ru.Maxrss) * 1024 // kilobytes on Linux
	}
	return 0
}

// processCPU returns the CPU time the process has used so far, user and
// system, summed over its threads (getrusage), or 0 if it cannot tell.
// Two readings bracket a measured part: unlike its wall time, what it
// spent does not shrink when other processes take the cores, so it is
// what sets an implementation's speed on a loaded machine.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Listing is what a benchmark binary prints for -list: the workloads and
// variants it has.
type Listing struct {
	Impl    string   `json:"impl"`
	Entries []string `json:"entries"` // "workload" or "workload/variant"
}

// Key names an entry as "workload" or "workload/variant".
func Key(workload, variant string) string {
	if variant == "" {
		return workload
	}
	return workload + "/" + variant
}

// Main is the whole main function of a benchmark binary for
// implementation impl with the given entries. It parses the command line
// (-list, or -workload NAME [-variant V] [-scale F] [-cpuprofile FILE]
// [-memprofile FILE] [-trace FILE]),
// runs the workload once, prints one JSON [Result] on standard output and
// exits with status 1 if the run failed its check.
func Main(impl string, entries []Entry) {
	os.Exit(run(impl, entries, os.Args[1:], os.Stdout, os.Stderr))
}

// SizedFunc runs a workload on a task pool of the given number of workers.
type SizedFunc func(m *Meter, sz Sizes, workers int) (Outcome, error)

// PoolEntries returns the entries of a task-pool library: the
// task-shaped workloads (skynet, spawn, fan-out, fib), each in two
// variants: "cpu", a pool of GOMAXPROCS workers, and "wide", a pool of
// wide workers.
func PoolEntries(wide int, skynet, spawn, fanOut, fib SizedFunc) []Entry {
	var entries []Entry
	for _, v := range []struct {
		name    string
		workers int
	}{{"cpu", runtime.GOMAXPROCS(0)}, {"wide", wide}} {
		bind := func(f SizedFunc) Func {
			return func(m *Meter, sz Sizes) (Outcome, error) { return f(m, sz, v.workers) }
		}
		entries = append(entries,
			Entry{Workload: Skynet, Variant: v.name, Run: bind(skynet)},
			Entry{Workload: Spawn, Variant: v.name, Run: bind(spawn)},
			Entry{Workload: FanOut, Variant: v.name, Run: bind(fanOut)},
			Entry{Workload: Fib, Variant: v.name, Run: bind(fib)},
		)
	}
	return entries
}

func run(impl string, entries []Entry, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(impl, flag.ContinueOnError)
	fs.SetOutput(stderr)
	list := fs.Bool("list", false, "print the workloads and variants this binary runs, as JSON")
	name := fs.String("workload", "", "workload to run")
	variant := fs.String("variant", "", "variant of the workload")
	scale := fs.Float64("scale", 1, "size factor (1: the full sizes, a million messages, leaves or processes)")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file")
	memprofile := fs.String("memprofile", "", "write an allocation profile of the run to this file")
	tracefile := fs.String("trace", "", "write an execution trace of the run to this file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected arguments %q: it takes flags only (-h lists them)\n", impl, fs.Args())
		return 2
	}
	if !ScaleOK(*scale) {
		fmt.Fprintf(stderr, "%s: -scale %v: need a positive factor, at most %d\n", impl, *scale, MaxScale)
		return 2
	}
	l := Listing{Impl: impl}
	for _, e := range entries {
		l.Entries = append(l.Entries, Key(e.Workload, e.Variant))
	}
	if *list {
		_ = json.NewEncoder(stdout).Encode(l)
		return 0
	}
	i := slices.IndexFunc(entries, func(e Entry) bool { return e.Workload == *name && e.Variant == *variant })
	if i < 0 {
		fmt.Fprintf(stderr, "%s: no workload %q (it runs: %s)\n", impl, Key(*name, *variant), strings.Join(l.Entries, ", "))
		return 2
	}
	res := Measure(impl, entries[i], *scale, Profiles{CPU: *cpuprofile, Trace: *tracefile})
	if *memprofile != "" {
		if err := writeHeapProfile(*memprofile); err != nil && res.OK {
			res.OK, res.Error = false, err.Error()
		}
	}
	_ = json.NewEncoder(stdout).Encode(res)
	if !res.OK {
		fmt.Fprintf(stderr, "%s %s: %s\n", impl, Key(*name, *variant), res.Error)
		return 1
	}
	return 0
}

// writeHeapProfile writes the allocation profile (every allocation since
// the start, sampled) to path.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC()
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Profiles names the files [Measure] writes profiles of a run to; an
// empty name writes none.
type Profiles struct {
	CPU   string // a CPU profile (runtime/pprof)
	Trace string // an execution trace (runtime/trace), whose scheduler-latency profile shows hand-offs between goroutines
}

// Measure runs entry once at scale and returns its result. A panic in the
// workload is reported as a failed run. It writes a CPU profile and an
// execution trace of the whole run to the files named in prof.
func Measure(impl string, e Entry, scale float64, prof Profiles) (res Result) {
	sz := SizesFor(scale)
	res = Result{
		Impl: impl, Variant: e.Variant, Workload: e.Workload, Scale: scale,
		Ops: sz.Ops(e.Workload), GoMaxProcs: runtime.GOMAXPROCS(0),
	}
	if prof.CPU != "" {
		f, err := os.Create(prof.CPU)
		if err != nil {
			res.Error = err.Error()
			return res
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			res.Error = err.Error()
			return res
		}
		defer pprof.StopCPUProfile()
	}
	if prof.Trace != "" {
		f, err := os.Create(prof.Trace)
		if err != nil {
			res.Error = err.Error()
			return res
		}
		defer f.Close()
		if err := trace.Start(f); err != nil {
			res.Error = err.Error()
			return res
		}
		defer trace.Stop()
	}
	var m Meter
	out, err := func() (out Outcome, err error) {
		defer func() {
			if v := recover(); v != nil {
				err = fmt.Errorf("panic: %v", v)
			}
		}()
		return e.Run(&m, sz)
	}()
	if err == nil && (!m.started || !m.stopped) {
		err = errors.New("workload did not call Meter.Start and Meter.Stop")
	}
	res.PeakRSS = PeakRSS()
	if err != nil {
		res.Error = err.Error()
		return res
	}
	res.NS = m.stop.Sub(m.start).Nanoseconds()
	res.CPUNS = (m.cpuStop - m.cpuStart).Nanoseconds()
	res.Allocs = m.after.Mallocs - m.before.Mallocs
	res.AllocBytes = m.after.TotalAlloc - m.before.TotalAlloc
	res.GCs = m.after.NumGC - m.before.NumGC
	res.BytesPerProc = out.BytesPerProcess
	res.Latency = out.Latency
	res.Detail = out.Detail
	res.OK = true
	return res
}
