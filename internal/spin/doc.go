// Package spin holds the scheduler's idle policy: spin briefly, then yield
// the processor, then park.
//
// A worker that finds no work does not block at once. Work often arrives a
// few hundred nanoseconds later (a message reply, a yield completed by a
// handler on another worker), and waking a blocked goroutine costs a trip
// through the Go scheduler that is far longer than that. Spinning forever, on
// the other hand, steals CPU from the workers that do have work, which on a
// machine with few cores is worse than a late wakeup. [Backoff] encodes the
// compromise: a few rounds of a tight loop, then rounds of
// [runtime.Gosched] that let other goroutines run, and from round
// [ParkRound] on it tells the caller to park.
//
// [Parker] is what the caller parks on. It is a one-token binary semaphore in
// the style of Rust's thread::park or Java's LockSupport: a [Parker.Unpark]
// that comes before the matching [Parker.Park] is remembered, so a worker
// that announced it was going to sleep, re-checked the queues and then
// parked cannot miss the wakeup sent in between. It is a smaller tool than
// [sync.Cond]: no mutex is needed, and Unpark on a worker that is not parked
// costs one atomic swap and no channel operation.
//
// Concurrency contract: a [Backoff] belongs to one goroutine and is not safe
// for concurrent use. A [Parker] has one owner, the only goroutine that may
// call Park; Unpark may be called by any goroutine at any time.
package spin
