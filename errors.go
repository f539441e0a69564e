package scheduler

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/procsched/scheduler/relay"
)

// Sentinel errors. Every error the scheduler returns or delivers wraps one
// of these, so callers test them with [errors.Is].
var (
	// ErrClosed: the scheduler is shutting down or shut down. Submit,
	// Spawn and Call.Submit return it from the start of Shutdown, and a
	// step's spawn completes with it then; Send, Tell, CompleteYield and
	// Terminate return it once Shutdown has returned.
	ErrClosed = errors.New("scheduler: closed")
	// ErrProcessNotFound: no live process has that PID. It never existed,
	// it has ended, or it belongs to another node.
	ErrProcessNotFound = errors.New("scheduler: process not found")
	// ErrUnknownCommand: a yield named a command ID with no handler.
	ErrUnknownCommand = errors.New("scheduler: unknown command")
	// ErrNotEnded: Handle.Result was asked for the result of a process
	// that has not ended yet.
	ErrNotEnded = errors.New("scheduler: process has not ended")
	// ErrYieldNotPending: a completion named a yield the process is not
	// waiting for: it was completed already, or never issued.
	ErrYieldNotPending = errors.New("scheduler: yield not pending")
	// ErrDuplicateTag: a process yielded a tag that is still outstanding.
	// The new yield completes at once with this error; the outstanding one
	// is unaffected.
	ErrDuplicateTag = errors.New("scheduler: duplicate yield tag")
	// ErrNilProcess: Submit or a spawn was given a nil Process.
	ErrNilProcess = errors.New("scheduler: nil process")
	// ErrEmptyMethod: Submit or a spawn was given an empty method name.
	ErrEmptyMethod = errors.New("scheduler: empty method")
	// ErrUnknownMethod is for processes to wrap when Init is asked for an
	// entry point they do not have, so callers can test for it.
	ErrUnknownMethod = errors.New("scheduler: unknown method")
	// ErrInit: a process's Init failed; the error also wraps what Init
	// returned (or the [PanicError] if it panicked).
	ErrInit = errors.New("scheduler: init failed")
	// ErrPanic: code run by the scheduler panicked. The error is a
	// *[PanicError] carrying the value and stack.
	ErrPanic = errors.New("scheduler: panic")
	// ErrInvalidOption: an option given to [New] or Submit is out of range.
	ErrInvalidOption = errors.New("scheduler: invalid option")
	// ErrInvalidCommand: a yield named a reserved command ID (below
	// FirstUserCommand), a handler was registered for one (or for an ID
	// above the last, or was nil), or Call.Go was given nil work.
	ErrInvalidCommand = errors.New("scheduler: invalid command")
	// ErrCommandTaken: a handler was registered for a command ID that
	// [Scheduler.ClaimHandler] has claimed, or ClaimHandler was asked for
	// one that has a handler already.
	ErrCommandTaken = errors.New("scheduler: command taken")
	// ErrMailboxFull: a message was refused because the recipient's
	// mailbox is full (policy MailboxReject).
	ErrMailboxFull = errors.New("scheduler: mailbox full")
	// ErrDropped: a message was dropped because a mailbox was full
	// (policies MailboxDropNewest and MailboxDropOldest).
	ErrDropped = errors.New("scheduler: message dropped")
	// ErrTooManyProcesses: a start would exceed WithMaxProcesses.
	ErrTooManyProcesses = errors.New("scheduler: too many processes")
	// ErrForced: Shutdown's deadline passed before the process finished,
	// so the scheduler closed it. Shutdown's own error wraps it too and
	// says how many processes were forced. It is also context.Cause of a
	// handler's call context whose yield was still pending then, and of
	// one asked for after; the process context keeps the cause of the
	// cancel that came first ([ErrShuttingDown]).
	ErrForced = errors.New("scheduler: forced to close at shutdown")
	// ErrTerminated is the cause of a cancel sent by Terminate: the Error
	// of the EventCancel, and context.Cause of the process context.
	ErrTerminated = errors.New("scheduler: terminated")
	// ErrShuttingDown is the cause of a cancel sent by Shutdown: the
	// Error of the EventCancel, and context.Cause of the process context.
	ErrShuttingDown = errors.New("scheduler: shutting down")
	// ErrEnded is context.Cause of the context of a process that has
	// ended without being asked to stop, and of a handler's call context
	// whose yield was still pending when its process ended, or that was
	// asked for after the end, unless a shutdown deadline forced the end
	// ([ErrForced]). A call context done before the end keeps the cause
	// it was done with.
	ErrEnded = errors.New("scheduler: process ended")
	// ErrShutdownStarted: Shutdown was called on one of the scheduler's
	// own goroutines (in a Step, a handler, work given to Call.Go, a
	// hook), which cannot wait for the stop; the shutdown has begun and
	// completes once the caller returns to the scheduler.
	ErrShutdownStarted = errors.New("scheduler: shutdown started, not waited for")
	// ErrNameTaken: Register was asked for a name another process has.
	ErrNameTaken = errors.New("scheduler: name taken")
	// ErrNameNotFound: no process is registered under that name.
	ErrNameNotFound = errors.New("scheduler: name not found")
	// ErrInvalidName: Register was given an empty name.
	ErrInvalidName = errors.New("scheduler: invalid name")
	// ErrNoReply: the process a request was sent to ended before it
	// replied. The error also says how it ended.
	ErrNoReply = errors.New("scheduler: no reply")
	// ErrYieldCancelled is context.Cause of a handler's call context
	// when the process cancelled the call's yield (StepOutput.Cancel).
	ErrYieldCancelled = errors.New("scheduler: yield cancelled")
	// ErrTimeout completes a yield whose deadline passed first (see
	// StepOutput.Timeout), and is context.Cause of its handler's call
	// context. It wraps context.DeadlineExceeded.
	ErrTimeout = fmt.Errorf("scheduler: timeout: %w", context.DeadlineExceeded)
	// ErrPoolFull: Call.Go found the blocking pool's queue full, with the
	// policy PoolReject.
	ErrPoolFull = errors.New("scheduler: blocking pool full")
	// ErrGoexit: code the scheduler ran called [runtime.Goexit] (as
	// testing.T.FailNow does). It is the Value of the *[PanicError] that
	// reports it: see [Process].
	ErrGoexit = errors.New("scheduler: runtime.Goexit called")
	// ErrNilContext: a nil context.Context was passed. Every method that
	// takes a context refuses nil the same way, doing nothing.
	ErrNilContext = errors.New("scheduler: nil context")
)

// PanicError is the error of a process, yield or call whose code panicked,
// or called [runtime.Goexit]: its Value is then [ErrGoexit]. It matches
// [ErrPanic] with errors.Is, and unwraps to the panic value when that
// value is an error (so a Goexit matches ErrGoexit too).
type PanicError struct {
	Value any    // the value passed to panic
	Stack []byte // the panicking goroutine's stack, from runtime/debug.Stack
	Where string // what panicked: "Init", "Step", "Close", "handler", "pool" for work given to Call.Go, "Start" for a Goexit of the Start hook, or "DeadLetter" for one of the DeadLetter hook that cut short the carrying out of a step's yields
}

// Error describes the panic without the stack.
func (e *PanicError) Error() string {
	if e.Value == ErrGoexit {
		return fmt.Sprintf("scheduler: runtime.Goexit called in %s", e.Where)
	}
	return fmt.Sprintf("scheduler: panic in %s: %v", e.Where, e.Value)
}

// Is reports whether target is [ErrPanic].
func (e *PanicError) Is(target error) bool { return target == ErrPanic }

// Unwrap returns the panic value if it is an error.
func (e *PanicError) Unwrap() error {
	if err, ok := e.Value.(error); ok {
		return err
	}
	return nil
}

// newPanicError captures the current stack; call it from the deferred
// function that recovered.
func newPanicError(where string, v any) *PanicError {
	return &PanicError{Value: v, Stack: debug.Stack(), Where: where}
}

// procError is err about the process pid, and, if tagged, about its
// yield with tag. It is formatted only when read: a completion that comes
// after its yield's deadline is a normal outcome, not a rare failure, and
// should cost one small allocation, not a formatted string.
type procError struct {
	err    error
	pid    relay.PID
	tag    uint64
	tagged bool
}

// Error formats the error as "err: pid" or "err: pid tag N".
func (e *procError) Error() string {
	if e.tagged {
		return fmt.Sprintf("%v: %v tag %d", e.err, e.pid, e.tag)
	}
	return fmt.Sprintf("%v: %v", e.err, e.pid)
}

// Unwrap returns the sentinel the error wraps, for errors.Is.
func (e *procError) Unwrap() error { return e.err }
