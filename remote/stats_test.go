package remote_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	scheduler "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
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
	back := make(chan scheduler.Event, 1)
	tSubmit(t, a.S, func(_ *tProc, n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
		if n == 0 {
			out.Tell(to, "from a process")
			return nil
		}
		for _, ev := range evs {
			if ev.Type == scheduler.EventMessage {
				back <- ev
				out.Done(payload.Payload{})
			}
		}
		return nil
	})
	tEventually(t, func() bool { return a.Stats().Buffered > one }, "the process's message waits too")
	f.bye(a)

	ev := tRecv(t, back, "the process's message to come back")
	assert.ErrorIs(t, ev.Error, remote.ErrNodeDown)
	assert.Equal(t, "from a process", ev.Data)
	st := a.Stats()
	assert.Equal(t, uint64(2), st.Returned.NodeDown, "both failures are counted: %+v", st.Returned)
	assert.Zero(t, st.Buffered)
}
