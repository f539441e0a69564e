package remote

import (
	"log/slog"

	"github.com/nats-io/nats.go"

	scheduler "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/relay"
)

// onData takes a batch from another node; NATS calls it on the data
// subscription's goroutine, one batch at a time, in the order each
// sender published them. A batch is dropped, and counted, when it cannot
// be decoded, when its sender has not joined or is down, when it is from
// or for another run of its sender's or this node's number, or when its
// sequence shows it was taken already; nothing in a dropped batch is
// delivered.
func (n *Node) onData(msg *nats.Msg) {
	if hook := n.inboundHook.Load(); hook != nil {
		(*hook)()
	}
	data := msg.Data
	h, err := readHeader(data)
	if err != nil {
		n.dropMalformed(data, err)
		return
	}
	p := n.peer(h.sender)
	switch {
	case p == nil:
		n.counts.dropped[dropUnknownSender].Add(1)
		return
	case h.key != p.link.key:
		// From or for another run of the number: one that p replaced
		// is down, any other unknown.
		if h.key == p.prevRun^n.run {
			n.counts.dropped[dropDownSender].Add(1)
		} else {
			n.counts.dropped[dropUnknownSender].Add(1)
		}
		return
	case p.link.state.Load() == linkDown:
		n.counts.dropped[dropDownSender].Add(1)
		return
	case h.seq <= p.lastSeq:
		n.counts.dropped[dropDuplicate].Add(1)
		return
	}
	if gap := h.seq - p.lastSeq - 1; gap > 0 { // sequences start at 1
		n.counts.gaps.Add(gap)
	}
	p.lastSeq = h.seq
	p.heardFrom(n.clock.Load())
	frames, err := n.dec.decode(data, h.sender, n.num)
	if err != nil {
		n.counts.dropped[dropMalformed].Add(1)
		n.logf(slog.LevelWarn, "remote: dropped a malformed batch", "peer", p.name, "node", p.num, "error", err.Error())
	} else {
		n.counts.received.Add(uint64(len(frames)))
		n.counts.batchesIn.Add(1)
		n.counts.bytesIn.Add(uint64(len(data)))
		for i := range frames {
			n.deliver(p, &frames[i])
		}
	}
	// Every batch from the peer used its credit, good or not.
	p.ungranted += len(data)
	if h.flags&flagSync != 0 || p.ungranted >= n.cfg.Window/4 {
		p.ungranted = 0
		n.tellPeer(p, ctlMsg{typ: ctlGrant, seq: h.seq})
	}
}

// deliver hands one frame from peer p to the scheduler or to the request
// it answers. Data subscription goroutine.
func (n *Node) deliver(p *peer, f *frame) {
	switch f.kind {
	case kindMessage:
		reply, isReply := f.body.(scheduler.Reply)
		if isReply {
			if e, ok := reply.Err.(*Error); ok {
				e.Node, e.PID = p.name, f.from
			}
		}
		err := n.sched.Send(relay.Message{From: f.from, To: f.to, Data: f.body})
		if err == nil {
			return
		}
		n.counts.bouncedBack(err)
		if f.from.IsZero() || isReply {
			// No one to tell: a message from outside any process, or
			// an answer nobody waits for (the scheduler counts it as a
			// dead letter, as it does a late local one).
			return
		}
		if p.link.sendBounce(f.to, f.from, err, f.body) != nil {
			n.counts.dropped[dropOverflow].Add(1)
		}
	case kindBounce:
		cause := newRemoteError(p.name, f.from, f.code, f.text)
		// Counted before the hand-off, so that a sender that sees its
		// bounce sees it counted too. A sender that has ended meanwhile
		// makes it a dead letter, which the scheduler counts.
		n.counts.returned(cause)
		_ = n.sched.Send(relay.Message{From: f.from, To: f.to, Data: f.body, Err: cause})
	case kindSpawn:
		n.serveSpawn(p, f)
	case kindMonitor:
		n.serveMonitor(p, f)
	case kindDemonitor:
		n.serveDemonitor(p, f)
	case kindSpawned, kindExited:
		n.pending.answer(p, f)
	}
}
