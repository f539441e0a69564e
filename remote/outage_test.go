package remote_test

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/procsched/scheduler/remote"
)

// tOutage is how long the tests' server outages last: longer than
// their FailureTimeout.
const tOutage = 1500 * time.Millisecond

// TestOutageJudgedByNoOneBeforeTheReconnectIsHandled: a node whose
// connection comes back judges no peer on the silence of the outage,
// even before NATS has called its reconnect handler (here held up behind
// a slow disconnect handler of the user's, which NATS calls on the same
// goroutine): its heartbeats go out again, and the peer, silent for
// longer than FailureTimeout because of the outage, is neither declared
// down at once nor probed into it.
func TestOutageJudgedByNoOneBeforeTheReconnectIsHandled(t *testing.T) {
	srv := tServer(t)
	port := srv.Addr().(*net.TCPAddr).Port
	release := make(chan struct{})
	disconnected := make(chan struct{}, 1)
	a := tStart(t, srv.ClientURL(), "a", func(cfg *remote.Config) {
		cfg.Heartbeat, cfg.FailureTimeout = 20*time.Millisecond, time.Second
		cfg.Options = append(cfg.Options, nats.DisconnectErrHandler(func(*nats.Conn, error) {
			select {
			case disconnected <- struct{}{}:
			default:
			}
			<-release // a slow handler: NATS's callbacks wait behind it
		}))
	})
	var once sync.Once
	releaseOnce := func() { once.Do(func() { close(release) }) }
	t.Cleanup(releaseOnce) // before a closes
	_, fake := tFakeUp(t, srv.ClientURL(), a)
	all, _, _ := remote.Subjects("test", fake)
	observer, err := nats.Connect(srv.ClientURL(), nats.ReconnectWait(20*time.Millisecond), nats.MaxReconnects(-1))
	require.NoError(t, err)
	t.Cleanup(observer.Close)
	heard := make(chan *nats.Msg, 1024)
	_, err = observer.ChanSubscribe(all, heard)
	require.NoError(t, err)
	require.NoError(t, observer.Flush())

	tStopServer(srv)
	tRecv(t, disconnected, "a's disconnect")
	time.Sleep(tOutage) // the outage lasts longer than FailureTimeout: a duration, not a synchronisation
	for len(heard) > 0 {
		<-heard // what a said before the outage
	}
	tServerOn(t, port)
	// a's ticks judge its peers after they publish a heartbeat: once the
	// third heartbeat since the outage is out, two rounds have judged.
	for n := 0; n < 3; {
		if remote.IsHeartbeat(tRecv(t, heard, "a's heartbeats after the outage").Data, a.Node.Node()) {
			n++
		}
	}
	select {
	case p := <-a.Down:
		t.Fatalf("a declared %s down for the outage: %v", p.Name, p.Reason)
	default:
	}
	assert.Zero(t, a.Stats().Peers.Lost)
	assert.Zero(t, a.Stats().Reconnects, "the reconnect handler has not run yet")
	// Close a while the second server runs, once its callbacks go on.
	releaseOnce()
	a.stop(t)
}

// TestOutageDeclaresNoOneDown: a server outage longer than
// FailureTimeout declares no one down by itself: the nodes judge no one
// while cut off, and after it each gives its peers FailureTimeout to
// come back; messages cross again.
func TestOutageDeclaresNoOneDown(t *testing.T) {
	srv := tServer(t)
	port := srv.Addr().(*net.TCPAddr).Port
	short := func(cfg *remote.Config) { cfg.Heartbeat, cfg.FailureTimeout = 20*time.Millisecond, time.Second }
	a := tStart(t, srv.ClientURL(), "a", short)
	b := tStart(t, srv.ClientURL(), "b", short)
	tJoin(t, a, b)
	recv, got := tCollector(t, b.S, 1)

	tStopServer(srv)
	time.Sleep(tOutage) // the outage lasts longer than FailureTimeout: a duration, not a synchronisation
	tServerOn(t, port)
	tEventually(t, func() bool { return a.Stats().Reconnects > 0 && b.Stats().Reconnects > 0 }, "both nodes reconnect")
	require.NoError(t, a.S.Tell(recv.PID(), "after the outage"))
	assert.Equal(t, "after the outage", tRecv(t, got, "the message after the outage").Data)
	for _, n := range []*tNode{a, b} {
		select {
		case p := <-n.Down:
			t.Errorf("%s declared %s down: %v", n.Name(), p.Name, p.Reason)
		default:
		}
		assert.Zero(t, n.Stats().Peers.Lost, "%s", n.Name())
	}
	// Close the nodes while the second server runs.
	b.stop(t)
	a.stop(t)
}
