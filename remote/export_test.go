package remote

import (
	"time"

	scheduler "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// SetInboundHook makes n call f before it takes each batch; nil removes
// it.
func SetInboundHook(n *Node, f func()) {
	if f == nil {
		n.inboundHook.Store(nil)
		return
	}
	n.inboundHook.Store(&f)
}

// SetPublishHook makes n call f with each data batch or sync marker
// before it publishes it; an error f returns fails the publish as one
// from NATS would. nil removes it.
func SetPublishHook(n *Node, f func(subject string, data []byte) error) {
	if f == nil {
		n.publishHook.Store(nil)
		return
	}
	n.publishHook.Store(&f)
}

// HeaderLen is the length of a batch's header.
const HeaderLen = headerLen

// FakeRun is the run of a node played by hand with number num.
func FakeRun(num uint32) uint64 { return uint64(num)<<32 | 0x5eed }

// Run is n's run.
func Run(n *Node) uint64 { return n.run }

// runOf is n's run, or 0 for nil.
func runOf(n *Node) uint64 {
	if n == nil {
		return 0
	}
	return n.run
}

// EncodeMessages encodes msgs as one batch from the hand-played node
// sender (of run FakeRun(sender)) to node to with sequence seq; each body
// must be one wireBody accepts.
func EncodeMessages(sender uint32, to *Node, seq uint64, msgs ...relay.Message) []byte {
	var e batchEncoder
	e.reset()
	for _, m := range msgs {
		body, err := wireBody(m.Data)
		if err != nil {
			panic(err)
		}
		e.message(m.To, m.From, body)
	}
	return append([]byte(nil), e.finish(sender, FakeRun(sender)^runOf(to), seq, 0)...)
}

// EncodeHello encodes a hello (direct or not) or, if ack, an ack, from
// the hand-played node sender to the run of node to (nil: to every
// node).
func EncodeHello(sender uint32, name string, ack, direct bool, to *Node) []byte {
	m := ctlMsg{typ: ctlHello, sender: sender, run: FakeRun(sender), to: runOf(to), name: name}
	if ack {
		m.typ = ctlAck
	}
	if direct {
		m.flags = flagDirect
	}
	return appendCtl(nil, m)
}

// EncodeGrant encodes a grant of credit for every batch up to seq, to
// node to.
func EncodeGrant(sender uint32, seq uint64, to *Node) []byte {
	return appendCtl(nil, ctlMsg{typ: ctlGrant, sender: sender, run: FakeRun(sender), to: runOf(to), seq: seq})
}

// EncodeBye encodes a goodbye.
func EncodeBye(sender uint32) []byte {
	return appendCtl(nil, ctlMsg{typ: ctlBye, sender: sender, run: FakeRun(sender)})
}

// EncodeProbe encodes a probe.
func EncodeProbe(sender uint32) []byte {
	return appendCtl(nil, ctlMsg{typ: ctlProbe, sender: sender, run: FakeRun(sender)})
}

// EncodeDown encodes a "you are down" to the run toRun.
func EncodeDown(sender uint32, toRun uint64) []byte {
	return appendCtl(nil, ctlMsg{typ: ctlDown, sender: sender, run: FakeRun(sender), to: toRun})
}

// IsAck reports whether data is an ack from sender.
func IsAck(data []byte, sender uint32) bool {
	m, err := decodeCtl(data)
	return err == nil && m.typ == ctlAck && m.sender == sender
}

// Subjects returns the control subject of the cluster and the control
// and data subjects of node num.
func Subjects(cluster string, num uint32) (all, ctl, data string) {
	s := newSubjects(cluster, num)
	return s.all, s.ctl, s.data
}

// DecodeBatch returns the message and bounce frames of a batch from
// sender to self as messages (a bounce has Err set).
func DecodeBatch(data []byte, sender, self uint32) ([]relay.Message, error) {
	var d decoder
	frames, err := d.decode(data, sender, self)
	var msgs []relay.Message
	for _, f := range frames {
		switch f.kind {
		case kindMessage:
			msgs = append(msgs, relay.Message{From: f.from, To: f.to, Data: f.body})
		case kindBounce:
			msgs = append(msgs, relay.Message{From: f.from, To: f.to, Data: f.body, Err: newRemoteError("", f.from, f.code, f.text)})
		}
	}
	return msgs, err
}

// SetRandomNode replaces the source of incarnation numbers until the
// returned function restores it.
func SetRandomNode(f func() uint32) (restore func()) {
	old := randomNode
	randomNode = f
	return func() { randomNode = old }
}

// HandleExit is handleExit: how the process of h ended, from its Handle,
// or e if the Handle does not know yet.
var HandleExit = handleExit

// IsDown reports whether data is a "you are down" from sender.
func IsDown(data []byte, sender uint32) bool {
	m, err := decodeCtl(data)
	return err == nil && m.typ == ctlDown && m.sender == sender
}

// EncodeMonitor encodes a batch from node sender to node to with
// sequence seq that asks, under request number req, to be told when
// target ends.
func EncodeMonitor(sender uint32, to *Node, seq, req uint64, target relay.PID) []byte {
	var e batchEncoder
	e.reset()
	e.monitor(req, target)
	return append([]byte(nil), e.finish(sender, FakeRun(sender)^runOf(to), seq, 0)...)
}

// Exited is an exited frame: the end of the process that request Req
// monitors or awaits.
type Exited struct {
	Req    uint64
	Reason scheduler.ExitReason
	Result payload.Payload
	Err    error
}

// DecodeExits returns the exited frames of a batch from sender to self.
func DecodeExits(data []byte, sender, self uint32) ([]Exited, error) {
	var d decoder
	frames, err := d.decode(data, sender, self)
	var exits []Exited
	for _, f := range frames {
		if f.kind == kindExited {
			x := Exited{Req: f.req, Reason: scheduler.ExitReason(f.reason)}
			x.Result, _ = f.body.(payload.Payload)
			if f.code != 0 {
				x.Err = newRemoteError("", relay.PID{}, f.code, f.text)
			}
			exits = append(exits, x)
		}
	}
	return exits, err
}

// IsSyncMarker reports whether data is a sync marker: a header alone,
// asking for a grant at once.
func IsSyncMarker(data []byte) bool {
	return len(data) == headerLen && data[1]&flagSync != 0
}

// LocalAwaits is the number of monitors n keeps on its own processes for
// awaited spawns.
func LocalAwaits(n *Node) int64 { return n.localAwaits.Load() }

// IsHeartbeat reports whether data is a heartbeat from sender.
func IsHeartbeat(data []byte, sender uint32) bool {
	m, err := decodeCtl(data)
	return err == nil && m.typ == ctlHeartbeat && m.sender == sender
}

// EncodeSyncMarker encodes a sync marker from sender to node to with
// sequence seq.
func EncodeSyncMarker(sender uint32, to *Node, seq uint64) []byte {
	b := make([]byte, headerLen)
	writeHeader(b, sender, FakeRun(sender)^runOf(to), seq, flagSync)
	return b
}

// GrantOf returns the sequence data grants, if it is a grant from
// sender.
func GrantOf(data []byte, sender uint32) (uint64, bool) {
	m, err := decodeCtl(data)
	if err != nil || m.typ != ctlGrant || m.sender != sender {
		return 0, false
	}
	return m.seq, true
}

// SetFlushTimeout replaces the bound of a flush whose context has no
// deadline until the returned function restores it.
func SetFlushTimeout(d time.Duration) (restore func()) {
	old := flushTimeout
	flushTimeout = d
	return func() { flushTimeout = old }
}

// SetDataPendingLimits makes the nodes started from now on let at most
// msgs batches and bytes bytes wait in their NATS client, until the
// returned function restores NATS's own limits.
func SetDataPendingLimits(msgs, bytes int) (restore func()) {
	old := dataPendingLimits
	dataPendingLimits.msgs, dataPendingLimits.bytes = msgs, bytes
	return func() { dataPendingLimits = old }
}

// DataQueue returns how many batches wait in n's NATS client for its
// data subscription and how many it dropped, or -1s if n has none.
func DataQueue(n *Node) (pending, dropped int) {
	for _, sub := range n.subs {
		if sub.Subject == n.subj.data {
			msgs, _, err := sub.Pending()
			d, derr := sub.Dropped()
			if err != nil || derr != nil {
				return -1, -1
			}
			return msgs, d
		}
	}
	return -1, -1
}

// EncodeByeOf encodes a goodbye from node n in its own run: published
// by hand, it makes n's peers declare n down while n runs on.
func EncodeByeOf(n *Node) []byte {
	return appendCtl(nil, ctlMsg{typ: ctlBye, sender: n.num, run: n.run, name: n.cfg.Name})
}
