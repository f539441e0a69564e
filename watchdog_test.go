package scheduler_test

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// blocker's first step spawns children (queued on its worker) and tells
// a waiting process (put in its worker's next slot), then continues; its
// second step blocks until release is closed.
type blocker struct {
	stepOnly
	children int
	childRan *atomic.Int64
	allRan   chan struct{} // closed when every child has run
	wake     relay.PID
	entered  chan struct{}
	release  chan struct{}
	steps    int
}

func (b *blocker) Step(_ []sched.Event, out *sched.StepOutput) error {
	b.steps++
	switch b.steps {
	case 1:
		for i := range b.children {
			out.Spawn(uint64(i), &counted{ran: b.childRan, all: int64(b.children), done: b.allRan}, "run", nil)
		}
		if !b.wake.IsZero() {
			out.Tell(b.wake, "wake up")
		}
		out.Continue()
	case 2:
		close(b.entered)
		<-b.release // a step that takes far too long
		out.Done(payload.Payload{})
	}
	return nil
}

// counted counts its one step; the step that brings the count to all
// closes done.
type counted struct {
	stepOnly
	ran  *atomic.Int64
	all  int64
	done chan struct{}
}

func (c *counted) Step(_ []sched.Event, out *sched.StepOutput) error {
	if c.ran.Add(1) == c.all && c.done != nil {
		close(c.done)
	}
	out.Done(payload.Payload{})
	return nil
}

// waiter signals each message it gets.
type waiter struct {
	stepOnly
	got chan struct{}
}

func (w *waiter) Step(evs []sched.Event, out *sched.StepOutput) error {
	for _, ev := range evs {
		switch ev.Type {
		case sched.EventMessage:
			w.got <- struct{}{}
		case sched.EventCancel:
			out.Done(payload.Payload{})
		}
	}
	return nil
}

func TestWatchdogReportsSlowStepAndWorkMovesOn(t *testing.T) {
	slow := make(chan sched.SlowStepInfo, 4)
	s, err := sched.New(
		sched.WithWorkers(2),
		sched.WithWatchdog(20*time.Millisecond),
		sched.WithHooks(sched.Hooks{SlowStep: func(st sched.SlowStepInfo) { slow <- st }}),
	)
	require.NoError(t, err)
	release := make(chan struct{})
	defer func() {
		close(release)
		require.NoError(t, s.Shutdown(context.Background()))
	}()

	w := &waiter{got: make(chan struct{}, 1)}
	wh, err := s.Submit(context.Background(), w, "wait", nil)
	require.NoError(t, err)
	var childRan atomic.Int64
	b := &blocker{children: 50, childRan: &childRan, allRan: make(chan struct{}), wake: wh.PID(), entered: make(chan struct{}), release: release}
	bh, err := s.Submit(context.Background(), b, "block", nil)
	require.NoError(t, err)

	receive(t, b.entered, "the blocking step to start")
	// While the step is blocked, the other worker takes what was queued
	// behind it: the children from its deque, the waiter from its next
	// slot (after the watchdog marked the worker stalled).
	receive(t, w.got, "the process in the stuck worker's next slot to run")
	select {
	case <-b.allRan:
	case <-time.After(testTimeout):
		t.Fatalf("only %d of 50 children queued behind the stuck step ran", childRan.Load())
	}
	st := receive(t, slow, "the watchdog's report of the slow step")
	require.Equal(t, bh.PID(), st.PID)
	require.Equal(t, "block", st.Method)
	require.GreaterOrEqual(t, st.Duration, 20*time.Millisecond)
	require.Equal(t, uint64(1), s.Stats().SlowSteps)
	require.Empty(t, slow, "one slow step is reported once")
}

// slowStepper's one step holds its worker in the way its kind says until
// the watchdog has reported it, or the guard expires.
type slowStepper struct {
	stepOnly
	kind     string
	reported chan struct{}
	x        uint64 // what "computes" computed
}

func (p *slowStepper) Step(_ []sched.Event, out *sched.StepOutput) error {
	guard := time.After(testTimeout)
	done := func() bool {
		select {
		case <-p.reported:
			return true
		case <-guard:
			return true
		default:
			return false
		}
	}
	switch p.kind {
	case "waits on a channel":
		select {
		case <-p.reported:
		case <-guard:
		}
	case "sleeps":
		for !done() {
			time.Sleep(time.Millisecond)
		}
	case "computes":
		x := uint64(1)
		for !done() {
			for range 1000 {
				x ^= x << 13
				x ^= x >> 7
				x ^= x << 17
			}
		}
		p.x = x
	}
	out.Done(payload.Payload{})
	return nil
}

// TestWatchdogReportsSlowSteps: a step that blocks, sleeps or computes
// for longer than the threshold is reported once, with its process, entry
// point, worker, and a counted duration of at least the threshold; so is
// one that computes on the only processor, which the watchdog has to take
// from it to look.
func TestWatchdogReportsSlowSteps(t *testing.T) {
	const threshold = 20 * time.Millisecond
	for _, tc := range []struct {
		name, kind string
		procs      int // GOMAXPROCS for the test; 0: unchanged
	}{
		{"waits on a channel", "waits on a channel", 0},
		{"sleeps", "sleeps", 0},
		{"computes", "computes", 0},
		{"computes on one processor", "computes", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.procs > 0 {
				defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(tc.procs))
			}
			slow := make(chan sched.SlowStepInfo, 4)
			s, err := sched.New(
				sched.WithWorkers(2),
				sched.WithWatchdog(threshold),
				sched.WithHooks(sched.Hooks{SlowStep: func(st sched.SlowStepInfo) { slow <- st }}),
			)
			require.NoError(t, err)
			defer func() { require.NoError(t, s.Shutdown(context.Background())) }()

			p := &slowStepper{kind: tc.kind, reported: make(chan struct{})}
			h, err := s.Submit(context.Background(), p, "slow", nil)
			require.NoError(t, err)
			st := receive(t, slow, "the watchdog's report of the slow step")
			close(p.reported)
			_, err = h.Wait(context.Background())
			require.NoError(t, err)
			require.Equal(t, h.PID(), st.PID)
			require.Equal(t, "slow", st.Method)
			require.Contains(t, []int{0, 1}, st.Worker)
			require.GreaterOrEqual(t, st.Duration, threshold)
			require.Equal(t, uint64(1), s.Stats().SlowSteps)
			require.Empty(t, slow, "one slow step is reported once")
		})
	}
}

func TestWatchdogOff(t *testing.T) {
	s, err := sched.New(sched.WithWatchdog(0), sched.WithHooks(sched.Hooks{SlowStep: func(sched.SlowStepInfo) {
		t.Error("hook called with the watchdog off")
	}}))
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Shutdown(context.Background())) }()
	release := make(chan struct{})
	var once sync.Once
	let := func() { once.Do(func() { close(release) }) }
	defer let() // before the Shutdown deferred above, which waits for the step
	b := &blocker{childRan: new(atomic.Int64), entered: make(chan struct{}), release: release}
	h, err := s.Submit(context.Background(), b, "block", nil)
	require.NoError(t, err)
	receive(t, b.entered, "the blocking step")
	let()
	_, err = h.Wait(context.Background())
	require.NoError(t, err)
	require.Zero(t, s.Stats().SlowSteps)
}

func TestWatchdogNegativeThreshold(t *testing.T) {
	_, err := sched.New(sched.WithWatchdog(-time.Second))
	require.ErrorIs(t, err, sched.ErrInvalidOption)
}

// TestWatchdogWatchesWhileShutdownWaits: the watchdog goes on until
// Shutdown has seen every process end, so a step that holds a shutdown
// up (here one that blocks on its cancel) is reported like any other;
// once Shutdown has returned, the count is final.
func TestWatchdogWatchesWhileShutdownWaits(t *testing.T) {
	const threshold = 20 * time.Millisecond
	slow := make(chan sched.SlowStepInfo, 4)
	s, err := sched.New(
		sched.WithWorkers(1),
		sched.WithWatchdog(threshold),
		sched.WithHooks(sched.Hooks{SlowStep: func(st sched.SlowStepInfo) { slow <- st }}),
	)
	require.NoError(t, err)
	release := make(chan struct{})
	var once sync.Once
	let := func() { once.Do(func() { close(release) }) }
	h, err := s.Submit(context.Background(), stepFunc(func(evs []sched.Event, out *sched.StepOutput) error {
		for _, ev := range evs {
			if ev.Type == sched.EventCancel {
				<-release // cleanup that takes far too long
				out.Done(payload.Payload{})
			}
		}
		return nil
	}), "cleanup", nil)
	require.NoError(t, err)
	stopped := make(chan error, 1)
	go func() { stopped <- s.Shutdown(context.Background()) }()
	defer let() // a failure must not leave the step, and so the shutdown, blocked
	st := receive(t, slow, "the watchdog's report of the step holding up the shutdown")
	require.Equal(t, h.PID(), st.PID)
	require.Equal(t, "cleanup", st.Method)
	require.GreaterOrEqual(t, st.Duration, threshold)
	require.Equal(t, uint64(1), s.Stats().SlowSteps)
	let()
	require.NoError(t, receive(t, stopped, "Shutdown"))
	require.Equal(t, uint64(1), s.Stats().SlowSteps, "final after Shutdown")
	require.Empty(t, slow, "one slow step is reported once")
}

// TestWatchdogReportsHandlerBlockingItsWorker: a handler that blocks the
// worker it runs on, which the watchdog was not watching, is reported as
// a slow step of the process whose yield it serves: until the worker
// passes a step boundary, the watchdog cannot tell a handler, a hook,
// Init or Close from the step.
func TestWatchdogReportsHandlerBlockingItsWorker(t *testing.T) {
	const threshold = 20 * time.Millisecond
	slow := make(chan sched.SlowStepInfo, 4)
	reported := make(chan struct{})
	var once sync.Once
	let := func() { once.Do(func() { close(reported) }) }
	defer let() // a failure must not leave the worker blocked
	s := newScheduler(t,
		sched.WithWorkers(1),
		sched.WithWatchdog(threshold),
		sched.WithHooks(sched.Hooks{SlowStep: func(st sched.SlowStepInfo) { slow <- st }}),
		sched.WithHandler(cmdTest, func(c sched.Call) error {
			<-reported // blocks its worker, as a handler must not
			return c.Complete(nil, nil)
		}))
	h, err := s.Submit(context.Background(), stepFunc(func(evs []sched.Event, out *sched.StepOutput) error {
		if len(evs) == 0 {
			out.Yield(1, cmdTest, nil)
			return nil
		}
		out.Done(payload.Payload{})
		return nil
	}), "asks", nil)
	require.NoError(t, err)
	st := receive(t, slow, "the watchdog's report of the blocking handler")
	let()
	_, err = waitEnd(t, s, h)
	require.NoError(t, err)
	require.Equal(t, h.PID(), st.PID)
	require.Equal(t, "asks", st.Method)
	require.GreaterOrEqual(t, st.Duration, threshold)
	require.Equal(t, uint64(1), s.Stats().SlowSteps)
}
