package scheduler_test

import (
	"context"
	"errors"
	"math"
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

// Tests of timers seen from outside (timer.go): sleeps and yield
// deadlines. timer_internal_test.go looks inside the timer shards.

// oneYield submits a process that writes yield at its first step (the
// completion it waits for has tag 1) and ends with that completion.
func oneYield(t *testing.T, s *sched.Scheduler, yield func(out *sched.StepOutput)) (sched.Handle, *probe) {
	t.Helper()
	p := &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
		if n == 0 {
			yield(out)
			return nil
		}
		if ev, ok := completionOf(evs, 1); ok {
			out.Done(payload.Of(ev))
		}
		return nil
	}}
	return submit(t, s, p), p
}

func TestTimeout(t *testing.T) {
	t.Run("a call that does not answer in time", func(t *testing.T) {
		calls := make(chan sched.Call, 1)
		s := newScheduler(t, sched.WithHandler(cmdTest, func(c sched.Call) error {
			calls <- c
			return nil
		}))
		start := time.Now()
		h, _ := oneYield(t, s, func(out *sched.StepOutput) {
			out.Yield(1, cmdTest, nil)
			out.Timeout(1, 20*time.Millisecond)
		})
		c := receive(t, calls, "the call")
		ctx := c.Context()
		deadline, ok := ctx.Deadline()
		require.True(t, ok, "the handler's context has the deadline")
		assert.WithinRange(t, deadline, start.Add(20*time.Millisecond), time.Now().Add(20*time.Millisecond))
		ev := answerOf(t, s, h)
		require.ErrorIs(t, ev.Error, sched.ErrTimeout)
		require.ErrorIs(t, ev.Error, context.DeadlineExceeded)
		assert.False(t, time.Now().Before(deadline), "completed before its deadline")
		receive(t, ctx.Done(), "the call's context")
		assert.ErrorIs(t, ctx.Err(), context.DeadlineExceeded)
		assert.ErrorIs(t, context.Cause(ctx), sched.ErrTimeout)
		_, ok = ctx.Deadline()
		assert.False(t, ok, "a deadline once the yield is no longer pending")
		assert.ErrorIs(t, c.Complete("late", nil), sched.ErrProcessNotFound)
	})

	t.Run("a call that answers first leaves nothing behind", func(t *testing.T) {
		calls := make(chan sched.Call, 1)
		s := newScheduler(t, sched.WithHandler(cmdTest, func(c sched.Call) error {
			calls <- c
			return nil
		}))
		p := &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
			if n == 0 {
				out.Yield(1, cmdTest, nil)
				out.Timeout(1, time.Hour)
			}
			if hasCancel(evs) {
				out.Done(payload.Payload{})
			}
			return nil // lives on after the answer
		}}
		h := submit(t, s, p)
		c := receive(t, calls, "the call")
		assert.Equal(t, 1, s.Stats().Timers, "the deadline's timer")
		require.NoError(t, c.Complete("answer", nil))
		assert.Equal(t, 0, s.Stats().Timers, "the deadline's timer is released with the answer")
		eventually(t, "the answer", func() bool { return len(p.EventsOf(sched.EventYieldComplete)) == 1 })
		require.NoError(t, s.Terminate(h.PID()))
		_, err := waitEnd(t, s, h)
		require.NoError(t, err)
		evs := p.EventsOf(sched.EventYieldComplete)
		require.Len(t, evs, 1)
		assert.Equal(t, "answer", evs[0].Data)
	})

	t.Run("of a yield from an earlier step", func(t *testing.T) {
		s := newScheduler(t, sched.WithHandler(cmdTest, func(sched.Call) error { return nil }))
		p := &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
			switch {
			case n == 0:
				out.Yield(1, cmdTest, nil)
			case len(evs) > 0 && evs[0].Type == sched.EventMessage:
				out.Timeout(1, time.Millisecond)
			default:
				if ev, ok := completionOf(evs, 1); ok {
					out.Done(payload.Of(ev))
				}
			}
			return nil
		}}
		h := submit(t, s, p)
		waitState(t, s, h.PID(), sched.StateBlocked)
		require.NoError(t, s.Tell(h.PID(), "set the deadline now"))
		assert.ErrorIs(t, answerOf(t, s, h).Error, sched.ErrTimeout)
	})

	t.Run("zero or less: at once, and the work never starts", func(t *testing.T) {
		called := make(chan struct{}, 1)
		s := newScheduler(t, sched.WithHandler(cmdTest, func(sched.Call) error { called <- struct{}{}; return nil }))
		h, _ := oneYield(t, s, func(out *sched.StepOutput) {
			out.Yield(1, cmdTest, nil)
			out.Timeout(1, 0)
		})
		assert.ErrorIs(t, answerOf(t, s, h).Error, sched.ErrTimeout)
		select {
		case <-called:
			t.Fatal("the handler ran for a yield whose deadline had passed")
		default:
		}
	})

	t.Run("a request, a monitor, a spawn-await", func(t *testing.T) {
		s := newScheduler(t)
		silent := submit(t, s, &probe{step: untilCancel})
		child := &probe{step: untilMessage}
		for name, yield := range map[string]func(out *sched.StepOutput){
			"request": func(out *sched.StepOutput) { out.Request(1, silent.PID(), "q"); out.Timeout(1, time.Millisecond) },
			"monitor": func(out *sched.StepOutput) { out.Monitor(1, silent.PID()); out.Timeout(1, time.Millisecond) },
			"spawn-await": func(out *sched.StepOutput) {
				out.SpawnAwait(1, child, "run", nil)
				out.Timeout(1, time.Millisecond)
			},
		} {
			h, _ := oneYield(t, s, yield)
			assert.ErrorIs(t, answerOf(t, s, h).Error, sched.ErrTimeout, name)
		}
		assert.Zero(t, child.Closes(), "the child runs on")
		assert.Equal(t, 0, s.Stats().Timers)
		require.NoError(t, s.Terminate(silent.PID()))
	})

	t.Run("a sleep keeps its own time when that comes first", func(t *testing.T) {
		s := newScheduler(t)
		h, _ := oneYield(t, s, func(out *sched.StepOutput) { out.Sleep(1, time.Millisecond); out.Timeout(1, time.Hour) })
		assert.NoError(t, answerOf(t, s, h).Error)
		h, _ = oneYield(t, s, func(out *sched.StepOutput) { out.Sleep(1, time.Hour); out.Timeout(1, time.Millisecond) })
		assert.ErrorIs(t, answerOf(t, s, h).Error, sched.ErrTimeout)
		assert.Equal(t, 0, s.Stats().Timers)
	})
}

// TestSleepKeepsItsOwnTimeUnderALaterDeadline: a Sleep given a deadline
// before its own time, and then, in a later step, a deadline after it,
// completes at its own time without error, as a Sleep that comes first
// does: the earlier deadline, replaced, no longer counts, and the
// Sleep's own time was never given up. Both ways to give the first
// deadline: in the Sleep's own step, and in a step of its own.
func TestSleepKeepsItsOwnTimeUnderALaterDeadline(t *testing.T) {
	const (
		first = 400 * time.Millisecond // the first deadline, before the Sleep ends
		sleep = 600 * time.Millisecond // the Sleep's own time
	)
	for _, sameStep := range []bool{true, false} {
		name := "deadline in the Sleep's step"
		if !sameStep {
			name = "deadline in a step of its own"
		}
		t.Run(name, func(t *testing.T) {
			s := newScheduler(t)
			// The last deadline must be set before the first one
			// passes, which a machine busy enough may not do: such a
			// round tells nothing and is run again.
			for round := 1; ; round++ {
				var began, replaced time.Time
				p := &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
					switch {
					case n == 0:
						began = time.Now()
						out.Sleep(1, sleep)
						if sameStep {
							out.Timeout(1, first)
						}
						out.Continue()
					case n == 1 && !sameStep:
						out.Timeout(1, first-time.Since(began))
						out.Continue()
					case replaced.IsZero():
						replaced = time.Now()
						out.Timeout(1, time.Hour)
					}
					if ev, ok := completionOf(evs, 1); ok {
						out.Done(payload.Of(ev))
					}
					return nil
				}}
				h := submit(t, s, p)
				ev := answerOf(t, s, h)
				if replaced.Sub(began) >= first*3/4 && round < 5 {
					t.Logf("round %d: the last deadline was set %v after the Sleep: run again", round, replaced.Sub(began))
					continue
				}
				require.Less(t, replaced.Sub(began), first, "the last deadline came too late to tell anything")
				require.NoError(t, ev.Error, "the Sleep's own time came before the last deadline")
				assert.Zero(t, s.Stats().Timers, "a timer outlived the Sleep")
				return
			}
		})
	}
}

// TestTimeoutsOfOneStepAmongOtherTimers: in a step that sets several
// timers, a handler called for one of its yields sees that yield's
// deadline in its call's context while it runs, and of two Timeouts of
// one earlier yield in one step the later holds.
func TestTimeoutsOfOneStepAmongOtherTimers(t *testing.T) {
	t.Run("a handler sees its deadline while it runs", func(t *testing.T) {
		type seen struct {
			deadline time.Time
			ok       bool
		}
		seenBy := make(chan seen, 1)
		s := newScheduler(t, sched.WithHandler(cmdTest, func(c sched.Call) error {
			d, ok := c.Context().Deadline()
			seenBy <- seen{d, ok}
			return c.Complete("ok", nil)
		}))
		start := time.Now()
		h, _ := oneYield(t, s, func(out *sched.StepOutput) {
			out.Sleep(2, time.Hour)
			out.Yield(1, cmdTest, nil)
			out.Timeout(1, time.Hour)
			out.Sleep(3, time.Hour)
		})
		got := receive(t, seenBy, "the handler's look at its deadline")
		require.True(t, got.ok, "the handler's context has the deadline while the handler runs")
		assert.WithinRange(t, got.deadline, start.Add(time.Hour), time.Now().Add(time.Hour))
		ev := answerOf(t, s, h)
		require.NoError(t, ev.Error)
		assert.Equal(t, "ok", ev.Data)
		assert.Zero(t, s.Stats().Timers, "a timer outlived its process")
	})

	t.Run("a transport sees a remote monitor's deadline as it is called", func(t *testing.T) {
		remote := relay.PID{Node: 2, ID: 5}
		tr := &deadlineMonitors{fakeTransport: newFakeTransport(), seen: make(chan bool, 1)}
		s := newScheduler(t, sched.WithNode(1), sched.WithTransport(tr))
		h, _ := oneYield(t, s, func(out *sched.StepOutput) {
			out.Sleep(2, time.Hour)
			out.Monitor(1, remote)
			out.Timeout(1, time.Hour)
			out.Sleep(3, time.Hour)
		})
		require.True(t, receive(t, tr.seen, "the transport's look at the deadline"),
			"the monitor's call context has the deadline while MonitorRemote runs")
		ev := answerOf(t, s, h)
		require.NoError(t, ev.Error)
		assert.Equal(t, sched.Exit{PID: remote, Reason: sched.ExitGone}, ev.Data)
		assert.Zero(t, s.Stats().Timers, "a timer outlived its process")
	})

	t.Run("of two Timeouts in one step the later holds", func(t *testing.T) {
		s := newScheduler(t)
		start := time.Now()
		p := &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
			switch n {
			case 0:
				out.Sleep(1, 2*time.Hour)
				out.Continue()
			case 1:
				out.Timeout(1, time.Hour) // before the Sleep's time: replaces its timer
				out.Timeout(1, 20*time.Millisecond)
			}
			if ev, ok := completionOf(evs, 1); ok {
				out.Done(payload.Of(ev))
			}
			return nil
		}}
		ev := answerOf(t, s, submit(t, s, p))
		require.ErrorIs(t, ev.Error, sched.ErrTimeout)
		assert.Less(t, time.Since(start), time.Hour/2, "the first Timeout held")
		assert.Zero(t, s.Stats().Timers, "a timer outlived the Sleep")
	})
}

// deadlineMonitors is a transport that watches remote processes: it
// says whether the monitor's call context had a deadline when
// MonitorRemote was called, and completes the monitor at once with
// ExitGone.
type deadlineMonitors struct {
	*fakeTransport
	seen chan bool
}

func (d *deadlineMonitors) MonitorRemote(c sched.Call) error {
	_, ok := c.Context().Deadline()
	d.seen <- ok
	return c.Complete(sched.Exit{PID: c.Arg.(relay.PID), Reason: sched.ExitGone}, nil)
}

// TestTimeoutRacingCompletion: an answer racing the deadline completes the
// yield exactly once, with whichever came first, and no timer is left.
func TestTimeoutRacingCompletion(t *testing.T) {
	calls := make(chan sched.Call, 1)
	s := newScheduler(t, sched.WithHandler(cmdTest, func(c sched.Call) error {
		calls <- c
		return nil
	}))
	rng := rand.New(rand.NewPCG(1, 2))
	answered, timedOut := 0, 0
	for i := range 400 {
		d := time.Duration(1+rng.IntN(300)) * time.Microsecond
		h, p := oneYield(t, s, func(out *sched.StepOutput) { out.Yield(1, cmdTest, nil); out.Timeout(1, d) })
		// A deadline that passed before the yield was carried out
		// completes it without calling the handler.
		var c sched.Call
		called := false
		select {
		case c = <-calls:
			called = true
		case <-h.Done():
			select {
			case c = <-calls:
				called = true
			default:
			}
		}
		var wg sync.WaitGroup
		completeErr := sched.ErrYieldNotPending
		if called {
			pause := time.Duration(rng.IntN(300)) * time.Microsecond
			wg.Go(func() {
				time.Sleep(pause) // the race, not a wait
				completeErr = c.Complete(i, nil)
			})
		}
		ev := answerOf(t, s, h)
		wg.Wait()
		require.Len(t, p.EventsOf(sched.EventYieldComplete), 1, "iteration %d: exactly one completion", i)
		switch {
		case completeErr == nil:
			require.NoError(t, ev.Error, "iteration %d: the answer came first", i)
			require.Equal(t, i, ev.Data)
			answered++
		case errors.Is(completeErr, sched.ErrYieldNotPending), errors.Is(completeErr, sched.ErrProcessNotFound):
			require.ErrorIs(t, ev.Error, sched.ErrTimeout, "iteration %d: the deadline came first", i)
			timedOut++
		default:
			t.Fatalf("iteration %d: Complete: %v", i, completeErr)
		}
	}
	assert.Equal(t, 0, s.Stats().Timers, "timers left")
	t.Logf("answered first %d times, timed out %d times", answered, timedOut)
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
					out.Done(ev.Result())
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

// repeatSleeper sleeps an hour under tag 1, n times, and ends: someone
// else completes each sleep (CompleteYield).
type repeatSleeper struct {
	stepOnly
	left int
}

func (p *repeatSleeper) Step(_ []sched.Event, out *sched.StepOutput) error {
	if p.left == 0 {
		out.Done(payload.Payload{})
		return nil
	}
	p.left--
	out.Sleep(1, time.Hour)
	return nil
}

// TestSleepCompletedBeforeItsTimerIsSet: a sleep completed by its tag
// from outside, as soon as it can be (even between its registration and
// its timer), leaves no timer behind: the timers of an ended process
// are gone when its Handle reports the end.
func TestSleepCompletedBeforeItsTimerIsSet(t *testing.T) {
	s := newScheduler(t, sched.WithWorkers(2))
	h := submit(t, s, &repeatSleeper{left: 20_000})
	for done := false; !done; {
		select {
		case <-h.Done():
			done = true
		default:
			_ = s.CompleteYield(h.PID(), 1, nil, nil) // fails while no sleep is pending
		}
	}
	_, err := h.Result()
	require.NoError(t, err)
	assert.Zero(t, s.Stats().Timers, "timers left behind by an ended process")
}

// resleeper sleeps briefly under tag 1 and, in the step after, which
// runs about as long as other workers wait before they fire an overdue
// timer of a busy one, gives the sleep a deadline an hour away
// (StepOutput.Timeout), which a sleep that ends first keeps out; then it
// waits for the sleep. n rounds, then it ends.
type resleeper struct {
	stepOnly
	left  int
	phase int // 0: to sleep, 1: to set the deadline, 2: waiting
	rng   *rand.Rand
}

func (p *resleeper) Step(evs []sched.Event, out *sched.StepOutput) error {
	if _, ok := completionOf(evs, 1); ok {
		p.phase = 0
	}
	switch p.phase {
	case 0:
		if p.left == 0 {
			out.Done(payload.Payload{})
			return nil
		}
		p.left--
		out.Sleep(1, 20*time.Microsecond)
		out.Continue()
		p.phase = 1
	case 1:
		// Busy, not asleep: the race is between this worker setting the
		// deadline and another one firing the sleep.
		for d, start := time.Duration(100+p.rng.IntN(80))*time.Microsecond, time.Now(); time.Since(start) < d; {
		}
		out.Timeout(1, time.Hour)
		p.phase = 2
	}
	return nil
}

// TestTimeoutRacingTheSleepItReplaces: a deadline set on a sleep while
// the sleep fires either comes too late (the sleep completed) or replaces
// it; either way no timer outlives the yield.
func TestTimeoutRacingTheSleepItReplaces(t *testing.T) {
	s := newScheduler(t, sched.WithWorkers(4))
	h := submit(t, s, &resleeper{left: 20_000, rng: rand.New(rand.NewPCG(3, 4))})
	_, err := waitEnd(t, s, h)
	require.NoError(t, err)
	assert.Zero(t, s.Stats().Timers, "timers left behind by an ended process")
}

// TestSleepCompletedFromOutsideReleasesItsTimer: a Sleep that
// CompleteYield completes before its time lets its timer go at once,
// as a cancel or the process's end does: Stats.Timers counts only the
// timers that will still complete something. The process gets that
// completion, once.
func TestSleepCompletedFromOutsideReleasesItsTimer(t *testing.T) {
	s := newScheduler(t)
	p := &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
		if n == 0 {
			out.Sleep(1, time.Hour)
			return nil
		}
		if ev, ok := completionOf(evs, 1); ok {
			out.Done(ev.Result())
		}
		return nil
	}}
	h := submit(t, s, p)
	waitState(t, s, h.PID(), sched.StateBlocked)
	require.Equal(t, 1, s.Stats().Timers, "the Sleep's timer")
	require.NoError(t, s.CompleteYield(h.PID(), 1, "woken", nil))
	assert.Equal(t, 0, s.Stats().Timers, "the timer, once its yield completed from outside")
	res, err := waitEnd(t, s, h)
	require.NoError(t, err)
	assert.Equal(t, "woken", res.Value())
	assert.Len(t, p.EventsOf(sched.EventYieldComplete), 1)
}

// TestTimeoutsOfAnyLength: a Timeout takes any duration, as Sleep does.
// One too long for the clock to reach (math.MaxInt64, or a century)
// never passes: the yield it bounds completes as it would have without
// it. One of zero or less, however far below, has passed already: the
// yield completes at once with ErrTimeout.
func TestTimeoutsOfAnyLength(t *testing.T) {
	s := newScheduler(t)
	for _, tt := range []struct {
		d       time.Duration
		timeout bool
	}{
		{math.MaxInt64, false},
		{math.MaxInt64 - time.Millisecond, false},
		{100 * 365 * 24 * time.Hour, false},
		{0, true},
		{-time.Hour, true},
		{math.MinInt64, true},
	} {
		p := &probe{step: yieldOnce(1, func(out *sched.StepOutput) {
			out.Sleep(1, 10*time.Millisecond)
			out.Timeout(1, tt.d)
		})}
		_, err := waitEnd(t, s, submit(t, s, p))
		if tt.timeout {
			assert.ErrorIs(t, err, sched.ErrTimeout, "Timeout(%v)", tt.d)
		} else {
			assert.NoError(t, err, "Timeout(%v): the Sleep completes", tt.d)
		}
	}
	assert.Equal(t, 0, s.Stats().Timers, "timers left")
}

// TestTimeoutOfZeroOrLessOfASleep: a Timeout of zero or less given to a
// Sleep written in the same step completes it at once with ErrTimeout,
// as it does every other yield, whatever the Sleep's own time: its
// deadline has passed before the Sleep is carried out. So does any
// deadline of the step that has passed by then. Only a deadline still to
// come leaves a Sleep whose own time comes first (here, one that has
// passed) to complete as a Sleep.
func TestTimeoutOfZeroOrLessOfASleep(t *testing.T) {
	s := newScheduler(t)
	for _, tt := range []struct {
		name         string
		sleep, bound time.Duration
		timeout      bool
	}{
		{"both zero", 0, 0, true},
		{"the deadline before the Sleep's time, both passed", -time.Hour, -2 * time.Hour, true},
		{"the Sleep's time before the deadline, both passed", -2 * time.Hour, -time.Hour, true},
		{"a Sleep to come", time.Hour, 0, true},
		{"a Sleep passed, a deadline to come", -time.Hour, time.Hour, false},
	} {
		p := &probe{step: yieldOnce(1, func(out *sched.StepOutput) {
			out.Sleep(1, tt.sleep)
			out.Timeout(1, tt.bound)
		})}
		_, err := waitEnd(t, s, submit(t, s, p))
		if tt.timeout {
			assert.ErrorIs(t, err, sched.ErrTimeout, tt.name)
		} else {
			assert.NoError(t, err, tt.name)
		}
	}
	p := &probe{step: yieldOnce(1, func(out *sched.StepOutput) {
		out.SleepUntil(1, time.Time{}) // as far back as the clock goes
		out.Timeout(1, math.MinInt64)
	})}
	_, err := waitEnd(t, s, submit(t, s, p))
	assert.ErrorIs(t, err, sched.ErrTimeout, "the earliest Sleep and Timeout")
	eventually(t, "no timer left", func() bool { return s.Stats().Timers == 0 })
}

// TestTimersReleasedBeforeClose: a process's timers are released as its
// end begins, before its Close runs, however it ends: by Done, by an
// error, or forced at a shutdown deadline. Close finds Stats().Timers
// without them.
func TestTimersReleasedBeforeClose(t *testing.T) {
	for _, end := range []string{"done", "error", "forced"} {
		t.Run(end, func(t *testing.T) {
			s := newScheduler(t)
			timersAtClose := make(chan int, 1)
			p := &probe{
				step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
					switch {
					case n == 0:
						out.Sleep(1, time.Hour)
						out.Sleep(2, 2*time.Hour)
					case end == "forced" || len(evs) == 0 || evs[0].Type != sched.EventMessage:
						// a forced one ignores its cancel
					case end == "done":
						out.Done(payload.Payload{})
					default:
						return testError("the end")
					}
					return nil
				},
				close: func() { timersAtClose <- s.Stats().Timers },
			}
			h := submit(t, s, p)
			eventually(t, "the two timers set", func() bool { return s.Stats().Timers == 2 })
			if end == "forced" {
				ctx, cancel := context.WithCancel(context.Background())
				cancel() // the deadline has passed
				require.ErrorIs(t, s.Shutdown(ctx), sched.ErrForced)
			} else {
				require.NoError(t, s.Tell(h.PID(), "end"))
			}
			select {
			case n := <-timersAtClose:
				assert.Zero(t, n, "timers left while Close runs")
			case <-time.After(testTimeout):
				t.Fatalf("Close did not run within %v", testTimeout)
			}
		})
	}
}
