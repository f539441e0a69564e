package scheduler_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// Tests of the process table (table.go): PIDs and their reuse.

// TestPIDsNeverReused submits and finishes waves of processes, so that
// table slots are freed and taken again, and checks that no PID comes
// back, including those of processes whose Init failed in between.
func TestPIDsNeverReused(t *testing.T) {
	s := newScheduler(t, sched.WithNode(3))
	const waves, perWave = 20, 100
	seen := make(map[relay.PID]int)
	for wave := range waves {
		hs := make([]sched.Handle, 0, perWave)
		for i := range perWave {
			if i%10 == 0 {
				_, err := s.Submit(context.Background(), &probe{init: func(context.Context, string, payload.Payloads) error {
					return testError("no")
				}}, "run", nil)
				require.ErrorIs(t, err, sched.ErrInit)
			}
			hs = append(hs, submit(t, s, &probe{step: doneWith(i)}))
		}
		for _, h := range hs {
			_, err := waitEnd(t, s, h)
			require.NoError(t, err)
			pid := h.PID()
			if prev, dup := seen[pid]; dup {
				t.Fatalf("PID %v of wave %d was already used in wave %d", pid, wave, prev)
			}
			seen[pid] = wave
		}
		// Let the ended processes free their slots, so that the next
		// wave reuses them.
		eventually(t, "no live process", func() bool { return s.Stats().Processes.Live == 0 })
	}
	require.Len(t, seen, waves*perWave)
	for pid := range seen {
		assert.Equal(t, uint32(3), pid.Node)
		assert.False(t, pid.IsZero())
		back, err := relay.Parse(pid.String())
		require.NoError(t, err, "Parse(%q)", pid.String())
		require.Equal(t, pid, back, "PID.String round trip")
	}
}

// TestIDZeroIsRefusedOnEveryNode: ID 0 names no process on any node, the
// zero PID included, so a message for one is refused at once with
// ErrProcessNotFound, and never handed to the transport, even when its
// node is another one: the sender learns of its mistake from the call,
// as it would for a local PID, and nothing goes over the wire to be
// refused later. A step's Tell to it comes back as a bounce, and a
// step's Monitor of it completes at once with ExitGone, without asking
// a transport that watches processes on other nodes.
func TestIDZeroIsRefusedOnEveryNode(t *testing.T) {
	tr := &remoteMonitors{fakeTransport: newFakeTransport(), calls: make(chan sched.Call, 4)}
	s := newScheduler(t, sched.WithNode(1), sched.WithTransport(tr))
	for _, to := range []relay.PID{{}, {Node: 2}, {Node: 1}} {
		require.ErrorIs(t, s.Tell(to, "x"), sched.ErrProcessNotFound, "Tell(%v)", to)
		require.ErrorIs(t, s.Send(relay.Message{From: relay.PID{Node: 1, ID: 9}, To: to, Data: "x"}), sched.ErrProcessNotFound, "Send(%v)", to)
		require.ErrorIs(t, s.TellContext(t.Context(), to, "x"), sched.ErrProcessNotFound, "TellContext(%v)", to)
		h := submit(t, s, &probe{step: bounced(to)})
		res, err := waitEnd(t, s, h)
		require.NoError(t, err)
		ev := res.Value().(sched.Event)
		require.ErrorIs(t, ev.Error, sched.ErrProcessNotFound, "the bounce of a step's Tell(%v)", to)
		require.Equal(t, to, ev.From, "From of the bounce")
		mh, _ := monitorOf(t, s, to)
		ev = answerOf(t, s, mh)
		e, ok := ev.Data.(sched.Exit)
		require.True(t, ok, "the monitor's completion's Data is a %T", ev.Data)
		require.Equal(t, sched.ExitGone, e.Reason, "Monitor(%v)", to)
		require.ErrorIs(t, e.Err, sched.ErrProcessNotFound, "Monitor(%v)", to)
	}
	require.Empty(t, tr.calls, "monitors handed to the transport")
	tr.mu.Lock()
	defer tr.mu.Unlock()
	require.Empty(t, tr.sent, "messages handed to the transport")
	require.Zero(t, s.Stats().Messages.Forwarded)
}

// TestPIDsNeverIssuedReachNoProcess: a PID reaches a process only with
// the very ID it was given. The live process's ID with another
// generation (earlier, later, or every bit of it set), with either of
// the two top bits set, and IDs of slots beyond the table are refused
// by every call that takes a PID, a monitor of them completes at once
// with ExitGone, and the live process gets nothing.
func TestPIDsNeverIssuedReachNoProcess(t *testing.T) {
	s := newScheduler(t, sched.WithNode(1))
	live := submit(t, s, &probe{step: untilCancel})
	id := live.PID().ID
	for _, bad := range []uint64{
		id + 1<<32,      // the slot's next generation
		id | 0xFFFF<<32, // a generation far beyond
		id | 1<<62,      // the top bits, which name yields and requests
		id | 1<<63,
		id | 0xFFFFFFFF<<32,
		1<<32 - 1,  // the last slot the table could have
		1<<31 + 17, // a slot far beyond the table
	} {
		to := relay.PID{Node: 1, ID: bad}
		require.ErrorIs(t, s.Tell(to, "x"), sched.ErrProcessNotFound, "Tell(%v)", to)
		require.ErrorIs(t, s.Send(relay.Message{To: to, Data: "x"}), sched.ErrProcessNotFound, "Send(%v)", to)
		require.ErrorIs(t, s.TellContext(t.Context(), to, "x"), sched.ErrProcessNotFound, "TellContext(%v)", to)
		require.ErrorIs(t, s.Terminate(to), sched.ErrProcessNotFound, "Terminate(%v)", to)
		require.ErrorIs(t, s.CompleteYield(to, 1, "x", nil), sched.ErrProcessNotFound, "CompleteYield(%v)", to)
		require.ErrorIs(t, s.Register("never-issued", to), sched.ErrProcessNotFound, "Register(%v)", to)
		exits := make(chan sched.Exit, 1)
		s.Monitor(to, func(e sched.Exit) { exits <- e })
		e := receive(t, exits, "the exit of a monitor of a PID never issued")
		require.Equal(t, sched.ExitGone, e.Reason, "Monitor(%v)", to)
		mh, _ := monitorOf(t, s, to)
		ev := answerOf(t, s, mh)
		e, ok := ev.Data.(sched.Exit)
		require.True(t, ok, "the monitor's completion's Data is a %T", ev.Data)
		require.Equal(t, sched.ExitGone, e.Reason, "a step's Monitor(%v)", to)
	}
	undisturbed(t, s, live)
}
