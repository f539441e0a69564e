package payload_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/procsched/scheduler/payload"
)

type point struct {
	X, Y int
}

// label implements fmt.Stringer, to decode into an interface type.
type label string

func (l label) String() string { return "label " + string(l) }

type (
	blob     []byte // a named byte slice: []byte is assignable to it
	myString string // a named string kind
)

// upper implements encoding.BinaryUnmarshaler.
type upper struct{ s string }

func (u *upper) UnmarshalBinary(b []byte) error {
	u.s = strings.ToUpper(string(b))
	return nil
}

// refuse implements encoding.BinaryUnmarshaler and always fails.
type refuse struct{}

var errRefused = errors.New("refused")

func (*refuse) UnmarshalBinary([]byte) error { return errRefused }

func TestPayloadSize(t *testing.T) {
	// A format tag padded to a word plus an interface: three words.
	want := 3 * unsafe.Sizeof(uintptr(0))
	assert.Equal(t, want, unsafe.Sizeof(payload.Payload{}))
}

func TestFormatString(t *testing.T) {
	tests := []struct {
		f    payload.Format
		want string
	}{
		{payload.FormatNone, "none"},
		{payload.FormatGo, "go"},
		{payload.FormatBytes, "bytes"},
		{payload.FormatJSON, "json"},
		{payload.Format(7), "Format(7)"},
		{payload.Format(255), "Format(255)"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.f.String())
		})
	}
}

func TestConstructors(t *testing.T) {
	pt := &point{1, 2}
	raw := []byte(`{"a":1}`)
	bs := []byte("abc")
	tests := []struct {
		name       string
		p          payload.Payload
		wantFormat payload.Format
		wantValue  any
	}{
		{"zero", payload.Payload{}, payload.FormatNone, nil},
		{"Of nil", payload.Of(nil), payload.FormatNone, nil},
		{"Of int", payload.Of(42), payload.FormatGo, 42},
		{"Of pointer", payload.Of(pt), payload.FormatGo, pt},
		{"Of typed nil pointer", payload.Of((*point)(nil)), payload.FormatGo, (*point)(nil)},
		{"Of bytes stays go", payload.Of(bs), payload.FormatGo, bs},
		{"Of payload does not nest", payload.Of(payload.Of(42)), payload.FormatGo, 42},
		{"Of zero payload", payload.Of(payload.Payload{}), payload.FormatNone, nil},
		{"Of bytes payload", payload.Of(payload.Bytes(bs)), payload.FormatBytes, bs},
		{"Bytes", payload.Bytes(bs), payload.FormatBytes, bs},
		{"Bytes nil", payload.Bytes(nil), payload.FormatBytes, []byte(nil)},
		{"RawJSON", payload.RawJSON(raw), payload.FormatJSON, raw},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.wantFormat, tt.p.Format())
			assert.Equal(t, tt.wantFormat == payload.FormatNone, tt.p.IsZero())
			assert.Equal(t, tt.wantValue, tt.p.Value())
		})
	}

	t.Run("Of keeps the reference", func(t *testing.T) {
		got, ok := payload.Of(pt).Value().(*point)
		require.True(t, ok)
		assert.Same(t, pt, got)
	})
	t.Run("Bytes does not copy", func(t *testing.T) {
		b := []byte("xyz")
		got := payload.Bytes(b).Value().([]byte)
		assert.Same(t, &b[0], &got[0])
	})
}

func TestJSON(t *testing.T) {
	tests := []struct {
		name    string
		v       any
		want    payload.Payload
		wantErr error
	}{
		{"struct", point{1, 2}, payload.RawJSON([]byte(`{"X":1,"Y":2}`)), nil},
		{"nil is null", nil, payload.RawJSON([]byte(`null`)), nil},
		{"string", "hi", payload.RawJSON([]byte(`"hi"`)), nil},
		{"go payload is marshalled", payload.Of(point{3, 4}), payload.RawJSON([]byte(`{"X":3,"Y":4}`)), nil},
		{"json payload unchanged", payload.RawJSON([]byte(`[1, 2]`)), payload.RawJSON([]byte(`[1, 2]`)), nil},
		{"bytes payload is base64", payload.Bytes([]byte("hi")), payload.RawJSON([]byte(`"aGk="`)), nil},
		{"zero payload stays zero", payload.Payload{}, payload.Payload{}, nil},
		{"channel", make(chan int), payload.Payload{}, payload.ErrEncode},
		{"go payload of a func", payload.Of(func() {}), payload.Payload{}, payload.ErrEncode},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := payload.JSON(tt.v)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				var unsupported *json.UnsupportedTypeError
				assert.ErrorAs(t, err, &unsupported, "the json error stays in the chain")
				assert.True(t, got.IsZero())
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}

	t.Run("encodes at once", func(t *testing.T) {
		m := map[string]int{"a": 1}
		p, err := payload.JSON(m)
		require.NoError(t, err)
		m["a"] = 2
		got, err := payload.As[map[string]int](p)
		require.NoError(t, err)
		assert.Equal(t, map[string]int{"a": 1}, got)
	})
}

// decodeCase is one cell of the Decode matrix: a payload, a fresh target,
// and either the value the target must hold afterwards or the error.
type decodeCase struct {
	name    string
	p       payload.Payload
	target  func() any
	want    any
	wantErr error
}

func newT[T any]() func() any { return func() any { return new(T) } }

func decodeMatrix() []decodeCase {
	pt := &point{1, 2}
	var stringer fmt.Stringer = label("x")
	var err42 = errors.New("42")
	return []decodeCase{
		// FormatGo: assignment only, never conversion.
		{"go int into int", payload.Of(42), newT[int](), 42, nil},
		{"go int into any", payload.Of(42), newT[any](), any(42), nil},
		{"go int into int64", payload.Of(42), newT[int64](), nil, payload.ErrTypeMismatch},
		{"go int into string", payload.Of(42), newT[string](), nil, payload.ErrTypeMismatch},
		{"go int into Stringer", payload.Of(42), newT[fmt.Stringer](), nil, payload.ErrTypeMismatch},
		{"go int into BinaryUnmarshaler", payload.Of(42), newT[upper](), nil, payload.ErrTypeMismatch},
		{"go string into string", payload.Of("hi"), newT[string](), "hi", nil},
		{"go string into bytes", payload.Of("hi"), newT[[]byte](), nil, payload.ErrTypeMismatch},
		{"go string into named string", payload.Of("hi"), newT[myString](), nil, payload.ErrTypeMismatch},
		{"go named string into string", payload.Of(myString("hi")), newT[string](), nil, payload.ErrTypeMismatch},
		{"go bytes into bytes", payload.Of([]byte("hi")), newT[[]byte](), []byte("hi"), nil},
		{"go bytes into named bytes", payload.Of([]byte("hi")), newT[blob](), blob("hi"), nil},
		{"go bytes into string", payload.Of([]byte("hi")), newT[string](), nil, payload.ErrTypeMismatch},
		{"go bytes into map", payload.Of([]byte(`{"a":1}`)), newT[map[string]int](), nil, payload.ErrTypeMismatch},
		{"go raw message into int", payload.Of(json.RawMessage(`1`)), newT[int](), nil, payload.ErrTypeMismatch},
		{"go raw message into raw message", payload.Of(json.RawMessage(`1`)), newT[json.RawMessage](), json.RawMessage(`1`), nil},
		{"go struct into struct", payload.Of(point{1, 2}), newT[point](), point{1, 2}, nil},
		{"go struct into pointer", payload.Of(point{1, 2}), newT[*point](), nil, payload.ErrTypeMismatch},
		{"go pointer into pointer", payload.Of(pt), newT[*point](), pt, nil},
		{"go pointer into struct", payload.Of(pt), newT[point](), nil, payload.ErrTypeMismatch},
		{"go Stringer into Stringer", payload.Of(stringer), newT[fmt.Stringer](), stringer, nil},
		{"go label into Stringer", payload.Of(label("y")), newT[fmt.Stringer](), fmt.Stringer(label("y")), nil},
		{"go error into error", payload.Of(err42), newT[error](), err42, nil},
		{"go payloads into payloads", payload.Of(payload.Values(1)), newT[payload.Payloads](), payload.Values(1), nil},

		// FormatBytes: bytes, strings, binary unmarshalers.
		{"bytes into bytes", payload.Bytes([]byte("hi")), newT[[]byte](), []byte("hi"), nil},
		{"bytes into named bytes", payload.Bytes([]byte("hi")), newT[blob](), blob("hi"), nil},
		{"bytes into raw message", payload.Bytes([]byte("hi")), newT[json.RawMessage](), json.RawMessage("hi"), nil},
		{"bytes into string", payload.Bytes([]byte("hi")), newT[string](), "hi", nil},
		{"bytes into named string", payload.Bytes([]byte("hi")), newT[myString](), myString("hi"), nil},
		{"bytes into any", payload.Bytes([]byte("hi")), newT[any](), any([]byte("hi")), nil},
		{"bytes into BinaryUnmarshaler", payload.Bytes([]byte("hi")), newT[upper](), upper{"HI"}, nil},
		{"bytes into failing BinaryUnmarshaler", payload.Bytes([]byte("hi")), newT[refuse](), nil, payload.ErrDecode},
		// A nil pointer to an unmarshaler gets a new value, as encoding/json
		// gives one, so that As[*T] works where *T is the unmarshaler.
		{"bytes into pointer to BinaryUnmarshaler", payload.Bytes([]byte("hi")), newT[*upper](), &upper{"HI"}, nil},
		{"bytes into pointer to failing BinaryUnmarshaler", payload.Bytes([]byte("hi")), newT[*refuse](), nil, payload.ErrDecode},
		{"bytes into pointer to pointer", payload.Bytes([]byte("hi")), newT[**upper](), nil, payload.ErrTypeMismatch},
		{"bytes into int", payload.Bytes([]byte("hi")), newT[int](), nil, payload.ErrTypeMismatch},
		{"bytes into struct", payload.Bytes([]byte(`{"X":1}`)), newT[point](), nil, payload.ErrTypeMismatch},
		{"bytes into Stringer", payload.Bytes([]byte("hi")), newT[fmt.Stringer](), nil, payload.ErrTypeMismatch},
		{"nil bytes into bytes", payload.Bytes(nil), newT[[]byte](), []byte(nil), nil},
		{"nil bytes into string", payload.Bytes(nil), newT[string](), "", nil},

		// FormatJSON: encoding/json rules.
		{"json object into struct", payload.RawJSON([]byte(`{"X":1,"Y":2}`)), newT[point](), point{1, 2}, nil},
		{"json object into pointer", payload.RawJSON([]byte(`{"X":1,"Y":2}`)), newT[*point](), &point{1, 2}, nil},
		{"json object into map", payload.RawJSON([]byte(`{"X":1}`)), newT[map[string]int](), map[string]int{"X": 1}, nil},
		{"json object into any", payload.RawJSON([]byte(`{"X":1}`)), newT[any](), any(map[string]any{"X": 1.0}), nil},
		{"json number into int", payload.RawJSON([]byte(`42`)), newT[int](), 42, nil},
		{"json string into string", payload.RawJSON([]byte(`"hi"`)), newT[string](), "hi", nil},
		{"json base64 into bytes", payload.RawJSON([]byte(`"aGk="`)), newT[[]byte](), []byte("hi"), nil},
		{"json into raw message", payload.RawJSON([]byte(`[1, 2]`)), newT[json.RawMessage](), json.RawMessage(`[1, 2]`), nil},
		{"json object into string", payload.RawJSON([]byte(`{"X":1}`)), newT[string](), nil, payload.ErrDecode},
		{"json string into int", payload.RawJSON([]byte(`"1"`)), newT[int](), nil, payload.ErrDecode},
		{"json malformed", payload.RawJSON([]byte(`{"X":`)), newT[any](), nil, payload.ErrDecode},
		{"json empty", payload.RawJSON(nil), newT[any](), nil, payload.ErrDecode},
		{"json trailing text", payload.RawJSON([]byte(`1 2`)), newT[int](), nil, payload.ErrDecode},

		// FormatNone.
		{"none into int", payload.Payload{}, newT[int](), nil, payload.ErrNoValue},
		{"none into any", payload.Payload{}, newT[any](), nil, payload.ErrNoValue},
		{"none into bytes", payload.Payload{}, newT[[]byte](), nil, payload.ErrNoValue},
	}
}

func TestDecode(t *testing.T) {
	for _, tt := range decodeMatrix() {
		t.Run(tt.name, func(t *testing.T) {
			dst := tt.target()
			err := tt.p.Decode(dst)
			got := reflect.ValueOf(dst).Elem().Interface()
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				assert.True(t, strings.HasPrefix(err.Error(), "payload: "), "error %q lacks the package prefix", err)
				if !errors.Is(tt.wantErr, payload.ErrDecode) {
					assert.True(t, reflect.ValueOf(dst).Elem().IsZero(), "target written on error: %#v", got)
				}
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestDecodeErrorDetails(t *testing.T) {
	t.Run("mismatch names both types", func(t *testing.T) {
		var s string
		err := payload.Of(42).Decode(&s)
		require.ErrorIs(t, err, payload.ErrTypeMismatch)
		assert.Contains(t, err.Error(), "int")
		assert.Contains(t, err.Error(), "string")
	})
	t.Run("json syntax error stays in the chain", func(t *testing.T) {
		var v any
		err := payload.RawJSON([]byte(`{`)).Decode(&v)
		require.ErrorIs(t, err, payload.ErrDecode)
		var syntax *json.SyntaxError
		assert.ErrorAs(t, err, &syntax)
	})
	t.Run("json type error stays in the chain", func(t *testing.T) {
		var n int
		err := payload.RawJSON([]byte(`"x"`)).Decode(&n)
		require.ErrorIs(t, err, payload.ErrDecode)
		var typeErr *json.UnmarshalTypeError
		assert.ErrorAs(t, err, &typeErr)
	})
	t.Run("unmarshaler error stays in the chain", func(t *testing.T) {
		err := payload.Bytes([]byte("x")).Decode(&refuse{})
		require.ErrorIs(t, err, payload.ErrDecode)
		assert.ErrorIs(t, err, errRefused)
	})
}

func TestDecodeInvalidTarget(t *testing.T) {
	payloads := []payload.Payload{
		{},
		payload.Of(42),
		payload.Bytes([]byte("hi")),
		payload.RawJSON([]byte(`42`)),
	}
	targets := []struct {
		name string
		dst  any
	}{
		{"nil", nil},
		{"non-pointer", 42},
		{"struct value", point{}},
		{"nil pointer", (*int)(nil)},
		{"nil any pointer", (*any)(nil)},
		{"nil unmarshaler", (*upper)(nil)},
	}
	for _, p := range payloads {
		for _, tt := range targets {
			t.Run(p.Format().String()+" into "+tt.name, func(t *testing.T) {
				err := p.Decode(tt.dst)
				assert.ErrorIs(t, err, payload.ErrInvalidTarget)
			})
		}
	}
}

func TestDecodeSharesReferences(t *testing.T) {
	t.Run("go pointer", func(t *testing.T) {
		pt := &point{1, 2}
		var got *point
		require.NoError(t, payload.Of(pt).Decode(&got))
		assert.Same(t, pt, got)
	})
	t.Run("bytes", func(t *testing.T) {
		b := []byte("abc")
		var got []byte
		require.NoError(t, payload.Bytes(b).Decode(&got))
		assert.Same(t, &b[0], &got[0])
	})
}

func TestAs(t *testing.T) {
	t.Run("go value", func(t *testing.T) {
		got, err := payload.As[int](payload.Of(42))
		require.NoError(t, err)
		assert.Equal(t, 42, got)
	})
	t.Run("go value into interface", func(t *testing.T) {
		got, err := payload.As[fmt.Stringer](payload.Of(label("a")))
		require.NoError(t, err)
		assert.Equal(t, "label a", got.String())
	})
	t.Run("go value assignable but not identical", func(t *testing.T) {
		got, err := payload.As[json.RawMessage](payload.Of([]byte("1")))
		require.NoError(t, err)
		assert.Equal(t, json.RawMessage("1"), got)
	})
	t.Run("go mismatch gives zero", func(t *testing.T) {
		got, err := payload.As[int](payload.Of("x"))
		require.ErrorIs(t, err, payload.ErrTypeMismatch)
		assert.Zero(t, got)
	})
	t.Run("bytes", func(t *testing.T) {
		got, err := payload.As[string](payload.Bytes([]byte("hi")))
		require.NoError(t, err)
		assert.Equal(t, "hi", got)
	})
	t.Run("bytes as any", func(t *testing.T) {
		got, err := payload.As[any](payload.Bytes([]byte("hi")))
		require.NoError(t, err)
		assert.Equal(t, []byte("hi"), got)
	})
	t.Run("json bytes are text, not the value", func(t *testing.T) {
		got, err := payload.As[[]byte](payload.RawJSON([]byte(`"aGk="`)))
		require.NoError(t, err)
		assert.Equal(t, []byte("hi"), got)
	})
	t.Run("bytes as a pointer to an unmarshaler", func(t *testing.T) {
		got, err := payload.As[*upper](payload.Bytes([]byte("hi")))
		require.NoError(t, err)
		assert.Equal(t, &upper{"HI"}, got)
	})
	t.Run("bytes as a pointer to a failing unmarshaler gives nil", func(t *testing.T) {
		got, err := payload.As[*refuse](payload.Bytes([]byte("hi")))
		require.ErrorIs(t, err, payload.ErrDecode)
		require.ErrorIs(t, err, errRefused)
		assert.Nil(t, got)
	})
	t.Run("json", func(t *testing.T) {
		got, err := payload.As[point](payload.RawJSON([]byte(`{"X":5}`)))
		require.NoError(t, err)
		assert.Equal(t, point{X: 5}, got)
	})
	t.Run("json error gives zero", func(t *testing.T) {
		got, err := payload.As[point](payload.RawJSON([]byte(`{"X":"a"}`)))
		require.ErrorIs(t, err, payload.ErrDecode)
		assert.Zero(t, got)
	})
	t.Run("none", func(t *testing.T) {
		got, err := payload.As[*point](payload.Payload{})
		require.ErrorIs(t, err, payload.ErrNoValue)
		assert.Nil(t, got)
	})
}

// Sinks keep the compiler from discarding the work measured below.
var (
	sinkPayload payload.Payload
	sinkPoint   *point
	sinkBytes   []byte
	sinkFormat  payload.Format
	sinkErr     error
)

func TestZeroAllocations(t *testing.T) {
	pt := &point{1, 2}
	p := payload.Of(pt)
	b := payload.Bytes([]byte("abc"))
	ps := payload.Values(1, pt)
	tests := []struct {
		name string
		f    func()
	}{
		{"Of pointer", func() { sinkPayload = payload.Of(pt) }},
		{"As pointer", func() { sinkPoint, sinkErr = payload.As[*point](p) }},
		{"As bytes", func() { sinkBytes, sinkErr = payload.As[[]byte](b) }},
		{"Format", func() { sinkFormat = p.Format() }},
		{"At in range", func() { sinkPayload = ps.At(1) }},
		{"At out of range", func() { sinkPayload = ps.At(5) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Zero(t, testing.AllocsPerRun(100, tt.f))
		})
	}
}

func TestEncodeFromWire(t *testing.T) {
	tests := []struct {
		name       string
		p          payload.Payload
		wantFormat payload.Format
		wantBytes  []byte
	}{
		{"none", payload.Payload{}, payload.FormatNone, nil},
		{"bytes", payload.Bytes([]byte{0, 1, 0xff}), payload.FormatBytes, []byte{0, 1, 0xff}},
		{"empty bytes", payload.Bytes(nil), payload.FormatBytes, nil},
		{"json", payload.RawJSON([]byte(` {"a": 1} `)), payload.FormatJSON, []byte(` {"a": 1} `)},
		{"go struct", payload.Of(point{1, 2}), payload.FormatJSON, []byte(`{"X":1,"Y":2}`)},
		{"go pointer", payload.Of(&point{3, 4}), payload.FormatJSON, []byte(`{"X":3,"Y":4}`)},
		{"go bytes are base64", payload.Of([]byte("hi")), payload.FormatJSON, []byte(`"aGk="`)},
		{"go typed nil", payload.Of((*point)(nil)), payload.FormatJSON, []byte(`null`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, b, err := tt.p.Encode()
			require.NoError(t, err)
			assert.Equal(t, tt.wantFormat, f)
			assert.Equal(t, tt.wantBytes, b)

			back, err := payload.FromWire(f, b)
			require.NoError(t, err)
			assert.Equal(t, f, back.Format())
			f2, b2, err := back.Encode()
			require.NoError(t, err)
			assert.Equal(t, f, f2, "a second round trip changes nothing")
			assert.Equal(t, b, b2)
		})
	}

	t.Run("go value decodes the same after the wire", func(t *testing.T) {
		f, b, err := payload.Of(point{7, 8}).Encode()
		require.NoError(t, err)
		back, err := payload.FromWire(f, b)
		require.NoError(t, err)
		got, err := payload.As[point](back)
		require.NoError(t, err)
		assert.Equal(t, point{7, 8}, got)
	})
	t.Run("unencodable go value", func(t *testing.T) {
		f, b, err := payload.Of(make(chan int)).Encode()
		require.ErrorIs(t, err, payload.ErrEncode)
		var unsupported *json.UnsupportedTypeError
		assert.ErrorAs(t, err, &unsupported)
		assert.Equal(t, payload.FormatNone, f)
		assert.Nil(t, b)
	})
}

// A Payload inside a Go value encodes as what it holds, as JSON gives it,
// and decodes back as the JSON payload of its text: nothing in it is lost
// on the way to the wire and back.
func TestPayloadInsideGoValue(t *testing.T) {
	type envelope struct {
		P  payload.Payload
		Ps payload.Payloads
	}
	in := envelope{
		P:  payload.Of(point{1, 2}),
		Ps: payload.Payloads{payload.Of(3), payload.Bytes([]byte("hi")), payload.RawJSON([]byte(`{"a":1}`)), {}},
	}
	f, b, err := payload.Of(in).Encode()
	require.NoError(t, err)
	assert.Equal(t, payload.FormatJSON, f)
	assert.JSONEq(t, `{"P":{"X":1,"Y":2},"Ps":[3,"aGk=",{"a":1},null]}`, string(b))

	for _, v := range []payload.Payload{in.P, in.Ps[0], in.Ps[1], in.Ps[2], in.Ps[3]} {
		want, err := payload.JSON(v)
		require.NoError(t, err)
		got, err := json.Marshal(v)
		require.NoError(t, err)
		if want.IsZero() {
			assert.Equal(t, "null", string(got), "%v", v)
			continue
		}
		assert.Equal(t, want.Value(), got, "as JSON gives %v", v)
	}

	back, err := payload.FromWire(f, b)
	require.NoError(t, err)
	var out envelope
	require.NoError(t, back.Decode(&out))
	assert.Equal(t, payload.FormatJSON, out.P.Format())
	pt, err := payload.As[point](out.P)
	require.NoError(t, err)
	assert.Equal(t, point{1, 2}, pt)
	var (
		n  int
		bs []byte
		m  map[string]int
	)
	require.NoError(t, out.Ps[:3].Decode(&n, &bs, &m))
	assert.Equal(t, 3, n)
	assert.Equal(t, []byte("hi"), bs)
	assert.Equal(t, map[string]int{"a": 1}, m)
	require.Len(t, out.Ps, 4)
	assert.True(t, out.Ps[3].IsZero(), "null decodes as the zero Payload")

	t.Run("decoded text is copied", func(t *testing.T) {
		text := []byte(`{"P":[1]}`)
		var e envelope
		require.NoError(t, json.Unmarshal(text, &e))
		copy(text, `{"P":[9]}`)
		got, err := payload.As[[]int](e.P)
		require.NoError(t, err)
		assert.Equal(t, []int{1}, got)
	})
	t.Run("unencodable value inside", func(t *testing.T) {
		_, _, err := payload.Of(envelope{P: payload.Of(make(chan int))}).Encode()
		require.ErrorIs(t, err, payload.ErrEncode)
		var unsupported *json.UnsupportedTypeError
		assert.ErrorAs(t, err, &unsupported)
	})
	t.Run("malformed JSON inside", func(t *testing.T) {
		_, _, err := payload.Of(envelope{P: payload.RawJSON([]byte(`{"a":`))}).Encode()
		require.ErrorIs(t, err, payload.ErrEncode)
	})
}

func TestFromWireInvalid(t *testing.T) {
	tests := []struct {
		name string
		f    payload.Format
		b    []byte
	}{
		{"go", payload.FormatGo, []byte(`1`)},
		{"go empty", payload.FormatGo, nil},
		{"unknown", payload.Format(4), []byte(`1`)},
		{"max", payload.Format(255), nil},
		{"none with content", payload.FormatNone, []byte{0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := payload.FromWire(tt.f, tt.b)
			require.ErrorIs(t, err, payload.ErrInvalidFormat)
			assert.True(t, p.IsZero())
		})
	}
	t.Run("none with empty content", func(t *testing.T) {
		p, err := payload.FromWire(payload.FormatNone, []byte{})
		require.NoError(t, err)
		assert.True(t, p.IsZero())
	})
}

func TestPayloadString(t *testing.T) {
	long := strings.Repeat("x", 100)
	tests := []struct {
		name string
		p    payload.Payload
		want string
	}{
		{"none", payload.Payload{}, "none"},
		{"go int", payload.Of(42), "go:int(42)"},
		{"go string", payload.Of("hi"), "go:string(hi)"},
		{"go struct", payload.Of(point{1, 2}), "go:payload_test.point({1 2})"},
		{"go nil pointer", payload.Of((*point)(nil)), "go:*payload_test.point(<nil>)"},
		{"go long", payload.Of(long), "go:string(" + long[:64] + "…)"},
		{"bytes", payload.Bytes([]byte("hello, world")), "bytes[12]"},
		{"empty bytes", payload.Bytes(nil), "bytes[0]"},
		{"json", payload.RawJSON([]byte(`{"a":1}`)), `json:{"a":1}`},
		{"json long", payload.RawJSON([]byte(`"` + long + `"`)), `json:"` + long[:63] + "…"},
		{"json exactly 64", payload.RawJSON([]byte(long[:64])), "json:" + long[:64]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.p.String())
		})
	}

	t.Run("cut at a rune boundary", func(t *testing.T) {
		// 3-byte runes: byte 64 falls inside the 22nd rune.
		s := payload.RawJSON([]byte(strings.Repeat("€", 40))).String()
		assert.True(t, utf8.ValidString(s), "invalid UTF-8: %q", s)
		assert.Equal(t, "json:"+strings.Repeat("€", 21)+"…", s)
	})
}

func TestPayloads(t *testing.T) {
	t.Run("Values", func(t *testing.T) {
		ps := payload.Values(1, "a", nil, payload.Bytes([]byte("b")))
		require.Len(t, ps, 4)
		assert.Equal(t, payload.Of(1), ps[0])
		assert.Equal(t, payload.Of("a"), ps[1])
		assert.True(t, ps[2].IsZero())
		assert.Equal(t, payload.FormatBytes, ps[3].Format())
		assert.Nil(t, payload.Values())
	})
	t.Run("At", func(t *testing.T) {
		ps := payload.Values(10, 20)
		tests := []struct {
			i    int
			want payload.Payload
		}{
			{0, payload.Of(10)},
			{1, payload.Of(20)},
			{2, payload.Payload{}},
			{-1, payload.Payload{}},
			{int(^uint(0) >> 1), payload.Payload{}},
		}
		for _, tt := range tests {
			assert.Equal(t, tt.want, ps.At(tt.i), "At(%d)", tt.i)
		}
		assert.True(t, payload.Payloads(nil).At(0).IsZero())
	})
	t.Run("String", func(t *testing.T) {
		assert.Equal(t, "[]", payload.Payloads(nil).String())
		assert.Equal(t, `[go:int(1), none, json:true]`,
			payload.Payloads{payload.Of(1), {}, payload.RawJSON([]byte("true"))}.String())
	})
}

func TestPayloadsDecode(t *testing.T) {
	ps := payload.Payloads{payload.Of(1), payload.RawJSON([]byte(`"two"`)), payload.Bytes([]byte("3"))}

	t.Run("all", func(t *testing.T) {
		var (
			a int
			b string
			c []byte
		)
		require.NoError(t, ps.Decode(&a, &b, &c))
		assert.Equal(t, 1, a)
		assert.Equal(t, "two", b)
		assert.Equal(t, []byte("3"), c)
	})
	t.Run("empty", func(t *testing.T) {
		assert.NoError(t, payload.Payloads(nil).Decode())
	})

	arity := []struct {
		name string
		dsts []any
		want string
	}{
		{"too few", []any{new(int)}, "3 payloads, 1 targets"},
		{"too many", []any{new(int), new(string), new([]byte), new(int)}, "3 payloads, 4 targets"},
		{"none", nil, "3 payloads, 0 targets"},
	}
	for _, tt := range arity {
		t.Run(tt.name, func(t *testing.T) {
			err := ps.Decode(tt.dsts...)
			require.ErrorIs(t, err, payload.ErrArity)
			assert.Contains(t, err.Error(), tt.want)
			for i, dst := range tt.dsts {
				assert.True(t, reflect.ValueOf(dst).Elem().IsZero(), "target %d written on a count mismatch", i)
			}
		})
	}

	// JSON of another shape than its target shows only by decoding: the
	// targets before the failing element hold their values; the failing one
	// and those after it are not written.
	t.Run("stops at the first failure", func(t *testing.T) {
		var (
			a int
			b int
			c []byte
		)
		err := ps.Decode(&a, &b, &c)
		require.ErrorIs(t, err, payload.ErrDecode)
		assert.Equal(t, 1, a)
		assert.Zero(t, b)
		assert.Nil(t, c)
	})

	elements := []struct {
		name    string
		dsts    []any
		wantErr error
		wantPre string
	}{
		{"mismatch at 1", []any{new(int), new(int), new([]byte)}, payload.ErrDecode, "payload 1: "},
		{"mismatch at 2", []any{new(int), new(string), new(int)}, payload.ErrTypeMismatch, "payload 2: "},
		{"invalid target at 0", []any{nil, new(string), new([]byte)}, payload.ErrInvalidTarget, "payload 0: "},
	}
	for _, tt := range elements {
		t.Run(tt.name, func(t *testing.T) {
			err := ps.Decode(tt.dsts...)
			require.ErrorIs(t, err, tt.wantErr)
			assert.True(t, strings.HasPrefix(err.Error(), tt.wantPre), "error %q, want prefix %q", err, tt.wantPre)
		})
	}
}

func FuzzJSONRoundTrip(f *testing.F) {
	for _, seed := range []string{
		`null`, `true`, `0`, `-0`, `1e308`, `1.5e-300`, `"a\u00e9\ud83d\ude00"`, `"\ud800"`,
		`[]`, `{}`, `[1,"2",[3],{"4":null}]`, `{"a":{"b":[{"c":1}]},"a":2}`,
		"\"\xff\"", `{`, ``, ` 1 `,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var first any
		if err := payload.RawJSON(data).Decode(&first); err != nil {
			require.ErrorIs(t, err, payload.ErrDecode)
			return
		}
		p, err := payload.JSON(first)
		require.NoError(t, err)

		// Through the wire form as well, as a transport would.
		format, wire, err := p.Encode()
		require.NoError(t, err)
		back, err := payload.FromWire(format, wire)
		require.NoError(t, err)

		var second any
		require.NoError(t, back.Decode(&second))
		require.Equal(t, first, second)
	})
}

func FuzzFromWire(f *testing.F) {
	f.Add(uint8(payload.FormatNone), []byte(nil))
	f.Add(uint8(payload.FormatGo), []byte(`1`))
	f.Add(uint8(payload.FormatBytes), []byte("abc"))
	f.Add(uint8(payload.FormatJSON), []byte(`{"X":1,"Y":2}`))
	f.Add(uint8(payload.FormatJSON), []byte(`{"X":`))
	f.Add(uint8(200), []byte{0xff})
	f.Fuzz(func(t *testing.T, format uint8, data []byte) {
		p, err := payload.FromWire(payload.Format(format), data)
		if err != nil {
			require.ErrorIs(t, err, payload.ErrInvalidFormat)
			require.True(t, p.IsZero())
			return
		}
		require.Equal(t, payload.Format(format), p.Format())

		// Whatever arrived must be safe to look at and decode.
		_ = p.String()
		_ = payload.Payloads{p, p}.String()
		var (
			v  any
			s  string
			pt point
			u  upper
		)
		_ = p.Decode(&v)
		_ = p.Decode(&s)
		_ = p.Decode(&pt)
		_ = p.Decode(&u)
		_, _ = payload.As[[]byte](p)
		_, _ = payload.As[map[string]any](p)

		gotFormat, wire, err := p.Encode()
		require.NoError(t, err)
		require.Equal(t, p.Format(), gotFormat)
		require.Equal(t, len(data), len(wire))
		if len(data) > 0 {
			require.Same(t, &data[0], &wire[0], "content is shared, not copied")
		}
	})
}

func BenchmarkOf(b *testing.B) {
	pt := &point{1, 2}
	b.ReportAllocs()
	for b.Loop() {
		sinkPayload = payload.Of(pt)
	}
}

func BenchmarkAs(b *testing.B) {
	b.Run("go pointer", func(b *testing.B) {
		p := payload.Of(&point{1, 2})
		b.ReportAllocs()
		for b.Loop() {
			sinkPoint, sinkErr = payload.As[*point](p)
		}
	})
	b.Run("json struct", func(b *testing.B) {
		p := payload.RawJSON([]byte(`{"X":1,"Y":2}`))
		b.ReportAllocs()
		for b.Loop() {
			var pt point
			pt, sinkErr = payload.As[point](p)
			sinkPoint = &pt
		}
	})
}

func BenchmarkDecode(b *testing.B) {
	p := payload.Of(point{1, 2})
	b.ReportAllocs()
	for b.Loop() {
		var pt point
		sinkErr = p.Decode(&pt)
	}
}

// TestDecodeBytesIntoASetPointer: a pointer to a non-nil pointer to an
// unmarshaler decodes into the value it points to, as encoding/json
// does; when UnmarshalBinary fails the pointer is left as it was.
func TestDecodeBytesIntoASetPointer(t *testing.T) {
	u := &upper{"old"}
	dst := u
	require.NoError(t, payload.Bytes([]byte("new")).Decode(&dst))
	assert.Same(t, u, dst)
	assert.Equal(t, "NEW", u.s)

	r := &refuse{}
	rdst := r
	require.ErrorIs(t, payload.Bytes([]byte("x")).Decode(&rdst), payload.ErrDecode)
	assert.Same(t, r, rdst)
	var nilDst *refuse
	require.ErrorIs(t, payload.Bytes([]byte("x")).Decode(&nilDst), payload.ErrDecode)
	assert.Nil(t, nilDst, "a failed decode set the pointer")
}

// Empty bytes are a value, not the absence of one: Bytes(nil) and
// Bytes([]byte{}) become the empty JSON string, as a payload of its own and
// inside a Go value, and come back as empty bytes, never as the zero
// Payload.
func TestEmptyBytesStayAValue(t *testing.T) {
	type envelope struct{ P payload.Payload }
	for _, b := range [][]byte{nil, {}} {
		p := payload.Bytes(b)
		j, err := payload.JSON(p)
		require.NoError(t, err)
		assert.Equal(t, []byte(`""`), j.Value(), "JSON of Bytes(%#v)", b)

		f, wire, err := payload.Of(envelope{P: p}).Encode()
		require.NoError(t, err)
		assert.Equal(t, `{"P":""}`, string(wire))
		back, err := payload.FromWire(f, wire)
		require.NoError(t, err)
		var out envelope
		require.NoError(t, back.Decode(&out))
		require.False(t, out.P.IsZero(), "empty bytes came back as no value")
		got, err := payload.As[[]byte](out.P)
		require.NoError(t, err)
		assert.Empty(t, got)
	}
}

// Payloads.Decode finds every failure it can without decoding content
// before it writes any target: a bad target, a missing value, a type that
// cannot hold the value or malformed JSON anywhere in the list leaves every
// target as it was, and the error names the element's index.
func TestPayloadsDecodeChecksBeforeWriting(t *testing.T) {
	ps := payload.Payloads{payload.Of(1), payload.Bytes([]byte("b")), payload.RawJSON([]byte(`"c"`))}
	tests := []struct {
		name    string
		ps      payload.Payloads
		last    any
		wantErr error
		wantPre string
	}{
		{"nil target", ps, nil, payload.ErrInvalidTarget, "payload 2: "},
		{"non-pointer target", ps, "x", payload.ErrInvalidTarget, "payload 2: "},
		{"nil pointer target", ps, (*string)(nil), payload.ErrInvalidTarget, "payload 2: "},
		{"no value", payload.Payloads{ps[0], ps[1], {}}, new(string), payload.ErrNoValue, "payload 2: "},
		{"go type mismatch", payload.Payloads{ps[0], ps[1], payload.Of(3)}, new(string), payload.ErrTypeMismatch, "payload 2: "},
		{"bytes type mismatch", payload.Payloads{ps[0], ps[1], ps[1]}, new(int), payload.ErrTypeMismatch, "payload 2: "},
		{"malformed json", payload.Payloads{ps[0], ps[1], payload.RawJSON([]byte(`"c`))}, new(string), payload.ErrDecode, "payload 2: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := 7, "keep"
			err := tt.ps.Decode(&a, &b, tt.last)
			require.ErrorIs(t, err, tt.wantErr)
			assert.True(t, strings.HasPrefix(err.Error(), tt.wantPre), "error %q, want prefix %q", err, tt.wantPre)
			assert.Equal(t, 7, a, "target 0 written before a failure found without decoding")
			assert.Equal(t, "keep", b, "target 1 written before a failure found without decoding")
		})
	}
	t.Run("malformed json keeps its syntax error", func(t *testing.T) {
		var s string
		err := payload.Payloads{payload.RawJSON([]byte(`{`))}.Decode(&s)
		var syntax *json.SyntaxError
		assert.ErrorAs(t, err, &syntax)
	})
}

// MarshalJSON of JSON text returns the payload's own bytes, as Encode
// does: encoding/json copies them, and a direct caller must not modify them.
func TestMarshalJSONSharesText(t *testing.T) {
	raw := []byte(`{"a":1}`)
	got, err := payload.RawJSON(raw).MarshalJSON()
	require.NoError(t, err)
	assert.Same(t, &raw[0], &got[0])
}

// JSON null read into a Payload field leaves the field as it was, so a
// payload of the JSON text null inside a Go value comes back, like the zero
// Payload, as no value.
func TestUnmarshalJSONNull(t *testing.T) {
	type envelope struct{ P payload.Payload }
	keep := payload.Of(5)
	e := envelope{P: keep}
	require.NoError(t, json.Unmarshal([]byte(`{"P":null}`), &e))
	assert.Equal(t, keep, e.P, "null changed the field")

	null, err := payload.JSON(nil)
	require.NoError(t, err)
	for _, p := range []payload.Payload{null, payload.Of((*point)(nil))} {
		b, err := json.Marshal(envelope{P: p})
		require.NoError(t, err)
		var out envelope
		require.NoError(t, json.Unmarshal(b, &out))
		assert.True(t, out.P.IsZero(), "%v came back as %v", p, out.P)
	}
}

// JSON of another shape than the target fails with ErrDecode after
// encoding/json has written what fitted, as encoding/json.Unmarshal does.
func TestDecodeJSONOfAnotherShapeWritesWhatFits(t *testing.T) {
	pt := point{X: 7, Y: 7}
	err := payload.RawJSON([]byte(`{"X":1,"Y":"a"}`)).Decode(&pt)
	require.ErrorIs(t, err, payload.ErrDecode)
	assert.Equal(t, point{X: 1, Y: 7}, pt)
}

var (
	sinkStringer fmt.Stringer
	sinkAny      any
	sinkInt      int
	sinkStruct   point
)

// As is a type assertion, with no allocation, for a Go value of type T or
// one implementing an interface T, and for bytes read as []byte or any; Of
// allocates nothing beyond the conversion of its argument to any.
func TestAsFastPathAllocations(t *testing.T) {
	pt := &point{1, 2}
	var boxed any = point{3, 4}
	var boxedInt any = 42
	tests := []struct {
		name string
		f    func()
	}{
		{"Of of an any", func() { sinkPayload = payload.Of(boxed) }},
		{"go int", func() { sinkInt, sinkErr = payload.As[int](payload.Of(boxedInt)) }},
		{"go struct", func() { sinkStruct, sinkErr = payload.As[point](payload.Of(boxed)) }},
		{"go value as an interface it implements", func() {
			sinkStringer, sinkErr = payload.As[fmt.Stringer](payload.Of(labelBoxed))
		}},
		{"go pointer as any", func() { sinkAny, sinkErr = payload.As[any](payload.Of(pt)) }},
		{"bytes as any", func() { sinkAny, sinkErr = payload.As[any](bytesPayload) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Zero(t, testing.AllocsPerRun(100, tt.f))
		})
	}
	// The same calls give the values, so the measured paths are the ones
	// that succeed.
	got, err := payload.As[fmt.Stringer](payload.Of(labelBoxed))
	require.NoError(t, err)
	assert.Equal(t, "label l", got.String())
	s, err := payload.As[point](payload.Of(boxed))
	require.NoError(t, err)
	assert.Equal(t, point{3, 4}, s)
}

var (
	labelBoxed   any = label("l")
	bytesPayload     = payload.Bytes([]byte("abc"))
)

// As with interface and pointer types, for each format, follows Decode.
func TestAsInterfaceAndPointerTypes(t *testing.T) {
	pt := &point{1, 2}
	t.Run("go", func(t *testing.T) {
		s, err := payload.As[fmt.Stringer](payload.Of(pt))
		require.ErrorIs(t, err, payload.ErrTypeMismatch, "*point is no Stringer")
		assert.Nil(t, s)
		e, err := payload.As[error](payload.Of(42))
		require.ErrorIs(t, err, payload.ErrTypeMismatch)
		assert.Nil(t, e)
		pp, err := payload.As[**point](payload.Of(pt))
		require.ErrorIs(t, err, payload.ErrTypeMismatch)
		assert.Nil(t, pp)
		var typedNil *point
		got, err := payload.As[*point](payload.Of(typedNil))
		require.NoError(t, err, "a typed nil pointer is a value")
		assert.Nil(t, got)
	})
	t.Run("bytes", func(t *testing.T) {
		s, err := payload.As[fmt.Stringer](payload.Bytes([]byte("x")))
		require.ErrorIs(t, err, payload.ErrTypeMismatch)
		assert.Nil(t, s)
		p, err := payload.As[*point](payload.Bytes([]byte(`{"X":1}`)))
		require.ErrorIs(t, err, payload.ErrTypeMismatch, "bytes are not JSON")
		assert.Nil(t, p)
	})
	t.Run("json", func(t *testing.T) {
		s, err := payload.As[fmt.Stringer](payload.RawJSON([]byte(`"x"`)))
		require.ErrorIs(t, err, payload.ErrDecode, "encoding/json cannot fill an interface with methods")
		assert.Nil(t, s)
		p, err := payload.As[*point](payload.RawJSON([]byte(`{"X":1}`)))
		require.NoError(t, err)
		assert.Equal(t, &point{X: 1}, p)
		p, err = payload.As[*point](payload.RawJSON([]byte(`null`)))
		require.NoError(t, err, "JSON null is a value: a nil pointer")
		assert.Nil(t, p)
		a, err := payload.As[any](payload.RawJSON([]byte(`null`)))
		require.NoError(t, err)
		assert.Nil(t, a)
	})
	t.Run("none", func(t *testing.T) {
		s, err := payload.As[fmt.Stringer](payload.Payload{})
		require.ErrorIs(t, err, payload.ErrNoValue)
		assert.Nil(t, s)
		a, err := payload.As[any](payload.Payload{})
		require.ErrorIs(t, err, payload.ErrNoValue)
		assert.Nil(t, a)
	})
}

// Values builds a list of its own: neither the list nor the arguments see
// later changes to the other. The values themselves are shared, as Of
// shares them.
func TestValuesCopiesTheList(t *testing.T) {
	pt := &point{1, 2}
	vs := []any{1, pt}
	ps := payload.Values(vs...)
	vs[0] = 99
	assert.Equal(t, payload.Of(1), ps[0])
	ps[1] = payload.Of("x")
	assert.Same(t, pt, vs[1])
	assert.Same(t, pt, payload.Values(vs...)[1].Value())
}

// A Payload may be read from any number of goroutines at once; run with
// -race, this finds any write a reader makes.
func TestConcurrentReaders(t *testing.T) {
	ps := payload.Payloads{
		payload.Of(&point{1, 2}),
		payload.Bytes([]byte("hi")),
		payload.RawJSON([]byte(`{"X":3,"Y":4}`)),
		{},
	}
	const readers = 8
	errs := make(chan error, readers)
	for range readers {
		go func() {
			errs <- func() error {
				for range 50 {
					if p, err := payload.As[*point](ps[0]); err != nil || p.X != 1 {
						return fmt.Errorf("go: %v %v", p, err)
					}
					if s, err := payload.As[string](ps[1]); err != nil || s != "hi" {
						return fmt.Errorf("bytes: %q %v", s, err)
					}
					if p, err := payload.As[point](ps[2]); err != nil || p != (point{3, 4}) {
						return fmt.Errorf("json: %v %v", p, err)
					}
					if _, err := payload.As[int](ps[3]); !errors.Is(err, payload.ErrNoValue) {
						return fmt.Errorf("none: %v", err)
					}
					var a, b, c any
					if err := ps[:3].Decode(&a, &b, &c); err != nil {
						return err
					}
					if _, err := json.Marshal(ps); err != nil {
						return err
					}
					for _, p := range ps {
						if _, _, err := p.Encode(); err != nil {
							return err
						}
					}
					_ = ps.String()
				}
				return nil
			}()
		}()
	}
	for range readers {
		require.NoError(t, <-errs)
	}
}

// FuzzEncodeRoundTrip: bytes, a Go string and a Go number, as payloads of
// their own and inside a Go value, come back through Encode and FromWire as
// they went, the string by encoding/json's rules (which replace invalid
// UTF-8).
func FuzzEncodeRoundTrip(f *testing.F) {
	f.Add([]byte(nil), "", int64(0))
	f.Add([]byte{}, "a\u00e9", int64(-1))
	f.Add([]byte{0, 0xff, '"'}, "a\xffb", int64(1)<<62)
	f.Fuzz(func(t *testing.T, data []byte, s string, n int64) {
		type envelope struct {
			B  payload.Payload
			Ps payload.Payloads
		}
		wantS := s
		if !utf8.ValidString(s) {
			b, err := json.Marshal(s)
			require.NoError(t, err)
			require.NoError(t, json.Unmarshal(b, &wantS))
		}
		through := func(p payload.Payload) payload.Payload {
			f, wire, err := p.Encode()
			require.NoError(t, err)
			back, err := payload.FromWire(f, wire)
			require.NoError(t, err)
			return back
		}

		b := through(payload.Bytes(data))
		require.Equal(t, payload.FormatBytes, b.Format())
		gotB, err := payload.As[[]byte](b)
		require.NoError(t, err)
		require.Equal(t, string(data), string(gotB))

		gotS, err := payload.As[string](through(payload.Of(s)))
		require.NoError(t, err)
		require.Equal(t, wantS, gotS)

		var e envelope
		require.NoError(t, through(payload.Of(envelope{
			B:  payload.Bytes(data),
			Ps: payload.Values(s, n, payload.Bytes(data)),
		})).Decode(&e))
		gotB, err = payload.As[[]byte](e.B)
		require.NoError(t, err)
		require.Equal(t, string(data), string(gotB))
		var (
			s2 string
			n2 int64
			b2 []byte
		)
		require.NoError(t, e.Ps.Decode(&s2, &n2, &b2))
		require.Equal(t, wantS, s2)
		require.Equal(t, n, n2)
		require.Equal(t, string(data), string(b2))
	})
}
