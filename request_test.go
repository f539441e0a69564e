package scheduler_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// tServer answers every request with its body doubled (an int), or with
// errOdd for an odd body; it ends at cancel.
func tServer(_ *tProc, _ int, evs []sched.Event, out *sched.StepOutput) error {
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

// tAsker sends one request (tag 1) through ask and ends with the
// completion event as its result.
func tAsker(ask func(out *sched.StepOutput)) *tProc {
	return &tProc{step: func(_ *tProc, n int, evs []sched.Event, out *sched.StepOutput) error {
		if n == 0 {
			ask(out)
			return nil
		}
		if ev, ok := tCompletion(evs, 1); ok {
			out.Done(payload.Of(ev))
		}
		return nil
	}}
}

func tAnswer(t *testing.T, s *sched.Scheduler, h sched.Handle) sched.Event {
	t.Helper()
	res, err := tWait(t, s, h)
	require.NoError(t, err)
	return res.Value().(sched.Event)
}

func TestRequest(t *testing.T) {
	t.Run("the answer completes the yield", func(t *testing.T) {
		s := tNewScheduler(t)
		srv := tSubmit(t, s, &tProc{step: tServer})
		require.NoError(t, s.Register("doubler", srv.PID()))
		for _, tc := range []struct {
			name string
			ask  func(out *sched.StepOutput)
		}{
			{"by PID", func(out *sched.StepOutput) { out.Request(1, srv.PID(), 20) }},
			{"by name", func(out *sched.StepOutput) { out.RequestName(1, "doubler", 20) }},
		} {
			ev := tAnswer(t, s, tSubmit(t, s, tAsker(tc.ask)))
			require.NoError(t, ev.Error, tc.name)
			assert.Equal(t, 40, ev.Data, tc.name)
			assert.Equal(t, srv.PID(), ev.From, "From of the answer is the replier")
		}
		ev := tAnswer(t, s, tSubmit(t, s, tAsker(func(out *sched.StepOutput) { out.Request(1, srv.PID(), 3) })))
		assert.ErrorIs(t, ev.Error, errOdd, "an error answered")
	})

	t.Run("clear errors when nobody can answer", func(t *testing.T) {
		s := tNewScheduler(t)
		ev := tAnswer(t, s, tSubmit(t, s, tAsker(func(out *sched.StepOutput) { out.RequestName(1, "nobody", 1) })))
		assert.ErrorIs(t, ev.Error, sched.ErrNameNotFound)
		ev = tAnswer(t, s, tSubmit(t, s, tAsker(func(out *sched.StepOutput) { out.Request(1, relay.PID{ID: 1<<32 | 3}, 1) })))
		assert.ErrorIs(t, ev.Error, sched.ErrProcessNotFound)
		gate := make(chan struct{})
		full, err := s.Submit(t.Context(), &tProc{step: func(_ *tProc, n int, evs []sched.Event, out *sched.StepOutput) error {
			if n == 0 {
				<-gate
			}
			if tHasCancel(evs) {
				out.Done(payload.Payload{})
			}
			return nil
		}}, "run", nil, sched.Mailbox(1, sched.MailboxReject))
		require.NoError(t, err)
		tWaitState(t, s, full.PID(), sched.StateRunning)
		require.NoError(t, s.Tell(full.PID(), "fills the mailbox"))
		ev = tAnswer(t, s, tSubmit(t, s, tAsker(func(out *sched.StepOutput) { out.Request(1, full.PID(), 1) })))
		assert.ErrorIs(t, ev.Error, sched.ErrMailboxFull, "a refusal completes the request")
		close(gate)
		require.NoError(t, s.Terminate(full.PID()))
	})

	t.Run("a replier that ends without answering", func(t *testing.T) {
		s := tNewScheduler(t)
		silent := tSubmit(t, s, &tProc{step: tUntilMessage}) // ends on the request, unanswered
		ev := tAnswer(t, s, tSubmit(t, s, tAsker(func(out *sched.StepOutput) { out.Request(1, silent.PID(), 1) })))
		assert.ErrorIs(t, ev.Error, sched.ErrNoReply)
		assert.Equal(t, silent.PID(), ev.From)
	})

	t.Run("answered from outside any process", func(t *testing.T) {
		s := tNewScheduler(t)
		requests := make(chan sched.Request, 1)
		relayer := tSubmit(t, s, &tProc{step: func(_ *tProc, _ int, evs []sched.Event, out *sched.StepOutput) error {
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
		h := tSubmit(t, s, tAsker(func(out *sched.StepOutput) { out.Request(1, relayer.PID(), "q") }))
		req := tRecv(t, requests, "the request")
		assert.Equal(t, "q", req.Body)
		require.NoError(t, s.Reply(req.ReplyTo, "a", nil))
		ev := tAnswer(t, s, h)
		assert.Equal(t, "a", ev.Data)
		assert.True(t, ev.From.IsZero())
		err := s.Reply(req.ReplyTo, "again", nil)
		assert.ErrorIs(t, err, sched.ErrProcessNotFound, "the asker has ended")
		assert.Equal(t, uint64(1), s.Stats().DeadLetters.LateReplies)
	})
}

// TestRequestRacingTheReplierEnd: a request whose replier ends while the
// request is in flight completes exactly once, with the answer or
// ErrNoReply (or ErrProcessNotFound if the replier had already ended).
func TestRequestRacingTheReplierEnd(t *testing.T) {
	s := tNewScheduler(t)
	for i := range 300 {
		srv := tSubmit(t, s, &tProc{step: tServer})
		var wg sync.WaitGroup
		var h sched.Handle
		var asker *tProc
		wg.Go(func() {
			asker = tAsker(func(out *sched.StepOutput) { out.Request(1, srv.PID(), 2) })
			h = tSubmit(t, s, asker)
		})
		wg.Go(func() { _ = s.Terminate(srv.PID()) })
		wg.Wait()
		ev := tAnswer(t, s, h)
		if ev.Error == nil {
			require.Equal(t, 4, ev.Data, "iteration %d", i)
		} else if !errors.Is(ev.Error, sched.ErrNoReply) {
			require.ErrorIs(t, ev.Error, sched.ErrProcessNotFound, "iteration %d", i)
		}
		require.Len(t, asker.EventsOf(sched.EventYieldComplete), 1, "iteration %d: exactly once", i)
	}
}
