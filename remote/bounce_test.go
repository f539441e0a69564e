package remote_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	scheduler "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
	"github.com/procsched/scheduler/remote"
)

// tBounceOf submits a process that tells body to to and ends with the
// first message that comes back to it.
func tBounceOf(t testing.TB, s *scheduler.Scheduler, to relay.PID, body any) scheduler.Event {
	t.Helper()
	ev := tFirst(t, s, scheduler.EventMessage, func(out *scheduler.StepOutput) { out.Tell(to, body) })
	require.Error(t, ev.Error, "a bounce has an error")
	assert.Equal(t, to, ev.From, "a bounce comes from the recipient not reached")
	return ev
}

// tGated submits a process with the given mailbox that blocks in its
// second step until gate is closed, so that its mailbox fills, and ends
// on cancel. It returns once the process is blocked.
func tGated(t testing.TB, s *scheduler.Scheduler, gate chan struct{}, opts ...scheduler.SubmitOption) scheduler.Handle {
	t.Helper()
	inStep := make(chan struct{})
	h := tSubmit(t, s, func(_ *tProc, n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
		if n == 1 {
			close(inStep)
			<-gate // hold the step so that the mailbox fills
		}
		for _, ev := range evs {
			if ev.Type == scheduler.EventCancel {
				out.Done(payload.Payload{})
			}
		}
		return nil
	}, opts...)
	require.NoError(t, s.Tell(h.PID(), "wake"))
	tRecv(t, inStep, "the gated step")
	return h
}

func TestBounces(t *testing.T) {
	_, a, b := tTwoNodes(t, nil)

	t.Run("an ended target", func(t *testing.T) {
		h := tSubmit(t, b.S, func(_ *tProc, _ int, _ []scheduler.Event, out *scheduler.StepOutput) error {
			out.Done(payload.Payload{})
			return nil
		})
		_, err := tWaitResult(t, h)
		require.NoError(t, err)
		before := a.S.Stats().Messages.Bounced
		ev := tBounceOf(t, a.S, h.PID(), "late")
		assert.ErrorIs(t, ev.Error, scheduler.ErrProcessNotFound)
		assert.Equal(t, "late", ev.Data, "the body comes back")
		var rerr *remote.Error
		require.True(t, errors.As(ev.Error, &rerr))
		assert.Equal(t, "b", rerr.Node)
		assert.Equal(t, h.PID(), rerr.PID)
		assert.Equal(t, before+1, a.S.Stats().Messages.Bounced)
		assert.NotZero(t, a.Stats().Returned.NotFound)
		assert.NotZero(t, b.Stats().BouncedBack.NotFound)
	})

	for _, tc := range []struct {
		name   string
		policy scheduler.MailboxPolicy
		want   error
	}{
		{"a full mailbox that rejects", scheduler.MailboxReject, scheduler.ErrMailboxFull},
		{"a full mailbox that drops the newest", scheduler.MailboxDropNewest, scheduler.ErrDropped},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gate := make(chan struct{})
			h := tGated(t, b.S, gate, scheduler.Mailbox(1, tc.policy))
			require.NoError(t, b.S.Tell(h.PID(), "fills the mailbox"))
			ev := tBounceOf(t, a.S, h.PID(), []byte("one too many"))
			close(gate)
			assert.ErrorIs(t, ev.Error, tc.want)
			assert.Equal(t, []byte("one too many"), ev.Data)
			require.NoError(t, b.S.Terminate(h.PID()))
			_, err := tWaitResult(t, h)
			require.NoError(t, err)
		})
	}

	t.Run("an eviction by drop-oldest goes back to a sender on another node", func(t *testing.T) {
		gate := make(chan struct{})
		h := tGated(t, b.S, gate, scheduler.Mailbox(1, scheduler.MailboxDropOldest))
		sender, back := tTellOnce(t, a.S, h.PID(), "oldest")
		// Once "oldest" is queued, a newer message evicts it.
		tEventually(t, func() bool { return b.Stats().Received > 0 && queued(b.S, h.PID()) == 1 }, "the message from a is queued")
		require.NoError(t, b.S.Tell(h.PID(), "newest"))
		ev := tRecv(t, back, "the evicted message")
		close(gate)
		assert.ErrorIs(t, ev.Error, scheduler.ErrDropped)
		assert.Equal(t, h.PID(), ev.From)
		assert.Equal(t, "oldest", ev.Data)
		_, err := tWaitResult(t, sender)
		require.NoError(t, err)
		require.NoError(t, b.S.Terminate(h.PID()))
		_, err = tWaitResult(t, h)
		require.NoError(t, err)
	})

	t.Run("an unknown node", func(t *testing.T) {
		nowhere := relay.PID{Node: a.Node.Node() ^ b.Node.Node() ^ 1, ID: 1}
		err := a.S.Tell(nowhere, "x")
		assert.ErrorIs(t, err, remote.ErrUnknownNode)
		assert.ErrorIs(t, err, scheduler.ErrProcessNotFound)
		ev := tBounceOf(t, a.S, nowhere, "x")
		assert.ErrorIs(t, ev.Error, remote.ErrUnknownNode)
		assert.ErrorIs(t, ev.Error, scheduler.ErrProcessNotFound)
		assert.Equal(t, "x", ev.Data)
	})

	t.Run("a body that cannot cross is refused at the sender", func(t *testing.T) {
		recv, _ := tCollector(t, b.S, 1)
		err := a.S.Tell(recv.PID(), 42)
		assert.ErrorIs(t, err, remote.ErrNotEncodable)
		ev := tBounceOf(t, a.S, recv.PID(), payload.Of(make(chan int)))
		assert.ErrorIs(t, ev.Error, remote.ErrNotEncodable)
		assert.ErrorIs(t, ev.Error, payload.ErrEncode)
		require.NoError(t, b.S.Terminate(recv.PID()))
		_, err = tWaitResult(t, recv)
		require.NoError(t, err)
	})
}

// queued returns how many events wait in pid's mailbox.
func queued(s *scheduler.Scheduler, pid relay.PID) int {
	for _, p := range s.Processes() {
		if p.PID == pid {
			return p.Queued
		}
	}
	return -1
}

// TestBounceOfALargeMessage: a message as large as its batch allows
// still comes back when its recipient has ended, although the bounce
// adds the error's text (shortened to fit); and one too large for the
// batches of the recipient's node (a smaller Window there) comes back
// without its body, with the error saying why.
func TestBounceOfALargeMessage(t *testing.T) {
	srv := tServer(t)
	a := tStart(t, srv.ClientURL(), "a", nil)
	b := tStart(t, srv.ClientURL(), "b", nil)
	c := tStart(t, srv.ClientURL(), "c", func(cfg *remote.Config) { cfg.Window = 64 << 10 })
	tJoin(t, a, b, c)
	endedOn := func(n *tNode) relay.PID {
		h := tSubmit(t, n.S, func(_ *tProc, _ int, _ []scheduler.Event, out *scheduler.StepOutput) error {
			out.Done(payload.Payload{})
			return nil
		})
		_, err := tWaitResult(t, h)
		require.NoError(t, err)
		return h.PID()
	}

	// The largest message a takes: half its window, less the batch's
	// header and the frame's fields.
	largest := 512<<10 - remote.HeaderLen - 35 - 4
	for _, tc := range []struct {
		name   string
		to     relay.PID
		size   int
		whole  bool
		victim *tNode
	}{
		{"the largest message, to a node of the same window", endedOn(b), largest, true, b},
		{"a message too large for the batches of the recipient's node", endedOn(c), 100 << 10, false, c},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.ErrorIs(t, a.S.Tell(tc.to, make([]byte, largest+1)), remote.ErrNotEncodable, "one byte more than the largest is refused")
			ev := tBounceOf(t, a.S, tc.to, make([]byte, tc.size))
			assert.ErrorIs(t, ev.Error, scheduler.ErrProcessNotFound)
			var rerr *remote.Error
			require.True(t, errors.As(ev.Error, &rerr))
			assert.Equal(t, tc.to, rerr.PID)
			if tc.whole {
				assert.Len(t, ev.Data, tc.size, "it comes back with its body")
			} else {
				assert.Nil(t, ev.Data, "it comes back without its body")
			}
			assert.Zero(t, tc.victim.Stats().Dropped.Overflow, "no bounce was dropped")
		})
	}
}
