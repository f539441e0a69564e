// Command bench is the benchmark harness of github.com/procsched/scheduler:
// it runs a fixed set of workloads (docs/benchmarks.md lists them) on
// this scheduler and on what
// a user would pick instead (goroutines with channels, ants, pond,
// protoactor-go, hollywood), and reports how they compare. The remote
// workloads run two nodes in one process and compare this scheduler's
// remote module with the actor frameworks' remotes and with raw NATS.
//
// It builds the binaries of the implementations (impl/NAME; an
// implementation that runs both local and remote workloads has a second
// binary, impl/NAME-remote, so that the remote dependencies stay out of
// its local runs) once, then runs every (workload, implementation) pair
// in a fresh process, the implementations interleaved (A B C, A B C,
// ...) for several rounds, so a slow spell of a shared machine is spread
// over all of them. Each run prints one JSON result (time, allocations,
// peak RSS, round-trip latencies for remote ping-pong, and whether its
// answer checked out); the harness reports the median and range of the
// rounds, ratios to the baseline (goroutines for local workloads, raw
// NATS for remote ones), allocations and peak memory, how long a cache
// line took to move between two cores before each round (transfer.go),
// writes results/latest.md, results/latest.svg and results/latest.json (-name
// changes "latest"), and exits non-zero if any run failed its check. An
// interrupt (Ctrl-C, or SIGTERM) kills the run in progress and ends the
// harness with status 1, writing no report.
//
// Usage, inside bench/:
//
//	go run .                          # everything: scale 1, 3 rounds
//	go run . -quick                   # every workload once at scale 0.01 (CI)
//	go run . -workloads skynet,spawn -impls sched,goroutines -rounds 5
//	go run . -workloads fib -impls sched -rounds 1 -cpuprofile /tmp/prof -memprofile /tmp/mem
//	go run . -workloads remote-pingpong -impls sched -rounds 1 -trace /tmp/trace   # go tool trace -pprof=sched
//	go run . -workloads remote-pingpong,remote-echo,remote-pairs -name remote   # results/remote.*
//	go run . -from results/latest.json   # redraw the table and chart of a saved run
//	go run . -load 2                  # the same with two busy-looping goroutines in another process
//	go run . -pgo                     # every binary built with a profile of its own runs (see pgo.go)
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/procsched/scheduler/bench/internal/report"
	"github.com/procsched/scheduler/bench/internal/stats"
	"github.com/procsched/scheduler/bench/internal/workload"
)

// modulePath is this module's path; the harness finds its own directory
// by it.
const modulePath = "github.com/procsched/scheduler/bench"

// implNames are the implementations, in report order.
var implNames = []string{"sched", "goroutines", "ants", "pond", "protoactor", "hollywood", "nats"}

// binary is one benchmark program, the main package impl/<dir>: the
// workloads of one implementation, either its local ones or its remote
// ones (see [workload.IsRemote]). The remote ones link a network stack
// (the NATS server and client, gRPC, DRPC) that the local runs must not
// carry, so an implementation that runs both has two binaries.
type binary struct {
	impl, dir string
	remote    bool
}

// binaries lists every benchmark program.
var binaries = []binary{
	{"sched", "sched", false},
	{"goroutines", "goroutines", false},
	{"ants", "ants", false},
	{"pond", "pond", false},
	{"protoactor", "protoactor", false},
	{"hollywood", "hollywood", false},
	{"sched", "sched-remote", true},
	{"protoactor", "protoactor-remote", true},
	{"hollywood", "hollywood-remote", true},
	{"nats", "nats", true},
}

// binaryFor returns the directory (and file name) of the binary that
// runs workload w for implementation impl, "" if there is none.
func binaryFor(impl, w string) string {
	for _, b := range binaries {
		if b.impl == impl && b.remote == workload.IsRemote(w) {
			return b.dir
		}
	}
	return ""
}

// baselineOf returns the implementation the ratios of workload w are
// taken against: goroutines with channels for a local workload, raw NATS
// for a remote one, the floor any remote layer on NATS stands on.
func baselineOf(w string) string {
	if workload.IsRemote(w) {
		return "nats"
	}
	return "goroutines"
}

func main() {
	if len(os.Args) == 3 && os.Args[1] == busyArg {
		os.Exit(busyLoad(os.Args[2]))
	}
	// An interrupt (Ctrl-C) or SIGTERM cancels the context: the run in
	// progress is killed, no report is written, and the built binaries
	// are removed, where the default action would end the harness at
	// once and leave its build directory behind.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// config is the parsed command line.
type config struct {
	workloads  []string
	impls      []string
	rounds     int
	scale      float64
	quick      bool
	out        string // "" writes no files
	name       string // base name of the files written to out
	cpuprofile string // directory for one CPU profile per run, "" for none
	memprofile string // directory for one allocation profile per run, "" for none
	trace      string // directory for one execution trace per run, "" for none
	timeout    time.Duration
	from       string // re-render the report from this latest.json instead of running
	load       int    // busy-loop goroutines in a separate process during each run
	pgo        bool   // build the binaries with profiles of their own runs (see pgo.go)
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	workloads := fs.String("workloads", "all", "comma-separated workloads: "+strings.Join(workload.Names, ","))
	impls := fs.String("impls", "all", "comma-separated implementations: "+strings.Join(implNames, ","))
	rounds := fs.Int("rounds", 3, fmt.Sprintf("rounds, 1 to %d; each runs every implementation once per workload", maxRounds))
	scale := fs.Float64("size", 1, "size factor, above 0 and at most 1000: 1 is the full size (a million messages, leaves, processes)")
	quick := fs.Bool("quick", false, "every workload once at size 0.01, checking results (CI); writes files only with -out")
	out := fs.String("out", "results", "directory for the report: NAME.md, NAME.svg and NAME.json")
	name := fs.String("name", "latest", "base name of the report's files in -out")
	cpuprofile := fs.String("cpuprofile", "", "directory to write a CPU profile of every run to")
	memprofile := fs.String("memprofile", "", "directory to write an allocation profile of every run to")
	trace := fs.String("trace", "", "directory to write an execution trace of every run to")
	timeout := fs.Duration("timeout", 10*time.Minute, "limit for one run")
	from := fs.String("from", "", "render the report from a saved latest.json instead of running anything")
	load := fs.Int("load", 0, fmt.Sprintf("busy-loop goroutines, 0 to %d, run in a separate process during each run (CPU contention)", maxLoad))
	pgo := fs.Bool("pgo", false, "build every binary with profile-guided optimisation, from CPU profiles of one run of each of its selected workloads")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *from != "" {
		// A saved run has its own size and rounds, and nothing runs.
		var given []string
		for _, name := range runOnlyFlags {
			if set[name] {
				given = append(given, "-"+name)
			}
		}
		if len(given) > 0 {
			return config{}, fmt.Errorf("%s: -from runs nothing, so %s do not apply", strings.Join(given, ", "), listFlags(runOnlyFlags))
		}
	}
	c := config{rounds: *rounds, scale: *scale, quick: *quick, out: *out, name: *name, cpuprofile: *cpuprofile, memprofile: *memprofile, trace: *trace, timeout: *timeout, from: *from, load: *load, pgo: *pgo}
	if c.quick {
		if !set["rounds"] {
			c.rounds = 1
		}
		if !set["size"] {
			c.scale = 0.01
		}
		if !set["out"] {
			c.out = ""
		}
	}
	var err error
	if c.workloads, err = pick("-workloads", "workload", *workloads, workload.Names); err != nil {
		return config{}, err
	}
	if c.impls, err = pick("-impls", "implementation", *impls, implNames); err != nil {
		return config{}, err
	}
	if len(binariesFor(c)) == 0 {
		return config{}, selectionError(c, whoRuns())
	}
	if c.rounds < 1 || c.rounds > maxRounds {
		return config{}, fmt.Errorf("-rounds %d: need 1 to %d", c.rounds, maxRounds)
	}
	if !workload.ScaleOK(c.scale) {
		return config{}, fmt.Errorf("-size %v: need a positive factor, at most %d", c.scale, workload.MaxScale)
	}
	if c.timeout <= 0 {
		return config{}, fmt.Errorf("-timeout %v: need a positive duration", c.timeout)
	}
	if c.load < 0 || c.load > maxLoad {
		return config{}, fmt.Errorf("-load %d: need 0 to %d goroutines", c.load, maxLoad)
	}
	if c.name == "" || c.name != filepath.Base(c.name) || strings.HasPrefix(c.name, ".") {
		return config{}, fmt.Errorf("-name %q: need a plain file name", c.name)
	}
	return c, nil
}

// maxRounds is the most rounds -rounds takes. The harness plans every
// run before the first and keeps every result: a thousand rounds of
// every workload are some seventy thousand runs, days at the full size,
// while a count in the millions would exhaust memory before any run.
const maxRounds = 1000

// runOnlyFlags are the flags of the runs, which -from, rendering a saved
// run, does not make.
var runOnlyFlags = []string{"rounds", "size", "quick", "timeout", "load", "pgo", "cpuprofile", "memprofile", "trace"}

// listFlags lists flag names as "-a, -b and -c".
func listFlags(names []string) string {
	dashed := make([]string, len(names))
	for i, n := range names {
		dashed[i] = "-" + n
	}
	if len(dashed) < 2 {
		return strings.Join(dashed, "")
	}
	return strings.Join(dashed[:len(dashed)-1], ", ") + " and " + dashed[len(dashed)-1]
}

// pick parses list, the value of the flag name: a comma-separated
// selection of known names ("all" for every one), returned in the known
// order. An empty value is refused, not taken as all: a shell variable
// left empty by mistake would start the full comparison, hours long.
func pick(name, what, list string, known []string) ([]string, error) {
	if list == "all" {
		return known, nil
	}
	if strings.TrimSpace(list) == "" {
		return nil, fmt.Errorf("%s %q: name one or more %ss, or all (known: %s)", name, list, what, strings.Join(known, ", "))
	}
	want := map[string]bool{}
	for _, n := range strings.Split(list, ",") {
		n = strings.TrimSpace(n)
		if !slices.Contains(known, n) {
			return nil, fmt.Errorf("%s: unknown %s %q (known: %s)", name, what, n, strings.Join(known, ", "))
		}
		want[n] = true
	}
	var out []string
	for _, n := range known {
		if want[n] {
			out = append(out, n)
		}
	}
	return out, nil
}

// run is the whole program; it returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 2
	}
	if err := bench(ctx, cfg, stdout, stderr); err != nil {
		if ctx.Err() != nil && !errors.Is(err, errInterrupted) {
			// A step before the runs, a build or a profiling run, was
			// killed: say why.
			err = fmt.Errorf("%w: %w", errInterrupted, err)
		}
		fmt.Fprintln(stderr, "bench:", strings.TrimSpace(err.Error()))
		var u usageError
		if errors.As(err, &u) {
			return 2
		}
		return 1
	}
	return 0
}

// usageError is an error of the command line that bench finds, not
// parseFlags: the harness exits with status 2 on it, as on a flag value
// parseFlags refuses, and builds and runs nothing.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// usage returns a usageError of the formatted message.
func usage(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// errSelection reports a selection of workloads and implementations
// that makes no run: a usage error, as a bad flag value is, whether
// parseFlags finds it or bench does once the binaries said what they
// run.
var errSelection = errors.New("nothing to run")

// errOut reports an -out directory the report cannot be written to: a
// usage error, found before anything is built or run.
var errOut = errors.New("cannot write the report there")

// checkOut makes sure the report's files can be written to dir (which
// it creates if needed) before the runs they report: a run of hours
// whose report could not be written would be lost. "" writes no files.
func checkOut(dir string) error {
	if err := writableDir(dir); err != nil {
		return usage("-out %s: %w: %w", dir, errOut, err)
	}
	return nil
}

// writableDir makes sure files can be written to dir, creating it if
// needed. "" is no directory: nothing to check.
func writableDir(dir string) error {
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".bench-check-*")
	if err != nil {
		return err
	}
	f.Close()
	return os.Remove(f.Name())
}

// errFailedRuns reports that some runs failed their check; the report
// is still written.
var errFailedRuns = errors.New("some runs failed")

// saved is the content of latest.json.
type saved struct {
	Machine report.Machine    `json:"machine"`
	Scale   float64           `json:"scale"`
	Rounds  int               `json:"rounds"`
	Runs    []workload.Result `json:"runs"`
}

func bench(ctx context.Context, cfg config, stdout, stderr io.Writer) error {
	if cfg.from != "" {
		return rerender(cfg, stdout, stderr)
	}
	if err := checkOut(cfg.out); err != nil {
		return err
	}
	// The profiles' directories too, before anything is built.
	for _, d := range []struct{ flag, dir string }{{"-cpuprofile", cfg.cpuprofile}, {"-memprofile", cfg.memprofile}, {"-trace", cfg.trace}} {
		if err := writableDir(d.dir); err != nil {
			return usage("%s %s: %w", d.flag, d.dir, err)
		}
	}
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	machine := describeMachine(ctx, root)
	machine.Busy = cfg.load
	binDir, err := os.MkdirTemp("", "procsched-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(binDir)
	dirs := binariesFor(cfg)
	if len(dirs) == 0 { // parseFlags refuses such a selection
		return selectionError(cfg, whoRuns())
	}
	if err := build(ctx, root, binDir, dirs, stderr); err != nil {
		return err
	}
	entries, err := listEntries(ctx, binDir, cfg)
	if err != nil {
		return err
	}
	jobs := plan(cfg, entries)
	if len(jobs) == 0 {
		return selectionError(cfg, listedWorkloads(cfg.impls, entries))
	}
	if cfg.pgo {
		if machine.PGO, err = rebuildWithProfiles(ctx, cfg, root, binDir, dirs, jobs, stderr); err != nil {
			return err
		}
	}
	fmt.Fprintf(stderr, "running %d jobs: %d workload(s) x %d round(s), size %g\n", len(jobs), len(cfg.workloads), cfg.rounds, cfg.scale)
	nameWidth := 0
	for _, w := range cfg.workloads {
		nameWidth = max(nameWidth, len(w))
	}
	var results []workload.Result
	var transfer float64
	for i, j := range jobs {
		if ctx.Err() != nil {
			return interrupted(i, len(jobs))
		}
		if i == 0 || jobs[i-1].workload != j.workload || jobs[i-1].round != j.round {
			transfer = measureTransfer() // before the load starts, whose threads would take the cores it measures
			fmt.Fprintf(stderr, "cache line between cores: %.0f ns\n", transfer)
		}
		fmt.Fprintf(stderr, "[%*d/%d] %-*s %-24s round %d/%d  ", len(strconv.Itoa(len(jobs))), i+1, len(jobs), nameWidth, j.workload, j.label(), j.round, cfg.rounds)
		load, err := startLoad(cfg.load)
		if err != nil {
			return err
		}
		res, errText := execute(ctx, cfg, binDir, j)
		res.Round, res.TransferNS = j.round, transfer
		if err := load.stop(); err != nil && res.OK {
			// Not measured under the load it claims: a failed run.
			res.OK, res.Error = false, err.Error()
		}
		if ctx.Err() != nil { // the run was killed: no result
			fmt.Fprintln(stderr)
			return interrupted(i, len(jobs))
		}
		results = append(results, res)
		if res.OK {
			fmt.Fprintf(stderr, "%s\n", summaryOf(res))
		} else {
			fmt.Fprintf(stderr, "FAILED: %s\n", res.Error)
			if errText != "" {
				fmt.Fprintf(stderr, "    stderr: %s\n", strings.ReplaceAll(strings.TrimSpace(errText), "\n", "\n    "))
			}
		}
	}
	return finish(cfg, machine, results, stdout, stderr)
}

// errInterrupted reports that the harness was interrupted during the
// runs.
var errInterrupted = errors.New("interrupted")

// interrupted is the error of an interrupt after done of total runs. No
// report is written: the runs so far are not the rounds asked for, and
// the files they would replace may hold a full run.
func interrupted(done, total int) error {
	return fmt.Errorf("%w after %d of %d runs; no report written", errInterrupted, done, total)
}

// finish writes the report of results and says whether every run passed.
func finish(cfg config, machine report.Machine, results []workload.Result, stdout, stderr io.Writer) error {
	table, chart := summarize(cfg, machine, results)
	if err := report.WriteMarkdown(stdout, table); err != nil {
		return err
	}
	if cfg.out != "" {
		if err := writeFiles(cfg.out, cfg.name, table, chart, saved{machine, cfg.scale, cfg.rounds, results}); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "wrote %s\n", filepath.Join(cfg.out, cfg.name+".{md,svg,json}"))
	}
	for _, r := range results {
		if !r.OK {
			return errFailedRuns
		}
	}
	return nil
}

// rerender rebuilds the report from a saved latest.json: the scale and
// rounds are the saved ones, the workload and implementation selection
// the command line's.
func rerender(cfg config, stdout, stderr io.Writer) error {
	sv, err := readSaved(cfg.from)
	if err != nil {
		return usage("-from %s: %w", cfg.from, err)
	}
	if !slices.ContainsFunc(sv.Runs, func(r workload.Result) bool {
		return slices.Contains(cfg.workloads, r.Workload) && slices.Contains(cfg.impls, r.Impl)
	}) {
		return usage("-from %s holds no run of -workloads %s on -impls %s", cfg.from, strings.Join(cfg.workloads, ","), strings.Join(cfg.impls, ","))
	}
	if err := checkOut(cfg.out); err != nil {
		return err
	}
	cfg.scale, cfg.rounds = sv.Scale, sv.Rounds
	return finish(cfg, sv.Machine, sv.Runs, stdout, stderr)
}

// errNotSaved reports a file that is not a run the harness saved.
var errNotSaved = errors.New("not a saved run")

// readSaved reads the saved run in file, and refuses one that is not a
// run: with no runs, or a size or rounds no run has, it would make an
// empty or meaningless report, written over the files in -out.
func readSaved(file string) (saved, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return saved{}, err
	}
	var sv saved
	if err := json.Unmarshal(raw, &sv); err != nil {
		return saved{}, fmt.Errorf("%w: %w", errNotSaved, err)
	}
	switch {
	case len(sv.Runs) == 0:
		return saved{}, fmt.Errorf("%w: no runs", errNotSaved)
	case !workload.ScaleOK(sv.Scale):
		return saved{}, fmt.Errorf("%w: size %g", errNotSaved, sv.Scale)
	case sv.Rounds < 1:
		return saved{}, fmt.Errorf("%w: %d rounds", errNotSaved, sv.Rounds)
	}
	return sv, nil
}

func summaryOf(r workload.Result) string {
	s := report.Duration(float64(r.NS))
	if r.BytesPerProc > 0 {
		s += fmt.Sprintf(", %.0f B/proc", r.BytesPerProc)
	}
	if workload.IsRemote(r.Workload) && r.NS > 0 {
		s += ", " + report.Rate(float64(r.Ops)/float64(r.NS)*1e9) + " msgs/s"
	}
	if l := r.Latency; l != nil {
		s += ", round trip p50 " + report.Duration(float64(l.P50NS)) + " p99 " + report.Duration(float64(l.P99NS))
	}
	return s + "  ok " + r.Detail
}

// moduleRoot finds the bench module's directory: the working directory
// or one above it, or bench/ below it (so the harness also runs from the
// repository root).
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	if isBenchModule(filepath.Join(dir, "bench")) {
		return filepath.Join(dir, "bench"), nil
	}
	for d := dir; ; d = filepath.Dir(d) {
		if isBenchModule(d) {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no %s module at or above %s", modulePath, dir)
		}
	}
}

func isBenchModule(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	first, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimSpace(first) == "module "+modulePath
}

// goTool returns the go command: $GOROOT/bin/go when the go command set
// GOROOT (go run, go test), else the one on PATH.
func goTool() string {
	if root := os.Getenv("GOROOT"); root != "" {
		p := filepath.Join(root, "bin", "go")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "go"
}

// binariesFor returns the binaries the selected implementations need
// for the selected workloads.
func binariesFor(cfg config) []string {
	var dirs []string
	for _, b := range binaries {
		if !slices.Contains(cfg.impls, b.impl) {
			continue
		}
		if slices.ContainsFunc(cfg.workloads, func(w string) bool { return workload.IsRemote(w) == b.remote }) {
			dirs = append(dirs, b.dir)
		}
	}
	return dirs
}

// selectionError is the error of cfg's selection when it makes no run;
// who says which implementations run which workloads.
func selectionError(cfg config, who string) error {
	return usage("%w: -impls %s runs none of -workloads %s: %s", errSelection,
		strings.Join(cfg.impls, ","), strings.Join(cfg.workloads, ","), who)
}

// listedWorkloads says which workloads each of impls runs, by the
// entries its binaries listed, as "ants runs skynet, spawn".
func listedWorkloads(impls []string, entries map[string][]string) string {
	var parts []string
	for _, impl := range impls {
		var ws []string
		for _, e := range entries[impl] {
			if w, _, _ := strings.Cut(e, "/"); !slices.Contains(ws, w) {
				ws = append(ws, w)
			}
		}
		if len(ws) > 0 {
			parts = append(parts, impl+" runs "+strings.Join(ws, ", "))
		}
	}
	return strings.Join(parts, "; ")
}

// whoRuns says which implementations run the local workloads and which
// the remote ones, for a selection that runs nothing.
func whoRuns() string {
	var local, remote []string
	for _, b := range binaries {
		if b.remote {
			remote = append(remote, b.impl)
		} else {
			local = append(local, b.impl)
		}
	}
	return fmt.Sprintf("the local workloads run on %s; the remote ones on %s", strings.Join(local, ", "), strings.Join(remote, ", "))
}

// build compiles the binaries dirs into dir in one go command.
func build(ctx context.Context, root, dir string, dirs []string, stderr io.Writer) error {
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	for _, name := range dirs {
		args = append(args, "./impl/"+name)
	}
	fmt.Fprintf(stderr, "building %s\n", strings.Join(dirs, ", "))
	return goBuild(ctx, root, args)
}

// goBuild runs the go command with args in root, and returns an error
// with the command's output if it fails.
func goBuild(ctx context.Context, root string, args []string) error {
	cmd := exec.CommandContext(ctx, goTool(), args...)
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out.String())
	}
	return nil
}

// listEntries asks every binary built for cfg which workloads and
// variants it runs, and returns them by implementation. A binary lists
// only the workloads of its own kind, local or remote.
func listEntries(ctx context.Context, dir string, cfg config) (map[string][]string, error) {
	entries := map[string][]string{}
	for _, b := range binaries {
		if !slices.Contains(binariesFor(cfg), b.dir) {
			continue
		}
		out, err := exec.CommandContext(ctx, filepath.Join(dir, b.dir), "-list").Output()
		if err != nil {
			return nil, fmt.Errorf("%s -list: %w", b.dir, err)
		}
		var l workload.Listing
		if err := json.Unmarshal(out, &l); err != nil {
			return nil, fmt.Errorf("%s -list: %w", b.dir, err)
		}
		for _, e := range l.Entries {
			w, _, _ := strings.Cut(e, "/")
			if workload.IsRemote(w) != b.remote {
				return nil, fmt.Errorf("%s -list: %s is not a workload of its kind", b.dir, w)
			}
		}
		entries[b.impl] = append(entries[b.impl], l.Entries...)
	}
	return entries, nil
}

// job is one run: a workload on one implementation (and variant) in one
// round.
type job struct {
	workload, impl, variant string
	round                   int
}

func (j job) label() string {
	if j.variant == "" {
		return j.impl
	}
	return j.impl + "/" + j.variant
}

// plan lists the runs: workload by workload, and within a workload round
// by round, every implementation and variant once per round.
func plan(cfg config, entries map[string][]string) []job {
	var jobs []job
	for _, w := range cfg.workloads {
		for r := 1; r <= cfg.rounds; r++ {
			for _, impl := range cfg.impls {
				for _, e := range entries[impl] {
					name, variant, _ := strings.Cut(e, "/")
					if name == w {
						jobs = append(jobs, job{workload: w, impl: impl, variant: variant, round: r})
					}
				}
			}
		}
	}
	return jobs
}

// execute runs one job in a fresh process and returns its result and,
// when it failed, what it wrote on standard error.
func execute(ctx context.Context, cfg config, dir string, j job) (workload.Result, string) {
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	args := []string{"-workload", j.workload, "-scale", strconv.FormatFloat(cfg.scale, 'g', -1, 64)}
	if j.variant != "" {
		args = append(args, "-variant", j.variant)
	}
	name := fmt.Sprintf("%s-%s-r%d.pprof", j.workload, strings.ReplaceAll(j.label(), "/", "-"), j.round)
	if cfg.cpuprofile != "" {
		args = append(args, "-cpuprofile", filepath.Join(cfg.cpuprofile, name))
	}
	if cfg.memprofile != "" {
		args = append(args, "-memprofile", filepath.Join(cfg.memprofile, name))
	}
	if cfg.trace != "" {
		args = append(args, "-trace", filepath.Join(cfg.trace, strings.TrimSuffix(name, ".pprof")+".trace"))
	}
	cmd := exec.CommandContext(ctx, filepath.Join(dir, binaryFor(j.impl, j.workload)), args...)
	cmd.WaitDelay = 5 * time.Second
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	runErr := cmd.Run()
	failed := workload.Result{Impl: j.impl, Variant: j.variant, Workload: j.workload, Scale: cfg.scale}
	var res workload.Result
	lines := bytes.Split(bytes.TrimSpace(out.Bytes()), []byte("\n"))
	if err := json.Unmarshal(lines[len(lines)-1], &res); err != nil {
		switch {
		case ctx.Err() != nil:
			failed.Error = fmt.Sprintf("timed out after %v", cfg.timeout)
		case runErr != nil:
			failed.Error = "no result: " + runErr.Error()
		default:
			failed.Error = "no result: " + err.Error()
		}
		return failed, tail(errOut.String(), 2000)
	}
	if err := matches(res, j, cfg.scale); err != nil {
		failed.Error = err.Error()
		return failed, tail(errOut.String(), 2000)
	}
	if runErr != nil && res.OK {
		res.OK = false
		res.Error = "exit: " + runErr.Error()
	}
	if !res.OK {
		return res, tail(errOut.String(), 2000)
	}
	return res, ""
}

// matches returns an error if res is not the result of job j at scale:
// another workload, implementation or variant, or another number of
// operations than the sizes at scale make, would put its figures in
// the wrong row or divide them by the wrong count.
func matches(res workload.Result, j job, scale float64) error {
	if res.Workload != j.workload || res.Impl != j.impl || res.Variant != j.variant {
		return fmt.Errorf("the result is for %s on %s, not %s on %s",
			workload.Key(res.Workload, res.Variant), res.Impl, workload.Key(j.workload, j.variant), j.impl)
	}
	if want := workload.SizesFor(scale).Ops(j.workload); res.Ops != want {
		return fmt.Errorf("the result counts %d operations, want %d at size %g", res.Ops, want, scale)
	}
	return nil
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

// writeFiles writes name.md, name.svg and name.json into dir.
func writeFiles(dir, name string, table report.Table, chart report.Chart, sv saved) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var md, svg bytes.Buffer
	if err := report.WriteMarkdown(&md, table); err != nil {
		return err
	}
	fmt.Fprintf(&md, "\n![ratio to %s](%s.svg)\n", baselineWords(chart.Groups), name)
	if err := report.WriteSVG(&svg, chart); err != nil {
		return err
	}
	raw, err := json.MarshalIndent(sv, "", "  ")
	if err != nil {
		return err
	}
	for ext, data := range map[string][]byte{".md": md.Bytes(), ".svg": svg.Bytes(), ".json": append(raw, '\n')} {
		if err := os.WriteFile(filepath.Join(dir, name+ext), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// cell gathers the rounds of one (workload, implementation, variant).
type cell struct {
	workload, impl, variant string
	ok                      []workload.Result
	runs                    int
	firstError              string
}

// primary is the figure a workload is judged by: time, or bytes per
// process for the idle-memory workload.
func primary(r workload.Result) float64 {
	if r.Workload == workload.Idle {
		return r.BytesPerProc
	}
	return float64(r.NS)
}

func (c *cell) summary() stats.Summary {
	xs := make([]float64, len(c.ok))
	for i, r := range c.ok {
		xs[i] = primary(r)
	}
	return stats.Summarize(xs)
}

func (c *cell) median(f func(workload.Result) float64) float64 {
	xs := make([]float64, len(c.ok))
	for i, r := range c.ok {
		xs[i] = f(r)
	}
	return stats.Median(xs)
}

// summarize turns the runs into the report's table and chart. For an
// implementation with variants it keeps, per workload, the variant with
// the best median (only variants with no failed round qualify, unless
// none has) and notes the others.
func summarize(cfg config, machine report.Machine, results []workload.Result) (report.Table, report.Chart) {
	cells := map[string]*cell{}
	var order []string
	for _, r := range results {
		key := r.Workload + "\x00" + r.Impl + "\x00" + r.Variant
		c, ok := cells[key]
		if !ok {
			c = &cell{workload: r.Workload, impl: r.Impl, variant: r.Variant}
			cells[key] = c
			order = append(order, key)
		}
		c.runs++
		if r.OK {
			c.ok = append(c.ok, r)
		} else if c.firstError == "" {
			c.firstError = r.Error
		}
	}
	sz := workload.SizesFor(cfg.scale)
	machine.Transfer, machine.SlowRounds = transfers(cfg.workloads, results)
	table := report.Table{Machine: machine, Scale: cfg.scale, Rounds: cfg.rounds}
	var chart report.Chart
	for _, impl := range cfg.impls {
		if !slices.ContainsFunc(workload.Names, func(w string) bool { return baselineOf(w) == impl }) {
			chart.Series = append(chart.Series, impl)
		}
	}
	for _, w := range cfg.workloads {
		baseline := baselineOf(w)
		var rows []report.Row
		var base float64
		for _, impl := range cfg.impls {
			var variants []*cell
			for _, key := range order {
				if c := cells[key]; c.workload == w && c.impl == impl {
					variants = append(variants, c)
				}
			}
			if len(variants) == 0 {
				continue
			}
			best := bestVariant(variants)
			row := rowOf(best, sz, w)
			if len(variants) > 1 {
				row.Variant = best.variant
				table.Notes = append(table.Notes, variantNote(w, impl, best, variants))
			}
			if impl == baseline && len(best.ok) > 0 {
				row.Baseline = true
				base = row.Primary.Median
			}
			rows = append(rows, row)
		}
		if len(rows) == 0 {
			continue
		}
		chart.Groups = append(chart.Groups, w)
		for i := range rows {
			r := &rows[i]
			if base > 0 && r.Primary.N > 0 && r.Primary.Median > 0 {
				r.Ratio = base / r.Primary.Median
			}
			if !r.Baseline && r.Ratio > 0 {
				chart.Points = append(chart.Points, report.Point{Group: w, Series: r.Impl, Value: r.Ratio})
			}
		}
		table.Rows = append(table.Rows, rows...)
	}
	// Only implementations that ran one of the charted workloads get a
	// place in the legend.
	chart.Series = slices.DeleteFunc(chart.Series, func(impl string) bool {
		return !slices.ContainsFunc(table.Rows, func(r report.Row) bool { return r.Impl == impl })
	})
	chart.Title, chart.Subtitle = chartTitles(chart.Groups)
	chart.Subtitle += fmt.Sprintf(" Size %g, %d round(s), %s, %d CPUs, %s", cfg.scale, cfg.rounds, machine.CPU, machine.Cores, machine.GoVersion)
	return table, chart
}

// transfers summarises the cache-line transfer times measured before the
// rounds of workloads in results (one per workload and round; a saved
// run may have others, which its report does not show) and lists, for
// each of workloads in order, how many of its rounds were measured at
// more than twice the fastest of them all, as "spawn 2 of 5".
func transfers(workloads []string, results []workload.Result) (stats.Summary, []string) {
	type round struct {
		workload string
		n        int
	}
	seen := map[round]float64{}
	var xs []float64
	for _, r := range results {
		k := round{r.Workload, r.Round}
		if _, ok := seen[k]; ok || r.TransferNS <= 0 || !slices.Contains(workloads, r.Workload) {
			continue
		}
		seen[k] = r.TransferNS
		xs = append(xs, r.TransferNS)
	}
	sum := stats.Summarize(xs)
	var slow []string
	for _, w := range workloads {
		n, of := 0, 0
		for k, ns := range seen {
			if k.workload == w {
				of++
				if ns > 2*sum.Min {
					n++
				}
			}
		}
		if n > 0 {
			slow = append(slow, fmt.Sprintf("%s %d of %d", w, n, of))
		}
	}
	return sum, slow
}

// baselineWords names the baseline of the chart of groups, for its
// title and caption.
func baselineWords(groups []string) string {
	remote := slices.ContainsFunc(groups, workload.IsRemote)
	local := slices.ContainsFunc(groups, func(w string) bool { return !workload.IsRemote(w) })
	switch {
	case remote && local:
		return "the baseline"
	case remote:
		return "raw NATS"
	}
	return "goroutines"
}

// chartTitles returns the chart's title and the start of its subtitle,
// which say what its bars are relative to.
func chartTitles(groups []string) (title, subtitle string) {
	switch baselineWords(groups) {
	case "the baseline":
		return "Relative to the baseline: goroutines + channels, raw NATS for remote workloads (higher is better)",
			"The baseline's median ÷ the implementation's; time, or bytes per process for idle."
	case "raw NATS":
		return "Relative to raw NATS (higher is better)",
			"Raw NATS's median time ÷ the implementation's, two nodes in one process on loopback."
	}
	return "Relative to goroutines + channels (higher is better)",
		"goroutines' median ÷ the implementation's; time, or bytes per process for idle."
}

// bestVariant returns the variant with the lowest median primary figure
// among those with no failed round (or, failing that, with any good
// round; or the first).
func bestVariant(vs []*cell) *cell {
	for _, strict := range []bool{true, false} {
		var best *cell
		for _, c := range vs {
			if len(c.ok) == 0 || (strict && len(c.ok) != c.runs) {
				continue
			}
			if best == nil || c.summary().Median < best.summary().Median {
				best = c
			}
		}
		if best != nil {
			return best
		}
	}
	return vs[0]
}

func rowOf(c *cell, sz workload.Sizes, w string) report.Row {
	row := report.Row{
		Workload: w,
		Size:     sz.Label(w),
		Impl:     c.impl,
		Memory:   w == workload.Idle,
		OpUnit:   workload.OpUnit(w),
		Runs:     c.runs,
		Failed:   c.runs - len(c.ok),
		Error:    c.firstError,
	}
	if len(c.ok) == 0 {
		return row
	}
	ops := float64(c.ok[0].Ops)
	row.Primary = c.summary()
	row.PerOpNS = c.median(func(r workload.Result) float64 { return float64(r.NS) }) / ops
	row.CPUPerOpNS = c.median(func(r workload.Result) float64 { return float64(r.CPUNS) }) / ops
	row.AllocsPerOp = c.median(func(r workload.Result) float64 { return float64(r.Allocs) }) / ops
	row.BytesPerOp = c.median(func(r workload.Result) float64 { return float64(r.AllocBytes) }) / ops
	row.PeakRSS = c.median(func(r workload.Result) float64 { return float64(r.PeakRSS) })
	if workload.IsRemote(w) {
		row.Remote = true
		row.Rate = ops / row.Primary.Median * 1e9
		latency := func(f func(*workload.Latency) int64) float64 {
			return c.median(func(r workload.Result) float64 {
				if r.Latency == nil {
					return math.NaN() // not counted
				}
				return float64(f(r.Latency))
			})
		}
		row.P50NS = latency(func(l *workload.Latency) int64 { return l.P50NS })
		row.P99NS = latency(func(l *workload.Latency) int64 { return l.P99NS })
		row.MeanNS = latency(func(l *workload.Latency) int64 { return l.MeanNS })
	}
	return row
}

// variantNote says which variant was kept and what the others measured:
// the median of their good rounds, and how many rounds failed, which
// keeps a variant out unless every variant had a failed round.
func variantNote(w, impl string, best *cell, vs []*cell) string {
	var parts []string
	for _, c := range vs {
		fig := "failed"
		if len(c.ok) > 0 {
			m := c.summary().Median
			if w == workload.Idle {
				fig = fmt.Sprintf("%.0f B/proc", m)
			} else {
				fig = report.Duration(m)
			}
		}
		if c == best {
			fig += " (kept)"
		}
		if len(c.ok) > 0 && len(c.ok) < c.runs {
			// Why a faster variant may not have been kept.
			fig += fmt.Sprintf(", %d of %d rounds failed", c.runs-len(c.ok), c.runs)
		}
		parts = append(parts, c.variant+" "+fig)
	}
	return fmt.Sprintf("%s, %s: %s", w, impl, strings.Join(parts, "; "))
}

// resultsDir is where the harness writes its reports by default,
// relative to the top of the library's checkout.
const resultsDir = "bench/results"

// revision names the source revision of the git checkout at dir for the
// report: the commit's abbreviated hash (as git describe gives it), with
// "-dirty" when a tracked file differs from that commit, or when git
// cannot say whether one does. Changes under resultsDir do not count:
// they are the harness's own reports, and counting them would mark every
// run after the first dirty until its reports were committed, while the
// code measured is the commit's. It returns "" when dir is not in a git
// checkout or git is missing. Main goroutine.
func revision(ctx context.Context, dir string) string {
	out, err := exec.CommandContext(ctx, "git", "-C", dir, "describe", "--always", "--abbrev=12").Output()
	if err != nil {
		return ""
	}
	rev := string(bytes.TrimSpace(out))
	status := exec.CommandContext(ctx, "git", "-C", dir, "status", "--porcelain", "--untracked-files=no", "--", ":(top,exclude)"+resultsDir)
	if changed, err := status.Output(); err != nil || len(bytes.TrimSpace(changed)) > 0 {
		rev += "-dirty"
	}
	return rev
}

// describeMachine collects what the report says about the machine.
func describeMachine(ctx context.Context, root string) report.Machine {
	m := report.Machine{
		Cores:     runtime.NumCPU(),
		OS:        runtime.GOOS + "/" + runtime.GOARCH,
		GoVersion: runtime.Version(),
		Date:      time.Now().UTC(),
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if m.CPU == "" {
		m.CPU = runtime.GOARCH + " CPU"
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				if f := strings.Fields(rest); len(f) > 0 {
					if kb, err := strconv.ParseFloat(f[0], 64); err == nil {
						m.Memory = report.Bytes(kb * 1024)
					}
				}
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.OS += ", kernel " + strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			m.Load = strings.Join(f[:3], " ")
		}
	}
	// The library is the module above bench/ (the replace directive).
	m.Revision = revision(ctx, filepath.Dir(root))
	cmd := exec.CommandContext(ctx, goTool(), "env", "GOVERSION")
	cmd.Dir = root
	if out, err := cmd.Output(); err == nil && len(bytes.TrimSpace(out)) > 0 {
		m.GoVersion = string(bytes.TrimSpace(out))
	}
	return m
}
