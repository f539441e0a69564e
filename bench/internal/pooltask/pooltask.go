// Package pooltask runs the fork-join workloads (fib, skynet) on a task
// pool, the way such pools are meant to be used: a task never blocks
// waiting for another task (on a pool with a fixed number of workers that
// deadlocks once every worker waits), so every fork is a task of its own
// and every join is a continuation. A node counts its outstanding
// children; the child that brings the count to zero hands the node's sum
// to the node's parent.
//
// The pools themselves (ants, pond) stay in their own binaries; they hand
// in a [Submit] function.
package pooltask

import "sync/atomic"

// Submit runs task on the pool, some time later.
type Submit func(task func())

// join is a fork-join node waiting for its children.
type join struct {
	parent  *join
	pending atomic.Int32 // children not yet reported
	sum     atomic.Int64
	done    chan int64 // the root's result; nil below the root
}

// add reports a child's value. The sum is added before the count is
// decremented, so the child that reaches zero sees every other child's
// value (both are sequentially consistent atomics).
func (j *join) add(v int64) {
	j.sum.Add(v)
	if j.pending.Add(-1) != 0 {
		return
	}
	if j.parent == nil {
		j.done <- j.sum.Load()
		return
	}
	j.parent.add(j.sum.Load())
}

func newRoot() *join {
	j := &join{done: make(chan int64, 1)}
	j.pending.Store(1)
	return j
}

// Fib computes fib(n) with one task per call and returns it.
func Fib(submit Submit, n int) int64 {
	root := newRoot()
	submit(func() { fib(submit, n, root) })
	return <-root.done
}

func fib(submit Submit, n int, parent *join) {
	if n < 2 {
		parent.add(int64(n))
		return
	}
	j := &join{parent: parent}
	j.pending.Store(2)
	submit(func() { fib(submit, n-1, j) })
	submit(func() { fib(submit, n-2, j) })
}

// Skynet sums the skynet tree of the given leaves (a power of ten) with
// one task per node and returns the sum.
func Skynet(submit Submit, leaves int) int64 {
	root := newRoot()
	submit(func() { skynet(submit, 0, leaves, root) })
	return <-root.done
}

func skynet(submit Submit, num, size int, parent *join) {
	if size == 1 {
		parent.add(int64(num))
		return
	}
	j := &join{parent: parent}
	j.pending.Store(10)
	sub := size / 10
	for i := range 10 {
		submit(func() { skynet(submit, num+i*sub, sub, j) })
	}
}
