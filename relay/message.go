package relay

import (
	"fmt"
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

// maxDataText is how much of a body String shows.
const maxDataText = 64

// String returns a short form for logs: `<0.1> -> <0.2> 42`, or for a
// returned message `<0.2> -> <0.1> undelivered (reason): 42`. The body is
// printed with %v and cut when long.
func (m Message) String() string {
	b := make([]byte, 0, 2*maxPIDLen+32)
	b = m.From.appendText(b)
	b = append(b, " -> "...)
	b = m.To.appendText(b)
	b = append(b, ' ')
	if m.Err != nil {
		b = append(b, "undelivered ("...)
		b = append(b, m.Err.Error()...)
		b = append(b, "): "...)
	}
	data := fmt.Sprint(m.Data)
	if len(data) > maxDataText {
		data = data[:cutAt(data, maxDataText)] + "..."
	}
	return string(append(b, data...))
}

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
