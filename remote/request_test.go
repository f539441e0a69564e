package remote_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	scheduler "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
	"github.com/procsched/scheduler/remote"
)

// doubler answers each request for a number with twice the number, and
// an odd number with an error.
func tDoubler(t testing.TB, s *scheduler.Scheduler) scheduler.Handle {
	return tSubmit(t, s, func(_ *tProc, _ int, evs []scheduler.Event, out *scheduler.StepOutput) error {
		for _, ev := range evs {
			req, ok := ev.Data.(scheduler.Request)
			switch {
			case ev.Type == scheduler.EventCancel:
				out.Done(payload.Payload{})
			case ok:
				n, err := payload.As[int](req.Body.(payload.Payload))
				switch {
				case err != nil:
					out.Reply(req.ReplyTo, nil, err)
				case n%2 != 0:
					out.Reply(req.ReplyTo, nil, errors.New("odd"))
				default:
					out.Reply(req.ReplyTo, payload.Of(2*n), nil)
				}
			}
		}
		return nil
	})
}

// tAsk submits a process that requests body of to and ends with the
// completion.
func tAsk(t testing.TB, s *scheduler.Scheduler, to relay.PID, body any) scheduler.Event {
	t.Helper()
	return tFirst(t, s, scheduler.EventYieldComplete, func(out *scheduler.StepOutput) { out.Request(1, to, body) })
}

func TestRequestReplyAcrossNodes(t *testing.T) {
	_, a, b := tTwoNodes(t, nil)
	doubler := tDoubler(t, b.S)

	ev := tAsk(t, a.S, doubler.PID(), payload.Of(20))
	require.NoError(t, ev.Error)
	n, err := payload.As[int](ev.Result())
	require.NoError(t, err)
	assert.Equal(t, 40, n)
	assert.Equal(t, doubler.PID(), ev.From, "the answer comes from the replier")

	ev = tAsk(t, a.S, doubler.PID(), payload.Of(7))
	var rerr *remote.Error
	require.True(t, errors.As(ev.Error, &rerr), "an error from the replier: %v", ev.Error)
	assert.Equal(t, "odd", rerr.Text)
	assert.Equal(t, "b", rerr.Node)
	assert.Equal(t, doubler.PID(), rerr.PID)

	// A request to a process that has ended completes the asking yield
	// with the failure, as locally.
	require.NoError(t, b.S.Terminate(doubler.PID()))
	_, err = tWaitResult(t, doubler)
	require.NoError(t, err)
	ev = tAsk(t, a.S, doubler.PID(), payload.Of(2))
	assert.ErrorIs(t, ev.Error, scheduler.ErrProcessNotFound)
	assert.Nil(t, ev.Data)

	// A body that cannot cross is refused at once.
	ev = tAsk(t, a.S, doubler.PID(), 42)
	assert.ErrorIs(t, ev.Error, remote.ErrNotEncodable)
}

// TestReplyThatCannotCross: an answer whose data cannot cross back to
// the asker's node (a Go value JSON cannot encode, or larger than a
// batch) does not leave the asker waiting: its request completes with
// ErrNotEncodable, from the replier, as an awaited spawn whose result
// cannot cross does. An answer that crosses still does.
func TestReplyThatCannotCross(t *testing.T) {
	_, a, b := tTwoNodes(t, nil)
	replier := tSubmit(t, b.S, func(_ *tProc, _ int, evs []scheduler.Event, out *scheduler.StepOutput) error {
		for _, ev := range evs {
			req, ok := ev.Data.(scheduler.Request)
			switch {
			case ev.Type == scheduler.EventCancel:
				out.Done(payload.Payload{})
			case !ok:
			case req.Body == "a channel":
				out.Reply(req.ReplyTo, payload.Of(make(chan int)), nil)
			case req.Body == "too large":
				out.Reply(req.ReplyTo, make([]byte, 600<<10), errors.New("and an error of its own"))
			case req.Body == "too large, and so is its error":
				out.Reply(req.ReplyTo, make([]byte, 600<<10), errors.New(strings.Repeat("e", 600<<10)))
			default:
				out.Reply(req.ReplyTo, "fine", nil)
			}
		}
		return nil
	})
	ask := func(body string) scheduler.Event {
		return tFirst(t, a.S, scheduler.EventYieldComplete, func(out *scheduler.StepOutput) {
			out.Request(1, replier.PID(), body)
			out.Timeout(1, tWait/3) // a bound on a hang, not a synchronisation
		})
	}

	ev := ask("a channel")
	assert.ErrorIs(t, ev.Error, remote.ErrNotEncodable)
	assert.ErrorIs(t, ev.Error, payload.ErrEncode)
	assert.NotErrorIs(t, ev.Error, scheduler.ErrTimeout)
	assert.Nil(t, ev.Data)
	assert.Equal(t, replier.PID(), ev.From)
	var rerr *remote.Error
	require.True(t, errors.As(ev.Error, &rerr), "reported by b: %v", ev.Error)
	assert.Equal(t, "b", rerr.Node)

	ev = ask("too large")
	assert.ErrorIs(t, ev.Error, remote.ErrNotEncodable)
	assert.NotErrorIs(t, ev.Error, scheduler.ErrTimeout)
	assert.ErrorContains(t, ev.Error, "and an error of its own", "the replier's own error goes with it")
	assert.Nil(t, ev.Data)

	ev = ask("too large, and so is its error")
	assert.ErrorIs(t, ev.Error, remote.ErrNotEncodable)
	assert.NotErrorIs(t, ev.Error, scheduler.ErrTimeout)
	require.True(t, errors.As(ev.Error, &rerr), "reported by b: %v", ev.Error)
	assert.True(t, strings.HasPrefix(rerr.Text, "eee"), "the answer's error, shortened: %.20q", rerr.Text)

	ev = ask("anything")
	require.NoError(t, ev.Error)
	assert.Equal(t, "fine", ev.Data)
	assert.Equal(t, uint64(3), b.Stats().Refused.NotEncodable, "the replier's node refused the three answers")
}

// TestAnswerAfterTheAskerStopped: an answer that reaches the asker's
// node after the asker stopped waiting (its request timed out) or ended
// is not delivered and goes back to no one: the asker's scheduler counts
// a late reply among its dead letters, the node counts it in
// BouncedBack, and the replier's node gets nothing back. A live asker
// gets no event for it.
func TestAnswerAfterTheAskerStopped(t *testing.T) {
	_, a, b := tTwoNodes(t, nil)
	replier := tHoldingReplier(t, b.S, "late")

	// An asker whose request times out, and who then passes on every
	// event it gets.
	events := make(chan scheduler.Event, 4)
	tSubmit(t, a.S, func(_ *tProc, n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
		if n == 0 {
			out.Request(1, replier.PID(), "question")
			out.Timeout(1, 50*time.Millisecond)
			return nil
		}
		for _, ev := range evs {
			if ev.Type == scheduler.EventCancel {
				out.Done(payload.Payload{})
				return nil
			}
			events <- ev
		}
		return nil
	})
	ev := tRecv(t, events, "the request to time out")
	require.ErrorIs(t, ev.Error, scheduler.ErrTimeout)
	// An asker that ends while its request waits.
	asked := make(chan struct{})
	ender := tSubmit(t, a.S, func(_ *tProc, n int, _ []scheduler.Event, out *scheduler.StepOutput) error {
		if n == 0 {
			out.Request(1, replier.PID(), "question")
			close(asked)
			return nil
		}
		out.Done(payload.Payload{})
		return nil
	})
	tRecv(t, asked, "the second request")
	tEventually(t, func() bool { return b.Stats().Received >= 2 }, "b has both requests")
	require.NoError(t, a.S.Terminate(ender.PID()))
	_, err := tWaitResult(t, ender)
	require.NoError(t, err)

	before, sent := a.S.Stats().DeadLetters.LateReplies, a.Stats().Sent
	require.NoError(t, b.S.Tell(replier.PID(), "answer now"))
	tEventually(t, func() bool { return a.S.Stats().DeadLetters.LateReplies == before+2 }, "a's scheduler counts two late replies (%d)", a.S.Stats().DeadLetters.LateReplies)
	st := a.Stats()
	assert.Equal(t, uint64(2), st.BouncedBack.NotFound+st.BouncedBack.Other, "counted as not delivered: %+v", st.BouncedBack)
	assert.Zero(t, b.Stats().Returned, "nothing goes back to the replier")
	assert.Equal(t, sent, a.Stats().Sent, "a sends nothing back")
	select {
	case ev := <-events:
		t.Fatalf("the asker got an event for the late answer: %v", ev)
	default:
	}
}

// TestRequestToAnUnreachableNode: a request to a process of a node that
// is unknown, or down, completes at once with the error a Tell gets:
// ErrUnknownNode or ErrNodeDown, both ErrProcessNotFound.
func TestRequestToAnUnreachableNode(t *testing.T) {
	_, a, b := tTwoNodes(t, nil)
	doubler := tDoubler(t, b.S)
	nowhere := relay.PID{Node: a.Node.Node() ^ b.Node.Node() ^ 1, ID: 1}
	ev := tAsk(t, a.S, nowhere, payload.Of(2))
	assert.ErrorIs(t, ev.Error, remote.ErrUnknownNode)
	assert.ErrorIs(t, ev.Error, scheduler.ErrProcessNotFound)

	b.stop(t)
	tRecv(t, a.Down, "a to see b leave")
	ev = tAsk(t, a.S, doubler.PID(), payload.Of(2))
	assert.ErrorIs(t, ev.Error, remote.ErrNodeDown)
	assert.ErrorIs(t, ev.Error, scheduler.ErrProcessNotFound)
	assert.Nil(t, ev.Data)
}

// TestReplyRefusedForBackpressure: an answer refused because too much
// waits for the asker's node does not leave the asker waiting: its
// request completes with ErrBackpressure (an ErrMailboxFull), as a
// request refused by a full mailbox does, and it may ask again.
func TestReplyRefusedForBackpressure(t *testing.T) {
	srv := tServer(t)
	a := tStart(t, srv.ClientURL(), "a", nil)
	b := tStart(t, srv.ClientURL(), "b", func(cfg *remote.Config) { cfg.Window, cfg.MaxBuffered = 8<<10, 16<<10 })
	tJoin(t, a, b)
	replier := tHoldingReplier(t, b.S, "the answer")
	asking := tAskBounded(t, a.S, replier.PID())
	tEventually(t, func() bool { return b.Stats().Received > 0 }, "b has the request")

	// a takes nothing, and b's way to it fills.
	open := tHoldInbound(t, a)
	sink := tSink(t, a.S)
	tFillTheWay(t, b, sink.PID(), 1<<10)
	refused := b.Stats().Refused.Backpressure
	require.NoError(t, b.S.Tell(replier.PID(), "answer now"))
	tEventually(t, func() bool { return b.Stats().Refused.Backpressure > refused }, "b refuses the answer")
	open()

	res, err := tWaitResult(t, asking)
	require.NoError(t, err)
	ev := res.Value().(scheduler.Event)
	assert.ErrorIs(t, ev.Error, remote.ErrBackpressure)
	assert.ErrorIs(t, ev.Error, scheduler.ErrMailboxFull)
	assert.NotErrorIs(t, ev.Error, scheduler.ErrTimeout)
	assert.Equal(t, replier.PID(), ev.From)
}

// tHoldingReplier submits to s a process that holds the requests it
// gets and answers each with answer once it is told "answer now"; it
// ends at its cancel.
func tHoldingReplier(t testing.TB, s *scheduler.Scheduler, answer string) scheduler.Handle {
	t.Helper()
	var held []scheduler.ReplyTo
	return tSubmit(t, s, func(_ *tProc, _ int, evs []scheduler.Event, out *scheduler.StepOutput) error {
		for _, ev := range evs {
			switch req, ok := ev.Data.(scheduler.Request); {
			case ev.Type == scheduler.EventCancel:
				out.Done(payload.Payload{})
			case ok:
				held = append(held, req.ReplyTo)
			case ev.Data == "answer now":
				for _, to := range held {
					out.Reply(to, answer, nil)
				}
				held = nil
			}
		}
		return nil
	})
}

// TestRemoteReplierIsNotWatched pins what a request to a process of
// another node does not do that a local one does: it does not watch the
// replier. A replier there that ends without answering, or whose node
// goes down once it has the request, leaves the request waiting until
// its Timeout (ErrTimeout), where a local replier's end completes it at
// once with ErrNoReply; the asker's node keeps nothing for it. A request
// sent after the replier ended still completes at once, with the
// failure its node reports.
func TestRemoteReplierIsNotWatched(t *testing.T) {
	srv, a, b := tTwoNodes(t, nil)
	// ask submits to a a process that requests "question" of to, with a
	// timeout far longer than an exit takes to cross, and ends with the
	// completion.
	ask := func(to relay.PID) scheduler.Handle {
		return tSubmit(t, a.S, func(_ *tProc, n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
			if n == 0 {
				out.Request(1, to, "question")
				out.Timeout(1, 2*time.Second)
				return nil
			}
			for _, ev := range evs {
				if ev.Type == scheduler.EventYieldComplete {
					out.Done(payload.Of(ev))
				}
			}
			return nil
		})
	}
	completion := func(h scheduler.Handle) scheduler.Event {
		t.Helper()
		res, err := tWaitResult(t, h)
		require.NoError(t, err)
		return res.Value().(scheduler.Event)
	}

	t.Run("the replier ends without answering", func(t *testing.T) {
		replier, got := tCollector(t, b.S, 1)
		asker := ask(replier.PID())
		_, isRequest := tRecv(t, got, "the request").Data.(scheduler.Request)
		require.True(t, isRequest)
		require.NoError(t, b.S.Terminate(replier.PID()))
		_, err := tWaitResult(t, replier)
		require.NoError(t, err)
		ev := completion(asker)
		assert.ErrorIs(t, ev.Error, scheduler.ErrTimeout)
		assert.NotErrorIs(t, ev.Error, scheduler.ErrNoReply)
		assert.Zero(t, a.Stats().Pending)
		assert.Zero(t, b.Stats().MonitorsHeld)

		ev = completion(ask(replier.PID()))
		assert.ErrorIs(t, ev.Error, scheduler.ErrProcessNotFound, "a request to the ended replier")
		assert.NotErrorIs(t, ev.Error, scheduler.ErrTimeout)
	})

	t.Run("the replier's node goes down", func(t *testing.T) {
		c := tStart(t, srv.ClientURL(), "c", nil)
		tJoin(t, a, c)
		replier, got := tCollector(t, c.S, 1)
		asker := ask(replier.PID())
		_, isRequest := tRecv(t, got, "the request").Data.(scheduler.Request)
		require.True(t, isRequest)
		c.stop(t)
		for p := tRecv(t, a.Down, "a to see c leave"); p.Name != "c"; p = tRecv(t, a.Down, "a to see c leave") {
		}
		ev := completion(asker)
		assert.ErrorIs(t, ev.Error, scheduler.ErrTimeout)
		assert.NotErrorIs(t, ev.Error, remote.ErrNodeDown)
		assert.Zero(t, a.Stats().Pending)

		ev = completion(ask(replier.PID()))
		assert.ErrorIs(t, ev.Error, remote.ErrNodeDown, "a request to a process of the down node")
	})
}

// TestRefusedAnswerWhenTheWayBackIsFull: an answer refused because too
// much waits for the asker's node still completes the asker's request
// with ErrBackpressure when the room of answers beyond the messages is
// full too: the replacement goes whatever waits, its error's text
// shortened to a KiB (here the replier's own error is twice as long),
// and the asker does not wait for its timeout.
func TestRefusedAnswerWhenTheWayBackIsFull(t *testing.T) {
	srv := tServer(t)
	a := tStart(t, srv.ClientURL(), "a", nil)
	b := tStart(t, srv.ClientURL(), "b", func(cfg *remote.Config) { cfg.Window, cfg.MaxBuffered = 8<<10, 16<<10 })
	tJoin(t, a, b)
	var held []scheduler.ReplyTo
	replier := tSubmit(t, b.S, func(_ *tProc, _ int, evs []scheduler.Event, out *scheduler.StepOutput) error {
		for _, ev := range evs {
			switch req, ok := ev.Data.(scheduler.Request); {
			case ev.Type == scheduler.EventCancel:
				out.Done(payload.Payload{})
			case ok:
				held = append(held, req.ReplyTo)
			case ev.Data == "answer now":
				for _, to := range held {
					out.Reply(to, "the answer", errors.New(strings.Repeat("e", 2<<10)))
				}
			}
		}
		return nil
	})
	asking := tAskBounded(t, a.S, replier.PID())
	tEventually(t, func() bool { return b.Stats().Received > 0 }, "b has the request")

	// a takes nothing, and b's way to it fills with messages...
	open := tHoldInbound(t, a)
	sink := tSink(t, a.S)
	tFillTheWay(t, b, sink.PID(), 1<<10)
	// ... and with bounces of a KiB, until b drops some.
	tOverflowTheWayBack(t, a.S, b, 64, 1<<10)

	overflow := b.Stats().Dropped.Overflow
	refused := b.Stats().Refused.Backpressure
	require.NoError(t, b.S.Tell(replier.PID(), "answer now"))
	tEventually(t, func() bool { return b.Stats().Refused.Backpressure > refused }, "b refuses the answer")
	open()

	res, err := tWaitResult(t, asking)
	require.NoError(t, err)
	ev := res.Value().(scheduler.Event)
	assert.ErrorIs(t, ev.Error, remote.ErrBackpressure)
	assert.NotErrorIs(t, ev.Error, scheduler.ErrTimeout)
	assert.Equal(t, replier.PID(), ev.From)
	var rerr *remote.Error
	require.True(t, errors.As(ev.Error, &rerr), "reported by b: %v", ev.Error)
	assert.True(t, strings.HasPrefix(rerr.Text, "eee"), "the answer's error, shortened: %.20q", rerr.Text)
	assert.LessOrEqual(t, len(rerr.Text), 1<<10)
	assert.Equal(t, overflow, b.Stats().Dropped.Overflow, "the replacement was not dropped")
}
