// Package payload defines [Payload], a value tagged with its format, which is
// what a process receives as input and produces as its result.
//
// A Payload is related to an `any` holding the value, but it remembers how the
// value is represented so that the same process code works whether its input
// came from the same Go program or, later, across a network:
//
//   - [FormatGo]: an in-process Go value, made with [Of]. It is passed by
//     reference and never encoded, so handing a pointer to another process
//     costs nothing. Decoding assigns the value; it never converts it.
//   - [FormatBytes]: opaque bytes, made with [Bytes].
//   - [FormatJSON]: JSON text, made with [JSON] or [RawJSON]. Decoding runs
//     [encoding/json.Unmarshal].
//   - [FormatNone]: the zero Payload, which holds no value.
//
// The zero Payload is ready to use and means "no value": [Payload.IsZero]
// reports true and [Payload.Decode] returns [ErrNoValue].
//
// Readers take values out with [Payload.Decode] or the generic [As], which
// has an allocation-free fast path for Go values of the expected type.
// [Payload.Encode] and [FromWire] convert to and from the wire form, in which
// Go values become JSON. A Payload inside a Go value (a struct field, a
// [Payloads]) encodes as what it holds and decodes as a JSON payload: Payload
// implements [encoding/json.Marshaler] and [encoding/json.Unmarshaler]. [Payloads] is an ordered list of payloads, the shape of
// a process's input, with positional decoding.
//
// Payload is kept to two words plus a tag (24 bytes on 64-bit platforms)
// because the scheduler keeps one in the record of every finished process
// that has a Handle, and an event carries a payload as its value and a
// format byte, with no allocation of its own. It deliberately does not hold a reflect.Type or a decoded cache.
//
// Errors are the sentinel values [ErrNoValue], [ErrTypeMismatch],
// [ErrInvalidTarget], [ErrDecode], [ErrEncode], [ErrArity] and
// [ErrInvalidFormat], wrapped with context; test for them with [errors.Is].
//
// Thread safety: a Payload is an immutable value and may be copied and read
// from any number of goroutines at once. It does not copy what it refers to,
// though: the bytes given to [Bytes], [RawJSON] and [FromWire], and the value
// given to [Of], are shared with every reader, so whoever creates a payload
// must not modify them afterwards unless that is synchronised by other means.
// Readers get that same memory ([Payload.Value], [Payload.Encode],
// [Payload.MarshalJSON] of JSON text, bytes decoded into a []byte or read
// with [As]) and must not modify it either: another reader would see the
// change.
package payload
