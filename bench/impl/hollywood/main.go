// Command hollywood runs the message-shaped benchmark workloads
// (ping-pong, ring, fan-out, skynet, idle memory) on
// github.com/anthdm/hollywood v1.0.5, as its README and examples show: an
// Engine from NewEngineConfig, receivers spawned from Producers,
// Context.Send for messages, SpawnChild for children and Poison on itself
// when an actor has finished.
//
// One option departs from the defaults, where an actor count demands it:
// every actor's inbox is a ring buffer of 1,024 envelopes by default
// (24 KiB), which does not fit skynet's 1.1M actors or the idle
// workload's 1M in this machine's memory. Those two spawn with
// WithInboxSize(smallInbox); the buffer grows on demand, so no message is
// ever refused.
//
// protoactor-go and hollywood both register the protobuf file
// actor.proto and cannot be linked into one binary, so each has its own.
//
//	go run ./impl/hollywood -workload pingpong -scale 1
package main

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/anthdm/hollywood/actor"

	"github.com/procsched/scheduler/bench/internal/workload"
)

// smallInbox is the inbox size of the skynet and idle actors (see the
// package comment).
const smallInbox = 16

func main() {
	workload.Main("hollywood", []workload.Entry{
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

func (p *player) Receive(c *actor.Context) {
	switch msg := c.Message().(type) {
	case *serve:
		c.Send(p.pids[1-p.self], &ball{})
	case *ball:
		msg.hits++
		if msg.hits >= p.max {
			p.done <- msg.hits
			return
		}
		c.Send(p.pids[1-p.self], msg)
	}
}

func newEngine() (*actor.Engine, error) {
	return actor.NewEngine(actor.NewEngineConfig())
}

func pingPong(m *workload.Meter, sz workload.Sizes) (workload.Outcome, error) {
	e, err := newEngine()
	if err != nil {
		return workload.Outcome{}, err
	}
	n := sz.PingPongMessages
	var pids [2]*actor.PID
	done := make(chan int, 1)
	for i := range pids {
		pids[i] = e.Spawn(func() actor.Receiver {
			return &player{self: i, max: n, pids: &pids, done: done}
		}, "player")
	}
	m.Start()
	e.Send(pids[0], &serve{})
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

func (p *ringNode) Receive(c *actor.Context) {
	switch msg := c.Message().(type) {
	case *serve:
		c.Send(p.ring[(p.index+1)%len(p.ring)], &token{})
	case *token:
		msg.hops++
		p.visits++
		if p.index == 0 && p.visits == p.laps {
			p.done <- msg.hops
			return
		}
		c.Send(p.ring[(p.index+1)%len(p.ring)], msg)
	}
}

func ring(m *workload.Meter, sz workload.Sizes) (workload.Outcome, error) {
	e, err := newEngine()
	if err != nil {
		return workload.Outcome{}, err
	}
	n, laps := sz.RingNodes, sz.RingLaps
	pids := make([]*actor.PID, n)
	done := make(chan int, 1)
	for i := range pids {
		pids[i] = e.Spawn(func() actor.Receiver {
			return &ringNode{index: i, laps: laps, ring: pids, done: done}
		}, "ring")
	}
	m.Start()
	e.Send(pids[0], &serve{})
	hops := <-done
	m.Stop()
	return workload.Outcome{Detail: fmt.Sprintf("hops=%d", hops)}, workload.Check("hops", hops, n*laps)
}

// skynetNode sums its part of the tree: a leaf reports its number, an
// inner node spawns ten children and reports the sum of theirs. Each
// node poisons itself once it has reported.
type skynetNode struct {
	num, size, waiting int
	sum                int64
	result             chan<- int64 // the root's; nil below it
}

func (n *skynetNode) Receive(c *actor.Context) {
	switch msg := c.Message().(type) {
	case actor.Started:
		if n.size == 1 {
			n.report(c, int64(n.num))
			return
		}
		sub := n.size / 10
		n.waiting = 10
		for i := range 10 {
			num := n.num + i*sub
			c.SpawnChild(func() actor.Receiver {
				return &skynetNode{num: num, size: sub}
			}, "node", actor.WithInboxSize(smallInbox))
		}
	case int64:
		n.sum += msg
		if n.waiting--; n.waiting == 0 {
			n.report(c, n.sum)
		}
	}
}

func (n *skynetNode) report(c *actor.Context, v int64) {
	if n.result != nil {
		n.result <- v
	} else {
		c.Send(c.Parent(), v)
	}
	c.Engine().Poison(c.PID())
}

func skynet(m *workload.Meter, sz workload.Sizes) (workload.Outcome, error) {
	e, err := newEngine()
	if err != nil {
		return workload.Outcome{}, err
	}
	result := make(chan int64, 1)
	m.Start()
	e.Spawn(func() actor.Receiver {
		return &skynetNode{size: sz.SkynetLeaves, result: result}
	}, "node", actor.WithInboxSize(smallInbox))
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

func (p *fanReceiver) Receive(c *actor.Context) {
	if _, ok := c.Message().(*fanMsg); ok {
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

func (p *fanProducer) Receive(c *actor.Context) {
	if _, ok := c.Message().(*serve); ok {
		msg := &fanMsg{}
		next := 0
		for range p.total {
			c.Send(p.to[next], msg)
			if next++; next == len(p.to) {
				next = 0
			}
		}
	}
}

func fanOut(m *workload.Meter, sz workload.Sizes) (workload.Outcome, error) {
	e, err := newEngine()
	if err != nil {
		return workload.Outcome{}, err
	}
	r, total := sz.FanOutReceivers, sz.FanOutMessages
	var received atomic.Int64
	var wg sync.WaitGroup
	wg.Add(r)
	pids := make([]*actor.PID, r)
	for i := range pids {
		pids[i] = e.Spawn(func() actor.Receiver {
			return &fanReceiver{want: total / r, received: &received, wg: &wg}
		}, "receiver")
	}
	producer := e.Spawn(func() actor.Receiver {
		return &fanProducer{to: pids, total: total}
	}, "producer")
	m.Start()
	e.Send(producer, &serve{})
	wg.Wait()
	m.Stop()
	got := int(received.Load())
	return workload.Outcome{Detail: fmt.Sprintf("received=%d", got)}, workload.Check("messages received", got, total)
}

// idleState counts the idle actors that have started.
type idleState struct{ ready atomic.Int64 }

// idler does nothing after it has started.
type idler struct{ shared *idleState }

func (p *idler) Receive(c *actor.Context) {
	if _, ok := c.Message().(actor.Started); ok {
		p.shared.ready.Add(1)
	}
}

func idle(m *workload.Meter, sz workload.Sizes) (workload.Outcome, error) {
	e, err := newEngine()
	if err != nil {
		return workload.Outcome{}, err
	}
	n := sz.IdleProcesses
	st := &idleState{}
	producer := func() actor.Receiver { return &idler{shared: st} }
	pids := make([]*actor.PID, n) // what a user keeps to reach them
	before := workload.LiveBytes()
	m.Start()
	for i := range pids {
		// Spawn runs the actor's Started synchronously.
		pids[i] = e.Spawn(producer, "idle", actor.WithInboxSize(smallInbox))
	}
	m.Stop()
	after := workload.LiveBytes()
	// Nothing below reaches the engine, and no goroutine holds an idle
	// actor: without this the collector would free them all.
	runtime.KeepAlive(e)
	runtime.KeepAlive(pids)
	started := int(st.ready.Load())
	return workload.Outcome{
		Detail:          fmt.Sprintf("started=%d", started),
		BytesPerProcess: workload.PerProcess(before, after, n),
	}, workload.Check("started actors", started, n)
}
