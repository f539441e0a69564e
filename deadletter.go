package scheduler

import (
	"fmt"

	"github.com/procsched/scheduler/relay"
)

// Dead letters are messages that reach no process: nobody reads them and
// nobody can be told. Each is counted by reason in [Stats].DeadLetters and
// passed to [Hooks].DeadLetter, so that a service can log or inspect what
// its processes lost. A message refused at the sender (an error from Send
// or Tell, a bounce to a live process) is not a dead letter: its sender
// knows.

// DeadLetterReason says why a message reached no process.
type DeadLetterReason uint8

const (
	// DeadUnread: the recipient ended before reading it: it was still in
	// the mailbox, or after the point where the final step stopped
	// reading (StepOutput.DoneAfter). A request (see [Request]) whose
	// asker still waits for the answer is not one: the asker learns of
	// the end ([ErrNoReply]).
	DeadUnread DeadLetterReason = iota + 1
	// DeadBounce: it came back undelivered to a sender that has ended,
	// or to a sender on another node that it cannot reach (there is no
	// transport, or the transport refused it) (Message.Err says why it
	// was not delivered); or it was a request (see [Request]) and came
	// back to an asker that has ended or no longer waits for the answer.
	DeadBounce
	// DeadDropped: a full mailbox dropped it (MailboxDropOldest) and its
	// sender was outside any process, so nobody could get it back.
	DeadDropped
	// DeadLateReply: an answer to a request whose asker no longer waits
	// for it (timed out, cancelled, answered, or ended), or a process's
	// answer ([StepOutput.Reply]) to a ReplyTo that names no request.
	DeadLateReply
	deadReasons
)

// String returns the reason's name.
func (r DeadLetterReason) String() string {
	switch r {
	case DeadUnread:
		return "unread"
	case DeadBounce:
		return "bounce"
	case DeadDropped:
		return "dropped"
	case DeadLateReply:
		return "late reply"
	}
	return fmt.Sprintf("DeadLetterReason(%d)", uint8(r))
}

// DeadLetter is a message that reached no process, as [Hooks].DeadLetter
// gets it.
type DeadLetter struct {
	// Message is the message: From and To as it was sent (for a bounce,
	// as it came back: From the recipient not reached, To the sender that
	// has ended, Err why), Data its body.
	Message relay.Message
	Reason  DeadLetterReason
}

// DeadLetterStats counts dead letters by reason.
type DeadLetterStats struct {
	Unread      uint64 `json:"unread"`      // messages left unread when their recipient ended
	Bounces     uint64 `json:"bounces"`     // bounces whose sender had ended or could not be reached, and returned requests nobody waited for
	Dropped     uint64 `json:"dropped"`     // dropped by a full mailbox, from senders outside any process
	LateReplies uint64 `json:"lateReplies"` // answers nobody waited for any more, or that a process gave to no request
}

// deadLetter counts msg as a dead letter for reason and passes it to the
// hook. Any goroutine; v says where it runs (the hook runs there). On a
// worker, the hook's runtime.Goexit ends the process whose step's yields
// the worker was carrying out, if any (see worker.runCut); elsewhere it
// ends the caller's goroutine, as Goexit means, and leaves nothing of
// the scheduler's undone: every caller reports a dead letter with no
// lock held and nothing left to do for the message.
func (s *Scheduler) deadLetter(msg relay.Message, reason DeadLetterReason, v via) {
	s.count(v, deadCounter(reason))
	if s.hooks.DeadLetter != nil {
		d := DeadLetter{Message: msg, Reason: reason}
		if w := v.worker(); w != nil {
			s.callDeadLetter(d, w.runCut)
			return
		}
		s.hooks.DeadLetter(d)
	}
}

// callDeadLetter passes d to the DeadLetter hook, which is set. cut is
// what the caller does next, up to the end of the process whose end
// left d unread: the hook runs in the middle of that end, and a
// runtime.Goexit of the hook, which cannot be stopped, would leave it
// undone. Such a Goexit counts as the hook's return: cut runs, and then
// the goroutine ends, which the worker and the stopper each survive by
// going on on a new one. A panic of the hook goes on (see onGoexit).
// Any goroutine.
func (s *Scheduler) callDeadLetter(d DeadLetter, cut func()) {
	onGoexit(func() { s.hooks.DeadLetter(d) }, cut)
}

// deadUnread reports the messages among events, left unread by the
// process to, whose record is p, that ended, as dead letters; but for a
// request whose asker is told of that end (see proc.toldOfEnd). cut is
// what the caller does next, up to the end of p: should the DeadLetter
// hook call runtime.Goexit, the rest of events are reported all the same
// and then cut runs (see callDeadLetter). Any goroutine, without p.mu.
func (s *Scheduler) deadUnread(p *proc, to relay.PID, events []Event, v via, cut func()) {
	for i := range events {
		ev := &events[i]
		if ev.Type != EventMessage {
			continue
		}
		if req, ok := ev.Data.(Request); ok && p.toldOfEnd(req.ReplyTo, s.node) {
			continue
		}
		s.count(v, deadCounter(DeadUnread))
		if s.hooks.DeadLetter != nil {
			d := DeadLetter{Message: relay.Message{From: ev.From, To: to, Data: ev.data(), Err: ev.Error}, Reason: DeadUnread}
			s.callDeadLetter(d, func() {
				s.deadUnread(p, to, events[i+1:], v, cut)
				cut()
			})
		}
	}
}

// toldOfEnd reports whether the asking yield to watches p, as a request
// does its replier (see worker.request): the end of p, unless the yield
// completes first, completes it with ErrNoReply (see notifyEnd), so the
// asker learns that its request went unanswered, and the request left
// unread is no dead letter, as one that comes back undelivered to an
// asker that waits is none (see requestReturned). node is p's node.
// Any goroutine, without p.mu.
func (p *proc) toldOfEnd(to ReplyTo, node uint32) bool {
	if to.PID.Node != node || to.Seq == 0 {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	x := p.live()
	if x == nil || x.monitors == nil {
		return false
	}
	watcher, ok := x.monitors.get(to.Seq)
	return ok && watcher == to.PID.ID|monitorRequest
}
