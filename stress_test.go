package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// The stress tests of the scheduler's contract: exactly-once delivery,
// per-sender order, no lost wake-up, Close exactly once, shutdown. Each
// runs several random configurations with more workers than the
// machine has cores, under the progress watchdog of awaitProgress: a run that
// stops making progress fails with a dump of its processes instead of
// hanging. Sizes are multiplied by stressScale (scale_test.go).

var errStressBoom = errors.New("stress: boom")

// mix64 is splitmix64's finaliser: a cheap, well-mixed hash.
func mix64(x uint64) uint64 {
	x += 0x9E3779B97F4A7C15
	x = (x ^ x>>30) * 0xBF58476D1CE4E5B9
	x = (x ^ x>>27) * 0x94D049BB133111EB
	return x ^ x>>31
}

// ---------------------------------------------------------------------
// 1. Exactly-once, per-sender FIFO delivery.

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
	for _, cfg := range stressConfigs(t, 1, 10) {
		if !t.Run(cfg.String(), func(t *testing.T) {
			runFIFO(t, cfg, 64, 1000*stressScale, 4, 4000*stressScale)
		}) {
			break // one failing configuration is enough to report
		}
	}
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

// ---------------------------------------------------------------------
// 2. Never two workers stepping one process at once.

type exclWorld struct {
	pids []relay.PID
	f    violations
	prog progress
}

// exclProc is driven by every kind of wake-up at once: messages from
// peers and from outside, synchronous, asynchronous and timer
// completions, and Continue, so that wake-ups race with its steps. Its
// guard catches any overlap; it also checks that a step without events
// follows only a Continue, and that every yield completes exactly once.
type exclProc struct {
	w *exclWorld
	guard
	idx       int
	rng       *rand.Rand
	started   bool
	stepped   bool
	continued bool
	left      int
	tagSet    // the yields not completed yet
}

func (p *exclProc) Close() {
	p.guard.enterClose()
	runtime.Gosched() // widen the window in which a late Step would be caught
	p.guard.exitClose()
}

func (p *exclProc) Step(evs []sched.Event, out *sched.StepOutput) error {
	p.guard.enter("Step")
	defer p.guard.exit("Step")
	w := p.w
	if p.rng.IntN(4) == 0 {
		// Hold the flag across a reschedule, so that a second worker
		// claiming this process meanwhile is caught.
		runtime.Gosched()
	}
	if len(evs) == 0 && p.stepped && !p.continued {
		w.f.addf("proc %d: stepped with no events without asking to continue", p.idx)
	}
	p.stepped, p.continued = true, false
	for _, ev := range evs {
		switch ev.Type {
		case sched.EventMessage:
			if _, ok := ev.Data.(startMsg); ok {
				p.started = true
			}
		case sched.EventYieldComplete:
			if !p.complete(ev.Tag) {
				w.f.addf("proc %d: completion of tag %d that is not outstanding (%v)", p.idx, ev.Tag, ev)
			}
			if ev.Error != nil {
				w.f.addf("proc %d: yield %d failed: %v", p.idx, ev.Tag, ev.Error)
			}
		default:
			w.f.addf("proc %d: unexpected event %v", p.idx, ev)
		}
	}
	if !p.started {
		return nil
	}
	w.prog.tick()
	p.left--
	if p.left <= 0 {
		if p.outstanding() == 0 {
			out.Done(payload.Payload{})
		}
		return nil // the outstanding completions wake it
	}
	for k := p.rng.IntN(3); k > 0; k-- {
		out.Tell(w.pids[p.rng.IntN(len(w.pids))], p.idx)
	}
	switch p.rng.IntN(6) {
	case 0:
		out.Continue()
		p.continued = true
	case 1:
		out.Yield(p.newTag(), cmdSync, nil)
	case 2:
		for k := 1 + p.rng.IntN(3); k > 0; k-- {
			out.Yield(p.newTag(), cmdAsync, nil)
		}
	case 3:
		out.Sleep(p.newTag(), time.Duration(p.rng.IntN(100))*time.Microsecond)
	case 4:
		out.Yield(p.newTag(), cmdAsync, nil)
		out.Yield(p.newTag(), cmdSync, nil)
		out.Sleep(p.newTag(), 0)
	case 5:
		// Wait for a message: the external senders reach every
		// process in turn.
	}
	return nil
}

// TestStressNoConcurrentSteps: processes woken at once by peers' and
// external messages, synchronous, asynchronous (pool) and timer
// completions, completions through a Call that outlived its handler, and
// Continue. Their guard fails if Init, Step or Close of one process ever
// overlap, if anything runs after Close or Close runs twice; they also
// check that a step with no events follows only a Continue, that every
// yield completes exactly once, and that a second or bogus completion is
// refused without delivering anything.
func TestStressNoConcurrentSteps(t *testing.T) {
	for _, cfg := range stressConfigs(t, 2, 12) {
		if !t.Run(cfg.String(), func(t *testing.T) {
			runExclusive(t, cfg, 64, 200*stressScale)
		}) {
			break // one failing configuration is enough to report
		}
	}
}

func runExclusive(t *testing.T, cfg stressConfig, procs, steps int) {
	w := &exclWorld{}
	pool := newAsyncPool(3, cfg.seed, 4)
	// Handlers also tell a peer through their Call, during the handler
	// (the recipient is handed to the handler's worker) or later from a
	// pool goroutine (the Call outlives its handler and the handoff is
	// closed, or open for another handler of the same worker). The
	// asynchronous handler completes through the Call or the Completion,
	// then completes a second time, which must fail without delivering a
	// second event.
	peer := func(c sched.Call) relay.PID { return w.pids[mix64(c.PID.ID^c.Tag)%uint64(len(w.pids))] }
	tellOK := func(what string, err error) {
		if err != nil && !errors.Is(err, sched.ErrProcessNotFound) {
			w.f.addf("%s: %v", what, err)
		}
	}
	syncHandler := func(c sched.Call) error {
		if c.Tag%2 == 0 {
			tellOK("Call.Tell in a handler", c.Tell(peer(c), -2))
		}
		return c.Complete(nil, nil)
	}
	async := func(c sched.Call) error {
		pool.push(func() {
			if c.Tag%2 == 0 {
				tellOK("Call.Tell after the handler", c.Tell(peer(c), -3))
			}
			var err error
			if c.Tag%3 == 0 {
				err = c.Complete(nil, nil)
			} else {
				err = c.Completion().Complete(nil, nil)
			}
			if err != nil {
				w.f.addf("async completion of %v tag %d: %v", c.PID, c.Tag, err)
			}
			if err := c.Completion().Complete(nil, nil); !errors.Is(err, sched.ErrYieldNotPending) && !errors.Is(err, sched.ErrProcessNotFound) {
				w.f.addf("second completion of %v tag %d: got %v, want ErrYieldNotPending or ErrProcessNotFound", c.PID, c.Tag, err)
			}
		})
		return nil
	}
	s := newScheduler(t, cfg.options(
		sched.WithHandler(cmdSync, syncHandler),
		sched.WithHandler(cmdAsync, async),
	)...)
	ctx := context.Background()
	ps := make([]*exclProc, procs)
	hs := make([]sched.Handle, procs)
	w.pids = make([]relay.PID, procs)
	rng := cfg.rng(1 << 40)
	for i := range ps {
		ps[i] = &exclProc{w: w, idx: i, rng: cfg.rng(uint64(i)), left: steps/2 + rng.IntN(steps)}
		ps[i].guard = guard{name: fmt.Sprintf("proc %d", i), f: &w.f}
		h, err := s.Submit(ctx, ps[i], "exclusive", nil)
		require.NoError(t, err)
		hs[i], w.pids[i] = h, h.PID()
	}
	startAll(t, s, w.pids)

	stop := make(chan struct{})
	var ext sync.WaitGroup
	for e := range 2 {
		ext.Add(1)
		go func() {
			defer ext.Done()
			rng := cfg.rng(1<<41 + uint64(e))
			live := append([]relay.PID(nil), w.pids...)
			for len(live) > 0 {
				for i := 0; i < len(live); i++ {
					select {
					case <-stop:
						return
					default:
					}
					pid := live[i]
					if err := s.Tell(pid, -1); errors.Is(err, sched.ErrProcessNotFound) {
						live[i] = live[len(live)-1]
						live = live[:len(live)-1]
						i--
						continue
					} else if err != nil {
						w.f.addf("external Tell %v: %v", pid, err)
					}
					if i%8 != 0 {
						continue
					}
					// A completion nobody asked for delivers nothing.
					tag := 1<<62 + rng.Uint64N(1<<20)
					if err := s.CompleteYield(pid, tag, nil, nil); !errors.Is(err, sched.ErrYieldNotPending) && !errors.Is(err, sched.ErrProcessNotFound) {
						w.f.addf("bogus CompleteYield %v tag %d: got %v, want ErrYieldNotPending or ErrProcessNotFound", pid, tag, err)
					}
				}
				runtime.Gosched()
			}
		}()
	}

	awaitProgress(t, s, &w.prog, allDone(hs), "no concurrent steps", nil)
	close(stop)
	ext.Wait()
	pool.close()
	for i, h := range hs {
		_, err := h.Wait(ctx)
		require.NoError(t, err, "proc %d", i)
		ps[i].guard.checkClosedOnce()
	}
	w.f.check(t)
}

// ---------------------------------------------------------------------
// 3. No lost wakeup.

// wakeKick asks a waker goroutine to Tell pid round, after spinning for
// delay iterations; if ack is set, the waker sets it once Tell returned.
type wakeKick struct {
	pid   relay.PID
	round int32
	delay int
	ack   *atomic.Bool
}

type wakeWorld struct {
	kicks    chan wakeKick
	maxDelay int
	f        violations
	prog     progress
}

// wakeProc never continues: each round it waits for one or two events
// sent by other goroutines right as its step ends, timed to land while
// the worker is between Step and the waiting state, during Step, or just
// after. A lost wakeup leaves it waiting forever with an event queued.
type wakeProc struct {
	w *wakeWorld
	guard
	idx       int
	rng       *rand.Rand
	rounds    int
	round     int
	needMsg   bool
	needDone  bool
	tag       uint64
	ack       atomic.Bool
	mode      int
	reportedA atomic.Int64 // round<<8 | mode<<2 | needMsg<<1 | needDone, for the stall report
}

const (
	wakeAsync  = iota // async completion (pool, at once) and a kick after the step
	wakeDuring        // a kick that lands while Step runs: the Running+flagWake path
	wakeIdle          // wait idle for a kick after the step
	wakeSync          // a completion during dispatch and a kick after the step
	wakeTimer         // a zero timer and a kick after the step
	wakeOnly          // only an async completion at once
	wakeModes
)

func (p *wakeProc) Step(evs []sched.Event, out *sched.StepOutput) error {
	p.guard.enter("Step")
	defer p.guard.exit("Step")
	w := p.w
	for _, ev := range evs {
		switch ev.Type {
		case sched.EventMessage:
			if r, ok := ev.Data.(int32); !ok || !p.needMsg || int(r) != p.round {
				w.f.addf("proc %d round %d: unexpected message %v", p.idx, p.round, ev)
			}
			p.needMsg = false
		case sched.EventYieldComplete:
			if !p.needDone || ev.Tag != p.tag || ev.Error != nil {
				w.f.addf("proc %d round %d: unexpected completion %v", p.idx, p.round, ev)
			}
			p.needDone = false
		default:
			w.f.addf("proc %d: unexpected event %v", p.idx, ev)
		}
	}
	defer p.report()
	if p.needMsg || p.needDone {
		return nil
	}
	if p.round > 0 {
		w.prog.tick()
	}
	if p.round == p.rounds {
		out.Done(payload.Payload{})
		return nil
	}
	p.round++
	p.tag++
	p.mode = p.rng.IntN(wakeModes)
	delay := 0
	if p.rng.IntN(4) != 0 {
		delay = p.rng.IntN(w.maxDelay)
	}
	switch p.mode {
	case wakeAsync:
		out.Yield(p.tag, cmdAsync, delay)
		p.needDone = true
		p.kick(out.Self(), p.rng.IntN(w.maxDelay), nil)
	case wakeDuring:
		p.ack.Store(false)
		p.kick(out.Self(), delay, &p.ack)
		for !p.ack.Load() {
			runtime.Gosched()
		}
	case wakeIdle:
		p.kick(out.Self(), delay, nil)
	case wakeSync:
		out.Yield(p.tag, cmdSync, nil)
		p.needDone = true
		p.kick(out.Self(), delay, nil)
	case wakeTimer:
		out.Sleep(p.tag, 0)
		p.needDone = true
		p.kick(out.Self(), delay, nil)
	case wakeOnly:
		out.Yield(p.tag, cmdAsync, delay)
		p.needDone = true
	}
	return nil
}

func (p *wakeProc) kick(self relay.PID, delay int, ack *atomic.Bool) {
	p.needMsg = true
	select {
	case p.w.kicks <- wakeKick{pid: self, round: int32(p.round), delay: delay, ack: ack}:
	default:
		p.w.f.addf("proc %d: kick queue full", p.idx)
	}
}

func (p *wakeProc) report() {
	var m, d int64
	if p.needMsg {
		m = 1
	}
	if p.needDone {
		d = 1
	}
	p.reportedA.Store(int64(p.round)<<8 | int64(p.mode)<<2 | m<<1 | d)
}

// TestStressNoLostWakeup: processes that never continue, woken each round
// by events sent from other goroutines while Step runs, as it returns, or
// while the worker settles the process (asynchronous completions at once
// after a random spin, kicks from waker goroutines, timers, completions
// during dispatch). A lost wakeup leaves a process waiting with an event
// queued; the watchdog then fails with those processes listed.
func TestStressNoLostWakeup(t *testing.T) {
	for _, cfg := range stressConfigs(t, 3, 12) {
		if !t.Run(cfg.String(), func(t *testing.T) {
			runWakeups(t, cfg, 64, 800*stressScale)
		}) {
			break // one failing configuration is enough to report
		}
	}
}

func runWakeups(t *testing.T, cfg stressConfig, procs, rounds int) {
	w := &wakeWorld{kicks: make(chan wakeKick, procs), maxDelay: 3000}
	// Completions run at once (no pool delay), after a spin chosen by the
	// process, so they land anywhere from the handler's return to well
	// after the worker settled the process.
	pool := newAsyncPool(3, cfg.seed, 0)
	async := func(c sched.Call) error {
		comp, delay := c.Completion(), c.Arg.(int)
		pool.push(func() {
			spin(delay)
			if err := comp.Complete(nil, nil); err != nil {
				w.f.addf("async completion of %v tag %d: %v", comp.PID(), comp.Tag(), err)
			}
		})
		return nil
	}
	s := newScheduler(t, cfg.options(
		sched.WithHandler(cmdSync, completeAtOnce),
		sched.WithHandler(cmdAsync, async),
	)...)
	var wakers sync.WaitGroup
	for range 4 {
		wakers.Add(1)
		go func() {
			defer wakers.Done()
			for k := range w.kicks {
				spin(k.delay)
				if err := s.Tell(k.pid, k.round); err != nil {
					w.f.addf("kick %v round %d: %v", k.pid, k.round, err)
				}
				if k.ack != nil {
					k.ack.Store(true)
				}
			}
		}()
	}
	ctx := context.Background()
	ps := make([]*wakeProc, procs)
	hs := make([]sched.Handle, procs)
	for i := range ps {
		ps[i] = &wakeProc{w: w, idx: i, rng: cfg.rng(uint64(i)), rounds: rounds}
		ps[i].guard = guard{name: fmt.Sprintf("proc %d", i), f: &w.f}
		h, err := s.Submit(ctx, ps[i], "wake", nil)
		require.NoError(t, err)
		hs[i] = h
	}
	awaitProgress(t, s, &w.prog, allDone(hs), "no lost wakeup", func() string {
		var b strings.Builder
		for i, p := range ps {
			r := p.reportedA.Load()
			if int(r>>8) != rounds || r&3 != 0 {
				fmt.Fprintf(&b, "proc %d %v: round %d mode %d waits for message=%v completion=%v\n",
					i, hs[i].PID(), r>>8, r>>2&63, r&2 != 0, r&1 != 0)
			}
		}
		return b.String()
	})
	close(w.kicks)
	wakers.Wait()
	pool.close()
	for i, h := range hs {
		_, err := h.Wait(ctx)
		require.NoError(t, err, "proc %d", i)
		ps[i].guard.checkClosedOnce()
	}
	w.f.check(t)
}

// ---------------------------------------------------------------------
// 4. Close exactly once, whatever the ending.

// endKind is how an lifeProc ends.
type endKind int

const (
	endDone             endKind = iota // Done after some steps
	endError                           // Step returns an error
	endPanic                           // Step panics
	endClosePanic                      // Done, then Close panics
	endInitError                       // Init returns an error
	endInitPanic                       // Init panics
	endTerminate                       // runs until terminated, answers cancel with Done
	endTerminateError                  // runs until terminated, answers cancel with an error
	endTerminateCleanup                // runs until terminated, answers cancel with an async cleanup yield, then Done
	endTerminateBusy                   // keeps continuing until terminated
	endTerminateRace                   // Done after some steps, terminated at a random moment too
	endShutdown                        // runs until Shutdown cancels it
	endSpawner                         // spawns children of the first six kinds, awaits some, then Done
	endKinds
)

var endNames = [...]string{"done", "error", "panic", "close-panic", "init-error", "init-panic",
	"terminate", "terminate-error", "terminate-cleanup", "terminate-busy", "terminate-race", "shutdown", "spawner"}

func (k endKind) String() string { return endNames[k] }

// terminated reports whether the test terminates processes of kind k.
func (k endKind) terminated() bool { return k >= endTerminate && k <= endTerminateRace }

type lifeWorld struct {
	cfg    stressConfig
	f      violations
	prog   progress
	mu     sync.Mutex
	guards []*guard // every process created, children included
	nevers []sched.Completion
	seq    atomic.Int64
}

func (w *lifeWorld) newProc(kind endKind, rng *rand.Rand) *lifeProc {
	n := w.seq.Add(1)
	p := &lifeProc{w: w, kind: kind, rng: rand.New(rand.NewPCG(w.cfg.seed, uint64(n)<<8)), steps: 1 + rng.IntN(12)}
	p.guard = guard{name: fmt.Sprintf("%v process #%d", kind, n), f: &w.f}
	w.mu.Lock()
	w.guards = append(w.guards, &p.guard)
	w.mu.Unlock()
	return p
}

type lifeProc struct {
	w *lifeWorld
	guard
	kind      endKind
	rng       *rand.Rand
	steps     int
	n         int
	tagSet    // the yields not completed yet
	cancelled bool
	cleaning  bool
	children  map[uint64]endKind // awaited children by tag
	parked    bool               // waiting for the end, on a never-completed yield or idle
}

func (p *lifeProc) Init(context.Context, string, payload.Payloads) error {
	p.guard.enter("Init")
	defer p.guard.exit("Init")
	switch p.kind {
	case endInitError:
		return errStressBoom
	case endInitPanic:
		panic(errStressBoom)
	}
	return nil
}

func (p *lifeProc) Close() {
	p.guard.enterClose()
	p.guard.exitClose()
	p.w.prog.tick()
	if p.kind == endClosePanic {
		panic("close-panic")
	}
}

func (p *lifeProc) Step(evs []sched.Event, out *sched.StepOutput) error {
	p.guard.enter("Step")
	defer p.guard.exit("Step")
	w := p.w
	cleaned := false
	for _, ev := range evs {
		switch ev.Type {
		case sched.EventCancel:
			if p.cancelled {
				w.f.addf("%s: second cancel event", p.guard.name)
			}
			p.cancelled = true
		case sched.EventYieldComplete:
			if !p.complete(ev.Tag) {
				w.f.addf("%s: completion of tag %d that is not outstanding", p.guard.name, ev.Tag)
			}
			if kind, ok := p.children[ev.Tag]; ok {
				p.checkChild(kind, ev)
				delete(p.children, ev.Tag)
				continue
			}
			if ev.Error != nil {
				w.f.addf("%s: yield %d failed: %v", p.guard.name, ev.Tag, ev.Error)
			}
			if ev.Data == "cleanup" {
				cleaned = true
			}
		default:
			w.f.addf("%s: unexpected event %v", p.guard.name, ev)
		}
	}
	p.n++
	if p.cancelled {
		switch {
		case p.cleaning:
			if cleaned {
				out.Done(payload.Of("cancelled"))
			}
		case p.kind == endTerminateError:
			return errStressBoom
		case p.kind == endTerminateCleanup:
			out.Yield(p.newTag(), cmdCleanup, "cleanup")
			p.cleaning = true
		default:
			out.Done(payload.Of("cancelled"))
		}
		return nil
	}
	if p.kind == endSpawner {
		return p.spawn(out)
	}
	if p.n >= p.steps {
		switch p.kind {
		case endDone, endClosePanic, endTerminateRace:
			out.Done(payload.Of(p.kind.String()))
			return nil
		case endError:
			return errStressBoom
		case endPanic:
			panic(p.kind.String())
		case endTerminateBusy:
			out.Continue()
			return nil
		}
		// Terminate and shutdown kinds wait for their cancel, idle or
		// on a yield that nobody completes.
		if !p.parked {
			p.parked = true
			if p.rng.IntN(2) == 0 {
				out.Yield(p.newTag(), cmdNever, nil)
			}
		}
		return nil
	}
	p.activity(out)
	return nil
}

// activity is a random step of work before the process's end.
func (p *lifeProc) activity(out *sched.StepOutput) {
	switch p.rng.IntN(4) {
	case 0:
		out.Continue()
	case 1:
		out.Yield(p.newTag(), cmdSync, nil)
	case 2:
		out.Yield(p.newTag(), cmdAsync, nil)
	case 3:
		out.Sleep(p.newTag(), time.Duration(p.rng.IntN(20))*time.Microsecond)
	}
}

// spawn starts the spawner's children in its first step and finishes
// when every awaited one has reported.
func (p *lifeProc) spawn(out *sched.StepOutput) error {
	if p.children == nil {
		p.children = map[uint64]endKind{}
		for range 2 + p.rng.IntN(5) {
			kind := endKind(p.rng.IntN(int(endInitPanic) + 1))
			child := p.w.newProc(kind, p.rng)
			tag := p.newTag()
			if p.rng.IntN(3) == 0 {
				// Not awaited: completes with the PID, or Init's error.
				out.Spawn(tag, child, "child", nil)
				p.children[tag] = -1 - kind
			} else {
				out.SpawnAwait(tag, child, "child", nil)
				p.children[tag] = kind
			}
		}
		return nil
	}
	if len(p.children) == 0 {
		out.Done(payload.Of(p.kind.String()))
	}
	return nil
}

// checkChild checks the completion of a spawn yield for a child of kind
// (or -1-kind for a spawn that is not awaited).
func (p *lifeProc) checkChild(kind endKind, ev sched.Event) {
	w := p.w
	awaited := kind >= 0
	if !awaited {
		kind = -1 - kind
	}
	var ok bool
	switch {
	case kind == endInitError:
		ok = errors.Is(ev.Error, sched.ErrInit) && errors.Is(ev.Error, errStressBoom)
	case kind == endInitPanic:
		ok = errors.Is(ev.Error, sched.ErrInit) && errors.Is(ev.Error, sched.ErrPanic)
	case !awaited:
		_, isPID := ev.Data.(relay.PID)
		ok = ev.Error == nil && isPID
	case kind == endDone:
		ok = ev.Error == nil && ev.Data == payload.Of(kind.String()) && !ev.From.IsZero()
	case kind == endError:
		ok = errors.Is(ev.Error, errStressBoom)
	case kind == endPanic:
		var pe *sched.PanicError
		ok = errors.As(ev.Error, &pe) && pe.Where == "Step"
	case kind == endClosePanic:
		var pe *sched.PanicError
		ok = errors.As(ev.Error, &pe) && pe.Where == "Close"
	}
	if !ok {
		w.f.addf("%s: child of kind %v (awaited %v) completed with %v", p.guard.name, kind, awaited, ev)
	}
}

// checkEnd checks what a process's handle reported.
func (w *lifeWorld) checkEnd(kind endKind, res payload.Payload, err error) error {
	var ok bool
	switch kind {
	case endDone, endSpawner:
		ok = err == nil && res == payload.Of(kind.String())
	case endError, endTerminateError:
		ok = errors.Is(err, errStressBoom)
	case endPanic:
		var pe *sched.PanicError
		ok = errors.As(err, &pe) && pe.Where == "Step" && pe.Value == kind.String() && len(pe.Stack) > 0
	case endClosePanic:
		var pe *sched.PanicError
		ok = errors.As(err, &pe) && pe.Where == "Close"
	case endTerminate, endTerminateCleanup, endTerminateBusy, endShutdown:
		ok = err == nil && res == payload.Of("cancelled")
	case endTerminateRace:
		ok = err == nil && (res == payload.Of("cancelled") || res == payload.Of(kind.String()))
	}
	if ok {
		return nil
	}
	return fmt.Errorf("%v process ended with (%v, %v)", kind, res, err)
}

// TestStressCloseExactlyOnce: processes ending every way there is (done,
// error, panic in Step, Close that panics, Init error or panic, Terminate
// answered by done, error or an asynchronous cleanup, Terminate racing
// with a natural end, a busy loop terminated, Shutdown), and spawners
// whose children, awaited or not, end those ways too. Init and Close are
// counted per process: every process whose Init ran is closed exactly
// once, after its last step; every Handle reports the right outcome and
// every awaited child's result reaches its parent.
func TestStressCloseExactlyOnce(t *testing.T) {
	for _, cfg := range stressConfigs(t, 4, 24) {
		if !t.Run(cfg.String(), func(t *testing.T) {
			runLifecycle(t, cfg, 800*stressScale)
		}) {
			break // one failing configuration is enough to report
		}
	}
}

func runLifecycle(t *testing.T, cfg stressConfig, procs int) {
	w := &lifeWorld{cfg: cfg}
	pool := newAsyncPool(3, cfg.seed, 4)
	never := func(c sched.Call) error {
		w.mu.Lock()
		w.nevers = append(w.nevers, c.Completion())
		w.mu.Unlock()
		return nil
	}
	s := newScheduler(t, cfg.options(
		sched.WithHandler(cmdSync, completeAtOnce),
		// A process that ends with a yield outstanding makes its late
		// completion fail with ErrProcessNotFound.
		sched.WithHandler(cmdAsync, completeLater(pool, &w.f, endedOrClosed)),
		sched.WithHandler(cmdCleanup, completeLater(pool, &w.f, nil)),
		sched.WithHandler(cmdNever, never),
	)...)
	ctx := context.Background()
	rng := cfg.rng(1 << 40)

	type entry struct {
		kind endKind
		h    sched.Handle
	}
	var entries []entry
	var toTerminate []entry
	var untilShutdown []sched.Handle
	var others []sched.Handle
	for i := range procs {
		kind := endKind(i % int(endKinds))
		if kind == endTerminateBusy && i >= 2*int(endKinds) {
			kind = endTerminate // a few busy loops are enough on two cores
		}
		p := w.newProc(kind, rng)
		h, err := s.Submit(ctx, p, "life", nil)
		switch kind {
		case endInitError, endInitPanic:
			want := errStressBoom
			if kind == endInitPanic {
				want = sched.ErrPanic
			}
			if !errors.Is(err, sched.ErrInit) || !errors.Is(err, want) {
				t.Errorf("Submit of %v process: got %v, want ErrInit wrapping %v", kind, err, want)
			}
			if c := p.guard.closes.Load(); c != 1 {
				t.Errorf("%s: Submit returned with Close called %d times, want 1", p.guard.name, c)
			}
			continue
		}
		require.NoError(t, err)
		e := entry{kind, h}
		entries = append(entries, e)
		switch {
		case kind.terminated():
			toTerminate = append(toTerminate, e)
			others = append(others, h)
		case kind == endShutdown:
			untilShutdown = append(untilShutdown, h)
		default:
			others = append(others, h)
		}
	}

	// Terminate at random moments, some twice.
	rng.Shuffle(len(toTerminate), func(i, j int) { toTerminate[i], toTerminate[j] = toTerminate[j], toTerminate[i] })
	var term sync.WaitGroup
	term.Add(1)
	go func() {
		defer term.Done()
		rng := cfg.rng(1 << 41)
		for _, e := range toTerminate {
			spin(rng.IntN(20000))
			err := s.Terminate(e.h.PID())
			if err != nil && (e.kind != endTerminateRace || !errors.Is(err, sched.ErrProcessNotFound)) {
				w.f.addf("Terminate %v process %v: %v", e.kind, e.h.PID(), err)
			}
			if rng.IntN(4) == 0 {
				if err := s.Terminate(e.h.PID()); err != nil && !errors.Is(err, sched.ErrProcessNotFound) {
					w.f.addf("second Terminate of %v process %v: %v", e.kind, e.h.PID(), err)
				}
			}
		}
	}()
	awaitProgress(t, s, &w.prog, allDone(others), "terminations", nil)
	term.Wait()

	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		shut <- s.Shutdown(ctx)
	}()
	awaitProgress(t, s, &w.prog, allDone(untilShutdown), "shutdown", nil)
	require.NoError(t, <-shut, "Shutdown")
	pool.close()
	for _, c := range w.nevers {
		if err := c.Complete(nil, nil); !errors.Is(err, sched.ErrClosed) {
			t.Errorf("completion after Shutdown: got %v, want ErrClosed", err)
		}
	}

	for _, e := range entries {
		res, err := e.h.Wait(ctx)
		if err := w.checkEnd(e.kind, res, err); err != nil {
			t.Error(err)
		}
	}
	inits, closes := 0, 0
	for _, g := range w.guards {
		g.checkClosedOnce()
		inits += int(g.inits.Load())
		closes += int(g.closes.Load())
	}
	if inits != closes || inits != len(w.guards) {
		t.Errorf("%d processes, %d Init calls, %d Close calls; want all equal", len(w.guards), inits, closes)
	}
	if st := s.Stats(); st.Processes.Live != 0 || st.Processes.Forced != 0 {
		t.Errorf("after Shutdown: Live %d Forced %d, want 0 and 0", st.Processes.Live, st.Processes.Forced)
	}
	w.f.check(t)
}

// ---------------------------------------------------------------------
// 5. Shutdown during heavy traffic.

type trafficWorld struct {
	pids      []relay.PID
	f         violations
	prog      progress
	received  atomic.Int64
	busy      chan struct{} // closed when traffic reached its threshold
	busyOnce  sync.Once
	busyAt    int64
	closes    atomic.Int64 // Close calls of the processes that answer cancel
	cleanups  atomic.Int64 // cleanup completions received
	compliant int64
	allClosed chan struct{} // closed when every process that answers cancel has closed
	mu        sync.Mutex
	nevers    []sched.Completion
}

// ignoreMode is how a process of the forced-shutdown variant ignores its
// cancel event: the ways a process can be alive at a deadline.
type ignoreMode int

const (
	comply      ignoreMode = iota // answers cancel with a cleanup yield, then Done
	ignoreIdle                    // waits for messages
	ignoreNever                   // waits for a yield nobody completes
	ignoreSleep                   // waits for a timer an hour away
	ignoreBusy                    // keeps continuing
	ignoreKinds
)

type trafficProc struct {
	w *trafficWorld
	guard
	idx       int
	rng       *rand.Rand
	ignore    ignoreMode
	started   bool
	cancelled bool
	cleaning  bool
	spawned   bool
	spawnTag  uint64
	tagSet    // the yields not completed yet
}

func (p *trafficProc) Close() {
	p.guard.enterClose()
	p.guard.exitClose()
	p.w.prog.tick()
	if p.ignore == comply && p.w.closes.Add(1) == p.w.compliant {
		close(p.w.allClosed)
	}
}

func (p *trafficProc) Step(evs []sched.Event, out *sched.StepOutput) error {
	p.guard.enter("Step")
	defer p.guard.exit("Step")
	w := p.w
	cleaned := false
	for _, ev := range evs {
		switch ev.Type {
		case sched.EventCancel:
			p.cancelled = true
		case sched.EventMessage:
			if _, ok := ev.Data.(startMsg); ok {
				p.started = true
				continue
			}
			if ev.Error != nil {
				continue // a peer that finished
			}
			w.prog.tick()
			if n := w.received.Add(1); n == w.busyAt {
				w.busyOnce.Do(func() { close(w.busy) })
			}
		case sched.EventYieldComplete:
			if !p.complete(ev.Tag) {
				w.f.addf("proc %d: completion of tag %d that is not outstanding", p.idx, ev.Tag)
			}
			switch {
			case ev.Data == "cleanup":
				if ev.Error != nil {
					w.f.addf("proc %d: cleanup failed: %v", p.idx, ev.Error)
				}
				cleaned = true
				w.cleanups.Add(1)
			case p.spawned && ev.Tag == p.spawnTag:
				if !errors.Is(ev.Error, sched.ErrClosed) {
					w.f.addf("proc %d: spawn during shutdown completed with %v, want ErrClosed", p.idx, ev.Error)
				}
			case ev.Error != nil:
				w.f.addf("proc %d: yield %d failed: %v", p.idx, ev.Tag, ev.Error)
			}
		}
	}
	if p.cancelled && p.ignore == comply {
		switch {
		case p.cleaning:
			if cleaned {
				out.Done(payload.Payload{})
			}
		default:
			p.cleaning = true
			out.Yield(p.newTag(), cmdCleanup, "cleanup")
			if p.rng.IntN(4) == 0 {
				// New processes are refused from the start of
				// Shutdown; the spawn yield says so.
				p.spawned, p.spawnTag = true, p.newTag()
				out.Spawn(p.spawnTag, &trafficProc{}, "child", nil)
			}
		}
		return nil
	}
	if !p.started {
		return nil
	}
	switch p.ignore {
	case ignoreNever, ignoreSleep:
		if p.cancelled {
			return nil
		}
	case ignoreBusy:
		if p.cancelled {
			out.Continue()
			return nil
		}
	}
	for k := p.rng.IntN(4); k > 0; k-- {
		out.Tell(w.pids[p.rng.IntN(len(w.pids))], p.idx)
	}
	if p.cancelled {
		switch p.ignore {
		case ignoreNever:
			out.Yield(p.newTag(), cmdNever, nil)
		case ignoreSleep:
			out.Sleep(p.newTag(), time.Hour)
		}
		return nil
	}
	switch p.rng.IntN(5) {
	case 0:
		out.Continue()
	case 1, 2:
		out.Yield(p.newTag(), cmdAsync, nil)
	case 3:
		out.Sleep(p.newTag(), time.Duration(p.rng.IntN(200))*time.Microsecond)
	case 4:
		// Wait for messages from peers or from outside.
	}
	return nil
}

// TestStressShutdownUnderTraffic: Shutdown while processes exchange
// messages, external goroutines send, and asynchronous yields and timers
// are outstanding. Every process answers its cancel with a cleanup yield
// completed later by a pool goroutine (some also try a spawn, which must
// be refused with ErrClosed), and ends only then. Shutdown, with a
// generous deadline, must return nil with every Close called once; a
// scheduler that stops serving before the cleanups complete stalls and is
// dumped by the watchdog.
func TestStressShutdownUnderTraffic(t *testing.T) {
	for _, cfg := range stressConfigs(t, 5, 16) {
		if !t.Run(cfg.String(), func(t *testing.T) {
			runShutdown(t, cfg, 64, 0, false)
		}) {
			break // one failing configuration is enough to report
		}
	}
}

// TestStressShutdownForced: processes that ignore their cancel (idle,
// blocked on a yield nobody completes, sleeping, continuing) are alive at
// Shutdown's deadline. In the "exact" runs the deadline is the moment
// every process that answers cancel has closed, so exactly the ignorers
// must be forced; in the "timed" runs it is a short timeout that may also
// catch processes in the middle of their cleanup. Shutdown's error must
// wrap ErrForced and the context's error and give the number of forced
// processes, which must match Stats and the Handles that report
// ErrForced; every Close is called once and no goroutine is left.
func TestStressShutdownForced(t *testing.T) {
	for i, cfg := range stressConfigs(t, 6, 16) {
		name, timed := "exact/", i%2 == 1
		if timed {
			name = "timed/"
		}
		if !t.Run(name+cfg.String(), func(t *testing.T) {
			runShutdown(t, cfg, 48, 12, timed)
		}) {
			break // one failing configuration is enough to report
		}
	}
}

// runShutdown runs procs processes of which ignorers ignore cancel,
// lets traffic build up, and calls Shutdown. With no ignorers the
// deadline is generous and Shutdown must return nil.
func runShutdown(t *testing.T, cfg stressConfig, procs, ignorers int, timed bool) {
	ignoreCurrent := goleak.IgnoreCurrent()
	w := &trafficWorld{
		busy:      make(chan struct{}),
		busyAt:    int64(10000 * stressScale),
		compliant: int64(procs - ignorers),
		allClosed: make(chan struct{}),
	}
	pool := newAsyncPool(3, cfg.seed, 8)
	never := func(c sched.Call) error {
		w.mu.Lock()
		w.nevers = append(w.nevers, c.Completion())
		w.mu.Unlock()
		return nil
	}
	okErr := endedOrClosed
	s := newScheduler(t, cfg.options(
		sched.WithHandler(cmdAsync, completeLater(pool, &w.f, okErr)),
		// Cleanup completes later, from a pool goroutine. Only a forced
		// shutdown may beat it.
		sched.WithHandler(cmdCleanup, completeLater(pool, &w.f, func(err error) bool { return timed && okErr(err) })),
		sched.WithHandler(cmdNever, never),
	)...)
	ctx := context.Background()
	ps := make([]*trafficProc, procs)
	hs := make([]sched.Handle, procs)
	w.pids = make([]relay.PID, procs)
	for i := range ps {
		ig := comply
		if i < ignorers {
			ig = ignoreMode(1 + i%int(ignoreKinds-1))
			if ig == ignoreBusy && i >= int(ignoreKinds-1) {
				ig = ignoreIdle // one busy loop is enough on two cores
			}
		}
		ps[i] = &trafficProc{w: w, idx: i, rng: cfg.rng(uint64(i)), ignore: ig}
		ps[i].guard = guard{name: fmt.Sprintf("proc %d", i), f: &w.f}
		h, err := s.Submit(ctx, ps[i], "traffic", nil)
		require.NoError(t, err)
		hs[i], w.pids[i] = h, h.PID()
	}
	startAll(t, s, w.pids)

	stopExt := make(chan struct{})
	var ext sync.WaitGroup
	for e := range 2 {
		ext.Add(1)
		go func() {
			defer ext.Done()
			rng := cfg.rng(1<<41 + uint64(e))
			for i := 0; ; i++ {
				select {
				case <-stopExt:
					return
				default:
				}
				pid := w.pids[rng.IntN(len(w.pids))]
				if err := s.Tell(pid, -1); err != nil && !okErr(err) {
					w.f.addf("external Tell %v: %v", pid, err)
				}
				if i%8 == 0 {
					runtime.Gosched()
				}
			}
		}()
	}
	awaitProgress(t, s, &w.prog, w.busy, "traffic", nil)

	// Shutdown runs on its own goroutine so that the watchdog can dump
	// the processes while they are still alive if it stops progressing.
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	switch {
	case timed:
		sctx, cancel = context.WithTimeout(ctx, time.Duration(1+cfg.seed%5)*time.Millisecond)
		defer cancel()
	case ignorers > 0:
		go func() {
			select {
			case <-w.allClosed:
			case <-sctx.Done():
			}
			cancel()
		}()
	}
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(sctx) }()
	shutDone := make(chan struct{})
	var shutErr error
	go func() { shutErr = <-shut; close(shutDone) }()
	awaitProgress(t, s, &w.prog, shutDone, "shutdown", nil)

	close(stopExt)
	ext.Wait()
	if err := s.Tell(w.pids[0], -1); !errors.Is(err, sched.ErrClosed) {
		t.Errorf("Tell after Shutdown: got %v, want ErrClosed", err)
	}
	if _, err := s.Submit(ctx, &trafficProc{}, "late", nil); !errors.Is(err, sched.ErrClosed) {
		t.Errorf("Submit after Shutdown: got %v, want ErrClosed", err)
	}
	pool.close()
	for _, c := range w.nevers {
		if err := c.Complete(nil, nil); !errors.Is(err, sched.ErrClosed) {
			t.Errorf("completion after Shutdown: got %v, want ErrClosed", err)
		}
	}

	forced := 0
	for i, h := range hs {
		_, err := h.Wait(ctx)
		switch {
		case errors.Is(err, sched.ErrForced):
			forced++
			if !timed && ps[i].ignore == comply {
				t.Errorf("proc %d answers cancel but was forced", i)
			}
		case err != nil:
			t.Errorf("proc %d: %v", i, err)
		case ps[i].ignore != comply:
			t.Errorf("proc %d ignores cancel but ended with no error", i)
		}
		ps[i].guard.checkClosedOnce()
	}
	if got := s.Stats().Processes.Forced; got != uint64(forced) {
		t.Errorf("Stats().Processes.Forced = %d, but %d handles report ErrForced", got, forced)
	}
	switch {
	case forced == 0:
		require.NoError(t, shutErr, "Shutdown")
	case !errors.Is(shutErr, sched.ErrForced) || !errors.Is(shutErr, context.Canceled) && !errors.Is(shutErr, context.DeadlineExceeded):
		t.Errorf("Shutdown: got %v, want an error wrapping ErrForced and the context's error", shutErr)
	default:
		m := regexp.MustCompile(`(\d+) process`).FindStringSubmatch(shutErr.Error())
		if m == nil {
			t.Errorf("Shutdown: %q does not say how many processes were forced", shutErr)
		} else if n, _ := strconv.Atoi(m[1]); n != forced {
			t.Errorf("Shutdown: %q does not say %d processes were forced", shutErr, forced)
		}
	}
	if !timed && forced != ignorers {
		t.Errorf("%d processes forced, want the %d that ignore cancel", forced, ignorers)
	}
	if !timed && w.cleanups.Load() != int64(procs-ignorers) {
		t.Errorf("%d cleanups completed, want %d", w.cleanups.Load(), procs-ignorers)
	}
	w.f.check(t)
	goleak.VerifyNone(t, ignoreCurrent)
}

// ---------------------------------------------------------------------
// 6. Self-sends and spawn trees cannot deadlock.

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
			size, err := payload.As[int](ev.Data.(payload.Payload))
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

// ---------------------------------------------------------------------
// 7. Fork-join.

// fibProc computes fib(n) by spawning and awaiting fib(n-1) and fib(n-2).
type fibProc struct {
	n, sum, waiting int
	spawned         *atomic.Int64
	prog            *progress
}

func (p *fibProc) Init(context.Context, string, payload.Payloads) error {
	p.spawned.Add(1)
	return nil
}

func (p *fibProc) Close() {}

func (p *fibProc) Step(evs []sched.Event, out *sched.StepOutput) error {
	if p.n < 2 {
		p.prog.tick()
		out.Done(payload.Of(p.n))
		return nil
	}
	if len(evs) == 0 {
		out.SpawnAwait(1, &fibProc{n: p.n - 1, spawned: p.spawned, prog: p.prog}, "fib", nil)
		out.SpawnAwait(2, &fibProc{n: p.n - 2, spawned: p.spawned, prog: p.prog}, "fib", nil)
		p.waiting = 2
		return nil
	}
	for _, ev := range evs {
		if ev.Error != nil {
			return ev.Error
		}
		v, err := payload.As[int](ev.Data.(payload.Payload))
		if err != nil {
			return err
		}
		p.sum += v
		p.waiting--
	}
	if p.waiting == 0 {
		out.Done(payload.Of(p.sum))
	}
	return nil
}

// TestStressFibForkJoin: fib(20) by SpawnAwait of fib(n-1) and fib(n-2)
// gives the right value with the right number of processes.
func TestStressFibForkJoin(t *testing.T) {
	n := 20
	if stressScale > 1 {
		n = 25
	}
	fib := func(n int) int {
		a, b := 0, 1
		for range n {
			a, b = b, a+b
		}
		return a
	}
	for _, cfg := range stressConfigs(t, 8, 4) {
		if !t.Run(cfg.String(), func(t *testing.T) {
			var prog progress
			var spawned atomic.Int64
			s := newScheduler(t, cfg.options()...)
			h, err := s.Submit(context.Background(), &fibProc{n: n, spawned: &spawned, prog: &prog}, "fib", nil)
			require.NoError(t, err)
			awaitProgress(t, s, &prog, h.Done(), "fib", nil)
			res, err := h.Wait(context.Background())
			require.NoError(t, err)
			require.Equal(t, payload.Of(fib(n)), res, "fib(%d)", n)
			// fib(n) spawns 2*fib(n+1)-1 processes in all.
			require.Equal(t, int64(2*fib(n+1)-1), spawned.Load(), "processes started")
		}) {
			break // one failing configuration is enough to report
		}
	}
}
