package scheduler

import (
	"sync/atomic"
	"unsafe"
)

// Stats is a snapshot of a scheduler's counters, from [Scheduler.Stats].
//
// Process counts (Live, Submitted, Ended, ...) are exact at the moment
// each is read, except that Submitted counts a process from the moment
// it is admitted, while its Init runs, until Init fails. Live is the
// processes started less those ended, the ends read first: while
// processes start and end it may count some that ended during the read,
// and never misses one alive throughout it, so it is never below zero.
// The per-step counters (Steps, Yields, message counts, the
// work-finding counters, and the Blocked and Idle counts) are kept by
// each worker in plain memory and published every 64 scheduling rounds,
// whenever the worker runs out of local work, and before it parks, so
// while a worker is busy they may trail by a few dozen steps; once every
// worker is parked (IdleWorkers == Workers) they are exact. Figures are
// read one by one, not at one instant.
type Stats struct {
	Workers int `json:"workers"` // worker goroutines

	Processes ProcessStats `json:"processes"`
	Messages  MessageStats `json:"messages"`
	// Pool describes the blocking pool (see Call.Go).
	Pool PoolStats `json:"pool"`
	// DeadLetters counts messages that reached no process, by reason.
	DeadLetters DeadLetterStats `json:"deadLetters"`

	Steps uint64 `json:"steps"` // Step calls
	// Yields counts the commands steps wrote to their StepOutput, each
	// carried out once its Step returned: every Yield, Sleep, SleepUntil,
	// Spawn, SpawnAwait, Monitor, Request, RequestName, Tell, TellName,
	// Reply and Cancel, and every Timeout but one that gives its deadline
	// to a yield written before it in the same step (it is part of that
	// yield).
	Yields uint64 `json:"yields"`
	// Cancelled counts pending yields cancelled by their process.
	Cancelled uint64 `json:"cancelled"`
	Requeues  uint64 `json:"requeues"` // processes put behind others after their step budget
	// SlowSteps counts steps the watchdog found slow (see [WithWatchdog]).
	SlowSteps uint64 `json:"slowSteps"`

	// Finding work.
	GlobalPops    uint64 `json:"globalPops"`    // batches (or single processes) taken from the global queue
	GlobalItems   uint64 `json:"globalItems"`   // processes taken from the global queue
	StealAttempts uint64 `json:"stealAttempts"` // victims tried
	Steals        uint64 `json:"steals"`        // successful steals
	Stolen        uint64 `json:"stolen"`        // processes moved by steals
	Spins         uint64 `json:"spins"`         // spin rounds while searching
	Parks         uint64 `json:"parks"`         // times a worker blocked
	Wakes         uint64 `json:"wakes"`         // times a parked worker was woken for work
	// Helps counts the times a caller of Submit or Spawn, far ahead of
	// the workers, ran queued processes (see [WithCallerHelp]), and
	// Helped the processes those callers took from the global queue to
	// run (which GlobalItems counts too); both 0 without the option.
	Helps  uint64 `json:"helps"`
	Helped uint64 `json:"helped"`

	// Queues, at the time of the snapshot.
	GlobalQueue  int   `json:"globalQueue"`  // processes in the global queue
	WorkerQueues []int `json:"workerQueues"` // processes queued on each worker (next slot included)
	// Timers counts live timers, of processes not ended: the end of each
	// Sleep or SleepUntil not yet fired, and each deadline a Timeout gave a
	// yield still pending (a Sleep with a deadline has one timer, for
	// whichever comes first).
	Timers      int `json:"timers"`
	IdleWorkers int `json:"idleWorkers"` // parked workers
}

// ProcessStats counts processes.
type ProcessStats struct {
	// Live counts processes started and not yet ended, those whose Init,
	// Start hook or Close is running included; [Scheduler.Processes]
	// lists none of those, so it may list fewer processes than Live
	// counts.
	// A process is counted out once its Close has returned, just before
	// the rest of its end is delivered: its unread messages to the
	// DeadLetter hook, its monitors, its Handle or awaiting parent. So
	// Live at zero does not mean those reports have all been made;
	// Shutdown returns only after they have.
	Live int64 `json:"live"`
	// Live processes by state. Ready is what the queues hold, Blocked and
	// Idle are counted at the transitions, and Running is the rest, so the
	// four add up to Live; under load each is approximate.
	Ready   int64 `json:"ready"`
	Running int64 `json:"running"`
	Blocked int64 `json:"blocked"`
	Idle    int64 `json:"idle"`

	Submitted  uint64 `json:"submitted"`  // Init succeeded or is running (Submit, Spawn and a step's spawns)
	InitFailed uint64 `json:"initFailed"` // Init failed or panicked; never ran
	Rejected   uint64 `json:"rejected"`   // refused by WithMaxProcesses
	Ended      uint64 `json:"ended"`      // ended, however they ended
	Failed     uint64 `json:"failed"`     // of Ended, ended with an error
	Forced     uint64 `json:"forced"`     // of Failed, closed at a shutdown deadline
	Panics     uint64 `json:"panics"`     // panics recovered (Init, Step, Close, handlers, Call.Go's work)
}

// MessageStats counts messages.
type MessageStats struct {
	Accepted uint64 `json:"accepted"` // accepted for delivery: queued in a mailbox, or handed over with the receiver
	Dropped  uint64 `json:"dropped"`  // dropped by a full mailbox's policy (new or old)
	Rejected uint64 `json:"rejected"` // refused by a full mailbox (MailboxReject); not a SendContext that gave up waiting for room, or that would not wait on a worker
	// Sent counts messages sent by processes: every StepOutput.Tell and
	// TellName, delivered or not (one that comes back counts in Bounced
	// too), and every Request and RequestName whose receiver was found.
	// A Request to a PID of this node that is not alive, or to a name
	// nobody has, sends nothing: its yield completes at once with the
	// error. A Reply is not counted: it completes the asker's yield (an
	// answer the transport carries to another node counts in Forwarded).
	Sent uint64 `json:"sent"`
	// Bounced counts messages returned to a process of this node
	// undelivered: its own Tells refused at once, and messages handed back
	// later (by a transport, or evicted by MailboxDropOldest).
	Bounced uint64 `json:"bounced"`
	// Forwarded counts messages handed to the transport for processes of
	// other nodes (see WithTransport).
	Forwarded uint64 `json:"forwarded"`
	// Unread counts events (messages, completions, a cancel) that were
	// queued to a process that ended before reading them.
	Unread uint64 `json:"unread"`
}

// Stats returns a snapshot of the scheduler's counters. Each worker keeps
// its own counters, written without contention, and Stats sums them; see
// [Stats] for how current they are. It costs a few loads per worker and
// per stripe of the counters kept outside the workers.
func (s *Scheduler) Stats() Stats {
	st := Stats{
		Workers:      len(s.workers),
		GlobalQueue:  s.global.Len(),
		WorkerQueues: make([]int, len(s.workers)),
		Timers:       s.timers.pending(),
		IdleWorkers:  int(s.idle.count.Load()),
	}
	st.Pool = s.pool.stats()
	// The counters are read in the order of their constants, which puts
	// every end before its start (see liveCount) and every leaving of a
	// waiting state before the entering.
	var t [numCounters]uint64
	for c := range counterID(numCounters) {
		t[c] = s.total(c)
	}
	ps, ms := &st.Processes, &st.Messages
	var ended uint64
	for _, c := range endCounters {
		ended += t[c]
	}
	ps.Live = int64(t[cStarted] - ended)
	// Every process counted in ends up refused, rejected, failed in
	// Init, or submitted: the last is what is left, with no counter of
	// its own to store on every start.
	ps.Submitted = t[cStarted] - t[cRefused] - t[cRejected] - t[cInitFailed]
	ps.InitFailed = t[cInitFailed]
	ps.Rejected = t[cRejected]
	ps.Ended = t[cCompleted]
	ps.Failed = t[cFailed]
	ps.Forced = t[cForced]
	ps.Panics = t[cPanics]
	ms.Unread = t[cUnread]
	ms.Accepted = t[cAccepted]
	ms.Dropped = t[cDropped]
	ms.Rejected = t[cMsgRejected]
	ms.Sent = t[cSent]
	ms.Bounced = t[cBounced]
	ms.Forwarded = t[cForwarded]
	st.DeadLetters = DeadLetterStats{
		Unread:      t[cDeadUnread],
		Bounces:     t[cDeadBounce],
		Dropped:     t[cDeadDropped],
		LateReplies: t[cDeadLateReply],
	}
	st.Steps = t[cSteps]
	st.Yields = t[cYields]
	st.Cancelled = t[cCancelled]
	st.Requeues = t[cRequeues]
	st.GlobalPops = t[cGlobalPops]
	st.GlobalItems = t[cGlobalItems]
	st.StealAttempts = t[cStealAttempts]
	st.Steals = t[cSteals]
	st.Stolen = t[cStolen]
	st.Spins = t[cSpins]
	st.Parks = t[cParks]
	st.Wakes = t[cWakes]
	st.Helps = t[cHelps]
	st.Helped = t[cHelped]
	for i, w := range s.workers {
		st.WorkerQueues[i] = w.queueLen()
	}
	if s.watchdog != nil {
		st.SlowSteps = s.watchdog.slow.Load()
	}
	ps.Blocked = max(int64(t[cBlockedIn]-t[cBlockedOut]), 0)
	ps.Idle = max(int64(t[cIdleIn]-t[cIdleOut]), 0)
	ps.Ready = int64(st.GlobalQueue)
	for _, n := range st.WorkerQueues {
		ps.Ready += int64(n)
	}
	ps.Ready = min(ps.Ready, max(ps.Live-ps.Blocked-ps.Idle, 0))
	ps.Running = max(ps.Live-ps.Ready-ps.Blocked-ps.Idle, 0)
	return st
}

// liveCount returns the number of processes started and not yet ended.
// Every start is counted before the closing flag is checked and every end
// after the process is gone. The counters are read without a lock, all
// ends before all starts: a start is always counted before its end, so a
// sum read this way is never below the true number live at the moment
// between the two passes, and a zero means that at that moment no process
// was live. Once closing is set, that is final. Any goroutine.
func (s *Scheduler) liveCount() int64 {
	var ended uint64
	for _, c := range endCounters {
		ended += s.total(c)
	}
	return int64(s.total(cStarted) - ended)
}

// endCounters are the counters that count processes out, one for each
// way a process that was counted in (cStarted) leaves: refused before
// Init, rejected by the process limit, failed in Init, or ended after
// running. Each end adds to exactly one of them, so their sum is the
// number of ends, and no end pays a second counter for it.
var endCounters = [...]counterID{cRefused, cInitFailed, cRejected, cCompleted}

// counterID names one of the scheduler's counters. Each is kept per worker
// and, for counts made outside the workers, in striped cells (see
// countStripe); [Scheduler.Stats] sums them.
//
// The counters before numEager are stored by their worker at once, with
// a single-writer atomic store, so that they are exact whenever read: the
// process counts, which tests and the live count rely on. The rest are
// plain memory of their worker, published at flush.
//
// The order of the constants is the order in which flush publishes and
// Stats reads them, which two pairs rely on: the counters of ends
// (endCounters) come before cStarted (see liveCount), and leaving a
// waiting state (cBlockedOut, cIdleOut) before entering it (cBlockedIn,
// cIdleIn), so that a reader never sees more leaving than entering. Adding a counter is a line here and the
// line in Stats that reads it.
type counterID uint8

const (
	cRefused    counterID = iota // starts refused before Init: the scheduler was closing or its table full (an end)
	cInitFailed                  // Init failed or panicked (an end)
	cRejected                    // refused by WithMaxProcesses (an end)
	cCompleted                   // processes that ended, however they ended (an end)
	cStarted                     // processes counted in, before Init (the live count's)
	cFailed                      // of cCompleted, ended with an error
	cForced                      // of cFailed, closed at a shutdown deadline
	cPanics                      // panics recovered (Init, Step, Close, handlers)
	cUnread                      // events queued to a process that ended before reading them
	cDeadUnread                  // dead letters by reason, in DeadLetterReason order (see deadCounter)
	cDeadBounce
	cDeadDropped
	cDeadLateReply
	cParks // times a worker blocked
	cWakes // times a parked worker was woken and handed the search

	cSteps         // Step calls
	cYields        // yields written by steps
	cSent          // messages told by processes
	cBounced       // messages returned undelivered to a process of this node
	cForwarded     // messages handed to the transport
	cRequeues      // processes put behind others after their step budget
	cCancelled     // pending yields cancelled by their process
	cAccepted      // messages accepted for delivery (queued in a mailbox or handed over with the receiver)
	cDropped       // messages dropped by a full mailbox's policy
	cMsgRejected   // messages refused by a full mailbox
	cBlockedOut    // processes woken from Blocked (before cBlockedIn: see above)
	cIdleOut       // processes woken from Idle (before cIdleIn)
	cBlockedIn     // processes that went Blocked
	cIdleIn        // processes that went Idle
	cGlobalPops    // takes from the global queue
	cGlobalItems   // processes taken from the global queue
	cStealAttempts // victims tried
	cSteals        // successful steals
	cStolen        // processes moved by steals
	cSpins         // spin rounds while searching
	cHelps         // helps by callers that ran processes (see help.go)
	cHelped        // processes callers took from the global queue to run

	numCounters
)

// numEager is the number of counters a worker stores at once rather than
// at flush: those before cSteps.
const numEager = cSteps

// deadCounter returns the counter of dead letters for reason.
// Any goroutine.
func deadCounter(reason DeadLetterReason) counterID {
	return cDeadUnread + counterID(reason-DeadUnread)
}

// workerCounters are one worker's counters. Owner only, except that any
// goroutine loads pub.
type workerCounters struct {
	_ [cacheLine]byte // keeps pub off the lines of the worker's fields before it, which other workers read
	// pub is what Stats and liveCount read. The worker is the single
	// writer of each: it stores the counters before numEager as it counts
	// them and the others at flush, with plain atomic stores that pair
	// with the loads in Stats and liveCount.
	pub [numCounters]atomic.Uint64
	_   [cacheLine]byte // and off the lines of the fields after it
	// n holds the counters from numEager on, in plain memory until flush.
	n [numCounters]uint64
}

// count adds one to counter c. Owner only.
func (w *worker) count(c counterID) {
	if c < numEager {
		w.ctr.pub[c].Store(w.ctr.pub[c].Load() + 1)
	} else {
		w.ctr.n[c]++
	}
}

// countN adds n to counter c. Owner only.
func (w *worker) countN(c counterID, n uint64) {
	if c < numEager {
		p := &w.ctr.pub[c]
		p.Store(p.Load() + n)
		return
	}
	w.ctr.n[c] += n
}

// countWoken counts a process leaving the waiting state woken. Owner
// only.
func (w *worker) countWoken(woken uint64) {
	if woken == stBlocked {
		w.count(cBlockedOut)
	} else {
		w.count(cIdleOut)
	}
}

// count adds one to counter c, for an operation that runs where v says.
// Any goroutine.
func (s *Scheduler) count(v via, c counterID) {
	if w := v.worker(); w != nil {
		w.count(c)
	} else {
		s.countOutside(c, 1)
	}
}

// countN adds n to counter c, on the worker's own counters when v says
// the caller is a worker, else on a stripe of the shared ones. Any
// goroutine.
func (s *Scheduler) countN(v via, c counterID, n uint64) {
	if w := v.worker(); w != nil {
		w.countN(c, n)
	} else {
		s.countOutside(c, n)
	}
}

// countOutside adds n to counter c on a stripe of the counters kept
// outside the workers. Any goroutine. Kept out of line so that count
// inlines into the workers' hot paths.
//
//go:noinline
func (s *Scheduler) countOutside(c counterID, n uint64) {
	s.ext.stripes[countStripe()].n[c].Add(n)
}

// total returns counter c summed over the workers, the helper (see
// help.go) and the stripes. Any goroutine.
func (s *Scheduler) total(c counterID) uint64 {
	var n uint64
	for i := range s.ext.stripes {
		n += s.ext.stripes[i].n[c].Load()
	}
	for _, w := range s.workers {
		n += w.ctr.pub[c].Load()
	}
	if h := s.helper; h != nil {
		n += h.ctr.pub[c].Load()
	}
	return n
}

// cacheLine is the padding unit against false sharing: the cache line
// size of amd64 and of most arm64 cores.
const cacheLine = 64

// counterStripes is the number of stripes of the counters kept outside
// the workers.
const counterStripes = 16

// counterStripe is one stripe of the counters kept outside the workers,
// padded to whole cache lines so that no two stripes share one.
type counterStripe struct {
	n [numCounters]atomic.Uint64 // atomic adds, which pair with the loads in total
	_ [(cacheLine - int(numCounters)*8%cacheLine) % cacheLine]byte
}

// counterSet is the counters kept outside the workers, in stripes, with
// a line of padding before them.
type counterSet struct {
	_       [cacheLine]byte
	stripes [counterStripes]counterStripe
}

// countStripe picks the stripe for a count made outside the workers from
// the address of the calling goroutine's stack: goroutines have stacks of
// their own, so two goroutines counting at once usually land on different
// stripes, and one goroutine counting in a loop keeps to one. The address
// only picks a stripe; a goroutine whose stack moves just changes stripe.
// Any goroutine outside the workers.
func countStripe() int {
	var b byte
	x := uint64(uintptr(unsafe.Pointer(&b))) >> 13
	return int(x * 0x9E3779B97F4A7C15 >> 60) // the top 4 bits: one of 16
}

// flush publishes the worker's plain counters, storing only those that
// changed: an atomic store is a locked instruction, and most of the
// counters (steals, drops, forwards...) stay put between two flushes.
// Owner only.
func (w *worker) flush() {
	w.beat.Store(w.runCount)
	if w.s.hooks.End != nil {
		w.s.tick() // only the End hook reads the clock often enough to need the workers' ticks
	}
	for c := numEager; c < numCounters; c++ {
		if n := w.ctr.n[c]; w.ctr.pub[c].Load() != n {
			w.ctr.pub[c].Store(n)
		}
	}
}
