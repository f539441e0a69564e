package remote_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	scheduler "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/remote"
)

// TestConnectionClosedForGood: when the node's NATS connection closes
// for good while it runs (here it may not reconnect, and the server goes
// away), the messages waiting for its peers go back to their senders
// with ErrClosed, and sends, spawns and monitors fail with ErrClosed
// instead of waiting for a connection that never comes back. The user's
// closed handler is still called.
func TestConnectionClosedForGood(t *testing.T) {
	srv := tServer(t)
	closed := make(chan struct{})
	a := tStart(t, srv.ClientURL(), "a", func(cfg *remote.Config) {
		cfg.Window, cfg.MaxBuffered = 8<<10, 1<<20
		cfg.FailureTimeout = time.Minute
		cfg.Options = []nats.Option{nats.NoReconnect(), nats.ClosedHandler(func(*nats.Conn) { close(closed) })}
	})
	b := tStart(t, srv.ClientURL(), "b", func(cfg *remote.Config) { cfg.Window = 8 << 10 })
	tRegister(t, b)
	tJoin(t, a, b)
	open := tHoldInbound(t, b)
	recv, _ := tCollector(t, b.S, 64)

	// A process sends more than the window: the rest waits in a's buffer.
	const n = 64
	back := tFlood(t, a.S, recv.PID(), n)
	tEventually(t, func() bool { return a.Stats().Buffered > 0 }, "messages wait in a's buffer")
	// A spawn waits behind them.
	ctx, cancel := context.WithTimeout(context.Background(), tWait)
	defer cancel()
	spawned := make(chan error, 1)
	go func() {
		_, err := a.Spawn(ctx, "b", "echo", "run", nil)
		spawned <- err
	}()
	tEventually(t, func() bool { return a.Stats().Pending == 1 }, "the spawn is pending")

	tStopServer(srv)
	tRecv(t, closed, "a's connection to close")
	assert.ErrorIs(t, tRecv(t, spawned, "the pending spawn"), remote.ErrClosed, "a pending spawn")

	// What was waiting comes back.
	returned := a.Stats().Returned.Closed
	assert.Positive(t, returned, "the waiting messages are returned")
	for range returned {
		ev := tRecv(t, back, "the waiting messages to come back")
		assert.ErrorIs(t, ev.Error, remote.ErrClosed)
		assert.Equal(t, recv.PID(), ev.From)
	}
	assert.Zero(t, a.Stats().Buffered)

	// What comes later fails at once.
	err := a.S.Tell(recv.PID(), "late")
	assert.ErrorIs(t, err, remote.ErrClosed, "a send")
	assert.ErrorIs(t, err, scheduler.ErrClosed)
	_, err = a.Spawn(ctx, "b", "echo", "run", nil)
	assert.ErrorIs(t, err, remote.ErrClosed, "a spawn")
	exits := make(chan scheduler.Exit, 1)
	a.Monitor(recv.PID(), func(e scheduler.Exit) { exits <- e })
	e := tRecv(t, exits, "the monitor to complete")
	assert.Equal(t, scheduler.ExitGone, e.Reason)
	assert.ErrorIs(t, e.Err, remote.ErrClosed, "a monitor")
	for _, p := range a.Peers() {
		assert.False(t, p.Up, "no peer is reachable")
		assert.ErrorIs(t, p.Reason, remote.ErrClosed)
	}
	assert.Zero(t, a.Stats().Pending)
	require.NoError(t, a.Close(ctx), "Close after the connection closed")

	// b lost the server too, and what it now has for a can never leave:
	// its Close would wait for its whole deadline, and leave its
	// scheduler's shutdown (at the cleanup) none. It gets a short one.
	open()
	short, cancelShort := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancelShort()
	_ = b.Close(short)
}

// TestPublishFailureReturnsMessages: a batch NATS refuses to publish is
// counted, and its messages go back to their senders with the error
// wrapping NATS's and the sentinel that says why: NATS's buffer for a
// reconnect is full, ErrBackpressure; the connection has closed,
// ErrClosed; the batch exceeds the server's limit, ErrNotEncodable;
// anything else, ErrDisconnected. The link goes on: the next message
// arrives, and the receiver sees no gap in the sequence numbers.
func TestPublishFailureReturnsMessages(t *testing.T) {
	_, a, b := tTwoNodes(t, nil)
	recv, got := tCollector(t, b.S, 4)
	_, _, bData := remote.Subjects("test", b.Node.Node())
	failures := make(chan error, 1) // what the next batch of messages for b fails with
	remote.SetPublishHook(a.Node, func(subject string, data []byte) error {
		if msgs, _ := remote.DecodeBatch(data, a.Node.Node(), b.Node.Node()); subject != bData || len(msgs) == 0 {
			return nil // a sync marker, or a batch for another node
		}
		select {
		case err := <-failures:
			return err
		default:
			return nil
		}
	})
	t.Cleanup(func() { remote.SetPublishHook(a.Node, nil) })

	for i, tc := range []struct {
		name   string
		cause  error
		want   []error
		reason func(remote.Reasons) uint64
	}{
		{"the reconnect buffer is full", nats.ErrReconnectBufExceeded, []error{remote.ErrBackpressure, scheduler.ErrMailboxFull}, func(r remote.Reasons) uint64 { return r.Backpressure }},
		{"the connection has closed", nats.ErrConnectionClosed, []error{remote.ErrClosed, scheduler.ErrClosed}, func(r remote.Reasons) uint64 { return r.Closed }},
		{"the server's payload limit", nats.ErrMaxPayload, []error{remote.ErrNotEncodable}, func(r remote.Reasons) uint64 { return r.NotEncodable }},
		{"another failure", errors.New("the write failed"), []error{remote.ErrDisconnected}, func(r remote.Reasons) uint64 { return r.Disconnected }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := a.Stats()
			failures <- tc.cause
			ev := tFirst(t, a.S, scheduler.EventMessage, func(out *scheduler.StepOutput) { out.Tell(recv.PID(), "refused") })
			assert.Equal(t, recv.PID(), ev.From, "the message comes back from its recipient")
			assert.Equal(t, "refused", ev.Data)
			assert.ErrorIs(t, ev.Error, tc.cause)
			for _, want := range tc.want {
				assert.ErrorIs(t, ev.Error, want)
			}
			after := a.Stats()
			assert.Equal(t, before.PublishFailures+1, after.PublishFailures)
			assert.Equal(t, tc.reason(before.Returned)+1, tc.reason(after.Returned), "counted as returned: %+v", after.Returned)

			require.NoError(t, a.S.Tell(recv.PID(), fmt.Sprint("after ", i)))
			assert.Equal(t, fmt.Sprint("after ", i), tRecv(t, got, "the next message").Data)
			assert.Zero(t, b.Stats().Gaps, "the failed batch's sequence number is used again")
		})
	}
}

// TestRefusedSyncMarkerIsCounted: a sync marker NATS refuses to publish
// is counted in PublishFailures, as a refused batch is, and not in
// SyncMarkers; the link asks again later and goes on.
func TestRefusedSyncMarkerIsCounted(t *testing.T) {
	_, a, b := tTwoNodes(t, nil)
	recv, got := tCollector(t, b.S, 1)
	// b takes no batch until released, so a's grant is overdue and a
	// asks for it with a sync marker every heartbeat.
	gate := make(chan struct{})
	var release sync.Once
	remote.SetInboundHook(b.Node, func() { <-gate })
	t.Cleanup(func() { release.Do(func() { close(gate) }) })
	_, _, bData := remote.Subjects("test", b.Node.Node())
	refused := make(chan struct{}, 1)
	remote.SetPublishHook(a.Node, func(subject string, data []byte) error {
		if subject != bData || !remote.IsSyncMarker(data) {
			return nil
		}
		select {
		case refused <- struct{}{}:
		default:
		}
		return errors.New("the write failed")
	})
	t.Cleanup(func() { remote.SetPublishHook(a.Node, nil) })

	before := a.Stats()
	require.NoError(t, a.S.Tell(recv.PID(), "held"))
	tRecv(t, refused, "a sync marker for b while b takes nothing")
	tEventually(t, func() bool { return a.Stats().PublishFailures > before.PublishFailures },
		"the refused sync marker is counted in PublishFailures (%d before, %d now)", before.PublishFailures, a.Stats().PublishFailures)
	assert.Equal(t, before.SyncMarkers, a.Stats().SyncMarkers, "a refused sync marker is not counted as sent")

	remote.SetPublishHook(a.Node, nil)
	release.Do(func() { close(gate) })
	assert.Equal(t, "held", tRecv(t, got, "the message held by b").Data)
	tEventually(t, func() bool { return a.Stats().InFlight == 0 }, "b grants the message")
}

// TestConnectionClosedForGoodDuringClose: when the NATS connection
// closes for good while Close waits for the peers to take what was sent
// to them, what was waiting goes back to its senders with ErrClosed and
// Close returns nil, as it does when the connection closed for good
// before it: there is nothing left to confirm, and an error wrapping
// ErrClosed from Close says the node was closed already.
func TestConnectionClosedForGoodDuringClose(t *testing.T) {
	srv := tServer(t)
	a := tStart(t, srv.ClientURL(), "a", func(cfg *remote.Config) {
		cfg.Window, cfg.MaxBuffered = 8<<10, 1<<20
		cfg.FailureTimeout = time.Minute
		cfg.Options = []nats.Option{nats.NoReconnect()}
	})
	b := tStart(t, srv.ClientURL(), "b", func(cfg *remote.Config) { cfg.Window = 8 << 10 })
	tJoin(t, a, b)
	open := tHoldInbound(t, b)
	recv, _ := tCollector(t, b.S, 64)
	back := tFlood(t, a.S, recv.PID(), 64)
	tEventually(t, func() bool { return a.Stats().Buffered > 0 }, "messages wait in a's buffer")

	ctx, cancel := context.WithTimeout(context.Background(), tWait)
	defer cancel()
	closed := make(chan error, 1)
	go func() { closed <- a.Close(ctx) }()
	tEventually(t, func() bool {
		_, err := a.WaitPeer(ctx, "b")
		return errors.Is(err, remote.ErrClosed)
	}, "a to be closing")
	tStopServer(srv)
	assert.NoError(t, tRecv(t, closed, "Close to return"))
	assert.ErrorIs(t, tRecv(t, back, "a waiting message to come back").Error, remote.ErrClosed)
	assert.ErrorIs(t, a.Close(ctx), remote.ErrClosed, "a second Close")

	open()
	short, cancelShort := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancelShort()
	_ = b.Close(short)
}

// TestPublishFailureFailsRequests: a spawn or monitor request in a batch
// NATS refuses to publish never reached the other node, so it does not
// wait for an answer that cannot come: it fails at once with the error
// the batch's messages come back with (here ErrDisconnected, and NATS's),
// and nothing of it is left pending. The link goes on: the next spawn
// works.
func TestPublishFailureFailsRequests(t *testing.T) {
	_, a, b := tTwoNodes(t, nil)
	require.NoError(t, b.Register("echo", func() scheduler.Process { return &echo{} }))
	target, _ := tCollector(t, b.S, 1)
	_, _, bData := remote.Subjects("test", b.Node.Node())
	cause := errors.New("the write failed")
	failNext := make(chan struct{}, 1) // refuse the next batch for b that is no sync marker
	remote.SetPublishHook(a.Node, func(subject string, data []byte) error {
		if subject != bData || remote.IsSyncMarker(data) {
			return nil
		}
		select {
		case <-failNext:
			return cause
		default:
			return nil
		}
	})
	t.Cleanup(func() { remote.SetPublishHook(a.Node, nil) })
	// A bound of the test's own: a request left waiting fails it.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	failNext <- struct{}{}
	_, err := a.Spawn(ctx, "b", "echo", "run", nil)
	require.NotErrorIs(t, err, context.DeadlineExceeded, "the spawn waited for an answer to a request that never left")
	assert.ErrorIs(t, err, remote.ErrDisconnected)
	assert.ErrorIs(t, err, cause)
	assert.Zero(t, a.Stats().Pending, "the refused spawn is not pending")

	failNext <- struct{}{}
	exits := make(chan scheduler.Exit, 1)
	a.Monitor(target.PID(), func(e scheduler.Exit) { exits <- e })
	select {
	case e := <-exits:
		assert.Equal(t, scheduler.ExitGone, e.Reason)
		assert.ErrorIs(t, e.Err, remote.ErrDisconnected)
		assert.ErrorIs(t, e.Err, cause)
	case <-ctx.Done():
		t.Fatal("the monitor waited for an answer to a request that never left")
	}
	assert.Zero(t, a.Stats().Pending, "the refused monitor is not pending")
	assert.Zero(t, b.Stats().MonitorsHeld)

	child, err := a.Spawn(ctx, "b", "echo", "run", nil)
	require.NoError(t, err, "the link goes on")
	assert.Equal(t, b.Node.Node(), child.Node)
}
