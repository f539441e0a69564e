//go:build stress

package remote_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	scheduler "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
	"github.com/procsched/scheduler/remote"
)

// The soak runs of `make stress`: longer and wider versions of the
// tests, with the same checks.

// TestStressStreamsBetweenThreeNodes streams from every node to the two
// others at once: 16 senders per node, 20,000 messages each, to 8
// receivers on each other node.
func TestStressStreamsBetweenThreeNodes(t *testing.T) {
	const senders, receivers, perSender = 16, 8, 20000
	srv := tServer(t)
	var nodes []*tNode
	for _, name := range []string{"a", "b", "c"} {
		nodes = append(nodes, tStart(t, srv.ClientURL(), name, func(cfg *remote.Config) { cfg.FailureTimeout = time.Minute }))
	}
	tJoin(t, nodes...)
	var recv, send []scheduler.Handle
	for i, from := range nodes {
		for j, to := range nodes {
			if i == j {
				continue
			}
			var pids []relay.PID
			for range receivers {
				h := tStreamReceiver(t, to.S, senders*perSender/receivers)
				recv = append(recv, h)
				pids = append(pids, h.PID())
			}
			for range senders {
				send = append(send, tStreamSender(t, from.S, pids, perSender))
			}
		}
	}
	for _, h := range send {
		res, err := tWaitResultWithin(t, h, 10*time.Minute)
		require.NoError(t, err)
		assert.Empty(t, res.Value(), "no message came back")
	}
	for _, h := range recv {
		res, err := tWaitResultWithin(t, h, 10*time.Minute)
		require.NoError(t, err)
		r := res.Value().(streamResult)
		assert.Equal(t, senders*perSender/receivers, r.got)
		assert.Empty(t, r.violations)
	}
}

// tWaitResultWithin waits for h's result for up to d.
func tWaitResultWithin(t testing.TB, h scheduler.Handle, d time.Duration) (payload.Payload, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	res, err := h.Wait(ctx)
	require.NotErrorIs(t, err, context.DeadlineExceeded, "waiting for %v", h.PID())
	return res, err
}

// TestStressServerRestarts restarts the server ten times under a steady
// stream: at most once, in order, gaps counted when anything is lost.
func TestStressServerRestarts(t *testing.T) {
	srv := tServer(t)
	port := srv.Addr().(*net.TCPAddr).Port
	patient := func(cfg *remote.Config) { cfg.FailureTimeout = time.Minute }
	a := tStart(t, srv.ClientURL(), "a", patient)
	b := tStart(t, srv.ClientURL(), "b", patient)
	tJoin(t, a, b)
	// The receiver keeps every number it gets, in order.
	recv := tSeqCollector(t, b.S)
	stop := make(chan struct{})
	next := uint64(0)
	sender := tSubmit(t, a.S, func(_ *tProc, _ int, evs []scheduler.Event, out *scheduler.StepOutput) error {
		for _, ev := range evs {
			if ev.Type == scheduler.EventCancel {
				out.Done(payload.Of(next))
				return nil
			}
		}
		select {
		case <-stop:
			return nil
		default:
		}
		for range 16 {
			out.Tell(recv.PID(), binary.BigEndian.AppendUint64(nil, next))
			next++
		}
		out.Continue()
		return nil
	})
	for i := range 10 {
		tEventually(t, func() bool { return b.Stats().Received > uint64(1000*(i+1)) }, "traffic before restart %d", i)
		tStopServer(srv)
		srv = tServerOn(t, port)
		tEventually(t, func() bool { return a.Stats().Reconnects > uint64(i) && b.Stats().Reconnects > uint64(i) }, "both reconnect after restart %d", i)
	}
	close(stop)
	tEventually(t, func() bool { st := a.Stats(); return st.Buffered == 0 && st.InFlight == 0 }, "a is quiet")
	require.NoError(t, a.S.Terminate(sender.PID()))
	_, err := tWaitResult(t, sender)
	require.NoError(t, err)
	require.NoError(t, b.S.Terminate(recv.PID()))
	res, err := tWaitResult(t, recv)
	require.NoError(t, err)
	got := res.Value().([]uint64)
	for i := 1; i < len(got); i++ {
		require.Less(t, got[i-1], got[i], "duplicated or reordered")
	}
	sb := b.Stats()
	t.Logf("%d delivered; b counted %d gaps; a returned %+v", len(got), sb.Gaps, a.Stats().Returned)
	assert.Zero(t, sb.Dropped.Duplicate+sb.Dropped.Malformed)
	b.stop(t)
	a.stop(t)
}

// TestStressCrashLoop kills a node in another process five times: each
// time it is declared down and its restart is a new incarnation.
func TestStressCrashLoop(t *testing.T) {
	srv := tServer(t)
	a := tStart(t, srv.ClientURL(), "a", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	seen := map[uint32]bool{}
	for i := range 5 {
		c := tStartSubprocess(t, srv.ClientURL(), "c")
		require.False(t, seen[c.num], "incarnation %d used twice", c.num)
		seen[c.num] = true
		num, err := a.WaitPeer(ctx, "c")
		require.NoError(t, err)
		require.Equal(t, c.num, num)
		child, err := a.Spawn(ctx, "c", "echo", "run", nil)
		require.NoError(t, err)
		c.kill()
		down := tRecv(t, a.Down, fmt.Sprintf("the down of crash %d", i))
		require.Equal(t, c.num, down.Node)
		require.ErrorIs(t, a.S.Tell(child, "late"), scheduler.ErrProcessNotFound)
	}
}
