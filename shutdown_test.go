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
	"go.uber.org/goleak"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// shutdownAsync runs s.Shutdown(ctx) on a goroutine and returns a channel
// that receives its error. The test's cleanup waits for that goroutine;
// whatever must happen for Shutdown to return (releasing a blocked Step)
// belongs in a cleanup registered after this call, since cleanups run
// last-registered first.
func shutdownAsync(t *testing.T, s *sched.Scheduler, ctx context.Context) <-chan error {
	errc := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		errc <- s.Shutdown(ctx)
	}()
	t.Cleanup(func() {
		select {
		case <-done:
		case <-time.After(testTimeout):
			t.Errorf("Shutdown did not return within %v", testTimeout)
		}
	})
	return errc
}

func TestShutdownGraceful(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	s := newScheduler(t, sched.WithWorkers(2))

	var procs []*probe
	var hs []sched.Handle
	add := func(p *probe) {
		procs = append(procs, p)
		hs = append(hs, submit(t, s, p))
	}
	for range 20 {
		add(&probe{step: untilCancel}) // idle
	}
	for range 10 {
		// blocked on a timer that would outlive the test
		add(&probe{step: yieldOnce(1, func(out *sched.StepOutput) { out.Sleep(1, time.Hour) })})
	}
	for range 4 {
		// busy: continues until cancelled
		add(&probe{step: func(_ *probe, _ int, evs []sched.Event, out *sched.StepOutput) error {
			if hasCancel(evs) {
				out.Done(payload.Payload{})
			} else {
				out.Continue()
			}
			return nil
		}})
	}
	for range 3 {
		// awaits a child, which also ends at the cancel
		child := &probe{step: untilCancel}
		procs = append(procs, child)
		add(&probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
			if n == 0 {
				out.SpawnAwait(1, child, "child", nil)
				return nil
			}
			if ev, ok := completionOf(evs, 1); ok {
				out.Done(ev.Result())
			}
			return nil
		}})
	}
	for _, p := range procs {
		eventually(t, "every process to start", func() bool { return p.Steps() > 0 })
	}

	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	require.NoError(t, s.Shutdown(ctx))

	for i, h := range hs {
		_, err := h.Result()
		require.NoError(t, err, "process %d (ErrNotEnded: it had not ended when Shutdown returned)", i)
	}
	for _, p := range procs {
		requireLifecycle(t, p)
		assert.Len(t, p.EventsOf(sched.EventCancel), 1)
	}
	st := s.Stats()
	assert.Zero(t, st.Processes.Live)
	assert.Zero(t, st.Processes.Forced)
	assert.Equal(t, uint64(len(procs)), st.Processes.Ended)
	assert.Empty(t, s.Processes())
	goleak.VerifyNone(t, ignore)
}

// TestShutdownWaitsForCleanup: a process that answers the cancel with a
// yield that completes later, from a goroutine, is still served, and
// Shutdown waits for it. Meanwhile submissions are refused.
func TestShutdownWaitsForCleanup(t *testing.T) {
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	gate := make(chan struct{})
	var gateOnce sync.Once
	openGate := func() { gateOnce.Do(func() { close(gate) }) }
	handled := make(chan sched.Call, 1)
	completeErr := make(chan error, 1)
	s := newScheduler(t, sched.WithHandler(cmdTest, func(c sched.Call) error {
		handled <- c
		comp := c.Completion()
		wg.Go(func() {
			<-gate
			completeErr <- comp.Complete("flushed", nil)
		})
		return nil
	}))
	p := &probe{step: func(_ *probe, _ int, evs []sched.Event, out *sched.StepOutput) error {
		if hasCancel(evs) {
			out.Yield(2, cmdTest, nil)
			out.Spawn(3, &probe{step: doneWith(nil)}, "late child", nil)
		}
		if ev, ok := completionOf(evs, 2); ok {
			out.Done(ev.Result())
		}
		return nil
	}}
	h := submit(t, s, p)
	waitState(t, s, h.PID(), sched.StateIdle)

	errc := shutdownAsync(t, s, context.Background())
	t.Cleanup(openGate)
	c := receive(t, handled, "the cleanup yield's handler")

	// Shutdown cannot have returned: the process waits for its cleanup.
	select {
	case err := <-errc:
		t.Fatalf("Shutdown returned %v before the cleanup yield completed", err)
	default:
	}
	_, err := s.Submit(context.Background(), &probe{}, "run", nil)
	require.ErrorIs(t, err, sched.ErrClosed, "Submit during Shutdown")
	_, err = c.Submit(context.Background(), &probe{}, "run", nil)
	require.ErrorIs(t, err, sched.ErrClosed, "Call.Submit during Shutdown")
	require.NoError(t, s.Tell(h.PID(), "still reachable"), "Tell during Shutdown")
	require.NoError(t, s.Terminate(h.PID()), "Terminate during Shutdown")

	openGate()
	require.NoError(t, receive(t, completeErr, "the cleanup completion"))
	require.NoError(t, receive(t, errc, "Shutdown"))

	res, err := waitEnd(t, s, h)
	require.NoError(t, err)
	assert.Equal(t, "flushed", res.Value())
	assert.Len(t, p.EventsOf(sched.EventCancel), 1)
	spawn, ok := completionOf(p.Events(), 3)
	if assert.True(t, ok, "the spawn's completion arrived before the end") {
		assert.ErrorIs(t, spawn.Error, sched.ErrClosed, "spawn during Shutdown")
	}
	requireLifecycle(t, p)
}

// TestSpawnBatchDuringShutdown: a step that answers the cancel by
// spawning several children at once (a step of spawns only, which the
// worker admits as one batch) has every spawn refused with ErrClosed:
// no child's Init runs, and each yield completes with the error. The
// process first spawns children that end at once, so that the worker
// has free IDs at hand when the late ones are admitted.
func TestSpawnBatchDuringShutdown(t *testing.T) {
	s := newScheduler(t, sched.WithWorkers(1))
	late := []*probe{{step: doneWith(nil)}, {step: doneWith(nil)}, {step: doneWith(nil)}}
	warmed := make(chan struct{})
	warm := sync.OnceFunc(func() { close(warmed) })
	p := &probe{step: func(p *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
		switch {
		case n == 0:
			for tag := uint64(10); tag < 14; tag++ {
				out.SpawnAwait(tag, &probe{step: doneWith(nil)}, "early child", nil)
			}
		case hasCancel(evs):
			out.SpawnAwait(1, late[0], "late child", nil)
			out.Spawn(2, late[1], "late child", nil)
			out.SpawnAwait(3, late[2], "late child", nil)
		case len(p.EventsOf(sched.EventYieldComplete)) == 4:
			warm()
		case len(p.EventsOf(sched.EventYieldComplete)) == 4+len(late):
			out.Done(payload.Payload{})
		}
		return nil
	}}
	h := submit(t, s, p)
	receive(t, warmed, "the early children's ends")
	waitState(t, s, h.PID(), sched.StateIdle)

	require.NoError(t, receive(t, shutdownAsync(t, s, context.Background()), "Shutdown"))
	_, err := waitEnd(t, s, h)
	require.NoError(t, err)
	for tag := uint64(1); tag <= 3; tag++ {
		ev, ok := completionOf(p.Events(), tag)
		if assert.True(t, ok, "spawn %d completed", tag) {
			assert.ErrorIs(t, ev.Error, sched.ErrClosed, "spawn %d during Shutdown", tag)
		}
	}
	for i, c := range late {
		assert.Zero(t, c.Inits(), "late child %d was initialised", i)
	}
	requireLifecycle(t, p)
}

// TestSubmitsDuringShutdown: submissions refused while Shutdown waits for
// a process's cleanup must not make Shutdown believe that no process is
// left. Several goroutines keep submitting (and being refused) while the
// only process waits for a completion that the test holds back.
func TestSubmitsDuringShutdown(t *testing.T) {
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	gate := make(chan struct{})
	var gateOnce sync.Once
	openGate := func() { gateOnce.Do(func() { close(gate) }) }
	s := newScheduler(t, sched.WithHandler(cmdTest, func(c sched.Call) error {
		comp := c.Completion()
		wg.Go(func() {
			<-gate
			_ = comp.Complete(nil, nil)
		})
		return nil
	}))
	p := &probe{step: func(_ *probe, _ int, evs []sched.Event, out *sched.StepOutput) error {
		if hasCancel(evs) {
			out.Yield(2, cmdTest, nil)
		}
		if _, ok := completionOf(evs, 2); ok {
			out.Done(payload.Of("cleaned up"))
		}
		return nil
	}}
	h := submit(t, s, p)
	waitState(t, s, h.PID(), sched.StateIdle)
	errc := shutdownAsync(t, s, context.Background())
	t.Cleanup(openGate)
	waitState(t, s, h.PID(), sched.StateBlocked)

	// Submit until Shutdown returns (which it must not) or for a second.
	stop := make(chan struct{})
	var submitters sync.WaitGroup
	var refused atomic.Int64
	refusedProc := &probe{} // never initialised: Submit refuses it first
	for range 4 {
		submitters.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, err := s.Submit(context.Background(), refusedProc, "run", nil)
				if !errors.Is(err, sched.ErrClosed) {
					t.Errorf("Submit during Shutdown: %v, want ErrClosed", err)
					return
				}
				refused.Add(1)
			}
		})
	}
	timer := time.NewTimer(time.Second)
	defer timer.Stop()
	select {
	case err := <-errc:
		close(stop)
		submitters.Wait()
		t.Fatalf("Shutdown returned %v while a process still waited for its cleanup (after %d refused Submits); its Close calls: %d",
			err, refused.Load(), p.Closes())
	case <-timer.C:
	}
	close(stop)
	submitters.Wait()
	require.Positive(t, refused.Load())

	openGate()
	require.NoError(t, receive(t, errc, "Shutdown"))
	res, err := waitEnd(t, s, h)
	require.NoError(t, err)
	assert.Equal(t, "cleaned up", res.Value())
	requireLifecycle(t, p)
}

// TestShutdownForced: a process that ignores the cancel is closed at the
// deadline.
func TestShutdownForced(t *testing.T) {
	s := newScheduler(t)
	stubborn := &probe{step: ignoreAll}
	hs := submit(t, s, stubborn)
	graceful := &probe{step: untilCancel}
	hg := submit(t, s, graceful)
	waitState(t, s, hs.PID(), sched.StateIdle)
	pctx := stubborn.Ctx()

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := s.Shutdown(ctx)
	require.ErrorIs(t, err, sched.ErrForced)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "1 process")

	_, err = waitEnd(t, s, hs)
	require.ErrorIs(t, err, sched.ErrForced)
	requireLifecycle(t, stubborn)
	require.ErrorIs(t, pctx.Err(), context.Canceled)
	assert.Len(t, stubborn.EventsOf(sched.EventCancel), 1, "the stubborn process was asked first")

	_, err = waitEnd(t, s, hg)
	require.NoError(t, err)
	requireLifecycle(t, graceful)

	st := s.Stats()
	assert.Equal(t, uint64(1), st.Processes.Forced)
	assert.Zero(t, st.Processes.Live)
}

// TestShutdownForcedDuringStep: a process whose Step is running at the
// deadline is closed when the Step returns, exactly once, and not stepped
// again.
func TestShutdownForcedDuringStep(t *testing.T) {
	s := newScheduler(t, sched.WithWorkers(2))
	long, entered, releaseStep := heldFirstStep(t)
	hl := submit(t, s, long)
	receive(t, entered, "the long step")
	// A second stubborn process tells us when the forcing has begun: it is
	// closed by the deadline, which marks every process as forced first.
	idle := &probe{step: ignoreAll}
	hi := submit(t, s, idle)
	waitState(t, s, hi.PID(), sched.StateIdle)

	forceWhileStepHeld(t, s, hi, releaseStep, 2, func() {
		assert.Zero(t, long.Closes(), "Close was called while Step was running")
	})
	_, err := waitEnd(t, s, hl)
	require.ErrorIs(t, err, sched.ErrForced)
	requireLifecycle(t, long)
	assert.Equal(t, 1, long.Steps(), "a forced process was stepped after its long step")
}

// TestAfterShutdown: every call fails with ErrClosed once Shutdown has
// returned, and nothing panics.
func TestAfterShutdown(t *testing.T) {
	calls := make(chan sched.Call, 1)
	s := newScheduler(t, sched.WithHandler(cmdTest, func(c sched.Call) error {
		calls <- c
		return nil
	}))
	p := &probe{step: yieldOnce(1, func(out *sched.StepOutput) { out.Yield(1, cmdTest, nil) })}
	h := submit(t, s, p)
	c := receive(t, calls, "the handler")
	require.NoError(t, s.Shutdown(context.Background()))
	_, err := waitEnd(t, s, h)
	require.NoError(t, err, "the process ended at the cancel")
	pid := h.PID()

	ops := []struct {
		name string
		call func() error
	}{
		{"Submit", func() error {
			_, err := s.Submit(context.Background(), &probe{}, "run", nil)
			return err
		}},
		{"Spawn", func() error {
			_, err := s.Spawn(context.Background(), &probe{}, "run", nil)
			return err
		}},
		{"Send", func() error { return s.Send(relay.Message{To: pid}) }},
		{"Tell", func() error { return s.Tell(pid, 1) }},
		{"Tell unknown", func() error { return s.Tell(relay.PID{ID: 12}, 1) }},
		{"Send of a message returned undelivered", func() error {
			return s.Send(relay.Message{From: relay.PID{ID: 12}, To: pid, Data: 1, Err: sched.ErrMailboxFull})
		}},
		{"SendContext", func() error { return s.SendContext(context.Background(), relay.Message{To: pid}) }},
		{"TellContext", func() error { return s.TellContext(context.Background(), pid, 1) }},
		{"Reply", func() error { return s.Reply(sched.ReplyTo{PID: pid, Seq: 1}, "late", nil) }},
		{"CompleteYield", func() error { return s.CompleteYield(pid, 1, nil, nil) }},
		{"Terminate", func() error { return s.Terminate(pid) }},
		{"Call.Complete", func() error { return c.Complete(nil, nil) }},
		{"Completion.Complete", func() error { return c.Completion().Complete(nil, nil) }},
		{"Call.Tell", func() error { return c.Tell(pid, 1) }},
		{"Call.Submit", func() error {
			_, err := c.Submit(context.Background(), &probe{}, "run", nil)
			return err
		}},
	}
	for _, op := range ops {
		t.Run(op.name, func(t *testing.T) {
			require.ErrorIs(t, op.call(), sched.ErrClosed)
		})
	}
	assert.Equal(t, uint64(1), s.Stats().DeadLetters.LateReplies, "the refused Reply is a dead letter")
	// A later Shutdown returns the first one's result, at once.
	require.NoError(t, s.Shutdown(context.Background()), "Shutdown after Shutdown")
	// Observation still works.
	assert.Empty(t, s.Processes())
	assert.Zero(t, s.Stats().Processes.Live)
	require.ErrorIs(t, s.SetHandler(cmdTest2, func(sched.Call) error { return nil }), sched.ErrClosed, "SetHandler after Shutdown")
	requireLifecycle(t, p)
}

func TestShutdownEmpty(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	s := newScheduler(t, sched.WithWorkers(4))
	require.NoError(t, s.Shutdown(context.Background()))
	goleak.VerifyNone(t, ignore)
	require.NoError(t, s.Shutdown(context.Background()), "a second Shutdown returns the first one's result")
}

// TestShutdownReleasedByAnEndThatWasNotCancelled: a process that had
// finished its last step, and was still in its Close when Shutdown
// began, is not cancelled (it has ended) but is still live: when its
// end, the last, is counted, Shutdown is released, though the process
// had nothing else to hand on (no Handle, no unread event, no monitor)
// and took the shortest way out.
func TestShutdownReleasedByAnEndThatWasNotCancelled(t *testing.T) {
	s := newScheduler(t, sched.WithWorkers(2))
	inClose, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	let := func() { once.Do(func() { close(release) }) }
	t.Cleanup(let) // before the scheduler's Shutdown, which waits for Close
	quiet := &probe{step: doneWith(1), close: func() {
		close(inClose)
		<-release
	}}
	ctx := context.Background()
	_, err := s.Spawn(ctx, quiet, "quiet", nil)
	require.NoError(t, err)
	receive(t, inClose, "quiet's Close")
	// A process that ends at the cancel: once it has ended, Shutdown
	// has counted the live processes and cancelled them, and quiet was
	// left out, as it had ended.
	h := submit(t, s, &probe{step: untilCancel})
	shut := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(ctx, testTimeout)
		defer cancel()
		shut <- s.Shutdown(sctx)
	}()
	_, err = waitEnd(t, s, h)
	require.NoError(t, err)
	assert.Equal(t, int64(1), s.Stats().Processes.Live, "quiet is still in its Close")
	let()
	require.NoError(t, receive(t, shut, "Shutdown, released by the last end"))
	requireLifecycle(t, quiet)
	st := s.Stats()
	assert.Zero(t, st.Processes.Live)
	assert.Zero(t, st.Processes.Forced)
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
		{"Call.Go work", func(t *testing.T, shut func()) *sched.Scheduler {
			s := newScheduler(t, sched.WithHandler(cmdTest, func(c sched.Call) error {
				return c.Go(func(context.Context) (any, error) {
					shut()
					return nil, nil
				})
			}))
			submit(t, s, &probe{step: yieldOnce(1, func(out *sched.StepOutput) { out.Yield(1, cmdTest, nil) })})
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

// TestShutdownOnOwnGoroutineForcesAtItsDeadline: Shutdown called from a
// Step returns at once, but its ctx still counts: a process that ignores
// the cancellation keeps the scheduler running until that ctx is done,
// and then is forced to close.
func TestShutdownOnOwnGoroutineForcesAtItsDeadline(t *testing.T) {
	s := newScheduler(t)
	stuck := &probe{step: ignoreAll}
	hs := submit(t, s, stuck)
	waitState(t, s, hs.PID(), sched.StateIdle)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan error, 1)
	submit(t, s, &probe{step: func(_ *probe, n int, _ []sched.Event, out *sched.StepOutput) error {
		if n == 0 {
			got <- s.Shutdown(ctx)
		}
		out.Done(payload.Payload{})
		return nil
	}})
	require.ErrorIs(t, receive(t, got, "the inner Shutdown's return"), sched.ErrShutdownStarted)
	// The stuck process was cancelled and ignores it: only the inner
	// call's ctx, once done, forces it.
	eventually(t, "the stuck process to see its cancellation", func() bool {
		return hasCancel(stuck.Events())
	})
	assert.Zero(t, stuck.Closes(), "closed before the inner Shutdown's ctx was done")
	cancel()
	_, err := waitEnd(t, s, hs)
	require.ErrorIs(t, err, sched.ErrForced)
	assert.Equal(t, 1, stuck.Closes())
	// An outside Shutdown now returns at once, with what forced them.
	err = s.Shutdown(context.Background())
	require.ErrorIs(t, err, sched.ErrForced)
	assert.Equal(t, uint64(1), s.Stats().Processes.Forced)
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

// TestShutdownAfterTheStopIgnoresItsDeadline: a call made after the stop
// returns the same result every time, whether its context is done or not:
// its deadline forced nothing, so the result does not carry its error.
func TestShutdownAfterTheStopIgnoresItsDeadline(t *testing.T) {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for _, forced := range []bool{false, true} {
		t.Run(fmt.Sprintf("forced=%v", forced), func(t *testing.T) {
			s := newScheduler(t)
			if forced {
				h := submit(t, s, &probe{step: ignoreAll})
				waitState(t, s, h.PID(), sched.StateIdle)
				require.ErrorIs(t, s.Shutdown(done), sched.ErrForced)
			} else {
				require.NoError(t, s.Shutdown(context.Background()))
			}
			want := s.Shutdown(context.Background())
			for i := range 100 {
				err := s.Shutdown(done)
				if !forced {
					require.NoError(t, err, "call %d", i)
					continue
				}
				require.ErrorIs(t, err, sched.ErrForced, "call %d", i)
				require.NotErrorIs(t, err, context.Canceled, "call %d: a deadline that forced nothing", i)
				require.EqualError(t, err, want.Error(), "call %d", i)
			}
		})
	}
}

// forceWhileStepHeld shuts s down with a short deadline while a step is
// held (see heldFirstStep), and checks what the deadline does: hi, a
// process that ignores its cancel and waits, is forced at once; Shutdown
// waits for the held step (whileHeld runs meanwhile), and once release
// lets it return, reports n processes forced.
func forceWhileStepHeld(t *testing.T, s *sched.Scheduler, hi sched.Handle, release func(), n int, whileHeld func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	errc := shutdownAsync(t, s, ctx)
	_, err := waitEnd(t, s, hi)
	require.ErrorIs(t, err, sched.ErrForced)
	whileHeld()
	select {
	case err := <-errc:
		t.Fatalf("Shutdown returned %v while a Step was running", err)
	default:
	}
	release()
	err = receive(t, errc, "Shutdown")
	require.ErrorIs(t, err, sched.ErrForced)
	assert.Contains(t, err.Error(), fmt.Sprintf("%d process", n))
}

// heldFirstStep returns a process whose first step closes entered and
// then waits for release, which the test's cleanup calls too, and which
// ignores its cancel.
func heldFirstStep(t *testing.T) (p *probe, entered <-chan struct{}, release func()) {
	in, out := make(chan struct{}), make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(out) }) }
	t.Cleanup(release)
	p = &probe{step: func(_ *probe, n int, _ []sched.Event, _ *sched.StepOutput) error {
		if n == 0 {
			close(in)
			<-out
		}
		return nil // ignores the cancel
	}}
	return p, in, release
}

// TestShutdownForcesAParentPutAside: a parent that its worker holds
// claimed and put aside (see TestAwaitedGrandchildrenOneStep) when the
// deadline comes is forced like any other process: the worker runs it
// once its grandchild's long step returns, closes it once without
// stepping it for the end it holds, and Shutdown returns.
func TestShutdownForcesAParentPutAside(t *testing.T) {
	s := newScheduler(t, sched.WithWorkers(1))
	grandchild, entered, releaseStep := heldFirstStep(t)
	middle := awaiter(1, func(out *sched.StepOutput) {
		out.SpawnAwait(11, grandchild, "run", nil)
	})
	parent := awaiter(2, func(out *sched.StepOutput) {
		out.SpawnAwait(1, middle, "run", nil)  // runs second, and starts the grandchild
		out.SpawnAwait(2, oneStep, "run", nil) // runs first, and holds the parent
	})
	hp := submit(t, s, parent)
	receive(t, entered, "the grandchild's step")
	if !raceEnabled {
		assert.Equal(t, 1, parent.Steps(), "the parent stepped for its first child's end before the grandchild ran")
	}
	// A stubborn process queued behind them tells us when the forcing
	// has begun: the deadline forces it where it waits, in the queue.
	idle := &probe{step: ignoreAll}
	hi := submit(t, s, idle)

	forceWhileStepHeld(t, s, hi, releaseStep, 4, func() {})
	_, err := waitEnd(t, s, hp)
	require.ErrorIs(t, err, sched.ErrForced)
	for _, p := range []*probe{parent, middle, grandchild, idle} {
		requireLifecycle(t, p)
	}
	if !raceEnabled {
		assert.Equal(t, 1, parent.Steps(), "a forced parent was stepped")
	}
	st := s.Stats()
	assert.Equal(t, uint64(4), st.Processes.Forced)
	assert.Zero(t, st.Processes.Live)
}
