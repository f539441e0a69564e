package remote

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	scheduler "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// The bodies a message can carry to another node, and their tags on the
// wire. The rule: what crosses is what the receiver can read the same way
// a receiver on the sender's node would.
//
//   - nil, a string, a []byte and a relay.PID arrive as the same type and
//     value.
//   - A payload.Payload of bytes or JSON arrives as it was sent; one
//     holding a Go value (payload.Of) is encoded as JSON at the sender and
//     arrives as a JSON payload, whose Decode and payload.As read it into
//     the same Go types the local one would.
//   - payload.Payloads: each element by the rule above.
//   - A scheduler.Request (what a request delivers) and a scheduler.Reply
//     (an answer going back to the asker's node), whose body or data
//     cross by the rules above; the Reply's error arrives as an *Error.
//
// Anything else is refused at the sender with ErrNotEncodable, and so is
// a Go value that JSON cannot encode (the error wraps payload.ErrEncode).
// A panic in a value's MarshalJSON is not recovered: the json package
// passes it on to the goroutine that sends (see the package
// documentation).
const (
	bodyNil      = 0
	bodyString   = 1
	bodyBytes    = 2
	bodyPayload  = 3
	bodyPayloads = 4
	bodyPID      = 5
	bodyNilBytes = 6 // a nil []byte, kept apart from an empty one
	bodyRequest  = 7 // reply-to node, ID, sequence; the body
	bodyReply    = 8 // to node, ID, sequence; error code and text; the data
)

// wireBody checks that body can cross to another node and returns it in
// the form that is encoded: a payload holding a Go value is replaced by
// its JSON form. It is the only step of a send that may allocate, and the
// only one that may fail because of the body. Any goroutine.
func wireBody(body any) (any, error) {
	switch b := body.(type) {
	case scheduler.Request:
		inner, err := wireInner(b.Body)
		if err != nil {
			return nil, fmt.Errorf("the body of a request: %w", err)
		}
		b.Body = inner
		return b, nil
	case scheduler.Reply:
		inner, err := wireInner(b.Data)
		if err != nil {
			return nil, fmt.Errorf("the data of a reply: %w", err)
		}
		b.Data = inner
		return b, nil
	}
	return wireInner(body)
}

// wireInner is wireBody for what a request or a reply may carry: the
// same, but not another request or reply.
func wireInner(body any) (any, error) {
	switch b := body.(type) {
	case nil, string, []byte, relay.PID:
		return body, nil
	case payload.Payload:
		if b.Format() != payload.FormatGo {
			return body, nil
		}
		p, err := encodePayload(b)
		if err != nil {
			return nil, err
		}
		return p, nil
	case payload.Payloads:
		return wirePayloads(b)
	}
	return nil, fmt.Errorf("%w: a body of type %T (send nil, a string, a []byte, a relay.PID, a payload.Payload or payload.Payloads)", ErrNotEncodable, body)
}

// wirePayloads returns ps with every Go value replaced by its JSON form;
// ps itself when it holds none.
func wirePayloads(ps payload.Payloads) (payload.Payloads, error) {
	var out payload.Payloads
	for i, p := range ps {
		if p.Format() != payload.FormatGo {
			if out != nil {
				out[i] = p
			}
			continue
		}
		if out == nil {
			out = make(payload.Payloads, len(ps))
			copy(out, ps[:i])
		}
		e, err := encodePayload(p)
		if err != nil {
			return nil, fmt.Errorf("payload %d: %w", i, err)
		}
		out[i] = e
	}
	if out == nil {
		return ps, nil
	}
	return out, nil
}

// encodePayload returns the wire form of a payload holding a Go value.
func encodePayload(p payload.Payload) (payload.Payload, error) {
	f, data, err := p.Encode()
	if err != nil {
		return payload.Payload{}, fmt.Errorf("%w: %w", ErrNotEncodable, err)
	}
	return payload.FromWire(f, data)
}

// uvarintLen is the length of the uvarint encoding of v.
func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// bodySize is the exact encoded length of body, which wireBody returned.
func bodySize(body any) int {
	switch b := body.(type) {
	case string:
		return 1 + uvarintLen(uint64(len(b))) + len(b)
	case []byte:
		if b == nil {
			return 1
		}
		return 1 + uvarintLen(uint64(len(b))) + len(b)
	case relay.PID:
		return 1 + uvarintLen(uint64(b.Node)) + uvarintLen(b.ID)
	case payload.Payload:
		return 1 + payloadSize(b)
	case payload.Payloads:
		n := 1 + uvarintLen(uint64(len(b)))
		for _, p := range b {
			n += payloadSize(p)
		}
		return n
	case scheduler.Request:
		return 1 + replyToSize(b.ReplyTo) + bodySize(b.Body)
	case scheduler.Reply:
		text := errorText(b.Err)
		return 1 + replyToSize(b.To) + uvarintLen(errorCode(b.Err)) + uvarintLen(uint64(len(text))) + len(text) + bodySize(b.Data)
	}
	return 1
}

// replyToSize is the encoded length of a ReplyTo.
func replyToSize(r scheduler.ReplyTo) int {
	return uvarintLen(uint64(r.PID.Node)) + uvarintLen(r.PID.ID) + uvarintLen(r.Seq)
}

// appendReplyTo appends a ReplyTo: node, ID, sequence.
func appendReplyTo(b []byte, r scheduler.ReplyTo) []byte {
	b = binary.AppendUvarint(b, uint64(r.PID.Node))
	b = binary.AppendUvarint(b, r.PID.ID)
	return binary.AppendUvarint(b, r.Seq)
}

// payloadSize is the encoded length of one payload in wire form.
func payloadSize(p payload.Payload) int {
	if p.IsZero() {
		return 1
	}
	data, _ := p.Value().([]byte)
	return 1 + uvarintLen(uint64(len(data))) + len(data)
}

// appendBody appends the encoding of body, which wireBody returned.
func appendBody(b []byte, body any) []byte {
	switch v := body.(type) {
	case string:
		b = append(b, bodyString)
		b = binary.AppendUvarint(b, uint64(len(v)))
		return append(b, v...)
	case []byte:
		if v == nil {
			return append(b, bodyNilBytes)
		}
		b = append(b, bodyBytes)
		b = binary.AppendUvarint(b, uint64(len(v)))
		return append(b, v...)
	case relay.PID:
		b = append(b, bodyPID)
		b = binary.AppendUvarint(b, uint64(v.Node))
		return binary.AppendUvarint(b, v.ID)
	case payload.Payload:
		return appendPayload(append(b, bodyPayload), v)
	case payload.Payloads:
		b = append(b, bodyPayloads)
		b = binary.AppendUvarint(b, uint64(len(v)))
		for _, p := range v {
			b = appendPayload(b, p)
		}
		return b
	case scheduler.Request:
		b = appendReplyTo(append(b, bodyRequest), v.ReplyTo)
		return appendBody(b, v.Body)
	case scheduler.Reply:
		b = appendReplyTo(append(b, bodyReply), v.To)
		text := errorText(v.Err)
		b = binary.AppendUvarint(b, errorCode(v.Err))
		b = binary.AppendUvarint(b, uint64(len(text)))
		b = append(b, text...)
		return appendBody(b, v.Data)
	}
	return append(b, bodyNil)
}

// appendPayload appends a payload in wire form: its format, then its
// content unless it is the zero Payload.
func appendPayload(b []byte, p payload.Payload) []byte {
	b = append(b, byte(p.Format()))
	if p.IsZero() {
		return b
	}
	data, _ := p.Value().([]byte)
	b = binary.AppendUvarint(b, uint64(len(data)))
	return append(b, data...)
}

// reader reads the wire encoding. Every read checks the bounds and
// records the first failure in err; later reads return zero values, so a
// decoder checks err once at the end of a unit instead of after every
// field. A hostile input can only produce an error, never a panic or an
// allocation larger than the input.
type reader struct {
	buf []byte
	off int
	err error
}

// fail records the first failure.
func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w at byte %d: %s", errMalformed, r.off, fmt.Sprintf(format, args...))
	}
}

func (r *reader) byte() byte {
	if r.err != nil || r.off >= len(r.buf) {
		r.fail("unexpected end")
		return 0
	}
	c := r.buf[r.off]
	r.off++
	return c
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.buf[r.off:])
	if n <= 0 {
		r.fail("bad varint")
		return 0
	}
	r.off += n
	return v
}

// bytes returns the next n bytes as a slice of the input whose capacity
// ends at its length, so that a receiver appending to it cannot overwrite
// what follows.
func (r *reader) bytes(n uint64) []byte {
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.buf)-r.off) {
		r.fail("length %d beyond the end", n)
		return nil
	}
	end := r.off + int(n)
	b := r.buf[r.off:end:end]
	r.off = end
	return b
}

// lenBytes reads a uvarint length and that many bytes.
func (r *reader) lenBytes() []byte { return r.bytes(r.uvarint()) }

// fixed32 reads a little-endian uint32.
func (r *reader) fixed32() uint32 {
	b := r.bytes(4)
	if b == nil {
		return 0
	}
	return binary.LittleEndian.Uint32(b)
}

// fixed64 reads a little-endian uint64.
func (r *reader) fixed64() uint64 {
	b := r.bytes(8)
	if b == nil {
		return 0
	}
	return binary.LittleEndian.Uint64(b)
}

// body reads a body. Bytes, strings and payload contents are views of the
// input, not copies: the batch a node receives is a buffer of its own,
// never written again, and each view is handed to one recipient.
func (r *reader) body() any {
	return r.bodyIn(false)
}

// bodyIn reads a body; inner: it is the body of a request or the data of
// a reply, which may not be another.
func (r *reader) bodyIn(inner bool) any {
	switch tag := r.byte(); tag {
	case bodyRequest, bodyReply:
		if inner {
			r.fail("a request or reply inside another")
			return nil
		}
		to := r.replyTo()
		if tag == bodyRequest {
			return scheduler.Request{ReplyTo: to, Body: r.bodyIn(true)}
		}
		var rerr error
		code := r.uvarint()
		text := string(r.lenBytes()) // kept with the error: a copy
		if code != 0 {
			rerr = newRemoteError("", relay.PID{}, code, text)
		}
		return scheduler.Reply{To: to, Err: rerr, Data: r.bodyIn(true)}
	case bodyNil:
		return nil
	case bodyString:
		b := r.lenBytes()
		if len(b) == 0 {
			return ""
		}
		// The bytes are never written again (see body), so a string
		// may share them; this saves a copy per message.
		return unsafe.String(&b[0], len(b))
	case bodyBytes:
		b := r.lenBytes()
		if b == nil {
			b = []byte{}
		}
		return b
	case bodyNilBytes:
		return []byte(nil)
	case bodyPID:
		node := r.uvarint()
		id := r.uvarint()
		if node > 1<<32-1 {
			r.fail("PID node %d out of range", node)
		}
		return relay.PID{Node: uint32(node), ID: id}
	case bodyPayload:
		return r.payload()
	case bodyPayloads:
		return r.payloads()
	default:
		r.fail("unknown body tag %d", tag)
	}
	return nil
}

// replyTo reads a ReplyTo.
func (r *reader) replyTo() scheduler.ReplyTo {
	node := r.uvarint()
	id := r.uvarint()
	seq := r.uvarint()
	if node == 0 || node > 1<<32-1 || id == 0 || seq == 0 {
		r.fail("bad reply-to <%d.%d> #%d", node, id, seq)
	}
	return scheduler.ReplyTo{PID: relay.PID{Node: uint32(node), ID: id}, Seq: seq}
}

// payload reads one payload in wire form.
func (r *reader) payload() payload.Payload {
	f := payload.Format(r.byte())
	if r.err != nil {
		return payload.Payload{}
	}
	if f == payload.FormatNone {
		return payload.Payload{}
	}
	b := r.lenBytes()
	if r.err != nil {
		return payload.Payload{}
	}
	p, err := payload.FromWire(f, b)
	if err != nil {
		r.fail("%v", err)
	}
	return p
}

// payloads reads a list of payloads; each takes at least one byte, so the
// count is checked against what is left before anything is allocated.
func (r *reader) payloads() payload.Payloads {
	n := r.uvarint()
	if r.err != nil || n == 0 {
		return nil
	}
	if n > uint64(len(r.buf)-r.off) {
		r.fail("%d payloads in %d bytes", n, len(r.buf)-r.off)
		return nil
	}
	ps := make(payload.Payloads, n)
	for i := range ps {
		ps[i] = r.payload()
	}
	if r.err != nil {
		return nil
	}
	return ps
}
