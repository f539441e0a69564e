package scheduler

import (
	"fmt"
	"sync"

	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// Monitors: a process (with [StepOutput.Monitor]) or code outside (with
// [Scheduler.Monitor]) asks to be told when a process ends, and is told
// once, with how it ended.
//
// A process's monitor is a yield: it completes when the watched process
// ends, and cancelling it ([StepOutput.Cancel]) is how a process stops
// watching. The watched process keeps, in its procExtra, a map from the
// monitor yield's sequence number to the watcher; the watcher keeps the
// reverse (which yields of its own watch which process), so that a
// watcher that cancels or ends removes its entries from the watched
// process and a long-lived process watched by many short-lived ones keeps
// nothing of them. A request (see request.go) is a monitor too: it learns
// that its target ended before replying.

// ExitReason says how a process ended, as a monitor reports it.
type ExitReason uint8

const (
	// ExitDone: it finished with Done (not after being asked to stop).
	ExitDone ExitReason = iota + 1
	// ExitFailed: its Step returned an error or it panicked; Err says why.
	ExitFailed
	// ExitTerminated: it ended after Terminate or Shutdown asked it to
	// stop; Err is the cancel's cause ([ErrTerminated] or
	// [ErrShuttingDown]) and Result what it finished with.
	ExitTerminated
	// ExitForced: a shutdown deadline closed it; Err wraps [ErrForced].
	ExitForced
	// ExitGone: it was not alive when the monitor was set up: it never
	// existed or had ended already (or, for a process of another node,
	// its node is gone). Err wraps [ErrProcessNotFound], except for a
	// process that a transport watches: Err is then the transport's
	// reason, such as the error its MonitorRemote returned (see
	// [RemoteMonitor]).
	ExitGone
)

// String returns the reason's name.
func (r ExitReason) String() string {
	switch r {
	case ExitDone:
		return "done"
	case ExitFailed:
		return "failed"
	case ExitTerminated:
		return "terminated"
	case ExitForced:
		return "forced"
	case ExitGone:
		return "gone"
	}
	return fmt.Sprintf("ExitReason(%d)", uint8(r))
}

// Exit is how a process ended: the Data of a monitor's completion, and
// what [Scheduler.Monitor] passes to its function.
type Exit struct {
	PID    relay.PID
	Reason ExitReason
	// Result is what the process finished with (ExitDone,
	// ExitTerminated).
	Result payload.Payload
	// Err is nil for ExitDone; otherwise it says why (see the reasons).
	Err error
}

// String describes the exit for logs.
func (e Exit) String() string {
	if e.Err != nil {
		return fmt.Sprintf("%v %v: %v", e.PID, e.Reason, e.Err)
	}
	return fmt.Sprintf("%v %v", e.PID, e.Reason)
}

// exitOf is how a process that ended with result and err ended; cancelled
// says it had been asked to stop.
// Whoever ends the process, once.
func exitOf(pid relay.PID, result payload.Payload, err error, forced, cancelled bool, cause error) Exit {
	switch {
	case forced:
		return Exit{PID: pid, Reason: ExitForced, Err: err}
	case err != nil:
		return Exit{PID: pid, Reason: ExitFailed, Err: err}
	case cancelled:
		return Exit{PID: pid, Reason: ExitTerminated, Result: result, Err: cause}
	}
	return Exit{PID: pid, Reason: ExitDone, Result: result}
}

// goneExit is the Exit of a monitor on a PID that is not alive.
// Any goroutine.
func goneExit(pid relay.PID) Exit {
	return Exit{PID: pid, Reason: ExitGone, Err: fmt.Errorf("%w: %v", ErrProcessNotFound, pid)}
}

// monitorRequest marks, in a watched process's monitor map, a monitor that
// belongs to a request: it completes with ErrNoReply instead of an Exit.
// Process IDs never have this bit set (see table.release).
const monitorRequest = uint64(1) << 63

// addMonitor records that the yield seq of process watcher watches p,
// found by ID id. It reports false if p has ended (see gone). Any
// goroutine.
func (p *proc) addMonitor(seq, watcher, id uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gone(id) {
		return false
	}
	x := p.getLive()
	if x.monitors == nil {
		x.monitors = new(u64map)
	}
	x.monitors.add(seq, watcher)
	return true
}

// removeMonitor forgets the monitor of yield seq on p, found by ID id,
// unless p has ended (see gone). Any goroutine.
func (p *proc) removeMonitor(seq, id uint64) {
	p.mu.Lock()
	if x := p.live(); x != nil && x.monitors != nil && !p.gone(id) {
		x.monitors.remove(seq)
	}
	p.mu.Unlock()
}

// holdMonitor records that p's yield seq watches the process target.
// Worker only, with p Running.
func (p *proc) holdMonitor(seq, target uint64) {
	p.mu.Lock()
	x := p.getLive()
	if x.held == nil {
		x.held = new(u64map)
	}
	x.held.add(seq, target)
	p.mu.Unlock()
}

// unholdMonitor forgets that the yield seq watches a process, returning
// which (0: none). Called with proc.mu held; x may be nil.
func (x *procLive) unholdMonitor(seq uint64) (target uint64) {
	if x == nil || x.held == nil {
		return 0
	}
	target, _ = x.held.remove(seq)
	return target
}

// demonitor removes the monitor of yield seq from the process with ID
// target, if it is still alive. Any goroutine.
func (s *Scheduler) demonitor(target, seq uint64) {
	if t := s.table.lookup(target); t != nil {
		t.removeMonitor(seq, target)
	}
}

// watch sets up the monitor yield seq of p (Running on w) on the process
// pid; request marks a request's monitor. It reports false, setting up
// nothing, if pid is not a live local process. Worker only.
func (w *worker) watch(p *proc, seq uint64, pid relay.PID, request bool) bool {
	if pid.Node != w.s.node {
		return false
	}
	t := w.s.table.lookup(pid.ID)
	if t == nil || t == p {
		return false
	}
	// Held first: once the monitor is on the watched process, its end may
	// complete the yield at once, and that completion removes the hold.
	p.holdMonitor(seq, pid.ID)
	watcher := p.id.Load()
	if request {
		watcher |= monitorRequest
	}
	if !t.addMonitor(seq, watcher, pid.ID) {
		p.mu.Lock()
		p.live().unholdMonitor(seq)
		p.mu.Unlock()
		return false
	}
	return true
}

// monitor is the built-in Monitor yield tag (sequence number seq): it
// completes when pid ends. ID 0 names no process on any node, so its
// monitor completes at once, as a local one of no process does, without
// asking the transport. Worker only, with p Running.
func (w *worker) monitor(p *proc, tag, seq uint64, pid relay.PID) {
	if pid.Node != w.s.node && pid.ID != 0 {
		w.monitorRemote(p, tag, seq, pid)
		return
	}
	if !w.watch(p, seq, pid, false) {
		w.completeNowFrom(p, seq, pid, goneExit(pid), nil)
	}
}

// monitorRemote hands a monitor of a process on another node to the
// transport, if it can watch processes (see [RemoteMonitor]); otherwise
// the monitor completes at once with ExitGone.
// Worker only, with p Running.
func (w *worker) monitorRemote(p *proc, tag, seq uint64, pid relay.PID) {
	rm, ok := w.s.transport.(RemoteMonitor)
	if !ok {
		w.completeNowFrom(p, seq, pid, goneExit(pid), nil)
		return
	}
	p.inbox.wbits |= wbPinned // the transport may keep the Call, which holds the record
	w.addArmed(p)             // the transport sees the monitor's deadline (see Call.Context)
	c := Call{PID: p.pid(), Tag: tag, Cmd: cmdMonitor, Arg: pid, s: w.s, ctx: p, w: w, seq: seq}
	w.handoff.begin()
	err := w.runHandler(p, func(c Call) error { return rm.MonitorRemote(c) }, c)
	w.handoff.end(w)
	if err != nil {
		w.completeNowFrom(p, seq, pid, Exit{PID: pid, Reason: ExitGone, Err: err}, nil)
	}
}

// cmdMonitor is the reserved command ID of the Call a transport gets for
// a monitor of a process on another node.
const cmdMonitor CommandID = 4

// RemoteMonitor is implemented by a transport (see [WithTransport]) that
// can watch processes on other nodes. For a monitor of such a process the
// scheduler calls MonitorRemote on the worker, with a [Call] whose Arg is
// the watched PID; it must not block. The transport completes the call
// later with an [Exit] as Data (ExitGone when the process or its node is
// gone) and watches c.Context(), which is done once the monitor is
// cancelled or its process ends, to stop watching. An error completes the
// monitor at once with ExitGone and that error.
type RemoteMonitor interface {
	MonitorRemote(c Call) error
}

// Monitor calls f once, in its own goroutine, when the process pid ends,
// with how it ended; if pid is not a live process of this scheduler, f is
// called at once with [ExitGone]. It returns stop, which forgets the
// monitor: stop reports whether this call forgot it before f was called.
// It reports false once f has been called, and after an earlier stop: of
// any number of calls, from any goroutines, at most one reports true, and
// then f is never called. Any
// goroutine. It is the monitor for code outside any process; processes
// use [StepOutput.Monitor]. A nil f is a programming error: Monitor
// panics at once, rather than the goroutine that would call it later.
func (s *Scheduler) Monitor(pid relay.PID, f func(Exit)) (stop func() bool) {
	if f == nil {
		panic("scheduler: Monitor with a nil function")
	}
	m := &outsideMonitor{f: f}
	if pid.Node == s.node {
		if t := s.table.lookup(pid.ID); t != nil {
			t.mu.Lock()
			if !t.gone(pid.ID) {
				x := t.getLive()
				x.outside = append(x.outside, m)
				t.mu.Unlock()
				return func() bool { return m.stop(t, pid.ID) }
			}
			t.mu.Unlock()
		}
	}
	m.fire(goneExit(pid))
	return func() bool { return false }
}

// outsideMonitor is a monitor set by Scheduler.Monitor.
type outsideMonitor struct {
	f    func(Exit)
	once sync.Once // f is called, or the monitor stopped, once
}

// fire calls f with e in its own goroutine, unless stopped. Any
// goroutine.
func (m *outsideMonitor) fire(e Exit) {
	m.once.Do(func() { go m.f(e) })
}

// stop forgets the monitor on t, the record of the process with ID id;
// it reports whether f will not be called. Once the process is closed its
// list of monitors is frozen, read without the lock by whoever ends it
// (see notifyEnd): a stop then leaves the list as it is (the end's fire
// finds the monitor stopped), since taking the monitor out would move the
// ones after it under the end's reading. Any goroutine.
func (m *outsideMonitor) stop(t *proc, id uint64) bool {
	stopped := false
	m.once.Do(func() { stopped = true })
	if stopped {
		t.mu.Lock()
		if x := t.live(); x != nil && !t.gone(id) {
			for i, o := range x.outside {
				if o == m {
					x.outside = append(x.outside[:i], x.outside[i+1:]...)
					break
				}
			}
		}
		t.mu.Unlock()
	}
	return stopped
}

// notifyEnd tells the monitors of the process p, which has just ended
// with exit, and forgets the monitors p itself held on others. x is p's
// procExtra, frozen now that p is closed. Called once, by whoever ended
// p, after closing it.
func (s *Scheduler) notifyEnd(p *proc, x *procLive, exit Exit, v via) {
	if x.monitors != nil && x.monitors.len() > 0 {
		var boxed any = exit // one allocation for every watcher
		x.monitors.each(func(seq, watcher uint64) {
			ev := Event{Type: EventYieldComplete, From: exit.PID, Data: boxed}
			if watcher&monitorRequest != 0 {
				watcher &^= monitorRequest
				ev.Data = nil
				ev.Error = fmt.Errorf("%w: %v", ErrNoReply, exit)
			}
			_ = s.complete(relay.PID{Node: s.node, ID: watcher}, &ev, seq, v)
		})
	}
	for _, m := range x.outside {
		m.fire(exit)
	}
	if x.held != nil {
		x.held.each(func(seq, target uint64) { s.demonitor(target, seq) })
	}
}
