package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// monitorOf submits a watcher that monitors pid (tag 1) and ends with the
// completion event as its result.
func monitorOf(t *testing.T, s *sched.Scheduler, pid relay.PID) (sched.Handle, *probe) {
	t.Helper()
	w := &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
		if n == 0 {
			out.Monitor(1, pid)
			return nil
		}
		if ev, ok := completionOf(evs, 1); ok {
			out.Done(payload.Of(ev))
		}
		return nil
	}}
	return submit(t, s, w), w
}

// exitOf waits for a watcher from monitorOf and returns the Exit it got.
func exitOf(t *testing.T, s *sched.Scheduler, h sched.Handle, watched relay.PID) sched.Exit {
	t.Helper()
	res, err := waitEnd(t, s, h)
	require.NoError(t, err)
	ev := res.Value().(sched.Event)
	require.NoError(t, ev.Error)
	assert.Equal(t, watched, ev.From, "From of a monitor's completion is the watched process")
	e, ok := ev.Data.(sched.Exit)
	require.True(t, ok, "Data is an Exit, got %T", ev.Data)
	assert.Equal(t, watched, e.PID)
	return e
}

func TestMonitor(t *testing.T) {
	errBoom := errors.New("boom")
	cases := []struct {
		name   string
		step   func(*probe, int, []sched.Event, *sched.StepOutput) error
		end    func(s *sched.Scheduler, pid relay.PID)
		reason sched.ExitReason
		check  func(t *testing.T, e sched.Exit)
	}{
		{"done", untilMessage, func(s *sched.Scheduler, pid relay.PID) { _ = s.Tell(pid, "result") }, sched.ExitDone,
			func(t *testing.T, e sched.Exit) {
				assert.Equal(t, "result", e.Result.Value())
				assert.NoError(t, e.Err)
			}},
		{"failed", func(_ *probe, n int, evs []sched.Event, _ *sched.StepOutput) error {
			if n > 0 {
				return errBoom
			}
			return nil
		}, func(s *sched.Scheduler, pid relay.PID) { _ = s.Tell(pid, 1) }, sched.ExitFailed,
			func(t *testing.T, e sched.Exit) { assert.ErrorIs(t, e.Err, errBoom) }},
		{"terminated", untilCancel, func(s *sched.Scheduler, pid relay.PID) { _ = s.Terminate(pid) }, sched.ExitTerminated,
			func(t *testing.T, e sched.Exit) {
				assert.ErrorIs(t, e.Err, sched.ErrTerminated)
				assert.Equal(t, "cancelled", e.Result.Value())
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newScheduler(t)
			target := submit(t, s, &probe{step: tc.step})
			waitState(t, s, target.PID(), sched.StateIdle)
			h, w := monitorOf(t, s, target.PID())
			waitState(t, s, h.PID(), sched.StateBlocked)
			tc.end(s, target.PID())
			e := exitOf(t, s, h, target.PID())
			assert.Equal(t, tc.reason, e.Reason)
			tc.check(t, e)
			assert.Len(t, w.EventsOf(sched.EventYieldComplete), 1, "exactly one event")
		})
	}

	t.Run("gone at the time of asking", func(t *testing.T) {
		s := newScheduler(t)
		ended := submit(t, s, &probe{step: doneWith(1)})
		_, err := waitEnd(t, s, ended)
		require.NoError(t, err)
		for _, pid := range []relay.PID{ended.PID(), {ID: 1<<32 | 9}} {
			h, _ := monitorOf(t, s, pid)
			e := exitOf(t, s, h, pid)
			assert.Equal(t, sched.ExitGone, e.Reason)
			assert.ErrorIs(t, e.Err, sched.ErrProcessNotFound)
		}
	})

	t.Run("forced", func(t *testing.T) {
		s := newScheduler(t)
		target := submit(t, s, &probe{step: ignoreAll})
		var got sched.Exit
		fired := make(chan struct{})
		s.Monitor(target.PID(), func(e sched.Exit) { got = e; close(fired) })
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		require.ErrorIs(t, s.Shutdown(ctx), sched.ErrForced)
		receive(t, fired, "the monitor of a forced process")
		assert.Equal(t, sched.ExitForced, got.Reason)
		assert.ErrorIs(t, got.Err, sched.ErrForced)
	})
}

func TestOutsideMonitor(t *testing.T) {
	s := newScheduler(t)
	target := submit(t, s, &probe{step: untilCancel})
	exits := make(chan sched.Exit, 3)
	s.Monitor(target.PID(), func(e sched.Exit) { exits <- e })
	stopped := s.Monitor(target.PID(), func(e sched.Exit) { exits <- e })
	assert.True(t, stopped(), "stop before the end")
	assert.False(t, stopped(), "stop twice")
	require.NoError(t, s.Terminate(target.PID()))
	e := receive(t, exits, "the monitor's call")
	assert.Equal(t, sched.ExitTerminated, e.Reason)
	stop := s.Monitor(target.PID(), func(e sched.Exit) { exits <- e })
	e = receive(t, exits, "the monitor of an ended process")
	assert.Equal(t, sched.ExitGone, e.Reason)
	assert.False(t, stop(), "f was called already")
	select {
	case e := <-exits:
		t.Fatalf("a stopped monitor was called: %v", e)
	default:
	}
	// A nil function panics at the call, for a live process and for
	// one that is gone alike, not later in a goroutine of its own.
	live := submit(t, s, &probe{step: untilCancel})
	for _, pid := range []relay.PID{live.PID(), target.PID()} {
		assert.PanicsWithValue(t, "scheduler: Monitor with a nil function", func() { s.Monitor(pid, nil) }, "%v", pid)
	}
	require.NoError(t, s.Terminate(live.PID()))
	_, err := waitEnd(t, s, live)
	require.NoError(t, err, "the process whose monitor was refused ends as usual")
}

// TestMonitorsAreToldBeforeTheHandle: by the time a process's Handle
// reports its end, its monitors have been told: an outside monitor's
// stop then finds it fired already. (Told after, stop would find it
// waiting in the moments between: many rounds make those moments show.)
func TestMonitorsAreToldBeforeTheHandle(t *testing.T) {
	s := newScheduler(t)
	for i := range 1000 {
		target := submit(t, s, &probe{step: untilCancel})
		called := make(chan sched.Exit, 1)
		stop := s.Monitor(target.PID(), func(e sched.Exit) { called <- e })
		require.NoError(t, s.Terminate(target.PID()))
		_, err := waitEnd(t, s, target)
		require.NoError(t, err)
		require.False(t, stop(), "iteration %d: the Handle reported the end before the monitor was told", i)
		assert.Equal(t, sched.ExitTerminated, receive(t, called, "the monitor's call").Reason)
	}
}

// TestOutsideMonitorStopRacingTheEnd: stopping outside monitors while
// their process ends leaves the others alone: every monitor whose stop
// did not report it forgotten is called once, the forgotten ones never.
// (A stop that rewrote the list of monitors while the end read it could
// make the end skip one; the race detector also watches that list.)
func TestOutsideMonitorStopRacingTheEnd(t *testing.T) {
	s := newScheduler(t)
	const n = 8
	for i := range 200 {
		target := submit(t, s, &probe{step: untilCancel})
		calls := make(chan int, n)
		stops := make([]func() bool, n)
		for j := range n {
			stops[j] = s.Monitor(target.PID(), func(sched.Exit) { calls <- j })
		}
		var stopped [n]bool
		var wg sync.WaitGroup
		wg.Go(func() { _ = s.Terminate(target.PID()) })
		wg.Go(func() {
			for j := 0; j < n; j += 2 {
				stopped[j] = stops[j]()
			}
		})
		wg.Wait()
		_, err := waitEnd(t, s, target)
		require.NoError(t, err)
		want := 0
		for _, st := range stopped {
			if !st {
				want++
			}
		}
		got := map[int]bool{}
		for range want {
			j := receive(t, calls, fmt.Sprintf("iteration %d: a monitor's call (%d of %d)", i, len(got)+1, want))
			require.False(t, stopped[j], "iteration %d: monitor %d was called after its stop reported it forgotten", i, j)
			require.False(t, got[j], "iteration %d: monitor %d was called twice", i, j)
			got[j] = true
		}
	}
}

// TestMonitorRacingTheEnd: a monitor set up while its target ends
// concurrently is told exactly once: either how it ended or that it was
// gone; never not at all, never twice.
func TestMonitorRacingTheEnd(t *testing.T) {
	s := newScheduler(t)
	for i := range 300 {
		target := submit(t, s, &probe{step: untilCancel})
		var wg sync.WaitGroup
		var h sched.Handle
		var w *probe
		wg.Go(func() { h, w = monitorOf(t, s, target.PID()) })
		wg.Go(func() { _ = s.Terminate(target.PID()) })
		wg.Wait()
		e := exitOf(t, s, h, target.PID())
		require.Contains(t, []sched.ExitReason{sched.ExitTerminated, sched.ExitGone}, e.Reason, "iteration %d", i)
		require.Len(t, w.EventsOf(sched.EventYieldComplete), 1, "iteration %d: exactly one event", i)
	}
}

// remoteMonitors is a transport that watches processes on other nodes
// (see RemoteMonitor): it refuses each monitor with err if set, and hands
// the others' Calls to the test.
type remoteMonitors struct {
	*fakeTransport
	err   error
	calls chan sched.Call
}

func (r *remoteMonitors) MonitorRemote(c sched.Call) error {
	if r.err != nil {
		return r.err
	}
	r.calls <- c
	return nil
}

// TestRemoteMonitor: a monitor of a process on another node completes at
// once with ExitGone when no transport can watch it, and with the
// transport's error when MonitorRemote fails; otherwise the transport gets
// a Call whose Arg is the watched PID and completes it later, and the
// Call's context is done once the monitor is cancelled (cause
// ErrYieldCancelled) or its process ends (ErrEnded).
func TestRemoteMonitor(t *testing.T) {
	remote := relay.PID{Node: 2, ID: 5}
	errNoRoute := errors.New("transport: no route to node 2")
	for _, tc := range []struct {
		name    string
		opts    []sched.Option
		wantErr error
	}{
		{"no transport", nil, sched.ErrProcessNotFound},
		{"a transport that cannot watch", []sched.Option{sched.WithTransport(newFakeTransport())}, sched.ErrProcessNotFound},
		{"MonitorRemote fails", []sched.Option{sched.WithTransport(&remoteMonitors{fakeTransport: newFakeTransport(), err: errNoRoute})}, errNoRoute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newScheduler(t, append(tc.opts, sched.WithNode(1))...)
			h, _ := monitorOf(t, s, remote)
			ev := answerOf(t, s, h)
			require.NoError(t, ev.Error)
			assert.Equal(t, remote, ev.From)
			e, ok := ev.Data.(sched.Exit)
			require.True(t, ok, "the completion's Data is a %T", ev.Data)
			assert.Equal(t, remote, e.PID)
			assert.Equal(t, sched.ExitGone, e.Reason)
			assert.ErrorIs(t, e.Err, tc.wantErr)
		})
	}

	t.Run("watched by the transport", func(t *testing.T) {
		tr := &remoteMonitors{fakeTransport: newFakeTransport(), calls: make(chan sched.Call, 3)}
		s := newScheduler(t, sched.WithNode(1), sched.WithTransport(tr))
		p := &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
			if n == 0 {
				for tag := range uint64(3) {
					out.Monitor(tag+1, remote)
				}
				return nil
			}
			if _, ok := completionOf(evs, 1); ok {
				out.Cancel(2)
			}
			if hasCancel(evs) {
				out.Done(payload.Payload{})
			}
			return nil
		}}
		h := submit(t, s, p)
		var calls []sched.Call
		for range 3 {
			calls = append(calls, receive(t, tr.calls, "a MonitorRemote call"))
		}
		ctxs := make([]context.Context, 3)
		for i, c := range calls {
			assert.Equal(t, uint64(i+1), c.Tag)
			assert.Equal(t, h.PID(), c.PID)
			assert.Equal(t, remote, c.Arg)
			ctxs[i] = c.Context()
			require.NoError(t, ctxs[i].Err(), "monitor %d's context before it ends", i+1)
		}

		exit := sched.Exit{PID: remote, Reason: sched.ExitDone}
		require.NoError(t, calls[0].Completion().CompleteFrom(remote, exit, nil))
		receive(t, ctxs[0].Done(), "the completed monitor's context")
		receive(t, ctxs[1].Done(), "the cancelled monitor's context")
		assert.ErrorIs(t, context.Cause(ctxs[1]), sched.ErrYieldCancelled)
		assert.ErrorIs(t, calls[1].Complete(exit, nil), sched.ErrYieldNotPending, "completing the cancelled monitor")
		assert.NoError(t, ctxs[2].Err(), "the third monitor's context while its process lives")

		require.NoError(t, s.Terminate(h.PID()))
		_, err := waitEnd(t, s, h)
		require.NoError(t, err)
		receive(t, ctxs[2].Done(), "the context of the monitor pending at the end")
		assert.ErrorIs(t, context.Cause(ctxs[2]), sched.ErrEnded)

		evs := p.EventsOf(sched.EventYieldComplete)
		require.Len(t, evs, 1, "only the completed monitor's event")
		assert.Equal(t, uint64(1), evs[0].Tag)
		assert.Equal(t, remote, evs[0].From)
		assert.Equal(t, exit, evs[0].Data)
	})
}

// TestMonitorOfItself: a process cannot outlive itself to learn of its
// end, so a monitor of its own PID completes at once with ExitGone (Err
// wrapping ErrProcessNotFound, From its PID), and the process goes on.
func TestMonitorOfItself(t *testing.T) {
	s := newScheduler(t)
	p := &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
		if n == 0 {
			out.Monitor(1, out.Self())
			return nil
		}
		if ev, ok := completionOf(evs, 1); ok {
			out.Done(payload.Of(ev))
		}
		return nil
	}}
	h := submit(t, s, p)
	e := exitOf(t, s, h, h.PID())
	assert.Equal(t, sched.ExitGone, e.Reason)
	assert.ErrorIs(t, e.Err, sched.ErrProcessNotFound)
	assert.Equal(t, 2, p.Steps(), "the process went on after the completion")
}
