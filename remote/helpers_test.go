package remote_test

import (
	"context"
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	scheduler "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
	"github.com/procsched/scheduler/remote"
)

// tWait bounds every wait of the tests: generous, because the machine
// may be busy; reaching it is a failure, never a measurement.
const tWait = 30 * time.Second

// tServer starts an embedded NATS server on a random loopback port.
func tServer(t testing.TB) *server.Server { return tServerOn(t, server.RANDOM_PORT) }

// tServerOn starts an embedded NATS server on port and shuts it down at
// the end of the test.
func tServerOn(t testing.TB, port int) *server.Server {
	t.Helper()
	return tServerWith(t, &server.Options{Host: "127.0.0.1", Port: port, NoLog: true, NoSigs: true})
}

// tServerWith starts an embedded NATS server with opts and shuts it down
// at the end of the test.
func tServerWith(t testing.TB, opts *server.Options) *server.Server {
	t.Helper()
	s, err := server.NewServer(opts)
	require.NoError(t, err)
	s.Start()
	require.True(t, s.ReadyForConnections(tWait), "the NATS server did not start")
	t.Cleanup(func() { tStopServer(s) })
	return s
}

// tStopServer shuts s down and waits until its goroutines are gone.
func tStopServer(s *server.Server) {
	s.Shutdown()
	s.WaitForShutdown()
}

// tNode is a node with its scheduler, and the peers it saw come and go.
type tNode struct {
	*remote.Node
	S    *scheduler.Scheduler
	Up   chan remote.Peer
	Down chan remote.Peer
}

// tFast is the configuration of the tests' nodes: heartbeats every 50ms,
// so that joining after a lost message and crash detection are quick.
func tFast(cfg *remote.Config) {
	cfg.Heartbeat = 50 * time.Millisecond
	cfg.FailureTimeout = 2 * time.Second
}

// tStart starts a node named name of cluster "test" and its scheduler,
// and closes both at the end of the test. edit, if not nil, changes the
// node's config.
func tStart(t testing.TB, url, name string, edit func(*remote.Config), opts ...scheduler.Option) *tNode {
	t.Helper()
	tn := &tNode{Up: make(chan remote.Peer, 64), Down: make(chan remote.Peer, 64)}
	cfg := remote.Config{
		Cluster: "test", Name: name, URL: url,
		Options: []nats.Option{nats.ReconnectWait(20 * time.Millisecond), nats.ReconnectJitter(0, 0), nats.MaxReconnects(-1)},
		Hooks: remote.Hooks{
			PeerUp:   func(p remote.Peer) { tn.Up <- p },
			PeerDown: func(p remote.Peer) { tn.Down <- p },
		},
	}
	tFast(&cfg)
	if edit != nil {
		edit(&cfg)
	}
	node, err := remote.New(cfg)
	require.NoError(t, err)
	s, err := scheduler.New(append([]scheduler.Option{scheduler.WithNode(node.Node()), scheduler.WithTransport(node)}, opts...)...)
	require.NoError(t, err)
	require.NoError(t, node.Start(t.Context(), s))
	tn.Node, tn.S = node, s
	t.Cleanup(func() { tn.stop(t) })
	return tn
}

// tUnstarted makes a node of cfg and its scheduler without starting the
// node, and closes both at the end of the test, failing it if either
// does not close cleanly.
func tUnstarted(t testing.TB, cfg remote.Config) (*remote.Node, *scheduler.Scheduler) {
	t.Helper()
	node, err := remote.New(cfg)
	require.NoError(t, err)
	s, err := scheduler.New(scheduler.WithNode(node.Node()), scheduler.WithTransport(node))
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), tWait)
		defer cancel()
		assert.NoError(t, node.Close(ctx))
		assert.NoError(t, s.Shutdown(ctx))
	})
	return node, s
}

// stop closes the node, then its scheduler; safe to call twice.
func (tn *tNode) stop(t testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), tWait)
	defer cancel()
	_ = tn.Close(ctx)
	if err := tn.S.Shutdown(ctx); err != nil && err != scheduler.ErrClosed {
		t.Errorf("shutting down the scheduler of %s: %v", tn.Name(), err)
	}
}

// tJoin waits until every node sees every other up.
func tJoin(t testing.TB, nodes ...*tNode) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), tWait)
	defer cancel()
	for _, a := range nodes {
		for _, b := range nodes {
			if a != b {
				num, err := a.WaitPeer(ctx, b.Name())
				require.NoError(t, err, "%s waiting for %s", a.Name(), b.Name())
				require.Equal(t, b.Node.Node(), num)
			}
		}
	}
}

// tTwoNodes starts a server and nodes "a" and "b" on it (edit, if not
// nil, changes both configs), and waits until they see each other.
func tTwoNodes(t testing.TB, edit func(*remote.Config)) (*server.Server, *tNode, *tNode) {
	t.Helper()
	srv := tServer(t)
	a := tStart(t, srv.ClientURL(), "a", edit)
	b := tStart(t, srv.ClientURL(), "b", edit)
	tJoin(t, a, b)
	return srv, a, b
}

// tHoldInbound makes n take no batch until the returned open is called,
// or the test ends; open may be called more than once.
func tHoldInbound(t testing.TB, n *tNode) (open func()) {
	gate := make(chan struct{})
	var once sync.Once
	open = func() { once.Do(func() { close(gate) }) }
	remote.SetInboundHook(n.Node, func() { <-gate })
	t.Cleanup(open)
	return open
}

// tRecv receives from ch or fails after tWait.
func tRecv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(tWait):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// tEventually waits until cond holds, checking whenever the node reports
// a change and at least every 10ms, or fails after tWait.
func tEventually(t testing.TB, cond func() bool, format string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(tWait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until "+format, args...)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition with a deadline, not a synchronisation
	}
}

// tProc is a process whose steps are a function of the step's number and
// events.
type tProc struct {
	step func(p *tProc, n int, evs []scheduler.Event, out *scheduler.StepOutput) error
	n    int
}

func (p *tProc) Init(context.Context, string, payload.Payloads) error { return nil }
func (p *tProc) Step(evs []scheduler.Event, out *scheduler.StepOutput) error {
	n := p.n
	p.n++
	return p.step(p, n, evs, out)
}
func (p *tProc) Close() {}

// tSubmit submits a tProc stepping with step.
func tSubmit(t testing.TB, s *scheduler.Scheduler, step func(p *tProc, n int, evs []scheduler.Event, out *scheduler.StepOutput) error, opts ...scheduler.SubmitOption) scheduler.Handle {
	t.Helper()
	h, err := s.Submit(t.Context(), &tProc{step: step}, "run", nil, opts...)
	require.NoError(t, err)
	return h
}

// tWaitResult waits for h's result.
func tWaitResult(t testing.TB, h scheduler.Handle) (payload.Payload, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), tWait)
	defer cancel()
	res, err := h.Wait(ctx)
	require.NotErrorIs(t, err, context.DeadlineExceeded, "waiting for %v", h.PID())
	return res, err
}

// tCollector is a process that passes every event it gets to a channel
// with room for buf, and ends on cancel. An event beyond buf is a test
// failure: a step never blocks on the channel.
func tCollector(t testing.TB, s *scheduler.Scheduler, buf int, opts ...scheduler.SubmitOption) (scheduler.Handle, chan scheduler.Event) {
	t.Helper()
	ch := make(chan scheduler.Event, buf)
	h := tSubmit(t, s, func(_ *tProc, _ int, evs []scheduler.Event, out *scheduler.StepOutput) error {
		for _, ev := range evs {
			if ev.Type == scheduler.EventCancel {
				out.Done(payload.Payload{})
				return nil
			}
			select {
			case ch <- ev:
			default:
				t.Errorf("a collector got more than %d events: %v", buf, ev)
			}
		}
		return nil
	}, opts...)
	return h, ch
}

// tFirst submits a process that calls start at its first step and ends
// with the first event of type want that it gets; it returns that event.
func tFirst(t testing.TB, s *scheduler.Scheduler, want scheduler.EventType, start func(out *scheduler.StepOutput)) scheduler.Event {
	t.Helper()
	h := tSubmit(t, s, func(_ *tProc, n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
		if n == 0 {
			start(out)
			return nil
		}
		for _, ev := range evs {
			if ev.Type == want {
				out.Done(payload.Of(ev))
				return nil
			}
		}
		return nil
	})
	res, err := tWaitResult(t, h)
	require.NoError(t, err)
	return res.Value().(scheduler.Event)
}

// tSeqCollector submits a process that keeps the big-endian number of
// every []byte message it gets, in order, and ends with them ([]uint64)
// on cancel.
func tSeqCollector(t testing.TB, s *scheduler.Scheduler) scheduler.Handle {
	var seqs []uint64
	return tSubmit(t, s, func(_ *tProc, _ int, evs []scheduler.Event, out *scheduler.StepOutput) error {
		for _, ev := range evs {
			switch ev.Type {
			case scheduler.EventMessage:
				seqs = append(seqs, binary.BigEndian.Uint64(ev.Data.([]byte)))
			case scheduler.EventCancel:
				out.Done(payload.Of(seqs))
			}
		}
		return nil
	})
}

// tTellOnce submits a process that tells msg to to in its first step
// and ends with the first message it gets, which it passes on through
// the channel returned.
func tTellOnce(t testing.TB, s *scheduler.Scheduler, to relay.PID, msg any) (scheduler.Handle, <-chan scheduler.Event) {
	t.Helper()
	back := make(chan scheduler.Event, 1)
	h := tSubmit(t, s, func(_ *tProc, n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
		if n == 0 {
			out.Tell(to, msg)
			return nil
		}
		for _, ev := range evs {
			if ev.Type == scheduler.EventMessage {
				back <- ev
				out.Done(payload.Payload{})
				return nil
			}
		}
		return nil
	})
	return h, back
}

// tTeller is a process that tells to the messages in msgs, one per step,
// then ends with every event it got back.
func tTeller(t testing.TB, s *scheduler.Scheduler, to relay.PID, msgs ...any) scheduler.Handle {
	t.Helper()
	var back []scheduler.Event
	return tSubmit(t, s, func(_ *tProc, n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
		back = append(back, evs...)
		if n < len(msgs) {
			out.Tell(to, msgs[n])
			out.Continue()
			return nil
		}
		out.Done(payload.Of(back))
		return nil
	})
}

// tFlood submits to s a process that tells to n messages of a KiB each
// in its first step, passes every message that comes back to it to the
// returned channel (which has room for all n), and ends on cancel.
func tFlood(t testing.TB, s *scheduler.Scheduler, to relay.PID, n int) <-chan scheduler.Event {
	t.Helper()
	return tFloodOf(t, s, to, n, 1<<10)
}

// tFloodOf is tFlood with messages of size bytes.
func tFloodOf(t testing.TB, s *scheduler.Scheduler, to relay.PID, n, size int) <-chan scheduler.Event {
	t.Helper()
	back := make(chan scheduler.Event, n)
	tSubmit(t, s, func(_ *tProc, step int, evs []scheduler.Event, out *scheduler.StepOutput) error {
		if step == 0 {
			for range n {
				out.Tell(to, make([]byte, size))
			}
			return nil
		}
		for _, ev := range evs {
			if ev.Type == scheduler.EventMessage {
				back <- ev // room for all
			}
			if ev.Type == scheduler.EventCancel {
				out.Done(payload.Payload{})
			}
		}
		return nil
	})
	return back
}

// tSink submits to s a process that reads every message and ends on
// cancel: a recipient for tFillTheWay.
func tSink(t testing.TB, s *scheduler.Scheduler) scheduler.Handle {
	t.Helper()
	return tSubmit(t, s, func(_ *tProc, _ int, evs []scheduler.Event, out *scheduler.StepOutput) error {
		for _, ev := range evs {
			if ev.Type == scheduler.EventCancel {
				out.Done(payload.Payload{})
			}
		}
		return nil
	})
}

// tFillTheWay fills from's buffer for the node of sink, which takes
// nothing (see tHoldInbound), to the last few bytes: messages of first
// bytes, then of one byte, then with no body, each until one is refused
// with ErrBackpressure. Once from's writer has used the window it stalls
// for credit and nothing leaves the buffer, so it fills again what the
// writer had taken out meanwhile.
func tFillTheWay(t testing.TB, from *tNode, sink relay.PID, first int) {
	t.Helper()
	fill := func() {
		for _, body := range []any{make([]byte, first), []byte{1}, nil} {
			for {
				if err := from.S.Tell(sink, body); err != nil {
					require.ErrorIs(t, err, remote.ErrBackpressure)
					break
				}
			}
		}
	}
	fill()
	tEventually(t, func() bool { return from.Stats().CreditStalls > 0 }, "%s's link stalls for credit", from.Name())
	fill()
}

// tOverflowTheWayBack fills the room of answers on back's way to the
// node of s, whose way from back is full already (see tFillTheWay): a
// process of s tells flood messages of size bytes to a process of back
// that has ended, and back bounces every one, until it drops some.
func tOverflowTheWayBack(t testing.TB, s *scheduler.Scheduler, back *tNode, flood, size int) {
	t.Helper()
	ended := tSubmit(t, back.S, func(_ *tProc, _ int, _ []scheduler.Event, out *scheduler.StepOutput) error {
		out.Done(payload.Payload{})
		return nil
	})
	_, err := tWaitResult(t, ended)
	require.NoError(t, err)
	tFloodOf(t, s, ended.PID(), flood, size)
	tEventually(t, func() bool { return back.Stats().BouncedBack.NotFound == uint64(flood) }, "%s bounces the flood", back.Name())
	require.NotZero(t, back.Stats().Dropped.Overflow, "the way back is full")
}

// tAskBounded submits to s a process that asks to "question", bounds the wait
// by a third of tWait (a bound on a hang, not a synchronisation), and
// ends with the completion as its result.
func tAskBounded(t testing.TB, s *scheduler.Scheduler, to relay.PID) scheduler.Handle {
	t.Helper()
	return tSubmit(t, s, func(_ *tProc, n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
		if n == 0 {
			out.Request(1, to, "question")
			out.Timeout(1, tWait/3)
			return nil
		}
		for _, ev := range evs {
			if ev.Type == scheduler.EventYieldComplete {
				out.Done(payload.Of(ev))
			}
		}
		return nil
	})
}
