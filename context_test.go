package scheduler_test

import (
	"context"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// TestContextsWaitWithoutGoroutines: context.AfterFunc and contexts
// derived from a process's or a call's context wait for it without a
// goroutine each, and run once it is done.
func TestContextsWaitWithoutGoroutines(t *testing.T) {
	calls := make(chan sched.Call, 1)
	s := newScheduler(t, sched.WithHandler(cmdTest, func(c sched.Call) error {
		calls <- c
		return nil
	}))
	p := &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
		if n == 0 {
			out.Yield(1, cmdTest, nil)
		}
		if hasCancel(evs) {
			out.Done(payload.Payload{})
		}
		return nil // lives on after the completion, until its cancel
	}}
	h := submit(t, s, p)
	call := receive(t, calls, "the call")

	const n = 100
	before := runtime.NumGoroutine()
	var derived []context.Context
	for range n {
		for _, parent := range []context.Context{p.Ctx(), call.Context()} {
			ctx, cancel := context.WithCancel(parent)
			t.Cleanup(cancel)
			derived = append(derived, ctx)
		}
	}
	ran := make(chan string, 3)
	context.AfterFunc(call.Context(), func() { ran <- "call" })
	context.AfterFunc(p.Ctx(), func() { ran <- "process" })
	stop := context.AfterFunc(p.Ctx(), func() { ran <- "stopped" })
	assert.LessOrEqual(t, runtime.NumGoroutine()-before, 5, "goroutines started to wait for %d derived contexts", 2*n)
	assert.True(t, stop(), "stopped before it ran")

	require.NoError(t, call.Complete("done", nil)) // ends the call's context
	assert.Equal(t, "call", receive(t, ran, "the call context's AfterFunc"))
	require.NoError(t, s.Terminate(h.PID())) // ends the process context
	_, err := waitEnd(t, s, h)
	require.NoError(t, err)
	assert.Equal(t, "process", receive(t, ran, "the process context's AfterFunc"))
	for _, ctx := range derived {
		receive(t, ctx.Done(), "a derived context")
	}
	assert.ErrorIs(t, context.Cause(derived[0]), sched.ErrTerminated, "the process context's cause reaches derived contexts")
	select {
	case got := <-ran:
		t.Fatalf("%s ran", got)
	default:
	}
}

func TestCompleteFrom(t *testing.T) {
	calls := make(chan sched.Call, 1)
	s := newScheduler(t, sched.WithHandler(cmdTest, func(c sched.Call) error {
		calls <- c
		return nil
	}))
	p := &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
		if n == 0 {
			out.Yield(1, cmdTest, nil)
		}
		if ev, ok := completionOf(evs, 1); ok {
			out.Done(payload.Of(ev))
		}
		return nil
	}}
	h := submit(t, s, p)
	from := relay.PID{Node: 7, ID: 9}
	require.NoError(t, receive(t, calls, "the call").Completion().CompleteFrom(from, "x", nil))
	res, err := waitEnd(t, s, h)
	require.NoError(t, err)
	ev := res.Value().(sched.Event)
	assert.Equal(t, from, ev.From)
	assert.Equal(t, "x", ev.Data)
}
