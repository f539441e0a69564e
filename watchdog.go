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
// that run too long. It samples every worker a few times per threshold: a
// run is identified by the worker's current process and that process's
// state word, which carries the run's number while it is Running; when a
// busy worker shows the same run as a sample at least the threshold ago,
// that run is slow. It then counts it, calls
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
	cur      *proc
	state    uint64    // cur's state word without flagWake: the run
	since    time.Time // when this run was first seen
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
		idle := w.idle.Load()
		busy = busy || !idle
		p := w.cur.Load()
		var st uint64
		if p != nil {
			st = p.state.Load() &^ flagWake
		}
		if idle || p == nil || st&stateMask != stRunning {
			*smp = watchSample{} // nothing running
			continue
		}
		if p != smp.cur || st != smp.state {
			*smp = watchSample{cur: p, state: st, since: now}
			continue
		}
		d := now.Sub(smp.since)
		if d < wd.threshold || smp.reported {
			continue
		}
		smp.reported = true
		wd.slow.Add(1)
		w.stalledRun.Store(st)
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
	return busy
}

func (wd *watchdog) stop() { close(wd.quit) }

// stalledNow reports whether the worker's current run is one the watchdog
// found running past its threshold. Any goroutine.
func (w *worker) stalledNow() bool {
	st := w.stalledRun.Load()
	if st == 0 {
		return false
	}
	p := w.cur.Load()
	return p != nil && p.state.Load()&^flagWake == st
}
