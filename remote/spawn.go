package remote

import (
	"context"
	"errors"
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
// its [relay.PID] as From, as [scheduler.StepOutput.Spawn] does. With
// Await it completes when the process ends, with its result (read with
// [scheduler.Event.Result]) and its error as Error, and From its PID, as
// [scheduler.StepOutput.SpawnAwait] does. It fails with an error
// wrapping [ErrUnknownNode] (no live node has that name, even if one had
// it before), [ErrNodeDown] (the node went down before the answer, or,
// with Await, before the child's end), [ErrBackpressure] (too much waits
// for that node: nothing was asked, so a later spawn may succeed; or,
// with Await, too much waited to go back when the child ended, and its
// result was left out), [ErrUnknownKind], [ErrNotEncodable] (an input
// that cannot cross, or, with Await, a result that cannot cross back: a
// Go value JSON cannot encode, or one too large for a batch),
// [ErrClosed] (this node is not started or has closed, even for a spawn
// here, or it closed before the answer came), the error of a batch NATS
// refused to publish with the request in it ([ErrDisconnected], or as
// the package documentation says: nothing was started), or what starting
// the process failed with on the target node, from another node an
// [*Error] matching the same sentinels: its Init's error
// ([scheduler.ErrInit]), a factory that panicked ([scheduler.ErrPanic])
// or returned nil ([scheduler.ErrNilProcess]), or the scheduler's
// refusal to start it (see [scheduler.Scheduler.Submit]).
//
// A yield that stops waiting (cancelled, timed out, or its process
// ended) is forgotten at once: its answer is dropped when it comes, and
// with Await the target node stops watching the child. The child, if
// the request had left, runs on, as the child of a cancelled
// [scheduler.StepOutput.SpawnAwait] does.
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

// SpawnCommand returns the command ID of [Spawn] yields.
func (n *Node) SpawnCommand() scheduler.CommandID { return n.cfg.SpawnCommand }

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
//
// A factory that returns nil fails the spawn with an error matching
// [scheduler.ErrNilProcess], and one that panics with an error matching
// [scheduler.ErrPanic]; the node goes on. A spawn from another node
// calls the factory, and Submit the process's Init, on a goroutine of
// their own, so a [runtime.Goexit] in either (t.FailNow, require.*)
// fails that spawn with an error matching both [scheduler.ErrPanic] and
// [scheduler.ErrGoexit], and the node goes on hearing its peers. A spawn
// of this node's own kind, by a [Spawn] yield or [Node.Spawn] naming
// this node, calls the factory on the spawner's goroutine, as it does
// Init: a Goexit there does what one in the Init of a child does (see
// [scheduler.Process]): the yielding process ends with a
// [*scheduler.PanicError] for ErrGoexit, and Node.Spawn's caller's
// goroutine ends, leaving nothing pending or locked.
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

// startLocal starts a process of a registered kind with submit. Any
// goroutine.
func (n *Node) startLocal(kind, method string, input payload.Payloads, submit submitFunc) (scheduler.Handle, error) {
	f := n.kinds.factory(kind)
	if f == nil {
		return scheduler.Handle{}, fmt.Errorf("%w: %q on node %q", ErrUnknownKind, kind, n.cfg.Name)
	}
	p, err := newProcess(f, kind)
	if err != nil {
		return scheduler.Handle{}, err
	}
	return submit(context.Background(), p, method, input)
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
	if forget := n.spawn(sp, c.Submit, func(from relay.PID, data any, err error) { _ = done.CompleteFrom(from, data, err) }); forget != nil {
		// The yield's context is done once the process stops waiting, or
		// once the yield has completed, when there is nothing to forget.
		context.AfterFunc(c.Context(), func() { forget() })
	}
	return nil
}

// Spawn starts a process of a registered kind on the named node (empty,
// or this node's name: here) and returns its PID, as a [Spawn] yield
// without Await does, for code outside any process. It waits for the
// target node's answer or ctx.
//
// A ctx that has ended already starts nothing. One that ends before the
// answer comes makes Spawn forget the request, so nothing of it is left
// pending; but the request has left, and the process the other node
// starts for it runs on, unknown here, as the child of a cancelled
// SpawnAwait does: its answer is dropped when it comes. Either way the
// error wraps ctx's. A nil ctx is refused with an error wrapping
// [scheduler.ErrNilContext], and nothing is sent. Any goroutine.
func (n *Node) Spawn(ctx context.Context, node, kind, method string, input payload.Payloads) (relay.PID, error) {
	if ctx == nil {
		return relay.PID{}, fmt.Errorf("%w: Spawn", scheduler.ErrNilContext)
	}
	stopped := func() error {
		return fmt.Errorf("remote: spawning %q on node %q: %w", kind, node, ctx.Err())
	}
	if ctx.Err() != nil {
		return relay.PID{}, stopped()
	}
	ch := make(chan outcome, 1)
	forget := n.spawn(Spawn{Node: node, Kind: kind, Method: method, Input: input}, n.submit, func(from relay.PID, _ any, err error) { ch <- outcome{from, err} })
	var o outcome
	select {
	case o = <-ch:
	case <-ctx.Done():
		if forget != nil && forget() {
			return relay.PID{}, stopped()
		}
		// The answer has come: whoever took the request from the table
		// calls done right after.
		o = <-ch
	}
	pid, _ := o.data.(relay.PID)
	return pid, o.err
}

// outcome is what a request ended with.
type outcome struct {
	data any
	err  error
}

// submit is the scheduler's Submit, for spawns from outside any process
// and from other nodes.
func (n *Node) submit(ctx context.Context, p scheduler.Process, method string, input payload.Payloads, opts ...scheduler.SubmitOption) (scheduler.Handle, error) {
	return n.sched.Submit(ctx, p, method, input, opts...)
}

// spawn carries out sp and calls done exactly once with its outcome, at
// once or later from another goroutine, unless the spawn is forgotten
// first. It returns the function that forgets it, or nil if done was
// called at once: forget drops the request sent to another node (see
// [Node.forget]), or stops the watch of an awaited child on this node,
// and reports whether it did so before done was called. Any goroutine;
// it never blocks.
func (n *Node) spawn(sp Spawn, submit submitFunc, done func(from relay.PID, data any, err error)) (forget func() bool) {
	if !n.running() {
		done(relay.PID{}, nil, n.notRunning())
		return nil
	}
	if sp.Node == "" || sp.Node == n.cfg.Name {
		h, err := n.startLocal(sp.Kind, sp.Method, sp.Input, submit)
		switch {
		case err != nil:
			done(relay.PID{}, nil, err)
		case !sp.Await:
			done(h.PID(), nil, nil)
		default:
			// The scheduler's monitor calls the function or, stopped
			// first, never does: one of the two counts the watch out.
			n.localAwaits.Add(1)
			stop := n.sched.Monitor(h.PID(), func(e scheduler.Exit) {
				n.localAwaits.Add(-1)
				if e.Reason == scheduler.ExitGone { // ended before the watch
					e = handleExit(h, e)
				}
				data, err := awaited(e)
				done(h.PID(), data, err)
			})
			return func() bool {
				if !stop() {
					return false
				}
				n.localAwaits.Add(-1)
				return true
			}
		}
		return nil
	}
	p, err := n.livePeer(sp.Node)
	if err != nil {
		done(relay.PID{}, nil, err)
		return nil
	}
	input, err := wirePayloads(sp.Input)
	if err != nil {
		done(relay.PID{}, nil, err)
		return nil
	}
	req := n.pending.add(&pendingReq{peer: p, kind: kindSpawn, await: sp.Await, done: done})
	if err := p.link.sendSpawn(req, sp.Kind, sp.Method, sp.Await, input); err != nil {
		if n.pending.remove(req) != nil {
			done(relay.PID{}, nil, err)
		}
		return nil
	}
	return func() bool { return n.forget(req) }
}

// startContained starts a process of a registered kind for a peer, as
// startLocal does, on a goroutine of its own, and waits for it. The
// kind's factory and the process's Init (which Submit runs) are user
// code: a runtime.Goexit in either ends that goroutine, not the data
// subscription's, which NATS would not replace, and fails the spawn with
// an error matching [scheduler.ErrPanic] and [scheduler.ErrGoexit]
// (Submit has closed a process whose Init called it). A panic in the
// factory fails the spawn as startLocal says, one in Init as Submit
// says. The goroutine costs a spawn from another node about a
// microsecond; messages never take this path. Data goroutine.
func (n *Node) startContained(kind, method string, input payload.Payloads) (h scheduler.Handle, err error) {
	done := make(chan struct{})
	go func() {
		returned := false
		defer func() {
			if !returned {
				err = fmt.Errorf("%w: %w: the factory or Init of kind %q on node %q", scheduler.ErrPanic, scheduler.ErrGoexit, kind, n.cfg.Name)
			}
			close(done)
		}()
		h, err = n.startLocal(kind, method, input, n.submit)
		returned = true
	}()
	<-done
	return h, err
}

// awaited is the completion of an awaited spawn whose child ended with e,
// as a local SpawnAwait completes: the child's result and its own error
// (none if it finished with Done, asked to stop or not), or, if the
// result could not cross from the child's node (it could not be encoded
// or was too large, or the way back was full), the error saying so.
func awaited(e scheduler.Exit) (any, error) {
	switch e.Reason {
	case scheduler.ExitDone, scheduler.ExitTerminated:
		if errors.Is(e.Err, ErrNotEncodable) || errors.Is(e.Err, ErrBackpressure) {
			return nil, e.Err
		}
		return e.Result, nil
	case scheduler.ExitGone:
		return nil, e.Err
	}
	return e.Result, e.Err
}

// serveSpawn carries out a spawn request from peer p: the answer says
// whether the process started and, for an awaited spawn, an exit follows
// when it ends. Data goroutine.
func (n *Node) serveSpawn(p *peer, f *frame) {
	h, err := n.startContained(f.name, f.method, f.input)
	serr := p.link.sendSpawned(f.req, h.PID(), err, roomAnswer)
	if errors.Is(serr, ErrBackpressure) {
		// The room of answers is full: the answer goes all the same, or
		// the peer would wait for it until one of the nodes goes down.
		serr = p.link.sendSpawned(f.req, h.PID(), err, roomAlways)
	}
	if serr != nil {
		n.counts.dropped[dropOverflow].Add(1)
	}
	if err == nil && f.await {
		n.hold(p, f.req, h.PID(), h) // its exit follows the answer on the link
	}
}
