package scheduler_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// Stress: every message is delivered exactly once, and the messages of
// one sender reach each receiver in the order sent, whether they come
// from processes (Tell, requests) or from outside (Send), while the
// receivers also yield, sleep and complete yields on their own.
//
// Sizes: see stressConfigs (helpers_test.go) for how -short shrinks the
// run and stressScale for how the stress build tag enlarges it.

// fifoMsg is one numbered message; seq counts per sender, over all
// receivers, so per (sender, receiver) the received seqs must increase.
type fifoMsg struct {
	sender, seq, to int32
}

type fifoWorld struct {
	cfg            stressConfig
	nodes, perNode int // sender processes, each also a receiver
	exts, perExt   int // external sender goroutines
	maxPer         int
	pids           []relay.PID
	expect         []int          // messages each node must receive
	got            []atomic.Int32 // deliveries of (sender, seq), at sender*maxPer+seq
	f              violations
	prog           progress
}

// target is the deterministic receiver of a message, so that the test
// knows what each node must receive. One node message in eight is a
// self-send.
func (w *fifoWorld) target(sender, seq int) int {
	h := mix64(w.cfg.seed ^ uint64(sender)<<32 ^ uint64(seq))
	if sender < w.nodes && h%8 == 0 {
		return sender
	}
	return int(h >> 3 % uint64(w.nodes))
}

func (w *fifoWorld) sent(sender int) int {
	if sender < w.nodes {
		return w.perNode
	}
	return w.perExt
}

type fifoNode struct {
	w *fifoWorld
	guard
	idx      int
	rng      *rand.Rand
	started  bool
	sent     int
	received int
	last     []int32 // per sender, the last seq received
	tagSet           // the yields not completed yet
	// Mirrors for the stall report, which reads them from the test
	// goroutine.
	sentA, receivedA, pendingA atomic.Int32
}

func (n *fifoNode) Step(evs []sched.Event, out *sched.StepOutput) error {
	n.guard.enter("Step")
	defer n.guard.exit("Step")
	w := n.w
	for _, ev := range evs {
		switch ev.Type {
		case sched.EventMessage:
			if ev.Error != nil {
				w.f.addf("node %d: a message to %v bounced: %v", n.idx, ev.From, ev.Error)
				continue
			}
			switch m := ev.Data.(type) {
			case startMsg:
				n.started = true
			case fifoMsg:
				n.receive(m, ev.From)
			case sched.Request:
				n.receive(m.Body.(fifoMsg), ev.From)
				out.Reply(m.ReplyTo, nil, nil)
			default:
				w.f.addf("node %d: unexpected message %T", n.idx, ev.Data)
			}
		case sched.EventYieldComplete:
			if !n.complete(ev.Tag) {
				w.f.addf("node %d: completion of tag %d that is not outstanding", n.idx, ev.Tag)
			}
			if ev.Error != nil {
				w.f.addf("node %d: yield %d failed: %v", n.idx, ev.Tag, ev.Error)
			}
		default:
			w.f.addf("node %d: unexpected event %v", n.idx, ev)
		}
	}
	if n.started && n.outstanding() == 0 && n.sent < w.perNode {
		for k := 1 + n.rng.IntN(4); k > 0 && n.sent < w.perNode; k-- {
			m := fifoMsg{sender: int32(n.idx), seq: int32(n.sent), to: int32(w.target(n.idx, n.sent))}
			to := w.pids[m.to]
			if n.rng.IntN(8) == 0 {
				// A request: a message in order with the Tells
				// around it, and a completion when it is answered.
				out.Request(n.newTag(), to, m)
			} else {
				out.Tell(to, m)
			}
			n.sent++
		}
		switch n.rng.IntN(5) {
		case 0, 1:
			out.Continue()
		case 2:
			out.Yield(n.newTag(), cmdSync, nil)
		case 3:
			out.Yield(n.newTag(), cmdAsync, nil)
		case 4:
			out.Sleep(n.newTag(), time.Duration(n.rng.IntN(50))*time.Microsecond)
		}
	}
	if n.sent == w.perNode && n.outstanding() == 0 && n.received == w.expect[n.idx] {
		out.Done(payload.Payload{})
	}
	n.sentA.Store(int32(n.sent))
	n.receivedA.Store(int32(n.received))
	n.pendingA.Store(int32(n.outstanding()))
	return nil
}

func (n *fifoNode) receive(m fifoMsg, from relay.PID) {
	w := n.w
	if int(m.to) != n.idx {
		w.f.addf("node %d: got message %+v meant for node %d", n.idx, m, m.to)
		return
	}
	wantFrom := relay.PID{}
	if int(m.sender) < w.nodes {
		wantFrom = w.pids[m.sender]
	}
	if from != wantFrom {
		w.f.addf("node %d: message %+v has From %v, want %v", n.idx, m, from, wantFrom)
	}
	if m.seq <= n.last[m.sender] {
		w.f.addf("node %d: FIFO broken: seq %d from sender %d after seq %d", n.idx, m.seq, m.sender, n.last[m.sender])
	}
	n.last[m.sender] = m.seq
	if c := w.got[int(m.sender)*w.maxPer+int(m.seq)].Add(1); c != 1 {
		w.f.addf("node %d: message %+v delivered %d times", n.idx, m, c)
	}
	n.received++
	w.prog.tick()
}

// TestStressExactlyOnceFIFO: 64 processes each send numbered messages to
// receivers chosen by a hash (one in eight to themselves), by Tell and by
// the generic send yield, while 4 goroutines send through Scheduler.Tell
// and Scheduler.Send. Every (sender, seq) must arrive exactly once, at the
// right receiver with the right From, and per (sender, receiver) in
// increasing order. A duplicate, a reordering or a misrouting is reported
// as it happens; a lost message stalls its receiver, and the watchdog
// lists the messages never delivered.
func TestStressExactlyOnceFIFO(t *testing.T) {
	eachConfig(t, 1, 10, func(t *testing.T, cfg stressConfig) {
		runFIFO(t, cfg, 64, 1000*stressScale, 4, 4000*stressScale)
	})
}

func runFIFO(t *testing.T, cfg stressConfig, nodes, perNode, exts, perExt int) {
	w := &fifoWorld{cfg: cfg, nodes: nodes, perNode: perNode, exts: exts, perExt: perExt}
	w.maxPer = max(perNode, perExt)
	w.got = make([]atomic.Int32, (nodes+exts)*w.maxPer)
	w.expect = make([]int, nodes)
	for sender := range nodes + exts {
		for seq := range w.sent(sender) {
			w.expect[w.target(sender, seq)]++
		}
	}
	pool := newAsyncPool(3, cfg.seed, 4)
	s := newScheduler(t, cfg.options(
		sched.WithHandler(cmdSync, completeAtOnce),
		sched.WithHandler(cmdAsync, completeLater(pool, &w.f, nil)),
	)...)

	ctx := context.Background()
	ns := make([]*fifoNode, nodes)
	hs := make([]sched.Handle, nodes)
	w.pids = make([]relay.PID, nodes)
	for i := range ns {
		ns[i] = &fifoNode{w: w, idx: i, rng: cfg.rng(uint64(i)), last: make([]int32, nodes+exts)}
		ns[i].guard = guard{name: fmt.Sprintf("node %d", i), f: &w.f}
		for j := range ns[i].last {
			ns[i].last[j] = -1
		}
		h, err := s.Submit(ctx, ns[i], "fifo", nil)
		require.NoError(t, err)
		hs[i], w.pids[i] = h, h.PID()
	}
	startAll(t, s, w.pids)

	var ext sync.WaitGroup
	for e := range exts {
		ext.Add(1)
		go func() {
			defer ext.Done()
			sender := nodes + e
			for seq := range perExt {
				m := fifoMsg{sender: int32(sender), seq: int32(seq), to: int32(w.target(sender, seq))}
				to := w.pids[m.to]
				var err error
				if seq%3 == 0 {
					err = s.Send(relay.Message{To: to, Data: m})
				} else {
					err = s.Tell(to, m)
				}
				if err != nil {
					w.f.addf("external %d: send %+v: %v", e, m, err)
				}
				if seq%16 == 0 {
					runtime.Gosched()
				}
			}
		}()
	}

	awaitProgress(t, s, &w.prog, allDone(hs), "exactly-once FIFO", func() string {
		var b strings.Builder
		lost := 0
		for sender := range nodes + exts {
			for seq := range w.sent(sender) {
				if w.got[sender*w.maxPer+seq].Load() == 0 && lost < 10 {
					lost++
					fmt.Fprintf(&b, "not delivered: (sender %d, seq %d) to node %d\n", sender, seq, w.target(sender, seq))
				}
			}
		}
		for i, n := range ns {
			if r := int(n.receivedA.Load()); r != w.expect[i] || int(n.sentA.Load()) != perNode || n.pendingA.Load() != 0 {
				fmt.Fprintf(&b, "node %d %v: sent %d/%d received %d/%d pending %d\n", i, w.pids[i], n.sentA.Load(), perNode, r, w.expect[i], n.pendingA.Load())
			}
		}
		return b.String()
	})
	ext.Wait()
	pool.close()

	for i, h := range hs {
		_, err := h.Wait(ctx)
		require.NoError(t, err, "node %d", i)
		ns[i].guard.checkClosedOnce()
	}
	missing := 0
	for sender := range nodes + exts {
		for seq := range w.sent(sender) {
			if c := w.got[sender*w.maxPer+seq].Load(); c != 1 && missing < maxReported {
				missing++
				t.Errorf("message (sender %d, seq %d) to node %d delivered %d times, want 1", sender, seq, w.target(sender, seq), c)
			}
		}
	}
	w.f.check(t)
}
