package remote_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	scheduler "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// subprocessEnv selects what a re-executed test binary runs instead of
// the tests.
const subprocessEnv = "PROCSCHED_REMOTE_SUBPROCESS"

func TestTellAcrossNodes(t *testing.T) {
	_, a, b := tTwoNodes(t, nil)

	recv, got := tCollector(t, b.S, 16)
	target := recv.PID()
	h := tTeller(t, a.S, target, "hello", []byte("bytes"), payload.Of(42), relay.PID{Node: 7, ID: 9}, nil)
	res, err := tWaitResult(t, h)
	require.NoError(t, err)
	assert.Empty(t, res.Value(), "nothing came back to the sender")

	ev := tRecv(t, got, "the string")
	assert.Equal(t, scheduler.EventMessage, ev.Type)
	assert.Equal(t, h.PID(), ev.From, "From is the sending process")
	assert.Equal(t, "hello", ev.Data)
	assert.Equal(t, []byte("bytes"), tRecv(t, got, "the bytes").Data)
	p := tRecv(t, got, "the payload").Result()
	assert.Equal(t, payload.FormatJSON, p.Format(), "a Go value crosses as JSON")
	n, err := payload.As[int](p)
	require.NoError(t, err)
	assert.Equal(t, 42, n)
	assert.Equal(t, relay.PID{Node: 7, ID: 9}, tRecv(t, got, "the PID").Data)
	assert.Nil(t, tRecv(t, got, "nil").Data)

	// From outside any process.
	require.NoError(t, a.S.Tell(target, "outside"))
	ev = tRecv(t, got, "the message from outside")
	assert.True(t, ev.From.IsZero())
	assert.Equal(t, "outside", ev.Data)
}
