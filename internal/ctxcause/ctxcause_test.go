package ctxcause_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/procsched/scheduler/internal/ctxcause"
)

// doneWith is a context done with cause, answering context.Cause through
// ctxcause.
type doneWith struct{ cause error }

func (*doneWith) Deadline() (time.Time, bool) { return time.Time{}, false }
func (*doneWith) Done() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}
func (*doneWith) Err() error { return context.Canceled }
func (d *doneWith) Value(key any) any {
	if ctxcause.Is(key) {
		return ctxcause.Value(d.cause)
	}
	return nil
}

func TestCauseThroughValue(t *testing.T) {
	if ctxcause.Key == nil {
		t.Fatal("context.Cause asked for no key: the module's contexts would answer context.Cause with their Err")
	}
	why := errors.New("why")
	if got := context.Cause(&doneWith{cause: why}); got != why {
		t.Errorf("context.Cause = %v, want %v", got, why)
	}
	// A context derived from it reads the same cause.
	child, cancel := context.WithCancel(&doneWith{cause: why})
	defer cancel()
	if got := context.Cause(child); got != why {
		t.Errorf("context.Cause of a derived context = %v, want %v", got, why)
	}
	if got := ctxcause.Value(nil); got != nil {
		t.Errorf("Value(nil) = %v, want nil: a context not done has no cause", got)
	}
	if ctxcause.Is("another key") {
		t.Error("Is took another key for context.Cause's")
	}
}

func TestEnding(t *testing.T) {
	var mu sync.Mutex
	var e ctxcause.Ending
	mu.Lock()
	done := e.Done()
	ran := make(chan string, 2)
	stop := e.AfterFunc(func() { ran <- "kept" }, &mu)
	stopped := e.AfterFunc(func() { ran <- "stopped" }, &mu)
	if e.Err() != nil || e.Cause() != nil {
		t.Fatalf("not done yet: Err %v, Cause %v", e.Err(), e.Cause())
	}
	mu.Unlock()
	if !stopped() {
		t.Error("a stop before the end did not report that it kept the function from running")
	}
	mu.Lock()
	deadline := fmt.Errorf("late: %w", context.DeadlineExceeded)
	e.End(deadline)
	e.End(errors.New("second")) // done already: stays as it is
	mu.Unlock()
	select {
	case <-done:
	default:
		t.Fatal("the channel Done gave out before the end is not closed")
	}
	select {
	case got := <-ran:
		if got != "kept" {
			t.Fatalf("ran %q", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the registered function did not run")
	}
	if stop() {
		t.Error("a stop after the end reported that it kept the function from running")
	}
	mu.Lock()
	defer mu.Unlock()
	if e.Cause() != deadline {
		t.Errorf("Cause = %v, want the first one", e.Cause())
	}
	if e.Err() != context.DeadlineExceeded {
		t.Errorf("Err = %v for a deadline's cause", e.Err())
	}
	select {
	case <-e.Done():
	default:
		t.Error("Done after the end is not closed")
	}
	var other ctxcause.Ending
	other.End(errors.New("cancelled"))
	if other.Err() != context.Canceled {
		t.Errorf("Err = %v for a cause that is no deadline", other.Err())
	}
	select {
	case <-other.Done():
	default:
		t.Error("Done of a context ended before Done was asked is not closed")
	}
	if len(ran) != 0 {
		t.Errorf("the stopped function ran: %q", <-ran)
	}
}

// asking is a context not done yet that answers context.Cause through
// ctxcause and counts the times it is asked for Key.
type asking struct {
	mu    sync.Mutex
	done  chan struct{}
	asked int
}

func (*asking) Deadline() (time.Time, bool) { return time.Time{}, false }
func (a *asking) Done() <-chan struct{}     { return a.done }
func (a *asking) Err() error {
	select {
	case <-a.done:
		return context.Canceled
	default:
		return nil
	}
}
func (a *asking) Value(key any) any {
	if ctxcause.Is(key) {
		a.mu.Lock()
		a.asked++
		a.mu.Unlock()
		return ctxcause.Value(nil)
	}
	return nil
}

// TestDerivingAsksForTheKey: deriving a context from a live one asks it
// for Key, and the nil answer makes the derived context wait for the
// parent's Done, not for some other context's.
func TestDerivingAsksForTheKey(t *testing.T) {
	parent := &asking{done: make(chan struct{})}
	child, cancel := context.WithCancel(parent)
	defer cancel()
	parent.mu.Lock()
	asked := parent.asked
	parent.mu.Unlock()
	if asked == 0 {
		t.Fatal("context.WithCancel did not ask its parent for context.Cause's key")
	}
	if child.Err() != nil {
		t.Fatalf("the derived context is done before its parent: %v", child.Err())
	}
	close(parent.done)
	select {
	case <-child.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the derived context was not done when its parent was")
	}
}
