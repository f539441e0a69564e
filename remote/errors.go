package remote

import (
	"errors"
	"strconv"

	scheduler "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// sentinel is an error value that also matches a more general one, so
// that code written for local failures handles remote ones too: a down
// node's process is, for the sender, a process that is not found.
type sentinel struct {
	text string
	base error // nil: matches only itself
}

// Error returns the sentinel's text.
func (e *sentinel) Error() string { return e.text }

// Unwrap returns the more general error the sentinel matches, if any.
func (e *sentinel) Unwrap() error { return e.base }

// Sentinel errors. Every error this package returns or delivers wraps one
// of these or one of the scheduler's, so callers test them with
// [errors.Is].
var (
	// ErrNodeDown: the recipient's node was declared down (it crashed, left,
	// restarted under a new number, stopped answering, or declared this
	// node down). It matches [scheduler.ErrProcessNotFound] too: for the
	// sender, a process on a down node is a process that is gone.
	ErrNodeDown error = &sentinel{"remote: node down", scheduler.ErrProcessNotFound}
	// ErrUnknownNode: no node with that number has joined the cluster as
	// far as this node knows (or it was declared down so long ago that
	// it is forgotten), or no live node has that name: a name stands for
	// the node that has it now, so a spawn on the name of a node that
	// went down fails with ErrUnknownNode, not [ErrNodeDown]. It matches
	// [scheduler.ErrProcessNotFound] too.
	ErrUnknownNode error = &sentinel{"remote: unknown node", scheduler.ErrProcessNotFound}
	// ErrBackpressure: the buffer of messages waiting to go to that node
	// is full, because the node is slow to take them. The send is refused
	// at once, like a message to a full mailbox with the reject policy,
	// and it matches [scheduler.ErrMailboxFull] too; nothing was sent, so
	// trying again later is safe. A message comes back later with it when
	// NATS refused its batch because its own buffer for what is published
	// while the connection is down was full.
	ErrBackpressure error = &sentinel{"remote: outbound buffer full", scheduler.ErrMailboxFull}
	// ErrNotEncodable: the message cannot cross to another node: its body
	// is of a type the wire does not carry, a Go value JSON cannot encode
	// (the error then also wraps [payload.ErrEncode]), or too large for
	// one batch or for [Config].MaxBuffered; or its sender is not a
	// process of this node. A message
	// comes back later with it when the server refused its batch as too
	// large: one reached after a reconnect may have a lower limit.
	ErrNotEncodable error = &sentinel{"remote: message cannot cross nodes", nil}
	// ErrDisconnected: the connection to the NATS server failed while
	// the message was being published, so it was not sent. The node
	// reconnects by itself; sending again later is safe. [New] returns
	// it when the connection NATS made is not connected (with
	// nats.RetryOnFailedConnect and no server answering), and
	// [Node.Close] when the server did not confirm the node's last
	// messages.
	ErrDisconnected error = &sentinel{"remote: connection to the server failed", nil}
	// ErrClosed: the node is not started yet, or is closing or closed, or
	// its NATS connection has closed for good (it ran out of reconnect
	// attempts). It matches [scheduler.ErrClosed] too.
	ErrClosed error = &sentinel{"remote: node closed", scheduler.ErrClosed}
	// ErrUnknownKind: a spawn named a process kind that the target node
	// has not registered.
	ErrUnknownKind error = &sentinel{"remote: unknown process kind", nil}
	// ErrInvalidConfig: a [Config] field is out of range, or an option
	// of Config.Options is one NATS refuses ([New]); [Node.Start] was
	// given a scheduler it cannot serve (nil, of another node number, with
	// a handler on the spawn command, or another than the one a failed
	// Start claimed that command on, while that one runs); or
	// [Node.Register] an empty kind, a nil factory or a kind registered
	// already.
	ErrInvalidConfig error = &sentinel{"remote: invalid config", nil}
	// ErrNameConflict: [New] drew several random node numbers and found
	// each held: someone answered, on the cluster's subjects, for every
	// one (or, on a server that reports "no responders", held it without
	// answering in time). Nodes are far too few for this to happen by
	// chance: something else answers on the cluster's subjects. A name
	// that another node of the cluster uses is not refused: see
	// [Config].Name.
	ErrNameConflict error = &sentinel{"remote: node number or name in use", nil}
)

// wireErrors are the errors a failure can match that travel on the wire:
// the node that fails sets bit i of a code when the failure matches
// wireErrors[i], and the node that receives it rebuilds an [Error] that
// matches the same ones. Append only: the position is the wire code.
var wireErrors = [...]error{
	scheduler.ErrProcessNotFound,
	scheduler.ErrMailboxFull,
	scheduler.ErrDropped,
	scheduler.ErrClosed,
	scheduler.ErrInit,
	scheduler.ErrUnknownMethod,
	scheduler.ErrPanic,
	scheduler.ErrForced,
	scheduler.ErrTooManyProcesses,
	scheduler.ErrInvalidCommand,
	scheduler.ErrEmptyMethod,
	scheduler.ErrNilProcess,
	payload.ErrEncode,
	payload.ErrDecode,
	payload.ErrTypeMismatch,
	ErrNodeDown,
	ErrUnknownNode,
	ErrBackpressure,
	ErrNotEncodable,
	ErrClosed,
	ErrUnknownKind,
	ErrDisconnected,
	scheduler.ErrTerminated,
	scheduler.ErrShuttingDown,
	scheduler.ErrNoReply,
	scheduler.ErrUnknownCommand,
	scheduler.ErrNotEnded,
	scheduler.ErrYieldNotPending,
	scheduler.ErrDuplicateTag,
	scheduler.ErrInvalidOption,
	scheduler.ErrCommandTaken,
	scheduler.ErrEnded,
	scheduler.ErrShutdownStarted,
	scheduler.ErrNameTaken,
	scheduler.ErrNameNotFound,
	scheduler.ErrInvalidName,
	scheduler.ErrYieldCancelled,
	scheduler.ErrTimeout,
	scheduler.ErrPoolFull,
	scheduler.ErrNilContext,
	ErrInvalidConfig,
	ErrNameConflict,
	payload.ErrNoValue,
	payload.ErrInvalidTarget,
	payload.ErrArity,
	payload.ErrInvalidFormat,
	relay.ErrInvalidPID,
	scheduler.ErrGoexit,
}

// The wire code has a bit for each of wireErrors below codeFailed.
var _ [63 - len(wireErrors)]struct{}

// codeFailed is set in the wire code of every error, so that a failure
// that matches none of wireErrors is still a failure.
const codeFailed = 1 << 63

// errorCode returns the wire code of err: codeFailed and one bit per
// error of wireErrors that it matches; 0 for nil.
func errorCode(err error) uint64 {
	if err == nil {
		return 0
	}
	if e, ok := err.(*Error); ok {
		return e.code // passed on as it came
	}
	code := uint64(codeFailed)
	for i, target := range wireErrors {
		if errors.Is(err, target) {
			code |= 1 << i
		}
	}
	return code
}

// Error is a failure that happened on another node and was reported over
// the wire: a message it could not deliver, a spawn it could not carry
// out, or the error a remote process ended with. It matches, with
// [errors.Is], every sentinel error of this package, of the scheduler,
// of payload and of relay that the original error matched there, so
// that the same checks work for local and remote failures.
type Error struct {
	// Node is the name of the node where the failure happened.
	Node string
	// PID is the process concerned: the recipient that was not reached,
	// or the process that failed or ended. Zero if none.
	PID relay.PID
	// Text is the original error's text.
	Text string

	code uint64
}

// newRemoteError rebuilds an error received with code and text; it is a
// failure whatever the code says.
func newRemoteError(node string, pid relay.PID, code uint64, text string) *Error {
	return &Error{Node: node, PID: pid, Text: text, code: code | codeFailed}
}

// Error returns `remote: node "b": ` followed by the original text.
func (e *Error) Error() string {
	return "remote: node " + strconv.Quote(e.Node) + ": " + e.Text
}

// Unwrap returns the sentinels the original error matched.
func (e *Error) Unwrap() []error {
	var errs []error
	for i, target := range wireErrors {
		if e.code&(1<<i) != 0 {
			errs = append(errs, target)
		}
	}
	return errs
}
