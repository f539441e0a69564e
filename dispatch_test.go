package scheduler_test

import (
	"context"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// TestUserCommand: a handler completes a yield at once or later, from
// another goroutine, by each of the three ways to complete.
func TestUserCommand(t *testing.T) {
	tests := []struct {
		name string
		// handle serves the yield; go starts goroutines through wg.
		handle func(s *sched.Scheduler, c sched.Call, wg *sync.WaitGroup, errs chan<- error) error
	}{
		{"Call.Complete in the handler", func(_ *sched.Scheduler, c sched.Call, _ *sync.WaitGroup, errs chan<- error) error {
			errs <- c.Complete(c.Arg.(string)+"!", nil)
			return nil
		}},
		{"Call.Complete from a goroutine", func(_ *sched.Scheduler, c sched.Call, wg *sync.WaitGroup, errs chan<- error) error {
			wg.Go(func() { errs <- c.Complete(c.Arg.(string)+"!", nil) })
			return nil
		}},
		{"Completion from a goroutine", func(_ *sched.Scheduler, c sched.Call, wg *sync.WaitGroup, errs chan<- error) error {
			comp := c.Completion()
			if comp.PID() != c.PID || comp.Tag() != c.Tag {
				errs <- testError("Completion names another yield")
				return nil
			}
			arg := c.Arg.(string)
			wg.Go(func() { errs <- comp.Complete(arg+"!", nil) })
			return nil
		}},
		{"Scheduler.CompleteYield from a goroutine", func(s *sched.Scheduler, c sched.Call, wg *sync.WaitGroup, errs chan<- error) error {
			pid, tag, arg := c.PID, c.Tag, c.Arg.(string)
			wg.Go(func() { errs <- s.CompleteYield(pid, tag, arg+"!", nil) })
			return nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var wg sync.WaitGroup
			t.Cleanup(wg.Wait)
			errs := make(chan error, 1)
			calls := make(chan sched.Call, 1)
			s := newScheduler(t)
			require.NoError(t, s.SetHandler(cmdTest, func(c sched.Call) error {
				calls <- c
				return tt.handle(s, c, &wg, errs)
			}))
			p := &probe{step: yieldOnce(7, func(out *sched.StepOutput) { out.Yield(7, cmdTest, "ping") })}
			h := submit(t, s, p)
			res, err := waitEnd(t, s, h)
			require.NoError(t, err)
			assert.Equal(t, "ping!", res.Value())
			require.NoError(t, receive(t, errs, "the completion's error"))

			c := receive(t, calls, "the handler's call")
			assert.Equal(t, h.PID(), c.PID)
			assert.Equal(t, uint64(7), c.Tag)
			assert.Equal(t, cmdTest, c.Cmd)
			assert.Equal(t, "ping", c.Arg)
			evs := p.EventsOf(sched.EventYieldComplete)
			require.Len(t, evs, 1)
			assert.Equal(t, uint64(7), evs[0].Tag)
			assert.NoError(t, evs[0].Error)
			requireLifecycle(t, p)
		})
	}
}

// TestYieldFailures: the ways a yield fails, each seen as the completion's
// error.
func TestYieldFailures(t *testing.T) {
	handlerErr := testError("handler failed")
	tests := []struct {
		name     string
		cmd      sched.CommandID
		h        sched.Handler // registered for cmdTest
		want     error         // the completion's error; nil: success with data "ok"
		wantPErr string        // PanicError.Where, if the error is a panic
	}{
		{name: "no handler", cmd: cmdTest2, want: sched.ErrUnknownCommand},
		{name: "a reserved ID", cmd: sched.FirstUserCommand - 1, want: sched.ErrInvalidCommand},
		{name: "handler returns an error", cmd: cmdTest, h: func(sched.Call) error { return handlerErr }, want: handlerErr},
		{name: "handler panics", cmd: cmdTest, h: func(sched.Call) error { panic("handler exploded") }, want: sched.ErrPanic, wantPErr: "handler"},
		{name: "handler completes with an error", cmd: cmdTest, h: func(c sched.Call) error { return c.Complete(nil, handlerErr) }, want: handlerErr},
		{name: "handler completes, then fails", cmd: cmdTest, h: func(c sched.Call) error {
			_ = c.Complete("ok", nil)
			return handlerErr
		}},
		{name: "handler completes, then panics", cmd: cmdTest, h: func(c sched.Call) error {
			_ = c.Complete("ok", nil)
			panic("late")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var opts []sched.Option
			if tt.h != nil {
				opts = append(opts, sched.WithHandler(cmdTest, tt.h))
			}
			s := newScheduler(t, opts...)
			p := &probe{step: yieldOnce(3, func(out *sched.StepOutput) { out.Yield(3, tt.cmd, nil) })}
			h := submit(t, s, p)
			res, err := waitEnd(t, s, h)
			if tt.want == nil {
				require.NoError(t, err)
				assert.Equal(t, "ok", res.Value())
			} else {
				require.ErrorIs(t, err, tt.want)
			}
			if tt.wantPErr != "" {
				var pe *sched.PanicError
				require.ErrorAs(t, err, &pe)
				assert.Equal(t, tt.wantPErr, pe.Where)
				assert.Equal(t, "handler exploded", pe.Value)
			}
			assert.Len(t, p.EventsOf(sched.EventYieldComplete), 1, "completions")
			requireLifecycle(t, p)

			// The scheduler serves others after a failing handler.
			h2 := submit(t, s, &probe{step: doneWith(1)})
			_, err = waitEnd(t, s, h2)
			require.NoError(t, err)
		})
	}
}

// TestDoubleCompletion: completing a yield twice is an error and delivers
// no second event.
func TestDoubleCompletion(t *testing.T) {
	type result struct{ first, second error }
	results := make(chan result, 1)
	s := newScheduler(t, sched.WithHandler(cmdTest, func(c sched.Call) error {
		r := result{first: c.Complete("first", nil)}
		r.second = c.Complete("second", nil)
		results <- r
		return nil
	}))
	p := &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
		if n == 0 {
			out.Yield(7, cmdTest, nil)
			return nil
		}
		for _, ev := range evs {
			if ev.Type == sched.EventMessage && ev.Data == "marker" {
				out.Done(payload.Payload{})
			}
		}
		return nil
	}}
	h := submit(t, s, p)
	r := receive(t, results, "the handler")
	require.NoError(t, r.first)
	require.ErrorIs(t, r.second, sched.ErrYieldNotPending)

	require.ErrorIs(t, s.CompleteYield(h.PID(), 7, "third", nil), sched.ErrYieldNotPending, "completing again from outside")
	require.ErrorIs(t, s.CompleteYield(h.PID(), 999, nil, nil), sched.ErrYieldNotPending, "completing a tag never yielded")

	// A second event would have been queued before this message.
	require.NoError(t, s.Tell(h.PID(), "marker"))
	_, err := waitEnd(t, s, h)
	require.NoError(t, err)
	evs := p.EventsOf(sched.EventYieldComplete)
	require.Len(t, evs, 1, "completion events: %v", evs)
	assert.Equal(t, "first", evs[0].Data)
	requireLifecycle(t, p)
}

// TestCompletionAfterEnd: a completion for a process that has ended fails
// with ErrProcessNotFound.
func TestCompletionAfterEnd(t *testing.T) {
	calls := make(chan sched.Call, 1)
	s := newScheduler(t, sched.WithHandler(cmdTest, func(c sched.Call) error {
		calls <- c
		return nil
	}))
	// The process yields and finishes in the same step: the handler still
	// runs, and the yield is left outstanding.
	h := submit(t, s, &probe{step: func(_ *probe, _ int, _ []sched.Event, out *sched.StepOutput) error {
		out.Yield(1, cmdTest, nil)
		out.Done(payload.Of("early"))
		return nil
	}})
	c := receive(t, calls, "the handler")
	res, err := waitEnd(t, s, h)
	require.NoError(t, err)
	assert.Equal(t, "early", res.Value())

	require.ErrorIs(t, c.Complete(nil, nil), sched.ErrProcessNotFound, "Call.Complete")
	require.ErrorIs(t, c.Completion().Complete(nil, nil), sched.ErrProcessNotFound, "Completion.Complete")
	require.ErrorIs(t, s.CompleteYield(h.PID(), 1, nil, nil), sched.ErrProcessNotFound, "Scheduler.CompleteYield")
	require.ErrorIs(t, sched.Completion{}.Complete(nil, nil), sched.ErrProcessNotFound, "zero Completion")
}

// TestDuplicateTag: yielding a tag that is still outstanding completes the
// new yield at once with ErrDuplicateTag and leaves the first one alone.
func TestDuplicateTag(t *testing.T) {
	comps := make(chan sched.Completion, 2)
	s := newScheduler(t, sched.WithHandler(cmdTest, func(c sched.Call) error {
		comps <- c.Completion()
		return nil
	}))
	p := &probe{step: func(p *probe, n int, _ []sched.Event, out *sched.StepOutput) error {
		switch n {
		case 0:
			out.Yield(7, cmdTest, "a")
			out.Yield(7, cmdTest, "b")
			out.Sleep(8, time.Hour)
			out.Sleep(8, time.Hour)
		default:
			if len(p.EventsOf(sched.EventYieldComplete)) == 3 {
				out.Done(payload.Payload{})
			}
		}
		return nil
	}}
	h := submit(t, s, p)
	c := receive(t, comps, "the handler")
	eventually(t, "two duplicate-tag completions", func() bool {
		return len(p.EventsOf(sched.EventYieldComplete)) == 2
	})
	require.Empty(t, comps, "the handler ran for the duplicate yield")
	require.NoError(t, c.Complete("a done", nil), "the first yield is still outstanding")
	_, err := waitEnd(t, s, h)
	require.NoError(t, err)

	evs := p.EventsOf(sched.EventYieldComplete)
	require.Len(t, evs, 3)
	for _, ev := range evs[:2] {
		require.ErrorIs(t, ev.Error, sched.ErrDuplicateTag, "event %v", ev)
	}
	assert.ElementsMatch(t, []uint64{7, 8}, []uint64{evs[0].Tag, evs[1].Tag})
	assert.Equal(t, uint64(7), evs[2].Tag)
	assert.NoError(t, evs[2].Error)
	assert.Equal(t, "a done", evs[2].Data)
}

// TestCallContext: the context of a Call is cancelled when its process is
// terminated, so work done for it can stop.
func TestCallContext(t *testing.T) {
	t.Run("carries the process's values and PID", func(t *testing.T) {
		calls := make(chan sched.Call, 1)
		s := newScheduler(t, sched.WithHandler(cmdTest, func(c sched.Call) error {
			calls <- c
			return nil
		}))
		h, err := s.Submit(context.WithValue(context.Background(), ctxKey{}, "v"), &probe{step: yieldOnce(1, func(out *sched.StepOutput) { out.Yield(1, cmdTest, nil) })}, "run", nil)
		require.NoError(t, err)
		c := receive(t, calls, "the handler")
		self, ok := sched.Self(c.Context())
		require.True(t, ok)
		assert.Equal(t, h.PID(), self)
		assert.Equal(t, "v", c.Context().Value(ctxKey{}))
		_, has := c.Context().Deadline()
		assert.False(t, has)
		require.NoError(t, c.Complete("ok", nil))
		_, err = waitEnd(t, s, h)
		require.NoError(t, err)
	})

	t.Run("is done once the yield completes", func(t *testing.T) {
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
			return nil // waits on after the completion
		}}
		h := submit(t, s, p)
		c := receive(t, calls, "the handler")
		ctx := c.Context()
		done := ctx.Done()
		require.NoError(t, ctx.Err())
		require.NoError(t, c.Complete(nil, nil))
		receive(t, done, "the call context's Done after the completion")
		assert.ErrorIs(t, ctx.Err(), context.Canceled)
		assert.ErrorIs(t, context.Cause(ctx), context.Canceled)
		require.NoError(t, s.Terminate(h.PID()))
		_, err := waitEnd(t, s, h)
		require.NoError(t, err)
	})

	// A call made before or after the process is asked to stop keeps a
	// live context (so cleanup work can finish) until the process ends.
	t.Run("outlives the cancel and ends with the process", func(t *testing.T) {
		calls := make(chan sched.Call, 2)
		s := newScheduler(t, sched.WithHandler(cmdTest, func(c sched.Call) error {
			calls <- c
			return nil
		}))
		sawCancel := make(chan struct{})
		p := &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
			switch {
			case n == 0:
				out.Yield(1, cmdTest, nil) // in flight when the cancel comes
			case hasCancel(evs):
				out.Yield(2, cmdTest, nil) // cleanup work
				close(sawCancel)
			default:
				if _, ok := completionOf(evs, 2); ok {
					out.Done(payload.Payload{})
				}
			}
			return nil
		}}
		h := submit(t, s, p)
		inflight := receive(t, calls, "the first call")
		require.NoError(t, s.Terminate(h.PID()))
		receive(t, sawCancel, "the process's step on its cancel")
		cleanup := receive(t, calls, "the cleanup call")
		assert.NoError(t, inflight.Context().Err(), "a call in flight is not cancelled by Terminate")
		assert.NoError(t, cleanup.Context().Err(), "the cleanup call's context is live")
		done := inflight.Context().Done()
		require.NoError(t, cleanup.Complete(nil, nil))
		_, err := waitEnd(t, s, h)
		require.NoError(t, err)
		receive(t, done, "the in-flight call's context at the process's end")
		assert.ErrorIs(t, context.Cause(inflight.Context()), sched.ErrEnded)
		assert.ErrorIs(t, inflight.Complete(nil, nil), sched.ErrProcessNotFound)
		requireLifecycle(t, p)
	})

	t.Run("of the zero Call", func(t *testing.T) {
		assert.Equal(t, context.Background(), sched.Call{}.Context())
	})
}

// TestCallTellAndSubmit: a handler sends and starts processes on behalf
// of the yielding process.
func TestCallTellAndSubmit(t *testing.T) {
	type outcome struct {
		tellErr, tellLostErr, submitErr, submitNilErr error
		child                                         sched.Handle
	}
	outcomes := make(chan outcome, 1)
	target := &probe{step: untilMessage}
	var childValue any
	child := &probe{
		init: func(ctx context.Context, _ string, _ payload.Payloads) error {
			childValue = ctx.Value(ctxKey{})
			return nil
		},
		step: func(p *probe, _ int, _ []sched.Event, out *sched.StepOutput) error {
			out.Done(p.input.At(0))
			return nil
		},
	}
	var targetPID relay.PID
	s := newScheduler(t, sched.WithHandler(cmdTest, func(c sched.Call) error {
		var o outcome
		o.tellErr = c.Tell(targetPID, "from handler")
		o.tellLostErr = c.Tell(relay.PID{ID: 1 << 45}, "lost")
		o.child, o.submitErr = c.Submit(context.Background(), child, "child", payload.Values("input"))
		_, o.submitNilErr = c.Submit(context.Background(), nil, "child", nil)
		outcomes <- o
		return c.Complete(nil, nil)
	}))
	ht := submit(t, s, target)
	targetPID = ht.PID()
	ctx := context.WithValue(context.Background(), ctxKey{}, "parent value")
	hp, err := s.Submit(ctx, &probe{step: yieldOnce(1, func(out *sched.StepOutput) { out.Yield(1, cmdTest, nil) })}, "run", nil)
	require.NoError(t, err)

	o := receive(t, outcomes, "the handler")
	require.NoError(t, o.tellErr)
	require.ErrorIs(t, o.tellLostErr, sched.ErrProcessNotFound)
	require.NoError(t, o.submitErr)
	require.ErrorIs(t, o.submitNilErr, sched.ErrNilProcess)

	res, err := waitEnd(t, s, ht)
	require.NoError(t, err)
	assert.Equal(t, "from handler", res.Value())
	msgs := target.EventsOf(sched.EventMessage)
	require.Len(t, msgs, 1)
	assert.Equal(t, hp.PID(), msgs[0].From, "Call.Tell sends as the yielding process")

	res, err = waitEnd(t, s, o.child)
	require.NoError(t, err)
	assert.Equal(t, "input", res.Value())
	assert.Equal(t, "child", child.method)
	assert.Equal(t, "parent value", childValue, "Call.Submit: values come from the yielding process's context")
	requireLifecycle(t, child)

	_, err = waitEnd(t, s, hp)
	require.NoError(t, err)
}

// TestHandleReplaces: Handle replaces an earlier handler for the same
// command, also one given to New.
func TestHandleReplaces(t *testing.T) {
	s := newScheduler(t, sched.WithHandler(cmdTest, func(c sched.Call) error { return c.Complete("old", nil) }))
	require.NoError(t, s.SetHandler(cmdTest, func(c sched.Call) error { return c.Complete("new", nil) }))
	h := submit(t, s, &probe{step: yieldOnce(1, func(out *sched.StepOutput) { out.Yield(1, cmdTest, nil) })})
	res, err := waitEnd(t, s, h)
	require.NoError(t, err)
	assert.Equal(t, "new", res.Value())
}

// TestBuiltins: spawn and send, through the typed helpers and the
// generic Yield form. The parent yields at its first step with tag 1 and
// finishes with the completion event as its result.
func TestBuiltins(t *testing.T) {
	childErr := testError("child failed")
	tests := []struct {
		name  string
		child *probe // nil: none
		yield func(e *dispatchEnv, out *sched.StepOutput)
		check func(t *testing.T, s *sched.Scheduler, e *dispatchEnv, ev sched.Event)
	}{
		{
			name:  "Spawn",
			child: &probe{step: untilMessage},
			yield: func(e *dispatchEnv, out *sched.StepOutput) { out.Spawn(1, e.child, "kid", payload.Values(3)) },
			check: func(t *testing.T, s *sched.Scheduler, e *dispatchEnv, ev sched.Event) {
				require.NoError(t, ev.Error)
				pid, ok := ev.Data.(relay.PID)
				require.True(t, ok, "Data of a Spawn completion is a relay.PID, got %T", ev.Data)
				assert.Equal(t, "kid", e.child.method)
				assert.Equal(t, payload.Values(3), e.child.input)
				// The child is live and addressable by that PID.
				require.NoError(t, s.Tell(pid, "hi"))
				eventually(t, "the child's end", func() bool { return e.child.Closes() == 1 })
				assert.Equal(t, pid, e.child.self)
			},
		},
		{
			name: "SpawnAwait",
			child: &probe{step: func(p *probe, _ int, _ []sched.Event, out *sched.StepOutput) error {
				out.Done(p.input.At(0))
				return nil
			}},
			yield: func(e *dispatchEnv, out *sched.StepOutput) { out.SpawnAwait(1, e.child, "kid", payload.Values(42)) },
			check: func(t *testing.T, _ *sched.Scheduler, e *dispatchEnv, ev sched.Event) {
				require.NoError(t, ev.Error)
				res, ok := ev.Data.(payload.Payload)
				require.True(t, ok, "Data of a SpawnAwait completion is a payload.Payload, got %T", ev.Data)
				assert.Equal(t, 42, res.Value())
				assert.Equal(t, e.child.self, ev.From, "From is the child")
				assert.False(t, ev.From.IsZero())
				requireLifecycle(t, e.child)
			},
		},
		{
			name:  "SpawnAwait failing child",
			child: &probe{step: func(*probe, int, []sched.Event, *sched.StepOutput) error { return childErr }},
			yield: func(e *dispatchEnv, out *sched.StepOutput) { out.SpawnAwait(1, e.child, "kid", nil) },
			check: func(t *testing.T, _ *sched.Scheduler, e *dispatchEnv, ev sched.Event) {
				require.ErrorIs(t, ev.Error, childErr)
				assert.Equal(t, e.child.self, ev.From)
			},
		},
		{
			name:  "SpawnAwait child whose Init fails",
			child: &probe{init: func(context.Context, string, payload.Payloads) error { return childErr }},
			yield: func(e *dispatchEnv, out *sched.StepOutput) { out.SpawnAwait(1, e.child, "kid", nil) },
			check: func(t *testing.T, _ *sched.Scheduler, e *dispatchEnv, ev sched.Event) {
				require.ErrorIs(t, ev.Error, sched.ErrInit)
				require.ErrorIs(t, ev.Error, childErr)
				assert.Equal(t, 1, e.child.Closes())
				assert.Zero(t, e.child.Steps())
			},
		},
		{
			name:  "Spawn nil process",
			yield: func(_ *dispatchEnv, out *sched.StepOutput) { out.Spawn(1, nil, "kid", nil) },
			check: expectErr(sched.ErrNilProcess),
		},
		{
			name:  "SpawnAwait nil process",
			yield: func(_ *dispatchEnv, out *sched.StepOutput) { out.SpawnAwait(1, nil, "kid", nil) },
			check: expectErr(sched.ErrNilProcess),
		},
		{
			name:  "Spawn empty method",
			child: &probe{},
			yield: func(e *dispatchEnv, out *sched.StepOutput) { out.Spawn(1, e.child, "", nil) },
			check: expectErr(sched.ErrEmptyMethod),
		},
		{
			name:  "SpawnAwait empty method",
			child: &probe{},
			yield: func(e *dispatchEnv, out *sched.StepOutput) { out.SpawnAwait(1, e.child, "", nil) },
			check: expectErr(sched.ErrEmptyMethod),
		},
		{
			name:  "a reserved command ID",
			yield: func(_ *dispatchEnv, out *sched.StepOutput) { out.Yield(1, sched.CommandID(2), nil) },
			check: expectErr(sched.ErrInvalidCommand),
		},
	}
	s := newScheduler(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target := &probe{step: untilMessage}
			ht := submit(t, s, target)
			e := &dispatchEnv{target: ht.PID(), child: tt.child}
			parent := &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
				if n == 0 {
					tt.yield(e, out)
					return nil
				}
				if ev, ok := completionOf(evs, 1); ok {
					out.Done(payload.Of(ev))
				}
				return nil
			}}
			h := submit(t, s, parent)
			res, err := waitEnd(t, s, h)
			require.NoError(t, err)
			ev, ok := res.Value().(sched.Event)
			require.True(t, ok)
			assert.Equal(t, sched.EventYieldComplete, ev.Type)
			assert.Equal(t, uint64(1), ev.Tag)
			tt.check(t, s, e, ev)
			requireLifecycle(t, parent)

			require.NoError(t, s.Terminate(ht.PID()))
			_, err = waitEnd(t, s, ht)
			require.NoError(t, err)
		})
	}
}

// dispatchEnv is what a TestBuiltins case works with.
type dispatchEnv struct {
	target relay.PID // a live process that finishes on its first message
	child  *probe    // the case's child process, if any
}

// expectErr checks that a completion failed with want.
func expectErr(want error) func(*testing.T, *sched.Scheduler, *dispatchEnv, sched.Event) {
	return func(t *testing.T, _ *sched.Scheduler, _ *dispatchEnv, ev sched.Event) {
		t.Helper()
		require.ErrorIs(t, ev.Error, want)
		assert.Nil(t, ev.Data)
	}
}

// TestTimers: the timer command in its four forms completes, never
// before its deadline.
func TestTimers(t *testing.T) {
	const d = 30 * time.Millisecond
	tests := []struct {
		name  string
		wait  time.Duration // the least time before the completion
		yield func(start time.Time, out *sched.StepOutput)
	}{
		{"Sleep", d, func(_ time.Time, out *sched.StepOutput) { out.Sleep(1, d) }},
		{"SleepUntil", d, func(start time.Time, out *sched.StepOutput) { out.SleepUntil(1, start.Add(d)) }},
		{"Sleep 0", 0, func(_ time.Time, out *sched.StepOutput) { out.Sleep(1, 0) }},
		{"Sleep negative", 0, func(_ time.Time, out *sched.StepOutput) { out.Sleep(1, -time.Hour) }},
		{"SleepUntil the past", 0, func(start time.Time, out *sched.StepOutput) { out.SleepUntil(1, start.Add(-time.Hour)) }},
		{"SleepUntil without monotonic clock", d, func(start time.Time, out *sched.StepOutput) {
			out.SleepUntil(1, start.Add(d).Round(0))
		}},
	}
	s := newScheduler(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			var elapsed time.Duration
			p := &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
				if n == 0 {
					tt.yield(start, out)
					return nil
				}
				if ev, ok := completionOf(evs, 1); ok {
					elapsed = time.Since(start)
					if ev.Error != nil {
						return ev.Error
					}
					out.Done(payload.Of(ev.Data))
				}
				return nil
			}}
			h := submit(t, s, p)
			res, err := waitEnd(t, s, h)
			require.NoError(t, err)
			assert.True(t, res.IsZero(), "Data of a timer completion")
			assert.GreaterOrEqual(t, elapsed, tt.wait, "the timer completed before its deadline")
			requireLifecycle(t, p)
		})
	}
	eventually(t, "no timer pending", func() bool { return s.Stats().Timers == 0 })
}

// sleeper sleeps once for d and finishes with the time it took from
// start, which is before its Submit.
type sleeper struct {
	stepOnly
	d     time.Duration
	start time.Time
}

func (p *sleeper) Step(evs []sched.Event, out *sched.StepOutput) error {
	if len(evs) == 0 {
		out.Sleep(0, p.d)
		return nil
	}
	if ev, ok := completionOf(evs, 0); ok {
		if ev.Error != nil {
			return ev.Error
		}
		out.Done(payload.Of(time.Since(p.start)))
	}
	return nil
}

// TestManySleepers: thousands of sleeping processes all wake, none early,
// while the number of goroutines stays that of the workers.
func TestManySleepers(t *testing.T) {
	base := runtime.NumGoroutine()
	s := newScheduler(t, sched.WithWorkers(2))
	const n = 10_000
	rng := rand.New(rand.NewPCG(1, 2))
	sleepers := make([]*sleeper, n)
	hs := make([]sched.Handle, n)
	maxGoroutines := 0
	for i := range n {
		sleepers[i] = &sleeper{d: time.Duration(1+rng.IntN(50)) * time.Millisecond, start: time.Now()}
		hs[i] = submit(t, s, sleepers[i])
		if i%500 == 0 {
			maxGoroutines = max(maxGoroutines, runtime.NumGoroutine())
		}
	}
	for i, h := range hs {
		if i%500 == 0 {
			maxGoroutines = max(maxGoroutines, runtime.NumGoroutine())
		}
		res, err := waitEnd(t, s, h)
		require.NoError(t, err)
		took := res.Value().(time.Duration)
		require.GreaterOrEqual(t, took, sleepers[i].d, "sleeper %d woke early", i)
	}
	// The workers, a worker's alarm and perhaps a watchdog, plus a
	// little slack for the runtime's own: nothing per sleeper.
	assert.LessOrEqual(t, maxGoroutines-base, s.Stats().Workers+2+3, "goroutines while %d processes sleep", n)
	eventually(t, "Live == 0", func() bool { return s.Stats().Processes.Live == 0 })
	assert.Zero(t, s.Stats().Timers)
}
