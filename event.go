package scheduler

import (
	"fmt"

	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// EventType says what an [Event] reports.
type EventType uint8

const (
	// EventYieldComplete reports the completion of a yield: Tag is the
	// yield's tag, Data its result and Error its failure, if any.
	EventYieldComplete EventType = iota + 1
	// EventMessage carries a message: Data is the message and From its
	// sender. A message that could not be delivered comes back to its
	// sender as an EventMessage with Error set and From naming the
	// recipient that was not reached.
	EventMessage
	// EventCancel asks the process to finish: it was terminated or the
	// scheduler is shutting down. The process context is cancelled at the
	// same time. The process may still yield cleanup commands.
	EventCancel
)

// String returns the event type's name.
func (t EventType) String() string {
	switch t {
	case EventYieldComplete:
		return "YieldComplete"
	case EventMessage:
		return "Message"
	case EventCancel:
		return "Cancel"
	}
	return fmt.Sprintf("EventType(%d)", uint8(t))
}

// Event is one thing that happened to a process since its previous step.
// Events are passed to [Process.Step] in the order they arrived; the slice
// is reused after Step returns, so a process copies any Event it keeps (the
// values inside, such as Data, are its to keep).
//
// Data is what the message or the completion carried, with one rule: a
// [payload.Payload] arrives unpacked. Data is then the payload's value
// ([payload.Payload.Value]: the Go value, or the bytes of a bytes or JSON
// payload), and [Event.Result] returns the payload whole, format
// included. So the result of an awaited child, which is a payload, is read
// as ev.Data.(int) when the child finished with payload.Of(42), or as
// payload.As[int](ev.Result()) whatever its format (a child on another
// node answers in JSON). Unpacking is what lets the scheduler hand a
// child's result to its parent without allocating a box for it.
type Event struct {
	Type EventType // what happened
	// packed is 0 when Data is the data as it was given, and 1 plus the
	// payload's format when Data is the value of a payload (see
	// setData). It sits in what would be padding, so Event stays 64 bytes.
	packed uint8
	Tag    uint64 // the tag of the completed yield (EventYieldComplete)
	Data   any    // the yield's result (EventYieldComplete) or the message (EventMessage); a payload arrives unpacked
	Error  error  // set when a yield failed or a message could not be delivered
	// From is the sender of a message, the zero PID for messages sent from
	// outside any process, the child of a yield that spawned one (see
	// [StepOutput.Spawn] and [StepOutput.SpawnAwait]), or the process a
	// completion is about (a monitor's watched process, a replier).
	From relay.PID
}

// String describes the event for logs and test failures.
func (e Event) String() string {
	switch e.Type {
	case EventYieldComplete:
		if e.Error != nil {
			return fmt.Sprintf("YieldComplete(tag=%d, error=%v)", e.Tag, e.Error)
		}
		return fmt.Sprintf("YieldComplete(tag=%d, data=%v)", e.Tag, e.Data)
	case EventMessage:
		if e.Error != nil {
			return fmt.Sprintf("Message(undelivered to %v: %v)", e.From, e.Error)
		}
		return fmt.Sprintf("Message(from=%v, data=%v)", e.From, e.Data)
	}
	return e.Type.String()
}

// Result returns Data as a payload: the payload it was unpacked from,
// format included, or else [payload.Of](Data). It is how a process reads
// an awaited child's result or a reply whatever their format, for example
// payload.As[int](ev.Result()). It allocates nothing for a Go value; for
// bytes or JSON, rebuilding the payload may allocate the small header
// that holds the slice.
func (e Event) Result() payload.Payload {
	if e.packed != 0 {
		return repack(payload.Format(e.packed-1), e.Data)
	}
	return payload.Of(e.Data)
}

// setData sets e's Data to data, unpacking it if it is a payload (see
// Event). Any goroutine, on an Event it alone holds.
func (e *Event) setData(data any) {
	if p, ok := data.(payload.Payload); ok {
		e.setPayload(p)
		return
	}
	e.Data, e.packed = data, 0
}

// setPayload sets e's Data to p's value and remembers p's format. Any
// goroutine, on an Event it alone holds.
func (e *Event) setPayload(p payload.Payload) {
	e.Data, e.packed = unpack(p)
}

// unpack returns what an Event carrying p holds: p's value as Data, and
// in packed 1 plus p's format. Any goroutine.
func unpack(p payload.Payload) (data any, packed uint8) {
	return p.Value(), uint8(p.Format()) + 1
}

// setYieldResult makes e, a zero Event, the event that completes a yield
// with result or err, from the process named in From: Data is the
// result's value, unpacked (see unpack), so that no box is made for it.
// Its Tag is the completer's to set. Written field by field where e
// lies: an event built on the stack and then copied into a slice is
// copied at once, 16 bytes at a time, and the first 16 hold the two
// one-byte fields just stored; a load that spans several stores still
// on their way to the cache waits for them to get there, where a load of
// what one store wrote is served from the store itself. Any goroutine,
// on an Event it alone holds.
func (e *Event) setYieldResult(from relay.PID, result payload.Payload, err error) {
	e.Type, e.From, e.Error = EventYieldComplete, from, err
	e.Data, e.packed = unpack(result)
}

// data returns the data e was made with, exactly as it was given: the
// payload again if Data was unpacked from one. Forwarding, bouncing and
// dead letters use it, so what leaves a mailbox is what entered it.
// Any goroutine.
func (e *Event) data() any {
	if e.packed != 0 {
		return repack(payload.Format(e.packed-1), e.Data)
	}
	return e.Data
}

// repack rebuilds the payload of format f whose value is v, as setPayload
// took it apart. Any goroutine.
func repack(f payload.Format, v any) payload.Payload {
	switch f {
	case payload.FormatBytes:
		b, _ := v.([]byte)
		return payload.Bytes(b)
	case payload.FormatJSON:
		b, _ := v.([]byte)
		return payload.RawJSON(b)
	}
	return payload.Of(v) // FormatGo, or FormatNone with v nil
}

// setMessage makes e, a zero Event, the EventMessage carrying data
// (unpacked if it is a payload), err and from. It fills e in place rather
// than returning an Event: a returned Event is built in a temporary and
// copied, and the copy's wide loads of the fields just stored one by one
// stall the processor on every message. Any goroutine, on an Event it
// alone holds.
func (e *Event) setMessage(data any, err error, from relay.PID) {
	e.Type, e.Error, e.From = EventMessage, err, from
	e.setData(data)
}

// setCompletion makes e, a zero Event, the EventYieldComplete of the
// yield with tag, carrying data (unpacked if it is a payload), err and
// from; in place, as setMessage. Any goroutine, on an Event it alone
// holds.
func (e *Event) setCompletion(tag uint64, data any, err error, from relay.PID) {
	e.Type, e.Tag, e.Error, e.From = EventYieldComplete, tag, err, from
	e.setData(data)
}
