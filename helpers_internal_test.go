package scheduler

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/procsched/scheduler/payload"
)

// The test kit of the package's internal tests (those that look at
// unexported state), the only place their shared helpers live. It mirrors
// the external tests' kit in helpers_test.go, which these tests cannot
// import: one constructor, one bound on every wait, the helpers that wait
// with it, the stepFunc adapter, and holdWorker for the tests of starts
// made while the only worker is held.

// testTimeout bounds every wait of these tests: a condition that has not
// come true by then is a failure (a lost wakeup, a missing event), not
// slowness.
const testTimeout = 10 * time.Second

// newScheduler starts a scheduler and shuts it down when the test ends,
// failing the test if the processes do not end at their cancel within
// testTimeout. A test that shut the scheduler down itself, forcing
// processes, makes the cleanup's Shutdown return that result again
// (ErrForced without the cleanup's own deadline), which is fine.
func newScheduler(t testing.TB, opts ...Option) *Scheduler {
	t.Helper()
	s, err := New(opts...)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		err := s.Shutdown(ctx)
		if err != nil && !(errors.Is(err, ErrForced) && !errors.Is(err, context.DeadlineExceeded)) {
			t.Errorf("Shutdown at cleanup: %v", err)
		}
	})
	return s
}

// waitEnd waits for h's process to end and returns its error, failing the
// test if it does not end within testTimeout.
func waitEnd(t testing.TB, h Handle) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	_, err := h.Wait(ctx)
	require.NotErrorIs(t, err, context.DeadlineExceeded, "process %v did not end within %v", h.PID(), testTimeout)
	return err
}

// receive receives from ch or fails the test after testTimeout.
func receive[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	timer := time.NewTimer(testTimeout)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("timed out after %v waiting for %s", testTimeout, what)
		panic("unreachable")
	}
}

// eventually polls cond until it holds, failing the test after
// testTimeout. It is for conditions nothing announces (counters, states);
// it never stands in for a condition that can be waited on.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for i := 0; !cond(); i++ {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", testTimeout, what)
		}
		if i < 100 {
			runtime.Gosched()
			continue
		}
		<-time.After(time.Millisecond)
	}
}

// stepFunc is a process made of its Step alone: Init and Close do
// nothing. A test process that needs neither is a stepFunc, or, when it
// keeps state in a struct, embeds stepOnly.
type stepFunc func(evs []Event, out *StepOutput) error

func (stepFunc) Init(context.Context, string, payload.Payloads) error { return nil }
func (f stepFunc) Step(evs []Event, out *StepOutput) error            { return f(evs, out) }
func (stepFunc) Close()                                               {}

// numbered makes a stepFunc of a step function that is also told the
// step's number (0 for the first).
func numbered(step func(n int, evs []Event, out *StepOutput) error) stepFunc {
	n := 0
	return func(evs []Event, out *StepOutput) error {
		i := n
		n++
		return step(i, evs, out)
	}
}

// stepOnly gives a struct process the Init and Close of a stepFunc: it
// is embedded by test processes that keep state in a struct and need
// neither. It has no size, so it changes no allocation a test measures.
type stepOnly struct{}

func (stepOnly) Init(context.Context, string, payload.Payloads) error { return nil }
func (stepOnly) Close()                                               {}

// twoIdleWorkers returns the two workers of a scheduler that is built
// but never started: no goroutine runs them, so a test drives their
// queues and steals step by step.
func twoIdleWorkers() (*worker, *worker) {
	return twoIdleWorkersOf(&Scheduler{})
}

// twoIdleWorkersOf is twoIdleWorkers for s, a scheduler with the
// options the test sets in its fields, not yet given workers.
func twoIdleWorkersOf(s *Scheduler) (*worker, *worker) {
	s.timers = newTimerService(s, 2)
	s.workers = []*worker{newWorker(s, 0), newWorker(s, 1)}
	return s.workers[0], s.workers[1]
}

// holdWorker starts a process that holds the one worker of s in its
// step until the returned release is called (which the test's cleanup
// also does), so that everything started meanwhile waits on the global
// queue, where only a helping caller can run it.
func holdWorker(t *testing.T, s *Scheduler) (release func()) {
	t.Helper()
	entered, released := make(chan struct{}), make(chan struct{})
	_, err := s.Spawn(context.Background(), stepFunc(func(_ []Event, out *StepOutput) error {
		close(entered)
		<-released
		out.Done(payload.Payload{})
		return nil
	}), "hold", nil)
	require.NoError(t, err)
	receive(t, entered, "the holding step")
	var once atomic.Bool
	release = func() {
		if once.CompareAndSwap(false, true) {
			close(released)
		}
	}
	t.Cleanup(release)
	return release
}

// manyStarts is enough starts, with the worker held, for the global
// queue to grow a ring that holds more than yieldBacklog: the rings
// double as the queue grows, and what a push sees ahead of it is its own
// ring's part of the backlog (see globalq's Push). The caller then comes
// to its yield points many times.
const manyStarts = 40 * yieldBacklog
