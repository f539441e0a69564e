package scheduler_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// Stress: self-sends and spawn trees cannot deadlock: a process that
// floods its own mailbox, and deep trees of processes that spawn and
// await their children, always finish.
//
// Sizes: see stressConfigs (helpers_test.go) for how -short shrinks the
// run and stressScale for how the stress build tag enlarges it.

// selfSender tells itself a burst of messages each step, by Tell and by
// requests it answers itself, until it has received n.
type selfSender struct {
	guard
	rng      *rand.Rand
	n        int
	received int
	expected int // told to itself so far
	pending  int
	prog     *progress
}

func (p *selfSender) Step(evs []sched.Event, out *sched.StepOutput) error {
	p.guard.enter("Step")
	defer p.guard.exit("Step")
	for _, ev := range evs {
		switch ev.Type {
		case sched.EventMessage:
			if ev.Error != nil || ev.From != out.Self() {
				p.guard.f.addf("%s: unexpected message %v", p.guard.name, ev)
			}
			if req, ok := ev.Data.(sched.Request); ok {
				out.Reply(req.ReplyTo, nil, nil)
			}
			p.received++
			p.prog.tick()
		case sched.EventYieldComplete:
			p.pending--
			if ev.Error != nil {
				p.guard.f.addf("%s: send yield failed: %v", p.guard.name, ev.Error)
			}
		}
	}
	if p.received == p.n && p.pending == 0 {
		out.Done(payload.Of(p.received))
		return nil
	}
	if p.expected > p.received || p.expected == p.n {
		return nil // wait for what is in flight
	}
	for k := 1 + p.rng.IntN(8); k > 0 && p.expected < p.n; k-- {
		if p.rng.IntN(4) == 0 {
			p.pending++
			out.Request(uint64(p.expected), out.Self(), p.expected)
		} else {
			out.Tell(out.Self(), p.expected)
		}
		p.expected++
	}
	if p.rng.IntN(3) == 0 {
		out.Continue()
	}
	return nil
}

// treeNode spawns and awaits its children; each child tells its parent
// a message and finishes with the size of its subtree.
type treeNode struct {
	guard
	world    *treeWorld
	depth    int
	parent   relay.PID
	started  bool
	awaiting int
	messages int
	children int
	sum      int
}

type treeWorld struct {
	f      violations
	prog   progress
	rng    *rand.Rand // used by one node's Step at a time: guarded by mu
	mu     sync.Mutex
	guards []*guard
	branch int
}

func (w *treeWorld) newNode(depth int, parent relay.PID) *treeNode {
	n := &treeNode{world: w, depth: depth, parent: parent}
	w.mu.Lock()
	n.guard = guard{name: fmt.Sprintf("tree node #%d depth %d", len(w.guards), depth), f: &w.f}
	w.guards = append(w.guards, &n.guard)
	w.mu.Unlock()
	return n
}

func (n *treeNode) Step(evs []sched.Event, out *sched.StepOutput) error {
	n.guard.enter("Step")
	defer n.guard.exit("Step")
	w := n.world
	for _, ev := range evs {
		switch ev.Type {
		case sched.EventMessage:
			if ev.Error != nil {
				w.f.addf("%s: message bounced: %v", n.guard.name, ev)
			}
			n.messages++
		case sched.EventYieldComplete:
			size, err := payload.As[int](ev.Result())
			if ev.Error != nil || err != nil {
				w.f.addf("%s: child completed with %v (%v)", n.guard.name, ev, err)
			}
			n.sum += size
			n.awaiting--
		}
	}
	if !n.started {
		n.started = true
		if !n.parent.IsZero() {
			out.Tell(n.parent, n.depth)
		}
		if n.depth > 0 {
			w.mu.Lock()
			n.children = 1 + w.rng.IntN(w.branch)
			w.mu.Unlock()
			for i := range n.children {
				out.SpawnAwait(uint64(i), w.newNode(n.depth-1, out.Self()), "node", nil)
			}
			n.awaiting = n.children
		}
	}
	if n.awaiting == 0 && n.messages == n.children {
		w.prog.tick()
		out.Done(payload.Of(n.sum + 1))
	}
	return nil
}

// TestStressSelfSendsAndSpawnTrees: processes that tell themselves bursts
// of messages, and a random tree of SpawnAwait in which every child also
// tells its parent, must finish (a deadlock stalls and is dumped) with
// every message and every child's result accounted for.
func TestStressSelfSendsAndSpawnTrees(t *testing.T) {
	for _, cfg := range stressConfigs(t, 7, 4) {
		if !t.Run("self/"+cfg.String(), func(t *testing.T) {
			var f violations
			var prog progress
			s := newScheduler(t, cfg.options()...)
			ctx := context.Background()
			var hs []sched.Handle
			var ps []*selfSender
			for i := range 16 {
				p := &selfSender{rng: cfg.rng(uint64(i)), n: 2000 * stressScale, prog: &prog}
				p.guard = guard{name: fmt.Sprintf("self-sender %d", i), f: &f}
				h, err := s.Submit(ctx, p, "self", nil)
				require.NoError(t, err)
				hs, ps = append(hs, h), append(ps, p)
			}
			awaitProgress(t, s, &prog, allDone(hs), "self-sends", nil)
			for i, h := range hs {
				res, err := h.Wait(ctx)
				require.NoError(t, err)
				require.Equal(t, payload.Of(2000*stressScale), res, "self-sender %d", i)
				ps[i].guard.checkClosedOnce()
			}
			f.check(t)
		}) {
			break // one failing configuration is enough to report
		}
		if !t.Run("tree/"+cfg.String(), func(t *testing.T) {
			w := &treeWorld{rng: cfg.rng(0), branch: 5}
			s := newScheduler(t, cfg.options()...)
			ctx := context.Background()
			root := w.newNode(6+int(cfg.seed%2), relay.PID{})
			h, err := s.Submit(ctx, root, "node", nil)
			require.NoError(t, err)
			awaitProgress(t, s, &w.prog, h.Done(), "spawn tree", nil)
			res, err := h.Wait(ctx)
			require.NoError(t, err)
			w.mu.Lock()
			defer w.mu.Unlock()
			require.Equal(t, payload.Of(len(w.guards)), res, "the root counts every node of the tree")
			for _, g := range w.guards {
				g.checkClosedOnce()
			}
			w.f.check(t)
		}) {
			break // one failing configuration is enough to report
		}
	}
}
