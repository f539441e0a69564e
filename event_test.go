package scheduler_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/relay"
)

// Tests of the String methods of the enumerations a user prints: event
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
