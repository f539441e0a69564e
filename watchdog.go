package scheduler

import (
	"math"
	"runtime/metrics"
	"sync/atomic"
	"time"

	"github.com/procsched/scheduler/relay"
)

// watchdog notices steps that take longer than a threshold, as the Go
// runtime's sysmon notices goroutines that run too long, at no cost per
// step to a worker whose steps are short.
//
// Watching. The watchdog samples every worker a few times per threshold.
// A busy worker publishes a beat every 64 rounds; while beats come, its
// runs are short and there is nothing to see. When a worker's beat has
// stalled for a quarter of the threshold, the watchdog watches it: the
// worker then publishes the process of each run it starts (cur) and marks
// the start and the end of each step (stepMark, odd inside Step). The
// watchdog looks for the process it is on: cur, if that is still running
// on this worker, else the one process in the table whose Running state
// word names this worker (a scan of the table, done once when a worker
// with short runs gets stuck). A run is identified by its process and
// state word, which carries the worker and run number; a step by its run
// and the worker's step mark.
//
// Counting. The wall time a step has been seen is not the step's time: the
// worker goroutine may be waiting for a processor (the Go runtime preempts
// a goroutine after a 10 ms time slice and queues it behind the others),
// or be in the scheduler's own code around the step. So the time between
// two samples counts for a step only if
//
//   - both samples found the worker in that step, inside Step by its mark.
//     A worker that was inside a step when the watchdog began to watch it
//     has not marked that step; until its mark moves, the watchdog cannot
//     tell whether it is still inside Step and counts the time as the
//     step's (the scheduler's code between steps takes microseconds, so a
//     worker that stays there for the threshold without waiting for a
//     processor is blocked in a handler, a hook, Init or Close);
//   - both samples found at most one goroutine waiting for a processor, by
//     the runtime's gauge of runnable goroutines. The watchdog needs a
//     processor to look: when all are busy, it has taken one from whatever
//     ran there, perhaps the very worker it looks at (always, with
//     GOMAXPROCS 1 and a step that computes), so one waiting goroutine may
//     be on its own account. A worker that is the only goroutine waiting
//     gets the next processor that frees up, within one time slice of
//     whatever runs there; with two or more waiting, other goroutines hold
//     the processors and the worker may be queued behind them for long;
//
// and it counts for at most one sampling interval, however late the second
// sample came: when the whole process stops (a CPU quota throttles it, the
// garbage collector stops the world), the watchdog stops too, and a step
// that was merely in progress must not be charged with the stop. Once the
// counted time reaches the threshold, the step is slow: the watchdog
// counts it, calls the hook and logs it, once per step.
//
// Rescue. Apart from that, once the watchdog has seen the same run for
// the threshold of wall time, whatever holds it up, it marks the worker
// stalled, which lets idle workers take the process waiting in its next
// slot (its deque can be stolen from anyway); if that slot is full it
// wakes a worker. Taking the next slot from a worker that is merely
// waiting for a processor does no harm, so this needs no proof that the
// step is slow and stays as prompt as the wall clock allows.
//
// Without the runtime's gauge (runtimes before Go 1.26), every sample
// counts as if no goroutine waited: the watchdog then counts wall time
// inside Step, and a worker that waits for a processor there is reported.
// Either way, a worker thread that the operating system deschedules (the
// machine runs more threads than it has CPUs) is invisible to the Go
// runtime, and its time counts; DefaultWatchdogThreshold is chosen above
// that noise.
type watchdog struct {
	s         *Scheduler
	threshold time.Duration
	interval  time.Duration // between samples while a worker is busy
	hook      func(SlowStepInfo)
	quit      chan struct{}
	samples   []watchSample // per worker; watchdog goroutine only
	// runnable reads the runtime's count of goroutines waiting for a
	// processor; nil if the runtime has no such metric. Watchdog goroutine
	// only.
	runnable []metrics.Sample
	slow     atomic.Uint64 // slow steps noticed, for Stats
}

// runnableMetric counts the goroutines that are ready to run but wait for
// a processor. The runtime computes it under its scheduler lock in time
// proportional to GOMAXPROCS, about 0.1 µs, without allocating.
const runnableMetric = "/sched/goroutines/runnable:goroutines"

// watchSample is what the watchdog knows of a worker.
type watchSample struct {
	beat      uint64
	beatSince time.Time // when beat was first seen
	// beats counts samples in a row that saw the beat move; the worker is
	// asked to stop publishing cur and step marks only after several, so
	// that a worker whose runs are merely long does not trigger a table
	// scan each time its beat pauses.
	beats int
	// markFrom is the worker's step mark when the watchdog last began to
	// watch it: while the mark still has that value, the worker has not
	// passed a step boundary since, and may or may not be inside Step.
	markFrom uint64

	// The run being watched, if any.
	run      *proc
	state    uint64    // its state word without flagWake
	id       uint64    // the ID of its process, read when the run was first seen
	method   string    // its process's entry point, read then too
	runSince time.Time // when that run was first seen
	rescued  bool      // its worker was marked stalled

	// The step of that run being watched.
	mark     uint64        // the worker's step mark at the last sample
	at       time.Time     // the last sample
	calm     bool          // the last sample was calm (see calm)
	counted  time.Duration // time counted for the step
	reported bool          // the step was reported already
}

// newWatchdog returns a watchdog for s that reports steps longer than threshold to hook (nil: none). Called by New; run starts it.
func newWatchdog(s *Scheduler, threshold time.Duration, hook func(SlowStepInfo)) *watchdog {
	wd := &watchdog{
		s:         s,
		threshold: threshold,
		hook:      hook,
		quit:      make(chan struct{}),
		interval:  max(threshold/4, time.Millisecond),
		samples:   make([]watchSample, len(s.workers)),
		runnable:  []metrics.Sample{{Name: runnableMetric}},
	}
	metrics.Read(wd.runnable)
	if wd.runnable[0].Value.Kind() != metrics.KindUint64 {
		wd.runnable = nil // metrics.KindBad: this runtime does not have it
	}
	return wd
}

// run is the watchdog goroutine. It samples every quarter threshold
// while any worker is busy; while all are idle it backs off, doubling the
// interval up to maxIdleBackoff times, so an idle scheduler costs next
// to nothing. A run that starts while it sleeps is noticed at most one
// interval late.
func (wd *watchdog) run() {
	gid := wd.s.addOwnGoroutine()
	stopped := false
	defer func() {
		if !stopped {
			if r := recover(); r != nil {
				panic(r) // not a Goexit: see goexited
			}
			wd.goexited(gid)
		}
		wd.s.wg.Done()
	}()
	interval := wd.interval
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			interval = wd.nextInterval(interval, wd.check())
			t.Reset(interval)
		case <-wd.quit:
			stopped = true
			return
		}
	}
}

// goexited, called by run as its goroutine gid unwinds before the
// watchdog was stopped, carries the watchdog on on a new goroutine: only
// the SlowStep hook calling runtime.Goexit gets here, and the goroutine
// cannot be saved. The call counts as the hook's return: the step stays
// reported, and the new goroutine goes on sampling, from a fresh
// interval, so later slow steps are reported too. It takes the old
// goroutine's place in the wait group (added before the old one's is
// given back) and in the list of the scheduler's own goroutines. A panic
// of the hook goes on instead: run's deferred function raises it again.
// Watchdog goroutine only, from run's deferred function.
func (wd *watchdog) goexited(gid uint64) {
	wd.s.removeOwnGoroutine(gid)
	wd.s.wg.Add(1)
	goLabelled(wd.run, "procsched", "watchdog")
}

// nextInterval returns the time to the next sample after a sample taken
// interval after the one before, which found a worker busy or not: the
// base interval while one is, else twice the last, at most
// maxIdleBackoff times the base, and at most the longest Duration: with
// the longest thresholds those products would wrap around to negative
// durations, which fire at once. Watchdog goroutine only.
func (wd *watchdog) nextInterval(interval time.Duration, busy bool) time.Duration {
	if busy {
		return wd.interval
	}
	limit := time.Duration(math.MaxInt64)
	if wd.interval <= limit/maxIdleBackoff {
		limit = maxIdleBackoff * wd.interval
	}
	if interval >= limit/2 {
		return limit
	}
	return 2 * interval
}

// unwatchAfter is how many samples in a row must see a worker's beat move
// before it stops publishing each run's process and marking its steps.
const unwatchAfter = 16

// maxIdleBackoff bounds the watchdog's interval while every worker is
// idle, in multiples of its base interval.
const maxIdleBackoff = 16

// check samples every worker and reports whether any was busy. Watchdog
// goroutine only.
func (wd *watchdog) check() (busy bool) {
	wd.s.tick()
	now := time.Now()
	var calm, calmRead bool
	for i, w := range wd.s.workers {
		smp := &wd.samples[i]
		beat := w.beat.Load()
		if w.idle.Load() || beat != smp.beat {
			// Idle, or making progress: short runs, nothing to watch.
			beats := smp.beats + 1
			*smp = watchSample{beat: beat, beatSince: now, beats: beats, markFrom: smp.markFrom}
			busy = busy || !w.idle.Load()
			if beats >= unwatchAfter && w.watched.Load() {
				w.watched.Store(false)
				w.stepFlags.And(^stepWatched)
			}
			continue
		}
		smp.beats = 0
		busy = true
		if now.Sub(smp.beatSince) < wd.threshold/4 {
			continue
		}
		if !w.watched.Load() {
			// The mark is read first: any mark the worker stores once it
			// sees stepWatched differs from it.
			smp.markFrom = w.stepMark.Load()
			w.watched.Store(true)
			w.stepFlags.Or(stepWatched)
		}
		p, st := wd.current(i, w)
		if p == nil {
			smp.run = nil
			continue
		}
		mark := w.stepMark.Load()
		if !calmRead {
			calm, calmRead = wd.calm(), true
		}
		switch {
		case p != smp.run || st != smp.state:
			id, method, ok := wd.identify(p, st)
			if !ok {
				smp.run = nil // the run has ended since current found it
				continue
			}
			smp.run, smp.state, smp.id, smp.method, smp.runSince, smp.rescued = p, st, id, method, now, false
			smp.mark, smp.counted, smp.reported = mark, 0, false
		case mark != smp.mark:
			smp.mark, smp.counted, smp.reported = mark, 0, false
		case calm && smp.calm && (mark&1 == 1 || mark == smp.markFrom):
			// The worker stayed in this step, inside Step as far as the
			// watchdog can tell, and other goroutines did not hold the
			// processors at either end.
			smp.counted += min(now.Sub(smp.at), wd.interval)
		}
		smp.at, smp.calm = now, calm
		if !smp.rescued && now.Sub(smp.runSince) >= wd.threshold {
			smp.rescued = true
			wd.rescue(w, p, st)
		}
		if !smp.reported && smp.counted >= wd.threshold {
			smp.reported = true
			wd.report(i, smp)
		}
	}
	return busy
}

// calm reports whether at most one goroutine is waiting for a processor
// (see watchdog); true if the runtime cannot say. Watchdog goroutine only.
func (wd *watchdog) calm() bool {
	n, ok := wd.waiting()
	return !ok || n <= 1
}

// waiting returns the number of goroutines waiting for a processor, and
// false if the runtime cannot say. Watchdog goroutine only.
func (wd *watchdog) waiting() (n uint64, ok bool) {
	if h := testHookRunnable.Load(); h != nil {
		return (*h)()
	}
	if wd.runnable == nil {
		return 0, false
	}
	metrics.Read(wd.runnable)
	return wd.runnable[0].Value.Uint64(), true
}

// testHookRunnable, when set, stands in for the runtime's count of
// goroutines waiting for a processor; ok false stands for a runtime
// without it. Tests only; the watchdog loads it at most once per sample.
var testHookRunnable atomic.Pointer[func() (n uint64, ok bool)]

// current returns the process worker i is running and its state word
// (without flagWake), or nil.
// Watchdog goroutine only.
func (wd *watchdog) current(i int, w *worker) (*proc, uint64) {
	if p := w.cur.Load(); p != nil {
		if st, ok := runningOn(p, i); ok {
			return p, st
		}
	}
	if smp := &wd.samples[i]; smp.run != nil {
		if st, ok := runningOn(smp.run, i); ok {
			return smp.run, st // the run found last time, still going
		}
	}
	// A parent its child's end claimed for the worker is Running on it
	// too, before its run (see worker.direct); the run the worker is in
	// is the one it began last.
	var found *proc
	var state uint64
	wd.s.table.forEach(func(p *proc) {
		if st, ok := runningOn(p, i); ok && (found == nil || st>>runShift > state>>runShift) {
			found, state = p, st
		}
	})
	return found, state
}

// runningOn reports whether p is Running on worker i, and its state word
// without flagWake.
// Any goroutine.
func runningOn(p *proc, i int) (uint64, bool) {
	st := p.state.Load() &^ flagWake
	return st, st&stateMask == stRunning && (st>>workerShift)&workerMask == uint64(i)
}

// rescue marks worker w stalled in the run st of p, so that idle workers
// may take the processes in its next and later slots and held queue, and
// wakes one if there is such a process. Watchdog goroutine only.
func (wd *watchdog) rescue(w *worker, p *proc, st uint64) {
	w.stalledRun.Store(st)
	w.stalledProc.Store(p)
	if w.next.Load() != nil || w.later.Load() != nil || w.held.Len() > 0 {
		wd.s.wakeWorker()
	}
}

// identify returns the ID and entry point of the process of p's run st,
// or false if that run has ended. They are read under p's lock, while
// the run is seen going on: once it has ended, the record may serve
// another process (see Scheduler.record), whose start sets them without
// the lock, but that start comes after the end's close, which needs the
// lock held here. (A run's state word is never seen again: run numbers
// are not reused.) Once per run the watchdog watches, so a report names
// the process even if its run ends before the report is made. Watchdog
// goroutine only.
func (wd *watchdog) identify(p *proc, st uint64) (id uint64, method string, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state.Load()&^flagWake != st {
		return 0, "", false
	}
	return p.id.Load(), wd.s.methodOf(p), true
}

// report handles the slow step that smp, the sample of worker i, has
// counted: counted, logged, and passed to the hook last, since a hook
// that calls runtime.Goexit ends the goroutine there (see goexited).
// Watchdog goroutine only.
func (wd *watchdog) report(i int, smp *watchSample) {
	wd.slow.Add(1)
	pid := relay.PID{Node: smp.run.node, ID: smp.id}
	if l := wd.s.log; l != nil {
		l.Warn("scheduler: slow step", "pid", pid, "method", smp.method, "worker", i, "running", smp.counted)
	}
	if wd.hook != nil {
		wd.hook(SlowStepInfo{PID: pid, Method: smp.method, Worker: i, Duration: smp.counted})
	}
}

// stop ends the watchdog goroutine. Called once, by the shutdown's stopper.
func (wd *watchdog) stop() { close(wd.quit) }

// stalledNow reports whether the worker's current run is one the watchdog
// has seen holding it for the threshold of wall time. Any goroutine.
func (w *worker) stalledNow() bool {
	p := w.stalledProc.Load()
	return p != nil && p.state.Load()&^flagWake == w.stalledRun.Load()
}
