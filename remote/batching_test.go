package remote_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	scheduler "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
	"github.com/procsched/scheduler/remote"
)

// TestBurstGoesAsOneBatch watches the batches a node publishes to a
// peer played by hand: messages told while the peer has not acked the
// node wait, and go out together as one NATS message when it does; a
// message told later, alone, goes out at once as its own batch.
func TestBurstGoesAsOneBatch(t *testing.T) {
	srv := tServer(t)
	a := tStart(t, srv.ClientURL(), "a", func(cfg *remote.Config) { cfg.FailureTimeout = time.Minute })
	fake := a.Node.Node() + 1
	f := tFakePeer(t, srv.ClientURL(), fake)
	// The fake says hello; a registers it and acks, but its link stays
	// closed until the fake acks back.
	f.hello(a, false)
	const burst = 100
	to := relay.PID{Node: fake, ID: 9}
	h := tSubmit(t, a.S, func(_ *tProc, n int, _ []scheduler.Event, out *scheduler.StepOutput) error {
		for i := range burst {
			out.Tell(to, fmt.Sprint(i))
		}
		out.Done(payload.Payload{})
		return nil
	})
	_, err := tWaitResult(t, h)
	require.NoError(t, err)
	select {
	case m := <-f.data:
		t.Fatalf("a published %d bytes before the peer acked", len(m.Data))
	default:
	}
	st := a.Stats()
	assert.Equal(t, 1, st.Peers.Joining)
	assert.Equal(t, []remote.Peer{{Name: "fake", Node: fake}}, a.Peers(), "not up while joining, though messages wait for it")
	assert.Zero(t, st.Sent, "nothing published")
	assert.Positive(t, st.Buffered, "the burst waits")

	f.ack(a)
	m := tRecv(t, f.data, "the burst")
	msgs, err := remote.DecodeBatch(m.Data, a.Node.Node(), fake)
	require.NoError(t, err)
	require.Len(t, msgs, burst, "the burst went out as one batch")
	for i, msg := range msgs {
		assert.Equal(t, fmt.Sprint(i), msg.Data, "in order")
		assert.Equal(t, h.PID(), msg.From)
		assert.Equal(t, to, msg.To)
	}

	require.NoError(t, a.S.Tell(to, "alone"))
	m = tRecv(t, f.data, "the lone message")
	msgs, err = remote.DecodeBatch(m.Data, a.Node.Node(), fake)
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	assert.Equal(t, "alone", msgs[0].Data)
	assert.Equal(t, uint64(2), a.Stats().BatchesSent)

	f.bye(a)
}
