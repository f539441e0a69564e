// Command pond runs the task-shaped benchmark workloads (spawn, fan-out,
// fib, skynet) on github.com/alitto/pond/v2, as its README shows: a pool
// of a fixed maximum concurrency with the default unbounded queue, tasks
// handed in fire-and-forget with Go, and StopAndWait (or a
// sync.WaitGroup where the pool must outlive the wait) to wait for them.
// Two concurrencies are tried, "cpu" (GOMAXPROCS workers) and "wide"
// (10,000 workers); the report keeps the faster.
//
// Fork-join (fib, skynet) runs as continuations (see internal/pooltask):
// a task that waited for its children would deadlock a full pool. The
// queue is unbounded, so a task may submit more tasks without blocking.
//
//	go run ./impl/pond -workload fib -variant cpu -scale 1
package main

import (
	"fmt"
	"runtime"
	"sync/atomic"

	"github.com/alitto/pond/v2"

	"github.com/procsched/scheduler/bench/internal/pooltask"
	"github.com/procsched/scheduler/bench/internal/workload"
)

// wideConcurrency is the pool concurrency of the "wide" variant.
const wideConcurrency = 10_000

func main() {
	entries := workload.PoolEntries(wideConcurrency, skynet, spawn, fanOut, fib)
	entries = append(entries, workload.Entry{Workload: workload.Spawn, Variant: "results", Run: spawnResults})
	workload.Main("pond", entries)
}

// spawnResults is spawn in the shape of this scheduler's submit variant:
// each task returns its index through the future pond's result pool
// gives back (GOMAXPROCS workers), the caller keeps every future and
// then waits for each one and sums the results. The fire-and-forget
// variants above keep nothing per task; this one keeps, as a Handle
// does, a result for whoever asks.
func spawnResults(m *workload.Meter, sz workload.Sizes) (workload.Outcome, error) {
	pool := pond.NewResultPool[int](runtime.GOMAXPROCS(0))
	defer pool.StopAndWait()
	n := sz.SpawnProcesses
	tasks := make([]pond.ResultTask[int], n)
	m.Start()
	for i := range tasks {
		tasks[i] = pool.Submit(func() int { return i })
	}
	var sum int64
	for _, t := range tasks {
		v, err := t.Wait()
		if err != nil {
			return workload.Outcome{}, err
		}
		sum += int64(v)
	}
	m.Stop()
	return workload.Outcome{Detail: fmt.Sprintf("sum=%d", sum)}, workload.Check("sum of results", sum, workload.SpawnSum(n))
}

func spawn(m *workload.Meter, sz workload.Sizes, size int) (workload.Outcome, error) {
	pool := pond.NewPool(size)
	n := sz.SpawnProcesses
	var sum atomic.Int64
	m.Start()
	for i := range n {
		if err := pool.Go(func() { sum.Add(int64(i)) }); err != nil {
			return workload.Outcome{}, err
		}
	}
	pool.StopAndWait()
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
	pool := pond.NewPool(size)
	r, total := sz.FanOutReceivers, sz.FanOutMessages
	counts := make([]counter, r)
	m.Start()
	next := 0
	for range total {
		c := &counts[next]
		if err := pool.Go(func() { c.n.Add(1) }); err != nil {
			return workload.Outcome{}, err
		}
		if next++; next == r {
			next = 0
		}
	}
	pool.StopAndWait()
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

// submitter returns a submit function for pool; Go fails only on a
// stopped pool, which these workloads never use.
func submitter(pool pond.Pool) pooltask.Submit {
	return func(task func()) {
		if err := pool.Go(task); err != nil {
			panic(err)
		}
	}
}

func fib(m *workload.Meter, sz workload.Sizes, size int) (workload.Outcome, error) {
	pool := pond.NewPool(size)
	defer pool.StopAndWait()
	m.Start()
	v := pooltask.Fib(submitter(pool), sz.FibN)
	m.Stop()
	return workload.Outcome{Detail: fmt.Sprintf("fib(%d)=%d", sz.FibN, v)}, workload.Check("fib", v, workload.FibValue(sz.FibN))
}

func skynet(m *workload.Meter, sz workload.Sizes, size int) (workload.Outcome, error) {
	pool := pond.NewPool(size)
	defer pool.StopAndWait()
	m.Start()
	sum := pooltask.Skynet(submitter(pool), sz.SkynetLeaves)
	m.Stop()
	return workload.Outcome{Detail: fmt.Sprintf("sum=%d", sum)}, workload.Check("sum", sum, workload.SkynetSum(sz.SkynetLeaves))
}
