package remote_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	scheduler "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/remote"
)

// TestHandleExitFromTheHandle: a process this node started for an
// awaited spawn (or whose watch a peer asked for) may end before the
// monitor is set up, which then reports it gone; its Handle still knows
// how it ended, and the exit sent on says that: done with its result,
// failed with its error, forced at a shutdown deadline, or, while the
// Handle does not know yet, the exit the monitor gave.
func TestHandleExitFromTheHandle(t *testing.T) {
	s, err := scheduler.New()
	require.NoError(t, err)
	errStep := errors.New("the step failed")
	done := tSubmit(t, s, func(_ *tProc, _ int, _ []scheduler.Event, out *scheduler.StepOutput) error {
		out.Done(payload.Of("result"))
		return nil
	})
	failed := tSubmit(t, s, func(*tProc, int, []scheduler.Event, *scheduler.StepOutput) error { return errStep })
	stuck := tSubmit(t, s, func(*tProc, int, []scheduler.Event, *scheduler.StepOutput) error { return nil }) // ignores its cancellation
	for _, h := range []scheduler.Handle{done, failed} {
		_, _ = tWaitResult(t, h)
	}
	gone := func(h scheduler.Handle) scheduler.Exit {
		return scheduler.Exit{PID: h.PID(), Reason: scheduler.ExitGone, Err: scheduler.ErrProcessNotFound}
	}

	e := remote.HandleExit(done, gone(done))
	assert.Equal(t, scheduler.ExitDone, e.Reason)
	assert.Equal(t, done.PID(), e.PID)
	assert.Equal(t, "result", e.Result.Value())
	assert.NoError(t, e.Err)

	e = remote.HandleExit(failed, gone(failed))
	assert.Equal(t, scheduler.ExitFailed, e.Reason)
	assert.ErrorIs(t, e.Err, errStep)

	e = remote.HandleExit(stuck, gone(stuck))
	assert.Equal(t, gone(stuck), e, "a process still running: the monitor's exit, as it was")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, s.Shutdown(ctx), scheduler.ErrForced)
	e = remote.HandleExit(stuck, gone(stuck))
	assert.Equal(t, scheduler.ExitForced, e.Reason)
	assert.ErrorIs(t, e.Err, scheduler.ErrForced)
}
