package remote_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
