package payload

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Sentinel errors. Functions wrap them with context; test with [errors.Is].
var (
	// ErrNoValue is returned when decoding the zero Payload (FormatNone).
	ErrNoValue = errors.New("payload: no value")
	// ErrTypeMismatch is returned when a payload's value cannot be stored in
	// the decode target without a conversion the package refuses to guess.
	ErrTypeMismatch = errors.New("payload: type mismatch")
	// ErrInvalidTarget is returned when a decode target is not a non-nil pointer.
	ErrInvalidTarget = errors.New("payload: invalid decode target")
	// ErrDecode is returned when the encoded content cannot be decoded, for
	// example malformed JSON; the underlying error stays in the chain.
	ErrDecode = errors.New("payload: decode failed")
	// ErrEncode is returned when a Go value cannot be encoded as JSON; the
	// underlying error stays in the chain.
	ErrEncode = errors.New("payload: encode failed")
	// ErrArity is returned by [Payloads.Decode] when the number of targets
	// differs from the number of payloads.
	ErrArity = errors.New("payload: wrong number of targets")
	// ErrInvalidFormat is returned by [FromWire] for a format that has no wire
	// form (FormatGo), an unknown format, or content the format cannot have.
	ErrInvalidFormat = errors.New("payload: invalid format")
)

// Format tells how a [Payload] holds its value.
type Format uint8

// The formats. Only FormatBytes, FormatJSON and FormatNone exist on the wire.
const (
	// FormatNone is the format of the zero Payload: no value.
	FormatNone Format = iota
	// FormatGo is an in-process Go value, passed by reference, never encoded.
	FormatGo
	// FormatBytes is opaque bytes.
	FormatBytes
	// FormatJSON is JSON text.
	FormatJSON
)

// String returns "none", "go", "bytes" or "json", and "Format(N)" for a value
// outside the defined formats.
func (f Format) String() string {
	switch f {
	case FormatNone:
		return "none"
	case FormatGo:
		return "go"
	case FormatBytes:
		return "bytes"
	case FormatJSON:
		return "json"
	}
	return "Format(" + strconv.Itoa(int(f)) + ")"
}

// Payload is a value with a format tag. The zero Payload holds no value
// (FormatNone). Payloads are immutable and cheap to copy; see the package
// documentation for the sharing rules of the data they refer to.
type Payload struct {
	format Format
	// value is the Go value for FormatGo (never nil), a []byte for
	// FormatBytes and FormatJSON, and nil for FormatNone. One interface word
	// pair for every format keeps the struct at 24 bytes.
	value any
}

// Of returns a FormatGo payload holding v as it is: never copied or encoded,
// so a pointer reaches the reader as the same pointer. Of(nil) is the zero
// Payload. Of of a Payload returns that payload unchanged, so payloads never
// nest.
//
// Of itself never allocates; only the conversion of v to any may, and for a
// pointer it does not.
func Of(v any) Payload {
	switch v := v.(type) {
	case nil:
		return Payload{}
	case Payload:
		return v
	}
	return Payload{format: FormatGo, value: v}
}

// Bytes returns a FormatBytes payload holding b. It does not copy b: ownership
// passes to the payload, and the caller must not modify b afterwards, because
// every reader of the payload sees the same memory. Bytes(nil) is an empty
// FormatBytes payload, not the zero Payload.
func Bytes(b []byte) Payload {
	return Payload{format: FormatBytes, value: b}
}

// JSON marshals v with [encoding/json.Marshal] now and returns the FormatJSON
// payload of the result; a marshalling failure wraps [ErrEncode]. Encoding
// happens at once, so later changes to v do not show through. JSON(nil) is
// the JSON text null, not the zero Payload.
//
// When v is a Payload, JSON converts it rather than nesting it: a JSON
// payload is returned unchanged, a Go value is marshalled, bytes become a
// base64 JSON string as encoding/json writes a []byte (empty bytes, nil
// included, the empty string "", never null, which would read back as no
// value), and the zero Payload stays zero. A Payload inside v encodes the same way (see
// [Payload.MarshalJSON]), the zero Payload as null.
func JSON(v any) (Payload, error) {
	if p, ok := v.(Payload); ok {
		switch p.format {
		case FormatNone, FormatJSON:
			return p, nil
		default:
			v = p.jsonValue()
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return Payload{}, fmt.Errorf("%w: %T: %w", ErrEncode, v, err)
	}
	return Payload{format: FormatJSON, value: b}, nil
}

// RawJSON returns a FormatJSON payload holding b, which must already be JSON
// text. It is not validated here: malformed text is reported by
// [Payload.Decode] as [ErrDecode], so a payload that is only forwarded never
// pays for a parse. Like [Bytes], it does not copy b.
func RawJSON(b []byte) Payload {
	return Payload{format: FormatJSON, value: b}
}

// Format returns the payload's format.
func (p Payload) Format() Format { return p.format }

// IsZero reports whether p is the zero Payload, which holds no value.
func (p Payload) IsZero() bool { return p.format == FormatNone }

// Value returns the Go value for FormatGo, the []byte for FormatBytes and
// FormatJSON (shared, not copied), and nil for FormatNone.
func (p Payload) Value() any { return p.value }

// Decode stores the payload's value in the variable dst points to. dst must be
// a non-nil pointer, else the error wraps [ErrInvalidTarget]. By format:
//
//   - FormatGo: the value is assigned to *dst if its type is assignable to
//     *dst's type, which includes interface types it implements (decode into
//     a *any to get it back as is). Otherwise [ErrTypeMismatch]; no
//     conversion is attempted, so a []byte value does not decode into a
//     *string.
//   - FormatBytes: a *[]byte (or a pointer to another type []byte is
//     assignable to, such as *any) gets the bytes themselves, not a copy; a
//     *string (or a pointer to another string kind) gets a copy as a string;
//     an [encoding.BinaryUnmarshaler] gets UnmarshalBinary, whose failure
//     wraps [ErrDecode]; so does a pointer to a pointer to one, which
//     gets a new value if it is nil (as encoding/json gives one, so that
//     As[*T] works where *T is the unmarshaler) and is set only once
//     UnmarshalBinary succeeds. Anything else is [ErrTypeMismatch].
//   - FormatJSON: [encoding/json.Unmarshal] into dst; its failure wraps
//     [ErrDecode] and stays in the error chain. Malformed text writes
//     nothing; JSON of another shape than dst may have written the parts
//     that fit, as encoding/json does.
//   - FormatNone: [ErrNoValue].
func (p Payload) Decode(dst any) error {
	if err := checkTarget(dst); err != nil {
		return err
	}
	switch p.format {
	case FormatGo:
		return decodeGo(p.value, dst)
	case FormatBytes:
		return decodeBytes(p.value.([]byte), dst)
	case FormatJSON:
		if err := json.Unmarshal(p.value.([]byte), dst); err != nil {
			return fmt.Errorf("%w: json into %T: %w", ErrDecode, dst, err)
		}
		return nil
	case FormatNone:
		return ErrNoValue
	}
	// Unreachable: the fields are unexported and every constructor sets a
	// known format. Kept so that a future format cannot decode silently.
	return fmt.Errorf("%w: %v", ErrInvalidFormat, p.format)
}

// checkTarget rejects decode targets that cannot receive a value.
func checkTarget(dst any) error {
	if dst == nil {
		return fmt.Errorf("%w: nil", ErrInvalidTarget)
	}
	rv := reflect.ValueOf(dst)
	if rv.Kind() != reflect.Pointer {
		return fmt.Errorf("%w: %T is not a pointer", ErrInvalidTarget, dst)
	}
	if rv.IsNil() {
		return fmt.Errorf("%w: nil %T", ErrInvalidTarget, dst)
	}
	return nil
}

// decodeGo assigns v to *dst. dst has passed checkTarget and v is not nil.
func decodeGo(v, dst any) error {
	if d, ok := dst.(*any); ok {
		*d = v
		return nil
	}
	if err := goFits(v, dst); err != nil {
		return err
	}
	reflect.ValueOf(dst).Elem().Set(reflect.ValueOf(v))
	return nil
}

// goFits reports whether v can be assigned to *dst, as decodeGo assigns it.
// dst has passed checkTarget.
func goFits(v, dst any) error {
	if _, ok := dst.(*any); ok {
		return nil
	}
	elem := reflect.TypeOf(dst).Elem()
	if vt := reflect.TypeOf(v); !vt.AssignableTo(elem) {
		return fmt.Errorf("%w: go value of type %s is not assignable to %s", ErrTypeMismatch, vt, elem)
	}
	return nil
}

var (
	bytesType             = reflect.TypeFor[[]byte]()
	binaryUnmarshalerType = reflect.TypeFor[encoding.BinaryUnmarshaler]()
)

// bytesTarget is how bytes are stored in a decode target.
type bytesTarget uint8

const (
	bytesIntoBytes              bytesTarget = iota + 1 // *[]byte
	bytesIntoString                                    // *string
	bytesIntoAny                                       // *any
	bytesIntoUnmarshaler                               // an encoding.BinaryUnmarshaler
	bytesIntoAssignable                                // a pointer to a type []byte is assignable to
	bytesIntoStringKind                                // a pointer to another string kind
	bytesIntoUnmarshalerPointer                        // a pointer to a pointer to an unmarshaler
)

// bytesTargetOf tells how decodeBytes stores bytes in dst, or returns the
// ErrTypeMismatch it reports. dst has passed checkTarget.
func bytesTargetOf(dst any) (bytesTarget, error) {
	// The common targets first, without reflection.
	switch dst.(type) {
	case *[]byte:
		return bytesIntoBytes, nil
	case *string:
		return bytesIntoString, nil
	case *any:
		return bytesIntoAny, nil
	case encoding.BinaryUnmarshaler:
		return bytesIntoUnmarshaler, nil
	}
	elem := reflect.TypeOf(dst).Elem()
	switch {
	case bytesType.AssignableTo(elem):
		return bytesIntoAssignable, nil
	case elem.Kind() == reflect.String:
		return bytesIntoStringKind, nil
	case elem.Kind() == reflect.Pointer && elem.Implements(binaryUnmarshalerType):
		return bytesIntoUnmarshalerPointer, nil
	}
	return 0, fmt.Errorf("%w: bytes do not decode into %T (want *[]byte, *string or an encoding.BinaryUnmarshaler)", ErrTypeMismatch, dst)
}

// decodeBytes stores b in *dst. dst has passed checkTarget.
func decodeBytes(b []byte, dst any) error {
	kind, err := bytesTargetOf(dst)
	if err != nil {
		return err
	}
	switch kind {
	case bytesIntoBytes:
		*dst.(*[]byte) = b
		return nil
	case bytesIntoString:
		*dst.(*string) = string(b)
		return nil
	case bytesIntoAny:
		*dst.(*any) = b
		return nil
	case bytesIntoUnmarshaler:
		if err := dst.(encoding.BinaryUnmarshaler).UnmarshalBinary(b); err != nil {
			return fmt.Errorf("%w: %T.UnmarshalBinary: %w", ErrDecode, dst, err)
		}
		return nil
	}
	elem := reflect.ValueOf(dst).Elem()
	switch kind {
	case bytesIntoAssignable:
		elem.Set(reflect.ValueOf(b))
	case bytesIntoStringKind:
		elem.SetString(string(b))
	case bytesIntoUnmarshalerPointer:
		// A pointer to a pointer to an unmarshaler, as As[*T] passes:
		// decode into the value it points to, or into a new one when it
		// is nil, as encoding/json does, set only once decoded.
		target := elem
		if elem.IsNil() {
			target = reflect.New(elem.Type().Elem())
		}
		if err := target.Interface().(encoding.BinaryUnmarshaler).UnmarshalBinary(b); err != nil {
			return fmt.Errorf("%w: %s.UnmarshalBinary: %w", ErrDecode, elem.Type(), err)
		}
		elem.Set(target)
	}
	return nil
}

// precheck returns the error Decode would return for dst that can be found
// without decoding the content: an invalid target, no value, a type that
// cannot hold the value, or JSON text that is not well-formed. It writes
// nothing.
func (p Payload) precheck(dst any) error {
	if err := checkTarget(dst); err != nil {
		return err
	}
	switch p.format {
	case FormatGo:
		return goFits(p.value, dst)
	case FormatBytes:
		_, err := bytesTargetOf(dst)
		return err
	case FormatJSON:
		if !json.Valid(p.value.([]byte)) {
			// encoding/json checks the whole text before it writes
			// anything, so Decode reports the syntax error, in its usual
			// form, and leaves dst as it is.
			return p.Decode(dst)
		}
		return nil
	case FormatNone:
		return ErrNoValue
	}
	return fmt.Errorf("%w: %v", ErrInvalidFormat, p.format)
}

// As returns the payload's value as a T, by the rules of [Payload.Decode].
// When p holds a Go value of type T (or one implementing T, for an interface
// T), As is a type assertion: no reflection and no allocation. The same holds
// for FormatBytes and a T of []byte or any.
func As[T any](p Payload) (T, error) {
	// JSON is excluded: its []byte is text to unmarshal, not the value.
	if p.format == FormatGo || p.format == FormatBytes {
		if v, ok := p.value.(T); ok {
			return v, nil
		}
	}
	// Declared here, not above, so that only the slow path pays for the heap
	// allocation Decode's pointer argument causes.
	var v T
	if err := p.Decode(&v); err != nil {
		var zero T
		return zero, err
	}
	return v, nil
}

// MarshalJSON returns the JSON that [JSON] makes of p, so that a Payload
// inside a Go value (a struct field, a [Payloads]) encodes as what it
// holds: a Go value marshalled, bytes as a base64 JSON string ("" when
// empty, nil included), JSON text as it is, and the zero Payload as null.
// It implements [encoding/json.Marshaler]; encoding/json reports malformed
// JSON text and values it cannot encode. For JSON text the result is the
// payload's own bytes, shared as [Payload.Encode] shares them: a caller
// must not modify it.
func (p Payload) MarshalJSON() ([]byte, error) {
	switch p.format {
	case FormatNone:
		return []byte("null"), nil
	case FormatJSON:
		return p.value.([]byte), nil
	}
	return json.Marshal(p.jsonValue())
}

// jsonValue returns what JSON marshals for a Go or bytes payload: its value,
// except that nil bytes become empty bytes, which encoding/json writes as ""
// rather than null, so that empty content does not come back as no value.
func (p Payload) jsonValue() any {
	if p.format == FormatBytes && p.value.([]byte) == nil {
		return []byte{}
	}
	return p.value
}

// UnmarshalJSON sets *p to the FormatJSON payload of a copy of text, so
// that a Payload inside a Go value decodes as the JSON it was given, to
// be read with [Payload.Decode] or [As]. JSON null leaves *p unchanged,
// as encoding/json leaves other values it decodes null into, so a payload
// that encoded as null (the JSON text null, a nil pointer) comes back,
// like the zero Payload, as no value. It implements
// [encoding/json.Unmarshaler].
func (p *Payload) UnmarshalJSON(text []byte) error {
	if string(text) == "null" {
		return nil
	}
	*p = RawJSON(bytes.Clone(text))
	return nil
}

// Encode returns the payload's wire form. Bytes and JSON are returned as they
// are (shared, not copied). A Go value is marshalled with
// [encoding/json.Marshal] and reported as FormatJSON; a failure wraps
// [ErrEncode]. The zero Payload encodes as (FormatNone, nil, nil).
//
// A Go value that is a []byte encodes as a base64 JSON string, as
// encoding/json writes it; use [Bytes] for content that should stay opaque.
func (p Payload) Encode() (Format, []byte, error) {
	switch p.format {
	case FormatNone:
		return FormatNone, nil, nil
	case FormatBytes, FormatJSON:
		return p.format, p.value.([]byte), nil
	case FormatGo:
		b, err := json.Marshal(p.value)
		if err != nil {
			return FormatNone, nil, fmt.Errorf("%w: go value of type %T: %w", ErrEncode, p.value, err)
		}
		return FormatJSON, b, nil
	}
	return FormatNone, nil, fmt.Errorf("%w: %v", ErrInvalidFormat, p.format)
}

// FromWire is the inverse of [Payload.Encode]: it rebuilds a payload from a
// wire format and its content, without copying b and without validating JSON
// (see [RawJSON]). FormatGo, which has no wire form, an unknown format, and
// FormatNone with non-empty content are rejected with [ErrInvalidFormat].
func FromWire(f Format, b []byte) (Payload, error) {
	switch f {
	case FormatNone:
		if len(b) != 0 {
			return Payload{}, fmt.Errorf("%w: none with %d bytes of content", ErrInvalidFormat, len(b))
		}
		return Payload{}, nil
	case FormatBytes:
		return Bytes(b), nil
	case FormatJSON:
		return RawJSON(b), nil
	}
	return Payload{}, fmt.Errorf("%w: %v has no wire form", ErrInvalidFormat, f)
}

// maxStringContent bounds how much content String shows, so that logging a
// large payload stays cheap to read.
const maxStringContent = 64

// String returns a short human-readable form for logs: "none",
// `go:int(42)`, `bytes[12]`, or `json:{"a":1}`. Content longer than about 64
// bytes is cut and ends with "…". It is not a serialisation; use
// [Payload.Encode] for that.
func (p Payload) String() string {
	switch p.format {
	case FormatNone:
		return "none"
	case FormatGo:
		return "go:" + fmt.Sprintf("%T", p.value) + "(" + truncate(fmt.Sprint(p.value)) + ")"
	case FormatBytes:
		return "bytes[" + strconv.Itoa(len(p.value.([]byte))) + "]"
	case FormatJSON:
		return "json:" + truncate(string(p.value.([]byte)))
	}
	return p.format.String()
}

// truncate cuts s to at most maxStringContent bytes, at a rune boundary.
func truncate(s string) string {
	if len(s) <= maxStringContent {
		return s
	}
	cut := maxStringContent
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// Payloads is an ordered list of payloads: a process's input.
type Payloads []Payload

// Values returns a Payloads holding [Of] of each value in order. Values() is
// nil, an empty list.
func Values(vs ...any) Payloads {
	if len(vs) == 0 {
		return nil
	}
	ps := make(Payloads, len(vs))
	for i, v := range vs {
		ps[i] = Of(v)
	}
	return ps
}

// At returns the i-th payload, or the zero Payload when i is out of range, so
// that optional trailing arguments need no length check.
func (ps Payloads) At(i int) Payload {
	if uint(i) < uint(len(ps)) {
		return ps[i]
	}
	return Payload{}
}

// Decode decodes ps[i] into dsts[i] for every i, by the rules of
// [Payload.Decode]. An element's error is wrapped with its index ("payload
// 1: ...").
//
// Decode checks all it can before it writes any target, so that bad input
// does not leave the targets half written: a count mismatch ([ErrArity]),
// an invalid target ([ErrInvalidTarget]), a zero payload ([ErrNoValue]), a
// value whose type its target cannot hold ([ErrTypeMismatch]) and JSON text
// that is not well-formed ([ErrDecode]), anywhere in the list, are reported
// with every target as it was. What shows only by decoding, JSON of another
// shape than its target or a failing UnmarshalBinary ([ErrDecode]), stops
// decoding at that element, and the targets before it have been written.
func (ps Payloads) Decode(dsts ...any) error {
	if len(dsts) != len(ps) {
		return fmt.Errorf("%w: %d payloads, %d targets", ErrArity, len(ps), len(dsts))
	}
	if len(ps) > 1 { // one element has no target before it to keep
		for i, p := range ps {
			if err := p.precheck(dsts[i]); err != nil {
				return fmt.Errorf("payload %d: %w", i, err)
			}
		}
	}
	for i, p := range ps {
		if err := p.Decode(dsts[i]); err != nil {
			return fmt.Errorf("payload %d: %w", i, err)
		}
	}
	return nil
}

// String returns the list's elements in their [Payload.String] form, for
// logs: "[go:int(1), json:true]".
func (ps Payloads) String() string {
	var sb strings.Builder
	sb.WriteByte('[')
	for i, p := range ps {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString(p.String())
	}
	sb.WriteByte(']')
	return sb.String()
}
