package relay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode"
	"unicode/utf8"
)

// Message is one message between processes: who sent it, who it is for,
// and its body. It is a value; the body inside is shared, not copied.
//
// A Message has the same shape as the event its recipient gets: the
// recipient's event carries From as its sender and Data as its body,
// whether the message was sent by a process, by code outside any process,
// or by a process on another node. The envelope itself is never
// delivered.
//
// A message that could not be delivered goes back to its sender as a
// Message with Err set: From is then the recipient that was not reached,
// To the original sender, and Data the original body. A transport that
// learns of a failure after the fact (the recipient on another node has
// ended, or its node is down) returns the message this way.
type Message struct {
	// From is the sender; zero when the message was sent from outside any
	// process.
	From PID
	// To is the recipient.
	To PID
	// Data is the body, delivered as it is within a node. A message that
	// crosses to another node must have a body the transport can encode;
	// the transport documents which kinds it carries and refuses others
	// at the sender.
	Data any
	// Err is nil for a message and says why for a message returned to its
	// sender undelivered.
	Err error
}

// IsBounce reports whether m is a message returned to its sender
// undelivered (Err is set).
func (m Message) IsBounce() bool { return m.Err != nil }

// maxDataText and maxErrText are how much of a body and of an error's
// text String shows: the reason a message came back gets more room than
// its body.
const (
	maxDataText = 64
	maxErrText  = 128
)

// String returns a short form for logs: `<0.1> -> <0.2> 42`, or for a
// returned message `<0.2> -> <0.1> undelivered (reason): 42`. The body is
// printed with %v. It is one line of bounded length, whatever the body and
// the error say: a body longer than 64 bytes and an error's text longer
// than 128 are cut, at a rune boundary, and marked with "...", and control
// characters in either (a newline, a tab, U+2028 and the like) are written
// as Go escapes (\n, \t, \u2028).
func (m Message) String() string {
	b := make([]byte, 0, 2*maxPIDLen+32)
	b = m.From.appendText(b)
	b = append(b, " -> "...)
	b = m.To.appendText(b)
	b = append(b, ' ')
	if m.Err != nil {
		b = append(b, "undelivered ("...)
		b = appendLine(b, m.Err.Error(), maxErrText)
		b = append(b, "): "...)
	}
	return string(appendLine(b, fmt.Sprint(m.Data), maxDataText))
}

// appendLine appends s to b as text for one line: its first max bytes at
// most, cut by cutAt and followed by "..." when s is longer, with every
// control character and line or paragraph separator written as a Go
// escape. Bytes that are not valid UTF-8 are kept as they are.
func appendLine(b []byte, s string, max int) []byte {
	cut := len(s) > max
	if cut {
		s = s[:cutAt(s, max)]
	}
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1, !unicode.IsControl(r) && r != '\u2028' && r != '\u2029':
			b = append(b, s[i:i+size]...)
		case r == '\n':
			b = append(b, `\n`...)
		case r == '\r':
			b = append(b, `\r`...)
		case r == '\t':
			b = append(b, `\t`...)
		case r < utf8.RuneSelf:
			b = append(b, `\x`...)
			b = append(b, hexDigits[r>>4], hexDigits[r&0xf])
		default:
			b = append(b, `\u`...)
			b = append(b, hexDigits[r>>12&0xf], hexDigits[r>>8&0xf], hexDigits[r>>4&0xf], hexDigits[r&0xf])
		}
		i += size
	}
	if cut {
		b = append(b, "..."...)
	}
	return b
}

const hexDigits = "0123456789abcdef"

// cutAt returns where to cut s, longer than n bytes, to keep at most its
// first n: at n, or before the rune that n falls inside, so that the part
// kept does not end in a partial rune. It backs off at most the bytes of
// one rune, so text that is not valid UTF-8 keeps its first bytes too.
func cutAt(s string, n int) int {
	for cut := n; cut > n-utf8.UTFMax && cut > 0; cut-- {
		if utf8.RuneStart(s[cut]) {
			return cut
		}
	}
	return n
}

// MarshalJSON writes m as a JSON object with the fields From, To, Data
// and Err: the PIDs as their text, the body as encoding/json writes it (a
// [payload.Payload] as what it holds), and Err as its text, or null when
// m is not a returned message, rather than the empty object encoding/json
// makes of an error. It implements [encoding/json.Marshaler], so JSON logs
// keep why a message came back; encoding/json reports a body it cannot
// encode. There is no decoding back: an error and a body of any type cannot
// be rebuilt from their JSON, and a transport between nodes has an
// encoding of its own.
func (m Message) MarshalJSON() ([]byte, error) {
	var errText *string
	if m.Err != nil {
		text := m.Err.Error()
		errText = &text
	}
	// Written without escaping < and >, so that a caller's Encoder whose
	// SetEscapeHTML is off gets the PIDs as they are; encoding/json escapes
	// what a Marshaler returns when its caller wants that.
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(struct {
		From PID
		To   PID
		Data any
		Err  *string
	}{m.From, m.To, m.Data, errText}); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// Receiver delivers messages to processes by PID. The scheduler implements
// it; so does a transport that forwards messages to another node, or a test
// double.
type Receiver interface {
	// Send delivers msg to the process named by msg.To, or, when msg.Err is
	// set, returns it to that process as undelivered. It returns an error
	// if the recipient is unknown or has ended, or the receiver is shut
	// down; implementations document their exact errors. It must not
	// block. Messages from one sender to one recipient arrive in order.
	Send(msg Message) error
}
