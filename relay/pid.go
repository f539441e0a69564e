package relay

import (
	"encoding"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// ErrInvalidPID is wrapped by the errors of [Parse] and [PID.UnmarshalText]
// for text that is not a PID in the form [PID.String] writes.
var ErrInvalidPID = errors.New("relay: invalid PID")

// PID names a process. It is comparable and 16 bytes, so that it can be a map
// key and be copied freely on the hot path of every send and completion.
//
// The zero PID names no process.
type PID struct {
	// Node is the node (scheduler instance or host) that owns the process.
	// A scheduler's PIDs carry the node number it was given, 0 by default,
	// and it answers only for PIDs that carry that number: 0 is a number
	// like any other, not a name for whichever node reads the PID, so a PID
	// means the same process wherever it is sent.
	Node uint32
	// ID is the process id within that node. A scheduler never reuses an ID
	// during its life, so a late message or completion can never reach a
	// different process; 0 is never a valid process.
	ID uint64
}

// The text forms must be usable by encoding/json for values and map keys.
var (
	_ encoding.TextMarshaler   = PID{}
	_ encoding.TextAppender    = PID{}
	_ encoding.TextUnmarshaler = (*PID)(nil)
)

// maxPIDLen is the length of the longest PID text: the brackets, the dot, 10
// digits of a uint32 and 20 of a uint64.
const maxPIDLen = 1 + 10 + 1 + 20 + 1

// IsZero reports whether p is the zero PID, which names no process.
func (p PID) IsZero() bool { return p == PID{} }

// String returns p as "<node.id>" in decimal, for example "<0.42>"; the zero
// PID is "<0.0>". [Parse] reverses it exactly.
func (p PID) String() string {
	// A stack buffer, so the string conversion is the only allocation.
	var buf [maxPIDLen]byte
	return string(p.appendText(buf[:0]))
}

// AppendText appends the [PID.String] form of p to b and returns the extended
// buffer. It implements [encoding.TextAppender] and does not allocate when b
// has room for the text (at most 33 bytes). The error is always nil.
func (p PID) AppendText(b []byte) ([]byte, error) {
	return p.appendText(b), nil
}

func (p PID) appendText(b []byte) []byte {
	b = append(b, '<')
	b = strconv.AppendUint(b, uint64(p.Node), 10)
	b = append(b, '.')
	b = strconv.AppendUint(b, p.ID, 10)
	return append(b, '>')
}

// MarshalText returns the [PID.String] form of p. It implements
// [encoding.TextMarshaler], so a PID is a JSON string and can key a JSON object.
// The error is always nil.
func (p PID) MarshalText() ([]byte, error) {
	return p.appendText(make([]byte, 0, maxPIDLen)), nil
}

// UnmarshalText sets *p to the PID that text names, accepting exactly what
// [Parse] accepts. On error *p is left unchanged. It implements
// [encoding.TextUnmarshaler].
func (p *PID) UnmarshalText(text []byte) error {
	pid, reason := parse(text)
	if reason != "" {
		return parseError(string(text), reason)
	}
	*p = pid
	return nil
}

// Parse returns the PID that s names. s must be exactly what [PID.String]
// writes: "<", the node in decimal, ".", the id in decimal, ">", with no
// signs, spaces, leading zeros or other text, and numbers that fit in their
// fields. Anything else returns an error wrapping [ErrInvalidPID] that quotes
// the input, or its first 64 bytes (cut at a rune boundary) when it is
// longer. Parse checks the form only; it does not ask whether the process
// exists.
func Parse(s string) (PID, error) {
	pid, reason := parse(s)
	if reason != "" {
		return PID{}, parseError(s, reason)
	}
	return pid, nil
}

// MustParse is like [Parse] but panics if s is not a valid PID, with
// Parse's error as the panic value, so that code which recovers can test
// it with [errors.Is] against [ErrInvalidPID]. It is meant for tests and
// for PIDs fixed in source code.
func MustParse(s string) PID {
	pid, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return pid
}

// maxQuoted bounds how much of a rejected input an error quotes, so that a
// hostile or corrupt input cannot make error messages and logs arbitrarily long.
const maxQuoted = 64

// parseError builds the error for a rejected input s.
func parseError(s, reason string) error {
	if len(s) > maxQuoted {
		return fmt.Errorf("%w %q… (%d bytes): %s", ErrInvalidPID, s[:cutAt(s, maxQuoted)], len(s), reason)
	}
	return fmt.Errorf("%w %q: %s", ErrInvalidPID, s, reason)
}

// parse is shared by Parse and UnmarshalText so that neither converts between
// string and []byte on success. It returns a non-empty reason on failure.
func parse[S string | []byte](s S) (PID, string) {
	if len(s) < len("<0.0>") || s[0] != '<' || s[len(s)-1] != '>' {
		return PID{}, `want "<node.id>"`
	}
	body := s[1 : len(s)-1]
	dot := -1
	for i := 0; i < len(body); i++ {
		if body[i] == '.' {
			dot = i
			break
		}
	}
	if dot < 0 {
		return PID{}, `missing "." between node and id`
	}
	node, reason := parseDecimal(body[:dot], math.MaxUint32)
	if reason != "" {
		return PID{}, "node " + reason
	}
	id, reason := parseDecimal(body[dot+1:], math.MaxUint64)
	if reason != "" {
		return PID{}, "id " + reason
	}
	return PID{Node: uint32(node), ID: id}, ""
}

// parseDecimal parses the canonical decimal form of an unsigned number no
// greater than limit: digits only, no leading zero unless the number is 0. It
// returns a non-empty reason on failure.
func parseDecimal[S string | []byte](s S, limit uint64) (uint64, string) {
	if len(s) == 0 {
		return 0, "is empty"
	}
	if s[0] == '0' && len(s) > 1 {
		return 0, "has a leading zero"
	}
	var n uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, "is not a decimal number"
		}
		d := uint64(c - '0')
		if n > (limit-d)/10 {
			return 0, "is greater than " + strconv.FormatUint(limit, 10)
		}
		n = n*10 + d
	}
	return n, ""
}
