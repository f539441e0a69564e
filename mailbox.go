package scheduler

import (
	"context"
	"fmt"
	"math/bits"
	"sync"
	"unsafe"

	"github.com/procsched/scheduler/relay"
)

// MailboxPolicy says what happens to a message sent to a full mailbox.
// Only messages count towards a mailbox's capacity: completions of the
// process's own yields and its cancel event are always queued.
type MailboxPolicy uint8

const (
	// MailboxReject refuses the new message: Send and Tell return an error
	// wrapping [ErrMailboxFull]; a process that told it gets it back as an
	// undeliverable message with that error.
	MailboxReject MailboxPolicy = iota
	// MailboxDropNewest drops the new message and counts the drop: Send
	// and Tell return an error wrapping [ErrDropped]; a process that told
	// it gets it back with that error.
	MailboxDropNewest
	// MailboxDropOldest drops the oldest queued message to make room and
	// counts the drop; the new message is accepted. If the dropped message
	// came from a process, it gets it back as an undeliverable message
	// with [ErrDropped]. Dropping shifts the queued events, so keep the
	// capacity small with this policy.
	MailboxDropOldest
)

// String returns the policy's name.
func (m MailboxPolicy) String() string {
	switch m {
	case MailboxReject:
		return "reject"
	case MailboxDropNewest:
		return "drop-newest"
	case MailboxDropOldest:
		return "drop-oldest"
	}
	return fmt.Sprintf("MailboxPolicy(%d)", uint8(m))
}

// mailboxLimit is a capacity (0: unbounded) and a policy.
type mailboxLimit struct {
	capacity int
	policy   MailboxPolicy
}

// check reports why the limit is invalid, naming what, or nil. Any goroutine.
func (m mailboxLimit) check(what string) error {
	if m.capacity < 0 {
		return fmt.Errorf("%w: %s capacity %d is negative", ErrInvalidOption, what, m.capacity)
	}
	if m.policy > MailboxDropOldest {
		return fmt.Errorf("%w: %s policy %v is unknown", ErrInvalidOption, what, m.policy)
	}
	return nil
}

// WithMailbox bounds every process's mailbox by default: at most capacity
// queued messages (0, the default, means unbounded), and policy for a
// message sent to a full one. [Mailbox] overrides it for one process.
func WithMailbox(capacity int, policy MailboxPolicy) Option {
	return optionFunc(func(c *config) error {
		m := mailboxLimit{capacity, policy}
		if err := m.check("WithMailbox"); err != nil {
			return err
		}
		c.mailbox = m
		return nil
	})
}

// Mailbox bounds the mailbox of the submitted process, overriding
// [WithMailbox]: at most capacity queued messages (0: unbounded), and
// policy for a message sent to a full one.
func Mailbox(capacity int, policy MailboxPolicy) SubmitOption {
	return submitOptionFunc(func(o *submitOptions) error {
		m := mailboxLimit{capacity, policy}
		if err := m.check("Mailbox"); err != nil {
			return err
		}
		o.mailbox = &m
		return nil
	})
}

// limitOf returns the mailbox limit of p. Until a limit is set anywhere,
// it costs one load.
// Any goroutine.
func (s *Scheduler) limitOf(p *proc) mailboxLimit {
	if !s.limits.Load() {
		return mailboxLimit{}
	}
	if x := p.extra.Load(); x != nil && x.start != nil && x.start.mailbox != nil {
		return *x.start.mailbox
	}
	return s.mailbox
}

// pushMessage queues a message with data from the sender from under p's
// mailbox limit. It returns the state p was woken from (0 if the caller
// need not queue p), and the message the DropOldest policy evicted, if
// any. With wait set, a full mailbox is not subject to the policy:
// pushMessage returns errMailboxWait and a channel that is closed when
// the process next drains its mailbox. The event is written in its
// mailbox slot, field by field: one built elsewhere and copied in would
// cost the copy, with its loads waiting on the stores just made. id is
// the ID the caller found p by: if p has ended, or no longer holds that
// process, the message is refused with ErrProcessNotFound (see gone).
// Any goroutine.
func (p *proc) pushMessage(data any, from relay.PID, limit mailboxLimit, wait bool, id uint64) (woken uint64, evicted *Event, room <-chan struct{}, err error) {
	p.mu.Lock()
	if p.gone(id) {
		p.mu.Unlock()
		return 0, nil, nil, ErrProcessNotFound
	}
	if limit.capacity > 0 && int(p.msgs) >= limit.capacity {
		if evicted, room, err = p.full(limit, wait); err != nil {
			p.mu.Unlock()
			return 0, nil, room, err
		}
	}
	ev := p.inbox.next() // zero: its Error and Tag stay nil and 0
	if ev == nil {
		ev = p.newSlot() // the buffer is full, or there is none
	}
	ev.Type, ev.From = EventMessage, from
	ev.setData(data)
	p.msgs++
	woken = p.markRunnable()
	p.mu.Unlock()
	return woken, evicted, nil, nil
}

// pushUnlimited is pushMessage with no mailbox limit, for the path of a
// Tell between two processes on a scheduler where no mailbox has one
// (Scheduler.limits unset): with no limit there is nothing to evict and
// nothing to wait for, so it returns only the state p was woken from and
// whether the message was queued (false: p is gone, which pushMessage
// reports as ErrProcessNotFound). Fewer arguments and results save 13
// instructions a message, 4 % of a fan-out's. Its steps are
// pushMessage's, but for the limit, written out: as a function of their
// own for both to call, the compiler does not inline them, and the call
// costs 12 of the 13. Any goroutine.
func (p *proc) pushUnlimited(data any, from relay.PID, id uint64) (woken uint64, ok bool) {
	p.mu.Lock()
	if p.gone(id) {
		p.mu.Unlock()
		return 0, false
	}
	ev := p.inbox.next()
	if ev == nil {
		ev = p.newSlot()
	}
	ev.Type, ev.From = EventMessage, from
	ev.setData(data)
	p.msgs++
	woken = p.markRunnable()
	p.mu.Unlock()
	return woken, true
}

// claimWaiting claims p, which the caller found by the ID id, for a run
// of the calling worker with the state word claim, if p waits (Blocked
// or Idle), and reports the state it left. It takes no lock: a process
// waits only with an empty mailbox (whoever queues an event makes it
// Ready under its lock, and a run lets it wait only if no event came
// since its last drain), so the claim needs no look at the mailbox, and
// the compare-and-swap alone decides between the claimer, a sender
// queueing an event at the same time (which then finds it Running and
// flags it: its event waits in the mailbox for the next step) and a
// shutdown deadline's tryForce. A record that holds another process
// than id when it is claimed (the one looked up ended and its record
// went to a later process, which waits too) is given back, and gaveBack
// says so: to the state it had, or, if events reached it meanwhile,
// Ready, with woken the state it left, and the caller must queue it.
// Worker only.
func (p *proc) claimWaiting(id, claim uint64) (woken uint64, claimed, gaveBack bool) {
	st := p.state.Load()
	if (st != stBlocked && st != stIdle) || !p.state.CompareAndSwap(st, claim) {
		return 0, false, false
	}
	if p.id.Load() == id {
		return st, true, false
	}
	// Only the claimer ends a claim but for the flag of an event.
	if !p.state.CompareAndSwap(claim, st) {
		p.state.Store(stReady)
		return st, false, true
	}
	return 0, false, true
}

// eventBuf is a process's mailbox buffer, with a few small fields of the
// process that fit in what would otherwise be padding. It holds what a
// []Event would, in 16 bytes instead of 24, which keeps the proc in the
// 96-byte size class: the buffer's capacity is always a power of two
// (the buffers recycled through inboxBuffers are too), kept as its log2.
// Everything but wbits is guarded by proc.mu.
//
// first comes last, so that it and the proc's pending set, which follows
// the mailbox, are two pointer words in a row (see proc.outcomeErr).
type eventBuf struct {
	n      uint32 // queued events
	logCap uint8  // log2 of the buffer's capacity, when first is set
	// hint is log2 of the capacity of the last buffer let go (see
	// dropInbox), or 0: the next buffer grows to it in one step once a
	// burst needs more than keptInbox.
	hint uint8
	// wbits are the proc's bits that only the worker running it reads
	// and writes (wb*), handed from worker to worker with the process
	// through its state word and the queues.
	wbits uint8
	first *Event // the buffer's first event; nil while there is none
}

// The bits of eventBuf.wbits.
const (
	// wbStepped: Step has been called once.
	wbStepped = 1 << iota
	// wbBigInbox: the last drain left a buffer larger than keptInbox, to
	// be let go if the process goes waiting (see shrinkInbox).
	wbBigInbox
	// wbPinned: a handler was given a Call that holds the record, which
	// it may keep: the record is never reused (see proc.reusable).
	wbPinned
	// wbTimed: a step of the process has armed a timer (a Sleep or a
	// deadline): the worker holding it claimed then applies its
	// children's completions at once rather than when it runs (see
	// worker.completeAwaited). Never cleared: looking for the moment no
	// timer of its is pending would cost every run more than it saves.
	wbTimed
	// wbUnlooked: the process has stepped, but nobody has looked at its
	// mailbox since it was claimed for its first step (see
	// worker.beforeWait).
	wbUnlooked
)

// events returns the queued events, a slice whose capacity is the whole
// buffer. Called with proc.mu held.
func (b *eventBuf) events() []Event {
	if b.first == nil {
		return nil
	}
	return unsafe.Slice(b.first, 1<<b.logCap)[:b.n]
}

// setBuffer makes buf, whose capacity must be a power of two (so at
// least 1), the buffer, with the events it holds. Called with proc.mu
// held.
func (b *eventBuf) setBuffer(buf []Event) {
	c := cap(buf)
	if c == 0 || c&(c-1) != 0 {
		panic("scheduler: a mailbox buffer whose capacity is not a power of two")
	}
	b.first, b.n, b.logCap = unsafe.SliceData(buf), uint32(len(buf)), uint8(bits.Len(uint(c))-1)
}

// newSlot extends the mailbox by one event and returns it, zero (a
// drain clears what it took), for the caller to fill in place: building
// the event in a temporary and copying it would have the copy's wide
// loads stall on the narrow stores just made.
// Called with p.mu held.
func (p *proc) newSlot() *Event {
	if ev := p.inbox.next(); ev != nil {
		return ev
	}
	p.growInbox()
	return p.inbox.next()
}

// next is newSlot while the buffer has room: it returns the next event
// of the buffer, zero, counted in, or nil if the buffer is full or
// there is none, and then changes nothing. Unlike newSlot, which calls
// growInbox, it is small enough for the compiler to inline, and
// pushMessage, the path of every message, calls it first: a call of
// newSlot costs a message about fifteen instructions. Called with
// proc.mu held.
func (b *eventBuf) next() *Event {
	if n := b.n; b.first != nil && n != 1<<b.logCap {
		b.n = n + 1
		return (*Event)(unsafe.Add(unsafe.Pointer(b.first), uintptr(n)*unsafe.Sizeof(Event{})))
	}
	return nil
}

// full applies the policy of a full mailbox, with mu held: it returns an
// error to refuse the new message, or makes room and returns the message
// it dropped.
func (p *proc) full(limit mailboxLimit, wait bool) (evicted *Event, room <-chan struct{}, err error) {
	switch {
	case wait:
		x := p.getLive()
		if x.room == nil {
			x.room = make(chan struct{})
		}
		p.flags |= pfRoomWaiters
		return nil, x.room, errMailboxWait
	case limit.policy == MailboxReject:
		return nil, nil, ErrMailboxFull
	case limit.policy == MailboxDropNewest:
		return nil, nil, ErrDropped
	}
	// MailboxDropOldest: remove the oldest message (not a bounce,
	// completion or cancel, which are outside the limit).
	in := p.inbox.events()
	for i := range in {
		if in[i].Type == EventMessage && in[i].Error == nil {
			ev := in[i]
			copy(in[i:], in[i+1:])
			in[len(in)-1] = Event{}
			p.inbox.n--
			p.msgs--
			return &ev, nil, nil
		}
	}
	return nil, nil, nil
}

// growInbox gives a full (or missing) mailbox buffer room for more
// events: twice the capacity, or, for a process that has had bursts
// (eventBuf.hint), keptInbox events first and then what the last burst
// needed, in one step instead of a doubling at a time.
// Called with p.mu held.
func (p *proc) growInbox() {
	old := p.inbox.events()
	n := len(old)
	c := max(1, 2*cap(old))
	if h := p.inbox.hint; h > 0 {
		c = keptInbox
		if n >= keptInbox {
			c = max(1<<h, 2*n)
		}
	}
	buf := inboxBuffers.get(c)[:n]
	copy(buf, old)
	clear(old)
	inboxBuffers.put(old)
	p.inbox.setBuffer(buf)
}

// inboxBuffers recycles the mailbox buffers that processes let go: the
// large ones left after a burst, so that the next burst, of this process
// or another, takes one instead of allocating it; the ones outgrown; and
// the buffer of every process that ends, so that a short-lived parent
// (an inner node of a fork-join computation, which lives to collect the
// results of a few children) takes the buffer of one that ended before
// it. The buffers it holds are all zero; capacities up to
// 1<<maxInboxHint.
var inboxBuffers = make(pow2Pools[Event], maxInboxHint+1)

// pow2Pools recycles slices whose capacity is a power of two: element i
// holds slices of exactly 1<<i elements, each as a pointer to its first
// element (a pointer goes into an interface without an allocation). A
// sync.Pool keeps a private item per processor, taken and given back
// without a lock, and empties itself at garbage collections, so what a
// passed burst leaves behind is not kept for long.
type pow2Pools[T any] []sync.Pool

// index returns the pool of slices of capacity c, if there is one. Any
// goroutine.
func (ps pow2Pools[T]) index(c int) (int, bool) {
	i := bits.Len(uint(c)) - 1
	return i, c > 0 && c == 1<<i && i < len(ps)
}

// get returns an empty slice of capacity c, a power of two, recycled if
// one is at hand. Any goroutine.
func (ps pow2Pools[T]) get(c int) []T {
	if i, ok := ps.index(c); ok {
		if e, ok := ps[i].Get().(*T); ok {
			return unsafe.Slice(e, c)[:0]
		}
	}
	return make([]T, 0, c)
}

// put gives s, which nobody uses any more, to the pool of its capacity
// if there is one; other slices are left to the garbage collector. Any
// goroutine.
func (ps pow2Pools[T]) put(s []T) {
	if i, ok := ps.index(cap(s)); ok {
		ps[i].Put(&s[:1][0])
	}
}

// errMailboxWait tells deliver's waiting caller to wait for room.
var errMailboxWait = fmt.Errorf("%w (waiting for room)", ErrMailboxFull)

// push appends ev to the mailbox unless the process has ended, and makes
// the process runnable (see markRunnable); it returns the state the
// process was woken from, nonzero if the caller must queue it. Events
// pushed here complete no yield and are outside any mailbox limit (see
// pushMessage). ev is copied into the mailbox, as in pushMessage; id is
// as for pushMessage.
// Any goroutine.
func (p *proc) push(ev *Event, id uint64) (woken uint64, err error) {
	p.mu.Lock()
	if p.gone(id) {
		p.mu.Unlock()
		return 0, ErrProcessNotFound
	}
	*p.newSlot() = *ev
	woken = p.markRunnable()
	p.mu.Unlock()
	return woken, nil
}

// complete appends ev, the completion of a pending yield, as push does.
// With seq nonzero it completes the yield that was given that sequence
// number (the caller's ev.Tag is set to its tag); with seq zero, the
// pending yield with tag ev.Tag. A yield that is not pending (completed
// already, or never issued, or a newer yield that reuses the tag of the
// one a completion was made for) gets ErrYieldNotPending and no event. The yield's call
// context, if one was made, ends with cause (context.Canceled when nil).
// What the yield held — a monitor on another process, a timer — is the
// caller's to let go (see Scheduler.letGo). id is as for pushMessage.
// Any goroutine.
func (p *proc) complete(ev *Event, seq uint64, cause error, id uint64) (completed, error) {
	return p.completeFor(ev, seq, cause, nil, id)
}

// directClaim asks completeFor to hand a waiting process straight to the
// worker that completes its yield: claim is the state word of the run
// the worker will give it, and events the worker's batch, which takes the
// completion in place of the mailbox. claimed reports that it did.
type directClaim struct {
	claim   uint64
	events  *[]Event
	claimed bool
	// held says that the worker holds the claim already: the completion
	// joins events while the mailbox is empty, else the mailbox, so
	// that the process reads nothing before what arrived earlier. (A
	// child's completion usually skips this: see
	// worker.completeAwaited.)
	held bool
}

// completeFor is complete; with d set, a Blocked or Idle process whose
// mailbox is empty is not made Ready but claimed for d's worker at once
// (see worker.completeAwaited), with the completion as its only event.
// Any goroutine; d only from the worker it names.
func (p *proc) completeFor(ev *Event, seq uint64, cause error, d *directClaim, id uint64) (completed, error) {
	p.mu.Lock()
	if p.gone(id) {
		p.mu.Unlock()
		return completed{}, ErrProcessNotFound
	}
	x := p.live()
	var c completed
	var ok bool
	if seq != 0 {
		var tag uint64
		if tag, c.timed, ok = p.pending.removeSeq(seq, x); ok {
			ev.Tag = tag
		}
	} else {
		seq, ok = p.pending.removeTag(ev.Tag, x)
		c.timed, seq = seq&seqTimed != 0, seq&^seqTimed
	}
	if !ok {
		p.mu.Unlock()
		return completed{}, ErrYieldNotPending
	}
	c.seq = seq
	p.notePending(x)
	if x != nil {
		if x.calls != nil {
			if cause == nil {
				cause = context.Canceled
			}
			x.endCall(seq, cause)
		}
		c.held = x.unholdMonitor(seq)
	}
	if d != nil && p.inbox.n == 0 {
		// Besides the holders of mu, only a shutdown deadline's tryForce
		// and another worker's claim of a Tell's receiver (see
		// claimWaiting) change a waiting state: if either wins, the event
		// goes to the mailbox below, flagged, or is counted unread at
		// the close.
		if d.held {
			*d.events = append(*d.events, *ev)
			p.mu.Unlock()
			return c, nil
		}
		if st := p.state.Load(); (st == stBlocked || st == stIdle) && p.state.CompareAndSwap(st, d.claim) {
			*d.events = append(*d.events, *ev)
			c.woken, d.claimed = st, true
			p.mu.Unlock()
			return c, nil
		}
	}
	*p.newSlot() = *ev
	c.woken = p.markRunnable()
	p.mu.Unlock()
	return c, nil
}

// completed is what completing a yield leaves its completer to do.
type completed struct {
	seq   uint64 // the yield
	woken uint64 // the state the process left (see markRunnable); 0: nothing to queue
	held  uint64 // the process the yield watched (see demonitor), or 0
	timed bool   // the yield has a timer (a Sleep or a deadline) to release
}

// markRunnable is called with mu held right after an event was appended:
// a Blocked or Idle process becomes Ready, and the caller must queue it
// (markRunnable returns the state it left); a Running one gets flagWake,
// so that its worker steps it again (markRunnable returns 0). Doing this
// under mu, which the worker's drain also holds, means the state is never
// changed on account of an event that a drain already took: no process is
// made Ready with an empty mailbox.
func (p *proc) markRunnable() uint64 {
	for {
		st := p.state.Load()
		switch st & stateMask {
		case stIdle, stBlocked:
			if p.state.CompareAndSwap(st, stReady) {
				return st
			}
		case stRunning:
			if st&flagWake != 0 || p.state.CompareAndSwap(st, st|flagWake) {
				return 0
			}
		default: // Ready: it will drain the event when it runs. Ended: gone.
			return 0
		}
	}
}

// looked clears wbUnlooked if the mailbox is empty: the worker running
// p, holding mu after the claim for some other purpose, finds that no
// event came while p was Ready, and spares worker.beforeWait a hold of
// its own. Called with mu held, by the worker running p.
func (p *proc) looked() {
	if p.inbox.n == 0 {
		p.inbox.wbits &^= wbUnlooked
	}
}

// hasEvents reports whether events are queued. Worker only.
func (p *proc) hasEvents() bool {
	p.mu.Lock()
	n := p.inbox.n
	p.mu.Unlock()
	return n > 0
}

// drain moves every queued event to the end of dst and returns it.
// Worker only.
func (p *proc) drain(dst []Event) []Event {
	p.mu.Lock()
	p.msgs = 0
	if p.flags&pfRoomWaiters != 0 {
		p.flags &^= pfRoomWaiters
		x := p.live()
		close(x.room)
		x.room = nil
	}
	if n := int(p.inbox.n); n > 0 {
		if n == 1 {
			// The usual case: one event, copied and cleared as a value,
			// cheaper than a slice copy and clear.
			first := p.inbox.first
			dst = append(dst, *first)
			*first = Event{}
		} else {
			in := p.inbox.events()
			dst = append(dst, in...)
			clear(in)
		}
		// Keep the buffer for the next batch while it is well used; a
		// buffer left by a burst that has passed is let go.
		size := 1 << p.inbox.logCap
		big := size > keptInbox
		if big && n < size/4 {
			p.dropInbox()
			big = false
		} else {
			p.inbox.n = 0
		}
		if big {
			p.inbox.wbits |= wbBigInbox
		} else {
			p.inbox.wbits &^= wbBigInbox
		}
	}
	p.mu.Unlock()
	return dst
}

// dropInbox lets go of a mailbox buffer larger than keptInbox, whose
// events are all zero, to inboxBuffers, and remembers its size in
// eventBuf.hint, so the next burst gets its room back in one or two
// steps. Called with p.mu held.
func (p *proc) dropInbox() {
	if p.inbox.first == nil {
		return
	}
	p.inbox.hint = min(p.inbox.logCap, maxInboxHint)
	inboxBuffers.put(unsafe.Slice(p.inbox.first, 1<<p.inbox.logCap)[:0])
	p.inbox.first, p.inbox.n = nil, 0
}

// maxInboxHint bounds eventBuf.hint, so that a burst's room given back in one
// step is at most a million events.
const maxInboxHint = 20

// keptInbox is the largest mailbox buffer (in events) that a waiting
// process keeps; larger ones serve a process under a steady flood only.
const keptInbox = 64

// shrinkInbox lets go of a large, empty mailbox buffer before the process
// waits, unless completions of its outstanding yields will fill it.
// Worker only.
func (p *proc) shrinkInbox() {
	p.mu.Lock()
	if p.inbox.n == 0 && p.pending.len(p.live()) == 0 {
		p.dropInbox()
		p.inbox.wbits &^= wbBigInbox
	}
	p.mu.Unlock()
}

// terminate queues the cancel event (once) and cancels the context, with
// cause pfShutdownCancel or pfTerminateCancel; it returns the state the
// process was woken from, as push does; id is as for pushMessage. Any
// goroutine.
func (p *proc) terminate(cause uint8, id uint64) (woken uint64, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gone(id) {
		return 0, ErrProcessNotFound
	}
	if p.flags&pfCancelled != 0 {
		return 0, nil
	}
	p.flags |= pfCancelled | cause
	*p.newSlot() = Event{Type: EventCancel, Error: p.cancelCause()}
	if x := p.live(); x != nil {
		if x.ctxDone != nil {
			close(x.ctxDone)
		}
		x.ctxAfter.Run()
	}
	return p.markRunnable(), nil
}
