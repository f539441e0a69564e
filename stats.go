package scheduler

import "sync/atomic"

// Stats is a snapshot of a scheduler's counters, from [Scheduler.Stats].
//
// Process counts (Live, Submitted, Completed, ...) are exact at the moment
// each is read. The per-step counters (Steps, Yields, Sent, Bounced,
// Requeues and the work-finding counters) are kept by each worker in plain
// memory and published every 64 scheduling rounds and whenever the worker
// runs out of local work, so while a worker is busy they may trail by a
// few dozen steps; once the scheduler is idle they are exact.
type Stats struct {
	Workers int // worker goroutines

	// Processes.
	Live       int64  // submitted or spawned and not yet ended
	Submitted  uint64 // processes whose Init succeeded (Submit and spawns)
	InitFailed uint64 // processes whose Init failed or panicked
	Completed  uint64 // processes that ended, however
	Failed     uint64 // of Completed, those that ended with an error
	Forced     uint64 // of Failed, those closed by a shutdown deadline
	Dropped    uint64 // events queued to processes that ended before reading them

	// Work.
	Steps     uint64 // Step calls
	Yields    uint64 // yields written by steps (Tell included)
	Sent      uint64 // messages told by processes (StepOutput.Tell)
	Bounced   uint64 // of Sent, those that could not be delivered
	Requeues  uint64 // processes requeued behind others after their step budget
	SlowSteps uint64 // runs the watchdog found running past its threshold

	// Finding work.
	GlobalPops    uint64 // batches taken from the global queue
	GlobalItems   uint64 // processes taken from the global queue
	StealAttempts uint64 // victims tried
	Steals        uint64 // successful steals
	Stolen        uint64 // processes moved by steals
	Spins         uint64 // spin rounds while searching
	Parks         uint64 // times a worker blocked
	Wakes         uint64 // times a parked worker was woken for work

	// Queues, at the time of the snapshot.
	GlobalQueue  int   // processes in the global queue
	WorkerQueues []int // processes in each worker's queue (next slot included)
	Timers       int   // timer yields not yet due
	IdleWorkers  int   // parked workers
}

// Stats returns a snapshot of the scheduler's counters. Each worker keeps
// its own counters, written without contention, and Stats sums them; see
// [Stats] for how current they are.
func (s *Scheduler) Stats() Stats {
	st := Stats{
		Workers:      len(s.workers),
		Live:         s.liveCount(),
		Submitted:    s.counters.submitted.Load(),
		InitFailed:   s.counters.initFailed.Load(),
		Completed:    s.counters.completed.Load(),
		Failed:       s.counters.failed.Load(),
		Forced:       uint64(s.forced.Load()),
		Dropped:      s.counters.dropped.Load(),
		GlobalQueue:  s.global.Len(),
		WorkerQueues: make([]int, len(s.workers)),
		Timers:       s.timers.pending(),
		IdleWorkers:  int(s.idle.count.Load()),
	}
	if s.watchdog != nil {
		st.SlowSteps = s.watchdog.slow.Load()
	}
	for i, w := range s.workers {
		ws := &w.stats
		st.Submitted += ws.spawned.Load()
		st.InitFailed += ws.initFailed.Load()
		st.Completed += ws.completed.Load()
		st.Failed += ws.failed.Load()
		st.Dropped += ws.dropped.Load()
		st.Steps += ws.steps.Load()
		st.Yields += ws.yields.Load()
		st.Sent += ws.sent.Load()
		st.Bounced += ws.bounced.Load()
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

// workerCounts are the per-step counters a worker keeps in plain memory;
// flush publishes them to workerStats.
type workerCounts struct {
	steps, yields, sent, bounced, requeues uint64
	globalPops, globalItems                uint64
	stealAttempts, steals, stolen, spins   uint64
}

// workerStats are a worker's published counters. Each has a single
// writer, its worker goroutine (wakes excepted: wakers add to it), which
// stores with a plain atomic store rather than a read-modify-write; the
// stores pair with the loads in Stats and liveCount.
type workerStats struct {
	started, ended, completed, initFailed, failed, dropped, spawned atomic.Uint64
	steps, yields, sent, bounced, requeues                          atomic.Uint64
	globalPops, globalItems                                         atomic.Uint64
	stealAttempts, steals, stolen, spins, parks                     atomic.Uint64
	wakes                                                           atomic.Uint64 // several writers: Add
	_                                                               [64]byte      // keeps the next worker's fields off these lines
}

// bump adds one to a single-writer counter.
func bump(c *atomic.Uint64) { c.Store(c.Load() + 1) }

// flush publishes the worker's local counters. Worker only.
func (w *worker) flush() {
	n := &w.n
	st := &w.stats
	st.steps.Store(n.steps)
	st.yields.Store(n.yields)
	st.sent.Store(n.sent)
	st.bounced.Store(n.bounced)
	st.requeues.Store(n.requeues)
	st.globalPops.Store(n.globalPops)
	st.globalItems.Store(n.globalItems)
	st.stealAttempts.Store(n.stealAttempts)
	st.steals.Store(n.steals)
	st.stolen.Store(n.stolen)
	st.spins.Store(n.spins)
}

// schedCounters are counted outside any worker (external submissions,
// forced ends), with atomic adds.
type schedCounters struct {
	started, ended, completed, submitted, initFailed, failed, dropped atomic.Uint64
}
