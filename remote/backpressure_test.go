package remote_test

import (
	"encoding/binary"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	scheduler "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/remote"
)

func TestBackpressureBoundsMemory(t *testing.T) {
	const (
		window      = 64 << 10
		maxBuffered = 256 << 10
		msgSize     = 4 << 10
	)
	srv := tServer(t)
	small := func(cfg *remote.Config) {
		cfg.Window, cfg.MaxBuffered = window, maxBuffered
		cfg.FailureTimeout = 500 * time.Millisecond
	}
	a := tStart(t, srv.ClientURL(), "a", small)
	b := tStart(t, srv.ClientURL(), "b", small)
	tJoin(t, a, b)

	var got atomic.Int64
	recv := tSubmit(t, b.S, func(_ *tProc, _ int, evs []scheduler.Event, out *scheduler.StepOutput) error {
		for _, ev := range evs {
			switch ev.Type {
			case scheduler.EventMessage:
				got.Add(1)
			case scheduler.EventCancel:
				out.Done(payload.Payload{})
			}
		}
		return nil
	})

	// b stops taking batches.
	gate := make(chan struct{})
	stalled := make(chan struct{}, 1)
	remote.SetInboundHook(b.Node, func() {
		select {
		case stalled <- struct{}{}:
		default:
		}
		<-gate
	})

	body := make([]byte, msgSize)
	accepted := 0
	fill := func() error {
		for range 10 * (maxBuffered + window) / msgSize {
			if err := a.S.Tell(recv.PID(), body); err != nil {
				return err
			}
			if accepted++; accepted == 1 {
				tRecv(t, stalled, "b to stall on the first batch")
			}
		}
		return nil
	}
	refusal := fill()
	require.Error(t, refusal, "sending far more than the buffer and window hold must be refused")
	assert.ErrorIs(t, refusal, remote.ErrBackpressure)
	assert.ErrorIs(t, refusal, scheduler.ErrMailboxFull, "a full outbound buffer is refused like a full mailbox")
	// Once the writer has used the window and stalls, the buffer stays
	// as full as the senders make it.
	tEventually(t, func() bool { return a.Stats().CreditStalls > 0 }, "a's link stalls for credit")
	require.ErrorIs(t, fill(), remote.ErrBackpressure)

	st := a.Stats()
	assert.LessOrEqual(t, st.Buffered, maxBuffered, "bytes waiting to be published")
	assert.LessOrEqual(t, st.InFlight, window, "bytes published and not granted")
	assert.Positive(t, st.Refused.Backpressure)
	assert.LessOrEqual(t, accepted*msgSize, maxBuffered+window+msgSize)

	// A process gets the refusal back like a mailbox's.
	ev := tBounceOf(t, a.S, recv.PID(), body)
	assert.ErrorIs(t, ev.Error, remote.ErrBackpressure)

	// Control traffic is not queued behind the stalled data: while b takes
	// no batch for longer than the failure timeout (a sends a sync marker
	// every heartbeat while its grant is overdue), neither node declares
	// the other down.
	base := a.Stats().SyncMarkers
	tEventually(t, func() bool { return a.Stats().SyncMarkers >= base+12 }, "a has waited twelve heartbeats")
	select {
	case p := <-a.Down:
		t.Fatalf("a declared %s down while it was only slow", p.Name)
	case p := <-b.Down:
		t.Fatalf("b declared %s down while it was only slow", p.Name)
	default:
	}

	// Released, b takes everything that was accepted, and nothing more;
	// the connections stayed up.
	close(gate)
	tEventually(t, func() bool { return got.Load() == int64(accepted) }, "b has all %d accepted messages (has %d)", accepted, got.Load())
	require.NoError(t, b.S.Terminate(recv.PID()))
	_, err := tWaitResult(t, recv)
	require.NoError(t, err)
	assert.Equal(t, int64(accepted), got.Load())
	assert.Zero(t, a.Stats().Reconnects+b.Stats().Reconnects)
	assert.Zero(t, b.Stats().SlowConsumers)
	assert.Zero(t, srv.NumSlowConsumers(), "the server never cut a client off")
}

// TestSmallerWindowThanThePeers: a node whose Window is smaller than its
// peer's gets its credit back as the peer takes its batches, not only
// when a heartbeat finds the grant overdue: the peer grants by its own
// window, which the sender's in-flight bytes never reach. With
// heartbeats an hour apart, a stream of many windows still crosses.
func TestSmallerWindowThanThePeers(t *testing.T) {
	srv := tServer(t)
	slow := func(cfg *remote.Config) { cfg.Heartbeat, cfg.FailureTimeout = time.Hour, 3*time.Hour }
	a := tStart(t, srv.ClientURL(), "a", func(cfg *remote.Config) {
		slow(cfg)
		cfg.Window, cfg.MaxBuffered = 8<<10, 1<<20
	})
	b := tStart(t, srv.ClientURL(), "b", slow) // a window of 1 MiB
	tJoin(t, a, b)
	const n = 256 // 256 KiB: 32 of a's windows
	recv := tStreamReceiver(t, b.S, n)
	for i := range n {
		body := make([]byte, 1<<10)
		binary.BigEndian.PutUint64(body, uint64(i))
		require.NoError(t, a.S.Tell(recv.PID(), body))
	}
	res, err := tWaitResult(t, recv)
	require.NoError(t, err)
	assert.Equal(t, n, res.Value().(streamResult).got)
}
