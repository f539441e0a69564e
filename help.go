package scheduler

import (
	"reflect"
	"runtime"
	"unsafe"

	"github.com/procsched/scheduler/internal/prefetch"
)

// Callers that help (see WithCallerHelp).
//
// A goroutine outside the workers that starts processes faster than the
// workers run them comes, once every yieldEvery starts, to a point where
// it would yield its processor (see yieldBacklog). With the option set it
// runs queued processes itself instead: it takes up to helpRounds batches
// of helpBatch from the global queue and runs each process as a worker
// would, through a worker structure of the scheduler's that no goroutine
// of its own runs (Scheduler.helper). One caller helps at a time: the
// one that takes Scheduler.helpMu; another that comes to such a point
// meanwhile yields as without the option. Once the scheduler stops, the
// stopper holds the lock: it waits for a help under way to end, and no
// caller helps after.
//
// Why it pays: the processes at the head of the queue were queued by
// this caller about a thousand starts earlier, and their records and
// values are still in its core's caches, where a worker on another core
// would fetch each line; and the queue it leaves the workers stays
// short. On a machine whose cores are all busy (the workers' threads
// descheduled by other programs) the caller runs what they cannot.
//
// The helper's structure is a worker in all but its goroutine: its run
// word names it by the ID one past the last worker's, so its claims are
// its own; its counters count with the workers' (see total); its yields
// get sequence numbers of their own (see helperSeqBase), whose timers go
// to worker 0's shard, as a worker's deadline for a yield of another
// worker's goes to that worker's. A step it runs may leave work on it as
// on any worker: children on its queue, a process in its next or later
// slot, a parent claimed for a child's end (direct, deferred). Before
// the caller returns, handBack runs the claimed parents, whose claims
// name this structure, and moves the rest to the global queue, in the
// order it was queued; nothing is left on the structure between helps,
// which is why no worker needs to steal from it or watch it.
//
// What it costs the user is documented at WithCallerHelp: steps run on
// the caller's goroutine, inside Submit or Spawn.

// helpBatch and helpRounds: a helping caller takes up to helpRounds
// batches of helpBatch processes from the global queue. 128 processes a
// help do as well as 256 and better than 64 or 1,024 for a loop of
// Spawn on two cores, quiet and with both cores loaded by other
// programs (docs/benchmarks.md); the batch is small enough that its
// records' lines, asked for together, fit the core's line fill buffers
// a few times over.
const (
	helpBatch  = 32
	helpRounds = 4
)

// helperSeqBase is where the helper's yield sequence numbers start
// (see newSeq): at or above 2^61, which the workers' counts never reach
// (they would take centuries), and below seqChild; and one more than a
// multiple of the number of workers, so that shardOf gives worker 0's
// shard for each of them.
func helperSeqBase(workers int) uint64 {
	const base = uint64(1) << 61
	n := uint64(workers)
	return (base+n-1)/n*n + 1
}

// newHelper returns the worker structure through which callers help
// (see above), or nil if the scheduler was not asked for it. Called by
// New, after the workers are made.
func newHelper(s *Scheduler, on bool) *worker {
	if !on {
		return nil
	}
	// Made as worker 0, then named as none is: by the ID after the last
	// worker's, with sequence numbers of its own and a timer shard of its
	// own that holds no timer, only its scratch for firing the others'.
	h := newWorker(s, 0)
	h.id = len(s.workers)
	h.seq = helperSeqBase(len(s.workers))
	h.ownTimers = new(timerShard)
	h.ownTimers.init()
	h.batch = make([]*proc, helpBatch)
	return h
}

// help is what an outside caller does at a yield point (see
// yieldBacklog) when the scheduler was made WithCallerHelp: it runs up to
// helpRounds batches of queued processes and reports true, or reports
// false if another caller is helping or the scheduler has stopped, and
// the caller then yields as without the option. Called by
// yieldToWorkers for a start by Submit or Spawn, on any goroutine: a
// step's that calls them too (see WithCallerHelp), which the helper's
// lock keeps from helping within a help.
func (s *Scheduler) help() bool {
	// The lock orders this help after the previous one's last use of the
	// helper (endHelp's unlock): the structure's owner-only fields pass
	// from caller to caller through it.
	if !s.helpMu.TryLock() {
		return false
	}
	s.helping.Store(true)
	h := s.helper
	defer s.endHelp(h)
	taken := 0
	for range helpRounds {
		n := s.global.PopInto(h.batch)
		if n == 0 {
			break
		}
		taken += n
		h.count(cGlobalPops)
		h.countN(cGlobalItems, uint64(n))
		// Asked for together, as popGlobal does: each run starts with a
		// locked write to its record's state word.
		for _, p := range h.batch[:n] {
			prefetch.Write2(unsafe.Pointer(p))
		}
		for i := 0; i < n; {
			i = helpRun(h, i, n)
		}
	}
	if taken > 0 {
		h.count(cHelps)
		h.countN(cHelped, uint64(taken))
	}
	return true
}

// endHelp ends a help: it hands back what is left on the helper's
// structure, publishes its counters and lets the next helper (or the
// stopper) in. Deferred by help, so that a panic the runs do not recover
// (one raised by a hook, say, which on a worker would end the program)
// leaves the scheduler as a help leaves it, with the processes the help
// had taken and not run back on the global queue, before it goes on out
// of the caller's Submit or Spawn. The helping caller only.
func (s *Scheduler) endHelp(h *worker) {
	h.handBack()
	h.flush()
	s.helping.Store(false)
	s.helpMu.Unlock()
}

// helpRun runs the processes h.batch[i:n] in order, clearing each slot
// as it takes the process, and returns n; if a step or Close panics, it
// returns the index after the process whose run panicked, which
// recoverStepPanic ended, and the caller goes on from there. As work
// does for the workers, one deferred call catches the rare panic for all
// the runs. A function rather than a method so that Shutdown can tell a
// goroutine running it by the name of its frame (see onHelpingCaller).
// The helping caller only, from help.
//
//go:noinline
func helpRun(h *worker, i, n int) (next int) {
	defer h.recoverStepPanic()
	for next = i; next < n; {
		p := h.batch[next]
		h.batch[next] = nil
		next++
		h.run(p)
		h.flushHeld()
	}
	return next
}

// handBack leaves the helper's structure empty, as a help must (see
// above): it puts the processes of its batch that it did not run (after
// a panic that went on out of the help: see endHelp) back on the global
// queue, runs the parents its runs claimed (direct, and those put
// aside), whose claims only it can run, and moves what its runs queued
// on it (its deque, next slot and later slot) to the global queue, its
// deque oldest first. Running a claimed parent may end it and claim its
// own parent, or queue children; the loop runs until no claim is left,
// which the height of a tree of awaiting parents bounds. It then drops
// the references to the last steps' events and yields, as a worker going
// idle does. The helping caller only, from endHelp.
func (h *worker) handBack() {
	s := h.s
	moved := false
	for i, p := range h.batch {
		if p != nil {
			h.batch[i] = nil
			s.global.Push(p)
			moved = true
		}
	}
	for h.direct != nil || len(h.deferred) > 0 {
		if h.direct == nil {
			h.restore(len(h.deferred)-1, true)
		}
		h.batch[0] = h.takeDirect()
		helpRun(h, 0, 1)
	}
	for {
		p := h.dq.Steal()
		if p == nil {
			break
		}
		s.global.Push(p)
		moved = true
	}
	if p := grab(&h.next); p != nil {
		s.global.Push(p)
		moved = true
	}
	if p := grab(&h.later); p != nil {
		h.laterDue = noLater
		s.global.Push(p)
		moved = true
	}
	if moved {
		s.wakeWorker()
	}
	h.nextRuns = 0
	h.dropStepRefs()
}

// helpRunName is the name of helpRun's frames in a stack trace (see
// onHelpingCaller).
var helpRunName = funcName(helpRun)

// funcName returns the name the runtime gives function f's frames.
// Called once, at package initialisation.
func funcName(f func(*worker, int, int) int) string {
	return runtime.FuncForPC(reflect.ValueOf(f).Pointer()).Name()
}

// onHelper reports whether the calling goroutine may be the one
// helping s: a caller helps s, and the calling goroutine runs a help
// (see onHelpingCaller). A goroutine that helps another scheduler while
// one helps s is taken for s's helper too: Shutdown, the one to ask,
// then returns at once rather than risk waiting for itself. Any
// goroutine.
func (s *Scheduler) onHelper() bool {
	return s.helper != nil && s.helping.Load() && onHelpingCaller()
}

// onHelpingCaller reports whether the calling goroutine is running a
// help for some scheduler: whether a step, Close, handler or hook is
// calling from a process that a helping caller runs. It walks the
// goroutine's stack, which costs about a microsecond; only Shutdown
// asks, through onHelper. Any goroutine.
func onHelpingCaller() bool {
	pcs := make([]uintptr, 64)
	n := runtime.Callers(2, pcs) // from this function's caller
	for n == len(pcs) {
		pcs = make([]uintptr, 2*len(pcs)) // the whole stack, however deep
		n = runtime.Callers(2, pcs)
	}
	frames := runtime.CallersFrames(pcs[:n])
	for {
		f, more := frames.Next()
		if f.Function == helpRunName {
			return true
		}
		if !more {
			return false
		}
	}
}
