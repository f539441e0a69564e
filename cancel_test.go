package scheduler_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
)

func TestCancel(t *testing.T) {
	t.Run("a user command: no completion, a clear error, the call's context done", func(t *testing.T) {
		calls := make(chan sched.Call, 1)
		s := newScheduler(t, sched.WithHandler(cmdTest, func(c sched.Call) error {
			calls <- c
			return nil
		}))
		cancelled := make(chan struct{})
		p := &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
			switch n {
			case 0:
				out.Yield(1, cmdTest, nil)
			case 1: // woken by a message: cancel, and yield the tag again at once
				out.Cancel(1)
				out.Sleep(1, 0)
				close(cancelled)
			default:
				if ev, ok := completionOf(evs, 1); ok {
					out.Done(payload.Of(ev))
				}
			}
			return nil
		}}
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

	t.Run("a request stops waiting; its answer is a late reply", func(t *testing.T) {
		s := newScheduler(t)
		requests := make(chan sched.Request, 1)
		srv := submit(t, s, &probe{step: func(_ *probe, _ int, evs []sched.Event, out *sched.StepOutput) error {
			for _, ev := range evs {
				if req, ok := ev.Data.(sched.Request); ok {
					requests <- req
				}
				if ev.Type == sched.EventCancel {
					out.Done(payload.Payload{})
				}
			}
			return nil
		}})
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
