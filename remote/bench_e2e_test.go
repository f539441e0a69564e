package remote_test

import (
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"

	scheduler "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// BenchmarkPingPong is one process on each of two nodes sending a
// message back and forth through an embedded NATS server on loopback;
// b.N counts round trips.
func BenchmarkPingPong(b *testing.B) {
	_, a, c := tTwoNodes(b, nil)
	tRegister(b, c)
	echo, err := c.S.Submit(b.Context(), &echo{}, "run", nil)
	if err != nil {
		b.Fatal(err)
	}
	ping := []byte("ping")
	rounds := b.N
	b.ReportAllocs()
	b.ResetTimer()
	h := tSubmit(b, a.S, func(_ *tProc, n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
		if n > rounds {
			out.Done(payload.Payload{})
			return nil
		}
		out.Tell(echo.PID(), ping)
		return nil
	})
	if _, err := tWaitResult(b, h); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkStream is one process streaming 32-byte messages to a process
// on another node, which acknowledges every 1024th so that the sender
// keeps at most 8192 unacknowledged; b.N counts messages.
func BenchmarkStream(b *testing.B) {
	const ackEvery, ahead = 1024, 8192
	_, a, c := tTwoNodes(b, nil)
	total := b.N
	got := 0
	recv := tSubmit(b, c.S, func(_ *tProc, _ int, evs []scheduler.Event, out *scheduler.StepOutput) error {
		for _, ev := range evs {
			if ev.Type != scheduler.EventMessage {
				continue
			}
			if ev.Error != nil {
				b.Errorf("the receiver got a bounce: %v", ev.Error)
			}
			if got++; got%ackEvery == 0 || got == total {
				out.Tell(ev.From, relay.PID{ID: uint64(got)})
			}
		}
		if got == total {
			out.Done(payload.Payload{})
		}
		return nil
	})
	body := make([]byte, 32)
	sent, acked := 0, 0
	b.ReportAllocs()
	b.ResetTimer()
	send := tSubmit(b, a.S, func(_ *tProc, _ int, evs []scheduler.Event, out *scheduler.StepOutput) error {
		for _, ev := range evs {
			if ev.Type != scheduler.EventMessage {
				continue
			}
			if ev.Error != nil {
				return ev.Error
			}
			ack, ok := ev.Data.(relay.PID) // how many the receiver got, as a PID's ID
			if !ok {
				return fmt.Errorf("the sender got %T, want an acknowledgement", ev.Data)
			}
			acked = int(ack.ID)
		}
		if acked == total {
			out.Done(payload.Payload{})
			return nil
		}
		for k := 0; k < 256 && sent < total && sent-acked < ahead; k++ {
			out.Tell(recv.PID(), body)
			sent++
		}
		if sent < total && sent-acked < ahead {
			out.Continue()
		}
		return nil
	})
	if _, err := tWaitResult(b, send); err != nil {
		b.Fatal(err)
	}
	if _, err := tWaitResult(b, recv); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkNATSPingPong is the floor under BenchmarkPingPong: two plain
// NATS connections on the same embedded server echoing a 4-byte message
// back and forth with core publish and subscribe; b.N counts round
// trips.
func BenchmarkNATSPingPong(b *testing.B) {
	srv := tServer(b)
	pinger, err := nats.Connect(srv.ClientURL())
	if err != nil {
		b.Fatal(err)
	}
	defer pinger.Close()
	ponger, err := nats.Connect(srv.ClientURL())
	if err != nil {
		b.Fatal(err)
	}
	defer ponger.Close()
	if _, err := ponger.Subscribe("ping", func(m *nats.Msg) { _ = ponger.Publish("pong", m.Data) }); err != nil {
		b.Fatal(err)
	}
	pongs := make(chan struct{}, 1)
	if _, err := pinger.Subscribe("pong", func(*nats.Msg) { pongs <- struct{}{} }); err != nil {
		b.Fatal(err)
	}
	if err := ponger.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := pinger.Flush(); err != nil {
		b.Fatal(err)
	}
	ping := []byte("ping")
	b.ReportAllocs()
	for b.Loop() {
		if err := pinger.Publish("ping", ping); err != nil {
			b.Fatal(err)
		}
		<-pongs
	}
}
