package ctxcause

import (
	"context"
	"errors"
	"sync"
)

// Ending is the done state of a context that one event ends, once, with a
// cause: the cause, the channel Done gave out, and the functions
// AfterFunc registered. The context's owner guards it with a lock of its
// own: every method is called with that lock held, and AfterFunc is given
// the lock for the stop function it returns. The zero Ending is a context
// not done.
type Ending struct {
	cause error         // why the context is done; nil while it is not
	done  chan struct{} // made on demand by Done
	after AfterFuncs    // functions to run when it is done
}

// Cause returns why the context is done, nil while it is not. Called
// with the owner's lock held.
func (e *Ending) Cause() error { return e.cause }

// Done is the context's Done: a channel closed once the context is done.
// Called with the owner's lock held.
func (e *Ending) Done() <-chan struct{} {
	if e.done == nil {
		if e.cause != nil {
			return closed
		}
		e.done = make(chan struct{})
	}
	return e.done
}

// Err is the context's Err: nil while it is not done,
// context.DeadlineExceeded for a cause that is a deadline (one that
// wraps it), context.Canceled for any other. Called with the owner's lock
// held.
func (e *Ending) Err() error {
	switch {
	case e.cause == nil:
		return nil
	case errors.Is(e.cause, context.DeadlineExceeded):
		return context.DeadlineExceeded
	}
	return context.Canceled
}

// AfterFunc arranges for f to run, in its own goroutine, once the context
// is done (at once if it is), and returns its stop function, which takes
// mu, the owner's lock. Called with mu held.
func (e *Ending) AfterFunc(f func(), mu sync.Locker) (stop func() bool) {
	if e.cause != nil {
		go f()
		return func() bool { return false }
	}
	return e.after.Add(f, mu)
}

// End makes the context done with cause, a non-nil error, and starts
// the functions AfterFunc registered; a context done already stays as it
// is. Called with the owner's lock held.
func (e *Ending) End(cause error) {
	if e.cause != nil {
		return
	}
	e.cause = cause
	if e.done != nil {
		close(e.done)
	}
	e.after.Run()
}

// AfterFuncs are the functions registered with a context's AfterFunc that
// have not run yet. The context's owner guards them with a lock of its
// own.
type AfterFuncs []*afterFunc

// afterFunc is one registered function; f is nil once it ran or was
// stopped.
type afterFunc struct{ f func() }

// Add registers f and returns its stop function, which takes mu and
// reports whether it kept f from running. Called with mu held.
func (a *AfterFuncs) Add(f func(), mu sync.Locker) (stop func() bool) {
	af := &afterFunc{f: f}
	*a = append(*a, af)
	return func() bool {
		mu.Lock()
		defer mu.Unlock()
		if af.f == nil {
			return false
		}
		af.f = nil
		for i, x := range *a {
			if x == af {
				*a = append((*a)[:i], (*a)[i+1:]...)
				break
			}
		}
		return true
	}
}

// Run starts every registered function, each in its own goroutine, and
// forgets them. Called with the owner's lock held.
func (a *AfterFuncs) Run() {
	for _, af := range *a {
		if af.f != nil {
			go af.f()
			af.f = nil
		}
	}
	*a = nil
}
