package remote_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	scheduler "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/remote"
)

// TestCloseWithNoCallbacksAfterClientClose: with
// nats.NoCallbacksAfterClientClose in Config.Options, NATS calls no
// closed handler when the node closes its connection; Close, of a node
// started or not, returns all the same, and the node is closed.
func TestCloseWithNoCallbacksAfterClientClose(t *testing.T) {
	srv := tServer(t)
	for _, started := range []bool{false, true} {
		name := map[bool]string{false: "not started", true: "started"}[started]
		t.Run(name, func(t *testing.T) {
			node, err := remote.New(remote.Config{
				Cluster: "test", Name: "a", URL: srv.ClientURL(),
				Options: []nats.Option{nats.NoCallbacksAfterClientClose()},
			})
			require.NoError(t, err)
			s, err := scheduler.New(scheduler.WithNode(node.Node()), scheduler.WithTransport(node))
			require.NoError(t, err)
			defer func() { _ = s.Shutdown(context.Background()) }()
			if started {
				require.NoError(t, node.Start(t.Context(), s))
			}
			closed := make(chan error, 1)
			go func() { closed <- node.Close(context.Background()) }()
			assert.NoError(t, tRecv(t, closed, "Close to return"))
			assert.ErrorIs(t, node.Start(t.Context(), s), remote.ErrClosed, "Start after Close")
		})
	}
}
