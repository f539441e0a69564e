package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// note is a numbered message from a sender.
type note struct{ sender, seq int }

// gated blocks its first step until gate is closed, so that its mailbox
// fills meanwhile; then it records every message it gets and finishes on
// cancel.
type gated struct {
	stepOnly
	entered chan struct{} // closed by the first step; read by the test
	gate    chan struct{} // closed by open
	opened  sync.Once
	stepped bool // Step's own
	mu      sync.Mutex
	got     []note
	bounces []sched.Event
}

func newGated() *gated {
	return &gated{entered: make(chan struct{}), gate: make(chan struct{})}
}

func (g *gated) Step(evs []sched.Event, out *sched.StepOutput) error {
	if !g.stepped {
		g.stepped = true
		close(g.entered)
		<-g.gate
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, ev := range evs {
		switch {
		case ev.Type == sched.EventCancel:
			out.Done(payload.Payload{})
		case ev.Type == sched.EventMessage && ev.Error != nil:
			g.bounces = append(g.bounces, ev)
		case ev.Type == sched.EventMessage:
			g.got = append(g.got, ev.Data.(note))
		}
	}
	return nil
}

// open lets the first step go on. Any goroutine; more than once is fine.
func (g *gated) open() { g.opened.Do(func() { close(g.gate) }) }

func (g *gated) received() []note {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]note(nil), g.got...)
}

// submitGated submits a gated process with the given mailbox options and
// waits until its first step holds its worker.
func submitGated(t *testing.T, s *sched.Scheduler, opts ...sched.SubmitOption) (*gated, sched.Handle) {
	t.Helper()
	g := newGated()
	h, err := s.Submit(context.Background(), g, "gated", nil, opts...)
	require.NoError(t, err)
	// A test that fails while the gate is shut must not leave the step
	// blocked: the scheduler's shutdown, a cleanup registered earlier,
	// runs after this one.
	t.Cleanup(g.open)
	receive(t, g.entered, "the gated step")
	return g, h
}

// flood sends senders*per numbered messages concurrently with send and
// returns how many sends returned nil, and the errors of the others.
func flood(senders, per int, send func(note) error) (int, []error) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := 0
	var errs []error
	for sdr := range senders {
		wg.Go(func() {
			for seq := range per {
				err := send(note{sdr, seq})
				mu.Lock()
				if err == nil {
					ok++
				} else {
					errs = append(errs, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return ok, errs
}

// requirePerSenderOrder checks that each sender's messages arrived in the
// order sent.
func requirePerSenderOrder(t *testing.T, got []note) {
	t.Helper()
	last := map[int]int{}
	for _, m := range got {
		if prev, ok := last[m.sender]; ok {
			require.Greater(t, m.seq, prev, "sender %d: message %d after %d", m.sender, m.seq, prev)
		}
		last[m.sender] = m.seq
	}
}

func TestMailboxPolicies(t *testing.T) {
	const capacity, senders, per = 50, 8, 100
	const total = senders * per
	for _, tc := range []struct {
		policy   sched.MailboxPolicy
		wantErr  error // what refused sends return
		accepted int   // sends that return nil
		received int   // messages the process reads
	}{
		{sched.MailboxReject, sched.ErrMailboxFull, capacity, capacity},
		{sched.MailboxDropNewest, sched.ErrDropped, capacity, capacity},
		{sched.MailboxDropOldest, nil, total, capacity},
	} {
		for _, where := range []string{"submit option", "scheduler default"} {
			t.Run(fmt.Sprintf("%v/%s", tc.policy, where), func(t *testing.T) {
				var s *sched.Scheduler
				var opts []sched.SubmitOption
				if where == "submit option" {
					s = newScheduler(t)
					opts = append(opts, sched.Mailbox(capacity, tc.policy))
				} else {
					s = newScheduler(t, sched.WithMailbox(capacity, tc.policy))
				}
				g, h := submitGated(t, s, opts...)
				ok, errs := flood(senders, per, func(m note) error {
					if m.seq%2 == 0 {
						return s.Tell(h.PID(), m)
					}
					return s.Send(relay.Message{To: h.PID(), Data: m})
				})
				require.Equal(t, tc.accepted, ok, "sends accepted")
				for _, err := range errs {
					require.ErrorIs(t, err, tc.wantErr)
				}
				st := s.Stats().Messages
				require.Equal(t, uint64(tc.accepted), st.Accepted, "Stats.Messages.Accepted")
				require.Equal(t, uint64(total-capacity), st.Dropped+st.Rejected, "dropped+rejected")
				if tc.policy == sched.MailboxReject {
					require.Equal(t, uint64(total-capacity), st.Rejected)
				} else {
					require.Equal(t, uint64(total-capacity), st.Dropped)
				}

				g.open()
				require.NoError(t, s.Terminate(h.PID()))
				_, err := waitEnd(t, s, h)
				require.NoError(t, err)
				got := g.received()
				require.Len(t, got, tc.received, "messages read by the process")
				requirePerSenderOrder(t, got)
			})
		}
	}
}

// teller tells its target n messages in its first step and records what
// comes back undelivered.
type teller struct {
	stepOnly
	target  relay.PID
	n       int
	bounced chan sched.Event
}

func (m *teller) Step(evs []sched.Event, out *sched.StepOutput) error {
	if m.n > 0 {
		for i := range m.n {
			out.Tell(m.target, note{0, i})
		}
		m.n = 0
	}
	for _, ev := range evs {
		switch {
		case ev.Type == sched.EventCancel:
			out.Done(payload.Payload{})
		case ev.Type == sched.EventMessage && ev.Error != nil:
			m.bounced <- ev
		}
	}
	return nil
}

// TestMailboxProcessSenderLearnsOutcome: a process that tells a full
// mailbox never blocks and gets back, as undeliverable messages, those
// rejected or dropped, with the reason.
func TestMailboxProcessSenderLearnsOutcome(t *testing.T) {
	for _, tc := range []struct {
		policy sched.MailboxPolicy
		want   error
		seqs   []int // which messages come back
	}{
		{sched.MailboxReject, sched.ErrMailboxFull, []int{3, 4}},
		{sched.MailboxDropNewest, sched.ErrDropped, []int{3, 4}},
		{sched.MailboxDropOldest, sched.ErrDropped, []int{0, 1}},
	} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			s := newScheduler(t, sched.WithWorkers(2))
			g, h := submitGated(t, s, sched.Mailbox(3, tc.policy))
			m := &teller{target: h.PID(), n: 5, bounced: make(chan sched.Event, 5)}
			mh, err := s.Submit(context.Background(), m, "tell", nil)
			require.NoError(t, err)
			var seqs []int
			for range tc.seqs {
				select {
				case ev := <-m.bounced:
					require.ErrorIs(t, ev.Error, tc.want)
					require.Equal(t, h.PID(), ev.From, "a bounce comes from the recipient")
					seqs = append(seqs, ev.Data.(note).seq)
				case <-time.After(testTimeout):
					t.Fatalf("only %d of %d messages came back", len(seqs), len(tc.seqs))
				}
			}
			require.ElementsMatch(t, tc.seqs, seqs)
			g.open()
			require.NoError(t, s.Terminate(h.PID()))
			require.NoError(t, s.Terminate(mh.PID()))
			_, err = waitEnd(t, s, h)
			require.NoError(t, err)
			require.Len(t, g.received(), 3)
			require.Empty(t, m.bounced, "no other message came back")
		})
	}
}

// TestSendContextWaitsForRoom: a SendContext to a full mailbox waits (it
// is seen waiting before the test makes room) and delivers once the
// process drains its mailbox; a TellContext seen waiting returns its
// context's error when cancelled and delivers nothing.
func TestSendContextWaitsForRoom(t *testing.T) {
	s := newScheduler(t)

	// Cancelled while waiting: the context's error, nothing delivered.
	gc, hc := submitGated(t, s, sched.Mailbox(1, sched.MailboxReject))
	require.NoError(t, s.Tell(hc.PID(), note{0, 0}))
	ctx, cancel := context.WithCancel(context.Background())
	cancelled := make(chan error, 1)
	go func() { cancelled <- s.TellContext(ctx, hc.PID(), note{1, 0}) }()
	eventually(t, "TellContext to wait for room", func() bool { return sched.SendersWaitForRoom(s, hc.PID()) })
	cancel()
	require.ErrorIs(t, receive(t, cancelled, "TellContext's return after its context was cancelled"), context.Canceled)
	gc.open()
	require.NoError(t, s.Terminate(hc.PID()))
	_, err := waitEnd(t, s, hc)
	require.NoError(t, err)
	require.Equal(t, []note{{0, 0}}, gc.received(), "the cancelled TellContext delivered nothing")

	// Waiting for room: it returns once the process drained its mailbox.
	g, h := submitGated(t, s, sched.Mailbox(1, sched.MailboxReject))
	require.NoError(t, s.Tell(h.PID(), note{0, 0}))
	require.ErrorIs(t, s.Tell(h.PID(), note{0, 1}), sched.ErrMailboxFull, "the mailbox is full")
	done := make(chan error, 1)
	go func() {
		done <- s.SendContext(context.Background(), relay.Message{To: h.PID(), Data: note{2, 0}})
	}()
	eventually(t, "SendContext to wait for room", func() bool { return sched.SendersWaitForRoom(s, h.PID()) })
	select {
	case err := <-done:
		t.Fatalf("SendContext returned %v while the mailbox was full", err)
	default:
	}
	g.open() // the process drains the first message: room
	require.NoError(t, receive(t, done, "SendContext's return after room was made"))
	require.NoError(t, s.Terminate(h.PID()))
	_, err = waitEnd(t, s, h)
	require.NoError(t, err)
	require.Equal(t, []note{{0, 0}, {2, 0}}, g.received())
}

// TestSendContextProcessEnds: a TellContext seen waiting for room in the
// mailbox of a process that then ends returns: the waiter learns that the
// recipient is gone, or gets in if the drain came first.
func TestSendContextProcessEnds(t *testing.T) {
	s := newScheduler(t)
	g, h := submitGated(t, s, sched.Mailbox(1, sched.MailboxReject))
	require.NoError(t, s.Tell(h.PID(), note{0, 0}))
	done := make(chan error, 1)
	go func() { done <- s.TellContext(context.Background(), h.PID(), note{1, 0}) }()
	eventually(t, "TellContext to wait for room", func() bool { return sched.SendersWaitForRoom(s, h.PID()) })
	// The process finishes with its mailbox still full.
	require.NoError(t, s.Terminate(h.PID()))
	g.open()
	if err := receive(t, done, "TellContext's return after the process ended"); err != nil {
		require.ErrorIs(t, err, sched.ErrProcessNotFound)
	}
}

func TestMailboxOptionsValidated(t *testing.T) {
	_, err := sched.New(sched.WithMailbox(-1, sched.MailboxReject))
	require.ErrorIs(t, err, sched.ErrInvalidOption)
	_, err = sched.New(sched.WithMailbox(1, sched.MailboxPolicy(9)))
	require.ErrorIs(t, err, sched.ErrInvalidOption)
	s := newScheduler(t)
	refused := &probe{}
	_, err = s.Submit(context.Background(), refused, "run", nil, sched.Mailbox(-3, sched.MailboxReject))
	require.ErrorIs(t, err, sched.ErrInvalidOption)
	require.Zero(t, refused.Inits(), "Init of a start refused for its option")
	require.Equal(t, "drop-oldest", sched.MailboxDropOldest.String())
}

// TestSendOrderFromOneGoroutine: the messages one goroutine outside the
// processes sends to a process, with Send, Tell, SendContext and
// TellContext in turn, arrive in the order sent: into an unbounded
// mailbox; into a bounded one that stays full, where SendContext and
// TellContext wait for room instead of meeting the policy (so under
// MailboxDropOldest none is dropped, and under MailboxReject none is
// refused); and there with Send and Tell among them, which meet the policy:
// every message that was accepted arrives, in order, and no other.
func TestSendOrderFromOneGoroutine(t *testing.T) {
	const n = 400
	sendWays := []func(s *sched.Scheduler, ctx context.Context, to relay.PID, m note) error{
		func(s *sched.Scheduler, _ context.Context, to relay.PID, m note) error {
			return s.Send(relay.Message{To: to, Data: m})
		},
		func(s *sched.Scheduler, _ context.Context, to relay.PID, m note) error { return s.Tell(to, m) },
		func(s *sched.Scheduler, ctx context.Context, to relay.PID, m note) error {
			return s.SendContext(ctx, relay.Message{To: to, Data: m})
		},
		func(s *sched.Scheduler, ctx context.Context, to relay.PID, m note) error {
			return s.TellContext(ctx, to, m)
		},
	}
	waiting := sendWays[2:] // the ways that wait for room
	for _, tc := range []struct {
		name     string
		opts     []sched.SubmitOption
		ways     []func(*sched.Scheduler, context.Context, relay.PID, note) error
		refusals error // what the sends refused return; nil: none is
	}{
		{name: "unbounded", ways: sendWays},
		{name: "full/reject/waiting", opts: []sched.SubmitOption{sched.Mailbox(2, sched.MailboxReject)}, ways: waiting},
		{name: "full/drop-oldest/waiting", opts: []sched.SubmitOption{sched.Mailbox(2, sched.MailboxDropOldest)}, ways: waiting},
		{name: "full/reject/all", opts: []sched.SubmitOption{sched.Mailbox(2, sched.MailboxReject)}, ways: sendWays, refusals: sched.ErrMailboxFull},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newScheduler(t)
			g, h := submitGated(t, s, tc.opts...)
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			type outcome struct {
				accepted []note
				errs     []error // the errors not in tc.refusals
			}
			sent := make(chan outcome, 1)
			go func() {
				var o outcome
				for i := range n {
					m := note{0, i}
					err := tc.ways[i%len(tc.ways)](s, ctx, h.PID(), m)
					if err == nil {
						o.accepted = append(o.accepted, m)
					} else if tc.refusals == nil || !errors.Is(err, tc.refusals) {
						o.errs = append(o.errs, fmt.Errorf("message %d: %w", i, err))
					}
				}
				sent <- o
			}()
			if len(tc.opts) > 0 {
				// The first step holds the mailbox full until the sender
				// waits for room.
				eventually(t, "a sender to wait for room", func() bool { return sched.SendersWaitForRoom(s, h.PID()) })
			}
			g.open()
			o := receive(t, sent, "the sender to finish")
			require.Empty(t, o.errs, "sends refused")
			accepted := o.accepted
			require.NoError(t, s.Terminate(h.PID()))
			_, err := waitEnd(t, s, h)
			require.NoError(t, err)
			require.Equal(t, accepted, g.received(), "the messages accepted, in the order sent")
			if tc.refusals == nil {
				require.Len(t, accepted, n)
				st := s.Stats().Messages
				require.Zero(t, st.Dropped, "messages dropped")
				require.Zero(t, st.Rejected, "messages rejected")
			}
		})
	}
}

// TestSendContextWithADoneContext: a done context bounds only the wait
// for room: SendContext and TellContext deliver to a mailbox that has
// room as Send does, whatever their context, and with a full one return
// the context's error at once, delivering nothing and applying no policy
// (under MailboxDropOldest nothing is dropped).
func TestSendContextWithADoneContext(t *testing.T) {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for _, policy := range []sched.MailboxPolicy{sched.MailboxReject, sched.MailboxDropOldest} {
		t.Run(policy.String(), func(t *testing.T) {
			s := newScheduler(t)
			g, h := submitGated(t, s, sched.Mailbox(2, policy))
			require.NoError(t, s.SendContext(done, relay.Message{To: h.PID(), Data: note{0, 0}}), "SendContext with room")
			require.NoError(t, s.TellContext(done, h.PID(), note{0, 1}), "TellContext with room")
			require.ErrorIs(t, s.SendContext(done, relay.Message{To: h.PID(), Data: note{0, 2}}), context.Canceled, "SendContext to the full mailbox")
			require.ErrorIs(t, s.TellContext(done, h.PID(), note{0, 3}), context.Canceled, "TellContext to the full mailbox")
			g.open()
			require.NoError(t, s.Terminate(h.PID()))
			_, err := waitEnd(t, s, h)
			require.NoError(t, err)
			require.Equal(t, []note{{0, 0}, {0, 1}}, g.received())
			st := s.Stats().Messages
			require.Equal(t, uint64(2), st.Accepted)
			require.Zero(t, st.Dropped+st.Rejected, "dropped and rejected")
		})
	}
}

// TestSendContextOnAWorkerDoesNotWait: code that runs on a worker (a
// Step, a handler) must not block, and a worker that waited for room
// could be the one that has to make it, so SendContext and TellContext
// called there to a full mailbox do not wait: they return an error
// wrapping ErrMailboxFull at once, having delivered nothing, whatever the
// mailbox's policy and the context. Work a handler gives to Call.Go runs
// on the blocking pool, whose goroutines are there to block: there they
// wait for room as any caller does. The contexts of the calls on the
// worker end after a second, so that a wait shows as their error rather
// than as a hung test.
func TestSendContextOnAWorkerDoesNotWait(t *testing.T) {
	const (
		cmdSend = cmdTest
		cmdGo   = cmdTest2
	)
	s := newScheduler(t, sched.WithWorkers(2))
	g, h := submitGated(t, s, sched.Mailbox(1, sched.MailboxDropOldest))
	require.NoError(t, s.Tell(h.PID(), note{0, 0}))
	full := h.PID()

	// sendBoth calls SendContext and TellContext to the full mailbox and
	// returns what each returned.
	sendBoth := func(seq int) []error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return []error{
			s.SendContext(ctx, relay.Message{To: full, Data: note{1, seq}}),
			s.TellContext(ctx, full, note{1, seq + 1}),
		}
	}
	onWorker := make(chan []error, 2)
	require.NoError(t, s.SetHandler(cmdSend, func(c sched.Call) error {
		onWorker <- sendBoth(2)
		return c.Complete(nil, nil)
	}))
	require.NoError(t, s.SetHandler(cmdGo, func(c sched.Call) error {
		return c.Go(func(context.Context) (any, error) {
			return nil, s.SendContext(context.Background(), relay.Message{To: full, Data: note{2, 0}})
		})
	}))
	sender := submit(t, s, stepFunc(func(evs []sched.Event, out *sched.StepOutput) error {
		if len(evs) == 0 {
			onWorker <- sendBoth(0)
			out.Yield(1, cmdSend, nil)
			return nil
		}
		out.Done(payload.Payload{})
		return nil
	}))
	for _, where := range []string{"in a step", "in a handler"} {
		errs := receive(t, onWorker, "the sends "+where)
		for i, name := range []string{"SendContext", "TellContext"} {
			require.ErrorIs(t, errs[i], sched.ErrMailboxFull, "%s %s", name, where)
			require.NotErrorIs(t, errs[i], context.DeadlineExceeded, "%s %s waited", name, where)
		}
	}
	_, err := waitEnd(t, s, sender)
	require.NoError(t, err)
	g.open()
	require.NoError(t, s.Terminate(h.PID()))
	_, err = waitEnd(t, s, h)
	require.NoError(t, err)
	require.Equal(t, []note{{0, 0}}, g.received(), "the sends on the worker delivered nothing")

	// On the blocking pool: it waits for room, and delivers. (A process
	// of its own: a refused send leaves the mark a waiting one leaves.)
	g, h = submitGated(t, s, sched.Mailbox(1, sched.MailboxDropOldest))
	require.NoError(t, s.Tell(h.PID(), note{0, 0}))
	full = h.PID()
	pooled := submit(t, s, stepFunc(func(evs []sched.Event, out *sched.StepOutput) error {
		if len(evs) == 0 {
			out.Yield(1, cmdGo, nil)
			return nil
		}
		out.Done(payload.Of(evs[0].Error))
		return nil
	}))
	eventually(t, "the pool's SendContext to wait for room", func() bool { return sched.SendersWaitForRoom(s, full) })
	g.open() // the process drains the first message: room
	res, err := waitEnd(t, s, pooled)
	require.NoError(t, err)
	require.Nil(t, res.Value(), "the pool's SendContext")
	require.NoError(t, s.Terminate(full))
	_, err = waitEnd(t, s, h)
	require.NoError(t, err)
	require.Equal(t, []note{{0, 0}, {2, 0}}, g.received(), "the pool's message was delivered")
}
