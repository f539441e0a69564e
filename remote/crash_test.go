package remote_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	scheduler "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
	"github.com/procsched/scheduler/remote"
)

// TestCrashedNodeDeclaredDown kills a node running in another process
// with SIGKILL: the surviving node declares it down, its watchers are
// told, and a restart under the same name is a new incarnation whose
// number the old PIDs do not carry.
func TestCrashedNodeDeclaredDown(t *testing.T) {
	srv := tServer(t)
	a := tStart(t, srv.ClientURL(), "a", nil)
	c := tStartSubprocess(t, srv.ClientURL(), "c")
	ctx, cancel := context.WithTimeout(context.Background(), tWait)
	defer cancel()
	num, err := a.WaitPeer(ctx, "c")
	require.NoError(t, err)
	require.Equal(t, c.num, num)

	child, err := a.Spawn(ctx, "c", "echo", "run", nil)
	require.NoError(t, err)
	require.Equal(t, c.num, child.Node)

	// A process monitors the child; once the echo has answered a ping
	// sent after the monitor, c holds the monitor.
	events := make(chan scheduler.Event, 4)
	watcher := tSubmit(t, a.S, func(_ *tProc, n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
		if n == 0 {
			out.Monitor(1, child)
			out.Tell(child, "ping")
			return nil
		}
		for _, ev := range evs {
			events <- ev
			if ev.Type == scheduler.EventYieldComplete {
				out.Done(payload.Payload{})
			}
		}
		return nil
	})
	pong := tRecv(t, events, "the echo")
	require.Equal(t, scheduler.EventMessage, pong.Type)
	require.Equal(t, "ping", pong.Data)

	c.kill()
	down := tRecv(t, a.Down, "a to declare the killed node down")
	assert.Equal(t, "c", down.Name)
	assert.Equal(t, c.num, down.Node)
	assert.ErrorIs(t, down.Reason, remote.ErrNodeDown)
	t.Log(down.Reason)
	ev := tRecv(t, events, "the watcher to be told")
	assert.Equal(t, scheduler.EventYieldComplete, ev.Type)
	exit := ev.Data.(scheduler.Exit)
	assert.Equal(t, scheduler.ExitGone, exit.Reason)
	assert.ErrorIs(t, exit.Err, remote.ErrNodeDown)
	_, err = tWaitResult(t, watcher)
	require.NoError(t, err)

	// The same name again: a new number, and the old PIDs bounce.
	c2 := tStartSubprocess(t, srv.ClientURL(), "c")
	assert.NotEqual(t, c.num, c2.num, "a restart is a new incarnation")
	num, err = a.WaitPeer(ctx, "c")
	require.NoError(t, err)
	assert.Equal(t, c2.num, num)
	err = a.S.Tell(child, "to the old incarnation")
	assert.ErrorIs(t, err, remote.ErrNodeDown)
	assert.ErrorIs(t, err, scheduler.ErrProcessNotFound)
	bounce := tBounceOf(t, a.S, child, "to the old incarnation")
	assert.ErrorIs(t, bounce.Error, scheduler.ErrProcessNotFound)
	// The new incarnation works.
	child2, err := a.Spawn(ctx, "c", "echo", "run", nil)
	require.NoError(t, err)
	assert.Equal(t, c2.num, child2.Node)
	assert.NotEqual(t, relay.PID{}, child2)
	c2.stop()
	tRecv(t, a.Down, "a to see the second c leave")
}
