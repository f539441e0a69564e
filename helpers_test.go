package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// The test kit of the package's external tests, the only place their
// shared helpers live: one constructor (newScheduler), one bound on every
// wait (testTimeout) and the helpers that wait with it (receive, waitEnd,
// eventually), one dump of the scheduler's state for failure messages
// (dumpState), the stepFunc adapter for processes that need no Init or
// Close, a scriptable recording process (probe), and the stress tests'
// machinery at the end.

// testTimeout bounds every wait of these tests: a condition that has not
// come true by then is a failure (a lost wakeup, a missing event), not
// slowness.
const testTimeout = 10 * time.Second

// cmdTest and cmdTest2 are user command IDs for handler tests.
const (
	cmdTest  = sched.FirstUserCommand + 1
	cmdTest2 = sched.FirstUserCommand + 2
)

// newScheduler starts a scheduler and shuts it down when the test ends,
// so that goleak (see main_test.go) finds no worker left. A test that shut
// the scheduler down itself, forcing processes, makes the cleanup's
// Shutdown return that result again (ErrForced without the cleanup's own
// deadline), which is fine.
func newScheduler(t testing.TB, opts ...sched.Option) *sched.Scheduler {
	t.Helper()
	s, err := sched.New(opts...)
	require.NoError(t, err)
	require.NotNil(t, s)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		if err := s.Shutdown(ctx); !shutdownOK(err) {
			t.Errorf("Shutdown at cleanup: %v", err)
		}
	})
	return s
}

// shutdownOK reports whether a cleanup's Shutdown went as it should: the
// processes ended on their cancel, or a test's own Shutdown forced them
// before; not the cleanup's own deadline.
func shutdownOK(err error) bool {
	return err == nil || errors.Is(err, sched.ErrForced) && !errors.Is(err, context.DeadlineExceeded)
}

// submit submits p with method "run" and input, failing the test on error.
func submit(t testing.TB, s *sched.Scheduler, p sched.Process, input ...any) sched.Handle {
	t.Helper()
	h, err := s.Submit(context.Background(), p, "run", payload.Values(input...))
	require.NoError(t, err)
	require.False(t, h.PID().IsZero(), "Submit returned a zero PID")
	return h
}

// waitEnd waits for h's process to end and returns its result, failing the
// test if it does not end within testTimeout. s, if not nil, is dumped on
// failure to show where processes are stuck.
func waitEnd(t testing.TB, s *sched.Scheduler, h sched.Handle) (payload.Payload, error) {
	t.Helper()
	timer := time.NewTimer(testTimeout)
	defer timer.Stop()
	select {
	case <-h.Done():
	case <-timer.C:
		t.Fatalf("process %v did not end within %v%s", h.PID(), testTimeout, dumpState(s))
	}
	res, err := h.Result()
	require.NotErrorIs(t, err, sched.ErrNotEnded, "Result after Done was closed")
	return res, err
}

// dumpState describes the live processes of s for a failure message:
// counts by state, the processes that look like lost wake-ups (waiting
// with events queued), one line per process (the first 60) and the
// statistics. s may be nil (nothing to show).
func dumpState(s *sched.Scheduler) string {
	if s == nil {
		return ""
	}
	infos := s.Processes()
	byState := map[sched.State]int{}
	var suspects []string
	lines := make([]string, 0, len(infos))
	for _, pi := range infos {
		byState[pi.State]++
		if (pi.State == sched.StateIdle || pi.State == sched.StateBlocked) && pi.Queued > 0 {
			suspects = append(suspects, fmt.Sprintf("%s %v queued=%d pending=%d", pi.PID, pi.State, pi.Queued, pi.Pending))
		}
		lines = append(lines, fmt.Sprintf("%s method=%q state=%v woken=%v queued=%d pending=%d",
			pi.PID, pi.Method, pi.State, pi.Woken, pi.Queued, pi.Pending))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n%d live processes by state: %v\n", len(infos), byState)
	if len(suspects) > 0 {
		fmt.Fprintf(&b, "LOST WAKEUP: %d waiting process(es) have queued events: %s\n", len(suspects), strings.Join(suspects[:min(len(suspects), 20)], "; "))
	}
	const keep = 60
	if len(lines) > keep {
		lines = append(lines[:keep:keep], fmt.Sprintf("... %d more", len(infos)-keep))
	}
	b.WriteString("processes:\n")
	for _, l := range lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "stats: %+v\n", s.Stats())
	return b.String()
}

// stepFunc is a process made of its Step alone: Init and Close do
// nothing. A test process that needs neither is a stepFunc, or, when it
// keeps state in a struct, embeds stepOnly.
type stepFunc func(evs []sched.Event, out *sched.StepOutput) error

func (stepFunc) Init(context.Context, string, payload.Payloads) error  { return nil }
func (f stepFunc) Step(evs []sched.Event, out *sched.StepOutput) error { return f(evs, out) }
func (stepFunc) Close()                                                {}

// stepOnly gives a struct process the Init and Close of a stepFunc: it
// is embedded by test processes that keep state in a struct and need
// neither. It has no size, so it changes no allocation a test measures.
type stepOnly struct{}

func (stepOnly) Init(context.Context, string, payload.Payloads) error { return nil }
func (stepOnly) Close()                                               {}

// receive receives from ch or fails the test after testTimeout.
func receive[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	timer := time.NewTimer(testTimeout)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("timed out after %v waiting for %s", testTimeout, what)
		panic("unreachable")
	}
}

// isClosed reports whether ch is closed now, without waiting.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// eventually polls cond until it holds, failing the test after testTimeout.
// It is for conditions no channel announces (a process state, a counter);
// it never stands in for a condition that can be waited on.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for i := 0; !cond(); i++ {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", testTimeout, what)
		}
		if i < 100 {
			runtime.Gosched()
			continue
		}
		<-time.After(time.Millisecond)
	}
}

// waitState waits until pid is listed by Processes in state want and
// returns its entry.
func waitState(t testing.TB, s *sched.Scheduler, pid relay.PID, want sched.State) sched.ProcessInfo {
	t.Helper()
	var got sched.ProcessInfo
	eventually(t, fmt.Sprintf("%v to be %v", pid, want), func() bool {
		info, ok := findProcess(s, pid)
		got = info
		return ok && info.State == want
	})
	return got
}

// findProcess returns pid's entry in s.Processes.
func findProcess(s *sched.Scheduler, pid relay.PID) (sched.ProcessInfo, bool) {
	for _, info := range s.Processes() {
		if info.PID == pid {
			return info, true
		}
	}
	return sched.ProcessInfo{}, false
}

// probe is a scriptable process that records what the scheduler does to
// it: the Init arguments, a copy of every batch of events, and its Close
// calls. It also notices if two of its methods ever
// run at once, or if Step runs after Close.
//
// Its behaviour comes from the function fields, which are set before
// Submit and never changed: init (nil: succeed), step (nil: wait for
// events forever) and close (nil: nothing).
type probe struct {
	init  func(ctx context.Context, method string, input payload.Payloads) error
	step  func(p *probe, n int, evs []sched.Event, out *sched.StepOutput) error
	close func()

	mu       sync.Mutex // guards the fields below
	inits    int
	ctx      context.Context
	method   string
	input    payload.Payloads
	self     relay.PID // out.Self() at the first step
	batches  [][]sched.Event
	closes   int
	busy     bool     // a method is running
	problems []string // contract violations seen
}

func (p *probe) Init(ctx context.Context, method string, input payload.Payloads) error {
	p.mu.Lock()
	p.inits++
	p.ctx, p.method, p.input = ctx, method, input
	p.mu.Unlock()
	if p.init != nil {
		return p.init(ctx, method, input)
	}
	return nil
}

func (p *probe) Step(evs []sched.Event, out *sched.StepOutput) error {
	p.mu.Lock()
	if p.busy {
		p.problems = append(p.problems, "Step while another method runs")
	}
	if p.closes > 0 {
		p.problems = append(p.problems, "Step after Close")
	}
	if p.inits == 0 {
		p.problems = append(p.problems, "Step before Init")
	}
	p.busy = true
	n := len(p.batches)
	if n == 0 {
		p.self = out.Self()
	}
	p.batches = append(p.batches, slices.Clone(evs))
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.busy = false
		p.mu.Unlock()
	}()
	var err error
	if p.step != nil {
		err = p.step(p, n, evs, out)
	}
	return err
}

func (p *probe) Close() {
	p.mu.Lock()
	if p.busy {
		p.problems = append(p.problems, "Close while another method runs")
	}
	p.closes++
	p.busy = true
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.busy = false
		p.mu.Unlock()
	}()
	if p.close != nil {
		p.close()
	}
}

func (p *probe) Steps() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.batches)
}

func (p *probe) Closes() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closes
}

func (p *probe) Inits() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inits
}

func (p *probe) Ctx() context.Context {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ctx
}

// Batches returns a copy of the event batches of every step so far.
func (p *probe) Batches() [][]sched.Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.batches)
}

// Events returns every event received so far, in order.
func (p *probe) Events() []sched.Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	var all []sched.Event
	for _, b := range p.batches {
		all = append(all, b...)
	}
	return all
}

// EventsOf returns the events of type typ received so far, in order.
func (p *probe) EventsOf(typ sched.EventType) []sched.Event {
	var out []sched.Event
	for _, ev := range p.Events() {
		if ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}

// requireLifecycle checks the lifecycle contract of an ended process: Init
// once, Close exactly once, no overlapping calls, no Step after Close.
func requireLifecycle(t testing.TB, p *probe) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	require.Equal(t, 1, p.inits, "Init calls")
	require.Equal(t, 1, p.closes, "Close calls")
	require.Empty(t, p.problems, "contract violations")
}

// Step behaviours for probe.

// initSeen is what the Init of a seeingProbe found in its context.
type initSeen struct {
	self  relay.PID // Self(ctx)
	value any       // ctx.Value(ctxKey{})
}

// seeingProbe returns a probe that ends at its first message, and what
// its Init found in its context, filled in once Init has run (Submit and
// Spawn return after it).
func seeingProbe() (*probe, *initSeen) {
	seen := &initSeen{}
	return &probe{
		init: func(ctx context.Context, _ string, _ payload.Payloads) error {
			seen.self, _ = sched.Self(ctx)
			seen.value = ctx.Value(ctxKey{})
			return nil
		},
		step: untilMessage,
	}, seen
}

// doneWith finishes at the first step with result v.
func doneWith(v any) func(*probe, int, []sched.Event, *sched.StepOutput) error {
	return func(_ *probe, _ int, _ []sched.Event, out *sched.StepOutput) error {
		out.Done(payload.Of(v))
		return nil
	}
}

// untilCancel waits for events and finishes with result "cancelled" at
// the first EventCancel: a process that shuts down gracefully.
func untilCancel(_ *probe, _ int, evs []sched.Event, out *sched.StepOutput) error {
	if hasCancel(evs) {
		out.Done(payload.Of("cancelled"))
	}
	return nil
}

// ignoreAll waits forever, ignoring cancellation: only a forced shutdown
// ends it.
func ignoreAll(*probe, int, []sched.Event, *sched.StepOutput) error { return nil }

// untilMessage finishes with the Data of the first message that arrives,
// or at cancel.
func untilMessage(_ *probe, _ int, evs []sched.Event, out *sched.StepOutput) error {
	for _, ev := range evs {
		switch ev.Type {
		case sched.EventMessage:
			out.Done(ev.Result())
			return nil
		case sched.EventCancel:
			out.Done(payload.Payload{})
			return nil
		}
	}
	return nil
}

// hasCancel reports whether evs hold an EventCancel.
func hasCancel(evs []sched.Event) bool {
	return slices.ContainsFunc(evs, func(ev sched.Event) bool { return ev.Type == sched.EventCancel })
}

// completionOf returns the completion of the yield with tag among evs.
func completionOf(evs []sched.Event, tag uint64) (sched.Event, bool) {
	for _, ev := range evs {
		if ev.Type == sched.EventYieldComplete && ev.Tag == tag {
			return ev, true
		}
	}
	return sched.Event{}, false
}

// yieldOnce yields once at the first step (through yield) and finishes
// with the completion of tag as its result (Data; Error as the
// process's error), or at cancel.
func yieldOnce(tag uint64, yield func(out *sched.StepOutput)) func(*probe, int, []sched.Event, *sched.StepOutput) error {
	return func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
		if n == 0 {
			yield(out)
			return nil
		}
		if ev, ok := completionOf(evs, tag); ok {
			if ev.Error != nil {
				return ev.Error
			}
			out.Done(ev.Result())
			return nil
		}
		if hasCancel(evs) {
			out.Done(payload.Payload{})
		}
		return nil
	}
}

// testError is an error value for Init and Step failures.
type testError string

func (e testError) Error() string { return string(e) }

// ctxKey is a context key type.
type ctxKey struct{}

// answerOf waits for h's process to end and returns the event it finished
// with: the answer an asker (newAsker) got.
func answerOf(t *testing.T, s *sched.Scheduler, h sched.Handle) sched.Event {
	t.Helper()
	res, err := waitEnd(t, s, h)
	require.NoError(t, err)
	return res.Value().(sched.Event)
}

// The stress tests' machinery. The stress tests (stress_*_test.go, one
// file per property) run several random configurations with more workers
// than the machine has cores, under the progress watchdog of
// awaitProgress: a run that stops making progress fails with a dump of
// its processes instead of hanging. Sizes are multiplied by stressScale
// (scale_test.go). The machinery: random configurations, the progress
// watchdog, an invariant-violation collector that any goroutine may
// report to, a guard that detects overlapping calls into one process, and
// a goroutine pool that completes yields asynchronously, as a handler
// that hands its work off would.

// stallTimeout is how long a stress run may go without progress before it
// is declared stuck and fails with a dump of its processes.
const stallTimeout = 20 * time.Second

// User commands of the stress and allocation tests.
const (
	cmdSync    = sched.FirstUserCommand + 1 // completed by the handler itself
	cmdAsync   = sched.FirstUserCommand + 2 // completed by an asyncPool goroutine
	cmdCleanup = sched.FirstUserCommand + 3 // a cleanup step answered later by an asyncPool goroutine
	cmdNever   = sched.FirstUserCommand + 4 // completed only by the test, after the fact
)

// stressConfig is one random configuration of a stress run: more workers than
// the machine has cores, and a random step budget and global batch so that
// requeues and batch sizes vary between runs.
type stressConfig struct {
	seed    uint64
	workers int
	budget  int
	batch   int
}

// stressSeed varies the random configurations between runs: by default it is
// 0 and every run repeats the same seeds; SCHED_STRESS_SEED=N sets it,
// and under `-tags stress` it is random unless set. The tests log it, so
// that a failing configuration can be run again.
var stressSeed = func() uint64 {
	if v := os.Getenv("SCHED_STRESS_SEED"); v != "" {
		if n, err := strconv.ParseUint(v, 0, 64); err == nil {
			return n
		}
	}
	if stressScale > 1 {
		return rand.Uint64()
	}
	return 0
}()

// stressConfigs returns n configurations, alternating 4 and 8 workers,
// derived from base and stressSeed so that every test gets its own seeds.
// Under -short (without the stress build tag) only the first two are
// returned: the same seeds, fewer runs.
func stressConfigs(t *testing.T, base uint64, n int) []stressConfig {
	t.Helper()
	if stressSeed != 0 {
		t.Logf("SCHED_STRESS_SEED=%d", stressSeed)
	}
	rng := rand.New(rand.NewPCG(base, 0x5eed^stressSeed))
	cfgs := make([]stressConfig, n)
	for i := range cfgs {
		cfgs[i] = stressConfig{
			seed:    rng.Uint64(),
			workers: []int{4, 8}[i%2],
			budget:  1 + rng.IntN(16),
			batch:   1 + rng.IntN(32),
		}
	}
	if testing.Short() && stressScale == 1 {
		cfgs = cfgs[:min(n, shortStressRuns)]
	}
	return cfgs
}

// eachConfig runs run as a subtest on each of stressConfigs(t, base, n),
// and stops at the first that fails: one failing configuration is
// enough to report.
func eachConfig(t *testing.T, base uint64, n int, run func(t *testing.T, cfg stressConfig)) {
	t.Helper()
	for _, cfg := range stressConfigs(t, base, n) {
		if !t.Run(cfg.String(), func(t *testing.T) { run(t, cfg) }) {
			break
		}
	}
}

// shortStressRuns is how many configurations of each stress test run
// under -short.
const shortStressRuns = 2

func (c stressConfig) String() string {
	return fmt.Sprintf("w%d_budget%d_batch%d_seed%x", c.workers, c.budget, c.batch, c.seed)
}

func (c stressConfig) options(extra ...sched.Option) []sched.Option {
	return append([]sched.Option{
		sched.WithWorkers(c.workers),
		sched.WithStepBudget(c.budget),
		sched.WithGlobalBatch(c.batch),
	}, extra...)
}

// rng returns a generator for stream i of the configuration's seed.
func (c stressConfig) rng(i uint64) *rand.Rand {
	return rand.New(rand.NewPCG(c.seed, i))
}

// violations collects invariant violations reported from any goroutine
// (workers, handlers, pool goroutines), where t.Fatal is not allowed and
// t.Error could come after the test returned. The test reports them with
// check once every goroutine it started has stopped.
type violations struct {
	n    atomic.Int64
	mu   sync.Mutex
	msgs []string
}

// maxReported bounds how many violations are kept for the report.
const maxReported = 20

func (f *violations) addf(format string, args ...any) {
	if f.n.Add(1) > maxReported {
		return
	}
	msg := fmt.Sprintf(format, args...)
	// Also written at once, so that it is seen even if the bug it reports
	// crashes the test binary before the test can report it.
	fmt.Fprintln(os.Stderr, "stress: invariant violated:", msg)
	f.mu.Lock()
	f.msgs = append(f.msgs, msg)
	f.mu.Unlock()
}

// check fails the test if any violation was reported.
func (f *violations) check(t *testing.T) {
	t.Helper()
	n := f.n.Load()
	if n == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	t.Errorf("%d invariant violation(s); the first %d:\n\t%s", n, len(f.msgs), strings.Join(f.msgs, "\n\t"))
}

// progress counts events that show a run is moving: messages received,
// rounds finished, processes closed.
type progress struct{ n atomic.Int64 }

func (p *progress) tick() { p.n.Add(1) }

// awaitProgress blocks until done is closed. If the progress counter does not
// move for stallTimeout, the run is stuck (a lost wakeup, a deadlock, a
// lost message): it fails the test with a dump of the scheduler's
// processes and describe's test-specific account, if any.
func awaitProgress(t *testing.T, s *sched.Scheduler, prog *progress, done <-chan struct{}, what string, describe func() string) {
	t.Helper()
	tick := time.NewTicker(stallTimeout / 8)
	defer tick.Stop()
	last, lastAt := prog.n.Load(), time.Now()
	for {
		select {
		case <-done:
			return
		case now := <-tick.C:
			if n := prog.n.Load(); n != last {
				last, lastAt = n, now
				continue
			}
			if now.Sub(lastAt) < stallTimeout {
				continue
			}
			extra := ""
			if describe != nil {
				extra = "\ntest's account:\n" + describe()
			}
			t.Fatalf("%s: no progress for %v (progress counter %d)\n%s%s", what, stallTimeout, last, dumpState(s), extra)
		}
	}
}

// allDone returns a channel closed once every handle's process has ended.
func allDone(hs []sched.Handle) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		for _, h := range hs {
			<-h.Done()
		}
		close(done)
	}()
	return done
}

// guard checks the one-at-a-time contract of a process: Init, Step and
// Close never overlap, Close comes once and nothing comes after it. Each
// method sets the inside flag with a CAS on entry, so a second goroutine
// entering while the first is inside fails its CAS and reports.
type guard struct {
	name   string
	f      *violations
	inside atomic.Int32 // 0 outside; 1 in Init or Step; 2 in Close
	inits  atomic.Int32
	steps  atomic.Int64
	closes atomic.Int32
}

func (g *guard) enter(where string) {
	if !g.inside.CompareAndSwap(0, 1) {
		g.f.addf("%s: %s entered while another call is inside (flag %d): two goroutines run one process", g.name, where, g.inside.Load())
	}
	if g.closes.Load() != 0 {
		g.f.addf("%s: %s called after Close", g.name, where)
	}
	switch where {
	case "Init":
		if g.inits.Add(1) != 1 {
			g.f.addf("%s: Init called twice", g.name)
		}
	case "Step":
		if g.inits.Load() != 1 {
			g.f.addf("%s: Step before Init", g.name)
		}
		g.steps.Add(1)
	}
}

func (g *guard) exit(where string) {
	if !g.inside.CompareAndSwap(1, 0) {
		g.f.addf("%s: leaving %s found the flag at %d: another call overlapped", g.name, where, g.inside.Load())
	}
}

func (g *guard) enterClose() {
	if !g.inside.CompareAndSwap(0, 2) {
		g.f.addf("%s: Close entered while another call is inside (flag %d)", g.name, g.inside.Load())
	}
	if n := g.closes.Add(1); n != 1 {
		g.f.addf("%s: Close called %d times", g.name, n)
	}
}

func (g *guard) exitClose() {
	if !g.inside.CompareAndSwap(2, 0) {
		g.f.addf("%s: leaving Close found the flag at %d", g.name, g.inside.Load())
	}
}

// Init and Close are the lifecycle of a process that embeds its guard and
// needs nothing more than the checks; processes that do more define their
// own and call enter/exit themselves.
func (g *guard) Init(context.Context, string, payload.Payloads) error {
	g.enter("Init")
	g.exit("Init")
	return nil
}

func (g *guard) Close() {
	g.enterClose()
	g.exitClose()
}

// checkClosedOnce reports a process whose Init ran but whose Close did not
// run exactly once.
func (g *guard) checkClosedOnce() {
	if i, c := g.inits.Load(), g.closes.Load(); i == 1 && c != 1 {
		g.f.addf("%s: Init called, Close called %d times (want 1)", g.name, c)
	}
}

// asyncPool completes yields on a few goroutines, in an order of their own:
// each goroutine waits a random while before running its next job, so
// completions land at random points of the workers' steps. Its
// queue is unbounded, so that handlers, which must not block, never do.
type asyncPool struct {
	mu     sync.Mutex
	cond   sync.Cond
	jobs   []func()
	closed bool
	wg     sync.WaitGroup
}

// newAsyncPool starts n goroutines. maxDelay scales the random wait before
// each job (0: run jobs at once).
func newAsyncPool(n int, seed uint64, maxDelay int) *asyncPool {
	p := &asyncPool{}
	p.cond.L = &p.mu
	p.wg.Add(n)
	for i := range n {
		rng := rand.New(rand.NewPCG(seed, uint64(i)+1000))
		go p.loop(rng, maxDelay)
	}
	return p
}

func (p *asyncPool) loop(rng *rand.Rand, maxDelay int) {
	defer p.wg.Done()
	for {
		p.mu.Lock()
		for len(p.jobs) == 0 && !p.closed {
			p.cond.Wait()
		}
		if len(p.jobs) == 0 {
			p.mu.Unlock()
			return
		}
		job := p.jobs[0]
		p.jobs[0] = nil
		p.jobs = p.jobs[1:]
		p.mu.Unlock()
		if maxDelay > 0 {
			// A spin, not runtime.Gosched: on a loaded machine (or one
			// P) a Gosched waits for every runnable goroutine, busy
			// workers included, and the pool falls far behind.
			spin(rng.IntN(maxDelay+1) * 500)
		}
		job()
	}
}

// push queues job. Any goroutine; never blocks for long.
func (p *asyncPool) push(job func()) {
	p.mu.Lock()
	p.jobs = append(p.jobs, job)
	p.mu.Unlock()
	p.cond.Signal()
}

// close runs the jobs still queued and stops the goroutines.
func (p *asyncPool) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.cond.Broadcast()
	p.wg.Wait()
}

// completeAtOnce completes the yield during the handler, with its argument
// as data.
func completeAtOnce(c sched.Call) error { return c.Complete(c.Arg, nil) }

// completeLater hands the yield to pool, which completes it with the
// yield's argument as data. A completion error that ok does not accept
// is a violation (nil ok: none is accepted).
func completeLater(pool *asyncPool, f *violations, ok func(error) bool) sched.Handler {
	return func(c sched.Call) error {
		comp, arg := c.Completion(), c.Arg
		pool.push(func() {
			if err := comp.Complete(arg, nil); err != nil && (ok == nil || !ok(err)) {
				f.addf("async completion of %v tag %d: %v", comp.PID(), comp.Tag(), err)
			}
		})
		return nil
	}
}

// endedOrClosed accepts the errors of a completion or send that lost a
// race with the end of its process or of the scheduler.
func endedOrClosed(err error) bool {
	return errors.Is(err, sched.ErrProcessNotFound) || errors.Is(err, sched.ErrClosed)
}

// startMsg is the message that lets the processes of a run begin, once the
// test has submitted them all and published their PIDs: the mailbox's
// lock orders the publication before the receiver's reads.
type startMsg struct{}

// startAll tells every pid to start.
func startAll(t *testing.T, s *sched.Scheduler, pids []relay.PID) {
	t.Helper()
	for _, pid := range pids {
		require.NoError(t, s.Tell(pid, startMsg{}))
	}
}

// spin busy-waits for about n loop iterations, to place a wake-up at a
// random point of a worker's way from Step to its next state.
func spin(n int) {
	var x uint64
	for i := range n {
		x += uint64(i) * 0x9E3779B97F4A7C15
	}
	spinSink.Store(x)
}

var spinSink atomic.Uint64

// errStressBoom is the error of the stress processes that fail on purpose.
var errStressBoom = errors.New("stress: boom")

// mix64 is splitmix64's finaliser: a cheap, well-mixed hash.
func mix64(x uint64) uint64 {
	x += 0x9E3779B97F4A7C15
	x = (x ^ x>>30) * 0xBF58476D1CE4E5B9
	x = (x ^ x>>27) * 0x94D049BB133111EB
	return x ^ x>>31
}

// tagSet hands out the yield tags of a stress process and tracks which
// of them are outstanding, so that the process can tell a completion it
// expects from one it does not. Owner only (the process's own steps).
type tagSet struct {
	last    uint64
	pending map[uint64]bool
}

// newTag returns a fresh tag and marks it outstanding.
func (ts *tagSet) newTag() uint64 {
	if ts.pending == nil {
		ts.pending = map[uint64]bool{}
	}
	ts.last++
	ts.pending[ts.last] = true
	return ts.last
}

// complete marks tag completed and reports whether it was outstanding.
func (ts *tagSet) complete(tag uint64) bool {
	if !ts.pending[tag] {
		return false
	}
	delete(ts.pending, tag)
	return true
}

// outstanding returns how many tags are not completed yet.
func (ts *tagSet) outstanding() int { return len(ts.pending) }
