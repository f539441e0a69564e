package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

func TestInitPanicError(t *testing.T) {
	s := newScheduler(t)
	_, err := s.Submit(context.Background(), &probe{init: func(context.Context, string, payload.Payloads) error {
		panic(42)
	}}, "run", nil)
	var pe *sched.PanicError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, "Init", pe.Where)
	assert.Equal(t, 42, pe.Value)
	assert.Contains(t, string(pe.Stack), "TestInitPanicError")
	assert.Contains(t, err.Error(), "42")
}

func TestPanicError(t *testing.T) {
	cause := errors.New("cause")
	tests := []struct {
		name   string
		err    *sched.PanicError
		msg    string
		unwrap error
	}{
		{"string value", &sched.PanicError{Value: "boom", Where: "Step"}, "scheduler: panic in Step: boom", nil},
		{"error value", &sched.PanicError{Value: cause, Where: "handler"}, "scheduler: panic in handler: cause", cause},
		{"int value", &sched.PanicError{Value: 7, Where: "Close"}, "scheduler: panic in Close: 7", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.msg, tt.err.Error())
			assert.ErrorIs(t, tt.err, sched.ErrPanic)
			assert.Equal(t, tt.unwrap, tt.err.Unwrap())
			assert.NotErrorIs(t, tt.err, sched.ErrInit)
			wrapped := fmt.Errorf("outer: %w", tt.err)
			var pe *sched.PanicError
			require.ErrorAs(t, wrapped, &pe)
			assert.Same(t, tt.err, pe)
		})
	}
}

func TestSentinelsAreDistinct(t *testing.T) {
	all := []error{
		sched.ErrClosed, sched.ErrProcessNotFound, sched.ErrUnknownCommand,
		sched.ErrYieldNotPending, sched.ErrDuplicateTag, sched.ErrNilProcess,
		sched.ErrEmptyMethod, sched.ErrUnknownMethod, sched.ErrInit, sched.ErrPanic,
		sched.ErrInvalidOption, sched.ErrInvalidCommand, sched.ErrForced,
	}
	for i, a := range all {
		assert.Contains(t, a.Error(), "scheduler: ")
		for j, b := range all {
			if i != j {
				assert.NotErrorIs(t, a, b)
			}
		}
	}
}

// TestEveryContextEntryPointRefusesNil: a nil context is refused the same
// way everywhere, with ErrNilContext, and nothing happens.
func TestEveryContextEntryPointRefusesNil(t *testing.T) {
	calls := make(chan sched.Call, 1)
	s := newScheduler(t, sched.WithHandler(cmdTest, func(c sched.Call) error {
		calls <- c
		return nil
	}))
	target := &probe{step: untilMessage}
	h := submit(t, s, target)
	parent := &probe{step: yieldOnce(1, func(out *sched.StepOutput) { out.Yield(1, cmdTest, nil) })}
	hp := submit(t, s, parent)
	call := receive(t, calls, "the handler")
	var nilCtx context.Context
	started := &probe{}
	ops := []struct {
		name string
		call func() error
	}{
		{"Submit", func() error { _, err := s.Submit(nilCtx, started, "run", nil); return err }},
		{"Spawn", func() error { _, err := s.Spawn(nilCtx, started, "run", nil); return err }},
		{"Call.Submit", func() error { _, err := call.Submit(nilCtx, started, "run", nil); return err }},
		{"SendContext", func() error { return s.SendContext(nilCtx, relay.Message{To: h.PID(), Data: 1}) }},
		{"SendContext of a message returned undelivered", func() error {
			return s.SendContext(nilCtx, relay.Message{From: hp.PID(), To: h.PID(), Data: 2, Err: sched.ErrMailboxFull})
		}},
		{"SendContext of a Reply", func() error {
			return s.SendContext(nilCtx, relay.Message{To: hp.PID(), Data: sched.Reply{To: sched.ReplyTo{PID: hp.PID(), Seq: 1 << 62}, Data: 3}})
		}},
		{"TellContext", func() error { return s.TellContext(nilCtx, h.PID(), 1) }},
		{"Handle.Wait", func() error { _, err := h.Wait(nilCtx); return err }},
		{"Shutdown", func() error { return s.Shutdown(nilCtx) }},
	}
	for _, op := range ops {
		t.Run(op.name, func(t *testing.T) {
			assert.ErrorIs(t, op.call(), sched.ErrNilContext)
		})
	}
	assert.Zero(t, started.Inits(), "a refused Submit started the process")
	assert.Zero(t, s.Stats().DeadLetters, "dead letters made by refused calls")
	require.NoError(t, s.Tell(h.PID(), "real"), "Shutdown(nil) did not shut down")
	res, err := waitEnd(t, s, h)
	require.NoError(t, err)
	assert.Equal(t, "real", res.Value(), "the first message the target got; a refused send was delivered")
	require.NoError(t, call.Complete(nil, nil))
	_, err = waitEnd(t, s, hp)
	require.NoError(t, err)
	_, err = (sched.Handle{}).Wait(nilCtx)
	assert.ErrorIs(t, err, sched.ErrNilContext, "Wait on the zero Handle")
}
