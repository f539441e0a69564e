// Package globalq is the scheduler's global run queue: a first-in first-out
// queue of pointers that any number of goroutines push to and pop from.
//
// Workers mostly run processes from their own work-stealing deques; the
// global queue takes what has no worker of its own (submissions from outside
// the scheduler) and is where a worker looks when its deque is empty and on
// every 61st scheduling tick, so that nothing in it starves. It is therefore
// touched far less often than the deques, but by every worker, and its
// batch operations matter more than the latency of a single push: a worker
// that finds work takes a batch into its deque with [Queue.PopInto].
//
// # Design
//
// Like the Go runtime's global run queue (sched.runq, guarded by
// sched.lock) and Tokio's inject queue, a [Queue] is guarded by a
// [sync.Mutex]. Unlike them it keeps its items in a growable ring buffer
// rather than linking them: a *T cannot carry the link the way a goroutine
// does, and a separate node per item would allocate on every push. The
// capacity is a power of two, so indexing is a mask, and it doubles when
// full: a push never fails and never drops an item. Only
// growth allocates; a steady state of pushes and pops allocates nothing, and
// a slot is set to nil when its item is popped, so the queue never keeps a
// finished process alive. [Queue.PushBatch] and [Queue.PopInto] move a whole
// batch under one lock acquisition.
//
// Beside the buffer the queue keeps its length in an atomic integer that is
// written only under the mutex. [Queue.Len] and [Queue.Empty] read it without
// the lock, and [Queue.Pop] and [Queue.PopInto] read it first and return at
// once when the queue is empty: idle workers poll the global queue while
// spinning, and they must not serialise on its mutex only to find nothing.
// The length read without the lock is a hint; the pops re-check it under the
// lock.
//
// Lock-free alternatives were rejected. A Michael-Scott linked queue
// allocates a node per item, which the scheduler's zero-allocation target
// forbids, and cannot pop a batch atomically. Bounded lock-free ring buffers
// must either fail when full or fall back to a lock to grow. At the rate the
// global queue is used, an uncontended mutex costs about as much as the
// atomics those designs need.
//
// # Concurrency
//
// Every method may be called by any goroutine, concurrently with any other.
// Items pushed by one goroutine are popped in the order that goroutine pushed
// them; items from different goroutines are popped in the order their pushes
// took the lock. No item is lost or duplicated: each item pushed is returned
// by exactly one pop, once the pops have caught up with the pushes.
//
// The length is a sequentially consistent atomic, so a push that happens
// before a call to [Queue.Len] or [Queue.Empty] is always counted by it, and
// the check-then-park pattern is safe: a worker that announces it is parking
// and then finds the queue empty, and a producer that pushes and then looks
// for a parking worker, cannot both miss each other.
package globalq
