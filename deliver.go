package scheduler

import (
	"context"
	"errors"
	"fmt"

	"github.com/procsched/scheduler/relay"
)

// Delivery from every entry point. Messages (Send, Tell, SendContext,
// TellContext, a process's Tell), messages returned undelivered,
// completions (CompleteYield, and the completions made for one yield) and
// Terminate's cancel all take the same path: look the process up in the
// table, queue the event under the mailbox's rules (mailbox.go), and, if
// that woke a waiting process, queue the process (enqueue): on the
// worker's own queue for an operation made on a worker, on the global
// queue otherwise. Messages for other nodes go to the transport instead.

// enqueue queues a Ready process: on the worker's own queue for
// operations on a worker (locality), otherwise on the global queue,
// waking a parked worker. Called by whoever made p Ready (started it,
// or queued the event that woke it: see markRunnable), once each time;
// any goroutine, v says where it runs. It returns how many processes
// the push found ahead of p on the global queue (see globalq's Push for
// what it counts), or 0 if p went elsewhere.
func (s *Scheduler) enqueue(p *proc, v via) (ahead int) {
	switch {
	case v.w == nil:
	case !v.call:
		v.w.readyNext(p)
		return 0
	case v.w.handoff.offer(p):
		return 0
	}
	ahead = s.global.Push(p)
	s.wakeWorker()
	return ahead
}

// The scheduler routes messages to its processes by PID.
var _ relay.Receiver = (*Scheduler)(nil)

// Send delivers msg.Data to the process msg.To as an [EventMessage] whose
// From is msg.From; it implements [relay.Receiver]. The recipient sees the
// same event whichever way a message was sent (Send, [Scheduler.Tell],
// [StepOutput.Tell], or from another node): Data is the body, never the
// envelope. Messages from one goroutine to one process arrive in the order
// sent.
//
// A msg with Err set is a message returned undelivered (see
// [relay.Message]): it reaches msg.To as an EventMessage with that Error,
// outside any mailbox limit, and is counted in [MessageStats].Bounced (a
// returned [Request] completes its asking yield with the error instead).
// One whose sender has ended, or a request whose asker no longer waits,
// is a dead letter ([DeadBounce]) and Send returns why.
// A msg whose Data is a [Reply] to msg.To answers that request, as
// [Scheduler.Reply] does. Transports use both to hand in what comes from
// other nodes.
//
// A PID of another node goes to the transport set with [WithTransport];
// without one, or for an unknown or ended local process, Send returns an
// error wrapping [ErrProcessNotFound]. It returns [ErrClosed] after
// Shutdown, and the mailbox policy's error when the mailbox is full.
func (s *Scheduler) Send(msg relay.Message) error {
	if handled, err := s.sendNotMessage(msg); handled {
		return err
	}
	return s.deliver(msg.From, msg.To, msg.Data, via{})
}

// sendNotMessage carries out what Send and SendContext take in that is
// not a message for a mailbox: a message returned undelivered (Err set)
// goes back to its sender, and a Reply to its own recipient answers that
// recipient's request. It reports whether msg was one of those, and what
// came of it. Any goroutine outside the scheduler's own.
func (s *Scheduler) sendNotMessage(msg relay.Message) (bool, error) {
	if msg.Err != nil {
		return true, s.returned(msg, via{})
	}
	if r, ok := msg.Data.(Reply); ok && r.To.PID == msg.To {
		return true, s.reply(r.To, msg.From, r.Data, r.Err, via{})
	}
	return false, nil
}

// Tell delivers msg to the process to as an [EventMessage] whose Data is
// msg, with no sender: Send without an envelope. A pointer or small value
// passes without allocation.
func (s *Scheduler) Tell(to relay.PID, msg any) error {
	return s.deliver(relay.PID{}, to, msg, via{})
}

// deliver queues a message for to under its mailbox limit and wakes it.
// Any goroutine.
func (s *Scheduler) deliver(from, to relay.PID, msg any, v via) error {
	_, err := s.deliverMessage(from, to, msg, v, false)
	return err
}

// deliverOrWait is deliver for SendContext: when the mailbox is full it
// returns a channel to wait on for room instead of applying the policy.
// Any goroutine.
func (s *Scheduler) deliverOrWait(from, to relay.PID, msg any) (<-chan struct{}, error) {
	return s.deliverMessage(from, to, msg, via{}, true)
}

// deliverMessage queues msg for p under limit, waking p, or returns why not; wait makes a full mailbox hand back a channel to wait on. Any goroutine; v says where it runs.
func (s *Scheduler) deliverMessage(from, to relay.PID, msg any, v via, wait bool) (<-chan struct{}, error) {
	if s.phase.Load() == phaseStopped {
		return nil, ErrClosed
	}
	if to.Node != s.node && s.transport != nil {
		return nil, s.forward(relay.Message{From: from, To: to, Data: msg}, v)
	}
	p, err := s.lookup(to)
	if err != nil {
		return nil, err
	}
	woken, evicted, room, err := p.pushMessage(msg, from, s.limitOf(p), wait, to.ID)
	if err != nil {
		if room != nil {
			return room, err
		}
		return nil, s.refused(err, to, v)
	}
	if evicted != nil {
		s.count(v, cDropped)
		why := fmt.Errorf("%w: mailbox of %v was full", ErrDropped, to)
		if evicted.From.IsZero() {
			s.deadLetter(relay.Message{To: to, Data: evicted.data(), Err: why}, DeadDropped, v)
		} else {
			s.bounce(relay.Message{From: to, To: evicted.From, Data: evicted.data(), Err: why}, v)
		}
	}
	if w := v.worker(); w != nil {
		w.accepted(p, woken)
		return nil, nil
	}
	s.count(v, cAccepted)
	if woken != 0 {
		s.woke(p, woken, v)
	}
	return nil, nil
}

// accepted counts a message a process sent to p, just queued, and queues
// p if that woke it (woken is pushMessage's), on the worker's own
// counters and next slot: the hot path of messages between processes,
// small enough to be inlined there. Worker only.
func (w *worker) accepted(p *proc, woken uint64) {
	w.ctr.n[cAccepted]++ // a lazy counter (see count): plain memory
	if woken != 0 {
		w.wokeNext(p, woken)
	}
}

// cAccepted must stay a lazy counter for accepted's plain increment: the
// constant below would be negative, which does not compile, otherwise.
const _ = uint(cAccepted - numEager)

// wokeNext counts p as woken from the waiting state woken (pushMessage's
// result) by an event queued on this worker, and queues p on the
// worker's next slot. Worker only.
func (w *worker) wokeNext(p *proc, woken uint64) {
	w.countWoken(woken)
	w.readyNext(p)
}

// refused counts a message that was not queued and returns its error.
// Any goroutine.
func (s *Scheduler) refused(err error, to relay.PID, v via) error {
	switch {
	case errors.Is(err, ErrDropped):
		s.count(v, cDropped)
		return fmt.Errorf("%w: mailbox of %v is full", err, to)
	case errors.Is(err, ErrMailboxFull):
		s.count(v, cMsgRejected)
	}
	return fmt.Errorf("%w: %v", err, to)
}

// bounce returns an undelivered message to its sender msg.To, if it
// still lives (msg.From is the recipient not reached, msg.Err why): a
// local sender gets it as a bounce; a sender on another node gets it back
// through the transport; a returned request completes its asking yield. A
// bounce that reaches no process is a dead letter, even once the
// scheduler has stopped: a message evicted from a mailbox was accepted,
// so it is owed a fate, whenever a Shutdown ends. So is one for a sender
// on another node that no transport takes back (there is none, or it
// refuses the message): nobody else can be told. Bounces are outside
// any mailbox limit. Any goroutine.
func (s *Scheduler) bounce(msg relay.Message, v via) {
	if msg.To.Node != s.node {
		if s.transport == nil || s.forward(msg, v) != nil {
			s.deadLetter(msg, DeadBounce, v)
		}
		return
	}
	_ = s.sendBack(msg, v)
}

// returned is sendBack for a message handed back from outside the
// scheduler (Send with msg.Err set): after Shutdown has returned it is
// refused with ErrClosed, and stays its caller's. Any goroutine.
func (s *Scheduler) returned(msg relay.Message, v via) error {
	if s.phase.Load() == phaseStopped {
		return ErrClosed
	}
	return s.sendBack(msg, v)
}

// sendBack delivers a message that comes back undelivered (msg.Err set)
// to its sender msg.To: to a local process as a bounce, counted; to a
// process of another node, back through the transport; to a request's
// asking yield as its completion. A bounce that reaches no process is a
// dead letter; so is every local one once the scheduler has stopped,
// since its processes have all ended. Any goroutine.
func (s *Scheduler) sendBack(msg relay.Message, v via) error {
	if msg.To.Node != s.node && s.transport != nil {
		return s.forward(msg, v)
	}
	if ok, err := s.requestReturned(msg, v); ok {
		return err
	}
	p, err := s.lookup(msg.To)
	if err == nil {
		var woken uint64
		var ev Event
		ev.setMessage(msg.Data, msg.Err, msg.From)
		if woken, err = p.push(&ev, msg.To.ID); err == nil {
			s.count(v, cBounced)
			if woken != 0 {
				s.woke(p, woken, v)
			}
			return nil
		}
		err = fmt.Errorf("%w: %v", err, msg.To)
	}
	s.deadLetter(msg, DeadBounce, v)
	return err
}

// forward hands a message for another node to the transport and counts
// it. The transport's error is the sender's refusal. A message for ID 0,
// which names no process on any node (see relay.PID), the zero PID
// included, is refused with ErrProcessNotFound, as it would be here,
// and never leaves the node: its sender learns of it at once, rather
// than from a refusal that comes back later, if at all.
// Any goroutine.
func (s *Scheduler) forward(msg relay.Message, v via) error {
	if msg.To.ID == 0 {
		return &procError{err: ErrProcessNotFound, pid: msg.To}
	}
	if err := s.transport.Send(msg); err != nil {
		return err
	}
	s.count(v, cForwarded)
	return nil
}

// woke counts a process leaving the waiting state woken and queues it.
// Any goroutine; v says where it runs.
func (s *Scheduler) woke(p *proc, woken uint64, v via) {
	if woken == stBlocked {
		s.count(v, cBlockedOut)
	} else {
		s.count(v, cIdleOut)
	}
	s.enqueue(p, v)
}

// CompleteYield completes the yield with tag of process pid: the process
// gets an [EventYieldComplete] with data and err. Any goroutine, any time
// after the handler was called. It returns an error wrapping
// [ErrProcessNotFound] if the process has ended, [ErrYieldNotPending] if
// the yield was completed already (no second event is delivered), and
// [ErrClosed] after Shutdown.
func (s *Scheduler) CompleteYield(pid relay.PID, tag uint64, data any, err error) error {
	var ev Event
	ev.setCompletion(tag, data, err, relay.PID{})
	return s.complete(pid, &ev, 0, via{})
}

// complete delivers a completion event: of the yield seq if it is
// nonzero, else of the pending yield with tag ev.Tag (see proc.complete).
// Any goroutine.
func (s *Scheduler) complete(pid relay.PID, ev *Event, seq uint64, v via) error {
	if s.phase.Load() == phaseStopped {
		return ErrClosed
	}
	p, err := s.lookup(pid)
	if err != nil {
		return err
	}
	c, err := p.complete(ev, seq, nil, pid.ID)
	if err != nil {
		return &procError{err: err, pid: pid, tag: ev.Tag, tagged: true}
	}
	s.letGo(c)
	if c.woken != 0 {
		s.woke(p, c.woken, v)
	}
	return nil
}

// letGo releases what a yield that completed held: its watch on another
// process and its timer. Any goroutine, after proc.complete.
func (s *Scheduler) letGo(c completed) {
	if c.held != 0 {
		s.demonitor(c.held, c.seq)
	}
	if c.timed {
		s.timers.remove(c.seq)
	}
}

// Terminate asks process pid to finish: it gets an [EventCancel] whose
// Error is [ErrTerminated], and its context is cancelled with that cause.
// The process may still yield cleanup commands, which are served; it ends
// when it says so. A process gets one EventCancel at most: terminating
// twice, or a process that Shutdown has cancelled, is not an error and
// sends nothing more. A Terminate made while a step runs (the process's
// own included) reaches the next step; if that step was the last, the
// cancel counts as unread ([MessageStats].Unread).
//
// It returns an error wrapping [ErrProcessNotFound] if the process is not
// live: it has ended (from the return of its final step on, while its
// Close runs too), or it is not published yet (its Init, or the Start
// hook, is running; see [Process]); and [ErrClosed] once Shutdown has
// returned.
func (s *Scheduler) Terminate(pid relay.PID) error {
	if s.phase.Load() == phaseStopped {
		return ErrClosed
	}
	p, err := s.lookup(pid)
	if err != nil {
		return err
	}
	woken, err := p.terminate(pfTerminateCancel, pid.ID)
	if err != nil {
		return fmt.Errorf("%w: %v", err, pid)
	}
	if woken != 0 {
		s.woke(p, woken, via{})
	}
	return nil
}

// SendContext is [Scheduler.Send] that, when the recipient's mailbox is
// full, waits for room instead of applying the mailbox policy, until ctx
// is done; then it returns ctx's error, having delivered nothing. ctx
// bounds only that wait: a mailbox with room takes the message whatever
// ctx, and a full one refuses it at once if ctx is done. A message for
// another node is handed to the transport at once, as Send does: the
// transport never makes a sender wait. Nor do a message returned
// undelivered and a [Reply] to msg.To, which are handled as Send handles
// them.
//
// Called on one of the scheduler's own goroutines (in a Step, Close, a
// handler while it runs on its worker, a hook, or the Init of a child a
// step spawns), or by a process that a caller helping the scheduler runs
// (see [WithCallerHelp]), it does not wait: such code must not block, and
// the worker it holds may be the one that has to run the recipient (a
// process that sends to itself, or the only worker, would wait forever).
// A full mailbox then refuses the message at once with an error wrapping
// [ErrMailboxFull], whatever its policy and ctx, having delivered
// nothing. Work given to [Call.Go] runs on the blocking pool, whose
// goroutines are there to block, and waits as any other caller does.
func (s *Scheduler) SendContext(ctx context.Context, msg relay.Message) error {
	if ctx == nil {
		return fmt.Errorf("%w: SendContext", ErrNilContext)
	}
	if handled, err := s.sendNotMessage(msg); handled {
		return err
	}
	return s.deliverWait(ctx, msg.From, msg.To, msg.Data)
}

// TellContext is [Scheduler.Tell] that waits for room in a full mailbox
// until ctx is done, as [Scheduler.SendContext] does, and as it does not
// wait on the scheduler's own goroutines.
func (s *Scheduler) TellContext(ctx context.Context, to relay.PID, msg any) error {
	return s.deliverWait(ctx, relay.PID{}, to, msg)
}

// deliverWait delivers a message, waiting for room in a full mailbox
// unless the caller cannot wait (see cannotWait).
// Any goroutine.
func (s *Scheduler) deliverWait(ctx context.Context, from, to relay.PID, msg any) error {
	if ctx == nil {
		return fmt.Errorf("%w: SendContext or TellContext", ErrNilContext)
	}
	for {
		room, err := s.deliverOrWait(from, to, msg)
		if room == nil {
			return err
		}
		// Full. Asked only now, at a cost no send with room pays.
		if s.cannotWait() {
			return fmt.Errorf("%w: %v: SendContext and TellContext do not wait for room on the scheduler's own goroutines", ErrMailboxFull, to)
		}
		// Full: ctx bounds the wait, which a ctx done already ends at
		// once, even if room was made since.
		if err := ctx.Err(); err != nil {
			return err
		}
		select {
		case <-room:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
