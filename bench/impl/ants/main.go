// Command ants runs the task-shaped benchmark workloads (spawn, fan-out,
// fib, skynet) on github.com/panjf2000/ants/v2, as its README shows: a
// Pool of a fixed capacity, Submit for every task, a sync.WaitGroup to
// wait for them. Two capacities are tried, "cpu" (GOMAXPROCS workers) and
// "wide" (10,000 workers, the README's example); the report keeps the
// faster.
//
// Fork-join (fib, skynet) runs as continuations (see internal/pooltask):
// a task that waited for its children would deadlock a full pool. Nested
// submits use a Nonblocking pool and run a task on the submitting worker
// when the pool is full (ErrPoolOverload), the usual caller-runs policy;
// the default blocking Submit would deadlock once every worker blocks in
// Submit.
//
//	go run ./impl/ants -workload fib -variant cpu -scale 1
package main

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/panjf2000/ants/v2"

	"github.com/procsched/scheduler/bench/internal/pooltask"
	"github.com/procsched/scheduler/bench/internal/workload"
)

// wideCapacity is the pool capacity of the "wide" variant.
const wideCapacity = 10_000

func main() {
	workload.Main("ants", workload.PoolEntries(wideCapacity, skynet, spawn, fanOut, fib))
}

func spawn(m *workload.Meter, sz workload.Sizes, size int) (workload.Outcome, error) {
	p, err := ants.NewPool(size)
	if err != nil {
		return workload.Outcome{}, err
	}
	defer p.Release()
	n := sz.SpawnProcesses
	var sum atomic.Int64
	var wg sync.WaitGroup
	m.Start()
	wg.Add(n)
	for i := range n {
		if err := p.Submit(func() {
			sum.Add(int64(i))
			wg.Done()
		}); err != nil {
			return workload.Outcome{}, err
		}
	}
	wg.Wait()
	m.Stop()
	got := sum.Load()
	return workload.Outcome{Detail: fmt.Sprintf("sum=%d", got)}, workload.Check("sum of results", got, workload.SpawnSum(n))
}

// counter is one receiver's count, on a cache line of its own.
type counter struct {
	n atomic.Int64
	_ [56]byte // keeps neighbouring receivers' counts off this line
}

func fanOut(m *workload.Meter, sz workload.Sizes, size int) (workload.Outcome, error) {
	// A pool has no addressable receivers: a message is a task that
	// updates its receiver's state.
	p, err := ants.NewPool(size)
	if err != nil {
		return workload.Outcome{}, err
	}
	defer p.Release()
	r, total := sz.FanOutReceivers, sz.FanOutMessages
	counts := make([]counter, r)
	var wg sync.WaitGroup
	m.Start()
	wg.Add(total)
	next := 0
	for range total {
		c := &counts[next]
		if err := p.Submit(func() {
			c.n.Add(1)
			wg.Done()
		}); err != nil {
			return workload.Outcome{}, err
		}
		if next++; next == r {
			next = 0
		}
	}
	wg.Wait()
	m.Stop()
	got := 0
	for i := range counts {
		if c := int(counts[i].n.Load()); c != total/r {
			return workload.Outcome{}, fmt.Errorf("receiver %d got %d messages, want %d", i, c, total/r)
		}
		got += total / r
	}
	return workload.Outcome{Detail: fmt.Sprintf("received=%d", got)}, workload.Check("messages received", got, total)
}

// forkJoinPool returns a nonblocking pool and a submit function that runs
// a task on the caller when the pool is full, counting those in inline.
func forkJoinPool(size int, inline *atomic.Int64) (*ants.Pool, pooltask.Submit, error) {
	p, err := ants.NewPool(size, ants.WithNonblocking(true))
	if err != nil {
		return nil, nil, err
	}
	return p, func(task func()) {
		if p.Submit(task) != nil {
			inline.Add(1)
			task()
		}
	}, nil
}

// inlineShare says what share of the tasks ran on their submitter.
func inlineShare(inline *atomic.Int64, tasks int64) string {
	return fmt.Sprintf("inline=%.0f%%", 100*float64(inline.Load())/float64(tasks))
}

func fib(m *workload.Meter, sz workload.Sizes, size int) (workload.Outcome, error) {
	var inline atomic.Int64
	p, submit, err := forkJoinPool(size, &inline)
	if err != nil {
		return workload.Outcome{}, err
	}
	defer p.Release()
	m.Start()
	v := pooltask.Fib(submit, sz.FibN)
	m.Stop()
	detail := fmt.Sprintf("fib(%d)=%d %s", sz.FibN, v, inlineShare(&inline, sz.Ops(workload.Fib)))
	return workload.Outcome{Detail: detail}, workload.Check("fib", v, workload.FibValue(sz.FibN))
}

func skynet(m *workload.Meter, sz workload.Sizes, size int) (workload.Outcome, error) {
	var inline atomic.Int64
	p, submit, err := forkJoinPool(size, &inline)
	if err != nil {
		return workload.Outcome{}, err
	}
	defer p.Release()
	m.Start()
	sum := pooltask.Skynet(submit, sz.SkynetLeaves)
	m.Stop()
	detail := fmt.Sprintf("sum=%d %s", sum, inlineShare(&inline, sz.Ops(workload.Skynet)))
	return workload.Outcome{Detail: detail}, workload.Check("sum", sum, workload.SkynetSum(sz.SkynetLeaves))
}
