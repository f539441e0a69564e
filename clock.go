package scheduler

import "sync/atomic"

// coarseClock is the scheduler's coarse clock: nanoseconds since the timer
// service's epoch, read with a load instead of a clock call. It is
// advanced, never moved back, by
//
//   - the watchdog at each sample (a few times per threshold),
//   - a worker that fires timers, to the clock reading it fired them at,
//   - and, when the End hook is set, every worker each time it publishes
//     its counters (every 64 rounds, and when it goes idle),
//
// so it lags the true time by at most a quarter of the watchdog's
// threshold while workers are busy. Its one reader is the End hook's
// bookkeeping (a process's start and end times, for EndInfo.Duration).
type coarseClock struct {
	// ns is the reading. Advanced by CAS from any goroutine (see
	// advance); loaded without ordering anything else.
	ns atomic.Int64
}

// now returns the clock's reading. Any goroutine.
func (c *coarseClock) now() int64 { return c.ns.Load() }

// advance moves the clock forward to now, or leaves it if it is already
// there or later. Any goroutine.
func (c *coarseClock) advance(now int64) {
	for {
		old := c.ns.Load()
		if old >= now || c.ns.CompareAndSwap(old, now) {
			return
		}
	}
}

// tick advances the coarse clock to the timer service's clock. Any
// goroutine.
func (s *Scheduler) tick() {
	s.coarse.advance(s.timers.now())
}
