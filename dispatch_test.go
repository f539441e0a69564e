package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
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
		{name: "the largest ID, with no handler", cmd: 1 << 16, want: sched.ErrUnknownCommand},
		{name: "an ID above the largest, which no handler can have", cmd: 1<<16 + 1, want: sched.ErrUnknownCommand},
		{name: "the largest CommandID", cmd: math.MaxUint32, want: sched.ErrUnknownCommand},
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

// TestManyPendingYields: a process with more yields pending than its
// small set holds (they move to maps) still finds each by its tag: a
// later step's Timeout and Cancel reach the right yields, a cancelled
// tag may be yielded again at once, and the rest complete with their
// own answers, each once.
func TestManyPendingYields(t *testing.T) {
	const n = 100 // well past the small set's 31
	calls := make(chan sched.Call, n)
	s := newScheduler(t, sched.WithHandler(cmdTest, func(c sched.Call) error {
		calls <- c
		return nil
	}))
	got := map[uint64]sched.Event{}
	p := &probe{step: func(_ *probe, step int, evs []sched.Event, out *sched.StepOutput) error {
		if step == 0 {
			for tag := uint64(1); tag <= n; tag++ {
				out.Yield(tag, cmdTest, tag)
			}
			return nil
		}
		for _, ev := range evs {
			switch ev.Type {
			case sched.EventMessage:
				for tag := uint64(1); tag <= 10; tag++ {
					out.Timeout(tag, time.Millisecond)
				}
				for tag := uint64(11); tag <= 20; tag++ {
					out.Cancel(tag)
					out.Yield(tag, cmdTest, tag+1000) // the same tag, again
				}
			case sched.EventYieldComplete:
				if _, dup := got[ev.Tag]; dup {
					return fmt.Errorf("tag %d completed twice", ev.Tag)
				}
				got[ev.Tag] = ev
			}
		}
		if len(got) == n {
			out.Done(payload.Payload{})
		}
		return nil
	}}
	h := submit(t, s, p)
	held := make([]sched.Call, 0, n)
	for range n {
		held = append(held, receive(t, calls, "a call"))
	}
	require.NoError(t, s.Tell(h.PID(), "time out 1-10, cancel 11-20 and yield them again"))
	// Tags 1-10 complete with ErrTimeout; 11-20 are cancelled and
	// yielded again, which makes ten more calls.
	for range 10 {
		held = append(held, receive(t, calls, "a call for a tag yielded again"))
	}
	eventually(t, "the timeouts", func() bool { return len(p.EventsOf(sched.EventYieldComplete)) >= 10 })
	for _, c := range held[:n] {
		err := c.Complete(fmt.Sprint("answer ", c.Arg), nil)
		if c.Tag <= 20 {
			assert.ErrorIs(t, err, sched.ErrYieldNotPending, "tag %d", c.Tag)
		} else {
			assert.NoError(t, err, "tag %d", c.Tag)
		}
	}
	for _, c := range held[n:] {
		assert.NoError(t, c.Complete(fmt.Sprint("again ", c.Arg), nil), "tag %d yielded again", c.Tag)
	}
	_, err := waitEnd(t, s, h)
	require.NoError(t, err)
	for tag := uint64(1); tag <= n; tag++ {
		ev, ok := got[tag]
		switch {
		case tag <= 10:
			require.True(t, ok, "tag %d", tag)
			assert.ErrorIs(t, ev.Error, sched.ErrTimeout, "tag %d", tag)
		case tag <= 20:
			require.True(t, ok, "tag %d", tag)
			assert.Equal(t, fmt.Sprint("again ", tag+1000), ev.Data, "tag %d: the yield made again, not the cancelled one", tag)
		default:
			require.True(t, ok, "tag %d", tag)
			assert.Equal(t, fmt.Sprint("answer ", tag), ev.Data, "tag %d", tag)
		}
	}
	assert.Zero(t, s.Stats().Timers)
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

// TestTimeoutOfADuplicatedTag: a Timeout given to a yield that is
// refused with ErrDuplicateTag applies to the pending yield with that
// tag, the one the step's Timeout can mean, whether that yield was
// written earlier in the step or in an earlier step.
func TestTimeoutOfADuplicatedTag(t *testing.T) {
	for _, sameStep := range []bool{true, false} {
		name := "the pending yield written earlier in the step"
		if !sameStep {
			name = "the pending yield written in an earlier step"
		}
		t.Run(name, func(t *testing.T) {
			s := newScheduler(t)
			var got []error
			p := &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
				if n == 0 {
					out.Sleep(1, time.Hour)
				}
				if n == 0 && !sameStep {
					out.Continue()
					return nil
				}
				if n == 0 || n == 1 && !sameStep {
					out.Sleep(1, 2*time.Hour) // refused: tag 1 is pending
					out.Timeout(1, 20*time.Millisecond)
				}
				for _, ev := range evs {
					if ev.Type == sched.EventYieldComplete && ev.Tag == 1 {
						got = append(got, ev.Error)
					}
				}
				if len(got) == 2 {
					out.Done(payload.Payload{})
				}
				return nil
			}}
			_, err := waitEnd(t, s, submit(t, s, p))
			require.NoError(t, err)
			require.Len(t, got, 2)
			assert.ErrorIs(t, got[0], sched.ErrDuplicateTag, "the second Sleep")
			assert.ErrorIs(t, got[1], sched.ErrTimeout, "the first Sleep, given the Timeout")
			assert.Zero(t, s.Stats().Timers, "a timer outlived its Sleep")
		})
	}
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

	t.Run("the zero Call's methods refuse with ErrProcessNotFound", func(t *testing.T) {
		var c sched.Call
		assert.ErrorIs(t, c.Complete("x", nil), sched.ErrProcessNotFound)
		assert.ErrorIs(t, c.Tell(relay.PID{ID: 1<<32 | 1}, "x"), sched.ErrProcessNotFound)
		h, err := c.Submit(context.Background(), &probe{}, "run", nil)
		assert.ErrorIs(t, err, sched.ErrProcessNotFound)
		assert.Equal(t, sched.Handle{}, h)
		assert.ErrorIs(t, c.Completion().Complete("x", nil), sched.ErrProcessNotFound)
	})
}

// TestCallContextOfOneYield: every call of Context while the yield is
// pending returns the same context, the one its end makes done. One
// asked for once the yield has completed is done already, with cause
// context.Canceled; once the process has ended, with cause ErrEnded.
func TestCallContextOfOneYield(t *testing.T) {
	calls := make(chan sched.Call, 1)
	s := newScheduler(t, sched.WithHandler(cmdTest, func(c sched.Call) error {
		calls <- c
		return nil
	}))
	h := submit(t, s, &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
		if n == 0 {
			out.Yield(1, cmdTest, nil)
		}
		if hasCancel(evs) {
			out.Done(payload.Payload{})
		}
		return nil // waits on after the completion
	}})
	c := receive(t, calls, "the handler")
	first := c.Context()
	require.True(t, first == c.Context(), "a second Context while the yield is pending is another context")
	require.NoError(t, first.Err())
	require.NoError(t, c.Complete(nil, nil))
	receive(t, first.Done(), "the first context's Done after the completion")

	late := c.Context()
	require.True(t, isClosed(late.Done()), "a context asked for after the completion is not done")
	require.ErrorIs(t, late.Err(), context.Canceled)
	require.ErrorIs(t, context.Cause(late), context.Canceled)

	require.NoError(t, s.Terminate(h.PID()))
	_, err := waitEnd(t, s, h)
	require.NoError(t, err)
	ended := c.Context()
	require.True(t, isClosed(ended.Done()), "a context asked for after the end is not done")
	require.ErrorIs(t, ended.Err(), context.Canceled)
	require.ErrorIs(t, context.Cause(ended), sched.ErrEnded)
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

// TestYieldsWithoutACompletion: Tell, TellName, Reply, Cancel and a
// Timeout of a yield of an earlier step complete nothing of their own:
// the step that wrote them (with a Sleep to end on) gets the Sleep's
// completion and the messages, and no completion with the tags Cancel
// and Timeout name.
func TestYieldsWithoutACompletion(t *testing.T) {
	s := newScheduler(t)
	p := &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
		switch n {
		case 0:
			out.Sleep(1, time.Hour)
		case 1:
			out.Tell(out.Self(), "told")
			out.TellName("a name nobody has", "bounced")
			out.Reply(sched.ReplyTo{}, "to nobody", nil)
			out.Cancel(7) // not pending
			out.Timeout(1, 2*time.Hour)
			out.Sleep(2, 0)
		default:
			if _, ok := completionOf(evs, 2); ok {
				out.Done(payload.Payload{})
			}
		}
		return nil
	}}
	h := submit(t, s, p)
	require.NoError(t, s.Tell(h.PID(), "go"))
	_, err := waitEnd(t, s, h)
	require.NoError(t, err)
	var tags []uint64
	for _, ev := range p.EventsOf(sched.EventYieldComplete) {
		tags = append(tags, ev.Tag)
	}
	assert.Equal(t, []uint64{2}, tags, "completions")
	var messages []any
	for _, ev := range p.EventsOf(sched.EventMessage) {
		messages = append(messages, ev.Data)
	}
	assert.ElementsMatch(t, []any{"go", "told", "bounced"}, messages)
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
				pid := ev.From
				require.False(t, pid.IsZero(), "From of a Spawn completion is the child")
				assert.Nil(t, ev.Data, "Data of a Spawn completion is nil")
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
				assert.Equal(t, 42, ev.Data, "Data of a SpawnAwait completion is the result's value")
				assert.Equal(t, payload.Of(42), ev.Result(), "Result is the child's result")
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
				assert.True(t, ev.From.IsZero(), "From of a child that did not start")
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

// yieldAgainAfterCancel is a step that yields tag 1 with first; when a
// message wakes it, cancels tag 1, yields it again at once with again,
// and closes cancelled; and then finishes with the first completion of
// tag 1 (the Event) as its result.
func yieldAgainAfterCancel(first, again func(out *sched.StepOutput), cancelled chan<- struct{}) func(*probe, int, []sched.Event, *sched.StepOutput) error {
	return func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
		switch n {
		case 0:
			first(out)
		case 1:
			out.Cancel(1)
			again(out)
			close(cancelled)
		default:
			if ev, ok := completionOf(evs, 1); ok {
				out.Done(payload.Of(ev))
			}
		}
		return nil
	}
}

func TestCancel(t *testing.T) {
	t.Run("a user command: no completion, a clear error, the call's context done", func(t *testing.T) {
		calls := make(chan sched.Call, 1)
		s := newScheduler(t, sched.WithHandler(cmdTest, func(c sched.Call) error {
			calls <- c
			return nil
		}))
		cancelled := make(chan struct{})
		p := &probe{step: yieldAgainAfterCancel(
			func(out *sched.StepOutput) { out.Yield(1, cmdTest, nil) },
			func(out *sched.StepOutput) { out.Sleep(1, 0) },
			cancelled)}
		h := submit(t, s, p)
		c := receive(t, calls, "the call")
		ctx := c.Context()
		require.NoError(t, s.Tell(h.PID(), "cancel now"))
		receive(t, cancelled, "the cancelling step")
		receive(t, ctx.Done(), "the call's context")
		assert.ErrorIs(t, context.Cause(ctx), sched.ErrYieldCancelled)
		res, err := waitEnd(t, s, h)
		require.NoError(t, err)
		ev := res.Value().(sched.Event)
		assert.Nil(t, ev.Data, "the completion is the new yield's (the sleep), not the cancelled call's")
		err = c.Complete("late", nil)
		assert.ErrorIs(t, err, sched.ErrProcessNotFound)
		assert.Len(t, p.EventsOf(sched.EventYieldComplete), 1)
		// Cancelled is a worker's counter, published when the worker
		// flushes them (after the Handle saw the end, perhaps).
		eventually(t, "the cancel counted", func() bool { return s.Stats().Cancelled >= 1 })
		assert.Equal(t, uint64(1), s.Stats().Cancelled)
	})

	t.Run("a completion that arrives while the cancelling step runs is dropped", func(t *testing.T) {
		calls := make(chan sched.Call, 1)
		s := newScheduler(t, sched.WithHandler(cmdTest, func(c sched.Call) error {
			calls <- c
			return nil
		}))
		inStep, completed := make(chan struct{}), make(chan struct{})
		p := &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
			switch n {
			case 0:
				out.Yield(1, cmdTest, nil)
			case 1:
				close(inStep)
				<-completed // the completion is queued now, behind this step
				out.Cancel(1)
				out.Sleep(2, 0)
			default:
				if _, ok := completionOf(evs, 2); ok {
					out.Done(payload.Payload{})
				}
			}
			return nil
		}}
		h := submit(t, s, p)
		c := receive(t, calls, "the call")
		require.NoError(t, s.Tell(h.PID(), "cancel"))
		receive(t, inStep, "the cancelling step")
		require.NoError(t, c.Complete("raced", nil), "completed before the cancel took effect")
		close(completed)
		_, err := waitEnd(t, s, h)
		require.NoError(t, err)
		for _, ev := range p.EventsOf(sched.EventYieldComplete) {
			assert.Equal(t, uint64(2), ev.Tag, "the cancelled yield's completion was read")
		}
	})

	t.Run("a monitor stops watching; a spawn-await stops waiting", func(t *testing.T) {
		s := newScheduler(t)
		target := submit(t, s, &probe{step: untilCancel})
		child := &probe{step: untilMessage}
		w := &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
			switch n {
			case 0:
				out.Monitor(1, target.PID())
				out.SpawnAwait(2, child, "run", nil)
			case 1:
				out.Cancel(1)
				out.Cancel(2)
				out.Sleep(3, 0)
			default:
				if _, ok := completionOf(evs, 3); ok {
					out.Done(payload.Payload{})
				}
			}
			return nil
		}}
		h := submit(t, s, w)
		waitState(t, s, h.PID(), sched.StateBlocked)
		require.NoError(t, s.Tell(h.PID(), "cancel"))
		_, err := waitEnd(t, s, h)
		require.NoError(t, err)
		require.NoError(t, s.Terminate(target.PID()))
		_, err = waitEnd(t, s, target)
		require.NoError(t, err)
		for _, ev := range w.EventsOf(sched.EventYieldComplete) {
			assert.Equal(t, uint64(3), ev.Tag, "only the sleep completed")
		}
		assert.Zero(t, child.Closes(), "the child runs on")
		require.Len(t, s.Processes(), 1)
		require.NoError(t, s.Tell(s.Processes()[0].PID, "end"))
		eventually(t, "the child's end", func() bool { return child.Closes() == 1 })
	})

	t.Run("a tag that is not pending: nothing happens", func(t *testing.T) {
		s := newScheduler(t)
		p := &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
			switch n {
			case 0:
				out.Sleep(1, time.Hour)
				out.Cancel(9) // never yielded
				out.Continue()
			case 1:
				out.Cancel(1)
				out.Cancel(1) // no longer pending
				out.Sleep(2, 0)
			default:
				if _, ok := completionOf(evs, 2); ok {
					out.Done(payload.Payload{})
				}
			}
			return nil
		}}
		h := submit(t, s, p)
		_, err := waitEnd(t, s, h)
		require.NoError(t, err)
		for _, ev := range p.EventsOf(sched.EventYieldComplete) {
			assert.Equal(t, uint64(2), ev.Tag, "only the second sleep completed")
		}
		eventually(t, "the cancel counted", func() bool { return s.Stats().Cancelled >= 1 })
		assert.Equal(t, uint64(1), s.Stats().Cancelled, "only the pending yield's cancel counts")
		assert.Zero(t, s.Stats().Timers)
	})

	t.Run("a request stops waiting; its answer is a late reply", func(t *testing.T) {
		s := newScheduler(t)
		requests := make(chan sched.Request, 1)
		srv := submit(t, s, &probe{step: relayRequests(requests)})
		asker := submit(t, s, &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
			switch n {
			case 0:
				out.Request(1, srv.PID(), "q")
			case 1:
				out.Cancel(1)
			}
			if hasCancel(evs) {
				out.Done(payload.Payload{})
			}
			return nil
		}})
		req := receive(t, requests, "the request")
		require.NoError(t, s.Tell(asker.PID(), "cancel"))
		eventually(t, "the cancel", func() bool { return s.Stats().Cancelled == 1 })
		assert.ErrorIs(t, s.Reply(req.ReplyTo, "late", nil), sched.ErrYieldNotPending)
		assert.Equal(t, uint64(1), s.Stats().DeadLetters.LateReplies)
		require.NoError(t, s.Terminate(asker.PID()))
	})
}

// TestCancelRacingCompletion: a completion racing the cancel of its yield
// is either read before the cancel (in the batch of the step that wrote
// it) or never; no completion of the tag is read after that step.
func TestCancelRacingCompletion(t *testing.T) {
	calls := make(chan sched.Call, 1)
	s := newScheduler(t, sched.WithHandler(cmdTest, func(c sched.Call) error {
		calls <- c
		return nil
	}))
	for i := range 300 {
		cancelStep := -1
		var mu sync.Mutex
		p := &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
			switch n {
			case 0:
				out.Yield(1, cmdTest, nil)
			case 1:
				mu.Lock()
				cancelStep = n
				mu.Unlock()
				out.Cancel(1)
				out.Sleep(2, 0)
			default:
				if _, ok := completionOf(evs, 2); ok {
					out.Done(payload.Payload{})
				}
			}
			return nil
		}}
		h := submit(t, s, p)
		c := receive(t, calls, "the call")
		var wg sync.WaitGroup
		wg.Go(func() { _ = c.Complete(i, nil) })
		wg.Go(func() { _ = s.Tell(h.PID(), "cancel") })
		wg.Wait()
		_, err := waitEnd(t, s, h)
		require.NoError(t, err)
		for step, batch := range p.Batches() {
			mu.Lock()
			after := cancelStep >= 0 && step > cancelStep
			mu.Unlock()
			if _, ok := completionOf(batch, 1); ok && after {
				t.Fatalf("iteration %d: the cancelled yield's completion was read at step %d, after the cancel at step %d", i, step, cancelStep)
			}
		}
	}
}

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

func TestHandleRegistration(t *testing.T) {
	h := func(sched.Call) error { return nil }
	tests := []struct {
		name string
		cmd  sched.CommandID
		h    sched.Handler
		want error // nil: accepted
	}{
		{"zero", 0, h, sched.ErrInvalidCommand},
		{"reserved 1", sched.CommandID(1), h, sched.ErrInvalidCommand},
		{"reserved 4", sched.CommandID(4), h, sched.ErrInvalidCommand},
		{"reserved 15", sched.FirstUserCommand - 1, h, sched.ErrInvalidCommand},
		{"last reserved", sched.FirstUserCommand - 1, h, sched.ErrInvalidCommand},
		{"nil handler", sched.FirstUserCommand, nil, sched.ErrInvalidCommand},
		{"huge", 1 << 30, h, sched.ErrInvalidCommand},
		{"past the last", 1<<16 + 1, h, sched.ErrInvalidCommand},
		{"first user", sched.FirstUserCommand, h, nil},
		{"last user", 1 << 16, h, nil},
		{"another user", sched.FirstUserCommand + 100, h, nil},
	}
	s := newScheduler(t)
	for _, tt := range tests {
		t.Run("Handle/"+tt.name, func(t *testing.T) {
			err := s.SetHandler(tt.cmd, tt.h)
			if tt.want == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, tt.want)
			}
		})
		t.Run("WithHandler/"+tt.name, func(t *testing.T) {
			s2, err := sched.New(sched.WithWorkers(1), sched.WithHandler(tt.cmd, tt.h))
			if tt.want == nil {
				require.NoError(t, err)
				require.NoError(t, s2.Shutdown(context.Background()))
			} else {
				require.ErrorIs(t, err, tt.want)
				require.ErrorIs(t, err, sched.ErrInvalidOption, "New's error for a bad option")
				require.Nil(t, s2)
			}
		})
	}

	// A rejected registration leaves the built-in commands working.
	p := &probe{step: yieldOnce(1, func(out *sched.StepOutput) { out.Sleep(1, 0) })}
	hd := submit(t, s, p)
	_, err := waitEnd(t, s, hd)
	require.NoError(t, err)
}

// TestClaimHandler: a claimed command keeps its handler: a later
// SetHandler or ClaimHandler for it fails with ErrCommandTaken, and so
// does a claim of a command that has a handler already, which keeps
// it. The claim checks what SetHandler checks.
func TestClaimHandler(t *testing.T) {
	answer := func(v string) sched.Handler {
		return func(c sched.Call) error { return c.Complete(v, nil) }
	}
	s := newScheduler(t, sched.WithHandler(cmdTest, answer("given to New")))
	// yields returns what a yield of cmd completes with.
	yields := func(cmd sched.CommandID) any {
		t.Helper()
		h := submit(t, s, &probe{step: yieldOnce(1, func(out *sched.StepOutput) { out.Yield(1, cmd, nil) })})
		res, err := waitEnd(t, s, h)
		require.NoError(t, err)
		return res.Value()
	}

	require.ErrorIs(t, s.ClaimHandler(cmdTest, answer("claimed")), sched.ErrCommandTaken, "a command with a handler from New")
	assert.Equal(t, "given to New", yields(cmdTest), "the refused claim changed nothing")
	require.NoError(t, s.SetHandler(cmdTest, answer("set")), "an unclaimed command may be replaced")

	require.NoError(t, s.ClaimHandler(cmdTest2, answer("claimed")))
	require.ErrorIs(t, s.SetHandler(cmdTest2, answer("set")), sched.ErrCommandTaken)
	require.ErrorIs(t, s.ClaimHandler(cmdTest2, answer("claimed again")), sched.ErrCommandTaken)
	assert.Equal(t, "claimed", yields(cmdTest2), "the claimed handler stays")

	require.NoError(t, s.SetHandler(cmdTest2+1, answer("set")))
	require.ErrorIs(t, s.ClaimHandler(cmdTest2+1, answer("claimed")), sched.ErrCommandTaken, "a command with a handler from SetHandler")
	assert.Equal(t, "set", yields(cmdTest2+1))

	require.ErrorIs(t, s.ClaimHandler(sched.FirstUserCommand-1, answer("x")), sched.ErrInvalidCommand)
	require.ErrorIs(t, s.ClaimHandler(cmdTest2+2, nil), sched.ErrInvalidCommand)
	require.NoError(t, s.SetHandler(cmdTest2+2, answer("set")), "a refused claim claims nothing")
	require.NoError(t, s.Shutdown(context.Background()))
	require.ErrorIs(t, s.ClaimHandler(cmdTest2+3, answer("x")), sched.ErrClosed)
}

func TestCompleteFrom(t *testing.T) {
	calls := make(chan sched.Call, 1)
	s := newScheduler(t, sched.WithHandler(cmdTest, func(c sched.Call) error {
		calls <- c
		return nil
	}))
	p := &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
		if n == 0 {
			out.Yield(1, cmdTest, nil)
		}
		if ev, ok := completionOf(evs, 1); ok {
			out.Done(payload.Of(ev))
		}
		return nil
	}}
	h := submit(t, s, p)
	from := relay.PID{Node: 7, ID: 9}
	require.NoError(t, receive(t, calls, "the call").Completion().CompleteFrom(from, "x", nil))
	res, err := waitEnd(t, s, h)
	require.NoError(t, err)
	ev := res.Value().(sched.Event)
	assert.Equal(t, from, ev.From)
	assert.Equal(t, "x", ev.Data)
}

// TestSpawnsOfOneStepFreeTagsInOrder: the spawns of one step are carried
// out in order, so a tag that an earlier spawn of the same step freed can
// be used again by a later one: a Spawn completes at once, and so does a
// SpawnAwait whose child fails Init. A tag still outstanding is a
// duplicate, as for any yield. One worker: with two, the other could
// steal the first child of tag 7 and end it before the second spawn of
// that tag is carried out, which would free the tag first.
func TestSpawnsOfOneStepFreeTagsInOrder(t *testing.T) {
	initErr := testError("init failed")
	failing := &probe{init: func(context.Context, string, payload.Payloads) error { return initErr }}
	p := awaiter(7, func(out *sched.StepOutput) {
		for range 3 {
			out.Spawn(5, oneStep, "run", nil)
		}
		out.SpawnAwait(6, failing, "run", nil)
		out.SpawnAwait(6, oneStep, "run", nil)
		out.SpawnAwait(7, oneStep, "run", nil)
		out.SpawnAwait(7, oneStep, "run", nil)
	})
	s := newScheduler(t, sched.WithWorkers(1))
	_, err := waitEnd(t, s, submit(t, s, p))
	require.NoError(t, err)

	byTag := map[uint64][]sched.Event{}
	for _, ev := range p.EventsOf(sched.EventYieldComplete) {
		byTag[ev.Tag] = append(byTag[ev.Tag], ev)
	}
	require.Len(t, byTag[5], 3, "every Spawn with tag 5 started its child")
	children := map[relay.PID]bool{}
	for _, ev := range byTag[5] {
		require.NoError(t, ev.Error)
		require.NotZero(t, ev.From, "a Spawn names its child")
		children[ev.From] = true
	}
	require.Len(t, children, 3, "three different children")

	require.Len(t, byTag[6], 2)
	require.ErrorIs(t, byTag[6][0].Error, sched.ErrInit, "the first child of tag 6 fails Init")
	require.NoError(t, byTag[6][1].Error, "the second child of tag 6 ran: the failure freed the tag")

	require.Len(t, byTag[7], 2)
	var dup, ran int
	for _, ev := range byTag[7] {
		if errors.Is(ev.Error, sched.ErrDuplicateTag) {
			dup++
		} else if ev.Error == nil {
			ran++
		}
	}
	require.Equal(t, [2]int{1, 1}, [2]int{dup, ran}, "tag 7: one child ran, one duplicate")
}

// TestSpawnRunOutcomes: a step that writes several spawns in a row gets,
// for each, what the spawn would get alone, in order: a tag outstanding
// from an earlier yield is a duplicate and its child is never
// initialised; a nil process and an empty method fail; a SpawnAwait
// whose child fails Init completes with ErrInit and frees its tag for
// the next spawn of the step; the rest start, and every count in Stats
// is exact. Run without a process limit, where the spawns of a step are
// admitted and registered together; with a loose one, where they go one
// at a time, with the same outcomes; and with a tight one, where the
// place a refused or failed child took is free again for the next spawn
// of the step, and the spawns past the limit are rejected.
func TestSpawnRunOutcomes(t *testing.T) {
	for _, c := range []struct {
		limit            int
		dispatched, ends []string
		submitted, ended uint64
		rejected         int
	}{
		{limit: 0, dispatched: []string{"1:duplicate", "2:nil", "3:ok", "4:init", "5:empty", "6:duplicate"}, ends: []string{"4:ok", "6:ok"}, submitted: 4},
		{limit: 100, dispatched: []string{"1:duplicate", "2:nil", "3:ok", "4:init", "5:empty", "6:duplicate"}, ends: []string{"4:ok", "6:ok"}, submitted: 4},
		// The parent, the Spawn of tag 3 (queued, not yet run) and the
		// SpawnAwait of tag 4 fill the three places.
		{limit: 3, dispatched: []string{"1:duplicate", "2:nil", "3:ok", "4:init", "5:empty", "6:limit", "6:limit"}, ends: []string{"4:ok"}, submitted: 3, rejected: 2},
	} {
		t.Run(fmt.Sprintf("limit=%d", c.limit), func(t *testing.T) {
			initErr := testError("init failed")
			failing := &probe{init: func(context.Context, string, payload.Payloads) error { return initErr }}
			dup := &probe{}
			want := len(c.dispatched) + len(c.ends)
			p := &probe{step: func(p *probe, n int, _ []sched.Event, out *sched.StepOutput) error {
				if n == 0 {
					out.Sleep(1, time.Hour)            // holds tag 1
					out.SpawnAwait(1, dup, "run", nil) // a duplicate
					out.SpawnAwait(2, nil, "run", nil) // nil process
					out.Spawn(3, oneStep, "run", nil)
					out.SpawnAwait(4, failing, "run", nil)
					out.SpawnAwait(4, oneStep, "run", nil) // the failed Init freed tag 4
					out.Spawn(5, oneStep, "", nil)         // empty method
					out.SpawnAwait(6, oneStep, "run", nil)
					out.Spawn(6, oneStep, "run", nil) // 6 is outstanding, unless the spawn before failed
					return nil
				}
				if len(p.EventsOf(sched.EventYieldComplete)) == want {
					out.Cancel(1)
					out.Done(payload.Payload{})
				}
				return nil
			}}
			opts := []sched.Option{sched.WithWorkers(1)}
			if c.limit > 0 {
				opts = append(opts, sched.WithMaxProcesses(c.limit))
			}
			s := newScheduler(t, opts...)
			_, err := waitEnd(t, s, submit(t, s, p))
			require.NoError(t, err)

			var got []string
			for _, ev := range p.EventsOf(sched.EventYieldComplete) {
				what := "ok"
				switch {
				case errors.Is(ev.Error, sched.ErrDuplicateTag):
					what = "duplicate"
				case errors.Is(ev.Error, sched.ErrNilProcess):
					what = "nil"
				case errors.Is(ev.Error, sched.ErrEmptyMethod):
					what = "empty"
				case errors.Is(ev.Error, initErr):
					what = "init"
				case errors.Is(ev.Error, sched.ErrTooManyProcesses):
					what = "limit"
				case ev.Error != nil:
					what = ev.Error.Error()
				}
				got = append(got, fmt.Sprintf("%d:%s", ev.Tag, what))
			}
			// The events of the step's own dispatch come in the order of
			// the yields; the awaited children's ends come after it, in
			// the order they ran.
			require.Len(t, got, want)
			require.Equal(t, c.dispatched, got[:len(c.dispatched)])
			require.ElementsMatch(t, c.ends, got[len(c.dispatched):])
			assert.Zero(t, dup.Inits(), "the duplicate's child was initialised")
			assert.Equal(t, 1, failing.Inits())

			eventually(t, "every process to end", func() bool { return s.Stats().Processes.Live == 0 })
			st := s.Stats().Processes
			assert.Equal(t, c.submitted, st.Submitted, "submitted")
			assert.Equal(t, uint64(1), st.InitFailed, "Init failed")
			assert.Equal(t, uint64(c.rejected), st.Rejected, "rejected")
			assert.Equal(t, c.submitted, st.Ended, "ended")
		})
	}
}

// TestSpawnRunTags: the spawns of a step, carried out together, get the
// same tags checked as one at a time would: a tag pending from an earlier
// yield, or repeated within the step, is a duplicate, whatever order the
// tags come in, and a run longer than the pending slice holds moves to
// the maps without losing one. (Tags rising above every pending one are
// registered without a search for them: these cases take that path and
// leave it at each place it ends.)
func TestSpawnRunTags(t *testing.T) {
	rising := func(from, n int) []uint64 {
		var tags []uint64
		for i := range n {
			tags = append(tags, uint64(from+i))
		}
		return tags
	}
	for _, c := range []struct {
		name  string
		sleep uint64 // a Sleep's tag yielded first, pending throughout; 0: none
		tags  []uint64
		dups  []uint64 // the tags whose spawn is a duplicate
	}{
		{name: "rising", tags: rising(1, 5)},
		{name: "rising from zero", tags: rising(0, 5)},
		{name: "falling", tags: []uint64{5, 4, 3, 2, 1}},
		{name: "repeated", tags: []uint64{1, 2, 2, 3}, dups: []uint64{2}},
		{name: "repeated after a fall", tags: []uint64{3, 1, 2, 3}, dups: []uint64{3}},
		{name: "equal to a pending tag", sleep: 10, tags: []uint64{11, 10, 12}, dups: []uint64{10}},
		{name: "first equal to a pending tag", sleep: 10, tags: []uint64{10, 11}, dups: []uint64{10}},
		{name: "below a pending tag", sleep: 100, tags: []uint64{1, 2, 3}},
		{name: "more than the slice holds", tags: rising(1, 40)},
		{name: "more than the slice holds, repeated at the end", tags: append(rising(1, 40), 40), dups: []uint64{40}},
	} {
		t.Run(c.name, func(t *testing.T) {
			want := map[string]int{}
			for _, tag := range c.tags {
				want[fmt.Sprintf("%d:ok", tag)]++
			}
			for _, tag := range c.dups {
				want[fmt.Sprintf("%d:ok", tag)]--
				want[fmt.Sprintf("%d:duplicate", tag)]++
			}
			p := &probe{step: func(p *probe, n int, _ []sched.Event, out *sched.StepOutput) error {
				if n == 0 {
					if c.sleep != 0 {
						out.Sleep(c.sleep, time.Hour)
					}
					for _, tag := range c.tags {
						out.SpawnAwait(tag, oneStep, "run", nil)
					}
					return nil
				}
				if len(p.EventsOf(sched.EventYieldComplete)) == len(c.tags) {
					if c.sleep != 0 {
						out.Cancel(c.sleep)
					}
					out.Done(payload.Payload{})
				}
				return nil
			}}
			s := newScheduler(t, sched.WithWorkers(1))
			_, err := waitEnd(t, s, submit(t, s, p))
			require.NoError(t, err)
			got := map[string]int{}
			for _, ev := range p.EventsOf(sched.EventYieldComplete) {
				what := "ok"
				if errors.Is(ev.Error, sched.ErrDuplicateTag) {
					what = "duplicate"
				} else if ev.Error != nil {
					what = ev.Error.Error()
				}
				got[fmt.Sprintf("%d:%s", ev.Tag, what)]++
			}
			for k, v := range want {
				if v == 0 {
					delete(want, k)
				}
			}
			assert.Equal(t, want, got)
		})
	}
}

// TestAwaitedChildAfterCancel: a SpawnAwait yield that was cancelled and
// whose tag was yielded again by a second SpawnAwait is completed by the
// second child only; the first child's end finds its own yield gone.
func TestAwaitedChildAfterCancel(t *testing.T) {
	s := newScheduler(t)
	first, second := &probe{step: untilMessage}, &probe{step: untilMessage}
	swapped := make(chan struct{})
	p := &probe{step: yieldAgainAfterCancel(
		func(out *sched.StepOutput) { out.SpawnAwait(1, first, "run", nil) },
		func(out *sched.StepOutput) { out.SpawnAwait(1, second, "run", nil) },
		swapped)}
	h := submit(t, s, p)
	eventually(t, "the first child to run", func() bool { return first.Steps() > 0 })
	require.NoError(t, s.Tell(h.PID(), "swap"))
	receive(t, swapped, "the step that swaps the children")
	eventually(t, "the second child to run", func() bool { return second.Steps() > 0 })

	firstPID, _ := sched.Self(first.Ctx())
	secondPID, _ := sched.Self(second.Ctx())
	require.NoError(t, s.Tell(firstPID, "first"))
	eventually(t, "the first child to end", func() bool { return first.Closes() > 0 })
	require.NoError(t, s.Tell(secondPID, "second"))
	res, err := waitEnd(t, s, h)
	require.NoError(t, err)
	ev := res.Value().(sched.Event)
	assert.Equal(t, secondPID, ev.From, "the completion names the second child")
	assert.Equal(t, "second", ev.Data, "and carries its result")
	assert.Len(t, p.EventsOf(sched.EventYieldComplete), 1, "one completion of tag 1 in all")
}

// TestRefusedSpawnStartsNothing: a spawn whose yield is refused — its
// tag is outstanding, or the deadline the step gave it has passed —
// never initialises its child and gives back what starting it took: the
// process is not counted live, and its place under WithMaxProcesses is
// free for the next spawn.
func TestRefusedSpawnStartsNothing(t *testing.T) {
	for _, await := range []bool{false, true} {
		t.Run(map[bool]string{false: "Spawn", true: "SpawnAwait"}[await], func(t *testing.T) {
			spawn := func(out *sched.StepOutput, tag uint64, child sched.Process) {
				if await {
					out.SpawnAwait(tag, child, "run", nil)
				} else {
					out.Spawn(tag, child, "run", nil)
				}
			}
			// The limit leaves room for the parent and one child, held,
			// spawned after the two refused ones.
			s := newScheduler(t, sched.WithMaxProcesses(2))
			dup, late, held := &probe{step: untilMessage}, &probe{step: untilMessage}, &probe{step: untilMessage}
			p := &probe{step: func(p *probe, n int, _ []sched.Event, out *sched.StepOutput) error {
				if n == 0 {
					out.Sleep(1, time.Hour) // holds tag 1
					spawn(out, 1, dup)
					spawn(out, 2, late)
					out.Timeout(2, 0)
					spawn(out, 3, held)
					return nil
				}
				out.Cancel(1)
				out.Done(payload.Payload{})
				return nil
			}}
			h := submit(t, s, p)
			_, err := waitEnd(t, s, h)
			require.NoError(t, err)
			eventually(t, "held to run", func() bool { return held.Steps() > 0 })
			eventually(t, "held alone to be live", func() bool { return s.Stats().Processes.Live == 1 })

			byTag := map[uint64]error{}
			for _, ev := range p.EventsOf(sched.EventYieldComplete) {
				byTag[ev.Tag] = ev.Error
			}
			assert.ErrorIs(t, byTag[1], sched.ErrDuplicateTag)
			assert.ErrorIs(t, byTag[2], sched.ErrTimeout)
			assert.Zero(t, dup.Inits(), "the duplicate's child was initialised")
			assert.Zero(t, late.Inits(), "the late spawn's child was initialised")

			pid, ok := sched.Self(held.Ctx())
			require.True(t, ok)
			require.NoError(t, s.Tell(pid, "end"))
			eventually(t, "held to end", func() bool { return held.Closes() > 0 })
			eventually(t, "no process live", func() bool { return s.Stats().Processes.Live == 0 })
		})
	}
}

// TestAwaitedChildrenOneStep: a parent whose awaited children run one
// after another on its worker is stepped once for the ends of those
// queued together, not once for each: the worker runs the next child
// before the parent while the parent waits for it. (Race builds vary
// the scheduling choices, and then only show that some ends were
// stepped together.)
func TestAwaitedChildrenOneStep(t *testing.T) {
	const children = 10
	p := awaiter(children, func(out *sched.StepOutput) {
		for i := range children {
			out.SpawnAwait(uint64(i), oneStep, "run", nil)
		}
	})
	s := newScheduler(t, sched.WithWorkers(1))
	_, err := waitEnd(t, s, submit(t, s, p))
	require.NoError(t, err)
	require.Len(t, p.EventsOf(sched.EventYieldComplete), children)
	if raceEnabled {
		assert.Less(t, p.Steps(), 1+children, "steps of the parent")
	} else {
		assert.Equal(t, 2, p.Steps(), "steps of the parent: the spawns, then every end at once")
	}
}

// TestAwaitedChildrenOfTwoSteps: a parent whose two steps each spawned
// awaited children, all queued on its worker at once, gets every child's
// end once, and is stepped once for all six: the worker runs every child
// before the parent, the first step's under the second's included.
func TestAwaitedChildrenOfTwoSteps(t *testing.T) {
	const perStep = 3
	var ran atomic.Int32
	child := func() *probe {
		return &probe{step: func(_ *probe, _ int, _ []sched.Event, out *sched.StepOutput) error {
			ran.Add(1)
			out.Done(payload.Payload{})
			return nil
		}}
	}
	p := &probe{step: func(p *probe, n int, _ []sched.Event, out *sched.StepOutput) error {
		switch n {
		case 0, 1:
			for i := range perStep {
				out.SpawnAwait(uint64(n*perStep+i+1), child(), "run", nil)
			}
			if n == 0 {
				out.Tell(out.Self(), "spawn more") // a second step before any child runs
			}
			return nil
		}
		if len(p.EventsOf(sched.EventYieldComplete)) == 2*perStep {
			out.Done(payload.Payload{})
		}
		return nil
	}}
	s := newScheduler(t, sched.WithWorkers(1))
	_, err := waitEnd(t, s, submit(t, s, p))
	require.NoError(t, err)
	assert.ElementsMatch(t, []uint64{1, 2, 3, 4, 5, 6}, completedTags(t, p))
	assert.Equal(t, int32(2*perStep), ran.Load())
	if !raceEnabled {
		assert.Equal(t, 3, p.Steps(), "steps of the parent: two that spawn, one for the six ends")
	}
}

// TestAwaitedGrandchildrenOneStep: a parent whose second child, run
// after the first has ended, starts children of its own, is still
// stepped once for both ends: the worker puts the parent aside, claimed
// with the first end, while the grandchildren and the second child run,
// rather than step it for the first end and again for the second.
func TestAwaitedGrandchildrenOneStep(t *testing.T) {
	middle := awaiter(2, func(out *sched.StepOutput) {
		out.SpawnAwait(11, oneStep, "run", nil)
		out.SpawnAwait(12, oneStep, "run", nil)
	})
	parent := awaiter(2, func(out *sched.StepOutput) {
		out.SpawnAwait(1, middle, "run", nil)  // runs second, and queues its own children
		out.SpawnAwait(2, oneStep, "run", nil) // runs first, and holds the parent
	})
	s := newScheduler(t, sched.WithWorkers(1))
	_, err := waitEnd(t, s, submit(t, s, parent))
	require.NoError(t, err)
	assert.ElementsMatch(t, []uint64{1, 2}, completedTags(t, parent))
	assert.Len(t, middle.EventsOf(sched.EventYieldComplete), 2)
	if raceEnabled {
		assert.LessOrEqual(t, parent.Steps(), 3, "steps of the parent")
	} else {
		assert.Equal(t, 2, parent.Steps(), "steps of the parent: the spawns, then both ends at once")
		assert.Equal(t, 2, middle.Steps(), "steps of the middle child")
	}
}

// TestAwaitedParentAsideStepsInTime: a parent put aside while a child's
// children run (see TestAwaitedGrandchildrenOneStep) waits a bounded
// number of the worker's turns, not for the whole of that child's work:
// with a thousand grandchildren queued, it steps for the end it holds
// before they have all run.
func TestAwaitedParentAsideStepsInTime(t *testing.T) {
	const grandchildren = 1000
	var ended atomic.Int32
	leaf := stepFunc(func(_ []sched.Event, out *sched.StepOutput) error {
		ended.Add(1)
		out.Done(payload.Payload{})
		return nil
	})
	wide := awaiter(grandchildren, func(out *sched.StepOutput) {
		for i := range grandchildren {
			out.SpawnAwait(uint64(i+1), leaf, "run", nil)
		}
	})
	seen := int32(-1) // grandchildren ended when the parent steps for the first end
	parent := &probe{step: func(p *probe, n int, _ []sched.Event, out *sched.StepOutput) error {
		switch {
		case n == 0:
			out.SpawnAwait(1, wide, "run", nil)    // runs second
			out.SpawnAwait(2, oneStep, "run", nil) // runs first, and holds the parent
		case seen < 0:
			seen = ended.Load()
		}
		if len(p.EventsOf(sched.EventYieldComplete)) == 2 {
			out.Done(payload.Payload{})
		}
		return nil
	}}
	s := newScheduler(t, sched.WithWorkers(1))
	_, err := waitEnd(t, s, submit(t, s, parent))
	require.NoError(t, err)
	require.Equal(t, int32(grandchildren), ended.Load())
	require.GreaterOrEqual(t, seen, int32(0), "the parent stepped for the first end on its own")
	assert.Less(t, seen, int32(grandchildren), "grandchildren ended before the parent stepped for the first end")
}

// TestAwaitedChildEndAfterAMessageWhileAside: a parent put aside (see
// TestAwaitedGrandchildrenOneStep) reads its events in the order they
// arrived: a grandchild tells it a message while it is aside, and the
// end of the child that started the grandchild, which comes after, is
// read after the message, not with the end it holds.
func TestAwaitedChildEndAfterAMessageWhileAside(t *testing.T) {
	parent := awaiter(2, func(out *sched.StepOutput) {
		self := out.Self()
		teller := stepFunc(func(_ []sched.Event, out *sched.StepOutput) error {
			out.Tell(self, "from the grandchild")
			out.Done(payload.Payload{})
			return nil
		})
		middle := awaiter(1, func(out *sched.StepOutput) {
			out.SpawnAwait(11, teller, "run", nil)
		})
		out.SpawnAwait(1, middle, "run", nil)  // runs second
		out.SpawnAwait(2, oneStep, "run", nil) // runs first, and holds the parent
	})
	s := newScheduler(t, sched.WithWorkers(1))
	_, err := waitEnd(t, s, submit(t, s, parent))
	require.NoError(t, err)
	assert.Equal(t, []string{"end 2", "message", "end 1"}, messagesAndEnds(parent))
}

// TestAwaitedChildEndAsideAndCompleteYield: a SpawnAwait yield completes
// once when its child's end, kept for a parent put aside (see
// TestAwaitedGrandchildrenOneStep), and a CompleteYield of its tag race:
// a sibling's step calls CompleteYield after the child ended and before
// the parent runs.
func TestAwaitedChildEndAsideAndCompleteYield(t *testing.T) {
	middle := &probe{step: func(_ *probe, n int, _ []sched.Event, out *sched.StepOutput) error {
		if n == 0 {
			out.SpawnAwait(11, oneStep, "run", nil)
		} else {
			out.Done(payload.Of("from the child"))
		}
		return nil
	}}
	raceEndAndCompleteYield(t, middle) // middle starts a child of its own
}

// TestForkJoinTreeStepsParentsOnce: in a tree of processes that each
// await two children (fib(14) here), run on one worker, almost every
// parent steps twice, once to start its children and once for both
// their ends, however deep the tree under the child that runs second:
// fewer than one step in twenty-five calls more than that (one in forty
// here). Each parent whose second child's run queued children of its
// own would step once more if it were not put aside (see
// TestAwaitedGrandchildrenOneStep), a third of the calls more here; and
// a parent that the worker would not run next, sent through its next
// slot rather than put aside, would step once more too, one in
// nineteen calls more.
func TestForkJoinTreeStepsParentsOnce(t *testing.T) {
	var steps, calls atomic.Int64
	var prog progress
	s := newScheduler(t, sched.WithWorkers(1))
	res, err := waitEnd(t, s, submit(t, s, &fibProc{n: 14, spawned: &calls, steps: &steps, prog: &prog}))
	require.NoError(t, err)
	require.Equal(t, payload.Of(377), res)
	n := calls.Load()
	require.Equal(t, int64(1219), n)
	least := n + n/2 // every call steps once, every parent (n/2 of them) once more
	if raceEnabled {
		// Race builds vary the scheduling choices: only a bound.
		assert.Less(t, steps.Load(), 2*n, "steps of the tree")
	} else {
		assert.Less(t, steps.Load(), least+n/25, "steps of the tree")
	}
}

// TestAwaitedChildEndAfterItsMessage: a parent stepped once for the ends
// of several children (see TestAwaitedChildrenOneStep) still reads its
// events in the order they arrived: a child that tells the parent a
// message and then ends is read message first, even though the parent
// holds the end of a sibling that ended before.
func TestAwaitedChildEndAfterItsMessage(t *testing.T) {
	parent := awaiter(2, func(out *sched.StepOutput) {
		self := out.Self()
		teller := &probe{step: func(_ *probe, _ int, _ []sched.Event, out *sched.StepOutput) error {
			out.Tell(self, "from the first child")
			out.Done(payload.Payload{})
			return nil
		}}
		out.SpawnAwait(1, teller, "run", nil)
		out.SpawnAwait(2, oneStep, "run", nil) // queued last, runs first
	})
	s := newScheduler(t, sched.WithWorkers(1))
	_, err := waitEnd(t, s, submit(t, s, parent))
	require.NoError(t, err)
	assert.Equal(t, []string{"end 2", "message", "end 1"}, messagesAndEnds(parent))
}

// TestAwaitedChildEndBeatsALaterTimer: a child that ends before the
// timer of its SpawnAwait fires completes the yield with its result, even
// when its parent, held on the worker for a run of siblings (see
// TestAwaitedChildrenOneStep), steps only after the timer has fired. The
// child's step lets the deadline pass before it ends; with one worker no
// timer fires during a step, and the siblings queued under it give the
// worker more turns than it lets pass between two looks at its timers, so
// the timer fires before the parent runs.
func TestAwaitedChildEndBeatsALaterTimer(t *testing.T) {
	const (
		d        = 300 * time.Millisecond
		quick    = 3  // on top: the first of them to end holds the parent
		siblings = 40 // under the timed child: run after it, before the parent
	)
	var deadline time.Time
	timed := &probe{step: func(_ *probe, _ int, _ []sched.Event, out *sched.StepOutput) error {
		time.Sleep(time.Until(deadline) + 20*time.Millisecond) // the race, not a wait
		out.Done(payload.Of("in time"))
		return nil
	}}
	total := 1 + quick + siblings
	parent := awaiter(total, func(out *sched.StepOutput) {
		for i := range siblings {
			out.SpawnAwait(uint64(100+i), oneStep, "run", nil)
		}
		deadline = time.Now().Add(d)
		out.SpawnAwait(1, timed, "run", nil)
		out.Timeout(1, d)
		for i := range quick {
			out.SpawnAwait(uint64(10+i), oneStep, "run", nil)
		}
	})
	s := newScheduler(t, sched.WithWorkers(1))
	_, err := waitEnd(t, s, submit(t, s, parent))
	require.NoError(t, err)
	evs := parent.EventsOf(sched.EventYieldComplete)
	require.Len(t, evs, total)
	for _, ev := range evs {
		if ev.Tag == 1 {
			require.NoError(t, ev.Error, "the timed child's end")
			assert.Equal(t, "in time", ev.Data)
		}
	}
}

// TestAwaitedChildEndAndCompleteYield: a SpawnAwait yield completes once
// when its child's end and a CompleteYield of its tag race: a sibling's
// step calls CompleteYield right after the child ended, while the
// parent is held on the worker (see TestAwaitedChildrenOneStep). Either
// may take the yield, as the child's end takes effect when the parent
// next runs; CompleteYield says which did, and the parent reads that
// one's completion and no other.
func TestAwaitedChildEndAndCompleteYield(t *testing.T) {
	raceEndAndCompleteYield(t, stepFunc(func(_ []sched.Event, out *sched.StepOutput) error {
		out.Done(payload.Of("from the child"))
		return nil
	}))
}

// messagesAndEnds lists p's messages and completions in the order it
// read them: "message" for a message, "end T" for the completion of the
// yield tagged T.
func messagesAndEnds(p *probe) []string {
	var order []string
	for _, ev := range p.Events() {
		switch ev.Type {
		case sched.EventMessage:
			order = append(order, "message")
		case sched.EventYieldComplete:
			order = append(order, fmt.Sprintf("end %d", ev.Tag))
		}
	}
	return order
}

// raceEndAndCompleteYield runs, on one worker, a parent that awaits
// three children: oneStep (tag 2) runs first and holds the parent,
// child (tag 1) second, ending with "from the child", and the third
// (tag 3) calls CompleteYield of tag 1 on the parent. Either may take
// the yield; it checks that the parent read one completion a yield, and
// for tag 1 the one that CompleteYield's answer says took it.
func raceEndAndCompleteYield(t *testing.T, child sched.Process) {
	t.Helper()
	s := newScheduler(t, sched.WithWorkers(1))
	var completeErr error
	completed := false
	parent := awaiter(3, func(out *sched.StepOutput) {
		self := out.Self()
		completer := stepFunc(func(_ []sched.Event, out *sched.StepOutput) error {
			completeErr, completed = s.CompleteYield(self, 1, "from outside", nil), true
			out.Done(payload.Payload{})
			return nil
		})
		out.SpawnAwait(3, completer, "run", nil) // runs third
		out.SpawnAwait(1, child, "run", nil)     // runs second
		out.SpawnAwait(2, oneStep, "run", nil)   // runs first, and holds the parent
	})
	_, err := waitEnd(t, s, submit(t, s, parent))
	require.NoError(t, err)
	require.True(t, completed, "the completer ran")
	var got []any
	var tags []uint64
	for _, ev := range parent.EventsOf(sched.EventYieldComplete) {
		tags = append(tags, ev.Tag)
		if ev.Tag == 1 {
			got = append(got, ev.Data)
		}
	}
	assert.ElementsMatch(t, []uint64{1, 2, 3}, tags, "one completion a yield")
	if completeErr == nil {
		assert.Equal(t, []any{"from outside"}, got)
	} else {
		require.ErrorIs(t, completeErr, sched.ErrYieldNotPending)
		assert.Equal(t, []any{"from the child"}, got)
	}
	eventually(t, "no process live", func() bool { return s.Stats().Processes.Live == 0 })
}

// awaiter returns a process that calls first in its first step, and ends
// once it has read n completions (at least n: a test that checks for
// more reads them all).
func awaiter(n int, first func(out *sched.StepOutput)) *probe {
	return &probe{step: func(p *probe, step int, _ []sched.Event, out *sched.StepOutput) error {
		if step == 0 {
			first(out)
		} else if len(p.EventsOf(sched.EventYieldComplete)) >= n {
			out.Done(payload.Payload{})
		}
		return nil
	}}
}

// completedTags returns the tags of p's yield completions in the order
// they came, failing if any of them carries an error.
func completedTags(t *testing.T, p *probe) []uint64 {
	t.Helper()
	var tags []uint64
	for _, ev := range p.EventsOf(sched.EventYieldComplete) {
		require.NoError(t, ev.Error)
		tags = append(tags, ev.Tag)
	}
	return tags
}

// TestSpawnBatchInitPanics: in a step that only spawns, whose children
// start together, a child whose Init panics fails as that spawn alone
// would (its yield completes with ErrInit and the panic, its Close runs
// once, the panic is counted), and the spawns after it are carried out
// as if it had not panicked: each in turn, in order, the rest started.
// With a process limit the spawns go one at a time, with the same
// outcomes.
func TestSpawnBatchInitPanics(t *testing.T) {
	for _, limit := range []int{0, 100} {
		t.Run(fmt.Sprintf("limit=%d", limit), func(t *testing.T) { testSpawnInitPanics(t, limit) })
	}
}

func testSpawnInitPanics(t *testing.T, limit int) {
	panicky := func() *probe {
		return &probe{init: func(context.Context, string, payload.Payloads) error { panic("no start") }}
	}
	bad := []*probe{panicky(), panicky(), panicky()}
	good := []*probe{{}, {}, {}}
	// Tags: the children in the order written; a panicking child first,
	// in the middle, twice in a row and last.
	children := []*probe{bad[0], good[0], bad[1], bad[2], good[1], good[2]}
	p := &probe{step: func(p *probe, n int, _ []sched.Event, out *sched.StepOutput) error {
		if n == 0 {
			for i, c := range children {
				if i == 4 {
					out.Spawn(uint64(i+1), c, "run", nil)
				} else {
					out.SpawnAwait(uint64(i+1), c, "run", nil)
				}
			}
			return nil
		}
		if len(p.EventsOf(sched.EventYieldComplete)) == len(children) {
			out.Done(payload.Payload{})
		}
		return nil
	}}
	for _, c := range good {
		c.step = func(_ *probe, _ int, _ []sched.Event, out *sched.StepOutput) error {
			out.Done(payload.Payload{})
			return nil
		}
	}
	opts := []sched.Option{sched.WithWorkers(1)}
	if limit > 0 {
		opts = append(opts, sched.WithMaxProcesses(limit))
	}
	s := newScheduler(t, opts...)
	_, err := waitEnd(t, s, submit(t, s, p))
	require.NoError(t, err)

	byTag := map[uint64]error{}
	for _, ev := range p.EventsOf(sched.EventYieldComplete) {
		_, seen := byTag[ev.Tag]
		require.False(t, seen, "tag %d completed twice", ev.Tag)
		byTag[ev.Tag] = ev.Error
	}
	require.Len(t, byTag, len(children))
	for i, c := range children {
		err := byTag[uint64(i+1)]
		if slices.Contains(bad, c) {
			require.ErrorIs(t, err, sched.ErrInit, "tag %d", i+1)
			var perr *sched.PanicError
			require.ErrorAs(t, err, &perr, "tag %d", i+1)
			require.Equal(t, "no start", perr.Value, "tag %d", i+1)
			require.Equal(t, 0, c.Steps(), "tag %d: a child whose Init panicked stepped", i+1)
		} else {
			require.NoError(t, err, "tag %d", i+1)
			require.Equal(t, 1, c.Steps(), "tag %d", i+1)
		}
		require.Equal(t, 1, c.Inits(), "tag %d", i+1)
		eventually(t, "the child's Close", func() bool { return c.Closes() == 1 })
	}
	eventually(t, "every process to end", func() bool { return s.Stats().Processes.Live == 0 })
	st := s.Stats().Processes
	require.Equal(t, uint64(len(bad)), st.InitFailed, "Init failed")
	require.Equal(t, uint64(len(bad)), st.Panics, "panics")
	require.Equal(t, uint64(len(good)+1), st.Submitted, "submitted: the parent and the children that started")
	require.Equal(t, st.Submitted, st.Ended, "ended")
}

// TestEventsComeInTheOrderTheyArrived: a step gets the completions in
// the order they were completed, whatever the order the yields were
// written in, and the messages between them where they came: three
// yields completed from outside in the order 3, 1, 2 with a message
// after the first, while the process is held in a step, are its next
// step's batch in that order.
func TestEventsComeInTheOrderTheyArrived(t *testing.T) {
	calls := make(chan sched.Call, 3)
	s := newScheduler(t, sched.WithHandler(cmdTest, func(c sched.Call) error {
		calls <- c
		return nil
	}))
	held, gate := make(chan struct{}), make(chan struct{})
	var release sync.Once
	open := func() { release.Do(func() { close(gate) }) }
	t.Cleanup(open) // a failure below must not leave the step held
	p := &probe{step: func(p *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
		switch {
		case n == 0:
			out.Yield(1, cmdTest, nil)
			out.Yield(2, cmdTest, nil)
			out.Yield(3, cmdTest, nil)
		case n == 1:
			close(held)
			<-gate // what follows arrives meanwhile, for one batch
		default:
			out.Done(payload.Payload{})
		}
		return nil
	}}
	h := submit(t, s, p)
	byTag := map[uint64]sched.Call{}
	for range 3 {
		c := receive(t, calls, "a handler")
		byTag[c.Tag] = c
	}
	require.NoError(t, s.Tell(h.PID(), "hold"))
	receive(t, held, "the held step")
	require.NoError(t, byTag[3].Complete(nil, nil))
	require.NoError(t, s.Tell(h.PID(), "between"))
	require.NoError(t, byTag[1].Completion().Complete(nil, nil))
	require.NoError(t, s.CompleteYield(h.PID(), 2, nil, nil))
	open()
	_, err := waitEnd(t, s, h)
	require.NoError(t, err)
	batches := p.Batches()
	require.Len(t, batches, 3, "steps")
	var got []string
	for _, ev := range batches[2] {
		if ev.Type == sched.EventMessage {
			got = append(got, ev.Data.(string))
		} else {
			got = append(got, fmt.Sprintf("end %d", ev.Tag))
		}
	}
	assert.Equal(t, []string{"end 3", "between", "end 1", "end 2"}, got, "the batch after the held step")
}

// TestClaimedParentReadsItsMailboxAtTheNextStep: a parent claimed by
// its child's end is stepped with the events it was claimed with; a
// message that reached its mailbox while it waited claimed, and a
// sibling's completion that came after that message, are its next
// step's, in the order they came. On one worker the parent spawns two
// children that run back to back; the second to run tells the parent
// from its step, before it ends.
func TestClaimedParentReadsItsMailboxAtTheNextStep(t *testing.T) {
	s := newScheduler(t, sched.WithWorkers(1))
	var parentPID atomic.Pointer[relay.PID]
	var ran atomic.Int32
	child := func() *probe {
		return &probe{step: func(_ *probe, _ int, _ []sched.Event, out *sched.StepOutput) error {
			if ran.Add(1) == 2 {
				if err := s.Tell(*parentPID.Load(), "between"); err != nil {
					return err
				}
			}
			out.Done(payload.Payload{})
			return nil
		}}
	}
	parent := &probe{step: func(p *probe, n int, _ []sched.Event, out *sched.StepOutput) error {
		if n == 0 {
			self := out.Self()
			parentPID.Store(&self)
			out.SpawnAwait(1, child(), "run", nil)
			out.SpawnAwait(2, child(), "run", nil)
			return nil
		}
		if len(p.EventsOf(sched.EventYieldComplete)) == 2 {
			out.Done(payload.Payload{})
		}
		return nil
	}}
	h := submit(t, s, parent)
	_, err := waitEnd(t, s, h)
	require.NoError(t, err)
	var got [][]string
	for _, batch := range parent.Batches()[1:] {
		var b []string
		for _, ev := range batch {
			if ev.Type == sched.EventMessage {
				b = append(b, ev.Data.(string))
			} else {
				b = append(b, "end")
			}
		}
		got = append(got, b)
	}
	assert.Equal(t, [][]string{{"end"}, {"between", "end"}}, got, "the parent's batches after its first step")
}

// TestCompletionRacedFromManyGoroutines: one Completion completed at once
// from many goroutines completes its yield once, as its doc says: one
// Complete returns nil, every other an error wrapping
// ErrYieldNotPending, and the process, alive throughout, gets one event.
func TestCompletionRacedFromManyGoroutines(t *testing.T) {
	const racers = 8
	s := newScheduler(t)
	comps := make(chan sched.Completion, 1)
	require.NoError(t, s.SetHandler(cmdTest, func(c sched.Call) error { comps <- c.Completion(); return nil }))
	events := make(chan []sched.Event, 4)
	h := submit(t, s, stepFunc(func(evs []sched.Event, out *sched.StepOutput) error {
		switch {
		case len(evs) == 0:
			out.Yield(1, cmdTest, nil)
		case hasCancel(evs):
			out.Done(payload.Payload{})
		default:
			events <- slices.Clone(evs)
		}
		return nil
	}))
	c := receive(t, comps, "the handler's Completion")
	start := make(chan struct{})
	errs := make([]error, racers)
	var wg sync.WaitGroup
	for i := range racers {
		wg.Go(func() {
			<-start
			errs[i] = c.Complete(i, nil)
		})
	}
	close(start)
	wg.Wait()
	won := 0
	for i, err := range errs {
		if err == nil {
			won++
			continue
		}
		require.ErrorIs(t, err, sched.ErrYieldNotPending, "racer %d", i)
	}
	require.Equal(t, 1, won, "Completes that returned nil")
	evs := receive(t, events, "the completion")
	require.Len(t, evs, 1, "events of the step after the race")
	require.Equal(t, sched.EventYieldComplete, evs[0].Type)
	require.NoError(t, s.Tell(h.PID(), "after"))
	evs = receive(t, events, "the message after the race")
	require.Len(t, evs, 1, "events of the next step: no second completion came")
	require.Equal(t, "after", evs[0].Data)
	require.NoError(t, s.Terminate(h.PID()))
	_, err := waitEnd(t, s, h)
	require.NoError(t, err)
}
