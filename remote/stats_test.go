package remote_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/procsched/scheduler/relay"
	"github.com/procsched/scheduler/remote"
)

// TestReturnedCountsSendsFromOutside: a message sent from outside any
// process has no one to come back to, but its failure is counted: one
// still waiting when its peer goes down counts in Returned as one from a
// process does, which also comes back.
func TestReturnedCountsSendsFromOutside(t *testing.T) {
	srv := tServer(t)
	a := tStart(t, srv.ClientURL(), "a", func(cfg *remote.Config) { cfg.FailureTimeout = time.Minute })
	fake := a.Node.Node() + 1
	f := tFakePeer(t, srv.ClientURL(), fake)
	f.hello(a, false) // a knows the fake, which never acks: a's messages wait
	to := relay.PID{Node: fake, ID: 1}

	require.NoError(t, a.S.Tell(to, "from outside"))
	one := a.Stats().Buffered
	require.Positive(t, one, "the message waits")
	_, back := tTellOnce(t, a.S, to, "from a process")
	tEventually(t, func() bool { return a.Stats().Buffered > one }, "the process's message waits too")
	f.bye(a)

	ev := tRecv(t, back, "the process's message to come back")
	assert.ErrorIs(t, ev.Error, remote.ErrNodeDown)
	assert.Equal(t, "from a process", ev.Data)
	st := a.Stats()
	assert.Equal(t, uint64(2), st.Returned.NodeDown, "both failures are counted: %+v", st.Returned)
	assert.Zero(t, st.Buffered)
}

// TestStatsCountFramesBatchesAndBytes: Sent counts the frames published,
// BatchesSent and BytesSent the batches that carried them and their
// bytes, sync markers apart; Received, BatchesReceived and BytesReceived
// the same taken, sync markers included in the batches and bytes. A fake
// peer sees and sends exactly what is counted.
func TestStatsCountFramesBatchesAndBytes(t *testing.T) {
	srv := tServer(t)
	a := tStart(t, srv.ClientURL(), "a", func(cfg *remote.Config) {
		cfg.Heartbeat, cfg.FailureTimeout = time.Second, time.Minute // no sync marker of a's within the test
	})
	f, fake := tFakeUp(t, srv.ClientURL(), a)
	t.Cleanup(func() { f.bye(a) })
	_, aCtl, aData := remote.Subjects("test", a.Node.Node())

	// a sends three messages; the fake takes and grants each batch.
	to := relay.PID{Node: fake, ID: 1}
	for _, body := range []string{"one", "two", "three"} {
		require.NoError(t, a.S.Tell(to, body))
	}
	var frames, batches, bytes uint64
	for frames < 3 {
		m := tRecv(t, f.data, "a's batches")
		require.False(t, remote.IsSyncMarker(m.Data), "no sync marker is due")
		msgs, err := remote.DecodeBatch(m.Data, a.Node.Node(), fake)
		require.NoError(t, err)
		frames += uint64(len(msgs))
		batches++
		bytes += uint64(len(m.Data))
		f.publish(aCtl, remote.EncodeGrant(fake, batches, a.Node))
	}
	tEventually(t, func() bool { return a.Stats().Sent == 3 && a.Stats().InFlight == 0 }, "a counts the frames and has them granted")
	st := a.Stats()
	assert.Equal(t, batches, st.BatchesSent)
	assert.Equal(t, bytes, st.BytesSent)
	assert.Zero(t, st.SyncMarkers)

	// The fake sends a batch of two messages, then a sync marker, which
	// a grants at once, after counting both.
	recv, got := tCollector(t, a.S, 2)
	from := relay.PID{Node: fake, ID: 7}
	batch := remote.EncodeMessages(fake, a.Node, 1,
		relay.Message{From: from, To: recv.PID(), Data: "x"},
		relay.Message{From: from, To: recv.PID(), Data: "y"})
	f.publish(aData, batch)
	f.publish(aData, remote.EncodeSyncMarker(fake, a.Node, 2))
	for {
		if seq, ok := remote.GrantOf(tRecv(t, f.ctl, "a's grant").Data, a.Node.Node()); ok && seq == 2 {
			break
		}
	}
	tRecv(t, got, "x")
	tRecv(t, got, "y")
	st = a.Stats()
	assert.Equal(t, uint64(2), st.Received, "frames taken")
	assert.Equal(t, uint64(2), st.BatchesReceived, "the batch and the sync marker")
	assert.Equal(t, uint64(len(batch)+remote.HeaderLen), st.BytesReceived, "the batch's bytes and the sync marker's")
}

// TestDropsAndPeerCounts: Joined and Lost count peers that came up and
// that were declared down, and Up and Down the peers in each state now;
// Dropped.DownSender counts a batch from a peer declared down, and
// Dropped.Overflow the bounces that could not be queued because the way
// back was full: each message that could not be delivered is counted in
// BouncedBack, and either comes back or is counted there.
func TestDropsAndPeerCounts(t *testing.T) {
	srv := tServer(t)
	a := tStart(t, srv.ClientURL(), "a", func(cfg *remote.Config) {
		cfg.FailureTimeout = time.Minute
		cfg.MaxBuffered = 16 << 10 // bounces may fill 32 KiB
	})
	ended, _ := tCollector(t, a.S, 1)
	require.NoError(t, a.S.Terminate(ended.PID()))
	_, err := tWaitResult(t, ended)
	require.NoError(t, err)
	_, _, aData := remote.Subjects("test", a.Node.Node())

	f := tFakePeer(t, srv.ClientURL(), a.Node.Node()+1)
	f.hello(a, false) // not acked yet: a's bounces wait for it
	st := a.Stats()
	assert.Equal(t, remote.PeerStats{Joining: 1}, st.Peers)

	// Twenty messages of 4 KiB to an ended process: their bounces fill
	// the way back, and the rest are dropped.
	const n = 20
	from := relay.PID{Node: f.num, ID: 7}
	msgs := make([]relay.Message, n)
	for i := range msgs {
		msgs[i] = relay.Message{From: from, To: ended.PID(), Data: make([]byte, 4<<10)}
	}
	f.publish(aData, remote.EncodeMessages(f.num, a.Node, 1, msgs...))
	tEventually(t, func() bool { return a.Stats().BouncedBack.NotFound == n }, "a bounces every message (%+v)", a.Stats().BouncedBack)
	overflow := a.Stats().Dropped.Overflow
	assert.Positive(t, overflow, "the way back was full")
	assert.Less(t, overflow, uint64(n), "some bounces were queued")

	f.ack(a)
	assert.Equal(t, f.num, tRecv(t, a.Up, "the fake to be up").Node)
	bounces := uint64(0)
	for bounces+overflow < n {
		m := tRecv(t, f.data, "the queued bounces")
		got, err := remote.DecodeBatch(m.Data, a.Node.Node(), f.num)
		require.NoError(t, err)
		bounces += uint64(len(got))
	}
	assert.Equal(t, uint64(n), bounces+overflow, "each bounce came back or was counted as dropped")
	st = a.Stats()
	assert.Equal(t, remote.PeerStats{Up: 1, Joined: 1}, st.Peers)

	f.bye(a)
	f.publish(aData, remote.EncodeMessages(f.num, a.Node, 2, relay.Message{From: from, To: ended.PID(), Data: "after its goodbye"}))
	tEventually(t, func() bool { return a.Stats().Dropped.DownSender == 1 }, "a drops the batch of a peer declared down")
	st = a.Stats()
	assert.Equal(t, remote.PeerStats{Down: 1, Joined: 1, Lost: 1}, st.Peers)
	assert.Equal(t, uint64(n), st.BouncedBack.NotFound, "nothing of the dropped batch was delivered")
}

// TestSlowConsumerIsCounted: when more batches wait in a node's NATS
// client than its subscription may hold (here two, the one the node is
// held on included), NATS drops the rest and reports a slow consumer, which the node
// counts; the batches lost show as a gap once it takes batches again.
func TestSlowConsumerIsCounted(t *testing.T) {
	const batches = 8
	srv := tServer(t)
	restore := remote.SetDataPendingLimits(2, 1<<20)
	a := tStart(t, srv.ClientURL(), "a", func(cfg *remote.Config) { cfg.FailureTimeout = time.Minute })
	restore()
	recv, got := tCollector(t, a.S, batches+1)
	f, fake := tFakeUp(t, srv.ClientURL(), a)
	_, _, aData := remote.Subjects("test", a.Node.Node())
	msg := func(body string) relay.Message {
		return relay.Message{From: relay.PID{Node: fake, ID: 1}, To: recv.PID(), Data: body}
	}

	// a takes the first batch and holds it; NATS counts it waiting until
	// a returns, so one more waits and the rest are dropped.
	entered, gate := make(chan struct{}), make(chan struct{})
	var once sync.Once
	remote.SetInboundHook(a.Node, func() {
		once.Do(func() {
			close(entered)
			<-gate
		})
	})
	t.Cleanup(func() {
		select {
		case <-gate:
		default:
			close(gate)
		}
	})
	for seq := uint64(1); seq <= batches; seq++ {
		f.publish(aData, remote.EncodeMessages(fake, a.Node, seq, msg("held")))
	}
	tRecv(t, entered, "a to take the first batch")
	tEventually(t, func() bool {
		pending, dropped := remote.DataQueue(a.Node)
		return pending+dropped == batches
	}, "every batch waits or is dropped")
	_, dropped := remote.DataQueue(a.Node)
	require.Positive(t, dropped)
	tEventually(t, func() bool { return a.Stats().SlowConsumers > 0 }, "a counts the slow consumer NATS reports (%+v)", a.Stats())
	close(gate)
	// The last batch finds room once those kept have been taken: all
	// of them, since NATS counts one as waiting until a returns from it.
	tEventually(t, func() bool { pending, _ := remote.DataQueue(a.Node); return pending == 0 }, "a takes the batches kept")
	f.publish(aData, remote.EncodeMessages(fake, a.Node, batches+1, msg("last")))
	for {
		if ev := tRecv(t, got, "the messages a kept, then the last"); ev.Data == "last" {
			break
		}
	}
	st := a.Stats()
	assert.Positive(t, st.Gaps, "the batches NATS dropped are a gap")
	assert.Equal(t, uint64(batches+1-dropped), st.BatchesReceived, "every batch NATS did not drop is taken")
}
