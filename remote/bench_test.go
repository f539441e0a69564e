package remote

import (
	"context"
	"testing"

	scheduler "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"

	"github.com/nats-io/nats.go"
)

// benchBatch is the batch size of the codec benchmarks.
const benchBatch = 64

// BenchmarkEncode encodes 32-byte messages between a few processes, one
// batch per 64; b.N counts messages.
func BenchmarkEncode(b *testing.B) {
	body := make([]byte, 32)
	var e batchEncoder
	e.reset()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if i%benchBatch == 0 {
			e.reset()
		}
		e.message(tTo(uint64(1+i%8)), tFrom(uint64(1+i%4)), body)
	}
}

// BenchmarkDecode decodes batches of 64 such messages; b.N counts
// messages. Each []byte body costs the one allocation of boxing it for
// the recipient's event.
func BenchmarkDecode(b *testing.B) {
	var frames []frame
	for i := range benchBatch {
		frames = append(frames, frame{kind: kindMessage, to: tTo(uint64(1 + i%8)), from: tFrom(uint64(1 + i%4)), body: make([]byte, 32)})
	}
	data := tEncode(frames, 1)
	var d decoder
	b.ReportAllocs()
	b.SetBytes(int64(len(data) / benchBatch))
	for i := 0; b.Loop(); i++ {
		if i%benchBatch != 0 {
			continue
		}
		if _, err := d.decode(data, tSender, tSelf); err != nil {
			b.Fatal(err)
		}
	}
}

// benchNode returns a running node with one open peer, number 2, and no
// connection: enough for the send path up to the link's buffer.
func benchNode(b *testing.B) (*Node, *peer) {
	cfg, err := Config{Cluster: "bench", Name: "a", Window: 1 << 30, MaxBuffered: 1 << 30}.withDefaults()
	if err != nil {
		b.Fatal(err)
	}
	n := &Node{cfg: cfg, num: 1, subj: newSubjects(cfg.Cluster, 1), writer: writer{wake: make(chan struct{}, 1)}}
	n.maxBatch.Store(512 << 10)
	p := newPeer(n, 2, "b", 0)
	p.link.state.Store(linkOpen)
	n.peers.Store(&map[uint32]*peer{2: p})
	n.state.Store(stateRunning)
	return n, p
}

// discard empties the link as the writer would after publishing.
func (l *link) discard() {
	l.mu.Lock()
	for b := l.next(); b != nil; b = l.next() {
		l.take(b)
		l.buffered -= b.bytes
		l.recycle(b)
	}
	l.queued = false
	l.mu.Unlock()
}

// BenchmarkSend is the sending side of a message to another node, as a
// worker runs it for a Tell: Node.Send, the body check, and the encoding
// into the peer's batch. The batches are discarded every 64 messages, as
// the writer takes them. b.N counts messages; the target is no
// allocation per message.
func BenchmarkSend(b *testing.B) {
	for _, bc := range []struct {
		name string
		body any
	}{
		{"bytes", make([]byte, 32)},
		{"string", "a string of 32 bytes, more or less"},
		{"payload", payload.RawJSON([]byte(`{"n":1}`))},
		{"pid", relay.PID{Node: 1, ID: 77}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			n, p := benchNode(b)
			msg := relay.Message{From: relay.PID{Node: 1, ID: 5}, To: relay.PID{Node: 2, ID: 9}, Data: bc.body}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if err := n.Send(msg); err != nil {
					b.Fatal(err)
				}
				if i%benchBatch == benchBatch-1 {
					p.link.discard()
					<-n.writer.wake
					n.writer.queue = n.writer.queue[:0]
				}
			}
		})
	}
}

// sink is a process that takes every message and never ends by itself.
type sink struct{}

func (sink) Init(context.Context, string, payload.Payloads) error { return nil }
func (sink) Step(evs []scheduler.Event, out *scheduler.StepOutput) error {
	for _, ev := range evs {
		if ev.Type == scheduler.EventCancel {
			out.Done(payload.Payload{})
		}
	}
	return nil
}
func (sink) Close() {}

// BenchmarkReceive is the receiving side: batches of 64 32-byte messages
// decoded and handed to the scheduler, for a process that takes them.
// b.N counts messages; the target is at most one allocation per message
// (boxing the body for the event). The bytes per message are mostly the
// recipient's mailbox growing: one goroutine handing in batches outruns
// the worker that takes them.
func BenchmarkReceive(b *testing.B) {
	n, _ := benchNode(b)
	s, err := scheduler.New(scheduler.WithNode(1), scheduler.WithTransport(n))
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = s.Shutdown(context.Background()) }()
	n.sched = s
	h, err := s.Submit(context.Background(), sink{}, "run", nil)
	if err != nil {
		b.Fatal(err)
	}
	var frames []frame
	for range benchBatch {
		frames = append(frames, frame{kind: kindMessage, to: h.PID(), from: tFrom(3), body: make([]byte, 32)})
	}
	data := tEncode(frames, 1)
	msg := &nats.Msg{Data: data}
	b.ReportAllocs()
	seq := uint64(0)
	for i := 0; b.Loop(); i++ {
		if i%benchBatch != 0 {
			continue
		}
		seq++
		writeHeader(data, tSender, 0, seq, 0)
		n.onData(msg)
	}
}
