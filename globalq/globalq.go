package globalq

import (
	"sync"
	"sync/atomic"
)

// minCapacity is the first ring's size. Small enough that an unused
// queue costs little, large enough that a scheduler that submits a handful of
// processes never grows it.
const minCapacity = 16

// cacheLine is the padding unit against false sharing: the cache line size of
// amd64 and of most arm64 cores.
const cacheLine = 64

// closedBit, set in a ring's enq, says that the ring takes no more items:
// a producer found it full, and the items after go to the next ring.
const closedBit = 1 << 63

// A cell is one place of a ring. seq is the position it was last filled
// for, plus one: the producer that claimed position p writes val and then
// stores p+1, a store that pairs with the consumers' load of seq before
// they read val. A cell is refilled one lap later, for p plus the ring's
// capacity, only once the consumers' position has passed p, which they
// publish after clearing val; so seq grows by a lap at each fill and is
// never reset, and reading it tells a filled cell from one a lap behind.
type cell[T any] struct {
	seq atomic.Uint64
	val *T
}

// A ring is a bounded queue of claimed positions. Producers claim
// positions with a compare-and-swap of enq; consumers, one at a time under
// the queue's mutex, take them in order and publish how far they got in
// deq. Positions grow for the ring's whole life; position p lives in cell
// p&mask.
type ring[T any] struct {
	// enq is the next position to claim, with closedBit once the ring is
	// closed. Producers claim by compare-and-swap; consumers and Len load
	// it.
	enq atomic.Uint64
	_   [cacheLine - 8]byte // keeps the producers' line apart from deq and next
	// deq is the consumers' position: every position below it was taken
	// and its cell's val cleared. Stored with the queue's mutex held,
	// once per batch; loaded by producers (how full the ring is), by
	// Empty and by Len.
	deq atomic.Uint64
	// next is the ring that takes over once this one is closed,
	// installed with a compare-and-swap from nil by a producer; it never
	// changes again. Consumers look at it whenever they find no item at
	// their position, which is often once they have caught up with the
	// producers: on the producers' line, it would bring that line to the
	// consumers' core at each look, and the next push would have to
	// fetch it back. Here, those looks touch only the consumers' line
	// while the ring is open.
	next atomic.Pointer[ring[T]]
	_    [cacheLine - 16]byte
	// mask is the capacity minus one; the capacity is a power of two.
	mask  uint64
	cells []cell[T]
}

// newRing returns an empty ring of capacity n, a power of two. Any
// goroutine.
func newRing[T any](n uint64) *ring[T] {
	return &ring[T]{mask: n - 1, cells: make([]cell[T], n)}
}

// Queue is a multi-producer, multi-consumer FIFO queue of non-nil *T.
//
// The zero value is an empty queue ready to use. A Queue must not be copied
// after first use. All methods are safe for concurrent use by any number of
// goroutines.
type Queue[T any] struct {
	_ [cacheLine]byte // keeps tail off the cache line of the fields before the Queue

	// tail is the ring producers claim positions in: the newest. A
	// producer that finds it closed moves it to the next ring with a
	// compare-and-swap; producers load it without a lock.
	tail atomic.Pointer[ring[T]]
	_    [cacheLine - 8]byte // keeps the producers' line apart from the consumers'

	// mu serialises consumers: Pop and PopInto. Producers never take it.
	mu sync.Mutex
	// head is the ring consumers take from: the oldest not emptied.
	// Stored with mu held, once the ring before it is closed and
	// emptied; set together with tail by the first push. Loaded by
	// Empty and Len without mu.
	head atomic.Pointer[ring[T]]

	_ [cacheLine]byte // keeps the hot fields above off the cache line of the fields after the Queue
}

// Push appends x at the tail of the queue and returns how many items
// were ahead of it in the ring it went into, as the push found the ring
// when it claimed x's place: consumers may have taken some since, and
// items still in older rings, which a queue that grew may hold, are not
// counted. With one ring, as a queue that stopped growing has, that is
// the queue's length before the push. It costs the push nothing more to
// know, and tells a producer how far it has run ahead of the consumers.
// It panics if x is nil: nil is what [Queue.Pop] returns for an empty
// queue, so a nil item would be lost.
func (q *Queue[T]) Push(x *T) (ahead int) {
	if x == nil {
		panic("globalq: Push of nil")
	}
	r := q.tailRing()
	for {
		pos, free := r.room()
		switch {
		case pos&closedBit != 0:
			r = q.moveOn(r)
		case free == 0:
			r.enq.CompareAndSwap(pos, pos|closedBit)
		case r.enq.CompareAndSwap(pos, pos+1):
			r.fill(pos, x)
			return int(r.mask + 1 - free)
		}
	}
}

// PushBatch appends the items of xs at the tail of the queue, in order. It
// panics if any item is nil, before anything is pushed. Items other
// goroutines push meanwhile may land between them. The queue does not
// retain xs.
func (q *Queue[T]) PushBatch(xs []*T) {
	for _, x := range xs {
		if x == nil {
			panic("globalq: PushBatch of nil")
		}
	}
	if len(xs) == 0 {
		return
	}
	r := q.tailRing()
	for len(xs) > 0 {
		pos, free := r.room()
		switch k := min(uint64(len(xs)), free); {
		case pos&closedBit != 0:
			r = q.moveOn(r)
		case k == 0:
			r.enq.CompareAndSwap(pos, pos|closedBit)
		case r.enq.CompareAndSwap(pos, pos+k):
			for j, x := range xs[:k] {
				r.fill(pos+uint64(j), x)
			}
			xs = xs[k:]
		}
	}
}

// room returns enq and how many positions from it are free. Producers
// only.
func (r *ring[T]) room() (pos, free uint64) {
	for {
		// deq first: it never passes enq, so pos-deq does not wrap.
		deq := r.deq.Load()
		pos = r.enq.Load()
		if pos&closedBit != 0 {
			return pos, 0
		}
		if free, ok := r.freeAt(deq, pos); ok {
			return pos, free
		}
	}
}

// freeAt returns how many positions from pos are free when the consumers
// are at deq, or false if deq was loaded too early to tell: consumers
// and producers moved on between the two loads, by more than the
// capacity in all (pos can be at most deq plus the capacity for the deq
// of the same moment). Taken as free, the difference would wrap around
// and let a producer claim cells still holding items. Any goroutine.
func (r *ring[T]) freeAt(deq, pos uint64) (uint64, bool) {
	used := pos - deq
	if used > r.mask+1 {
		return 0, false
	}
	return r.mask + 1 - used, true
}

// fill stores x in the cell of pos, which the caller claimed. Producers
// only.
func (r *ring[T]) fill(pos uint64, x *T) {
	c := &r.cells[pos&r.mask]
	c.val = x
	c.seq.Store(pos + 1)
}

// tailRing returns the ring producers claim positions in, making the
// first one on the queue's first push. Producers only.
func (q *Queue[T]) tailRing() *ring[T] {
	if r := q.tail.Load(); r != nil {
		return r
	}
	// The first ring is head before it is tail, so that consumers have
	// it before any item is in it.
	r := newRing[T](minCapacity)
	if !q.head.CompareAndSwap(nil, r) {
		r = q.head.Load()
	}
	q.tail.CompareAndSwap(nil, r)
	return q.tail.Load()
}

// moveOn returns the ring after r, which is closed, installing it (twice
// r's capacity) if nobody has, and moves tail to it. Producers only.
func (q *Queue[T]) moveOn(r *ring[T]) *ring[T] {
	next := r.next.Load()
	if next == nil {
		n := newRing[T](2 * (r.mask + 1))
		if r.next.CompareAndSwap(nil, n) {
			next = n
		} else {
			next = r.next.Load()
		}
	}
	q.tail.CompareAndSwap(r, next)
	return next
}

// Pop removes and returns the oldest item, or nil if the queue is empty. When
// the queue looks empty it returns without taking the lock.
func (q *Queue[T]) Pop() *T {
	var dst [1]*T
	if q.PopInto(dst[:]) == 0 {
		return nil
	}
	return dst[0]
}

// PopInto removes up to len(dst) of the oldest items, under one acquisition
// of the lock, and stores them in dst[0:n] in FIFO order. It returns n, which
// is 0 when the queue is empty or dst is. Entries of dst from n on are left
// as they were. When the queue looks empty it returns without taking the
// lock.
//
// An item whose push has claimed its position but not yet filled it ends
// the batch there: the items behind it wait for it, so that each
// producer's items come out in the order it pushed them.
func (q *Queue[T]) PopInto(dst []*T) int {
	if len(dst) == 0 || q.Empty() {
		return 0
	}
	q.mu.Lock()
	r := q.head.Load()
	d := r.deq.Load()
	start := d
	n := 0
	for n < len(dst) {
		if c := &r.cells[d&r.mask]; c.seq.Load() == d+1 {
			dst[n] = c.val
			c.val = nil // before deq passes d: see fill
			n++
			d++
			continue
		}
		// Nothing at d: the queue is empty there, or a push claimed d
		// and has not filled it, unless r is closed and emptied.
		next := r.next.Load()
		if next == nil || r.enq.Load() != d|closedBit {
			break
		}
		r.deq.Store(d)
		q.head.Store(next)
		r, d = next, next.deq.Load()
		start = d
	}
	if d != start {
		r.deq.Store(d)
	}
	q.mu.Unlock()
	return n
}

// Len returns the number of items in the queue, including those whose push
// has claimed a position and not yet filled it. It takes no lock: it reads
// where the consumers and then where the producers are, ring by ring, so
// while no push or pop is in progress it is exact, and otherwise an
// estimate that may be a count the queue never held (an item popped and
// another pushed between its two reads are both counted).
func (q *Queue[T]) Len() int {
	n := 0
	for r := q.head.Load(); r != nil; r = r.next.Load() {
		d := r.deq.Load()
		if e := r.enq.Load() &^ closedBit; e > d {
			n += int(e - d)
		}
	}
	return n
}

// Empty reports whether the queue has no item to pop. It takes no lock, so
// idle workers can poll it cheaply; concurrent pushes and pops may have
// changed the answer by the time it returns, and a false result must be
// confirmed by popping.
//
// It looks at the cell of the consumers' position d as published. If that
// cell was filled for d or a later position, there is or was an item: not
// empty. Otherwise d is the true position (a position consumers passed
// was filled for it, and a cell's seq only grows), and its item is not
// there yet: nothing can be popped, unless the ring is closed and emptied
// and the next one has something.
func (q *Queue[T]) Empty() bool {
	for r := q.head.Load(); r != nil; r = r.next.Load() {
		d := r.deq.Load()
		if r.cells[d&r.mask].seq.Load() > d {
			return false
		}
		if r.next.Load() == nil || r.enq.Load() != d|closedBit {
			return true // open, or closed with a claimed item not yet filled
		}
	}
	return true
}
