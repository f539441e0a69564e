package scheduler

import (
	"sync/atomic"
	"time"

	"github.com/procsched/scheduler/relay"
)

// SlowStep describes a step that has been running longer than the
// watchdog's threshold (see [WithWatchdog]).
type SlowStep struct {
	PID      relay.PID     // the process
	Method   string        // its entry point
	Worker   int           // the worker running it
	Duration time.Duration // how long the step had been running when noticed (a lower bound)
}

// watchdog notices runs (steps of one process, back to back) that last
// longer than a threshold, as the Go runtime's sysmon notices goroutines
// that run too long, at no cost per run to a worker whose runs are short.
//
// It samples every worker a few times per threshold. A busy worker
// publishes a beat every 64 rounds; while beats come, its runs are short
// and there is nothing to see. When a worker's beat has stalled for a
// quarter of the threshold, the watchdog asks it to publish the process
// of each run it starts (cur) and looks for the process it is on: cur, if
// that is still running on this worker, else the one process in the table
// whose Running state word names this worker (a scan of the table, done
// once when a worker with short runs gets stuck). A run is identified by
// its process and state word, which carries the worker and run number;
// once the watchdog has seen the same run for the threshold, the run is
// slow: it counts it, calls the hook, and marks the worker stalled, which
// lets idle workers take the process waiting in its next slot (its deque
// can be stolen from anyway); if that slot is full it wakes a worker.
type watchdog struct {
	s         *Scheduler
	threshold time.Duration
	hook      func(SlowStep)
	quit      chan struct{}
	samples   []watchSample // per worker; watchdog goroutine only
	slow      atomic.Uint64 // slow runs noticed, for Stats
}

// watchSample is what the watchdog knows of a worker.
type watchSample struct {
	beat      uint64
	beatSince time.Time // when beat was first seen
	// beats counts samples in a row that saw the beat move; the worker is
	// asked to stop publishing cur only after several, so that a worker
	// whose runs are merely long does not trigger a table scan each time
	// its beat pauses.
	beats    int
	run      *proc     // the run being watched, if any
	state    uint64    // its state word without flagWake
	since    time.Time // when that run was first seen
	reported bool      // that run was reported already
}

func newWatchdog(s *Scheduler, threshold time.Duration, hook func(SlowStep)) *watchdog {
	return &watchdog{
		s:         s,
		threshold: threshold,
		hook:      hook,
		quit:      make(chan struct{}),
		samples:   make([]watchSample, len(s.workers)),
	}
}

// run is the watchdog goroutine. It samples every quarter threshold
// while any worker is busy; while all are idle it backs off, doubling the
// interval up to maxIdleBackoff times, so an idle scheduler costs next
// to nothing. A run that starts while it sleeps is noticed at most one
// interval late.
func (wd *watchdog) run() {
	defer wd.s.wg.Done()
	_ = wd.s.addOwnGoroutine()
	base := max(wd.threshold/4, time.Millisecond)
	interval := base
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case now := <-t.C:
			if wd.check(now) {
				interval = base
			} else {
				interval = min(2*interval, maxIdleBackoff*base)
			}
			t.Reset(interval)
		case <-wd.quit:
			return
		}
	}
}

// unwatchAfter is how many samples in a row must see a worker's beat move
// before it stops publishing each run's process.
const unwatchAfter = 16

// maxIdleBackoff bounds the watchdog's interval while every worker is
// idle, in multiples of its base interval.
const maxIdleBackoff = 16

// check samples every worker and reports whether any was busy.
func (wd *watchdog) check(now time.Time) (busy bool) {
	wd.s.tick()
	for i, w := range wd.s.workers {
		smp := &wd.samples[i]
		beat := w.beat.Load()
		if w.idle.Load() || beat != smp.beat {
			// Idle, or making progress: short runs, nothing to watch.
			beats := smp.beats + 1
			*smp = watchSample{beat: beat, beatSince: now, beats: beats}
			busy = busy || !w.idle.Load()
			if beats >= unwatchAfter && w.watched.Load() {
				w.watched.Store(false)
			}
			continue
		}
		smp.beats = 0
		busy = true
		if now.Sub(smp.beatSince) < wd.threshold/4 {
			continue
		}
		if !w.watched.Load() {
			w.watched.Store(true)
		}
		p, st := wd.current(i, w)
		if p == nil {
			smp.run = nil
			continue
		}
		if p != smp.run || st != smp.state {
			smp.run, smp.state, smp.since, smp.reported = p, st, now, false
			continue
		}
		d := now.Sub(smp.since)
		if d < wd.threshold || smp.reported {
			continue
		}
		smp.reported = true
		wd.report(i, w, p, st, d)
	}
	return busy
}

// current returns the process worker i is running and its state word
// (without flagWake), or nil.
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
	var found *proc
	var state uint64
	wd.s.table.forEach(func(p *proc) {
		if st, ok := runningOn(p, i); ok {
			found, state = p, st
		}
	})
	return found, state
}

// runningOn reports whether p is Running on worker i, and its state word
// without flagWake.
func runningOn(p *proc, i int) (uint64, bool) {
	st := p.state.Load() &^ flagWake
	return st, st&stateMask == stRunning && (st>>workerShift)&workerMask == uint64(i)
}

// report handles a slow run.
func (wd *watchdog) report(i int, w *worker, p *proc, st uint64, d time.Duration) {
	wd.slow.Add(1)
	w.stalledRun.Store(st)
	w.stalledProc.Store(p)
	if w.next.Load() != nil {
		wd.s.wakeWorker()
	}
	if wd.hook != nil {
		wd.hook(SlowStep{PID: p.pid(), Method: wd.s.methodOf(p), Worker: i, Duration: d})
	}
	if l := wd.s.log; l != nil {
		l.Warn("scheduler: slow step", "pid", p.pid(), "method", wd.s.methodOf(p), "worker", i, "running", d)
	}
}

func (wd *watchdog) stop() { close(wd.quit) }

// stalledNow reports whether the worker's current run is one the watchdog
// found running past its threshold. Any goroutine.
func (w *worker) stalledNow() bool {
	p := w.stalledProc.Load()
	return p != nil && p.state.Load()&^flagWake == w.stalledRun.Load()
}
