package scheduler_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// Tests of the payload rule of events (event.go), and of the String
// methods of the enumerations a user prints: event
// types (event.go) and, in the same table, states, exit reasons,
// dead-letter reasons and pool policies.

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

// payloadCase is one datum the payload rule is checked with: what was
// sent, the Data it must arrive as, and the Result it must give.
type payloadCase struct {
	name     string
	sent     any
	wantData any
	want     payload.Payload
}

func payloadCases() []payloadCase {
	jsonBody := []byte(`{"n":1}`)
	rawBytes := []byte{1, 2, 3}
	tok := &struct{ n int }{7}
	return []payloadCase{
		{"a Go payload", payload.Of(42), 42, payload.Of(42)},
		{"a pointer payload", payload.Of(tok), tok, payload.Of(tok)},
		{"a bytes payload", payload.Bytes(rawBytes), rawBytes, payload.Bytes(rawBytes)},
		{"a JSON payload", payload.RawJSON(jsonBody), jsonBody, payload.RawJSON(jsonBody)},
		{"the zero payload", payload.Payload{}, nil, payload.Payload{}},
		{"a plain value", "hello", "hello", payload.Of("hello")},
		{"plain bytes", rawBytes, rawBytes, payload.Of(rawBytes)},
		{"nil", nil, nil, payload.Payload{}},
	}
}

// The payload rule (event.go): a payload given as a message, a
// completion or a child's result arrives unpacked, Data its value and
// Result the payload whole; anything else arrives as it was given, Result
// wrapping it.
func TestEventPayloadArrivesUnpacked(t *testing.T) {
	cases := payloadCases()
	check := func(t *testing.T, ev sched.Event, name string, wantType sched.EventType, wantData any, want payload.Payload) {
		t.Helper()
		assert.Equal(t, wantType, ev.Type, name)
		assert.Equal(t, wantData, ev.Data, "%s: Data", name)
		assert.Equal(t, want, ev.Result(), "%s: Result", name)
	}

	t.Run("a message", func(t *testing.T) {
		s := newScheduler(t)
		got := make(chan sched.Event, len(cases))
		h := submit(t, s, forwarder(got, nil))
		for _, c := range cases {
			require.NoError(t, s.Tell(h.PID(), c.sent))
		}
		for _, c := range cases {
			check(t, receive(t, got, c.name), c.name, sched.EventMessage, c.wantData, c.want)
		}
	})

	t.Run("a completion", func(t *testing.T) {
		// The handler keeps the yields pending and says it was called, so
		// the yield is registered; the test completes them.
		handled := make(chan struct{}, len(cases))
		s := newScheduler(t, sched.WithHandler(cmdEcho, func(sched.Call) error {
			handled <- struct{}{}
			return nil
		}))
		got := make(chan sched.Event, len(cases))
		h := submit(t, s, forwarder(got, func(out *sched.StepOutput) {
			for i := range cases {
				out.Yield(uint64(i+1), cmdEcho, nil)
			}
		}))
		for range cases {
			receive(t, handled, "a yield handled")
		}
		for i, c := range cases {
			require.NoError(t, s.CompleteYield(h.PID(), uint64(i+1), c.sent, nil))
			check(t, receive(t, got, c.name), c.name, sched.EventYieldComplete, c.wantData, c.want)
		}
	})

	t.Run("an awaited child's result", func(t *testing.T) {
		s := newScheduler(t)
		got := make(chan sched.Event, len(cases))
		submit(t, s, forwarder(got, func(out *sched.StepOutput) {
			for i, c := range cases {
				res, ok := c.sent.(payload.Payload)
				if !ok {
					res = payload.Of(c.sent)
				}
				out.SpawnAwait(uint64(i+1), &probe{step: doneWith(res)}, "child", nil)
			}
		}))
		byTag := map[uint64]sched.Event{}
		for range cases {
			ev := receive(t, got, "a child's result")
			byTag[ev.Tag] = ev
		}
		for i, c := range cases {
			want := c.want // a child's result is always a payload
			check(t, byTag[uint64(i+1)], c.name, sched.EventYieldComplete, want.Value(), want)
		}
	})
}

// What leaves a mailbox is what entered it: a payload that bounces or
// becomes a dead letter is the payload again, not its unpacked value.
func TestEventPayloadLeavesAsItCame(t *testing.T) {
	sent := payload.RawJSON([]byte(`[1,2]`))

	t.Run("a bounce", func(t *testing.T) {
		s := newScheduler(t)
		gone := submit(t, s, &probe{step: doneWith(1)})
		_, err := waitEnd(t, s, gone)
		require.NoError(t, err)
		got := make(chan sched.Event, 1)
		submit(t, s, forwarder(got, func(out *sched.StepOutput) { out.Tell(gone.PID(), sent) }))
		ev := receive(t, got, "the bounce")
		require.ErrorIs(t, ev.Error, sched.ErrProcessNotFound)
		assert.Equal(t, sent, ev.Result(), "the bounce gives back the payload sent")
	})

	t.Run("a dead letter", func(t *testing.T) {
		var dl deadLetterLog
		s := newScheduler(t, sched.WithWorkers(1), sched.WithHooks(sched.Hooks{DeadLetter: dl.hook}))
		gate := make(chan struct{})
		h := submit(t, s, &probe{step: func(_ *probe, n int, _ []sched.Event, out *sched.StepOutput) error {
			if n == 0 {
				<-gate
				return nil
			}
			out.DoneAfter(0, payload.Payload{}) // reads nothing
			return nil
		}})
		waitState(t, s, h.PID(), sched.StateRunning)
		require.NoError(t, s.Tell(h.PID(), sent))
		close(gate)
		_, err := waitEnd(t, s, h)
		require.NoError(t, err)
		got := dl.all()
		require.Len(t, got, 1)
		assert.Equal(t, sent, got[0].Message.Data, "the dead letter holds the payload sent")
	})
}

// forwarder returns a process that calls first, if not nil, in its first
// step, sends every event it gets to got, and ends on its cancel.
func forwarder(got chan<- sched.Event, first func(out *sched.StepOutput)) *probe {
	return &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
		if n == 0 && first != nil {
			first(out)
		}
		if hasCancel(evs) {
			out.Done(payload.Payload{})
			return nil
		}
		for _, ev := range evs {
			got <- ev
		}
		return nil
	}}
}
