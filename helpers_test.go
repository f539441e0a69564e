package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// Helpers shared by the API tests (api_test.go, errors_test.go,
// dispatch_test.go, shutdown_test.go). Type names start with "t" so that
// they cannot clash with the stress tests' helpers, which start with "s".

// tTimeout bounds every wait of these tests: a condition that has not come
// true by then is a failure (a lost wakeup, a missing event), not slowness.
const tTimeout = 10 * time.Second

// tCmd and tCmd2 are user command IDs for handler tests.
const (
	tCmd  = sched.FirstUserCommand + 1
	tCmd2 = sched.FirstUserCommand + 2
)

// tNewScheduler starts a scheduler and shuts it down when the test ends,
// so that goleak (see main_test.go) finds no worker left. A test that shut
// the scheduler down itself, forcing processes, makes the cleanup's
// Shutdown return that result again (ErrForced without the cleanup's own
// deadline), which is fine.
func tNewScheduler(t testing.TB, opts ...sched.Option) *sched.Scheduler {
	t.Helper()
	s, err := sched.New(opts...)
	require.NoError(t, err)
	require.NotNil(t, s)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), tTimeout)
		defer cancel()
		if err := s.Shutdown(ctx); !tShutdownOK(err) {
			t.Errorf("Shutdown at cleanup: %v", err)
		}
	})
	return s
}

// tShutdownOK reports whether a cleanup's Shutdown went as it should: the
// processes ended on their cancel, or a test's own Shutdown forced them
// before; not the cleanup's own deadline.
func tShutdownOK(err error) bool {
	return err == nil || errors.Is(err, sched.ErrForced) && !errors.Is(err, context.DeadlineExceeded)
}

// tSubmit submits p with method "run" and input, failing the test on error.
func tSubmit(t testing.TB, s *sched.Scheduler, p sched.Process, input ...any) sched.Handle {
	t.Helper()
	h, err := s.Submit(context.Background(), p, "run", payload.Values(input...))
	require.NoError(t, err)
	require.False(t, h.PID().IsZero(), "Submit returned a zero PID")
	return h
}

// tWait waits for h's process to end and returns its result, failing the
// test if it does not end within tTimeout. s, if not nil, is dumped on
// failure to show where processes are stuck.
func tWait(t testing.TB, s *sched.Scheduler, h sched.Handle) (payload.Payload, error) {
	t.Helper()
	timer := time.NewTimer(tTimeout)
	defer timer.Stop()
	select {
	case <-h.Done():
	case <-timer.C:
		t.Fatalf("process %v did not end within %v%s", h.PID(), tTimeout, tDump(s))
	}
	res, err := h.Result()
	require.NotErrorIs(t, err, sched.ErrNotEnded, "Result after Done was closed")
	return res, err
}

// tDump renders s's processes for a failure message.
func tDump(s *sched.Scheduler) string {
	if s == nil {
		return ""
	}
	var b strings.Builder
	b.WriteString("\nprocesses:\n")
	tWriteProcesses(&b, s)
	return b.String()
}

// tWriteProcesses writes one line per live process of s, then its
// statistics: the dump every test failure that concerns stuck processes
// shows.
func tWriteProcesses(w io.Writer, s *sched.Scheduler) {
	for _, pi := range s.Processes() {
		fmt.Fprintf(w, "%s method=%q state=%v woken=%v queued=%d pending=%d\n",
			pi.PID, pi.Method, pi.State, pi.Woken, pi.Queued, pi.Pending)
	}
	fmt.Fprintf(w, "stats: %+v\n", s.Stats())
}

// tRecv receives from ch or fails the test after tTimeout.
func tRecv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	timer := time.NewTimer(tTimeout)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("timed out after %v waiting for %s", tTimeout, what)
		panic("unreachable")
	}
}

// tClosed waits for ch to be closed or fails the test after tTimeout.
func tClosed(t testing.TB, ch <-chan struct{}, what string) {
	t.Helper()
	tRecv(t, ch, what)
}

// tIsClosed reports whether ch is closed now, without waiting.
func tIsClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// tEventually polls cond until it holds, failing the test after tTimeout.
// It is for conditions no channel announces (a process state, a counter);
// it never stands in for a condition that can be waited on.
func tEventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(tTimeout)
	for i := 0; !cond(); i++ {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", tTimeout, what)
		}
		if i < 100 {
			runtime.Gosched()
			continue
		}
		<-time.After(time.Millisecond)
	}
}

// tWaitState waits until pid is listed by Processes in state want and
// returns its entry.
func tWaitState(t testing.TB, s *sched.Scheduler, pid relay.PID, want sched.State) sched.ProcessInfo {
	t.Helper()
	var got sched.ProcessInfo
	tEventually(t, fmt.Sprintf("%v to be %v", pid, want), func() bool {
		info, ok := tFindProcess(s, pid)
		got = info
		return ok && info.State == want
	})
	return got
}

// tFindProcess returns pid's entry in s.Processes.
func tFindProcess(s *sched.Scheduler, pid relay.PID) (sched.ProcessInfo, bool) {
	for _, info := range s.Processes() {
		if info.PID == pid {
			return info, true
		}
	}
	return sched.ProcessInfo{}, false
}

// tProc is a scriptable process that records what the scheduler does to
// it: the Init arguments, a copy of every batch of events, and its Close
// calls. It also notices if two of its methods ever
// run at once, or if Step runs after Close.
//
// Its behaviour comes from the function fields, which are set before
// Submit and never changed: init (nil: succeed), step (nil: wait for
// events forever) and close (nil: nothing).
type tProc struct {
	init  func(ctx context.Context, method string, input payload.Payloads) error
	step  func(p *tProc, n int, evs []sched.Event, out *sched.StepOutput) error
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

func (p *tProc) Init(ctx context.Context, method string, input payload.Payloads) error {
	p.mu.Lock()
	p.inits++
	p.ctx, p.method, p.input = ctx, method, input
	p.mu.Unlock()
	if p.init != nil {
		return p.init(ctx, method, input)
	}
	return nil
}

func (p *tProc) Step(evs []sched.Event, out *sched.StepOutput) error {
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

func (p *tProc) Close() {
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

func (p *tProc) Steps() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.batches)
}

func (p *tProc) Closes() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closes
}

func (p *tProc) Inits() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inits
}

func (p *tProc) Ctx() context.Context {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ctx
}

// Batches returns a copy of the event batches of every step so far.
func (p *tProc) Batches() [][]sched.Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.batches)
}

// Events returns every event received so far, in order.
func (p *tProc) Events() []sched.Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	var all []sched.Event
	for _, b := range p.batches {
		all = append(all, b...)
	}
	return all
}

// EventsOf returns the events of type typ received so far, in order.
func (p *tProc) EventsOf(typ sched.EventType) []sched.Event {
	var out []sched.Event
	for _, ev := range p.Events() {
		if ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}

// tRequireLife checks the lifecycle contract of an ended process: Init
// once, Close exactly once, no overlapping calls, no Step after Close.
func tRequireLife(t testing.TB, p *tProc) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	require.Equal(t, 1, p.inits, "Init calls")
	require.Equal(t, 1, p.closes, "Close calls")
	require.Empty(t, p.problems, "contract violations")
}

// Step behaviours for tProc.

// tDone finishes at the first step with result v.
func tDone(v any) func(*tProc, int, []sched.Event, *sched.StepOutput) error {
	return func(_ *tProc, _ int, _ []sched.Event, out *sched.StepOutput) error {
		out.Done(payload.Of(v))
		return nil
	}
}

// tUntilCancel waits for events and finishes with result "cancelled" at
// the first EventCancel: a process that shuts down gracefully.
func tUntilCancel(_ *tProc, _ int, evs []sched.Event, out *sched.StepOutput) error {
	if tHasCancel(evs) {
		out.Done(payload.Of("cancelled"))
	}
	return nil
}

// tIgnoreAll waits forever, ignoring cancellation: only a forced shutdown
// ends it.
func tIgnoreAll(*tProc, int, []sched.Event, *sched.StepOutput) error { return nil }

// tUntilMessage finishes with the Data of the first message that arrives,
// or at cancel.
func tUntilMessage(_ *tProc, _ int, evs []sched.Event, out *sched.StepOutput) error {
	for _, ev := range evs {
		switch ev.Type {
		case sched.EventMessage:
			out.Done(payload.Of(ev.Data))
			return nil
		case sched.EventCancel:
			out.Done(payload.Payload{})
			return nil
		}
	}
	return nil
}

// tHasCancel reports whether evs hold an EventCancel.
func tHasCancel(evs []sched.Event) bool {
	return slices.ContainsFunc(evs, func(ev sched.Event) bool { return ev.Type == sched.EventCancel })
}

// tCompletion returns the completion of the yield with tag among evs.
func tCompletion(evs []sched.Event, tag uint64) (sched.Event, bool) {
	for _, ev := range evs {
		if ev.Type == sched.EventYieldComplete && ev.Tag == tag {
			return ev, true
		}
	}
	return sched.Event{}, false
}

// tYieldOnce yields once at the first step (through yield) and finishes
// with the completion of tag as its result (Data; Error as the
// process's error), or at cancel.
func tYieldOnce(tag uint64, yield func(out *sched.StepOutput)) func(*tProc, int, []sched.Event, *sched.StepOutput) error {
	return func(_ *tProc, n int, evs []sched.Event, out *sched.StepOutput) error {
		if n == 0 {
			yield(out)
			return nil
		}
		if ev, ok := tCompletion(evs, tag); ok {
			if ev.Error != nil {
				return ev.Error
			}
			out.Done(payload.Of(ev.Data))
			return nil
		}
		if tHasCancel(evs) {
			out.Done(payload.Payload{})
		}
		return nil
	}
}

// tErr is an error value for Init and Step failures.
type tErr string

func (e tErr) Error() string { return string(e) }

// tKey is a context key type.
type tKey struct{}
