package globalq

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"weak"

	"github.com/stretchr/testify/require"
)

// TestPopIntoSmallDestinations: PopInto fills at most len(dst) entries,
// returns 0 for an empty dst without taking anything, and leaves the
// entries of dst from n on as they were, whether it stopped at the end
// of dst, at the end of the queue, or at a claimed position not yet
// filled.
func TestPopIntoSmallDestinations(t *testing.T) {
	items := make([]int, 4)
	sentinel := new(int)
	fresh := func(n int) []*int {
		dst := make([]*int, n)
		for i := range dst {
			dst[i] = sentinel
		}
		return dst
	}
	var q Queue[int]
	for i := range 3 {
		q.Push(&items[i])
	}

	require.Zero(t, q.PopInto(nil), "PopInto(nil)")
	require.Zero(t, q.PopInto([]*int{}), "PopInto of an empty slice")
	require.Zero(t, q.PopInto(fresh(4)[:0]), "PopInto of a slice of length 0 with room")
	require.Equal(t, 3, q.Len(), "a PopInto of nothing took items")

	dst := fresh(1)
	require.Equal(t, 1, q.PopInto(dst))
	require.Equal(t, []*int{&items[0]}, dst)

	dst = fresh(5)
	require.Equal(t, 2, q.PopInto(dst[:2]), "the end of dst")
	require.Equal(t, []*int{&items[1], &items[2], sentinel, sentinel, sentinel}, dst,
		"PopInto wrote past len(dst)")

	q.Push(&items[3])
	dst = fresh(4)
	require.Equal(t, 1, q.PopInto(dst), "the end of the queue")
	require.Equal(t, []*int{&items[3], sentinel, sentinel, sentinel}, dst)

	dst = fresh(3)
	require.Zero(t, q.PopInto(dst), "an empty queue")
	require.Equal(t, fresh(3), dst)

	// A claimed position not yet filled, with an item behind it.
	q.Push(&items[0])
	r := q.tailRing()
	pos := r.enq.Load()
	require.True(t, r.enq.CompareAndSwap(pos, pos+1))
	q.Push(&items[2])
	dst = fresh(4)
	require.Equal(t, 1, q.PopInto(dst), "a claimed position")
	require.Equal(t, []*int{&items[0], sentinel, sentinel, sentinel}, dst)
	r.fill(pos, &items[1])
	dst = fresh(4)
	require.Equal(t, 2, q.PopInto(dst))
	require.Equal(t, []*int{&items[1], &items[2], sentinel, sentinel}, dst)
	require.True(t, q.Empty())
}

// TestPushBatchDoesNotKeepItsSlice: PushBatch's doc says the queue does
// not retain xs; it holds the items, not the slice that carried them.
func TestPushBatchDoesNotKeepItsSlice(t *testing.T) {
	var q Queue[int]
	items := []int{1, 2, 3}
	w := func() weak.Pointer[[3]*int] {
		xs := &[3]*int{&items[0], &items[1], &items[2]}
		q.PushBatch(xs[:])
		return weak.Make(xs)
	}()
	runtime.GC()
	require.Nil(t, w.Value(), "the queue keeps the slice passed to PushBatch")
	require.Equal(t, 3, q.Len())
	require.Same(t, &items[0], q.Pop())
}

// TestEmptiedRingsAreFreed: once the consumers have emptied a closed ring
// and moved on to the next, nothing refers to it any more and the garbage
// collector frees it, as the package documentation says; the ring the
// queue grew to stays.
func TestEmptiedRingsAreFreed(t *testing.T) {
	var q Queue[int]
	items := make([]int, 3*minCapacity+1) // one more than the first two rings hold
	q.Push(&items[0])
	first := weak.Make(q.head.Load())
	for i := 1; i < len(items); i++ {
		q.Push(&items[i])
	}
	second := weak.Make(q.head.Load().next.Load())
	require.NotNil(t, second.Value(), "the queue grew twice")
	require.NotNil(t, second.Value().next.Load(), "the queue grew twice")
	runtime.GC()
	require.NotNil(t, first.Value(), "a ring with items was freed")

	dst := make([]*int, minCapacity)
	require.Equal(t, minCapacity, q.PopInto(dst))
	require.NotNil(t, q.Pop(), "the first item of the second ring")
	runtime.GC()
	require.Nil(t, first.Value(), "the emptied first ring is still reachable")
	require.NotNil(t, second.Value(), "the ring being emptied was freed")

	for q.Pop() != nil {
	}
	runtime.GC()
	require.Nil(t, second.Value(), "the emptied second ring is still reachable")
	require.Equal(t, 4*minCapacity, int(q.head.Load().mask+1), "the queue keeps the ring it grew to")
	q.Push(&items[0])
	require.Same(t, &items[0], q.Pop())
}

// TestEmptySeesItemsPastAnEmptiedRing: the consumers have taken every
// item of a closed ring, with a batch that ended exactly there, so they
// have not moved on to the next ring yet, where an item waits. Empty
// must report it, and Len count it, and a pop take it.
func TestEmptySeesItemsPastAnEmptiedRing(t *testing.T) {
	var q Queue[int]
	items := make([]int, minCapacity+1)
	for i := range items {
		q.Push(&items[i])
	}
	first := q.head.Load()
	require.NotNil(t, first.next.Load(), "the last push went into a second ring")
	require.Equal(t, minCapacity, q.PopInto(make([]*int, minCapacity)))
	require.Same(t, first, q.head.Load(), "the consumers are still on the emptied first ring")
	require.False(t, q.Empty(), "Empty missed the item in the next ring")
	require.Equal(t, 1, q.Len())
	require.Same(t, &items[minCapacity], q.Pop())
	require.True(t, q.Empty())
}

// TestEmptyAfterPushCheckThenPark runs the check-then-park handshake of
// the package documentation many times: a worker announces it parks and
// then asks Empty; a producer pushes and then looks for the announcement.
// With one producer (no earlier position left unfilled), at least one of
// them must see the other: the worker the item or the producer the
// worker.
func TestEmptyAfterPushCheckThenPark(t *testing.T) {
	var q Queue[int]
	x := new(int)
	rounds := 2000 * stressScale
	for i := range rounds {
		var parking atomic.Bool
		start := make(chan struct{})
		var sawEmpty, sawParking bool
		var wg sync.WaitGroup
		wg.Go(func() {
			<-start
			parking.Store(true)
			sawEmpty = q.Empty()
		})
		wg.Go(func() {
			<-start
			q.Push(x)
			sawParking = parking.Load()
		})
		close(start)
		wg.Wait()
		require.False(t, sawEmpty && !sawParking,
			"round %d: the worker found the queue empty and the producer found no worker parking", i)
		require.Same(t, x, q.Pop())
	}
}
