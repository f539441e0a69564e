package scheduler

import (
	"context"
	"time"
	"unsafe"

	"github.com/procsched/scheduler/internal/ctxcause"
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

// The context of a process started by a step (Spawn, SpawnAwait) cannot
// be its record alone, as a Submitted process's is: the record may be
// given to a later process once this one has ended (see
// Scheduler.record), and a context kept past the end must stay the
// context of the process it was made for, done with cause ErrEnded,
// answering that process's PID. So the context must tell which of the
// record's processes it belongs to.
//
// Without context values, the usual case, it tells by its type: the
// context is the record under one of ctxGens pointer types,
// genCtx[Hi, Lo], whose two digits give the process's generation modulo
// ctxGens. A record serves only the processes of one aligned run of
// ctxGens generations of its slot (finish does not reuse it past the
// run's last), so the run, read from the record's current ID, and the
// digits give the process's full ID, whatever the record has served
// since. Converting the record's pointer to one of these
// types allocates nothing, where a context holding the ID would be an
// allocation per process: in a fork-join computation such contexts
// would be most of what the scheduler allocates, and while the live heap
// is small the collector runs once per few megabytes allocated, so every
// byte is paid for in collections. Contexts of two processes compare unequal,
// as they must: their records or their types differ.
//
// A process started with values gets a valuesCtx, which keeps its
// values too, so that they stay reachable once the record has moved on.

// ctxGens is the number of genCtx types, a power of two: a record
// serves at most this many processes (see Scheduler.finish). Twice as
// many types cost the program twice the code (about 2.4 KB a type) and
// measure no faster; with half as many, a fork-join run on one worker
// takes 2-3 % longer (a record allocated every sixteen processes of a
// slot).
const ctxGens = ctxGenHigh * ctxGenDigits

// ctxGenHigh and ctxGenDigits are the number of values of genCtx's high
// and low digit (see ctxGen).
const (
	ctxGenHigh   = 4
	ctxGenDigits = 8
)

// The generation at which a slot retires ends a run of ctxGens, so that
// a record serving the slot's last processes is not reused past it.
var _ [0]struct{} = [(maxGen + 1) % ctxGens]struct{}{}

// ctxGen is the constraint of genCtx's type parameters, a digit each,
// of the types d0 to d7 (d0 to d3 for the high one). They all have the
// same underlying type, so the compiler makes one body of each genCtx
// method for all of them, and each genCtx type costs the program only
// the small functions and tables that lead to it.
type ctxGen interface{ digit() uint32 }

// The digit types.
type (
	d0 struct{}
	d1 struct{}
	d2 struct{}
	d3 struct{}
	d4 struct{}
	d5 struct{}
	d6 struct{}
	d7 struct{}
)

// The digits' values (see ctxGen). Any goroutine.
func (d0) digit() uint32 { return 0 }
func (d1) digit() uint32 { return 1 }
func (d2) digit() uint32 { return 2 }
func (d3) digit() uint32 { return 3 }
func (d4) digit() uint32 { return 4 }
func (d5) digit() uint32 { return 5 }
func (d6) digit() uint32 { return 6 }
func (d7) digit() uint32 { return 7 }

// genCtx is the context of a process started by a step without context
// values whose generation modulo ctxGens is Hi's digit times
// ctxGenDigits plus Lo's: its record under a type of its own (see
// ctxGens). A *genCtx points to the record; the type has no fields.
type genCtx[Hi, Lo ctxGen] struct{}

// genCtxProto holds, for each generation modulo ctxGens, a nil pointer
// of that generation's genCtx type as a context: genCtxFor copies one
// and points it at a record. Choosing the type by loading it from here
// spares a spawn a choice by branches or by an indirect call, whose
// target would change from one spawn to the next and be mispredicted:
// calling one function per generation from a table cost a fork-join run
// 3-4 % of its time.
var genCtxProto = func() (t [ctxGens]context.Context) {
	genCtxRow[d0](t[0*ctxGenDigits:])
	genCtxRow[d1](t[1*ctxGenDigits:])
	genCtxRow[d2](t[2*ctxGenDigits:])
	genCtxRow[d3](t[3*ctxGenDigits:])
	return t
}()

// genCtxRow fills row with the prototypes of the generations whose high
// digit is Hi's. Called once per high digit, when the package starts.
func genCtxRow[Hi ctxGen](row []context.Context) {
	copy(row, []context.Context{
		(*genCtx[Hi, d0])(nil), (*genCtx[Hi, d1])(nil), (*genCtx[Hi, d2])(nil), (*genCtx[Hi, d3])(nil),
		(*genCtx[Hi, d4])(nil), (*genCtx[Hi, d5])(nil), (*genCtx[Hi, d6])(nil), (*genCtx[Hi, d7])(nil),
	})
}

// ifaceWords is how the Go implementation lays out a value of an
// interface type with methods: a pointer to its type's method table,
// then the pointer it holds. TestGenCtxFor checks that genCtxFor, which
// relies on it, makes contexts that hold the record and name the
// generation they were made for.
type ifaceWords struct{ tab, data unsafe.Pointer }

// genCtxFor returns the context of p's process of generation gen: p as
// the genCtx of gen modulo ctxGens (see genCtxProto). Any goroutine.
func genCtxFor(p *proc, gen uint32) context.Context {
	c := genCtxProto[gen%ctxGens]
	(*ifaceWords)(unsafe.Pointer(&c)).data = unsafe.Pointer(p)
	return c
}

// ident returns the record and the ID of the process c is the context
// of: the ID in the record's run of generations whose generation modulo
// ctxGens is the number c's digits make. The record's ID changes only
// within that run, so the answer does not depend on when it is read.
// Any goroutine.
func (c *genCtx[Hi, Lo]) ident() (*proc, uint64) {
	p := (*proc)(unsafe.Pointer(c))
	var hi Hi
	var lo Lo
	cur := p.id.Load()
	return p, makeID(slotOf(cur), genOf(cur)&^(ctxGens-1)|(hi.digit()*ctxGenDigits+lo.digit()))
}

// Deadline implements context.Context: a process context has none.
func (c *genCtx[Hi, Lo]) Deadline() (time.Time, bool) { return time.Time{}, false }

// Done implements context.Context.
func (c *genCtx[Hi, Lo]) Done() <-chan struct{} {
	p, id := c.ident()
	return p.ctxDone(id)
}

// Err implements context.Context.
func (c *genCtx[Hi, Lo]) Err() error {
	p, id := c.ident()
	return p.ctxErr(id)
}

// AfterFunc is as for the record's context (proc.AfterFunc).
func (c *genCtx[Hi, Lo]) AfterFunc(f func()) (stop func() bool) {
	p, id := c.ident()
	return p.ctxAfterFunc(id, f)
}

// Value implements context.Context: the process was started without
// values, so only the scheduler's own keys answer.
func (c *genCtx[Hi, Lo]) Value(key any) any {
	p, id := c.ident()
	return p.ctxValue(id, nil, key)
}

// String makes the context printable, as context.Context values are.
func (c *genCtx[Hi, Lo]) String() string {
	p, id := c.ident()
	return ctxString(p, id)
}

// valuesCtx is the context of a process started by a step with context
// values: it names the process by its record and its ID, and keeps the
// procExtra of the process's start, whose values never change, so that
// they stay reachable through the context once the record has moved on.
type valuesCtx struct {
	p  *proc
	id uint64
	x  *procExtra
}

// valuesCtxSlab is how many contexts with values a worker allocates at
// once (see newProcCtx).
const valuesCtxSlab = 16

// newProcCtx returns the context of process id, whose record is p, for
// a process started with context values: a valuesCtx over the procExtra
// its start has set already, which holds them. A process without a
// Handle and without values has its record as its context, as a genCtx
// (genCtxFor), which allocates nothing; its start makes that itself,
// without a call and without reading the procExtra, which spares a
// caller outside the workers that reuses a record a read of the
// record's second line (see table.prefetchNext). Both starts write that
// choice out, as they do the publication: a function of its own that
// made it would be too large to inline, and calling one at every start
// loses what sparing the line gains (see docs/benchmarks.md).
// A worker allocates contexts with values valuesCtxSlab at a time:
// nothing of the scheduler's points to one, so a slab is garbage once
// the processes it served have ended, unless user code keeps one of
// their contexts, which then keeps its slab alive. A process with a
// Handle has its record as its context and needs none. Called by a
// step's spawn, or a Scheduler.Spawn, whose caller outside the workers
// (w nil) gets a context of its own.
// Worker only, or any goroutine with w nil.
func (w *worker) newProcCtx(p *proc, id uint64) context.Context {
	x := p.extra.Load()
	if w == nil {
		return &valuesCtx{p: p, id: id, x: x}
	}
	if len(w.valuesCtxs) == 0 {
		w.valuesCtxs = make([]valuesCtx, valuesCtxSlab)
	}
	c := &w.valuesCtxs[0]
	w.valuesCtxs = w.valuesCtxs[1:]
	c.p, c.id, c.x = p, id, x
	return c
}

// Deadline implements context.Context: a process context has none.
func (c *valuesCtx) Deadline() (time.Time, bool) { return time.Time{}, false }

// Done implements context.Context.
func (c *valuesCtx) Done() <-chan struct{} { return c.p.ctxDone(c.id) }

// Err implements context.Context.
func (c *valuesCtx) Err() error { return c.p.ctxErr(c.id) }

// AfterFunc is as for the record's context (proc.AfterFunc).
func (c *valuesCtx) AfterFunc(f func()) (stop func() bool) { return c.p.ctxAfterFunc(c.id, f) }

// Value implements context.Context.
func (c *valuesCtx) Value(key any) any { return c.p.ctxValue(c.id, c.x.values, key) }

// String makes the context printable, as context.Context values are.
func (c *valuesCtx) String() string { return ctxString(c.p, c.id) }

// ctxString is String of the context of process id, whose record is p.
// Any goroutine.
func ctxString(p *proc, id uint64) string {
	return "scheduler.processContext(" + relay.PID{Node: p.node, ID: id}.String() + ")"
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
	return p.getLive().ctxAfter.Add(f, &p.mu)
}

// ctxValue is Value of the context of process id, whose record is p,
// with values the context its lookups go to. p.node is the scheduler's,
// the same for every process a record holds. Any goroutine.
func (p *proc) ctxValue(id uint64, values context.Context, key any) any {
	switch key.(type) {
	case selfKey:
		return relay.PID{Node: p.node, ID: id}
	}
	if ctxcause.Is(key) {
		p.mu.Lock()
		cause := ErrEnded // the record moved on, after a plain end (see genCtx)
		if p.id.Load() == id {
			cause = p.cancelCause()
		}
		p.mu.Unlock()
		return ctxcause.Value(cause)
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

// callContext is the context of one handler's call: the yield with
// sequence number seq of process p. See Call.Context. While the yield is
// pending it is listed in p's procExtra (calls), so that whatever ends the
// yield (its completion, a cancel, a deadline, the process's end) ends
// the context with a cause.
type callContext struct {
	p   *proc
	seq uint64
	ts  *timerService   // where its deadline is, if it has one
	end ctxcause.Ending // guarded by p.mu
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
		c.end.End(ErrForced)
	case p.flags&pfClosed != 0:
		c.end.End(ErrEnded)
	case !p.pending.hasSeq(seq, x):
		c.end.End(context.Canceled) // completed: nothing more to say
	default:
		x = p.getLive()
		x.calls = append(x.calls, c)
	}
	return c
}

// Deadline implements context.Context: the deadline the process gave the
// yield (StepOutput.Timeout), if any, while the yield is pending; a later
// Timeout replaces it. Once the yield is no longer pending (a deadline
// that passed included) there is none: the deadline goes with the
// yield's timer. Err and context.Cause still say why it ended.
func (c *callContext) Deadline() (time.Time, bool) {
	when, _, deadline, ok := c.ts.lookup(c.seq)
	if !ok || !deadline {
		return time.Time{}, false
	}
	return c.ts.epoch.Add(time.Duration(when)), true
}

// Done implements context.Context.
func (c *callContext) Done() <-chan struct{} {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	return c.end.Done()
}

// Err implements context.Context: DeadlineExceeded once the yield's
// deadline passed, Canceled once it ended otherwise.
func (c *callContext) Err() error {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	return c.end.Err()
}

// AfterFunc arranges for f to run, in its own goroutine, once the call
// context is done, as proc.AfterFunc does for the process context.
func (c *callContext) AfterFunc(f func()) (stop func() bool) {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	return c.end.AfterFunc(f, &c.p.mu)
}

// Value implements context.Context: the process context's values.
func (c *callContext) Value(key any) any {
	if ctxcause.Is(key) {
		c.p.mu.Lock()
		cause := c.end.Cause()
		c.p.mu.Unlock()
		return ctxcause.Value(cause)
	}
	return c.p.Value(key)
}

// String makes the context printable, as context.Context values are.
func (c *callContext) String() string {
	return "scheduler.callContext(" + c.p.pid().String() + ")"
}

// endCall ends the call context of yield seq, if one was made, with
// cause: the yield is no longer pending. Called with proc.mu held.
func (x *procLive) endCall(seq uint64, cause error) {
	for i, c := range x.calls {
		if c.seq == seq {
			c.end.End(cause)
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
		c.end.End(cause)
	}
	x.calls = nil
}
