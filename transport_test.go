package scheduler_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// fakeTransport is a transport double: it records what the scheduler hands it
// and refuses messages for the PIDs in refuse with errRefused.
type fakeTransport struct {
	mu     sync.Mutex
	sent   []relay.Message
	refuse map[relay.PID]bool
	got    chan relay.Message // every accepted message, also
}

var errRefused = errors.New("transport: outbound buffer full")

func newFakeTransport(refuse ...relay.PID) *fakeTransport {
	t := &fakeTransport{refuse: map[relay.PID]bool{}, got: make(chan relay.Message, 64)}
	for _, pid := range refuse {
		t.refuse[pid] = true
	}
	return t
}

func (t *fakeTransport) Send(msg relay.Message) error {
	if t.refuse[msg.To] {
		return fmt.Errorf("%w: to %v", errRefused, msg.To)
	}
	t.mu.Lock()
	t.sent = append(t.sent, msg)
	t.mu.Unlock()
	t.got <- msg
	return nil
}

func TestTransport(t *testing.T) {
	remote := relay.PID{Node: 2, ID: 5}
	full := relay.PID{Node: 2, ID: 6}

	t.Run("a send to another node goes to the transport", func(t *testing.T) {
		tr := newFakeTransport()
		s := newScheduler(t, sched.WithNode(1), sched.WithTransport(tr))
		require.NoError(t, s.Tell(remote, payload.Of("hi")))
		msg := receive(t, tr.got, "the forwarded message")
		assert.Equal(t, relay.Message{To: remote, Data: payload.Of("hi")}, msg)
		require.NoError(t, s.Send(relay.Message{From: relay.PID{Node: 1, ID: 9}, To: remote, Data: 7}))
		msg = receive(t, tr.got, "the forwarded message")
		assert.Equal(t, relay.Message{From: relay.PID{Node: 1, ID: 9}, To: remote, Data: 7}, msg)
		assert.Equal(t, uint64(2), s.Stats().Messages.Forwarded)
	})

	t.Run("a process's Tell goes out with the process as sender", func(t *testing.T) {
		tr := newFakeTransport()
		s := newScheduler(t, sched.WithNode(1), sched.WithTransport(tr))
		h := submit(t, s, &probe{step: func(_ *probe, n int, _ []sched.Event, out *sched.StepOutput) error {
			out.Tell(remote, 1)
			out.Done(payload.Payload{})
			return nil
		}})
		_, err := waitEnd(t, s, h)
		require.NoError(t, err)
		msg := receive(t, tr.got, "the forwarded message")
		assert.Equal(t, relay.Message{From: h.PID(), To: remote, Data: 1}, msg)
	})

	t.Run("a refusal by the transport reaches the sender like a local one", func(t *testing.T) {
		tr := newFakeTransport(full)
		s := newScheduler(t, sched.WithNode(1), sched.WithTransport(tr))
		require.ErrorIs(t, s.Tell(full, 1), errRefused)
		p := &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
			if n == 0 {
				out.Tell(full, "x")
				return nil
			}
			for _, ev := range evs {
				if ev.Type == sched.EventMessage && ev.Error != nil {
					out.Done(payload.Of(ev))
				}
			}
			return nil
		}}
		h := submit(t, s, p)
		res, err := waitEnd(t, s, h)
		require.NoError(t, err)
		ev := res.Value().(sched.Event)
		assert.ErrorIs(t, ev.Error, errRefused)
		assert.Equal(t, full, ev.From, "From of a bounce is the recipient not reached")
		assert.Equal(t, "x", ev.Data)
		assert.Equal(t, uint64(1), s.Stats().Messages.Bounced)
	})

	t.Run("a message handed back later reaches its sender as a bounce", func(t *testing.T) {
		s := newScheduler(t, sched.WithNode(1), sched.WithTransport(newFakeTransport()))
		p := &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
			for _, ev := range evs {
				if ev.Type == sched.EventMessage {
					out.Done(payload.Of(ev))
				}
			}
			return nil
		}}
		h := submit(t, s, p)
		waitState(t, s, h.PID(), sched.StateIdle)
		gone := fmt.Errorf("%w: %v ended", sched.ErrProcessNotFound, remote)
		require.NoError(t, s.Send(relay.Message{From: remote, To: h.PID(), Data: "late", Err: gone}))
		res, err := waitEnd(t, s, h)
		require.NoError(t, err)
		ev := res.Value().(sched.Event)
		assert.ErrorIs(t, ev.Error, sched.ErrProcessNotFound)
		assert.Equal(t, remote, ev.From)
		assert.Equal(t, "late", ev.Data)
		assert.Equal(t, uint64(1), s.Stats().Messages.Bounced)
		// Handed back for a process that has ended: not found, never
		// bounced again.
		err = s.Send(relay.Message{From: remote, To: h.PID(), Data: "later", Err: gone})
		assert.ErrorIs(t, err, sched.ErrProcessNotFound)
	})

	t.Run("a local bounce for a sender on another node goes back through the transport", func(t *testing.T) {
		tr := newFakeTransport()
		s := newScheduler(t, sched.WithNode(1), sched.WithTransport(tr))
		gate := make(chan struct{})
		p := &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
			if n == 1 {
				<-gate // hold the step so that the mailbox fills
			}
			if hasCancel(evs) {
				out.Done(payload.Payload{})
			}
			return nil
		}}
		h, err := s.Submit(t.Context(), p, "run", nil, sched.Mailbox(1, sched.MailboxDropOldest))
		require.NoError(t, err)
		waitState(t, s, h.PID(), sched.StateIdle)
		require.NoError(t, s.Tell(h.PID(), "wake")) // the step that blocks
		waitState(t, s, h.PID(), sched.StateRunning)
		require.NoError(t, s.Send(relay.Message{From: remote, To: h.PID(), Data: "first"}))
		require.NoError(t, s.Send(relay.Message{From: remote, To: h.PID(), Data: "second"}))
		msg := receive(t, tr.got, "the evicted message, returned")
		close(gate)
		assert.Equal(t, h.PID(), msg.From)
		assert.Equal(t, remote, msg.To)
		assert.Equal(t, "first", msg.Data)
		assert.ErrorIs(t, msg.Err, sched.ErrDropped)
		require.NoError(t, s.Terminate(h.PID()))
		_, err = waitEnd(t, s, h)
		require.NoError(t, err)
	})

	t.Run("without a transport another node's PID is not found", func(t *testing.T) {
		s := newScheduler(t, sched.WithNode(1))
		assert.ErrorIs(t, s.Tell(remote, 1), sched.ErrProcessNotFound)
	})

	t.Run("a nil transport is refused", func(t *testing.T) {
		_, err := sched.New(sched.WithTransport(nil))
		assert.ErrorIs(t, err, sched.ErrInvalidOption)
	})
}
