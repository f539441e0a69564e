package scheduler_test

import (
	"context"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// TestContextsWaitWithoutGoroutines: context.AfterFunc and contexts
// derived from a process's or a call's context wait for it without a
// goroutine each, and run once it is done.
func TestContextsWaitWithoutGoroutines(t *testing.T) {
	calls := make(chan sched.Call, 1)
	s := newScheduler(t, sched.WithHandler(cmdTest, func(c sched.Call) error {
		calls <- c
		return nil
	}))
	p := &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
		if n == 0 {
			out.Yield(1, cmdTest, nil)
		}
		if hasCancel(evs) {
			out.Done(payload.Payload{})
		}
		return nil // lives on after the completion, until its cancel
	}}
	h := submit(t, s, p)
	call := receive(t, calls, "the call")

	const n = 100
	before := runtime.NumGoroutine()
	var derived []context.Context
	for range n {
		for _, parent := range []context.Context{p.Ctx(), call.Context()} {
			ctx, cancel := context.WithCancel(parent)
			t.Cleanup(cancel)
			derived = append(derived, ctx)
		}
	}
	ran := make(chan string, 3)
	context.AfterFunc(call.Context(), func() { ran <- "call" })
	context.AfterFunc(p.Ctx(), func() { ran <- "process" })
	stop := context.AfterFunc(p.Ctx(), func() { ran <- "stopped" })
	assert.LessOrEqual(t, runtime.NumGoroutine()-before, 5, "goroutines started to wait for %d derived contexts", 2*n)
	assert.True(t, stop(), "stopped before it ran")

	require.NoError(t, call.Complete("done", nil)) // ends the call's context
	assert.Equal(t, "call", receive(t, ran, "the call context's AfterFunc"))
	require.NoError(t, s.Terminate(h.PID())) // ends the process context
	_, err := waitEnd(t, s, h)
	require.NoError(t, err)
	assert.Equal(t, "process", receive(t, ran, "the process context's AfterFunc"))
	for _, ctx := range derived {
		receive(t, ctx.Done(), "a derived context")
	}
	assert.ErrorIs(t, context.Cause(derived[0]), sched.ErrTerminated, "the process context's cause reaches derived contexts")
	select {
	case got := <-ran:
		t.Fatalf("%s ran", got)
	default:
	}
}

func TestProcessContext(t *testing.T) {
	t.Run("Self and values", func(t *testing.T) {
		s := newScheduler(t)
		p, seen := seeingProbe()
		ctx := context.WithValue(context.Background(), ctxKey{}, "v")
		h, err := s.Submit(ctx, p, "run", nil)
		require.NoError(t, err)
		assert.Equal(t, h.PID(), seen.self, "Self(ctx) in Init")
		assert.Equal(t, "v", seen.value, "Submit ctx value seen in Init")

		pctx := p.Ctx()
		self, ok := sched.Self(pctx)
		require.True(t, ok)
		assert.Equal(t, h.PID(), self)
		// A context derived from the process context still names it.
		derived, cancel := context.WithCancel(pctx)
		defer cancel()
		self, ok = sched.Self(derived)
		require.True(t, ok)
		assert.Equal(t, h.PID(), self)
		_, deadline := pctx.Deadline()
		assert.False(t, deadline, "a process context has no deadline")

		require.NoError(t, s.Tell(h.PID(), "bye"))
		_, err = waitEnd(t, s, h)
		require.NoError(t, err)
		assert.Equal(t, h.PID(), p.self, "StepOutput.Self")
	})

	t.Run("Self of another context", func(t *testing.T) {
		_, ok := sched.Self(context.Background())
		assert.False(t, ok)
	})

	t.Run("Submit ctx cancellation does not reach the process", func(t *testing.T) {
		s := newScheduler(t)
		ctx, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, 7))
		p := &probe{step: untilMessage}
		h, err := s.Submit(ctx, p, "run", nil)
		require.NoError(t, err)
		cancel()
		pctx := p.Ctx()
		assert.NoError(t, pctx.Err())
		assert.False(t, isClosed(pctx.Done()), "process context done after the Submit ctx was cancelled")
		assert.Equal(t, 7, pctx.Value(ctxKey{}), "values of a cancelled Submit ctx stay visible")

		// The process still runs: it answers a message.
		require.NoError(t, s.Tell(h.PID(), "x"))
		res, err := waitEnd(t, s, h)
		require.NoError(t, err)
		assert.Equal(t, "x", res.Value())
	})

	// The process context is cancelled when the process is terminated
	// and when it ends, whether or not Done was asked for beforehand.
	tests := []struct {
		name      string
		earlyDone bool // call Done before the cancellation
		end       func(t *testing.T, s *sched.Scheduler, h sched.Handle)
	}{
		{"terminate", false, func(t *testing.T, s *sched.Scheduler, h sched.Handle) {
			require.NoError(t, s.Terminate(h.PID()))
		}},
		{"terminate, Done asked early", true, func(t *testing.T, s *sched.Scheduler, h sched.Handle) {
			require.NoError(t, s.Terminate(h.PID()))
		}},
		{"end", false, func(t *testing.T, s *sched.Scheduler, h sched.Handle) {
			require.NoError(t, s.Tell(h.PID(), "end"))
			_, err := waitEnd(t, s, h)
			require.NoError(t, err)
		}},
		{"end, Done asked early", true, func(t *testing.T, s *sched.Scheduler, h sched.Handle) {
			require.NoError(t, s.Tell(h.PID(), "end"))
			_, err := waitEnd(t, s, h)
			require.NoError(t, err)
		}},
	}
	for _, tt := range tests {
		t.Run("cancelled at "+tt.name, func(t *testing.T) {
			s := newScheduler(t)
			p := &probe{step: untilMessage}
			h := submit(t, s, p)
			pctx := p.Ctx()
			var done <-chan struct{}
			if tt.earlyDone {
				done = pctx.Done()
				require.False(t, isClosed(done))
				require.NoError(t, pctx.Err())
			}
			tt.end(t, s, h)
			if done == nil {
				done = pctx.Done()
			}
			receive(t, done, "process context Done")
			require.ErrorIs(t, pctx.Err(), context.Canceled)
			receive(t, pctx.Done(), "process context Done (asked again)")
			_, err := waitEnd(t, s, h)
			require.NoError(t, err)
			requireLifecycle(t, p)
		})
	}
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

// TestChildrenShareValuesNotState: the children of a process submitted
// with context values see the values, and so do theirs, yet what one
// child's context gets of its own (a Done channel, a function to run
// when it is done, a name) is that child's alone: terminating one child
// cancels its context, runs its function and frees its name, and leaves
// its sibling's context as it was.
func TestChildrenShareValuesNotState(t *testing.T) {
	s := newScheduler(t, sched.WithWorkers(2))
	a := &probe{step: untilCancel}
	grandchild := &probe{step: untilCancel}
	b := &probe{step: func(p *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
		if n == 0 {
			return nil
		}
		if hasCancel(evs) {
			out.Done(payload.Payload{})
			return nil
		}
		out.Spawn(1, grandchild, "grandchild", nil) // on the message
		return nil
	}}
	pids := make(chan relay.PID, 2)
	parent := &probe{step: func(p *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
		if n == 0 {
			out.Spawn(1, a, "a", nil)
			out.Spawn(2, b, "b", nil)
			return nil
		}
		for _, ev := range evs {
			if ev.Type == sched.EventYieldComplete && ev.Error == nil {
				pids <- ev.From
			}
		}
		return untilCancel(p, n, evs, out)
	}}
	ctx := context.WithValue(context.Background(), ctxKey{}, "request")
	hp, err := s.Submit(ctx, parent, "parent", nil)
	require.NoError(t, err)
	byMethod := map[string]relay.PID{}
	for range 2 {
		pid := receive(t, pids, "a child's PID")
		info, ok := findProcess(s, pid)
		require.True(t, ok)
		byMethod[info.Method] = pid
	}
	ctxA, ctxB := a.Ctx(), b.Ctx()
	assert.Equal(t, "request", ctxA.Value(ctxKey{}), "a's values")
	assert.Equal(t, "request", ctxB.Value(ctxKey{}), "b's values")

	doneA := ctxA.Done()
	ranA := make(chan struct{})
	context.AfterFunc(ctxA, func() { close(ranA) })
	require.NoError(t, s.Register("child-a", byMethod["a"]))
	doneB := ctxB.Done()
	require.False(t, doneA == doneB, "the two children's contexts share a Done channel")

	require.NoError(t, s.Terminate(byMethod["a"]))
	receive(t, doneA, "a's context once a is terminated")
	receive(t, ranA, "a's AfterFunc")
	assert.ErrorIs(t, context.Cause(ctxA), sched.ErrTerminated)
	eventually(t, "a's name freed", func() bool {
		_, err := s.Lookup("child-a")
		return err != nil
	})
	assert.False(t, isClosed(doneB), "b's context is done because a was terminated")
	assert.NoError(t, ctxB.Err())
	assert.NoError(t, context.Cause(ctxB))

	// b's children still inherit the values, though b's context now has
	// a Done channel of its own.
	require.NoError(t, s.Tell(byMethod["b"], "spawn"))
	eventually(t, "the grandchild started", func() bool { return grandchild.Ctx() != nil })
	assert.Equal(t, "request", grandchild.Ctx().Value(ctxKey{}), "the grandchild's values")
	assert.NoError(t, grandchild.Ctx().Err())

	require.NoError(t, s.Terminate(byMethod["b"]))
	receive(t, doneB, "b's context once b is terminated")
	require.NoError(t, s.Terminate(hp.PID()))
	_, err = waitEnd(t, s, hp)
	require.NoError(t, err)
}

// TestCallContextsAtAForcedEnd: at a shutdown deadline, the context of a
// call whose yield is still pending is done with cause ErrForced, and so
// is one asked for after; the context of a call whose yield completed
// earlier keeps its cause, context.Canceled; the process context says
// why the process was asked to stop, ErrShuttingDown.
func TestCallContextsAtAForcedEnd(t *testing.T) {
	type held struct {
		call sched.Call
		ctx  context.Context
	}
	calls := make(chan held, 2)
	s := newScheduler(t, sched.WithHandler(cmdTest, func(c sched.Call) error {
		calls <- held{c, c.Context()}
		if c.Arg == "now" {
			return c.Complete(nil, nil)
		}
		return nil
	}))
	p := &probe{step: func(_ *probe, n int, _ []sched.Event, out *sched.StepOutput) error {
		if n == 0 {
			out.Yield(1, cmdTest, "held")
			out.Yield(2, cmdTest, "now")
		}
		return nil // ignores its cancel: forced at the deadline
	}}
	h := submit(t, s, p)
	pending := receive(t, calls, "the held call")
	completed := receive(t, calls, "the call completed at once")
	receive(t, completed.ctx.Done(), "the completed call's context")
	require.NoError(t, pending.ctx.Err(), "the pending call's context before the shutdown")

	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the deadline has passed: every process still running is forced
	require.ErrorIs(t, s.Shutdown(ctx), sched.ErrForced)
	_, err := h.Result()
	require.ErrorIs(t, err, sched.ErrForced)

	receive(t, pending.ctx.Done(), "the pending call's context at the forced end")
	assert.ErrorIs(t, pending.ctx.Err(), context.Canceled)
	assert.ErrorIs(t, context.Cause(pending.ctx), sched.ErrForced, "the pending call's context")
	assert.ErrorIs(t, context.Cause(pending.call.Context()), sched.ErrForced, "a context asked for after the forced end")
	assert.ErrorIs(t, context.Cause(completed.ctx), context.Canceled, "the completed call's context keeps its cause")
	assert.ErrorIs(t, context.Cause(p.Ctx()), sched.ErrShuttingDown, "the process context")
}

// closeSeer is a process that yields a command and ends on its
// completion or a message, and reports in Close what its context and
// its call's context say then.
type closeSeer struct {
	ctx    context.Context
	closed chan [2]error
	call   func() context.Context
}

func (c *closeSeer) Init(ctx context.Context, _ string, _ payload.Payloads) error {
	c.ctx = ctx
	return nil
}

func (c *closeSeer) Step(evs []sched.Event, out *sched.StepOutput) error {
	if len(evs) == 0 {
		out.Yield(1, cmdTest, nil) // left pending at the end
		return nil
	}
	out.Done(payload.Payload{})
	return nil
}

func (c *closeSeer) Close() { c.closed <- [2]error{c.ctx.Err(), c.call().Err()} }

// TestContextsDoneAfterClose: at a process's end, Close runs first, while
// the process context and its pending calls' contexts are still live, and
// they are done once it has returned (ErrEnded), before the Handle
// reports the end.
func TestContextsDoneAfterClose(t *testing.T) {
	calls := make(chan sched.Call, 1)
	s := newScheduler(t, sched.WithHandler(cmdTest, func(c sched.Call) error {
		calls <- c
		return nil
	}))
	var callCtx context.Context
	p := &closeSeer{closed: make(chan [2]error, 1), call: func() context.Context { return callCtx }}
	h := submit(t, s, p)
	callCtx = receive(t, calls, "the call").Context()
	require.NoError(t, s.Tell(h.PID(), "end"))
	_, err := waitEnd(t, s, h)
	require.NoError(t, err)
	inClose := receive(t, p.closed, "Close")
	assert.NoError(t, inClose[0], "the process context during Close")
	assert.NoError(t, inClose[1], "the pending call's context during Close")
	assert.ErrorIs(t, context.Cause(p.ctx), sched.ErrEnded, "the process context once the Handle reports the end")
	assert.ErrorIs(t, context.Cause(callCtx), sched.ErrEnded, "the call's context once the Handle reports the end")
}
