package scheduler

import (
	"context"
	"fmt"
	"reflect"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// Submit starts process p at entry point method with input. It assigns
// the process a PID that is never reused, calls p.Init synchronously (on
// the caller's goroutine) with the process context, and queues the
// process to run. The returned [Handle] names the process and yields its
// result.
//
// If Init fails or panics, Submit calls p.Close and returns an error
// wrapping [ErrInit] and Init's error; the process never runs. Submit also
// fails with [ErrNilProcess], [ErrEmptyMethod], [ErrNilContext], ctx's
// error if ctx is already done, [ErrInvalidOption] for an option out of
// range, [ErrTooManyProcesses] beyond [WithMaxProcesses] (or when the
// process table is full; at once: it does not wait for a process to
// end), and [ErrClosed] once Shutdown has begun; Init is not called then.
//
// ctx bounds the submission only: the process context carries ctx's
// values but not its cancellation (see [Process]).
//
// Submit never waits for the workers, but a caller that has run a
// thousand starts or more ahead of them (a few thousand just after the
// global queue has grown) yields its processor (runtime.Gosched) once
// every few dozen starts, so that where processors are fewer than
// the goroutines that want them (GOMAXPROCS=1, say) the workers run the
// processes queued so far instead of the caller queueing a time slice's
// worth. With [WithCallerHelp], the caller runs some of them itself
// instead.
//
// A caller that will not wait for the process may drop the Handle: the
// process runs the same. An ended process's record and result stay in
// memory while a Handle to it is kept; the scheduler itself keeps only a
// bounded number of ended records, for reuse.
func (s *Scheduler) Submit(ctx context.Context, p Process, method string, input payload.Payloads, opts ...SubmitOption) (Handle, error) {
	pr, _, err := s.submitOutside(ctx, p, method, input, opts, true)
	return Handle{p: pr}, err // pr is nil on error: the zero Handle
}

// Spawn starts process p at entry point method with input as Submit
// does, and with the same errors, but returns only the process's PID:
// nothing keeps its result, as nothing keeps that of a child a step
// spawns without awaiting it. It is for work whose outcome reaches its
// caller another way (a message, shared state it updates, a monitor, the
// End hook), as a pool's fire-and-forget task does. Such a process costs
// less than one with a Handle: once it has ended, its record may serve a
// later process, where a Handle would keep it, so a caller that starts
// processes in a loop allocates fewer records and gives the garbage
// collector less to do.
//
// Its context is not its record (see [Process]); like a spawned child's,
// it reports the process's end once the process has ended, even after
// the record serves another.
func (s *Scheduler) Spawn(ctx context.Context, p Process, method string, input payload.Payloads, opts ...SubmitOption) (relay.PID, error) {
	_, pid, err := s.submitOutside(ctx, p, method, input, opts, false)
	return pid, err
}

// submitOutside is Submit and Spawn. The usual start, with a context and
// no options, by a scheduler with no limit on its processes and no Start
// or End hook, it carries out itself; anything else goes to submit. It
// does what submit, admit and start do for such a start, in the same
// order and with the same errors, in one function: the general path
// passes a dozen arguments from call to call and looks at a branch for
// every case it serves (options, a limit, a worker's caches, a parent's
// values or awaiting, hooks). A loop outside the workers that starts
// processes goes at its caller's speed, and the general path costs it
// about 800 instructions a start where this one costs about 565. Any
// goroutine.
func (s *Scheduler) submitOutside(ctx context.Context, p Process, method string, input payload.Payloads, opts []SubmitOption, handle bool) (*proc, relay.PID, error) {
	if ctx == nil || len(opts) != 0 || s.maxProcs > 0 || s.hooks.Start != nil || s.hooks.End != nil {
		return s.submit(ctx, nil, p, method, input, opts, via{}, handle)
	}
	var values context.Context // as in submit
	if hasValues(ctx) {
		// Background and TODO are never done: only another context's
		// Err is worth its call.
		if err := ctx.Err(); err != nil {
			return nil, relay.PID{}, err
		}
		values = ctx
	}
	if err := checkStart(p, method); err != nil {
		return nil, relay.PID{}, err
	}
	s.countOutside(cStarted, 1)
	// What admitCounted does with no limit on the processes.
	if s.closing() {
		s.countEnd(via{}, cRefused)
		return nil, relay.PID{}, ErrClosed
	}
	id, ok := s.table.alloc(nil, !handle)
	if !ok {
		s.countEnd(via{}, cRefused)
		return nil, relay.PID{}, errTableFull
	}
	// What start does with no worker, parent, awaiter, mailbox or hook.
	mid, ok := s.methods.lastMethod(method)
	if !ok {
		mid = s.internMethod(method, nil)
	}
	pr, reused := s.record(id, mid, handle, false)
	if !reused {
		pr.setFreshID(id)
		pr.node, pr.methodID = s.node, mid
	}
	pr.impl = p
	switch {
	case mid == 0:
		pr.extra.Store(startExtra(values, nil, method))
	case values != nil:
		pr.extra.Store(&procExtra{values: values})
	}
	pctx := context.Context(pr)
	switch {
	case handle:
	case values == nil:
		pctx = genCtxFor(pr, genOf(id)) // no values: the record itself (see newProcCtx)
	default:
		pctx = (*worker)(nil).newProcCtx(pr, id)
	}
	if err := s.callInit(pr, id, pctx, method, input, via{}); err != nil {
		s.initFailed(pr, id, err, via{})
		return nil, relay.PID{}, err
	}
	// Published as start publishes a process: the same lines, written
	// out in both, since a function of their own would cost a call at
	// every child a step starts.
	if reused {
		pr.state.Store(stReady)
	} else {
		s.table.publish(pr)
	}
	if s.closing() {
		_, _ = pr.terminate(pfShutdownCancel, id)
	}
	ahead := s.global.Push(pr) // enqueue's case for a caller outside the workers
	s.wakeWorker()
	if ahead >= yieldBacklog && ahead%yieldEvery == 0 {
		s.yieldToWorkers(true)
	}
	return pr, relay.PID{Node: s.node, ID: id}, nil
}

// errTableFull is the error of a start that finds every slot of the
// process table taken.
var errTableFull = fmt.Errorf("%w: the process table is full", ErrTooManyProcesses)

// submit is Submit, Spawn and Call.Submit: values, if not nil, is where
// the process context's values come from when ctx has none to offer; v
// says where the process is queued; handle, whether the caller gets a
// Handle. It returns the process's record and PID (nil and the zero PID
// on error); without a Handle, the record may serve another process as
// soon as it is queued, so the caller must not touch it.
// Any goroutine; v says where it runs.
func (s *Scheduler) submit(ctx context.Context, values context.Context, p Process, method string, input payload.Payloads, opts []SubmitOption, v via, handle bool) (*proc, relay.PID, error) {
	if ctx == nil {
		return nil, relay.PID{}, fmt.Errorf("%w: Submit or Spawn", ErrNilContext)
	}
	if err := ctx.Err(); err != nil {
		return nil, relay.PID{}, err
	}
	so, err := applySubmitOptions(opts)
	if err != nil {
		return nil, relay.PID{}, err
	}
	// Background and TODO carry no values: the process then looks its
	// values up in values, if given, else nowhere.
	if hasValues(ctx) {
		values = ctx
	}
	id, err := s.admit(p, method, v, !handle)
	if err != nil {
		return nil, relay.PID{}, err
	}
	pr, err := s.start(id, values, nil, p, method, input, 0, v, so.mailbox, handle, true)
	if err != nil {
		return nil, relay.PID{}, err
	}
	if ahead := s.enqueue(pr, v); ahead >= yieldBacklog && ahead%yieldEvery == 0 {
		s.yieldToWorkers(v.w == nil)
	}
	return pr, relay.PID{Node: s.node, ID: id}, nil
}

// emptyContexts are the types of context.Background's and
// context.TODO's contexts, which carry no values: any two contexts of
// one of these types are equal, so hasValues compares types, which costs
// a load and two comparisons, where comparing the contexts as interfaces
// calls into the runtime to compare their values.
var emptyContexts = [2]reflect.Type{reflect.TypeOf(context.Background()), reflect.TypeOf(context.TODO())}

// hasValues reports whether ctx may carry values, and may be done: it is
// neither Background nor TODO. Small enough to inline. Any goroutine.
func hasValues(ctx context.Context) bool {
	t := reflect.TypeOf(ctx)
	return t != emptyContexts[0] && t != emptyContexts[1]
}

// A caller outside the workers (or a handler's Call) that starts
// processes faster than the workers run them yields its processor
// (runtime.Gosched) once every yieldEvery starts while its pushes find
// yieldBacklog or more processes ahead of theirs on the global queue.
// Where every worker has a processor of its own, the caller gets its
// processor back at once: a few hundred nanoseconds every yieldEvery
// starts. Where it shares one with a worker (GOMAXPROCS=1, or the worker
// it woke was queued on its processor), the worker runs. Without the
// yield the caller keeps the processor for a whole time slice, tens of
// thousands of starts, each of which queues a record of its own that no
// end meanwhile hands back for reuse: an allocation each, a collector
// with all of them to scan, and records that have left the caches when
// the worker reaches them. It is no limit: the caller never waits for
// the queue to shrink (WithMaxProcesses bounds the processes alive).
const (
	yieldBacklog = 1024
	yieldEvery   = 64
)

// yieldToWorkers yields the caller's processor: see yieldBacklog. For a
// start by Submit or Spawn (outside), whatever goroutine calls them, a
// scheduler made WithCallerHelp tries to help instead (see help.go); a
// start through a handler's Call never helps.
// Called by submit and submitOutside, for a start that went to the
// global queue: one from outside the workers, or through a handler's
// Call (a step's spawns go to its worker's own queue).
func (s *Scheduler) yieldToWorkers(outside bool) {
	if outside && s.helper != nil && s.help() {
		return
	}
	if h := testHookYield.Load(); h != nil {
		(*h)(s)
	}
	runtime.Gosched()
}

// testHookYield, when set, is called by yieldToWorkers before it yields.
// Tests only; costs a load per yield, once per yieldEvery starts at most.
var testHookYield atomic.Pointer[func(*Scheduler)]

// admit is the first half of starting process p at method: it checks
// the arguments, counts the process in, and takes its ID, refusing the
// process if the scheduler is closing or full. Every admitted ID goes on
// to start or back through unadmit. v says where this runs; reuse, that
// the process gets no Handle, so that its start may take an ended
// process's record (see record and table.alloc).
// Any goroutine.
func (s *Scheduler) admit(p Process, method string, v via, reuse bool) (id uint64, err error) {
	if err := checkStart(p, method); err != nil {
		return 0, err
	}
	s.count(v, cStarted)
	return s.admitCounted(v, reuse)
}

// checkStart reports what makes p and method unfit to start, or nil.
// Any goroutine.
func checkStart(p Process, method string) error {
	return checkStartOf(p == nil, method)
}

// checkStartOf is checkStart for a caller that knows whether the process
// is missing without holding it as a Process (see worker.spawnBatch).
// Any goroutine.
func checkStartOf(missing bool, method string) error {
	if missing {
		return ErrNilProcess
	}
	if method == "" {
		return ErrEmptyMethod
	}
	return nil
}

// admitCounted is admit for a process whose start the caller has
// checked and counted already (see worker.spawnBatch): it refuses the
// process or takes its ID. Any goroutine; v says where it runs, and
// reuse is as for admit.
func (s *Scheduler) admitCounted(v via, reuse bool) (id uint64, err error) {
	if s.closing() {
		s.countEnd(v, cRefused)
		return 0, ErrClosed
	}
	if s.maxProcs > 0 && !s.reserveProc() {
		s.countEnd(v, cRejected)
		return 0, fmt.Errorf("%w: the limit is %d", ErrTooManyProcesses, s.maxProcs)
	}
	id, ok := s.table.alloc(v.worker().slotCache(), reuse)
	if !ok {
		s.releaseProc()
		s.countEnd(v, cRefused)
		return 0, errTableFull
	}
	return id, nil
}

// unadmit gives back what admit took for a process that will not run
// after all, and counts it out with why, one of endCounters: cRefused
// for a spawn whose yield was refused (see worker.spawn), cInitFailed
// for a process whose Init failed. Any goroutine; v says where it runs.
func (s *Scheduler) unadmit(id uint64, v via, why counterID) {
	s.table.release(id, v.worker().slotCache())
	s.releaseProc()
	s.countEnd(v, why)
}

// start is the second half: it creates the process admitted as id,
// initialises and registers it; the caller queues it. values is the
// context its Value lookups go to (nil for none: never Background or
// TODO, which have no values to find), unless inherit is set: the shared
// procExtra of its parent's children (see proc.childExtra), whose values
// are the process's, and which it takes instead of a procExtra of its
// own if it needs nothing else; awaiter, if not 0, is the parent whose
// SpawnAwait yield waits for its end (the yield's sequence number is
// childSeq(id)); v says where this runs; mailbox, if not nil, is the
// process's own mailbox limit; handle says the caller gets a Handle, so
// the result must be kept. With guarded, a panic in Init is recovered
// here (see callInit); without, the calling worker recovers it, as
// worker.startFrom does, and w.initing names the process while its Init
// runs. If it fails, it has given back what admit took. Any goroutine
// (guarded), or a worker; v says where it runs.
//
// A process with a Handle has its record as its context; one without
// gets a context that tells which of its record's processes it is the
// context of (see newProcCtx), since its record may be given to a later
// process once it has ended (see record).
func (s *Scheduler) start(id uint64, values context.Context, inherit *procExtra, p Process, method string, input payload.Payloads, awaiter uint64, v via, mailbox *mailboxLimit, handle, guarded bool) (*proc, error) {
	w := v.worker()
	mid, ok := w.cachedMethod(method)
	if !ok {
		mid = s.internMethod(method, w)
	}
	pr, reused := s.record(id, mid, handle, awaiter != 0)
	if !reused {
		pr.setFreshID(id)
		pr.node, pr.methodID = s.node, mid
	}
	pr.impl = p
	if a := pr.awaited(); a != nil {
		a.parent = awaiter
	}
	if inherit != nil {
		values = inherit.values
	}
	switch {
	case inherit != nil && mailbox == nil && pr.methodID != 0:
		pr.extra.Store(inherit)
	case mailbox != nil || pr.methodID == 0:
		kept := method
		if pr.methodID != 0 {
			kept = "" // found by its ID
		}
		if mailbox != nil && !s.limits.Load() {
			s.limits.Store(true)
		}
		pr.extra.Store(startExtra(values, mailbox, kept))
	case values != nil:
		pr.extra.Store(&procExtra{values: values})
	}
	// A new pr is Ready: that is its zero state word. A reused one stays
	// Ended, as its last process left it, until it is published (see
	// proc.recycleFor).
	ctx := context.Context(pr)
	switch {
	case handle:
	case values == nil:
		ctx = genCtxFor(pr, genOf(id)) // no values: the record itself (see newProcCtx)
	default:
		ctx = w.newProcCtx(pr, id)
	}
	var err error
	if guarded {
		err = s.callInit(pr, id, ctx, method, input, v)
	} else {
		w.initing = pr
		err = p.Init(ctx, method, input)
		w.initing = nil
		if err != nil {
			err = initError(err)
		}
	}
	if err != nil {
		s.initFailed(pr, id, err, v)
		return nil, err
	}
	if s.hooks.End != nil {
		pr.timing().started = s.coarse.now()
	}
	// The Start hook runs before the process is published, as Init
	// does: a shutdown deadline's walk of the table (see tryForce) cannot
	// find it and end it, running its Close and End hook, while the hook
	// still runs, and nothing else can reach it before its start is
	// reported.
	if s.hooks.Start != nil {
		s.callStartHook(pr, id, method, v, guarded)
	}
	if reused {
		pr.state.Store(stReady) // in its slot already: this publishes it
	} else {
		s.table.publish(pr)
	}
	// A Shutdown that began after the check above may have walked the
	// table before this process was published; deliver its cancel here.
	if s.closing() {
		_, _ = pr.terminate(pfShutdownCancel, id) // pr is Ready and about to be queued
	}
	return pr, nil
}

// onGoexit calls hook, a user's hook, and, if the hook calls
// runtime.Goexit, calls cut before the goroutine goes on ending: a Goexit
// cannot be stopped, and cut carries out what the hook's caller would
// have done next. A panic of the hook goes on: onGoexit recovers it only
// to tell it from a Goexit, and raises it again. Any goroutine.
func onGoexit(hook, cut func()) {
	returned := false // as in callInit
	defer func() {
		if returned {
			return
		}
		if r := recover(); r != nil {
			panic(r)
		}
		cut()
	}()
	hook()
	returned = true
}

// callStartHook calls the Start hook for pr, admitted as id, whose
// Init succeeded. A panic of the hook goes on (see onGoexit). A
// runtime.Goexit, which cannot be stopped, fails the start as a Goexit
// in Init does: here, on the caller's goroutine (guarded, see start); on
// a worker carrying out a spawn, by startFrom's deferred function, which
// w.initing and w.initWhere send it to, as a Goexit of the child's
// Init, and which also ends the parent. Any goroutine; v says where it
// runs.
func (s *Scheduler) callStartHook(pr *proc, id uint64, method string, v via, guarded bool) {
	onGoexit(func() { s.hooks.Start(StartInfo{PID: pr.pid(), Method: method}) }, func() {
		if w := v.worker(); !guarded && w != nil {
			w.initing, w.initWhere = pr, "Start"
			return
		}
		perr := newPanicError("Start", ErrGoexit)
		failed := func() { s.initFailed(pr, id, initError(perr), v) }
		s.recovered(pr, perr, v, failed)
		failed()
	})
}

// startExtra returns the procExtra of a process that needs its start's
// details kept: values is the context its Value lookups go to, mailbox
// its own mailbox limit (nil for none), and method its entry point's
// name when the method table had no room for it (empty when its ID
// names it). Any goroutine.
func startExtra(values context.Context, mailbox *mailboxLimit, method string) *procExtra {
	both := &extraAndStart{x: procExtra{values: values}, s: procStart{mailbox: mailbox, method: method}}
	both.x.start = &both.s
	return &both.x
}

// initFailed ends pr, admitted as id and set up by start, whose Init
// failed with err: Close, the record closed, and what admit took given
// back.
// Any goroutine; v says where it runs.
func (s *Scheduler) initFailed(pr *proc, id uint64, err error, v via) {
	_ = s.callClose(pr, v, payload.Payload{}, err, false, id)
	s.initClosed(pr, id, err, v)
}

// initClosed is initFailed once Close has run: the record closed, and
// what admit took given back. Any goroutine; v says where it runs.
func (s *Scheduler) initClosed(pr *proc, id uint64, err error, v via) {
	pr.impl = nil
	var c closed
	pr.close(&c, payload.Payload{}, err, false, 0)
	c.recycle(v.worker().pendingCache())
	s.unadmit(id, v, cInitFailed)
}

// record returns the record for the process about to start as id: the
// record of the last process in id's slot, when its end left it for the
// process with this ID (see proc.recycleFor) and it is of the kind
// needed, else a new one; reused says which. A process that starts and
// ends on a worker, as the nodes of a fork-join computation do, then
// costs no allocation for its record and no work for the garbage
// collector: the worker's free IDs name the slots it freed last, whose
// records it ended.
// The caller owns the slot until the process is published (the ID came
// from its worker's cache, or from a stripe of the IDs cached for callers
// outside the workers, under its lock). A record is never reused for a
// process with a Handle, which keeps its record. The entry point is the one
// field of the record that its new process's start writes besides
// those that the new process alone reads; it is written here, without
// the record's lock, and read by the watchdog and by Processes only
// after they have seen, by the state word, that the run or process they
// found is still the one the record holds.
// Any goroutine, holding id (taken from a cache of free IDs, not yet
// published).
func (s *Scheduler) record(id uint64, methodID uint16, handle, awaited bool) (p *proc, reused bool) {
	kind := s.kindOf(handle, awaited)
	if kind&pkHandle == 0 {
		if e := s.table.entry(slotOf(id)); e != nil {
			// Only an end that left the record for this ID gave it this
			// ID, and that end came before the ID was freed and then
			// taken from a free list, which orders the two; what the end
			// wrote under the record's lock is seen here without it.
			if old := e.p.Load(); old != nil && old.kind == kind && old.id.Load() == id {
				old.methodID = methodID // see watchdog.report and Scheduler.Processes for its readers
				return old, true
			}
		}
	}
	return allocProc(kind), false
}

// reserveProc counts a process against WithMaxProcesses, if there is room.
// Any goroutine.
func (s *Scheduler) reserveProc() bool {
	for {
		n := s.procs.Load()
		if n >= s.maxProcs {
			return false
		}
		if s.procs.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// releaseProc gives back what reserveProc took.
// Any goroutine.
func (s *Scheduler) releaseProc() {
	if s.maxProcs > 0 {
		s.procs.Add(-1)
	}
}

// callInit runs Init with the process context ctx, turning a panic into
// an error.
// Called by the goroutine starting p: the submitter, or the worker carrying out a spawn.
//
// An Init that calls runtime.Goexit cannot be stopped from ending the
// calling goroutine, and its caller never sees the error: the start
// fails here, with a PanicError for [ErrGoexit], as initFailed fails it,
// the process admitted as id closed and counted out, before the
// goroutine goes on ending.
func (s *Scheduler) callInit(p *proc, id uint64, ctx context.Context, method string, input payload.Payloads, v via) (err error) {
	returned := false // only a panic (or runtime.Goexit) leaves it false
	defer func() {
		if returned {
			return // the usual case: no call to recover
		}
		r := recover()
		if r == nil {
			r = ErrGoexit
		}
		perr := newPanicError("Init", r)
		err = initError(perr)
		// The caller fails the start after a panic; after a Goexit (of
		// Init or of the Panic hook) it never sees err, so it fails here.
		s.recovered(p, perr, v, func() { s.initFailed(p, id, err, v) })
		if r == ErrGoexit {
			s.initFailed(p, id, err, v)
		}
	}()
	err = p.impl.Init(ctx, method, input)
	returned = true
	if err != nil {
		return initError(err)
	}
	return nil
}

// initError returns the error of a start whose Init returned err, or
// panicked with err, which is not nil: err wrapped in ErrInit.
// Any goroutine.
func initError(err error) error {
	return fmt.Errorf("%w: %w", ErrInit, err)
}

// callClose runs Close and returns the panic it raised, if any.
// Called by whoever ends p, once. If Close calls runtime.Goexit, the
// caller's goroutine ends on return, so callClose ends p itself, as
// the caller would have after a panic: as finishClosed with result and
// err (err, if nil, becomes the PanicError for [ErrGoexit]) and forced,
// or, for a process whose Init failed (initID, not 0, is its ID), as
// initClosed does.
func (s *Scheduler) callClose(p *proc, v via, result payload.Payload, err error, forced bool, initID uint64) (perr error) {
	returned := false // as in callInit
	defer func() {
		if returned {
			return
		}
		r := recover()
		if r == nil {
			r = ErrGoexit
		}
		pe := newPanicError("Close", r)
		perr = pe
		// What the caller does after a panic; after a Goexit (of Close or
		// of the Panic hook) it never goes on, so it is done here.
		closed := func() {
			if initID != 0 {
				s.initClosed(p, initID, err, v)
				return
			}
			if err == nil {
				err = pe
			}
			s.finishClosed(p, v, result, err, forced)
		}
		s.recovered(p, pe, v, closed)
		if r == ErrGoexit {
			closed()
		}
	}()
	p.impl.Close()
	returned = true
	return nil
}

// countEnd counts a process out with c, the counter of how it ended (see
// endCounters); during Shutdown, the last one out releases it.
// Called by whoever ends the process, once.
func (s *Scheduler) countEnd(v via, c counterID) {
	s.count(v, c)
	s.endCounted()
}

// endCounted releases a Shutdown that waits for the processes to end,
// if the end just counted was the last. Called by whoever ends a
// process, once, right after counting its end.
func (s *Scheduler) endCounted() {
	if s.closing() {
		s.drainIfNoneLive()
	}
}

// drainIfNoneLive releases a waiting Shutdown if no process is live.
// Called during Shutdown: by its start, and by endCounted.
func (s *Scheduler) drainIfNoneLive() {
	if s.liveCount() == 0 {
		s.sd.drainOnce.Do(func() { close(s.sd.drained) })
	}
}

// finish ends a process that the caller moved to Ended: Close,
// counters, result, table slot, awaiting parent. The counters come before
// the result is published, so a Stats read after the Handle reports the
// end counts it. v says where this runs.
func (s *Scheduler) finish(p *proc, v via, result payload.Payload, err error, forced bool) {
	s.timers.release(p)
	if perr := s.callClose(p, v, result, err, forced, 0); perr != nil && err == nil {
		err = perr
	}
	s.finishClosed(p, v, result, err, forced)
}

// finishClosed is finish once p's timers are released and its Close has
// run (err includes Close's panic): the rest of its end.
func (s *Scheduler) finishClosed(p *proc, v via, result payload.Payload, err error, forced bool) {
	p.impl = nil
	s.releaseProc()
	if forced && s.log != nil {
		s.log.Warn("scheduler: process forced to close at the shutdown deadline", "pid", p.pid(), "method", s.methodOf(p))
	}
	if s.hooks.End != nil {
		s.callEndHook(p, v, result, err, forced)
	}
	s.finishReported(p, v, result, err, forced)
}

// callEndHook calls the End hook for p, which finishClosed is ending.
// A panic of the hook goes on (see onGoexit). A runtime.Goexit, which ends the calling goroutine, first ends p
// as finishClosed would have, so that its Handle, monitors, parent and
// a Shutdown waiting for it are told. Any goroutine; v says where it
// runs.
func (s *Scheduler) callEndHook(p *proc, v via, result payload.Payload, err error, forced bool) {
	onGoexit(func() {
		t := p.timing()
		s.hooks.End(EndInfo{
			PID: p.pid(), Method: s.methodOf(p), Result: result, Err: err,
			Duration: time.Duration(max(s.coarse.now()-t.started, 0)), Steps: t.steps, Forced: forced,
		})
	}, func() { s.finishReported(p, v, result, err, forced) })
}

// finishReported is finishClosed once the End hook has been called:
// the counts, the record closed, and those waiting for the end told.
func (s *Scheduler) finishReported(p *proc, v via, result payload.Payload, err error, forced bool) {
	w := v.worker()
	if forced {
		s.count(v, cForced)
	}
	if err != nil {
		s.count(v, cFailed)
	}
	s.countEnd(v, cCompleted) // last: it may release a Shutdown
	// The record may be reused (see record) if it ends on a worker, not
	// forced, and reuseID allows it; close checks the rest. If it is,
	// close gives it the next ID: what follows uses the ended process's,
	// read before.
	pid := p.pid()
	id := pid.ID
	var next uint64
	if w != nil && !forced {
		next = p.reuseID(id)
	}
	var c closed
	p.close(&c, result, err, forced, next)
	if n := len(c.unread); n > 0 {
		s.countN(v, cUnread, uint64(n))
		s.reportUnread(p, v, pid, c, result, err, forced)
		return
	}
	s.finishUnread(p, v, pid, &c, result, err, forced)
}

// reportUnread is finishReported for p, whose end, with its record
// closed into c, left messages unread: they are dead letters, and then
// the end goes on, even if the DeadLetter hook calls runtime.Goexit (see
// deadUnread). c is a copy: only this rare path pays for the closure
// that holds it.
func (s *Scheduler) reportUnread(p *proc, v via, pid relay.PID, c closed, result payload.Payload, err error, forced bool) {
	s.deadUnread(p, pid, c.unread, v, func() { s.finishUnread(p, v, pid, &c, result, err, forced) })
	s.finishUnread(p, v, pid, &c, result, err, forced)
}

// finishUnread is finishReported once the record of p, which was pid, is
// closed into c, and what it left unread reported: the names, monitors,
// parent and Handle told, and the record's slot released.
func (s *Scheduler) finishUnread(p *proc, v via, pid relay.PID, c *closed, result payload.Payload, err error, forced bool) {
	w := v.worker()
	id := pid.ID
	c.recycle(w.pendingCache())
	// Names, monitors: frozen now that the process is closed. A reused
	// record had none (see proc.reusable), and its live part is gone.
	if x := p.live(); x.tellsEnd() {
		if len(x.names) > 0 {
			s.releaseNames(pid, x.names)
		}
		if x.monitors != nil || x.held != nil || x.outside != nil {
			s.notifyEnd(p, x, exitOf(pid, result, err, forced, c.cancelled, c.cause), v)
		}
	}
	if a := p.awaited(); a != nil && !forced {
		if w != nil {
			w.completeAwaited(a.parent, pid, result, err)
		} else {
			var ev Event
			ev.setYieldResult(pid, result, err)
			_ = s.complete(relay.PID{Node: s.node, ID: a.parent}, &ev, childSeq(id), v)
		}
	}
	if p.kind&pkHandle != 0 && !c.announced {
		p.announce(err) // only a Handle reads it: a spawned child skips the lock
	}
	// Last: once the ID is free, this worker may give the record to the
	// next process it starts.
	s.table.release(id, w.slotCache())
}

type submitOptionFunc func(*submitOptions) error

// applySubmit runs the option on o. Any goroutine.
func (f submitOptionFunc) applySubmit(o *submitOptions) error { return f(o) }

// submitOptions collects SubmitOption values.
type submitOptions struct {
	mailbox *mailboxLimit
}

// SubmitOption configures one [Scheduler.Submit] or [Call.Submit].
type SubmitOption interface {
	applySubmit(*submitOptions) error
}

// applySubmitOptions applies opts in order and returns the result, or the first error. Any goroutine.
func applySubmitOptions(opts []SubmitOption) (submitOptions, error) {
	if len(opts) == 0 {
		return submitOptions{}, nil // the usual case: nothing escapes
	}
	so := new(submitOptions)
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o.applySubmit(so); err != nil {
			return *so, err
		}
	}
	return *so, nil
}
