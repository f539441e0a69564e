package remote_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	scheduler "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/remote"
)

// errRefused is what the publish hook of tRefuseNext fails a batch with.
var errRefused = errors.New("the write failed")

// tRefuseNext makes from's NATS refuse, with errRefused, the next batch
// to node to that is no sync marker after each call of the returned arm,
// and counts the batches it refused on refused.
func tRefuseNext(t testing.TB, from, to *tNode) (arm func(), refused <-chan struct{}) {
	_, _, data := remote.Subjects("test", to.Node.Node())
	next := make(chan struct{}, 1)
	done := make(chan struct{}, 16)
	remote.SetPublishHook(from.Node, func(subject string, b []byte) error {
		if subject != data || remote.IsSyncMarker(b) {
			return nil
		}
		select {
		case <-next:
			done <- struct{}{}
			return errRefused
		default:
			return nil
		}
	})
	t.Cleanup(func() { remote.SetPublishHook(from.Node, nil) })
	return func() { next <- struct{}{} }, done
}

// TestRefusedBatchStillEndsTheWatch: the end of a process watched from
// another node goes in a batch NATS refuses to publish; the watcher is
// told of the end all the same, by a later batch, and not as a node
// that went down: neither node did.
func TestRefusedBatchStillEndsTheWatch(t *testing.T) {
	_, a, b := tTwoNodes(t, nil)
	target, _ := tCollector(t, b.S, 1)
	exits := make(chan scheduler.Exit, 1)
	a.Monitor(target.PID(), func(e scheduler.Exit) { exits <- e })
	tEventually(t, func() bool { return b.Stats().MonitorsHeld == 1 }, "b holds the monitor")

	arm, refused := tRefuseNext(t, b, a)
	arm()
	require.NoError(t, b.S.Terminate(target.PID()))
	tRecv(t, refused, "b's batch with the end refused")
	e := tRecv(t, exits, "the end of the watched process, whose first batch NATS refused")
	assert.Equal(t, target.PID(), e.PID)
	assert.NotEqual(t, scheduler.ExitGone, e.Reason, "the process ended; its node did not go down: %v", e)
	assert.NotErrorIs(t, e.Err, remote.ErrNodeDown)
	assert.Zero(t, b.Stats().MonitorsHeld)
}

// TestRefusedBatchStillAnswersTheAsker: an answer goes in a batch NATS
// refuses to publish; like every message of the batch it comes back to
// its sender, and its asker gets, as it would for an answer refused at
// once, the answer without data with the failure as its error, instead
// of waiting for ever.
func TestRefusedBatchStillAnswersTheAsker(t *testing.T) {
	_, a, b := tTwoNodes(t, nil)
	doubler := tDoubler(t, b.S)
	arm, refused := tRefuseNext(t, b, a)
	arm()
	ev := tAsk(t, a.S, doubler.PID(), payload.Of(20))
	tRecv(t, refused, "b's batch with the answer refused")
	require.Error(t, ev.Error, "the answer never crossed: the asker learns why")
	assert.ErrorIs(t, ev.Error, remote.ErrDisconnected)
	assert.Contains(t, ev.Error.Error(), errRefused.Error())
	assert.Equal(t, doubler.PID(), ev.From, "the failure comes from the replier")

	ev = tAsk(t, a.S, doubler.PID(), payload.Of(21))
	require.Error(t, ev.Error)
	assert.Contains(t, ev.Error.Error(), "odd", "the link goes on: the next answer crosses")
	assert.NotErrorIs(t, ev.Error, remote.ErrDisconnected)
}

// TestRefusedBatchStillForgetsTheMonitor: the cancelling of a monitor
// goes in a batch NATS refuses to publish; the other node forgets the
// monitor all the same, instead of holding it until its process ends.
func TestRefusedBatchStillForgetsTheMonitor(t *testing.T) {
	_, a, b := tTwoNodes(t, nil)
	target, _ := tCollector(t, b.S, 1)
	stop := a.Monitor(target.PID(), func(scheduler.Exit) { t.Error("a cancelled monitor was called") })
	tEventually(t, func() bool { return b.Stats().MonitorsHeld == 1 }, "b holds the monitor")

	arm, refused := tRefuseNext(t, a, b)
	arm()
	require.True(t, stop())
	tRecv(t, refused, "a's batch with the cancel refused")
	tEventually(t, func() bool { return b.Stats().MonitorsHeld == 0 },
		"b forgets the monitor whose cancel NATS refused once (%d held)", b.Stats().MonitorsHeld)
}

// TestRefusedBatchStillAnswersTheSpawn: the answer to a spawn goes in a
// batch NATS refuses to publish; the spawn gets it all the same, by a
// later batch, instead of waiting until its deadline.
func TestRefusedBatchStillAnswersTheSpawn(t *testing.T) {
	_, a, b := tTwoNodes(t, nil)
	require.NoError(t, b.Register("echo", func() scheduler.Process { return &echo{} }))
	arm, refused := tRefuseNext(t, b, a)
	arm()
	ctx, cancel := context.WithTimeout(context.Background(), tWait)
	defer cancel()
	child, err := a.Spawn(ctx, "b", "echo", "run", nil)
	tRecv(t, refused, "b's batch with the spawn's answer refused")
	require.NoError(t, err, "the spawn's answer, refused once, still comes")
	assert.Equal(t, b.Node.Node(), child.Node)
}

// TestRefusedBatchStillBounces: a message to a process that has ended is
// bounced in a batch NATS refuses to publish; the sender is told all the
// same, by a later batch.
func TestRefusedBatchStillBounces(t *testing.T) {
	_, a, b := tTwoNodes(t, nil)
	h := tSubmit(t, b.S, func(_ *tProc, _ int, _ []scheduler.Event, out *scheduler.StepOutput) error {
		out.Done(payload.Payload{})
		return nil
	})
	_, err := tWaitResult(t, h)
	require.NoError(t, err)
	arm, refused := tRefuseNext(t, b, a)
	arm()
	ev := tBounceOf(t, a.S, h.PID(), "late")
	tRecv(t, refused, "b's batch with the bounce refused")
	assert.ErrorIs(t, ev.Error, scheduler.ErrProcessNotFound)
	assert.NotErrorIs(t, ev.Error, remote.ErrDisconnected, "the bounce is b's, not a refusal of a's batch")
}

// TestRefusedBatchIsNotRetriedInALoop: while NATS refuses every batch,
// the frames that must go wait for the next send, grant or heartbeat to
// be tried again, instead of being published again and again at once;
// they survive every refusal, and go once NATS takes batches again,
// before what was sent after them. The
// heartbeat is long, so that only the test's own send tries again.
func TestRefusedBatchIsNotRetriedInALoop(t *testing.T) {
	_, a, b := tTwoNodes(t, func(cfg *remote.Config) {
		cfg.Heartbeat = time.Minute
		cfg.FailureTimeout = 3 * time.Minute
	})
	target, _ := tCollector(t, b.S, 1)
	exits := make(chan scheduler.Exit, 1)
	a.Monitor(target.PID(), func(e scheduler.Exit) { exits <- e })
	tEventually(t, func() bool { return b.Stats().MonitorsHeld == 1 }, "b holds the monitor")
	sink, got := tCollector(t, a.S, 2)

	_, _, aData := remote.Subjects("test", a.Node.Node())
	var refusing atomic.Bool
	refusing.Store(true)
	tries := make(chan struct{}, 1024)
	remote.SetPublishHook(b.Node, func(subject string, data []byte) error {
		if subject != aData || remote.IsSyncMarker(data) || !refusing.Load() {
			return nil
		}
		tries <- struct{}{}
		return errRefused
	})
	t.Cleanup(func() { remote.SetPublishHook(b.Node, nil) })

	require.NoError(t, b.S.Terminate(target.PID()))
	tRecv(t, tries, "the batch with the end refused")
	select {
	case <-tries:
		t.Fatal("the refused batch was tried again with nothing to make it")
	case <-time.After(200 * time.Millisecond): // a bounded look for what must not happen
	}
	require.NoError(t, b.S.Tell(sink.PID(), "first"))
	tRecv(t, tries, "the batch tried again after a send")
	assert.Len(t, tries, 0, "one send, one try")

	refusing.Store(false)
	require.NoError(t, b.S.Tell(sink.PID(), "second"))
	e := tRecv(t, exits, "the end refused twice")
	assert.NotEqual(t, scheduler.ExitGone, e.Reason)
	// The first message waited behind the refused frames, untried: both
	// cross, after them, in the order sent.
	assert.Equal(t, "first", tRecv(t, got, "the message sent while NATS refused").Data)
	assert.Equal(t, "second", tRecv(t, got, "the message sent after").Data)
}

// TestRefusedBatchDroppedWhenThePeerGoesDown: the frames of a refused
// batch count in what waits for the peer while they wait, and are
// dropped, as everything waiting is, when the peer goes down: the
// watcher they were for has gone with its node.
func TestRefusedBatchDroppedWhenThePeerGoesDown(t *testing.T) {
	_, a, b := tTwoNodes(t, nil)
	target, _ := tCollector(t, b.S, 1)
	a.Monitor(target.PID(), func(scheduler.Exit) {})
	tEventually(t, func() bool { return b.Stats().MonitorsHeld == 1 }, "b holds the monitor")

	_, _, aData := remote.Subjects("test", a.Node.Node())
	tries := make(chan struct{}, 1024)
	remote.SetPublishHook(b.Node, func(subject string, data []byte) error {
		if subject != aData || remote.IsSyncMarker(data) {
			return nil
		}
		select {
		case tries <- struct{}{}:
		default:
		}
		return errRefused
	})
	t.Cleanup(func() { remote.SetPublishHook(b.Node, nil) })

	require.NoError(t, b.S.Terminate(target.PID()))
	tRecv(t, tries, "the batch with the end refused")
	tEventually(t, func() bool { return b.Stats().Buffered > 0 }, "the refused end waits for a later batch, counted")

	a.stop(t)
	tRecv(t, b.Down, "b declares a down")
	tEventually(t, func() bool { return b.Stats().Buffered == 0 },
		"b drops what waited for a (%d bytes)", b.Stats().Buffered)
}
