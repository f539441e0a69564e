package remote_test

import (
	"errors"
	"log/slog"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	scheduler "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
	"github.com/procsched/scheduler/remote"
)

// TestHostileFrames plays a node by hand over a raw NATS connection and
// sends a node what a broken or hostile peer might: batches before
// joining, gaps, duplicates, corrupt batches and control messages, and
// random bytes. Nothing it sends reaches a process it does not name, a
// bad batch delivers nothing, and the node keeps working.
func TestHostileFrames(t *testing.T) {
	srv := tServer(t)
	b := tStart(t, srv.ClientURL(), "b", func(cfg *remote.Config) { cfg.FailureTimeout = time.Minute })
	recv, got := tCollector(t, b.S, 64)
	fake := b.Node.Node() + 1
	from := relay.PID{Node: fake, ID: 7}
	msg := func(body any) relay.Message { return relay.Message{From: from, To: recv.PID(), Data: body} }

	f := tFakePeer(t, srv.ClientURL(), fake)
	_, _, bData := remote.Subjects("test", b.Node.Node())
	bNode := b.Node
	publish := f.publish

	// Before joining: dropped.
	publish(bData, remote.EncodeMessages(fake, bNode, 1, msg("too early")))
	tEventually(t, func() bool { return b.Stats().Dropped.UnknownSender == 1 }, "b drops the batch of a node that has not joined")

	f.hello(b, true)

	publish(bData, remote.EncodeMessages(fake, bNode, 1, msg("one")))
	publish(bData, remote.EncodeMessages(fake, bNode, 2, msg("two")))
	publish(bData, remote.EncodeMessages(fake, bNode, 5, msg("five")))      // 3 and 4 never come
	publish(bData, remote.EncodeMessages(fake, bNode, 2, msg("two again"))) // a duplicate
	bad := remote.EncodeMessages(fake, bNode, 6, msg("in a corrupt batch"))
	publish(bData, append(bad, 0xff)) // a good frame, then garbage
	publish(f.all, []byte("not a control message"))
	nobody := relay.PID{Node: b.Node.Node(), ID: 1 << 40}
	publish(bData, remote.EncodeMessages(fake, bNode, 7, relay.Message{From: from, To: nobody, Data: "to nobody"}))
	rng := rand.New(rand.NewPCG(1, 2))
	for seq := uint64(8); seq < 1008; seq++ {
		junk := remote.EncodeMessages(fake, bNode, seq)
		for range rng.IntN(64) {
			junk = append(junk, byte(rng.Uint32()))
		}
		publish(bData, junk)
	}
	publish(bData, remote.EncodeMessages(fake, bNode, 1008, msg("last")))

	for _, want := range []string{"one", "two", "five", "last"} {
		ev := tRecv(t, got, want)
		assert.Equal(t, scheduler.EventMessage, ev.Type)
		assert.Equal(t, from, ev.From)
		assert.Equal(t, want, ev.Data)
	}
	select {
	case ev := <-got:
		t.Fatalf("an unexpected event reached the process: %v", ev)
	default:
	}

	// The message to nobody came back to its sender as a bounce.
	var bounces []relay.Message
	for len(bounces) == 0 {
		m := tRecv(t, f.data, "the bounce")
		var err error
		bounces, err = remote.DecodeBatch(m.Data, b.Node.Node(), fake)
		require.NoError(t, err)
	}
	assert.Equal(t, nobody, bounces[0].From)
	assert.Equal(t, from, bounces[0].To)
	assert.Equal(t, "to nobody", bounces[0].Data)
	assert.ErrorIs(t, bounces[0].Err, scheduler.ErrProcessNotFound)

	st := b.Stats()
	assert.Equal(t, uint64(2), st.Gaps, "batches 3 and 4")
	assert.Equal(t, uint64(1), st.Dropped.Duplicate)
	assert.GreaterOrEqual(t, st.Dropped.Malformed, uint64(2), "the corrupt batch and control message, and random bytes")
	assert.Equal(t, uint64(1), st.Dropped.UnknownSender)

	f.bye(b)
}

// TestReusedMonitorNumber: a peer that asks for a monitor under a
// request number it uses already (a broken or hostile one) replaces the
// monitor held under it: the node stops the first, which then reports
// nothing and holds nothing, and reports the second under that number.
func TestReusedMonitorNumber(t *testing.T) {
	srv := tServer(t)
	b := tStart(t, srv.ClientURL(), "b", func(cfg *remote.Config) { cfg.FailureTimeout = time.Minute })
	fake := b.Node.Node() + 1
	f := tFakePeer(t, srv.ClientURL(), fake)
	_, _, bData := remote.Subjects("test", b.Node.Node())
	f.hello(b, true)
	t.Cleanup(func() { f.bye(b) })

	// Processes that end with their name when asked to stop.
	named := func(name string) scheduler.Handle {
		return tSubmit(t, b.S, func(_ *tProc, _ int, evs []scheduler.Event, out *scheduler.StepOutput) error {
			for _, ev := range evs {
				if ev.Type == scheduler.EventCancel {
					out.Done(payload.Of(name))
				}
			}
			return nil
		})
	}
	first, second := named("first"), named("second")
	recv, got := tCollector(t, b.S, 1)
	f.publish(bData, remote.EncodeMonitor(fake, b.Node, 1, 7, first.PID()))
	f.publish(bData, remote.EncodeMonitor(fake, b.Node, 2, 7, second.PID()))
	// b has served both requests once it delivers what follows them.
	f.publish(bData, remote.EncodeMessages(fake, b.Node, 3, relay.Message{From: relay.PID{Node: fake, ID: 1}, To: recv.PID(), Data: "after"}))
	tRecv(t, got, "the message after the requests")
	assert.Equal(t, 1, b.Stats().MonitorsHeld, "one request number, one monitor")

	for _, h := range []scheduler.Handle{first, second} {
		require.NoError(t, b.S.Terminate(h.PID()))
		_, err := tWaitResult(t, h)
		require.NoError(t, err)
	}
	var exits []remote.Exited
	for len(exits) == 0 {
		m := tRecv(t, f.data, "an exit")
		var err error
		exits, err = remote.DecodeExits(m.Data, b.Node.Node(), fake)
		require.NoError(t, err)
	}
	assert.Equal(t, uint64(7), exits[0].Req)
	name, err := payload.As[string](exits[0].Result)
	require.NoError(t, err)
	assert.Equal(t, "second", name, "the first exit reported is the second process's: the first monitor was stopped")
	tEventually(t, func() bool { return b.Stats().MonitorsHeld == 0 }, "b holds nothing once the second process ended (%d)", b.Stats().MonitorsHeld)
}

// TestGrantOfABatchThatFailsToLeave: a peer that grants credit for
// batches not published yet (a broken or hostile one) while a batch for
// it fails to publish does not upset the node's accounting: the batch's
// messages come back, no credit is given back twice, and the link goes
// on.
func TestGrantOfABatchThatFailsToLeave(t *testing.T) {
	srv := tServer(t)
	a := tStart(t, srv.ClientURL(), "a", func(cfg *remote.Config) { cfg.FailureTimeout = time.Minute })
	f, fake := tFakeUp(t, srv.ClientURL(), a)
	t.Cleanup(func() { f.bye(a) })
	_, aCtl, _ := remote.Subjects("test", a.Node.Node())
	_, _, fakeData := remote.Subjects("test", fake)

	// The first batch of messages for the fake is granted, every batch
	// up to the last there can be, while it is being published, and
	// then fails to publish.
	failure := errors.New("the write failed")
	hookErrs := make(chan error, 1)
	var first bool
	remote.SetPublishHook(a.Node, func(subject string, data []byte) error {
		if msgs, _ := remote.DecodeBatch(data, a.Node.Node(), fake); subject != fakeData || len(msgs) == 0 || first {
			return nil
		}
		first = true // the writer goroutine's alone
		if err := f.nc.Publish(aCtl, remote.EncodeGrant(fake, math.MaxUint64, a.Node)); err != nil {
			hookErrs <- err
			return failure
		}
		deadline := time.Now().Add(tWait)
		for a.Stats().InFlight != 0 { // the grant has freed the batch's credit
			if time.Now().After(deadline) {
				hookErrs <- errors.New("the grant was not taken")
				return failure
			}
			time.Sleep(time.Millisecond) // polling a condition with a deadline, not a synchronisation
		}
		hookErrs <- nil
		return failure
	})
	t.Cleanup(func() { remote.SetPublishHook(a.Node, nil) })

	to := relay.PID{Node: fake, ID: 1}
	ev := tFirst(t, a.S, scheduler.EventMessage, func(out *scheduler.StepOutput) { out.Tell(to, "refused") })
	require.NoError(t, tRecv(t, hookErrs, "the hook"))
	assert.ErrorIs(t, ev.Error, failure)
	assert.ErrorIs(t, ev.Error, remote.ErrDisconnected)
	assert.Equal(t, "refused", ev.Data)
	assert.Zero(t, a.Stats().InFlight, "no credit is given back twice")

	require.NoError(t, a.S.Tell(to, "after"))
	var msgs []relay.Message
	for len(msgs) == 0 {
		m := tRecv(t, f.data, "the next batch")
		var err error
		msgs, err = remote.DecodeBatch(m.Data, a.Node.Node(), fake)
		require.NoError(t, err)
	}
	assert.Equal(t, "after", msgs[0].Data)
}

// TestMalformedLogging: a malformed batch from a peer that has joined is
// logged at Warn, naming the peer; a batch too short for its header and
// a control message that does not decode, which name no one they can be
// known to come from, are counted as malformed and not logged, so that
// whoever may publish on the cluster's subjects cannot fill the log.
func TestMalformedLogging(t *testing.T) {
	srv := tServer(t)
	var log tLockedBuffer
	b := tStart(t, srv.ClientURL(), "b", func(cfg *remote.Config) {
		cfg.FailureTimeout = time.Minute
		cfg.Logger = slog.New(slog.NewTextHandler(&log, nil))
	})
	recv, _ := tCollector(t, b.S, 1)
	f, fake := tFakeUp(t, srv.ClientURL(), b)
	_, _, bData := remote.Subjects("test", b.Node.Node())

	f.publish(bData, []byte{2, 0, 1}) // the wire version, then too short
	bad := remote.EncodeMessages(fake, b.Node, 1, relay.Message{From: relay.PID{Node: fake, ID: 7}, To: recv.PID(), Data: "x"})
	f.publish(bData, append(bad, 0xff)) // a good frame, then garbage
	// The data subscription takes them in order: once the second is
	// logged, the first has been handled.
	tEventually(t, func() bool { return strings.Contains(log.String(), "level=WARN") }, "b to log the corrupt batch (log: %q)", log.String())

	f.publish(f.all, []byte{2, 1}) // the wire version and a hello, nothing more
	// The cluster's control subscription answers this request after it
	// has handled the message before it.
	_, err := f.nc.Request(f.all, []byte{2}, tWait)
	require.NoError(t, err)

	assert.Equal(t, uint64(3), b.Stats().Dropped.Malformed)
	logged := log.String()
	assert.Equal(t, 1, strings.Count(logged, "level=WARN"), "only the corrupt batch from the peer is logged: %q", logged)
	assert.Contains(t, logged, `level=WARN msg="remote: dropped a malformed batch" peer=fake`)
	assert.NotContains(t, logged, "level=ERROR")
	f.bye(b)
}
