package scheduler_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sched "github.com/procsched/scheduler"
)

// Tests of the Handle (handle.go).

func TestHandleBeforeEnd(t *testing.T) {
	s := newScheduler(t)
	p := &probe{step: untilMessage}
	h := submit(t, s, p)

	_, err := h.Result()
	require.ErrorIs(t, err, sched.ErrNotEnded, "Result while the process waits for a message")
	assert.False(t, isClosed(h.Done()), "Done closed while the process waits for a message")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = h.Wait(ctx)
	require.ErrorIs(t, err, context.Canceled, "Wait with a done context returns its error")

	require.NoError(t, s.Tell(h.PID(), 42))
	res, err := waitEnd(t, s, h)
	require.NoError(t, err)
	assert.Equal(t, 42, res.Value())
}

func TestZeroHandle(t *testing.T) {
	var h sched.Handle
	assert.True(t, h.PID().IsZero())
	assert.True(t, isClosed(h.Done()), "zero Handle's Done is closed")
	_, err := h.Wait(context.Background())
	require.ErrorIs(t, err, sched.ErrProcessNotFound)
	_, err = h.Result()
	require.ErrorIs(t, err, sched.ErrProcessNotFound)
}

// TestWaitAfterEndIgnoresDoneContext: once the process has ended, Wait
// gives its result whatever the context, every time: a caller with a
// deadline that has passed still collects what is there.
func TestWaitAfterEndIgnoresDoneContext(t *testing.T) {
	s := newScheduler(t)
	h := submit(t, s, &probe{step: untilMessage})
	require.NoError(t, s.Tell(h.PID(), 7))
	_, err := waitEnd(t, s, h)
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 200 {
		res, err := h.Wait(ctx)
		require.NoError(t, err, "Wait on an ended process with a done context")
		require.Equal(t, 7, res.Value())
	}
}

// BenchmarkWaitEnded: Wait on the Handle of a process that has ended, the
// common case when a batch is submitted and then collected.
func BenchmarkWaitEnded(b *testing.B) {
	s := newScheduler(b)
	h, err := s.Submit(context.Background(), oneStep, "run", nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, err := h.Wait(ctx); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := h.Wait(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
