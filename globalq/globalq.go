package globalq

import (
	"sync"
	"sync/atomic"
)

// minCapacity is the ring's size on first push. Small enough that an unused
// queue costs little, large enough that a scheduler that submits a handful of
// processes never grows it.
const minCapacity = 16

// cacheLine is the padding unit against false sharing: the cache line size of
// amd64 and of most arm64 cores.
const cacheLine = 64

// Queue is a multi-producer, multi-consumer FIFO queue of non-nil *T.
//
// The zero value is an empty queue ready to use. A Queue must not be copied
// after first use. All methods are safe for concurrent use by any number of
// goroutines.
type Queue[T any] struct {
	_ [cacheLine]byte // keeps mu and length off the cache line of the fields before the Queue

	mu sync.Mutex // protects buf and head, and serialises writes to length

	// length is the number of items in buf. It is written only with mu held,
	// so under mu a load is exact. Len, Empty and the fast paths of Pop and
	// PopInto load it without mu; such a load synchronises with the store of
	// the last push or pop that it observes, and may be stale by the time the
	// caller acts on it, so it is only a hint: Pop and PopInto re-check it
	// under mu before touching buf.
	length atomic.Int64

	// buf is the ring; its length is zero or a power of two. The items are
	// buf[head], buf[(head+1)&mask], ... for length items; every other slot
	// is nil, so that popped items can be collected.
	buf  []*T
	head int // index of the oldest item; meaningful only when length > 0

	_ [cacheLine]byte // keeps the hot fields above off the cache line of the fields after the Queue
}

// Push appends x at the tail of the queue. It panics if x is nil: nil is what
// [Queue.Pop] returns for an empty queue, so a nil item would be lost.
func (q *Queue[T]) Push(x *T) {
	if x == nil {
		panic("globalq: Push of nil")
	}
	q.mu.Lock()
	n := int(q.length.Load())
	if n == len(q.buf) {
		q.grow(n + 1)
	}
	q.buf[(q.head+n)&(len(q.buf)-1)] = x
	q.length.Store(int64(n + 1))
	q.mu.Unlock()
}

// PushBatch appends the items of xs at the tail of the queue, in order, under
// one acquisition of the lock, so that no other push lands between them. It
// panics if any item is nil, before anything is pushed. The queue does not
// retain xs.
func (q *Queue[T]) PushBatch(xs []*T) {
	for _, x := range xs {
		if x == nil {
			panic("globalq: Push of nil")
		}
	}
	if len(xs) == 0 {
		return
	}
	q.mu.Lock()
	n := int(q.length.Load())
	if n+len(xs) > len(q.buf) {
		q.grow(n + len(xs))
	}
	// The free region starts at tail and may wrap once around the end.
	tail := (q.head + n) & (len(q.buf) - 1)
	copied := copy(q.buf[tail:], xs)
	copy(q.buf, xs[copied:])
	q.length.Store(int64(n + len(xs)))
	q.mu.Unlock()
}

// Pop removes and returns the oldest item, or nil if the queue is empty. When
// the queue looks empty it returns without taking the lock.
func (q *Queue[T]) Pop() *T {
	if q.length.Load() == 0 {
		return nil
	}
	q.mu.Lock()
	n := q.length.Load()
	if n == 0 {
		q.mu.Unlock()
		return nil
	}
	x := q.buf[q.head]
	q.buf[q.head] = nil
	q.head = (q.head + 1) & (len(q.buf) - 1)
	q.length.Store(n - 1)
	q.mu.Unlock()
	return x
}

// PopInto removes up to len(dst) of the oldest items, under one acquisition
// of the lock, and stores them in dst[0:n] in FIFO order. It returns n, which
// is 0 when the queue is empty or dst is. Entries of dst from n on are left
// as they were. When the queue looks empty it returns without taking the
// lock.
func (q *Queue[T]) PopInto(dst []*T) int {
	if len(dst) == 0 || q.length.Load() == 0 {
		return 0
	}
	q.mu.Lock()
	length := int(q.length.Load())
	n := min(len(dst), length)
	if n == 0 {
		q.mu.Unlock()
		return 0
	}
	// The n items start at head and may wrap once around the end.
	first := q.buf[q.head:min(q.head+n, len(q.buf))]
	copy(dst, first)
	clear(first)
	if rest := n - len(first); rest > 0 {
		copy(dst[len(first):], q.buf[:rest])
		clear(q.buf[:rest])
	}
	q.head = (q.head + n) & (len(q.buf) - 1)
	q.length.Store(int64(length - n))
	q.mu.Unlock()
	return n
}

// Len returns the number of items in the queue. It takes no lock; the result
// is a snapshot that concurrent pushes and pops may already have changed.
func (q *Queue[T]) Len() int {
	return int(q.length.Load())
}

// Empty reports whether the queue has no items. It takes no lock, so idle
// workers can poll it cheaply; like [Queue.Len] it is a snapshot, and a false
// result must be confirmed by popping.
func (q *Queue[T]) Empty() bool {
	return q.length.Load() == 0
}

// grow replaces buf with a ring of at least need slots (a power of two, at
// least minCapacity and at least double the old size) holding the same items
// in the same order, starting at index 0. Called with mu held.
func (q *Queue[T]) grow(need int) {
	newCap := max(2*len(q.buf), minCapacity)
	for newCap < need {
		newCap *= 2
	}
	buf := make([]*T, newCap)
	n := int(q.length.Load())
	if n > 0 {
		copied := copy(buf, q.buf[q.head:min(q.head+n, len(q.buf))])
		copy(buf[copied:n], q.buf)
	}
	q.buf = buf
	q.head = 0
}
