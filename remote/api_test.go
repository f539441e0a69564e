package remote_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	scheduler "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/relay"
	"github.com/procsched/scheduler/remote"
)

// TestNamesAndPeers: Named prints a PID with its node's name, this node's
// or a peer's, and the PID alone for a node it does not know; Lookup and
// Peers see this node's peers.
func TestNamesAndPeers(t *testing.T) {
	_, a, b := tTwoNodes(t, nil)
	own := relay.PID{Node: a.Node.Node(), ID: 42}
	theirs := relay.PID{Node: b.Node.Node(), ID: 7}
	stranger := relay.PID{Node: 1, ID: 9}

	assert.Equal(t, "a"+own.String(), a.Named(own).String())
	assert.Equal(t, "b"+theirs.String(), a.Named(theirs).String())
	assert.Equal(t, remote.NamedPID{PID: stranger}, a.Named(stranger))
	assert.Equal(t, stranger.String(), a.Named(stranger).String())
	var log bytes.Buffer
	slog.New(slog.NewTextHandler(&log, nil)).Info("x", "who", a.Named(theirs))
	assert.Contains(t, log.String(), fmt.Sprintf("who.node=b who.pid=%v", theirs))

	num, ok := a.Lookup("a")
	assert.True(t, ok)
	assert.Equal(t, a.Node.Node(), num, "its own name")
	num, ok = a.Lookup("b")
	assert.True(t, ok)
	assert.Equal(t, b.Node.Node(), num)
	_, ok = a.Lookup("nobody")
	assert.False(t, ok)
	assert.Equal(t, []remote.Peer{{Name: "b", Node: b.Node.Node(), Up: true}}, a.Peers())
}

// TestSendChecks: Send refuses what cannot go, with the documented
// errors, counts what it refuses, and delivers a message for its own
// scheduler there.
func TestSendChecks(t *testing.T) {
	_, a, b := tTwoNodes(t, nil)
	recv, got := tCollector(t, b.S, 4)
	local, gotLocal := tCollector(t, a.S, 4)

	err := a.Send(relay.Message{To: relay.PID{Node: b.Node.Node()}, Data: "to no process"})
	assert.ErrorIs(t, err, scheduler.ErrProcessNotFound, "ID 0")
	err = a.Send(relay.Message{From: relay.PID{Node: b.Node.Node(), ID: 3}, To: recv.PID(), Data: "a forged sender"})
	assert.ErrorIs(t, err, remote.ErrNotEncodable, "a sender of another node")
	err = a.Send(relay.Message{To: recv.PID(), Data: 42})
	assert.ErrorIs(t, err, remote.ErrNotEncodable, "a body that does not cross")
	err = a.Send(relay.Message{To: relay.PID{Node: 1, ID: 1}, Data: "x"})
	assert.ErrorIs(t, err, remote.ErrUnknownNode)
	assert.Equal(t, remote.Reasons{NotFound: 1, NotEncodable: 2, UnknownNode: 1}, a.Stats().Refused)

	// An undelivered message with no sender to go back to is accepted
	// and goes nowhere.
	require.NoError(t, a.Send(relay.Message{To: recv.PID(), Data: "lost", Err: scheduler.ErrProcessNotFound}))
	require.NoError(t, a.Send(relay.Message{To: recv.PID(), Data: "after"}))
	assert.Equal(t, "after", tRecv(t, got, "the message after").Data)

	require.NoError(t, a.Send(relay.Message{To: local.PID(), Data: "here"}))
	assert.Equal(t, "here", tRecv(t, gotLocal, "the local message").Data)
}

// TestMonitorOutsideAnyProcess: Node.Monitor watches a process of its own
// scheduler as a remote one, and one whose node is down, or with the
// node not running, completes at once with ExitGone and the error.
func TestMonitorOutsideAnyProcess(t *testing.T) {
	_, a, b := tTwoNodes(t, nil)
	local, _ := tCollector(t, a.S, 1)
	exits := make(chan scheduler.Exit, 1)
	stop := a.Monitor(local.PID(), func(e scheduler.Exit) { exits <- e })
	require.NoError(t, a.S.Terminate(local.PID()))
	e := tRecv(t, exits, "the local process's end")
	assert.Equal(t, local.PID(), e.PID)
	assert.Equal(t, scheduler.ExitTerminated, e.Reason)
	assert.False(t, stop(), "stop after the end")

	// A monitor stopped before the end is never called, and b forgets it.
	remoteProc, _ := tCollector(t, b.S, 1)
	stop = a.Monitor(remoteProc.PID(), func(e scheduler.Exit) { exits <- e })
	tEventually(t, func() bool { return b.Stats().MonitorsHeld == 1 }, "b holds the monitor")
	assert.True(t, stop(), "stop before the end")
	tEventually(t, func() bool { return b.Stats().MonitorsHeld == 0 && a.Stats().Pending == 0 }, "both forget it")
	require.NoError(t, b.S.Terminate(remoteProc.PID()))

	// A nil function panics at the call, for a process of either node.
	for _, pid := range []relay.PID{local.PID(), remoteProc.PID()} {
		assert.Panics(t, func() { a.Monitor(pid, nil) }, "%v", pid)
	}

	// b goes: a monitor of one of its PIDs completes at once.
	b.stop(t)
	tRecv(t, a.Down, "a to see b leave")
	a.Monitor(remoteProc.PID(), func(e scheduler.Exit) { exits <- e })
	e = tRecv(t, exits, "the monitor of a process of a down node")
	assert.Equal(t, scheduler.ExitGone, e.Reason)
	assert.ErrorIs(t, e.Err, remote.ErrNodeDown)

	require.NoError(t, a.Close(t.Context()))
	a.Monitor(relay.PID{Node: a.Node.Node(), ID: 1}, func(e scheduler.Exit) { exits <- e })
	e = tRecv(t, exits, "the monitor after Close")
	assert.Equal(t, scheduler.ExitGone, e.Reason)
	assert.ErrorIs(t, e.Err, remote.ErrClosed)
}

// TestServerMaxPayloadBoundsMessages: when the server's maximum payload
// is below half the window, it bounds the largest message: a larger one
// is refused at once with ErrNotEncodable, and a smaller one crosses.
func TestServerMaxPayloadBoundsMessages(t *testing.T) {
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true, MaxPayload: 16 << 10})
	require.NoError(t, err)
	s.Start()
	require.True(t, s.ReadyForConnections(tWait))
	t.Cleanup(func() { tStopServer(s) })
	a := tStart(t, s.ClientURL(), "a", nil)
	b := tStart(t, s.ClientURL(), "b", nil)
	tJoin(t, a, b)
	recv, got := tCollector(t, b.S, 1)

	err = a.S.Tell(recv.PID(), make([]byte, 20<<10))
	assert.ErrorIs(t, err, remote.ErrNotEncodable)
	require.NoError(t, a.S.Tell(recv.PID(), make([]byte, 12<<10)))
	assert.Len(t, tRecv(t, got, "the message that fits").Data, 12<<10)
}

// TestMaxBufferedBoundsMessages: a message larger than MaxBuffered can
// never wait for its peer, so it is refused at once with ErrNotEncodable,
// as one larger than a batch is, not with ErrBackpressure, which says
// that sending again later may succeed; a smaller one crosses.
func TestMaxBufferedBoundsMessages(t *testing.T) {
	_, a, b := tTwoNodes(t, func(cfg *remote.Config) { cfg.MaxBuffered = 16 << 10 })
	recv, got := tCollector(t, b.S, 1)

	err := a.S.Tell(recv.PID(), make([]byte, 20<<10))
	assert.ErrorIs(t, err, remote.ErrNotEncodable)
	assert.False(t, errors.Is(err, remote.ErrBackpressure), "no wait makes room for it: %v", err)
	assert.Equal(t, uint64(1), a.Stats().Refused.NotEncodable)
	require.NoError(t, a.S.Tell(recv.PID(), make([]byte, 12<<10)))
	assert.Len(t, tRecv(t, got, "the message that fits").Data, 12<<10)
}

// TestHugeMaxBuffered: MaxBuffered has no upper bound, and answers to
// what a peer sent (bounces, spawn answers), which may use twice as much,
// still go back when it is as large as an int holds: a message to an
// ended process comes back, and a spawn from the peer gets its answer.
func TestHugeMaxBuffered(t *testing.T) {
	srv := tServer(t)
	a := tStart(t, srv.ClientURL(), "a", nil)
	b := tStart(t, srv.ClientURL(), "b", func(cfg *remote.Config) { cfg.MaxBuffered = math.MaxInt })
	tJoin(t, a, b)
	tRegister(t, b)
	ended, _ := tCollector(t, b.S, 1)
	require.NoError(t, b.S.Terminate(ended.PID()))
	_, err := tWaitResult(t, ended)
	require.NoError(t, err)

	ev := tBounceOf(t, a.S, ended.PID(), "late")
	assert.ErrorIs(t, ev.Error, scheduler.ErrProcessNotFound)
	assert.Equal(t, "late", ev.Data)
	ctx, cancel := context.WithTimeout(context.Background(), tWait)
	defer cancel()
	child, err := a.Spawn(ctx, "b", "echo", "run", nil)
	require.NoError(t, err)
	assert.Equal(t, b.Node.Node(), child.Node)
	assert.Zero(t, b.Stats().Dropped.Overflow, "no answer was dropped")
}

// TestSpawnFactoryFailures: a factory that panics fails the spawn with
// an error matching scheduler.ErrPanic, on another node as here, and a
// node with no kind registered at all answers ErrUnknownKind.
func TestSpawnFactoryFailures(t *testing.T) {
	_, a, b := tTwoNodes(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), tWait)
	defer cancel()
	_, err := a.Spawn(ctx, "b", "echo", "run", nil)
	assert.ErrorIs(t, err, remote.ErrUnknownKind, "no kind registered")
	for _, n := range []*tNode{a, b} {
		require.NoError(t, n.Register("panics", func() scheduler.Process { panic("no process today") }))
	}
	for _, node := range []string{"b", ""} {
		_, err = a.Spawn(ctx, node, "panics", "run", nil)
		assert.ErrorIs(t, err, scheduler.ErrPanic, "on %q", node)
		assert.ErrorContains(t, err, "no process today")
	}
	assert.ErrorIs(t, a.Register("", func() scheduler.Process { return nil }), remote.ErrInvalidConfig)
	assert.ErrorIs(t, a.Register("nothing", nil), remote.ErrInvalidConfig)
}

// TestStartRetriedAfterFailure: a Start whose context has ended (past
// its deadline, or cancelled with no deadline) returns its error at once
// and leaves the node as it was, not started, and a later Start joins.
func TestStartRetriedAfterFailure(t *testing.T) {
	srv := tServer(t)
	b := tStart(t, srv.ClientURL(), "b", nil)
	expired, cancelExpired := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	t.Cleanup(cancelExpired)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for i, tc := range []struct {
		name string
		ctx  context.Context
		want error
	}{
		{"past its deadline", expired, context.DeadlineExceeded},
		{"cancelled with no deadline", cancelled, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node, s := tUnstarted(t, remote.Config{Cluster: "test", Name: fmt.Sprintf("a%d", i), URL: srv.ClientURL(), Heartbeat: 50 * time.Millisecond})
			err := node.Start(tc.ctx, s)
			assert.ErrorIs(t, err, tc.want)
			assert.ErrorIs(t, node.Send(relay.Message{To: relay.PID{Node: b.Node.Node(), ID: 1}}), remote.ErrClosed, "not started")

			require.NoError(t, node.Start(t.Context(), s))
			ctx, cancelWait := context.WithTimeout(context.Background(), tWait)
			defer cancelWait()
			num, err := node.WaitPeer(ctx, "b")
			require.NoError(t, err)
			assert.Equal(t, b.Node.Node(), num)
			ev := tYield(t, s, node.SpawnCommand(), remote.Spawn{Node: "b", Kind: "nope", Method: "run"})
			assert.ErrorIs(t, ev.Error, remote.ErrUnknownKind, "the spawn handler is registered")
		})
	}
}

// tEndsWhileWaiting is a context that is alive at its first look and has
// ended (canceled) from then on: Start sees it alive, and it has ended
// by the time Start waits for the server.
type tEndsWhileWaiting struct {
	context.Context
	looked atomic.Bool
	done   chan struct{}
}

func (c *tEndsWhileWaiting) Done() <-chan struct{} { return c.done }

func (c *tEndsWhileWaiting) Err() error {
	if c.looked.Swap(true) {
		return context.Canceled
	}
	return nil
}

// TestStartAgainAfterTheWaitEnded: a Start whose context ends while it
// waits for the server leaves the spawn command claimed, as it says, and
// a later Start on the same scheduler joins with it.
func TestStartAgainAfterTheWaitEnded(t *testing.T) {
	srv := tServer(t)
	node, s := tUnstarted(t, remote.Config{Cluster: "test", Name: "a", URL: srv.ClientURL()})

	ending := &tEndsWhileWaiting{Context: context.Background(), done: make(chan struct{})}
	close(ending.done)
	require.ErrorIs(t, node.Start(ending, s), context.Canceled)
	assert.ErrorIs(t, s.SetHandler(node.SpawnCommand(), func(scheduler.Call) error { return nil }), scheduler.ErrCommandTaken, "the spawn command stays claimed")
	ev := tYield(t, s, node.SpawnCommand(), remote.Spawn{Kind: "nope", Method: "run"})
	assert.ErrorIs(t, ev.Error, remote.ErrClosed, "spawns fail while the node is not started")

	require.NoError(t, node.Start(t.Context(), s), "Start again on the same scheduler")
	ev = tYield(t, s, node.SpawnCommand(), remote.Spawn{Kind: "nope", Method: "run"})
	assert.ErrorIs(t, ev.Error, remote.ErrUnknownKind, "the spawn handler serves")
}

// TestWaitPeerAndLookup: WaitPeer and Lookup know this node by its own
// name, as Spawn does; WaitPeer returns a peer up already even with a
// context that has ended, and ctx's error for one that is not; a peer
// that leaves is no longer looked up, nor found by a spawn on its name
// (ErrUnknownNode), and one that comes back under the same name is
// found under its new number.
func TestWaitPeerAndLookup(t *testing.T) {
	srv, a, b := tTwoNodes(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), tWait)
	defer cancel()
	ended, end := context.WithCancel(context.Background())
	end()

	num, err := a.WaitPeer(ended, "a")
	require.NoError(t, err, "its own name")
	assert.Equal(t, a.Node.Node(), num)
	num, err = a.WaitPeer(ended, "b")
	require.NoError(t, err, "a peer up already")
	assert.Equal(t, b.Node.Node(), num)
	_, err = a.WaitPeer(ended, "nobody")
	assert.ErrorIs(t, err, context.Canceled)

	old := b.Node.Node()
	b.stop(t)
	assert.Equal(t, old, tRecv(t, a.Down, "a to see b leave").Node)
	_, ok := a.Lookup("b")
	assert.False(t, ok, "a node that left")
	_, err = a.WaitPeer(ended, "b")
	assert.ErrorIs(t, err, context.Canceled, "a node that left")
	_, err = a.Spawn(ctx, "b", "echo", "run", nil)
	assert.ErrorIs(t, err, remote.ErrUnknownNode, "a spawn on the name of a node that left: no live node has it")

	waited := make(chan uint32, 1)
	go func() {
		num, err := a.WaitPeer(ctx, "b")
		assert.NoError(t, err)
		waited <- num
	}()
	b2 := tStart(t, srv.ClientURL(), "b", nil)
	require.NotEqual(t, old, b2.Node.Node(), "a new incarnation")
	assert.Equal(t, b2.Node.Node(), tRecv(t, waited, "WaitPeer to see b back"))
	num, ok = a.Lookup("b")
	assert.True(t, ok)
	assert.Equal(t, b2.Node.Node(), num)
}

// TestClosedNodeKnowsNoPeers: once Close has begun, a node knows no
// peer: Lookup finds none, WaitPeer returns ErrClosed at once for a peer
// that was up and wakes a WaitPeer waiting for one with it, and Spawn
// fails with ErrClosed, on another node as on this one; its own name is
// still its own number, for Lookup and WaitPeer.
func TestClosedNodeKnowsNoPeers(t *testing.T) {
	_, a, b := tTwoNodes(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), tWait)
	defer cancel()
	waiting := make(chan error, 1)
	go func() {
		_, err := a.WaitPeer(ctx, "nobody")
		waiting <- err
	}()

	require.NoError(t, a.Close(ctx))
	_, ok := a.Lookup("b")
	assert.False(t, ok, "a closed node knows no peer")
	num, ok := a.Lookup("a")
	assert.True(t, ok, "its own name")
	assert.Equal(t, a.Node.Node(), num)
	_, err := a.WaitPeer(ctx, "b")
	assert.ErrorIs(t, err, remote.ErrClosed, "WaitPeer for a peer that was up")
	assert.ErrorIs(t, tRecv(t, waiting, "the waiting WaitPeer to return"), remote.ErrClosed)
	num, err = a.WaitPeer(ctx, "a")
	require.NoError(t, err, "WaitPeer for its own name")
	assert.Equal(t, a.Node.Node(), num)
	_, err = a.Spawn(ctx, "b", "echo", "run", nil)
	assert.ErrorIs(t, err, remote.ErrClosed)
	_, err = a.Spawn(ctx, "a", "echo", "run", nil)
	assert.ErrorIs(t, err, remote.ErrClosed, "a spawn on the node itself")
	assert.Equal(t, "a", tRecv(t, b.Down, "b to see a leave").Name)
}

// TestStartOnAnotherScheduler: a Start that failed after claiming the
// spawn command on one scheduler leaves the node tied to it while it
// runs: Start with another scheduler of the same node number is refused
// (that one's processes would otherwise yield spawns to a node serving
// another scheduler, and an awaited spawn of a child here would be
// watched there), and Start with the first still works. Once the first
// has shut down, its claim no longer matters, and Start with another
// works.
func TestStartOnAnotherScheduler(t *testing.T) {
	srv := tServer(t)
	failStart := func(t *testing.T, node *remote.Node, s *scheduler.Scheduler) {
		t.Helper()
		ending := &tEndsWhileWaiting{Context: context.Background(), done: make(chan struct{})}
		close(ending.done)
		require.ErrorIs(t, node.Start(ending, s), context.Canceled)
	}
	another := func(t *testing.T, node *remote.Node) *scheduler.Scheduler {
		t.Helper()
		s, err := scheduler.New(scheduler.WithNode(node.Node()), scheduler.WithTransport(node))
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
		return s
	}

	t.Run("refused while the first runs", func(t *testing.T) {
		node, s := tUnstarted(t, remote.Config{Cluster: "test", Name: "a", URL: srv.ClientURL()})
		failStart(t, node, s)
		err := node.Start(t.Context(), another(t, node))
		assert.ErrorIs(t, err, remote.ErrInvalidConfig, "Start with another scheduler while the first runs")
		require.NoError(t, node.Start(t.Context(), s), "Start with the first")
		ev := tYield(t, s, node.SpawnCommand(), remote.Spawn{Kind: "nope", Method: "run"})
		assert.ErrorIs(t, ev.Error, remote.ErrUnknownKind, "the spawn handler serves the first")
	})

	t.Run("allowed once the first has shut down", func(t *testing.T) {
		node, err := remote.New(remote.Config{Cluster: "test", Name: "b", URL: srv.ClientURL()})
		require.NoError(t, err)
		first, err := scheduler.New(scheduler.WithNode(node.Node()), scheduler.WithTransport(node))
		require.NoError(t, err)
		failStart(t, node, first)
		require.NoError(t, first.Shutdown(t.Context()))
		s := another(t, node)
		t.Cleanup(func() { assert.NoError(t, node.Close(context.Background())) }) // before s shuts down
		require.NoError(t, node.Start(t.Context(), s), "Start with another scheduler once the first has shut down")
		ev := tYield(t, s, node.SpawnCommand(), remote.Spawn{Kind: "nope", Method: "run"})
		assert.ErrorIs(t, ev.Error, remote.ErrUnknownKind, "the spawn handler serves the second")
	})
}

// TestNilContextRefused: every method of a Node that takes a context
// refuses a nil one with an error wrapping scheduler.ErrNilContext and
// does nothing, as the scheduler's own methods do: Start leaves the node
// to start and Close leaves it running (the test's cleanup closes it):
// a Close that panicked on the nil context part way through would leave
// the node half closed.
func TestNilContextRefused(t *testing.T) {
	srv := tServer(t)
	var nilCtx context.Context
	node, s := tUnstarted(t, remote.Config{Cluster: "test", Name: "a", URL: srv.ClientURL()})
	refused := func(what string, call func() error) {
		t.Helper()
		var err error
		require.NotPanics(t, func() { err = call() }, what)
		require.ErrorIs(t, err, scheduler.ErrNilContext, what)
	}
	refused("Start", func() error { return node.Start(nilCtx, s) })
	require.NoError(t, node.Start(t.Context(), s), "Start after the refused one")
	refused("Close", func() error { return node.Close(nilCtx) })
	refused("WaitPeer", func() error { _, err := node.WaitPeer(nilCtx, "b"); return err })
	refused("Spawn", func() error { _, err := node.Spawn(nilCtx, "a", "kind", "run", nil); return err })
}
