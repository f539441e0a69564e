// Command protoactor-remote runs the remote workloads on
// github.com/asynkron/protoactor-go and its remote package: two
// ActorSystems in one process, each with a remote.NewRemote configured
// on 127.0.0.1 and a port the system picks, so that they talk over gRPC
// streams on TCP (one per pair of systems and direction), with the
// remote's default batching. Actors send to the other system's PIDs with
// ctx.Request, which carries the sender, and answer with ctx.Respond.
//
// Messages crossing systems must be protocol buffers: every message is a
// wrapperspb.Int64Value carrying its sequence number, one of the
// protobuf module's own generated types, so nothing needs generating. A
// sender makes a new one per message (the remote serializes it later,
// on its endpoint writer's goroutine, so a value cannot be reused); the
// echoing actor sends back the value it received.
//
// Before the measured part, one request to an echo actor on the other
// system opens the connections both ways, as joining does for the other
// implementations.
//
// Its results are reported as implementation "protoactor"; the local
// workloads are in impl/protoactor (protoactor-go and hollywood both
// register the protobuf file actor.proto and cannot share a binary).
//
//	go run ./impl/protoactor-remote -workload remote-echo -scale 1
package main

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/procsched/scheduler/bench/internal/workload"
)

func main() {
	workload.Main("protoactor", []workload.Entry{
		{Workload: workload.RemotePingPong, Run: pingPong},
		{Workload: workload.RemoteEcho, Run: echo},
		{Workload: workload.RemotePairs, Run: pairs},
	})
}

// runTimeout bounds the wait for a run's end; a correct run at full size
// takes seconds.
const runTimeout = 5 * time.Minute

// node is an actor system with its remote.
type node struct {
	system *actor.ActorSystem
	remote *remote.Remote
}

// cluster is the two systems, "a" and "b".
type cluster struct{ a, b *node }

func newNode() *node {
	system := actor.NewActorSystem()
	r := remote.NewRemote(system, remote.Configure("127.0.0.1", 0))
	r.Start()
	return &node{system: system, remote: r}
}

// startCluster starts both systems and opens the connections between
// them with one request each way.
func startCluster() (*cluster, error) {
	c := &cluster{a: newNode(), b: newNode()}
	for _, from := range []*node{c.a, c.b} {
		to := c.b
		if from == c.b {
			to = c.a
		}
		warm := to.system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return &echoer{} }))
		if _, err := from.system.Root.RequestFuture(warm, &wrapperspb.Int64Value{}, 30*time.Second).Result(); err != nil {
			c.stop()
			return nil, fmt.Errorf("opening the connections: %w", err)
		}
		to.system.Root.Stop(warm)
	}
	return c, nil
}

// stop stops the gRPC servers and the systems. Not gracefully: the
// graceful shutdown of protoactor-go's remote tells every endpoint
// reader to disconnect over a channel that the reader closes when its
// stream ends, so with both systems stopping at once it can panic with a
// send on a closed channel (the remote at the version this module
// requires); the run is measured and checked by then.
func (c *cluster) stop() {
	for _, n := range []*node{c.a, c.b} {
		n.remote.Shutdown(false)
		n.system.Shutdown()
	}
}

// serve tells a pinger or streamer to begin.
type serve struct{}

// echoer sends every message back to its sender. If echoed is set, it
// counts the echoes there.
type echoer struct{ echoed *atomic.Int64 }

func (p *echoer) Receive(ctx actor.Context) {
	if msg, ok := ctx.Message().(*wrapperspb.Int64Value); ok {
		ctx.Respond(msg)
		if p.echoed != nil {
			p.echoed.Add(1)
		}
	}
}

// result is what a pinger or streamer reports when it ends.
type result struct {
	got int
	err error
}

// pinger sends rounds messages to its echoer one at a time, each after
// the previous one came back, checks each echo's number, and reports on
// done. If lat is set, it records every round trip.
type pinger struct {
	to     *actor.PID
	rounds int
	lat    *workload.Latencies
	done   chan<- result
	got    int
	sentAt time.Time
}

func (p *pinger) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *serve:
		p.send(ctx, time.Now())
	case *wrapperspb.Int64Value:
		if err := workload.Check("echo number", msg.Value, int64(p.got)); err != nil {
			p.done <- result{p.got, err}
			return
		}
		now := time.Now()
		if p.lat != nil {
			p.lat.Add(now.Sub(p.sentAt))
		}
		if p.got++; p.got == p.rounds {
			p.done <- result{got: p.got}
			return
		}
		p.send(ctx, now)
	}
}

func (p *pinger) send(ctx actor.Context, now time.Time) {
	p.sentAt = now
	ctx.Request(p.to, &wrapperspb.Int64Value{Value: int64(p.got)})
}

// await waits for n results and returns the sum of their counts.
func await(done <-chan result, n int) (int, error) {
	timeout := time.After(runTimeout)
	total := 0
	for range n {
		select {
		case r := <-done:
			if r.err != nil {
				return 0, r.err
			}
			total += r.got
		case <-timeout:
			return 0, fmt.Errorf("no end after %v", runTimeout)
		}
	}
	return total, nil
}

func pingPong(m *workload.Meter, sz workload.Sizes) (workload.Outcome, error) {
	c, err := startCluster()
	if err != nil {
		return workload.Outcome{}, err
	}
	defer c.stop()
	n := sz.RemoteRoundTrips
	var echoed atomic.Int64
	e := c.b.system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return &echoer{echoed: &echoed} }))
	lat := workload.NewLatencies(n)
	done := make(chan result, 1)
	p := c.a.system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return &pinger{to: e, rounds: n, lat: lat, done: done} }))
	m.Start()
	c.a.system.Root.Send(p, &serve{})
	got, err := await(done, 1)
	m.Stop()
	if err != nil {
		return workload.Outcome{}, err
	}
	out := workload.Outcome{Detail: fmt.Sprintf("round_trips=%d echoed=%d", got, echoed.Load()), Latency: lat.Summary()}
	return out, errors.Join(workload.Check("round trips", got, n), workload.Check("echoed", echoed.Load(), int64(n)))
}

// streamer sends n messages to its echoer as fast as the window lets it:
// at most window of them sent and not yet back. It checks that the
// echoes come back in order, and reports their count on done.
type streamer struct {
	to        *actor.PID
	n, window int
	done      chan<- result
	sent, got int
}

func (p *streamer) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *serve:
	case *wrapperspb.Int64Value:
		if err := workload.Check("echo number", msg.Value, int64(p.got)); err != nil {
			p.done <- result{p.got, err}
			return
		}
		if p.got++; p.got == p.n {
			p.done <- result{got: p.got}
			return
		}
	default:
		return
	}
	for p.sent < p.n && p.sent-p.got < p.window {
		ctx.Request(p.to, &wrapperspb.Int64Value{Value: int64(p.sent)})
		p.sent++
	}
}

func echo(m *workload.Meter, sz workload.Sizes) (workload.Outcome, error) {
	c, err := startCluster()
	if err != nil {
		return workload.Outcome{}, err
	}
	defer c.stop()
	n, window := sz.RemoteEchoMessages, sz.RemoteEchoWindow
	var echoed atomic.Int64
	e := c.b.system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return &echoer{echoed: &echoed} }))
	done := make(chan result, 1)
	s := c.a.system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return &streamer{to: e, n: n, window: window, done: done} }))
	m.Start()
	c.a.system.Root.Send(s, &serve{})
	got, err := await(done, 1)
	m.Stop()
	if err != nil {
		return workload.Outcome{}, err
	}
	out := workload.Outcome{Detail: fmt.Sprintf("echoes=%d echoed=%d", got, echoed.Load())}
	return out, errors.Join(workload.Check("echoes received in order", got, n), workload.Check("echoed", echoed.Load(), int64(n)))
}

func pairs(m *workload.Meter, sz workload.Sizes) (workload.Outcome, error) {
	c, err := startCluster()
	if err != nil {
		return workload.Outcome{}, err
	}
	defer c.stop()
	np, rounds := sz.RemotePairs, sz.RemotePairRoundTrips
	var echoed atomic.Int64
	echoProps := actor.PropsFromProducer(func() actor.Actor { return &echoer{echoed: &echoed} })
	done := make(chan result, np)
	pingers := make([]*actor.PID, np)
	for i := range pingers {
		e := c.b.system.Root.Spawn(echoProps)
		pingers[i] = c.a.system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return &pinger{to: e, rounds: rounds, done: done} }))
	}
	m.Start()
	for _, p := range pingers {
		c.a.system.Root.Send(p, &serve{})
	}
	got, err := await(done, np)
	m.Stop()
	if err != nil {
		return workload.Outcome{}, err
	}
	out := workload.Outcome{Detail: fmt.Sprintf("round_trips=%d echoed=%d", got, echoed.Load())}
	return out, errors.Join(workload.Check("round trips", got, np*rounds), workload.Check("echoed", echoed.Load(), int64(np*rounds)))
}
