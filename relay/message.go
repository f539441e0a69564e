package relay

import (
	"strconv"

	"github.com/procsched/scheduler/payload"
)

// Message is what one process sends another. It is a value: the scheduler
// copies it into the recipient's mailbox, and the payloads inside are shared,
// not copied (see package payload).
type Message struct {
	// From is the sender; zero when the message was sent from outside any
	// process.
	From PID
	// To is the recipient.
	To PID
	// Topic is an optional label the recipient may dispatch on, so that
	// simple protocols need no envelope inside the payloads.
	Topic string
	// Payloads is the content.
	Payloads payload.Payloads
}

// String returns a short form for logs: `<0.1> -> <0.2> "topic" [go:int(1)]`,
// without the topic when it is empty. Payloads are shown as
// [payload.Payloads.String] shows them, cut when long.
func (m Message) String() string {
	b := make([]byte, 0, 2*maxPIDLen+32)
	b = m.From.appendText(b)
	b = append(b, " -> "...)
	b = m.To.appendText(b)
	if m.Topic != "" {
		b = append(b, ' ')
		b = strconv.AppendQuote(b, m.Topic)
	}
	b = append(b, ' ')
	b = append(b, m.Payloads.String()...)
	return string(b)
}

// Receiver delivers messages to processes by PID. The scheduler implements
// it; so can a transport that forwards messages to another node, or a test
// double.
type Receiver interface {
	// Send delivers msg to the process named by msg.To. It returns an error if the
	// recipient is unknown or has ended, or the receiver is shut down; implementations
	// document their exact errors. Messages from one sender to one recipient arrive in order.
	Send(msg Message) error
}
