package scheduler_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
)

// Stress: fork-join by spawn and await computes the right result on every
// configuration (a Fibonacci tree of processes).
//
// Sizes: see stressConfigs (helpers_test.go) for how -short shrinks the
// run and stressScale for how the stress build tag enlarges it.

// fibProc computes fib(n) by spawning and awaiting fib(n-1) and fib(n-2).
// It counts the processes started in spawned, its leaves in prog and,
// when steps is set, every step.
type fibProc struct {
	n, sum, waiting int
	spawned, steps  *atomic.Int64
	prog            *progress
}

func (p *fibProc) Init(context.Context, string, payload.Payloads) error {
	p.spawned.Add(1)
	return nil
}

func (p *fibProc) Close() {}

func (p *fibProc) Step(evs []sched.Event, out *sched.StepOutput) error {
	if p.steps != nil {
		p.steps.Add(1)
	}
	if p.n < 2 {
		p.prog.tick()
		out.Done(payload.Of(p.n))
		return nil
	}
	if len(evs) == 0 {
		out.SpawnAwait(1, &fibProc{n: p.n - 1, spawned: p.spawned, steps: p.steps, prog: p.prog}, "fib", nil)
		out.SpawnAwait(2, &fibProc{n: p.n - 2, spawned: p.spawned, steps: p.steps, prog: p.prog}, "fib", nil)
		p.waiting = 2
		return nil
	}
	for _, ev := range evs {
		if ev.Error != nil {
			return ev.Error
		}
		v, err := payload.As[int](ev.Result())
		if err != nil {
			return err
		}
		p.sum += v
		p.waiting--
	}
	if p.waiting == 0 {
		out.Done(payload.Of(p.sum))
	}
	return nil
}

// TestStressFibForkJoin: fib(20) by SpawnAwait of fib(n-1) and fib(n-2)
// gives the right value with the right number of processes.
func TestStressFibForkJoin(t *testing.T) {
	n := 20
	if stressScale > 1 {
		n = 25
	}
	fib := func(n int) int {
		a, b := 0, 1
		for range n {
			a, b = b, a+b
		}
		return a
	}
	for _, cfg := range stressConfigs(t, 8, 4) {
		if !t.Run(cfg.String(), func(t *testing.T) {
			var prog progress
			var spawned atomic.Int64
			s := newScheduler(t, cfg.options()...)
			h, err := s.Submit(context.Background(), &fibProc{n: n, spawned: &spawned, prog: &prog}, "fib", nil)
			require.NoError(t, err)
			awaitProgress(t, s, &prog, h.Done(), "fib", nil)
			res, err := h.Wait(context.Background())
			require.NoError(t, err)
			require.Equal(t, payload.Of(fib(n)), res, "fib(%d)", n)
			// fib(n) spawns 2*fib(n+1)-1 processes in all.
			require.Equal(t, int64(2*fib(n+1)-1), spawned.Load(), "processes started")
		}) {
			break // one failing configuration is enough to report
		}
	}
}
