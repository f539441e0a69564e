package scheduler_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// The rules of a process's life and end: each test is named after the rule
// it proves.

// TestCompletionReachesOnlyItsOwnYield: a completion made for one yield
// never completes a later yield that reuses its tag, through either a
// Completion or the Call it came from.
func TestCompletionReachesOnlyItsOwnYield(t *testing.T) {
	for _, via := range []string{"Completion", "Call"} {
		t.Run(via, func(t *testing.T) {
			calls := make(chan sched.Call, 2)
			s := newScheduler(t, sched.WithHandler(cmdTest, func(c sched.Call) error {
				calls <- c
				return nil
			}))
			complete := func(c sched.Call, data any) error {
				if via == "Call" {
					return c.Complete(data, nil)
				}
				return c.Completion().Complete(data, nil)
			}
			p := &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
				switch n {
				case 0, 1: // the first step, then the first completion: yield tag 1 (again)
					out.Yield(1, cmdTest, nil)
				default:
					out.Done(payload.Of(evs[0].Data))
				}
				return nil
			}}
			h := submit(t, s, p)
			first := receive(t, calls, "the first call")
			require.NoError(t, complete(first, "first"))
			second := receive(t, calls, "the second call, with the same tag")
			require.Equal(t, first.Tag, second.Tag)

			err := complete(first, "stale")
			require.ErrorIs(t, err, sched.ErrYieldNotPending, "the first yield's completion, used again")
			require.NoError(t, complete(second, "second"), "the second yield's own completion")

			res, err := waitEnd(t, s, h)
			require.NoError(t, err)
			assert.Equal(t, "second", res.Value())
			evs := p.EventsOf(sched.EventYieldComplete)
			require.Len(t, evs, 2, "one event per yield")
			assert.Equal(t, "first", evs[0].Data)
			assert.Equal(t, "second", evs[1].Data)
		})
	}
}

// TestShutdownOnOwnGoroutineStartsItAndReturns: Shutdown called from a
// Step, a handler, Close or the End hook cannot wait for the stop (its
// caller is part of what must stop): it begins the shutdown and returns
// ErrShutdownStarted at once, and the shutdown completes.
func TestShutdownOnOwnGoroutineStartsItAndReturns(t *testing.T) {
	// shutdownFrom returns a function that calls Shutdown once, sending
	// its result on got.
	type from struct {
		name string
		// setup builds the scheduler and submits a process whose code
		// calls shut; the test then waits for shut's result.
		setup func(t *testing.T, shut func()) *sched.Scheduler
	}
	cases := []from{
		{"Step", func(t *testing.T, shut func()) *sched.Scheduler {
			s := newScheduler(t)
			submit(t, s, &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
				if n == 0 {
					shut()
				}
				if hasCancel(evs) {
					out.Done(payload.Payload{})
				}
				return nil
			}})
			return s
		}},
		{"handler", func(t *testing.T, shut func()) *sched.Scheduler {
			s := newScheduler(t, sched.WithHandler(cmdTest, func(c sched.Call) error {
				shut()
				return c.Complete(nil, nil)
			}))
			submit(t, s, &probe{step: yieldOnce(1, func(out *sched.StepOutput) { out.Yield(1, cmdTest, nil) })})
			return s
		}},
		{"Close", func(t *testing.T, shut func()) *sched.Scheduler {
			s := newScheduler(t)
			submit(t, s, &probe{step: doneWith(1), close: shut})
			return s
		}},
		{"End hook", func(t *testing.T, shut func()) *sched.Scheduler {
			s := newScheduler(t, sched.WithHooks(sched.Hooks{End: func(sched.EndInfo) { shut() }}))
			submit(t, s, &probe{step: doneWith(1)})
			return s
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := make(chan error, 1)
			var sp *sched.Scheduler
			ready := make(chan struct{})
			shut := func() {
				<-ready
				select {
				case got <- sp.Shutdown(context.Background()):
				default: // called again (a later process): once is enough
				}
			}
			sp = tc.setup(t, shut)
			close(ready)
			err := receive(t, got, "the inner Shutdown's return")
			require.ErrorIs(t, err, sched.ErrShutdownStarted)
			// The shutdown completes: an outside Shutdown waits for it
			// and reports that everything ended on its own.
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			require.NoError(t, sp.Shutdown(ctx))
			assert.Zero(t, sp.Stats().Processes.Live)
			assert.ErrorIs(t, sp.Tell(relay.PID{ID: 1}, 1), sched.ErrClosed)
		})
	}
}

// TestConcurrentShutdownWaitsForTheStop: a second Shutdown made while the
// first waits for a cleanup yield returns only once the scheduler has
// stopped: cleanups ran and later calls are refused.
func TestConcurrentShutdownWaitsForTheStop(t *testing.T) {
	calls := make(chan sched.Call, 1)
	s := newScheduler(t, sched.WithHandler(cmdTest, func(c sched.Call) error {
		calls <- c
		return nil
	}))
	p := &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
		if hasCancel(evs) {
			out.Yield(1, cmdTest, nil) // cleanup
		}
		if _, ok := completionOf(evs, 1); ok {
			out.Done(payload.Payload{})
		}
		return nil
	}}
	h := submit(t, s, p)
	waitState(t, s, h.PID(), sched.StateIdle)

	type seen struct {
		err    error
		closes int
		tell   error
	}
	results := make(chan seen, 2)
	shut := func() {
		err := s.Shutdown(context.Background())
		results <- seen{err, p.Closes(), s.Tell(h.PID(), 1)}
	}
	go shut()
	cleanup := receive(t, calls, "the cleanup call")
	go shut() // the second, concurrent Shutdown
	require.NoError(t, cleanup.Complete(nil, nil))
	for range 2 {
		r := receive(t, results, "a Shutdown's return")
		require.NoError(t, r.err)
		assert.Equal(t, 1, r.closes, "Close had run when Shutdown returned")
		assert.ErrorIs(t, r.tell, sched.ErrClosed, "Tell after Shutdown returned")
	}
	requireLifecycle(t, p)
}

// TestEveryShutdownSaysHowItEnded: when a deadline forces processes, the
// call whose deadline passed says so, a call without a deadline returns
// the same ErrForced once the scheduler stopped, and so does a later
// call.
func TestEveryShutdownSaysHowItEnded(t *testing.T) {
	s := newScheduler(t)
	p := &probe{step: ignoreAll}
	h := submit(t, s, p)
	waitState(t, s, h.PID(), sched.StateIdle)

	patient := make(chan error, 1)
	go func() { patient <- s.Shutdown(context.Background()) }()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := s.Shutdown(ctx)
	require.ErrorIs(t, err, sched.ErrForced)
	require.ErrorIs(t, err, context.Canceled, "the call whose deadline passed says so")
	err = receive(t, patient, "the Shutdown without a deadline")
	require.ErrorIs(t, err, sched.ErrForced)
	assert.NotErrorIs(t, err, context.Canceled)
	err = s.Shutdown(context.Background())
	require.ErrorIs(t, err, sched.ErrForced, "a call after the stop")
	_, err = h.Result()
	assert.ErrorIs(t, err, sched.ErrForced)
	requireLifecycle(t, p)
}

// TestEveryContextEntryPointRefusesNil: a nil context is refused the same
// way everywhere, with ErrNilContext, and nothing happens.
func TestEveryContextEntryPointRefusesNil(t *testing.T) {
	calls := make(chan sched.Call, 1)
	s := newScheduler(t, sched.WithHandler(cmdTest, func(c sched.Call) error {
		calls <- c
		return nil
	}))
	target := &probe{step: untilMessage}
	h := submit(t, s, target)
	parent := &probe{step: yieldOnce(1, func(out *sched.StepOutput) { out.Yield(1, cmdTest, nil) })}
	hp := submit(t, s, parent)
	call := receive(t, calls, "the handler")
	var nilCtx context.Context
	started := &probe{}
	ops := []struct {
		name string
		call func() error
	}{
		{"Submit", func() error { _, err := s.Submit(nilCtx, started, "run", nil); return err }},
		{"Call.Submit", func() error { _, err := call.Submit(nilCtx, started, "run", nil); return err }},
		{"SendContext", func() error { return s.SendContext(nilCtx, relay.Message{To: h.PID(), Data: 1}) }},
		{"TellContext", func() error { return s.TellContext(nilCtx, h.PID(), 1) }},
		{"Handle.Wait", func() error { _, err := h.Wait(nilCtx); return err }},
		{"Shutdown", func() error { return s.Shutdown(nilCtx) }},
	}
	for _, op := range ops {
		t.Run(op.name, func(t *testing.T) {
			assert.ErrorIs(t, op.call(), sched.ErrNilContext)
		})
	}
	assert.Zero(t, started.Inits(), "a refused Submit started the process")
	require.NoError(t, s.Tell(h.PID(), "real"), "Shutdown(nil) did not shut down")
	res, err := waitEnd(t, s, h)
	require.NoError(t, err)
	assert.Equal(t, "real", res.Value(), "the first message the target got; a refused send was delivered")
	require.NoError(t, call.Complete(nil, nil))
	_, err = waitEnd(t, s, hp)
	require.NoError(t, err)
	_, err = (sched.Handle{}).Wait(nilCtx)
	assert.ErrorIs(t, err, sched.ErrNilContext, "Wait on the zero Handle")
}

// TestCancelCarriesItsCause: the EventCancel and the process context say
// whether the process was terminated or the scheduler is shutting down;
// contexts derived from the process context inherit the cause; the
// context of a process that ended says so.
func TestCancelCarriesItsCause(t *testing.T) {
	s := newScheduler(t)
	terminated := &probe{step: untilCancel}
	ht := submit(t, s, terminated)
	derived, cancel := context.WithCancel(terminated.Ctx())
	defer cancel()
	require.NoError(t, s.Terminate(ht.PID()))
	_, err := waitEnd(t, s, ht)
	require.NoError(t, err)
	evs := terminated.EventsOf(sched.EventCancel)
	require.Len(t, evs, 1)
	assert.ErrorIs(t, evs[0].Error, sched.ErrTerminated)
	assert.ErrorIs(t, terminated.Ctx().Err(), context.Canceled, "Err is Canceled, as the contract says")
	assert.ErrorIs(t, context.Cause(terminated.Ctx()), sched.ErrTerminated)
	receive(t, derived.Done(), "a derived context's Done")
	assert.ErrorIs(t, context.Cause(derived), sched.ErrTerminated, "the cause reaches derived contexts")

	ended := &probe{step: doneWith(1)}
	_, err = waitEnd(t, s, submit(t, s, ended))
	require.NoError(t, err)
	assert.ErrorIs(t, context.Cause(ended.Ctx()), sched.ErrEnded)

	live := &probe{step: untilCancel}
	hl := submit(t, s, live)
	assert.NoError(t, context.Cause(live.Ctx()), "a live process's context has no cause")
	require.NoError(t, s.Shutdown(context.Background()))
	_, err = hl.Result()
	require.NoError(t, err)
	evs = live.EventsOf(sched.EventCancel)
	require.Len(t, evs, 1)
	assert.ErrorIs(t, evs[0].Error, sched.ErrShuttingDown)
	assert.ErrorIs(t, context.Cause(live.Ctx()), sched.ErrShuttingDown)
}

// TestDoneIsFinal: a step that calls Done ends the process whatever it
// writes after, Continue and yields included.
func TestDoneIsFinal(t *testing.T) {
	for _, after := range []struct {
		name  string
		write func(out *sched.StepOutput)
	}{
		{"Continue", func(out *sched.StepOutput) { out.Continue() }},
		{"a yield", func(out *sched.StepOutput) { out.Sleep(1, time.Hour) }},
		{"Continue and a yield", func(out *sched.StepOutput) { out.Yield(2, cmdTest, nil); out.Continue() }},
	} {
		t.Run(after.name, func(t *testing.T) {
			s := newScheduler(t)
			p := &probe{step: func(_ *probe, _ int, _ []sched.Event, out *sched.StepOutput) error {
				out.Done(payload.Of("result"))
				after.write(out)
				return nil
			}}
			res, err := waitEnd(t, s, submit(t, s, p))
			require.NoError(t, err)
			assert.Equal(t, "result", res.Value())
			assert.Equal(t, 1, p.Steps())
			requireLifecycle(t, p)
		})
	}
}

// TestUnreadEventsAreCounted: events a process did not read because it
// ended are counted in Stats.Messages.Unread: the rest of its batch after
// DoneAfter, and events that arrived during or after its final step.
func TestUnreadEventsAreCounted(t *testing.T) {
	s := newScheduler(t, sched.WithWorkers(1))
	gate := make(chan struct{})
	final := make(chan struct{})
	p := &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
		switch n {
		case 0:
			<-gate // hold the first step while five messages queue
		default:
			close(final)
			<-gate // hold the final step while two more arrive
			out.DoneAfter(2, payload.Of(len(evs)))
		}
		return nil
	}}
	h := submit(t, s, p)
	waitState(t, s, h.PID(), sched.StateRunning)
	for i := range 5 {
		require.NoError(t, s.Tell(h.PID(), i))
	}
	gate <- struct{}{}
	receive(t, final, "the final step")
	for i := range 2 {
		require.NoError(t, s.Tell(h.PID(), 10+i))
	}
	gate <- struct{}{}
	res, err := waitEnd(t, s, h)
	require.NoError(t, err)
	require.Equal(t, 5, res.Value(), "the final batch")
	eventually(t, "the unread count", func() bool { return s.Stats().Messages.Unread == 5 })
	assert.Equal(t, uint64(5), s.Stats().Messages.Unread, "3 left in the batch after DoneAfter(2), 2 that came later")
}
