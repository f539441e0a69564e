package remote

import (
	"encoding/binary"
	"errors"
	"math"
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	scheduler "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// The nodes of the codec tests: batches go from node 2 to node 1.
const (
	tSender = 2
	tSelf   = 1
)

func tTo(id uint64) relay.PID   { return relay.PID{Node: tSelf, ID: id} }
func tFrom(id uint64) relay.PID { return relay.PID{Node: tSender, ID: id} }

// tFrames is one frame of every kind, with repeated PIDs and texts.
func tFrames() []frame {
	in := payload.Payloads{payload.Bytes([]byte{1, 2}), payload.RawJSON([]byte(`{"a":1}`)), {}}
	return []frame{
		{kind: kindMessage, to: tTo(5), from: tFrom(9), body: "hello"},
		{kind: kindMessage, to: tTo(5), from: tFrom(9), body: []byte("bytes")},
		{kind: kindMessage, to: tTo(5), from: relay.PID{}, body: nil},
		{kind: kindMessage, to: tTo(6), from: tFrom(9), body: []byte(nil)},
		{kind: kindMessage, to: tTo(6), from: tFrom(10), body: payload.RawJSON([]byte(`[1,2]`))},
		{kind: kindMessage, to: tTo(6), from: tFrom(10), body: in},
		{kind: kindMessage, to: tTo(6), from: tFrom(10), body: relay.PID{Node: 77, ID: math.MaxUint64}},
		{kind: kindMessage, to: tTo(math.MaxUint64), from: tFrom(1), body: ""},
		{kind: kindMessage, to: tTo(5), from: tFrom(9), body: scheduler.Request{ReplyTo: scheduler.ReplyTo{PID: tFrom(9), Seq: 3}, Body: "q"}},
		{kind: kindMessage, to: tTo(5), from: tFrom(9), body: scheduler.Reply{To: scheduler.ReplyTo{PID: tTo(5), Seq: 4}, Data: payload.RawJSON([]byte("42"))}},
		{kind: kindMessage, to: tTo(5), from: tFrom(9), body: scheduler.Reply{To: scheduler.ReplyTo{PID: tTo(5), Seq: 5}, Err: newRemoteError("", relay.PID{}, codeFailed, "odd")}},
		{kind: kindBounce, from: tFrom(3), to: tTo(5), code: 1, text: "not found", body: scheduler.Request{ReplyTo: scheduler.ReplyTo{PID: tTo(5), Seq: 6}}},
		{kind: kindBounce, from: tFrom(3), to: tTo(5), code: 3, text: "mailbox full", body: "x"},
		{kind: kindBounce, from: tFrom(3), to: tTo(5), code: 3, text: "mailbox full", body: payload.Payload{}},
		{kind: kindSpawn, req: 1, name: "worker", method: "run", await: true, input: in},
		{kind: kindSpawn, req: 2, name: "worker", method: "run"},
		{kind: kindSpawned, req: 1, from: tFrom(40)},
		{kind: kindSpawned, req: 2, code: 1 << 4, text: "init failed"},
		{kind: kindMonitor, req: 3, to: tTo(5)},
		{kind: kindDemonitor, req: 3},
		{kind: kindExited, req: 3, reason: byte(scheduler.ExitFailed), code: 1, text: "mailbox full", body: payload.Bytes([]byte{})},
		{kind: kindExited, req: 1, reason: byte(scheduler.ExitDone), body: payload.RawJSON([]byte(`"done"`))},
	}
}

// tEncode encodes frames as one batch from tSender.
func tEncode(frames []frame, seq uint64) []byte {
	var e batchEncoder
	e.reset()
	for _, f := range frames {
		switch f.kind {
		case kindMessage:
			e.message(f.to, f.from, f.body)
		case kindBounce:
			e.bounce(f.from, f.to, f.code, f.text, f.body)
		case kindSpawn:
			e.spawn(f.req, f.name, f.method, f.await, f.input)
		case kindSpawned:
			e.spawned(f.req, f.from, f.code, f.text)
		case kindMonitor:
			e.monitor(f.req, f.to)
		case kindDemonitor:
			e.demonitor(f.req)
		case kindExited:
			e.exited(f.req, f.reason, f.code, f.text, f.body)
		}
	}
	return append([]byte(nil), e.finish(tSender, 0, seq, 0)...)
}

func TestBatchRoundTrip(t *testing.T) {
	want := tFrames()
	data := tEncode(want, 7)
	h, err := readHeader(data)
	require.NoError(t, err)
	assert.Equal(t, batchHeader{sender: tSender, seq: 7}, h)
	var d decoder
	got, err := d.decode(data, h.sender, tSelf)
	require.NoError(t, err)
	require.Len(t, got, len(want))
	for i := range want {
		assert.Equal(t, want[i], got[i], "frame %d", i)
	}
	// The decoder is reused: a second batch decodes alone.
	got, err = d.decode(tEncode(want[:1], 8), tSender, tSelf)
	require.NoError(t, err)
	assert.Equal(t, want[:1], got)
}

func TestBatchTablesSendRepeatsOnce(t *testing.T) {
	one := tEncode([]frame{{kind: kindMessage, to: tTo(1 << 40), from: tFrom(1 << 41), body: nil}}, 1)
	two := tEncode([]frame{
		{kind: kindMessage, to: tTo(1 << 40), from: tFrom(1 << 41), body: nil},
		{kind: kindMessage, to: tTo(1 << 40), from: tFrom(1 << 41), body: nil},
	}, 1)
	// The second frame names both PIDs by their one-byte table index.
	assert.Equal(t, 1+1+1+1, len(two)-len(one), "a repeated frame costs kind, two refs and the body tag")
	assert.Greater(t, len(one)-headerLen, 4+10, "the first carries both IDs")

	text := "scheduler: mailbox full"
	b1 := tEncode([]frame{{kind: kindBounce, from: tFrom(1), to: tTo(2), code: 2, text: text}}, 1)
	b2 := tEncode([]frame{{kind: kindBounce, from: tFrom(1), to: tTo(2), code: 2, text: text}, {kind: kindBounce, from: tFrom(1), to: tTo(2), code: 2, text: text}}, 1)
	assert.Equal(t, 1+1+1+1+1+1, len(b2)-len(b1), "a repeated text costs one byte")
}

func TestBatchTableOverflow(t *testing.T) {
	// More distinct IDs than the encoder caches: collisions are sent
	// again, and everything still decodes to the same PIDs.
	var want []frame
	for i := range 3 * idSlots {
		want = append(want, frame{kind: kindMessage, to: tTo(uint64(i%idSlots*idSlots + 1)), from: tFrom(uint64(i + 1)), body: nil})
	}
	var d decoder
	got, err := d.decode(tEncode(want, 1), tSender, tSelf)
	require.NoError(t, err)
	assert.Equal(t, want, got)
}

func TestDecodeRejects(t *testing.T) {
	valid := tEncode(tFrames(), 1)
	hdr := valid[:headerLen]
	frameOf := func(b ...byte) []byte { return append(append([]byte(nil), hdr...), b...) }
	uv := func(v uint64) []byte { return binary.AppendUvarint(nil, v) }
	huge := uv(math.MaxUint64)
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"unknown frame kind", frameOf(99)},
		{"truncated", valid[:len(valid)-1]},
		{"message to the zero PID", frameOf(kindMessage, refZero, refZero, bodyNil)},
		{"ID ref beyond the table", frameOf(kindMessage, refFirstIdx, refZero, bodyNil)},
		{"literal ID 0", frameOf(kindMessage, refNew, 0, refZero, bodyNil)},
		{"bad varint", frameOf(kindMessage, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)},
		{"string longer than the batch", append(frameOf(kindMessage, refNew, 1, refZero, bodyString), huge...)},
		{"payloads count beyond the batch", append(frameOf(kindMessage, refNew, 1, refZero, bodyPayloads), uv(1<<40)...)},
		{"a Go-value payload on the wire", frameOf(kindMessage, refNew, 1, refZero, bodyPayload, byte(payload.FormatGo), 0)},
		{"an unknown payload format", frameOf(kindMessage, refNew, 1, refZero, bodyPayload, 9, 0)},
		{"PID body node out of range", append(append(frameOf(kindMessage, refNew, 1, refZero, bodyPID), uv(1<<32)...), 1)},
		{"unknown body tag", frameOf(kindMessage, refNew, 1, refZero, 77)},
		{"bad await flag", frameOf(kindSpawn, 1, refZero, refZero, 2, 0)},
		{"bounce to the zero PID", frameOf(kindBounce, refNew, 1, refZero, 0, refZero, bodyNil)},
		{"text ref beyond the table", frameOf(kindExited, 1, byte(scheduler.ExitDone), 0, refFirstIdx, bodyNil)},
		{"an unknown exit reason", frameOf(kindExited, 1, 0, 0, refZero, bodyNil)},
		{"monitor of the zero PID", frameOf(kindMonitor, 1, refZero)},
		{"a request answered on a third node", frameOf(kindMessage, refNew, 1, refZero, bodyRequest, 77, 1, 1, bodyNil)},
		{"a reply to another process", frameOf(kindMessage, refNew, 1, refZero, bodyReply, tSelf, 2, 1, 0, 0, bodyNil)},
		{"a request inside a request", frameOf(kindMessage, refNew, 1, refNew, 1, bodyRequest, tSender, 1, 1, bodyRequest, tSender, 1, 1, bodyNil)},
		{"a returned reply", frameOf(kindBounce, refNew, 1, refNew, 1, 1, refZero, bodyReply, tSelf, 1, 1, 0, 0, bodyNil)},
		{"a reply-to with sequence 0", frameOf(kindMessage, refNew, 1, refZero, bodyRequest, tSender, 1, 0, bodyNil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d decoder
			frames, err := d.decode(tc.data, tSender, tSelf)
			assert.ErrorIs(t, err, errMalformed)
			assert.Nil(t, frames, "a bad batch delivers nothing")
		})
	}

	t.Run("headers", func(t *testing.T) {
		_, err := readHeader(valid[:headerLen-1])
		assert.ErrorIs(t, err, errMalformed)
		bad := append([]byte(nil), valid...)
		bad[0] = wireVersion + 1
		_, err = readHeader(bad)
		assert.ErrorIs(t, err, errMalformed)
	})
}

func TestDecodeEveryPrefix(t *testing.T) {
	// A batch cut anywhere decodes to the frames before the cut or fails;
	// it never panics and never invents a frame.
	want := tFrames()
	valid := tEncode(want, 1)
	var d decoder
	for n := headerLen; n < len(valid); n++ {
		got, err := d.decode(valid[:n], tSender, tSelf)
		if err != nil {
			require.ErrorIs(t, err, errMalformed)
			continue
		}
		require.LessOrEqual(t, len(got), len(want))
		for i := range got {
			require.Equal(t, want[i], got[i], "prefix %d, frame %d", n, i)
		}
	}
}

func TestDecodedBodiesAreCapped(t *testing.T) {
	// A received []byte is a view of the batch: appending to it must not
	// overwrite the frame after it.
	data := tEncode([]frame{
		{kind: kindMessage, to: tTo(1), from: tFrom(2), body: []byte("ab")},
		{kind: kindMessage, to: tTo(1), from: tFrom(2), body: "after"},
	}, 1)
	var d decoder
	got, err := d.decode(data, tSender, tSelf)
	require.NoError(t, err)
	b := got[0].body.([]byte)
	_ = append(b, "XXXXXXXX"...)
	assert.Equal(t, "after", got[1].body)
}

func TestControlRoundTrip(t *testing.T) {
	for _, m := range []ctlMsg{
		{typ: ctlHello, sender: 5, run: 9, flags: flagDirect, to: 7, name: "node é"},
		{typ: ctlHello, sender: 5, run: math.MaxUint64, name: "node é"},
		{typ: ctlHeartbeat, sender: 5, run: 9, name: "b"},
		{typ: ctlAck, sender: math.MaxUint32, run: 1, to: math.MaxUint64, name: "b"},
		{typ: ctlBye, sender: 5, run: 9},
		{typ: ctlGrant, sender: 5, run: 9, to: 3, seq: math.MaxUint64},
		{typ: ctlDown, sender: 5, run: 9, to: 3},
		{typ: ctlProbe, sender: 5, run: 9, to: 3},
		{typ: ctlPong, sender: 5, run: 9},
	} {
		got, err := decodeCtl(appendCtl(nil, m))
		require.NoError(t, err, "%+v", m)
		assert.Equal(t, m, got)
	}
	for name, data := range map[string][]byte{
		"empty":          nil,
		"sender 0":       appendCtl(nil, ctlMsg{typ: ctlBye, run: 1}),
		"run 0":          appendCtl(nil, ctlMsg{typ: ctlBye, sender: 1}),
		"unknown type":   appendCtl(nil, ctlMsg{typ: 99, sender: 1, run: 1}),
		"trailing bytes": append(appendCtl(nil, ctlMsg{typ: ctlBye, sender: 1, run: 1}), 0),
		"short header":   appendCtl(nil, ctlMsg{typ: ctlBye, sender: 1, run: 1})[:ctlHeaderLen-1],
		"empty name":     appendCtl(nil, ctlMsg{typ: ctlAck, sender: 1, run: 1}),
		"bad UTF-8":      appendCtl(nil, ctlMsg{typ: ctlAck, sender: 1, run: 1, name: "\xff"}),
		"name too long":  appendCtl(nil, ctlMsg{typ: ctlAck, sender: 1, run: 1, name: string(make([]byte, maxNameLen+1))}),
	} {
		_, err := decodeCtl(data)
		assert.ErrorIs(t, err, errMalformed, name)
		assert.NotErrorIs(t, err, errWireVersion, name)
	}
}

// TestOtherWireVersionsRefused: a control message or batch of another
// wire version, the first release's (whose control header had no runs
// and whose batch header no link key) or a later one, fails to decode
// with an error matching errWireVersion as well as errMalformed, whatever
// follows its first byte, so that it is never read as this version's.
func TestOtherWireVersionsRefused(t *testing.T) {
	hello := appendCtl(nil, ctlMsg{typ: ctlHello, sender: 5, run: 9, name: "b"})
	batch := tEncode(tFrames()[:1], 1)
	v1Hello := []byte{1, ctlHello, 5, 0, 0, 0, 0, 1, 'b'}
	v1Batch := append([]byte{1, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0}, batch[headerLen:]...)
	for _, v := range []byte{0, 1, wireVersion + 1, 255} {
		if v == wireVersion {
			continue
		}
		data := append([]byte{v}, hello[1:]...)
		_, err := decodeCtl(data)
		assert.ErrorIs(t, err, errWireVersion, "control message of version %d", v)
		assert.ErrorIs(t, err, errMalformed, "control message of version %d", v)
		data = append([]byte{v}, batch[1:]...)
		_, err = readHeader(data)
		assert.ErrorIs(t, err, errWireVersion, "batch of version %d", v)
		assert.ErrorIs(t, err, errMalformed, "batch of version %d", v)
	}
	_, err := decodeCtl(v1Hello)
	assert.ErrorIs(t, err, errWireVersion, "a hello of the first release")
	_, err = readHeader(v1Batch)
	assert.ErrorIs(t, err, errWireVersion, "a batch of the first release")
}

func TestWireBody(t *testing.T) {
	type point struct{ X, Y int }
	t.Run("kinds that cross as they are", func(t *testing.T) {
		for _, body := range []any{nil, "s", []byte("b"), []byte(nil), relay.PID{Node: 1, ID: 2},
			payload.Payload{}, payload.Bytes([]byte("x")), payload.RawJSON([]byte("1")),
			payload.Payloads{payload.Bytes(nil)}, payload.Payloads(nil)} {
			got, err := wireBody(body)
			require.NoError(t, err, "%T", body)
			assert.Equal(t, body, got)
		}
	})
	t.Run("a Go value becomes JSON that decodes the same", func(t *testing.T) {
		got, err := wireBody(payload.Of(point{1, 2}))
		require.NoError(t, err)
		p := got.(payload.Payload)
		assert.Equal(t, payload.FormatJSON, p.Format())
		v, err := payload.As[point](p)
		require.NoError(t, err)
		assert.Equal(t, point{1, 2}, v)

		ps, err := wireBody(payload.Payloads{payload.Bytes(nil), payload.Of("s")})
		require.NoError(t, err)
		var s string
		require.NoError(t, ps.(payload.Payloads)[1].Decode(&s))
		assert.Equal(t, "s", s)
	})
	t.Run("requests and replies cross with what they carry", func(t *testing.T) {
		req := scheduler.Request{ReplyTo: scheduler.ReplyTo{PID: tFrom(1), Seq: 2}, Body: payload.Of(point{1, 2})}
		got, err := wireBody(req)
		require.NoError(t, err)
		assert.Equal(t, payload.FormatJSON, got.(scheduler.Request).Body.(payload.Payload).Format())
		_, err = wireBody(scheduler.Reply{Data: 42})
		assert.ErrorIs(t, err, ErrNotEncodable)
		_, err = wireBody(scheduler.Request{Body: scheduler.Request{}})
		assert.ErrorIs(t, err, ErrNotEncodable, "a request inside a request")
	})
	t.Run("other kinds are refused at the sender", func(t *testing.T) {
		for _, body := range []any{42, point{}, &point{}, map[string]int{}, scheduler.Event{}} {
			_, err := wireBody(body)
			assert.ErrorIs(t, err, ErrNotEncodable, "%T", body)
		}
	})
	t.Run("a value JSON cannot encode is refused", func(t *testing.T) {
		_, err := wireBody(payload.Of(make(chan int)))
		assert.ErrorIs(t, err, ErrNotEncodable)
		assert.ErrorIs(t, err, payload.ErrEncode)
		_, err = wireBody(payload.Payloads{payload.Of(1), payload.Of(func() {})})
		assert.ErrorIs(t, err, ErrNotEncodable)
		assert.ErrorIs(t, err, payload.ErrEncode)
	})
	t.Run("sizes are exact", func(t *testing.T) {
		for _, body := range []any{nil, "s", []byte("b"), []byte(nil), relay.PID{Node: 1 << 31, ID: 1 << 60},
			payload.Payload{}, payload.RawJSON(make([]byte, 300)), payload.Payloads{payload.Bytes(nil), {}},
			scheduler.Request{ReplyTo: scheduler.ReplyTo{PID: tFrom(1 << 40), Seq: 300}, Body: "b"},
			scheduler.Reply{To: scheduler.ReplyTo{PID: tTo(1), Seq: 1}, Data: []byte("d"), Err: errors.New("e")}} {
			assert.Equal(t, len(appendBody(nil, body)), bodySize(body), "%T", body)
		}
	})
}

func TestErrorCodesRebuild(t *testing.T) {
	for _, err := range []error{
		scheduler.ErrProcessNotFound, scheduler.ErrMailboxFull, scheduler.ErrDropped,
		ErrNodeDown, ErrBackpressure, ErrUnknownKind,
		errors.Join(scheduler.ErrInit, scheduler.ErrUnknownMethod),
	} {
		got := newRemoteError("b", tFrom(1), errorCode(err), err.Error())
		for _, target := range wireErrors {
			assert.Equal(t, errors.Is(err, target), errors.Is(got, target), "%v matching %v", err, target)
		}
	}
	got := newRemoteError("b", tFrom(1), errorCode(ErrNodeDown), "x")
	assert.ErrorIs(t, got, scheduler.ErrProcessNotFound, "node down is also not found")
	assert.Equal(t, `remote: node "b": x`, got.Error())
	assert.Equal(t, uint64(codeFailed), errorCode(errors.New("other")), "a failure that matches nothing is still one")
	assert.Zero(t, errorCode(nil))
}

// framesEqual compares two decoded frames.
func framesEqual(a, b frame) bool {
	return reflect.DeepEqual(a, b)
}
