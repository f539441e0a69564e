package schedhttp_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// timeout bounds every wait of these tests: a condition that has not come
// true by then is a failure, not slowness.
const timeout = 10 * time.Second

// newScheduler starts a scheduler and shuts it down when the test ends, so
// that goleak finds no worker left. A test that shut the scheduler down
// itself makes the cleanup's Shutdown return ErrClosed, which is fine.
func newScheduler(t testing.TB, opts ...scheduler.Option) *scheduler.Scheduler {
	t.Helper()
	s, err := scheduler.New(opts...)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil && !errors.Is(err, scheduler.ErrClosed) {
			t.Errorf("Shutdown at cleanup: %v", err)
		}
	})
	return s
}

// waiter waits for events and ends at cancel: a live process that stays
// Idle until its scheduler shuts down.
type waiter struct{}

func (waiter) Init(context.Context, string, payload.Payloads) error { return nil }

func (waiter) Step(events []scheduler.Event, out *scheduler.StepOutput) error {
	for _, ev := range events {
		if ev.Type == scheduler.EventCancel {
			out.Done(payload.Payload{})
		}
	}
	return nil
}

func (waiter) Close() {}

// finisher ends at its first step: with err, or done if err is nil.
type finisher struct{ err error }

func (finisher) Init(context.Context, string, payload.Payloads) error { return nil }

func (f finisher) Step(_ []scheduler.Event, out *scheduler.StepOutput) error {
	if f.err != nil {
		return f.err
	}
	out.Done(payload.Of("done"))
	return nil
}

func (finisher) Close() {}

// submit submits p under method, failing the test on error.
func submit(t testing.TB, s *scheduler.Scheduler, p scheduler.Process, method string) scheduler.Handle {
	t.Helper()
	h, err := s.Submit(context.Background(), p, method, payload.Payloads{})
	require.NoError(t, err)
	return h
}

// wait waits for h's process to end and returns its error, failing the
// test if it does not end within timeout.
func wait(t testing.TB, h scheduler.Handle) error {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-h.Done():
	case <-timer.C:
		t.Fatalf("process %v did not end within %v", h.PID(), timeout)
	}
	_, err := h.Result()
	return err
}

// eventually polls cond until it holds, failing the test after timeout.
// It is for conditions no channel announces (a process state, a counter).
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for i := 0; !cond(); i++ {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		if i < 100 {
			runtime.Gosched()
			continue
		}
		<-time.After(time.Millisecond)
	}
}

// waitIdle waits until s lists pid as Idle.
func waitIdle(t testing.TB, s *scheduler.Scheduler, pid relay.PID) {
	t.Helper()
	eventually(t, fmt.Sprintf("%v to be Idle", pid), func() bool {
		for _, info := range s.Processes() {
			if info.PID == pid {
				return info.State == scheduler.StateIdle
			}
		}
		return false
	})
}

// quiet is what quiescent leaves behind.
type quiet struct {
	s    *scheduler.Scheduler
	idle []scheduler.Handle // processes waiting for messages, until shutdown
}

// errBoom is the error of the process quiescent makes fail.
var errBoom = errors.New("boom")

// quiescent starts a scheduler with two workers and brings it to rest with
// known figures: three processes finished, one failed, and two waiting
// for messages (shutdown at cleanup ends them), one of which has read a
// message. It returns once every worker is parked and the per-step
// counters show every step, so that nothing changes until the test acts.
func quiescent(t *testing.T) quiet {
	t.Helper()
	s := newScheduler(t, scheduler.WithWorkers(2))
	var done []scheduler.Handle
	for range 3 {
		done = append(done, submit(t, s, finisher{}, "run"))
	}
	done = append(done, submit(t, s, finisher{err: errBoom}, "run"))
	for i, h := range done {
		err := wait(t, h)
		if i < 3 {
			require.NoError(t, err, "process %d", i)
		} else {
			require.ErrorIs(t, err, errBoom)
		}
	}
	q := quiet{s: s}
	for range 2 {
		q.idle = append(q.idle, submit(t, s, waiter{}, "run"))
	}
	for _, h := range q.idle {
		waitIdle(t, s, h.PID())
	}
	require.NoError(t, s.Tell(q.idle[0].PID(), "hello"))
	// 4 finished after one step each, 2 idle with a first step, 1 message.
	const steps = 4 + 2 + 1
	eventually(t, "the scheduler to come to rest", func() bool {
		st := s.Stats()
		return st.Steps == steps && st.Processes.Idle == 2 && st.Processes.Live == 2 &&
			st.Messages.Accepted == 1 && st.IdleWorkers == st.Workers
	})
	return q
}
