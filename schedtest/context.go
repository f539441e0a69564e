package schedtest

import (
	"context"
	"time"

	"github.com/procsched/scheduler/internal/ctxcause"
)

// callContext is the context of one fake's call: the yield seq of p (see
// [Call.Context]). It is listed in the yield's pending entry while the
// yield is outstanding, so that whatever ends the yield (its completion,
// a cancel, a deadline, the process's end) ends the context with a cause.
type callContext struct {
	s      *Sim
	p      *proc
	seq    uint64
	values context.Context // the process context's values, without its cancellation
	end    ctxcause.Ending // guarded by Sim.mu
}

// Deadline implements context.Context: the deadline the process gave the
// yield ([scheduler.StepOutput.Timeout]) while the yield is outstanding,
// on the virtual clock.
func (c *callContext) Deadline() (time.Time, bool) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if pd := c.s.bySeq[c.seq]; pd != nil && pd.deadline && pd.timerAt != 0 {
		return origin.Add(time.Duration(pd.timerAt)), true
	}
	return time.Time{}, false
}

// Done implements context.Context.
func (c *callContext) Done() <-chan struct{} {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	return c.end.Done()
}

// Err implements context.Context: DeadlineExceeded once the yield's
// deadline passed, Canceled once it ended otherwise.
func (c *callContext) Err() error {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	return c.end.Err()
}

// Value implements context.Context: the process context's values, and
// the cause for context.Cause once the context is done.
func (c *callContext) Value(key any) any {
	if ctxcause.Is(key) {
		c.s.mu.Lock()
		cause := c.end.Cause()
		c.s.mu.Unlock()
		return ctxcause.Value(cause)
	}
	return c.values.Value(key)
}

// AfterFunc arranges for f to run, in its own goroutine, once the
// context is done; stop reports whether it stopped f from being run.
// context.AfterFunc and the contexts derived from this one use it, so
// that they need no goroutine to wait.
func (c *callContext) AfterFunc(f func()) (stop func() bool) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	return c.end.AfterFunc(f, &c.s.mu)
}

// String makes the context printable, as context.Context values are.
func (c *callContext) String() string {
	return "schedtest.callContext(" + c.p.pid.String() + ")"
}
