package remote_test

import (
	"context"
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
