package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// methodsProbe is a process with two entry points; Init rejects any other
// method with an error wrapping ErrUnknownMethod.
func methodsProbe() *probe {
	return &probe{
		init: func(_ context.Context, method string, _ payload.Payloads) error {
			switch method {
			case "add", "sub":
				return nil
			}
			return fmt.Errorf("method %q: %w", method, sched.ErrUnknownMethod)
		},
		step: doneWith(nil),
	}
}

func TestSubmitErrors(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Unix(0, 0))
	defer cancel2()
	initErr := testError("init failed")

	tests := []struct {
		name   string
		ctx    context.Context
		p      sched.Process
		method string
		want   []error
		inits  int // Init calls expected
	}{
		{"nil process", context.Background(), nil, "run", []error{sched.ErrNilProcess}, 0},
		{"empty method", context.Background(), &probe{step: doneWith(nil)}, "", []error{sched.ErrEmptyMethod}, 0},
		{"cancelled ctx", cancelled, &probe{step: doneWith(nil)}, "run", []error{context.Canceled}, 0},
		{"expired ctx", expired, &probe{step: doneWith(nil)}, "run", []error{context.DeadlineExceeded}, 0},
		{"unknown method", context.Background(), methodsProbe(), "mul", []error{sched.ErrInit, sched.ErrUnknownMethod}, 1},
		{"init error", context.Background(), &probe{init: func(context.Context, string, payload.Payloads) error {
			return initErr
		}}, "run", []error{sched.ErrInit, initErr}, 1},
		{"init panic", context.Background(), &probe{init: func(context.Context, string, payload.Payloads) error {
			panic("init exploded")
		}}, "run", []error{sched.ErrInit, sched.ErrPanic}, 1},
		{"init panic with an error", context.Background(), &probe{init: func(context.Context, string, payload.Payloads) error {
			panic(initErr)
		}}, "run", []error{sched.ErrInit, sched.ErrPanic, initErr}, 1},
	}
	s := newScheduler(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := s.Submit(tt.ctx, tt.p, tt.method, nil)
			require.Error(t, err)
			for _, want := range tt.want {
				require.ErrorIs(t, err, want)
			}
			assert.True(t, h.PID().IsZero(), "PID of a failed Submit")
			if p, ok := tt.p.(*probe); ok {
				assert.Equal(t, tt.inits, p.Inits(), "Init calls")
				assert.Equal(t, tt.inits, p.Closes(), "Close calls: once if Init was called, else never")
				assert.Zero(t, p.Steps(), "a process that failed to start was stepped")
			}
		})
	}

	// The good entry points of the same process type work.
	for _, method := range []string{"add", "sub"} {
		p := methodsProbe()
		h, err := s.Submit(context.Background(), p, method, nil)
		require.NoError(t, err, method)
		_, err = waitEnd(t, s, h)
		require.NoError(t, err)
		requireLifecycle(t, p)
	}
	st := s.Stats()
	assert.Equal(t, uint64(4), st.Processes.InitFailed, "InitFailed")
	assert.Equal(t, uint64(2), st.Processes.Submitted, "Submitted")
}

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

func TestHandleRegistration(t *testing.T) {
	h := func(sched.Call) error { return nil }
	tests := []struct {
		name string
		cmd  sched.CommandID
		h    sched.Handler
		want error // nil: accepted
	}{
		{"zero", 0, h, sched.ErrInvalidCommand},
		{"reserved 1", sched.CommandID(1), h, sched.ErrInvalidCommand},
		{"reserved 4", sched.CommandID(4), h, sched.ErrInvalidCommand},
		{"reserved 15", sched.FirstUserCommand - 1, h, sched.ErrInvalidCommand},
		{"last reserved", sched.FirstUserCommand - 1, h, sched.ErrInvalidCommand},
		{"nil handler", sched.FirstUserCommand, nil, sched.ErrInvalidCommand},
		{"huge", 1 << 30, h, sched.ErrInvalidCommand},
		{"first user", sched.FirstUserCommand, h, nil},
		{"another user", sched.FirstUserCommand + 100, h, nil},
	}
	s := newScheduler(t)
	for _, tt := range tests {
		t.Run("Handle/"+tt.name, func(t *testing.T) {
			err := s.SetHandler(tt.cmd, tt.h)
			if tt.want == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, tt.want)
			}
		})
		t.Run("WithHandler/"+tt.name, func(t *testing.T) {
			s2, err := sched.New(sched.WithWorkers(1), sched.WithHandler(tt.cmd, tt.h))
			if tt.want == nil {
				require.NoError(t, err)
				require.NoError(t, s2.Shutdown(context.Background()))
			} else {
				require.ErrorIs(t, err, tt.want)
				require.Nil(t, s2)
			}
		})
	}

	// A rejected registration leaves the built-in commands working.
	p := &probe{step: yieldOnce(1, func(out *sched.StepOutput) { out.Sleep(1, 0) })}
	hd := submit(t, s, p)
	_, err := waitEnd(t, s, hd)
	require.NoError(t, err)
}

func TestStrings(t *testing.T) {
	tests := []struct {
		got, want string
	}{
		{sched.StateReady.String(), "Ready"},
		{sched.StateRunning.String(), "Running"},
		{sched.StateBlocked.String(), "Blocked"},
		{sched.StateIdle.String(), "Idle"},
		{sched.StateEnded.String(), "Ended"},
		{sched.State(0).String(), "State(0)"},
		{sched.State(99).String(), "State(99)"},
		{sched.ExitDone.String(), "done"},
		{sched.ExitFailed.String(), "failed"},
		{sched.ExitTerminated.String(), "terminated"},
		{sched.ExitForced.String(), "forced"},
		{sched.ExitGone.String(), "gone"},
		{sched.ExitReason(0).String(), "ExitReason(0)"},
		{sched.DeadUnread.String(), "unread"},
		{sched.DeadBounce.String(), "bounce"},
		{sched.DeadDropped.String(), "dropped"},
		{sched.DeadLateReply.String(), "late reply"},
		{sched.DeadLetterReason(0).String(), "DeadLetterReason(0)"},
		{sched.PoolWait.String(), "wait"},
		{sched.PoolReject.String(), "reject"},
		{sched.PoolPolicy(7).String(), "PoolPolicy(7)"},
		{sched.Exit{PID: relay.PID{ID: 2}, Reason: sched.ExitDone}.String(), "<0.2> done"},
		{sched.Exit{PID: relay.PID{ID: 2}, Reason: sched.ExitFailed, Err: testError("x")}.String(), "<0.2> failed: x"},
		{sched.EventYieldComplete.String(), "YieldComplete"},
		{sched.EventMessage.String(), "Message"},
		{sched.EventCancel.String(), "Cancel"},
		{sched.EventType(0).String(), "EventType(0)"},
		{sched.Event{Type: sched.EventYieldComplete, Tag: 3, Data: "x"}.String(), "YieldComplete(tag=3, data=x)"},
		{sched.Event{Type: sched.EventYieldComplete, Tag: 3, Error: testError("bad")}.String(), "YieldComplete(tag=3, error=bad)"},
		{sched.Event{Type: sched.EventMessage, From: relay.PID{ID: 5}, Data: 1}.String(), "Message(from=<0.5>, data=1)"},
		{sched.Event{Type: sched.EventMessage, From: relay.PID{ID: 5}, Error: testError("gone")}.String(), "Message(undelivered to <0.5>: gone)"},
		{sched.Event{Type: sched.EventCancel}.String(), "Cancel"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, tt.got)
	}
}
