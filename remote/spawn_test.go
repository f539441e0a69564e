package remote_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	scheduler "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
	"github.com/procsched/scheduler/remote"
)

// echo answers every message to its sender, and ends with "stop", with
// the number of messages it answered.
type echo struct{ answered int }

func (e *echo) Init(_ context.Context, method string, _ payload.Payloads) error {
	if method != "run" {
		return fmt.Errorf("%w: %q", scheduler.ErrUnknownMethod, method)
	}
	return nil
}

func (e *echo) Step(evs []scheduler.Event, out *scheduler.StepOutput) error {
	for _, ev := range evs {
		switch {
		case ev.Type == scheduler.EventCancel:
			out.Done(payload.Of(e.answered))
		case ev.Type == scheduler.EventMessage && ev.Data == "stop":
			out.Done(payload.Of(e.answered))
		case ev.Type == scheduler.EventMessage && ev.Error == nil:
			out.Tell(ev.From, ev.Data)
			e.answered++
		}
	}
	return nil
}

func (e *echo) Close() {}

// adder ends at once with the sum of its input.
type adder struct{ sum int }

func (a *adder) Init(_ context.Context, _ string, in payload.Payloads) error {
	for _, p := range in {
		n, err := payload.As[int](p)
		if err != nil {
			return err
		}
		a.sum += n
	}
	return nil
}

func (a *adder) Step(_ []scheduler.Event, out *scheduler.StepOutput) error {
	if a.sum < 0 {
		return errors.New("negative sum")
	}
	out.Done(payload.Of(a.sum))
	return nil
}

func (a *adder) Close() {}

// tRegister registers the test kinds on the nodes.
func tRegister(t testing.TB, nodes ...*tNode) {
	for _, n := range nodes {
		require.NoError(t, n.Register("echo", func() scheduler.Process { return &echo{} }))
		require.NoError(t, n.Register("adder", func() scheduler.Process { return &adder{} }))
		require.NoError(t, n.Register("nil", func() scheduler.Process { return nil }))
	}
}

// tYielder submits a process that yields cmd with arg under tag 1 and
// ends with the completion (an Event) as its result, and returns its
// Handle without waiting.
func tYielder(t testing.TB, s *scheduler.Scheduler, cmd scheduler.CommandID, arg any) scheduler.Handle {
	t.Helper()
	return tSubmit(t, s, func(_ *tProc, n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
		if n == 0 {
			out.Yield(1, cmd, arg)
			return nil
		}
		for _, ev := range evs {
			if ev.Type == scheduler.EventYieldComplete {
				out.Done(payload.Of(ev))
			}
		}
		return nil
	})
}

// tYield submits a process that yields cmd with arg and ends with the
// completion.
func tYield(t testing.TB, s *scheduler.Scheduler, cmd scheduler.CommandID, arg any) scheduler.Event {
	t.Helper()
	return tFirst(t, s, scheduler.EventYieldComplete, func(out *scheduler.StepOutput) { out.Yield(1, cmd, arg) })
}

func TestRemoteSpawn(t *testing.T) {
	_, a, b := tTwoNodes(t, nil)
	tRegister(t, a, b)
	require.ErrorIs(t, b.Register("echo", func() scheduler.Process { return &echo{} }), remote.ErrInvalidConfig, "a kind is registered once")

	t.Run("a spawn completes with the child's PID, and the child works", func(t *testing.T) {
		h := tSubmit(t, a.S, func(_ *tProc, n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
			if n == 0 {
				out.Yield(1, a.SpawnCommand(), remote.Spawn{Node: "b", Kind: "echo", Method: "run"})
				return nil
			}
			for _, ev := range evs {
				switch {
				case ev.Type == scheduler.EventYieldComplete && ev.Error != nil:
					return ev.Error
				case ev.Type == scheduler.EventYieldComplete:
					child := ev.From
					out.Tell(child, "ping")
					out.Tell(child, "stop")
				case ev.Type == scheduler.EventMessage:
					out.Done(payload.Of(ev))
				}
			}
			return nil
		})
		res, err := tWaitResult(t, h)
		require.NoError(t, err)
		ev := res.Value().(scheduler.Event)
		assert.Equal(t, "ping", ev.Data)
		assert.Equal(t, b.Node.Node(), ev.From.Node, "the echo ran on b")
		assert.Equal(t, "b", a.Named(ev.From).Node)
	})

	t.Run("an awaited spawn completes with the child's result", func(t *testing.T) {
		ev := tYield(t, a.S, a.SpawnCommand(), remote.Spawn{Node: "b", Kind: "adder", Method: "run", Input: payload.Values(2, 3), Await: true})
		require.NoError(t, ev.Error)
		sum, err := payload.As[int](ev.Result())
		require.NoError(t, err)
		assert.Equal(t, 5, sum)
		assert.Equal(t, b.Node.Node(), ev.From.Node, "From of an awaited spawn is the child, as locally")
		assert.NotZero(t, ev.From.ID)
	})

	t.Run("here", func(t *testing.T) {
		for _, node := range []string{"", "a"} {
			ev := tYield(t, a.S, a.SpawnCommand(), remote.Spawn{Node: node, Kind: "adder", Method: "run", Input: payload.Values(4), Await: true})
			require.NoError(t, ev.Error)
			assert.Equal(t, payload.Of(4), ev.Result(), "a spawn here passes the result as it is")
			assert.Equal(t, 4, ev.Data, "unpacked, as locally")
			ev = tYield(t, a.S, a.SpawnCommand(), remote.Spawn{Node: node, Kind: "echo", Method: "run"})
			require.NoError(t, ev.Error)
			assert.Equal(t, a.Node.Node(), ev.From.Node)
			require.NoError(t, a.S.Tell(ev.From, "stop"))
		}
	})

	t.Run("failures", func(t *testing.T) {
		for _, tc := range []struct {
			name  string
			spawn remote.Spawn
			want  []error
		}{
			{"an unknown kind", remote.Spawn{Node: "b", Kind: "nope", Method: "run"}, []error{remote.ErrUnknownKind}},
			{"an unknown node", remote.Spawn{Node: "z", Kind: "echo", Method: "run"}, []error{remote.ErrUnknownNode, scheduler.ErrProcessNotFound}},
			{"an unknown method", remote.Spawn{Node: "b", Kind: "echo", Method: "walk"}, []error{scheduler.ErrInit, scheduler.ErrUnknownMethod}},
			{"an Init that fails, awaited", remote.Spawn{Node: "b", Kind: "adder", Method: "run", Input: payload.Values("x"), Await: true}, []error{scheduler.ErrInit, payload.ErrDecode}},
			{"a factory that returns nil", remote.Spawn{Node: "b", Kind: "nil", Method: "run"}, []error{scheduler.ErrNilProcess}},
			{"a child that fails", remote.Spawn{Node: "b", Kind: "adder", Method: "run", Input: payload.Values(-1), Await: true}, nil},
			{"an input that cannot cross", remote.Spawn{Node: "b", Kind: "adder", Method: "run", Input: payload.Values(make(chan int))}, []error{remote.ErrNotEncodable}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				ev := tYield(t, a.S, a.SpawnCommand(), tc.spawn)
				require.Error(t, ev.Error)
				for _, want := range tc.want {
					assert.ErrorIs(t, ev.Error, want)
				}
				t.Log(ev.Error)
			})
		}
		ev := tYield(t, a.S, a.SpawnCommand(), "not a spawn")
		assert.ErrorIs(t, ev.Error, scheduler.ErrInvalidCommand)
	})

	t.Run("from outside any process", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), tWait)
		defer cancel()
		child, err := a.Spawn(ctx, "b", "echo", "run", nil)
		require.NoError(t, err)
		exits := make(chan scheduler.Exit, 1)
		a.Monitor(child, func(e scheduler.Exit) { exits <- e })
		// Once b holds the monitor, the echo may stop.
		tEventually(t, func() bool { return b.Stats().MonitorsHeld == 1 }, "b holds the monitor")
		require.NoError(t, a.S.Tell(child, []byte("ping")))
		require.NoError(t, a.S.Tell(child, "stop"))
		e := tRecv(t, exits, "the echo's end")
		assert.Equal(t, child, e.PID)
		assert.Equal(t, scheduler.ExitDone, e.Reason)
		n, err := payload.As[int](e.Result)
		require.NoError(t, err)
		assert.Equal(t, 1, n, "the echo answered one message")
		assert.Zero(t, b.Stats().MonitorsHeld)
		assert.Zero(t, a.Stats().Pending)

		_, err = a.Spawn(ctx, "b", "nope", "run", nil)
		assert.ErrorIs(t, err, remote.ErrUnknownKind)
	})
}

// tMonitorOf submits a process that monitors pid, cancels the monitor
// when it is told "cancel", and ends with the completion or the cancel.
func tMonitorOf(t testing.TB, s *scheduler.Scheduler, pid relay.PID) scheduler.Handle {
	t.Helper()
	return tCancellable(t, s, func(out *scheduler.StepOutput) { out.Monitor(1, pid) })
}

// tCancellable submits a process that makes a yield of tag 1 with
// start, cancels it when it is told "cancel", and ends with the
// completion or the cancel.
func tCancellable(t testing.TB, s *scheduler.Scheduler, start func(out *scheduler.StepOutput)) scheduler.Handle {
	t.Helper()
	return tSubmit(t, s, func(_ *tProc, n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
		if n == 0 {
			start(out)
		}
		for _, ev := range evs {
			switch {
			case ev.Type == scheduler.EventYieldComplete:
				out.Done(payload.Of(ev))
			case ev.Type == scheduler.EventMessage && ev.Data == "cancel":
				out.Cancel(1)
				out.Done(payload.Payload{})
			}
		}
		return nil
	})
}

func TestRemoteMonitor(t *testing.T) {
	srv, a, b := tTwoNodes(t, nil)

	t.Run("any process, with how it ended", func(t *testing.T) {
		target, _ := tCollector(t, b.S, 1)
		h := tMonitorOf(t, a.S, target.PID())
		tEventually(t, func() bool { return b.Stats().MonitorsHeld == 1 }, "b holds the monitor")
		require.NoError(t, b.S.Terminate(target.PID()))
		res, err := tWaitResult(t, h)
		require.NoError(t, err)
		ev := res.Value().(scheduler.Event)
		require.NoError(t, ev.Error)
		assert.Equal(t, target.PID(), ev.From, "From of a monitor's completion is the watched process, as locally")
		e := ev.Data.(scheduler.Exit)
		assert.Equal(t, target.PID(), e.PID)
		assert.Equal(t, scheduler.ExitTerminated, e.Reason)
		assert.ErrorIs(t, e.Err, scheduler.ErrTerminated, "the cause crosses")
		assert.Zero(t, b.Stats().MonitorsHeld)
	})

	for _, tc := range []struct {
		name string
		pid  relay.PID
		want error
	}{
		{"a process that is not alive", relay.PID{Node: b.Node.Node(), ID: 1 << 40}, scheduler.ErrProcessNotFound},
		{"an unknown node", relay.PID{Node: a.Node.Node() ^ b.Node.Node() ^ 1, ID: 1}, remote.ErrUnknownNode},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := tWaitResult(t, tMonitorOf(t, a.S, tc.pid))
			require.NoError(t, err)
			e := res.Value().(scheduler.Event).Data.(scheduler.Exit)
			assert.Equal(t, scheduler.ExitGone, e.Reason)
			assert.ErrorIs(t, e.Err, tc.want)
		})
	}

	t.Run("a cancelled monitor is forgotten on the other node", func(t *testing.T) {
		target, _ := tCollector(t, b.S, 1)
		h := tMonitorOf(t, a.S, target.PID())
		tEventually(t, func() bool { return b.Stats().MonitorsHeld == 1 }, "b holds the monitor")
		require.NoError(t, a.S.Tell(h.PID(), "cancel"))
		_, err := tWaitResult(t, h)
		require.NoError(t, err)
		tEventually(t, func() bool { return b.Stats().MonitorsHeld == 0 && a.Stats().Pending == 0 }, "both sides forget the monitor (b holds %d, a has %d)", b.Stats().MonitorsHeld, a.Stats().Pending)
		require.NoError(t, b.S.Terminate(target.PID()))
	})

	t.Run("from outside, stopped", func(t *testing.T) {
		target, _ := tCollector(t, b.S, 1)
		stop := a.Monitor(target.PID(), func(scheduler.Exit) { t.Error("a stopped monitor fired") })
		tEventually(t, func() bool { return b.Stats().MonitorsHeld == 1 }, "b holds the monitor")
		assert.True(t, stop(), "stopped before it fired")
		assert.False(t, stop(), "stopped once")
		tEventually(t, func() bool { return b.Stats().MonitorsHeld == 0 }, "b forgets the monitor")
		require.NoError(t, b.S.Terminate(target.PID()))
	})

	t.Run("a node that goes down drops the monitors held for it", func(t *testing.T) {
		c := tStart(t, srv.ClientURL(), "c", nil)
		tJoin(t, b, c)
		target, _ := tCollector(t, b.S, 1)
		tMonitorOf(t, c.S, target.PID())
		tEventually(t, func() bool { return b.Stats().MonitorsHeld == 1 }, "b holds the monitor")
		c.stop(t)
		tEventually(t, func() bool { return b.Stats().MonitorsHeld == 0 }, "b drops the monitor of the node that left")
		require.NoError(t, b.S.Terminate(target.PID()))
	})
}

// TestCancelledMonitorForgottenAtOnce: the other node forgets a cancelled
// monitor as soon as the watcher stops waiting, not at the next
// heartbeat (here an hour away).
func TestCancelledMonitorForgottenAtOnce(t *testing.T) {
	_, a, b := tTwoNodes(t, func(cfg *remote.Config) {
		cfg.Heartbeat = time.Hour
		cfg.FailureTimeout = 3 * time.Hour
	})
	target, _ := tCollector(t, b.S, 1)
	h := tMonitorOf(t, a.S, target.PID())
	tEventually(t, func() bool { return b.Stats().MonitorsHeld == 1 }, "b holds the monitor")
	require.NoError(t, a.S.Tell(h.PID(), "cancel"))
	_, err := tWaitResult(t, h)
	require.NoError(t, err)
	tEventually(t, func() bool { return b.Stats().MonitorsHeld == 0 && a.Stats().Pending == 0 }, "both sides forget the monitor (b holds %d, a has %d)", b.Stats().MonitorsHeld, a.Stats().Pending)
	require.NoError(t, b.S.Terminate(target.PID()))
}

func TestWatchersToldWhenNodeLeaves(t *testing.T) {
	_, a, b := tTwoNodes(t, nil)
	tRegister(t, a, b)

	ctx, cancel := context.WithTimeout(context.Background(), tWait)
	defer cancel()
	child, err := a.Spawn(ctx, "b", "echo", "run", nil)
	require.NoError(t, err)
	// A process monitors the child, another awaits a spawn on b.
	watcher := tMonitorOf(t, a.S, child)
	awaiting := tYielder(t, a.S, a.SpawnCommand(), remote.Spawn{Node: "b", Kind: "echo", Method: "run", Await: true})
	tEventually(t, func() bool { return b.Stats().MonitorsHeld == 2 }, "b has the requests")
	b.stop(t)
	down := tRecv(t, a.Down, "a to see b leave")
	assert.Equal(t, "b", down.Name)
	assert.ErrorIs(t, down.Reason, remote.ErrNodeDown)

	res, err := tWaitResult(t, watcher)
	require.NoError(t, err)
	e := res.Value().(scheduler.Event).Data.(scheduler.Exit)
	assert.Equal(t, scheduler.ExitGone, e.Reason)
	assert.ErrorIs(t, e.Err, remote.ErrNodeDown)
	assert.ErrorIs(t, e.Err, scheduler.ErrProcessNotFound)
	res, err = tWaitResult(t, awaiting)
	require.NoError(t, err)
	ev := res.Value().(scheduler.Event)
	assert.ErrorIs(t, ev.Error, remote.ErrNodeDown)
	err = a.S.Tell(child, "late")
	assert.ErrorIs(t, err, remote.ErrNodeDown, "a PID of a node that left")
}

// TestSpawnWhoseContextEnds: Node.Spawn with a context that has ended
// starts nothing and returns its error; one whose context ends while it
// waits for the answer returns its error and forgets the request. The
// answer that comes later is dropped, and the child, which had been
// asked for already, runs on, as the child of a cancelled SpawnAwait
// does.
func TestSpawnWhoseContextEnds(t *testing.T) {
	_, a, b := tTwoNodes(t, nil)
	var started atomic.Int32
	for _, n := range []*tNode{a, b} {
		require.NoError(t, n.Register("counted", func() scheduler.Process { started.Add(1); return &echo{} }))
	}
	ctx, cancel := context.WithTimeout(context.Background(), tWait)
	t.Cleanup(cancel)
	open := tHoldInbound(t, b) // b answers nothing until open

	ended, end := context.WithCancel(context.Background())
	end()
	for _, node := range []string{"b", ""} {
		_, err := a.Spawn(ended, node, "counted", "run", nil)
		assert.ErrorIs(t, err, context.Canceled, "on %q", node)
	}
	assert.Zero(t, a.Stats().Pending, "a context that has ended leaves no request")

	waiting, stopWaiting := context.WithCancel(ctx)
	t.Cleanup(stopWaiting)
	errs := make(chan error, 1)
	go func() {
		_, err := a.Spawn(waiting, "b", "counted", "run", nil)
		errs <- err
	}()
	tEventually(t, func() bool { return a.Stats().Pending > 0 }, "the spawn is pending")
	stopWaiting()
	assert.ErrorIs(t, tRecv(t, errs, "the spawn to return"), context.Canceled)
	assert.Zero(t, a.Stats().Pending, "the spawn forgot its request")

	// b takes the request, starts the child and answers, before it
	// answers the next spawn; a drops that late answer.
	open()
	child, err := a.Spawn(ctx, "b", "counted", "run", nil)
	require.NoError(t, err)
	assert.Equal(t, int32(2), started.Load(), "the child of the forgotten request and the last one started, nothing else")
	assert.Zero(t, a.Stats().Pending)
	require.NoError(t, a.S.Tell(child, "stop"))
}

// TestCancelledSpawnForgotten: a spawn yield the process cancels is
// forgotten at once, awaited or not, even before the other node has
// taken the request; for an awaited spawn the other node stops watching
// the child, which runs on.
func TestCancelledSpawnForgotten(t *testing.T) {
	_, a, b := tTwoNodes(t, nil)
	tRegister(t, a, b)
	ctx, cancel := context.WithTimeout(context.Background(), tWait)
	t.Cleanup(cancel)
	for _, await := range []bool{false, true} {
		t.Run(fmt.Sprintf("await=%v", await), func(t *testing.T) {
			open := tHoldInbound(t, b)
			h := tCancellable(t, a.S, func(out *scheduler.StepOutput) {
				out.Yield(1, a.SpawnCommand(), remote.Spawn{Node: "b", Kind: "echo", Method: "run", Await: await})
			})
			tEventually(t, func() bool { return a.Stats().Pending == 1 }, "the spawn is pending")
			require.NoError(t, a.S.Tell(h.PID(), "cancel"))
			_, err := tWaitResult(t, h)
			require.NoError(t, err)
			tEventually(t, func() bool { return a.Stats().Pending == 0 }, "a forgets the cancelled spawn")

			// b takes the spawn, and what a sent after it, before it
			// answers the next one.
			open()
			child, err := a.Spawn(ctx, "b", "echo", "run", nil)
			require.NoError(t, err)
			tEventually(t, func() bool { return b.Stats().MonitorsHeld == 0 }, "b holds nothing for the cancelled spawn (%d)", b.Stats().MonitorsHeld)
			assert.Zero(t, a.Stats().Pending)
			require.NoError(t, a.S.Tell(child, "stop"))
		})
	}
}

// TestCancelledLocalSpawnForgotten: an awaited spawn on this node that
// the process stops waiting for (cancelled, or timed out) leaves no
// monitor on the child, which runs on, as one on another node leaves
// nothing held there.
func TestCancelledLocalSpawnForgotten(t *testing.T) {
	_, a, _ := tTwoNodes(t, nil)
	tRegister(t, a)
	spawn := remote.Spawn{Kind: "echo", Method: "run", Await: true}
	t.Run("cancelled", func(t *testing.T) {
		h := tCancellable(t, a.S, func(out *scheduler.StepOutput) { out.Yield(1, a.SpawnCommand(), spawn) })
		tEventually(t, func() bool { return remote.LocalAwaits(a.Node) == 1 }, "a watches the child (%d)", remote.LocalAwaits(a.Node))
		require.NoError(t, a.S.Tell(h.PID(), "cancel"))
		_, err := tWaitResult(t, h)
		require.NoError(t, err)
		tEventually(t, func() bool { return remote.LocalAwaits(a.Node) == 0 }, "a stops watching the child of the cancelled spawn (%d)", remote.LocalAwaits(a.Node))
	})
	t.Run("timed out", func(t *testing.T) {
		ev := tFirst(t, a.S, scheduler.EventYieldComplete, func(out *scheduler.StepOutput) {
			out.Yield(1, a.SpawnCommand(), spawn)
			out.Timeout(1, time.Millisecond)
		})
		assert.ErrorIs(t, ev.Error, scheduler.ErrTimeout)
		tEventually(t, func() bool { return remote.LocalAwaits(a.Node) == 0 }, "a stops watching the child of the timed-out spawn (%d)", remote.LocalAwaits(a.Node))
	})
}

// TestSpawnCommandIsClaimed: the node's spawn command is its own on the
// scheduler. A handler registered on it later is refused, and spawns go
// on working; a scheduler that has a handler on it already is refused
// by Start, which leaves the handler and the node as they were.
func TestSpawnCommandIsClaimed(t *testing.T) {
	srv, a, b := tTwoNodes(t, nil)
	tRegister(t, a, b)
	mine := func(c scheduler.Call) error { return c.Complete("mine", nil) }
	assert.ErrorIs(t, a.S.SetHandler(a.SpawnCommand(), mine), scheduler.ErrCommandTaken, "SetHandler on the spawn command")
	ev := tYield(t, a.S, a.SpawnCommand(), remote.Spawn{Node: "b", Kind: "adder", Method: "run", Input: payload.Payloads{payload.Of(2), payload.Of(3)}, Await: true})
	require.NoError(t, ev.Error)
	sum, err := payload.As[int](ev.Result())
	require.NoError(t, err)
	assert.Equal(t, 5, sum, "the spawn handler still answers")

	node, err := remote.New(remote.Config{Cluster: "test", Name: "c", URL: srv.ClientURL()})
	require.NoError(t, err)
	defer func() { _ = node.Close(context.Background()) }()
	s, err := scheduler.New(scheduler.WithNode(node.Node()), scheduler.WithTransport(node), scheduler.WithHandler(node.SpawnCommand(), mine))
	require.NoError(t, err)
	defer func() { _ = s.Shutdown(context.Background()) }()
	err = node.Start(t.Context(), s)
	assert.ErrorIs(t, err, remote.ErrInvalidConfig, "Start on a scheduler with a handler on the spawn command")
	assert.ErrorIs(t, err, scheduler.ErrCommandTaken)
	ev = tYield(t, s, node.SpawnCommand(), remote.Spawn{Kind: "adder", Method: "run"})
	assert.Equal(t, "mine", ev.Data, "the scheduler's own handler is left in place")
	_, err = node.Spawn(t.Context(), "", "adder", "run", nil)
	assert.ErrorIs(t, err, remote.ErrClosed, "the node is not started")
}
