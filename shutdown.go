package scheduler

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"

	"github.com/procsched/scheduler/payload"
)

// The shutdown phase. A scheduler moves through these phases in this
// order, never back; the phase word (Scheduler.phase) is the one place
// that says where it is:
//
//	phaseRunning   accepting processes
//	phaseClosing   Shutdown began: new processes are refused and every
//	               live one was sent an EventCancel; the workers keep
//	               running so that cleanup yields are served
//	phaseForcing   a Shutdown's deadline passed: the processes still
//	               alive are being closed with ErrForced (skipped when
//	               every process ends on its own)
//	phaseStopping  no process is live: the workers and the watchdog are
//	               exiting
//	phaseStopped   every goroutine of the scheduler has exited; calls
//	               fail with ErrClosed
//
// The first Shutdown moves the phase from Running to Closing (a CAS, so
// only one call begins the shutdown); every later move is made by the
// stopper goroutine (see stopper), the one goroutine that carries the
// shutdown through.
const (
	phaseRunning uint32 = iota
	phaseClosing
	phaseForcing
	phaseStopping
	phaseStopped
)

// shutdown is the state of a scheduler's shutdown besides the phase.
type shutdown struct {
	// drained is closed once no process is live during Closing or
	// Forcing (see countEnd); drainOnce guards the close.
	drained   chan struct{}
	drainOnce sync.Once
	// force is closed by the first Shutdown whose deadline passes;
	// forceOnce guards the close.
	force     chan struct{}
	forceOnce sync.Once
	// stopped is closed by the stopper once the phase is Stopped; every
	// waiting Shutdown returns then.
	stopped chan struct{}
	// own lists the IDs of the scheduler's own goroutines (workers,
	// watchdog, stopper), and Scheduler.blocking those of its blocking
	// pool, both guarded by ownMu: a Shutdown called on one of them
	// cannot wait for the stop, since its caller is part of what must
	// stop. Added to by each of those goroutines as it starts; read by
	// Shutdown, and by a SendContext that finds a mailbox full (see
	// cannotWait). Goroutine IDs are never reused, so an ID left behind
	// by a goroutine that exited names nobody.
	ownMu sync.Mutex
	own   []uint64
}

// newShutdown returns the shutdown state of a new scheduler, running. Called by New.
func newShutdown() shutdown {
	return shutdown{
		drained: make(chan struct{}),
		force:   make(chan struct{}),
		stopped: make(chan struct{}),
	}
}

// closing reports whether Shutdown has begun. Any goroutine.
func (s *Scheduler) closing() bool { return s.phase.Load() >= phaseClosing }

// forcing reports whether processes still alive are to be closed at once:
// a Shutdown's deadline passed. Any goroutine.
func (s *Scheduler) forcing() bool { return s.phase.Load() >= phaseForcing }

// Shutdown stops the scheduler. It refuses new processes at once, sends
// every live process an [EventCancel] whose Error is [ErrShuttingDown]
// (cancelling its context with that cause), and keeps the workers running
// (so cleanup yields that complete later are served) until every process
// has ended. It returns once the scheduler has stopped: no goroutine of
// the scheduler is left, and later calls fail with [ErrClosed].
//
// ctx is the deadline: when it is done before every process has ended,
// the processes still alive are forced (Close is called on each exactly
// once, after any Step in progress returns; their Handles report
// [ErrForced]), and Shutdown returns once they are closed.
//
// Shutdown may be called any number of times, from any goroutine, also
// concurrently. Every call returns only once the scheduler has stopped,
// and says how: nil when every process ended on its own; otherwise an
// error wrapping [ErrForced] that says how many processes were forced,
// and also ctx's error when it was this call's deadline that passed.
// Each call's own deadline counts: the first one to pass forces. A call
// made after the stop returns the same result at once, without its ctx's
// error even if ctx is done: its deadline forced nothing.
//
// Shutdown called on one of the scheduler's own goroutines (in a Step,
// Close, a handler while it runs on its worker, work a handler gave to
// [Call.Go], or a hook), or by a
// process that a caller helping the scheduler runs (see
// [WithCallerHelp]; while a caller helps this scheduler, a goroutine
// that helps any scheduler is taken for it), cannot wait, because its
// caller is part of what must stop: it begins the shutdown
// (ctx still forces at its deadline), returns an error wrapping
// [ErrShutdownStarted] at once, and the shutdown completes after the
// caller returns to the scheduler. Init runs on the goroutine that called
// Submit and must not call Shutdown; nor must the Close that follows a
// failed Init there, nor the hooks that run there for the process being
// started (Start, and Panic for a panic in its Init or that Close),
// since Shutdown would wait for that process, whatever its deadline
// (see [Hooks]).
//
// A Step that never returns keeps Shutdown waiting: the scheduler cannot
// stop a goroutine. A nil ctx is refused with [ErrNilContext].
func (s *Scheduler) Shutdown(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("%w: Shutdown", ErrNilContext)
	}
	if s.phase.CompareAndSwap(phaseRunning, phaseClosing) {
		s.beginShutdown()
	}
	if s.onOwnGoroutine() || s.onHelper() {
		if ctx.Done() != nil {
			go func() {
				select {
				case <-ctx.Done():
					s.sd.forceOnce.Do(func() { close(s.sd.force) })
				case <-s.sd.stopped:
				}
			}()
		}
		return fmt.Errorf("%w: Shutdown was called on one of the scheduler's own goroutines, which cannot wait for the stop", ErrShutdownStarted)
	}
	select {
	case <-s.sd.stopped:
		// Stopped already: this call's deadline forced nothing, even if
		// ctx is done too, which the select below would pick at random.
		return s.shutdownResult(nil)
	default:
	}
	select {
	case <-s.sd.stopped:
		return s.shutdownResult(nil)
	case <-ctx.Done():
	}
	s.sd.forceOnce.Do(func() { close(s.sd.force) })
	<-s.sd.stopped
	return s.shutdownResult(ctx.Err())
}

// shutdownResult is what a Shutdown returns once the scheduler stopped;
// deadline is the caller's ctx error if its deadline passed first.
func (s *Scheduler) shutdownResult(deadline error) error {
	n := s.total(cForced)
	switch {
	case n == 0:
		return nil
	case deadline != nil:
		return fmt.Errorf("%w: %d process(es) still running at the deadline were closed: %w", ErrForced, n, deadline)
	}
	return fmt.Errorf("%w: %d process(es) still running at a shutdown deadline were closed", ErrForced, n)
}

// beginShutdown cancels every live process and starts the stopper. Called
// once, by the Shutdown that moved the phase to Closing.
func (s *Scheduler) beginShutdown() {
	if s.log != nil {
		s.log.Info("scheduler: shutting down", "live", s.liveCount())
	}
	// The phase is Closing: a start counted from now on backs out, and
	// one counted before is seen here or cancels itself once published
	// (see start).
	s.drainIfNoneLive()
	s.table.forEach(func(p *proc) {
		if woken, _ := p.terminate(pfShutdownCancel, p.id.Load()); woken != 0 {
			s.woke(p, woken, via{})
		}
	})
	goLabelled(s.stopper, "procsched", "stopper")
}

// stopper is the goroutine that carries a shutdown through: it waits for
// the last process to end, forcing the ones still alive if a deadline
// passes first, then releases the timers left, stops the workers and the
// watchdog goroutine and waits for them. It runs the End hook and Close of forced
// processes, so those run on a goroutine of the scheduler's.
func (s *Scheduler) stopper() {
	gid := s.addOwnGoroutine()
	forcing := true
	defer func() {
		if forcing {
			if r := recover(); r != nil {
				panic(r) // not a Goexit: see stopperGoexited
			}
			s.stopperGoexited(gid)
		}
	}()
	select {
	case <-s.sd.drained:
	case <-s.sd.force:
		s.phase.CompareAndSwap(phaseClosing, phaseForcing)
		s.table.forEach(s.tryForce)
		<-s.sd.drained
	}
	forcing = false
	s.phase.Store(phaseStopping)
	if s.helper != nil {
		// A caller may still be in a help: ending the last process, whose
		// end released the wait above before its Close's aftermath (the
		// End and DeadLetter hooks, its monitors, its Handle) was done,
		// or handing back what it took. The workers are waited for below;
		// the helper is waited for here, and the lock is kept, so that no
		// caller helps once the scheduler stops.
		s.helpMu.Lock()
	}
	s.pool.close()
	s.timers.stop()
	if s.watchdog != nil {
		s.watchdog.stop()
	}
	for _, w := range s.workers {
		w.parker.Unpark()
	}
	s.wg.Wait()
	s.phase.Store(phaseStopped)
	if s.log != nil {
		s.log.Info("scheduler: shut down", "forced", s.total(cForced))
	}
	close(s.sd.stopped)
}

// stopperGoexited, deferred by stopper, starts a new stopper when the
// goroutine gid unwinds before the processes are all ended: the Close,
// End hook or DeadLetter hook of a process it forced called
// runtime.Goexit (callClose and callEndHook ended that process first),
// which nothing can stop from ending the goroutine. The new stopper
// walks the table again: the processes forced already are Ended, and
// tryForce passes them over. A panic, which only a hook raises here,
// goes on: stopper's deferred function raises it again instead of
// calling this. The stopper only.
func (s *Scheduler) stopperGoexited(gid uint64) {
	s.removeOwnGoroutine(gid)
	goLabelled(s.stopper, "procsched", "stopper")
}

// tryForce completes p as forced if it is not Running or Ended (the
// state also of a reused record whose new process runs Init, until its
// starter publishes it, and then cancels it, since the scheduler is
// closing: see proc.recycleFor);
// a Running process is forced by its worker when its step returns (it
// checks forcing after each step and after each move to a waiting state).
// Any goroutine; the state CAS makes exactly one party complete a process.
func (s *Scheduler) tryForce(p *proc) {
	for {
		st := p.state.Load()
		switch st & stateMask {
		case stRunning, stEnded:
			return
		}
		if p.state.CompareAndSwap(st, stEnded) {
			switch st & stateMask {
			case stBlocked:
				s.count(via{}, cBlockedOut)
			case stIdle:
				s.count(via{}, cIdleOut)
			}
			s.finish(p, via{}, payload.Payload{}, ErrForced, true)
			return
		}
	}
}

// addOwnGoroutine records the calling goroutine as one of the
// scheduler's own (see shutdown.own) and returns its ID. Called by each
// such goroutine as it starts, but for the blocking pool's (see
// addBlockingGoroutine).
func (s *Scheduler) addOwnGoroutine() uint64 {
	id := goroutineID()
	s.sd.ownMu.Lock()
	s.sd.own = append(s.sd.own, id)
	s.sd.ownMu.Unlock()
	return id
}

// removeOwnGoroutine forgets the scheduler's own goroutine id, which is
// exiting while the scheduler runs: a worker's goroutine that code it
// ran ended with runtime.Goexit (see worker.goexited), whose successor
// adds itself.
func (s *Scheduler) removeOwnGoroutine(id uint64) {
	s.sd.ownMu.Lock()
	if i := slices.Index(s.sd.own, id); i >= 0 {
		s.sd.own = slices.Delete(s.sd.own, i, i+1)
	}
	s.sd.ownMu.Unlock()
}

// addBlockingGoroutine records the calling goroutine, one of the
// blocking pool's, as one of the scheduler's own (see Scheduler.blocking)
// and returns its ID, for removeBlockingGoroutine. Called by each pool
// goroutine as it starts.
func (s *Scheduler) addBlockingGoroutine() uint64 {
	id := goroutineID()
	s.sd.ownMu.Lock()
	s.blocking = append(s.blocking, id)
	s.sd.ownMu.Unlock()
	return id
}

// removeBlockingGoroutine forgets the pool goroutine id, which is
// exiting: pool goroutines come and go while the scheduler runs, and the
// list must not grow.
func (s *Scheduler) removeBlockingGoroutine(id uint64) {
	s.sd.ownMu.Lock()
	if i := slices.Index(s.blocking, id); i >= 0 {
		last := len(s.blocking) - 1
		s.blocking[i] = s.blocking[last]
		s.blocking = s.blocking[:last]
	}
	s.sd.ownMu.Unlock()
}

// onOwnGoroutine reports whether the caller runs on one of the
// scheduler's own goroutines, the blocking pool's included. Any
// goroutine; it costs a stack read, which is why only Shutdown asks.
func (s *Scheduler) onOwnGoroutine() bool {
	id := goroutineID()
	s.sd.ownMu.Lock()
	defer s.sd.ownMu.Unlock()
	return slices.Contains(s.sd.own, id) || slices.Contains(s.blocking, id)
}

// cannotWait reports whether the caller must not wait for a process to
// make room in its mailbox: it runs on one of the scheduler's own
// goroutines but for the blocking pool's, which are there to block (a
// worker, which may be the one that has to run the process; the
// stopper, which closes processes at a forced shutdown; the watchdog),
// or it is a process that a helping caller runs (see onHelper). Any
// goroutine; it costs a stack read or two, so only a SendContext or
// TellContext that found a mailbox full asks.
func (s *Scheduler) cannotWait() bool {
	id := goroutineID()
	s.sd.ownMu.Lock()
	own := slices.Contains(s.sd.own, id)
	s.sd.ownMu.Unlock()
	return own || s.onHelper()
}

// goroutineID returns the calling goroutine's ID, read from the first
// line of its stack trace ("goroutine 123 [running]:"). The runtime keeps
// that format stable and offers the ID no other way; it costs about a
// microsecond, so it is read only when a goroutine starts, when Shutdown
// is called and when a SendContext or TellContext finds a mailbox full.
// Any goroutine.
func goroutineID() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	const prefix = "goroutine "
	if len(b) < len(prefix) || string(b[:len(prefix)]) != prefix {
		panic("scheduler: unexpected goroutine stack header " + string(b))
	}
	var id uint64
	for _, c := range b[len(prefix):] {
		if c < '0' || c > '9' {
			break
		}
		id = id*10 + uint64(c-'0')
	}
	return id
}
