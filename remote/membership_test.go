package remote_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	scheduler "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/relay"
	"github.com/procsched/scheduler/remote"
)

// TestSilentPeerDeclaredDownWhateverTheProbeSays: a peer that stops
// sending heartbeats but still answers probes (its connection and
// subscription are there, its heartbeats are not) is declared down once
// it has been silent for FailureTimeout.
func TestSilentPeerDeclaredDownWhateverTheProbeSays(t *testing.T) {
	srv := tServer(t)
	const timeout = 300 * time.Millisecond
	a := tStart(t, srv.ClientURL(), "a", func(cfg *remote.Config) {
		cfg.Heartbeat = 20 * time.Millisecond
		cfg.FailureTimeout = timeout
	})
	fake := a.Node.Node() + 1
	f := tFakePeer(t, srv.ClientURL(), fake)
	_, ctl, _ := remote.Subjects("test", fake)
	_, err := f.nc.Subscribe(ctl, func(m *nats.Msg) {
		if m.Reply != "" {
			_ = m.Respond([]byte("here"))
		}
	})
	require.NoError(t, err)
	f.hello(a, true)
	assert.Equal(t, fake, tRecv(t, a.Up, "the fake to be up").Node)
	up := time.Now()

	down := tRecv(t, a.Down, "the silent fake to be declared down")
	assert.Equal(t, fake, down.Node)
	assert.ErrorIs(t, down.Reason, remote.ErrNodeDown)
	assert.Contains(t, down.Reason.Error(), "silent for")
	assert.GreaterOrEqual(t, time.Since(up), timeout, "not before FailureTimeout")
	assert.Positive(t, a.Stats().Probes, "it was probed meanwhile")
}

// TestDownPeerStaysDown: a peer declared down that says hello again
// (the same incarnation, which missed being declared down) is not taken
// back: it is told it is down, and sends to its PIDs keep failing with
// ErrNodeDown.
func TestDownPeerStaysDown(t *testing.T) {
	srv := tServer(t)
	a := tStart(t, srv.ClientURL(), "a", func(cfg *remote.Config) { cfg.FailureTimeout = time.Minute })
	f, fake := tFakeUp(t, srv.ClientURL(), a)
	f.bye(a)

	f.publish(f.all, remote.EncodeHello(fake, "fake", false, false, nil))
	for {
		m := tRecv(t, f.ctl, "a to tell the fake it is down")
		if remote.IsDown(m.Data, a.Node.Node()) {
			break // other control messages (acks of the first hello) may come first
		}
	}
	err := a.S.Tell(relay.PID{Node: fake, ID: 1}, "still down")
	assert.ErrorIs(t, err, remote.ErrNodeDown)
	st := a.Stats()
	assert.Equal(t, 1, st.Peers.Down)
	assert.Zero(t, st.Peers.Up+st.Peers.Joining)
}

// TestForgottenIncarnationsKeepTheirCounts: a node remembers a bounded
// number of down incarnations; the PIDs of one it forgot fail with
// ErrUnknownNode instead of ErrNodeDown, and what was sent to it still
// counts in Stats.
func TestForgottenIncarnationsKeepTheirCounts(t *testing.T) {
	srv := tServer(t)
	a := tStart(t, srv.ClientURL(), "a", func(cfg *remote.Config) { cfg.FailureTimeout = time.Minute })
	first := a.Node.Node() + 1
	f := tFakePeer(t, srv.ClientURL(), first)
	f.hello(a, true)
	tRecv(t, a.Up, "the first fake to be up")
	require.NoError(t, a.S.Tell(relay.PID{Node: first, ID: 1}, "hello"))
	tRecv(t, f.data, "the batch for the first fake")
	tEventually(t, func() bool { return a.Stats().Sent == 1 }, "the message is counted as sent")
	f.bye(a)

	// 1024 more incarnations come and go: the first is forgotten. (The
	// hook that reports them must not block.)
	const more = 1024
	drained := make(chan struct{})
	stopDraining := make(chan struct{})
	go func() {
		defer close(drained)
		for {
			select {
			case <-a.Down:
			case <-stopDraining:
				return
			}
		}
	}()
	defer func() { close(stopDraining); <-drained }()
	for i := range uint32(more) {
		num := first + 1 + i
		f.publish(f.all, remote.EncodeHello(num, fmt.Sprint("fake", num), false, false, nil))
		f.publish(f.all, remote.EncodeBye(num))
	}
	tEventually(t, func() bool { return a.Stats().Peers.Lost == more+1 }, "every fake is declared down (%+v)", a.Stats())
	st := a.Stats()
	assert.Equal(t, more, st.Peers.Down, "only so many are remembered")
	assert.Len(t, a.Peers(), more)
	assert.Equal(t, uint64(1), st.Sent, "the counts of a forgotten peer stay")
	assert.Equal(t, uint64(1), st.BatchesSent)
	err := a.S.Tell(relay.PID{Node: first, ID: 1}, "to a forgotten incarnation")
	assert.ErrorIs(t, err, remote.ErrUnknownNode)
	assert.ErrorIs(t, err, scheduler.ErrProcessNotFound)
	err = a.S.Tell(relay.PID{Node: first + 1, ID: 1}, "to a remembered one")
	assert.ErrorIs(t, err, remote.ErrNodeDown)
}

// TestDeclaredDownForEachEvent: how a peer is declared down, event by
// event, with FailureTimeout long enough that silence never decides: a
// peer whose connection closes is found by a probe (no one is subscribed
// for its number), and a peer that restarts under the same name is
// declared down as soon as its new incarnation says hello; the new one
// is up, and the old one's waiting messages come back with ErrNodeDown.
func TestDeclaredDownForEachEvent(t *testing.T) {
	srv := tServer(t)
	a := tStart(t, srv.ClientURL(), "a", func(cfg *remote.Config) { cfg.FailureTimeout = time.Minute })

	t.Run("its connection closed", func(t *testing.T) {
		f, fake := tFakeUp(t, srv.ClientURL(), a)
		probes := a.Stats().Probes
		f.nc.Close()
		down := tRecv(t, a.Down, "the fake whose connection closed to be declared down")
		assert.Equal(t, fake, down.Node)
		assert.ErrorIs(t, down.Reason, remote.ErrNodeDown)
		assert.Contains(t, down.Reason.Error(), "no one answers for its number")
		assert.Greater(t, a.Stats().Probes, probes)
	})

	t.Run("it restarted under the same name", func(t *testing.T) {
		old := tFakePeer(t, srv.ClientURL(), a.Node.Node()+10)
		old.hello(a, false) // not acked: what a sends it waits
		require.NoError(t, a.S.Tell(relay.PID{Node: old.num, ID: 1}, "waiting"))
		_, back := tTellOnce(t, a.S, relay.PID{Node: old.num, ID: 2}, "from a process")
		newer := tFakePeer(t, srv.ClientURL(), a.Node.Node()+11)
		newer.hello(a, true)
		down := tRecv(t, a.Down, "the old incarnation to be declared down")
		assert.Equal(t, old.num, down.Node)
		assert.Contains(t, down.Reason.Error(), fmt.Sprintf("it restarted as node %d", newer.num))
		assert.Equal(t, newer.num, tRecv(t, a.Up, "the new incarnation to be up").Node)
		ev := tRecv(t, back, "the waiting message to come back")
		assert.ErrorIs(t, ev.Error, remote.ErrNodeDown)
		assert.Equal(t, "from a process", ev.Data)
		num, ok := a.Lookup("fake")
		assert.True(t, ok)
		assert.Equal(t, newer.num, num)
		newer.bye(a)
	})
}

// TestPeerDownOfAPeerNeverUp: a peer declared down while it was still
// joining is reported to PeerDown, though PeerUp never reported it, as
// the Hooks' doc says: code that counts peers by the two hooks must
// not assume a PeerUp before each PeerDown.
func TestPeerDownOfAPeerNeverUp(t *testing.T) {
	srv := tServer(t)
	a := tStart(t, srv.ClientURL(), "a", func(cfg *remote.Config) { cfg.FailureTimeout = time.Minute })
	f := tFakePeer(t, srv.ClientURL(), a.Node.Node()+1)
	f.hello(a, false) // a knows the fake, which never acks: it stays joining
	require.Equal(t, []remote.Peer{{Name: "fake", Node: f.num}}, a.Peers(), "joining")
	f.publish(f.all, remote.EncodeBye(f.num))
	down := tRecv(t, a.Down, "the joining peer to be declared down")
	assert.Equal(t, f.num, down.Node)
	assert.False(t, down.Up)
	assert.ErrorIs(t, down.Reason, remote.ErrNodeDown)
	select {
	case p := <-a.Up:
		t.Errorf("PeerUp reported %v, which never was up", p)
	default:
	}
}

// TestHeartbeatLongerThanAPeersFailureTimeout: a node judges a peer's
// silence by its own FailureTimeout, whatever the peer's Heartbeat, so a
// peer whose heartbeats are further apart than that is declared down
// though it runs, and, told so, declares the first down too: the nodes
// of a cluster need heartbeats shorter than every failure timeout.
func TestHeartbeatLongerThanAPeersFailureTimeout(t *testing.T) {
	srv := tServer(t)
	a := tStart(t, srv.ClientURL(), "a", func(cfg *remote.Config) {
		cfg.Heartbeat, cfg.FailureTimeout = 20*time.Millisecond, 300*time.Millisecond
	})
	b := tStart(t, srv.ClientURL(), "b", func(cfg *remote.Config) {
		cfg.Heartbeat, cfg.FailureTimeout = time.Second, time.Minute
	})
	assert.Equal(t, "b", tRecv(t, a.Up, "a to see b up").Name)
	down := tRecv(t, a.Down, "a to declare b down")
	assert.Equal(t, "b", down.Name)
	assert.ErrorIs(t, down.Reason, remote.ErrNodeDown)
	assert.Contains(t, down.Reason.Error(), "silent for")
	assert.Equal(t, "a", tRecv(t, b.Down, "b to hear it is down and declare a down").Name)
}

// TestEveryNumberTaken: New draws a few random node numbers and checks
// each; when someone answers for every one, New picks none and fails
// with ErrNameConflict, leaving nothing connected. A name used already
// is no such failure: the name is only checked once the node joins (see
// Config.Name).
func TestEveryNumberTaken(t *testing.T) {
	srv := tServer(t)
	nc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	defer nc.Close()
	all, _, _ := remote.Subjects("test", 0)
	_, err = nc.Subscribe(all+".*", func(m *nats.Msg) { _ = m.Respond([]byte("taken")) })
	require.NoError(t, err)
	require.NoError(t, nc.Flush())

	node, err := remote.New(remote.Config{Cluster: "test", Name: "a", URL: srv.ClientURL()})
	if node != nil {
		ctx, cancel := context.WithTimeout(context.Background(), tWait)
		defer cancel()
		_ = node.Close(ctx)
	}
	require.ErrorIs(t, err, remote.ErrNameConflict)
	assert.Nil(t, node)
	tEventually(t, func() bool { return srv.NumClients() == 1 }, "New leaves nothing connected (%d clients)", srv.NumClients())
}
