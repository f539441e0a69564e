package scheduler

import (
	"time"

	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// Hooks are optional functions the scheduler calls on lifecycle events.
// A nil hook costs nothing. Each runs outside every scheduler lock, on the
// goroutine named at its field, and delays whatever that goroutine does
// next: keep hooks short and never block in them. Nor should a hook
// panic: the scheduler recovers panics in processes' code and handlers,
// not in hooks, and a hook's panic that reaches one of its own goroutines
// ends the program (for one on a helping caller, see [WithCallerHelp]).
// A hook that calls runtime.Goexit (as testing.T's FailNow does) ends
// the goroutine it runs on, which nothing can prevent; the scheduler
// first finishes what the call was in the middle of, and a worker, the
// watchdog, the blocking pool and the shutdown's goroutine each go on on
// a new goroutine. The Start hook's Goexit fails the start as a Goexit
// in Init does (see [Process]). The End hook's lets the end complete.
// The Panic hook's counts as its return: the process ends (its start
// fails, or its yield completes) with the PanicError the hook was
// given. The DeadLetter hook's counts as its return too: an end that
// left messages unread reports the rest of them and completes; on a
// worker carrying out a step's yields (a Tell or a Reply, say), it
// fails that process, whose run it cut short, with a [PanicError] for
// [ErrGoexit] whose Where is "DeadLetter"; on a caller's goroutine (a
// Tell, Send or Reply from outside the scheduler), it ends that
// goroutine, with the message counted and nothing left locked. The
// SlowStep hook's leaves the step reported, and the watchdog reports
// later slow steps as before.
// A hook may call the scheduler's methods, except Shutdown in the two
// that can run on the goroutine that called Submit or Spawn (see Start
// and Panic).
type Hooks struct {
	// Start is called once per process, after its Init succeeded and
	// before its first step: on the goroutine that called Submit or
	// Spawn (which run Init there), or on the worker (or helping caller:
	// see [WithCallerHelp]) that carried out a step's spawn. The
	// process it reports is published only once the hook returns, as
	// after Init: until then a message to it, a Terminate or a name for
	// it is refused with [ErrProcessNotFound], and nothing, not even a
	// shutdown deadline, can end it, so its End hook always comes after
	// its Start hook. On the goroutine that called Submit or Spawn the
	// hook must not call Shutdown, as Init must not: Shutdown would wait
	// for the process to end, whatever its deadline.
	Start func(StartInfo)
	// End is called once per process that started, after Close returned
	// and before its Handle reports the end: on the worker that ran its
	// last step (or the caller that ran it, see [WithCallerHelp]), or,
	// for a process forced at a shutdown deadline, on the scheduler's own
	// goroutine that carries the shutdown through, unless a worker was
	// running the process then (a step in progress, say): that worker
	// forces it, and calls the hook, once the step returns. By then the
	// process has gone: Register of its PID fails with
	// [ErrProcessNotFound], no name finds it any more ([Scheduler.Lookup])
	// and a Monitor of it reports [ExitGone].
	// Setting it costs each process two loads of the scheduler's coarse
	// clock, a counter per step, and 16 bytes more in its record, and
	// each worker a clock read every 64 rounds.
	End func(EndInfo)
	// Panic is called when a process's Init, Step or Close, a handler, or
	// work a handler gave to [Call.Go] panics, on the goroutine that
	// recovered the panic (for such work, the blocking pool's), before the
	// process ends (or the yield completes) with the PanicError. For a
	// panic in the Init of a process started by Submit or Spawn (or in
	// the Close that follows it) that is the goroutine that called
	// Submit or Spawn, which must not call Shutdown there, as Init must
	// not: the process is counted out only once the hook returns, and
	// Shutdown would wait for it.
	Panic func(PanicInfo)
	// SlowStep is called by the watchdog goroutine when it finds a step
	// slow (see [WithWatchdog]); once per slow step.
	SlowStep func(SlowStepInfo)
	// DeadLetter is called for each message that reached no process
	// (see [DeadLetter]), on the goroutine that found it so: the worker
	// that ended its recipient, the goroutine that sent it, or the one
	// that handed back a bounce.
	DeadLetter func(DeadLetter)
}

// StartInfo describes a process that has started.
type StartInfo struct {
	PID    relay.PID
	Method string
}

// EndInfo describes a process that has ended.
type EndInfo struct {
	PID    relay.PID
	Method string
	Result payload.Payload // the result given to Done
	Err    error           // why it failed; nil if it finished with Done
	Steps  uint64          // Step calls
	// Duration is from the end of Init to the end of Close, on the
	// scheduler's coarse clock: every worker advances it each time it
	// publishes its counters (every 64 scheduling rounds, and when it
	// goes idle), the watchdog at each sample, and a worker when it
	// fires timers, so reading it costs no clock call. It is exact to a
	// few milliseconds (a quarter of the watchdog's threshold while
	// workers are busy), and may be 0 for a process shorter than that.
	Duration time.Duration
	Forced   bool // closed at a shutdown deadline
}

// PanicInfo describes a panic the scheduler recovered.
type PanicInfo struct {
	PID    relay.PID
	Method string
	Err    *PanicError // the panic value, stack, and what panicked
}

// WithHooks sets the lifecycle hooks.
func WithHooks(h Hooks) Option {
	return optionFunc(func(c *config) error {
		c.hooks = h
		return nil
	})
}

// SlowStepInfo describes a step that the watchdog found slow: one that ran or
// blocked inside Step for longer than the watchdog's threshold (see
// [WithWatchdog]).
type SlowStepInfo struct {
	PID    relay.PID // the process
	Method string    // its entry point
	Worker int       // the worker running it
	// Duration is the time the watchdog counted for the step when it
	// reported it: the time between its samples that found the worker in
	// this step while other goroutines did not hold the processors. It
	// is at least the threshold, and leaves out the start of the step
	// (before the watchdog looked), so the step's wall time is longer.
	Duration time.Duration
}
