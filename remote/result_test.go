package remote_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	scheduler "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
	"github.com/procsched/scheduler/remote"
)

// unsendable ends with a result that cannot cross nodes (a channel,
// which JSON cannot encode): at its first step with method "now"; with
// method "wait", it passes its PID to started at its first step and ends
// when asked to stop.
type unsendable struct {
	method  string
	started chan relay.PID
	stepped bool
}

func (u *unsendable) Init(_ context.Context, method string, _ payload.Payloads) error {
	u.method = method
	return nil
}

func (u *unsendable) Step(evs []scheduler.Event, out *scheduler.StepOutput) error {
	if u.method == "now" {
		out.Done(payload.Of(make(chan int)))
		return nil
	}
	if !u.stepped {
		u.stepped = true
		u.started <- out.Self() // room for one
	}
	for _, ev := range evs {
		if ev.Type == scheduler.EventCancel {
			out.Done(payload.Of(make(chan int)))
		}
	}
	return nil
}

func (u *unsendable) Close() {}

// TestAwaitedResultThatCannotCross: a child on another node that ends
// with a result the wire cannot carry does not complete an awaited spawn
// as if it had ended with nothing: the spawn fails with ErrNotEncodable,
// whether the child finished by itself or was asked to stop. A monitor
// of such a child gets its exit, with the same error.
func TestAwaitedResultThatCannotCross(t *testing.T) {
	_, a, b := tTwoNodes(t, nil)
	started := make(chan relay.PID, 1)
	require.NoError(t, b.Register("unsendable", func() scheduler.Process { return &unsendable{started: started} }))

	ev := tYield(t, a.S, a.SpawnCommand(), remote.Spawn{Node: "b", Kind: "unsendable", Method: "now", Await: true})
	assert.ErrorIs(t, ev.Error, remote.ErrNotEncodable, "a child that finished by itself")
	assert.ErrorIs(t, ev.Error, payload.ErrEncode)
	assert.Equal(t, b.Node.Node(), ev.From.Node)

	// A child asked to stop: a watches it too.
	awaiting := tYielder(t, a.S, a.SpawnCommand(), remote.Spawn{Node: "b", Kind: "unsendable", Method: "wait", Await: true})
	child := tRecv(t, started, "the child to start")
	exits := make(chan scheduler.Exit, 1)
	a.Monitor(child, func(e scheduler.Exit) { exits <- e })
	tEventually(t, func() bool { return b.Stats().MonitorsHeld == 2 }, "b watches the child for the spawn and the monitor")
	require.NoError(t, b.S.Terminate(child))

	res, err := tWaitResult(t, awaiting)
	require.NoError(t, err)
	ev = res.Value().(scheduler.Event)
	assert.ErrorIs(t, ev.Error, remote.ErrNotEncodable, "a child asked to stop")
	assert.Equal(t, child, ev.From)
	e := tRecv(t, exits, "the monitor")
	assert.Equal(t, scheduler.ExitTerminated, e.Reason, "the monitor is told how the child ended")
	assert.ErrorIs(t, e.Err, scheduler.ErrTerminated)
	assert.ErrorIs(t, e.Err, remote.ErrNotEncodable, "and that its result did not cross")
	assert.True(t, e.Result.IsZero())
}

// huge ends at its first step with a result larger than a batch.
type huge struct{}

func (huge) Init(context.Context, string, payload.Payloads) error { return nil }
func (huge) Step(_ []scheduler.Event, out *scheduler.StepOutput) error {
	out.Done(payload.Bytes(make([]byte, 600<<10)))
	return nil
}
func (huge) Close() {}

// TestAwaitedResultTooLarge: a child on another node that ends with a
// result too large for a batch does not leave an awaited spawn waiting:
// the spawn fails with ErrNotEncodable, as for a result JSON cannot
// encode.
func TestAwaitedResultTooLarge(t *testing.T) {
	_, a, b := tTwoNodes(t, nil)
	require.NoError(t, b.Register("huge", func() scheduler.Process { return huge{} }))
	ev := tFirst(t, a.S, scheduler.EventYieldComplete, func(out *scheduler.StepOutput) {
		out.Yield(1, a.SpawnCommand(), remote.Spawn{Node: "b", Kind: "huge", Method: "run", Await: true})
		out.Timeout(1, tWait/3) // a bound on a hang, not a synchronisation
	})
	assert.ErrorIs(t, ev.Error, remote.ErrNotEncodable)
	assert.NotErrorIs(t, ev.Error, scheduler.ErrTimeout)
	assert.Equal(t, b.Node.Node(), ev.From.Node)
	assert.Nil(t, ev.Data)
	assert.Zero(t, b.Stats().Dropped.Overflow, "the exit was not dropped")
}

// verbose fails at its first step with an error whose text is larger
// than a batch.
type verbose struct{}

func (verbose) Init(context.Context, string, payload.Payloads) error { return nil }
func (verbose) Step([]scheduler.Event, *scheduler.StepOutput) error {
	return errors.New(strings.Repeat("x", 600<<10))
}
func (verbose) Close() {}

// TestErrorTextTooLarge: a child on another node that fails with an
// error whose text is larger than a batch still ends an awaited spawn,
// with the error, its text shortened to fit.
func TestErrorTextTooLarge(t *testing.T) {
	_, a, b := tTwoNodes(t, nil)
	require.NoError(t, b.Register("verbose", func() scheduler.Process { return verbose{} }))
	ev := tFirst(t, a.S, scheduler.EventYieldComplete, func(out *scheduler.StepOutput) {
		out.Yield(1, a.SpawnCommand(), remote.Spawn{Node: "b", Kind: "verbose", Method: "run", Await: true})
		out.Timeout(1, tWait/3) // a bound on a hang, not a synchronisation
	})
	assert.NotErrorIs(t, ev.Error, scheduler.ErrTimeout)
	var rerr *remote.Error
	require.True(t, errors.As(ev.Error, &rerr), "the child's error, from b: %v", ev.Error)
	assert.Equal(t, "b", rerr.Node)
	assert.NotEmpty(t, rerr.Text)
	assert.Equal(t, strings.Repeat("x", len(rerr.Text)), rerr.Text, "the start of the child's error")
	assert.Zero(t, b.Stats().Dropped.Overflow, "the exit was not dropped")
}
