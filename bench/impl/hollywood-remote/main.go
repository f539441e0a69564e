// Command hollywood-remote runs the remote workloads on
// github.com/anthdm/hollywood v1.0.5 and its remote package, as its
// README and remote example show: two Engines in one process, each made
// WithRemote of a remote.New listening on its own 127.0.0.1 port, so
// that they talk over TCP (hollywood's DRPC streams, one per pair of
// engines and direction); actors send to the other engine's PIDs with
// Context.Send, which carries the sender, and answer Context.Sender().
//
// Messages crossing engines must be protocol buffers: every message is a
// wrapperspb.Int64Value carrying its sequence number, one of the
// protobuf module's own generated types, so nothing needs generating. A
// sender makes a new one per message (the remote serializes it later,
// on its stream writer's goroutine, so a value cannot be reused); the
// echoing actor sends back the value it received.
//
// Before the measured part, one request to an echo actor on the other
// engine opens the connections both ways, as joining does for the other
// implementations.
//
// Its results are reported as implementation "hollywood"; the local
// workloads are in impl/hollywood.
//
//	go run ./impl/hollywood-remote -workload remote-echo -scale 1
package main

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/anthdm/hollywood/actor"
	"github.com/anthdm/hollywood/remote"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/procsched/scheduler/bench/internal/workload"
)

func main() {
	workload.Main("hollywood", []workload.Entry{
		{Workload: workload.RemotePingPong, Run: pingPong},
		{Workload: workload.RemoteEcho, Run: echo},
		{Workload: workload.RemotePairs, Run: pairs},
	})
}

// runTimeout bounds the wait for a run's end; a correct run at full size
// takes seconds.
const runTimeout = 5 * time.Minute

// node is an engine with its remote.
type node struct {
	engine *actor.Engine
	remote *remote.Remote
}

// cluster is the two engines, "a" and "b".
type cluster struct{ a, b *node }

// freeAddr returns a loopback address with a port no one listens on
// now: hollywood names an engine by its listen address, so the port must
// be known before the engine starts.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}

func newNode() (*node, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	r := remote.New(addr, remote.NewConfig())
	e, err := actor.NewEngine(actor.NewEngineConfig().WithRemote(r))
	if err != nil {
		return nil, err
	}
	return &node{engine: e, remote: r}, nil
}

// startCluster starts both engines and opens the connections between
// them with one request each way.
func startCluster() (*cluster, error) {
	a, err := newNode()
	if err != nil {
		return nil, err
	}
	b, err := newNode()
	if err != nil {
		a.remote.Stop().Wait()
		return nil, err
	}
	c := &cluster{a: a, b: b}
	for _, from := range []*node{a, b} {
		to := b
		if from == b {
			to = a
		}
		warm := to.engine.Spawn(func() actor.Receiver { return &echoer{} }, "warm")
		if _, err := from.engine.Request(warm, &wrapperspb.Int64Value{}, 30*time.Second).Result(); err != nil {
			c.stop()
			return nil, fmt.Errorf("opening the connections: %w", err)
		}
		to.engine.Poison(warm)
	}
	return c, nil
}

func (c *cluster) stop() {
	c.a.remote.Stop().Wait()
	c.b.remote.Stop().Wait()
}

// serve tells a pinger or streamer to begin.
type serve struct{}

// echoer sends every message back to its sender. If echoed is set, it
// counts the echoes there.
type echoer struct{ echoed *atomic.Int64 }

func (p *echoer) Receive(c *actor.Context) {
	if msg, ok := c.Message().(*wrapperspb.Int64Value); ok {
		c.Send(c.Sender(), msg)
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

func (p *pinger) Receive(c *actor.Context) {
	switch msg := c.Message().(type) {
	case *serve:
		p.send(c, time.Now())
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
		p.send(c, now)
	}
}

func (p *pinger) send(c *actor.Context, now time.Time) {
	p.sentAt = now
	c.Send(p.to, &wrapperspb.Int64Value{Value: int64(p.got)})
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
	e := c.b.engine.Spawn(func() actor.Receiver { return &echoer{echoed: &echoed} }, "echo")
	lat := workload.NewLatencies(n)
	done := make(chan result, 1)
	p := c.a.engine.Spawn(func() actor.Receiver { return &pinger{to: e, rounds: n, lat: lat, done: done} }, "ping")
	m.Start()
	c.a.engine.Send(p, &serve{})
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

func (p *streamer) Receive(c *actor.Context) {
	switch msg := c.Message().(type) {
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
		c.Send(p.to, &wrapperspb.Int64Value{Value: int64(p.sent)})
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
	e := c.b.engine.Spawn(func() actor.Receiver { return &echoer{echoed: &echoed} }, "echo")
	done := make(chan result, 1)
	s := c.a.engine.Spawn(func() actor.Receiver { return &streamer{to: e, n: n, window: window, done: done} }, "stream")
	m.Start()
	c.a.engine.Send(s, &serve{})
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
	done := make(chan result, np)
	pingers := make([]*actor.PID, np)
	for i := range pingers {
		id := actor.WithID(strconv.Itoa(i))
		e := c.b.engine.Spawn(func() actor.Receiver { return &echoer{echoed: &echoed} }, "echo", id)
		pingers[i] = c.a.engine.Spawn(func() actor.Receiver { return &pinger{to: e, rounds: rounds, done: done} }, "ping", id)
	}
	m.Start()
	for _, p := range pingers {
		c.a.engine.Send(p, &serve{})
	}
	got, err := await(done, np)
	m.Stop()
	if err != nil {
		return workload.Outcome{}, err
	}
	out := workload.Outcome{Detail: fmt.Sprintf("round_trips=%d echoed=%d", got, echoed.Load())}
	return out, errors.Join(workload.Check("round trips", got, np*rounds), workload.Check("echoed", echoed.Load(), int64(np*rounds)))
}
