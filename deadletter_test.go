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

// deadLetterLog collects what the DeadLetter hook gets and, once watch
// named a Handle, how many it got after that Handle reported the end.
type deadLetterLog struct {
	mu      sync.Mutex
	got     []sched.DeadLetter
	watched <-chan struct{} // the watched Handle's Done
	late    int
}

func (d *deadLetterLog) hook(dl sched.DeadLetter) {
	d.mu.Lock()
	d.got = append(d.got, dl)
	if d.watched != nil {
		select {
		case <-d.watched:
			d.late++
		default:
		}
	}
	d.mu.Unlock()
}

// watch makes the hook check h's end at each dead letter.
func (d *deadLetterLog) watch(h sched.Handle) {
	d.mu.Lock()
	d.watched = h.Done()
	d.mu.Unlock()
}

// lateCount returns how many dead letters came after the watched Handle
// reported the end.
func (d *deadLetterLog) lateCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.late
}

func (d *deadLetterLog) all() []sched.DeadLetter {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]sched.DeadLetter(nil), d.got...)
}

func TestDeadLetters(t *testing.T) {
	t.Run("messages left unread when the recipient ends", func(t *testing.T) {
		var dl deadLetterLog
		s := newScheduler(t, sched.WithWorkers(1), sched.WithHooks(sched.Hooks{DeadLetter: dl.hook}))
		gate := make(chan struct{})
		var once sync.Once
		t.Cleanup(func() { once.Do(func() { close(gate) }) }) // before the Shutdown, which waits for the step
		h := submit(t, s, &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
			if n == 0 {
				<-gate
				return nil
			}
			out.DoneAfter(1, payload.Payload{}) // reads "a" only
			return nil
		}})
		waitState(t, s, h.PID(), sched.StateRunning)
		for _, m := range []string{"a", "b", "c"} {
			require.NoError(t, s.Send(relay.Message{From: relay.PID{ID: 77}, To: h.PID(), Data: m}))
		}
		once.Do(func() { close(gate) })
		_, err := waitEnd(t, s, h)
		require.NoError(t, err)
		got := dl.all()
		require.Len(t, got, 2)
		for i, want := range []string{"b", "c"} {
			assert.Equal(t, sched.DeadUnread, got[i].Reason)
			assert.Equal(t, relay.Message{From: relay.PID{ID: 77}, To: h.PID(), Data: want}, got[i].Message)
		}
		assert.Equal(t, uint64(2), s.Stats().DeadLetters.Unread)
	})

	t.Run("messages that arrive during the last step, before the Handle reports the end", func(t *testing.T) {
		var dl deadLetterLog
		s := newScheduler(t, sched.WithWorkers(1), sched.WithHooks(sched.Hooks{DeadLetter: dl.hook}))
		final, gate := make(chan struct{}), make(chan struct{})
		var once sync.Once
		t.Cleanup(func() { once.Do(func() { close(gate) }) }) // before the Shutdown, which waits for the step
		h := submit(t, s, &probe{step: func(_ *probe, _ int, _ []sched.Event, out *sched.StepOutput) error {
			close(final)
			<-gate // the messages queue meanwhile
			out.Done(payload.Payload{})
			return nil
		}})
		dl.watch(h)
		receive(t, final, "the last step")
		for _, m := range []string{"a", "b"} {
			require.NoError(t, s.Tell(h.PID(), m))
		}
		once.Do(func() { close(gate) })
		_, err := waitEnd(t, s, h)
		require.NoError(t, err)
		require.Len(t, dl.all(), 2, "both messages are dead letters by the time the Handle reports the end")
		assert.Zero(t, dl.lateCount(), "dead letters reported after the Handle saw the end")
	})

	// A message handed back undelivered (Send with Err set, as a
	// transport does) to a process that has ended: a plain message, and
	// a request, which would otherwise complete its asking yield.
	for _, c := range []struct {
		name string
		data func(sender relay.PID) any
	}{
		{"a bounce for a sender that has ended", func(relay.PID) any { return "x" }},
		{"a request returned to an asker that has ended", func(asker relay.PID) any {
			return sched.Request{ReplyTo: sched.ReplyTo{PID: asker, Seq: 3}, Body: "question"}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var dl deadLetterLog
			s := newScheduler(t, sched.WithHooks(sched.Hooks{DeadLetter: dl.hook}))
			ended := submit(t, s, &probe{step: doneWith(1)})
			_, err := waitEnd(t, s, ended)
			require.NoError(t, err)
			why := errors.New("not delivered")
			data := c.data(ended.PID())
			err = s.Send(relay.Message{From: relay.PID{ID: 5}, To: ended.PID(), Data: data, Err: why})
			require.ErrorIs(t, err, sched.ErrProcessNotFound)
			got := dl.all()
			require.Len(t, got, 1)
			assert.Equal(t, sched.DeadBounce, got[0].Reason)
			assert.Equal(t, data, got[0].Message.Data)
			assert.ErrorIs(t, got[0].Message.Err, why)
			assert.Equal(t, uint64(1), s.Stats().DeadLetters.Bounces)
		})
	}

	t.Run("a request evicted from a full mailbox after its asker ended", func(t *testing.T) {
		var dl deadLetterLog
		s := newScheduler(t, sched.WithHooks(sched.Hooks{DeadLetter: dl.hook}))
		g, b := submitGated(t, s, sched.Mailbox(1, sched.MailboxDropOldest)) // the request waits in its mailbox
		asker := submit(t, s, &probe{step: func(_ *probe, _ int, _ []sched.Event, out *sched.StepOutput) error {
			out.Request(1, b.PID(), "question")
			out.Done(payload.Payload{}) // does not wait for the answer
			return nil
		}})
		_, err := waitEnd(t, s, asker)
		require.NoError(t, err)
		require.NoError(t, s.Tell(b.PID(), note{})) // evicts the request
		g.open()
		got := dl.all()
		require.Len(t, got, 1, "the evicted request reached nobody")
		assert.Equal(t, sched.DeadBounce, got[0].Reason)
		assert.Equal(t, asker.PID(), got[0].Message.To)
		assert.ErrorIs(t, got[0].Message.Err, sched.ErrDropped)
		req, ok := got[0].Message.Data.(sched.Request)
		require.True(t, ok, "the dead letter is the request: %#v", got[0].Message.Data)
		assert.Equal(t, "question", req.Body)
		assert.Equal(t, uint64(1), s.Stats().DeadLetters.Bounces)
		require.NoError(t, s.Terminate(b.PID()))
		_, _ = waitEnd(t, s, b)
	})

	// A message evicted from a full mailbox whose sender is a process of
	// another node goes back through the transport; when it cannot (no
	// transport, or one that refuses it), it reaches nobody and is a dead
	// letter, not lost without a word.
	for _, c := range []struct {
		name string
		opts []sched.Option
	}{
		{"an evicted message whose sender on another node cannot be reached: no transport", nil},
		{"an evicted message whose sender on another node cannot be reached: the transport refuses it",
			[]sched.Option{sched.WithTransport(newFakeTransport(relay.PID{Node: 2, ID: 5}))}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var dl deadLetterLog
			opts := append([]sched.Option{sched.WithNode(1), sched.WithHooks(sched.Hooks{DeadLetter: dl.hook})}, c.opts...)
			s := newScheduler(t, opts...)
			g, h := submitGated(t, s, sched.Mailbox(1, sched.MailboxDropOldest))
			sender := relay.PID{Node: 2, ID: 5}
			require.NoError(t, s.Send(relay.Message{From: sender, To: h.PID(), Data: note{1, 1}}))
			require.NoError(t, s.Tell(h.PID(), note{2, 1})) // evicts the first
			g.open()
			got := dl.all()
			require.Len(t, got, 1, "the evicted message reached nobody")
			assert.Equal(t, sched.DeadBounce, got[0].Reason)
			assert.Equal(t, note{1, 1}, got[0].Message.Data)
			assert.Equal(t, h.PID(), got[0].Message.From, "as it came back: From the recipient not reached")
			assert.Equal(t, sender, got[0].Message.To)
			assert.ErrorIs(t, got[0].Message.Err, sched.ErrDropped)
			st := s.Stats()
			assert.Equal(t, sched.DeadLetterStats{Bounces: 1}, st.DeadLetters)
			assert.Equal(t, uint64(1), st.Messages.Dropped)
			assert.Zero(t, st.Messages.Forwarded, "nothing went to another node")
			require.NoError(t, s.Terminate(h.PID()))
			_, err := waitEnd(t, s, h)
			require.NoError(t, err)
		})
	}

	t.Run("dropped by a full mailbox with nobody to return it to", func(t *testing.T) {
		var dl deadLetterLog
		s := newScheduler(t, sched.WithHooks(sched.Hooks{DeadLetter: dl.hook}))
		gate := make(chan struct{})
		h, err := s.Submit(t.Context(), &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
			if n == 0 {
				<-gate
			}
			if hasCancel(evs) {
				out.Done(payload.Payload{})
			}
			return nil
		}}, "run", nil, sched.Mailbox(1, sched.MailboxDropOldest))
		require.NoError(t, err)
		waitState(t, s, h.PID(), sched.StateRunning)
		require.NoError(t, s.Tell(h.PID(), "old"))
		require.NoError(t, s.Tell(h.PID(), "new"))
		close(gate)
		got := dl.all()
		require.Len(t, got, 1)
		assert.Equal(t, sched.DeadDropped, got[0].Reason)
		assert.Equal(t, "old", got[0].Message.Data)
		assert.ErrorIs(t, got[0].Message.Err, sched.ErrDropped)
		assert.Equal(t, uint64(1), s.Stats().DeadLetters.Dropped)
		require.NoError(t, s.Terminate(h.PID()))
	})
}

// TestDoneAfterClampsToTheBatch: DoneAfter's n is clamped to the batch: a
// negative n reads nothing, so every message of the batch is unread, and
// an n past the batch reads it all, so none is.
func TestDoneAfterClampsToTheBatch(t *testing.T) {
	msgs := []string{"a", "b", "c"}
	for _, tc := range []struct {
		n      int
		unread []string
	}{
		{-3, msgs},
		{0, msgs},
		{2, msgs[2:]},
		{3, nil},
		{10, nil},
	} {
		t.Run(fmt.Sprint(tc.n), func(t *testing.T) {
			var dl deadLetterLog
			s := newScheduler(t, sched.WithWorkers(1), sched.WithHooks(sched.Hooks{DeadLetter: dl.hook}))
			entered, gate := make(chan struct{}), make(chan struct{})
			var once sync.Once
			open := func() { once.Do(func() { close(gate) }) }
			t.Cleanup(open) // before the Shutdown, which waits for the step
			p := &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
				if n == 0 {
					close(entered)
					<-gate // the messages queue meanwhile: one batch
					return nil
				}
				out.DoneAfter(tc.n, payload.Of(len(evs)))
				return nil
			}}
			h := submit(t, s, p)
			receive(t, entered, "the first step")
			for _, m := range msgs {
				require.NoError(t, s.Tell(h.PID(), m))
			}
			open()
			res, err := waitEnd(t, s, h)
			require.NoError(t, err)
			require.Equal(t, len(msgs), res.Value(), "the last step's batch")
			var unread []string
			for _, d := range dl.all() {
				assert.Equal(t, sched.DeadUnread, d.Reason)
				unread = append(unread, d.Message.Data.(string))
			}
			assert.Equal(t, tc.unread, unread)
		})
	}
}
