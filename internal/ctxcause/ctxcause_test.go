package ctxcause_test

import (
	"context"
	"errors"
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
