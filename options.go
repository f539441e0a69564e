package scheduler

import (
	"fmt"
	"runtime"
	"time"
)

// Option configures a [Scheduler] in [New].
type Option interface {
	apply(*config) error
}

type optionFunc func(*config) error

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

	// Measurement knobs, set only by this package's tests and benchmarks.
	unfair     bool // the seed design: no global-queue turn, no next-slot cap, no step budget
	fixedBatch bool // take a fixed batch from the global queue instead of sizing it
}

const (
	// DefaultStepBudget is the default for [WithStepBudget].
	DefaultStepBudget = 16
	// DefaultGlobalBatch is the default for [WithGlobalBatch].
	DefaultGlobalBatch = 128
	// DefaultWatchdogThreshold is the default for [WithWatchdog].
	DefaultWatchdogThreshold = 10 * time.Millisecond
)

func defaultConfig() config {
	return config{
		workers:     runtime.GOMAXPROCS(0),
		stepBudget:  DefaultStepBudget,
		globalBatch: DefaultGlobalBatch,
		watchdog:    DefaultWatchdogThreshold,
	}
}

// WithWorkers sets the number of worker goroutines (default GOMAXPROCS).
// n must be at least 1.
func WithWorkers(n int) Option {
	return optionFunc(func(c *config) error {
		if n < 1 {
			return fmt.Errorf("%w: WithWorkers(%d): need at least 1", ErrInvalidOption, n)
		}
		c.workers = n
		return nil
	})
}

// WithNode sets the node number that every PID of this scheduler carries
// (default 0, the local node). Messages and completions addressed to
// another node's PIDs are rejected with [ErrProcessNotFound].
func WithNode(node uint32) Option {
	return optionFunc(func(c *config) error {
		c.node = node
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
// be at least 1.
func WithGlobalBatch(n int) Option {
	return optionFunc(func(c *config) error {
		if n < 1 {
			return fmt.Errorf("%w: WithGlobalBatch(%d): need at least 1", ErrInvalidOption, n)
		}
		c.globalBatch = n
		return nil
	})
}

// WithHandler registers h for command cmd, as [Scheduler.SetHandler] does
// after New. cmd must be at least [FirstUserCommand] and h non-nil.
func WithHandler(cmd CommandID, h Handler) Option {
	return optionFunc(func(c *config) error {
		if err := checkHandler(cmd, h); err != nil {
			return err
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
// A slow step is counted in [Stats].SlowSteps and passed to
// [Hooks].SlowStep; meanwhile idle workers take the work queued behind it.
// The threshold must not be negative.
func WithWatchdog(threshold time.Duration) Option {
	return optionFunc(func(c *config) error {
		if threshold < 0 {
			return fmt.Errorf("%w: WithWatchdog(%v): negative threshold", ErrInvalidOption, threshold)
		}
		c.watchdog = threshold
		return nil
	})
}

// Hooks are optional functions the scheduler calls on lifecycle events.
// Each runs outside every scheduler lock; see each field for the goroutine
// it runs on. A nil field costs nothing.
type Hooks struct {
	// SlowStep is called by the watchdog goroutine when a step has been
	// running longer than the watchdog's threshold; once per slow run.
	SlowStep func(SlowStep)
}

// WithHooks sets the lifecycle hooks.
func WithHooks(h Hooks) Option {
	return optionFunc(func(c *config) error {
		c.hooks = h
		return nil
	})
}
