// Command protoactor runs the message-shaped benchmark workloads
// (ping-pong, ring, fan-out, skynet, idle memory) on
// github.com/asynkron/protoactor-go, as its README and examples show: an
// ActorSystem, actors built from Props with PropsFromProducer and the
// default mailbox and dispatcher, ctx.Send for fire-and-forget messages,
// ctx.Spawn for children (which a parent supervises), and ctx.Stop on
// itself when an actor has finished.
//
// protoactor-go and hollywood both register the protobuf file
// actor.proto and cannot be linked into one binary, so each has its own.
//
//	go run ./impl/protoactor -workload pingpong -scale 1
package main

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/procsched/scheduler/bench/internal/workload"
)

func main() {
	workload.Main("protoactor", []workload.Entry{
		{Workload: workload.PingPong, Run: pingPong},
		{Workload: workload.Ring, Run: ring},
		{Workload: workload.Skynet, Run: skynet},
		{Workload: workload.FanOut, Run: fanOut},
		{Workload: workload.Idle, Run: idle},
	})
}

// ball is the ping-pong message.
type ball struct{ hits int }

// serve tells an actor to put its message in play.
type serve struct{}

// player returns the ball to its peer until max hits have been made in
// all; the one that makes the last hit reports the count on done.
type player struct {
	self, max int
	pids      *[2]*actor.PID // both players; set before the serve
	done      chan<- int
}

func (p *player) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *serve:
		ctx.Send(p.pids[1-p.self], &ball{})
	case *ball:
		msg.hits++
		if msg.hits >= p.max {
			p.done <- msg.hits
			return
		}
		ctx.Send(p.pids[1-p.self], msg)
	}
}

func pingPong(m *workload.Meter, sz workload.Sizes) (workload.Outcome, error) {
	system := actor.NewActorSystem()
	defer system.Shutdown()
	n := sz.PingPongMessages
	var pids [2]*actor.PID
	done := make(chan int, 1)
	for i := range pids {
		pids[i] = system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor {
			return &player{self: i, max: n, pids: &pids, done: done}
		}))
	}
	m.Start()
	system.Root.Send(pids[0], &serve{})
	hits := <-done
	m.Stop()
	return workload.Outcome{Detail: fmt.Sprintf("hits=%d", hits)}, workload.Check("hits", hits, n)
}

// token goes round the ring; each receipt is one hop.
type token struct{ hops int }

// ringNode forwards the token to the next node; node 0 puts it in play
// and reports the hop count after its laps-th receipt.
type ringNode struct {
	index, laps, visits int
	ring                []*actor.PID // complete before the serve
	done                chan<- int
}

func (p *ringNode) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *serve:
		ctx.Send(p.ring[(p.index+1)%len(p.ring)], &token{})
	case *token:
		msg.hops++
		p.visits++
		if p.index == 0 && p.visits == p.laps {
			p.done <- msg.hops
			return
		}
		ctx.Send(p.ring[(p.index+1)%len(p.ring)], msg)
	}
}

func ring(m *workload.Meter, sz workload.Sizes) (workload.Outcome, error) {
	system := actor.NewActorSystem()
	defer system.Shutdown()
	n, laps := sz.RingNodes, sz.RingLaps
	pids := make([]*actor.PID, n)
	done := make(chan int, 1)
	for i := range pids {
		pids[i] = system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor {
			return &ringNode{index: i, laps: laps, ring: pids, done: done}
		}))
	}
	m.Start()
	system.Root.Send(pids[0], &serve{})
	hops := <-done
	m.Stop()
	return workload.Outcome{Detail: fmt.Sprintf("hops=%d", hops)}, workload.Check("hops", hops, n*laps)
}

// skynetNode sums its part of the tree: a leaf reports its number, an
// inner node spawns ten children and reports the sum of theirs. Each
// node stops itself once it has reported.
type skynetNode struct {
	num, size, waiting int
	sum                int64
	result             chan<- int64 // the root's; nil below it
}

func (n *skynetNode) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		if n.size == 1 {
			n.report(ctx, int64(n.num))
			return
		}
		sub := n.size / 10
		n.waiting = 10
		for i := range 10 {
			num := n.num + i*sub
			ctx.Spawn(actor.PropsFromProducer(func() actor.Actor {
				return &skynetNode{num: num, size: sub}
			}))
		}
	case int64:
		n.sum += msg
		if n.waiting--; n.waiting == 0 {
			n.report(ctx, n.sum)
		}
	}
}

func (n *skynetNode) report(ctx actor.Context, v int64) {
	if n.result != nil {
		n.result <- v
	} else {
		ctx.Send(ctx.Parent(), v)
	}
	ctx.Stop(ctx.Self())
}

func skynet(m *workload.Meter, sz workload.Sizes) (workload.Outcome, error) {
	system := actor.NewActorSystem()
	defer system.Shutdown()
	result := make(chan int64, 1)
	m.Start()
	system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor {
		return &skynetNode{size: sz.SkynetLeaves, result: result}
	}))
	sum := <-result
	m.Stop()
	return workload.Outcome{Detail: fmt.Sprintf("sum=%d", sum)}, workload.Check("sum", sum, workload.SkynetSum(sz.SkynetLeaves))
}

// fanMsg is the fan-out message; the receivers only count.
type fanMsg struct{}

// fanReceiver counts messages and reports when it has want of them.
type fanReceiver struct {
	want, got int
	received  *atomic.Int64
	wg        *sync.WaitGroup
}

func (p *fanReceiver) Receive(ctx actor.Context) {
	if _, ok := ctx.Message().(*fanMsg); ok {
		if p.got++; p.got == p.want {
			p.received.Add(int64(p.got))
			p.wg.Done()
		}
	}
}

// fanProducer sends total messages round-robin to its receivers when
// served.
type fanProducer struct {
	to    []*actor.PID
	total int
}

func (p *fanProducer) Receive(ctx actor.Context) {
	if _, ok := ctx.Message().(*serve); ok {
		msg := &fanMsg{}
		next := 0
		for range p.total {
			ctx.Send(p.to[next], msg)
			if next++; next == len(p.to) {
				next = 0
			}
		}
	}
}

func fanOut(m *workload.Meter, sz workload.Sizes) (workload.Outcome, error) {
	system := actor.NewActorSystem()
	defer system.Shutdown()
	r, total := sz.FanOutReceivers, sz.FanOutMessages
	var received atomic.Int64
	var wg sync.WaitGroup
	wg.Add(r)
	pids := make([]*actor.PID, r)
	for i := range pids {
		pids[i] = system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor {
			return &fanReceiver{want: total / r, received: &received, wg: &wg}
		}))
	}
	producer := system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor {
		return &fanProducer{to: pids, total: total}
	}))
	m.Start()
	system.Root.Send(producer, &serve{})
	wg.Wait()
	m.Stop()
	got := int(received.Load())
	return workload.Outcome{Detail: fmt.Sprintf("received=%d", got)}, workload.Check("messages received", got, total)
}

// idleState learns when every idle actor has started.
type idleState struct {
	n, ready atomic.Int64
	all      chan struct{}
}

// idler does nothing after it has started.
type idler struct{ shared *idleState }

func (p *idler) Receive(ctx actor.Context) {
	if _, ok := ctx.Message().(*actor.Started); ok {
		if p.shared.ready.Add(1) == p.shared.n.Load() {
			close(p.shared.all)
		}
	}
}

func idle(m *workload.Meter, sz workload.Sizes) (workload.Outcome, error) {
	system := actor.NewActorSystem()
	defer system.Shutdown()
	n := sz.IdleProcesses
	st := &idleState{all: make(chan struct{})}
	st.n.Store(int64(n))
	props := actor.PropsFromProducer(func() actor.Actor { return &idler{shared: st} })
	pids := make([]*actor.PID, n) // what a user keeps to reach them
	before := workload.LiveBytes()
	m.Start()
	for i := range pids {
		pids[i] = system.Root.Spawn(props)
	}
	<-st.all
	m.Stop()
	after := workload.LiveBytes()
	live := 0
	for _, shard := range system.ProcessRegistry.LocalPIDs.LocalPIDs {
		live += shard.Count()
	}
	if live < n {
		return workload.Outcome{}, fmt.Errorf("registered actors: got %d, want at least %d", live, n)
	}
	runtime.KeepAlive(pids)
	return workload.Outcome{
		Detail:          fmt.Sprintf("actors=%d", live),
		BytesPerProcess: workload.PerProcess(before, after, n),
	}, nil
}
