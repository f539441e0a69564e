package remote

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"

	scheduler "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// Spawn is the argument of a yield of the node's spawn command
// ([Node.SpawnCommand]): start a process of a registered kind on a named
// node, as [scheduler.StepOutput.Spawn] does on this one.
//
//	out.Yield(tag, node.SpawnCommand(), remote.Spawn{Node: "b", Kind: "worker", Method: "run", Input: in})
//
// Without Await the yield completes when the process has started, with
// its [relay.PID] as Data. With Await it completes when the process ends,
// with its result ([payload.Payload]) as Data and its error as Error, as
// [scheduler.StepOutput.SpawnAwait] does. It fails with an error wrapping
// [ErrUnknownNode], [ErrNodeDown], [ErrUnknownKind], [ErrNotEncodable]
// (an input that cannot cross), or the error of the process's Init on
// the target node (an [*Error] matching [scheduler.ErrInit]).
type Spawn struct {
	// Node is the name of the node to start the process on; empty, or
	// this node's name, starts it here.
	Node string
	// Kind names the process type, as registered on that node with
	// [Node.Register].
	Kind string
	// Method is the entry point the process's Init is called with.
	Method string
	// Input crosses to the node by the rule for message bodies (see the
	// package documentation).
	Input payload.Payloads
	// Await: complete when the process ends, with its result, instead of
	// when it has started, with its PID.
	Await bool
}

// Watch is the argument of a yield of the node's watch command
// ([Node.WatchCommand]): complete when process PID ends, with its result
// as Data and its error as Error, or with an error wrapping [ErrNodeDown]
// when its node goes down first.
//
// A node can report the end of the processes it started for a [Spawn]
// (remote or not); for others the yield fails with
// [ErrWatchUnsupported].
type Watch struct {
	PID relay.PID // the process to watch, on any node
}

// SpawnCommand returns the command ID of [Spawn] yields.
func (n *Node) SpawnCommand() scheduler.CommandID { return n.cfg.SpawnCommand }

// WatchCommand returns the command ID of [Watch] yields.
func (n *Node) WatchCommand() scheduler.CommandID { return n.cfg.WatchCommand }

// kindRegistry maps kind names to process factories. Lookups take no
// lock: the map is replaced copy-on-write under mu.
type kindRegistry struct {
	mu sync.Mutex
	m  atomic.Pointer[map[string]func() scheduler.Process]
}

// Register makes processes of kind startable on this node by [Spawn]:
// each spawn calls factory for a new process. It fails with an error
// wrapping [ErrInvalidConfig] for an empty kind, a nil factory, or a
// kind registered already. Any time, any goroutine.
func (n *Node) Register(kind string, factory func() scheduler.Process) error {
	if kind == "" || factory == nil {
		return fmt.Errorf("%w: Register(%q) needs a kind name and a factory", ErrInvalidConfig, kind)
	}
	r := &n.kinds
	r.mu.Lock()
	defer r.mu.Unlock()
	var m map[string]func() scheduler.Process
	if old := r.m.Load(); old != nil {
		if _, dup := (*old)[kind]; dup {
			return fmt.Errorf("%w: kind %q is registered already", ErrInvalidConfig, kind)
		}
		m = maps.Clone(*old)
	} else {
		m = map[string]func() scheduler.Process{}
	}
	m[kind] = factory
	r.m.Store(&m)
	return nil
}

// factory returns the factory of kind, or nil.
func (r *kindRegistry) factory(kind string) func() scheduler.Process {
	if m := r.m.Load(); m != nil {
		return (*m)[kind]
	}
	return nil
}

// submitFunc is Scheduler.Submit or Call.Submit.
type submitFunc func(context.Context, scheduler.Process, string, payload.Payloads, ...scheduler.SubmitOption) (scheduler.Handle, error)

// startLocal starts a process of a registered kind with submit, and
// tells the exit source about it so that it can be watched. Any
// goroutine.
func (n *Node) startLocal(kind, method string, input payload.Payloads, submit submitFunc) (h scheduler.Handle, err error) {
	f := n.kinds.factory(kind)
	if f == nil {
		return h, fmt.Errorf("%w: %q on node %q", ErrUnknownKind, kind, n.cfg.Name)
	}
	p, err := newProcess(f, kind)
	if err != nil {
		return h, err
	}
	if h, err = submit(context.Background(), p, method, input); err == nil {
		n.exits.started(h)
	}
	return h, err
}

// newProcess calls a factory, turning a panic or a nil process into an
// error.
func newProcess(f func() scheduler.Process, kind string) (p scheduler.Process, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("%w: the factory of kind %q: %v", scheduler.ErrPanic, kind, v)
		}
	}()
	if p = f(); p == nil {
		return nil, fmt.Errorf("%w: the factory of kind %q returned nil", scheduler.ErrNilProcess, kind)
	}
	return p, nil
}

// handleSpawn is the handler of the spawn command. Worker only, as every
// handler; it never blocks.
func (n *Node) handleSpawn(c scheduler.Call) error {
	sp, ok := c.Arg.(Spawn)
	if !ok {
		return fmt.Errorf("%w: the spawn command needs a remote.Spawn argument, got %T", scheduler.ErrInvalidCommand, c.Arg)
	}
	done := c.Completion()
	n.spawn(sp, c.Submit, func(data any, err error) { _ = done.Complete(data, err) })
	return nil
}

// handleWatch is the handler of the watch command. Worker only.
func (n *Node) handleWatch(c scheduler.Call) error {
	w, ok := c.Arg.(Watch)
	if !ok {
		return fmt.Errorf("%w: the watch command needs a remote.Watch argument, got %T", scheduler.ErrInvalidCommand, c.Arg)
	}
	done := c.Completion()
	n.watch(w.PID, func(data any, err error) { _ = done.Complete(data, err) })
	return nil
}

// Spawn starts a process of a registered kind on the named node (empty,
// or this node's name: here) and returns its PID, as a [Spawn] yield
// without Await does, for code outside any process. It waits for the
// target node's answer or ctx.
func (n *Node) Spawn(ctx context.Context, node, kind, method string, input payload.Payloads) (relay.PID, error) {
	data, err := n.await(ctx, func(done func(any, error)) {
		n.spawn(Spawn{Node: node, Kind: kind, Method: method, Input: input}, n.submit, done)
	})
	pid, _ := data.(relay.PID)
	return pid, err
}

// Watch waits until process pid ends, as a [Watch] yield does, for code
// outside any process: it returns the process's result and error, an
// error wrapping [ErrNodeDown] if its node went down first, or ctx's
// error.
func (n *Node) Watch(ctx context.Context, pid relay.PID) (payload.Payload, error) {
	data, err := n.await(ctx, func(done func(any, error)) { n.watch(pid, done) })
	res, _ := data.(payload.Payload)
	return res, err
}

// submit is the scheduler's Submit, for requests from outside any
// process and from other nodes.
func (n *Node) submit(ctx context.Context, p scheduler.Process, method string, input payload.Payloads, opts ...scheduler.SubmitOption) (scheduler.Handle, error) {
	return n.sched.Submit(ctx, p, method, input, opts...)
}

// await runs start with a completion function and waits for it.
func (n *Node) await(ctx context.Context, start func(done func(any, error))) (any, error) {
	type outcome struct {
		data any
		err  error
	}
	ch := make(chan outcome, 1)
	start(func(data any, err error) { ch <- outcome{data, err} })
	select {
	case o := <-ch:
		return o.data, o.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// spawn carries out sp and calls done exactly once with its outcome, at
// once or later from another goroutine. Any goroutine; it never blocks.
func (n *Node) spawn(sp Spawn, submit submitFunc, done func(any, error)) {
	if !n.running() {
		done(nil, n.notRunning())
		return
	}
	if sp.Node == "" || sp.Node == n.cfg.Name {
		h, err := n.startLocal(sp.Kind, sp.Method, sp.Input, submit)
		switch {
		case err != nil:
			done(nil, err)
		case !sp.Await:
			done(h.PID(), nil)
		default:
			if err := n.exits.notify(h.PID(), func(res payload.Payload, err error) { done(res, err) }); err != nil {
				done(nil, err)
			}
		}
		return
	}
	p, err := n.livePeer(sp.Node)
	if err != nil {
		done(nil, err)
		return
	}
	input, err := wirePayloads(sp.Input)
	if err != nil {
		done(nil, err)
		return
	}
	req := n.pending.add(&pendingReq{peer: p.num, reply: kindSpawned, await: sp.Await, done: done})
	if err := p.link.sendSpawn(req, sp.Kind, sp.Method, sp.Await, input); err != nil && n.pending.remove(req) {
		done(nil, err)
	}
}

// watch watches pid and calls done exactly once when it ends (or cannot
// be watched). Any goroutine; it never blocks.
func (n *Node) watch(pid relay.PID, done func(any, error)) {
	if !n.running() {
		done(nil, n.notRunning())
		return
	}
	if pid.Node == n.num {
		if err := n.exits.notify(pid, func(res payload.Payload, err error) { done(res, err) }); err != nil {
			done(nil, err)
		}
		return
	}
	p := n.peer(pid.Node)
	if p == nil {
		done(nil, fmt.Errorf("%w: node %d of %v", ErrUnknownNode, pid.Node, pid))
		return
	}
	req := n.pending.add(&pendingReq{peer: p.num, reply: kindExited, target: pid, done: done})
	if err := p.link.sendWatch(req, pid); err != nil && n.pending.remove(req) {
		done(nil, err)
	}
}

// serveSpawn carries out a spawn request from peer p. Data goroutine.
func (n *Node) serveSpawn(p *peer, f *frame) {
	req := f.req
	h, err := n.startLocal(f.name, f.method, f.input, n.submit)
	switch {
	case err != nil:
		n.reply(p, false, req, relay.PID{}, payload.Payload{}, err)
	case !f.await:
		n.reply(p, false, req, h.PID(), payload.Payload{}, nil)
	default:
		child := h.PID()
		err := n.exits.notify(child, func(res payload.Payload, err error) {
			n.reply(p, false, req, child, res, err)
		})
		if err != nil {
			n.reply(p, false, req, child, payload.Payload{}, err)
		}
	}
}

// serveWatch carries out a watch request from peer p. Data goroutine.
func (n *Node) serveWatch(p *peer, f *frame) {
	req := f.req
	err := n.exits.notify(f.to, func(res payload.Payload, err error) {
		n.reply(p, true, req, relay.PID{}, res, err)
	})
	if err != nil {
		n.reply(p, true, req, relay.PID{}, payload.Payload{}, err)
	}
}

// reply answers request req of peer p with a process's result and error.
// A result that cannot cross is replaced by the error saying so. Any
// goroutine.
func (n *Node) reply(p *peer, exited bool, req uint64, child relay.PID, res payload.Payload, cause error) {
	var body any
	if !res.IsZero() {
		b, err := wireBody(res)
		switch {
		case err == nil:
			body = b
		case cause == nil:
			cause = fmt.Errorf("the result cannot cross: %w", err)
		}
	}
	if p.link.sendReply(exited, req, child, cause, body) != nil {
		n.counts.dropped[dropBounceOverflow].Add(1)
	}
}

// pendingTable holds the spawn and watch requests sent to other nodes
// and not answered yet. Its methods may be called from any goroutine;
// they call done functions outside mu.
type pendingTable struct {
	mu   sync.Mutex
	next uint64                 // guarded by mu: the last request number
	m    map[uint64]*pendingReq // guarded by mu
}

// pendingReq is a request waiting for its answer.
type pendingReq struct {
	peer   uint32    // the node asked
	reply  byte      // the frame kind that answers it
	await  bool      // a spawn that waits for the child's end
	target relay.PID // a watch: the process watched
	done   func(any, error)
}

// add records r and returns its number.
func (t *pendingTable) add(r *pendingReq) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.next++
	t.m[t.next] = r
	return t.next
}

// remove forgets request req and reports whether it was still pending.
func (t *pendingTable) remove(req uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.m[req]
	delete(t.m, req)
	return ok
}

// answer completes the request a spawned or exited frame from peer p
// answers. A frame that answers nothing this node asked p is ignored, so
// a peer can complete only its own requests. Data goroutine.
func (t *pendingTable) answer(p *peer, f *frame) {
	t.mu.Lock()
	r := t.m[f.req]
	if r == nil || r.peer != p.num || r.reply != f.kind {
		t.mu.Unlock()
		return
	}
	delete(t.m, f.req)
	t.mu.Unlock()
	var err error
	if f.code&codeFailed != 0 {
		pid := r.target
		if f.kind == kindSpawned {
			pid = f.from
		}
		err = newRemoteError(p.name, pid, f.code, f.text)
	}
	switch {
	case f.kind == kindSpawned && !r.await:
		if err != nil {
			r.done(nil, err)
		} else {
			r.done(f.from, nil)
		}
	case err != nil && f.from.IsZero() && f.kind == kindSpawned:
		r.done(nil, err) // the child never started
	default:
		res, _ := f.body.(payload.Payload)
		r.done(res, err)
	}
}

// failPeer completes every request to peer num with err.
func (t *pendingTable) failPeer(num uint32, err error) {
	t.failWhere(func(r *pendingReq) bool { return r.peer == num }, err)
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
		r.done(nil, err)
	}
}

// exitSource tells the node when a process of its scheduler ends, for
// awaited spawns and watches. It is the one place that knows how, so
// that a scheduler able to report the end of any process can replace it
// without changing its callers.
type exitSource interface {
	// started tells the source about h, a process this node started for
	// a spawn, so that it can be watched.
	started(h scheduler.Handle)
	// notify calls fn once, on some goroutine, with pid's result and
	// error when it ends, or with an error wrapping ErrClosed if the
	// source closes first. It returns an error, and never calls fn, if
	// it cannot watch pid.
	notify(pid relay.PID, fn func(payload.Payload, error)) error
	// sweep forgets processes that ended; the monitor calls it once per
	// heartbeat.
	sweep()
	// close stops every watch, calling their fn with ErrClosed, and
	// returns when they have returned.
	close()
}

// handleExits is the exitSource that knows the processes this node
// started for spawns, by their Handles, and watches each with a
// goroutine waiting on its Done channel. Its methods may be called from
// any goroutine.
type handleExits struct {
	mu      sync.Mutex
	handles map[relay.PID]scheduler.Handle // guarded by mu
	closed  bool                           // guarded by mu
	stop    chan struct{}                  // closed by close
	wg      sync.WaitGroup                 // the watching goroutines
}

func newHandleExits() *handleExits {
	return &handleExits{handles: map[relay.PID]scheduler.Handle{}, stop: make(chan struct{})}
}

func (x *handleExits) started(h scheduler.Handle) {
	x.mu.Lock()
	if !x.closed {
		x.handles[h.PID()] = h
	}
	x.mu.Unlock()
}

func (x *handleExits) notify(pid relay.PID, fn func(payload.Payload, error)) error {
	x.mu.Lock()
	h, ok := x.handles[pid]
	switch {
	case x.closed:
		x.mu.Unlock()
		return fmt.Errorf("%w: watching %v", ErrClosed, pid)
	case !ok:
		x.mu.Unlock()
		return fmt.Errorf("%w: %v was not started by a spawn here, or ended a while ago", ErrWatchUnsupported, pid)
	}
	x.wg.Add(1)
	x.mu.Unlock()
	go func() {
		defer x.wg.Done()
		select {
		case <-h.Done():
			res, err := h.Result()
			fn(res, err)
		case <-x.stop:
			fn(payload.Payload{}, fmt.Errorf("%w: stopped watching %v", ErrClosed, pid))
		}
	}()
	return nil
}

func (x *handleExits) sweep() {
	x.mu.Lock()
	defer x.mu.Unlock()
	for pid, h := range x.handles {
		select {
		case <-h.Done():
			delete(x.handles, pid)
		default:
		}
	}
}

func (x *handleExits) close() {
	x.mu.Lock()
	if !x.closed {
		x.closed = true
		close(x.stop)
	}
	clear(x.handles)
	x.mu.Unlock()
	x.wg.Wait()
}
