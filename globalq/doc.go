// Package globalq is the scheduler's global run queue: a first-in first-out
// queue of pointers that any number of goroutines push to and pop from.
//
// Workers mostly run processes from their own work-stealing deques; the
// global queue takes what has no worker of its own (submissions from outside
// the scheduler) and is where a worker looks when its deque is empty and on
// every 61st scheduling tick, so that nothing in it starves. Its pushes come
// mostly from goroutines outside the workers, one item at a time, and a
// program that submits a million processes in a loop pushes a million
// times; its pops come from workers, which take a batch into their deques
// with [Queue.PopInto].
//
// # Design
//
// Items live in a ring of cells, a power of two of them, each with a
// sequence number. A push takes no lock: it claims the next position with a
// compare-and-swap and fills the position's cell, the item and then, with
// an atomic store, the sequence number: two atomic instructions and
// nothing else. Consumers
// are serialised by a mutex, taken once per batch: they read the cells in
// order from their position, stop at the first not yet filled, clear the
// cells they took (so the queue never keeps a popped item alive) and
// publish their new position, which is what tells producers that those
// cells may be filled again. A sequence number grows by the ring's
// capacity at each fill and is never reset, so a cell filled for this lap
// is told from one a lap behind without clearing anything, and no position
// is ever confused with an older one.
//
// A producer that finds the ring full closes it and links a ring of twice
// the capacity after it; the producers that come after go there, and the
// consumers move there once the closed ring is emptied, which the garbage
// collector then frees. A push never fails and never drops an item, and
// once the queue has grown to what its bursts need, pushes and pops
// allocate nothing: the same ring is refilled lap after lap. A ring that
// grew for a burst keeps its size.
//
// A ring under a mutex, as the Go runtime's global run queue and Tokio's
// inject queue are, makes every push take the lock, write the length and
// release the lock, three atomic instructions, and wait while a worker
// holds the lock to take a batch. A program
// submitting in a loop from one goroutine then competes with every worker
// that comes to the queue for work: lock-free, a million submissions from
// one goroutine take 8 % less time in the bench harness's spawn workload.
// A Michael-Scott linked queue would allocate a node per item, and a chain
// of fixed segments dropped once emptied would allocate a segment every
// few hundred pushes for as long as the queue is used; reusing segments
// instead needs protection against a producer that still holds one from
// before, which the sequence numbers give the ring for free.
//
// # Concurrency
//
// Every method may be called by any goroutine, concurrently with any other.
// Items pushed by one goroutine are popped in the order that goroutine pushed
// them; items from different goroutines are popped in the order their pushes
// claimed their positions. A position claimed and not yet filled holds the
// items behind it back until its producer fills it, a few instructions
// later; pops meanwhile find the queue empty there. No item is lost or
// duplicated: each item pushed is returned by exactly one pop, once the pops
// have caught up with the pushes.
//
// The sequence numbers and the consumers' position are sequentially
// consistent atomics, so a push that returned before a call to [Queue.Empty]
// is seen by it, unless a push that claimed an earlier position has not
// filled it yet.
// The check-then-park pattern is therefore safe: a worker that announces it
// is parking and then finds the queue empty, and a producer that pushes and
// then looks for a parking worker, cannot both miss each other; and when the
// worker missed the item only because an earlier position was still being
// filled, the producer of that position, which looks for a parking worker
// after filling it, finds this one.
package globalq
