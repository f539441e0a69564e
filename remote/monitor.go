package remote

import (
	"context"
	"errors"
	"fmt"
	"sync"

	scheduler "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// Monitors across nodes. The watching node keeps a pending request per
// monitor; the watched node watches the process with its scheduler's own
// monitor and keeps, per peer and request, how to stop it. Each side
// forgets its half when the process ends, when the other node goes down,
// and when the watcher stops watching (a demonitor frame), so a
// long-lived process watched by many short-lived remote watchers keeps
// nothing of them.

// The node watches processes of other nodes for its scheduler's monitors.
var _ scheduler.RemoteMonitor = (*Node)(nil)

// MonitorRemote watches a process of another node for a monitor yield
// ([scheduler.StepOutput.Monitor]); it implements
// [scheduler.RemoteMonitor], and the scheduler calls it on a worker. The
// monitor completes with the process's [scheduler.Exit] when it ends, or
// with [scheduler.ExitGone] when it is not alive, when its node is
// unknown or goes down ([ErrNodeDown]), or when this node closes; and
// with ExitGone, though the process may be alive, and a monitor set
// again later may succeed, when the request could not leave: at once
// with [ErrBackpressure] when too much waits for that node to take it,
// or later with the error of a batch NATS refused to publish
// ([ErrDisconnected], or as the package documentation says). A
// monitor the process cancels, or one whose process ends, is forgotten
// on the other node at once.
func (n *Node) MonitorRemote(c scheduler.Call) error {
	pid, ok := c.Arg.(relay.PID)
	if !ok {
		return fmt.Errorf("%w: a remote monitor needs a relay.PID, got %T", scheduler.ErrInvalidCommand, c.Arg)
	}
	done := c.Completion()
	if req := n.monitor(pid, func(e scheduler.Exit) { _ = done.CompleteFrom(pid, e, nil) }); req != 0 {
		n.forgetWhenDone(c.Context(), req)
	}
	return nil
}

// Monitor calls f once, in its own goroutine, when process pid ends, with
// how it ended: a process of this node's scheduler (as
// [scheduler.Scheduler.Monitor]) or of another node. f gets
// [scheduler.ExitGone] if the process is not alive, its node is unknown
// or goes down first (Err wraps [ErrNodeDown]), or this node is not
// started or closes (Err wraps [ErrClosed], for a process of this node
// too); and with ExitGone, though the process may be alive, when the
// request could not leave: at once with [ErrBackpressure] if too much
// waits for the process's node to take it, or later with the error of a
// batch NATS refused to publish ([ErrDisconnected], or as the package
// documentation says). It returns stop, which forgets the monitor, here
// and on the other node, and reports whether it did so before f was
// called. Any goroutine. A nil f is a programming error: Monitor panics
// at once. As f runs in its own goroutine, a [runtime.Goexit] in it ends
// that goroutine only, and a panic in it, not recovered, ends the
// program.
func (n *Node) Monitor(pid relay.PID, f func(scheduler.Exit)) (stop func() bool) {
	if f == nil {
		panic("remote: Monitor with a nil function")
	}
	if pid.Node == n.num && n.running() {
		return n.sched.Monitor(pid, f)
	}
	var once sync.Once
	req := n.monitor(pid, func(e scheduler.Exit) { once.Do(func() { go f(e) }) })
	return func() bool {
		stopped := false
		once.Do(func() { stopped = true })
		if stopped && req != 0 {
			n.forget(req)
		}
		return stopped
	}
}

// monitor asks pid's node to report its end and calls f once with it,
// unless the request is forgotten first ([Node.forget]). It returns the
// request's number, or 0 if f was called at once. Any goroutine; it
// never blocks.
func (n *Node) monitor(pid relay.PID, f func(scheduler.Exit)) uint64 {
	gone := func(err error) { f(scheduler.Exit{PID: pid, Reason: scheduler.ExitGone, Err: err}) }
	if !n.running() {
		gone(n.notRunning())
		return 0
	}
	p := n.peer(pid.Node)
	if p == nil {
		gone(fmt.Errorf("%w: node %d of %v", ErrUnknownNode, pid.Node, pid))
		return 0
	}
	req := n.pending.add(&pendingReq{peer: p, kind: kindMonitor, target: pid, done: func(_ relay.PID, data any, err error) {
		if err != nil {
			gone(err)
			return
		}
		f(data.(scheduler.Exit))
	}})
	if err := p.link.sendMonitor(req, pid); err != nil {
		if n.pending.remove(req) != nil {
			gone(err)
		}
		return 0
	}
	return req
}

// forgetWhenDone forgets request req once ctx, the context of the yield
// that waits for it, is done: the process stopped waiting (a cancel, a
// deadline, its end), or the yield has completed, when req is answered
// already and there is nothing left to forget. Any goroutine.
func (n *Node) forgetWhenDone(ctx context.Context, req uint64) {
	context.AfterFunc(ctx, func() { n.forget(req) })
}

// forget drops request req, so that its done function is never called,
// and reports whether it was still pending. The other node forgets a
// monitor, or the watch of an awaited spawn's child, at once (a
// demonitor frame, which follows the request on the link); a spawn's
// answer is dropped when it comes, and its child runs on. Any goroutine.
func (n *Node) forget(req uint64) bool {
	r := n.pending.remove(req)
	if r == nil {
		return false
	}
	if r.kind == kindMonitor || r.await {
		_ = r.peer.link.sendDemonitor(req) // a peer that is down holds nothing
	}
	return true
}

// serveMonitor sets up the monitor a peer asked for. Data goroutine.
func (n *Node) serveMonitor(p *peer, f *frame) {
	n.hold(p, f.req, f.to, scheduler.Handle{})
}

// serveDemonitor drops the monitor a peer no longer wants. Data
// goroutine.
func (n *Node) serveDemonitor(p *peer, f *frame) {
	n.held.stop(heldKey{p, f.req})
}

// hold watches local process pid for request req of peer p, and sends
// the peer its exit when it ends. h, if not zero, is pid's Handle: a
// process started for an awaited spawn may end before the watch is set
// up, and its Handle still has its result. A monitor held for req of p
// already is stopped first (see heldTable.reserve). Nothing is held for
// a peer that is down: the data goroutine may serve a request of p while
// another goroutine declares p down and stops what is held for it, so
// the link is checked once the monitor is reserved, where that stop
// would find it. Any goroutine.
func (n *Node) hold(p *peer, req uint64, pid relay.PID, h scheduler.Handle) {
	key := heldKey{p, req}
	m := n.held.reserve(key)
	if m == nil {
		n.sendExit(p, req, scheduler.Exit{PID: pid, Reason: scheduler.ExitGone, Err: n.notRunning()})
		return
	}
	if p.link.state.Load() == linkDown {
		n.held.take(key, m)
		return
	}
	stop := n.sched.Monitor(pid, func(e scheduler.Exit) {
		if e.Reason == scheduler.ExitGone && h.PID() == pid {
			e = handleExit(h, e)
		}
		if n.held.take(key, m) {
			n.sendExit(p, req, e)
		}
	})
	n.held.set(key, m, stop)
}

// handleExit is how the process of h ended, from its Handle, or e if the
// Handle does not know yet.
func handleExit(h scheduler.Handle, e scheduler.Exit) scheduler.Exit {
	res, err := h.Result()
	switch {
	case errors.Is(err, scheduler.ErrNotEnded):
		return e
	case err == nil:
		return scheduler.Exit{PID: e.PID, Reason: scheduler.ExitDone, Result: res}
	case errors.Is(err, scheduler.ErrForced):
		return scheduler.Exit{PID: e.PID, Reason: scheduler.ExitForced, Err: err}
	}
	return scheduler.Exit{PID: e.PID, Reason: scheduler.ExitFailed, Result: res, Err: err}
}

// sendExit sends peer p the exit e of the process its request req
// watches. A result that cannot cross (JSON cannot encode it, or it is
// too large) is replaced by the error saying so, joined to the exit's
// own error if it has one. The result's MarshalJSON, user code, runs
// here: if it calls runtime.Goexit, the exit goes without the result, its
// error matching ErrNotEncodable and scheduler.ErrGoexit, before the
// goroutine ends, so that the watcher is not left waiting (a panic,
// which nothing here recovers, ends the program after the same). Any
// goroutine.
func (n *Node) sendExit(p *peer, req uint64, e scheduler.Exit) {
	var body any
	cause := e.Err
	if !e.Result.IsZero() {
		encoded := false
		defer func() {
			if !encoded {
				n.sendExitOnly(p, req, e.Reason, errors.Join(cause, fmt.Errorf("the result cannot cross: %w: its MarshalJSON did not return: %w", ErrNotEncodable, scheduler.ErrGoexit)))
			}
		}()
		b, err := wireBody(e.Result)
		encoded = true
		if err == nil {
			body = b
		} else {
			cause = errors.Join(cause, fmt.Errorf("the result cannot cross: %w", err))
		}
	}
	err := p.link.sendExit(req, e.Reason, cause, body, roomAnswer)
	if body != nil && (errors.Is(err, ErrNotEncodable) || errors.Is(err, ErrBackpressure)) {
		cause = errors.Join(cause, fmt.Errorf("the result cannot cross: %w", err))
		err = p.link.sendExit(req, e.Reason, cause, nil, roomAnswer)
	}
	if errors.Is(err, ErrBackpressure) {
		// The room of answers is full: the watcher still hears of the
		// end, which it would otherwise wait for until its node or this
		// one goes down.
		err = p.link.sendExit(req, e.Reason, cause, nil, roomAlways)
	}
	if err != nil {
		n.counts.dropped[dropOverflow].Add(1)
	}
}

// sendExitOnly sends peer p an exit without a result, for request req,
// with reason and cause, as the end of sendExit does. Any goroutine.
func (n *Node) sendExitOnly(p *peer, req uint64, reason scheduler.ExitReason, cause error) {
	err := p.link.sendExit(req, reason, cause, nil, roomAnswer)
	if errors.Is(err, ErrBackpressure) {
		err = p.link.sendExit(req, reason, cause, nil, roomAlways)
	}
	if err != nil {
		n.counts.dropped[dropOverflow].Add(1)
	}
}

// heldKey names a monitor this node holds for a peer.
type heldKey struct {
	peer *peer // the incarnation that asked
	req  uint64
}

// heldTable holds the monitors this node keeps for its peers, so that a
// demonitor, the peer going down or this node closing can stop them. A
// request number of a peer names one monitor: a peer asks again under a
// number it uses only if it is broken or hostile, and the monitor it
// asks for then replaces the one held, which is stopped, so that no
// monitor outlives its entry. Its methods may be called from any
// goroutine.
type heldTable struct {
	mu     sync.Mutex
	m      map[heldKey]*heldMonitor // guarded by mu
	closed bool                     // guarded by mu
}

// heldMonitor is one monitor held for a peer. The table's entry is the
// monitor's own: one that replaced it under the same key is not taken or
// set by the monitor it replaced.
type heldMonitor struct {
	stop func() bool // guarded by the table's mu; nil while being set up
}

// reserve records a new monitor under key while it is set up and
// returns it, or nil once the table is closed. A monitor held under key
// already is taken out and stopped (one being set up is stopped by its
// set).
func (t *heldTable) reserve(key heldKey) *heldMonitor {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	if t.m == nil {
		t.m = map[heldKey]*heldMonitor{}
	}
	var stopOld func() bool
	if old := t.m[key]; old != nil {
		stopOld = old.stop
	}
	m := &heldMonitor{}
	t.m[key] = m
	t.mu.Unlock()
	if stopOld != nil {
		stopOld()
	}
	return m
}

// set records how to stop m, held under key, unless it has fired, been
// stopped or been replaced meanwhile: then stop is called (harmless if
// it fired).
func (t *heldTable) set(key heldKey, m *heldMonitor, stop func() bool) {
	t.mu.Lock()
	ok := t.m[key] == m
	if ok {
		m.stop = stop
	}
	t.mu.Unlock()
	if !ok {
		stop()
	}
}

// take forgets m, held under key, as it fires, reporting whether it was
// still held (not stopped or replaced).
func (t *heldTable) take(key heldKey, m *heldMonitor) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m[key] != m {
		return false
	}
	delete(t.m, key)
	return true
}

// stop stops the monitor of key.
func (t *heldTable) stop(key heldKey) {
	t.mu.Lock()
	var stop func() bool
	if m := t.m[key]; m != nil {
		stop = m.stop
		delete(t.m, key)
	}
	t.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// stopWhere stops every monitor whose key matches.
func (t *heldTable) stopWhere(match func(heldKey) bool) {
	var stops []func() bool
	t.mu.Lock()
	for k, m := range t.m {
		if match(k) {
			delete(t.m, k)
			if m.stop != nil {
				stops = append(stops, m.stop)
			}
		}
	}
	t.mu.Unlock()
	for _, stop := range stops {
		stop()
	}
}

// stopPeer stops the monitors held for peer p.
func (t *heldTable) stopPeer(p *peer) {
	t.stopWhere(func(k heldKey) bool { return k.peer == p })
}

// close stops every monitor and refuses new ones.
func (t *heldTable) close() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	t.stopWhere(func(heldKey) bool { return true })
}

// len is the number of monitors held.
func (t *heldTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}

// The pending table: spawn and monitor requests sent to other nodes and
// not answered yet.

// pendingTable holds the requests this node sent to other nodes and not
// answered yet. Its methods may be called from any goroutine; they call
// done functions outside mu.
type pendingTable struct {
	mu   sync.Mutex
	next uint64                 // guarded by mu: the last request number
	m    map[uint64]*pendingReq // guarded by mu
}

// pendingReq is a request waiting for its answer.
type pendingReq struct {
	peer  *peer // the incarnation asked
	kind  byte  // kindSpawn or kindMonitor
	await bool  // a spawn that waits for the child's end
	// target is the process watched, or the child of an awaited spawn
	// once it has started. Guarded by the table's mu.
	target relay.PID
	// done completes the request: from is the process it is about (the
	// watched process, an awaited child), or zero.
	done func(from relay.PID, data any, err error)
}

// add records r and returns its number.
func (t *pendingTable) add(r *pendingReq) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[uint64]*pendingReq{}
	}
	t.next++
	t.m[t.next] = r
	return t.next
}

// remove forgets request req and returns it, or nil if it was not
// pending.
func (t *pendingTable) remove(req uint64) *pendingReq {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.m[req]
	delete(t.m, req)
	return r
}

// len is the number of requests pending.
func (t *pendingTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}

// answer completes the request a spawned or exited frame from peer p
// answers. A frame that answers nothing this node asked p is ignored, so
// a peer can complete only its own requests. Data goroutine.
func (t *pendingTable) answer(p *peer, f *frame) {
	t.mu.Lock()
	r := t.m[f.req]
	if r == nil || r.peer != p {
		t.mu.Unlock()
		return
	}
	var err error
	switch {
	case f.kind == kindSpawned && r.kind == kindSpawn:
		if f.code != 0 {
			err = newRemoteError(p.name, f.from, f.code, f.text)
		} else if r.await {
			r.target = f.from // the exit follows
			t.mu.Unlock()
			return
		}
		delete(t.m, f.req)
		t.mu.Unlock()
		if err != nil {
			r.done(relay.PID{}, nil, err)
		} else {
			r.done(f.from, nil, nil)
		}
	case f.kind == kindExited && (r.kind == kindMonitor || r.await):
		delete(t.m, f.req)
		t.mu.Unlock()
		if f.code != 0 {
			err = newRemoteError(p.name, r.target, f.code, f.text)
		}
		res, _ := f.body.(payload.Payload)
		e := scheduler.Exit{PID: r.target, Reason: scheduler.ExitReason(f.reason), Result: res, Err: err}
		if r.kind == kindMonitor {
			r.done(r.target, e, nil)
		} else {
			data, err := awaited(e)
			r.done(r.target, data, err)
		}
	default:
		t.mu.Unlock()
	}
}

// fail completes request req with err, if it is still pending: its
// frame never left (see link.addRequest).
func (t *pendingTable) fail(req uint64, err error) {
	if r := t.remove(req); r != nil {
		r.done(r.target, nil, err)
	}
}

// failPeer completes every request to peer p with err.
func (t *pendingTable) failPeer(p *peer, err error) {
	t.failWhere(func(r *pendingReq) bool { return r.peer == p }, err)
}

// failAll completes every request with err.
func (t *pendingTable) failAll(err error) {
	t.failWhere(func(*pendingReq) bool { return true }, err)
}

func (t *pendingTable) failWhere(match func(*pendingReq) bool, err error) {
	var failed []*pendingReq
	t.mu.Lock()
	for req, r := range t.m {
		if match(r) {
			failed = append(failed, r)
			delete(t.m, req)
		}
	}
	t.mu.Unlock()
	for _, r := range failed {
		r.done(r.target, nil, err)
	}
}
