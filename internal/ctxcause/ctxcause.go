// Package ctxcause lets the module's own context types (a process's
// context, a handler's call context, and the test kit's) answer
// context.Cause as the context package's own contexts do.
//
// context.Cause(ctx) asks ctx.Value for an unexported key of the context
// package and reads the cause from the context it gets back. A context
// type outside that package can answer the same way: when asked for
// that key, it returns a cancelled context of the context package that
// carries its cause. The key is learned once, by asking context.Cause
// about a context that records the key it is asked for.
package ctxcause

import (
	"context"
	"time"
)

// Key is the key context.Cause asks a context's Value for; nil if
// context.Cause asked for none (it then falls back to the context's
// Err, and so does context.Cause of the module's contexts).
var Key = func() any {
	var spy keySpy
	_ = context.Cause(&spy)
	return spy.key
}()

// Is reports whether key is Key, the key of context.Cause's question.
// Any goroutine.
func Is(key any) bool { return Key != nil && key == Key }

// Value is the answer to Value(Key) of a context done with cause: a
// cancelled context from the context package that carries the cause,
// which context.Cause then reads. While cause is nil (the context is not
// done) it is nil, so that context.Cause does not find some other
// context's cause. Two callers ask: context.Cause, and the context
// package when it derives a context (WithCancel, AfterFunc, ...) from
// one whose Done channel was open a moment before, which it looks up
// the same way to find a parent of its own kind. That one gets nil, or,
// if the context was done in between, a context whose Done is not the
// parent's, which the context package then passes over. It allocates
// only for a cause that is not nil. Any goroutine.
func Value(cause error) any {
	if cause == nil {
		return nil
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	return ctx.Value(Key)
}

// keySpy is a cancelled context that records the last key it was asked
// for.
type keySpy struct{ key any }

func (*keySpy) Deadline() (time.Time, bool) { return time.Time{}, false }
func (*keySpy) Done() <-chan struct{}       { return closed }
func (*keySpy) Err() error                  { return context.Canceled }
func (s *keySpy) Value(key any) any         { s.key = key; return nil }

// closed is a closed channel: the Done of a context that is done.
var closed = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()
