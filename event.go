package scheduler

import (
	"fmt"

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
type Event struct {
	Type  EventType // what happened
	Tag   uint64    // the tag of the completed yield (EventYieldComplete)
	Data  any       // the yield's result (EventYieldComplete) or the message (EventMessage)
	Error error     // set when a yield failed or a message could not be delivered
	// From is the sender of a message, the zero PID for messages sent from
	// outside any process, or the child of a yield that spawned and awaited
	// one (see [StepOutput.SpawnAwait]).
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
