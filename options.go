package scheduler

import (
	"fmt"
	"runtime"
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
}

const (
	// DefaultStepBudget is the default for [WithStepBudget].
	DefaultStepBudget = 16
	// DefaultGlobalBatch is the default for [WithGlobalBatch].
	DefaultGlobalBatch = 16
)

func defaultConfig() config {
	return config{
		workers:     runtime.GOMAXPROCS(0),
		stepBudget:  DefaultStepBudget,
		globalBatch: DefaultGlobalBatch,
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

// WithHandler registers h for command cmd, as [Scheduler.Handle] does
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
