// Command sched-remote runs the remote workloads on this scheduler and
// its remote module (github.com/procsched/scheduler/remote), written the
// way the module's documentation and examples show: two nodes of one
// cluster in one process, each a scheduler made with WithNode and
// WithTransport of its node, joined through a NATS server embedded on a
// random loopback port; processes tell PIDs of the other node with
// StepOutput.Tell, as they tell local ones.
//
// Every message carries its sequence number in an 8-byte []byte body,
// one of the types the wire carries as it is. A sender keeps its bodies
// boxed in interface values made before the measured part and rewrites
// the number in place before each Tell: a body is reused only after the
// message last sent with it has come back, so it was encoded into a
// batch long before. The echoing side tells back the event's Data as it
// arrived. So the measured part boxes no body on the sending side; the
// receiving node boxes each body it delivers (the module's one
// allocation per received message).
//
// Its results are reported as implementation "sched", next to the local
// workloads of impl/sched, which lives in its own binary so that linking
// the NATS server and client does not change the local results.
//
//	go run ./impl/sched-remote -workload remote-echo -scale 1
package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/procsched/scheduler"
	"github.com/procsched/scheduler/bench/internal/embednats"
	"github.com/procsched/scheduler/bench/internal/workload"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
	"github.com/procsched/scheduler/remote"
)

func main() {
	workload.Main("sched", []workload.Entry{
		{Workload: workload.RemotePingPong, Run: pingPong},
		{Workload: workload.RemoteEcho, Run: echo},
		{Workload: workload.RemotePairs, Run: pairs},
	})
}

// errCancelled ends a process that was cancelled before it finished: in
// these workloads that only happens if the run is being torn down early.
var errCancelled = errors.New("cancelled")

// setupTimeout bounds joining the cluster and leaving it; a correct run
// takes milliseconds.
const setupTimeout = 30 * time.Second

// runTimeout bounds the wait for a run's end, so that a lost message
// fails the run instead of hanging it; a correct run at full size takes
// seconds.
const runTimeout = 5 * time.Minute

// member is one node and its scheduler.
type member struct {
	node  *remote.Node
	sched *scheduler.Scheduler
}

// cluster is the embedded server and the two nodes, "a" and "b".
type cluster struct {
	srv  *embednats.Server
	a, b *member
}

// startCluster starts the server and both nodes and waits until each
// node sees the other up.
func startCluster() (c *cluster, err error) {
	c = &cluster{}
	if c.srv, err = embednats.Start(); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			c.stop()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if c.a, err = join(ctx, c.srv.URL(), "a"); err != nil {
		return c, err
	}
	if c.b, err = join(ctx, c.srv.URL(), "b"); err != nil {
		return c, err
	}
	if _, err = c.a.node.WaitPeer(ctx, "b"); err != nil {
		return c, fmt.Errorf("a waiting for b: %w", err)
	}
	if _, err = c.b.node.WaitPeer(ctx, "a"); err != nil {
		return c, fmt.Errorf("b waiting for a: %w", err)
	}
	return c, nil
}

// join starts a node named name and its scheduler.
func join(ctx context.Context, url, name string) (*member, error) {
	node, err := remote.New(remote.Config{Cluster: "bench", Name: name, URL: url})
	if err != nil {
		return nil, err
	}
	s, err := scheduler.New(scheduler.WithNode(node.Node()), scheduler.WithTransport(node))
	if err != nil {
		_ = node.Close(ctx)
		return nil, err
	}
	if err := node.Start(ctx, s); err != nil {
		_ = node.Close(ctx)
		_ = s.Shutdown(ctx)
		return nil, err
	}
	return &member{node: node, sched: s}, nil
}

// batches says how many NATS messages carried the frames each way, for
// a run's detail: frames per batch is what batching saves.
func (c *cluster) batches() string {
	a, b := c.a.node.Stats(), c.b.node.Stats()
	return fmt.Sprintf("a->b %d frames in %d batches, b->a %d in %d", a.Sent, a.BatchesSent, b.Sent, b.BatchesSent)
}

// stop leaves the cluster (both nodes first, so that neither sees the
// other vanish), stops the schedulers, then the server.
func (c *cluster) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	for _, m := range []*member{c.a, c.b} {
		if m != nil {
			_ = m.node.Close(ctx)
		}
	}
	for _, m := range []*member{c.a, c.b} {
		if m != nil {
			_ = m.sched.Shutdown(ctx)
		}
	}
	if c.srv != nil {
		c.srv.Stop()
	}
}

// serve is the message from outside the scheduler that starts a pinger.
var serve any = "serve"

// bodies returns n sequence-number bodies, each boxed once.
func bodies(n int) (boxed []any, raw [][]byte) {
	buf := make([]byte, n*workload.SeqSize)
	boxed, raw = make([]any, n), make([][]byte, n)
	for i := range n {
		raw[i] = buf[i*workload.SeqSize : (i+1)*workload.SeqSize : (i+1)*workload.SeqSize]
		boxed[i] = raw[i]
	}
	return boxed, raw
}

// seqOf returns the sequence number of a message that came back, or an
// error if it bounced or is not a sequence-number body.
func seqOf(ev scheduler.Event) (uint64, error) {
	if ev.Error != nil {
		return 0, fmt.Errorf("a message came back undelivered: %w", ev.Error)
	}
	b, ok := ev.Data.([]byte)
	if !ok {
		return 0, fmt.Errorf("a message body is %T, want []byte", ev.Data)
	}
	n, ok := workload.Seq(b)
	if !ok {
		return 0, fmt.Errorf("a message body is %d bytes, want %d", len(b), workload.SeqSize)
	}
	return n, nil
}

// echoer tells every message back to its sender, and finishes with the
// count once it has echoed want of them.
type echoer struct{ want, echoed int }

func (p *echoer) Init(context.Context, string, payload.Payloads) error { return nil }
func (p *echoer) Close()                                               {}

func (p *echoer) Step(evs []scheduler.Event, out *scheduler.StepOutput) error {
	for _, ev := range evs {
		switch ev.Type {
		case scheduler.EventCancel:
			return errCancelled
		case scheduler.EventMessage:
			if ev.Error != nil {
				return fmt.Errorf("an echo came back undelivered: %w", ev.Error)
			}
			out.Tell(ev.From, ev.Data)
			if p.echoed++; p.echoed == p.want {
				out.Done(payload.Of(p.echoed))
				return nil
			}
		}
	}
	return nil
}

// pinger sends rounds messages to its echoer one at a time, each after
// the previous one came back, and checks each echo's number. It starts
// on the serve message from outside and finishes with the count. If lat
// is set, it records every round trip.
type pinger struct {
	to     relay.PID
	rounds int
	lat    *workload.Latencies // nil: not recorded

	body   any    // the one body, boxed
	raw    []byte // its bytes
	got    int
	sentAt time.Time
}

func newPinger(to relay.PID, rounds int, lat *workload.Latencies) *pinger {
	boxed, raw := bodies(1)
	return &pinger{to: to, rounds: rounds, lat: lat, body: boxed[0], raw: raw[0]}
}

func (p *pinger) Init(context.Context, string, payload.Payloads) error { return nil }
func (p *pinger) Close()                                               {}

func (p *pinger) Step(evs []scheduler.Event, out *scheduler.StepOutput) error {
	for _, ev := range evs {
		switch {
		case ev.Type == scheduler.EventCancel:
			return errCancelled
		case ev.Type != scheduler.EventMessage:
		case ev.From.IsZero(): // served
			p.send(out, time.Now())
		default:
			n, err := seqOf(ev)
			if err != nil {
				return err
			}
			if err := workload.Check("echo number", n, uint64(p.got)); err != nil {
				return err
			}
			now := time.Now()
			if p.lat != nil {
				p.lat.Add(now.Sub(p.sentAt))
			}
			if p.got++; p.got == p.rounds {
				out.Done(payload.Of(p.got))
				return nil
			}
			p.send(out, now)
		}
	}
	return nil
}

// send tells the next message: the body's previous message has come
// back, so its bytes are free to rewrite.
func (p *pinger) send(out *scheduler.StepOutput, now time.Time) {
	workload.PutSeq(p.raw, uint64(p.got))
	p.sentAt = now
	out.Tell(p.to, p.body)
}

// waitCount waits for the handles and returns the sum of their int
// results.
func waitCount(hs []scheduler.Handle) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	total := 0
	for _, h := range hs {
		res, err := h.Wait(ctx)
		if err != nil {
			return 0, err
		}
		v, err := payload.As[int](res)
		if err != nil {
			return 0, err
		}
		total += v
	}
	return total, nil
}

// drive runs one sender against one echoer: it starts an echoer of n
// messages on node b and the process newSender makes for it on node a
// (at entry point method), times the run from the serve message to the
// sender's end, and returns what the sender and the echoer counted.
func (c *cluster) drive(m *workload.Meter, n int, method string, newSender func(echo relay.PID) scheduler.Process) (got, echoed int, err error) {
	ctx := context.Background()
	e, err := c.b.sched.Submit(ctx, &echoer{want: n}, "echo", nil)
	if err != nil {
		return 0, 0, err
	}
	h, err := c.a.sched.Submit(ctx, newSender(e.PID()), method, nil)
	if err != nil {
		return 0, 0, err
	}
	m.Start()
	if err := c.a.sched.Tell(h.PID(), serve); err != nil {
		return 0, 0, err
	}
	got, err = waitCount([]scheduler.Handle{h})
	m.Stop()
	if err != nil {
		return 0, 0, err
	}
	echoed, err = waitCount([]scheduler.Handle{e})
	return got, echoed, err
}

func pingPong(m *workload.Meter, sz workload.Sizes) (workload.Outcome, error) {
	c, err := startCluster()
	if err != nil {
		return workload.Outcome{}, err
	}
	defer c.stop()
	n := sz.RemoteRoundTrips
	lat := workload.NewLatencies(n)
	got, echoed, err := c.drive(m, n, "ping", func(to relay.PID) scheduler.Process {
		return newPinger(to, n, lat)
	})
	if err != nil {
		return workload.Outcome{}, err
	}
	out := workload.Outcome{Detail: fmt.Sprintf("round_trips=%d echoed=%d (%s)", got, echoed, c.batches()), Latency: lat.Summary()}
	return out, errors.Join(workload.Check("round trips", got, n), workload.Check("echoed", echoed, n))
}

// streamer sends n messages to its echoer as fast as the window lets it:
// at most window of them sent and not yet back. It checks that the
// echoes come back in order, and finishes with their count.
type streamer struct {
	to        relay.PID
	n, window int
	boxed     []any    // window bodies, boxed
	raw       [][]byte // their bytes
	served    bool     // the serve message came: sending has begun
	sent, got int
}

func (p *streamer) Init(context.Context, string, payload.Payloads) error { return nil }
func (p *streamer) Close()                                               {}

func (p *streamer) Step(evs []scheduler.Event, out *scheduler.StepOutput) error {
	for _, ev := range evs {
		switch {
		case ev.Type == scheduler.EventCancel:
			return errCancelled
		case ev.Type != scheduler.EventMessage:
		case ev.From.IsZero():
			p.served = true
		default:
			n, err := seqOf(ev)
			if err != nil {
				return err
			}
			if err := workload.Check("echo number", n, uint64(p.got)); err != nil {
				return err
			}
			p.got++
		}
	}
	if p.got == p.n {
		out.Done(payload.Of(p.got))
		return nil
	}
	if !p.served {
		return nil
	}
	// Body i%window last carried message i-window, which has come back.
	for p.sent < p.n && p.sent-p.got < p.window {
		i := p.sent % p.window
		workload.PutSeq(p.raw[i], uint64(p.sent))
		out.Tell(p.to, p.boxed[i])
		p.sent++
	}
	return nil
}

func echo(m *workload.Meter, sz workload.Sizes) (workload.Outcome, error) {
	c, err := startCluster()
	if err != nil {
		return workload.Outcome{}, err
	}
	defer c.stop()
	n, window := sz.RemoteEchoMessages, sz.RemoteEchoWindow
	boxed, raw := bodies(window)
	got, echoed, err := c.drive(m, n, "stream", func(to relay.PID) scheduler.Process {
		return &streamer{to: to, n: n, window: window, boxed: boxed, raw: raw}
	})
	if err != nil {
		return workload.Outcome{}, err
	}
	out := workload.Outcome{Detail: fmt.Sprintf("echoes=%d echoed=%d (%s)", got, echoed, c.batches())}
	return out, errors.Join(workload.Check("echoes received in order", got, n), workload.Check("echoed", echoed, n))
}

func pairs(m *workload.Meter, sz workload.Sizes) (workload.Outcome, error) {
	c, err := startCluster()
	if err != nil {
		return workload.Outcome{}, err
	}
	defer c.stop()
	ctx := context.Background()
	np, rounds := sz.RemotePairs, sz.RemotePairRoundTrips
	echoers := make([]scheduler.Handle, np)
	pingers := make([]scheduler.Handle, np)
	for i := range np {
		e, err := c.b.sched.Submit(ctx, &echoer{want: rounds}, "echo", nil)
		if err != nil {
			return workload.Outcome{}, err
		}
		p, err := c.a.sched.Submit(ctx, newPinger(e.PID(), rounds, nil), "ping", nil)
		if err != nil {
			return workload.Outcome{}, err
		}
		echoers[i], pingers[i] = e, p
	}
	m.Start()
	for _, p := range pingers {
		if err := c.a.sched.Tell(p.PID(), serve); err != nil {
			return workload.Outcome{}, err
		}
	}
	got, err := waitCount(pingers)
	m.Stop()
	if err != nil {
		return workload.Outcome{}, err
	}
	echoed, err := waitCount(echoers)
	if err != nil {
		return workload.Outcome{}, err
	}
	out := workload.Outcome{Detail: fmt.Sprintf("round_trips=%d echoed=%d (%s)", got, echoed, c.batches())}
	return out, errors.Join(workload.Check("round trips", got, np*rounds), workload.Check("echoed", echoed, np*rounds))
}
