package scheduler_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// hookRecorder records every hook call.
type hookRecorder struct {
	mu      sync.Mutex
	started map[relay.PID]int
	ended   map[relay.PID][]sched.EndInfo
	panics  []sched.PanicInfo
}

func newHookRecorder() *hookRecorder {
	return &hookRecorder{started: map[relay.PID]int{}, ended: map[relay.PID][]sched.EndInfo{}}
}

func (r *hookRecorder) hooks() sched.Hooks {
	return sched.Hooks{
		Start: func(s sched.StartInfo) {
			r.mu.Lock()
			r.started[s.PID]++
			r.mu.Unlock()
		},
		End: func(e sched.EndInfo) {
			r.mu.Lock()
			r.ended[e.PID] = append(r.ended[e.PID], e)
			r.mu.Unlock()
		},
		Panic: func(p sched.PanicInfo) {
			r.mu.Lock()
			r.panics = append(r.panics, p)
			r.mu.Unlock()
		},
	}
}

func TestHooksCalledOncePerEvent(t *testing.T) {
	rec := newHookRecorder()
	s, err := sched.New(sched.WithHooks(rec.hooks()), sched.WithHandler(cmdTest, func(sched.Call) error {
		panic("handler panic")
	}))
	require.NoError(t, err)

	ctx := context.Background()
	// One of each ending.
	done := submit(t, s, &probe{step: doneWith("ok")})
	failing := submit(t, s, &probe{step: func(*probe, int, []sched.Event, *sched.StepOutput) error {
		return errors.New("failed")
	}})
	panicking := submit(t, s, &probe{step: func(*probe, int, []sched.Event, *sched.StepOutput) error {
		panic("step panic")
	}})
	yielding := submit(t, s, &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
		if n == 0 {
			out.Yield(7, cmdTest, nil) // its handler panics
			return nil
		}
		if ev, ok := completionOf(evs, 7); ok {
			return ev.Error
		}
		return nil
	}})
	_, err = s.Submit(ctx, &probe{init: func(context.Context, string, payload.Payloads) error {
		panic("init panic")
	}}, "run", nil)
	require.ErrorIs(t, err, sched.ErrPanic)
	ignoring := submit(t, s, &probe{step: ignoreAll}) // forced at shutdown

	for _, h := range []sched.Handle{done, failing, panicking, yielding} {
		_, _ = waitEnd(t, s, h)
	}
	sctx, cancel := context.WithCancel(ctx)
	cancel() // force at once
	require.ErrorIs(t, s.Shutdown(sctx), sched.ErrForced)

	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, h := range []sched.Handle{done, failing, panicking, yielding, ignoring} {
		require.Equal(t, 1, rec.started[h.PID()], "Start for %v", h.PID())
		require.Len(t, rec.ended[h.PID()], 1, "End for %v", h.PID())
	}
	require.Len(t, rec.started, 5, "no Start for the process whose Init panicked")
	require.Len(t, rec.ended, 5)

	e := rec.ended[done.PID()][0]
	require.Equal(t, "run", e.Method)
	require.NoError(t, e.Err)
	require.Equal(t, "ok", e.Result.Value())
	require.Equal(t, uint64(1), e.Steps)
	require.GreaterOrEqual(t, e.Duration, time.Duration(0))
	require.False(t, e.Forced)
	require.EqualError(t, rec.ended[failing.PID()][0].Err, "failed")
	require.ErrorIs(t, rec.ended[panicking.PID()][0].Err, sched.ErrPanic)
	require.ErrorIs(t, rec.ended[yielding.PID()][0].Err, sched.ErrPanic)
	require.Equal(t, uint64(2), rec.ended[yielding.PID()][0].Steps)
	fe := rec.ended[ignoring.PID()][0]
	require.True(t, fe.Forced)
	require.ErrorIs(t, fe.Err, sched.ErrForced)

	wheres := map[string]int{}
	for _, p := range rec.panics {
		wheres[p.Err.Where]++
	}
	require.Equal(t, map[string]int{"Init": 1, "Step": 1, "handler": 1}, wheres)
	require.Equal(t, uint64(3), s.Stats().Processes.Panics)
}

// TestEndHookDuration: Duration is measured on the scheduler's coarse
// clock, which a worker advances when it fires a timer, so a
// process that sleeps reports at least its sleep.
func TestEndHookDuration(t *testing.T) {
	ended := make(chan sched.EndInfo, 1)
	s := newScheduler(t, sched.WithHooks(sched.Hooks{End: func(e sched.EndInfo) { ended <- e }}))
	const sleep = 30 * time.Millisecond
	h := submit(t, s, &probe{step: func(_ *probe, n int, _ []sched.Event, out *sched.StepOutput) error {
		if n == 0 {
			out.Sleep(1, sleep)
			return nil
		}
		out.Done(payload.Payload{})
		return nil
	}})
	_, err := waitEnd(t, s, h)
	require.NoError(t, err)
	e := receive(t, ended, "the End hook")
	require.GreaterOrEqual(t, e.Duration, sleep)
	require.Equal(t, uint64(2), e.Steps)
}

// TestHooksOrder: each hook runs where its doc puts it in the life of
// its process. Start comes after Init and before the first step; End
// after Close and before the Handle reports the end; Panic before the
// process ends with the PanicError.
func TestHooksOrder(t *testing.T) {
	type seen struct {
		inits, steps, closes int
		done                 bool
	}
	var (
		mu      sync.Mutex
		current *probe                         // the process being submitted
		handles = map[relay.PID]sched.Handle{} // filled before the processes end
		got     = map[string][]seen{}
	)
	record := func(hook string, pid relay.PID, p *probe) {
		mu.Lock()
		defer mu.Unlock()
		if p == nil {
			p = current
		}
		h, ok := handles[pid]
		got[hook] = append(got[hook], seen{p.Inits(), p.Steps(), p.Closes(), ok && isClosed(h.Done())})
	}
	probes := map[relay.PID]*probe{}
	probeOf := func(pid relay.PID) *probe {
		mu.Lock()
		defer mu.Unlock()
		return probes[pid]
	}
	s := newScheduler(t, sched.WithHooks(sched.Hooks{
		Start: func(i sched.StartInfo) { record("Start", i.PID, nil) },
		End:   func(i sched.EndInfo) { record("End", i.PID, probeOf(i.PID)) },
		Panic: func(i sched.PanicInfo) { record("Panic", i.PID, probeOf(i.PID)) },
	}))
	start := func(p *probe) sched.Handle {
		mu.Lock()
		current = p
		mu.Unlock()
		h := submit(t, s, p)
		mu.Lock()
		handles[h.PID()], probes[h.PID()] = h, p
		mu.Unlock()
		return h
	}
	ends := start(&probe{step: untilMessage})
	panics := start(&probe{step: func(_ *probe, n int, _ []sched.Event, _ *sched.StepOutput) error {
		if n > 0 {
			panic("boom")
		}
		return nil
	}})
	require.NoError(t, s.Tell(ends.PID(), "end"))
	_, err := waitEnd(t, s, ends)
	require.NoError(t, err)
	require.NoError(t, s.Tell(panics.PID(), "panic"))
	_, err = waitEnd(t, s, panics)
	require.ErrorIs(t, err, sched.ErrPanic)

	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, map[string][]seen{
		"Start": {{inits: 1}, {inits: 1}},
		"End":   {{inits: 1, steps: 2, closes: 1}, {inits: 1, steps: 2, closes: 1}},
		"Panic": {{inits: 1, steps: 2}},
	}, got)
}

// TestHooksMayCallTheScheduler: a hook may call the scheduler's methods
// (Shutdown aside on Submit's caller). Here the End hook, on a worker,
// sends the ending process's PID to another process, and tries to
// register a name for the ending process and to monitor it; the Start
// hook of a step's child and the Panic and DeadLetter hooks read Stats
// and Lookup. Every call returns and what they sent arrives. The End
// hook runs once its process has gone: the name is refused, and the
// monitor reports the process gone.
func TestHooksMayCallTheScheduler(t *testing.T) {
	var (
		mu       sync.Mutex
		collect  relay.PID // the process the End hook tells
		target   relay.PID // the process whose End hook registers and monitors
		regErr   error
		monitors = make(chan sched.Exit, 1)
		calls    = map[string]int{}
		s        *sched.Scheduler
	)
	called := func(hook string) {
		_ = s.Stats()
		_, _ = s.Lookup("nobody")
		mu.Lock()
		calls[hook]++
		mu.Unlock()
	}
	s = newScheduler(t, sched.WithWorkers(1), sched.WithHooks(sched.Hooks{
		Start:      func(sched.StartInfo) { called("Start") },
		Panic:      func(sched.PanicInfo) { called("Panic") },
		DeadLetter: func(sched.DeadLetter) { called("DeadLetter") },
		End: func(e sched.EndInfo) {
			called("End")
			mu.Lock()
			to, watched := collect, target
			mu.Unlock()
			if e.PID == to {
				return
			}
			if e.PID == watched {
				err := s.Register("end-hook", e.PID)
				mu.Lock()
				regErr = err
				mu.Unlock()
				s.Monitor(e.PID, func(x sched.Exit) { monitors <- x })
			}
			if err := s.Tell(to, e.PID); err != nil {
				t.Errorf("Tell from the End hook: %v", err)
			}
		},
	}))
	collector := submit(t, s, &probe{step: func(p *probe, _ int, _ []sched.Event, out *sched.StepOutput) error {
		if len(p.EventsOf(sched.EventMessage)) == 2 {
			out.Done(payload.Payload{})
		}
		return nil
	}})
	mu.Lock()
	collect = collector.PID()
	mu.Unlock()

	// A parent spawns a child (whose Start hook runs on the worker) and
	// panics a little after telling the child two messages; the child
	// ends with the second unread.
	child := &probe{step: func(_ *probe, n int, _ []sched.Event, out *sched.StepOutput) error {
		if n > 0 {
			out.DoneAfter(1, payload.Payload{}) // the second message stays unread
		}
		return nil
	}}
	parent := submit(t, s, &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
		if n == 0 {
			out.Spawn(1, child, "child", nil)
			return nil
		}
		if ev, ok := completionOf(evs, 1); ok {
			mu.Lock()
			target = ev.From
			mu.Unlock()
			out.Tell(ev.From, "first")
			out.Tell(ev.From, "unread")
			out.Sleep(2, time.Millisecond)
			return nil
		}
		if _, ok := completionOf(evs, 2); ok {
			panic("after the spawn")
		}
		return nil
	}})
	_, err := waitEnd(t, s, parent)
	require.ErrorIs(t, err, sched.ErrPanic)
	_, err = waitEnd(t, s, collector)
	require.NoError(t, err)
	mu.Lock()
	childPID := target
	mu.Unlock()

	// The End hook runs once the process has gone: it can no longer be
	// named, and a monitor of it reports it gone at once.
	x := receive(t, monitors, "the monitor set by the End hook")
	assert.Equal(t, childPID, x.PID)
	assert.Equal(t, sched.ExitGone, x.Reason)
	_, err = s.Lookup("end-hook")
	assert.ErrorIs(t, err, sched.ErrNameNotFound)
	mu.Lock()
	defer mu.Unlock()
	assert.ErrorIs(t, regErr, sched.ErrProcessNotFound, "Register from the End hook")
	assert.Equal(t, 3, calls["Start"], "Start")
	assert.Equal(t, 1, calls["Panic"], "Panic")
	assert.GreaterOrEqual(t, calls["DeadLetter"], 1, "DeadLetter")
	assert.Equal(t, 3, calls["End"], "End")
}

// TestStartHookSeesItsProcessUnpublished: the process a Start hook
// reports is published once the hook returns, as after Init: from the
// hook, a message to it, a Terminate and a name for it are refused with
// ErrProcessNotFound, and a Monitor of it reports ExitGone. Once Submit
// has returned, all of them reach it.
func TestStartHookSeesItsProcessUnpublished(t *testing.T) {
	type seen struct {
		tell, terminate, register error
		live                      int64 // Stats' count
	}
	var s *sched.Scheduler
	seenc := make(chan seen, 1)
	exits := make(chan sched.Exit, 1)
	s = newScheduler(t, sched.WithHooks(sched.Hooks{Start: func(i sched.StartInfo) {
		seenc <- seen{
			tell:      s.Tell(i.PID, "from the Start hook"),
			terminate: s.Terminate(i.PID),
			register:  s.Register("started", i.PID),
			live:      s.Stats().Processes.Live,
		}
		_, listed := findProcess(s, i.PID)
		if listed {
			t.Errorf("Processes lists %v from its Start hook", i.PID)
		}
		s.Monitor(i.PID, func(x sched.Exit) { exits <- x })
	}}))
	p := &probe{step: untilMessage}
	h := submit(t, s, p)
	got := receive(t, seenc, "the Start hook")
	require.ErrorIs(t, got.tell, sched.ErrProcessNotFound, "Tell from the Start hook")
	require.ErrorIs(t, got.terminate, sched.ErrProcessNotFound, "Terminate from the Start hook")
	require.ErrorIs(t, got.register, sched.ErrProcessNotFound, "Register from the Start hook")
	assert.Equal(t, sched.ExitGone, receive(t, exits, "the Start hook's monitor").Reason)
	assert.Equal(t, int64(1), got.live, "Stats counts the process live from its Start hook")

	require.NoError(t, s.Register("started", h.PID()))
	require.NoError(t, s.Tell(h.PID(), "after Submit"))
	res, err := waitEnd(t, s, h)
	require.NoError(t, err)
	assert.Equal(t, "after Submit", res.Value(), "the first message read")
	assert.Empty(t, p.EventsOf(sched.EventCancel), "no Terminate reached it")
	requireLifecycle(t, p)
}

// TestEndInItsOrder: the end of a process goes in the order design.md's
// invariant 6 gives: Close, then the End hook, then the messages it left
// unread to the DeadLetter hook, and then its Handle reports the end.
// Its name finds it in none of them: the process has ended, for its
// names, from the return of its final step. The process holds its final
// step while a message arrives, which it leaves unread.
func TestEndInItsOrder(t *testing.T) {
	var (
		mu    sync.Mutex
		order []string
		h     sched.Handle
		s     *sched.Scheduler
	)
	note := func(what string) {
		mu.Lock()
		defer mu.Unlock()
		if isClosed(h.Done()) {
			what += " (after the Handle reported)"
		}
		if _, err := s.Lookup("ender"); err == nil {
			what += " (named)"
		}
		order = append(order, what)
	}
	s = newScheduler(t, sched.WithHooks(sched.Hooks{
		End:        func(sched.EndInfo) { note("End hook") },
		DeadLetter: func(sched.DeadLetter) { note("DeadLetter hook") },
	}))
	held, gate := make(chan struct{}), make(chan struct{})
	var release sync.Once
	open := func() { release.Do(func() { close(gate) }) }
	t.Cleanup(open) // a failure below must not leave the step held
	p := &probe{
		step: func(_ *probe, n int, _ []sched.Event, out *sched.StepOutput) error {
			if n == 1 {
				close(held)
				<-gate // the message arrives meanwhile: unread
				out.Done(payload.Payload{})
			}
			return nil
		},
		close: func() { note("Close") },
	}
	mu.Lock()
	h = submit(t, s, p)
	mu.Unlock()
	require.NoError(t, s.Register("ender", h.PID()))
	require.NoError(t, s.Tell(h.PID(), "end"))
	receive(t, held, "the final step")
	require.NoError(t, s.Tell(h.PID(), "unread"))
	open()
	_, err := waitEnd(t, s, h)
	require.NoError(t, err)
	note("Handle")
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"Close", "End hook", "DeadLetter hook", "Handle (after the Handle reported)"}, order)
}
