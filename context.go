package scheduler

import (
	"context"
	"sync"
	"time"

	"github.com/procsched/scheduler/relay"
)

// A process's record doubles as its context.Context (see proc), which
// saves an allocation per process: it never has a deadline, carries the
// values of the context the process was started with (not its
// cancellation), answers Self, and is done once the process is cancelled
// (Terminate, Shutdown) or has ended. Its Err is context.Canceled, as the
// context contract requires; context.Cause tells why (see cancelCause).
//
// The context of a handler's call (Call.Context) is a second, smaller
// context over the same record, done when the call's yield is no longer
// pending or the process has ended, but not when the process is asked to
// stop, so that cleanup work started on a cancel can finish.

// selfKey is the context key under which a process context answers its
// own PID.
type selfKey struct{}

// Self returns the PID of the process whose context ctx is (or is derived
// from), as passed to [Process.Init] and [Call.Context]; ok is false for
// other contexts.
func Self(ctx context.Context) (pid relay.PID, ok bool) {
	pid, ok = ctx.Value(selfKey{}).(relay.PID)
	return pid, ok
}

// Deadline implements context.Context: a process context has none.
func (p *proc) Deadline() (time.Time, bool) { return time.Time{}, false }

// Done implements context.Context.
func (p *proc) Done() <-chan struct{} { return p.ctxDone(p.id.Load()) }

// Err implements context.Context.
func (p *proc) Err() error { return p.ctxErr(p.id.Load()) }

// AfterFunc arranges for f to run, in its own goroutine, once the process
// context is done. context.AfterFunc and the contexts derived from a
// process context use it, so that they need no goroutine to wait. stop
// reports whether it stopped f from being run.
func (p *proc) AfterFunc(f func()) (stop func() bool) { return p.ctxAfterFunc(p.id.Load(), f) }

// Value implements context.Context.
func (p *proc) Value(key any) any { return p.ctxValue(p.id.Load(), p.values(), key) }

// String makes the context printable, as context.Context values are.
func (p *proc) String() string { return "scheduler.processContext(" + p.pid().String() + ")" }

// procCtx is the context of a process started by a step (Spawn,
// SpawnAwait): its record may be given to a later process once it has
// ended (see Scheduler.record), so the context names the process by its
// ID as well as its record, and stays the context of the process it was
// made for. A record is reused only after a plain end (see
// proc.reusable), so once the record has moved on the context is done
// with cause ErrEnded. A process started by Submit, whose Handle keeps
// its record, has the record itself as its context, which saves this
// allocation.
//
// A procCtx is the context of a process started without context values,
// the usual case, and is two words: such contexts are what a fork-join
// computation allocates most of, and while the live heap is small the
// collector runs once per few megabytes allocated, so every byte of them
// is paid for in collections. A process started with values gets a
// valuesCtx, which keeps them too.
type procCtx struct {
	p  *proc
	id uint64
}

// valuesCtx is the context of a process started by a step with context
// values: a procCtx that also keeps the procExtra of the process's start,
// whose values never change, so that they stay reachable through the
// context once the record has moved on.
type valuesCtx struct {
	procCtx
	x *procExtra
}

// procCtxSlab is how many process contexts a worker allocates at once
// (see newProcCtx).
const procCtxSlab = 16

// newProcCtx returns the context of process id, whose record is p and
// whose procExtra, if it was started with one, is set already: a
// valuesCtx if it has context values, else a procCtx. The worker
// allocates contexts procCtxSlab at a time, one allocation instead of
// sixteen, which a process's start pays for most of: nothing of the
// scheduler's points to a context, so a slab is garbage once the
// processes it served have ended, unless user code keeps one of their
// contexts, which then keeps its slab (256 or 384 bytes) alive. Only a
// step's spawn needs one (a process with a Handle has its record as its
// context), so only a worker calls it.
// Worker only.
func (w *worker) newProcCtx(p *proc, id uint64) context.Context {
	if x := p.extra.Load(); x != nil && x.values != nil {
		c := fromSlab(&w.valuesCtxs)
		c.p, c.id, c.x = p, id, x
		return c
	}
	c := fromSlab(&w.ctxs)
	c.p, c.id = p, id
	return c
}

// fromSlab returns the next zero element of slab, allocating a new slab
// of procCtxSlab elements when it is used up (see newProcCtx).
// Owner of slab only.
func fromSlab[T any](slab *[]T) *T {
	if len(*slab) == 0 {
		*slab = make([]T, procCtxSlab)
	}
	c := &(*slab)[0]
	*slab = (*slab)[1:]
	return c
}

// Deadline implements context.Context: a process context has none.
func (c *procCtx) Deadline() (time.Time, bool) { return time.Time{}, false }

// Done implements context.Context.
func (c *procCtx) Done() <-chan struct{} { return c.p.ctxDone(c.id) }

// Err implements context.Context.
func (c *procCtx) Err() error { return c.p.ctxErr(c.id) }

// AfterFunc is as for the record's context (proc.AfterFunc).
func (c *procCtx) AfterFunc(f func()) (stop func() bool) { return c.p.ctxAfterFunc(c.id, f) }

// Value implements context.Context: the process was started without
// values, so only the scheduler's own keys answer.
func (c *procCtx) Value(key any) any { return c.p.ctxValue(c.id, nil, key) }

// Value implements context.Context.
func (c *valuesCtx) Value(key any) any { return c.p.ctxValue(c.id, c.x.values, key) }

// String makes the context printable, as context.Context values are.
func (c *procCtx) String() string {
	return "scheduler.processContext(" + relay.PID{Node: c.p.node, ID: c.id}.String() + ")"
}

// ctxDone is Done of the context of process id, whose record is p.
// Any goroutine.
func (p *proc) ctxDone(id uint64) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.id.Load() != id || p.flags&(pfCancelled|pfClosed) != 0 {
		return closedChan
	}
	x := p.getLive()
	if x.ctxDone == nil {
		x.ctxDone = make(chan struct{})
	}
	return x.ctxDone
}

// ctxErr is Err of the context of process id, whose record is p.
// Any goroutine.
func (p *proc) ctxErr(id uint64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.id.Load() != id || p.flags&(pfCancelled|pfClosed) != 0 {
		return context.Canceled
	}
	return nil
}

// ctxAfterFunc is AfterFunc of the context of process id, whose record
// is p. Any goroutine.
func (p *proc) ctxAfterFunc(id uint64, f func()) (stop func() bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.id.Load() != id || p.flags&(pfCancelled|pfClosed) != 0 {
		go f()
		return func() bool { return false }
	}
	return p.getLive().ctxAfter.add(f, &p.mu)
}

// ctxValue is Value of the context of process id, whose record is p,
// with values the context its lookups go to. p.node is the scheduler's,
// the same for every process a record holds. Any goroutine.
func (p *proc) ctxValue(id uint64, values context.Context, key any) any {
	switch key.(type) {
	case selfKey:
		return relay.PID{Node: p.node, ID: id}
	}
	if key == cancelCtxKey && cancelCtxKey != nil {
		p.mu.Lock()
		cause := ErrEnded // the record moved on, after a plain end (see procCtx)
		if p.id.Load() == id {
			cause = p.cancelCause()
		}
		p.mu.Unlock()
		return causeValue(cause, key)
	}
	if values != nil {
		return values.Value(key)
	}
	return nil
}

// cancelCause says why the process context is done, nil while it is
// not: the cancel's cause ([ErrTerminated] or [ErrShuttingDown]) if the
// process was asked to stop, else how it ended ([ErrForced] or
// [ErrEnded]). Called with p.mu held.
func (p *proc) cancelCause() error {
	switch {
	case p.flags&pfCancelled != 0:
		if p.flags&pfShutdownCancel != 0 {
			return ErrShuttingDown
		}
		return ErrTerminated
	case p.flags&pfClosed != 0:
		if p.flags&pfForced != 0 {
			return ErrForced
		}
		return ErrEnded
	}
	return nil
}

// cancelCtxKey is the key the context package asks a context's Value for
// when it looks for the cause of a cancellation: context.Cause(ctx) asks
// ctx.Value(cancelCtxKey) for the context that holds the cause. The key
// is unexported, so it is learned once by asking context.Cause about a
// context that records the key it is asked for. If a future release asks
// differently, cancelCtxKey may be nil or never asked for, and
// context.Cause of a process context falls back to its Err.
var cancelCtxKey = func() any {
	var spy keySpy
	_ = context.Cause(&spy)
	return spy.key
}()

// keySpy is a cancelled context that records the last key it was asked
// for.
type keySpy struct{ key any }

func (*keySpy) Deadline() (time.Time, bool) { return time.Time{}, false }
func (*keySpy) Done() <-chan struct{}       { return closedChan }
func (*keySpy) Err() error                  { return context.Canceled }
func (s *keySpy) Value(key any) any         { s.key = key; return nil }

// causeValue answers a context's Value(cancelCtxKey) for a context that is
// done with cause: a cancelled context from the context package that
// carries the cause, which context.Cause then reads. While cause is nil
// (not done) it answers nil, so that context.Cause does not find the
// cause of some other context. It allocates; only context.Cause asks.
// Any goroutine.
func causeValue(cause error, key any) any {
	if cause == nil {
		return nil
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	return ctx.Value(key)
}

// callContext is the context of one handler's call: the yield with
// sequence number seq of process p. See Call.Context. While the yield is
// pending it is listed in p's procExtra (calls), so that whatever ends the
// yield (its completion, a cancel, a deadline, the process's end) ends
// the context with a cause.
type callContext struct {
	p   *proc
	seq uint64
	ts  *timerService // where its deadline is, if it has one
	// Guarded by p.mu:
	done  chan struct{} // made on demand by Done
	cause error         // why the context is done; nil while it is not
	after afterFuncs    // functions to run when it is done (AfterFunc)
}

// newCallContext returns the context of p's yield seq: the one already
// listed for it, or a new one, listed while the yield is pending and done
// at once (with the reason) if it is not.
// Any goroutine, through Call.Context; it takes p.mu.
func newCallContext(p *proc, seq uint64, ts *timerService) *callContext {
	p.mu.Lock()
	defer p.mu.Unlock()
	x := p.live()
	if x != nil {
		for _, c := range x.calls {
			if c.seq == seq {
				return c
			}
		}
	}
	c := &callContext{p: p, seq: seq, ts: ts}
	switch {
	case p.flags&pfForced != 0:
		c.cause = ErrForced
	case p.flags&pfClosed != 0:
		c.cause = ErrEnded
	case !p.pending.hasSeq(seq, x):
		c.cause = context.Canceled // completed: nothing more to say
	default:
		x = p.getLive()
		x.calls = append(x.calls, c)
	}
	return c
}

// Deadline implements context.Context: the deadline the process gave the
// yield (StepOutput.Timeout), if any.
func (c *callContext) Deadline() (time.Time, bool) {
	when, deadline, ok := c.ts.lookup(c.seq)
	if !ok || !deadline {
		return time.Time{}, false
	}
	return c.ts.epoch.Add(time.Duration(when)), true
}

// Done implements context.Context.
func (c *callContext) Done() <-chan struct{} {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	if c.done == nil {
		if c.cause != nil {
			return closedChan
		}
		c.done = make(chan struct{})
	}
	return c.done
}

// Err implements context.Context: DeadlineExceeded once the yield's
// deadline passed, Canceled once it ended otherwise.
func (c *callContext) Err() error {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	switch {
	case c.cause == nil:
		return nil
	case c.cause == ErrTimeout:
		return context.DeadlineExceeded
	}
	return context.Canceled
}

// AfterFunc arranges for f to run, in its own goroutine, once the call
// context is done, as proc.AfterFunc does for the process context.
func (c *callContext) AfterFunc(f func()) (stop func() bool) {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	if c.cause != nil {
		go f()
		return func() bool { return false }
	}
	return c.after.add(f, &c.p.mu)
}

// Value implements context.Context: the process context's values.
func (c *callContext) Value(key any) any {
	if key == cancelCtxKey && cancelCtxKey != nil {
		c.p.mu.Lock()
		cause := c.cause
		c.p.mu.Unlock()
		return causeValue(cause, key)
	}
	return c.p.Value(key)
}

// String makes the context printable, as context.Context values are.
func (c *callContext) String() string {
	return "scheduler.callContext(" + c.p.pid().String() + ")"
}

// end ends the context with cause. Called with c.p.mu held.
func (c *callContext) end(cause error) {
	c.cause = cause
	if c.done != nil {
		close(c.done)
	}
	c.after.run()
}

// afterFuncs are the functions registered with a context's AfterFunc that
// have not run yet. Guarded by the lock of the process the context
// belongs to.
type afterFuncs []*afterFunc

// afterFunc is one registered function; f is nil once it ran or was
// stopped.
type afterFunc struct{ f func() }

// add registers f and returns its stop function, which takes mu. Called
// with mu held.
func (a *afterFuncs) add(f func(), mu *sync.Mutex) (stop func() bool) {
	af := &afterFunc{f: f}
	*a = append(*a, af)
	return func() bool {
		mu.Lock()
		defer mu.Unlock()
		if af.f == nil {
			return false
		}
		af.f = nil
		for i, x := range *a {
			if x == af {
				*a = append((*a)[:i], (*a)[i+1:]...)
				break
			}
		}
		return true
	}
}

// run starts every registered function, each in its own goroutine, and
// forgets them. Called with the lock held.
func (a *afterFuncs) run() {
	for _, af := range *a {
		if af.f != nil {
			go af.f()
			af.f = nil
		}
	}
	*a = nil
}

// endCall ends the call context of yield seq, if one was made, with
// cause: the yield is no longer pending. Called with proc.mu held.
func (x *procLive) endCall(seq uint64, cause error) {
	for i, c := range x.calls {
		if c.seq == seq {
			c.end(cause)
			last := len(x.calls) - 1
			x.calls[i] = x.calls[last]
			x.calls[last] = nil
			x.calls = x.calls[:last]
			return
		}
	}
}

// endCalls ends every call context with cause: the process has ended.
// Called with proc.mu held.
func (x *procLive) endCalls(cause error) {
	for _, c := range x.calls {
		c.end(cause)
	}
	x.calls = nil
}
