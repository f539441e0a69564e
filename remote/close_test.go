package remote_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	scheduler "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/relay"
	"github.com/procsched/scheduler/remote"
)

func TestCloseFlushesAndSaysGoodbye(t *testing.T) {
	srv := tServer(t)
	a := tStart(t, srv.ClientURL(), "a", func(cfg *remote.Config) { cfg.FailureTimeout = time.Minute })
	b := tStart(t, srv.ClientURL(), "b", func(cfg *remote.Config) { cfg.FailureTimeout = time.Minute })
	tJoin(t, a, b)
	const n = 5000
	recv := tStreamReceiver(t, b.S, n)
	// Everything told just before Close arrives: Close waits until b
	// has granted it.
	body := make([]byte, 8)
	for range n {
		require.NoError(t, a.S.Tell(recv.PID(), body))
	}
	ctx, cancel := context.WithTimeout(context.Background(), tWait)
	defer cancel()
	require.NoError(t, a.Close(ctx))
	res, err := tWaitResult(t, recv)
	require.NoError(t, err)
	assert.Equal(t, n, res.Value().(streamResult).got)

	// b hears the goodbye: a is down at once, not after a timeout.
	down := tRecv(t, b.Down, "b to see a leave")
	assert.Equal(t, "a", down.Name)
	assert.ErrorIs(t, down.Reason, remote.ErrNodeDown)
	assert.Contains(t, down.Reason.Error(), "left the cluster")

	// Sends after Close fail with a clear error.
	err = a.S.Tell(relay.PID{Node: b.Node.Node(), ID: 1}, "late")
	assert.ErrorIs(t, err, remote.ErrClosed)
	assert.ErrorIs(t, err, scheduler.ErrClosed)
	assert.ErrorIs(t, a.Close(ctx), remote.ErrClosed, "a second Close")
	assert.ErrorIs(t, a.Start(ctx, a.S), remote.ErrClosed, "Start after Close")
	ev := tYield(t, a.S, a.SpawnCommand(), remote.Spawn{Node: "b", Kind: "echo", Method: "run"})
	assert.ErrorIs(t, ev.Error, remote.ErrClosed)
}

func TestCloseDeadlineReturnsWaitingMessages(t *testing.T) {
	srv := tServer(t)
	small := func(cfg *remote.Config) {
		cfg.Window, cfg.MaxBuffered = 8<<10, 1<<20
		cfg.FailureTimeout = time.Minute
	}
	a := tStart(t, srv.ClientURL(), "a", small)
	b := tStart(t, srv.ClientURL(), "b", small)
	tJoin(t, a, b)
	tHoldInbound(t, b)
	recv, _ := tCollector(t, b.S, 64)

	// A process sends more than the window: the rest waits in the buffer.
	const n = 64
	back := tFlood(t, a.S, recv.PID(), n)
	tEventually(t, func() bool { st := a.Stats(); return st.CreditStalls > 0 && st.Buffered > 0 }, "a's link waits for credit")

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := a.Close(ctx)
	assert.ErrorIs(t, err, context.DeadlineExceeded, "Close says it gave up waiting")
	// What never left goes back to its sender with ErrClosed; what was in
	// flight is not returned (it may still arrive).
	returned := a.Stats().Returned.Closed
	assert.Positive(t, returned)
	assert.Less(t, returned, uint64(n), "the messages in flight are not returned")
	for range returned {
		ev := tRecv(t, back, "the waiting messages to come back")
		assert.ErrorIs(t, ev.Error, remote.ErrClosed)
		assert.Equal(t, recv.PID(), ev.From)
		assert.Len(t, ev.Data, 1<<10, "the body comes back")
	}
}

func TestStartAndConfigErrors(t *testing.T) {
	srv := tServer(t)
	for _, tc := range []struct {
		name  string
		field string // the field the error names
		cfg   remote.Config
	}{
		{"no cluster", "Cluster", remote.Config{Name: "a"}},
		{"a cluster with a dot", "Cluster", remote.Config{Cluster: "a.b", Name: "a"}},
		{"a cluster with a wildcard", "Cluster", remote.Config{Cluster: "a*", Name: "a"}},
		{"a cluster with a space", "Cluster", remote.Config{Cluster: "a b", Name: "a"}},
		{"a cluster too long for a subject", "Cluster", remote.Config{Cluster: strings.Repeat("c", 4000), Name: "a"}},
		{"no name", "Name", remote.Config{Cluster: "c"}},
		{"a name that is not UTF-8", "Name", remote.Config{Cluster: "c", Name: "\xff"}},
		{"a heartbeat of a few nanoseconds", "Heartbeat", remote.Config{Cluster: "c", Name: "a", Heartbeat: 3 * time.Nanosecond}},
		{"a failure timeout under three heartbeats", "FailureTimeout", remote.Config{Cluster: "c", Name: "a", Heartbeat: time.Second, FailureTimeout: 2 * time.Second}},
		{"a tiny window", "Window", remote.Config{Cluster: "c", Name: "a", Window: 100}},
		{"a reserved command", "SpawnCommand", remote.Config{Cluster: "c", Name: "a", SpawnCommand: 3}},
		{"a command above the scheduler's range", "SpawnCommand", remote.Config{Cluster: "c", Name: "a", SpawnCommand: 1<<16 + 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.URL = srv.ClientURL()
			node, err := remote.New(tc.cfg)
			if node != nil {
				t.Cleanup(func() { _ = node.Close(context.Background()) })
			}
			require.ErrorIs(t, err, remote.ErrInvalidConfig)
			assert.Contains(t, err.Error(), tc.field, "the error names the field")
			assert.NotContains(t, err.Error(), "frame", "a Config is no frame")
		})
	}

	node, err := remote.New(remote.Config{Cluster: "c", Name: "a", URL: srv.ClientURL()})
	require.NoError(t, err)
	wrong, err := scheduler.New(scheduler.WithNode(node.Node() + 1))
	require.NoError(t, err)
	defer func() { _ = wrong.Shutdown(context.Background()) }()
	assert.ErrorIs(t, node.Start(t.Context(), wrong), remote.ErrInvalidConfig, "a scheduler of another node number")
	assert.ErrorIs(t, node.Start(t.Context(), nil), remote.ErrInvalidConfig)
	err = node.Send(relay.Message{To: relay.PID{Node: 5, ID: 1}})
	assert.ErrorIs(t, err, remote.ErrClosed, "a send before Start")
	require.NoError(t, node.Close(t.Context()), "Close before Start")

	_, err = remote.New(remote.Config{Cluster: "c", Name: "a", URL: "nats://127.0.0.1:1", Options: nil})
	assert.Error(t, err, "no server")
	assert.False(t, errors.Is(err, remote.ErrInvalidConfig))
}

func TestNodeNumbersDoNotCollide(t *testing.T) {
	srv := tServer(t)
	a := tStart(t, srv.ClientURL(), "a", nil)
	// The first number drawn is a's: the probe finds a answering for it,
	// and b draws again.
	draws := []uint32{a.Node.Node(), 0, a.Node.Node() + 1}
	restore := remote.SetRandomNode(func() uint32 {
		v := draws[0]
		draws = draws[1:]
		return v
	})
	b := tStart(t, srv.ClientURL(), "b", nil)
	restore()
	assert.Equal(t, a.Node.Node()+1, b.Node.Node())
	tJoin(t, a, b)
	assert.Equal(t, "b", a.Named(relay.PID{Node: b.Node.Node(), ID: 1}).Node)
	num, ok := a.Lookup("b")
	assert.True(t, ok)
	assert.Equal(t, b.Node.Node(), num)
}

// TestNodeNumberCheckOutwaitsAShortHeartbeat: the check that a number
// is free waits for an answer at least a second, however short the
// heartbeat, so a node slow to answer for its number still keeps it.
// Here whoever holds number 7777 answers 100ms after the probe, far
// beyond a heartbeat of 1ms.
func TestNodeNumberCheckOutwaitsAShortHeartbeat(t *testing.T) {
	srv := tServer(t)
	const taken = 7777
	holder, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	defer holder.Close()
	_, ctl, _ := remote.Subjects("test", taken)
	_, err = holder.Subscribe(ctl, func(m *nats.Msg) {
		time.AfterFunc(100*time.Millisecond, func() { _ = m.Respond([]byte("here")) }) // a slow answer, not a synchronisation
	})
	require.NoError(t, err)
	require.NoError(t, holder.Flush())

	draws := []uint32{taken, taken + 1}
	restore := remote.SetRandomNode(func() uint32 {
		v := draws[0]
		draws = draws[1:]
		return v
	})
	defer restore()
	node, err := remote.New(remote.Config{Cluster: "test", Name: "b", URL: srv.ClientURL(), Heartbeat: time.Millisecond})
	require.NoError(t, err)
	defer func() { _ = node.Close(context.Background()) }()
	assert.Equal(t, uint32(taken+1), node.Node(), "the number whose holder answered late is taken")
}

// tLockedBuffer is a buffer a logger writes to from the node's
// goroutines while the test reads it.
type tLockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *tLockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *tLockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestNameClashIsCounted: two nodes with one name count the clash, log
// it at Error, and take each other for no peer.
func TestNameClashIsCounted(t *testing.T) {
	srv := tServer(t)
	var log tLockedBuffer
	first := tStart(t, srv.ClientURL(), "a", func(cfg *remote.Config) {
		cfg.Logger = slog.New(slog.NewTextHandler(&log, nil))
	})
	second := tStart(t, srv.ClientURL(), "a", nil)
	tEventually(t, func() bool { return first.Stats().Conflicts > 0 && second.Stats().Conflicts > 0 }, "both nodes see the clash")
	// The clash is counted, then logged.
	tEventually(t, func() bool {
		return strings.Contains(log.String(), "level=ERROR msg=\"remote: another node uses this node's number or name\"")
	}, "a clash is logged at Error: %q", log.String())
	assert.Empty(t, first.Peers(), "a node does not take one with its own name for a peer")
	assert.Empty(t, second.Peers())
}

// tProxy forwards TCP connections to a NATS server until it is frozen:
// from then on it forwards nothing, in either direction, and keeps the
// connections open, as a server whose machine vanished does (the
// client notices only when its pings go unanswered, minutes later).
type tProxy struct {
	url    string
	frozen chan struct{} // closed by freeze
	once   sync.Once
}

// tStartProxy starts a proxy to the server at addr (host:port) and
// stops it at the end of the test.
func tStartProxy(t testing.TB, addr string) *tProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &tProxy{url: "nats://" + ln.Addr().String(), frozen: make(chan struct{})}
	done := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	track := func(c net.Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	}
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if err != nil {
				return
			}
			select {
			case <-p.frozen:
				<-done // hold what was read, and the connection, to the end
				return
			default:
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", addr)
			if err != nil {
				_ = c.Close()
				continue
			}
			track(c)
			track(s)
			wg.Add(2)
			go pipe(s, c)
			go pipe(c, s)
		}
	}()
	t.Cleanup(func() {
		close(done)
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return p
}

// freeze makes the proxy forward nothing more.
func (p *tProxy) freeze() { p.once.Do(func() { close(p.frozen) }) }

// TestCloseSaysTheServerDidNotConfirm: Close right after the server
// vanished, before the client noticed, cannot have its last messages
// (the goodbye among them) confirmed by the server: it returns an error
// saying so, wrapping ErrDisconnected and the cause, once ctx ends or,
// with no deadline, once the flush timeout has passed; and it releases
// everything, as any Close does.
func TestCloseSaysTheServerDidNotConfirm(t *testing.T) {
	srv := tServer(t)
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{"ctx with a deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 200*time.Millisecond)
		}, context.DeadlineExceeded},
		{"ctx with no deadline", func() (context.Context, context.CancelFunc) {
			return context.WithCancel(context.Background())
		}, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer remote.SetFlushTimeout(200 * time.Millisecond)()
			proxy := tStartProxy(t, srv.Addr().String())
			a := tStart(t, proxy.url, "a", func(cfg *remote.Config) { cfg.FailureTimeout = time.Minute })
			proxy.freeze()
			ctx, cancel := tc.ctx()
			defer cancel()
			err := a.Close(ctx)
			require.Error(t, err, "Close returned nil though the server confirmed nothing")
			assert.ErrorIs(t, err, remote.ErrDisconnected)
			assert.ErrorIs(t, err, tc.want)
			assert.ErrorIs(t, a.Close(ctx), remote.ErrClosed, "closed all the same")
			t.Log(err)
		})
	}
}

// TestStartAndCloseOutOfOrder: Start on a running node refuses with
// ErrClosed and leaves it running; of two Closes at once, one closes
// the node and the other returns ErrClosed; a node closed before Start
// cannot be started, and refuses spawns.
func TestStartAndCloseOutOfOrder(t *testing.T) {
	srv, a, b := tTwoNodes(t, nil)
	tRegister(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), tWait)
	defer cancel()

	assert.ErrorIs(t, a.Start(ctx, a.S), remote.ErrClosed, "Start on a running node")
	child, err := a.Spawn(ctx, "b", "echo", "run", nil)
	require.NoError(t, err, "the node still runs")
	require.NoError(t, a.S.Tell(child, "stop"))

	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- a.Close(ctx) }()
	}
	first, second := tRecv(t, errs, "a Close"), tRecv(t, errs, "the other Close")
	if first != nil {
		first, second = second, first
	}
	assert.NoError(t, first, "one Close closes the node")
	assert.ErrorIs(t, second, remote.ErrClosed, "the other says it is closed")
	assert.Equal(t, "a", tRecv(t, b.Down, "b to see a leave").Name)

	node, err := remote.New(remote.Config{Cluster: "test", Name: "c", URL: srv.ClientURL()})
	require.NoError(t, err)
	s, err := scheduler.New(scheduler.WithNode(node.Node()), scheduler.WithTransport(node))
	require.NoError(t, err)
	defer func() { _ = s.Shutdown(context.Background()) }()
	require.NoError(t, node.Close(ctx), "Close before Start")
	assert.ErrorIs(t, node.Start(ctx, s), remote.ErrClosed, "Start after Close")
	assert.ErrorIs(t, node.Close(ctx), remote.ErrClosed, "Close again")
	_, err = node.Spawn(ctx, "b", "echo", "run", nil)
	assert.ErrorIs(t, err, remote.ErrClosed)
	_, err = node.WaitPeer(ctx, "c")
	assert.NoError(t, err, "its own name")
}

// TestNodeNumberHeldBySomeoneSilentIsTaken: on a server that reports
// "no responders", a number whose control subject someone holds without
// answering the check (a node of another wire version, or one too busy
// to answer within the check) is taken, and the node draws again.
func TestNodeNumberHeldBySomeoneSilentIsTaken(t *testing.T) {
	srv := tServer(t)
	const taken = 4242
	holder, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	defer holder.Close()
	_, ctl, _ := remote.Subjects("test", taken)
	_, err = holder.Subscribe(ctl, func(*nats.Msg) {}) // never answers
	require.NoError(t, err)
	require.NoError(t, holder.Flush())

	draws := []uint32{taken, taken + 1}
	restore := remote.SetRandomNode(func() uint32 {
		v := draws[0]
		draws = draws[1:]
		return v
	})
	defer restore()
	node, err := remote.New(remote.Config{Cluster: "test", Name: "b", URL: srv.ClientURL()})
	require.NoError(t, err)
	defer func() { _ = node.Close(context.Background()) }()
	assert.Equal(t, uint32(taken+1), node.Node(), "the number someone holds is not taken")
}
