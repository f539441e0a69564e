package remote_test

import (
	"context"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/procsched/scheduler/remote"
)

// TestHookGoexitCountsAsReturn: a PeerUp or PeerDown hook that calls
// runtime.Goexit returns, as far as the node is concerned: the node
// goes on hearing the cluster (a peer that joins later is seen up, and
// its hooks called), and Close returns.
func TestHookGoexitCountsAsReturn(t *testing.T) {
	srv := tServer(t)
	ups, downs := make(chan remote.Peer, 16), make(chan remote.Peer, 16)
	a := tStart(t, srv.ClientURL(), "a", func(cfg *remote.Config) {
		cfg.Hooks.PeerUp = func(p remote.Peer) { ups <- p; runtime.Goexit() }
		cfg.Hooks.PeerDown = func(p remote.Peer) { downs <- p; runtime.Goexit() }
	})
	b := tStart(t, srv.ClientURL(), "b", nil)
	tJoin(t, a, b)
	assert.Equal(t, "b", tRecvBounded(t, ups, "a's PeerUp for b").Name)

	// b says goodbye: a hears it and calls PeerDown.
	tCloseBounded(t, b)
	assert.Equal(t, "b", tRecvBounded(t, downs, "a's PeerDown for b").Name)

	// A node that joins afterwards is heard, and a keeps messaging it.
	c := tStart(t, srv.ClientURL(), "c", nil)
	ctx, cancel := context.WithTimeout(context.Background(), tGoexitWait)
	defer cancel()
	_, err := a.WaitPeer(ctx, "c")
	require.NoError(t, err, "a waiting for c after its hooks called Goexit")
	assert.Equal(t, "c", tRecvBounded(t, ups, "a's PeerUp for c").Name)
	tRegister(t, a, c)
	assert.NoError(t, tSpawnBounded(t, c, "a", "adder"), "c spawning on a")
	assert.NoError(t, tSpawnBounded(t, a, "c", "adder"), "a spawning on c")
	tCloseBounded(t, a)
}
