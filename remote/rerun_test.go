package remote_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/procsched/scheduler/relay"
	"github.com/procsched/scheduler/remote"
)

// tStartAs starts node name as tStart does, drawing num for its number.
func tStartAs(t *testing.T, url, name string, num uint32, edit func(*remote.Config)) *tNode {
	t.Helper()
	restore := remote.SetRandomNode(func() uint32 { return num })
	defer restore()
	n := tStart(t, url, name, edit)
	require.Equal(t, num, n.Node.Node(), "the number forced")
	return n
}

// tPeerVerdict waits until n reports peer name up or down, and returns
// whether it was up.
func tPeerVerdict(t *testing.T, n *tNode, name string) bool {
	t.Helper()
	deadline := time.After(tWait)
	for {
		select {
		case p := <-n.Up:
			if p.Name == name {
				return true
			}
		case p := <-n.Down:
			if p.Name == name {
				t.Logf("%s declared %s down: %v", n.Name(), name, p.Reason)
				return false
			}
		case <-deadline:
			t.Fatalf("timed out waiting for %s to report %s up or down", n.Name(), name)
		}
	}
}

// TestRestartOnTheNumberOfARememberedRun: a node that restarts and
// draws the number of its earlier run, which its peer remembers as down,
// is taken for a new run: the peer does not tell it that it is down, the
// two see each other up, and messages flow both ways.
func TestRestartOnTheNumberOfARememberedRun(t *testing.T) {
	srv := tServer(t)
	a := tStart(t, srv.ClientURL(), "a", func(cfg *remote.Config) { cfg.FailureTimeout = time.Minute })
	b := tStart(t, srv.ClientURL(), "b", nil)
	tJoin(t, a, b)
	num := b.Node.Node()
	b.stop(t)
	assert.Equal(t, num, tRecv(t, a.Down, "a to declare b's first run down").Node)

	b2 := tStartAs(t, srv.ClientURL(), "b", num, nil)
	require.True(t, tPeerVerdict(t, b2, "a"), "the new run of b sees a up")
	require.True(t, tPeerVerdict(t, a, "b"), "a sees the new run of b up")
	got, ok := a.Lookup("b")
	assert.True(t, ok)
	assert.Equal(t, num, got)

	onB, fromA := tCollector(t, b2.S, 4)
	onA, fromB := tCollector(t, a.S, 4)
	require.NoError(t, a.S.Tell(onB.PID(), "to the new run"))
	require.NoError(t, b2.S.Tell(onA.PID(), "from the new run"))
	assert.Equal(t, "to the new run", tRecv(t, fromA, "a's message at the new run").Data)
	assert.Equal(t, "from the new run", tRecv(t, fromB, "the new run's message at a").Data)
}

// TestRestartOnTheNumberOfARunNotYetFoundGone: a node whose earlier run
// vanished unnoticed (no goodbye, its peer's timeouts far off) restarts
// on the same number. Its peer takes the new run for a new incarnation:
// the old one is declared down, and the
// new run's batches, whose sequence numbers start again, are delivered,
// not dropped as duplicates of the old run's.
func TestRestartOnTheNumberOfARunNotYetFoundGone(t *testing.T) {
	srv := tServer(t)
	slow := func(cfg *remote.Config) {
		cfg.Heartbeat, cfg.FailureTimeout = time.Minute, 3*time.Minute // no probe or timeout finds the old run gone
	}
	a := tStart(t, srv.ClientURL(), "a", slow)
	onA, got := tCollector(t, a.S, 4)

	// The old run, played by hand: it joins, sends a batch numbered 100,
	// and vanishes.
	old := tFakePeer(t, srv.ClientURL(), a.Node.Node()+1)
	_, aCtl, aData := remote.Subjects("test", a.Node.Node())
	old.publish(old.all, remote.EncodeHello(old.num, "b", false, false, nil))
	for m := range old.ctl {
		if remote.IsAck(m.Data, a.Node.Node()) {
			break
		}
	}
	old.publish(aCtl, remote.EncodeHello(old.num, "b", true, false, a.Node))
	assert.Equal(t, old.num, tRecv(t, a.Up, "the old run up").Node)
	old.publish(aData, remote.EncodeMessages(old.num, a.Node, 100, relay.Message{From: relay.PID{Node: old.num, ID: 1}, To: onA.PID(), Data: "from the old run"}))
	assert.Equal(t, "from the old run", tRecv(t, got, "the old run's message").Data)
	old.nc.Close()

	b2 := tStartAs(t, srv.ClientURL(), "b", old.num, slow)
	ctx, cancel := context.WithTimeout(context.Background(), tWait)
	defer cancel()
	_, err := b2.WaitPeer(ctx, "a")
	require.NoError(t, err)
	require.NoError(t, b2.S.Tell(onA.PID(), "from the new run"))
	tEventually(t, func() bool { return len(got) > 0 || a.Stats().Dropped.Duplicate > 0 }, "the new run's message arrives or is dropped")
	require.Zero(t, a.Stats().Dropped.Duplicate, "the new run's batches are not duplicates of the old run's")
	assert.Equal(t, "from the new run", tRecv(t, got, "the new run's message").Data)

	down := tRecv(t, a.Down, "the old run to be declared down")
	assert.Equal(t, old.num, down.Node)
	assert.ErrorIs(t, down.Reason, remote.ErrNodeDown)
	assert.Contains(t, down.Reason.Error(), "restarted")
	require.True(t, tPeerVerdict(t, a, "b"), "a sees the new run up")
}

// TestBatchOfAReplacedRunIsDropped: a batch of an earlier run that is
// still waiting to be taken when a new run of the same number replaces
// it is dropped, counted as from a down sender, and not taken with the
// new run's sequence numbers: its message is never delivered, and the
// new run's first batch is.
func TestBatchOfAReplacedRunIsDropped(t *testing.T) {
	srv := tServer(t)
	a := tStart(t, srv.ClientURL(), "a", func(cfg *remote.Config) { cfg.FailureTimeout = time.Minute })
	onA, got := tCollector(t, a.S, 4)
	old, num := tFakeUp(t, srv.ClientURL(), a)
	_, _, aData := remote.Subjects("test", a.Node.Node())

	open := tHoldInbound(t, a)
	old.publish(aData, remote.EncodeMessages(num, a.Node, 5, relay.Message{From: relay.PID{Node: num, ID: 1}, To: onA.PID(), Data: "from the old run"}))
	old.nc.Close()
	b2 := tStartAs(t, srv.ClientURL(), "fake", num, nil)
	assert.Equal(t, num, tRecv(t, a.Down, "the old run to be declared down").Node)
	require.True(t, tPeerVerdict(t, a, "fake"), "a sees the new run up")
	open()

	require.NoError(t, b2.S.Tell(onA.PID(), "from the new run"))
	assert.Equal(t, "from the new run", tRecv(t, got, "the new run's message").Data, "the old run's message is not delivered")
	st := a.Stats()
	assert.Equal(t, uint64(1), st.Dropped.DownSender, "the old run's batch is dropped as from a down sender")
	assert.Zero(t, st.Dropped.Duplicate)
}

// TestControlForAnEarlierRunIsIgnored: a "you are down" or a grant
// meant for an earlier run of this node's number (sent to its control
// subject, which the new run holds now) is ignored: the new run does not
// declare its peer down.
func TestControlForAnEarlierRunIsIgnored(t *testing.T) {
	srv := tServer(t)
	b := tStart(t, srv.ClientURL(), "b", func(cfg *remote.Config) { cfg.FailureTimeout = time.Minute })
	f, fake := tFakeUp(t, srv.ClientURL(), b)
	_, bCtl, _ := remote.Subjects("test", b.Node.Node())
	earlier := remote.Run(b.Node) + 1

	f.publish(bCtl, remote.EncodeDown(fake, earlier))
	f.publish(bCtl, remote.EncodeGrant(fake, 1<<40, nil))
	// A probe on the same subject is answered once what came before it
	// has been handled.
	_, err := f.nc.Request(bCtl, remote.EncodeProbe(fake), tWait)
	require.NoError(t, err)
	select {
	case p := <-b.Down:
		t.Fatalf("b declared %v down on a message meant for another run", p)
	default:
	}
	assert.Equal(t, []remote.Peer{{Name: "fake", Node: fake, Up: true}}, b.Peers())

	// The same "you are down" for b's own run is taken.
	f.publish(bCtl, remote.EncodeDown(fake, remote.Run(b.Node)))
	assert.Equal(t, fake, tRecv(t, b.Down, "b to declare the fake down").Node)
}

// TestNodeOfAnotherWireVersion: what a node of another wire version
// sends is dropped as malformed, and logged at Error once, not at every
// heartbeat; its probe of a number is answered, so that it does not take
// the number of a node it cannot read.
func TestNodeOfAnotherWireVersion(t *testing.T) {
	srv := tServer(t)
	var log tLockedBuffer
	b := tStart(t, srv.ClientURL(), "b", func(cfg *remote.Config) {
		cfg.Logger = slog.New(slog.NewTextHandler(&log, nil))
	})
	nc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	defer nc.Close()
	all, bCtl, _ := remote.Subjects("test", b.Node.Node())
	v1Hello := []byte{1, 1, 5, 0, 0, 0, 0, 1, 'x'} // version 1, hello, node 5, no flags, name "x"
	for range 3 {
		require.NoError(t, nc.Publish(all, v1Hello))
	}
	// The probe of the first release: version, type, node.
	_, err = nc.Request(all, []byte{1, 7, 5, 0, 0, 0}, tWait)
	require.NoError(t, err, "b answers a probe of the first release on the cluster's subject")
	_, err = nc.Request(bCtl, []byte{1, 7, 5, 0, 0, 0}, tWait)
	require.NoError(t, err, "b answers a probe of the first release for its number")
	// Both requests were answered after the hellos were handled.
	assert.Equal(t, uint64(3), b.Stats().Dropped.Malformed)
	assert.Equal(t, 1, strings.Count(log.String(), "level=ERROR msg=\"remote: a node of another wire version is in the cluster"), "logged once: %q", log.String())
	assert.Contains(t, log.String(), "version 1, this node speaks 2")
	assert.Empty(t, b.Peers())
}
