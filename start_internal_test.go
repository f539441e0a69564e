package scheduler

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/procsched/scheduler/payload"
)

// TestOutsideStartsYieldToABacklog checks when a caller outside the
// workers yields its processor as it starts processes (see yieldBacklog):
// never while fewer than yieldBacklog processes wait on the global queue
// before its own, and then once every yieldEvery starts at most. The one
// worker is held in a step, so that every start waits on the global
// queue and the backlog is what the test made it.
func TestOutsideStartsYieldToABacklog(t *testing.T) {
	s := newScheduler(t, WithWorkers(1), WithWatchdog(0))
	var yields atomic.Int64
	hook := func(y *Scheduler) {
		if y == s {
			yields.Add(1)
		}
	}
	testHookYield.Store(&hook)
	defer testHookYield.Store(nil)

	entered, release := make(chan struct{}), make(chan struct{})
	_, err := s.Spawn(context.Background(), stepFunc(func(_ []Event, out *StepOutput) error {
		close(entered)
		<-release
		out.Done(payload.Payload{})
		return nil
	}), "hold", nil)
	require.NoError(t, err)
	receive(t, entered, "the holding step")
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()

	var ended atomic.Int64
	leaf := stepFunc(func(_ []Event, out *StepOutput) error {
		ended.Add(1)
		out.Done(payload.Payload{})
		return nil
	})
	spawn := func(n int) {
		t.Helper()
		for range n {
			_, err := s.Spawn(context.Background(), leaf, "leaf", nil)
			require.NoError(t, err)
		}
	}

	const few = yieldBacklog - 24
	spawn(few)
	require.Zero(t, yields.Load(), "yields with %d processes queued, fewer than %d", few, yieldBacklog)

	// The queue's rings double as it grows, and what a push sees ahead
	// of it is its own ring's part of the backlog (see globalq's Push):
	// enough starts that one ring holds more than yieldBacklog.
	const many = 40 * yieldBacklog
	spawn(many)
	n := yields.Load()
	require.Positive(t, n, "no yield after %d starts with the worker held", few+many)
	require.LessOrEqual(t, n, int64(many/yieldEvery+1), "yields: more than one per %d starts", yieldEvery)

	close(release)
	released = true
	eventually(t, "every queued process ended", func() bool { return ended.Load() == few+many })
}
