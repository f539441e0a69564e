package remote_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	scheduler "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
	"github.com/procsched/scheduler/remote"
)

// tDeclareDown makes b declare a down while a runs on: a goodbye in a's
// name and run, published by hand on the cluster's control subject.
func tDeclareDown(t testing.TB, srv *server.Server, a, b *tNode) {
	t.Helper()
	nc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	defer nc.Close()
	all, _, _ := remote.Subjects("test", a.Node.Node())
	require.NoError(t, nc.Publish(all, remote.EncodeByeOf(a.Node)))
	require.NoError(t, nc.Flush())
	for {
		p := tRecv(t, b.Down, "b to declare a down")
		if p.Node == a.Node.Node() {
			return
		}
	}
}

// TestNothingHeldForAPeerDownMeanwhile: a spawn from a peer that b
// declares down while it starts the child (b's data goroutine is in the
// kind's factory) leaves no watch of the child held for that peer: b
// holds nothing for a node that is down, as it drops what it held when
// the node went down.
func TestNothingHeldForAPeerDownMeanwhile(t *testing.T) {
	srv, a, b := tTwoNodes(t, nil)
	entered, gate := make(chan struct{}), make(chan struct{})
	require.NoError(t, b.Register("gated", func() scheduler.Process {
		close(entered)
		<-gate
		return &echo{}
	}))
	tYielder(t, a.S, a.SpawnCommand(), remote.Spawn{Node: "b", Kind: "gated", Method: "run", Await: true})
	tRecv(t, entered, "b to take the spawn")
	tDeclareDown(t, srv, a, b)
	close(gate)
	tEventually(t, func() bool { return len(b.S.Processes()) == 1 }, "the child to start (%d processes)", len(b.S.Processes()))
	tEventually(t, func() bool { return b.Stats().MonitorsHeld == 0 }, "b holds nothing for a, which is down (%d held)", b.Stats().MonitorsHeld)
}

// TestMonitorAndSpawnRefusedForBackpressure: a monitor of a process of
// another node, or a spawn there, that finds too much waiting for that
// node is refused as a message is: the monitor completes at once with
// ExitGone and ErrBackpressure (an ErrMailboxFull), though the process
// may be alive, and the spawn fails with ErrBackpressure; nothing is
// left pending for either. A monitor that was taken still completes
// with how the process ended once the node takes what waits.
func TestMonitorAndSpawnRefusedForBackpressure(t *testing.T) {
	srv := tServer(t)
	a := tStart(t, srv.ClientURL(), "a", func(cfg *remote.Config) { cfg.Window, cfg.MaxBuffered = 8<<10, 16<<10 })
	b := tStart(t, srv.ClientURL(), "b", nil)
	tJoin(t, a, b)
	tRegister(t, b)
	target, _ := tCollector(t, b.S, 1)
	sink := tSink(t, b.S)

	// b takes nothing, and a's way to it fills, to the last few bytes.
	open := tHoldInbound(t, b)
	tFillTheWay(t, a, sink.PID(), 1<<10)

	// Two monitors: the room left takes one at most.
	completions := make(chan scheduler.Event, 2)
	tSubmit(t, a.S, func(_ *tProc, n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
		if n == 0 {
			out.Monitor(1, target.PID())
			out.Monitor(2, target.PID())
		}
		for _, ev := range evs {
			switch ev.Type {
			case scheduler.EventYieldComplete:
				completions <- ev
			case scheduler.EventCancel:
				out.Done(payload.Payload{})
			}
		}
		return nil
	})
	ev := tRecv(t, completions, "a monitor refused")
	e := ev.Data.(scheduler.Exit)
	assert.Equal(t, scheduler.ExitGone, e.Reason)
	assert.ErrorIs(t, e.Err, remote.ErrBackpressure)
	assert.ErrorIs(t, e.Err, scheduler.ErrMailboxFull)
	assert.Equal(t, target.PID(), e.PID)
	refused := ev.Tag

	sp := tYield(t, a.S, a.SpawnCommand(), remote.Spawn{Node: "b", Kind: "echo", Method: "run", Input: payload.Payloads{payload.Bytes(make([]byte, 1<<10))}, Await: true})
	assert.ErrorIs(t, sp.Error, remote.ErrBackpressure)
	assert.ErrorIs(t, sp.Error, scheduler.ErrMailboxFull)

	// The other monitor was taken (pending) or refused too.
	taken := a.Stats().Pending
	require.LessOrEqual(t, taken, 1)
	open()
	tEventually(t, func() bool { return b.Stats().MonitorsHeld == taken }, "b holds the monitor taken (%d of %d)", b.Stats().MonitorsHeld, taken)
	require.NoError(t, b.S.Terminate(target.PID()))
	ev = tRecv(t, completions, "the other monitor")
	assert.NotEqual(t, refused, ev.Tag, "the refused monitor completed twice")
	if e := ev.Data.(scheduler.Exit); taken == 1 {
		assert.Equal(t, scheduler.ExitTerminated, e.Reason, "the monitor taken is told how the process ended")
	} else {
		assert.Equal(t, scheduler.ExitGone, e.Reason, "the other monitor, refused too")
		assert.ErrorIs(t, e.Err, remote.ErrBackpressure)
	}
	tEventually(t, func() bool { return a.Stats().Pending == 0 && b.Stats().MonitorsHeld == 0 }, "nothing left (a has %d pending, b holds %d)", a.Stats().Pending, b.Stats().MonitorsHeld)
}

// TestCancelledMonitorsForgottenWhateverWaits: a cancelled monitor is
// forgotten on the other node even when the way there is full, of
// messages and of the answers that may go beyond them: the demonitor
// that tells it so is a few bytes per monitor that was taken, and is
// never refused for room.
func TestCancelledMonitorsForgottenWhateverWaits(t *testing.T) {
	const monitors = 3000
	srv := tServer(t)
	a := tStart(t, srv.ClientURL(), "a", func(cfg *remote.Config) { cfg.Window, cfg.MaxBuffered = 4<<10, 4<<10 })
	b := tStart(t, srv.ClientURL(), "b", nil)
	tJoin(t, a, b)
	target, _ := tCollector(t, b.S, 1)
	sink := tSink(t, b.S)
	// The watcher sets its monitors a chunk at a time, each when told
	// "more", so that none finds a's buffer full.
	const chunk = 250
	set := 0
	watcher := tSubmit(t, a.S, func(_ *tProc, _ int, evs []scheduler.Event, out *scheduler.StepOutput) error {
		for _, ev := range evs {
			switch {
			case ev.Type == scheduler.EventYieldComplete:
				t.Errorf("a monitor completed: %v", ev)
			case ev.Type == scheduler.EventMessage && ev.Data == "more":
				for range chunk {
					set++
					out.Monitor(uint64(set), target.PID())
				}
			case ev.Type == scheduler.EventMessage && ev.Data == "cancel":
				for i := range monitors {
					out.Cancel(uint64(i + 1))
				}
			case ev.Type == scheduler.EventCancel:
				out.Done(payload.Payload{})
			}
		}
		return nil
	})
	for held := chunk; held <= monitors; held += chunk {
		require.NoError(t, a.S.Tell(watcher.PID(), "more"))
		tEventually(t, func() bool { return b.Stats().MonitorsHeld == held }, "b holds %d monitors", held)
	}

	// b takes nothing, and a's way to it fills with messages.
	open := tHoldInbound(t, b)
	tFillTheWay(t, a, sink.PID(), 1<<10)
	require.NoError(t, a.S.Tell(watcher.PID(), "cancel"))
	tEventually(t, func() bool { return a.Stats().Pending == 0 }, "a forgets the cancelled monitors (%d)", a.Stats().Pending)
	open()
	tEventually(t, func() bool { return b.Stats().MonitorsHeld == 0 }, "b forgets the cancelled monitors")
}

// TestExitWhenTheWayBackIsFull: the end of a process watched from
// another node reaches the watcher even when the way back is full, of
// messages and of the answers that may go beyond them: without its
// result, and with an error matching ErrBackpressure that says why, as
// a result too large to cross comes with ErrNotEncodable; an awaited
// spawn fails so. The watcher is told once, and neither node keeps
// anything of the monitor. The answer to a spawn goes back all the
// same too.
func TestExitWhenTheWayBackIsFull(t *testing.T) {
	srv := tServer(t)
	a := tStart(t, srv.ClientURL(), "a", nil)
	b := tStart(t, srv.ClientURL(), "b", func(cfg *remote.Config) { cfg.Window, cfg.MaxBuffered = 8<<10, 16<<10 })
	tJoin(t, a, b)
	// kib ends when told, with a result of a KiB.
	kib := func(_ *tProc, _ int, evs []scheduler.Event, out *scheduler.StepOutput) error {
		for _, ev := range evs {
			if ev.Type == scheduler.EventMessage || ev.Type == scheduler.EventCancel {
				out.Done(payload.Bytes(make([]byte, 1<<10)))
			}
		}
		return nil
	}
	require.NoError(t, b.Register("kib", func() scheduler.Process { return &tProc{step: kib} }))
	target := tSubmit(t, b.S, kib)
	exits := make(chan scheduler.Exit, 2)
	a.Monitor(target.PID(), func(e scheduler.Exit) { exits <- e })
	awaiting := tYielder(t, a.S, a.SpawnCommand(), remote.Spawn{Node: "b", Kind: "kib", Method: "run", Await: true})
	tEventually(t, func() bool { return b.Stats().MonitorsHeld == 2 }, "b holds the monitor and the awaited spawn's watch")
	var child relay.PID
	for _, p := range b.S.Processes() {
		if p.PID != target.PID() {
			child = p.PID
		}
	}
	require.NotZero(t, child.ID, "the awaited child")

	// a takes nothing, and b's way to it fills with messages...
	open := tHoldInbound(t, a)
	sink := tSink(t, a.S)
	tFillTheWay(t, b, sink.PID(), 1<<10)
	// ... and with bounces, until b drops some.
	tOverflowTheWayBack(t, a.S, b, 64, 1<<10)

	require.NoError(t, b.S.Tell(target.PID(), "end"))
	require.NoError(t, b.S.Tell(child, "end"))
	tEventually(t, func() bool { return b.Stats().MonitorsHeld == 0 }, "b sends the ends")

	// A spawn b refuses now, with an error as long as the KiB that each
	// bounce took: its answer must go back as well.
	st := b.Stats()
	kind := strings.Repeat("k", 1<<10)
	spawning := tYielder(t, a.S, a.SpawnCommand(), remote.Spawn{Node: "b", Kind: kind, Method: "run"})
	tEventually(t, func() bool {
		now := b.Stats()
		return now.Buffered > st.Buffered || now.Dropped.Overflow > st.Dropped.Overflow
	}, "b to answer the spawn")
	open()
	e := tRecv(t, exits, "the end of the watched process")
	assert.Equal(t, target.PID(), e.PID)
	assert.Equal(t, scheduler.ExitDone, e.Reason)
	assert.ErrorIs(t, e.Err, remote.ErrBackpressure)
	assert.True(t, e.Result.IsZero(), "the result did not cross")
	res, err := tWaitResult(t, spawning)
	require.NoError(t, err)
	ev := res.Value().(scheduler.Event)
	assert.ErrorIs(t, ev.Error, remote.ErrUnknownKind)
	assert.ErrorContains(t, ev.Error, "kkkk", "the start of b's error")
	res, err = tWaitResult(t, awaiting)
	require.NoError(t, err)
	ev = res.Value().(scheduler.Event)
	assert.ErrorIs(t, ev.Error, remote.ErrBackpressure, "the awaited spawn")
	assert.Nil(t, ev.Data)
	assert.Equal(t, child, ev.From)
	tEventually(t, func() bool { return a.Stats().Pending == 0 }, "a keeps nothing of the monitor and the spawns")
	select {
	case e := <-exits:
		t.Fatalf("told twice: %v", e)
	default:
	}
	assert.Equal(t, st.Dropped.Overflow, b.Stats().Dropped.Overflow, "neither the end nor the answer was dropped")
}

// TestNamesAreEachNodesOwn: a process name is its scheduler's own: a
// name registered on another node is not found by TellName, RequestName
// or Lookup here (ErrNameNotFound), while the PID it names is reached
// from here as any other.
func TestNamesAreEachNodesOwn(t *testing.T) {
	_, a, b := tTwoNodes(t, nil)
	svc, got := tCollector(t, b.S, 1)
	require.NoError(t, b.S.Register("svc", svc.PID()))

	err := a.S.TellName("svc", "hello")
	assert.ErrorIs(t, err, scheduler.ErrNameNotFound, "TellName of b's name")
	_, err = a.S.Lookup("svc")
	assert.ErrorIs(t, err, scheduler.ErrNameNotFound, "Lookup of b's name")
	ev := tFirst(t, a.S, scheduler.EventYieldComplete, func(out *scheduler.StepOutput) { out.RequestName(1, "svc", "question") })
	assert.ErrorIs(t, ev.Error, scheduler.ErrNameNotFound, "RequestName of b's name")
	ev = tFirst(t, a.S, scheduler.EventMessage, func(out *scheduler.StepOutput) { out.TellName("svc", "hello") })
	assert.ErrorIs(t, ev.Error, scheduler.ErrNameNotFound, "a step's TellName of b's name comes back")

	pid, err := b.S.Lookup("svc")
	require.NoError(t, err)
	require.NoError(t, a.S.Tell(pid, "by PID"))
	assert.Equal(t, "by PID", tRecv(t, got, "the message by PID").Data)
}

// TestMonitorForgottenWhenTheWatcherStopsWaiting: a monitor of a process
// of another node whose yield times out, or whose watcher ends, is
// forgotten on both nodes at once, as a cancelled one is (heartbeats an
// hour apart: nothing else would make b forget it).
func TestMonitorForgottenWhenTheWatcherStopsWaiting(t *testing.T) {
	_, a, b := tTwoNodes(t, func(cfg *remote.Config) {
		cfg.Heartbeat = time.Hour
		cfg.FailureTimeout = 3 * time.Hour
	})
	target, _ := tCollector(t, b.S, 1)

	t.Run("timed out", func(t *testing.T) {
		ev := tFirst(t, a.S, scheduler.EventYieldComplete, func(out *scheduler.StepOutput) {
			out.Monitor(1, target.PID())
			out.Timeout(1, 50*time.Millisecond)
		})
		assert.ErrorIs(t, ev.Error, scheduler.ErrTimeout)
		tEventually(t, func() bool { return a.Stats().Pending == 0 && b.Stats().MonitorsHeld == 0 }, "both nodes forget the monitor")
	})

	t.Run("the watcher ends", func(t *testing.T) {
		watcher := tSubmit(t, a.S, func(_ *tProc, n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
			if n == 0 {
				out.Monitor(1, target.PID())
			}
			for _, ev := range evs {
				if ev.Type == scheduler.EventMessage {
					out.Done(payload.Payload{})
				}
			}
			return nil
		})
		tEventually(t, func() bool { return b.Stats().MonitorsHeld == 1 }, "b holds the monitor")
		require.NoError(t, a.S.Tell(watcher.PID(), "end"))
		_, err := tWaitResult(t, watcher)
		require.NoError(t, err)
		tEventually(t, func() bool { return a.Stats().Pending == 0 && b.Stats().MonitorsHeld == 0 }, "both nodes forget the monitor")
	})
}

// TestExitWhenTheWayBackIsFullOnASmallServer: on a server whose maximum
// payload is about a KiB, the end of a watched process still reaches the
// watcher when the way back is full: its error's text is shortened to
// what a batch takes there, not only to a KiB.
func TestExitWhenTheWayBackIsFullOnASmallServer(t *testing.T) {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true, MaxPayload: 1 << 10})
	require.NoError(t, err)
	srv.Start()
	require.True(t, srv.ReadyForConnections(tWait))
	t.Cleanup(func() { tStopServer(srv) })
	a := tStart(t, srv.ClientURL(), "a", nil)
	b := tStart(t, srv.ClientURL(), "b", func(cfg *remote.Config) { cfg.Window, cfg.MaxBuffered = 8<<10, 16<<10 })
	tJoin(t, a, b)
	// target fails when told, with an error of two KiB.
	target := tSubmit(t, b.S, func(_ *tProc, _ int, evs []scheduler.Event, _ *scheduler.StepOutput) error {
		for _, ev := range evs {
			if ev.Type == scheduler.EventMessage || ev.Type == scheduler.EventCancel {
				return errors.New(strings.Repeat("x", 2<<10))
			}
		}
		return nil
	})
	exits := make(chan scheduler.Exit, 1)
	a.Monitor(target.PID(), func(e scheduler.Exit) { exits <- e })
	tEventually(t, func() bool { return b.Stats().MonitorsHeld == 1 }, "b holds the monitor")

	// a takes nothing, and b's way to it fills with messages...
	open := tHoldInbound(t, a)
	sink := tSink(t, a.S)
	tFillTheWay(t, b, sink.PID(), 512)
	// ... and with bounces of half a KiB, until b drops some.
	tOverflowTheWayBack(t, a.S, b, 128, 512)
	overflow := b.Stats().Dropped.Overflow

	require.NoError(t, b.S.Tell(target.PID(), "fail"))
	tEventually(t, func() bool { return b.Stats().MonitorsHeld == 0 }, "b sends the end")
	open()
	e := tRecv(t, exits, "the end of the watched process")
	assert.Equal(t, scheduler.ExitFailed, e.Reason)
	var rerr *remote.Error
	require.True(t, errors.As(e.Err, &rerr), "the error, from b: %v", e.Err)
	assert.True(t, strings.HasPrefix(rerr.Text, "xxx"), "the start of the error: %.20q", rerr.Text)
	assert.Less(t, len(rerr.Text), 1<<10, "shortened to what a batch takes")
	assert.Equal(t, overflow, b.Stats().Dropped.Overflow, "the end was not dropped")
}
