package scheduler

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/procsched/scheduler/payload"
)

// Tests of Handle.Wait's blocking path (handle.go): a Wait that starts
// before its process ends. They look at the record to see that the Wait
// has found the process going on and is about to block, or blocks.

// waitOutcome is what a Wait returned.
type waitOutcome struct {
	res payload.Payload
	err error
}

// waitInBackground starts a Wait on h with ctx and returns where its
// outcome will be sent, once the Wait has found the process going on
// (it made the end channel it then blocks on). h must be the Handle of a
// process that goes on and that nothing has asked for that channel yet.
func waitInBackground(t *testing.T, ctx context.Context, h Handle) <-chan waitOutcome {
	t.Helper()
	require.False(t, waitersBlocked(h), "the end channel of %v was made already", h.PID())
	out := make(chan waitOutcome, 1)
	go func() {
		res, err := h.Wait(ctx)
		out <- waitOutcome{res, err}
	}()
	eventually(t, "Wait to block", func() bool { return waitersBlocked(h) })
	return out
}

// waitersBlocked reports whether h's process has not ended and a Wait
// has made the channel it blocks on.
func waitersBlocked(h Handle) bool {
	h.p.mu.Lock()
	defer h.p.mu.Unlock()
	return h.p.flags&pfEnded == 0 && h.p.end().done != nil
}

// endsOnMessage finishes with the data of the first message it gets, or
// with nothing at its cancel; it panics if that data is "panic".
func endsOnMessage(evs []Event, out *StepOutput) error {
	for _, ev := range evs {
		switch {
		case ev.Type == EventCancel:
			out.Done(payload.Payload{})
		case ev.Type != EventMessage:
		case ev.Data == "panic":
			panic("asked to")
		default:
			out.Done(payload.Of(ev.Data))
		}
	}
	return nil
}

// ignoresAll waits for ever: it ignores every event, its cancel too.
func ignoresAll([]Event, *StepOutput) error { return nil }

// notReturned fails the test if a Wait has returned.
func notReturned(t *testing.T, outs ...<-chan waitOutcome) {
	t.Helper()
	for _, out := range outs {
		select {
		case o := <-out:
			t.Fatalf("Wait returned %v, %v before the process ended", o.res.Value(), o.err)
		default:
		}
	}
}

// TestWaitBlocksUntilTheEnd: Waits that start before the process ends,
// with a context that is never done and with ones that could be, block
// until it ends, and each then returns its result.
func TestWaitBlocksUntilTheEnd(t *testing.T) {
	timed, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	cancellable, cancelIt := context.WithCancel(context.Background())
	defer cancelIt()
	s := newScheduler(t)
	ctxs := []context.Context{context.Background(), timed, cancellable}
	hs := make([]Handle, len(ctxs))
	outs := make([]<-chan waitOutcome, len(ctxs))
	for i, ctx := range ctxs {
		h, err := s.Submit(context.Background(), stepFunc(endsOnMessage), "wait", nil)
		require.NoError(t, err)
		hs[i], outs[i] = h, waitInBackground(t, ctx, h)
	}
	notReturned(t, outs...)
	for i, h := range hs {
		require.NoError(t, s.Tell(h.PID(), 40+i))
		o := receive(t, outs[i], "a blocked Wait to return")
		require.NoError(t, o.err)
		require.Equal(t, 40+i, o.res.Value())
	}
}

// TestWaitContextDoneFirst: a Wait blocked when its context is done
// returns the context's error and nothing else; the process goes on, and
// once it ends a later Wait, even with that context, and Result give its
// result.
func TestWaitContextDoneFirst(t *testing.T) {
	s := newScheduler(t)
	h, err := s.Submit(context.Background(), stepFunc(endsOnMessage), "wait", nil)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	out := waitInBackground(t, ctx, h)
	notReturned(t, out)
	cancel()
	o := receive(t, out, "the Wait whose context was cancelled")
	require.ErrorIs(t, o.err, context.Canceled)
	require.True(t, o.res.IsZero(), "a result before the end: %v", o.res.Value())
	_, err = h.Result()
	require.ErrorIs(t, err, ErrNotEnded, "the process goes on")

	require.NoError(t, s.Tell(h.PID(), "late"))
	require.NoError(t, waitEnd(t, h))
	res, err := h.Wait(ctx)
	require.NoError(t, err, "Wait after the end with the cancelled context")
	require.Equal(t, "late", res.Value())
	res, err = h.Result()
	require.NoError(t, err)
	require.Equal(t, "late", res.Value())
}

// TestWaitBlockedGetsFailures: a blocked Wait returns the PanicError of a
// process that panics, and ErrForced for one that a shutdown deadline
// closes.
func TestWaitBlockedGetsFailures(t *testing.T) {
	s := newScheduler(t)
	panics, err := s.Submit(context.Background(), stepFunc(endsOnMessage), "panics", nil)
	require.NoError(t, err)
	forced, err := s.Submit(context.Background(), stepFunc(ignoresAll), "forced", nil)
	require.NoError(t, err)
	waitPanics := waitInBackground(t, context.Background(), panics)
	waitForced := waitInBackground(t, context.Background(), forced)
	notReturned(t, waitPanics, waitForced)

	require.NoError(t, s.Tell(panics.PID(), "panic"))
	o := receive(t, waitPanics, "the Wait on the process that panicked")
	var perr *PanicError
	require.ErrorAs(t, o.err, &perr)
	require.Equal(t, "asked to", perr.Value)
	require.True(t, o.res.IsZero())

	notReturned(t, waitForced)
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // force at once
	require.ErrorIs(t, s.Shutdown(ctx), ErrForced)
	o = receive(t, waitForced, "the Wait on the process forced at shutdown")
	require.ErrorIs(t, o.err, ErrForced)
	require.True(t, o.res.IsZero())
}
