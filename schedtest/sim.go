package schedtest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/procsched/scheduler"
	"github.com/procsched/scheduler/internal/bridge"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// ErrInjected is wrapped by the errors of the faults a [Faults] option
// injects, so that a test can tell them from the process's own failures.
var ErrInjected = errors.New("schedtest: injected fault")

// Epoch is the time [Sim.Now] reports before the clock is advanced.
var Epoch = time.Date(2000, time.January, 1, 0, 0, 0, 0, time.UTC)

// origin is the instant the virtual clock counts from: one nanosecond
// before Epoch, so that the clock's first reading (1) is already past
// a deadline of 1, the value a Timeout of zero or less gets.
var origin = Epoch.Add(-time.Nanosecond)

// clockEnd is the reading of a time too far for the virtual clock: the
// end it saturates at, as the scheduler's timer clock does (time's Add
// and Sub saturate; see [scheduler.StepOutput.Timeout]). A Sleep or a
// deadline there never fires, as it never does on the scheduler, and
// the clock stops one nanosecond before it, so it never gets there.
const clockEnd = math.MaxInt64

// DefaultMaxSteps is the default for [WithMaxSteps].
const DefaultMaxSteps = 1_000_000

// DefaultShutdownDeadline is the default for [WithShutdownDeadline].
const DefaultShutdownDeadline = 10 * time.Second

// Option configures a [Sim].
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	seed       uint64
	seeded     bool
	budget     int
	maxSteps   int
	grace      time.Duration
	faults     Faults
	traceLimit int
	err        error // an option refused
}

// WithSeed makes the simulation choose, with a random source seeded with
// seed, which ready process steps next, and interleaves the yields of
// different processes' steps (each process's own yields are still carried
// out in the order written, so per-sender FIFO holds). The same seed and
// the same test make the same choices, so a failure replays exactly.
// Without it the order is fixed: ready processes step in the order they
// became ready, and a step's yields are carried out before anything else
// happens.
func WithSeed(seed uint64) Option {
	return optionFunc(func(c *config) { c.seed, c.seeded = seed, true })
}

// WithStepBudget sets how many consecutive steps a process that keeps
// continuing or receiving events takes before the others get their turn,
// as [scheduler.WithStepBudget] does (default
// [scheduler.DefaultStepBudget]). It matters only without [WithSeed]; with
// a seed every step is a choice of its own. As on the scheduler, n must be
// at least 1: [New] fails the test with an error wrapping
// [scheduler.ErrInvalidOption] otherwise.
func WithStepBudget(n int) Option {
	return optionFunc(func(c *config) {
		if n < 1 {
			c.err = fmt.Errorf("%w: WithStepBudget(%d): need at least 1", scheduler.ErrInvalidOption, n)
			return
		}
		c.budget = n
	})
}

// WithMaxSteps bounds the steps a simulation takes (default
// [DefaultMaxSteps]); past it the test fails, since a process that never
// stops would otherwise keep RunUntilIdle from returning. Once n steps
// were taken, a Run method, Advance or [Sim.Step] that would take another
// fails the test instead; what the nth step yielded is still carried out,
// and Shutdown forces what is left without stepping. n of zero or less
// lets them take none.
func WithMaxSteps(n int) Option {
	return optionFunc(func(c *config) { c.maxSteps = n })
}

// WithShutdownDeadline sets how much virtual time [Sim.Shutdown] gives the
// processes to finish before it forces them (default
// [DefaultShutdownDeadline]). With d of zero or less the clock does not
// move: what does not end right away is forced, as a scheduler's Shutdown
// forces it given a context that is done already.
func WithShutdownDeadline(d time.Duration) Option {
	return optionFunc(func(c *config) { c.grace = max(d, 0) })
}

// Faults are faults injected at random, drawn from the simulation's
// random source (see [WithSeed]); each field is a probability between 0
// and 1. Every injected fault is listed by [Sim.Injected] and in the
// failure report of [Explore].
type Faults struct {
	// FailYield is the chance that a user command fails with an error
	// wrapping [ErrInjected] instead of reaching its fake.
	FailYield float64
	// DelayCompletion is the chance that a completion a fake makes at
	// once is held back until after the next timer fires (or until the
	// simulation is otherwise idle with no timer left): a slow service
	// that answers after the process's deadline.
	DelayCompletion float64
	// Terminate is the chance, after each step that does not end a
	// process, that the process is terminated, as [Sim.Terminate] does.
	// A process asked to stop already (terminated, or cancelled by
	// Shutdown) is left alone: nothing is drawn or injected for it.
	Terminate float64
}

// WithFaults injects faults at random; see [Faults].
func WithFaults(f Faults) Option {
	return optionFunc(func(c *config) { c.faults = f })
}

// Sim is a simulated scheduler: it runs processes in the goroutine that
// drives it, one step at a time, on a virtual clock, with the semantics
// of [scheduler.Scheduler]. Create one with [New].
//
// A Sim is driven from one goroutine at a time: the test's, or the one
// [Explore] runs a scenario in. [Token.Complete] and [Sim.Send] may also be
// called from other goroutines (a fake's, say), and from a step or a fake.
type Sim struct {
	tb  testing.TB
	cfg config
	rng *rand.Rand

	// mu is held by the goroutine driving the simulation, except while
	// user code (Init, Step, Close, a fake) runs; it guards every field
	// below.
	mu sync.Mutex

	driving bool // a Run method is running; guards against reentry
	now     int64
	nextID  uint64
	nextSeq uint64
	steps   int

	procs   map[relay.PID]*proc
	ordered []*proc // every process ever started, in start order
	ready   []*proc // processes to step, in the order they became ready
	busy    []*proc // processes whose step's yields are being carried out (seeded)
	// current is the process on its step budget (unseeded): while it is
	// ready, it steps next; currentN is how many steps it has taken in a
	// row.
	current  *proc
	currentN int
	bySeq    map[uint64]*pending
	timers   timerHeap
	timerN   uint64
	delayed  []delayed
	faking   uint64 // the yield whose fake runs, if one does (see Call.Complete)
	names    map[string]relay.PID
	fakes    map[scheduler.CommandID]FakeFunc
	probes   map[relay.PID]*Probe

	closing bool // Shutdown has begun: starts are refused
	closed  bool // Shutdown has returned
	sdErr   error

	out   any // the *scheduler.StepOutput every step writes into
	read  bridge.Step
	batch []scheduler.Event

	terminateAt map[relay.PID]int
	injected    []string
	trace       []string // the latest scheduling decisions, at most traceLimit
}

// New returns a simulation for the test tb. It is shut down when the test
// ends (see [Sim.Shutdown]), so every process is closed exactly once.
func New(tb testing.TB, opts ...Option) *Sim {
	tb.Helper()
	c := config{budget: scheduler.DefaultStepBudget, maxSteps: DefaultMaxSteps, grace: DefaultShutdownDeadline, traceLimit: 40}
	for _, o := range opts {
		o.apply(&c)
	}
	if c.err != nil {
		tb.Fatalf("schedtest: New: %v", c.err)
	}
	s := &Sim{
		tb:          tb,
		cfg:         c,
		rng:         rand.New(rand.NewPCG(c.seed, 0x5eed)),
		now:         1,
		procs:       map[relay.PID]*proc{},
		bySeq:       map[uint64]*pending{},
		names:       map[string]relay.PID{},
		fakes:       map[scheduler.CommandID]FakeFunc{},
		probes:      map[relay.PID]*Probe{},
		terminateAt: map[relay.PID]int{},
	}
	s.out = bridge.NewOutput(func() time.Time { return origin.Add(time.Duration(s.now)) }, origin)
	tb.Cleanup(func() {
		s.mu.Lock()
		closed := s.closed || s.driving
		s.mu.Unlock()
		if !closed {
			_ = s.Shutdown()
		}
	})
	return s
}

// T returns the test the simulation reports to: the one given to [New], or
// the seed's own under [Explore], [Sweep] and [Check], whose Fatal ends
// only the seed's run and whose Skip skips the test there (see Explore).
// The seed's own test is to the seed's run what a test is to its
// function: what its Log, Error and Output write is the seed's report,
// its Cleanup functions run when the seed's run ends, and its Context is
// done then, before they run. Its other methods (Name, TempDir, Setenv,
// ...) are the test's.
func (s *Sim) T() testing.TB { return s.tb }

// Seed returns the seed of the simulation's choices (0 without
// [WithSeed]).
func (s *Sim) Seed() uint64 { return s.cfg.seed }

// Now returns the virtual time: [Epoch] plus every advance so far.
func (s *Sim) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return origin.Add(time.Duration(s.now))
}

// Start starts process p at entry point method with input, as
// [scheduler.Scheduler.Submit] does: Init runs now, in this goroutine, and
// the process is ready for its first step. A failing Init fails the test;
// use [Sim.Submit] to test Init failures. The process context carries no
// values but its PID; use [Sim.StartContext] to give it some.
func (s *Sim) Start(p scheduler.Process, method string, input payload.Payloads) relay.PID {
	s.tb.Helper()
	return s.StartContext(context.Background(), p, method, input)
}

// StartContext is [Sim.Start] with ctx for the process context's values,
// as [scheduler.Scheduler.Submit] takes it: the process context carries
// ctx's values (and the children the process spawns carry them too) but
// not its cancellation.
func (s *Sim) StartContext(ctx context.Context, p scheduler.Process, method string, input payload.Payloads) relay.PID {
	s.tb.Helper()
	pid, err := s.SubmitContext(ctx, p, method, input)
	if err != nil {
		s.tb.Fatalf("schedtest: Start(%T, %q): %v", p, method, err)
	}
	return pid
}

// Submit is [Sim.Start] that returns Init's error instead of failing the
// test: an error wrapping [scheduler.ErrInit], [scheduler.ErrNilProcess],
// [scheduler.ErrEmptyMethod] or, once Shutdown has begun,
// [scheduler.ErrClosed].
func (s *Sim) Submit(p scheduler.Process, method string, input payload.Payloads) (relay.PID, error) {
	return s.SubmitContext(context.Background(), p, method, input)
}

// SubmitContext is [Sim.StartContext] that returns the error instead of
// failing the test: Submit's errors, and, as on the scheduler, one
// wrapping [scheduler.ErrNilContext] for a nil ctx and ctx's error if it
// is done already.
func (s *Sim) SubmitContext(ctx context.Context, p scheduler.Process, method string, input payload.Payloads) (relay.PID, error) {
	if ctx == nil {
		return relay.PID{}, fmt.Errorf("%w: SubmitContext", scheduler.ErrNilContext)
	}
	if err := ctx.Err(); err != nil {
		return relay.PID{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	pr, err := s.start(ctx, p, method, input, nil, 0)
	if err != nil {
		return relay.PID{}, err
	}
	return pr.pid, nil
}

// Register gives the live process pid the name, as
// [scheduler.Scheduler.Register] does, with the same errors.
func (s *Sim) Register(name string, pid relay.PID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if name == "" {
		return fmt.Errorf("%w: the empty name", scheduler.ErrInvalidName)
	}
	if s.closed {
		return scheduler.ErrClosed
	}
	p := s.live(pid)
	if p == nil {
		return fmt.Errorf("%w: %v", scheduler.ErrProcessNotFound, pid)
	}
	if holder, ok := s.names[name]; ok {
		if holder == pid {
			return nil
		}
		return fmt.Errorf("%w: %q is %v's", scheduler.ErrNameTaken, name, holder)
	}
	s.names[name] = pid
	p.names = append(p.names, name)
	return nil
}

// Unregister releases name, whichever process holds it, as
// [scheduler.Scheduler.Unregister] does: it goes by the name, so one meant
// for a process whose name has since passed to another releases the
// other's. It returns an error wrapping [scheduler.ErrNameNotFound] if no
// process has the name, and [scheduler.ErrClosed] after Shutdown. Any
// goroutine, and from a step or a fake.
func (s *Sim) Unregister(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	pid, ok := s.names[name]
	if !ok {
		return s.nameMissing(name)
	}
	delete(s.names, name)
	if p := s.procs[pid]; p != nil {
		for i, n := range p.names {
			if n == name {
				p.names = append(p.names[:i], p.names[i+1:]...)
				break
			}
		}
	}
	return nil
}

// Lookup returns the process registered under name, or an error wrapping
// [scheduler.ErrNameNotFound]; after Shutdown, [scheduler.ErrClosed], as
// [scheduler.Scheduler.Lookup] does.
func (s *Sim) Lookup(name string) (relay.PID, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lookup(name)
}

func (s *Sim) lookup(name string) (relay.PID, error) {
	if pid, ok := s.names[name]; ok {
		return pid, nil
	}
	return relay.PID{}, s.nameMissing(name)
}

// nameMissing is the error for a name no process has: ErrClosed after
// Shutdown (every process has ended by then), ErrNameNotFound before.
func (s *Sim) nameMissing(name string) error {
	if s.closed {
		return scheduler.ErrClosed
	}
	return fmt.Errorf("%w: %q", scheduler.ErrNameNotFound, name)
}

// Send delivers msg to the process to from outside any process (From is
// the zero PID), as [scheduler.Scheduler.Tell] does. It returns an error
// wrapping [scheduler.ErrProcessNotFound] if to is not alive, and
// [scheduler.ErrClosed] after Shutdown. Any goroutine.
func (s *Sim) Send(to relay.PID, msg any) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deliver(relay.PID{}, to, msg)
}

// Reply answers a request from outside any process, as
// [scheduler.Scheduler.Reply] does: the asking yield completes with data
// and err, and no sender. Use it to answer requests a [Probe] received.
// It returns the scheduler's errors: one wrapping
// [scheduler.ErrYieldNotPending] if the asker no longer waits (answered,
// timed out or cancelled) and for the zero ReplyTo, even after Shutdown;
// [scheduler.ErrProcessNotFound] if the asker has ended or is no process;
// and [scheduler.ErrClosed] after Shutdown.
func (s *Sim) Reply(to scheduler.ReplyTo, data any, err error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reply(to, relay.PID{}, data, err)
}

// Terminate asks process pid to finish, as [scheduler.Scheduler.Terminate]
// does: it gets an [scheduler.EventCancel] whose Error is
// [scheduler.ErrTerminated], and its context is cancelled with that cause.
// It returns an error wrapping [scheduler.ErrProcessNotFound] if pid has
// ended and [scheduler.ErrClosed] after Shutdown.
func (s *Sim) Terminate(pid relay.PID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return scheduler.ErrClosed
	}
	p := s.live(pid)
	if p == nil {
		return fmt.Errorf("%w: %v", scheduler.ErrProcessNotFound, pid)
	}
	s.cancel(p, scheduler.ErrTerminated)
	return nil
}

// TerminateAtStep terminates process pid right after its nth step (the
// first is 1) if it has not ended by then: the fault "the process was
// stopped at this point", listed by [Sim.Injected]. It fails the test if
// the termination could never happen: n less than 1, a live process that
// has taken n steps already, or a PID that is no process of the
// simulation. A process that has ended, or that was asked to stop before
// the end of its nth step (by [Sim.Terminate], an injected termination
// or Shutdown), is left alone: it gets no second cancel, and no fault is
// listed.
func (s *Sim) TerminateAtStep(pid relay.PID, n int) {
	s.tb.Helper()
	s.mu.Lock()
	p := s.procs[pid]
	var why string
	switch {
	case n < 1:
		why = fmt.Sprintf("n is %d; the first step is 1", n)
	case p == nil:
		why = "it is no process of the simulation"
	case !p.ended && p.steps >= n:
		why = fmt.Sprintf("it has taken %d steps already", p.steps)
	default:
		s.terminateAt[pid] = n
	}
	s.mu.Unlock()
	if why != "" {
		s.tb.Errorf("schedtest: TerminateAtStep(%v, %d): %s", pid, n, why)
	}
}

// Result returns the result and error of process pid, as
// [scheduler.Handle.Result] does: [scheduler.ErrNotEnded] while it runs,
// [scheduler.ErrProcessNotFound] for a PID the simulation never started.
func (s *Sim) Result(pid relay.PID) (payload.Payload, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.procs[pid]
	if p == nil {
		return payload.Payload{}, fmt.Errorf("%w: %v", scheduler.ErrProcessNotFound, pid)
	}
	if !p.ended {
		return payload.Payload{}, scheduler.ErrNotEnded
	}
	return p.result, p.err
}

// Ended reports whether process pid has ended.
func (s *Sim) Ended(pid relay.PID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.procs[pid]
	return p != nil && p.ended
}

// Steps returns how many times process pid has been stepped.
func (s *Sim) Steps(pid relay.PID) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.procs[pid]; p != nil {
		return p.steps
	}
	return 0
}

// Unread returns how many events process pid left unread at its end: the
// ones after DoneAfter's count, and those that arrived during its last
// step (see [scheduler.StepOutput.Done]).
func (s *Sim) Unread(pid relay.PID) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.procs[pid]; p != nil {
		return p.unread
	}
	return 0
}

// Yields returns every yield process pid made, in order.
func (s *Sim) Yields(pid relay.PID) []Yield {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.procs[pid]; p != nil {
		return append([]Yield(nil), p.yields...)
	}
	return nil
}

// Injected lists the faults injected so far, in order, in words: a
// command failed, a completion held back, a process asked to stop. A
// fault is injected, and listed, only where it acts: no termination is
// listed for a process asked to stop already.
func (s *Sim) Injected() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.injected...)
}

// Trace returns the latest scheduling decisions, oldest first, in words:
// which process stepped, which yield was carried out, which timer fired.
func (s *Sim) Trace() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.trace...)
}

func (s *Sim) note(format string, args ...any) {
	if len(s.trace) == s.cfg.traceLimit {
		copy(s.trace, s.trace[1:])
		s.trace = s.trace[:len(s.trace)-1]
	}
	s.trace = append(s.trace, fmt.Sprintf("at +%v: ", time.Duration(s.now-1))+fmt.Sprintf(format, args...))
}

func (s *Sim) inject(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.injected = append(s.injected, msg)
	s.note("fault: %s", msg)
}

// chance draws from the random source: true with probability p.
func (s *Sim) chance(p float64) bool {
	return p > 0 && s.rng.Float64() < p
}

// Step steps process pid once, if it has something to do, and carries out
// the yields of that step; it reports whether it stepped. It fails the
// test if called from a step, a fake, an Init or a Close, or past
// [WithMaxSteps].
func (s *Sim) Step(pid relay.PID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.enter("Step")
	defer s.leave()
	p := s.live(pid)
	if p == nil || !p.queued || s.atMaxSteps() {
		return false
	}
	s.unready(p)
	s.stepOnce(p)
	s.carryAll(p)
	return true
}

// RunUntilIdle runs the simulation until no process has anything to do
// without the clock moving: every ready process has stepped and every
// yield was carried out. Timers that are due fire; later ones wait for
// [Sim.Advance].
func (s *Sim) RunUntilIdle() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.enter("RunUntilIdle")
	defer s.leave()
	s.runIdle(nil)
}

// RunUntil runs the simulation, as RunUntilIdle does, until cond reports
// true (checked before every step) or nothing is left to do; it returns
// cond's last answer. A run after it goes on as if it had not stopped: a
// process stopped within its step budget (see [WithStepBudget]) steps
// next. cond runs without the simulation's lock, so it may
// call the Sim's accessors.
func (s *Sim) RunUntil(cond func() bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.enter("RunUntil")
	defer s.leave()
	check := func() bool {
		s.mu.Unlock()
		defer s.mu.Lock()
		return cond()
	}
	return s.runIdle(check)
}

// Advance moves the virtual clock forward by d, firing the timers due on
// the way in order, each at its own time, and running the simulation
// until idle after each, so that a timer set by a process woken on the
// way fires too if it is due within d. Timers due at one instant fire
// in the order they were set; with [WithSeed], one at a time, and what
// the first woke may run before the next fires. The clock ends instead
// of wrapping: a d that would take it past its end (some 292 years
// after [Epoch]) takes it to the end, and a Sleep or deadline too far
// for the clock never fires, as on the scheduler.
func (s *Sim) Advance(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.enter("Advance")
	defer s.leave()
	target := s.after(d)
	s.runIdle(nil)
	for {
		e, ok := s.timers.peek(s)
		if !ok || e.when > target {
			break
		}
		s.reach(e.when)
		s.runIdle(nil)
	}
	s.now = target
	s.runIdle(nil)
}

// after returns the clock reading d from now, or the clock's last one if
// that is past it.
func (s *Sim) after(d time.Duration) int64 {
	if d <= 0 {
		return s.now
	}
	if int64(d) >= clockEnd-1-s.now {
		return clockEnd - 1
	}
	return s.now + int64(d)
}

// RunUntilIdleAdvancing runs until idle, then jumps the clock to the next
// timer, fires it, and so on, until nothing is left to do and no timer is
// set (a timer too far for the clock, which never fires, is not waited
// for). A one-hour timeout passes in microseconds. It returns how far the
// clock moved.
func (s *Sim) RunUntilIdleAdvancing() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.enter("RunUntilIdleAdvancing")
	defer s.leave()
	start := s.now
	s.runAdvancing(-1)
	return time.Duration(s.now - start)
}

// runAdvancing runs until idle, jumping to timers, up to the clock
// reading limit (-1: none); it reports whether it stopped at the limit.
func (s *Sim) runAdvancing(limit int64) bool {
	for {
		s.runIdle(nil)
		e, ok := s.timers.peek(s)
		if !ok {
			return false
		}
		if limit >= 0 && e.when > limit {
			return true
		}
		s.reach(e.when)
	}
}

// reach moves the clock to when, the time of the earliest timer, and
// fires the timers due then. Without a seed they all fire at once, before
// anything else happens. With one, the run that follows fires them, one
// at a time, each a choice among the other things to do: a process woken
// by the first may step before the next fires, as on the scheduler,
// whose workers fire the timers of different shards apart. (They fire at
// once there too if the clock is there already: a run that stopped with
// a timer due, at the step bound of a Shutdown, would find it again.)
func (s *Sim) reach(when int64) {
	due := when <= s.now
	s.now = max(s.now, when)
	if !s.cfg.seeded || due {
		s.fireDue()
	}
}

// enter marks the simulation as driven; called with s.mu held by a method
// that unlocks it when it returns. A call while the simulation runs (from
// a step, a fake, an Init or a Close) fails the test: Fatalf ends the
// calling goroutine, the test's, and the deferred calls below unwind the
// run with the lock held as the callers expect. A tb whose Fatalf returns
// gets a panic instead.
func (s *Sim) enter(what string) {
	if s.driving {
		msg := "schedtest: " + what + " called while the simulation runs (from a step, a fake, an Init or a Close?)"
		s.mu.Unlock()
		defer s.mu.Lock()
		s.tb.Fatalf("%s", msg)
		panic(msg)
	}
	s.driving = true
}

func (s *Sim) leave() { s.driving = false }

// Shutdown stops the simulation as [scheduler.Scheduler.Shutdown] does:
// starts are refused from now on, every live process gets an
// [scheduler.EventCancel] whose Error is [scheduler.ErrShuttingDown], and
// the simulation runs, advancing the clock, until every process has
// ended. Processes still alive when the shutdown deadline (see
// [WithShutdownDeadline]) passes, or when nothing is left that could end
// them, are forced: Close is called and their result is
// [scheduler.ErrForced]; the error returned then wraps ErrForced and says
// how many. Later calls return the same result. It runs by itself at the
// end of the test.
func (s *Sim) Shutdown() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return s.sdErr
	}
	s.enter("Shutdown")
	defer s.leave()
	s.closing = true
	for _, p := range s.ordered {
		if !p.ended {
			s.cancel(p, scheduler.ErrShuttingDown)
		}
	}
	deadline := s.after(s.cfg.grace)
	s.runAdvancing(deadline)
	forced := 0
	for _, p := range s.ordered {
		if !p.ended {
			if s.now < deadline {
				s.now = deadline
			}
			forced++
			s.end(p, payload.Payload{}, scheduler.ErrForced, true)
		}
	}
	s.closed = true
	if forced > 0 {
		s.sdErr = fmt.Errorf("%w: %d processes at the shutdown deadline", scheduler.ErrForced, forced)
	}
	return s.sdErr
}

// runIdle is the scheduling loop: it takes actions until none is left or
// cond (if not nil) reports true, and returns cond's last answer.
func (s *Sim) runIdle(cond func() bool) bool {
	for {
		if cond != nil && cond() {
			return true
		}
		if !s.act() {
			return cond != nil && cond()
		}
	}
}

// act takes one scheduling action and reports whether there was one.
func (s *Sim) act() bool {
	if !s.cfg.seeded {
		if len(s.ready) > 0 {
			if s.atMaxSteps() {
				return false
			}
			p := s.ready[0]
			if c := s.current; c != nil && c.queued {
				p = c // it goes on with its budget
			} else {
				s.current, s.currentN = p, 0
			}
			s.unready(p)
			s.budgetStep(p)
			return true
		}
		if s.fireDue() {
			return true
		}
		return s.releaseDelayed(false)
	}
	// Seeded: every ready process, every process with yields left to
	// carry out, and the next due timer are candidates alike.
	n := len(s.ready) + len(s.busy)
	due := false
	if e, ok := s.timers.peek(s); ok && e.when <= s.now {
		due = true
		n++
	}
	if n == 0 {
		return s.releaseDelayed(false)
	}
	i := s.rng.IntN(n)
	switch {
	case i < len(s.ready):
		if s.atMaxSteps() {
			return false
		}
		p := s.ready[i]
		s.ready = append(s.ready[:i], s.ready[i+1:]...)
		p.queued = false
		s.stepOnce(p)
		if len(p.todo) > 0 || p.final != nil {
			s.busy = append(s.busy, p)
		} else {
			s.settle(p)
		}
	case i < len(s.ready)+len(s.busy):
		i -= len(s.ready)
		p := s.busy[i]
		if s.carryNext(p) {
			s.busy = append(s.busy[:i], s.busy[i+1:]...)
			s.settle(p)
		}
	default:
		_ = due
		s.fireOne()
	}
	return true
}

// atMaxSteps is called before a step: it reports whether the
// simulation has taken its maximum of steps (see WithMaxSteps). Past it a
// Run method fails the test; Shutdown stops running and forces what is
// left.
func (s *Sim) atMaxSteps() bool {
	if s.steps < s.cfg.maxSteps {
		return false
	}
	if !s.closing {
		s.mu.Unlock()
		defer s.mu.Lock()
		s.tb.Fatalf("schedtest: more than %d steps (see WithMaxSteps): does a process never stop?", s.cfg.maxSteps)
	}
	return true
}

// budgetStep steps p (unseeded), the current process, once and carries
// out its yields. It stays current, to step again before any other, while
// it continues or has events and has taken fewer steps in a row than its
// budget; then it goes to the back of the queue, where settle put it.
func (s *Sim) budgetStep(p *proc) {
	s.stepOnce(p)
	s.carryAll(p)
	s.currentN++
	if !p.queued || s.currentN >= s.cfg.budget {
		s.current = nil
	}
}

// settle puts p, whose step's yields are all carried out, back in the
// queue if it continued or has events, and ends it if its step was final.
func (s *Sim) settle(p *proc) {
	p.running = false
	if p.final != nil {
		f := p.final
		p.final = nil
		s.finish(p, f)
		return
	}
	if p.ended {
		return
	}
	if p.cont || len(p.inbox) > 0 {
		s.markReady(p)
	}
}

// live returns the live process pid, or nil.
func (s *Sim) live(pid relay.PID) *proc {
	if p := s.procs[pid]; p != nil && !p.ended {
		return p
	}
	return nil
}

// markReady queues p to step if it is not queued, running or ended.
func (s *Sim) markReady(p *proc) {
	if p.queued || p.running || p.ended {
		return
	}
	p.queued = true
	s.ready = append(s.ready, p)
}

// unready takes p off the ready queue.
func (s *Sim) unready(p *proc) {
	if !p.queued {
		return // not in s.ready: nothing to look for
	}
	for i, q := range s.ready {
		if q == p {
			s.ready = append(s.ready[:i], s.ready[i+1:]...)
			break
		}
	}
	p.queued = false
}

// callUser runs f, user code, without the lock, so that it may call the
// Sim's methods that are safe from steps and fakes.
func (s *Sim) callUser(f func()) {
	s.mu.Unlock()
	defer s.mu.Lock()
	f()
}
