package scheduler

import (
	"context"
	"math/bits"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/procsched/scheduler/internal/ctxcause"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// The state word of a proc: the state in the low bits, plus flagWake,
// plus, while Running, a run number in the high bits. The states are the
// public States less one (see stateOf), so that Ready is 0: a new proc
// is Ready as it is allocated, and starting a process costs no store to
// say so.
const (
	stReady   = uint64(StateReady - 1)
	stRunning = uint64(StateRunning - 1)
	stBlocked = uint64(StateBlocked - 1)
	stIdle    = uint64(StateIdle - 1)
	stEnded   = uint64(StateEnded - 1)
	stateMask = uint64(7)

	// flagWake is set on a Running process by whoever queued an event for
	// it, so that the worker, instead of letting it wait, steps it again.
	flagWake = uint64(8)

	// While Running, the state word also says which worker runs the
	// process (bits workerShift..runShift-1) and which of that worker's
	// runs it is (bits runShift and up): each claim writes them with the
	// CAS it does anyway, so two runs of one process never share a state
	// word, and the watchdog can tell which process a worker is on
	// without the worker publishing anything per run.
	workerShift = 8
	runShift    = 24
	workerMask  = uint64(1)<<(runShift-workerShift) - 1
)

// stateOf returns the public State of state word st. Any goroutine.
func stateOf(st uint64) State { return State(st&stateMask) + 1 }

// Bits of proc.flags, guarded by proc.mu.
const (
	pfClosed         = 1 << iota // ended: no more events are accepted, the context is done
	pfCancelled                  // a cancel event was queued and the context cancelled
	pfShutdownCancel             // with pfCancelled: the cancel came from Shutdown, not Terminate
	pfForced                     // completed by a shutdown deadline
	pfRoomWaiters                // a sender waits for room in the mailbox (extra.room)
	pfEnded                      // its end is announced: its Handle reports it (set after pfClosed)
)

// Bits of proc.kind: what allocProc allocated after the proc (see
// timedProc). Set before the proc is shared and never changed, so read
// without mu.
const (
	pkTimed   = 1 << iota // a procTiming follows: the End hook is set
	pkHandle              // a procEnd follows: a Handle was returned for it, keep its outcome (see outcomeValue)
	pkAwaited             // a procAwait follows: a parent's SpawnAwait waits for its end
)

// pfTerminateCancel is the cause bit of a cancel by Terminate: none
// beyond pfCancelled.
const pfTerminateCancel = 0

// proc is the scheduler's record of one process. It doubles as the
// process's context.Context, which saves an allocation per process. It is
// kept small (96 bytes, a size class of its own) because a million
// waiting processes are a million procs; what only some processes need
// follows it in the same allocation (see timedProc) or lives in
// procExtra. The record of a process without a Handle or an awaiting
// parent takes 128 bytes instead, two cache lines of its own (see
// spawnedProc).
//
// Layout: a caller outside the workers that starts a process in a
// reused record with no context values reads and writes only id, state,
// methodID, kind and impl (see Scheduler.record and submitOutside), and
// these lie in the record's first cache line (TestRecordFirstLine). The
// worker that ends the process writes the second line (recycleFor);
// kept off the caller's core, it does not cross between the two for
// every process (see table.prefetchNext).
//
// Ownership: impl is touched only by the goroutine that has the process
// Running (or, before it is first queued, by the submitter; when it
// completes, by whoever moved it to Ended). The fields under mu are
// the mailbox and everything that senders, completers and waiters share
// with that worker.
type proc struct {
	// id is PID.ID. Stored before the record is published, and loaded
	// without mu by lookups, which compare it: a caller that found the
	// record by an ID checks it again under mu (see gone), as it checks
	// that the process has not ended.
	id atomic.Uint64

	// state is the State plus flagWake (and, while Running, the worker
	// and run; see workerShift). It moves to Running only by a
	// worker's CAS from Ready, or from Blocked or Idle by a worker that
	// claims the process for its next run (see claimWaiting and
	// complete); to Ready by the CAS of whoever queued the
	// first event for a Blocked or Idle process (that party then queues
	// it; see markRunnable) or by the worker requeueing it; to Blocked or
	// Idle by the worker's CAS from Running (see worker.settle), or by a
	// claimer giving back a record that serves a later process; to
	// Ended by the single winner of a CAS or by the worker running it,
	// and from Ended to Ready only when the record serves a new process
	// (see Scheduler.record).
	state atomic.Uint64
	// hasPending says whether the process has pending yields; written
	// under mu (see notePending), read without it by the worker choosing
	// between Blocked and Idle and by the timer release at the end.
	hasPending atomic.Bool

	node     uint32 // PID.Node
	msgs     uint32 // messages (not bounces, completions or cancel) in inbox; guarded by mu
	methodID uint16 // the entry point (see methodTable); immutable
	flags    uint8  // pf* bits; guarded by mu
	kind     uint8  // pk* bits; immutable once the proc is shared

	impl Process // nil once complete

	mu      sync.Mutex // guards flags, inbox, pending and extra's live part; held for a few instructions
	inbox   eventBuf   // the mailbox: the events queued for the next step, and a few bits
	pending pendingSet // tags of yields awaiting completion

	// extra holds what few processes need (see procExtra): set at the
	// start for context values or a mailbox limit of the process's own,
	// or on demand under mu (getLive). It changes only under mu, and
	// only from a shared procExtra to the process's own (see
	// procExtra.shared), which holds the same immutable fields: so those
	// are read with a load of it without mu, and its live part, guarded
	// by mu, through a load made under mu (see live).
	extra atomic.Pointer[procExtra]
}

// procTiming is what the End hook reports of a process besides its
// outcome: when it started, on the scheduler's coarse clock, and how many
// steps it made. Written by the goroutine starting the process before it
// is published, then only by the worker running it, and read by whoever
// ends it; those hand-offs go through the process's state word.
type procTiming struct {
	started int64
	steps   uint64
}

// spawnedProc is the record of a process that has no Handle, no
// awaiting parent and no timing (kind 0): what Spawn starts, and a
// step's Spawn. It is a proc padded to two cache lines, in the 128-byte
// size class, whose objects begin on a line: no other record shares
// either of its lines.
//
// In the 96-byte class, two records take three lines: each shares one of
// its lines with a neighbour, the end of one with the start of the next,
// and records allocated one after another lie side by side. A caller
// outside the workers that starts processes in a loop reuses the records
// of processes a worker has just ended (see Scheduler.record), next to
// the ones that worker is running and ending. The caller's writes to one
// record and the worker's to its neighbour then pass the shared line
// between their two cores, though neither reads what the other wrote.
// With the records padded, a million starts with Spawn take 0.86x the
// time; padded to three lines, the same, so it is the sharing, not the
// alignment. In the machine's spells of slow transfers between cores
// (see docs/benchmarks.md) they take 1.03x: the workers fall behind and
// walk records that have gone cold, and two padded records are four
// lines to fetch where two 96-byte ones are three.
// Records with a Handle are never reused, and an awaited child starts
// and ends on its parent's worker as a rule, so those keep the 96-byte
// class (with every kind padded, a fork-join tree takes longer), and so
// do those with the End hook's timing: padded the same way, they take no
// less time.
type spawnedProc struct {
	proc
	_ [2*cacheLine - unsafe.Sizeof(proc{})]byte
}

// A proc is allocated in one object with what only some processes need,
// placed after it: the timing when the End hook is set, so that counting
// a step writes to memory the worker running the process already holds;
// the channel a Handle waits on, for a process that has one (its
// outcome goes in the record's own fields once it ends: see
// outcomeValue), so that ending it and waiting for it allocate nothing
// more; and the parent yield of a child
// that a SpawnAwait waits for. A process that needs none of them is a
// bare proc (padded to two cache lines: see spawnedProc); every other
// record stays in the smallest size class that holds it
// (TestProcSizeClasses), and none pays for what it lacks. A process has
// a Handle only if Submit started it and an awaiting parent only if a
// step spawned it, so no record has both. The proc comes first in each,
// so a *proc points to the whole object, and the timing comes right
// after it in every record that has one, so timing works for all of
// them; p.kind says which record p is.
type (
	timedProc struct {
		proc
		t procTiming
	}
	handleProc struct {
		proc
		end procEnd
	}
	timedHandleProc struct {
		proc
		t   procTiming
		end procEnd
	}
	awaitedProc struct {
		proc
		await procAwait
	}
	timedAwaitedProc struct {
		proc
		t     procTiming
		await procAwait
	}
)

// procEnd is what a Handle needs of its process besides its outcome:
// the channel Handle.Done returns, made on demand by Handle.Done and
// Wait and closed when the end is announced. Guarded by proc.mu.
type procEnd struct {
	done chan struct{}
}

// The outcome of a process with a Handle is kept, once the process has
// ended, in fields of its record that the end leaves unused, so that the
// record needs no fields of its own for it and stays in the 96-byte size
// class, as a bare proc: a Handle keeps its record alive for as long as
// it is kept, a million of them after a burst of submissions. The
// result's value goes where impl was (finish clears impl once Close has
// returned), its format where the mailbox kept the log2 of its capacity,
// and the error in the mailbox buffer's pointer and the pending set's
// (close empties both), which are next to each other. Each place is two
// pointer words for the garbage collector, as the interface put there
// is, and nothing reads these fields as what they were once pfClosed is
// set: every access to a closed proc's mailbox or pending set checks
// pfClosed first under mu.
//
// outcomeValue returns where the result's value goes. Only for a proc
// with a Handle, with mu held, after close.
func (p *proc) outcomeValue() *any { return (*any)(unsafe.Pointer(&p.impl)) }

// outcomeErr returns where the error goes. Only for a proc with a
// Handle, with mu held, after close.
func (p *proc) outcomeErr() *error { return (*error)(unsafe.Pointer(&p.inbox.first)) }

// The error spans inbox.first and pending: they must be adjacent. Each
// constant below is negative, which does not compile, unless they are.
const (
	errAt = unsafe.Offsetof(proc{}.inbox) + unsafe.Offsetof(eventBuf{}.first)
	_     = uint(unsafe.Offsetof(proc{}.pending) - errAt - unsafe.Sizeof(uintptr(0)))
	_     = uint(errAt + unsafe.Sizeof(uintptr(0)) - unsafe.Offsetof(proc{}.pending))
	_     = uint(unsafe.Sizeof(error(nil)) - 2*unsafe.Sizeof(uintptr(0)))
)

// procAwait names the parent whose SpawnAwait yield waits for the
// process's end; the yield's sequence number is childSeq of the
// process's own ID. Written before the proc is shared and never changed.
type procAwait struct {
	parent uint64 // the parent's PID.ID (its node is the scheduler's)
}

// kindOf returns the kind (pk* bits) of the record of a process with a
// Handle if handle is set, awaited by its parent if awaited is set:
// room for its timing when the End hook is set, for its end record with
// a Handle, and for its parent's yield when awaited (see timedProc).
// handle and awaited are never both set.
// Any goroutine.
func (s *Scheduler) kindOf(handle, awaited bool) uint8 {
	var kind uint8
	if s.hooks.End != nil {
		kind |= pkTimed
	}
	if handle {
		kind |= pkHandle
	}
	if awaited {
		kind |= pkAwaited
	}
	return kind
}

// allocProc allocates a zero proc of kind (see kindOf), which its kind
// field says. Any goroutine.
func allocProc(kind uint8) *proc {
	var p *proc
	switch kind {
	case 0:
		return &new(spawnedProc).proc
	case pkTimed:
		p = &new(timedProc).proc
	case pkHandle:
		p = &new(handleProc).proc
	case pkTimed | pkHandle:
		p = &new(timedHandleProc).proc
	case pkAwaited:
		p = &new(awaitedProc).proc
	case pkTimed | pkAwaited:
		p = &new(timedAwaitedProc).proc
	default:
		panic("scheduler: a process with both a Handle and an awaiting parent")
	}
	p.kind = kind // not yet shared: no lock needed
	return p
}

// timing returns p's timing record. Only for a proc that allocProc
// allocated while the End hook is set: p is then the first field of a
// timedProc, a timedHandleProc or a timedAwaitedProc, whose timing is at
// the same offset, so the conversion stays inside that allocation (the
// race detector's pointer checks verify it).
// Whoever owns p at the moment: the worker running it, or whoever ends it.
func (p *proc) timing() *procTiming {
	return &(*timedProc)(unsafe.Pointer(p)).t
}

// end returns p's end record. Only for a proc with pkHandle, whose kind
// says how it was allocated, so the conversion stays inside the
// allocation. Called with mu held, or before p is shared.
func (p *proc) end() *procEnd {
	if p.kind&pkTimed != 0 {
		return &(*timedHandleProc)(unsafe.Pointer(p)).end
	}
	return &(*handleProc)(unsafe.Pointer(p)).end
}

// awaited returns the parent yield waiting for p's end, or nil if none
// does (see end for the conversion).
// Any goroutine: the record is immutable once p is shared.
func (p *proc) awaited() *procAwait {
	switch p.kind & (pkTimed | pkAwaited) {
	case pkAwaited:
		return &(*awaitedProc)(unsafe.Pointer(p)).await
	case pkTimed | pkAwaited:
		return &(*timedAwaitedProc)(unsafe.Pointer(p)).await
	}
	return nil
}

// procExtra is the part of a proc that most processes never need: what
// it was started with beyond its record (context values, its own mailbox
// limit, an entry point too many to intern), immutable, and, behind live,
// what it gets on demand (a Done channel, names, monitors, ...). The two
// are apart so that a process that has only context values, as one
// submitted with a request's context has, costs 48 bytes for them and
// not the whole; a process that needs live with no procExtra yet gets
// both in one allocation (extraAndLive), of 176 bytes. The rarest of
// what a process is started with (procStart) is one more step away,
// which keeps the two within those size classes.
//
// A process started by a step inherits its parent's context values, and
// every process of a tree submitted with a request's context would need
// a procExtra for them alone. Instead the children of a process share
// one procExtra that holds only the values (childExtra). A shared one
// never gets a live part: a child that needs one gets a procExtra of its
// own, with the values copied, from getLive, under its lock.
type procExtra struct {
	values context.Context // where Value lookups go (never its Done); immutable
	start  *procStart      // the rest of what it was started with, if anything; immutable

	// children is the shared procExtra of the children of the process's
	// steps (see childExtra), made at its first spawn; in a shared one,
	// the procExtra itself, set before it is shared, which is what
	// marks it (see shared). Stored only by the worker running the
	// process; loaded by it and, under proc.mu, by whoever asks whether
	// the procExtra is shared. Atomic because those two meet: a
	// shared() load under mu may run while the worker stores the
	// children's part; the store of the self-mark comes before the
	// procExtra is shared, and sharing it (an atomic store of proc.extra)
	// orders it before every load.
	children atomic.Pointer[procExtra]

	// live is the part made on demand (see getLive), nil until then and
	// always in a shared procExtra. Guarded by proc.mu; frozen once the
	// process is closed.
	live *procLive
}

// procStart is what few processes are started with: a mailbox limit of
// their own, or an entry point that the table of interned ones had no
// room for (see procExtra). Immutable.
type procStart struct {
	method  string        // the entry point, if not interned
	mailbox *mailboxLimit // this process's own mailbox limit, if any
}

// extraAndStart is a procExtra and its procStart in one allocation.
type extraAndStart struct {
	x procExtra
	s procStart
}

// procLive is what a process gets on demand, by being named, monitored,
// asked for its context's Done channel, and so on (see procExtra).
type procLive struct {
	// Guarded by proc.mu:
	ctxDone  chan struct{}       // made on demand by Done, closed on cancel or end
	large    *largePending       // pending yields of a process with many outstanding
	room     chan struct{}       // closed at the next drain, for senders waiting for room
	calls    []*callContext      // contexts of calls whose yields are pending (see Call.Context)
	ctxAfter ctxcause.AfterFuncs // functions to run when the process context is done (AfterFunc)

	// Names, monitors (see names.go and monitor.go). Guarded by proc.mu
	// while the process lives; frozen once it is closed, when whoever
	// ended it reads them without the lock.
	names    []string          // names registered for this process
	monitors *u64map           // monitors on this process: yield seq -> watcher (| monitorRequest)
	held     *u64map           // monitors this process holds: its yield seq -> watched process
	outside  []*outsideMonitor // monitors set by Scheduler.Monitor
}

// extraAndLive is a procExtra and its procLive in one allocation, for a
// process that needs the live part and has no procExtra of its own yet.
type extraAndLive struct {
	x procExtra
	l procLive
}

// shared reports whether x is the procExtra the children of a process
// share (see childExtra), which is never written.
// Any goroutine.
func (x *procExtra) shared() bool { return x.children.Load() == x }

// live returns p's procLive, or nil if it has none. Called with mu held,
// or, once p is closed, by whoever ended it.
func (p *proc) live() *procLive {
	if x := p.extra.Load(); x != nil {
		return x.live
	}
	return nil
}

// getLive returns p's procLive, creating it: in p's own procExtra if it
// has one, else with a procExtra of its own in one allocation, which
// replaces a shared one (keeping its values). Called with mu held.
func (p *proc) getLive() *procLive {
	x := p.extra.Load()
	if x != nil && !x.shared() {
		if x.live == nil {
			x.live = new(procLive)
		}
		return x.live
	}
	both := new(extraAndLive)
	if x != nil {
		both.x.values = x.values // a shared one holds nothing else
	}
	both.x.live = &both.l
	p.extra.Store(&both.x)
	return &both.l
}

// childExtra returns the procExtra for a child that p's step starts
// without a mailbox limit of its own: nil if p has no context values,
// else one holding only them, shared by all of p's children (see
// procExtra), and by theirs.
// Worker only, with p Running.
func (p *proc) childExtra() *procExtra {
	x := p.extra.Load()
	if x == nil || x.values == nil {
		return nil
	}
	c := x.children.Load() // x itself, if x is shared: p's children take what p took
	if c == nil {
		c = &procExtra{values: x.values}
		c.children.Store(c)
		x.children.Store(c)
	}
	return c
}

// setFreshID sets the ID of p, a record not yet shared with any other
// goroutine, with a plain store: an atomic one is an xchg on amd64, a
// locked instruction, which a start would pay for nothing. Whoever
// loads the ID later found p through its publication (the table's
// atomic store, or the queue that hands p over), which orders this
// store before their load.
// Only the goroutine that allocated p, before sharing it.
func (p *proc) setFreshID(id uint64) {
	*(*uint64)(unsafe.Pointer(&p.id)) = id
}

// pid returns the process's PID.
// Any goroutine.
func (p *proc) pid() relay.PID { return relay.PID{Node: p.node, ID: p.id.Load()} }

// gone reports whether the process that a caller found by ID id has
// ended, so that nothing more may be queued for it: its last step has
// returned (its state is Ended, the state its worker or a shutdown
// deadline gives it before ending it) or it is closed. It also reports
// true when the record no longer holds that process (its end left the
// record to the slot's next process, under the next ID: see
// recycleFor), and for a reused record whose new process runs Init:
// the record keeps the Ended state of its last process until the new
// one is published. A caller that finds it gone must read nothing else
// of the record: the start of its next process writes those fields
// without the lock. Called with p.mu held.
func (p *proc) gone(id uint64) bool {
	return p.flags&pfClosed != 0 || p.id.Load() != id || p.state.Load()&stateMask == stEnded
}

// addPending registers a yield with tag and sequence number seq (with
// seqTimed if it will have a timer) as outstanding; it reports false,
// registering nothing, if a yield with that tag is outstanding already.
// c is the worker's cache of pending arrays.
// Worker only, with p Running.
func (p *proc) addPending(tag, seq uint64, c *pendingCache) bool {
	p.mu.Lock()
	ok := p.pending.add(tag, seq, p, c) // seq may carry seqTimed
	p.notePending(p.live())
	p.looked()
	p.mu.Unlock()
	return ok
}

// notePending brings hasPending up to date with the pending set. It
// stores only when the answer changes, so a step that yields ten
// commands, and the ten completions that follow, pay two atomic stores
// rather than twenty. Called with p.mu held.
func (p *proc) notePending(x *procLive) {
	if has := p.pending.len(x) > 0; has != p.hasPending.Load() {
		p.hasPending.Store(has)
	}
}

// clearPending clears hasPending for a process that is ending, whose
// pending yields are dropped. Like notePending it stores only when the
// flag is set: most processes end with none pending, and are spared the
// atomic store's fence. Called with p.mu held (hasPending is written
// only so).
func (p *proc) clearPending() {
	if p.hasPending.Load() {
		p.hasPending.Store(false)
	}
}

// reservePending makes room for n more pending tags, so that a step that
// yields several commands grows the set at most once. (The mailbox is not
// reserved alike: completions usually arrive a few at a time and are
// drained in between.) c is the worker's cache of pending arrays.
// Worker only.
func (p *proc) reservePending(n int, c *pendingCache) {
	p.mu.Lock()
	p.pending.reserve(n, p, c)
	p.looked()
	p.mu.Unlock()
}

// close marks the process ended: later events are refused, queued ones and
// pending yields dropped, the context cancelled, and the result kept for
// a Handle, to which it announces the end when nothing must come first
// (see announce). It reports in *c the events that were queued, whether
// it had been asked to stop and whether it announced the end (into the
// caller's closed rather than as a result, which the caller would copy
// field by field and then read back whole, a stall on every end). With
// next set (not 0), the record is left for the process that gets the ID
// next, its slot's next one, unless something of the process's must
// outlive it (see reusable and recycleFor). Called once, by whoever
// moved the process to Ended, after Close returned.
func (p *proc) close(c *closed, result payload.Payload, err error, forced bool, next uint64) {
	p.mu.Lock()
	c.unread, c.cancelled, c.cause = p.inbox.events(), p.flags&pfCancelled != 0, p.cancelCause()
	// Most processes end with nothing queued or pending: the checks spare
	// them a write barrier each (while the collector marks) and the
	// atomic store's fence.
	if p.inbox.first != nil {
		p.inbox.first, p.inbox.n = nil, 0
	}
	p.msgs = 0
	p.clearPending()
	if p.kind&pkHandle != 0 {
		// impl is nil, and the mailbox and pending set are empty: the
		// value and format take their places (see outcomeValue). The
		// error comes with announce.
		*p.outcomeValue() = result.Value()
		p.inbox.logCap = uint8(result.Format())
	}
	if x := p.live(); x != nil {
		x.large = nil
		if p.flags&pfCancelled == 0 {
			if x.ctxDone != nil {
				close(x.ctxDone)
			}
			x.ctxAfter.Run()
		}
		if forced {
			x.endCalls(ErrForced)
		} else {
			x.endCalls(ErrEnded)
		}
		if x.room != nil {
			close(x.room) // waiting senders find the process gone
			x.room = nil
		}
	}
	if next != 0 && p.reusable() {
		p.recycleFor(next)
		p.mu.Unlock()
		return
	}
	if p.pending.arr != nil {
		c.pending = p.pending.array()
		p.pending = pendingSet{}
	}
	p.flags &^= pfRoomWaiters
	p.flags |= pfClosed
	if forced {
		p.flags |= pfForced
	}
	// A Handle may see the end now if nothing else has to happen first
	// (see announce): no unread events to count, no names to release, no
	// monitors to tell. That is most processes, and it spares them a
	// second hold of the lock.
	if p.kind&pkHandle != 0 && len(c.unread) == 0 && !p.live().tellsEnd() {
		p.announceLocked(err)
		c.announced = true
	}
	p.mu.Unlock()
}

// tellsEnd reports whether whoever ends the process has others to tell
// of it (see Scheduler.finish): names to release, monitors to notify.
// Called with proc.mu held, or once the process is closed; x may be nil.
func (x *procLive) tellsEnd() bool {
	return x != nil && (len(x.names) > 0 || x.monitors != nil || x.held != nil || x.outside != nil)
}

// reusable reports whether nothing of the ending process p needs its
// record once it has ended, so that the record may be given to a later
// process (see recycleFor): it was not asked to stop (whose cause its context
// would have to keep), and its live part (procLive), if it has one,
// holds none of what others reach it by (names, monitors, a call's
// context, a Done channel, functions to run at the end): what it was
// started with is immutable, and its context keeps what it needs of it.
// The caller (finish) has checked the rest: no Handle, not forced, never
// handed to a handler in a Call. Called with p.mu held, in close.
func (p *proc) reusable() bool {
	if p.flags&pfCancelled != 0 {
		return false
	}
	x := p.live()
	return x == nil || (x.ctxDone == nil && x.room == nil && len(x.calls) == 0 && len(x.ctxAfter) == 0 &&
		x.names == nil && x.monitors == nil && x.held == nil && x.outside == nil)
}

// reuseID returns the ID that the record of p, whose process has just
// ended as id, may be left for (see recycleFor): that of id's slot's
// next process, if the record has no Handle (which keeps the process's
// outcome), was never handed to a handler in a Call (which may still
// read it), and the slot's next generation is in the run of ctxGens
// that the record serves (see genCtx), which also keeps it from the
// slot's last (maxGen ends a run). Else 0: the record is not reused.
// The caller, which ended the process on a worker, checks the rest with
// the record's lock held (see close and closeQuiet). Called once, by
// whoever ends the process.
func (p *proc) reuseID(id uint64) uint64 {
	if p.kind&pkHandle != 0 || p.inbox.wbits&wbPinned != 0 || (genOf(id)+1)%ctxGens == 0 {
		return 0
	}
	return makeID(slotOf(id), genOf(id)+1)
}

// closeQuiet is close for a process whose end has nothing to hand on:
// no event left in its mailbox, no cancellation, and no live part (see
// procLive: no names, monitors, calls, context done channel or waiting
// senders). Its record is then left for the process that will start
// with ID next, its slot's next one, as close leaves a reusable record
// (see recycleFor), and it reports true. Otherwise it changes nothing
// and reports false, and the caller ends the process with close. The
// caller has checked with reuseID what it can without the lock: that the
// process has no Handle, no Call held by a handler, and that next is in
// the run of IDs the record serves. Called once, by the worker that
// moved the process to Ended, after Close returned.
func (p *proc) closeQuiet(next uint64) bool {
	p.mu.Lock()
	if p.inbox.n != 0 || p.flags&pfCancelled != 0 || p.live() != nil {
		p.mu.Unlock()
		return false
	}
	p.clearPending()
	p.recycleFor(next)
	p.mu.Unlock()
	return true
}

// recycleFor leaves the record of the process that has just ended, as
// close found it, for the process that will start with ID next, its
// slot's next one: the record takes next as its ID and everything else a
// new record has, but for its state word, which stays Ended until that
// process is published (see start) and for its entry point, which its
// start sets (see Scheduler.record). It is done here, under the hold
// that close takes anyway, so that the start that reuses the record
// takes no lock: whoever finds the record by the ended process's ID
// (a stale PID, or that process's context) and locks it finds the ID
// changed, and whoever finds it by next before that process is
// published finds it Ended (see gone); both stop there, and read none
// of what the start writes without the lock. Called by close, with mu
// held.
func (p *proc) recycleFor(next uint64) {
	p.flags, p.msgs = 0, 0
	p.inbox = eventBuf{} // close emptied it; this clears its bits and hint
	// The pending set's array, if it has one, stays, emptied: a process
	// that spawns children (an inner node of a fork-join tree) mostly
	// ends on the worker that started them, and its record goes to the
	// next process that worker starts, which is as likely to spawn as
	// many; taking an array from the worker's cache and giving it back
	// would cost each of them more than the rest of this.
	p.pending.empty()
	if p.extra.Load() != nil {
		p.extra.Store(nil)
	}
	if p.kind&pkTimed != 0 {
		*p.timing() = procTiming{}
	}
	p.id.Store(next)
}

// announce makes the end visible to the process's Handle, with err, the
// error it ended with: after close (which kept the result), and after its
// names were released and its monitors told, so that once a Handle
// reports the end, the name is free and every monitor has its event.
// Only for a process with a Handle: nothing else reads the end. close
// announces the end itself, under the hold it takes anyway, when none of
// that is to be done (closed.announced); announce is for the rest.
// Called once, by whoever ended the process, unless close announced.
func (p *proc) announce(err error) {
	p.mu.Lock()
	p.announceLocked(err)
	p.mu.Unlock()
}

// announceLocked is announce with p.mu held: close calls it when the
// end needs nothing else first. Called once, with p.mu held.
func (p *proc) announceLocked(err error) {
	p.flags |= pfEnded
	if done := p.end().done; done != nil {
		close(done)
	}
	*p.outcomeErr() = err
}

// closed is what close reports of the process it closed.
type closed struct {
	unread    []Event        // events that were queued and never read, in the mailbox buffer; the caller's now
	pending   []pendingYield // the small pending set's array, if it had one and the record is not reused (see recycleFor); the caller's now
	cancelled bool           // it had been asked to stop (Terminate, Shutdown)
	announced bool           // its end was announced to its Handle already (see announce)
	cause     error          // the cancel's cause, if so
}

// recycle gives the buffers of the closed process back for other
// processes to use (see inboxBuffers, pendingSlices), once the caller is
// done with the unread events; pc is the calling worker's cache of
// pending arrays, or nil. Called once, by whoever closed the process.
func (c *closed) recycle(pc *pendingCache) {
	if cap(c.unread) > 0 {
		clear(c.unread) // the rest of the buffer is zero already: drains clear what they take
		inboxBuffers.put(c.unread[:0])
		c.unread = nil
	}
	if cap(c.pending) > 0 {
		pc.put(c.pending)
		c.pending = nil
	}
}

// closedChan is returned by Done methods after the fact.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// ended returns a channel closed when the process has ended. Only for a
// process with a Handle. Any goroutine.
func (p *proc) ended() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.flags&pfEnded != 0 {
		return closedChan
	}
	e := p.end()
	if e.done == nil {
		e.done = make(chan struct{})
	}
	return e.done
}

// ending returns the result and error, and whether the process has
// ended. Only for a process with a Handle. Any goroutine.
func (p *proc) ending() (payload.Payload, error, bool) {
	p.mu.Lock()
	if p.flags&pfEnded == 0 {
		p.mu.Unlock()
		return payload.Payload{}, nil, false
	}
	v, f, err := *p.outcomeValue(), payload.Format(p.inbox.logCap), *p.outcomeErr()
	p.mu.Unlock()
	return repack(f, v), err, true
}

// values returns the context p's values come from: the one p got them
// from, not p itself, which its Value lookups and the processes its
// Calls submit go to, so that lookups do not walk a chain of ancestors
// (a child started by a step reaches the same one through childExtra).
// Any goroutine.
func (p *proc) values() context.Context {
	if x := p.extra.Load(); x != nil {
		return x.values
	}
	return nil
}

// pendingSet is the set of outstanding yields of one process: for each,
// the tag the process chose and the sequence number the scheduler gave it
// (see worker.register), which names that one yield for good, so that a
// completion made for it can never complete a later yield that reuses the
// tag. Most processes have zero to a few outstanding yields, kept in a
// slice; a process that fans out widely moves them to a largePending in
// its procExtra. Called with proc.mu held.
//
// The slice lives in an array whose first element is a header: its tag
// holds the number of yields and its seq the array's length, a power of
// two from 2 to pendingSmallMax+1; the yields follow it. The set is then
// one pointer, 8 bytes rather than a slice header's 24, which leaves room
// in the proc's size class for an awaited child's parent (awaitedProc).
type pendingSet struct {
	arr *pendingYield // the array, header first; nil until one is made
}

// small returns the slice: the yields after the header, with the rest
// of the array as spare capacity. Called with proc.mu held.
func (ps *pendingSet) small() []pendingYield {
	if ps.arr == nil {
		return nil
	}
	return unsafe.Slice(ps.arr, ps.arr.seq)[1 : 1+ps.arr.tag]
}

// count returns the number of yields in the slice. Called with proc.mu
// held.
func (ps *pendingSet) count() uint64 {
	if ps.arr == nil {
		return 0
	}
	return ps.arr.tag
}

// at returns the i'th yield of the slice, i < count(): the element after
// the header's i. It spares the hot loops (add, removeSeq, removeTag) the
// checks of building the slice. Called with proc.mu held.
func (ps *pendingSet) at(i uint64) *pendingYield {
	return (*pendingYield)(unsafe.Add(unsafe.Pointer(ps.arr), uintptr(i+1)*unsafe.Sizeof(pendingYield{})))
}

// array returns the whole array, header included, or nil. Called with
// proc.mu held.
func (ps *pendingSet) array() []pendingYield {
	if ps.arr == nil {
		return nil
	}
	return unsafe.Slice(ps.arr, ps.arr.seq)
}

// empty drops every yield of the slice, keeping its array. Called with
// proc.mu held, on a proc whose yields are not in the maps (see toLarge).
func (ps *pendingSet) empty() {
	if ps.arr != nil {
		ps.arr.tag = 0
	}
}

// pendingYield is one outstanding yield. seq carries seqTimed when the
// yield has a timer (see markTimed).
type pendingYield struct {
	tag, seq uint64
}

// seqTimed marks, in a pending yield's stored sequence number, a yield
// that has a timer in the timer service (a Sleep, or a deadline set with
// StepOutput.Timeout), so that completing it releases the timer and
// completing any other yield never looks. Sequence numbers never reach
// this bit (see worker.newSeq).
const seqTimed = uint64(1) << 63

// largePending indexes the outstanding yields of a process with many, by
// tag and by sequence number.
type largePending struct {
	byTag u64map // tag -> seq, with seqTimed
	bySeq u64map // seq -> tag
}

// pendingSmallMax is the most yields kept in the slice, where a linear
// search beats a map: the slice of the largest array, whose length is
// 1<<pendingSmallLog with its header.
const (
	pendingSmallLog = 5
	pendingSmallMax = 1<<pendingSmallLog - 1
)

// len returns the number of pending yields. Called with p.mu held.
func (ps *pendingSet) len(x *procLive) int {
	if x != nil && x.large != nil {
		return x.large.byTag.len()
	}
	if ps.arr == nil {
		return 0
	}
	return int(ps.arr.tag)
}

// reserve makes room for n more yields in the slice, unless they will not
// fit it anyway.
// Called with p.mu held.
func (ps *pendingSet) reserve(n int, p *proc, c *pendingCache) {
	if x := p.live(); x != nil && x.large != nil {
		return
	}
	have := ps.small()
	need := len(have) + n
	if need > pendingSmallMax {
		// They will not fit the slice: move to the maps now, sized for
		// all of them, rather than growing the maps one doubling at a
		// time (a step that spawns a hundred children would otherwise
		// allocate each map three times).
		ps.toLarge(p, need, c)
		return
	}
	if need <= cap(have) {
		return
	}
	ps.regrow(need, c)
}

// regrow moves the pending yields to an array with room for need of them,
// at most pendingSmallMax (its length, header included, is need+1 rounded
// up to a power of two), taken from c (or pendingSlices), and gives the
// old one back. Called with p.mu held.
func (ps *pendingSet) regrow(need int, c *pendingCache) {
	old := ps.array()
	size := 1 << bits.Len(uint(need))
	arr := c.get(size)[:size]
	n := copy(arr[1:], ps.small())
	arr[0] = pendingYield{tag: uint64(n), seq: uint64(size)}
	if old != nil {
		c.put(old)
	}
	ps.arr = &arr[0]
}

// pendingSlices recycles the arrays of small pending sets, as
// inboxBuffers does the mailbox buffers (what an array holds is stale and
// never read: regrow writes its header, and the yields are read only up
// to the header's count). A process's array goes back when the process
// ends, when it outgrows it, and when its yields move to the maps.
var pendingSlices = make(pow2Pools[pendingYield], pendingSmallLog+1)

// pendingCache is a worker's own stack of recycled pending arrays per
// size, in front of pendingSlices: the arrays of the short-lived parents
// a worker runs (the inner nodes of a fork-join computation) go from one
// to the next for a few instructions each, where a sync.Pool's pin and
// unpin cost tens. Owner only; a nil cache, for callers outside the
// workers, goes to pendingSlices.
type pendingCache [pendingSmallLog + 1][]*pendingYield

// pendingCacheMax bounds each size's stack; what does not fit goes to
// pendingSlices.
const pendingCacheMax = 32

// get returns an array of size elements, a power of two up to
// pendingSmallMax+1. Owner only.
func (c *pendingCache) get(size int) []pendingYield {
	if c != nil {
		i := bits.Len(uint(size)) - 1
		if n := len(c[i]); n > 0 {
			e := c[i][n-1]
			c[i][n-1] = nil
			c[i] = c[i][:n-1]
			return unsafe.Slice(e, size)[:0]
		}
	}
	return pendingSlices.get(size)
}

// put gives back an array that get (or pendingSlices) returned, which
// nobody uses any more. Owner only.
func (c *pendingCache) put(arr []pendingYield) {
	if c != nil {
		if i, ok := pendingSlices.index(cap(arr)); ok && len(c[i]) < pendingCacheMax {
			c[i] = append(c[i], &arr[:1][0])
			return
		}
	}
	pendingSlices.put(arr)
}

// topTag returns the highest tag in the slice, with has false if the
// slice holds none, as when the yields are in the maps (which leave no
// slice: addAbove then refuses). Called with p.mu held.
func (ps *pendingSet) topTag() (top uint64, has bool) {
	for i := range ps.count() {
		if t := ps.at(i).tag; !has || t > top {
			top, has = t, true
		}
	}
	return top, has
}

// addAbove appends a yield whose tag the caller knows to be above every
// pending tag (see topTag), so that add's search for it is spared, and
// reports true; false, adding nothing, if the slice has no room left or
// the yields are in the maps, which leave no slice (the caller then uses
// add). Called with p.mu held.
func (ps *pendingSet) addAbove(tag, seq uint64) bool {
	n := ps.count()
	if ps.arr == nil || n+1 == ps.arr.seq { // the header takes one element
		return false
	}
	*ps.at(n) = pendingYield{tag, seq}
	ps.arr.tag = n + 1
	return true
}

// add inserts a yield and reports false if its tag was already present.
// Called with p.mu held.
func (ps *pendingSet) add(tag, seq uint64, p *proc, c *pendingCache) bool {
	if x := p.live(); x != nil && x.large != nil {
		if !x.large.byTag.add(tag, seq) {
			return false
		}
		x.large.bySeq.add(seq&^seqTimed, tag)
		return true
	}
	n := ps.count()
	for i := range n {
		if ps.at(i).tag == tag {
			return false
		}
	}
	if n < pendingSmallMax {
		if ps.arr == nil || n+1 == ps.arr.seq { // the header takes one element
			ps.regrow(int(n)+1, c)
		}
		*ps.at(n) = pendingYield{tag, seq}
		ps.arr.tag = n + 1
		return true
	}
	large := ps.toLarge(p, int(n)+1, c)
	large.byTag.add(tag, seq)
	large.bySeq.add(seq&^seqTimed, tag)
	return true
}

// toLarge moves the pending yields from the slice to maps sized for need
// yields, and returns them. Called with p.mu held.
func (ps *pendingSet) toLarge(p *proc, need int, c *pendingCache) *largePending {
	large := &largePending{}
	large.byTag.reserve(need)
	large.bySeq.reserve(need)
	small := ps.small()
	for _, y := range small {
		large.byTag.add(y.tag, y.seq)
		large.bySeq.add(y.seq&^seqTimed, y.tag)
	}
	p.getLive().large = large
	if arr := ps.array(); arr != nil {
		c.put(arr)
	}
	*ps = pendingSet{}
	return large
}

// removeTag deletes the yield with tag and returns its sequence number,
// with seqTimed if it has a timer.
// Called with p.mu held.
func (ps *pendingSet) removeTag(tag uint64, x *procLive) (seq uint64, ok bool) {
	if x != nil && x.large != nil {
		// The maps stay once made: a process that fanned out widely
		// will likely do it again, and regrowing them costs more.
		if seq, ok = x.large.byTag.remove(tag); ok {
			x.large.bySeq.remove(seq &^ seqTimed)
		}
		return seq, ok
	}
	// From the newest: the yield a process issued last is the one most
	// likely to complete first (its children run newest first).
	for i := ps.count(); i > 0; i-- {
		if y := ps.at(i - 1); y.tag == tag {
			seq = y.seq
			ps.removeAt(i - 1)
			return seq, true
		}
	}
	return 0, false
}

// removeSeq deletes the yield with sequence number seq and returns its
// tag, and whether it has a timer.
// Called with p.mu held.
func (ps *pendingSet) removeSeq(seq uint64, x *procLive) (tag uint64, timed, ok bool) {
	if x != nil && x.large != nil {
		if tag, ok = x.large.bySeq.remove(seq); ok {
			stored, _ := x.large.byTag.remove(tag)
			timed = stored&seqTimed != 0
		}
		return tag, timed, ok
	}
	for i := ps.count(); i > 0; i-- { // from the newest, as removeTag
		if y := ps.at(i - 1); y.seq&^seqTimed == seq {
			tag, timed = y.tag, y.seq&seqTimed != 0
			ps.removeAt(i - 1)
			return tag, timed, true
		}
	}
	return 0, false, false
}

// lookupTag returns the sequence number, with seqTimed if it has a
// timer, of the pending yield with tag.
// Called with p.mu held.
func (ps *pendingSet) lookupTag(tag uint64, x *procLive) (seq uint64, ok bool) {
	if x != nil && x.large != nil {
		return x.large.byTag.get(tag)
	}
	for _, y := range ps.small() {
		if y.tag == tag {
			return y.seq, true
		}
	}
	return 0, false
}

// hasSeq reports whether the yield with sequence number seq is pending.
// Called with p.mu held.
func (ps *pendingSet) hasSeq(seq uint64, x *procLive) bool {
	if x != nil && x.large != nil {
		_, ok := x.large.bySeq.get(seq)
		return ok
	}
	for _, y := range ps.small() {
		if y.seq&^seqTimed == seq {
			return true
		}
	}
	return false
}

// markTimed records that the pending yield seq has a timer; it reports
// false if the yield is not pending.
// Called with p.mu held.
func (ps *pendingSet) markTimed(seq uint64, x *procLive) bool {
	if x != nil && x.large != nil {
		tag, ok := x.large.bySeq.get(seq)
		if ok {
			x.large.byTag.set(tag, seq|seqTimed)
		}
		return ok
	}
	small := ps.small()
	for i := range small {
		if small[i].seq&^seqTimed == seq {
			small[i].seq |= seqTimed
			return true
		}
	}
	return false
}

// eachTimed calls f with the sequence number of every pending yield that
// has a timer.
// Called with p.mu held.
func (ps *pendingSet) eachTimed(x *procLive, f func(seq uint64)) {
	if x != nil && x.large != nil {
		x.large.byTag.each(func(_, seq uint64) {
			if seq&seqTimed != 0 {
				f(seq &^ seqTimed)
			}
		})
		return
	}
	for _, y := range ps.small() {
		if y.seq&seqTimed != 0 {
			f(y.seq &^ seqTimed)
		}
	}
}

// removeAt deletes the i'th yield of the slice, moving the last into its
// place. Called with p.mu held.
func (ps *pendingSet) removeAt(i uint64) {
	last := ps.arr.tag - 1
	*ps.at(i) = *ps.at(last)
	ps.arr.tag = last
}
