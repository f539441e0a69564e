package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
)

// poolHandler hands every call's work to the blocking pool: work waits
// for gate (if not nil), then returns the call's Arg.
func poolHandler(gate <-chan struct{}, running, peak *atomic.Int32) sched.Handler {
	return func(c sched.Call) error {
		return c.Go(func(ctx context.Context) (any, error) {
			n := running.Add(1)
			defer running.Add(-1)
			for {
				old := peak.Load()
				if n <= old || peak.CompareAndSwap(old, n) {
					break
				}
			}
			if gate != nil {
				select {
				case <-gate:
				case <-ctx.Done():
					return nil, context.Cause(ctx)
				}
			}
			return c.Arg, nil
		})
	}
}

func TestBlockingPool(t *testing.T) {
	t.Run("runs the work and completes the yield, at most size at once", func(t *testing.T) {
		gate := make(chan struct{})
		var running, peak atomic.Int32
		s := newScheduler(t, sched.WithBlockingPool(2, 100, sched.PoolWait), sched.WithHandler(cmdTest, poolHandler(gate, &running, &peak)))
		var hs []sched.Handle
		for i := range 10 {
			hs = append(hs, submit(t, s, &probe{step: yieldOnce(1, func(out *sched.StepOutput) { out.Yield(1, cmdTest, i) })}))
		}
		// Both tasks inside their work (the pool counts a task as
		// running as soon as a goroutine takes it, before its work
		// starts), and the pool's counts saying so.
		eventually(t, "two tasks running, eight queued", func() bool {
			st := s.Stats().Pool
			return running.Load() == 2 && st.Running == 2 && st.Queued == 8
		})
		close(gate)
		for i, h := range hs {
			res, err := waitEnd(t, s, h)
			require.NoError(t, err)
			assert.Equal(t, i, res.Value())
		}
		assert.Equal(t, int32(2), peak.Load(), "at most size tasks at once")
		st := s.Stats().Pool
		assert.Equal(t, uint64(10), st.Done)
		assert.Equal(t, 2, st.Size)
	})

	t.Run("a full queue rejects with PoolReject and waits with PoolWait", func(t *testing.T) {
		for _, policy := range []sched.PoolPolicy{sched.PoolReject, sched.PoolWait} {
			t.Run(policy.String(), func(t *testing.T) {
				gate := make(chan struct{})
				var running, peak atomic.Int32
				s := newScheduler(t, sched.WithBlockingPool(1, 1, policy), sched.WithHandler(cmdTest, poolHandler(gate, &running, &peak)))
				first := submit(t, s, &probe{step: yieldOnce(1, func(out *sched.StepOutput) { out.Yield(1, cmdTest, 1) })})
				eventually(t, "the first task running", func() bool { return running.Load() == 1 })
				second := submit(t, s, &probe{step: yieldOnce(1, func(out *sched.StepOutput) { out.Yield(1, cmdTest, 2) })})
				eventually(t, "the second task queued", func() bool { return s.Stats().Pool.Queued == 1 })
				third := submit(t, s, &probe{step: yieldOnce(1, func(out *sched.StepOutput) { out.Yield(1, cmdTest, 3) })})
				if policy == sched.PoolReject {
					_, err := waitEnd(t, s, third)
					require.ErrorIs(t, err, sched.ErrPoolFull)
					assert.Equal(t, uint64(1), s.Stats().Pool.Rejected)
				} else {
					eventually(t, "the third task waiting", func() bool { return s.Stats().Pool.Waiting == 1 })
				}
				close(gate)
				for _, h := range []sched.Handle{first, second} {
					_, err := waitEnd(t, s, h)
					require.NoError(t, err)
				}
				if policy == sched.PoolWait {
					res, err := waitEnd(t, s, third)
					require.NoError(t, err)
					assert.Equal(t, 3, res.Value())
				}
			})
		}
	})

	t.Run("a task PoolReject refuses leaves its yield pending", func(t *testing.T) {
		gate := make(chan struct{})
		release := sync.OnceFunc(func() { close(gate) })
		t.Cleanup(release)
		refused := make(chan error, 1)
		var running, peak atomic.Int32
		busy := poolHandler(gate, &running, &peak)
		s := newScheduler(t, sched.WithBlockingPool(1, 1, sched.PoolReject), sched.WithHandler(cmdTest, func(c sched.Call) error {
			if c.Arg != "fallback" {
				return busy(c)
			}
			err := c.Go(func(context.Context) (any, error) { return "ran", nil })
			refused <- err
			if errors.Is(err, sched.ErrPoolFull) {
				// The yield is still pending: the handler may answer
				// it another way.
				return c.Complete("answered without the pool", nil)
			}
			return err
		}))
		first := submit(t, s, &probe{step: yieldOnce(1, func(out *sched.StepOutput) { out.Yield(1, cmdTest, 1) })})
		eventually(t, "the first task running", func() bool { return running.Load() == 1 })
		second := submit(t, s, &probe{step: yieldOnce(1, func(out *sched.StepOutput) { out.Yield(1, cmdTest, 2) })})
		eventually(t, "the second task queued", func() bool { return s.Stats().Pool.Queued == 1 })
		third := submit(t, s, &probe{step: yieldOnce(1, func(out *sched.StepOutput) { out.Yield(1, cmdTest, "fallback") })})
		require.ErrorIs(t, receive(t, refused, "the refusal"), sched.ErrPoolFull)
		res, err := waitEnd(t, s, third)
		require.NoError(t, err, "the refused task's yield completed by the refusal")
		assert.Equal(t, "answered without the pool", res.Value())
		release()
		for _, h := range []sched.Handle{first, second} {
			_, err := waitEnd(t, s, h)
			require.NoError(t, err)
		}
	})

	// Tasks handed to the pool in a row, while it has goroutines to
	// spare, each get one: none of them waits, so none counts against
	// the queue, however soon the next comes after the goroutine for the
	// last was started. With size 2 and a queue of 1, three tasks given
	// at once are two running and one queued, and only a fourth is
	// refused.
	t.Run("tasks given goroutines do not fill the queue", func(t *testing.T) {
		gate := make(chan struct{})
		release := sync.OnceFunc(func() { close(gate) })
		var running, peak atomic.Int32
		gated := poolHandler(gate, &running, &peak)
		goErrs := make(chan error, 4)
		s := newScheduler(t, sched.WithBlockingPool(2, 1, sched.PoolReject), sched.WithHandler(cmdTest, func(c sched.Call) error {
			err := gated(c)
			goErrs <- err
			return err
		}))
		t.Cleanup(release) // before the scheduler's shutdown, on failure too
		var failed []error
		h := submit(t, s, &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
			if n == 0 {
				for tag := range uint64(4) {
					out.Yield(tag+1, cmdTest, tag+1) // the handlers run one after another, on the worker
				}
			}
			for _, ev := range evs {
				if ev.Type == sched.EventYieldComplete {
					failed = append(failed, ev.Error)
					if len(failed) == 4 {
						out.Done(payload.Payload{})
					}
				}
			}
			return nil
		}})
		for i := range 3 {
			require.NoError(t, receive(t, goErrs, "Call.Go's error"), "task %d of 3 given at once to a pool of 2 goroutines and a queue of 1", i+1)
		}
		require.ErrorIs(t, receive(t, goErrs, "Call.Go's error"), sched.ErrPoolFull, "the fourth task")
		release()
		_, err := waitEnd(t, s, h)
		require.NoError(t, err)
		st := s.Stats().Pool
		assert.Equal(t, uint64(3), st.Done, "tasks run")
		assert.Equal(t, uint64(1), st.Rejected, "tasks refused")
	})

	t.Run("a panic completes the yield with a PanicError", func(t *testing.T) {
		s := newScheduler(t, sched.WithHandler(cmdTest, func(c sched.Call) error {
			return c.Go(func(context.Context) (any, error) { panic("blocking boom") })
		}))
		_, err := waitEnd(t, s, submit(t, s, &probe{step: yieldOnce(1, func(out *sched.StepOutput) { out.Yield(1, cmdTest, nil) })}))
		var perr *sched.PanicError
		require.ErrorAs(t, err, &perr)
		assert.Equal(t, "blocking boom", perr.Value)
	})

	t.Run("the work's context is done once its result has completed the yield", func(t *testing.T) {
		// So work must return what it has read, not something that
		// lives on its context (rows of a query made with it, say).
		ctxs := make(chan context.Context, 1)
		s := newScheduler(t, sched.WithHandler(cmdTest, func(c sched.Call) error {
			return c.Go(func(ctx context.Context) (any, error) {
				ctxs <- ctx
				if err := ctx.Err(); err != nil {
					return nil, fmt.Errorf("done while the work ran: %w", err)
				}
				return "read", nil
			})
		}))
		got := make(chan sched.Event, 1)
		h := submit(t, s, &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
			if n == 0 {
				out.Yield(1, cmdTest, nil)
			}
			if ev, ok := completionOf(evs, 1); ok {
				got <- ev // and the process lives on, so its end cannot be what makes the context done
			}
			return untilCancel(nil, n, evs, out)
		}})
		var ev sched.Event
		select {
		case ev = <-got:
		case <-time.After(10 * time.Second):
			t.Fatal("the yield did not complete within 10s")
		}
		require.NoError(t, ev.Error)
		assert.Equal(t, "read", ev.Data)
		ctx := <-ctxs
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the work's context was not done within 10s of its result completing the yield, while the process lives")
		}
		require.NoError(t, s.Terminate(h.PID()))
		_, err := waitEnd(t, s, h)
		require.NoError(t, err)
	})

	t.Run("work for a process that ended is dropped or cancelled", func(t *testing.T) {
		gate := make(chan struct{})
		var running, peak atomic.Int32
		s := newScheduler(t, sched.WithBlockingPool(1, 10, sched.PoolWait), sched.WithHandler(cmdTest, poolHandler(gate, &running, &peak)))
		ender := func() *probe {
			return &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
				if n == 0 {
					out.Yield(1, cmdTest, nil)
				}
				if hasCancel(evs) {
					out.Done(payload.Payload{}) // ends without waiting for the work
				}
				return nil
			}}
		}
		a := submit(t, s, ender()) // runs, blocked on the gate
		eventually(t, "a's task running", func() bool { return running.Load() == 1 })
		b := submit(t, s, ender()) // queued behind it
		eventually(t, "b's task queued", func() bool { return s.Stats().Pool.Queued == 1 })
		require.NoError(t, s.Terminate(b.PID()))
		_, err := waitEnd(t, s, b)
		require.NoError(t, err)
		require.NoError(t, s.Terminate(a.PID())) // cancels a's running work through its context
		_, err = waitEnd(t, s, a)
		require.NoError(t, err)
		eventually(t, "the pool idle", func() bool { st := s.Stats().Pool; return st.Running == 0 })
		st := s.Stats().Pool
		assert.Equal(t, uint64(1), st.Skipped, "b's task never ran")
		assert.Equal(t, uint64(1), st.Done, "a's task ran and was cancelled")
	})

	t.Run("bad input", func(t *testing.T) {
		for _, opt := range []sched.Option{
			sched.WithBlockingPool(0, 1, sched.PoolWait),
			sched.WithBlockingPool(1, 0, sched.PoolWait),
			sched.WithBlockingPool(1, 1, sched.PoolPolicy(9)),
		} {
			_, err := sched.New(opt)
			assert.ErrorIs(t, err, sched.ErrInvalidOption)
		}
		assert.ErrorIs(t, sched.Call{}.Go(func(context.Context) (any, error) { return nil, nil }), sched.ErrProcessNotFound)
	})

	t.Run("Go(nil) is refused and the call stays pending", func(t *testing.T) {
		refused := make(chan error, 1)
		s := newScheduler(t, sched.WithHandler(cmdTest, func(c sched.Call) error {
			refused <- c.Go(nil)
			return c.Complete("after", nil)
		}))
		h := submit(t, s, &probe{step: yieldOnce(1, func(out *sched.StepOutput) { out.Yield(1, cmdTest, nil) })})
		require.ErrorIs(t, receive(t, refused, "Go(nil)'s error"), sched.ErrInvalidCommand)
		res, err := waitEnd(t, s, h)
		require.NoError(t, err)
		assert.Equal(t, "after", res.Value(), "the refused Go left the yield for the handler to complete")
	})

	t.Run("Go once the scheduler has stopped is refused with ErrClosed", func(t *testing.T) {
		calls := make(chan sched.Call, 1)
		s := newScheduler(t, sched.WithHandler(cmdTest, func(c sched.Call) error {
			calls <- c
			return nil // keeps the call
		}))
		h := submit(t, s, &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
			if n == 0 {
				out.Yield(1, cmdTest, nil)
			}
			if hasCancel(evs) {
				out.Done(payload.Payload{})
			}
			return nil
		}})
		c := receive(t, calls, "the held call")
		require.NoError(t, s.Shutdown(context.Background()))
		_, err := waitEnd(t, s, h)
		require.NoError(t, err)
		ran := false
		err = c.Go(func(context.Context) (any, error) { ran = true; return nil, nil })
		require.ErrorIs(t, err, sched.ErrClosed)
		assert.False(t, ran)
	})
}

// TestPoolPanicIsReported: a panic in work given to Call.Go is reported
// as one in a process's code is: the Panic hook gets it, naming the
// yielding process and "pool" as what panicked, before the yield
// completes with that PanicError, and Stats counts it.
func TestPoolPanicIsReported(t *testing.T) {
	type report struct {
		info      sched.PanicInfo
		completed int // completions the process had seen by then
	}
	reports := make(chan report, 1)
	var p *probe
	s := newScheduler(t,
		sched.WithHandler(cmdTest, func(c sched.Call) error {
			return c.Go(func(context.Context) (any, error) { panic("work boom") })
		}),
		sched.WithHooks(sched.Hooks{Panic: func(i sched.PanicInfo) {
			reports <- report{i, len(p.EventsOf(sched.EventYieldComplete))}
		}}))
	p = &probe{step: yieldOnce(1, func(out *sched.StepOutput) { out.Yield(1, cmdTest, nil) })}
	h := submit(t, s, p)
	_, err := waitEnd(t, s, h)
	var perr *sched.PanicError
	require.ErrorAs(t, err, &perr)
	r := receive(t, reports, "the Panic hook")
	assert.Equal(t, h.PID(), r.info.PID)
	assert.Equal(t, "run", r.info.Method)
	assert.Same(t, perr, r.info.Err, "the hook gets the PanicError the yield completes with")
	assert.Equal(t, "pool", r.info.Err.Where)
	assert.Equal(t, "work boom", r.info.Err.Value)
	assert.Zero(t, r.completed, "the yield had completed before the hook ran")
	assert.Equal(t, uint64(1), s.Stats().Processes.Panics)
}

// TestPoolWaitKeepsOrder: with PoolWait, tasks beyond the queue's length
// wait in order: one goroutine runs the tasks in the order Call.Go was
// called, those that waited past the queue included.
func TestPoolWaitKeepsOrder(t *testing.T) {
	const n = 12
	gate := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(open)
	var mu sync.Mutex
	var given, ran []int
	s := newScheduler(t, sched.WithBlockingPool(1, 2, sched.PoolWait), sched.WithHandler(cmdTest, func(c sched.Call) error {
		i := c.Arg.(int)
		mu.Lock()
		defer mu.Unlock()
		given = append(given, i)
		return c.Go(func(ctx context.Context) (any, error) {
			select {
			case <-gate:
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			}
			mu.Lock()
			ran = append(ran, i)
			mu.Unlock()
			return i, nil
		})
	}))
	hs := make([]sched.Handle, n)
	for i := range n {
		hs[i] = submit(t, s, &probe{step: yieldOnce(1, func(out *sched.StepOutput) { out.Yield(1, cmdTest, i) })})
	}
	eventually(t, "every task given to the pool", func() bool {
		st := s.Stats().Pool
		return st.Running+st.Queued+st.Waiting == n
	})
	require.Equal(t, n-1-2, s.Stats().Pool.Waiting, "tasks waiting past the queue")
	open()
	for i, h := range hs {
		res, err := waitEnd(t, s, h)
		require.NoError(t, err)
		assert.Equal(t, i, res.Value())
	}
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, given, n)
	require.Equal(t, given, ran, "the order the tasks ran in")
}
