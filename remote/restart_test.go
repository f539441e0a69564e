package remote_test

import (
	"encoding/binary"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	scheduler "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/remote"
)

func TestServerRestart(t *testing.T) {
	const phase = 2000 // messages sent before, during and after the outage
	srv := tServer(t)
	port := srv.Addr().(*net.TCPAddr).Port
	patient := func(cfg *remote.Config) { cfg.FailureTimeout = 20 * time.Second }
	a := tStart(t, srv.ClientURL(), "a", patient)
	b := tStart(t, srv.ClientURL(), "b", patient)
	tJoin(t, a, b)

	// The receiver keeps every number it gets, in order.
	recv := tSeqCollector(t, b.S)
	// The sender sends a phase of numbered messages each time it is told
	// to, 64 per step, and keeps what comes back.
	var back []scheduler.Event
	var sentAll atomic.Bool
	next, until := 0, 0
	sender := tSubmit(t, a.S, func(_ *tProc, _ int, evs []scheduler.Event, out *scheduler.StepOutput) error {
		for _, ev := range evs {
			switch {
			case ev.Type == scheduler.EventCancel:
				out.Done(payload.Of(back))
				return nil
			case ev.Type == scheduler.EventMessage && ev.Error != nil:
				back = append(back, ev)
			case ev.Type == scheduler.EventMessage:
				until += phase
			}
		}
		for k := 0; k < 64 && next < until; k++ {
			out.Tell(recv.PID(), binary.BigEndian.AppendUint64(nil, uint64(next)))
			next++
		}
		if next < until {
			out.Continue()
		}
		sentAll.Store(next == 3*phase)
		return nil
	})
	quiet := func() bool {
		st := a.Stats()
		return st.Buffered == 0 && st.InFlight == 0
	}
	sent := func(n uint64) func() bool {
		return func() bool { return a.Stats().Sent >= n && quiet() }
	}

	require.NoError(t, a.S.Tell(sender.PID(), "go"))
	tEventually(t, sent(phase), "a has sent and b taken the first phase")

	tStopServer(srv)
	require.NoError(t, a.S.Tell(sender.PID(), "go")) // sent while the server is away
	tServerOn(t, port)
	tEventually(t, func() bool { return a.Stats().Reconnects > 0 && b.Stats().Reconnects > 0 }, "both nodes reconnect")
	require.NoError(t, a.S.Tell(sender.PID(), "go"))
	tEventually(t, func() bool { return sentAll.Load() && quiet() }, "a has sent everything and b granted it")

	require.NoError(t, a.S.Terminate(sender.PID()))
	res, err := tWaitResult(t, sender)
	require.NoError(t, err)
	returned := map[uint64]bool{}
	for _, ev := range res.Value().([]scheduler.Event) {
		returned[binary.BigEndian.Uint64(ev.Data.([]byte))] = true
	}
	require.NoError(t, b.S.Terminate(recv.PID()))
	res, err = tWaitResult(t, recv)
	require.NoError(t, err)
	got := res.Value().([]uint64)

	// At most once and in order: strictly increasing numbers.
	for i := 1; i < len(got); i++ {
		require.Less(t, got[i-1], got[i], "message %d arrived after %d: duplicated or reordered", got[i], got[i-1])
	}
	delivered := map[uint64]bool{}
	for _, s := range got {
		delivered[s] = true
	}
	lost := 0
	for s := uint64(0); s < 3*phase; s++ {
		switch {
		case delivered[s] && returned[s]:
			t.Errorf("message %d was delivered and also returned", s)
		case !delivered[s] && !returned[s]:
			lost++
		}
	}
	sb := b.Stats()
	t.Logf("%d delivered, %d returned, %d lost in flight; b counted %d gaps", len(got), len(returned), lost, sb.Gaps)
	if lost > 0 {
		assert.Positive(t, sb.Gaps, "messages were lost, and b must have seen the gap")
	}
	assert.True(t, delivered[3*phase-1], "the link works after the restart")
	assert.Zero(t, sb.Dropped.Duplicate+sb.Dropped.Malformed)
	select {
	case p := <-a.Down:
		t.Errorf("a declared %s down", p.Name)
	case p := <-b.Down:
		t.Errorf("b declared %s down", p.Name)
	default:
	}
	// Close the nodes while the second server runs (cleanups run last
	// registered first, and the server was registered after them).
	b.stop(t)
	a.stop(t)
}

// TestUserConnectionHandlersStillCalled: the disconnect and reconnect
// handlers given in Config.Options are called as NATS would call them,
// beside the node's own, which counts the reconnect.
func TestUserConnectionHandlersStillCalled(t *testing.T) {
	srv := tServer(t)
	port := srv.Addr().(*net.TCPAddr).Port
	disconnected := make(chan struct{}, 4)
	reconnected := make(chan struct{}, 4)
	a := tStart(t, srv.ClientURL(), "a", func(cfg *remote.Config) {
		cfg.Options = append(cfg.Options,
			nats.DisconnectErrHandler(func(*nats.Conn, error) { disconnected <- struct{}{} }),
			nats.ReconnectHandler(func(*nats.Conn) { reconnected <- struct{}{} }),
		)
	})
	tStopServer(srv)
	tRecv(t, disconnected, "the user's disconnect handler")
	tServerOn(t, port)
	tRecv(t, reconnected, "the user's reconnect handler")
	tEventually(t, func() bool { return a.Stats().Reconnects == 1 }, "the node counts the reconnect (%d)", a.Stats().Reconnects)
	a.stop(t) // while the second server runs
}
