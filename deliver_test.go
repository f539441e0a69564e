package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// Tests of delivery from every entry point (deliver.go): messages,
// Terminate, unknown PIDs, and the transport to other nodes.

func TestMessages(t *testing.T) {
	t.Run("Send wakes an idle process", func(t *testing.T) {
		s := newScheduler(t)
		p := &probe{step: untilMessage}
		h := submit(t, s, p)
		waitState(t, s, h.PID(), sched.StateIdle)
		msg := relay.Message{From: relay.PID{Node: 0, ID: 12345}, To: h.PID(), Data: payload.Of("hi")}
		require.NoError(t, s.Send(msg))
		_, err := waitEnd(t, s, h)
		require.NoError(t, err)
		evs := p.EventsOf(sched.EventMessage)
		require.Len(t, evs, 1)
		assert.Equal(t, "hi", evs[0].Data, "Data is the body, not the envelope, and the payload arrives unpacked")
		assert.Equal(t, msg.Data, evs[0].Result())
		assert.Equal(t, msg.From, evs[0].From)
		assert.NoError(t, evs[0].Error)
	})

	t.Run("Tell wakes an idle process", func(t *testing.T) {
		s := newScheduler(t)
		p := &probe{step: untilMessage}
		h := submit(t, s, p)
		waitState(t, s, h.PID(), sched.StateIdle)
		require.NoError(t, s.Tell(h.PID(), 99))
		res, err := waitEnd(t, s, h)
		require.NoError(t, err)
		assert.Equal(t, 99, res.Value())
		evs := p.EventsOf(sched.EventMessage)
		require.Len(t, evs, 1)
		assert.True(t, evs[0].From.IsZero(), "From of Scheduler.Tell")
	})

	t.Run("process to process, in order", func(t *testing.T) {
		s := newScheduler(t)
		const n = 200
		recv := &probe{step: func(p *probe, _ int, _ []sched.Event, out *sched.StepOutput) error {
			if len(p.EventsOf(sched.EventMessage)) == n {
				out.Done(payload.Payload{})
			}
			return nil
		}}
		hr := submit(t, s, recv)
		send := &probe{step: func(_ *probe, _ int, _ []sched.Event, out *sched.StepOutput) error {
			for i := range n {
				out.Tell(hr.PID(), i)
			}
			out.Done(payload.Payload{}) // the Tells of the final step are still delivered
			return nil
		}}
		hs := submit(t, s, send)
		_, err := waitEnd(t, s, hr)
		require.NoError(t, err)
		_, err = waitEnd(t, s, hs)
		require.NoError(t, err)
		for i, ev := range recv.EventsOf(sched.EventMessage) {
			require.Equal(t, i, ev.Data, "message order")
			require.Equal(t, hs.PID(), ev.From, "From of StepOutput.Tell")
		}
	})

	t.Run("self Tell", func(t *testing.T) {
		s := newScheduler(t)
		p := &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
			if n == 0 {
				out.Tell(out.Self(), "me")
				return nil
			}
			for _, ev := range evs {
				if ev.Type == sched.EventMessage {
					if ev.From != out.Self() {
						return fmt.Errorf("From = %v, want %v", ev.From, out.Self())
					}
					out.Done(ev.Result())
				}
			}
			return nil
		}}
		h := submit(t, s, p)
		res, err := waitEnd(t, s, h)
		require.NoError(t, err)
		assert.Equal(t, "me", res.Value())
	})

	t.Run("Tell to a dead PID bounces", func(t *testing.T) {
		s := newScheduler(t)
		dead := submit(t, s, &probe{step: doneWith(nil)})
		_, err := waitEnd(t, s, dead)
		require.NoError(t, err)
		for _, target := range []relay.PID{dead.PID(), {ID: 1 << 40}, {Node: 9, ID: dead.PID().ID}} {
			p := &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
				if n == 0 {
					out.Tell(target, "lost")
					return nil
				}
				out.Done(payload.Payload{})
				return nil
			}}
			h := submit(t, s, p)
			_, err := waitEnd(t, s, h)
			require.NoError(t, err)
			evs := p.Events()
			require.Len(t, evs, 1, "events: %v", evs)
			ev := evs[0]
			assert.Equal(t, sched.EventMessage, ev.Type)
			require.ErrorIs(t, ev.Error, sched.ErrProcessNotFound)
			assert.Equal(t, target, ev.From, "From of a bounce names the target")
			assert.Equal(t, "lost", ev.Data, "Data of a bounce is the message")
		}
		// Per-step counters are published when a worker runs out of work.
		eventually(t, "Bounced == 3", func() bool { return s.Stats().Messages.Bounced == 3 })
	})
}

// TestNotFound: every call that addresses a process fails with
// ErrProcessNotFound for a PID that never existed, has ended, or belongs
// to another node (node 0 included), and for ID 0, which no process has.
func TestNotFound(t *testing.T) {
	s := newScheduler(t, sched.WithNode(1))
	ended := submit(t, s, &probe{step: doneWith(nil)})
	_, err := waitEnd(t, s, ended)
	require.NoError(t, err)
	live := submit(t, s, &probe{step: untilCancel})

	targets := []struct {
		name string
		pid  relay.PID
	}{
		{"never existed", relay.PID{Node: 1, ID: 1<<32 | 999}},
		{"zero", relay.PID{}},
		{"ID 0 of this node", relay.PID{Node: 1}},
		{"ended", ended.PID()},
		{"another node", relay.PID{Node: 2, ID: live.PID().ID}},
		// Node 0 is the default node number, not another name for this node.
		{"node 0", relay.PID{Node: 0, ID: live.PID().ID}},
	}
	ops := []struct {
		name string
		call func(pid relay.PID) error
	}{
		{"Send", func(pid relay.PID) error { return s.Send(relay.Message{To: pid}) }},
		{"Tell", func(pid relay.PID) error { return s.Tell(pid, 1) }},
		{"Terminate", func(pid relay.PID) error { return s.Terminate(pid) }},
		{"CompleteYield", func(pid relay.PID) error { return s.CompleteYield(pid, 1, nil, nil) }},
	}
	for _, target := range targets {
		for _, op := range ops {
			t.Run(op.name+"/"+target.name, func(t *testing.T) {
				err := op.call(target.pid)
				require.ErrorIs(t, err, sched.ErrProcessNotFound)
			})
		}
		// A process's Tell takes its own path on the worker: the message
		// comes back to the sender, undelivered.
		t.Run("StepOutput.Tell/"+target.name, func(t *testing.T) {
			h := submit(t, s, &probe{step: bounced(target.pid)})
			res, err := waitEnd(t, s, h)
			require.NoError(t, err)
			ev := res.Value().(sched.Event)
			assert.ErrorIs(t, ev.Error, sched.ErrProcessNotFound)
			assert.Equal(t, target.pid, ev.From, "From of a bounce is the recipient not reached")
		})
	}
	undisturbed(t, s, live)
}

// undisturbed checks that nothing was queued to the waiting process h,
// which no message was meant for, and then ends it.
func undisturbed(t *testing.T, s *sched.Scheduler, h sched.Handle) {
	t.Helper()
	info, ok := findProcess(s, h.PID())
	require.True(t, ok)
	assert.Zero(t, info.Queued, "events queued to the undisturbed process")
	require.NoError(t, s.Terminate(h.PID()))
	_, err := waitEnd(t, s, h)
	require.NoError(t, err)
}

// bounced is a step that tells "x" to to and ends with the first message
// that comes back undelivered as its result.
func bounced(to relay.PID) func(*probe, int, []sched.Event, *sched.StepOutput) error {
	return func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
		if n == 0 {
			out.Tell(to, "x")
			return nil
		}
		for _, ev := range evs {
			if ev.Type == sched.EventMessage && ev.Error != nil {
				out.Done(payload.Of(ev))
			}
		}
		return nil
	}
}

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

	t.Run("a process's Tell to another node never reaches the local process with the same ID", func(t *testing.T) {
		tr := newFakeTransport()
		s := newScheduler(t, sched.WithNode(1), sched.WithTransport(tr))
		live := submit(t, s, &probe{step: untilCancel})
		twin := relay.PID{Node: 2, ID: live.PID().ID}
		h := submit(t, s, &probe{step: func(_ *probe, n int, _ []sched.Event, out *sched.StepOutput) error {
			out.Tell(twin, "x")
			out.Done(payload.Payload{})
			return nil
		}})
		_, err := waitEnd(t, s, h)
		require.NoError(t, err)
		msg := receive(t, tr.got, "the forwarded message")
		assert.Equal(t, relay.Message{From: h.PID(), To: twin, Data: "x"}, msg)
		undisturbed(t, s, live)
	})

	t.Run("a refusal by the transport reaches the sender like a local one", func(t *testing.T) {
		tr := newFakeTransport(full)
		s := newScheduler(t, sched.WithNode(1), sched.WithTransport(tr))
		require.ErrorIs(t, s.Tell(full, 1), errRefused)
		h := submit(t, s, &probe{step: bounced(full)})
		res, err := waitEnd(t, s, h)
		require.NoError(t, err)
		ev := res.Value().(sched.Event)
		assert.ErrorIs(t, ev.Error, errRefused)
		assert.Equal(t, full, ev.From, "From of a bounce is the recipient not reached")
		assert.Equal(t, "x", ev.Data)
		// Counted by the worker, published when it flushes its counters.
		eventually(t, "the bounce counted", func() bool { return s.Stats().Messages.Bounced >= 1 })
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

// ignoresCancel returns a process that reads a cancel like any event and
// ends on the first message it is told, so that a test sees each cancel
// it gets before ending it.
func ignoresCancel() *probe {
	return &probe{step: func(_ *probe, _ int, evs []sched.Event, out *sched.StepOutput) error {
		for _, ev := range evs {
			if ev.Type == sched.EventMessage {
				out.Done(payload.Payload{})
			}
		}
		return nil
	}}
}

func TestTerminate(t *testing.T) {
	t.Run("cancel is delivered once", func(t *testing.T) {
		s := newScheduler(t)
		p := ignoresCancel()
		h := submit(t, s, p)
		require.NoError(t, s.Terminate(h.PID()))
		require.NoError(t, s.Terminate(h.PID()), "second Terminate")
		eventually(t, "the cancel event", func() bool { return len(p.EventsOf(sched.EventCancel)) > 0 })
		require.NoError(t, s.Terminate(h.PID()), "Terminate after the cancel was seen")
		require.NoError(t, s.Tell(h.PID(), "finish"))
		_, err := waitEnd(t, s, h)
		require.NoError(t, err)
		assert.Len(t, p.EventsOf(sched.EventCancel), 1, "cancel events")
		requireLifecycle(t, p)
		require.ErrorIs(t, s.Terminate(h.PID()), sched.ErrProcessNotFound, "Terminate after the end")
	})

	t.Run("Shutdown after Terminate sends no second cancel", func(t *testing.T) {
		s := newScheduler(t)
		p := ignoresCancel()
		h := submit(t, s, p)
		require.NoError(t, s.Terminate(h.PID()))
		eventually(t, "the cancel event", func() bool { return len(p.EventsOf(sched.EventCancel)) > 0 })
		stopped := make(chan error, 1)
		go func() { stopped <- s.Shutdown(context.Background()) }()
		eventually(t, "Shutdown to begin", func() bool {
			_, err := s.Submit(context.Background(), &probe{step: untilCancel}, "run", nil)
			return errors.Is(err, sched.ErrClosed) // one accepted before ends on its cancel
		})
		require.NoError(t, s.Tell(h.PID(), "finish"))
		_, err := waitEnd(t, s, h)
		require.NoError(t, err)
		require.NoError(t, receive(t, stopped, "Shutdown"))
		evs := p.EventsOf(sched.EventCancel)
		require.Len(t, evs, 1, "cancel events")
		assert.ErrorIs(t, evs[0].Error, sched.ErrTerminated, "the first cancel's cause")
		assert.ErrorIs(t, context.Cause(p.Ctx()), sched.ErrTerminated, "the context keeps the first cause")
		requireLifecycle(t, p)
	})

	t.Run("cleanup yield is served", func(t *testing.T) {
		const d = 20 * time.Millisecond
		s := newScheduler(t)
		var cancelledAt time.Time
		var slept time.Duration
		p := &probe{step: func(_ *probe, _ int, evs []sched.Event, out *sched.StepOutput) error {
			if hasCancel(evs) {
				cancelledAt = time.Now()
				out.Sleep(9, d)
			}
			if _, ok := completionOf(evs, 9); ok {
				slept = time.Since(cancelledAt)
				out.Done(payload.Of("cleaned up"))
			}
			return nil
		}}
		h := submit(t, s, p)
		require.NoError(t, s.Terminate(h.PID()))
		res, err := waitEnd(t, s, h)
		require.NoError(t, err)
		assert.Equal(t, "cleaned up", res.Value())
		assert.GreaterOrEqual(t, slept, d)
		assert.Len(t, p.EventsOf(sched.EventCancel), 1)
		requireLifecycle(t, p)
	})

	t.Run("wakes a blocked process", func(t *testing.T) {
		s := newScheduler(t)
		p := &probe{step: yieldOnce(1, func(out *sched.StepOutput) { out.Sleep(1, time.Hour) })}
		h := submit(t, s, p)
		waitState(t, s, h.PID(), sched.StateBlocked)
		require.NoError(t, s.Terminate(h.PID()))
		_, err := waitEnd(t, s, h)
		require.NoError(t, err)
		requireLifecycle(t, p)
	})

	t.Run("unknown PID", func(t *testing.T) {
		s := newScheduler(t)
		require.ErrorIs(t, s.Terminate(relay.PID{ID: 1<<32 | 77}), sched.ErrProcessNotFound)
	})

	t.Run("after Shutdown's cancel: nothing more", func(t *testing.T) {
		s := newScheduler(t)
		p := ignoresCancel()
		h := submit(t, s, p)
		waitState(t, s, h.PID(), sched.StateIdle)
		shut := shutdownAsync(t, s, context.Background())
		eventually(t, "Shutdown's cancel", func() bool { return len(p.EventsOf(sched.EventCancel)) > 0 })
		require.NoError(t, s.Terminate(h.PID()), "Terminate of a process Shutdown cancelled")
		require.NoError(t, s.Tell(h.PID(), "end"))
		_, err := waitEnd(t, s, h)
		require.NoError(t, err)
		require.NoError(t, receive(t, shut, "Shutdown"))
		evs := p.EventsOf(sched.EventCancel)
		require.Len(t, evs, 1, "cancel events")
		assert.ErrorIs(t, evs[0].Error, sched.ErrShuttingDown)
		requireLifecycle(t, p)
	})

	t.Run("from its Init: not published yet", func(t *testing.T) {
		s := newScheduler(t)
		initErr := make(chan error, 1)
		p := &probe{step: untilMessage, init: func(ctx context.Context, _ string, _ payload.Payloads) error {
			self, _ := sched.Self(ctx)
			initErr <- s.Terminate(self)
			return nil
		}}
		h := submit(t, s, p)
		require.ErrorIs(t, receive(t, initErr, "Init's Terminate"), sched.ErrProcessNotFound)
		require.NoError(t, s.Tell(h.PID(), "first"))
		res, err := waitEnd(t, s, h)
		require.NoError(t, err)
		assert.Equal(t, "first", res.Value(), "the process ran on, uncancelled")
		assert.Empty(t, p.EventsOf(sched.EventCancel))
		assert.ErrorIs(t, context.Cause(p.Ctx()), sched.ErrEnded, "ended, not terminated")
		requireLifecycle(t, p)
	})

	t.Run("from its own step: the next step gets the cancel", func(t *testing.T) {
		s := newScheduler(t)
		stepErr := make(chan error, 1)
		p := &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
			if n == 0 {
				stepErr <- s.Terminate(out.Self())
				return nil
			}
			if hasCancel(evs) {
				out.Done(payload.Of("cancelled"))
			}
			return nil
		}}
		h := submit(t, s, p)
		require.NoError(t, receive(t, stepErr, "the step's Terminate"))
		res, err := waitEnd(t, s, h)
		require.NoError(t, err)
		assert.Equal(t, "cancelled", res.Value())
		batches := p.Batches()
		require.Len(t, batches, 2, "steps")
		require.Len(t, batches[1], 1, "the second step's events")
		assert.ErrorIs(t, batches[1][0].Error, sched.ErrTerminated)
		assert.ErrorIs(t, context.Cause(p.Ctx()), sched.ErrTerminated)
		requireLifecycle(t, p)
	})

	t.Run("during the final step: the cancel is left unread", func(t *testing.T) {
		s := newScheduler(t)
		inStep, finish := make(chan struct{}), make(chan struct{})
		p := &probe{step: func(_ *probe, n int, _ []sched.Event, out *sched.StepOutput) error {
			if n == 1 { // at the first message
				close(inStep)
				<-finish
				out.Done(payload.Of("done"))
			}
			return nil
		}}
		h := submit(t, s, p)
		require.NoError(t, s.Tell(h.PID(), "go"))
		receive(t, inStep, "the final step")
		require.NoError(t, s.Terminate(h.PID()), "Terminate while the final step runs")
		close(finish)
		res, err := waitEnd(t, s, h)
		require.NoError(t, err)
		assert.Equal(t, "done", res.Value())
		assert.Empty(t, p.EventsOf(sched.EventCancel), "no step saw the cancel")
		assert.Equal(t, uint64(1), s.Stats().Messages.Unread, "the cancel, unread")
		assert.ErrorIs(t, context.Cause(p.Ctx()), sched.ErrTerminated, "the context keeps the cancel's cause")
		require.ErrorIs(t, s.Terminate(h.PID()), sched.ErrProcessNotFound, "Terminate after the end")
		requireLifecycle(t, p)
	})

	t.Run("from its Close: it has ended", func(t *testing.T) {
		s := newScheduler(t)
		closeErr := make(chan error, 1)
		var pid relay.PID
		p := &probe{step: untilMessage}
		p.close = func() { closeErr <- s.Terminate(pid) }
		h := submit(t, s, p)
		pid = h.PID()
		require.NoError(t, s.Tell(pid, "end"))
		require.ErrorIs(t, receive(t, closeErr, "Close's Terminate"), sched.ErrProcessNotFound)
		_, err := waitEnd(t, s, h)
		require.NoError(t, err)
		assert.Empty(t, p.EventsOf(sched.EventCancel))
		assert.ErrorIs(t, context.Cause(p.Ctx()), sched.ErrEnded, "ended, not terminated")
		requireLifecycle(t, p)
	})
}

// startRally starts two processes a and b stepped by step and, once
// both wait, sends a the message first as if from b, so that each can
// answer the other.
func startRally(t *testing.T, s *sched.Scheduler, step func(*probe, int, []sched.Event, *sched.StepOutput) error, first any) (a, b sched.Handle) {
	t.Helper()
	a = submit(t, s, &probe{step: step})
	b = submit(t, s, &probe{step: step})
	waitState(t, s, a.PID(), sched.StateIdle)
	waitState(t, s, b.PID(), sched.StateIdle)
	require.NoError(t, s.Send(relay.Message{From: b.PID(), To: a.PID(), Data: payload.Of(first)}))
	return a, b
}

// TestTellToWaitingProcessCounted: a step's Tell to a waiting process may
// hand the receiver straight to the sender's worker (the message skips
// the mailbox); the wake and the message must be counted as any other,
// or the gauges of waiting processes drift. Two processes bounce a count
// up to 100, then end: nothing may be left counted as waiting.
func TestTellToWaitingProcessCounted(t *testing.T) {
	for _, workers := range []int{1, 2} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			s := newScheduler(t, sched.WithWorkers(workers))
			bounce := func(p *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
				for _, ev := range evs {
					if ev.Type != sched.EventMessage {
						continue
					}
					hits, _ := payload.As[int](ev.Result())
					if hits < 100 {
						out.Tell(ev.From, hits+1)
					}
					if hits >= 99 {
						out.Done(payload.Of(hits))
					}
				}
				return nil
			}
			a, b := startRally(t, s, bounce, 0)
			for _, h := range []sched.Handle{a, b} {
				_, err := waitEnd(t, s, h)
				require.NoError(t, err)
			}
			// The waiting gauges and the message counts are published by
			// each worker when it flushes (see Stats): a worker that has
			// not flushed since its last step shows nothing waiting and
			// none of its messages, so both are waited for together.
			eventually(t, "nothing waiting, and the outside message and 100 Tells accepted", func() bool {
				st := s.Stats()
				return st.Processes.Idle == 0 && st.Processes.Blocked == 0 && st.Messages.Accepted == 101
			})
			st := s.Stats()
			assert.Zero(t, st.Processes.Live)
			assert.Equal(t, uint64(101), st.Messages.Accepted, "accepted messages: the outside one and 100 Tells")
		})
	}
}

// TestTellClaimedReceiverNotKeptWaiting: a step whose last Tell claimed
// a waiting receiver for its worker must not step again before the
// receiver has run, even if an event arrived for it meanwhile: the
// receiver would sit Running on a worker busy with something else.
// Here the sender's step Tells itself first, so that an event is
// waiting when it settles; its second step, on the only worker, looks
// at the receiver, which must not be Running then.
func TestTellClaimedReceiverNotKeptWaiting(t *testing.T) {
	for range 20 {
		s := newScheduler(t, sched.WithWorkers(1))
		receiver := submit(t, s, &probe{step: untilMessage})
		waitState(t, s, receiver.PID(), sched.StateIdle)
		seen := make(chan sched.State, 1)
		sender := submit(t, s, &probe{step: func(p *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
			switch n {
			case 0:
				out.Tell(out.Self(), "again")
				out.Tell(receiver.PID(), "hi") // last: may claim the receiver
			default:
				state := sched.State(0) // the receiver ended: not in the list
				for _, info := range s.Processes() {
					if info.PID == receiver.PID() {
						state = info.State
					}
				}
				seen <- state
				out.Done(payload.Payload{})
			}
			return nil
		}})
		assert.NotEqual(t, sched.StateRunning, receive(t, seen, "the receiver's state"),
			"the sender stepped again while the receiver it claimed waited")
		for _, h := range []sched.Handle{receiver, sender} {
			_, err := waitEnd(t, s, h)
			require.NoError(t, err)
		}
	}
}

// TestTellFollowedByAYieldClaimsNothing: only a Tell that is its step's
// last yield may claim a waiting receiver for the worker's next run; one
// followed by another yield leaves the receiver Ready in the next slot,
// since that yield's handler (or a child's Init) runs after the Tell and
// must not run while the receiver sits claimed. The handler of the yield
// after the Tell looks at the receiver, on the only worker: it must not
// be Running.
func TestTellFollowedByAYieldClaimsNothing(t *testing.T) {
	const cmdLook = sched.FirstUserCommand
	for range 20 {
		seen := make(chan sched.State, 1)
		var s *sched.Scheduler
		var receiverPID relay.PID
		look := func(c sched.Call) error {
			state := sched.State(0)
			if info, ok := findProcess(s, receiverPID); ok {
				state = info.State
			}
			seen <- state
			return c.Complete(nil, nil)
		}
		s = newScheduler(t, sched.WithWorkers(1), sched.WithHandler(cmdLook, look))
		receiver := submit(t, s, &probe{step: untilMessage})
		receiverPID = receiver.PID()
		waitState(t, s, receiver.PID(), sched.StateIdle)
		sender := submit(t, s, &probe{step: func(p *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
			switch {
			case n == 0:
			case len(p.EventsOf(sched.EventYieldComplete)) == 0:
				out.Tell(receiver.PID(), "hi")
				out.Yield(1, cmdLook, nil) // after the Tell, in a step that neither continues nor ends
			default:
				out.Done(payload.Payload{})
			}
			return nil
		}})
		waitState(t, s, sender.PID(), sched.StateIdle)
		require.NoError(t, s.Tell(sender.PID(), "go"))
		assert.Equal(t, sched.StateReady, receive(t, seen, "the receiver's state during the handler"),
			"a Tell followed by a yield claimed its receiver")
		for _, h := range []sched.Handle{receiver, sender} {
			_, err := waitEnd(t, s, h)
			require.NoError(t, err)
		}
	}
}

// TestTellClaimedReceiverRunsBeforeItsChildren: a receiver that a step's
// Tell claims runs next, even when children it awaits are on top of the
// worker's deque, which a parent claimed by a child's end would let run
// first. The receiver spawns five children and tells a second process,
// which the worker runs before them (from its next slot) and which
// answers: the receiver's next batch must hold the answer, not the
// answer and the five children's ends. Under the race detector the
// worker declines a claim and bypasses its next slot at random (see
// raceSkipNext), and then the children may rightly run first: there the
// answer must come first in most rounds, not in all.
func TestTellClaimedReceiverRunsBeforeItsChildren(t *testing.T) {
	doneAtOnce := func(_ *probe, _ int, _ []sched.Event, out *sched.StepOutput) error {
		out.Done(payload.Payload{})
		return nil
	}
	const rounds = 20
	var answeredFirst []bool
	for range rounds {
		s := newScheduler(t, sched.WithWorkers(1))
		answerer := submit(t, s, &probe{step: func(p *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
			for _, ev := range evs {
				switch {
				case ev.Type != sched.EventMessage:
				case ev.From.IsZero(): // from the test: the end
					out.Done(payload.Payload{})
				default:
					out.Tell(ev.From, "answer") // the step's last yield, and it waits
				}
			}
			return nil
		}})
		waitState(t, s, answerer.PID(), sched.StateIdle)
		batches := make(chan []sched.Event, 10)
		receiver := submit(t, s, &probe{step: func(p *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
			if n == 0 {
				for tag := range uint64(5) {
					out.SpawnAwait(tag+1, &probe{step: doneAtOnce}, "run", nil)
				}
				out.Tell(answerer.PID(), "question")
				return nil
			}
			batches <- append([]sched.Event(nil), evs...)
			if len(p.EventsOf(sched.EventYieldComplete)) == 5 && len(p.EventsOf(sched.EventMessage)) == 1 {
				out.Done(payload.Payload{})
			}
			return nil
		}})
		first := receive(t, batches, "the receiver's second batch")
		require.NotEmpty(t, first)
		// The answer first, and the receiver run for it before its
		// children could end.
		answeredFirst = append(answeredFirst, first[0].Type == sched.EventMessage && len(first) <= 2)
		require.NoError(t, s.Tell(answerer.PID(), "bye"))
		for _, h := range []sched.Handle{answerer, receiver} {
			_, err := waitEnd(t, s, h)
			require.NoError(t, err)
		}
	}
	n := 0
	for _, ok := range answeredFirst {
		if ok {
			n++
		}
	}
	if raceEnabled {
		assert.GreaterOrEqual(t, n, rounds*3/4, "rounds whose receiver ran for the answer before its children: %v", answeredFirst)
	} else {
		assert.Equal(t, rounds, n, "rounds whose receiver ran for the answer before its children: %v", answeredFirst)
	}
}

// TestClaimedProcessNeverWaitsForAnotherStep: on one worker, a pair that
// bounces a message claims each process for the worker's next run, past
// the next slot's three turns in a row while nothing else is queued on
// the worker. Processes submitted meanwhile, which come through the
// global queue, must not run while one of the pair waits claimed: at
// their step, no other process may be Running.
func TestClaimedProcessNeverWaitsForAnotherStep(t *testing.T) {
	s := newScheduler(t, sched.WithWorkers(1))
	bounce := func(p *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
		for _, ev := range evs {
			switch ev.Type {
			case sched.EventMessage:
				out.Tell(ev.From, 1)
			case sched.EventCancel:
				out.Done(payload.Payload{})
			}
		}
		return nil
	}
	a, b := startRally(t, s, bounce, 1)
	for range 200 {
		others := make(chan []relay.PID, 1)
		c := submit(t, s, &probe{step: func(p *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
			var running []relay.PID
			for _, info := range s.Processes() {
				if info.State == sched.StateRunning && info.PID != p.self {
					running = append(running, info.PID)
				}
			}
			others <- running
			out.Done(payload.Payload{})
			return nil
		}})
		assert.Empty(t, receive(t, others, "the submitted process's step"), "processes Running beside the one stepping")
		_, err := waitEnd(t, s, c)
		require.NoError(t, err)
	}
	for _, h := range []sched.Handle{a, b} {
		require.NoError(t, s.Terminate(h.PID()))
		_, err := waitEnd(t, s, h)
		require.NoError(t, err)
	}
}

// tokenMsg is a token passed round a ring, at hop hop.
type tokenMsg struct{ token, hop int }

// seqMsg is a numbered message from the test's own goroutine.
type seqMsg struct{ seq int }

// TestTellsExactlyOnceInOrderWhileClaimed: tokens passed round a ring of
// processes, each pass a step's last Tell (which claims a waiting
// receiver for the worker's next run), while the test's goroutine sends
// numbered messages to the same processes: every token reaches every hop
// exactly once and in turn, and every process gets the numbered messages
// exactly once and in the order sent.
func TestTellsExactlyOnceInOrderWhileClaimed(t *testing.T) {
	const ring, tokens, hops, outside = 16, 8, 2000, 4000
	for _, workers := range []int{1, 2, 4} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			s := newScheduler(t, sched.WithWorkers(workers))
			var (
				mu       sync.Mutex
				problems []string
				nextHop  [tokens]int // the hop each token must arrive at next
				lastSeq  [ring]int   // the last numbered message each process got
				finished = make(chan int, tokens)
				got      = make(chan struct{}, outside)
			)
			pids := make([]relay.PID, ring)
			handles := make([]sched.Handle, ring)
			for i := range ring {
				lastSeq[i] = -1
				handles[i] = submit(t, s, &probe{step: func(p *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
					for _, ev := range evs {
						switch m := ev.Data.(type) {
						case tokenMsg:
							mu.Lock()
							if m.hop != nextHop[m.token] || (m.token+m.hop)%ring != i {
								problems = append(problems, fmt.Sprintf("token %d: hop %d at process %d, want hop %d", m.token, m.hop, i, nextHop[m.token]))
							}
							nextHop[m.token] = m.hop + 1
							mu.Unlock()
							if m.hop+1 == hops {
								finished <- m.token
							} else {
								out.Tell(pids[(i+1)%ring], tokenMsg{m.token, m.hop + 1})
							}
						case seqMsg:
							mu.Lock()
							if m.seq <= lastSeq[i] {
								problems = append(problems, fmt.Sprintf("process %d: message %d after %d", i, m.seq, lastSeq[i]))
							}
							lastSeq[i] = m.seq
							mu.Unlock()
							got <- struct{}{}
						}
						if ev.Type == sched.EventCancel {
							out.Done(payload.Payload{})
						}
					}
					return nil
				}})
				pids[i] = handles[i].PID()
			}
			for i := range ring {
				waitState(t, s, pids[i], sched.StateIdle)
			}
			for k := range tokens {
				require.NoError(t, s.Tell(pids[k%ring], tokenMsg{k, 0}))
			}
			for q := range outside {
				require.NoError(t, s.Tell(pids[q*7%ring], seqMsg{q}))
			}
			for range tokens {
				receive(t, finished, "a token's last hop")
			}
			for range outside {
				receive(t, got, "a numbered message")
			}
			mu.Lock()
			assert.Empty(t, problems)
			mu.Unlock()
			for _, h := range handles {
				require.NoError(t, s.Terminate(h.PID()))
				_, err := waitEnd(t, s, h)
				require.NoError(t, err)
			}
		})
	}
}

// TestStepTellGoesOutAfterTheStep: a step's StepOutput.Tell goes out
// when the step returns, so a message the step's code sends directly
// meanwhile, with Scheduler.Send (even with the process as From) or
// Scheduler.Tell, arrives first, whatever order the code wrote them in.
// Order holds among the messages sent one way; the docs say so.
func TestStepTellGoesOutAfterTheStep(t *testing.T) {
	s := newScheduler(t)
	var (
		mu  sync.Mutex
		got []string
	)
	all := make(chan struct{})
	recv := submit(t, s, &probe{step: func(_ *probe, _ int, evs []sched.Event, out *sched.StepOutput) error {
		for _, ev := range evs {
			if ev.Type == sched.EventCancel {
				out.Done(payload.Payload{})
			}
			if ev.Type != sched.EventMessage {
				continue
			}
			mu.Lock()
			got = append(got, ev.Data.(string))
			if len(got) == 3 {
				close(all)
			}
			mu.Unlock()
		}
		return nil
	}})
	to := recv.PID()
	waitState(t, s, to, sched.StateIdle)
	sender := submit(t, s, &probe{step: func(_ *probe, _ int, _ []sched.Event, out *sched.StepOutput) error {
		out.Tell(to, "step's Tell")
		if err := s.Send(relay.Message{From: out.Self(), To: to, Data: payload.Of("direct Send")}); err != nil {
			return err
		}
		if err := s.Tell(to, "direct Tell"); err != nil {
			return err
		}
		out.Done(payload.Payload{})
		return nil
	}})
	_, err := waitEnd(t, s, sender)
	require.NoError(t, err)
	select {
	case <-all:
	case <-time.After(testTimeout):
		t.Fatal("the receiver did not get three messages")
	}
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"direct Send", "direct Tell", "step's Tell"}, got)
}
