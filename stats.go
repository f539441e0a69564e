package scheduler

import (
	"sync/atomic"

	"github.com/procsched/scheduler/relay"
)

// Stats is a snapshot of a scheduler's counters, from [Scheduler.Stats].
//
// Process counts (Live, Submitted, Ended, ...) are exact at the moment
// each is read. The per-step counters (Steps, Yields, message counts, the
// work-finding counters, and the Blocked and Idle counts) are kept by each
// worker in plain memory and published every 64 scheduling rounds and
// whenever the worker runs out of local work, so while a worker is busy
// they may trail by a few dozen steps; once the scheduler is idle they are
// exact. Figures are read one by one, not at one instant.
type Stats struct {
	Workers int `json:"workers"` // worker goroutines

	Processes ProcessStats `json:"processes"`
	Messages  MessageStats `json:"messages"`
	// Pool describes the blocking pool (see Call.Go).
	Pool PoolStats `json:"pool"`
	// DeadLetters counts messages that reached no process, by reason.
	DeadLetters DeadLetterStats `json:"deadLetters"`

	Steps  uint64 `json:"steps"`  // Step calls
	Yields uint64 `json:"yields"` // yields written by steps (Tell included)
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

	// Queues, at the time of the snapshot.
	GlobalQueue  int   `json:"globalQueue"`  // processes in the global queue
	WorkerQueues []int `json:"workerQueues"` // processes queued on each worker (next slot included)
	Timers       int   `json:"timers"`       // live timers: timer yields not yet fired, of processes not ended
	IdleWorkers  int   `json:"idleWorkers"`  // parked workers
}

// ProcessStats counts processes.
type ProcessStats struct {
	Live int64 `json:"live"` // started (Init included) and not yet ended
	// Live processes by state. Ready is what the queues hold, Blocked and
	// Idle are counted at the transitions, and Running is the rest, so the
	// four add up to Live; under load each is approximate.
	Ready   int64 `json:"ready"`
	Running int64 `json:"running"`
	Blocked int64 `json:"blocked"`
	Idle    int64 `json:"idle"`

	Submitted  uint64 `json:"submitted"`  // Init succeeded (Submit and spawns)
	InitFailed uint64 `json:"initFailed"` // Init failed or panicked; never ran
	Rejected   uint64 `json:"rejected"`   // refused by WithMaxProcesses
	Ended      uint64 `json:"ended"`      // ended, however they ended
	Failed     uint64 `json:"failed"`     // of Ended, ended with an error
	Forced     uint64 `json:"forced"`     // of Failed, closed at a shutdown deadline
	Panics     uint64 `json:"panics"`     // panics recovered (Init, Step, Close, handlers)
}

// MessageStats counts messages.
type MessageStats struct {
	Accepted uint64 `json:"accepted"` // queued in a mailbox
	Dropped  uint64 `json:"dropped"`  // dropped by a full mailbox's policy (new or old)
	Rejected uint64 `json:"rejected"` // refused by a full mailbox (MailboxReject)
	Sent     uint64 `json:"sent"`     // told by processes (StepOutput.Tell)
	// Bounced counts messages returned to a process of this node
	// undelivered: its own Tells refused at once, and messages handed back
	// later (by a transport, or evicted by MailboxDropOldest).
	Bounced uint64 `json:"bounced"`
	// Forwarded counts messages handed to the transport for processes of
	// other nodes (see WithTransport).
	Forwarded uint64 `json:"forwarded"`
	// Unread counts events (messages, completions) that were queued to a
	// process that ended before reading them.
	Unread uint64 `json:"unread"`
}

// Stats returns a snapshot of the scheduler's counters. Each worker keeps
// its own counters, written without contention, and Stats sums them; see
// [Stats] for how current they are. It costs a few loads per worker.
func (s *Scheduler) Stats() Stats {
	st := Stats{
		Workers:      len(s.workers),
		GlobalQueue:  s.global.Len(),
		WorkerQueues: make([]int, len(s.workers)),
		Timers:       s.timers.pending(),
		IdleWorkers:  int(s.idle.count.Load()),
	}
	st.Pool = s.pool.stats()
	ps, ms := &st.Processes, &st.Messages
	ps.Live = s.liveCount()
	// Leaving a waiting state is read before entering it, for the reason
	// given at liveCount.
	blockedOut := int64(s.counters.blockedOut.Load())
	idleOut := int64(s.counters.idleOut.Load())
	for _, w := range s.workers {
		blockedOut += int64(w.stats.blockedOut.Load())
		idleOut += int64(w.stats.idleOut.Load())
	}
	var blockedIn, idleIn int64
	ps.Submitted = s.counters.submitted.Load()
	ps.InitFailed = s.counters.initFailed.Load()
	ps.Rejected = s.counters.rejected.Load()
	ps.Ended = s.counters.completed.Load()
	ps.Failed = s.counters.failed.Load()
	ps.Forced = uint64(s.sd.forced.Load())
	ps.Panics = s.counters.panics.Load()
	ms.Unread = s.counters.dropped.Load()
	ms.Bounced = s.counters.bounced.Load()
	ms.Forwarded = s.counters.forwarded.Load()
	st.DeadLetters = DeadLetterStats{
		Unread:      s.counters.dead[DeadUnread].Load(),
		Bounces:     s.counters.dead[DeadBounce].Load(),
		Dropped:     s.counters.dead[DeadDropped].Load(),
		LateReplies: s.counters.dead[DeadLateReply].Load(),
	}
	for i := range s.extMsgs {
		e := &s.extMsgs[i]
		ms.Accepted += e.n[msgAccepted].Load()
		ms.Dropped += e.n[msgDropped].Load()
		ms.Rejected += e.n[msgRejected].Load()
	}
	for i, w := range s.workers {
		ws := &w.stats
		blockedIn += int64(ws.blockedIn.Load())
		idleIn += int64(ws.idleIn.Load())
		ps.Submitted += ws.spawned.Load()
		ps.InitFailed += ws.initFailed.Load()
		ps.Rejected += ws.rejected.Load()
		ps.Ended += ws.completed.Load()
		ps.Failed += ws.failed.Load()
		ps.Panics += ws.panics.Load()
		ms.Unread += ws.dropped.Load()
		ms.Accepted += ws.msgs[msgAccepted].Load()
		ms.Dropped += ws.msgs[msgDropped].Load()
		ms.Rejected += ws.msgs[msgRejected].Load()
		ms.Sent += ws.sent.Load()
		ms.Bounced += ws.bounced.Load()
		ms.Forwarded += ws.forwarded.Load()
		st.Steps += ws.steps.Load()
		st.Yields += ws.yields.Load()
		st.Cancelled += ws.cancelled.Load()
		st.Requeues += ws.requeues.Load()
		st.GlobalPops += ws.globalPops.Load()
		st.GlobalItems += ws.globalItems.Load()
		st.StealAttempts += ws.stealAttempts.Load()
		st.Steals += ws.steals.Load()
		st.Stolen += ws.stolen.Load()
		st.Spins += ws.spins.Load()
		st.Parks += ws.parks.Load()
		st.Wakes += ws.wakes.Load()
		st.WorkerQueues[i] = w.queueLen()
	}
	if s.watchdog != nil {
		st.SlowSteps = s.watchdog.slow.Load()
	}
	ps.Blocked = max(blockedIn-blockedOut, 0)
	ps.Idle = max(idleIn-idleOut, 0)
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
// was live. Once closing is set, that is final.
func (s *Scheduler) liveCount() int64 {
	ended := int64(s.counters.ended.Load())
	for _, w := range s.workers {
		ended += int64(w.stats.ended.Load())
	}
	started := int64(s.counters.started.Load())
	for _, w := range s.workers {
		started += int64(w.stats.started.Load())
	}
	return started - ended
}

// Message outcomes, indexes of the message counters.
const (
	msgAccepted = iota
	msgDropped
	msgRejected
	msgOutcomes
)

// msgStripes is the number of stripes of the external message counters.
const msgStripes = 16

// msgStripe is one stripe of the external message counters, padded to its
// own cache line.
type msgStripe struct {
	n [msgOutcomes]atomic.Uint64
	_ [64 - msgOutcomes*8]byte
}

// countMessage counts a message outcome: in the worker's plain counters
// when on a worker, else in a stripe chosen by the recipient.
func (s *Scheduler) countMessage(v via, to relay.PID, outcome int) {
	if v.w != nil && !v.call {
		v.w.n.msgs[outcome]++
		return
	}
	s.extMsgs[to.ID%msgStripes].n[outcome].Add(1)
}

// workerCounts are the per-step counters a worker keeps in plain memory;
// flush publishes them to workerStats.
type workerCounts struct {
	steps, yields, sent, bounced, requeues uint64
	forwarded, cancelled                   uint64
	msgs                                   [msgOutcomes]uint64
	blockedIn, idleIn, blockedOut, idleOut uint64
	globalPops, globalItems                uint64
	stealAttempts, steals, stolen, spins   uint64
}

// workerStats are a worker's published counters. Each has a single
// writer, its worker goroutine (wakes excepted: wakers add to it), which
// stores with a plain atomic store rather than a read-modify-write; the
// stores pair with the loads in Stats and liveCount.
type workerStats struct {
	started, ended, completed, initFailed, failed atomic.Uint64
	dropped, spawned, rejected, panics            atomic.Uint64
	steps, yields, sent, bounced, requeues        atomic.Uint64
	forwarded, cancelled                          atomic.Uint64
	msgs                                          [msgOutcomes]atomic.Uint64
	blockedIn, idleIn, blockedOut, idleOut        atomic.Uint64
	globalPops, globalItems                       atomic.Uint64
	stealAttempts, steals, stolen, spins, parks   atomic.Uint64
	wakes                                         atomic.Uint64 // several writers: Add
	_                                             [64]byte      // keeps the next worker's fields off these lines
}

// bump adds one to a single-writer counter.
func bump(c *atomic.Uint64) { c.Store(c.Load() + 1) }

// flush publishes the worker's local counters. Worker only.
func (w *worker) flush() {
	w.beat.Store(w.runCount)
	if w.s.hooks.End != nil {
		w.s.tick() // only the End hook reads the clock often enough to need the workers' ticks
	}
	n, st := &w.n, &w.stats
	st.steps.Store(n.steps)
	st.yields.Store(n.yields)
	st.sent.Store(n.sent)
	st.bounced.Store(n.bounced)
	st.requeues.Store(n.requeues)
	st.forwarded.Store(n.forwarded)
	st.cancelled.Store(n.cancelled)
	for i := range n.msgs {
		st.msgs[i].Store(n.msgs[i])
	}
	// Leaving a waiting state is published before entering it, so that
	// Stats, which reads the other way round, never sees more leaving
	// than entering.
	st.blockedOut.Store(n.blockedOut)
	st.idleOut.Store(n.idleOut)
	st.blockedIn.Store(n.blockedIn)
	st.idleIn.Store(n.idleIn)
	st.globalPops.Store(n.globalPops)
	st.globalItems.Store(n.globalItems)
	st.stealAttempts.Store(n.stealAttempts)
	st.steals.Store(n.steals)
	st.stolen.Store(n.stolen)
	st.spins.Store(n.spins)
}

// schedCounters are counted outside any worker (external submissions,
// external wake-ups, forced ends), with atomic adds.
type schedCounters struct {
	started, ended, completed, submitted, initFailed atomic.Uint64
	failed, dropped, rejected, panics                atomic.Uint64
	blockedOut, idleOut                              atomic.Uint64
	bounced, forwarded                               atomic.Uint64
	dead                                             [deadReasons]atomic.Uint64 // by DeadLetterReason
}
