package scheduler_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// serverStep answers every request with its body doubled (an int), or with
// errOdd for an odd body; it ends at cancel.
func serverStep(_ *probe, _ int, evs []sched.Event, out *sched.StepOutput) error {
	for _, ev := range evs {
		switch {
		case ev.Type == sched.EventCancel:
			out.Done(payload.Payload{})
		case ev.Type == sched.EventMessage && ev.Error == nil:
			req, ok := ev.Data.(sched.Request)
			if !ok {
				continue
			}
			n := req.Body.(int)
			if n%2 == 1 {
				out.Reply(req.ReplyTo, nil, errOdd)
			} else {
				out.Reply(req.ReplyTo, 2*n, nil)
			}
		}
	}
	return nil
}

var errOdd = errors.New("odd")

// newAsker sends one request (tag 1) through ask and ends with the
// completion event as its result.
func newAsker(ask func(out *sched.StepOutput)) *probe {
	return &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
		if n == 0 {
			ask(out)
			return nil
		}
		if ev, ok := completionOf(evs, 1); ok {
			out.Done(payload.Of(ev))
		}
		return nil
	}}
}

func TestRequest(t *testing.T) {
	t.Run("the answer completes the yield", func(t *testing.T) {
		s := newScheduler(t)
		srv := submit(t, s, &probe{step: serverStep})
		require.NoError(t, s.Register("doubler", srv.PID()))
		for _, tc := range []struct {
			name string
			ask  func(out *sched.StepOutput)
		}{
			{"by PID", func(out *sched.StepOutput) { out.Request(1, srv.PID(), 20) }},
			{"by name", func(out *sched.StepOutput) { out.RequestName(1, "doubler", 20) }},
		} {
			ev := answerOf(t, s, submit(t, s, newAsker(tc.ask)))
			require.NoError(t, ev.Error, tc.name)
			assert.Equal(t, 40, ev.Data, tc.name)
			assert.Equal(t, srv.PID(), ev.From, "From of the answer is the replier")
		}
		ev := answerOf(t, s, submit(t, s, newAsker(func(out *sched.StepOutput) { out.Request(1, srv.PID(), 3) })))
		assert.ErrorIs(t, ev.Error, errOdd, "an error answered")
	})

	t.Run("clear errors when nobody can answer", func(t *testing.T) {
		s := newScheduler(t)
		ev := answerOf(t, s, submit(t, s, newAsker(func(out *sched.StepOutput) { out.RequestName(1, "nobody", 1) })))
		assert.ErrorIs(t, ev.Error, sched.ErrNameNotFound)
		// No process has the empty name (Register refuses it), so a
		// RequestName of it finds nobody: it is not a Request to the zero PID.
		ev = answerOf(t, s, submit(t, s, newAsker(func(out *sched.StepOutput) { out.RequestName(1, "", 1) })))
		assert.ErrorIs(t, ev.Error, sched.ErrNameNotFound, "RequestName of the empty name")
		ev = answerOf(t, s, submit(t, s, newAsker(func(out *sched.StepOutput) { out.Request(1, relay.PID{ID: 1<<32 | 3}, 1) })))
		assert.ErrorIs(t, ev.Error, sched.ErrProcessNotFound)
		gate := make(chan struct{})
		full, err := s.Submit(t.Context(), &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
			if n == 0 {
				<-gate
			}
			if hasCancel(evs) {
				out.Done(payload.Payload{})
			}
			return nil
		}}, "run", nil, sched.Mailbox(1, sched.MailboxReject))
		require.NoError(t, err)
		waitState(t, s, full.PID(), sched.StateRunning)
		require.NoError(t, s.Tell(full.PID(), "fills the mailbox"))
		ev = answerOf(t, s, submit(t, s, newAsker(func(out *sched.StepOutput) { out.Request(1, full.PID(), 1) })))
		assert.ErrorIs(t, ev.Error, sched.ErrMailboxFull, "a refusal completes the request")
		close(gate)
		require.NoError(t, s.Terminate(full.PID()))
	})

	t.Run("a replier that ends without answering", func(t *testing.T) {
		s := newScheduler(t)
		silent := submit(t, s, &probe{step: untilMessage}) // ends on the request, unanswered
		ev := answerOf(t, s, submit(t, s, newAsker(func(out *sched.StepOutput) { out.Request(1, silent.PID(), 1) })))
		assert.ErrorIs(t, ev.Error, sched.ErrNoReply)
		assert.Equal(t, silent.PID(), ev.From)
	})

	t.Run("answered from outside any process", func(t *testing.T) {
		s := newScheduler(t)
		requests := make(chan sched.Request, 1)
		relayer := submit(t, s, &probe{step: relayRequests(requests)})
		h := submit(t, s, newAsker(func(out *sched.StepOutput) { out.Request(1, relayer.PID(), "q") }))
		req := receive(t, requests, "the request")
		assert.Equal(t, "q", req.Body)
		require.NoError(t, s.Reply(req.ReplyTo, "a", nil))
		ev := answerOf(t, s, h)
		assert.Equal(t, "a", ev.Data)
		assert.True(t, ev.From.IsZero())
		err := s.Reply(req.ReplyTo, "again", nil)
		assert.ErrorIs(t, err, sched.ErrProcessNotFound, "the asker has ended")
		assert.Equal(t, uint64(1), s.Stats().DeadLetters.LateReplies)
		err = s.Reply(sched.ReplyTo{}, "to nobody", nil)
		assert.ErrorIs(t, err, sched.ErrYieldNotPending, "the zero ReplyTo")
		assert.Equal(t, uint64(1), s.Stats().DeadLetters.LateReplies, "the zero ReplyTo is no dead letter")
	})
}

// TestRequestRacingTheReplierEnd: a request whose replier ends while the
// request is in flight completes exactly once, with the answer or
// ErrNoReply (or ErrProcessNotFound if the replier had already ended).
func TestRequestRacingTheReplierEnd(t *testing.T) {
	s := newScheduler(t)
	for i := range 300 {
		srv := submit(t, s, &probe{step: serverStep})
		var wg sync.WaitGroup
		var h sched.Handle
		var asker *probe
		wg.Go(func() {
			asker = newAsker(func(out *sched.StepOutput) { out.Request(1, srv.PID(), 2) })
			h = submit(t, s, asker)
		})
		wg.Go(func() { _ = s.Terminate(srv.PID()) })
		wg.Wait()
		ev := answerOf(t, s, h)
		if ev.Error == nil {
			require.Equal(t, 4, ev.Data, "iteration %d", i)
		} else if !errors.Is(ev.Error, sched.ErrNoReply) {
			require.ErrorIs(t, ev.Error, sched.ErrProcessNotFound, "iteration %d", i)
		}
		require.Len(t, asker.EventsOf(sched.EventYieldComplete), 1, "iteration %d: exactly once", i)
	}
}

// TestSendHandsInAReply: a message whose Data is a Reply to its recipient
// answers that request, as Scheduler.Reply does, whether it comes through
// Send or SendContext (SendContext is Send that may wait for room): the
// asking yield completes with the answer, From the message's sender,
// and a second answer is refused as Reply refuses it. A Reply addressed
// to some other process is only data: a message like any other.
func TestSendHandsInAReply(t *testing.T) {
	for _, tc := range []struct {
		name string
		send func(s *sched.Scheduler, msg relay.Message) error
	}{
		{"Send", func(s *sched.Scheduler, msg relay.Message) error { return s.Send(msg) }},
		{"SendContext", func(s *sched.Scheduler, msg relay.Message) error { return s.SendContext(context.Background(), msg) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newScheduler(t)
			requests := make(chan sched.Request, 1)
			relayer := submit(t, s, &probe{step: relayRequests(requests)})
			// The asker ends with the first event it gets, whatever it
			// is, so that an answer delivered as a plain message shows.
			asker := submit(t, s, &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
				if n == 0 {
					out.Request(1, relayer.PID(), "q")
					return nil
				}
				out.Done(payload.Of(evs[0]))
				return nil
			}})
			req := receive(t, requests, "the request")
			answer := relay.Message{From: relayer.PID(), To: asker.PID(), Data: sched.Reply{To: req.ReplyTo, Data: "a"}}
			require.NoError(t, tc.send(s, answer))
			ev := answerOf(t, s, asker)
			require.Equal(t, sched.EventYieldComplete, ev.Type, "the event the answer made: %v", ev)
			assert.Equal(t, uint64(1), ev.Tag)
			assert.Equal(t, "a", ev.Data)
			assert.Equal(t, relayer.PID(), ev.From, "From of the answer is the message's sender")
			assert.ErrorIs(t, tc.send(s, answer), sched.ErrProcessNotFound, "a second answer, the asker having ended")

			other := submit(t, s, &probe{step: untilMessage})
			misaddressed := sched.Reply{To: sched.ReplyTo{PID: asker.PID(), Seq: req.ReplyTo.Seq}, Data: "b"}
			require.NoError(t, tc.send(s, relay.Message{To: other.PID(), Data: misaddressed}))
			res, err := waitEnd(t, s, other)
			require.NoError(t, err)
			assert.Equal(t, misaddressed, res.Value(), "a Reply to another process arrives as a message")
		})
	}
}

// relayRequests is a step that hands every request it gets to requests,
// unanswered, and ends at cancel.
func relayRequests(requests chan<- sched.Request) func(*probe, int, []sched.Event, *sched.StepOutput) error {
	return func(_ *probe, _ int, evs []sched.Event, out *sched.StepOutput) error {
		for _, ev := range evs {
			if req, ok := ev.Data.(sched.Request); ok {
				requests <- req
			}
			if ev.Type == sched.EventCancel {
				out.Done(payload.Payload{})
			}
		}
		return nil
	}
}

// TestReplyToAnotherNode: an answer for an asker on another node goes to
// the transport, as a message whose Data is the Reply, and a refusal of
// the transport is Reply's error; once the scheduler has stopped, Reply
// refuses it with ErrClosed, as it does a local one, the transport gets
// nothing, and the answer is a dead letter.
func TestReplyToAnotherNode(t *testing.T) {
	asker := sched.ReplyTo{PID: relay.PID{Node: 2, ID: 5}, Seq: 3}
	refusing := sched.ReplyTo{PID: relay.PID{Node: 2, ID: 6}, Seq: 4}
	tr := newFakeTransport(refusing.PID)
	var dl deadLetterLog
	s := newScheduler(t, sched.WithNode(1), sched.WithTransport(tr), sched.WithHooks(sched.Hooks{DeadLetter: dl.hook}))

	require.NoError(t, s.Reply(asker, "a", nil))
	got := receive(t, tr.got, "the answer at the transport")
	assert.Equal(t, relay.Message{To: asker.PID, Data: sched.Reply{To: asker, Data: "a"}}, got)
	assert.ErrorIs(t, s.Reply(refusing, "b", nil), errRefused)

	require.NoError(t, s.Shutdown(context.Background()))
	assert.ErrorIs(t, s.Reply(asker, "late", nil), sched.ErrClosed)
	select {
	case m := <-tr.got:
		t.Fatalf("the transport got %v after the stop", m)
	default:
	}
	dead := dl.all()
	require.Len(t, dead, 1)
	assert.Equal(t, sched.DeadLateReply, dead[0].Reason)
	assert.Equal(t, relay.Message{To: asker.PID, Data: "late"}, dead[0].Message)
	assert.Equal(t, uint64(1), s.Stats().Messages.Forwarded)
}

// TestRequestNotDelivered: a request that cannot be delivered completes
// its asking yield with the reason, From the process not reached, and
// never comes back to the asker as a bounce: one that a full mailbox
// evicts (MailboxDropOldest) with ErrDropped, and one handed back
// undelivered (Send with Err set, as a transport does) with the error it
// carries.
func TestRequestNotDelivered(t *testing.T) {
	t.Run("evicted from a full mailbox", func(t *testing.T) {
		s := newScheduler(t)
		g, b := submitGated(t, s, sched.Mailbox(1, sched.MailboxDropOldest))
		asker := newAsker(func(out *sched.StepOutput) { out.Request(1, b.PID(), "question") })
		ha := submit(t, s, asker)
		eventually(t, "the request in the full mailbox", func() bool {
			pi, ok := findProcess(s, b.PID())
			return ok && pi.Queued == 1
		})
		require.NoError(t, s.Tell(b.PID(), note{})) // evicts the request
		ev := answerOf(t, s, ha)
		assert.ErrorIs(t, ev.Error, sched.ErrDropped)
		assert.Equal(t, b.PID(), ev.From)
		assert.Empty(t, asker.EventsOf(sched.EventMessage), "the evicted request came back as a message")
		assert.Zero(t, s.Stats().DeadLetters, "dead letters")
		g.open()
		require.NoError(t, s.Terminate(b.PID()))
		_, err := waitEnd(t, s, b)
		require.NoError(t, err)
		assert.Equal(t, []note{{}}, g.received(), "what the full mailbox kept")
	})

	t.Run("handed back undelivered", func(t *testing.T) {
		s := newScheduler(t)
		requests := make(chan sched.Request, 1)
		relayer := submit(t, s, &probe{step: relayRequests(requests)})
		asker := newAsker(func(out *sched.StepOutput) { out.Request(1, relayer.PID(), "question") })
		ha := submit(t, s, asker)
		req := receive(t, requests, "the request")
		why := errors.New("not delivered")
		require.NoError(t, s.Send(relay.Message{From: relayer.PID(), To: ha.PID(), Data: req, Err: why}))
		ev := answerOf(t, s, ha)
		assert.ErrorIs(t, ev.Error, why)
		assert.Equal(t, relayer.PID(), ev.From)
		assert.Empty(t, asker.EventsOf(sched.EventMessage), "the request came back as a message")
		assert.Zero(t, s.Stats().Messages.Bounced, "counted as a bounce")
	})
}

// TestLateAnswerIsADeadLetter: an answer given with StepOutput.Reply
// after the asker stopped waiting (its Timeout passed) reaches no
// process: the asker read only the timeout, and the answer is a dead
// letter (DeadLateReply) from the replier to the asker.
func TestLateAnswerIsADeadLetter(t *testing.T) {
	var dl deadLetterLog
	s := newScheduler(t, sched.WithHooks(sched.Hooks{DeadLetter: dl.hook}))
	requests := make(chan sched.Request, 1)
	replier := submit(t, s, &probe{step: func(_ *probe, _ int, evs []sched.Event, out *sched.StepOutput) error {
		for _, ev := range evs {
			switch data := ev.Data.(type) {
			case sched.Request:
				requests <- data // answered later, when told to
			case sched.ReplyTo:
				out.Reply(data, "late", nil)
				out.Done(payload.Payload{})
			}
		}
		return nil
	}})
	// The asker keeps waiting for messages after the timeout, so that a
	// late answer delivered to it would show.
	asker := &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
		if n == 0 {
			out.Request(1, replier.PID(), "question")
			out.Timeout(1, time.Millisecond)
		}
		if hasCancel(evs) {
			out.Done(payload.Payload{})
		}
		return nil
	}}
	ha := submit(t, s, asker)
	req := receive(t, requests, "the request")
	eventually(t, "the timeout", func() bool { return len(asker.EventsOf(sched.EventYieldComplete)) == 1 })
	require.NoError(t, s.Tell(replier.PID(), req.ReplyTo))
	_, err := waitEnd(t, s, replier)
	require.NoError(t, err)
	dead := dl.all()
	require.Len(t, dead, 1, "dead letters")
	assert.Equal(t, sched.DeadLateReply, dead[0].Reason)
	assert.Equal(t, relay.Message{From: replier.PID(), To: ha.PID(), Data: "late"}, dead[0].Message)
	assert.Equal(t, uint64(1), s.Stats().DeadLetters.LateReplies)
	require.NoError(t, s.Terminate(ha.PID()))
	_, err = waitEnd(t, s, ha)
	require.NoError(t, err)
	evs := asker.EventsOf(sched.EventYieldComplete)
	require.Len(t, evs, 1, "completions of the request")
	assert.ErrorIs(t, evs[0].Error, sched.ErrTimeout)
	assert.Empty(t, asker.EventsOf(sched.EventMessage), "the late answer reached the asker")
}

// TestAnswerToNoRequestIsADeadLetter: a step's Reply to a ReplyTo that
// names no request (the zero one, or one without the asking yield's
// number) reaches nobody, and its process is not told (a Reply has no
// completion): it is a dead letter, as an answer nobody waits for any
// more is, not an answer lost without a trace.
func TestAnswerToNoRequestIsADeadLetter(t *testing.T) {
	var dl deadLetterLog
	s := newScheduler(t, sched.WithHooks(sched.Hooks{DeadLetter: dl.hook}))
	failed := testError("no answer")
	h := submit(t, s, &probe{step: func(_ *probe, _ int, _ []sched.Event, out *sched.StepOutput) error {
		out.Reply(sched.ReplyTo{}, "nobody asked", nil)
		out.Reply(sched.ReplyTo{PID: out.Self()}, nil, failed)
		out.Done(payload.Payload{})
		return nil
	}})
	_, err := waitEnd(t, s, h)
	require.NoError(t, err)
	assert.Equal(t, []sched.DeadLetter{
		{Message: relay.Message{From: h.PID(), Data: "nobody asked"}, Reason: sched.DeadLateReply},
		{Message: relay.Message{From: h.PID(), To: h.PID(), Err: failed}, Reason: sched.DeadLateReply},
	}, dl.all())
	eventually(t, "the dead letters counted", func() bool { return s.Stats().DeadLetters.LateReplies >= 2 })
	assert.Equal(t, uint64(2), s.Stats().DeadLetters.LateReplies)
}

// TestUnreadRequest: a request its replier leaves unread when it ends,
// in its mailbox or past the point where its last step stopped reading,
// counts as unread; its asker, if it still waits, learns of it (the
// request completes with ErrNoReply), so it is no dead letter, as a
// request that comes back undelivered to an asker that waits is none.
// Only when the asker waits no more does the request reach nobody: then
// it is a dead letter (DeadUnread).
func TestUnreadRequest(t *testing.T) {
	// blocked starts a replier whose second step (on a message) blocks
	// until release is closed and then ends, leaving what came meanwhile
	// in its mailbox.
	blocked := func(t *testing.T, s *sched.Scheduler) (replier sched.Handle, release chan struct{}) {
		inStep := make(chan struct{})
		release = make(chan struct{})
		replier = submit(t, s, &probe{step: func(_ *probe, n int, _ []sched.Event, out *sched.StepOutput) error {
			if n == 1 {
				close(inStep)
				<-release
				out.Done(payload.Payload{})
			}
			return nil
		}})
		require.NoError(t, s.Tell(replier.PID(), "block"))
		receive(t, inStep, "the blocked step")
		return replier, release
	}
	queued := func(t *testing.T, s *sched.Scheduler, pid relay.PID) {
		eventually(t, "the request queued", func() bool {
			info, ok := findProcess(s, pid)
			return ok && info.Queued > 0
		})
	}
	unread := func(t *testing.T, s *sched.Scheduler) uint64 {
		eventually(t, "the unread request counted", func() bool { return s.Stats().Messages.Unread >= 1 })
		return s.Stats().Messages.Unread
	}

	t.Run("in the mailbox, its asker waiting", func(t *testing.T) {
		var dl deadLetterLog
		s := newScheduler(t, sched.WithHooks(sched.Hooks{DeadLetter: dl.hook}))
		replier, release := blocked(t, s)
		asker := submit(t, s, newAsker(func(out *sched.StepOutput) { out.Request(1, replier.PID(), "q") }))
		queued(t, s, replier.PID())
		close(release)
		ev := answerOf(t, s, asker)
		assert.ErrorIs(t, ev.Error, sched.ErrNoReply)
		_, err := waitEnd(t, s, replier)
		require.NoError(t, err)
		assert.Equal(t, uint64(1), unread(t, s))
		assert.Empty(t, dl.all(), "dead letters")
	})

	t.Run("past where the last step stopped reading, its asker waiting", func(t *testing.T) {
		var dl deadLetterLog
		s := newScheduler(t, sched.WithHooks(sched.Hooks{DeadLetter: dl.hook}))
		replier := submit(t, s, &probe{step: func(_ *probe, _ int, evs []sched.Event, out *sched.StepOutput) error {
			for _, ev := range evs {
				if _, ok := ev.Data.(sched.Request); ok {
					out.DoneAfter(0, payload.Payload{})
				}
			}
			return nil
		}})
		ev := answerOf(t, s, submit(t, s, newAsker(func(out *sched.StepOutput) { out.Request(1, replier.PID(), "q") })))
		assert.ErrorIs(t, ev.Error, sched.ErrNoReply)
		_, err := waitEnd(t, s, replier)
		require.NoError(t, err)
		assert.Equal(t, uint64(1), unread(t, s))
		assert.Empty(t, dl.all(), "dead letters")
	})

	t.Run("its asker waiting no more", func(t *testing.T) {
		var dl deadLetterLog
		s := newScheduler(t, sched.WithHooks(sched.Hooks{DeadLetter: dl.hook}))
		replier, release := blocked(t, s)
		asker := submit(t, s, &probe{step: func(_ *probe, _ int, _ []sched.Event, out *sched.StepOutput) error {
			out.Request(1, replier.PID(), "q")
			out.Done(payload.Payload{}) // does not wait for the answer
			return nil
		}})
		_, err := waitEnd(t, s, asker)
		require.NoError(t, err)
		queued(t, s, replier.PID())
		close(release)
		_, err = waitEnd(t, s, replier)
		require.NoError(t, err)
		got := dl.all()
		require.Len(t, got, 1, "dead letters")
		assert.Equal(t, sched.DeadUnread, got[0].Reason)
		req, ok := got[0].Message.Data.(sched.Request)
		require.True(t, ok, "the dead letter is the request: %#v", got[0].Message.Data)
		assert.Equal(t, "q", req.Body)
		assert.Equal(t, asker.PID(), got[0].Message.From)
		assert.Equal(t, uint64(1), unread(t, s))
	})
}

// TestAnswerTakenThenCancelled: an answer that comes while the asker's
// step runs is taken (Reply returns nil); when that step cancels the
// request, the answer is dropped with the other completions of the tag:
// the asker never sees it, and it is no dead letter, as Cancel's doc
// says. A later answer would be one (TestLateAnswerIsADeadLetter).
func TestAnswerTakenThenCancelled(t *testing.T) {
	var dl deadLetterLog
	s := newScheduler(t, sched.WithHooks(sched.Hooks{DeadLetter: dl.hook}))
	requests := make(chan sched.Request, 1)
	replier := submit(t, s, &probe{step: func(_ *probe, _ int, evs []sched.Event, out *sched.StepOutput) error {
		for _, ev := range evs {
			if req, ok := ev.Data.(sched.Request); ok {
				requests <- req
			}
			if ev.Type == sched.EventCancel {
				out.Done(payload.Payload{})
			}
		}
		return nil
	}})
	replied := make(chan error, 1)
	var req sched.Request
	asker := &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
		switch {
		case n == 0:
			out.Request(1, replier.PID(), "question")
		case hasCancel(evs):
			out.Done(payload.Payload{})
		case len(evs) == 1 && evs[0].Data == "answer now, then cancel":
			// The answer comes while this step runs, and the step
			// cancels the request.
			replied <- s.Reply(req.ReplyTo, "answer", nil)
			out.Cancel(1)
			out.Tell(out.Self(), "after the cancel")
		}
		return nil
	}}
	ha := submit(t, s, asker)
	req = receive(t, requests, "the request")
	require.NoError(t, s.Tell(ha.PID(), "answer now, then cancel"))
	require.NoError(t, receive(t, replied, "the Reply's result"), "the asker waited when the answer came")
	eventually(t, "the message after the cancel", func() bool {
		for _, ev := range asker.EventsOf(sched.EventMessage) {
			if ev.Data == "after the cancel" {
				return true
			}
		}
		return false
	})
	require.NoError(t, s.Terminate(ha.PID()))
	_, err := waitEnd(t, s, ha)
	require.NoError(t, err)
	assert.Empty(t, asker.EventsOf(sched.EventYieldComplete), "the cancelled request's answer reached the asker")
	assert.Empty(t, dl.all(), "dead letters")
	assert.Zero(t, s.Stats().DeadLetters.LateReplies)
}
