package scheduler

import (
	"context"
	"fmt"
	"time"

	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// Submit starts process p at entry point method with input. It assigns
// the process a PID that is never reused, calls p.Init synchronously (on
// the caller's goroutine) with the process context, and queues the
// process to run. The returned [Handle] names the process and yields its
// result.
//
// If Init fails or panics, Submit calls p.Close and returns an error
// wrapping [ErrInit] and Init's error; the process never runs. Submit also
// fails with [ErrNilProcess], [ErrEmptyMethod], [ErrNilContext], ctx's
// error if ctx is already done, and [ErrClosed] once Shutdown has begun.
//
// ctx bounds the submission only: the process context carries ctx's
// values but not its cancellation (see [Process]).
func (s *Scheduler) Submit(ctx context.Context, p Process, method string, input payload.Payloads, opts ...SubmitOption) (Handle, error) {
	return s.submit(ctx, nil, p, method, input, opts, via{})
}

// submit is Submit and Call.Submit: values, if not nil, is where the
// process context's values come from when ctx has none to offer; v says
// where the process is queued.
func (s *Scheduler) submit(ctx context.Context, values context.Context, p Process, method string, input payload.Payloads, opts []SubmitOption, v via) (Handle, error) {
	if ctx == nil {
		return Handle{}, fmt.Errorf("%w: Submit", ErrNilContext)
	}
	if err := ctx.Err(); err != nil {
		return Handle{}, err
	}
	so, err := applySubmitOptions(opts)
	if err != nil {
		return Handle{}, err
	}
	if values == nil || (ctx != context.Background() && ctx != context.TODO()) {
		values = ctx
	}
	pr, err := s.start(values, p, method, input, 0, 0, nil, so.mailbox, true)
	if err != nil {
		return Handle{}, err
	}
	s.enqueue(pr, v)
	return Handle{p: pr}, nil
}

// start creates, registers and initialises a process; the caller queues
// it. values is the context its Value lookups go to; awaiter and awaitSeq
// name the parent yield that waits for its end (SpawnAwait), if any; w is
// the worker doing this, nil outside workers; mailbox, if not nil, is the
// process's own mailbox limit; handle says the caller gets a Handle, so
// the result must be kept.
func (s *Scheduler) start(values context.Context, p Process, method string, input payload.Payloads, awaiter, awaitSeq uint64, w *worker, mailbox *mailboxLimit, handle bool) (*proc, error) {
	if p == nil {
		return nil, ErrNilProcess
	}
	if method == "" {
		return nil, ErrEmptyMethod
	}
	s.countStart(w)
	if s.closing() {
		s.countEnd(w)
		return nil, ErrClosed
	}
	if s.maxProcs > 0 && !s.reserveProc() {
		if w != nil {
			bump(&w.stats.rejected)
		} else {
			s.counters.rejected.Add(1)
		}
		s.countEnd(w)
		return nil, fmt.Errorf("%w: the limit is %d", ErrTooManyProcesses, s.maxProcs)
	}
	id, ok := s.table.alloc(w.slotCache())
	if !ok {
		s.releaseProc()
		s.countEnd(w)
		return nil, fmt.Errorf("%w: the process table is full", ErrTooManyProcesses)
	}
	pr := s.newProc()
	pr.id, pr.node, pr.impl = id, s.node, p
	pr.awaiter, pr.awaitSeq = awaiter, awaitSeq
	pr.methodID = s.internMethod(method, w)
	if handle {
		pr.flags = pfHandle // not yet shared: no lock needed
	}
	if values == context.Background() || values == context.TODO() {
		values = nil // nothing to look up
	}
	if values != nil || mailbox != nil || pr.methodID == 0 {
		x := &procExtra{values: values, mailbox: mailbox}
		if pr.methodID == 0 {
			x.method = method
		}
		if mailbox != nil && !s.limits.Load() {
			s.limits.Store(true)
		}
		pr.extra.Store(x)
	}
	pr.state.Store(stReady)
	if err := s.callInit(pr, method, input, w); err != nil {
		_ = s.callClose(pr, w)
		pr.impl = nil
		pr.close(payload.Payload{}, err, false)
		s.table.release(id, w.slotCache())
		s.releaseProc()
		if w != nil {
			bump(&w.stats.initFailed)
		} else {
			s.counters.initFailed.Add(1)
		}
		s.countEnd(w)
		return nil, err
	}
	if s.hooks.End != nil {
		pr.timing().started = s.coarse.now()
	}
	s.table.publish(pr)
	if w != nil {
		bump(&w.stats.spawned)
	} else {
		s.counters.submitted.Add(1)
	}
	// A Shutdown that began after the check above may have walked the
	// table before this process was published; deliver its cancel here.
	if s.closing() {
		_, _ = pr.terminate(pfShutdownCancel) // pr is Ready and about to be queued
	}
	if s.hooks.Start != nil {
		s.hooks.Start(StartInfo{PID: pr.pid(), Method: method})
	}
	return pr, nil
}

// reserveProc counts a process against WithMaxProcesses, if there is room.
func (s *Scheduler) reserveProc() bool {
	for {
		n := s.procs.Load()
		if n >= s.maxProcs {
			return false
		}
		if s.procs.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// releaseProc gives back what reserveProc took.
func (s *Scheduler) releaseProc() {
	if s.maxProcs > 0 {
		s.procs.Add(-1)
	}
}

// callInit runs Init, turning a panic into an error.
func (s *Scheduler) callInit(p *proc, method string, input payload.Payloads, w *worker) (err error) {
	defer func() {
		if v := recover(); v != nil {
			perr := newPanicError("Init", v)
			s.recovered(p, perr, w)
			err = fmt.Errorf("%w: %w", ErrInit, perr)
		}
	}()
	if err := p.impl.Init(p, method, input); err != nil {
		return fmt.Errorf("%w: %w", ErrInit, err)
	}
	return nil
}

// callClose runs Close and returns the panic it raised, if any.
func (s *Scheduler) callClose(p *proc, w *worker) (perr error) {
	defer func() {
		if v := recover(); v != nil {
			pe := newPanicError("Close", v)
			s.recovered(p, pe, w)
			perr = pe
		}
	}()
	p.impl.Close()
	return nil
}

// countStart counts a process in, on worker w's counters or the shared
// ones.
func (s *Scheduler) countStart(w *worker) {
	if w != nil {
		bump(&w.stats.started)
	} else {
		s.counters.started.Add(1)
	}
}

// countEnd counts a process out; during Shutdown, the last one out
// releases it.
func (s *Scheduler) countEnd(w *worker) {
	if w != nil {
		bump(&w.stats.ended)
	} else {
		s.counters.ended.Add(1)
	}
	if s.closing() && s.liveCount() == 0 {
		s.sd.drainOnce.Do(func() { close(s.sd.drained) })
	}
}

// finish ends a process that the caller moved to Complete: Close,
// counters, result, table slot, awaiting parent. The counters come before
// the result is published, so a Stats read after the Handle reports the
// end counts it. w is the worker doing this, if any.
func (s *Scheduler) finish(p *proc, w *worker, result payload.Payload, err error, forced bool) {
	s.timers.release(p)
	if perr := s.callClose(p, w); perr != nil && err == nil {
		err = perr
	}
	p.impl = nil
	s.releaseProc()
	if forced && s.log != nil {
		s.log.Warn("scheduler: process forced to close at the shutdown deadline", "pid", p.pid(), "method", s.methodOf(p))
	}
	if s.hooks.End != nil {
		t := p.timing()
		s.hooks.End(EndInfo{
			PID: p.pid(), Method: s.methodOf(p), Result: result, Err: err,
			Duration: time.Duration(max(s.coarse.now()-t.started, 0)), Steps: t.steps, Forced: forced,
		})
	}
	if forced {
		s.sd.forced.Add(1)
	}
	if w != nil {
		bump(&w.stats.completed)
		if err != nil {
			bump(&w.stats.failed)
		}
	} else {
		s.counters.completed.Add(1)
		if err != nil {
			s.counters.failed.Add(1)
		}
	}
	s.countEnd(w)
	c := p.close(result, err, forced)
	s.table.release(p.id, w.slotCache())
	if n := len(c.unread); n > 0 {
		if w != nil {
			w.stats.dropped.Store(w.stats.dropped.Load() + uint64(n))
		} else {
			s.counters.dropped.Add(uint64(n))
		}
		s.deadUnread(p.pid(), c.unread, via{w: w})
	}
	if p.awaiter != 0 && !forced {
		ev := Event{Type: EventYieldComplete, Data: result, Error: err, From: p.pid()}
		_ = s.complete(relay.PID{Node: s.node, ID: p.awaiter}, ev, p.awaitSeq, via{w: w})
	}
	// Names, monitors: frozen now that the process is closed.
	if x := p.extra.Load(); x != nil {
		if len(x.names) > 0 {
			s.releaseNames(p.pid(), x.names)
		}
		if x.monitors != nil || x.held != nil || x.outside != nil {
			s.notifyEnd(p, x, exitOf(p.pid(), result, err, forced, c.cancelled, c.cause), via{w: w})
		}
	}
	p.announce()
}

type submitOptionFunc func(*submitOptions) error

func (f submitOptionFunc) applySubmit(o *submitOptions) error { return f(o) }

// submitOptions collects SubmitOption values.
type submitOptions struct {
	mailbox *mailboxLimit
}

// SubmitOption configures one [Scheduler.Submit] or [Call.Submit].
type SubmitOption interface {
	applySubmit(*submitOptions) error
}

func applySubmitOptions(opts []SubmitOption) (submitOptions, error) {
	if len(opts) == 0 {
		return submitOptions{}, nil // the usual case: nothing escapes
	}
	so := new(submitOptions)
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o.applySubmit(so); err != nil {
			return *so, err
		}
	}
	return *so, nil
}
