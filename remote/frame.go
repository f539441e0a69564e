package remote

import (
	"encoding/binary"
	"errors"
	"fmt"

	scheduler "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// A batch is one NATS message on a node's data subject: a fixed header,
// then frames, each a kind byte and varint fields.
//
//	header   version (1 byte) | flags (1) | sender node (uint32 LE) | link key (uint64 LE) | sequence (uint64 LE)
//	message  kindMessage  | to-ref | from-ref | body
//	bounce   kindBounce   | from-ref (the recipient not reached) | to-ref (its sender) | code | text-ref | body
//	spawn      kindSpawn     | request | kind-ref | method-ref | await (1 byte) | payloads
//	spawned    kindSpawned   | request | child-ref | code | text-ref
//	monitor    kindMonitor   | request | to-ref (the process to watch)
//	demonitor  kindDemonitor | request
//	exited     kindExited    | request | reason (1 byte) | code | text-ref | body (the result)
//
// Every PID in a frame is written as its ID alone. Which node it belongs to
// follows from its side: a "to" PID is a process of the receiving node,
// a "from" PID one of the sending node (ID 0 is the zero PID, a sender
// outside any process). So a frame cannot name a process of a third node,
// and a PID costs no node number.
//
// The link key is the sender's run XOR the receiver's (see control.go):
// a receiver takes a batch only if its key is the one of the sender run
// it knows and its own run, so that a batch of an earlier run of the
// sender, or one meant for an earlier run of the receiver, both of which
// share the number and the subject, is dropped instead of being taken
// with sequence numbers of another run. It costs eight bytes a batch,
// nothing a message.
//
// What repeats within a batch is sent once: an id-ref or text-ref of 1
// carries the value and appends it to the batch's table, 2 carries it
// without appending it, 3 and up name table entry ref-3; 0 is the zero ID
// or the empty string. The table starts empty in every batch, so batches
// decode independently of each other.
const (
	wireVersion = 2
	headerLen   = 1 + 1 + 4 + 8 + 8

	flagSync = 1 << 0 // the receiver grants credit up to this batch at once
)

// Frame kinds.
const (
	kindMessage   = 1 + iota
	kindBounce    // a message returned undelivered
	kindSpawn     // start a process of a registered kind
	kindSpawned   // the answer to a spawn: started, or why not
	kindMonitor   // tell me when this process ends
	kindDemonitor // forget my monitor
	kindExited    // a monitored or awaited process ended
)

// The references of the per-batch tables.
const (
	refZero     = 0
	refNew      = 1 // a value, appended to the table
	refLiteral  = 2 // a value, not appended
	refFirstIdx = 3
)

// Limits of the per-batch tables, so that a hostile batch cannot make the
// decoder grow them without bound (each entry also costs input bytes).
const (
	maxIDTable   = 1 << 16
	maxTextTable = 1 << 10
)

// idSlots is the size of the encoder's direct-mapped cache of the IDs
// already in the batch's table; an ID whose slot is taken is sent again.
const (
	idSlotBits = 8
	idSlots    = 1 << idSlotBits
)

// The exit reasons the wire carries.
const (
	minExitReason = byte(scheduler.ExitDone)
	maxExitReason = byte(scheduler.ExitGone)
)

// errMalformed is wrapped by every decoding failure.
var errMalformed = errors.New("remote: malformed frame")

// errWireVersion is wrapped, with errMalformed, by the failure to decode
// a batch or control message of another wire version: one from a node
// of another release of this package, which this one cannot read.
var errWireVersion = errors.New("remote: another wire version")

// versionError is the error for a batch or control message of wire
// version v.
func versionError(v byte) error {
	return fmt.Errorf("%w: %w: version %d, this node speaks %d", errMalformed, errWireVersion, v, wireVersion)
}

// batchEncoder builds one batch. Its buffers are reused from batch to
// batch, so that encoding allocates nothing in steady state.
type batchEncoder struct {
	buf    []byte // header space, then frames
	frames int    // frames in buf

	// ids caches where IDs sit in the batch's table. An entry is valid
	// only if its gen is the encoder's, so starting a batch clears the
	// cache by bumping gen.
	ids   [idSlots]idSlot
	gen   uint32
	nIDs  int      // entries in the batch's ID table
	texts []string // the batch's text table (all of it: texts are few)
}

type idSlot struct {
	id  uint64
	idx uint32
	gen uint32
}

// reset starts a new batch.
func (e *batchEncoder) reset() {
	if cap(e.buf) < headerLen {
		e.buf = make([]byte, headerLen, 512)
	}
	e.buf = e.buf[:headerLen]
	e.frames = 0
	e.gen++
	if e.gen == 0 { // wrapped: old entries could look valid
		e.ids = [idSlots]idSlot{}
		e.gen = 1
	}
	e.nIDs = 0
	clear(e.texts)
	e.texts = e.texts[:0]
}

// size is the batch's length so far, header included.
func (e *batchEncoder) size() int { return len(e.buf) }

// finish writes the header; the batch is then ready to publish.
func (e *batchEncoder) finish(sender uint32, key, seq uint64, flags byte) []byte {
	writeHeader(e.buf, sender, key, seq, flags)
	return e.buf
}

// writeHeader writes a batch header at the start of b.
func writeHeader(b []byte, sender uint32, key, seq uint64, flags byte) {
	b[0] = wireVersion
	b[1] = flags
	binary.LittleEndian.PutUint32(b[2:], sender)
	binary.LittleEndian.PutUint64(b[6:], key)
	binary.LittleEndian.PutUint64(b[14:], seq)
}

// Upper bounds of the encoded length of a frame's fields, for checking
// limits before encoding.
const (
	maxIDRef   = 1 + binary.MaxVarintLen64
	maxCodeLen = binary.MaxVarintLen64
)

// textBound bounds the encoded length of a text-ref.
func textBound(s string) int { return 1 + uvarintLen(uint64(len(s))) + len(s) }

func (e *batchEncoder) id(id uint64) {
	if id == 0 {
		e.buf = append(e.buf, refZero)
		return
	}
	slot := &e.ids[(id*0x9e3779b97f4a7c15)>>(64-idSlotBits)] // Fibonacci hashing: the top bits mix all of id
	if slot.gen == e.gen && slot.id == id {
		e.buf = binary.AppendUvarint(e.buf, uint64(slot.idx)+refFirstIdx)
		return
	}
	if e.nIDs >= maxIDTable {
		e.buf = append(e.buf, refLiteral)
		e.buf = binary.AppendUvarint(e.buf, id)
		return
	}
	*slot = idSlot{id: id, idx: uint32(e.nIDs), gen: e.gen}
	e.nIDs++
	e.buf = append(e.buf, refNew)
	e.buf = binary.AppendUvarint(e.buf, id)
}

func (e *batchEncoder) text(s string) {
	if s == "" {
		e.buf = append(e.buf, refZero)
		return
	}
	for i, t := range e.texts {
		if t == s {
			e.buf = binary.AppendUvarint(e.buf, uint64(i)+refFirstIdx)
			return
		}
	}
	if len(e.texts) < maxTextTable {
		e.texts = append(e.texts, s)
		e.buf = append(e.buf, refNew)
	} else {
		e.buf = append(e.buf, refLiteral)
	}
	e.buf = binary.AppendUvarint(e.buf, uint64(len(s)))
	e.buf = append(e.buf, s...)
}

// messageBound bounds the encoded length of a message or bounce frame
// with the given body size and error text.
func messageBound(bodyLen int, text string) int {
	return 1 + 2*maxIDRef + maxCodeLen + textBound(text) + bodyLen
}

// message appends a message frame; body is what wireBody returned.
func (e *batchEncoder) message(to, from relay.PID, body any) {
	e.buf = append(e.buf, kindMessage)
	e.id(to.ID)
	e.id(from.ID)
	e.buf = appendBody(e.buf, body)
	e.frames++
}

// bounce appends a bounce frame: from is the recipient not reached (a
// process of the sending node), to the original sender.
func (e *batchEncoder) bounce(from, to relay.PID, code uint64, text string, body any) {
	e.buf = append(e.buf, kindBounce)
	e.id(from.ID)
	e.id(to.ID)
	e.buf = binary.AppendUvarint(e.buf, code)
	e.text(text)
	e.buf = appendBody(e.buf, body)
	e.frames++
}

// spawnBound bounds the encoded length of a spawn frame.
func spawnBound(kind, method string, input payload.Payloads) int {
	return 1 + binary.MaxVarintLen64 + textBound(kind) + textBound(method) + 1 + bodySize(input)
}

// spawn appends a spawn request.
func (e *batchEncoder) spawn(req uint64, kind, method string, await bool, input payload.Payloads) {
	e.buf = append(e.buf, kindSpawn)
	e.buf = binary.AppendUvarint(e.buf, req)
	e.text(kind)
	e.text(method)
	if await {
		e.buf = append(e.buf, 1)
	} else {
		e.buf = append(e.buf, 0)
	}
	e.buf = binary.AppendUvarint(e.buf, uint64(len(input)))
	for _, p := range input {
		e.buf = appendPayload(e.buf, p)
	}
	e.frames++
}

// replyBound bounds the encoded length of a spawned, monitor, demonitor
// or exited frame.
func replyBound(text string, bodyLen int) int {
	return 1 + binary.MaxVarintLen64 + maxIDRef + 1 + maxCodeLen + textBound(text) + bodyLen
}

// spawned appends the answer to a spawn request: the child (a process of
// the sending node, zero if it did not start) and the failure if any.
func (e *batchEncoder) spawned(req uint64, child relay.PID, code uint64, text string) {
	e.buf = append(e.buf, kindSpawned)
	e.buf = binary.AppendUvarint(e.buf, req)
	e.id(child.ID)
	e.buf = binary.AppendUvarint(e.buf, code)
	e.text(text)
	e.frames++
}

// monitor appends a request to be told when process target of the
// receiving node ends.
func (e *batchEncoder) monitor(req uint64, target relay.PID) {
	e.buf = append(e.buf, kindMonitor)
	e.buf = binary.AppendUvarint(e.buf, req)
	e.id(target.ID)
	e.frames++
}

// demonitor appends a request to forget the monitor of request req.
func (e *batchEncoder) demonitor(req uint64) {
	e.buf = append(e.buf, kindDemonitor)
	e.buf = binary.AppendUvarint(e.buf, req)
	e.frames++
}

// exited appends the end of the process that request req monitors or
// awaits: how it ended, its error (code, text) and its result.
func (e *batchEncoder) exited(req uint64, reason byte, code uint64, text string, body any) {
	e.buf = append(e.buf, kindExited)
	e.buf = binary.AppendUvarint(e.buf, req)
	e.buf = append(e.buf, reason)
	e.buf = binary.AppendUvarint(e.buf, code)
	e.text(text)
	e.buf = appendBody(e.buf, body)
	e.frames++
}

// batchHeader is a decoded batch header.
type batchHeader struct {
	flags  byte
	sender uint32
	key    uint64 // the link key: sender run XOR receiver run
	seq    uint64
}

// frame is one decoded frame; which fields are set depends on kind.
type frame struct {
	kind   byte
	to     relay.PID // message, bounce: the recipient here; monitor: the process to watch
	from   relay.PID // message: the sender; bounce: the recipient not reached; spawned: the child
	body   any       // message, bounce; spawned, exited: the result
	code   uint64    // bounce, spawned, exited: the failure's wire code
	text   string    // bounce, spawned, exited: the failure's text
	req    uint64    // spawn, spawned, monitor, demonitor, exited: the request
	reason byte      // exited: how the process ended (a scheduler.ExitReason)
	name   string    // spawn: the kind
	method string    // spawn: the entry point
	input  payload.Payloads
	await  bool
}

// decoder decodes batches. Its tables and frame slice are reused from
// batch to batch. One goroutine at a time.
type decoder struct {
	ids    []uint64
	texts  []string
	frames []frame
}

// readHeader decodes a batch header.
func readHeader(data []byte) (batchHeader, error) {
	if len(data) < headerLen {
		return batchHeader{}, errMalformedf("batch of %d bytes is shorter than its header", len(data))
	}
	if data[0] != wireVersion {
		return batchHeader{}, versionError(data[0])
	}
	return batchHeader{
		flags:  data[1],
		sender: binary.LittleEndian.Uint32(data[2:]),
		key:    binary.LittleEndian.Uint64(data[6:]),
		seq:    binary.LittleEndian.Uint64(data[14:]),
	}, nil
}

// decode decodes the frames of a batch from node sender to node self. It
// returns all of them or an error wrapping errMalformed: a batch with one
// bad frame delivers nothing. The frames are valid until the next call.
func (d *decoder) decode(data []byte, sender, self uint32) ([]frame, error) {
	clear(d.frames) // drop the previous batch's references
	d.frames = d.frames[:0]
	d.ids = d.ids[:0]
	clear(d.texts)
	d.texts = d.texts[:0]
	r := reader{buf: data, off: headerLen}
	for r.err == nil && r.off < len(data) {
		d.frames = append(d.frames, frame{})
		f := &d.frames[len(d.frames)-1]
		f.kind = r.byte()
		switch f.kind {
		case kindMessage:
			f.to = d.pid(&r, self)
			f.from = d.pid(&r, sender)
			f.body = r.body()
			if f.to.ID == 0 {
				r.fail("message to the zero PID")
			}
			// A request asks for the answer on the sending node, a
			// reply answers a request of this one.
			switch b := f.body.(type) {
			case scheduler.Request:
				if b.ReplyTo.PID.Node != sender {
					r.fail("a request whose answer goes to node %d", b.ReplyTo.PID.Node)
				}
			case scheduler.Reply:
				if b.To.PID != f.to {
					r.fail("a reply to %v in a message to %v", b.To.PID, f.to)
				}
			}
		case kindBounce:
			f.from = d.pid(&r, sender)
			f.to = d.pid(&r, self)
			f.code = r.uvarint()
			f.text = d.text(&r)
			f.body = r.body()
			if f.to.ID == 0 || f.from.ID == 0 {
				r.fail("bounce with a zero PID")
			}
			switch b := f.body.(type) {
			case scheduler.Request:
				if b.ReplyTo.PID != f.to {
					r.fail("a returned request of %v to %v", b.ReplyTo.PID, f.to)
				}
			case scheduler.Reply:
				r.fail("a returned reply")
			}
		case kindSpawn:
			f.req = r.uvarint()
			f.name = d.text(&r)
			f.method = d.text(&r)
			switch r.byte() {
			case 0:
			case 1:
				f.await = true
			default:
				r.fail("bad await flag")
			}
			f.input = r.payloads()
		case kindSpawned:
			f.req = r.uvarint()
			f.from = d.pid(&r, sender)
			f.code = r.uvarint()
			f.text = d.text(&r)
		case kindMonitor:
			f.req = r.uvarint()
			f.to = d.pid(&r, self)
			if f.to.ID == 0 {
				r.fail("monitor of the zero PID")
			}
		case kindDemonitor:
			f.req = r.uvarint()
		case kindExited:
			f.req = r.uvarint()
			f.reason = r.byte()
			f.code = r.uvarint()
			f.text = d.text(&r)
			f.body = r.body()
			if f.reason < minExitReason || f.reason > maxExitReason {
				r.fail("exit reason %d", f.reason)
			}
		default:
			r.fail("unknown frame kind %d", f.kind)
		}
	}
	if r.err != nil {
		clear(d.frames)
		d.frames = d.frames[:0]
		return nil, r.err
	}
	return d.frames, nil
}

// pid reads an id-ref and makes it a PID of node.
func (d *decoder) pid(r *reader, node uint32) relay.PID {
	ref := r.uvarint()
	var id uint64
	switch {
	case r.err != nil:
		return relay.PID{}
	case ref == refZero:
		return relay.PID{}
	case ref == refNew || ref == refLiteral:
		id = r.uvarint()
		if id == 0 {
			r.fail("literal ID 0")
			return relay.PID{}
		}
		if ref == refNew {
			if len(d.ids) >= maxIDTable {
				r.fail("ID table full")
				return relay.PID{}
			}
			d.ids = append(d.ids, id)
		}
	default:
		i := ref - refFirstIdx
		if i >= uint64(len(d.ids)) {
			r.fail("ID ref %d beyond the table of %d", ref, len(d.ids))
			return relay.PID{}
		}
		id = d.ids[i]
	}
	return relay.PID{Node: node, ID: id}
}

// text reads a text-ref. Texts are copied: unlike bodies they are kept by
// the node (kind and method names, error texts).
func (d *decoder) text(r *reader) string {
	ref := r.uvarint()
	switch {
	case r.err != nil:
		return ""
	case ref == refZero:
		return ""
	case ref == refNew || ref == refLiteral:
		b := r.lenBytes()
		if r.err != nil {
			return ""
		}
		s := string(b)
		if ref == refNew {
			if len(d.texts) >= maxTextTable {
				r.fail("text table full")
				return ""
			}
			d.texts = append(d.texts, s)
		}
		return s
	}
	i := ref - refFirstIdx
	if i >= uint64(len(d.texts)) {
		r.fail("text ref %d beyond the table of %d", ref, len(d.texts))
		return ""
	}
	return d.texts[i]
}

// errMalformedf returns an error wrapping errMalformed.
func errMalformedf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errMalformed, fmt.Sprintf(format, args...))
}
