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
// that run too long. It samples every worker a few times per threshold;
// when a worker started no run since a sample at least the threshold
// ago and is not idle, its current run is slow. It then counts it, calls
// the hook, and marks the worker stalled, which lets idle workers take
// the process waiting in its next slot (its deque can be stolen from
// anyway); if that slot is full it wakes a worker to do so.
type watchdog struct {
	s         *Scheduler
	threshold time.Duration
	hook      func(SlowStep)
	quit      chan struct{}
	samples   []watchSample // per worker; watchdog goroutine only
	slow      atomic.Uint64 // slow runs noticed, for Stats
}

// watchSample is what the watchdog last saw of a worker.
type watchSample struct {
	runs     uint64
	since    time.Time // when runs was first seen
	reported bool      // this run was reported already
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

// maxIdleBackoff bounds the watchdog's interval while every worker is
// idle, in multiples of its base interval.
const maxIdleBackoff = 16

// check samples every worker and reports whether any was busy.
func (wd *watchdog) check(now time.Time) (busy bool) {
	for i, w := range wd.s.workers {
		smp := &wd.samples[i]
		runs := w.runs.Load()
		idle := w.idle.Load()
		busy = busy || !idle
		if runs != smp.runs || idle {
			*smp = watchSample{runs: runs, since: now}
			continue
		}
		d := now.Sub(smp.since)
		if d < wd.threshold || smp.reported {
			continue
		}
		smp.reported = true
		p := w.cur.Load()
		if p == nil || w.runs.Load() != runs {
			continue // it moved on while we looked
		}
		wd.slow.Add(1)
		w.stalled.Store(true)
		if w.next.Load() != nil {
			wd.s.wakeWorker()
		}
		if wd.hook != nil {
			wd.hook(SlowStep{PID: p.pid(), Method: p.method, Worker: i, Duration: d})
		}
	}
	return busy
}

func (wd *watchdog) stop() { close(wd.quit) }

// endWatchedRun ends a run the watchdog may have marked: a stalled worker
// is no longer stalled once its run is over. Worker only.
func (w *worker) endWatchedRun() {
	if w.stalled.Load() {
		w.stalled.Store(false)
	}
}
