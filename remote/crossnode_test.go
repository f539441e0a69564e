package remote_test

import (
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	scheduler "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/remote"
)

// tDeclareDown makes b declare a down while a runs on: a goodbye in a's
// name and run, published by hand on the cluster's control subject.
func tDeclareDown(t testing.TB, srv *server.Server, a, b *tNode) {
	t.Helper()
	nc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	defer nc.Close()
	all, _, _ := remote.Subjects("test", a.Node.Node())
	require.NoError(t, nc.Publish(all, remote.EncodeByeOf(a.Node)))
	require.NoError(t, nc.Flush())
	for {
		p := tRecv(t, b.Down, "b to declare a down")
		if p.Node == a.Node.Node() {
			return
		}
	}
}

// TestNothingHeldForAPeerDownMeanwhile: a spawn from a peer that b
// declares down while it starts the child (b's data goroutine is in the
// kind's factory) leaves no watch of the child held for that peer: b
// holds nothing for a node that is down, as it drops what it held when
// the node went down.
func TestNothingHeldForAPeerDownMeanwhile(t *testing.T) {
	srv, a, b := tTwoNodes(t, nil)
	entered, gate := make(chan struct{}), make(chan struct{})
	require.NoError(t, b.Register("gated", func() scheduler.Process {
		close(entered)
		<-gate
		return &echo{}
	}))
	tYielder(t, a.S, a.SpawnCommand(), remote.Spawn{Node: "b", Kind: "gated", Method: "run", Await: true})
	tRecv(t, entered, "b to take the spawn")
	tDeclareDown(t, srv, a, b)
	close(gate)
	tEventually(t, func() bool { return len(b.S.Processes()) == 1 }, "the child to start (%d processes)", len(b.S.Processes()))
	tEventually(t, func() bool { return b.Stats().MonitorsHeld == 0 }, "b holds nothing for a, which is down (%d held)", b.Stats().MonitorsHeld)
}
