package schedtest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/procsched/scheduler"
	"github.com/procsched/scheduler/internal/bridge"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// FakeFunc stands in for the handler of a user command (see
// [scheduler.Handler]). It runs right after the step that yielded the
// command, in the goroutine driving the simulation. It completes the
// yield at once with [Call.Complete], or keeps [Call.Token] to complete
// it later; a returned error (or a panic) completes the yield with that
// error if it is still outstanding and the fake has not completed it (a
// completion a [Faults].DelayCompletion holds back counts as made).
type FakeFunc func(c Call) error

// Fake makes f the handler of user command cmd, replacing any earlier
// fake. A command with no fake completes with an error wrapping
// [scheduler.ErrUnknownCommand], as it does on a scheduler with no
// handler for it. Where [scheduler.Scheduler.SetHandler] refuses the
// handler with [scheduler.ErrInvalidCommand] (f nil, a reserved cmd
// below [scheduler.FirstUserCommand], or one above the scheduler's
// maximum), Fake fails the test with that error and keeps any earlier
// fake.
func (s *Sim) Fake(cmd scheduler.CommandID, f FakeFunc) {
	s.tb.Helper()
	if err := bridge.CheckHandler(uint32(cmd), f == nil); err != nil {
		s.tb.Errorf("schedtest: Fake(%d): %v", cmd, err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fakes[cmd] = f
}

// Reply returns a fake that completes every call at once with data.
func Reply(data any) FakeFunc {
	return func(c Call) error { return c.Complete(data, nil) }
}

// ReplyFunc returns a fake that completes every call at once with what f
// answers for the call's argument. It panics if f is nil, as
// [net/http.HandleFunc] does for a nil handler: the mistake shows where
// it is made, not as a failed call later.
func ReplyFunc(f func(arg any) (any, error)) FakeFunc {
	if f == nil {
		panic("schedtest: ReplyFunc(nil): no function to answer the calls")
	}
	return func(c Call) error { return c.Complete(f(c.Arg)) }
}

// Fail returns a fake that completes every call at once with err. It
// panics if err is nil: a fake that fails without an error would answer
// every call as a success (use [Reply] with nil data for that), and a
// test meant to cover the failure would pass without reaching it.
func Fail(err error) FakeFunc {
	if err == nil {
		panic("schedtest: Fail(nil): a fake that fails needs an error (Reply(nil) answers without one)")
	}
	return func(c Call) error { return c.Complete(nil, err) }
}

// Never returns a fake that never completes a call: a service that does
// not answer. The yield stays outstanding until it is cancelled, times
// out, or its process ends.
func Never() FakeFunc {
	return func(Call) error { return nil }
}

// FakeLater makes cmd's fake one that completes nothing by itself: it
// keeps every call, in order, for the test to complete later through the
// returned [Held].
func (s *Sim) FakeLater(cmd scheduler.CommandID) *Held {
	h := &Held{tb: s.tb}
	s.Fake(cmd, func(c Call) error {
		h.mu.Lock()
		h.calls = append(h.calls, c)
		h.mu.Unlock()
		return nil
	})
	return h
}

// Held keeps the calls of a command faked with [Sim.FakeLater] until the
// test completes them. Its methods may be called from any goroutine.
type Held struct {
	tb    interface{ Fatalf(string, ...any) }
	mu    sync.Mutex // guards calls and taken
	calls []Call
	taken int
}

// Len returns how many calls are held and not yet taken with Next.
func (h *Held) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.calls) - h.taken
}

// Next takes the oldest held call not yet taken; it fails the test if
// there is none.
func (h *Held) Next() Call {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.taken == len(h.calls) {
		h.tb.Fatalf("schedtest: no held call left (%d held in all)", len(h.calls))
	}
	c := h.calls[h.taken]
	h.taken++
	return c
}

// Call is one user command a process yielded, as a fake sees it: the
// counterpart of [scheduler.Call]. It is a value; a fake may keep it.
type Call struct {
	PID relay.PID           // the process that yielded
	Tag uint64              // the yield's tag
	Cmd scheduler.CommandID // the command
	Arg any                 // the yield's argument

	ctx    *callContext
	tok    Token
	inFake bool
}

// Context returns the context for the work of this call, as
// [scheduler.Call.Context] does. It carries the yielding process's values
// ([scheduler.Self] answers its PID). Its Deadline is the one the process
// gave the yield with [scheduler.StepOutput.Timeout], on the virtual
// clock (see [Sim.Now]), while the yield is outstanding. It is done once
// the yield is no longer pending or the process has ended, and
// context.Cause says why: context.Canceled for a completion,
// [scheduler.ErrTimeout] for a deadline that passed (Err is then
// context.DeadlineExceeded), [scheduler.ErrYieldCancelled] for a yield
// the process cancelled, [scheduler.ErrEnded] for the process's end, and
// [scheduler.ErrForced] for a process forced at the shutdown deadline. It
// is not done when the process is merely asked to stop (Terminate, or
// the cancel Shutdown sends), so cleanup work yielded on a cancel gets a
// context that lives until the work is done. The deadline is never
// compared with the wall clock: the context is done at it only when the
// virtual clock reaches it and the yield times out.
//
// While the yield is outstanding, every call of Context returns the same
// context, the one the yield's end makes done with its cause. A call made
// once the yield is no longer pending returns a new context, done
// already, whose cause is context.Canceled whatever ended the yield
// ([scheduler.ErrEnded] or [scheduler.ErrForced] once the process has
// ended), as the scheduler's does: the scheduler keeps no record of why
// a yield ended, so code that wants the cause asks for the context while
// the yield is pending. For the zero Call it is context.Background().
func (c Call) Context() context.Context {
	if c.ctx == nil {
		return context.Background()
	}
	s := c.ctx.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if pd := s.bySeq[c.ctx.seq]; pd != nil && pd.call == c.ctx {
		return c.ctx
	}
	late := &callContext{s: s, p: c.ctx.p, seq: c.ctx.seq, values: c.ctx.values}
	switch {
	case c.ctx.p.forced:
		late.end.End(scheduler.ErrForced)
	case c.ctx.p.ended:
		late.end.End(scheduler.ErrEnded)
	default:
		late.end.End(context.Canceled)
	}
	return late
}

// Complete completes the yield with data and err, as
// [scheduler.Call.Complete] does; see [Token.Complete] for the errors.
// Called while the fake runs, it is a completion at once, which a
// [Faults].DelayCompletion may hold back; called later (on a Call the
// fake kept, or one [Held] keeps), it is delivered as [Token.Complete]
// delivers it.
func (c Call) Complete(data any, err error) error {
	return c.tok.complete(data, err, c.inFake)
}

// Token returns the call's completion, for completing the yield later.
func (c Call) Token() Token { return c.tok }

// Token completes one yield, once, as [scheduler.Completion] does. The
// zero Token (that of the zero [Call]) completes nothing and returns
// [scheduler.ErrProcessNotFound], as the zero Completion does.
type Token struct {
	s   *Sim
	p   *proc
	seq uint64
	tag uint64
}

// Complete completes the yield with data and err. It returns an error
// wrapping [scheduler.ErrYieldNotPending] if the yield has completed
// already (or was cancelled, or timed out), [scheduler.ErrProcessNotFound]
// if its process has ended, and [scheduler.ErrClosed] after Shutdown. Any
// goroutine.
func (t Token) Complete(data any, err error) error {
	return t.complete(data, err, false)
}

func (t Token) complete(data any, err error, now bool) error {
	if t.s == nil {
		return scheduler.ErrProcessNotFound
	}
	s := t.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return scheduler.ErrClosed
	}
	// At once: by Call.Complete while the call's fake runs, not by a
	// Call kept and completed later.
	now = now && s.faking == t.seq
	ev := scheduler.Event{Tag: t.tag, Data: data, Error: err}
	if !t.p.ended && s.heldBack(t.seq) {
		// A completion accepted and held back is the yield's: any other is
		// refused, as if it had arrived.
		return fmt.Errorf("%w: %v tag %d", scheduler.ErrYieldNotPending, t.p.pid, t.tag)
	}
	if now && !t.p.ended && s.bySeq[t.seq] != nil && s.chance(s.cfg.faults.DelayCompletion) {
		s.inject("delay the completion of %v tag %d past the next timer", t.p.pid, t.tag)
		s.delayed = append(s.delayed, delayed{p: t.p, seq: t.seq, ev: ev})
		return nil
	}
	return s.complete(t.p, t.seq, ev)
}

// YieldKind says which [scheduler.StepOutput] method wrote a [Yield].
type YieldKind uint8

// The yield kinds.
const (
	KindCommand    YieldKind = iota + 1 // Yield: a user command
	KindTell                            // Tell
	KindSpawn                           // Spawn
	KindSpawnAwait                      // SpawnAwait
	KindSleep                           // Sleep or SleepUntil
	KindTellName                        // TellName
	KindMonitor                         // Monitor
	KindRequest                         // Request or RequestName
	KindReply                           // Reply
	KindCancel                          // Cancel
	KindTimeout                         // Timeout of a yield of an earlier step
)

var kindNames = [...]string{"", "Command", "Tell", "Spawn", "SpawnAwait", "Sleep", "TellName", "Monitor", "Request", "Reply", "Cancel", "Timeout"}

// String returns the kind's name.
func (k YieldKind) String() string {
	if int(k) < len(kindNames) && k != 0 {
		return kindNames[k]
	}
	return fmt.Sprintf("YieldKind(%d)", uint8(k))
}

// Yield is one yield a process made, as [Sim.Yields] lists it.
type Yield struct {
	Step int       // the process's step that wrote it; the first is 1
	Kind YieldKind // which method wrote it
	Tag  uint64
	Cmd  scheduler.CommandID // KindCommand: the command
	// Arg is the command's argument, the message, the request's body, the
	// reply's data, or the child Process of a spawn.
	Arg    any
	To     relay.PID        // Tell, Monitor, Request: the other process; Reply: the asker
	Name   string           // TellName, RequestName
	Method string           // Spawn, SpawnAwait: the entry point
	Input  payload.Payloads // Spawn, SpawnAwait: the input
	At     time.Time        // Sleep: when it fires, on the virtual clock
	// Deadline is the deadline Timeout gave the yield in the same step, or
	// the new deadline of a KindTimeout; zero if none.
	Deadline time.Time
	Err      error // Reply: the error answered
}

// String describes the yield for test failures.
func (y Yield) String() string {
	switch y.Kind {
	case KindCommand:
		return fmt.Sprintf("step %d: Command(%d, tag=%d, arg=%v)", y.Step, y.Cmd, y.Tag, y.Arg)
	case KindTell:
		return fmt.Sprintf("step %d: Tell(%v, %v)", y.Step, y.To, y.Arg)
	case KindSleep:
		return fmt.Sprintf("step %d: Sleep(tag=%d, until +%v)", y.Step, y.Tag, y.At.Sub(Epoch))
	}
	return fmt.Sprintf("step %d: %v(tag=%d)", y.Step, y.Kind, y.Tag)
}
