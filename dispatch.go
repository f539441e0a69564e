package scheduler

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// Handler carries out a user command. It runs on the worker right after
// the Step that yielded the command and must not block: it either
// completes the yield at once with [Call.Complete], or hands the work (and
// [Call.Completion], a small value) to another goroutine that completes
// it later. A returned error, or a panic, completes the yield with that
// error if it is still pending; after a completion it is ignored.
type Handler func(call Call) error

// Call describes one yield being handled. It is a value: a handler may
// keep it, and the goroutines it starts may use it, for as long as they
// like. The zero Call belongs to no process: its methods return
// [ErrProcessNotFound] and its Context is context.Background().
type Call struct {
	PID relay.PID // the process that yielded
	Tag uint64    // the yield's tag
	Cmd CommandID // the command
	Arg any       // the yield's argument

	s   *Scheduler
	ctx *proc
	w   *worker
	seq uint64 // names the yield (see worker.register)
}

// Context returns the context for the work of this call. It carries the
// yielding process's values ([Self] included) and is done once the yield
// is no longer pending (it was completed) or the process has ended
// (context.Cause is then [ErrEnded], or [ErrForced] at a shutdown
// deadline), so a goroutine working for the call can stop. It is not
// done when the process is merely asked to stop (Terminate, or the cancel
// Shutdown sends): cleanup work a process yields on its cancel gets a
// context that lives until the work is done or the shutdown deadline
// passes. A yield the process cancels ([StepOutput.Cancel]) ends it with
// cause [ErrYieldCancelled]. Its Deadline is the one the process gave
// the yield ([StepOutput.Timeout]), while the yield is pending: a later
// Timeout replaces it, and once the yield is no longer pending, a
// deadline that passed included, Deadline reports none. For the zero
// Call it is context.Background(). Making it costs an allocation, and
// asking it for Done a channel. While the yield is pending, every call
// of Context for it returns the same context, the one the yield's end
// makes done; a call made once the yield is no longer pending returns a
// new context, done already, whose cause is context.Canceled whatever
// ended the yield ([ErrEnded] or [ErrForced] once the process has
// ended).
func (c Call) Context() context.Context {
	if c.ctx == nil {
		return context.Background()
	}
	return newCallContext(c.ctx, c.seq, c.s.timers)
}

// Complete completes the yield with data and err; see
// [Scheduler.CompleteYield]. Called during the handler, the process is
// stepped again on the same worker.
func (c Call) Complete(data any, err error) error {
	if c.s == nil {
		return ErrProcessNotFound
	}
	var ev Event
	ev.setCompletion(c.Tag, data, err, relay.PID{})
	return c.s.complete(c.PID, &ev, c.seq, via{w: c.w, call: true})
}

// Completion returns the yield's completion value, for handing to the
// goroutine that will complete it.
func (c Call) Completion() Completion { return Completion{s: c.s, pid: c.PID, tag: c.Tag, seq: c.seq} }

// Tell sends msg to the process to from the yielding process, as
// [StepOutput.Tell] does but with the outcome returned. Called during the
// handler, a recipient that becomes runnable is queued on the handler's
// worker.
func (c Call) Tell(to relay.PID, msg any) error {
	if c.s == nil {
		return ErrProcessNotFound
	}
	return c.s.deliver(c.PID, to, msg, via{w: c.w, call: true})
}

// Submit starts a process as [Scheduler.Submit] does. Called during the
// handler, the new process is queued on the handler's worker. The new
// process's context takes its values from ctx if it has any, else from
// the yielding process's context.
func (c Call) Submit(ctx context.Context, p Process, method string, input payload.Payloads, opts ...SubmitOption) (Handle, error) {
	if c.s == nil {
		return Handle{}, ErrProcessNotFound
	}
	pr, _, err := c.s.submit(ctx, c.ctx.values(), p, method, input, opts, via{w: c.w, call: true}, true)
	return Handle{p: pr}, err // pr is nil on error: the zero Handle
}

// Completion completes one yield from any goroutine, once. It names that
// one yield, not just its tag: once the yield has completed (or its
// process has ended), Complete fails even if the process has since
// yielded another command with the same tag. The zero Completion
// completes nothing and returns [ErrProcessNotFound].
type Completion struct {
	s   *Scheduler
	pid relay.PID
	tag uint64
	seq uint64 // names the yield (see worker.register)
}

// PID returns the process that yielded.
func (c Completion) PID() relay.PID { return c.pid }

// Tag returns the yield's tag.
func (c Completion) Tag() uint64 { return c.tag }

// Complete completes the yield with data and err. It returns an error
// wrapping [ErrYieldNotPending] if this yield was completed already (no
// second event is delivered), even when a newer yield of the process has
// the same tag; see [Scheduler.CompleteYield] for the other errors.
func (c Completion) Complete(data any, err error) error {
	return c.CompleteFrom(relay.PID{}, data, err)
}

// CompleteFrom is Complete with the event's From set to from: the process
// the completion is about, as a spawn-await names its child and a monitor
// the watched process. Transports use it to complete such yields for
// processes on other nodes.
func (c Completion) CompleteFrom(from relay.PID, data any, err error) error {
	if c.s == nil {
		return ErrProcessNotFound
	}
	var ev Event
	ev.setCompletion(c.tag, data, err, from)
	return c.s.complete(c.pid, &ev, c.seq, via{})
}

// SetHandler registers h for command cmd, replacing any previous handler.
// cmd must be from [FirstUserCommand] to 65536 and h non-nil, else the
// error wraps [ErrInvalidCommand]; a command claimed with
// [Scheduler.ClaimHandler] is refused with an error wrapping
// [ErrCommandTaken]; after Shutdown it returns [ErrClosed].
// Registration is safe at any time; lookups on the hot path take no lock.
func (s *Scheduler) SetHandler(cmd CommandID, h Handler) error {
	return s.register(cmd, h, false)
}

// ClaimHandler registers h for command cmd for good, for a library that
// installs the handler of a command its users yield (a transport's
// spawn command, say), so that no other registration replaces it
// unnoticed: it fails with an error wrapping [ErrCommandTaken] if cmd
// has a handler already, from [WithHandler], SetHandler or an earlier
// claim, and once it has succeeded, SetHandler and ClaimHandler refuse
// cmd the same way. Otherwise it is SetHandler: the same range of
// commands, the same errors.
func (s *Scheduler) ClaimHandler(cmd CommandID, h Handler) error {
	return s.register(cmd, h, true)
}

// register is SetHandler, or ClaimHandler if claim is set.
func (s *Scheduler) register(cmd CommandID, h Handler, claim bool) error {
	if err := checkHandler(cmd, h); err != nil {
		return err
	}
	if s.phase.Load() == phaseStopped {
		return ErrClosed
	}
	s.handlersMu.Lock()
	defer s.handlersMu.Unlock()
	old := *s.handlers.Load()
	switch {
	case s.claimed[cmd]:
		return fmt.Errorf("%w: command %d is claimed", ErrCommandTaken, cmd)
	case claim && int(cmd) < len(old) && old[cmd] != nil:
		return fmt.Errorf("%w: command %d has a handler already", ErrCommandTaken, cmd)
	}
	hs := setHandler(append([]Handler(nil), old...), cmd, h)
	s.handlers.Store(&hs)
	if claim {
		if s.claimed == nil {
			s.claimed = map[CommandID]bool{}
		}
		s.claimed[cmd] = true
	}
	return nil
}

// checkHandler reports why h may not be the handler of cmd, or nil. Any goroutine.
func checkHandler(cmd CommandID, h Handler) error {
	if cmd < FirstUserCommand {
		return fmt.Errorf("%w: command %d is reserved (user commands start at %d)", ErrInvalidCommand, cmd, FirstUserCommand)
	}
	if cmd > maxCommand {
		return fmt.Errorf("%w: command %d is above the maximum %d", ErrInvalidCommand, cmd, maxCommand)
	}
	if h == nil {
		return fmt.Errorf("%w: nil handler for command %d", ErrInvalidCommand, cmd)
	}
	return nil
}

// maxCommand bounds command IDs so the handler table stays a small slice.
const maxCommand = 1 << 16

// setHandler returns hs with h as the handler of cmd, grown as needed; hs is a copy the caller owns. Called by New, and by SetHandler with handlersMu held.
func setHandler(hs []Handler, cmd CommandID, h Handler) []Handler {
	for CommandID(len(hs)) <= cmd {
		hs = append(hs, nil)
	}
	hs[cmd] = h
	return hs
}

// dispatch carries out the yields of the step that just ran for p, in
// order; waits says that p waits after the step (it neither continues
// nor ends, and the step did not fail), so that its last Tell may hand
// the receiver to this worker (see tell). Called by stepped, only for a
// step that wrote yields. Worker only, with p Running.
func (w *worker) dispatch(p *proc, waits bool) {
	ys := w.out.yields
	w.countN(cYields, uint64(len(ys)))
	if len(ys) > 1 {
		if w.oneSpawnBatch(ys) {
			// A step that only spawns, as an inner node of a fork-join
			// tree does: all in one batch, without the loop's look at each.
			w.spawnBatch(p, ys)
			return
		}
		p.reservePending(len(ys), &w.pend)
	}
	for i := 0; i < len(ys); i++ {
		y := &ys[i]
		switch y.kind {
		case yieldTell:
			w.tell(p, y.to, y.arg, waits && i == len(ys)-1)
		case yieldSpawn, yieldSpawnAwait:
			if n := spawnRun(ys[i:]); n > 1 && w.s.maxProcs == 0 {
				w.spawnBatch(p, ys[i:i+n])
				i += n - 1
				continue
			}
			child, _ := y.arg.(Process)
			w.spawn(p, y, child)
		case yieldTimer:
			if seq := w.register(p, y, w.newSeq()); seq != 0 {
				switch {
				case y.deadline == 0:
					w.arm(p, seq, y.when, false, 0)
				case y.deadline <= w.s.timers.now():
					// Passed already, as registerWithin finds it for
					// the other yields: the Sleep completes with
					// ErrTimeout at once, whatever its own time.
					w.expire(p, seq)
				case y.deadline < y.when:
					w.arm(p, seq, y.deadline, true, y.when) // the deadline comes first
				default:
					w.arm(p, seq, y.when, false, 0)
				}
			}
		case yieldTellName:
			if to, err := w.s.Lookup(y.method); err != nil {
				w.count(cSent)
				w.count(cBounced)
				var ev Event
				ev.setMessage(y.arg, err, relay.PID{})
				_, _ = p.push(&ev, p.id.Load())
			} else {
				w.tell(p, to, y.arg, false)
			}
		case yieldMonitor:
			if seq := w.registerWithin(p, y, w.newSeq()); seq != 0 {
				w.monitor(p, y.tag, seq, y.to)
			}
		case yieldRequest, yieldRequestName:
			if seq := w.registerWithin(p, y, w.newSeq()); seq != 0 {
				to := y.to
				if y.kind == yieldRequestName {
					var err error
					if to, err = w.s.Lookup(y.method); err != nil {
						w.completeNow(p, seq, nil, err)
						continue
					}
				}
				w.request(p, seq, to, y.arg)
			}
		case yieldCancel:
			w.cancelYield(p, y.tag)
		case yieldTimeout:
			w.addArmed(p)
			w.timeout(p, y.tag, y.deadline)
		case yieldReply:
			_ = w.s.reply(ReplyTo{PID: y.to, Seq: uint64(y.when)}, p.pid(), y.arg, y.err, via{w: w})
		default:
			w.dispatchGeneric(p, y)
		}
	}
	w.addArmed(p)
}

// dispatchGeneric carries out a yield written with StepOutput.Yield: a
// user command, run by its handler. Worker only, with p Running.
func (w *worker) dispatchGeneric(p *proc, y *yield) {
	seq := w.registerWithin(p, y, w.newSeq())
	if seq == 0 {
		return
	}
	if y.cmd < FirstUserCommand {
		w.completeNow(p, seq, nil, fmt.Errorf("%w: command %d is reserved (user commands start at %d)", ErrInvalidCommand, y.cmd, FirstUserCommand))
		return
	}
	w.addArmed(p) // the handler runs with its deadline in place (see Call.Context)
	w.callHandler(p, y, seq)
}

// register records y, a yield of p, as outstanding under seq, the
// sequence number that names it from now on (newSeq's, or a child's: see
// childSeq), and returns seq; a yield whose tag is already outstanding
// completes at once with ErrDuplicateTag, and register returns 0. The
// outstanding one is left as it is, but for the deadline the step gave
// the refused yield (StepOutput.Timeout), which goes to it: the step's
// Timeout of that tag can only mean the yield that is pending. A timer
// comes after, with arm. Worker only, with p Running.
func (w *worker) register(p *proc, y *yield, seq uint64) uint64 {
	if p.addPending(y.tag, seq, &w.pend) {
		return seq
	}
	// p is Running: the push flags it and never asks for a queue.
	_, _ = p.push(&Event{Type: EventYieldComplete, Tag: y.tag, Error: fmt.Errorf("%w: %d", ErrDuplicateTag, y.tag)}, p.id.Load())
	if y.deadline != 0 {
		w.addArmed(p) // timeout finds the timers of the step's earlier yields
		w.timeout(p, y.tag, y.deadline)
	}
	return 0
}

// registerWithin registers y as register does and, if the step gave it a
// deadline (StepOutput.Timeout), starts its deadline before the yield's
// work starts, so that a handler's call context knows it. It returns 0 if
// the yield is not to be carried out: a duplicate tag, or a deadline
// already past (the yield then completed with ErrTimeout). Worker only,
// with p Running.
func (w *worker) registerWithin(p *proc, y *yield, seq uint64) uint64 {
	seq = w.register(p, y, seq)
	if seq == 0 || y.deadline == 0 {
		return seq
	}
	if y.deadline <= w.s.timers.now() {
		w.expire(p, seq)
		return 0
	}
	w.arm(p, seq, y.deadline, true, 0)
	return seq
}

// arm gives p's pending yield seq a timer at when, a deadline (which
// completes it with ErrTimeout) or else a Sleep's end, with behind the
// own time of a Sleep whose deadline comes first (0: none; see
// timerShard.behind), and marks the
// yield timed, so that whatever completes, cancels or releases it
// removes the timer. The timer first, then the mark: a completion
// before the mark finds no mark and leaves the timer (whether it came
// before the timer or after), and the mark, failing, removes it. Marked
// first, a completion between the mark and the timer (CompleteYield by
// tag, from any goroutine) would look for the timer before it was there
// and leave it behind.
//
// The timers a step sets wait in w.arms, and addArmed adds them (and
// then marks them) together, in one hold of their shard's lock, at the
// end of dispatch, or before a yield that needs them in place: a Timeout
// (it replaces a timer, which must be there to be found) and a call
// handed to a handler or a transport (its context reads its deadline). A
// Cancel needs none: it finds its yield unmarked and leaves the timer to
// the failing mark. A worker that fires the shard finds all of the
// step's timers or none, and takes those set for one instant in one
// batch, in the order set. Added one by one, timers already due as they
// were added (a step that ran after their time) could be fired one by
// one by other workers and complete out of that order. Worker only,
// with p Running, during dispatch.
func (w *worker) arm(p *proc, seq uint64, when int64, deadline bool, behind int64) {
	p.inbox.wbits |= wbTimed
	w.arms = append(w.arms, armed{seq: seq, when: when, behind: behind, deadline: deadline})
}

// armed is a timer that arm holds back for addArmed: that of yield seq
// at when, a deadline or a Sleep's end, with behind as in arm.
type armed struct {
	seq          uint64
	when, behind int64
	deadline     bool
	gone         bool // the yield was no longer pending when marked
}

// addArmed adds the timers held in w.arms, all of p's, to their shards
// together, then marks their yields timed (in one hold of p's lock), and
// removes a timer whose yield is gone: see arm. Worker only, with p
// Running.
func (w *worker) addArmed(p *proc) {
	as := w.arms
	if len(as) == 0 {
		return
	}
	ts := w.s.timers
	ts.add(w, p.id.Load(), as)
	p.mu.Lock()
	x := p.live()
	for i := range as {
		as[i].gone = !p.pending.markTimed(as[i].seq, x)
	}
	p.mu.Unlock()
	for i := range as {
		if as[i].gone {
			ts.remove(as[i].seq)
		}
	}
	w.arms = as[:0]
}

// expire completes p's pending yield seq with ErrTimeout: its deadline
// has passed. Worker only, with p Running.
func (w *worker) expire(p *proc, seq uint64) {
	if c, err := p.complete(&Event{Type: EventYieldComplete, Error: ErrTimeout}, seq, ErrTimeout, p.id.Load()); err == nil {
		w.s.letGo(c)
	}
}

// timeout gives p's pending yield with tag, from an earlier step, the
// deadline when (see StepOutput.Timeout): a deadline it has already is
// replaced, a Sleep keeps its own time if that comes first. A Sleep has
// one timer, for whichever of its own time and its deadline comes
// first; while that is the deadline, the Sleep's own time is kept with
// it (timerShard.behind), so that a later deadline past it gives the
// Sleep its timer back. Worker only, with p Running.
func (w *worker) timeout(p *proc, tag uint64, when int64) {
	p.mu.Lock()
	seq, ok := p.pending.lookupTag(tag, p.live())
	p.mu.Unlock()
	if !ok {
		return
	}
	ts := w.s.timers
	behind := int64(0) // the own time of a Sleep, if its deadline is to come first
	if seq&seqTimed != 0 {
		seq &^= seqTimed
		old, sleep, deadline, ok := ts.lookup(seq)
		switch {
		case ok && !deadline && old <= when:
			return // a Sleep that ends first
		case ok && !deadline:
			behind = old // a Sleep that the deadline is to come before
		case ok:
			behind = sleep // a deadline, with the Sleep's own time, if any
		}
		// A timed yield keeps its timer in its shard until the timer
		// fires or the yield completes (see arm): one that is gone has
		// fired, or the yield is completing, and a deadline set now
		// would outlive it.
		if !ts.remove(seq) {
			return
		}
		if behind != 0 && behind <= when {
			// The Sleep's own time comes first again: its timer is its
			// own time, with no deadline.
			w.arm(p, seq, behind, false, 0)
			return
		}
	}
	if when <= ts.now() {
		w.expire(p, seq)
		return
	}
	w.arm(p, seq, when, true, behind)
}

// newSeq returns a yield sequence number that no other yield of this
// scheduler ever gets: each worker counts in steps of the number of
// workers from its own offset, so the workers never meet, and none is 0.
// The helper through which callers help (see help.go) counts the same
// way from helperSeqBase, above 2^61, which the workers' counts never
// reach. The counts stay below seqChild (2^62 yields would take a worker
// centuries), so they never meet a child's either (see childSeq).
// Owner only.
func (w *worker) newSeq() uint64 {
	seq := w.seq
	w.seq += uint64(len(w.s.workers))
	return seq
}

// seqChild marks the sequence number of a SpawnAwait yield, which is the
// child's ID with this bit set (childSeq). IDs are never reused and stay
// below it (see maxGen), and newSeq's numbers never reach it, so the
// number is as unique as newSeq's; and the child knows it without storing
// it, which keeps an awaited child's record a size class smaller.
const seqChild = uint64(1) << 62

// childSeq returns the sequence number of the SpawnAwait yield that
// waits for the child with ID id. Any goroutine.
func childSeq(id uint64) uint64 { return id | seqChild }

// completeNow completes p's pending yield seq from the worker. p is
// Running, so the push flags it for another step and never asks for a
// queue; it fails only if the yield is no longer pending (a handler that
// completed and then returned an error), which is ignored by design.
// Worker only, with p Running.
func (w *worker) completeNow(p *proc, seq uint64, data any, err error) {
	w.completeNowFrom(p, seq, relay.PID{}, data, err)
}

// completeNowFrom is completeNow with the event's From set. Worker only,
// with p Running.
func (w *worker) completeNowFrom(p *proc, seq uint64, from relay.PID, data any, err error) {
	var ev Event
	ev.setCompletion(0, data, err, from)
	if c, e := p.complete(&ev, seq, nil, p.id.Load()); e == nil {
		w.s.letGo(c)
	}
}

// cancelYield cancels p's pending yield with tag, if there is one, and
// drops a queued completion with that tag (see StepOutput.Cancel). Worker
// only, with p Running.
func (w *worker) cancelYield(p *proc, tag uint64) {
	p.mu.Lock()
	x := p.live()
	seq, ok := p.pending.removeTag(tag, x)
	timed := seq&seqTimed != 0
	seq &^= seqTimed
	// A completion that arrived before the cancel and is still queued is
	// dropped too, so that no completion with this tag is read after the
	// step that cancelled it.
	in := p.inbox.events()
	for i := 0; i < len(in); i++ {
		if ev := &in[i]; ev.Type == EventYieldComplete && ev.Tag == tag {
			last := len(in) - 1
			copy(in[i:], in[i+1:])
			in[last] = Event{}
			in = in[:last]
			p.inbox.n--
			i--
			ok = true
		}
	}
	var held uint64
	if ok && seq != 0 {
		p.notePending(x)
		if x != nil {
			if x.calls != nil {
				x.endCall(seq, ErrYieldCancelled)
			}
			held = x.unholdMonitor(seq)
		}
	}
	p.mu.Unlock()
	if !ok {
		return
	}
	w.count(cCancelled)
	if timed {
		w.s.timers.remove(seq)
	}
	if held != 0 {
		w.s.demonitor(held, seq)
	}
}

// tell is the built-in send; an undeliverable message bounces back to p.
// Worker only, with p Running.
//
// A message to a live process of this node, while no mailbox anywhere
// has a limit, goes straight into the receiver's mailbox: this is
// deliver's work for that case without the checks and results that only
// the others need, and it is most of what a Tell costs. Anything else,
// including a receiver found closed, takes the full path, which does it
// again from the start and gives the error; the short path queued
// nothing, so the message is neither lost nor doubled. With claim (the
// last yield of a step after which p waits), the short path first tries
// to claim a waiting receiver for this worker's next run, as
// completeAwaited claims a parent, when the worker would take a process
// from its next slot at its next tick anyway (see mayRunDirect), and
// hands it the message.
func (w *worker) tell(p *proc, to relay.PID, msg any, claim bool) {
	w.count(cSent)
	s := w.s
	if to.Node == s.node && !s.limits.Load() && s.phase.Load() != phaseStopped {
		if r := s.table.lookup(to.ID); r != nil {
			if claim && w.direct == nil && w.mayRunDirect() {
				run := w.nextRunWord()
				woken, claimed, gaveBack := r.claimWaiting(to.ID, run)
				if claimed {
					// Its batch holds the message: it skips the mailbox
					// and lock, and the receiver the trip through the next
					// slot and the claim and drain of its run.
					w.directEvs = append(w.directEvs, Event{})
					ev := &w.directEvs[len(w.directEvs)-1]
					ev.Type, ev.From = EventMessage, p.pid()
					ev.setData(msg)
					w.ctr.n[cAccepted]++
					w.runCount++
					w.direct, w.directRun = r, run
					// It runs next: no child of its goes first, and it is
					// never put aside (see siblingFirst), so directMark and
					// directSince are left as they are.
					w.directDefers = maxDirectDefers
					w.tellClaimed = true
					w.countWoken(woken)
					return
				}
				if gaveBack {
					w.gaveBack(r, woken)
				}
			}
			if woken, ok := r.pushUnlimited(msg, p.pid(), to.ID); ok {
				w.accepted(r, woken)
				return
			}
		}
	}
	if err := s.deliver(p.pid(), to, msg, via{w: w}); err != nil {
		w.count(cBounced)
		var ev Event
		ev.setMessage(msg, err, to)
		_, _ = p.push(&ev, p.id.Load())
	}
}

// gaveBack settles r, a record claimed by mistake for the receiver of a
// Tell and given back (see claimWaiting): another process, now in it,
// is queued as its waker would have queued it if an event reached it
// meanwhile (woken is then the state it left), and forced if a shutdown
// deadline's walk passed it while it was claimed. Worker only.
func (w *worker) gaveBack(r *proc, woken uint64) {
	if woken != 0 {
		w.wokeNext(r, woken)
	}
	if w.s.forcing() {
		w.s.tryForce(r)
	}
}

// spawn is the built-in spawn yield y of p, starting child and queueing
// it on this worker. The yield of a Spawn completes once the child has
// started; that of a SpawnAwait when the child ends, and it is named by
// the child's ID (see childSeq), so the child's record need not keep a
// sequence number. The ID is taken before the yield is registered, and
// given back if the yield is refused (a duplicate tag, a deadline already
// past). Worker only, with p Running.
func (w *worker) spawn(p *proc, y *yield, child Process) {
	id, err := w.s.admit(child, y.method, via{w: w}, true)
	w.spawnAdmitted(p, y, id, err)
}

// spawnAdmitted is spawn once the child has been admitted as id, or
// refused with err: it registers the yield and carries it out.
// Worker only, with p Running.
func (w *worker) spawnAdmitted(p *proc, y *yield, id uint64, err error) {
	var seq uint64
	if err == nil && y.kind == yieldSpawnAwait {
		seq = w.registerWithin(p, y, childSeq(id))
	} else {
		seq = w.registerWithin(p, y, w.newSeq())
	}
	if seq == 0 {
		if err == nil {
			w.s.unadmit(id, via{w: w}, cRefused)
		}
		return
	}
	// Carried out as a batch of one: y as a one-element slice of the
	// step's yields, where it lies, and arrays on the stack.
	var errs []error
	if err != nil {
		errs = []error{err}
	}
	var one [1]*proc
	_, started := w.startFrom(p, unsafe.Slice(y, 1), []spawnSlot{{id: id, seq: seq}}, errs, one[:0], 0)
	if len(started) > 0 {
		w.pushLocal(started[0])
	}
}

// oneSpawnBatch reports whether spawnBatch carries out all of ys, a
// step's yields, together: dispatch then hands them all to it at once,
// and it makes room for them in the pending set in the hold of p's lock
// in which it registers them, sparing dispatch the hold of its own
// reserve. Owner only.
func (w *worker) oneSpawnBatch(ys []yield) bool {
	return w.s.maxProcs == 0 && spawnRun(ys) == len(ys)
}

// spawnRun returns how many of the yields at the start of ys are spawns
// without a deadline, which spawnBatch can carry out together.
// Any goroutine.
func spawnRun(ys []yield) int {
	n := 0
	for n < len(ys) && (ys[n].kind == yieldSpawn || ys[n].kind == yieldSpawnAwait) && ys[n].deadline == 0 {
		n++
	}
	return n
}

// spawnSlot is what spawnBatch knows of one spawn between its passes:
// the child's ID (0: not admitted) and the sequence number its yield was
// registered under (0: not registered yet). Without pointers, the
// worker's array of them needs neither write barriers nor clearing;
// why a spawn was refused is kept apart (see spawnRefused), as few are.
type spawnSlot struct {
	id, seq uint64
}

// spawnBatch carries out ys, spawns without deadlines that a step wrote
// one after another, with the outcome spawn would give each in turn, but
// with what does not depend on the child done once for all of them: the
// start counter is counted once, and the yields are registered as
// pending in one hold of p's lock instead of one each. A parent that
// spawns many children in one step then holds its lock once while its
// earlier children, ending on other workers, wait for it to complete
// their yields, rather than once per child; and a fork-join node of ten
// children takes two locked instructions per child fewer (the counter
// is exact, so each count is a locked store: see Stats).
//
// The children are admitted first, then registered, then started in
// order, so their Inits run in the order of the yields, and then queued
// in that order, together. Only
// without WithMaxProcesses: under a limit, admitting all before any
// starts would hold places that a refused spawn or a failed Init gives
// back, and refuse later spawns of the step that one at a time would
// get them. A yield's registration fails only if its tag is
// outstanding; an earlier spawn of the same step may free that tag (a
// Spawn completes once its child has started, a SpawnAwait whose
// child's Init fails at once), so registration stops at the first
// failure, the spawns before it are carried out, and the rest go one by
// one as spawn would, each registered after the ones before it were
// carried out. Worker only, with p Running.
func (w *worker) spawnBatch(p *proc, ys []yield) {
	s, v := w.s, via{w: w}
	sl := w.spawning
	if cap(sl) < len(ys) {
		sl = make([]spawnSlot, len(ys))
		w.spawning = sl
	}
	sl = sl[:len(ys)]
	// A spawn's child is a nil interface only if its Process is (see
	// StepOutput.spawn): whether one is missing shows without the type
	// assertion, which the loop that starts them makes.
	valid := len(ys)
	var errs []error // why each spawn was refused, by index; nil while none was
	for i := range ys {
		if err := checkStartOf(ys[i].arg == nil, ys[i].method); err != nil {
			errs = w.spawnRefused(errs, len(ys), i, err)
			valid--
		}
	}
	// Counted before any is admitted, as admit counts before it looks
	// at the shutdown: a Shutdown waiting for the count of live
	// processes to reach zero must not see it there while these start.
	w.countN(cStarted, uint64(valid))
	// Admitted as admitCounted admits, but with its look at the
	// shutdown made once for the batch (a Shutdown that begins after it
	// cancels each child as it is published: see start), and with no
	// place to reserve (there is no WithMaxProcesses limit: see above):
	// a child takes the next ID in the worker's cache, inline. Without
	// one at hand, or while closing, admitCounted admits it or says why
	// not.
	closing := s.closing()
	for i := range sl {
		var id uint64
		if refusal(errs, i) == nil {
			ok := false
			if !closing {
				id, ok = w.slots.pop()
			}
			if !ok {
				var err error
				if id, err = s.admitCounted(v, true); err != nil {
					errs = w.spawnRefused(errs, len(ys), i, err)
				}
			}
		}
		sl[i] = spawnSlot{id: id}
	}
	registered := len(sl)
	p.mu.Lock()
	p.pending.reserve(len(sl), p, &w.pend) // see oneSpawnBatch
	// A tag above every pending one, as a loop numbering its children
	// writes them, cannot be taken: it is appended without add's search
	// for it. Any other goes through add.
	top, has := p.pending.topTag()
	for i := range sl {
		e, y := &sl[i], &ys[i]
		seq := childSeq(e.id)
		if e.id == 0 || y.kind != yieldSpawnAwait {
			seq = w.newSeq()
		}
		if (!has || y.tag > top) && p.pending.addAbove(y.tag, seq) {
			top, has = y.tag, true
		} else if !p.pending.add(y.tag, seq, p, &w.pend) {
			registered = i
			break
		}
		e.seq = seq
	}
	p.notePending(p.live())
	p.looked()
	p.mu.Unlock()
	// The registered children are queued together once all have
	// started: thieves see them all with one store (see pushLocalN), and
	// none before the last Init returns.
	started := w.spawned[:0]
	for i := 0; i < registered; {
		i, started = w.startFrom(p, ys[:registered], sl, errs, started, i)
	}
	w.pushLocalN(started)
	// Not cleared, which saves a call per batch: what it keeps are
	// records, which the table keeps too once their processes have ended
	// (see table), most of them until reused; at worst the records of the
	// largest batch the worker ever started stay reachable until the next
	// batches write over them.
	if cap(started) != cap(w.spawned) {
		w.spawned = started[:0] // grown
	}
	for i := registered; i < len(sl); i++ {
		w.spawnAdmitted(p, &ys[i], sl[i].id, refusal(errs, i))
	}
	if errs != nil {
		clear(errs)
	}
}

// startFrom carries out the registered spawns ys of p, from the one at
// index i on, appending the children it starts to started: for each,
// if its child was refused (errs, if not nil, says why, by index), the
// yield completes with that error, named as any other; else the child,
// admitted as sl's ID, is started, and a spawn that does not await it
// completes now, naming it; sl also holds the sequence number each
// yield was registered under. It returns where it stopped and started:
// len(ys) once all are carried out, or the index after a spawn whose
// child's Init panicked, which it ended as a failed Init, for the caller
// to go on from. One deferred call serves all the Inits of a batch of
// spawns this way (see spawnBatch), where start's callInit defers one
// for each, a few dozen instructions a child on the path every node of a
// fork-join tree takes; w.initing names the child whose Init runs.
// Worker only, with p Running.
func (w *worker) startFrom(p *proc, ys []yield, sl []spawnSlot, errs []error, started []*proc, i int) (next int, out []*proc) {
	s, v := w.s, via{w: w}
	next, out = i, started
	defer func() {
		c := w.initing
		if c == nil {
			return // the usual case: no Init panicked, no call to recover
		}
		r := recover()
		w.initing = nil
		goexit := r == nil // runtime.Goexit, which goes on
		if goexit {
			r = ErrGoexit
		}
		where := "Init"
		if w.initWhere != "" {
			where, w.initWhere = w.initWhere, "" // the Start hook: see callStartHook
		}
		perr := newPanicError(where, r)
		// Once the child's start has failed, the rest is the parent's:
		// after a Goexit (the child's, or the Panic hook's), the parent's
		// run cannot go on.
		failed := func() {
			err := initError(perr)
			s.initFailed(c, sl[next].id, err, v)
			w.completeNow(p, sl[next].seq, nil, err)
			next++
		}
		s.recovered(c, perr, v, func() {
			failed()
			w.spawnGoexited(p, ys, sl, errs, out, next, perr)
		})
		failed()
		if goexit {
			w.spawnGoexited(p, ys, sl, errs, out, next, perr)
		}
	}()
	// Taken once for the batch: p is Running, so its ID stays; and its
	// context values stay what they are even if a child's Init names or
	// monitors p meanwhile, which may give p a procExtra of its own (see
	// getLive), holding the same values.
	parentID, extra := p.id.Load(), p.childExtra()
	for ; next < len(ys); next++ {
		e, y := &sl[next], &ys[next]
		if err := refusal(errs, next); err != nil {
			w.completeNow(p, e.seq, nil, err)
			continue
		}
		var awaiter uint64
		if y.kind == yieldSpawnAwait {
			awaiter = parentID
		}
		child, _ := y.arg.(Process)
		c, err := s.start(e.id, nil, extra, child, y.method, y.input, awaiter, v, nil, false, false)
		if err != nil {
			w.completeNow(p, e.seq, nil, err)
			continue
		}
		if awaiter == 0 {
			w.completeNowFrom(p, e.seq, c.pid(), nil, nil) // the child in From: no box for its PID
		}
		out = append(out, c)
	}
	return next, out
}

// spawnGoexited ends p, whose step's spawns startFrom was carrying out
// when the Init of the child before ys[next] called runtime.Goexit,
// which goes on out of p's run: the children started so far (started)
// are queued, as their spawns completed; those admitted and not started
// (from next on, and, in a batch, those of sl beyond ys, admitted and
// not registered) are given back; and p ends with perr, as after a step
// that failed. The worker then goes on on a new goroutine (see
// worker.goexited). Worker only, with p Running, from startFrom's
// deferred function.
func (w *worker) spawnGoexited(p *proc, ys []yield, sl []spawnSlot, errs []error, started []*proc, next int, perr *PanicError) {
	v := via{w: w}
	w.pushLocalN(started)
	for i := next; i < len(sl); i++ {
		if sl[i].id != 0 && refusal(errs, i) == nil {
			w.s.unadmit(sl[i].id, v, cRefused)
		}
	}
	if errs != nil {
		clear(errs)
	}
	w.holding = false
	w.end(p, payload.Payload{}, perr)
	w.flushHeld()
}

// refusal returns why the spawn at index i was refused, as noted in errs
// (see spawnRefused), or nil. Any goroutine.
func refusal(errs []error, i int) error {
	if errs == nil {
		return nil
	}
	return errs[i]
}

// spawnRefused notes err as why the spawn at index i of spawnBatch's n
// was refused, in errs, which it takes from the worker's scratch array on
// the first refusal of the batch; spawnBatch clears it at its end.
// Owner only.
func (w *worker) spawnRefused(errs []error, n, i int, err error) []error {
	if errs == nil {
		if cap(w.spawnErrs) < n {
			w.spawnErrs = make([]error, n)
		}
		errs = w.spawnErrs[:n]
	}
	errs[i] = err
	return errs
}

// callHandler runs the handler of a user command for the yield seq.
// Worker only, with p Running.
func (w *worker) callHandler(p *proc, y *yield, seq uint64) {
	hs := *w.s.handlers.Load()
	var h Handler
	if int(y.cmd) < len(hs) {
		h = hs[y.cmd]
	}
	if h == nil {
		w.completeNow(p, seq, nil, fmt.Errorf("%w: %d", ErrUnknownCommand, y.cmd))
		return
	}
	p.inbox.wbits |= wbPinned // the handler may keep the Call, which holds the record
	w.handoff.begin()
	err := w.runHandler(p, h, Call{PID: p.pid(), Tag: y.tag, Cmd: y.cmd, Arg: y.arg, s: w.s, ctx: p, w: w, seq: seq})
	w.handoff.end(w)
	if err != nil {
		// Ignored if the handler completed the yield before failing.
		w.completeNow(p, seq, nil, err)
	}
}

// runHandler calls h for a yield of p, turning a panic into an error.
// Worker only, with p Running.
func (w *worker) runHandler(p *proc, h Handler, c Call) (err error) {
	returned := false // as in Scheduler.callInit
	defer func() {
		if returned {
			return
		}
		v := recover()
		if v == nil {
			v = ErrGoexit
		}
		perr := newPanicError("handler", v)
		// After runtime.Goexit (the handler's or the Panic hook's), which
		// goes on out of p's run: p ends here, as after a step that
		// failed, and the worker goes on on a new goroutine (see
		// worker.goexited).
		cut := func() { w.endCut(p, perr) }
		w.s.recovered(p, perr, via{w: w}, cut)
		err = perr
		if v == ErrGoexit {
			cut()
		}
	}()
	err = h(c)
	returned = true
	return err
}
