package scheduler

import (
	"fmt"
	"log/slog"
	"runtime"
	"time"

	"github.com/procsched/scheduler/relay"
)

// Option configures a [Scheduler] in [New]. New applies its options in
// order, and where two set the same thing the later wins: of two
// WithWorkers the second counts, a second [WithHooks] replaces every hook
// the first set (it does not add to them), and of two [WithHandler] for
// one command the second's handler is registered. A nil Option is
// ignored.
type Option interface {
	apply(*config) error
}

type optionFunc func(*config) error

// apply runs the option on c. Called by New.
func (f optionFunc) apply(c *config) error { return f(c) }

// config holds every setting, defaults in one place (defaultConfig).
type config struct {
	workers     int
	node        uint32
	stepBudget  int
	globalBatch int
	handlers    map[CommandID]Handler
	watchdog    time.Duration // 0: off
	hooks       Hooks
	mailbox     mailboxLimit
	maxProcs    int
	logger      *slog.Logger
	transport   relay.Receiver
	pool        poolConfig
	callerHelp  bool

	// Measurement knobs, set only by this package's tests and benchmarks.
	unfair     bool // fairness off, for tests that show what it buys: no global-queue turn, no next-slot cap, no step budget
	fixedBatch bool // take a fixed batch from the global queue instead of sizing it
}

const (
	// DefaultStepBudget is the default for [WithStepBudget].
	DefaultStepBudget = 16
	// DefaultGlobalBatch is the default for [WithGlobalBatch].
	DefaultGlobalBatch = 128
	// DefaultWatchdogThreshold is the default for [WithWatchdog]: twice
	// the Go runtime's 10 ms time slice, which bounds the wait for a
	// processor that the watchdog may count for a step, and above the
	// noise left by the operating system descheduling workers, yet low
	// enough that a step blocked for 50 ms is reported. docs/tuning.md
	// has the measurements.
	DefaultWatchdogThreshold = 20 * time.Millisecond
)

// maxGlobalBatch is the largest batch WithGlobalBatch accepts: a worker
// that takes a batch this large holds room for it, 512 KiB.
const maxGlobalBatch = 1 << 16

// maxWorkers is the most workers WithWorkers accepts, and the most the
// default gives. A worker that runs out of work looks at every other
// worker's queue, and one that parks looks at every queue again, so the
// cost of finding work grows with the number of workers, and that of
// starting and stopping them with its square: far more workers than
// processors add no parallelism, only that cost (on two processors, 1,024
// workers settle in a tenth of a second, 8,192 in eight seconds, and
// 65,536 had not started in ten minutes).
const maxWorkers = 1024

// A state word names the worker that runs the process (see workerShift):
// every worker, and the helper of WithCallerHelp after the last, must fit.
var _ [int(workerMask) + 1 - (maxWorkers + 1)]struct{}

// defaultConfig returns the configuration New starts from. Called by New.
func defaultConfig() config {
	return config{
		workers:     min(runtime.GOMAXPROCS(0), maxWorkers),
		stepBudget:  DefaultStepBudget,
		globalBatch: DefaultGlobalBatch,
		watchdog:    DefaultWatchdogThreshold,
		pool:        poolConfig{size: DefaultPoolSize, queue: DefaultPoolQueue, policy: PoolWait},
	}
}

// WithWorkers sets the number of worker goroutines (default GOMAXPROCS,
// or 1024 if GOMAXPROCS is larger). n must be from 1 to 1024: more
// workers than processors add no parallelism, and every worker looking
// for work looks at the queues of all the others.
func WithWorkers(n int) Option {
	return optionFunc(func(c *config) error {
		if n < 1 || n > maxWorkers {
			return fmt.Errorf("%w: WithWorkers(%d): need 1 to %d", ErrInvalidOption, n, maxWorkers)
		}
		c.workers = n
		return nil
	})
}

// WithNode sets the node number that every PID of this scheduler carries
// (default 0). Messages and completions addressed to another node's PIDs,
// whatever their number, 0 included, are rejected with
// [ErrProcessNotFound], unless [WithTransport] carries them.
func WithNode(node uint32) Option {
	return optionFunc(func(c *config) error {
		c.node = node
		return nil
	})
}

// WithTransport routes messages for PIDs of other nodes (whose Node
// differs from this scheduler's, see [WithNode]) to t, a transport such as
// the one in this repository's remote module, instead of failing them with
// [ErrProcessNotFound]. Messages told by processes, sent with
// [Scheduler.Send] or [Scheduler.Tell], and returned to senders on other
// nodes all go through t.Send.
//
// t.Send must not block: the scheduler calls it on its workers. An error
// from it is the sender's refusal, exactly as a local one: Send and Tell
// return it, and a process that told the message gets it back as an
// undeliverable message. A transport that learns of a failure later hands
// the message back to [Scheduler.Send] with Err set.
//
// A PID whose ID is 0 (the zero PID, say) names no process on any node:
// a message or monitor for one is refused as a local one would be
// ([ErrProcessNotFound], or [ExitGone] at once) and never reaches t.
func WithTransport(t relay.Receiver) Option {
	return optionFunc(func(c *config) error {
		if t == nil {
			return fmt.Errorf("%w: WithTransport(nil)", ErrInvalidOption)
		}
		c.transport = t
		return nil
	})
}

// WithStepBudget sets how many consecutive steps a process that keeps
// continuing may run before it is requeued behind other work (default
// [DefaultStepBudget]). n must be at least 1.
func WithStepBudget(n int) Option {
	return optionFunc(func(c *config) error {
		if n < 1 {
			return fmt.Errorf("%w: WithStepBudget(%d): need at least 1", ErrInvalidOption, n)
		}
		c.stepBudget = n
		return nil
	})
}

// WithGlobalBatch sets the most processes a worker moves from the global
// queue into its own queue at once (default [DefaultGlobalBatch]). n must
// be from 1 to 65536. A worker takes a fair share of what is queued, at
// most n, and holds room for the batches it takes, grown as it takes
// larger ones (8 bytes a process), so that a large n costs memory only
// on the workers that take such batches.
func WithGlobalBatch(n int) Option {
	return optionFunc(func(c *config) error {
		if n < 1 || n > maxGlobalBatch {
			return fmt.Errorf("%w: WithGlobalBatch(%d): need 1 to %d", ErrInvalidOption, n, maxGlobalBatch)
		}
		c.globalBatch = n
		return nil
	})
}

// WithHandler registers h for command cmd, as [Scheduler.SetHandler] does
// after New. cmd must be from [FirstUserCommand] to 65536 and h non-nil,
// else New's error wraps both [ErrInvalidOption] and [ErrInvalidCommand].
func WithHandler(cmd CommandID, h Handler) Option {
	return optionFunc(func(c *config) error {
		if err := checkHandler(cmd, h); err != nil {
			return fmt.Errorf("%w: WithHandler: %w", ErrInvalidOption, err)
		}
		if c.handlers == nil {
			c.handlers = make(map[CommandID]Handler)
		}
		c.handlers[cmd] = h
		return nil
	})
}

// WithWatchdog sets the threshold above which the watchdog reports a step
// as slow (default [DefaultWatchdogThreshold]); 0 turns the watchdog off.
// A step is slow when it has run or blocked inside Step for longer than
// the threshold: the watchdog does not count time that its worker
// goroutine spent waiting for a processor while other goroutines held
// them, nor time the worker spent in the scheduler's code around the
// step; but a handler, hook or spawned child's Init that blocks the
// worker of a process around its step, before the watchdog watched that
// worker, is reported as a slow step of the process, as the watchdog
// cannot tell it from the step. A slow step is counted in
// [Stats].SlowSteps and passed to [Hooks].SlowStep. Apart from that, once
// one process has held a worker for the threshold of wall time, for
// whatever reason, idle workers take the work queued behind it. The
// threshold must not be negative.
func WithWatchdog(threshold time.Duration) Option {
	return optionFunc(func(c *config) error {
		if threshold < 0 {
			return fmt.Errorf("%w: WithWatchdog(%v): negative threshold", ErrInvalidOption, threshold)
		}
		c.watchdog = threshold
		return nil
	})
}

// WithMaxProcesses bounds the number of live processes (submitted or
// spawned and not yet ended, those in Init included). A Submit beyond it
// fails with [ErrTooManyProcesses]; so does a spawn, as the completion of
// its yield. n must be at least 1; the default is no limit.
func WithMaxProcesses(n int) Option {
	return optionFunc(func(c *config) error {
		if n < 1 {
			return fmt.Errorf("%w: WithMaxProcesses(%d): need at least 1", ErrInvalidOption, n)
		}
		c.maxProcs = n
		return nil
	})
}

// WithCallerHelp makes a goroutine outside the workers that starts
// processes (with [Scheduler.Submit] or [Scheduler.Spawn]) far faster
// than the workers run them run some of the queued processes itself. Once
// a thousand or more processes wait on the global queue ahead of its
// start (counted in the stretch of the queue its start went into: a few
// thousand in all just after the queue has grown), such a caller already
// yields its processor once every few dozen starts (see Submit); with
// this option it instead takes up to 128 processes from the head of that
// queue, runs them on its own goroutine as a worker would, and returns
// from the start without yielding. One caller helps at a time; another
// that comes to that point meanwhile yields as without the option.
// Starts a step makes through its [StepOutput], and a handler through
// its [Call], never help. A step or handler that calls Submit or Spawn
// itself is a caller like any other: it may run queued processes inside
// its own step or handler, with what follows.
//
// It makes a loop that starts many short processes faster: the processes
// it runs were queued by the same loop shortly before, and their records
// are still in its core's caches; and where other programs keep the
// machine's cores busy, the caller runs what the workers cannot.
// docs/benchmarks.md has the measurements.
//
// The price is that Submit and Spawn then run other processes' steps,
// and their Close, the handlers of their commands, the Init of the
// children their steps spawn and the Start and End hooks, on the
// caller's goroutine, before they return:
//
//   - A caller must not hold a lock (or anything else) that a step may
//     wait for, since the step would wait for the caller that runs it.
//   - Such a step is not watched by the watchdog, and a long one holds
//     the start that runs it up as long.
//   - A step that panics ends its process with a [PanicError], as on a
//     worker; the start goes on.
//   - Shutdown called by such a step (or by a handler or hook it runs)
//     cannot wait for the stop, as on a worker: it begins the shutdown
//     and returns an error wrapping [ErrShutdownStarted]. Shutdown
//     called elsewhere returns only once a help under way has ended.
//   - A panic the scheduler does not recover (one raised by a hook,
//     which on a worker would end the program) goes on out of Submit or
//     Spawn; the processes the caller had taken and not run go back to
//     the global queue, and the scheduler goes on.
//
// A caller's own process's Init still runs first, and the start's result
// is the same: the option changes where queued processes run, not what
// a start does or returns.
//
// A helping caller counts as one more worker, which any number of
// workers leaves room for.
func WithCallerHelp() Option {
	return optionFunc(func(c *config) error {
		c.callerHelp = true
		return nil
	})
}

// WithLogger makes the scheduler log through l: recovered panics at Error,
// slow steps and processes forced at a shutdown deadline at Warn, the
// start and end of Shutdown at Info. The default is silence. Logging
// happens outside every scheduler lock, on the goroutine where the event
// happened.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) error {
		c.logger = l
		return nil
	})
}
