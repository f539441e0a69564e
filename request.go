package scheduler

import (
	"fmt"

	"github.com/procsched/scheduler/relay"
)

// Request and reply: a process asks another and gets the answer as the
// completion of one yield. The request travels as an ordinary message
// whose Data is a [Request]; the replier answers with the request's
// ReplyTo, which names the asking yield, so no goroutine and no
// correlation table is needed. The asking yield also watches the replier
// (as a monitor does), so it learns that the replier ended without
// answering ([ErrNoReply]) instead of waiting for a timeout; the reply,
// the failure, a timeout or a cancel each remove that watch. The watch is
// kept on the replier's record, so a replier on another node is not
// watched, and a request to one is bounded by its Timeout alone.

// ReplyTo names the yield that waits for the answer to a request: the
// asking process and the sequence number of its yield. It is a small
// value; a replier keeps it until it answers, with [StepOutput.Reply] or
// [Scheduler.Reply]. Its fields are exported for transports, which carry
// it to other nodes.
type ReplyTo struct {
	PID relay.PID // the asking process
	Seq uint64    // its yield's sequence number
}

// Request is the Data of the message a request delivers: the body the
// asker sent, and where the answer goes.
type Request struct {
	ReplyTo ReplyTo
	Body    any
}

// Reply is the Data of a message that carries an answer to a process on
// another node: a transport that sees one completes the asking yield
// there with [Scheduler.Reply]. Within a node, replies never travel as
// messages.
type Reply struct {
	To   ReplyTo
	Data any
	Err  error
}

// Reply answers the request whose ReplyTo is to, from code outside any
// process (a handler's goroutine, say; a process answers with
// [StepOutput.Reply]): the asking yield completes with data and err. Any
// goroutine. It returns an error wrapping [ErrYieldNotPending] if the
// asker no longer waits (it timed out, cancelled, or was answered
// already), [ErrProcessNotFound] if it has ended, and [ErrClosed] after
// Shutdown; such an answer is also a dead letter ([DeadLateReply]). The
// zero ReplyTo, which names no request, is refused with an error
// wrapping [ErrYieldNotPending] and is no dead letter. An answer for a
// process on another node goes to the transport (whose refusal is the
// error), until Shutdown has returned: from then on it too is refused
// with ErrClosed, as a dead letter.
func (s *Scheduler) Reply(to ReplyTo, data any, err error) error {
	return s.reply(to, relay.PID{}, data, err, via{})
}

// reply completes the asking yield named by to, with From set to from.
// A ReplyTo without the yield's number names no request: a caller of
// Scheduler.Reply or Send gets the error, but a step's Reply (on a
// worker, v.w, and not through a Call) has nobody to tell, so its answer
// is a dead letter, as one that comes too late is.
// Any goroutine.
func (s *Scheduler) reply(to ReplyTo, from relay.PID, data any, err error, v via) error {
	if to.Seq == 0 {
		if v.worker() != nil {
			s.deadLetter(relay.Message{From: from, To: to.PID, Data: data, Err: err}, DeadLateReply, v)
		}
		return fmt.Errorf("%w: the zero ReplyTo", ErrYieldNotPending)
	}
	// Once the scheduler has stopped, an answer for another node is
	// refused as a local one is, below: ErrClosed, and a dead letter.
	if to.PID.Node != s.node && s.transport != nil && s.phase.Load() != phaseStopped {
		return s.forward(relay.Message{From: from, To: to.PID, Data: Reply{To: to, Data: data, Err: err}}, v)
	}
	var ev Event
	ev.setCompletion(0, data, err, from)
	e := s.complete(to.PID, &ev, to.Seq, v)
	if e != nil {
		s.deadLetter(relay.Message{From: from, To: to.PID, Data: data, Err: err}, DeadLateReply, v)
	}
	return e
}

// request is the built-in Request yield seq of p: watch the replier, then
// send the request. Worker only, with p Running.
func (w *worker) request(p *proc, seq uint64, to relay.PID, body any) {
	// A request to itself needs no watch: the asker cannot outlive it.
	watched := to == p.pid() || w.watch(p, seq, to, true)
	if !watched && to.Node == w.s.node {
		w.completeNowFrom(p, seq, to, nil, fmt.Errorf("%w: %v", ErrProcessNotFound, to))
		return
	}
	w.count(cSent)
	req := Request{ReplyTo: ReplyTo{PID: p.pid(), Seq: seq}, Body: body}
	if err := w.s.deliver(p.pid(), to, req, via{w: w}); err != nil {
		w.completeNowFrom(p, seq, to, nil, err) // removes the watch
	}
}

// requestReturned handles a request message that came back undelivered
// (from a transport, or evicted from a full mailbox): the asking yield
// completes with the error instead of the asker getting a bounce. If the
// asker has ended or waits no more, the request is a dead letter, as a
// bounce to an ended sender is, and err says why. It reports false if
// msg is not a request of a local process.
// Any goroutine; v says where it runs.
func (s *Scheduler) requestReturned(msg relay.Message, v via) (handled bool, err error) {
	req, ok := msg.Data.(Request)
	if !ok || req.ReplyTo.PID != msg.To || msg.To.Node != s.node {
		return false, nil
	}
	if err := s.complete(msg.To, &Event{Type: EventYieldComplete, Error: msg.Err, From: msg.From}, req.ReplyTo.Seq, v); err != nil {
		s.deadLetter(msg, DeadBounce, v)
		return true, err
	}
	return true, nil
}
