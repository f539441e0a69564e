package remote_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	scheduler "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
	"github.com/procsched/scheduler/remote"
)

// A runtime.Goexit (what t.FailNow and require.* call) or a panic in
// the user code a node calls: the factories of its kinds, the Init of
// the processes they make, its hooks. Every wait is bounded by
// tGoexitWait, so that a node gone deaf fails the test with a message
// instead of hanging it.

// tGoexitWait bounds each wait of these tests.
const tGoexitWait = 5 * time.Second

// goexitInit is a process whose Init calls runtime.Goexit.
type goexitInit struct{ adder }

func (*goexitInit) Init(context.Context, string, payload.Payloads) error {
	runtime.Goexit()
	return nil
}

// tSpawnBounded spawns kind on node from from, failing the test if no
// answer comes within tGoexitWait.
func tSpawnBounded(t *testing.T, from *tNode, node, kind string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), tGoexitWait)
	defer cancel()
	_, err := from.Spawn(ctx, node, kind, "run", nil)
	require.NotErrorIs(t, err, context.DeadlineExceeded, "no answer to the spawn of %q on %q within %v: the node went deaf", kind, node, tGoexitWait)
	return err
}

// tCloseBounded closes n, failing the test if Close does not return nil
// within tGoexitWait.
func tCloseBounded(t *testing.T, n *tNode) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), tGoexitWait)
	defer cancel()
	assert.NoError(t, n.Close(ctx), "closing %s", n.Name())
}

// TestFactoryGoexitFailsTheSpawn: a factory that calls runtime.Goexit
// when a peer spawns its kind fails that spawn with an error matching
// ErrPanic and ErrGoexit, and the node goes on hearing its peer.
func TestFactoryGoexitFailsTheSpawn(t *testing.T) {
	_, a, b := tTwoNodes(t, nil)
	tRegister(t, a)
	require.NoError(t, a.Register("quits", func() scheduler.Process { runtime.Goexit(); return nil }))

	err := tSpawnBounded(t, b, "a", "quits")
	assert.ErrorIs(t, err, scheduler.ErrPanic)
	assert.ErrorIs(t, err, scheduler.ErrGoexit)

	// a still takes spawns and messages from b.
	assert.NoError(t, tSpawnBounded(t, b, "a", "adder"), "a spawn after the Goexit")
	tCloseBounded(t, a)
}

// TestInitGoexitFailsTheSpawn: a process of a spawned kind whose Init
// calls runtime.Goexit fails its spawn with an error matching ErrPanic
// and ErrGoexit, as a Goexit in Init fails a local start, and the node
// goes on hearing its peer.
func TestInitGoexitFailsTheSpawn(t *testing.T) {
	_, a, b := tTwoNodes(t, nil)
	tRegister(t, a)
	require.NoError(t, a.Register("quits", func() scheduler.Process { return &goexitInit{} }))

	err := tSpawnBounded(t, b, "a", "quits")
	assert.ErrorIs(t, err, scheduler.ErrPanic)
	assert.ErrorIs(t, err, scheduler.ErrGoexit)

	assert.NoError(t, tSpawnBounded(t, b, "a", "adder"), "a spawn after the Goexit")
	tCloseBounded(t, a)
}

// TestFactoryPanicFailsTheSpawn: a factory's panic fails the spawn with
// an error matching ErrPanic (not ErrGoexit) and the node goes on.
func TestFactoryPanicFailsTheSpawn(t *testing.T) {
	_, a, b := tTwoNodes(t, nil)
	tRegister(t, a)
	require.NoError(t, a.Register("panics", func() scheduler.Process { panic("no process today") }))

	err := tSpawnBounded(t, b, "a", "panics")
	assert.ErrorIs(t, err, scheduler.ErrPanic)
	assert.NotErrorIs(t, err, scheduler.ErrGoexit)
	assert.ErrorContains(t, err, "no process today")

	assert.NoError(t, tSpawnBounded(t, b, "a", "adder"), "a spawn after the panic")
}

// tRecvBounded receives from ch or fails after tGoexitWait.
func tRecvBounded[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(tGoexitWait):
		t.Fatalf("no %s within %v", what, tGoexitWait)
		panic("unreachable")
	}
}

// TestLocalFactoryGoexit: a spawn of this node's kind runs the factory
// on the spawner's goroutine. A Goexit there does what one in the Init of
// a child does: a Spawn yield's process ends with a PanicError for
// ErrGoexit, and Node.Spawn's caller's goroutine ends; the node and its
// scheduler go on, and nothing is left waiting or locked.
func TestLocalFactoryGoexit(t *testing.T) {
	_, a, b := tTwoNodes(t, nil)
	tRegister(t, a)
	require.NoError(t, a.Register("quits", func() scheduler.Process { runtime.Goexit(); return nil }))

	h := tYielder(t, a.S, a.SpawnCommand(), remote.Spawn{Kind: "quits", Method: "run"})
	_, err := tWaitResult(t, h)
	var pe *scheduler.PanicError
	require.ErrorAs(t, err, &pe, "the spawner's end")
	assert.ErrorIs(t, err, scheduler.ErrGoexit)

	ended := make(chan error, 1)
	go func() {
		returned := false
		defer func() {
			if !returned {
				ended <- scheduler.ErrGoexit
			}
		}()
		ctx, cancel := context.WithTimeout(context.Background(), tGoexitWait)
		defer cancel()
		_, err := a.Spawn(ctx, "", "quits", "run", nil)
		returned = true
		ended <- err
	}()
	assert.Equal(t, scheduler.ErrGoexit, tRecvBounded(t, ended, "end of Node.Spawn's caller"), "Node.Spawn returned")

	assert.NoError(t, tSpawnBounded(t, a, "", "adder"), "a local spawn after the Goexits")
	assert.NoError(t, tSpawnBounded(t, b, "a", "adder"), "a remote spawn after the Goexits")
	tCloseBounded(t, a)
}

// TestMonitorFuncGoexit: the function given to Node.Monitor runs in its
// own goroutine, for a process of another node as for one of this node,
// so a runtime.Goexit in it ends that goroutine only: the node goes on
// hearing its peers.
func TestMonitorFuncGoexit(t *testing.T) {
	_, a, b := tTwoNodes(t, nil)
	tRegister(t, a, b)
	exits := make(chan scheduler.Exit, 2)
	watch := func(e scheduler.Exit) { exits <- e; runtime.Goexit() }

	remoteChild, err := a.Spawn(t.Context(), "b", "echo", "run", nil)
	require.NoError(t, err)
	localChild, err := a.Spawn(t.Context(), "a", "echo", "run", nil)
	require.NoError(t, err)
	a.Monitor(remoteChild, watch)
	a.Monitor(localChild, watch)
	require.NoError(t, a.S.Send(relay.Message{To: remoteChild, Data: "stop"}))
	require.NoError(t, a.S.Send(relay.Message{To: localChild, Data: "stop"}))
	got := map[relay.PID]scheduler.ExitReason{}
	for range 2 {
		e := tRecvBounded(t, exits, "a monitored end")
		got[e.PID] = e.Reason
	}
	assert.Equal(t, map[relay.PID]scheduler.ExitReason{remoteChild: scheduler.ExitDone, localChild: scheduler.ExitDone}, got)

	assert.NoError(t, tSpawnBounded(t, a, "b", "adder"), "a spawning on b after the Goexits")
	assert.NoError(t, tSpawnBounded(t, b, "a", "adder"), "b spawning on a after the Goexits")
	tCloseBounded(t, a)
}

// marshalsBadly is a message body whose MarshalJSON panics, or calls
// runtime.Goexit if goexit is set.
type marshalsBadly struct{ goexit bool }

func (m marshalsBadly) MarshalJSON() ([]byte, error) {
	if m.goexit {
		runtime.Goexit()
	}
	panic("cannot marshal")
}

// TestMarshalJSONPanicReachesTheSender: a body's MarshalJSON runs on the
// goroutine that sends, before the node takes any lock: its panic
// reaches the caller of Send as the json package passes it on, and its
// Goexit ends that goroutine; either way nothing is sent or left locked,
// and later sends to the same node go out.
func TestMarshalJSONPanicReachesTheSender(t *testing.T) {
	_, a, b := tTwoNodes(t, nil)
	sink, evs := tCollector(t, b.S, 4)
	outcome := make(chan any, 1)
	for _, goexit := range []bool{false, true} {
		go func() {
			returned := false
			defer func() {
				switch v := recover(); {
				case v != nil:
					outcome <- v
				case !returned:
					outcome <- scheduler.ErrGoexit
				}
			}()
			err := a.Send(relay.Message{To: sink.PID(), Data: payload.Of(marshalsBadly{goexit})})
			returned = true
			outcome <- err
		}()
		got := tRecvBounded(t, outcome, "the end of the sending goroutine")
		if goexit {
			assert.Equal(t, scheduler.ErrGoexit, got, "the sender's goroutine ended")
		} else {
			assert.Equal(t, "cannot marshal", got, "the panic reached the sender")
		}
		// The peer's link is not held: a later send goes out and arrives.
		require.NoError(t, a.Send(relay.Message{To: sink.PID(), Data: "after"}), "a send after the MarshalJSON")
		assert.Equal(t, "after", tRecvBounded(t, evs, "the message sent after the MarshalJSON").Data)
	}
}

// endsBadly is a process that ends at once with a result whose
// MarshalJSON calls runtime.Goexit.
type endsBadly struct{ adder }

func (*endsBadly) Step(_ []scheduler.Event, out *scheduler.StepOutput) error {
	out.Done(payload.Of(marshalsBadly{goexit: true}))
	return nil
}

// TestResultMarshalGoexitAnswersTheAwait: a result whose MarshalJSON
// calls runtime.Goexit, for a spawn that another node awaits, still
// answers the await: with an error matching ErrNotEncodable and
// ErrGoexit instead of the result, as for a result that JSON cannot
// encode.
func TestResultMarshalGoexitAnswersTheAwait(t *testing.T) {
	_, a, b := tTwoNodes(t, nil)
	tRegister(t, a)
	require.NoError(t, a.Register("endsBadly", func() scheduler.Process { return &endsBadly{} }))
	ev := tYield(t, b.S, b.SpawnCommand(), remote.Spawn{Node: "a", Kind: "endsBadly", Method: "run", Await: true})
	assert.ErrorIs(t, ev.Error, remote.ErrNotEncodable)
	assert.ErrorIs(t, ev.Error, scheduler.ErrGoexit)
	assert.NoError(t, tSpawnBounded(t, b, "a", "adder"), "b spawning on a after the Goexit")
}
