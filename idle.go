package scheduler

import (
	"sync"
	"sync/atomic"
)

// Waking and parking. Workers follow the Go runtime's discipline:
//
//   - Whoever makes work runnable where other workers could take it calls
//     Scheduler.wakeWorker, which unparks one parked worker only if no
//     worker is searching already (s.spinning == 0). The woken worker is
//     handed the "searching" role with the wake-up, so a burst of new work
//     wakes one worker, not one per item.
//   - A searching worker that finds work stops searching; if it was the
//     last searcher it wakes another, so the burst spreads one worker at a
//     time while there is more to take.
//   - At most half of the workers that are not parked search at once.
//   - A worker that parks first stops searching, then lists itself as idle,
//     then looks at every queue once more. A waker that saw a searcher, or
//     saw no idle worker, is covered by that last look: it made its work
//     visible before it read those counters.
//
// Who may call what: wakeWorker, any goroutine that made work runnable;
// the rest, the worker itself (owner only).

// startSearching makes this worker a searcher unless half of the workers
// that are not parked already search.
// Owner only.
func (w *worker) startSearching() bool {
	s := w.s
	busy := int32(len(s.workers)) - s.idle.count.Load()
	if 2*s.spinning.Load() >= busy {
		return false
	}
	s.spinning.Add(1)
	w.spinning = true
	return true
}

// stopSearching ends this worker's search because it found work; the last
// searcher to do so wakes another worker, since more work may be waiting.
// Owner only.
func (w *worker) stopSearching() {
	w.spinning = false
	if w.s.spinning.Add(-1) == 0 {
		w.s.wakeWorker()
	}
}

// park blocks the worker until it is handed work or the scheduler stops.
// Owner only.
func (w *worker) park() {
	s := w.s
	if w.spinning {
		w.spinning = false
		s.spinning.Add(-1)
	}
	// Published before the worker is listed idle, so that a Stats that
	// finds every worker parked finds the counts of their searches too:
	// the flush as the worker ran out of work came before them. Only the
	// counters the search changed are stored, and a park ends in a futex
	// call anyway.
	w.flush()
	s.idle.push(w)
	// Work made runnable before we were listed may have found no one to
	// wake: look again now that wakers can see us. Timers that are due
	// are work; otherwise we may park as the timers' watcher.
	if s.phase.Load() >= phaseStopping || s.hasWork() || !w.watchTimers() {
		if s.idle.remove(w) {
			return
		}
		// A waker or an alarm took us off the list and is unparking
		// us; Park returns at once.
	}
	w.count(cParks)
	w.parker.Park()
	w.woke()
	if w.handedSearch.Swap(false) {
		// A waker took us off the idle list with the search: counted
		// here, by the one writer of this worker's counters.
		w.count(cWakes)
		w.spinning = true
	}
}

// wakeWorker unparks one idle worker, handing it the search, unless a
// worker is searching already or none is parked. Any goroutine, after the
// new work is visible in a queue.
func (s *Scheduler) wakeWorker() {
	if s.idle.count.Load() == 0 || s.spinning.Load() != 0 {
		return
	}
	if !s.spinning.CompareAndSwap(0, 1) {
		return
	}
	w := s.idle.pop()
	if w == nil {
		// Everybody got up meanwhile; they will find the work.
		s.spinning.Add(-1)
		return
	}
	w.handedSearch.Store(true)
	if h := testHookWake.Load(); h != nil {
		(*h)(w)
	}
	w.parker.Unpark()
}

// testHookWake, when set, is called by wakeWorker with each worker it is
// about to unpark. Tests only; costs a load per unpark, which is rare and
// costs a futex call anyway.
var testHookWake atomic.Pointer[func(*worker)]

// hasWork reports whether any queue holds a runnable process.
// Any goroutine.
func (s *Scheduler) hasWork() bool {
	if !s.global.Empty() {
		return true
	}
	// The next slots do not count: their owners are running and take
	// them next.
	for _, w := range s.workers {
		if w.dq.Len() > 0 {
			return true
		}
	}
	return false
}

// idleWorkers is the list of parked workers.
type idleWorkers struct {
	mu      sync.Mutex
	workers []*worker
	// count mirrors len(workers), written under mu and read without it by
	// wakers; see worker for why a stale read is harmless.
	count atomic.Int32
}

// push lists w as parked. Any goroutine: takes l.mu.
func (l *idleWorkers) push(w *worker) {
	l.mu.Lock()
	l.workers = append(l.workers, w)
	l.count.Store(int32(len(l.workers)))
	l.mu.Unlock()
}

// pop takes the most recently parked worker off the list, or returns nil. Any goroutine: takes l.mu.
func (l *idleWorkers) pop() *worker {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(l.workers)
	if n == 0 {
		return nil
	}
	w := l.workers[n-1]
	l.workers[n-1] = nil
	l.workers = l.workers[:n-1]
	l.count.Store(int32(n - 1))
	return w
}

// remove takes w off the list and reports whether it was there.
// Any goroutine: takes l.mu.
func (l *idleWorkers) remove(w *worker) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, x := range l.workers {
		if x == w {
			last := len(l.workers) - 1
			l.workers[i] = l.workers[last]
			l.workers[last] = nil
			l.workers = l.workers[:last]
			l.count.Store(int32(last))
			return true
		}
	}
	return false
}
