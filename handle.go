package scheduler

import (
	"context"
	"fmt"

	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// The Handle: what Submit returns, the way to a submitted process's
// result.

// Handle names a submitted process and gives access to its result. It is
// a small value; copy it freely. The zero Handle names no process.
type Handle struct {
	p *proc
}

// PID returns the process's PID.
func (h Handle) PID() relay.PID {
	if h.p == nil {
		return relay.PID{}
	}
	return h.p.pid()
}

// Done returns a channel that is closed when the process has ended and its
// result is available. By then Close has returned, the process's names
// are free, its monitors have been told (a process's monitor yield has
// completed; a [Scheduler.Monitor] function has been started in its own
// goroutine, which may not have run yet), and the messages it left unread
// have gone to the DeadLetter hook. The zero Handle's channel is closed:
// there is no process to wait for.
func (h Handle) Done() <-chan struct{} {
	if h.p == nil {
		return closedChan
	}
	return h.p.ended()
}

// Wait blocks until the process ends or ctx is done. It returns the
// process's result and error (a [PanicError] if it panicked, [ErrForced]
// if a shutdown deadline closed it), or ctx's error; a nil ctx is refused
// with [ErrNilContext]. A process that has already ended gives its result
// even if ctx is done. The zero Handle gives [ErrProcessNotFound] at once.
//
// Wait blocks, so the code of a process (its Init, Step and Close, the
// handlers of its yields) must not call it, and nothing checks that it
// does not: a process waiting for its own end gets only ctx's error, or,
// with a ctx that is never done, waits for good, and keeps Shutdown
// waiting for it; waiting for another process holds the worker. A step
// waits for another process with [StepOutput.SpawnAwait],
// [StepOutput.Monitor] or [StepOutput.Request] instead.
func (h Handle) Wait(ctx context.Context) (payload.Payload, error) {
	if ctx == nil {
		return payload.Payload{}, fmt.Errorf("%w: Handle.Wait", ErrNilContext)
	}
	if h.p == nil {
		return payload.Payload{}, ErrProcessNotFound
	}
	// A process that has ended costs one look under its lock: no
	// channel, no select. That is the usual case for a caller that
	// submits a batch and then waits for each handle in turn.
	if res, err, ended := h.p.ending(); ended {
		return res, err
	}
	if done := ctx.Done(); done != nil {
		select {
		case <-h.p.ended():
		case <-done:
			return payload.Payload{}, ctx.Err()
		}
	} else {
		<-h.p.ended() // a context that is never done: a plain receive
	}
	res, err, _ := h.p.ending()
	return res, err
}

// Result returns the process's result and error without blocking. While
// the process has not ended it returns [ErrNotEnded]; for the zero Handle,
// [ErrProcessNotFound].
func (h Handle) Result() (payload.Payload, error) {
	if h.p == nil {
		return payload.Payload{}, ErrProcessNotFound
	}
	res, err, ended := h.p.ending()
	if !ended {
		return payload.Payload{}, ErrNotEnded
	}
	return res, err
}
