package scheduler

import (
	"context"
	"runtime"
	"runtime/trace"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/procsched/scheduler/deque"
	"github.com/procsched/scheduler/internal/prefetch"
	"github.com/procsched/scheduler/internal/spin"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// globalCheckInterval: every this many scheduling ticks a worker looks at
// the global queue before its own, so submissions and external wake-ups
// are not starved by a worker that always has local work. 61 is the Go
// runtime's choice: prime, so it does not fall into step with periodic
// workloads.
const globalCheckInterval = 61

// yieldTicks: a worker that has run this many scheduling ticks (a
// process run, or a step of one that continues) since it last came to
// this point, which it looks at each time it publishes its counters
// (see flushTicks), yields its processor to the Go runtime (runtime.Gosched),
// while every worker is running processes and every processor runs a
// worker, and goes on at once, often on the same processor. A worker
// that always finds work otherwise keeps its processor until the
// runtime preempts it, after about 10 ms, so while every worker is busy
// two things wait that long:
//
//   - The garbage collector's background marking. With GOMAXPROCS below
//     four it has no processor of its own: it runs in a processor's
//     scheduling turns, which busy workers never take. A collection's
//     mark phase then lasts until the preemptions come, and all that time
//     every pointer store pays the write barrier and every allocation
//     helps mark. A fork-join tree of a million short processes spends
//     up to 9-14 ms a collection marking without the yield, against at
//     most 2 ms with it.
//   - Any goroutine that a step started or woke: the runtime queues it on
//     the processor that woke it, and no idle processor is there to take
//     it.
//
// At a few hundred nanoseconds a yield, once every 1024 ticks (about
// 100-200 µs of short steps) costs under 1 %. While a worker is parked,
// its processor is free for both; while one searches for work, it yields
// its own processor between its spins (see spin.Backoff); with fewer
// workers than processors (WithWorkers below GOMAXPROCS), a processor
// that runs no worker is there. In each case the yield is skipped: the
// runtime would only wake that other processor and hand it the yielding
// worker, off its warm cache (fan-out takes 12 % longer when searchers do
// not skip it, a skynet tree on one worker with two processors 10 %).
const yieldTicks = 1024

// flushTicks: a worker that has run this many scheduling ticks since it
// last published its counters (see Stats) and its watchdog beat does so
// again after the process it runs. Counted since the last time, not by
// the tick's value: a run of a process that continues adds its steps to
// the tick, so a test of tick%flushTicks after each run would match once
// in many runs.
const flushTicks = 64

// worker is one worker goroutine and its run queue.
//
// How workers wake each other and park is in idle.go.
type worker struct {
	s  *Scheduler
	id int

	// dq is the worker's run queue: the worker is its owner; other workers
	// steal from it.
	dq *deque.Deque[proc]

	// next holds a process woken by the process this worker just ran (a
	// message recipient, an awaiting parent): it runs next, on this warm
	// worker, instead of queueing behind older work. Only the owner stores
	// into it (Swap); the owner takes it with a Swap, and an idle worker
	// may take it with a CompareAndSwap (see steal), so exactly one of
	// them gets the process.
	next atomic.Pointer[proc]
	// held queues the processes that the steps of a continuing process
	// woke and that the next slot could not keep (each new one moves the
	// previous one out of it), until the run ends (see flushHeld). Other
	// workers do not steal from it, so the receivers of a process that
	// tells many of them in turn gather its messages while it runs,
	// instead of being stepped for one or two each on another worker;
	// only from a worker whose run the watchdog found stalled do they
	// take them (see steal). The worker is its owner; the deque's own
	// protocol makes such a steal safe against the owner's pushes.
	held *deque.Deque[proc]
	// heldN counts the pushes into held since the last flush: zero when
	// held is surely empty, so the checks after every run read no atomic.
	// Owner only.
	heldN int
	// holding says that the step being dispatched asked to continue, so
	// the processes it wakes go to held. Owner only.
	holding bool
	// stepping is the process whose Step runs on the worker's plain path
	// (see step), nil between steps: what a panic that work recovers
	// came from. Owner only.
	stepping *proc
	// closing is the process whose Close endDone calls, nil otherwise:
	// as stepping, for a panic of Close. Owner only.
	closing *proc
	// tellClaimed says that the run going on claimed the receiver of its
	// last Tell (see tell): if the process gets events meanwhile,
	// it goes to the next slot rather than stepping again while the
	// receiver waits claimed. Owner only.
	tellClaimed bool
	// later holds a process that used up its step budget while others
	// were queued on this worker: it waits behind them (see requeue)
	// until laterDue, until the queue is empty or until another process
	// uses up its budget, and then goes to the global queue. Only the
	// owner stores into it; the owner takes it with a CompareAndSwap, and
	// so may an idle worker while this one is stalled (see steal), so
	// exactly one of them gets the process; the store and the winning
	// CompareAndSwap hand the process over as a queue would.
	later atomic.Pointer[proc]
	// laterDue is the tick at which later goes to the global queue: the
	// tick it was set at plus the length of the queue then; noLater while
	// nothing waits there, so that findLocal's look costs a comparison.
	// Owner only.
	laterDue uint64
	// direct is a process claimed for one of the worker's next runs, by
	// the end of a child of its on this worker (see completeAwaited) or
	// by a step's last Tell (see tell), and directRun the state
	// word of that run: it is Running already, its events in directEvs.
	// findLocal returns it as it would the next slot's, unless another
	// of its children is on top of the deque (see siblingFirst), and run
	// takes it out. Owner only.
	direct    *proc
	directRun uint64
	// deferred holds parents claimed as direct is, put aside, the latest
	// last, while what their children's runs queued runs first (see
	// deferDirect); each is direct again once that is done, or once
	// maxDeferTicks have passed since its claim (see restoreDue). The
	// entries beyond its length keep their arrays for reuse. Owner only.
	deferred []heldParent
	// directEvs holds the events direct was claimed with, and those of
	// siblings that ended while it was deferred (see siblingFirst); run
	// swaps it with events. directDefers counts the runs it has been
	// deferred for. Owner only.
	directEvs    []Event
	directDefers int
	// keptSeqs are the yields that the last len(keptSeqs) events of
	// directEvs complete: completions of direct's children kept on the
	// worker, their yields still pending, until direct runs (see
	// completeAwaited and applyKept). Owner only.
	keptSeqs []uint64
	// nextRuns counts processes taken from next in a row; at
	// maxNextRuns the worker takes from its queue instead, so a pair that
	// keeps waking each other cannot starve the rest. Owner only.
	nextRuns int

	parker spin.Parker
	// handedSearch is set by the waker that took this worker off the idle
	// list, before it unparks it: the worker wakes up as a searcher (the
	// waker counted it in s.spinning). Read and cleared by the worker after
	// Park returns.
	handedSearch atomic.Bool
	spinning     bool // this worker is counted in s.spinning

	rng  uint64 // xorshift state for victim selection
	tick uint64
	// yieldTick is the tick at which the worker last came to yield its
	// processor (see yieldTicks). Owner only.
	yieldTick uint64
	// flushTick is the tick at which the worker last published its
	// counters and its watchdog beat (see flushTicks). Owner only.
	flushTick uint64
	seq       uint64 // the next yield sequence number (see newSeq); owner only
	// checkGlobal makes the next findLocal look at the global queue first:
	// set when a process that continues gives the global queue its turn.
	checkGlobal bool

	// ownTimers is this worker's timer shard, and timerTick the tick at
	// which it looks at its timers next (see checkTimers). Owner only;
	// timerTick is reset by timerService.add, which the owner calls.
	ownTimers *timerShard
	timerTick uint64

	out    StepOutput
	events []Event
	// eventsUsed is the longest batch w.events has held since it was last
	// cleared: the part of its buffer that may still hold references.
	// Going idle clears that much, not the whole capacity, which a past
	// burst may have made large. Owner only.
	eventsUsed int
	batch      []*proc
	slots      slotCache    // free process-table slots; owner only
	pend       pendingCache // recycled pending arrays; owner only
	spawning   []spawnSlot  // spawnBatch's scratch; owner only
	spawnErrs  []error      // spawnBatch's refusals (see spawnRefused), all nil between its calls; owner only
	initing    *proc        // the child whose Init start runs for startFrom, which recovers its panic; nil otherwise; owner only
	initWhere  string       // "Start" when initing was set by a Goexit of the Start hook (see callStartHook), else empty; owner only
	spawned    []*proc      // spawnBatch's started children, empty between its calls (its array not cleared: see there); owner only
	valuesCtxs []valuesCtx  // the rest of the worker's slab of contexts with values (see newProcCtx); owner only
	// arms holds the timers of the step being dispatched until dispatch
	// adds them to their shards together (see worker.arm). Owner only.
	arms []armed
	// lastMethod and lastMethodID cache the latest interned entry point.
	lastMethod   string
	lastMethodID uint16

	// handoff receives processes made runnable by a handler's Call while
	// the handler runs; see Call.
	handoff handoff

	ctr workerCounters // statistics (see counterID)

	// runCount numbers the worker's runs; each run writes it into the
	// state word of the process it claims (see workerShift). Owner only.
	runCount uint64

	// For the watchdog (see watchdog.go). beat is runCount as of the last
	// flush (every 64 rounds and when the worker goes idle): it stalls
	// only when runs are long. idle is set while the worker has no work
	// (the other workers' timer looks read it too: see pollTimers).
	// watched asks the worker to store each run's process in cur (and
	// stepWatched in stepFlags, set and cleared with it, to mark its
	// steps in stepMark): the watchdog sets it for a worker whose beat has
	// stalled, so a worker with short runs stores nothing per run or step.
	// beat, idle and cur are stored by the worker only at those rare
	// moments and loaded by the watchdog; watched is stored by the
	// watchdog and loaded by the worker.
	beat    atomic.Uint64
	idle    atomic.Bool
	watched atomic.Bool
	cur     atomic.Pointer[proc]
	// stalledProc and stalledRun name a run the watchdog has seen holding
	// the worker for its threshold of wall time: while stalledProc's state
	// word still shows that run, thieves may take the next slot. Stored by
	// the watchdog.
	stalledProc atomic.Pointer[proc]
	stalledRun  atomic.Uint64
	// stepFlags is the one word step loads per step: zero unless the
	// watchdog watches the worker (stepWatched, stored by the watchdog
	// with watched) or a test hook is set (stepHooked, stored with
	// testHookStep).
	stepFlags atomic.Uint32
	// stepMark tells the watchdog whether the worker is inside Step: while
	// watched, the worker adds one to it as it enters each Step and one as
	// it leaves, so it is odd inside Step and even outside, and changes
	// with every step. Stored by the worker only (see markStep), loaded by
	// the watchdog.
	stepMark atomic.Uint64
	// testHookStep, when set (see setTestHookStep), is called by step
	// before it enters Step, standing in for whatever may hold the worker
	// up in the scheduler's own code. Tests only.
	testHookStep atomic.Pointer[func()]

	// directMark is the deque's Mark when direct was claimed or last
	// had a child taken from the deque (see siblingFirst): what lies
	// above it was queued since, by that child's run or later ones, and
	// is no child of direct. directSince is the tick at which direct was
	// claimed, and deferDue the earliest tick at which a parent put
	// aside has waited maxDeferTicks since its claim (noLater while none
	// is put aside). Owner only; rarely looked at, so at the end.
	directMark  int64
	directSince uint64
	deferDue    uint64

	// queued says, for the newest positions of dq, which parent's
	// SpawnAwait child the worker pushed there (see noteQueued), so that
	// siblingFirst can pass over a process that is not direct's child
	// without taking it from the deque and pushing it back. Owner only.
	queued [queuedTags]queuedTag
}

// queuedTags is how many of the deque's newest positions worker.queued
// describes: siblingFirst only ever asks about the newest.
const queuedTags = 64

// queuedTag describes what the worker pushed at position pos of its
// deque: the awaiting parent's ID if it was a SpawnAwait child, else 0.
// A tag whose pos is not the position asked about says nothing.
type queuedTag struct {
	pos    int64
	parent uint64
}

// Bits of worker.stepFlags.
const (
	stepWatched uint32 = 1 << iota // mark each step in stepMark
	stepHooked                     // call testHookStep before each step
)

// setTestHookStep sets or, with nil, clears the worker's test hook. Tests
// only; any goroutine.
func (w *worker) setTestHookStep(h *func()) {
	w.testHookStep.Store(h)
	if h != nil {
		w.stepFlags.Or(stepHooked)
	} else {
		w.stepFlags.And(^stepHooked)
	}
}

// newWorker returns worker id of s. Called by New.
func newWorker(s *Scheduler, id int) *worker {
	w := &worker{
		s:        s,
		id:       id,
		dq:       deque.New[proc](256),
		held:     deque.New[proc](64),
		laterDue: noLater,
		deferDue: noLater,
		rng:      uint64(id)*0x9E3779B97F4A7C15 + 1,
		seq:      uint64(id) + 1,
		batch:    make([]*proc, min(s.globalBatch, DefaultGlobalBatch)), // grown by popGlobal
	}
	for i := range w.queued {
		w.queued[i].pos = -1 // no position yet: see queuedTag
	}
	w.out.clock = s.timers.epoch
	w.ownTimers = &s.timers.shards[id]
	return w
}

// loop is the worker goroutine.
func (w *worker) loop() {
	stopped := false
	gid := w.s.addOwnGoroutine()
	defer func() {
		if !stopped {
			if v := recover(); v != nil {
				panic(v) // not a Goexit: see goexited
			}
			w.goexited(gid)
		}
		w.s.wg.Done()
	}()
	for !w.work() {
		// A step panicked; work ended its process. Carry on.
	}
	if w.spinning {
		w.spinning = false
		w.s.spinning.Add(-1)
	}
	w.stopAlarm()
	w.flush()
	stopped = true
}

// goexited, called by loop as its goroutine gid unwinds without the
// scheduler having stopped, carries the worker on on a new goroutine.
// Only code the worker ran (a Step, Close, Init, handler or hook)
// calling runtime.Goexit gets here: the deferred function around that
// code has ended the process it ran for, and the goroutine cannot be
// saved. A panic the worker does not recover (one of a hook) also
// unwinds through loop, whose deferred function raises it again, as it
// cannot tell the two apart without recovering, and does not call
// goexited: it ends the program as it would have. The new goroutine
// takes over the worker as it is, with the state of the run cut short
// cleared, the old goroutine's place in the wait group (added before
// the old one's is given back) and in the list of the scheduler's own
// goroutines, and the worker's profile labels. Owner only, from loop's
// deferred function.
func (w *worker) goexited(gid uint64) {
	w.stepping, w.closing, w.initing, w.initWhere = nil, nil, nil, ""
	w.holding = false
	w.handoff.end(w)
	w.events = w.events[:0]
	clear(w.arms) // the timers of a dispatch cut short, whose process has ended
	w.arms = w.arms[:0]
	w.flushHeld()
	w.idle.Store(false) // as work starts
	s := w.s
	s.removeOwnGoroutine(gid)
	s.wg.Add(1)
	goLabelled(w.loop, "procsched", "worker", "worker", strconv.Itoa(w.id))
}

// work finds and runs processes until the scheduler stops, and reports
// true then. A Step that panics on the plain path (see step) unwinds to
// here: work ends its process as a step returning the panic as an error
// would have (see recoverStepPanic), and reports false, and the worker
// comes back to it. So a step costs no deferred call of its own: one
// deferred call for the whole loop catches the rare panic.
// Owner only.
func (w *worker) work() (stopped bool) {
	defer w.recoverStepPanic()
	var backoff spin.Backoff
	idle := false
	for w.s.phase.Load() < phaseStopping {
		p := w.findLocal()
		if p == nil {
			if !idle {
				// About to go idle: make the counters exact and drop
				// references to the last steps' events and yields.
				idle = true
				w.idle.Store(true)
				w.flush()
				w.dropStepRefs()
			}
			if queued, _, _ := w.pollTimers(); queued {
				continue
			}
			if w.spinning || w.startSearching() {
				p = w.steal()
			}
		}
		if p != nil {
			if w.spinning {
				w.stopSearching()
			}
			if idle {
				idle = false
				w.idle.Store(false)
			}
			backoff.Reset()
			w.run(p)
			w.flushHeld()
			if w.tick-w.flushTick >= flushTicks {
				w.flushTick = w.tick
				w.flush()
				if w.tick-w.yieldTick >= yieldTicks {
					w.yieldProcessor()
				}
			}
			continue
		}
		if w.spinning && backoff.Spin() {
			w.count(cSpins)
			continue
		}
		w.park()
		backoff.Reset()
	}
	return true
}

// dropStepRefs drops the references to the last steps' events and
// yields that the worker's buffers may still hold, so that they keep
// nothing from the collector while the worker has no work: called by
// work as the worker goes idle, and by a helping caller as it hands the
// helper back (see handBack). Owner only, with no run going on.
func (w *worker) dropStepRefs() {
	w.out.release()
	clear(w.events[:min(w.eventsUsed, cap(w.events))])
	clear(w.directEvs[:min(w.eventsUsed, cap(w.directEvs))]) // run swaps the two
	w.clearDeferred()
	w.eventsUsed = 0
}

// yieldProcessor gives the Go runtime this worker's processor while
// every worker runs processes and there are no more processors than
// workers (see yieldTicks), and starts the count to the next yield
// either way. Reading GOMAXPROCS takes a lock of the runtime's, once
// every yieldTicks ticks. Owner only.
func (w *worker) yieldProcessor() {
	w.yieldTick = w.tick
	s := w.s
	if s.idle.count.Load() != 0 || s.spinning.Load() != 0 || len(s.workers) < runtime.GOMAXPROCS(0) {
		return
	}
	if h := testHookWorkerYield.Load(); h != nil {
		(*h)(w)
	}
	runtime.Gosched()
}

// testHookWorkerYield, when set, is called by yieldProcessor before it
// yields. Tests only; costs a load per yield, once every yieldTicks
// ticks at most.
var testHookWorkerYield atomic.Pointer[func(*worker)]

// recoverStepPanic, deferred by work, recovers a panic raised while
// w.stepping was set: a panic in the Step of that process, which it ends
// with a PanicError as run ends a process whose step failed; or while
// w.closing was set: a panic in the Close that endDone called, whose
// process it ends as finish does after a panic of Close (see
// closePanicked). Any other panic goes on: it is not the user's. Owner
// only.
func (w *worker) recoverStepPanic() {
	p, closing := w.stepping, w.closing
	if p == nil && closing == nil {
		return
	}
	v := recover()
	if v == nil {
		// runtime.Goexit, which goes on: the process ends as after a
		// panic, and then, on a worker, loop carries the worker on on a
		// new goroutine (see goexited); a helping caller's goroutine
		// ends, as Goexit means.
		v = ErrGoexit
	}
	if p == nil {
		w.closePanicked(closing, v)
		return
	}
	w.stepping = nil
	perr := newPanicError("Step", v)
	w.s.recovered(p, perr, via{w: w}, func() { w.stepFailed(p, perr) })
	w.stepFailed(p, perr)
}

// stepFailed ends p, whose step panicked with perr (or called
// runtime.Goexit), as run ends a process whose step failed.
// Owner only, with p Running.
func (w *worker) stepFailed(p *proc, perr *PanicError) {
	_, batch := w.stepped(p, perr)
	w.unreadAfter(p, batch, perr)
	w.end(p, payload.Payload{}, perr)
	w.flushHeld()
}

// unreadAfter counts as unread, and hands the messages among them to the
// DeadLetter hook, the events of p's batch of batch events after those
// its final step said with DoneAfter it had read; a failure does not make
// them read. A step that did not call DoneAfter read its batch. err is
// how the step ended p: should the hook call runtime.Goexit, which cuts
// the run short, p ends here, failed with err, or done if err is nil
// (see deadUnread).
// Worker only, with p Running, after its final step (done, failed or
// panicked) and before its end.
func (w *worker) unreadAfter(p *proc, batch int, err error) {
	if n := w.out.unread(batch); n > 0 {
		w.countN(cUnread, uint64(n))
		w.s.deadUnread(p, p.pid(), w.events[batch-n:batch], via{w: w}, func() {
			if err != nil {
				w.end(p, payload.Payload{}, err)
			} else {
				w.endDone(p)
			}
			w.flushHeld()
		})
	}
}

// findLocal returns work from the worker's next slot, own queue or the
// global queue. Two periodic turns keep it fair: every
// globalCheckInterval ticks it takes one process from the global queue
// first, and every ownQueueInterval ticks the oldest process of its own
// queue (whose owner otherwise works newest first), so nothing queued
// waits for the queue to drain. After maxNextRuns from the next slot in a
// row, the queue goes first. A process in the later slot goes to the
// global queue when it is due or when nothing else is queued here. A
// parent put aside (see deferDirect) is direct again once what was
// queued above its mark has run or its wait is up (see restoreDue), or
// when nothing else is queued here, and then runs as if from the next
// slot, even past that slot's run of turns.
func (w *worker) findLocal() *proc {
	w.tick++
	if w.tick >= w.laterDue {
		w.releaseLater()
	}
	if w.tick >= w.timerTick {
		w.checkTimers()
	}
	if !w.s.unfair {
		if w.tick%globalCheckInterval == 0 || w.checkGlobal {
			w.checkGlobal = false
			if p := w.popGlobalOne(); p != nil {
				return p
			}
		} else if w.tick%ownQueueInterval == globalCheckInterval/2 {
			if p := w.dq.Steal(); p != nil {
				return p
			}
		}
	}
	for {
		if w.nextRuns < maxNextRuns || w.s.unfair {
			// A parent claimed by its child's end goes first, as if from
			// the next slot, unless it waits for a sibling's run.
			if w.direct != nil {
				if c := w.siblingFirst(); c != nil {
					w.nextRuns = 0 // a run from the queue
					return c
				}
				w.nextRuns++
				return w.takeDirect()
			}
			if !raceSkipNext(w) {
				if p := w.takeNext(); p != nil {
					w.nextRuns++
					return p
				}
			}
		}
		// A parent put aside that is due is direct again, and the loop
		// takes it as above (see restore).
		if len(w.deferred) == 0 || w.direct != nil || !w.restoreDue() {
			break
		}
	}
	w.nextRuns = 0
	// Only the owner adds to its deque, so a zero length means empty;
	// checking first spares PopBottom's two atomic stores on the way to
	// the next slot or the global queue.
	if w.dq.Len() > 0 {
		if p := w.dq.PopBottom(); p != nil {
			return p
		}
	}
	if p := w.takeNext(); p != nil {
		return p
	}
	w.releaseLater() // nothing is left to wait behind
	if w.direct != nil {
		// Past the next slot's run of turns, with nothing else queued
		// here: the claimed process goes before the global queue, which
		// had its turn due within the last globalCheckInterval ticks
		// (see mayRunDirect), so that it never waits claimed for another
		// process's step.
		return w.takeDirect()
	}
	if len(w.deferred) > 0 {
		// Nothing else is queued here: a parent put aside runs now,
		// whether or not what its children queued has run (a thief may
		// have it), so the worker never looks further or parks with one
		// held.
		w.restore(len(w.deferred)-1, true)
		return w.takeDirect()
	}
	return w.popGlobal()
}

// maxDirectDefers bounds how many sibling runs a claimed parent waits
// for (see siblingFirst), so that one with many children queued is still
// stepped every so often.
const maxDirectDefers = 64

// siblingFirst returns the process on top of the deque, taken from it,
// if it is another child of the parent claimed in direct: the worker
// runs the child first, and the parent then steps once for both ends
// instead of once for each. Only while the next slot is empty, so that
// what waits there is not put off. Whose child the process on top is,
// the worker noted when it pushed it (see noteQueued): one known to be
// no such child is left in place. One the worker knows nothing of (it
// came by a steal) is taken and looked at, and goes back where it was
// if it is no such child: the process itself is not read before it is
// taken, since once a thief may take it, its record may end and serve
// another process. Owner only.
//
// A process queued since direct's last child was taken (above
// directMark) is no such child: that child's run queued it, most often
// as a child of its own, or a run after it did. Rather than step direct
// now for the ends it holds, and again when that child ends, the worker
// puts direct aside and runs that process (see deferDirect).
func (w *worker) siblingFirst() *proc {
	if w.directDefers >= maxDirectDefers || w.next.Load() != nil || w.dq.Len() == 0 {
		return nil
	}
	m := w.dq.Mark()
	if m > w.directMark {
		return w.deferDirect()
	}
	if t := w.queued[(m-1)&(queuedTags-1)]; t.pos == m-1 && t.parent != w.direct.id.Load() {
		return nil // known to be no child of direct: left in place
	}
	c := w.dq.PopBottom()
	if c == nil {
		return nil
	}
	if a := c.awaited(); a == nil || a.parent != w.direct.id.Load() {
		w.dq.PushBottom(c)
		return nil
	}
	w.directDefers++
	w.directMark = w.dq.Mark()
	return c
}

// heldParent is a parent claimed for a run of the worker, as direct is,
// and put aside (see deferDirect): the state word of its claim, the
// events it holds and the yields they complete (as directEvs and
// keptSeqs), and its directMark, directDefers and directSince.
type heldParent struct {
	p      *proc
	run    uint64
	evs    []Event
	kept   []uint64
	mark   int64
	defers int
	since  uint64
}

// maxDeferred bounds how many parents the worker holds put aside at
// once; with that many, the next one steps for the ends it holds, as
// before any was put aside.
const maxDeferred = 16

// maxDeferTicks bounds how many of the worker's ticks a parent waits
// claimed and put aside: a parent whose child's subtree is large still
// steps every so often for the ends it holds, and reads whatever
// reached its mailbox.
const maxDeferTicks = 256

// deferDirect puts direct aside, claimed as it is, and returns the
// newest process of the deque, taken from it. Put aside, the parent
// keeps the completions of its children that end on this worker, as
// direct does (see completeAwaited), and is direct again once what lies
// above its mark has run (see restoreDue). Nil, with direct left as it
// is, if the worker holds maxDeferred parents aside already or a thief
// took the process. Owner only, from siblingFirst.
func (w *worker) deferDirect() *proc {
	n := len(w.deferred)
	if n == maxDeferred {
		return nil
	}
	c := w.dq.PopBottom()
	if c == nil {
		return nil
	}
	e := w.pushDeferred(w.directMark, w.directSince)
	e.p, e.run, e.defers = w.direct, w.directRun, w.directDefers
	e.evs, w.directEvs = w.directEvs, e.evs[:0]
	e.kept, w.keptSeqs = w.keptSeqs, e.kept[:0]
	w.direct, w.directRun, w.directDefers = nil, 0, 0
	return c
}

// pushDeferred adds an entry to deferred, with room for it, and returns
// it, its mark and since set, its parent for the caller to set (or the
// entry to drop with dropDeferred). Owner only.
func (w *worker) pushDeferred(mark int64, since uint64) *heldParent {
	n := len(w.deferred)
	if n < cap(w.deferred) {
		w.deferred = w.deferred[:n+1]
	} else {
		// Its arrays as large as those it swaps with, which the worker's
		// runs have grown to what they need: a parent put aside for the
		// first time late in a worker's life then makes them grow no more.
		w.deferred = append(w.deferred, heldParent{
			evs:  make([]Event, 0, cap(w.directEvs)),
			kept: make([]uint64, 0, cap(w.keptSeqs)),
		})
	}
	e := &w.deferred[n]
	e.mark, e.since, e.defers = mark, since, 0
	w.deferDue = min(w.deferDue, since+maxDeferTicks)
	return e
}

// dropDeferred drops the entry pushDeferred added last, its parent not
// claimed after all. Owner only.
func (w *worker) dropDeferred() {
	w.deferred = w.deferred[:len(w.deferred)-1]
	w.resetDeferDue()
}

// resetDeferDue sets deferDue from the entries of deferred. Owner only.
func (w *worker) resetDeferDue() {
	w.deferDue = noLater
	for i := range w.deferred {
		w.deferDue = min(w.deferDue, w.deferred[i].since+maxDeferTicks)
	}
}

// heldAside returns the entry of deferred that holds p put aside, or
// nil. Owner only.
func (w *worker) heldAside(p *proc) *heldParent {
	for i := len(w.deferred) - 1; i >= 0; i-- {
		if w.deferred[i].p == p {
			return &w.deferred[i]
		}
	}
	return nil
}

// restoreDue makes the parent put aside last direct again, direct being
// empty, once nothing queued above its mark is left on the deque; or
// the one claimed first, once maxDeferTicks have passed since its claim.
// It reports whether it did. Owner only.
func (w *worker) restoreDue() bool {
	if w.tick >= w.deferDue {
		oldest := 0
		for i := range w.deferred {
			if w.deferred[i].since < w.deferred[oldest].since {
				oldest = i
			}
		}
		w.restore(oldest, true)
		return true
	}
	n := len(w.deferred) - 1
	if w.dq.Len() == 0 || w.dq.Mark() <= w.deferred[n].mark {
		w.restore(n, false)
		return true
	}
	return false
}

// restore makes the parent of w.deferred[i] direct again, with the
// events it holds, and takes it out of deferred; with now, it runs
// next, before any more children of its. It goes first even past the
// next slot's run of turns, which starts again: it was put aside for a
// process that ran instead, or claimed when its child ended, so these
// turns cannot keep the queue waiting as a pair waking each other would.
// direct must be empty. Owner only.
func (w *worker) restore(i int, now bool) {
	w.nextRuns = 0
	n := len(w.deferred) - 1
	if i != n {
		// Moved to the end, where its arrays are kept for reuse. The
		// usual entry restored is the last one put aside (see restoreDue),
		// already there: it is used in place, as copying it (88 bytes, with
		// pointers) twice would cost more than the rest of this.
		e := w.deferred[i]
		copy(w.deferred[i:n], w.deferred[i+1:])
		w.deferred[n] = e
	}
	e := &w.deferred[n]
	w.direct, w.directRun, w.directMark, w.directDefers, w.directSince = e.p, e.run, e.mark, e.defers, e.since
	if now {
		w.directDefers = maxDirectDefers
	}
	w.directEvs, e.evs = e.evs, w.directEvs[:0]
	w.keptSeqs, e.kept = e.kept, w.keptSeqs[:0]
	e.p = nil
	w.deferred = w.deferred[:n]
	if w.directSince+maxDeferTicks == w.deferDue {
		w.resetDeferDue()
	}
}

// clearDeferred drops the references to events that the arrays of the
// deferred entries may still hold, as going idle does for events. Owner
// only, with none put aside.
func (w *worker) clearDeferred() {
	for _, e := range w.deferred[:cap(w.deferred)] {
		clear(e.evs[:min(w.eventsUsed, cap(e.evs))])
	}
}

// takeDirect returns the process in direct for the worker's next run,
// which takes it out of direct (see run). Owner only.
func (w *worker) takeDirect() *proc {
	w.directDefers = 0
	return w.direct
}

// flushHeld moves the processes held during the run that just ended to
// the worker's deque, where other workers can steal them, and wakes one
// to do so. Called by the worker loop after every run, the only place
// processes are held, so the worker never looks for work or parks with
// any held. Owner only.
func (w *worker) flushHeld() {
	if w.heldN > 0 {
		w.moveHeld()
	}
}

// moveHeld is flushHeld's work, out of line so that flushHeld inlines.
// Owner only.
func (w *worker) moveHeld() {
	w.heldN = 0
	pos := w.dq.Mark()
	for w.held.Len() > 0 {
		w.held.StealHalfInto(w.dq)
	}
	w.forgetQueued(pos)
	w.s.wakeWorker()
}

// releaseLater moves the process waiting in later, if any, to the global
// queue, as requeue would have at once. Owner only.
func (w *worker) releaseLater() {
	w.laterDue = noLater
	if l := grab(&w.later); l != nil {
		w.s.global.Push(l)
		w.s.wakeWorker()
	}
}

// noLater is laterDue while the later slot is empty: a tick never reached.
const noLater = ^uint64(0)

// grab empties slot and returns what it held, or nil if it was empty or
// another goroutine emptied it first. Any goroutine; for a worker's next
// or later slot, the owner or a worker stealing from a stalled one.
func grab(slot *atomic.Pointer[proc]) *proc {
	if p := slot.Load(); p != nil && slot.CompareAndSwap(p, nil) {
		return p
	}
	return nil
}

// popGlobalOne takes one process from the global queue, for the periodic
// turn: a batch would land on top of the worker's own queue, which it
// works newest first, and bury what was there.
// Owner only.
func (w *worker) popGlobalOne() *proc {
	q := &w.s.global
	if q.Empty() {
		return nil
	}
	p := q.Pop()
	if p != nil {
		w.count(cGlobalPops)
		w.count(cGlobalItems)
	}
	return p
}

// ownQueueInterval is how often (in ticks) a worker takes the oldest
// process of its own deque instead of the newest. Rarer than the global
// turn: it bounds how long anything queued locally can wait, but each
// such turn starts old work early, which for a depth-first process tree
// (a fork-join computation) means more of the tree alive at once.
const ownQueueInterval = 4 * globalCheckInterval

// maxNextRuns caps consecutive runs from the next slot per scheduling
// round, as the Go runtime lets runnext inherit the time slice.
const maxNextRuns = 3

// takeNext empties the next slot. Owner only.
func (w *worker) takeNext() *proc {
	if w.next.Load() == nil {
		return nil
	}
	return w.next.Swap(nil)
}

// readyNext puts p in the next slot; a process already there moves to the
// queue, where other workers can steal it, or, while the step of a process
// that continues is dispatched, to held until that run ends. Owner only.
func (w *worker) readyNext(p *proc) {
	if raceSkipNext(w) {
		w.pushLocal(p)
		return
	}
	if old := w.next.Swap(p); old != nil {
		if w.holding {
			w.held.PushBottom(old)
			w.heldN++
		} else {
			w.pushLocal(old)
		}
	}
}

// queueLen is the number of processes queued on the worker, in its
// deque, held queue, next slot and later slot. Any goroutine.
func (w *worker) queueLen() int {
	n := w.dq.Len() + w.held.Len()
	if w.next.Load() != nil {
		n++
	}
	if w.later.Load() != nil {
		n++
	}
	return n
}

// pendingCache returns the worker's cache of pending arrays; nil for a
// nil worker (callers outside the workers).
// Any goroutine.
func (w *worker) pendingCache() *pendingCache {
	if w == nil {
		return nil
	}
	return &w.pend
}

// slotCache returns the worker's process-table slot cache; nil for a nil
// worker (callers outside the workers).
// Any goroutine.
func (w *worker) slotCache() *slotCache {
	if w == nil {
		return nil
	}
	return &w.slots
}

// popGlobal takes a batch from the global queue: the first to run now,
// the rest onto the worker's own queue, kept in FIFO order.
// Owner only.
func (w *worker) popGlobal() *proc {
	q := &w.s.global
	if q.Empty() {
		return nil
	}
	want := w.s.globalBatch
	if !w.s.fixedBatch {
		// Take a fair share of what is queued, as the Go runtime does:
		// enough to keep busy, not so much that other workers find
		// nothing.
		want = min(q.Len()/len(w.s.workers)+1, want)
	}
	if want > len(w.batch) {
		w.growBatch(want)
	}
	n := q.PopInto(w.batch[:want])
	if n == 0 {
		return nil
	}
	w.count(cGlobalPops)
	w.countN(cGlobalItems, uint64(n))
	p := w.batch[0]
	if n > 1 {
		// Their records were written last by whoever queued them, most
		// often a caller outside the workers on another core, and each
		// run begins with a locked write to its record's state word:
		// asked for now, all together, the lines arrive while the first
		// runs, where asked for by each run they would arrive one after
		// another, each holding its run up. For the same reason the
		// batch is not read here: its positions in the deque stay
		// undescribed (see noteQueued), which costs siblingFirst a look
		// at the process only if one of them is on top while a parent
		// is claimed.
		for _, x := range w.batch[:n] {
			prefetch.Write2(unsafe.Pointer(x)) // a record spans two lines
		}
		// Pushed together, with one store of bottom for the lot where a
		// push each would cost one each, and in reverse, so that the
		// deque's LIFO end gives them out oldest first.
		rest := w.batch[1:n]
		slices.Reverse(rest)
		pos := w.dq.Mark()
		w.dq.PushBottomN(rest)
		w.forgetQueued(pos)
	}
	clear(w.batch[:n])
	if n > 1 {
		w.s.wakeWorker() // others may share the batch
	}
	return p
}

// growBatch makes the worker's room for a batch from the global queue
// hold at least want processes: twice what it held, up to
// WithGlobalBatch. The room starts at the default batch and grows only
// as larger batches are taken, so that a large WithGlobalBatch costs
// memory only on the workers, and at the times, that take such batches.
// Owner only.
func (w *worker) growBatch(want int) {
	w.batch = make([]*proc, min(max(want, 2*len(w.batch)), w.s.globalBatch))
}

// steal takes half of a victim's queue, trying every other worker once,
// starting at a random one. From a worker whose current run has held it
// for the watchdog's threshold it also takes the process in the next slot
// or the later slot, or half of its held queue, which would otherwise
// wait for that run to end.
// Owner only.
func (w *worker) steal() *proc {
	ws := w.s.workers
	n := len(ws)
	if n == 1 {
		return nil
	}
	start := int(w.random() % uint64(n))
	stride := 1
	if raceEnabled {
		// Race builds vary the order, so that tests do not lean on one.
		stride = raceStride(w, n)
	}
	for i := range n {
		v := ws[(start+i*stride)%n]
		if v == w {
			continue
		}
		w.count(cStealAttempts)
		if moved := v.dq.StealHalfInto(w.dq); moved > 0 {
			w.forgetQueued(w.dq.Mark() - int64(moved))
			w.count(cSteals)
			w.countN(cStolen, uint64(moved))
			return w.dq.PopBottom()
		}
		if v.stalledNow() {
			p := grab(&v.next)
			if p == nil {
				p = grab(&v.later)
			}
			if p != nil {
				w.count(cSteals)
				w.count(cStolen)
				return p
			}
			if moved := v.held.StealHalfInto(w.dq); moved > 0 {
				w.forgetQueued(w.dq.Mark() - int64(moved))
				w.count(cSteals)
				w.countN(cStolen, uint64(moved))
				return w.dq.PopBottom()
			}
		}
	}
	return nil
}

// random returns the next number of the worker's xorshift generator. Owner only.
func (w *worker) random() uint64 {
	x := w.rng
	x ^= x << 13
	x ^= x >> 7
	x ^= x << 17
	w.rng = x
	return x
}

// pushLocal queues p on this worker's own queue and lets a parked worker
// know there is work to steal. Worker only.
func (w *worker) pushLocal(p *proc) {
	w.noteQueued(w.dq.Mark(), p)
	w.dq.PushBottom(p)
	w.s.wakeWorker()
}

// pushLocalN is pushLocal of each of ps in order, with one store that
// shows them all to thieves (see deque.PushBottomN) and one wake-up.
// Worker only.
func (w *worker) pushLocalN(ps []*proc) {
	if len(ps) == 0 {
		return
	}
	pos := w.dq.Mark()
	for i, p := range ps {
		w.noteQueued(pos+int64(i), p)
	}
	w.dq.PushBottomN(ps)
	w.s.wakeWorker()
}

// noteQueued records in w.queued whose SpawnAwait child p is, about to
// be pushed at position pos of the deque. Before the push, p is the
// worker's alone and the parent its start wrote stays put; once pushed,
// a thief may take it, run and end it, and give its record to another
// process, whose start writes the parent anew: that is why siblingFirst
// does not read it from the process on the deque, and why this comes
// before the push, not after. A tag only spares siblingFirst a pop:
// whatever it pops it checks again, so a tag that is out of date costs
// time, never correctness. Owner only, before each push to w.dq (see
// also forgetQueued).
func (w *worker) noteQueued(pos int64, p *proc) {
	var parent uint64
	if a := p.awaited(); a != nil {
		parent = a.parent
	}
	w.queued[pos&(queuedTags-1)] = queuedTag{pos: pos, parent: parent}
}

// forgetQueued drops the tags of the deque's positions from pos up: what
// was moved there without noteQueued (stolen or held processes, a batch
// from the global queue) is left undescribed, for siblingFirst to look
// at the slow way. Owner only.
func (w *worker) forgetQueued(pos int64) {
	for i := max(pos, w.dq.Mark()-queuedTags); i < w.dq.Mark(); i++ {
		w.queued[i&(queuedTags-1)].pos = -1
	}
}

// run claims p and steps it until it waits, finishes or uses up its
// budget.
// Owner only.
func (w *worker) run(p *proc) {
	s := w.s
	var running uint64
	w.tellClaimed = false
	if p == w.direct {
		// Claimed by completeAwaited or by a Tell, its events in
		// directEvs: the only run that starts with events in hand.
		running = w.directRun
		w.direct, w.directRun = nil, 0
		w.events, w.directEvs = w.directEvs, w.events[:0]
		if len(w.keptSeqs) > 0 {
			w.applyKept(p)
		}
	} else {
		w.runCount++
		running = stRunning | uint64(w.id)<<workerShift | w.runCount<<runShift
		// The first step gets no events, even if some arrived while the
		// process waited in a queue (their senders saw it Ready and set
		// no flag): before it may wait after that step, the run looks at
		// its mailbox (see beforeWait). wbStepped is the previous
		// runner's, handed over with the process through the queue it
		// came from.
		if !p.state.CompareAndSwap(stReady, running) {
			// Completed by a shutdown deadline while it sat in a queue.
			return
		}
	}
	if w.watched.Load() {
		w.cur.Store(p)
	}
	if s.forcing() {
		w.forceClaimed(p)
		return
	}
	if p.inbox.wbits&wbStepped == 0 {
		p.inbox.wbits |= wbStepped | wbUnlooked // see beforeWait
	} else if len(w.events) == 0 { // not claimed with its events in hand
		w.events = p.drain(w.events[:0])
	}
	// Decided once per run, not per step: whether steps are traced, and
	// whether the End hook wants them counted.
	traced := trace.IsEnabled()
	var timing *procTiming
	if s.hooks.End != nil {
		timing = p.timing()
	}
	for steps := 1; ; steps++ {
		if steps > 1 {
			w.events = p.drain(w.events[:0])
		}
		w.out.reset(p.pid())
		if timing != nil {
			timing.steps++ // before the step: the process is ours until it returns
		}
		var err error
		if traced {
			err = w.tracedStep(p)
		} else {
			err = w.step(p)
		}
		status, batch := w.stepped(p, err)
		if err != nil {
			w.unreadAfter(p, batch, err)
			w.end(p, payload.Payload{}, err)
			return
		}
		if status == statusDone {
			if w.out.unread(batch) > 0 { // asked here: most ends pay no call
				w.unreadAfter(p, batch, nil)
			}
			w.endDone(p)
			return
		}
		if s.forcing() {
			w.force(p)
			return
		}
		if status == statusContinue {
			// Every step counts as a scheduling tick, so a process that
			// keeps continuing gives the global queue its turn too.
			w.tick++
			if w.tick%globalCheckInterval == 0 && !s.global.Empty() && !s.unfair {
				p.state.Store(stReady)
				w.pushLocal(p)
				w.checkGlobal = true
				return
			}
			// A process that continues may take long steps, which the
			// spacing of the looks by ticks cannot see: look at least
			// every other step.
			if (w.tick >= w.timerTick || w.tick%2 == 0) && w.checkTimers() {
				// Timers woke processes: p goes behind them.
				p.state.Store(stReady)
				s.global.Push(p)
				return
			}
			if steps < s.stepBudget {
				p.state.Store(running) // events flagged meanwhile are drained next
				continue
			}
			w.requeue(p)
			return
		}
		next := stIdle
		if p.hasPending.Load() {
			next = stBlocked
		}
		// It waits unless events came before its first step (see
		// beforeWait) or since the step began (see settle).
		if (p.inbox.wbits&(wbBigInbox|wbUnlooked) == 0 || !w.beforeWait(p)) && w.settle(p, running, next) {
			return
		}
		// Events arrived: step again, within the budget, unless the step
		// claimed the receiver of its Tell, which then runs first.
		if w.tellClaimed {
			p.state.Store(stReady)
			w.readyNext(p)
			return
		}
		if steps >= s.stepBudget {
			w.requeue(p)
			return
		}
	}
}

// beforeWait does what a run leaves for when its process, Running,
// would wait: it lets a large mailbox buffer go (wbBigInbox: see
// shrinkInbox) and, after the process's first step, looks under the lock
// for events that came while it was Ready in a queue (wbUnlooked): their
// senders set no flag, and the first step got none of them. It reports
// whether it found any; the process must then step again. Events that
// came after the claim flagged the state word, which makes settle's
// compare-and-swap fail. (The claim could flag the state word itself, as
// if an event had come, but that costs a failed compare-and-swap and a
// store more, and most first steps end the process or continue.)
// Owner only, with p Running.
func (w *worker) beforeWait(p *proc) bool {
	if p.inbox.wbits&wbBigInbox != 0 {
		p.shrinkInbox()
	}
	if p.inbox.wbits&wbUnlooked == 0 {
		return false
	}
	p.inbox.wbits &^= wbUnlooked
	return p.hasEvents()
}

// completeAwaited completes the SpawnAwait yield of the process parent
// that started the child that ended as from, on this worker, with the
// child's result or err: the event is setYieldResult's, and the yield's
// sequence number the child's (see childSeq). If the parent waits for it,
// and the worker would take a process from its next slot at its next tick
// anyway, the worker claims the parent at once and runs it as if from the
// next slot, with the event in its batch (see direct): it skips the trip
// through the next slot, the claim and the drain, which a parent woken by
// each of its children in turn would otherwise pay every time. A parent
// claimed so already, which waits for the run of this child (see
// siblingFirst), gets the event in its batch too, without its lock when
// nothing forbids it: the yield is then completed when the parent's run
// starts (see applyKept); so does a parent claimed and put aside (see
// deferDirect). A parent that the worker would not take at its next tick
// is claimed all the same and put aside, if there is room, to run once
// what is queued above the deque's mark now has run: it would otherwise go
// to the next slot and step before its other children, queued there, and
// once more for their ends. Otherwise it completes the yield as
// Scheduler.complete does. Worker only, after the child is closed.
func (w *worker) completeAwaited(parent uint64, from relay.PID, result payload.Payload, err error) {
	s := w.s
	seq := childSeq(from.ID)
	if s.phase.Load() == phaseStopped {
		return
	}
	pp := s.table.lookup(parent)
	if pp == nil {
		return
	}
	// Claimed already, as direct or put aside (see deferDirect), for
	// this child's run: the completion joins the others.
	var evs *[]Event
	var kept *[]uint64
	var run uint64
	if w.direct == pp {
		evs, kept, run = &w.directEvs, &w.keptSeqs, w.directRun
	} else if e := w.heldAside(pp); e != nil {
		evs, kept, run = &e.evs, &e.kept, e.run
	}
	var d *directClaim
	var dc directClaim
	var aside *heldParent
	switch {
	case evs != nil:
		// Kept without the parent's lock while nothing has reached its
		// mailbox since the claim (no flagWake: the completion is older
		// than anything there) and no timer of its may complete the
		// yield first.
		if pp.inbox.wbits&wbTimed == 0 && pp.state.Load()&flagWake == 0 {
			*evs = append(*evs, Event{})
			(*evs)[len(*evs)-1].setYieldResult(from, result, err)
			*kept = append(*kept, seq)
			return
		}
		dc = directClaim{claim: run, events: evs, held: true}
		d = &dc
	case w.direct == nil && w.mayRunDirect():
		dc = directClaim{claim: w.nextRunWord(), events: &w.directEvs}
		d = &dc
	case len(w.deferred) < maxDeferred:
		// Not for the next run: claimed all the same, and put aside at
		// once (see deferDirect), to be direct again once what lies on
		// the deque above its mark has run.
		aside = w.pushDeferred(w.dq.Mark(), w.tick)
		dc = directClaim{claim: w.nextRunWord(), events: &aside.evs}
		d = &dc
	}
	var ev Event
	ev.setYieldResult(from, result, err)
	c, cerr := pp.completeFor(&ev, seq, nil, d, parent)
	if aside != nil && !dc.claimed {
		w.dropDeferred()
	}
	if cerr != nil {
		return
	}
	s.letGo(c)
	if dc.held {
		return
	}
	if dc.claimed {
		w.runCount++
		if aside != nil {
			aside.p, aside.run = pp, dc.claim
		} else {
			w.direct, w.directRun, w.directMark, w.directSince = pp, dc.claim, w.dq.Mark(), w.tick
		}
		w.countWoken(c.woken)
		return
	}
	if c.woken != 0 {
		s.woke(pp, c.woken, via{w: w})
	}
}

// applyKept completes, in one hold of p's lock, the yields of the
// completions that completeAwaited kept for p, the last len(w.keptSeqs)
// events of w.events, when p, claimed, starts its run: each yield leaves
// the pending set and its event gets the yield's tag, as in completeFor.
// They are SpawnAwait yields, which hold no call context and no monitor,
// and p has no timer (see wbTimed), so that is all there is to do. An
// event whose yield is no longer pending, which another completer (a
// CompleteYield of its tag) took in the meantime, is dropped, as
// completeFor would have refused it. Owner only, at the start of p's run.
func (w *worker) applyKept(p *proc) {
	base := len(w.events) - len(w.keptSeqs)
	n := base
	p.mu.Lock()
	x := p.live()
	for i, seq := range w.keptSeqs {
		tag, _, ok := p.pending.removeSeq(seq, x)
		if !ok {
			continue
		}
		w.events[base+i].Tag = tag
		if n != base+i {
			w.events[n] = w.events[base+i]
		}
		n++
	}
	p.notePending(x)
	p.mu.Unlock()
	clear(w.events[n:])
	w.events = w.events[:n]
	w.keptSeqs = w.keptSeqs[:0]
}

// nextRunWord is the Running state word of the worker's next run, which
// a claim for that run (see direct) stores. Owner only.
func (w *worker) nextRunWord() uint64 {
	return stRunning | uint64(w.id)<<workerShift | (w.runCount+1)<<runShift
}

// mayRunDirect reports whether findLocal, at the next tick, would take a
// process from the next slot before anything else: not a tick for the
// global queue or the own queue's oldest, no timer or later slot due,
// and the next slot's run of turns not used up, or used up with nothing
// else queued on the worker. If not, the parent is put aside at once
// (see completeAwaited), or, with maxDeferred put aside already, goes to
// the next slot, where a worker that the watchdog finds stalled can
// lose it to another. Owner only.
func (w *worker) mayRunDirect() bool {
	if raceSkipNext(w) {
		return false
	}
	t := w.tick + 1
	if t >= w.laterDue || t >= w.timerTick {
		return false
	}
	if w.s.unfair {
		return true
	}
	if w.checkGlobal || t%globalCheckInterval == 0 || t%ownQueueInterval == globalCheckInterval/2 {
		return false
	}
	// Past the next slot's run of turns only while nothing else is
	// queued on this worker, which that run would keep waiting; findLocal
	// then runs the claimed process before the global queue.
	return w.nextRuns < maxNextRuns || (w.dq.Len() == 0 && w.next.Load() == nil && w.held.Len() == 0)
}

// settle moves the Running process p (whose state word without flagWake
// is running) to the waiting state next unless
// events were queued for it since its step began; it reports whether p
// now waits. A sender appends its event before it looks at the state, and
// sets flagWake if it finds p Running, which makes the CAS fail. The flag
// is cleared before the mailbox is looked at, so an event appended after
// that look sets it again and the next CAS fails too: no event is left
// behind a waiting process, and no step runs with an empty batch because
// of an event that the last drain already took.
// Worker only, with p Running.
func (w *worker) settle(p *proc, running, next uint64) bool {
	for {
		if p.state.CompareAndSwap(running, next) {
			if next == stBlocked {
				w.count(cBlockedIn)
			} else {
				w.count(cIdleIn)
			}
			if w.s.forcing() {
				w.s.tryForce(p)
			}
			return true
		}
		p.state.Store(running)
		if p.hasEvents() {
			return false
		}
	}
}

// requeue puts p, still Running, behind other work: on the global queue,
// where every worker looks within globalCheckInterval ticks. If processes
// are queued on this worker, p first waits behind them in the later slot,
// for as many ticks as there are of them, until the queue is empty (see
// findLocal) or until another process uses up its budget here: a
// process that keeps continuing and wakes others with its messages (one
// telling a thousand receivers in turn) would otherwise be back after
// globalCheckInterval ticks, and with one worker the receivers it woke
// last would take every turn in between while the others gathered
// hundreds of messages each. One process waits there at a
// time: one that waits there when p uses up its budget used up its own
// first, and goes to the global queue ahead of p. Were p to go there
// ahead of it, the global queue's next turn could give p its worker
// again at once, a second budget in a row while the others waited.
// Worker only, with p Running.
func (w *worker) requeue(p *proc) {
	p.state.Store(stReady)
	w.count(cRequeues)
	w.releaseLater()
	if n := w.dq.Len() + w.held.Len(); n > 0 && !w.s.unfair {
		w.laterDue = w.tick + uint64(n)
		w.later.Store(p)
		return
	}
	w.s.global.Push(p)
	w.s.wakeWorker()
}

// stepped does what follows a step of p that returned err: the count of
// the events it was given and the dispatch of what it wrote. It returns
// the step's status and how many events it was given. Worker only, with
// p Running.
func (w *worker) stepped(p *proc, err error) (st status, batch int) {
	batch = len(w.events)
	w.eventsUsed = max(w.eventsUsed, batch)
	w.events = w.events[:0]
	w.count(cSteps)
	st = w.out.status
	if len(w.out.yields) > 0 { // a leaf's step, or a parent's last, has none
		// A process that continues holds what its step wakes until its
		// run ends (see held).
		w.holding = st == statusContinue
		w.dispatch(p, err == nil && st == statusWait)
		w.holding = false
	}
	return st, batch
}

// tracedStep is step inside a runtime/trace region named "step", with the
// process's PID and entry point logged, for when a trace is being taken.
// Its panics are recovered here, so that the region ends.
// Worker only, with p Running.
func (w *worker) tracedStep(p *proc) error {
	ctx := context.Background()
	r := trace.StartRegion(ctx, "step")
	trace.Log(ctx, "process", p.pid().String()+" "+w.s.methodOf(p))
	defer r.End()
	return w.stepMarked(p, w.stepFlags.Load())
}

// step calls Step, its panics turned into errors. On the plain path, a
// panic unwinds to work, which ends the process (see recoverStepPanic):
// the step pays two stores to the worker's own memory for it instead of
// a deferred call. While the watchdog watches the worker, or a test hook
// is set, it marks the step's start and end (see stepMarked), and
// recovers the panic itself.
// Worker only, with p Running.
func (w *worker) step(p *proc) error {
	if f := w.stepFlags.Load(); f != 0 {
		return w.stepMarked(p, f)
	}
	w.stepping = p
	err := p.impl.Step(w.events, &w.out)
	w.stepping = nil
	return err
}

// stepMarked is step while stepFlags f is not zero, and for a traced
// step: it recovers a panic of Step itself.
// Worker only, with p Running.
func (w *worker) stepMarked(p *proc, f uint32) (err error) {
	w.enterStep(f)
	defer w.leaveStep(f)
	defer w.recoverStep(p, &err)
	w.stepping = p // left set by a runtime.Goexit, for recoverStepPanic
	err = p.impl.Step(w.events, &w.out)
	w.stepping = nil
	return err
}

// recoverStep, deferred around Step, turns a panic in it into *err. A
// runtime.Goexit, which cannot be recovered, goes on to work, whose
// recoverStepPanic ends the process, named by w.stepping.
// Worker only, with p Running.
func (w *worker) recoverStep(p *proc, err *error) {
	if v := recover(); v != nil {
		w.stepping = nil
		perr := newPanicError("Step", v)
		// A Goexit of the Panic hook cuts run short too: p ends here.
		w.s.recovered(p, perr, via{w: w}, func() { w.stepFailed(p, perr) })
		*err = perr
	}
}

// enterStep runs the test hook if one is set, then marks the start of a
// step if the watchdog watches the worker. Owner only.
func (w *worker) enterStep(f uint32) {
	if f&stepHooked != 0 {
		if h := w.testHookStep.Load(); h != nil {
			(*h)()
		}
	}
	if f&stepWatched != 0 {
		w.markStep()
	}
}

// leaveStep marks the end of a step that enterStep marked. Owner only.
func (w *worker) leaveStep(f uint32) {
	if f&stepWatched != 0 {
		w.markStep()
	}
}

// markStep moves stepMark on by one, at the start and at the end of a
// step. Owner only. The store pairs with the watchdog's load: a mark
// it sees tells it where the worker has been since storing it.
func (w *worker) markStep() { w.stepMark.Store(w.stepMark.Load() + 1) }

// end completes the Running process p.
// Worker only, with p Running.
func (w *worker) end(p *proc, result payload.Payload, err error) {
	p.state.Store(stEnded)
	w.s.finish(p, via{w: w}, result, err, false)
}

// endDone completes the Running process p, whose step just finished
// with Done and w.out.result, as end does, but calls its Close with no
// deferred call of its own: with w.closing set, a panic of Close unwinds
// to work, whose recoverStepPanic ends the process from there with the
// PanicError (see closePanicked), as callClose would have returned
// it. The caller returns right after, to work, so nothing is skipped by
// the unwinding that recoverStepPanic does not do. A few dozen
// instructions fewer on the end of every process that finishes in a
// step. Worker only, with p Running, from run.
func (w *worker) endDone(p *proc) {
	p.state.Store(stEnded)
	s := w.s
	s.timers.release(p)
	w.closing = p
	p.impl.Close()
	w.closing = nil
	if !w.endQuiet(p) {
		s.finishClosed(p, via{w: w}, w.out.result, nil, false)
	}
}

// endQuiet ends p, which endDone moved to Ended and closed, as
// finishClosed would, when its end has nothing to hand on but its result:
// no Handle, no End hook, and, as closeQuiet finds under the record's
// lock, no unread event, cancellation or live part. Most short processes
// end so (the nodes of a fork-join tree, the processes a loop starts with
// Spawn), and skip the general end's look at each of those things and at
// the forced end, the error and the shutdown's log, which cost a fork-join
// node about a twentieth of its instructions. What is left is what
// finishClosed does then, in its order but for the end's count, which
// comes after the record is closed instead of before (it still comes
// before the result is handed on, as Stats promises): the record left for
// its slot's next process, the end counted, the result to the awaiting
// parent, and the ID freed. It reports false, having done nothing, if p's
// end is not such a one; the caller then calls finishClosed. Worker only,
// from endDone.
func (w *worker) endQuiet(p *proc) bool {
	s := w.s
	if s.hooks.End != nil {
		return false
	}
	id := p.id.Load() // p is Ended, and its ID stays until closeQuiet
	next := p.reuseID(id)
	if next == 0 || !p.closeQuiet(next) {
		return false
	}
	p.impl = nil
	s.releaseProc()
	w.count(cCompleted)
	s.endCounted() // may release a Shutdown
	if a := p.awaited(); a != nil {
		w.completeAwaited(a.parent, relay.PID{Node: p.node, ID: id}, w.out.result, nil)
	}
	// Last: once the ID is free, this worker may give the record to the
	// next process it starts.
	s.table.release(id, w.slotCache())
	return true
}

// closePanicked ends p, whose Close, called by endDone, panicked with
// v, with the PanicError as its error, as finish does with the one
// callClose returns. Owner only, from recoverStepPanic.
func (w *worker) closePanicked(p *proc, v any) {
	w.closing = nil
	perr := newPanicError("Close", v)
	closed := func() {
		w.s.finishClosed(p, via{w: w}, w.out.result, perr, false)
		w.flushHeld()
	}
	w.s.recovered(p, perr, via{w: w}, closed)
	closed()
}

// runCut ends the process whose run on this worker a runtime.Goexit of
// the DeadLetter hook cut short, if there is one: the hook ran as the
// worker carried out the yields of that process's step, which the
// goroutine, ending, cannot finish. The process fails, as after a Goexit
// in a handler, with a PanicError for [ErrGoexit] whose Where is
// "DeadLetter", and the worker goes on on a new goroutine (see
// goexited). The process is the one whose step output the worker holds,
// if it is still Running on this worker: no other can be, and between
// runs none is. Owner only, from callDeadLetter's deferred function.
func (w *worker) runCut() {
	p, err := w.s.lookup(w.out.self)
	if err != nil {
		return
	}
	st := p.state.Load()
	if st&stateMask != stRunning || (st>>workerShift)&workerMask != uint64(w.id) || p.id.Load() != w.out.self.ID {
		return
	}
	perr := newPanicError("DeadLetter", ErrGoexit)
	cut := func() { w.endCut(p, perr) }
	w.s.recovered(p, perr, via{w: w}, cut)
	cut()
}

// endCut ends p, Running on w, whose run a runtime.Goexit cut short
// (in a handler, or in a hook called as its step's yields were carried
// out), with perr, as after a step that failed: what the run held is
// let go first. The worker then goes on on a new goroutine (see
// goexited). Worker only, with p Running.
func (w *worker) endCut(p *proc, perr error) {
	w.handoff.end(w)
	w.holding = false
	w.end(p, payload.Payload{}, perr)
	w.flushHeld()
}

// forceClaimed forces p, just claimed for a run, at a shutdown deadline:
// the completions it was claimed with go unread, as they would have in
// its mailbox, even if the DeadLetter hook calls runtime.Goexit (see
// deadUnread). Worker only, with p Running.
func (w *worker) forceClaimed(p *proc) {
	if n := len(w.events); n > 0 {
		w.countN(cUnread, uint64(n))
		w.s.deadUnread(p, p.pid(), w.events, via{w: w}, func() {
			w.events = w.events[:0]
			w.force(p)
		})
		w.events = w.events[:0]
	}
	w.force(p)
}

// force completes the Running process p at a shutdown deadline.
// Worker only, with p Running.
func (w *worker) force(p *proc) {
	p.state.Store(stEnded)
	w.s.finish(p, via{w: w}, payload.Payload{}, ErrForced, true)
}

// handoff passes processes made Ready by a handler's Call to the worker
// that runs the handler, so they stay local, without ever letting another
// goroutine touch the worker's deque: a Call used after its handler
// returned (from another goroutine) finds the handoff closed and uses the
// global queue.
type handoff struct {
	mu    sync.Mutex
	open  bool
	procs []*proc
}

// offer queues p for the worker if a handler is running; it reports false
// if not, and the caller queues p globally.
func (h *handoff) offer(p *proc) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.open {
		return false
	}
	h.procs = append(h.procs, p)
	return true
}

// begin opens the handoff before a handler runs. Owner only.
func (h *handoff) begin() {
	h.mu.Lock()
	h.open = true
	h.mu.Unlock()
}

// end closes the handoff and moves what it received to dq.
// Owner only.
func (h *handoff) end(w *worker) {
	h.mu.Lock()
	h.open = false
	procs := h.procs
	h.procs = h.procs[:0]
	h.mu.Unlock()
	for i, p := range procs {
		w.pushLocal(p)
		procs[i] = nil
	}
}
