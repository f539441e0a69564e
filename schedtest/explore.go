package schedtest

import (
	"context"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// SeedEnv is the environment variable that makes [Explore] run only the
// seed it names, to replay a failure: SCHEDTEST_SEED=17 go test -run TestX.
const SeedEnv = "SCHEDTEST_SEED"

// Failure is a seed at which a scenario failed, and what it reported.
type Failure struct {
	Seed   uint64
	Output string // the scenario's log and errors, the faults injected, the last scheduling decisions
}

// Explore runs scenario under seeds 1 to seeds (see [WithSeed]), each with
// a fresh [Sim] made with opts, and fails tb at the first seed at which
// the scenario fails, with its report and how to replay it (with
// [SeedEnv], or with [Replay] given the same options). The scenario
// asserts through [Sim.T]; a Fatal there ends only that seed's run. A
// panic in the scenario's own code (a process's panic is its error, as
// on the scheduler) fails the seed too, with the panic's value and the
// calls that led to it, instead of ending the test binary without a
// word of the seed. A Skip there (Skip, Skipf or SkipNow) ends the
// exploration: tb is skipped, with what the scenario logged, the seed,
// and how many seeds passed before it; a run that failed before it
// skipped is a failure.
// With [SeedEnv] set, only that seed runs; without it, seeds must be at
// least 1, or the test fails (running no seed would pass whatever the
// scenario does).
func Explore(tb testing.TB, seeds int, scenario func(*Sim), opts ...Option) {
	tb.Helper()
	if f, ok := Sweep(tb, seeds, scenario, opts...); ok {
		replay := fmt.Sprintf("schedtest.Replay(t, %d, scenario)", f.Seed)
		if len(opts) > 0 {
			replay = fmt.Sprintf("schedtest.Replay(t, %d, scenario, opts...) with the options given to Explore", f.Seed)
		}
		tb.Errorf("schedtest: the scenario fails at seed %d:\n%s\nreplay it with %s=%d go test -run %s, or %s",
			f.Seed, f.Output, SeedEnv, f.Seed, runPattern(tb.Name()), replay)
	}
}

// runPattern returns the -run argument that selects the test name and no
// other, quoted for a POSIX shell: each element of the name, matched
// exactly.
func runPattern(name string) string {
	elems := strings.Split(name, "/")
	for i, e := range elems {
		elems[i] = "^" + regexp.QuoteMeta(e) + "$"
	}
	return "'" + strings.ReplaceAll(strings.Join(elems, "/"), "'", `'\''`) + "'"
}

// Sweep runs scenario as [Explore] does and returns the first failure
// instead of reporting it; ok is false if every seed passed. A scenario
// that skips skips tb, as under Explore.
func Sweep(tb testing.TB, seeds int, scenario func(*Sim), opts ...Option) (f Failure, ok bool) {
	tb.Helper()
	if v := os.Getenv(SeedEnv); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			tb.Fatalf("schedtest: %s=%q: %v", SeedEnv, v, err)
		}
		return Check(tb, seed, scenario, opts...)
	}
	if seeds < 1 {
		// Running none would pass whatever the scenario does.
		tb.Fatalf("schedtest: Explore or Sweep with %d seeds: need at least 1", seeds)
		return Failure{}, false
	}
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		f, failed, skipped := run(tb, seed, scenario, opts)
		if failed {
			return f, true
		}
		if skipped {
			skip(tb, seed, int(seed-1), f.Output)
		}
	}
	return Failure{}, false
}

// Check runs scenario once under seed and reports whether it failed, and
// how, without failing tb. A scenario that skips without having failed
// skips tb, with what it logged.
func Check(tb testing.TB, seed uint64, scenario func(*Sim), opts ...Option) (Failure, bool) {
	tb.Helper()
	f, failed, skipped := run(tb, seed, scenario, opts)
	if skipped && !failed {
		skip(tb, seed, 0, f.Output)
	}
	return f, failed
}

// skip skips tb for a scenario that skipped at seed, after passed seeds
// that passed, having logged output.
func skip(tb testing.TB, seed uint64, passed int, output string) {
	tb.Helper()
	where := fmt.Sprintf("schedtest: the scenario skips at seed %d", seed)
	if passed > 0 {
		where += fmt.Sprintf(", after %d seeds that passed", passed)
	}
	tb.Skipf("%s:\n%s", where, strings.TrimRight(output, "\n"))
}

// run runs scenario once under seed. It reports whether the run failed
// and whether it skipped (a run that failed and then skipped is both),
// with the run's report in f.
func run(tb testing.TB, seed uint64, scenario func(*Sim), opts []Option) (f Failure, failed, skipped bool) {
	r := &recorder{TB: tb}
	r.ctx, r.cancel = context.WithCancel(tb.Context())
	var s *Sim
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer r.end()
		// A panic fails the seed instead of the test binary, which would
		// end without saying at which seed.
		defer func() {
			if v := recover(); v != nil {
				r.panicked(v)
			}
		}()
		s = New(r, append(opts[:len(opts):len(opts)], WithSeed(seed))...)
		scenario(s)
	}()
	<-done
	if r.Skipped() && !r.Failed() {
		return Failure{Seed: seed, Output: r.output()}, false, true
	}
	if !r.Failed() {
		return Failure{}, false, false
	}
	var b strings.Builder
	b.WriteString(r.output())
	if s != nil {
		if inj := s.Injected(); len(inj) > 0 {
			fmt.Fprintf(&b, "faults injected:\n  %s\n", strings.Join(inj, "\n  "))
		}
		if tr := s.Trace(); len(tr) > 0 {
			fmt.Fprintf(&b, "the last scheduling decisions:\n  %s\n", strings.Join(tr, "\n  "))
		}
	}
	return Failure{Seed: seed, Output: b.String()}, true, r.Skipped()
}

// Replay runs scenario once under seed, reporting to tb directly: the way
// to rerun the seed [Explore] reported, under a debugger if need be.
func Replay(tb testing.TB, seed uint64, scenario func(*Sim), opts ...Option) {
	tb.Helper()
	scenario(New(tb, append(opts[:len(opts):len(opts)], WithSeed(seed))...))
}

// recorder is the testing.TB a seed's run reports to: it keeps the log
// (what Output writes too), the failure and the skip instead of failing
// or skipping the test, and ends its Context and runs the cleanups at the
// end of the seed's run, as a test does at its end. Methods it does not
// override go to the real test.
type recorder struct {
	testing.TB
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex // guards the fields below
	failed   bool
	skipped  bool
	lines    []string
	partial  string // what Output was given after its last newline
	cleanups []func()
}

// Context returns the seed's context: done when the seed's run ends,
// before its cleanups run.
func (r *recorder) Context() context.Context { return r.ctx }

// Output returns a writer to the seed's log: each line written is a line
// of the log, as Log writes it; a line left unfinished is one once Log is
// called or the run ends.
func (r *recorder) Output() io.Writer { return outputWriter{r} }

type outputWriter struct{ r *recorder }

func (w outputWriter) Write(b []byte) (int, error) {
	r := w.r
	r.mu.Lock()
	defer r.mu.Unlock()
	text := r.partial + string(b)
	for {
		i := strings.IndexByte(text, '\n')
		if i < 0 {
			break
		}
		r.lines = append(r.lines, text[:i])
		text = text[i+1:]
	}
	r.partial = text
	return len(b), nil
}

// flush makes a line of what Output was given after its last newline.
// Called with r.mu held.
func (r *recorder) flush() {
	if r.partial != "" {
		r.lines = append(r.lines, r.partial)
		r.partial = ""
	}
}

// end ends the seed's run: its context, then its cleanups.
func (r *recorder) end() {
	r.cancel()
	r.runCleanups()
}

func (r *recorder) Helper() {}

func (r *recorder) Log(args ...any) { r.add(fmt.Sprintln(args...)) }

func (r *recorder) Logf(format string, args ...any) { r.add(fmt.Sprintf(format, args...)) }

func (r *recorder) Error(args ...any) { r.Fail(); r.Log(args...) }

func (r *recorder) Errorf(format string, args ...any) { r.Fail(); r.Logf(format, args...) }

func (r *recorder) Fatal(args ...any) { r.Error(args...); r.FailNow() }

func (r *recorder) Fatalf(format string, args ...any) { r.Errorf(format, args...); r.FailNow() }

func (r *recorder) Fail() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = true
}

// FailNow ends the seed's run: the scenario runs in a goroutine of its
// own, as a test does.
func (r *recorder) FailNow() {
	r.Fail()
	runtime.Goexit()
}

func (r *recorder) Skip(args ...any) { r.Log(args...); r.SkipNow() }

func (r *recorder) Skipf(format string, args ...any) { r.Logf(format, args...); r.SkipNow() }

// SkipNow ends the seed's run as skipped: the caller of Check, Sweep or
// Explore then skips the test.
func (r *recorder) SkipNow() {
	r.mu.Lock()
	r.skipped = true
	r.mu.Unlock()
	runtime.Goexit()
}

func (r *recorder) Skipped() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.skipped
}

func (r *recorder) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}

func (r *recorder) Cleanup(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cleanups = append(r.cleanups, f)
}

func (r *recorder) runCleanups() {
	for {
		r.mu.Lock()
		n := len(r.cleanups)
		if n == 0 {
			r.mu.Unlock()
			return
		}
		f := r.cleanups[n-1]
		r.cleanups = r.cleanups[:n-1]
		r.mu.Unlock()
		f()
	}
}

// panicked fails the run with the panic's value v and the stack of calls
// that panicked, from the panicking call down to the scenario. Called by
// the function that recovered the panic. The stack lists functions,
// files and lines only, no argument values or goroutine numbers, so that
// a seed's report is the same at every run.
func (r *recorder) panicked(v any) {
	r.Errorf("panic: %v", v)
	pcs := make([]uintptr, 64)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(1, pcs)])
	inPanic := true // the frames of the recovery and the panic, down to gopanic
	for more := true; more; {
		var f runtime.Frame
		f, more = frames.Next()
		switch {
		case inPanic:
			inPanic = f.Function != "runtime.gopanic"
		case strings.HasPrefix(f.Function, thisPackage+".run."):
			return // the kit's goroutine that runs the scenario
		case !strings.HasPrefix(f.Function, "runtime."):
			r.add("  " + f.Function)
			r.add(fmt.Sprintf("      %s:%d", f.File, f.Line))
		}
	}
}

// thisPackage is the import path of this package, as function names in
// a stack begin with it.
const thisPackage = "github.com/procsched/scheduler/schedtest"

func (r *recorder) add(line string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.flush()
	r.lines = append(r.lines, strings.TrimRight(line, "\n"))
}

func (r *recorder) output() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.flush()
	if len(r.lines) == 0 {
		return ""
	}
	return "  " + strings.Join(r.lines, "\n  ") + "\n"
}
