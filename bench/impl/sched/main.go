// Command sched runs the benchmark workloads on this scheduler
// (github.com/procsched/scheduler), written the way its documentation and
// examples recommend: processes are small state machines, messages are
// pointers passed with StepOutput.Tell (no allocation), children are
// started from inside a process with SpawnAwait so they are queued on the
// parent's worker, and a slow command goes to a handler that hands its
// Completion to a goroutine.
//
// It is run by the harness in ../..; by hand:
//
//	go run ./impl/sched -workload skynet -scale 1
package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/procsched/scheduler"
	"github.com/procsched/scheduler/bench/internal/workload"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

func main() {
	workload.Main("sched", []workload.Entry{
		{Workload: workload.PingPong, Run: pingPong},
		{Workload: workload.Ring, Run: ring},
		{Workload: workload.Skynet, Run: skynet},
		{Workload: workload.Spawn, Variant: "child", Run: spawnChildren},
		{Workload: workload.Spawn, Variant: "submit", Run: spawnSubmit},
		{Workload: workload.Spawn, Variant: "submit-help", Run: spawnSubmitHelp},
		{Workload: workload.Spawn, Variant: "forget", Run: spawnForget},
		{Workload: workload.Spawn, Variant: "forget-help", Run: spawnForgetHelp},
		{Workload: workload.FanOut, Run: fanOut},
		{Workload: workload.Yield, Run: yieldRoundTrip},
		{Workload: workload.Fib, Run: fib},
		{Workload: workload.Idle, Run: idle},
	})
}

// errCancelled ends a process that was cancelled before it finished: in
// these workloads that only happens if the run is being torn down early.
var errCancelled = errors.New("cancelled")

// start creates a scheduler with the default options (GOMAXPROCS
// workers) plus opts.
func start(opts ...scheduler.Option) (*scheduler.Scheduler, error) {
	return scheduler.New(opts...)
}

// stop shuts s down; every process of these workloads finishes on
// EventCancel, so a generous deadline is never reached in a correct run.
func stop(s *scheduler.Scheduler) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return s.Shutdown(ctx)
}

// waitAll waits for every handle and returns the first error.
func waitAll(hs []scheduler.Handle) error {
	for _, h := range hs {
		if _, err := h.Wait(context.Background()); err != nil {
			return err
		}
	}
	return nil
}

// ball is the ping-pong message; passing the pointer does not allocate.
type ball struct{ hits int }

// player returns the ball until max hits have been made in all. The one
// that makes the last hit finishes with the count; the one that sent the
// last ball finishes right after sending it.
type player struct {
	serve relay.PID // whom to send the first ball to, if anyone
	max   int
}

func (p *player) Init(context.Context, string, payload.Payloads) error { return nil }
func (p *player) Close()                                               {}

func (p *player) Step(evs []scheduler.Event, out *scheduler.StepOutput) error {
	if !p.serve.IsZero() {
		out.Tell(p.serve, &ball{})
		p.serve = relay.PID{}
		return nil
	}
	for _, ev := range evs {
		switch ev.Type {
		case scheduler.EventCancel:
			return errCancelled
		case scheduler.EventMessage:
			if ev.Error != nil {
				return ev.Error
			}
			b := ev.Data.(*ball)
			b.hits++
			if b.hits >= p.max {
				out.Done(payload.Of(b.hits))
				return nil
			}
			out.Tell(ev.From, b)
			if b.hits == p.max-1 {
				out.Done(payload.Payload{})
				return nil
			}
		}
	}
	return nil
}

func pingPong(m *workload.Meter, sz workload.Sizes) (workload.Outcome, error) {
	s, err := start()
	if err != nil {
		return workload.Outcome{}, err
	}
	defer stop(s)
	ctx := context.Background()
	n := sz.PingPongMessages
	receiver, err := s.Submit(ctx, &player{max: n}, "play", nil)
	if err != nil {
		return workload.Outcome{}, err
	}
	m.Start()
	server, err := s.Submit(ctx, &player{serve: receiver.PID(), max: n}, "play", nil)
	if err != nil {
		return workload.Outcome{}, err
	}
	hs := []scheduler.Handle{server, receiver}
	if err := waitAll(hs); err != nil {
		return workload.Outcome{}, err
	}
	m.Stop()
	hits := 0
	for _, h := range hs {
		if res, _ := h.Wait(ctx); !res.IsZero() {
			hits, _ = payload.As[int](res)
		}
	}
	return workload.Outcome{Detail: fmt.Sprintf("hits=%d", hits)}, workload.Check("hits", hits, n)
}

// token goes round the ring; each receipt is one hop.
type token struct{ hops int }

// ringNode forwards the token to the next node and finishes after its
// laps-th receipt. Node 0 puts the token in play when it gets it from
// outside the scheduler, and finishes the run with the hop count.
type ringNode struct {
	index, laps int
	ring        []relay.PID // complete before the token is put in play
	visits      int
}

func (p *ringNode) Init(context.Context, string, payload.Payloads) error { return nil }
func (p *ringNode) Close()                                               {}

func (p *ringNode) Step(evs []scheduler.Event, out *scheduler.StepOutput) error {
	for _, ev := range evs {
		switch ev.Type {
		case scheduler.EventCancel:
			return errCancelled
		case scheduler.EventMessage:
			if ev.Error != nil {
				return ev.Error
			}
			// The ring is read only here: every message is sent after
			// the ring was filled in (Tell from outside starts it).
			to := p.ring[(p.index+1)%len(p.ring)]
			t := ev.Data.(*token)
			if ev.From.IsZero() { // the serve
				out.Tell(to, t)
				continue
			}
			t.hops++
			p.visits++
			if p.index == 0 && p.visits == p.laps {
				out.Done(payload.Of(t.hops))
				return nil
			}
			out.Tell(to, t)
			if p.visits == p.laps {
				out.Done(payload.Payload{})
				return nil
			}
		}
	}
	return nil
}

func ring(m *workload.Meter, sz workload.Sizes) (workload.Outcome, error) {
	s, err := start()
	if err != nil {
		return workload.Outcome{}, err
	}
	defer stop(s)
	ctx := context.Background()
	n, laps := sz.RingNodes, sz.RingLaps
	pids := make([]relay.PID, n)
	hs := make([]scheduler.Handle, n)
	for i := range n {
		h, err := s.Submit(ctx, &ringNode{index: i, laps: laps, ring: pids}, "run", nil)
		if err != nil {
			return workload.Outcome{}, err
		}
		hs[i], pids[i] = h, h.PID()
	}
	m.Start()
	if err := s.Tell(pids[0], &token{}); err != nil {
		return workload.Outcome{}, err
	}
	res, err := hs[0].Wait(ctx)
	if err != nil {
		return workload.Outcome{}, err
	}
	m.Stop()
	if err := waitAll(hs); err != nil {
		return workload.Outcome{}, err
	}
	hops, _ := payload.As[int](res)
	return workload.Outcome{Detail: fmt.Sprintf("hops=%d", hops)}, workload.Check("hops", hops, n*laps)
}

// total is what a node of skynet or fib finishes with: a pointer to its
// sum, which reaches the parent as the same pointer (payload.Of keeps
// pointers as they are), read once the node has ended. An int64 result
// would be boxed, an allocation per node that the other implementations,
// which pass their sums through typed channels or atomic adds, do not
// make.
type total struct{ sum int64 }

// skynetNode sums its part of the tree: a leaf finishes with its number,
// an inner node spawns ten children and awaits their sums.
type skynetNode struct {
	num, size int
	total
	waiting int
}

func (n *skynetNode) Init(context.Context, string, payload.Payloads) error { return nil }
func (n *skynetNode) Close()                                               {}

func (n *skynetNode) Step(evs []scheduler.Event, out *scheduler.StepOutput) error {
	if n.size == 1 {
		n.sum = int64(n.num)
		out.Done(payload.Of(&n.total))
		return nil
	}
	if n.waiting == 0 {
		sub := n.size / 10
		for i := range 10 {
			out.SpawnAwait(uint64(i), &skynetNode{num: n.num + i*sub, size: sub}, "sum", nil)
		}
		n.waiting = 10
		return nil
	}
	return addResults(evs, &n.total, &n.waiting, out)
}

// addResults adds the totals of the children's completions in evs to t,
// counting *waiting down, and finishes with t once every child has
// reported.
func addResults(evs []scheduler.Event, t *total, waiting *int, out *scheduler.StepOutput) error {
	for _, ev := range evs {
		switch ev.Type {
		case scheduler.EventCancel:
			return errCancelled
		case scheduler.EventYieldComplete:
			if ev.Error != nil {
				return ev.Error
			}
			c, ok := ev.Data.(*total)
			if !ok {
				return fmt.Errorf("a child finished with %T, not a *total", ev.Data)
			}
			t.sum += c.sum
			*waiting--
		}
	}
	if *waiting == 0 {
		out.Done(payload.Of(t))
	}
	return nil
}

func skynet(m *workload.Meter, sz workload.Sizes) (workload.Outcome, error) {
	sum, err := runForTotal(m, &skynetNode{size: sz.SkynetLeaves}, "sum")
	if err != nil {
		return workload.Outcome{}, err
	}
	return workload.Outcome{Detail: fmt.Sprintf("sum=%d", sum)}, workload.Check("sum", sum, workload.SkynetSum(sz.SkynetLeaves))
}

// runForTotal times one process, submitted on a fresh scheduler with
// method, from its submission to its result, a *total, and returns its
// sum.
func runForTotal(m *workload.Meter, p scheduler.Process, method string) (int64, error) {
	s, err := start()
	if err != nil {
		return 0, err
	}
	defer stop(s)
	ctx := context.Background()
	m.Start()
	h, err := s.Submit(ctx, p, method, nil)
	if err != nil {
		return 0, err
	}
	res, err := h.Wait(ctx)
	if err != nil {
		return 0, err
	}
	m.Stop()
	t, err := payload.As[*total](res)
	if err != nil {
		return 0, err
	}
	return t.sum, nil
}

// trivial finishes in its first step.
type trivial struct{}

func (trivial) Init(context.Context, string, payload.Payloads) error { return nil }
func (trivial) Close()                                               {}
func (trivial) Step(_ []scheduler.Event, out *scheduler.StepOutput) error {
	out.Done(payload.Payload{})
	return nil
}

// spawnBatch is how many children spawnRoot starts per step.
const spawnBatch = 1024

// spawnRoot starts n trivial children, spawnBatch per step, awaiting each
// one's end; the tag of each child is its index, so the sum of the tags
// of the completions proves every child ended exactly once.
type spawnRoot struct {
	n, spawned, ended int
	tags              int64
}

func (p *spawnRoot) Init(context.Context, string, payload.Payloads) error { return nil }
func (p *spawnRoot) Close()                                               {}

func (p *spawnRoot) Step(evs []scheduler.Event, out *scheduler.StepOutput) error {
	for _, ev := range evs {
		switch ev.Type {
		case scheduler.EventCancel:
			return errCancelled
		case scheduler.EventYieldComplete:
			if ev.Error != nil {
				return ev.Error
			}
			p.ended++
			p.tags += int64(ev.Tag)
		}
	}
	if p.ended == p.n {
		out.Done(payload.Of(p.tags))
		return nil
	}
	if p.spawned < p.n {
		for range min(spawnBatch, p.n-p.spawned) {
			out.SpawnAwait(uint64(p.spawned), trivial{}, "run", nil)
			p.spawned++
		}
		if p.spawned < p.n {
			out.Continue()
		}
	}
	return nil
}

// spawnChildren: a process starts the children (the recommended way: the
// spawns are queued on its worker, no goroutine hand-off).
func spawnChildren(m *workload.Meter, sz workload.Sizes) (workload.Outcome, error) {
	s, err := start()
	if err != nil {
		return workload.Outcome{}, err
	}
	defer stop(s)
	ctx := context.Background()
	n := sz.SpawnProcesses
	m.Start()
	h, err := s.Submit(ctx, &spawnRoot{n: n}, "run", nil)
	if err != nil {
		return workload.Outcome{}, err
	}
	res, err := h.Wait(ctx)
	if err != nil {
		return workload.Outcome{}, err
	}
	m.Stop()
	sum, _ := payload.As[int64](res)
	return workload.Outcome{Detail: fmt.Sprintf("tags=%d", sum)}, workload.Check("sum of tags", sum, workload.SpawnSum(n))
}

// indexed finishes in its first step with its index.
type indexed struct{ i int }

func (p *indexed) Init(context.Context, string, payload.Payloads) error { return nil }
func (p *indexed) Close()                                               {}
func (p *indexed) Step(_ []scheduler.Event, out *scheduler.StepOutput) error {
	out.Done(payload.Of(p.i))
	return nil
}

// spawnSubmit: the caller outside the scheduler submits every process and
// waits for each handle, the shape of a server handing requests in.
func spawnSubmit(m *workload.Meter, sz workload.Sizes) (workload.Outcome, error) {
	return spawnSubmitWith(m, sz)
}

// spawnSubmitHelp is spawnSubmit with a scheduler made WithCallerHelp
// (see spawnForgetHelp).
func spawnSubmitHelp(m *workload.Meter, sz workload.Sizes) (workload.Outcome, error) {
	return spawnSubmitWith(m, sz, scheduler.WithCallerHelp())
}

// spawnSubmitWith is spawnSubmit with a scheduler made with opts.
func spawnSubmitWith(m *workload.Meter, sz workload.Sizes, opts ...scheduler.Option) (workload.Outcome, error) {
	s, err := start(opts...)
	if err != nil {
		return workload.Outcome{}, err
	}
	defer stop(s)
	ctx := context.Background()
	n := sz.SpawnProcesses
	hs := make([]scheduler.Handle, n)
	m.Start()
	for i := range hs {
		h, err := s.Submit(ctx, &indexed{i: i}, "run", nil)
		if err != nil {
			return workload.Outcome{}, err
		}
		hs[i] = h
	}
	var sum int64
	for _, h := range hs {
		res, err := h.Wait(ctx)
		if err != nil {
			return workload.Outcome{}, err
		}
		v, _ := payload.As[int](res)
		sum += int64(v)
	}
	m.Stop()
	return workload.Outcome{Detail: fmt.Sprintf("sum=%d", sum)}, workload.Check("sum of results", sum, workload.SpawnSum(n))
}

// tally is what the processes of spawnForget report to: the sum of their
// indexes, and how many are left, the last closing done.
type tally struct {
	sum  atomic.Int64
	left atomic.Int64
	done chan struct{}
}

// reporting finishes in its first step, having added its index to the
// tally.
type reporting struct {
	i int
	t *tally
}

func (p *reporting) Init(context.Context, string, payload.Payloads) error { return nil }
func (p *reporting) Close()                                               {}
func (p *reporting) Step(_ []scheduler.Event, out *scheduler.StepOutput) error {
	p.t.sum.Add(int64(p.i))
	if p.t.left.Add(-1) == 0 {
		close(p.t.done)
	}
	out.Done(payload.Payload{})
	return nil
}

// spawnForget: the caller outside the scheduler starts every process
// with Spawn, which returns no Handle; each process reports its result to
// a shared tally, as a pool's fire-and-forget task does, and the caller
// waits for the last.
func spawnForget(m *workload.Meter, sz workload.Sizes) (workload.Outcome, error) {
	return spawnForgetWith(m, sz)
}

// spawnForgetHelp is spawnForget with a scheduler made WithCallerHelp:
// the caller, once far ahead of the workers, runs queued processes
// itself.
func spawnForgetHelp(m *workload.Meter, sz workload.Sizes) (workload.Outcome, error) {
	return spawnForgetWith(m, sz, scheduler.WithCallerHelp())
}

// spawnForgetWith is spawnForget with a scheduler made with opts.
func spawnForgetWith(m *workload.Meter, sz workload.Sizes, opts ...scheduler.Option) (workload.Outcome, error) {
	s, err := start(opts...)
	if err != nil {
		return workload.Outcome{}, err
	}
	defer stop(s)
	ctx := context.Background()
	n := sz.SpawnProcesses
	t := &tally{done: make(chan struct{})}
	t.left.Store(int64(n))
	if n == 0 {
		close(t.done)
	}
	m.Start()
	for i := range n {
		if _, err := s.Spawn(ctx, &reporting{i: i, t: t}, "run", nil); err != nil {
			return workload.Outcome{}, err
		}
	}
	<-t.done
	m.Stop()
	sum := t.sum.Load()
	return workload.Outcome{Detail: fmt.Sprintf("sum=%d", sum)}, workload.Check("sum of results", sum, workload.SpawnSum(n))
}

// fanMsg is the fan-out message, one shared value: the receivers only
// count.
type fanMsg struct{}

var theFanMsg = &fanMsg{}

// fanReceiver counts messages and finishes with the count at want.
type fanReceiver struct{ want, got int }

func (p *fanReceiver) Init(context.Context, string, payload.Payloads) error { return nil }
func (p *fanReceiver) Close()                                               {}

func (p *fanReceiver) Step(evs []scheduler.Event, out *scheduler.StepOutput) error {
	for _, ev := range evs {
		switch ev.Type {
		case scheduler.EventCancel:
			return errCancelled
		case scheduler.EventMessage:
			if ev.Error != nil {
				return ev.Error
			}
			p.got++
		}
	}
	if p.got == p.want {
		out.Done(payload.Of(p.got))
	}
	return nil
}

// fanBatch is how many messages the producer tells per step.
const fanBatch = 1000

// fanProducer tells left messages round-robin to its receivers,
// fanBatch per step.
type fanProducer struct {
	to         []relay.PID
	left, next int
}

func (p *fanProducer) Init(context.Context, string, payload.Payloads) error { return nil }
func (p *fanProducer) Close()                                               {}

func (p *fanProducer) Step(evs []scheduler.Event, out *scheduler.StepOutput) error {
	for _, ev := range evs {
		switch {
		case ev.Type == scheduler.EventCancel:
			return errCancelled
		case ev.Type == scheduler.EventMessage && ev.Error != nil:
			return ev.Error // a receiver was gone
		}
	}
	for range min(fanBatch, p.left) {
		out.Tell(p.to[p.next], theFanMsg)
		p.next++
		if p.next == len(p.to) {
			p.next = 0
		}
		p.left--
	}
	if p.left > 0 {
		out.Continue()
	} else {
		out.Done(payload.Payload{})
	}
	return nil
}

func fanOut(m *workload.Meter, sz workload.Sizes) (workload.Outcome, error) {
	s, err := start()
	if err != nil {
		return workload.Outcome{}, err
	}
	defer stop(s)
	ctx := context.Background()
	r, total := sz.FanOutReceivers, sz.FanOutMessages
	hs := make([]scheduler.Handle, r)
	pids := make([]relay.PID, r)
	for i := range hs {
		h, err := s.Submit(ctx, &fanReceiver{want: total / r}, "run", nil)
		if err != nil {
			return workload.Outcome{}, err
		}
		hs[i], pids[i] = h, h.PID()
	}
	m.Start()
	prod, err := s.Submit(ctx, &fanProducer{to: pids, left: total}, "run", nil)
	if err != nil {
		return workload.Outcome{}, err
	}
	if err := waitAll(append(hs, prod)); err != nil {
		return workload.Outcome{}, err
	}
	m.Stop()
	got := 0
	for _, h := range hs {
		res, _ := h.Wait(ctx)
		v, _ := payload.As[int](res)
		got += v
	}
	// Steps per message says how well deliveries were batched: each
	// receiver step takes every message queued since its previous one.
	detail := fmt.Sprintf("received=%d steps=%d", got, s.Stats().Steps)
	return workload.Outcome{Detail: detail}, workload.Check("messages received", got, total)
}

// cmdEcho is the user command of the yield workload.
const cmdEcho = scheduler.FirstUserCommand

// yielder yields cmdEcho left times, one after another, and checks that
// every completion carries the tag it is waiting for.
type yielder struct {
	left, done int
	tag        uint64
}

func (p *yielder) Init(context.Context, string, payload.Payloads) error { return nil }
func (p *yielder) Close()                                               {}

func (p *yielder) Step(evs []scheduler.Event, out *scheduler.StepOutput) error {
	for _, ev := range evs {
		switch ev.Type {
		case scheduler.EventCancel:
			return errCancelled
		case scheduler.EventYieldComplete:
			if ev.Error != nil {
				return ev.Error
			}
			if ev.Tag != p.tag {
				return fmt.Errorf("completion for tag %d, want %d", ev.Tag, p.tag)
			}
			p.done++
		}
	}
	if p.left == 0 {
		out.Done(payload.Of(p.done))
		return nil
	}
	p.left--
	p.tag++
	out.Yield(p.tag, cmdEcho, nil)
	return nil
}

func yieldRoundTrip(m *workload.Meter, sz workload.Sizes) (workload.Outcome, error) {
	// The handler hands each Completion to one of GOMAXPROCS completer
	// goroutines, the shape of an asynchronous I/O call. The queue holds
	// one request per process, so the handler never blocks.
	procs, each := sz.YieldProcesses, sz.YieldsPerProcess
	reqs := make(chan scheduler.Completion, procs)
	s, err := start(scheduler.WithHandler(cmdEcho, func(c scheduler.Call) error {
		reqs <- c.Completion()
		return nil
	}))
	if err != nil {
		return workload.Outcome{}, err
	}
	var failed atomic.Pointer[error]
	completers := runtime.GOMAXPROCS(0)
	done := make(chan struct{})
	for range completers {
		go func() {
			defer func() { done <- struct{}{} }()
			for c := range reqs {
				if err := c.Complete(nil, nil); err != nil {
					first := err // a fresh variable: only a failure allocates
					failed.CompareAndSwap(nil, &first)
				}
			}
		}()
	}
	defer func() {
		stop(s)
		close(reqs)
		for range completers {
			<-done
		}
	}()
	ctx := context.Background()
	hs := make([]scheduler.Handle, procs)
	m.Start()
	for i := range hs {
		h, err := s.Submit(ctx, &yielder{left: each}, "run", nil)
		if err != nil {
			return workload.Outcome{}, err
		}
		hs[i] = h
	}
	if err := waitAll(hs); err != nil {
		return workload.Outcome{}, err
	}
	m.Stop()
	if e := failed.Load(); e != nil {
		return workload.Outcome{}, *e
	}
	total := 0
	for _, h := range hs {
		res, _ := h.Wait(ctx)
		v, _ := payload.As[int](res)
		total += v
	}
	return workload.Outcome{Detail: fmt.Sprintf("round_trips=%d", total)}, workload.Check("round trips", total, procs*each)
}

// fibProc computes fib(n): n < 2 finishes at once, anything else spawns
// fib(n-1) and fib(n-2), awaits both and finishes with their sum.
type fibProc struct {
	n int
	total
	waiting int
}

func (p *fibProc) Init(context.Context, string, payload.Payloads) error { return nil }
func (p *fibProc) Close()                                               {}

func (p *fibProc) Step(evs []scheduler.Event, out *scheduler.StepOutput) error {
	if p.n < 2 {
		p.sum = int64(p.n)
		out.Done(payload.Of(&p.total))
		return nil
	}
	if p.waiting == 0 {
		out.SpawnAwait(1, &fibProc{n: p.n - 1}, "fib", nil)
		out.SpawnAwait(2, &fibProc{n: p.n - 2}, "fib", nil)
		p.waiting = 2
		return nil
	}
	return addResults(evs, &p.total, &p.waiting, out)
}

func fib(m *workload.Meter, sz workload.Sizes) (workload.Outcome, error) {
	v, err := runForTotal(m, &fibProc{n: sz.FibN}, "fib")
	if err != nil {
		return workload.Outcome{}, err
	}
	return workload.Outcome{Detail: fmt.Sprintf("fib(%d)=%d", sz.FibN, v)}, workload.Check("fib", v, workload.FibValue(sz.FibN))
}

// idleState is shared by the idle processes: it learns when all of them
// have taken their first step and gone idle.
type idleState struct {
	n     int64
	ready atomic.Int64
	all   chan struct{}
}

// idler goes idle after its first step and finishes on cancel.
type idler struct {
	shared  *idleState
	stepped bool
}

func (p *idler) Init(context.Context, string, payload.Payloads) error { return nil }
func (p *idler) Close()                                               {}

func (p *idler) Step(evs []scheduler.Event, out *scheduler.StepOutput) error {
	if !p.stepped {
		p.stepped = true
		if p.shared.ready.Add(1) == p.shared.n {
			close(p.shared.all)
		}
	}
	for _, ev := range evs {
		if ev.Type == scheduler.EventCancel {
			out.Done(payload.Payload{})
		}
	}
	return nil
}

func idle(m *workload.Meter, sz workload.Sizes) (workload.Outcome, error) {
	s, err := start()
	if err != nil {
		return workload.Outcome{}, err
	}
	ctx := context.Background()
	n := sz.IdleProcesses
	st := &idleState{n: int64(n), all: make(chan struct{})}
	hs := make([]scheduler.Handle, n) // what a user keeps to reach them
	before := workload.LiveBytes()
	m.Start()
	for i := range hs {
		h, err := s.Submit(ctx, &idler{shared: st}, "run", nil)
		if err != nil {
			return workload.Outcome{}, err
		}
		hs[i] = h
	}
	<-st.all
	m.Stop()
	after := workload.LiveBytes()
	live := 0
	for _, h := range hs {
		select {
		case <-h.Done():
		default:
			live++
		}
	}
	runtime.KeepAlive(s)
	// The process exits after the run: a million cancels would only
	// lengthen it.
	return workload.Outcome{
		Detail:          fmt.Sprintf("live=%d", live),
		BytesPerProcess: workload.PerProcess(before, after, n),
	}, workload.Check("live processes", live, n)
}
