package scheduler

import (
	"container/heap"
	"sync"
	"time"

	"github.com/procsched/scheduler/relay"
)

// timerService runs every timer yield of a scheduler on one goroutine with
// one time.Timer set to the earliest deadline, so a sleeping process costs
// a heap entry (24 bytes), not a goroutine or a runtime timer.
//
// Deadlines are kept as durations since the service started, measured on
// the monotonic clock, so wall-clock jumps do not move them.
type timerService struct {
	s     *Scheduler
	epoch time.Time

	mu      sync.Mutex // guards entries
	entries timerHeap
	// kick wakes the goroutine when a new earliest deadline arrives; one
	// buffered signal is enough, the goroutine re-reads the heap.
	kick chan struct{}
	quit chan struct{}
}

type timerEntry struct {
	when int64  // nanoseconds since epoch
	pid  uint64 // the process's ID
	seq  uint64 // its yield (see worker.register)
}

type timerHeap []timerEntry

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].when < h[j].when }
func (h timerHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)        { *h = append(*h, x.(timerEntry)) }
func (h *timerHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

func newTimerService(s *Scheduler) *timerService {
	return &timerService{
		s:     s,
		epoch: time.Now(),
		kick:  make(chan struct{}, 1),
		quit:  make(chan struct{}),
	}
}

// at converts t to the service's clock.
func (ts *timerService) at(t time.Time) int64 { return int64(t.Sub(ts.epoch)) }

// add schedules the completion of process pid's yield seq at when, in
// nanoseconds on the service's clock.
func (ts *timerService) add(pid, seq uint64, when int64) {
	ts.mu.Lock()
	heap.Push(&ts.entries, timerEntry{when: when, pid: pid, seq: seq})
	earliest := ts.entries[0].seq == seq
	ts.mu.Unlock()
	if earliest {
		select {
		case ts.kick <- struct{}{}:
		default:
		}
	}
}

// remove releases the timer of yield seq, if it has one. Any goroutine.
func (ts *timerService) remove(seq uint64) {
	// The heap has no index by yield: a removed timer stays until it is
	// due and then completes nothing, since its yield is not pending.
}

// pending returns the number of timers not yet fired.
func (ts *timerService) pending() int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return len(ts.entries)
}

// run is the timer goroutine: it completes due timers, then sleeps until
// the next deadline, a new earliest timer, or stop.
func (ts *timerService) run() {
	defer ts.s.wg.Done()
	_ = ts.s.addOwnGoroutine()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	var due []timerEntry
	for {
		now := int64(time.Since(ts.epoch))
		ts.s.coarse.Store(now)
		ts.mu.Lock()
		for len(ts.entries) > 0 && ts.entries[0].when <= now {
			due = append(due, heap.Pop(&ts.entries).(timerEntry))
		}
		next := time.Duration(-1)
		if len(ts.entries) > 0 {
			next = time.Duration(ts.entries[0].when - now)
		}
		ts.mu.Unlock()
		for _, e := range due {
			// The process may have ended meanwhile; then there is
			// nobody to tell.
			_ = ts.s.complete(relay.PID{Node: ts.s.node, ID: e.pid}, Event{Type: EventYieldComplete}, e.seq, via{})
		}
		clear(due)
		due = due[:0]
		if next >= 0 {
			t.Reset(next)
		} else {
			t.Stop()
		}
		select {
		case <-t.C:
		case <-ts.kick:
		case <-ts.quit:
			return
		}
	}
}

// stop ends the timer goroutine; timers not yet due never fire.
func (ts *timerService) stop() { close(ts.quit) }
