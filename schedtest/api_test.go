package schedtest_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
	"github.com/procsched/scheduler/schedtest"
)

// recTB is a testing.TB that records what a run reports instead of failing
// the test. Fatal, Fatalf and FailNow end the run's goroutine, as they end
// a test; the cleanups run when the run ends. Run one with runTB. The
// methods it does not override (Name, say) go to the real test.
type recTB struct {
	testing.TB
	mu       sync.Mutex
	failed   bool
	skipped  bool
	lines    []string
	cleanups []func()
}

func (r *recTB) Helper()                         {}
func (r *recTB) Log(args ...any)                 { r.add(fmt.Sprint(args...)) }
func (r *recTB) Logf(format string, args ...any) { r.add(fmt.Sprintf(format, args...)) }
func (r *recTB) Error(args ...any)               { r.Fail(); r.Log(args...) }
func (r *recTB) Errorf(format string, args ...any) {
	r.Fail()
	r.Logf(format, args...)
}
func (r *recTB) Fatal(args ...any)                 { r.Error(args...); r.FailNow() }
func (r *recTB) Fatalf(format string, args ...any) { r.Errorf(format, args...); r.FailNow() }
func (r *recTB) FailNow()                          { r.Fail(); runtime.Goexit() }
func (r *recTB) Skip(args ...any)                  { r.Log(args...); r.SkipNow() }
func (r *recTB) Skipf(format string, args ...any)  { r.Logf(format, args...); r.SkipNow() }

// SkipNow marks the run skipped and ends its goroutine, as it ends a
// test.
func (r *recTB) SkipNow() {
	r.mu.Lock()
	r.skipped = true
	r.mu.Unlock()
	runtime.Goexit()
}

func (r *recTB) Skipped() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.skipped
}

func (r *recTB) Fail() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = true
}

func (r *recTB) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}

func (r *recTB) Cleanup(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cleanups = append(r.cleanups, f)
}

func (r *recTB) add(line string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, line)
}

// text returns every line reported, one a line.
func (r *recTB) text() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.lines, "\n")
}

// runTB runs f in a goroutine of its own with a recTB, runs the cleanups f
// registered (last first), and returns the recTB once all is done.
func runTB(t *testing.T, f func(tb *recTB)) *recTB {
	tb := &recTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			for i := len(tb.cleanups) - 1; i >= 0; i-- {
				tb.cleanups[i]()
			}
		}()
		f(tb)
	}()
	<-done
	return tb
}

// idle is a process that waits for ever and ignores every event.
func idle() scheduler.Process {
	return stepper(func(int, []scheduler.Event, *scheduler.StepOutput) error { return nil })
}

// recorder is a process that keeps every event it gets and runs step.
type recorder struct {
	mu     sync.Mutex
	events []scheduler.Event
	ctx    context.Context
	step   func(n int, evs []scheduler.Event, out *scheduler.StepOutput)
	n      int
}

func (r *recorder) Init(ctx context.Context, _ string, _ payload.Payloads) error {
	r.ctx = ctx
	return nil
}

func (r *recorder) Step(evs []scheduler.Event, out *scheduler.StepOutput) error {
	r.mu.Lock()
	r.n++
	r.events = append(r.events, evs...)
	n := r.n
	r.mu.Unlock()
	r.step(n, evs, out)
	return nil
}

func (r *recorder) Close() {}

// got returns the events kept so far.
func (r *recorder) got() []scheduler.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]scheduler.Event(nil), r.events...)
}

var errAPI = errors.New("api test error")

// TestReplyFuncAndFail checks the two fakes that answer at once: ReplyFunc
// completes each call with what its function answers for the call's
// argument (data or error), and Fail completes each call with its error.
func TestReplyFuncAndFail(t *testing.T) {
	s := schedtest.New(t)
	var args []any
	s.Fake(cmdWork, schedtest.ReplyFunc(func(arg any) (any, error) {
		args = append(args, arg)
		if arg == "bad" {
			return nil, errAPI
		}
		return fmt.Sprintf("re:%v", arg), nil
	}))
	s.Fake(cmdCleanup, schedtest.Fail(errAPI))
	p := &recorder{step: func(n int, evs []scheduler.Event, out *scheduler.StepOutput) {
		if n == 1 {
			out.Yield(1, cmdWork, "good")
			out.Yield(2, cmdWork, "bad")
			out.Yield(3, cmdCleanup, "any")
		}
	}}
	s.Start(p, "run", nil)
	s.RunUntilIdle()
	require.Equal(t, []any{"good", "bad"}, args, "ReplyFunc's function sees each call's argument, in order")
	got := p.got()
	require.Len(t, got, 3)
	require.Equal(t, uint64(1), got[0].Tag)
	require.Equal(t, "re:good", got[0].Data)
	require.NoError(t, got[0].Error)
	require.Equal(t, uint64(2), got[1].Tag)
	require.Nil(t, got[1].Data)
	require.ErrorIs(t, got[1].Error, errAPI)
	require.Equal(t, uint64(3), got[2].Tag)
	require.ErrorIs(t, got[2].Error, errAPI)
}

// TestFailAndReplyFuncRefuseNil checks that Fail(nil) and ReplyFunc(nil)
// panic at once, with a message that names the mistake, rather than make
// a fake that answers every call without an error, or one that panics at
// each call.
func TestFailAndReplyFuncRefuseNil(t *testing.T) {
	require.PanicsWithValue(t, "schedtest: Fail(nil): a fake that fails needs an error (Reply(nil) answers without one)",
		func() { schedtest.Fail(nil) })
	require.PanicsWithValue(t, "schedtest: ReplyFunc(nil): no function to answer the calls",
		func() { schedtest.ReplyFunc(nil) })
}

// TestCallContext checks a fake's call context on the virtual clock: its
// deadline is the one the step gave the yield, exactly, and a later
// Timeout's once that replaces it; it is done with ErrTimeout when the
// clock reaches the deadline (Err DeadlineExceeded, for contexts derived
// from it too, and context.AfterFunc runs), not before, and not when the
// process is terminated; it is done with ErrForced for a process forced at
// the shutdown deadline; every call of Context returns the same context;
// and the zero Call's is context.Background().
func TestCallContext(t *testing.T) {
	s := schedtest.New(t, schedtest.WithShutdownDeadline(time.Minute))
	calls := s.FakeLater(cmdWork)
	pid := s.Start(stepper(func(n int, _ []scheduler.Event, out *scheduler.StepOutput) error {
		switch n {
		case 1:
			out.Yield(1, cmdWork, "timed")
			out.Timeout(1, time.Hour)
			out.Yield(2, cmdWork, "forced")
		case 2:
			out.Timeout(1, 2*time.Hour)
		}
		return nil
	}), "run", nil)
	s.RunUntilIdle()
	timed, forced := calls.Next(), calls.Next()
	ctx := timed.Context()
	require.Same(t, ctx, timed.Context(), "one context per call")
	self, ok := scheduler.Self(ctx)
	require.True(t, ok)
	require.Equal(t, pid, self)
	dl, ok := ctx.Deadline()
	require.True(t, ok)
	require.Equal(t, schedtest.Epoch.Add(time.Hour), dl)
	_, ok = forced.Context().Deadline()
	require.False(t, ok, "no Timeout, no deadline")

	derived, cancel := context.WithCancel(ctx)
	defer cancel()
	ran := make(chan struct{})
	context.AfterFunc(ctx, func() { close(ran) })

	s.Advance(30 * time.Minute)
	require.NoError(t, s.Send(pid, "later deadline"))
	s.RunUntilIdle()
	dl, _ = ctx.Deadline()
	require.Equal(t, schedtest.Epoch.Add(30*time.Minute+2*time.Hour), dl, "a later Timeout replaces the deadline")
	require.NoError(t, s.Terminate(pid))
	s.Advance(2*time.Hour - time.Nanosecond)
	require.NoError(t, ctx.Err(), "not done before the deadline, nor when the process is asked to stop")
	s.Advance(time.Nanosecond)
	require.ErrorIs(t, ctx.Err(), context.DeadlineExceeded)
	require.ErrorIs(t, context.Cause(ctx), scheduler.ErrTimeout)
	<-ctx.Done()
	<-derived.Done()
	require.ErrorIs(t, derived.Err(), context.DeadlineExceeded, "a derived context is done as its parent")
	require.ErrorIs(t, context.Cause(derived), scheduler.ErrTimeout)
	<-ran
	_, ok = ctx.Deadline()
	require.False(t, ok, "no deadline once the yield is no longer pending")

	require.NoError(t, forced.Context().Err())
	require.ErrorIs(t, s.Shutdown(), scheduler.ErrForced)
	require.ErrorIs(t, forced.Context().Err(), context.Canceled)
	require.ErrorIs(t, context.Cause(forced.Context()), scheduler.ErrForced)

	require.Equal(t, context.Background(), schedtest.Call{}.Context())
}

// TestZeroCallAndToken checks that the zero Call and the zero Token
// complete nothing and return ErrProcessNotFound, as the zero
// scheduler.Completion does.
func TestZeroCallAndToken(t *testing.T) {
	require.ErrorIs(t, schedtest.Token{}.Complete("x", nil), scheduler.ErrProcessNotFound)
	require.ErrorIs(t, schedtest.Call{}.Complete("x", nil), scheduler.ErrProcessNotFound)
	require.ErrorIs(t, schedtest.Call{}.Token().Complete("x", nil), scheduler.ErrProcessNotFound)
	require.ErrorIs(t, scheduler.Completion{}.Complete("x", nil), scheduler.ErrProcessNotFound)
}

// TestOutsideMethodsFromAStep checks that the methods doc.go lists as
// callable from a step or a fake work there: they take effect at once,
// as on the scheduler, and return.
func TestOutsideMethodsFromAStep(t *testing.T) {
	s := schedtest.New(t)
	probe := s.Probe()
	var got []string
	note := func(what string, err error) { got = append(got, fmt.Sprintf("%s %v", what, err)) }
	var other relay.PID
	s.Fake(cmdWork, func(c schedtest.Call) error {
		note("fake: register", s.Register("from the fake", c.PID))
		note("fake: send", s.Send(probe.PID(), "from the fake"))
		return c.Complete(nil, nil)
	})
	pid := s.Start(stepper(func(n int, _ []scheduler.Event, out *scheduler.StepOutput) error {
		if n > 1 {
			return nil
		}
		self := out.Self()
		note("register", s.Register("svc", self))
		who, err := s.Lookup("svc")
		note("lookup "+fmt.Sprint(who == self), err)
		note("unregister", s.Unregister("svc"))
		note("send", s.Send(probe.PID(), "from the step"))
		note("probe send", probe.Send(other, "hello"))
		note("reply zero", s.Reply(scheduler.ReplyTo{}, nil, nil))
		note("terminate other", s.Terminate(other))
		s.TerminateAtStep(other, 2)
		out.Yield(1, cmdWork, nil)
		return nil
	}), "run", nil)
	other = s.Start(stepper(func(int, []scheduler.Event, *scheduler.StepOutput) error { return nil }), "run", nil)
	s.RunUntilIdle()
	require.Equal(t, []string{
		"register <nil>", "lookup true <nil>", "unregister <nil>", "send <nil>", "probe send <nil>",
		"reply zero scheduler: yield not pending: the zero ReplyTo", "terminate other <nil>",
		"fake: register <nil>", "fake: send <nil>",
	}, got)
	require.Equal(t, 2, len(probe.Received()))
	who, err := s.Lookup("from the fake")
	require.NoError(t, err)
	require.Equal(t, pid, who)
}

// TestFakeRefusesWhatSetHandlerRefuses checks that Fake fails the test,
// with the scheduler's own words, where SetHandler refuses the handler
// with ErrInvalidCommand: a nil fake, a reserved command, one above the
// maximum. The fake made before a refused one stays.
func TestFakeRefusesWhatSetHandlerRefuses(t *testing.T) {
	sched, err := scheduler.New(scheduler.WithWorkers(1))
	require.NoError(t, err)
	defer func() { _ = sched.Shutdown(context.Background()) }()
	for _, c := range []struct {
		cmd  scheduler.CommandID
		fake schedtest.FakeFunc
	}{
		{cmdWork, nil},
		{scheduler.FirstUserCommand - 1, schedtest.Reply("reserved")},
		{1<<16 + 1, schedtest.Reply("too large")},
	} {
		var h scheduler.Handler
		if c.fake != nil {
			h = func(scheduler.Call) error { return nil }
		}
		refused := sched.SetHandler(c.cmd, h)
		require.ErrorIs(t, refused, scheduler.ErrInvalidCommand)
		var got []scheduler.Event
		r := runTB(t, func(tb *recTB) {
			s := schedtest.New(tb)
			s.Fake(cmdWork, schedtest.Reply("earlier"))
			s.Fake(c.cmd, c.fake)
			p := &recorder{step: func(n int, _ []scheduler.Event, out *scheduler.StepOutput) {
				if n == 1 {
					out.Yield(1, cmdWork, nil)
				}
			}}
			s.Start(p, "run", nil)
			s.RunUntilIdle()
			got = p.got()
		})
		require.True(t, r.Failed(), "command %d", c.cmd)
		require.Equal(t, fmt.Sprintf("schedtest: Fake(%d): %v", c.cmd, refused), r.text())
		require.Len(t, got, 1)
		require.Equal(t, "earlier", got[0].Data, "the earlier fake stays")
	}
}

// TestHeldLenAndNext checks that Held.Len counts the calls held and not yet
// taken, that Next takes them oldest first, and that Next with none left
// fails the test instead of returning a zero Call.
func TestHeldLenAndNext(t *testing.T) {
	r := runTB(t, func(tb *recTB) {
		s := schedtest.New(tb)
		h := s.FakeLater(cmdWork)
		require.Equal(t, 0, h.Len())
		s.Start(stepper(func(n int, _ []scheduler.Event, out *scheduler.StepOutput) error {
			if n == 1 {
				out.Yield(1, cmdWork, "first")
				out.Yield(2, cmdWork, "second")
			}
			return nil
		}), "run", nil)
		s.RunUntilIdle()
		require.Equal(t, 2, h.Len())
		require.Equal(t, "first", h.Next().Arg)
		require.Equal(t, 1, h.Len())
		require.Equal(t, "second", h.Next().Arg)
		require.Equal(t, 0, h.Len())
		h.Next()
		tb.Log("reached after Next with no call left")
	})
	require.True(t, r.Failed())
	require.Contains(t, r.text(), "no held call left (2 held in all)")
	require.NotContains(t, r.text(), "reached")
}

// TestYieldKindString checks every kind's name, and the fallback for a
// value that is no kind.
func TestYieldKindString(t *testing.T) {
	want := map[schedtest.YieldKind]string{
		schedtest.KindCommand: "Command", schedtest.KindTell: "Tell", schedtest.KindSpawn: "Spawn",
		schedtest.KindSpawnAwait: "SpawnAwait", schedtest.KindSleep: "Sleep", schedtest.KindTellName: "TellName",
		schedtest.KindMonitor: "Monitor", schedtest.KindRequest: "Request", schedtest.KindReply: "Reply",
		schedtest.KindCancel: "Cancel", schedtest.KindTimeout: "Timeout",
		0: "YieldKind(0)", 12: "YieldKind(12)", 255: "YieldKind(255)",
	}
	for k, name := range want {
		require.Equal(t, name, k.String(), "kind %d", uint8(k))
	}
}

// TestYieldString checks how Sim.Yields' entries describe themselves: a
// command with its ID, tag and argument, a Tell with its recipient and
// message, a Sleep with when it ends on the virtual clock, and any other
// kind by its name and tag.
func TestYieldString(t *testing.T) {
	s := schedtest.New(t)
	probe := s.Probe()
	pid := s.Start(stepper(func(n int, _ []scheduler.Event, out *scheduler.StepOutput) error {
		if n == 1 {
			out.Yield(4, cmdWork, "arg")
			out.Tell(probe.PID(), "msg")
			out.Sleep(5, 90*time.Second)
			out.Monitor(6, probe.PID())
		}
		return nil
	}), "run", nil)
	s.Advance(time.Minute)
	ys := s.Yields(pid)
	var got []string
	for _, y := range ys {
		got = append(got, y.String())
	}
	require.Equal(t, []string{
		fmt.Sprintf("step 1: Command(%d, tag=4, arg=arg)", cmdWork),
		fmt.Sprintf("step 1: Tell(%v, msg)", probe.PID()),
		"step 1: Sleep(tag=5, until +1m30s)",
		"step 1: Monitor(tag=6)",
	}, got)
}

// TestProbeReceivedAndExpectations checks Probe.Received (every message so
// far, in order, requests included, as a copy the test may change), that
// Expect matches a request by its body and ExpectNone passes once every
// message was expected, and that Expect with no message left and
// ExpectNone with one left report the failure with what the probe got.
func TestProbeReceivedAndExpectations(t *testing.T) {
	tb := &failingTB{TB: t}
	s := schedtest.New(tb)
	probe := s.Probe()
	require.Empty(t, probe.Received())
	pid := s.Start(stepper(func(n int, _ []scheduler.Event, out *scheduler.StepOutput) error {
		if n == 1 {
			out.Tell(probe.PID(), "one")
			out.Request(1, probe.PID(), "question")
			out.Tell(probe.PID(), "two")
		}
		return nil
	}), "run", nil)
	s.RunUntilIdle()
	got := probe.Received()
	require.Len(t, got, 3)
	require.Equal(t, "one", got[0].Data)
	require.Equal(t, pid, got[0].From)
	req, ok := got[1].Data.(scheduler.Request)
	require.True(t, ok, "a request arrives as a scheduler.Request: %v", got[1].Data)
	require.Equal(t, "question", req.Body)
	require.Equal(t, pid, req.ReplyTo.PID)
	require.Equal(t, "two", got[2].Data)
	got[0].Data = "changed"
	require.Equal(t, "one", probe.Received()[0].Data, "Received returns a copy")

	require.Equal(t, "one", probe.Expect("one").Data)
	require.Equal(t, req, probe.Expect("question").Data, "a request is matched by its body")
	probe.ExpectNone()
	require.Len(t, tb.errs, 1, "one message is left")
	require.Contains(t, tb.errs[0], "want no message, got 1 more")
	require.Contains(t, tb.errs[0], "3: Message(")
	probe.Expect("two")
	probe.ExpectNone()
	require.Len(t, tb.errs, 1, "every message was expected")
	ev := probe.Expect("three")
	require.Equal(t, scheduler.Event{}, ev)
	require.Len(t, tb.errs, 2)
	require.Contains(t, tb.errs[1], `want a message "three", got none`)
	require.Contains(t, tb.errs[1], "the probe received 3 messages")
}

// TestMonitorOfAProbe checks that a probe never ends, for a monitor
// too: a Monitor of a probe stays outstanding (no gone exit, however far
// the clock moves) until its own deadline or a Cancel ends it.
func TestMonitorOfAProbe(t *testing.T) {
	s := schedtest.New(t)
	probe := s.Probe()
	r := &recorder{}
	r.step = func(n int, _ []scheduler.Event, out *scheduler.StepOutput) {
		if n == 1 {
			out.Monitor(1, probe.PID())
			out.Monitor(2, probe.PID())
			out.Timeout(2, time.Hour)
			out.Monitor(3, probe.PID())
		}
	}
	pid := s.Start(r, "run", nil)
	s.Advance(time.Minute)
	require.Empty(t, r.got(), "a probe never ends")
	s.RunUntilIdleAdvancing()
	require.Len(t, r.got(), 1)
	require.Equal(t, uint64(2), r.got()[0].Tag)
	require.ErrorIs(t, r.got()[0].Error, scheduler.ErrTimeout)
	require.NoError(t, s.Terminate(pid))
	s.RunUntilIdle()
	require.Len(t, r.got(), 2, "the cancel; monitors 1 and 3 still wait")
	require.Equal(t, scheduler.EventCancel, r.got()[1].Type)
}

// TestRegisterAndLookup checks Register and Lookup on their own (the
// conformance suite compares them with the scheduler's): a probe, the zero
// PID and a PID never started are no processes, a name refused leaves
// nothing registered, and the name of a process forced at Shutdown is
// released too.
func TestRegisterAndLookup(t *testing.T) {
	s := schedtest.New(t)
	a := s.Start(idle(), "run", nil)
	probe := s.Probe()
	for _, pid := range []relay.PID{probe.PID(), {}, relayPID(99)} {
		require.ErrorIs(t, s.Register("p", pid), scheduler.ErrProcessNotFound, "%v", pid)
	}
	_, err := s.Lookup("p")
	require.ErrorIs(t, err, scheduler.ErrNameNotFound)
	require.ErrorIs(t, s.Register("", a), scheduler.ErrInvalidName)
	_, err = s.Lookup("")
	require.ErrorIs(t, err, scheduler.ErrNameNotFound)
	require.NoError(t, s.Register("a", a))
	got, err := s.Lookup("a")
	require.NoError(t, err)
	require.Equal(t, a, got)
	require.ErrorIs(t, s.Shutdown(), scheduler.ErrForced, "a ignores its cancel")
	_, err = s.Lookup("a")
	// A name still held would be found; a released one is a miss, and a
	// miss after Shutdown says the simulation is closed.
	require.ErrorIs(t, err, scheduler.ErrClosed, "a forced process's names are released")
	require.ErrorIs(t, s.Register("a", a), scheduler.ErrClosed)
	require.ErrorIs(t, s.Register("", a), scheduler.ErrInvalidName, "as the scheduler, the empty name is checked first")
}

// TestReplyFromOutside checks Sim.Reply: it answers a request a probe
// received, completing the asking yield with the data and error given and
// no sender, in the order the replies were made; and it refuses, with the
// scheduler's errors, a second answer (ErrYieldNotPending), the zero ReplyTo
// (ErrYieldNotPending), an asker that is no process (a PID never started,
// a probe) or has ended (ErrProcessNotFound), and an answer once the
// simulation is shut down (ErrClosed, but the zero ReplyTo is still
// ErrYieldNotPending, as on the scheduler).
func TestReplyFromOutside(t *testing.T) {
	s := schedtest.New(t)
	probe := s.Probe()
	asker := &recorder{}
	asker.step = func(n int, evs []scheduler.Event, out *scheduler.StepOutput) {
		if n == 1 {
			out.Request(1, probe.PID(), "q1")
			out.Request(2, probe.PID(), "q2")
			out.Request(3, probe.PID(), "q3")
		}
		if len(asker.got()) == 2 {
			out.Done(payload.Of("answered"))
		}
	}
	pid := s.Start(asker, "run", nil)
	var rts []scheduler.ReplyTo
	for _, body := range []string{"q1", "q2", "q3"} {
		ev := probe.Expect(body)
		require.Equal(t, pid, ev.From)
		req := ev.Data.(scheduler.Request)
		require.Equal(t, pid, req.ReplyTo.PID)
		rts = append(rts, req.ReplyTo)
	}
	require.NoError(t, s.Reply(rts[1], nil, errAPI))
	require.NoError(t, s.Reply(rts[0], "a1", nil))
	require.ErrorIs(t, s.Reply(rts[0], "again", nil), scheduler.ErrYieldNotPending)
	require.ErrorIs(t, s.Reply(scheduler.ReplyTo{}, "zero", nil), scheduler.ErrYieldNotPending)
	require.ErrorIs(t, s.Reply(scheduler.ReplyTo{PID: relayPID(99), Seq: rts[2].Seq}, "x", nil), scheduler.ErrProcessNotFound)
	require.ErrorIs(t, s.Reply(scheduler.ReplyTo{PID: probe.PID(), Seq: rts[2].Seq}, "x", nil), scheduler.ErrProcessNotFound)
	s.RunUntilIdle()
	res, err := s.Result(pid)
	require.NoError(t, err)
	require.Equal(t, "answered", res.Value())
	got := asker.got()
	require.Len(t, got, 2)
	require.Equal(t, scheduler.EventYieldComplete, got[0].Type)
	require.Equal(t, uint64(2), got[0].Tag)
	require.ErrorIs(t, got[0].Error, errAPI)
	require.True(t, got[0].From.IsZero(), "an answer from outside has no sender")
	require.Equal(t, uint64(1), got[1].Tag)
	require.Equal(t, "a1", got[1].Data)
	require.NoError(t, got[1].Error)
	require.True(t, got[1].From.IsZero())
	require.ErrorIs(t, s.Reply(rts[2], "late", nil), scheduler.ErrProcessNotFound, "the asker has ended")
	require.NoError(t, s.Shutdown())
	require.ErrorIs(t, s.Reply(rts[2], "late", nil), scheduler.ErrClosed)
	require.ErrorIs(t, s.Reply(scheduler.ReplyTo{}, "zero", nil), scheduler.ErrYieldNotPending, "as on the scheduler")
}

// TestTerminateAtStep checks that a process is terminated right after its
// nth step and not before: its context is not cancelled during step n, its
// next step gets the EventCancel with ErrTerminated, its context's cause is
// ErrTerminated, and Injected lists the fault. A process whose nth step
// ended it is left alone.
func TestTerminateAtStep(t *testing.T) {
	s := schedtest.New(t)
	var causes []error
	p := &recorder{}
	p.step = func(n int, evs []scheduler.Event, out *scheduler.StepOutput) {
		causes = append(causes, context.Cause(p.ctx))
		if n == 3 {
			out.Done(payload.Of("bye"))
		}
	}
	pid := s.Start(p, "run", nil)
	s.TerminateAtStep(pid, 2)
	quick := s.Start(stepper(func(_ int, _ []scheduler.Event, out *scheduler.StepOutput) error {
		out.Done(payload.Of("quick"))
		return nil
	}), "run", nil)
	s.TerminateAtStep(quick, 1)
	s.RunUntilIdle()
	require.Equal(t, 1, s.Steps(pid))
	require.NoError(t, s.Send(pid, "go"))
	s.RunUntilIdle()
	require.Equal(t, []error{nil, nil, scheduler.ErrTerminated}, causes)
	got := p.got()
	require.Len(t, got, 2)
	require.Equal(t, "go", got[0].Data)
	require.Equal(t, scheduler.EventCancel, got[1].Type)
	require.ErrorIs(t, got[1].Error, scheduler.ErrTerminated)
	res, err := s.Result(pid)
	require.NoError(t, err)
	require.Equal(t, "bye", res.Value())
	res, err = s.Result(quick)
	require.NoError(t, err)
	require.Equal(t, "quick", res.Value())
	require.Equal(t, []string{fmt.Sprintf("terminate %v after its step 2", pid)}, s.Injected())
}

// TestStepStepsOneProcess checks Sim.Step: it steps only the process named,
// once (even one that asked to continue), carries out that step's yields
// before it returns (with or without a seed), and reports whether it
// stepped: false for a process with nothing to do, one that ended, a PID
// never started, a probe, and after Shutdown.
func TestStepStepsOneProcess(t *testing.T) {
	for _, opts := range [][]schedtest.Option{nil, {schedtest.WithSeed(1)}, {schedtest.WithSeed(2)}} {
		s := schedtest.New(t, opts...)
		probe := s.Probe()
		a := &recorder{}
		a.step = func(n int, evs []scheduler.Event, out *scheduler.StepOutput) {
			if n == 2 {
				out.Done(payload.Of(len(evs)))
			}
		}
		aPID := s.Start(a, "run", nil)
		b := s.Start(stepper(func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
			if n <= 2 {
				out.Tell(probe.PID(), n)
				out.Tell(aPID, "hi")
			}
			if n == 1 {
				out.Continue()
			}
			for _, ev := range evs {
				if ev.Type == scheduler.EventCancel {
					out.Done(payload.Payload{})
				}
			}
			return nil
		}), "run", nil)
		require.True(t, s.Step(b))
		require.Equal(t, 1, s.Steps(b))
		require.Equal(t, 0, s.Steps(aPID), "only b stepped")
		require.Len(t, probe.Received(), 1, "b's Tell was carried out")
		require.True(t, s.Step(b), "b asked to continue")
		require.Equal(t, 2, s.Steps(b))
		require.False(t, s.Step(b), "b waits")
		require.True(t, s.Step(aPID))
		require.Empty(t, a.got(), "the first step gets no events")
		require.True(t, s.Step(aPID))
		require.Len(t, a.got(), 2, "both of b's messages")
		require.True(t, s.Ended(aPID))
		require.False(t, s.Step(aPID), "a has ended")
		require.False(t, s.Step(relayPID(99)))
		require.False(t, s.Step(probe.PID()))
		require.Len(t, probe.Received(), 2)
		require.NoError(t, s.Send(b, "wake"))
		require.NoError(t, s.Shutdown())
		require.False(t, s.Step(b), "after Shutdown")
	}
}

// TestTimeoutOfAnEarlierYield checks a Timeout written in a later step than
// its yield, on the kit's clock: the yield completes with ErrTimeout when
// the new deadline passes (not before), a later Timeout replaces an earlier
// deadline, one of zero completes at once without the clock moving, and a
// Timeout of a tag that is not pending does nothing.
func TestTimeoutOfAnEarlierYield(t *testing.T) {
	s := schedtest.New(t)
	s.Fake(cmdWork, schedtest.Never())
	var at []string
	p := &recorder{}
	p.step = func(n int, evs []scheduler.Event, out *scheduler.StepOutput) {
		for _, ev := range evs {
			at = append(at, fmt.Sprintf("+%v %d %v", s.Now().Sub(schedtest.Epoch), ev.Tag, ev.Error != nil && errors.Is(ev.Error, scheduler.ErrTimeout)))
		}
		switch n {
		case 1:
			out.Yield(1, cmdWork, nil)
			out.Timeout(1, time.Minute)
			out.Yield(2, cmdWork, nil)
			out.Yield(3, cmdWork, nil)
		case 2: // the message "go", at +0
			out.Timeout(1, time.Hour) // replaces its one-minute deadline
			out.Timeout(2, 10*time.Minute)
			out.Timeout(3, 0)
			out.Timeout(9, time.Second) // no such yield
		}
	}
	pid := s.Start(p, "run", nil)
	s.RunUntilIdle()
	require.NoError(t, s.Send(pid, "go"))
	s.RunUntilIdle()
	require.Equal(t, []string{"+0s 0 false", "+0s 3 true"}, at)
	s.Advance(9 * time.Minute)
	require.Len(t, at, 2, "nothing before ten minutes, the one-minute deadline is gone")
	moved := s.RunUntilIdleAdvancing()
	require.Equal(t, []string{"+0s 0 false", "+0s 3 true", "+10m0s 2 true", "+1h0m0s 1 true"}, at)
	require.Equal(t, 51*time.Minute, moved)
	require.Equal(t, 5, s.Steps(pid), "no step for the tag 9, and none without events")
}

// TestDelayCompletion checks the DelayCompletion fault: a completion a fake
// makes at once is held back until after the next timer fires (any
// process's), so a call with a deadline times out and its late answer is
// dropped, while another process's held answer arrives right after that
// timer (also one due at once, a Sleep of zero, with the clock still);
// with no timer set it arrives once nothing else is left to do.
// Each delay is listed by Injected. It holds with and without a seed.
func TestDelayCompletion(t *testing.T) {
	delay := schedtest.WithFaults(schedtest.Faults{DelayCompletion: 1})
	for _, opts := range [][]schedtest.Option{{delay}, {delay, schedtest.WithSeed(7)}} {
		s := schedtest.New(t, opts...)
		s.Fake(cmdWork, schedtest.Reply("late"))
		var at []string
		mk := func(name string, timer func(out *scheduler.StepOutput)) *recorder {
			return &recorder{step: func(n int, evs []scheduler.Event, out *scheduler.StepOutput) {
				for _, ev := range evs {
					at = append(at, fmt.Sprintf("%s +%v tag %d %v %v", name, s.Now().Sub(schedtest.Epoch), ev.Tag, ev.Data, errors.Is(ev.Error, scheduler.ErrTimeout)))
				}
				if n == 1 {
					out.Yield(1, cmdWork, nil)
					timer(out)
				}
			}}
		}
		s.Start(mk("deadline", func(out *scheduler.StepOutput) { out.Timeout(1, time.Minute) }), "run", nil)
		s.Start(mk("sleeper", func(out *scheduler.StepOutput) { out.Sleep(2, time.Hour) }), "run", nil)
		s.RunUntilIdle()
		require.Empty(t, at, "held back while a timer is set")
		s.Advance(time.Minute)
		require.ElementsMatch(t, []string{"deadline +1m0s tag 1 <nil> true", "sleeper +1m0s tag 1 late false"}, at)
		s.RunUntilIdleAdvancing()
		require.Len(t, at, 3)
		require.Equal(t, "sleeper +1h0m0s tag 2 <nil> false", at[2])
		require.Len(t, s.Injected(), 2)
		for _, f := range s.Injected() {
			require.Contains(t, f, "delay the completion of")
		}

		s = schedtest.New(t, opts...)
		s.Fake(cmdWork, schedtest.Reply("late"))
		at = nil
		s.Start(mk("plain", func(*scheduler.StepOutput) {}), "run", nil)
		s.RunUntilIdle()
		require.Equal(t, []string{"plain +0s tag 1 late false"}, at, "no timer: delivered once nothing else is left")
		require.Len(t, s.Injected(), 1)

		s = schedtest.New(t, opts...)
		s.Fake(cmdWork, schedtest.Reply("late"))
		at = nil
		s.Start(mk("zero", func(out *scheduler.StepOutput) { out.Sleep(2, 0); out.Sleep(3, time.Hour) }), "run", nil)
		s.RunUntilIdle()
		require.Equal(t, []string{"zero +0s tag 2 <nil> false", "zero +0s tag 1 late false"}, at, "a timer due at once releases it, the clock still")
	}
}

// TestDelayCompletionOnlyInTheFake checks that a DelayCompletion fault
// holds back only what a fake completes while it runs: a Call it kept
// (as FakeLater keeps them) and completed later, by Call.Complete as by
// its Token, is delivered at once, as a late completion is, with no
// fault drawn or listed.
func TestDelayCompletionOnlyInTheFake(t *testing.T) {
	delay := schedtest.WithFaults(schedtest.Faults{DelayCompletion: 1})
	for _, opts := range [][]schedtest.Option{{delay}, {delay, schedtest.WithSeed(7)}} {
		s := schedtest.New(t, opts...)
		held := s.FakeLater(cmdWork)
		var got []string
		s.Start(&recorder{step: func(n int, evs []scheduler.Event, out *scheduler.StepOutput) {
			for _, ev := range evs {
				got = append(got, fmt.Sprintf("tag %d %v at +%v", ev.Tag, ev.Data, s.Now().Sub(schedtest.Epoch)))
			}
			if n == 1 {
				out.Yield(1, cmdWork, nil)
				out.Yield(2, cmdWork, nil)
				out.Sleep(3, time.Hour) // a timer the fault would wait for
			}
		}}, "run", nil)
		s.RunUntilIdle()
		require.NoError(t, held.Next().Complete("by the call", nil))
		require.NoError(t, held.Next().Token().Complete("by the token", nil))
		s.RunUntilIdle()
		require.Equal(t, []string{"tag 1 by the call at +0s", "tag 2 by the token at +0s"}, got)
		require.Empty(t, s.Injected())
	}
}

// TestReplayReproducesTheSeedExploreReports checks that the seed Explore
// reports, with the Replay call it suggests, makes Replay fail the same
// way, reporting straight to the test it is given; that Replay at a seed
// where the scenario passes reports nothing; and that Replay gives the
// scenario a Sim with that seed, the options given, and the test itself.
func TestReplayReproducesTheSeedExploreReports(t *testing.T) {
	tb := &failingTB{TB: t}
	schedtest.Explore(tb, 100, gatherScenario(false))
	require.Len(t, tb.errs, 1)
	var seed uint64
	_, err := fmt.Sscanf(tb.errs[0][strings.Index(tb.errs[0], "fails at seed "):], "fails at seed %d:", &seed)
	require.NoError(t, err, tb.errs[0])
	require.Contains(t, tb.errs[0], fmt.Sprintf("schedtest.Replay(t, %d, scenario)", seed))

	r := runTB(t, func(tb *recTB) { schedtest.Replay(tb, seed, gatherScenario(false)) })
	require.True(t, r.Failed(), "seed %d did not fail again", seed)
	require.Equal(t, "gather = b,a, want a,b", r.text())

	pass := uint64(1)
	for ; pass < 100; pass++ {
		if _, failed := schedtest.Check(t, pass, gatherScenario(false)); !failed {
			break
		}
	}
	r = runTB(t, func(tb *recTB) { schedtest.Replay(tb, pass, gatherScenario(false)) })
	require.False(t, r.Failed(), "seed %d: %s", pass, r.text())

	var seen uint64
	var sameTB bool
	r = runTB(t, func(tb *recTB) {
		schedtest.Replay(tb, 42, func(s *schedtest.Sim) {
			seen, sameTB = s.Seed(), s.T() == testing.TB(tb)
			s.Fake(cmdWork, schedtest.Reply("ok"))
			p := &recorder{step: func(n int, _ []scheduler.Event, out *scheduler.StepOutput) {
				if n == 1 {
					out.Yield(1, cmdWork, nil)
				}
			}}
			s.Start(p, "run", nil)
			s.RunUntilIdle()
			if got := p.got(); len(got) != 1 || !errors.Is(got[0].Error, schedtest.ErrInjected) {
				s.T().Errorf("the command did not fail with an injected fault: %v", got)
			}
		}, schedtest.WithFaults(schedtest.Faults{FailYield: 1}))
	})
	require.False(t, r.Failed(), r.text())
	require.Equal(t, uint64(42), seen)
	require.True(t, sameTB, "Replay reports to the test it is given")
}

// TestSeedRunReportsThroughT checks the testing.TB a seed's run reports to
// (Sim.T under Check, Sweep and Explore): Log and Error lines make up the
// failure's output in order; Error fails the run and lets it go on
// (Failed then says so); Fatal, Fatalf and FailNow end the run at once; a
// run that only logs does not fail.
func TestSeedRunReportsThroughT(t *testing.T) {
	var reached []string
	f, failed := schedtest.Check(t, 1, func(s *schedtest.Sim) {
		tb := s.T()
		tb.Helper()
		reached = append(reached, fmt.Sprint("at first, failed: ", tb.Failed()))
		tb.Log("one", 2)
		tb.Error("bad", 3)
		reached = append(reached, fmt.Sprint("after Error, failed: ", tb.Failed()))
		tb.Fatal("fatal", 4)
		reached = append(reached, "after Fatal")
	})
	require.True(t, failed)
	require.Equal(t, []string{"at first, failed: false", "after Error, failed: true"}, reached)
	require.True(t, strings.HasPrefix(f.Output, "  one 2\n  bad 3\n  fatal 4\n"), f.Output)

	for name, end := range map[string]func(testing.TB){
		"Fatalf":  func(tb testing.TB) { tb.Fatalf("fatalf %d", 5) },
		"FailNow": func(tb testing.TB) { tb.FailNow() },
	} {
		reached = nil
		f, failed = schedtest.Check(t, 1, func(s *schedtest.Sim) {
			end(s.T())
			reached = append(reached, "after "+name)
		})
		require.True(t, failed, name)
		require.Empty(t, reached, name)
		if name == "Fatalf" {
			require.True(t, strings.HasPrefix(f.Output, "  fatalf 5\n"), f.Output)
		}
	}

	_, failed = schedtest.Check(t, 1, func(s *schedtest.Sim) { s.T().Log("only a log") })
	require.False(t, failed)
}

// TestRunMethodsFromAStepFailTheTest checks that calling a method that
// drives the simulation from a step, a fake, an Init or a Close fails the
// test, as the doc says, and ends the call there, instead of running the
// simulation inside itself (a Shutdown from the Init of a process Start
// starts would leave that process never closed) or crashing the test
// binary.
func TestRunMethodsFromAStepFailTheTest(t *testing.T) {
	calls := map[string]func(s *schedtest.Sim){
		"Step":                  func(s *schedtest.Sim) { s.Step(relayPID(1)) },
		"RunUntilIdle":          func(s *schedtest.Sim) { s.RunUntilIdle() },
		"RunUntil":              func(s *schedtest.Sim) { s.RunUntil(func() bool { return false }) },
		"Advance":               func(s *schedtest.Sim) { s.Advance(time.Second) },
		"RunUntilIdleAdvancing": func(s *schedtest.Sim) { s.RunUntilIdleAdvancing() },
		"Shutdown":              func(s *schedtest.Sim) { _ = s.Shutdown() },
	}
	for name, call := range calls {
		for _, where := range []string{"step", "fake", "Init", "Close"} {
			var after bool
			r := runTB(t, func(tb *recTB) {
				s := schedtest.New(tb)
				switch where {
				case "Init":
					s.Start(&lifecycle{init: func() error { call(s); after = true; return nil }}, "run", nil)
					return
				case "Close": // of a failed Init: it runs where Init ran
					_, _ = s.Submit(&lifecycle{
						init:  func() error { return errors.New("no") },
						close: func() { call(s); after = true },
					}, "run", nil)
					return
				}
				s.Fake(cmdWork, func(schedtest.Call) error {
					call(s)
					after = true
					return nil
				})
				s.Start(stepper(func(int, []scheduler.Event, *scheduler.StepOutput) error {
					if where == "step" {
						call(s)
						after = true
					}
					return nil
				}), "run", nil)
				s.Start(stepper(func(n int, _ []scheduler.Event, out *scheduler.StepOutput) error {
					if n == 1 && where == "fake" {
						out.Yield(1, cmdWork, nil)
					}
					return nil
				}), "run", nil)
				s.RunUntilIdle()
			})
			require.True(t, r.Failed(), "%s from a %s", name, where)
			require.Contains(t, r.text(), "schedtest: "+name+" called while the simulation runs", "%s from a %s", name, where)
			require.False(t, after, "%s from a %s returned", name, where)
		}
	}
}

// lifecycle is a process whose Init and Close run the functions given
// (when not nil), and whose steps do nothing.
type lifecycle struct {
	init  func() error
	close func()
}

func (p *lifecycle) Init(context.Context, string, payload.Payloads) error {
	if p.init != nil {
		return p.init()
	}
	return nil
}
func (p *lifecycle) Step([]scheduler.Event, *scheduler.StepOutput) error { return nil }
func (p *lifecycle) Close() {
	if p.close != nil {
		p.close()
	}
}

// TestNoStepWithoutEvents checks that a process is stepped only when
// events arrived for it, or it asked to continue, as on the scheduler:
// events that arrive while its own step's yields are carried out (a
// message to itself, a fake's answer at once) come in one more step, and
// no step with an empty batch follows.
func TestNoStepWithoutEvents(t *testing.T) {
	for _, opts := range [][]schedtest.Option{nil, {schedtest.WithSeed(1)}, {schedtest.WithSeed(2)}, {schedtest.WithStepBudget(1)}} {
		s := schedtest.New(t, opts...)
		s.Fake(cmdWork, schedtest.Reply("at once"))
		var batches []int
		pid := s.Start(stepper(func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
			batches = append(batches, len(evs))
			switch n {
			case 1:
				out.Tell(out.Self(), "self")
				out.Yield(1, cmdWork, nil)
			case 2:
				out.Continue()
			}
			return nil
		}), "run", nil)
		s.RunUntilIdle()
		require.Equal(t, []int{0, 2, 0}, batches, "the first step, the two events, the step asked for by Continue")
		require.Equal(t, 3, s.Steps(pid))
	}
}

// TestAdvancingSkipsReleasedTimers checks that the deadline of a yield
// that completed first, the timer of a cancelled Sleep, and a deadline
// replaced by an earlier one are released: RunUntilIdleAdvancing does not
// move the clock to them, and neither does Shutdown.
func TestAdvancingSkipsReleasedTimers(t *testing.T) {
	s := schedtest.New(t)
	s.Fake(cmdWork, schedtest.Reply("fast"))
	pid := s.Start(stepper(func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
		switch n {
		case 1:
			out.Yield(1, cmdWork, nil)
			out.Timeout(1, time.Hour)
			out.Sleep(2, 2*time.Hour)
			out.Cancel(2)
		case 2:
			out.Done(payload.Of(evs[0].Data))
		}
		return nil
	}), "run", nil)
	require.Equal(t, time.Duration(0), s.RunUntilIdleAdvancing())
	res, err := s.Result(pid)
	require.NoError(t, err)
	require.Equal(t, "fast", res.Value())
	require.Equal(t, schedtest.Epoch, s.Now())
	require.NoError(t, s.Shutdown())
	require.Equal(t, schedtest.Epoch, s.Now(), "nothing was left to wait for")

	// A deadline replaced by an earlier one is released too.
	s = schedtest.New(t)
	s.Fake(cmdWork, schedtest.Never())
	pid = s.Start(stepper(func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
		switch n {
		case 1:
			out.Yield(1, cmdWork, nil)
			out.Timeout(1, time.Hour)
			out.Tell(out.Self(), "shorten")
		case 2:
			out.Timeout(1, time.Minute)
		case 3:
			out.Done(payload.Of(errors.Is(evs[0].Error, scheduler.ErrTimeout)))
		}
		return nil
	}), "run", nil)
	require.Equal(t, time.Minute, s.RunUntilIdleAdvancing())
	res, err = s.Result(pid)
	require.NoError(t, err)
	require.Equal(t, true, res.Value())
}

// TestTheClockEnds: the virtual clock, as the scheduler's, ends instead
// of wrapping. Advance by a duration too long for it takes it to its end
// and no further, and a Sleep or a deadline too far for it (at its end)
// never fires however far the clock is advanced, as on the scheduler,
// whose clock never gets there; nor does the simulation wait for it.
func TestTheClockEnds(t *testing.T) {
	s := schedtest.New(t)
	s.Fake(cmdWork, schedtest.Never())
	pid := s.Start(stepper(func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
		switch n {
		case 1:
			out.Yield(1, cmdWork, nil)
			out.Timeout(1, math.MaxInt64)
			out.Sleep(2, math.MaxInt64)
		default:
			if evs[0].Type != scheduler.EventCancel { // a completion
				out.Done(payload.Of(len(evs)))
			}
		}
		return nil
	}), "run", nil)
	require.Equal(t, time.Duration(0), s.RunUntilIdleAdvancing(), "nothing to wait for")
	s.Advance(time.Hour)
	before := s.Now()
	s.Advance(math.MaxInt64)
	end := s.Now()
	require.True(t, end.After(before), "Advance(math.MaxInt64) moved the clock from %v to %v", before, end)
	s.Advance(math.MaxInt64)
	require.Equal(t, end, s.Now(), "the clock went past its end")
	require.Equal(t, time.Duration(0), s.RunUntilIdleAdvancing())
	require.False(t, s.Ended(pid), "a timer at the end of the clock fired")
	require.ErrorIs(t, s.Shutdown(), scheduler.ErrForced, "the process waits for ever: forced")
	require.Equal(t, end, s.Now(), "Shutdown's deadline past the end of the clock")
}

// TestWithMaxSteps checks that a process that never stops fails the test
// once the simulation has taken the maximum number of steps, with or
// without a seed and whatever the step budget, and that no step is taken
// past it; the shutdown at the end of the test forces the process. A
// maximum of zero lets no step run.
func TestWithMaxSteps(t *testing.T) {
	for _, c := range []struct {
		max  int
		opts []schedtest.Option
	}{
		{5, nil}, {5, []schedtest.Option{schedtest.WithSeed(3)}}, {40, []schedtest.Option{schedtest.WithStepBudget(16)}}, {0, nil},
	} {
		var s *schedtest.Sim
		var pid relay.PID
		r := runTB(t, func(tb *recTB) {
			s = schedtest.New(tb, append(c.opts, schedtest.WithMaxSteps(c.max))...)
			pid = s.Start(stepper(func(_ int, _ []scheduler.Event, out *scheduler.StepOutput) error {
				out.Continue()
				return nil
			}), "run", nil)
			s.RunUntilIdle()
			tb.Log("RunUntilIdle returned")
		})
		require.True(t, r.Failed(), "max %d", c.max)
		require.Equal(t, fmt.Sprintf("schedtest: more than %d steps (see WithMaxSteps): does a process never stop?", c.max), r.text())
		require.Equal(t, c.max, s.Steps(pid), "max %d", c.max)
		_, err := s.Result(pid)
		require.ErrorIs(t, err, scheduler.ErrForced)
	}
}

// TestWithMaxStepsAllowsExactlyN checks the other side of WithMaxSteps:
// a run that takes exactly n steps and is then idle passes, and the
// yields of the nth step are still carried out (the bound is on steps,
// not on what a step wrote); only the run, or the Sim.Step, that would
// take step n+1 fails the test, without taking it.
func TestWithMaxStepsAllowsExactlyN(t *testing.T) {
	for i, opts := range [][]schedtest.Option{nil, {schedtest.WithSeed(1)}, {schedtest.WithSeed(2)}, nil} {
		step := i == 3 // the third step asked of Sim.Step
		var s *schedtest.Sim
		var pid relay.PID
		var probe *schedtest.Probe
		idleReturned := false
		r := runTB(t, func(tb *recTB) {
			s = schedtest.New(tb, append(opts, schedtest.WithMaxSteps(2))...)
			probe = s.Probe()
			pid = s.Start(stepper(func(n int, _ []scheduler.Event, out *scheduler.StepOutput) error {
				if n == 1 {
					out.Continue()
				}
				out.Tell(probe.PID(), n)
				return nil
			}), "run", nil)
			s.RunUntilIdle()
			s.Advance(time.Hour)
			idleReturned = !tb.Failed()
			require.NoError(t, s.Send(pid, "one more"))
			if step {
				s.Step(pid)
			} else {
				s.RunUntilIdle()
			}
		})
		require.True(t, idleReturned, "two steps under WithMaxSteps(2): %s", r.text())
		require.True(t, r.Failed(), "a third step (case %d)", i)
		require.Equal(t, "schedtest: more than 2 steps (see WithMaxSteps): does a process never stop?", r.text())
		require.Equal(t, 2, s.Steps(pid))
		var got []any
		for _, ev := range probe.Received() {
			got = append(got, ev.Data)
		}
		require.Equal(t, []any{1, 2}, got, "the second step's Tell was carried out")
	}
}

// TestWithShutdownDeadline checks that Shutdown gives the processes the
// deadline in virtual time: one that finishes within it ends with its own
// result, one that would take longer is forced at the deadline (the clock
// stops there), and the error wraps ErrForced and counts it. The default
// is DefaultShutdownDeadline; a deadline of zero or less forces at once,
// without moving the clock, whatever does not end right away, as a
// scheduler's Shutdown with a context already done does.
func TestWithShutdownDeadline(t *testing.T) {
	sleepOnCancel := func(d time.Duration) scheduler.Process {
		return stepper(func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
			for _, ev := range evs {
				switch ev.Type {
				case scheduler.EventCancel:
					out.Sleep(1, d)
				case scheduler.EventYieldComplete:
					out.Done(payload.Of(d.String()))
				}
			}
			return nil
		})
	}
	for _, c := range []struct {
		opts   []schedtest.Option
		ended  []bool // of the processes that take 1s, 1m and 1h to finish
		forced int
		clock  time.Duration
	}{
		{[]schedtest.Option{schedtest.WithShutdownDeadline(2 * time.Minute)}, []bool{true, true, false}, 1, 2 * time.Minute},
		{nil, []bool{true, false, false}, 2, schedtest.DefaultShutdownDeadline},
		{[]schedtest.Option{schedtest.WithShutdownDeadline(0)}, []bool{false, false, false}, 3, 0},
		{[]schedtest.Option{schedtest.WithShutdownDeadline(-time.Hour)}, []bool{false, false, false}, 3, 0},
	} {
		s := schedtest.New(t, c.opts...)
		name := fmt.Sprintf("deadline %v, %d options", c.clock, len(c.opts))
		var pids []relay.PID
		for _, d := range []time.Duration{time.Second, time.Minute, time.Hour} {
			pids = append(pids, s.Start(sleepOnCancel(d), "run", nil))
		}
		s.RunUntilIdle()
		err := s.Shutdown()
		require.ErrorIs(t, err, scheduler.ErrForced, name)
		require.Contains(t, err.Error(), fmt.Sprintf(": %d processes", c.forced), name)
		require.Equal(t, schedtest.Epoch.Add(c.clock), s.Now(), name)
		for i, pid := range pids {
			_, err := s.Result(pid)
			if c.ended[i] {
				require.NoError(t, err, "process %d, %s", i, name)
			} else {
				require.ErrorIs(t, err, scheduler.ErrForced, "process %d, %s", i, name)
			}
		}
	}
}

// TestACompletionHeldBackIsTheOnlyOne checks exactly-once completion under
// the DelayCompletion fault: once a completion is accepted and held back,
// any other completion of the same yield (at once in the fake, or later
// through the Token) is refused with ErrYieldNotPending and injects
// nothing, and the process gets the first answer.
func TestACompletionHeldBackIsTheOnlyOne(t *testing.T) {
	s := schedtest.New(t, schedtest.WithFaults(schedtest.Faults{DelayCompletion: 1}))
	var errs []error
	var tok schedtest.Token
	s.Fake(cmdWork, func(c schedtest.Call) error {
		errs = append(errs, c.Complete("first", nil), c.Complete("second", nil), c.Token().Complete("third", nil))
		tok = c.Token()
		return nil
	})
	p := &recorder{step: func(n int, _ []scheduler.Event, out *scheduler.StepOutput) {
		if n == 1 {
			out.Yield(1, cmdWork, nil)
		}
	}}
	s.Start(p, "run", nil)
	s.RunUntil(func() bool { return len(errs) == 3 })
	require.ErrorIs(t, tok.Complete("fourth", nil), scheduler.ErrYieldNotPending)
	s.RunUntilIdle()
	require.NoError(t, errs[0])
	require.ErrorIs(t, errs[1], scheduler.ErrYieldNotPending)
	require.ErrorIs(t, errs[2], scheduler.ErrYieldNotPending)
	got := p.got()
	require.Len(t, got, 1)
	require.Equal(t, "first", got[0].Data)
	require.Len(t, s.Injected(), 1, "one delay: %v", s.Injected())
}

// TestAHandlerErrorAfterAHeldBackCompletion: a fake that completes its
// call and then returns an error leaves the completion in place, as a
// handler on the scheduler does, also when the DelayCompletion fault
// holds the completion back: the process gets the fake's answer, and the
// error is ignored.
func TestAHandlerErrorAfterAHeldBackCompletion(t *testing.T) {
	for _, delay := range []float64{0, 1} {
		s := schedtest.New(t, schedtest.WithFaults(schedtest.Faults{DelayCompletion: delay}))
		s.Fake(cmdWork, func(c schedtest.Call) error {
			require.NoError(t, c.Complete("answer", nil))
			return errBoom
		})
		p := &recorder{step: func(n int, _ []scheduler.Event, out *scheduler.StepOutput) {
			if n == 1 {
				out.Yield(1, cmdWork, nil)
			}
		}}
		s.Start(p, "run", nil)
		s.RunUntilIdle()
		got := p.got()
		require.Len(t, got, 1, "delay %v", delay)
		require.NoError(t, got[0].Error, "delay %v: the fake's error after its completion", delay)
		require.Equal(t, "answer", got[0].Data, "delay %v", delay)
	}
}

// TestTerminateAtStepRefusesWhatCannotHappen checks that TerminateAtStep
// fails the test when the termination could never happen: n less than 1,
// a step the process has taken already, or a PID that is no process of
// the simulation. A process that has ended is left alone without a
// failure, as the doc says.
func TestTerminateAtStepRefusesWhatCannotHappen(t *testing.T) {
	var s *schedtest.Sim
	var live, ended relay.PID
	setup := func(tb *recTB) {
		s = schedtest.New(tb)
		live = s.Start(idle(), "run", nil)
		ended = s.Start(stepper(func(_ int, _ []scheduler.Event, out *scheduler.StepOutput) error {
			out.Done(payload.Payload{})
			return nil
		}), "run", nil)
		s.RunUntilIdle()
	}
	for _, c := range []struct {
		call func()
		want string
	}{
		{func() { s.TerminateAtStep(live, 0) }, "n is 0"},
		{func() { s.TerminateAtStep(live, -1) }, "n is -1"},
		{func() { s.TerminateAtStep(live, 1) }, "has taken 1 steps already"},
		{func() { s.TerminateAtStep(relayPID(99), 2) }, "no process of the simulation"},
		{func() { s.TerminateAtStep(s.Probe().PID(), 2) }, "no process of the simulation"},
	} {
		r := runTB(t, func(tb *recTB) { setup(tb); c.call() })
		require.True(t, r.Failed(), c.want)
		require.Contains(t, r.text(), c.want)
	}
	r := runTB(t, func(tb *recTB) {
		setup(tb)
		s.TerminateAtStep(ended, 1) // its step 1 ended it: nothing to do, no failure
		s.TerminateAtStep(live, 2)
		require.NoError(tb, s.Send(live, "go"))
		s.RunUntilIdle()
	})
	require.False(t, r.Failed(), r.text())
	require.Equal(t, []string{fmt.Sprintf("terminate %v after its step 2", live)}, s.Injected())
}

// TestTerminateFaultsListOnlyWhatTheyDid checks that a termination the
// kit injects (TerminateAtStep, Faults.Terminate) is listed by Injected
// only where it asked a process to stop: a process asked already (by
// Terminate, by an earlier injected termination, by Shutdown) gets no
// second cancel, and no fault is listed for it.
func TestTerminateFaultsListOnlyWhatTheyDid(t *testing.T) {
	// cancels counts a process's cancels; it ends on the message "end".
	cancels := func(n *int) scheduler.Process {
		return stepper(func(_ int, evs []scheduler.Event, out *scheduler.StepOutput) error {
			for _, ev := range evs {
				switch {
				case ev.Type == scheduler.EventCancel:
					*n++
				case ev.Data == "end":
					out.Done(payload.Payload{})
				}
			}
			return nil
		})
	}

	s := schedtest.New(t)
	var nAt, nLive int
	at := s.Start(cancels(&nAt), "run", nil)
	live := s.Start(cancels(&nLive), "run", nil)
	s.RunUntilIdle()
	s.TerminateAtStep(at, 2)
	s.TerminateAtStep(live, 2)
	require.NoError(t, s.Terminate(at)) // its step 2 brings this cancel
	require.NoError(t, s.Send(live, "go"))
	s.RunUntilIdle()
	require.Equal(t, 2, s.Steps(at))
	require.Equal(t, 3, s.Steps(live), "step 2 for the message, step 3 for the injected cancel")
	require.Equal(t, []int{1, 1}, []int{nAt, nLive})
	require.Equal(t, []string{fmt.Sprintf("terminate %v after its step 2", live)}, s.Injected(),
		"the process terminated before its step 2 is not listed")

	// Terminate at every step: the process, cancelled after its first,
	// steps again for the cancel without ending, and is not cancelled
	// twice.
	s = schedtest.New(t, schedtest.WithSeed(1), schedtest.WithFaults(schedtest.Faults{Terminate: 1}))
	var n int
	pid := s.Start(cancels(&n), "run", nil)
	s.RunUntilIdle()
	require.NoError(t, s.Send(pid, "more"))
	s.RunUntilIdle()
	require.Equal(t, 3, s.Steps(pid))
	require.Equal(t, 1, n)
	require.Equal(t, []string{fmt.Sprintf("terminate %v after its step 1", pid)}, s.Injected())

	// After Shutdown's cancel: nothing to inject.
	s = schedtest.New(t, schedtest.WithSeed(1), schedtest.WithFaults(schedtest.Faults{Terminate: 1}))
	n = 0
	pid = s.Start(cancels(&n), "run", nil)
	require.ErrorIs(t, s.Shutdown(), scheduler.ErrForced, "it never ends by itself")
	require.Equal(t, 1, n)
	require.Equal(t, 2, s.Steps(pid), "a first step without events, then the cancel")
	require.Empty(t, s.Injected())
}

// TestExploreReplayHintKeepsTheOptions checks that the Replay call Explore
// suggests passes on the options the scenario was explored with: without
// them (here, the fault that makes it fail) the seed would not fail again.
func TestExploreReplayHintKeepsTheOptions(t *testing.T) {
	scenario := func(s *schedtest.Sim) {
		s.Fake(cmdWork, schedtest.Reply("ok"))
		p := &recorder{step: func(n int, _ []scheduler.Event, out *scheduler.StepOutput) {
			if n == 1 {
				out.Yield(1, cmdWork, nil)
			}
		}}
		s.Start(p, "run", nil)
		s.RunUntilIdle()
		if got := p.got(); len(got) != 1 || got[0].Error != nil {
			s.T().Errorf("the command failed: %v", got)
		}
	}
	fail := schedtest.WithFaults(schedtest.Faults{FailYield: 1})
	tb := &failingTB{TB: t}
	schedtest.Explore(tb, 5, scenario, fail)
	require.Len(t, tb.errs, 1)
	require.Contains(t, tb.errs[0], "schedtest.Replay(t, 1, scenario, opts...) with the options given to Explore")
	tb = &failingTB{TB: t}
	schedtest.Explore(tb, 5, gatherScenario(false))
	require.Len(t, tb.errs, 1)
	require.Regexp(t, `schedtest\.Replay\(t, \d+, scenario\)$`, tb.errs[0], "no options, none to pass")

	r := runTB(t, func(tb *recTB) { schedtest.Replay(tb, 1, scenario) })
	require.False(t, r.Failed(), "without the options the seed passes")
	r = runTB(t, func(tb *recTB) { schedtest.Replay(tb, 1, scenario, fail) })
	require.True(t, r.Failed(), "with them it fails again")
}

// TestSleepKeepsItsOwnTimeUnderALaterDeadline checks, as for the
// scheduler, that a Sleep given a deadline before its own time, and then
// in a later step one after it, completes at its own time without error:
// the replaced deadline no longer counts, and the Sleep's own time was
// never given up. The first deadline is given in the Sleep's step, or in
// a step of its own.
func TestSleepKeepsItsOwnTimeUnderALaterDeadline(t *testing.T) {
	for _, sameStep := range []bool{true, false} {
		s := schedtest.New(t)
		var at []string
		p := &recorder{}
		p.step = func(n int, evs []scheduler.Event, out *scheduler.StepOutput) {
			for _, ev := range evs {
				if ev.Type == scheduler.EventYieldComplete {
					at = append(at, fmt.Sprintf("+%v tag %d error %v", s.Now().Sub(schedtest.Epoch), ev.Tag, ev.Error))
				}
			}
			switch n {
			case 1:
				out.Sleep(1, 10*time.Minute)
				if sameStep {
					out.Timeout(1, time.Minute)
				}
				out.Continue()
			case 2:
				if sameStep {
					out.Timeout(1, time.Hour)
				} else {
					out.Timeout(1, time.Minute)
					out.Continue()
				}
			case 3:
				if !sameStep {
					out.Timeout(1, time.Hour)
				}
			}
		}
		pid := s.Start(p, "run", nil)
		moved := s.RunUntilIdleAdvancing()
		require.Equal(t, []string{"+10m0s tag 1 error <nil>"}, at, "first deadline in the Sleep's step: %v", sameStep)
		require.Equal(t, 10*time.Minute, moved, "no clock stop at a deadline that was replaced")
		require.Equal(t, map[bool]int{true: 3, false: 4}[sameStep], s.Steps(pid), "a step for each deadline and one for the completion")
	}
}
