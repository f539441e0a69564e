package schedtest

import (
	"container/heap"
	"context"
	"fmt"
	"runtime/debug"

	"github.com/procsched/scheduler"
	"github.com/procsched/scheduler/internal/bridge"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// proc is a simulated process. Every field is guarded by Sim.mu.
type proc struct {
	pid    relay.PID
	impl   scheduler.Process
	method string
	values context.Context // where its context's values come from, without cancellation
	ctx    context.Context
	stop   context.CancelCauseFunc

	inbox   []scheduler.Event
	stepped bool // had its first step
	cont    bool // its last step asked to continue
	queued  bool // in Sim.ready
	running bool // its step's yields are still being carried out
	steps   int

	todo  []bridge.Yield // the yields of its last step not yet carried out
	final *ending        // its last step ended it; applied once todo is empty

	pending map[uint64]*pending // outstanding yields by tag

	cancelled bool
	cause     error
	ended     bool
	forced    bool // ended by the shutdown deadline
	result    payload.Payload
	err       error
	unread    int

	awaiter  *proc // the parent whose SpawnAwait waits for this end
	awaitSeq uint64
	names    []string
	watchers map[uint64]watcher // the yields watching this process, by sequence number
	yields   []Yield
}

// ending is how a step ended its process.
type ending struct {
	result payload.Payload
	err    error
	unread int
}

// watcher is a yield of another process that watches this one.
type watcher struct {
	p       *proc
	request bool // a request's watch: completes with ErrNoReply
}

// pending is an outstanding yield.
type pending struct {
	owner    *proc
	tag, seq uint64
	kind     bridge.Kind
	timerAt  int64        // when its timer fires, 0: none
	deadline bool         // the timer is a deadline (ErrTimeout), not a Sleep's end
	sleepAt  int64        // a Sleep's own time, which it keeps under any deadline
	watching *proc        // the process a Monitor or Request watches
	call     *callContext // a command's call context (see Call.Context)
}

// delayed is a completion held back by a DelayCompletion fault.
type delayed struct {
	p   *proc
	seq uint64
	ev  scheduler.Event
}

// start creates and initialises a process whose context carries the
// values of values (not its cancellation); awaiter, if not nil, is the
// parent whose yield awaitSeq waits for its end.
func (s *Sim) start(values context.Context, impl scheduler.Process, method string, input payload.Payloads, awaiter *proc, awaitSeq uint64) (*proc, error) {
	if impl == nil {
		return nil, scheduler.ErrNilProcess
	}
	if method == "" {
		return nil, scheduler.ErrEmptyMethod
	}
	if s.closing {
		return nil, scheduler.ErrClosed
	}
	s.nextID++
	p := &proc{pid: relay.PID{ID: s.nextID}, impl: impl, method: method, values: context.WithoutCancel(values), pending: map[uint64]*pending{}, awaiter: awaiter, awaitSeq: awaitSeq}
	p.ctx, p.stop = context.WithCancelCause(bridge.WithSelf(p.values, p.pid))
	// Init, and the Close of a failed Init, may not drive the simulation,
	// as a step may not, wherever the start came from: a Shutdown there
	// would end every process but this one, which is not started yet.
	// Deferred, so that a call refused by failing the test (which ends
	// the goroutine) leaves the simulation as it found it.
	if !s.driving {
		s.driving = true
		defer s.leave()
	}
	var err error
	s.callUser(func() {
		defer func() {
			if v := recover(); v != nil {
				err = fmt.Errorf("%w: %w", scheduler.ErrInit, panicError("Init", v))
			}
		}()
		if e := impl.Init(p.ctx, method, input); e != nil {
			err = fmt.Errorf("%w: %w", scheduler.ErrInit, e)
		}
	})
	if err != nil {
		s.callUser(func() {
			defer func() { _ = recover() }()
			impl.Close()
		})
		p.stop(scheduler.ErrEnded)
		return nil, err
	}
	s.procs[p.pid] = p
	s.ordered = append(s.ordered, p)
	s.note("start %v %T %q", p.pid, impl, method)
	s.markReady(p)
	return p, nil
}

func panicError(where string, v any) *scheduler.PanicError {
	return &scheduler.PanicError{Value: v, Stack: debug.Stack(), Where: where}
}

// stepOnce calls p's Step once with the events that arrived, and takes
// what it wrote: its yields go to p.todo, an end to p.final. A panic is
// the step's error.
func (s *Sim) stepOnce(p *proc) {
	s.steps++
	p.steps++
	p.running = true
	s.batch = s.batch[:0]
	if p.stepped {
		s.batch = append(s.batch, p.inbox...)
		clear(p.inbox)
		p.inbox = p.inbox[:0]
	}
	p.stepped = true
	s.note("step %v (%d events)", p.pid, len(s.batch))
	bridge.ResetOutput(s.out, p.pid)
	out := s.out.(*scheduler.StepOutput)
	var err error
	s.callUser(func() {
		defer func() {
			if v := recover(); v != nil {
				err = panicError("Step", v)
			}
		}()
		err = p.impl.Step(s.batch, out)
	})
	bridge.ReadOutput(s.out, &s.read)
	batch := len(s.batch)
	clear(s.batch)
	p.todo = append(p.todo[:0], s.read.Yields...)
	for _, y := range s.read.Yields {
		p.yields = append(p.yields, s.record(p, y))
	}
	p.cont = s.read.Status == bridge.StatusContinue
	// The events after DoneAfter's count are unread however the step
	// ends, as the scheduler counts them.
	unread := 0
	if s.read.Status == bridge.StatusDone && s.read.Read >= 0 && s.read.Read < batch {
		unread = batch - s.read.Read
	}
	switch {
	case err != nil:
		p.final = &ending{err: err, unread: unread}
	case s.read.Status == bridge.StatusDone:
		p.final = &ending{result: s.read.Result, unread: unread}
	case p.cancelled:
		// Asked to stop already: a termination would do nothing, so none
		// is injected (and none drawn).
	default:
		if n, ok := s.terminateAt[p.pid]; (ok && n == p.steps) || s.chance(s.cfg.faults.Terminate) {
			s.inject("terminate %v after its step %d", p.pid, p.steps)
			s.cancel(p, scheduler.ErrTerminated)
		}
	}
}

// carryAll carries out every yield left from p's step, then settles p.
func (s *Sim) carryAll(p *proc) {
	for !s.carryNext(p) {
	}
	s.settle(p)
}

// carryNext carries out p's next outstanding yield; it reports whether
// none is left.
func (s *Sim) carryNext(p *proc) bool {
	if len(p.todo) == 0 {
		return true
	}
	y := p.todo[0]
	p.todo = p.todo[1:]
	s.carry(p, &y)
	return len(p.todo) == 0
}

// finish ends p as its last step said, once its yields are carried out.
func (s *Sim) finish(p *proc, f *ending) {
	p.unread += f.unread
	s.end(p, f.result, f.err, false)
}

// end ends p: its names, Close, its result, its awaiting parent, its
// watchers.
func (s *Sim) end(p *proc, result payload.Payload, err error, forced bool) {
	if p.ended {
		return
	}
	p.ended, p.forced = true, forced
	// Its names are free from now on, while its Close runs too, as on the
	// scheduler: a process that is gone is found by no name.
	for _, n := range p.names {
		if s.names[n] == p.pid {
			delete(s.names, n)
		}
	}
	p.running = false
	if p.queued {
		s.unready(p)
	}
	for i, q := range s.busy {
		if q == p {
			s.busy = append(s.busy[:i], s.busy[i+1:]...)
			break
		}
	}
	p.unread += len(p.inbox)
	p.inbox = nil
	p.todo = nil
	s.note("end %v: %v", p.pid, errOr(err, result))
	var perr error
	s.callUser(func() {
		defer func() {
			if v := recover(); v != nil {
				perr = panicError("Close", v)
			}
		}()
		p.impl.Close()
	})
	if perr != nil && err == nil {
		err = perr
	}
	p.result, p.err = result, err
	// The yields still outstanding go once Close has returned, as on the
	// scheduler: a call context a fake handed on is done only then.
	why := scheduler.ErrEnded
	if forced {
		why = scheduler.ErrForced
	}
	for _, pd := range p.pending {
		s.forget(pd, why)
	}
	if !p.cancelled {
		p.stop(why)
	}
	if p.awaiter != nil && !forced {
		_ = s.complete(p.awaiter, p.awaitSeq, scheduler.Event{Type: scheduler.EventYieldComplete, Data: result, Error: err, From: p.pid})
	}
	exit := exitOf(p, result, err, forced)
	for _, seq := range sortedKeys(p.watchers) {
		w := p.watchers[seq]
		ev := scheduler.Event{Type: scheduler.EventYieldComplete, From: p.pid, Data: exit}
		if w.request {
			ev.Data = nil
			ev.Error = fmt.Errorf("%w: %v", scheduler.ErrNoReply, exit)
		}
		_ = s.complete(w.p, seq, ev)
	}
	p.watchers = nil
}

func errOr(err error, result payload.Payload) any {
	if err != nil {
		return err
	}
	return result
}

func exitOf(p *proc, result payload.Payload, err error, forced bool) scheduler.Exit {
	switch {
	case forced:
		return scheduler.Exit{PID: p.pid, Reason: scheduler.ExitForced, Err: err}
	case err != nil:
		return scheduler.Exit{PID: p.pid, Reason: scheduler.ExitFailed, Err: err}
	case p.cancelled:
		return scheduler.Exit{PID: p.pid, Reason: scheduler.ExitTerminated, Result: result, Err: p.cause}
	}
	return scheduler.Exit{PID: p.pid, Reason: scheduler.ExitDone, Result: result}
}

func goneExit(pid relay.PID) scheduler.Exit {
	return scheduler.Exit{PID: pid, Reason: scheduler.ExitGone, Err: fmt.Errorf("%w: %v", scheduler.ErrProcessNotFound, pid)}
}

// cancel sends p its EventCancel with cause, once.
func (s *Sim) cancel(p *proc, cause error) {
	if p.cancelled || p.ended {
		return
	}
	p.cancelled, p.cause = true, cause
	s.push(p, scheduler.Event{Type: scheduler.EventCancel, Error: cause})
	p.stop(cause)
}

// push appends ev to p's inbox and queues p if it waits.
func (s *Sim) push(p *proc, ev scheduler.Event) {
	bridge.Unpack(&ev) // a payload arrives unpacked, as the scheduler delivers it
	p.inbox = append(p.inbox, ev)
	s.markReady(p)
}

// register records the yield tag of p as outstanding and returns its
// sequence number; a tag that is outstanding already completes the new
// yield at once with ErrDuplicateTag, and register returns nil. The
// deadline the step gave the refused yield goes to the outstanding one,
// as on the scheduler.
func (s *Sim) register(p *proc, y *bridge.Yield) *pending {
	if _, ok := p.pending[y.Tag]; ok {
		s.push(p, scheduler.Event{Type: scheduler.EventYieldComplete, Tag: y.Tag, Error: fmt.Errorf("%w: %d", scheduler.ErrDuplicateTag, y.Tag)})
		if y.Deadline != 0 {
			s.timeout(p, y.Tag, int64(y.Deadline))
		}
		return nil
	}
	s.nextSeq++
	pd := &pending{owner: p, tag: y.Tag, seq: s.nextSeq, kind: y.Kind}
	p.pending[y.Tag] = pd
	s.bySeq[pd.seq] = pd
	return pd
}

// registerWithin is register that also starts the deadline the step gave
// the yield; it returns nil if the yield is not to be carried out (a
// duplicate tag, or a deadline passed already).
func (s *Sim) registerWithin(p *proc, y *bridge.Yield) *pending {
	pd := s.register(p, y)
	if pd == nil || y.Deadline == 0 {
		return pd
	}
	if int64(y.Deadline) <= s.now {
		s.expire(pd)
		return nil
	}
	s.setTimer(pd, int64(y.Deadline), true)
	return pd
}

// forget drops the outstanding yield pd: its timer, its watch, and its
// call context, which is done with cause.
func (s *Sim) forget(pd *pending, cause error) {
	delete(pd.owner.pending, pd.tag)
	delete(s.bySeq, pd.seq)
	pd.timerAt = 0
	if w := pd.watching; w != nil {
		delete(w.watchers, pd.seq)
		pd.watching = nil
	}
	if pd.call != nil {
		pd.call.end.End(cause)
		pd.call = nil
	}
}

// complete completes p's yield seq with ev (whose Tag it sets), exactly
// once: ErrProcessNotFound if p has ended, ErrYieldNotPending if the
// yield is not outstanding.
func (s *Sim) complete(p *proc, seq uint64, ev scheduler.Event) error {
	if p.ended {
		return fmt.Errorf("%w: %v", scheduler.ErrProcessNotFound, p.pid)
	}
	pd := s.bySeq[seq]
	if pd == nil || pd.owner != p {
		return fmt.Errorf("%w: %v tag %d", scheduler.ErrYieldNotPending, p.pid, ev.Tag)
	}
	s.completeNow(pd, ev)
	return nil
}

// completeNow completes the outstanding yield pd with ev; its call
// context, if it has one, is done with cause context.Canceled.
func (s *Sim) completeNow(pd *pending, ev scheduler.Event) {
	s.completeFor(pd, ev, context.Canceled)
}

// expire completes the outstanding yield pd with ErrTimeout: its
// deadline has passed. Its call context is done with that cause.
func (s *Sim) expire(pd *pending) {
	s.completeFor(pd, scheduler.Event{Error: scheduler.ErrTimeout}, scheduler.ErrTimeout)
}

// completeFor completes the outstanding yield pd with ev, ending its call
// context with cause.
func (s *Sim) completeFor(pd *pending, ev scheduler.Event, cause error) {
	s.forget(pd, cause)
	ev.Type, ev.Tag = scheduler.EventYieldComplete, pd.tag
	s.push(pd.owner, ev)
}

// setTimer gives pd a timer at when, replacing any it had.
func (s *Sim) setTimer(pd *pending, when int64, deadline bool) {
	pd.timerAt, pd.deadline = when, deadline
	s.timerN++
	heap.Push(&s.timers, timerEntry{when: when, n: s.timerN, seq: pd.seq})
}

// fireDue fires every timer that is due; it reports whether one fired.
func (s *Sim) fireDue() bool {
	fired := false
	for {
		e, ok := s.timers.peek(s)
		if !ok || e.when > s.now {
			break
		}
		if s.fireOne() {
			fired = true
		}
	}
	if fired {
		s.releaseDelayed(true)
	}
	return fired
}

// fireOne pops the earliest timer and fires it if its yield still waits
// for it; it reports whether it did.
func (s *Sim) fireOne() bool {
	e := heap.Pop(&s.timers).(timerEntry)
	pd := s.bySeq[e.seq]
	if pd == nil || pd.timerAt != e.when {
		return false // completed, cancelled or given another deadline
	}
	s.note("timer of %v tag %d fires", pd.owner.pid, pd.tag)
	if pd.deadline {
		s.expire(pd)
	} else {
		s.completeNow(pd, scheduler.Event{})
	}
	if s.cfg.seeded {
		s.releaseDelayed(true)
	}
	return true
}

// heldBack reports whether a completion of yield seq is held back by a
// DelayCompletion fault. Called with s.mu held.
func (s *Sim) heldBack(seq uint64) bool {
	for _, d := range s.delayed {
		if d.seq == seq {
			return true
		}
	}
	return false
}

// releaseDelayed delivers the completions a DelayCompletion fault held
// back: after a timer fired, or (force false) when nothing else is left
// and no timer is set. It reports whether it delivered any.
func (s *Sim) releaseDelayed(afterTimer bool) bool {
	if len(s.delayed) == 0 || (!afterTimer && s.timers.live(s) > 0) {
		return false
	}
	ds := s.delayed
	s.delayed = nil
	for _, d := range ds {
		if pd := s.bySeq[d.seq]; pd != nil && pd.owner == d.p {
			s.note("delayed completion of %v tag %d arrives", d.p.pid, pd.tag)
			s.completeNow(pd, d.ev)
		}
	}
	return true
}

// carry carries out one yield y of p's step.
func (s *Sim) carry(p *proc, y *bridge.Yield) {
	s.note("carry out %v's %s", p.pid, describe(y))
	switch y.Kind {
	case bridge.KindTell:
		s.tell(p, y.To, y.Arg)
	case bridge.KindTellName:
		to, err := s.lookup(y.Name)
		if err != nil {
			s.push(p, scheduler.Event{Type: scheduler.EventMessage, Data: y.Arg, Error: err})
			return
		}
		s.tell(p, to, y.Arg)
	case bridge.KindSpawn, bridge.KindSpawnAwait:
		pd := s.registerWithin(p, y)
		if pd == nil {
			return
		}
		child, _ := y.Child.(scheduler.Process)
		await := y.Kind == bridge.KindSpawnAwait
		var awaiter *proc
		if await {
			awaiter = p
		}
		c, err := s.start(p.values, child, y.Method, y.Input, awaiter, pd.seq) // the parent's values, as on the scheduler
		switch {
		case err != nil:
			s.completeNow(pd, scheduler.Event{Error: err})
		case !await:
			s.completeNow(pd, scheduler.Event{From: c.pid})
		}
	case bridge.KindSleep:
		pd := s.register(p, y)
		if pd == nil {
			return
		}
		pd.sleepAt = int64(y.When)
		switch {
		case y.Deadline == 0:
			s.setTimer(pd, int64(y.When), false)
		case int64(y.Deadline) <= s.now:
			s.expire(pd) // passed already, whatever the Sleep's own time, as on the scheduler
		case y.Deadline < y.When:
			s.setTimer(pd, int64(y.Deadline), true)
		default:
			s.setTimer(pd, int64(y.When), false)
		}
	case bridge.KindMonitor:
		pd := s.registerWithin(p, y)
		if pd == nil {
			return
		}
		// A probe never ends: its monitor waits for its deadline or a Cancel.
		if !s.watch(pd, y.To, false) && s.probes[y.To] == nil {
			s.completeNow(pd, scheduler.Event{Data: goneExit(y.To), From: y.To})
		}
	case bridge.KindRequest:
		pd := s.registerWithin(p, y)
		if pd == nil {
			return
		}
		to := y.To
		if y.ByName {
			var err error
			if to, err = s.lookup(y.Name); err != nil {
				s.completeNow(pd, scheduler.Event{Error: err})
				return
			}
		}
		if to != p.pid && !s.watch(pd, to, true) && s.probes[to] == nil {
			s.completeNow(pd, scheduler.Event{Error: fmt.Errorf("%w: %v", scheduler.ErrProcessNotFound, to), From: to})
			return
		}
		req := scheduler.Request{ReplyTo: scheduler.ReplyTo{PID: p.pid, Seq: pd.seq}, Body: y.Arg}
		if err := s.deliver(p.pid, to, req); err != nil {
			s.completeNow(pd, scheduler.Event{Error: err, From: to})
		}
	case bridge.KindReply:
		_ = s.reply(scheduler.ReplyTo{PID: y.To, Seq: y.ReplySeq}, p.pid, y.Arg, y.Err)
	case bridge.KindCancel:
		s.cancelYield(p, y.Tag)
	case bridge.KindTimeout:
		s.timeout(p, y.Tag, int64(y.Deadline))
	case bridge.KindCommand:
		s.command(p, y)
	}
}

// describe names the yield y for the trace: its kind, where it goes and
// its tag, not its argument, which may print differently from run to run
// (a pointer, a map).
func describe(y *bridge.Yield) string {
	d := describeKind(y)
	if y.Kind == bridge.KindSleep {
		d += fmt.Sprintf(" until +%v", y.When-1)
	}
	if y.Deadline != 0 {
		d += fmt.Sprintf(" deadline +%v", y.Deadline-1)
	}
	return d
}

// describeKind is describe without the times.
func describeKind(y *bridge.Yield) string {
	k := YieldKind(y.Kind)
	switch y.Kind {
	case bridge.KindTell:
		return fmt.Sprintf("%v to %v", k, y.To)
	case bridge.KindTellName:
		return fmt.Sprintf("%v to %q", k, y.Name)
	case bridge.KindReply:
		return fmt.Sprintf("%v to %v", k, y.To)
	case bridge.KindMonitor:
		return fmt.Sprintf("%v of %v tag %d", k, y.To, y.Tag)
	case bridge.KindRequest:
		if y.ByName {
			return fmt.Sprintf("%v to %q tag %d", k, y.Name, y.Tag)
		}
		return fmt.Sprintf("%v to %v tag %d", k, y.To, y.Tag)
	case bridge.KindCommand:
		return fmt.Sprintf("%v %d tag %d", k, y.Cmd, y.Tag)
	case bridge.KindSpawn, bridge.KindSpawnAwait:
		return fmt.Sprintf("%v %T %q tag %d", k, y.Child, y.Method, y.Tag)
	}
	return fmt.Sprintf("%v tag %d", k, y.Tag)
}

// tell sends msg from p to to; an undeliverable message bounces back.
func (s *Sim) tell(p *proc, to relay.PID, msg any) {
	if err := s.deliver(p.pid, to, msg); err != nil {
		s.push(p, scheduler.Event{Type: scheduler.EventMessage, Data: msg, Error: err, From: to})
	}
}

// deliver puts a message from from into the mailbox of to.
func (s *Sim) deliver(from, to relay.PID, msg any) error {
	if s.closed {
		return scheduler.ErrClosed
	}
	if pr := s.probes[to]; pr != nil {
		ev := scheduler.Event{Type: scheduler.EventMessage, Data: msg, From: from}
		bridge.Unpack(&ev)
		pr.received = append(pr.received, ev)
		return nil
	}
	p := s.live(to)
	if p == nil {
		return fmt.Errorf("%w: %v", scheduler.ErrProcessNotFound, to)
	}
	s.push(p, scheduler.Event{Type: scheduler.EventMessage, Data: msg, From: from})
	return nil
}

// reply completes the asking yield to with data and err, from from.
func (s *Sim) reply(to scheduler.ReplyTo, from relay.PID, data any, err error) error {
	if to.Seq == 0 {
		return fmt.Errorf("%w: the zero ReplyTo", scheduler.ErrYieldNotPending)
	}
	if s.closed {
		return scheduler.ErrClosed
	}
	p := s.live(to.PID)
	if p == nil {
		return fmt.Errorf("%w: %v", scheduler.ErrProcessNotFound, to.PID)
	}
	return s.complete(p, to.Seq, scheduler.Event{Data: data, Error: err, From: from})
}

// watch makes pd watch the process pid; it reports false if pid is not
// a live process other than pd's owner (a probe is watched by nobody: it
// never ends).
func (s *Sim) watch(pd *pending, pid relay.PID, request bool) bool {
	t := s.live(pid)
	if t == nil || t == pd.owner {
		return false
	}
	if t.watchers == nil {
		t.watchers = map[uint64]watcher{}
	}
	t.watchers[pd.seq] = watcher{p: pd.owner, request: request}
	pd.watching = t
	return true
}

// cancelYield cancels p's outstanding yield tag and drops a completion of
// that tag that is queued or held back.
func (s *Sim) cancelYield(p *proc, tag uint64) {
	if pd := p.pending[tag]; pd != nil {
		s.forget(pd, scheduler.ErrYieldCancelled)
	}
	kept := p.inbox[:0]
	for _, ev := range p.inbox {
		if ev.Type != scheduler.EventYieldComplete || ev.Tag != tag {
			kept = append(kept, ev)
		}
	}
	clear(p.inbox[len(kept):])
	p.inbox = kept
}

// timeout gives p's outstanding yield tag the deadline when: a deadline
// it had is replaced, and a Sleep keeps its own time if that comes
// first.
func (s *Sim) timeout(p *proc, tag uint64, when int64) {
	pd := p.pending[tag]
	if pd == nil {
		return
	}
	if pd.kind == bridge.KindSleep && pd.sleepAt <= when {
		// A Sleep whose own time comes first: that is its timer, whatever
		// deadline it had before.
		if pd.deadline {
			s.setTimer(pd, pd.sleepAt, false)
		}
		return
	}
	if when <= s.now {
		s.expire(pd)
		return
	}
	s.setTimer(pd, when, true)
}

// command carries out a user command: its fake, or an error.
func (s *Sim) command(p *proc, y *bridge.Yield) {
	pd := s.registerWithin(p, y)
	if pd == nil {
		return
	}
	cmd := scheduler.CommandID(y.Cmd)
	if cmd < scheduler.FirstUserCommand {
		s.completeNow(pd, scheduler.Event{Error: fmt.Errorf("%w: command %d is reserved (user commands start at %d)", scheduler.ErrInvalidCommand, cmd, scheduler.FirstUserCommand)})
		return
	}
	if s.chance(s.cfg.faults.FailYield) {
		s.inject("fail %v's command %d tag %d", p.pid, cmd, y.Tag)
		s.completeNow(pd, scheduler.Event{Error: fmt.Errorf("%w: command %d failed", ErrInjected, cmd)})
		return
	}
	f := s.fakes[cmd]
	if f == nil {
		s.completeNow(pd, scheduler.Event{Error: fmt.Errorf("%w: %d", scheduler.ErrUnknownCommand, cmd)})
		return
	}
	pd.call = &callContext{s: s, p: p, seq: pd.seq, values: context.WithoutCancel(p.ctx)}
	c := Call{PID: p.pid, Tag: y.Tag, Cmd: cmd, Arg: y.Arg, ctx: pd.call, tok: Token{s: s, p: p, seq: pd.seq, tag: y.Tag}, inFake: true}
	var err error
	s.faking = pd.seq
	s.callUser(func() {
		defer func() {
			if v := recover(); v != nil {
				err = panicError("handler", v)
			}
		}()
		err = f(c)
	})
	s.faking = 0
	// The error completes the yield unless the fake completed it, as on
	// the scheduler, where a handler's error after its completion is
	// ignored: a completion held back by a DelayCompletion fault counts.
	if err != nil && !s.heldBack(c.tok.seq) {
		if pd := s.bySeq[c.tok.seq]; pd != nil {
			s.completeNow(pd, scheduler.Event{Error: err})
		}
	}
}

// timerEntry is a timer in the heap: when it fires, the order it was
// set in (for ties), and the yield it completes.
type timerEntry struct {
	when int64
	n    uint64
	seq  uint64
}

type timerHeap []timerEntry

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if h[i].when != h[j].when {
		return h[i].when < h[j].when
	}
	return h[i].n < h[j].n
}
func (h timerHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)   { *h = append(*h, x.(timerEntry)) }
func (h *timerHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// peek returns the earliest timer whose yield still waits for it,
// dropping stale ones (their yield completed, was cancelled or given
// another deadline): a timer released is not waited for. Nor is one at
// the end of the clock, which never fires (see clockEnd): it stays, for
// the yield's deadline (see Call.Context), but is never returned.
func (h *timerHeap) peek(s *Sim) (timerEntry, bool) {
	for len(*h) > 0 {
		e := (*h)[0]
		if pd := s.bySeq[e.seq]; pd != nil && pd.timerAt == e.when {
			return e, e.when < clockEnd
		}
		heap.Pop(h)
	}
	return timerEntry{}, false
}

// live counts the timers whose yields still wait for them and that may
// fire (not at the end of the clock).
func (h timerHeap) live(s *Sim) int {
	n := 0
	for _, e := range h {
		if pd := s.bySeq[e.seq]; pd != nil && pd.timerAt == e.when && e.when < clockEnd {
			n++
		}
	}
	return n
}

// record turns a yield into its public form.
func (s *Sim) record(p *proc, y bridge.Yield) Yield {
	r := Yield{Step: p.steps, Kind: YieldKind(y.Kind), Tag: y.Tag, Cmd: scheduler.CommandID(y.Cmd), Arg: y.Arg, To: y.To, Name: y.Name, Method: y.Method, Input: y.Input, Err: y.Err}
	if y.Kind == bridge.KindSpawn || y.Kind == bridge.KindSpawnAwait {
		r.Arg = y.Child
	}
	if y.Kind == bridge.KindSleep {
		r.At = origin.Add(y.When)
	}
	if y.Deadline != 0 {
		r.Deadline = origin.Add(y.Deadline)
	}
	return r
}

func sortedKeys[V any](m map[uint64]V) []uint64 {
	ks := make([]uint64, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	for i := 1; i < len(ks); i++ {
		for j := i; j > 0 && ks[j] < ks[j-1]; j-- {
			ks[j], ks[j-1] = ks[j-1], ks[j]
		}
	}
	return ks
}
