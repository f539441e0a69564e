package deque

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// sliceModel is the reference deque: index 0 is the top (oldest).
type sliceModel []int

func (m *sliceModel) push(v int) { *m = append(*m, v) }

func (m *sliceModel) pop() (int, bool) {
	if len(*m) == 0 {
		return 0, false
	}
	v := (*m)[len(*m)-1]
	*m = (*m)[:len(*m)-1]
	return v, true
}

func (m *sliceModel) steal() (int, bool) {
	if len(*m) == 0 {
		return 0, false
	}
	v := (*m)[0]
	*m = (*m)[1:]
	return v, true
}

// runOps drives a deque and a destination deque against two slice models
// with one operation per byte of ops. Single goroutine, so a steal never
// loses a race and every result is determined by the model.
func runOps(t testing.TB, capacity int, ops []byte) {
	d, dst := New[int](capacity), New[int](capacity)
	var md, mdst sliceModel
	// The marks the models expect (see Deque.Mark): up by one for every
	// item pushed, down by one for every item the owner popped from
	// among others (the last one moves the other end instead).
	var mark, dstMark int64
	next := 0
	newItem := func() *int { next++; v := next; return &v }
	check := func(step int, what string, got *int, want int, ok bool) {
		if !ok {
			require.Nilf(t, got, "step %d %s: got %v, want nil (empty)", step, what, got)
			return
		}
		require.NotNilf(t, got, "step %d %s: got nil, want %d", step, what, want)
		require.Equalf(t, want, *got, "step %d %s", step, what)
	}
	for i, op := range ops {
		switch op % 9 {
		case 0, 1, 2: // pushes dominate so the deque grows
			x := newItem()
			d.PushBottom(x)
			md.push(*x)
			mark++
		case 3:
			want, ok := md.pop()
			check(i, "PopBottom", d.PopBottom(), want, ok)
			if ok && len(md) > 0 {
				mark--
			}
		case 4:
			want, ok := md.steal()
			check(i, "Steal", d.Steal(), want, ok)
		case 5:
			n := d.StealHalfInto(dst)
			wantN := (len(md) + 1) / 2
			require.Equalf(t, wantN, n, "step %d StealHalfInto moved", i)
			for range n {
				v, _ := md.steal()
				mdst.push(v)
			}
			dstMark += int64(n)
		case 6:
			want, ok := mdst.pop()
			check(i, "dst PopBottom", dst.PopBottom(), want, ok)
			if ok && len(mdst) > 0 {
				dstMark--
			}
		case 7:
			x := newItem()
			dst.PushBottom(x)
			mdst.push(*x)
			dstMark++
		case 8: // zero to eight at once, past a full ring at small capacities
			xs := make([]*int, int(op/9)%9)
			for j := range xs {
				xs[j] = newItem()
				md.push(*xs[j])
			}
			d.PushBottomN(xs)
			mark += int64(len(xs))
		}
		require.Equalf(t, len(md), d.Len(), "step %d Len", i)
		require.Equalf(t, len(mdst), dst.Len(), "step %d dst Len", i)
		require.Equalf(t, mark, d.Mark(), "step %d Mark", i)
		require.Equalf(t, dstMark, dst.Mark(), "step %d dst Mark", i)
	}
	// Drain both and compare the remaining contents in order.
	for len(md) > 0 {
		want, _ := md.steal()
		check(len(ops), "final Steal", d.Steal(), want, true)
	}
	require.Nil(t, d.PopBottom())
	for len(mdst) > 0 {
		want, _ := mdst.pop()
		check(len(ops), "final dst PopBottom", dst.PopBottom(), want, true)
	}
	require.Nil(t, dst.Steal())
}

func TestDifferentialAgainstSliceModel(t *testing.T) {
	for _, capacity := range []int{0, 1, 2, 3, 8, 64} {
		for seed := range uint64(20) {
			t.Run(fmt.Sprintf("cap=%d/seed=%d", capacity, seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, uint64(capacity)))
				ops := make([]byte, 2000)
				for i := range ops {
					ops[i] = byte(rng.UintN(256))
				}
				runOps(t, capacity, ops)
			})
		}
	}
}

func FuzzDifferential(f *testing.F) {
	f.Add(uint8(2), []byte{0, 0, 0, 3, 4, 5, 6, 7})
	f.Add(uint8(1), []byte{0, 1, 2, 0, 5, 5, 5, 3, 3, 4, 6, 6})
	f.Add(uint8(0), []byte{0, 8, 16, 24, 32, 40, 3, 11, 4, 12, 5, 13, 6, 14})
	f.Fuzz(func(t *testing.T, capacity uint8, ops []byte) {
		runOps(t, int(capacity%16), ops)
	})
}

func TestNewRoundsCapacityUp(t *testing.T) {
	for _, tc := range []struct{ in, want int }{
		{-5, 1}, {0, 1}, {1, 1}, {2, 2}, {3, 4}, {5, 8}, {64, 64}, {65, 128},
	} {
		require.Equalf(t, tc.want, New[int](tc.in).Cap(), "New(%d).Cap()", tc.in)
	}
}

// TestCapIsWhatTheRingHoldsBeforeGrowing fills rings of several sizes,
// from the start and wrapped around after steals: Cap items fit without
// growth, and one more doubles the ring. PushBottomN and StealHalfInto
// grow once, to the smallest doubling that holds what they add, which
// costs the same allocations whether it doubles once or many times.
func TestCapIsWhatTheRingHoldsBeforeGrowing(t *testing.T) {
	items := make([]int, 64)
	ptrs := func(n int) []*int {
		xs := make([]*int, n)
		for i := range xs {
			xs[i] = &items[i]
		}
		return xs
	}
	for _, capacity := range []int{1, 2, 8} {
		for _, stolen := range []int{0, 1, capacity} {
			d := New[int](capacity)
			for i := range stolen {
				d.PushBottom(&items[i])
				require.NotNil(t, d.Steal())
			}
			for i := range capacity {
				d.PushBottom(&items[i])
				require.Equalf(t, capacity, d.Cap(), "New(%d) after %d steals and %d pushes", capacity, stolen, i+1)
			}
			d.PushBottom(&items[capacity])
			require.Equalf(t, 2*capacity, d.Cap(), "New(%d) after %d steals, one push past full", capacity, stolen)
		}
	}

	d := New[int](4)
	d.PushBottomN(ptrs(4))
	require.Equal(t, 4, d.Cap(), "PushBottomN that fills the ring")
	d.PushBottomN(ptrs(13))
	require.Equal(t, 32, d.Cap(), "PushBottomN of 13 onto 4 items")

	dst := New[int](1)
	dst.PushBottom(&items[0])
	require.Equal(t, 9, d.StealHalfInto(dst))
	require.Equal(t, 16, dst.Cap(), "StealHalfInto of 9 onto 1 item")

	growOnce := func(n int) func() {
		xs := ptrs(n)
		return func() { New[int](1).PushBottomN(xs) }
	}
	require.Equal(t, testing.AllocsPerRun(20, growOnce(2)), testing.AllocsPerRun(20, growOnce(64)),
		"PushBottomN of 64 into a ring of 1 allocates more than of 2: it grew more than once")
}

// TestLenIsACountTheDequeHeld has a thief steal and the owner push
// between Len's reads of the two ends, at its first attempt: the deque
// holds 2 items, then 1, then 2, and Len must return one of those, not
// the 3 that the old top and the new bottom give.
func TestLenIsACountTheDequeHeld(t *testing.T) {
	d := New[int](4)
	items := []int{1, 2, 3}
	d.PushBottom(&items[0])
	d.PushBottom(&items[1])
	held := []int{2}
	first := true
	n := d.length(func() {
		if !first {
			return
		}
		first = false
		require.Same(t, &items[0], d.Steal())
		held = append(held, d.Len())
		d.PushBottom(&items[2])
		held = append(held, d.Len())
	})
	require.Equal(t, []int{2, 1, 2}, held)
	require.Contains(t, held, n, "Len returned a count the deque never held")
	require.Equal(t, 2, d.Len())
}

func TestPushBottomNilPanics(t *testing.T) {
	d := New[int](2)
	v := 1
	d.PushBottom(&v)
	require.PanicsWithValue(t, "deque: PushBottom of nil", func() { d.PushBottom(nil) })
	require.Equal(t, 1, d.Len(), "the nil was pushed, or the item before it lost")
	require.Same(t, &v, d.PopBottom())
	require.Nil(t, d.PopBottom())
}

func TestPushBottomNOfNilPanicsBeforePushing(t *testing.T) {
	d := New[int](2)
	v := 1
	require.PanicsWithValue(t, "deque: PushBottomN of nil", func() { d.PushBottomN([]*int{&v, nil}) })
	require.Zero(t, d.Len(), "an item pushed before the nil was found")
	// The slot written before the nil was found is stale, and counted as
	// such, to be cleared with the others or written over.
	require.Nil(t, d.PopBottom())
	require.Equal(t, 1, liveSlots(d))
	require.GreaterOrEqual(t, d.dirtyHigh, int64(1), "the slot written before the nil is not counted stale")
}

func TestStealHalfIntoItselfPanics(t *testing.T) {
	d := New[int](2)
	v := 1
	d.PushBottom(&v)
	require.PanicsWithValue(t, "deque: StealHalfInto into itself", func() { d.StealHalfInto(d) })
	require.Equal(t, 1, d.Len(), "an item was claimed before the panic")
	require.Same(t, &v, d.Steal())
}

// liveSlots counts non-nil slots of the current ring (owner's view, no
// concurrency).
func liveSlots[T any](d *Deque[T]) int {
	n := 0
	r := d.buf.Load()
	for i := range r.slots {
		if r.slots[i].Load() != nil {
			n++
		}
	}
	return n
}

func TestPoppedAndStolenSlotsAreCleared(t *testing.T) {
	d, dst := New[int](2), New[int](2)
	for i := range 1000 {
		v := i
		d.PushBottom(&v)
	}
	require.Equal(t, 1000, liveSlots(d))

	// Pops clear in batches: never more than the threshold stays behind
	// above bottom.
	for range 600 {
		require.NotNil(t, d.PopBottom())
		require.LessOrEqual(t, liveSlots(d)-d.Len(), clearThreshold)
	}
	// Steals leave stale slots below top; the owner's next pops clear them
	// once the threshold is reached.
	for range 200 {
		require.NotNil(t, d.Steal())
	}
	require.Equal(t, 100, d.StealHalfInto(dst))
	require.NotNil(t, d.PopBottom())
	require.LessOrEqual(t, liveSlots(d)-d.Len(), 2*clearThreshold)

	// Finding the deque empty leaves fewer than the threshold on each
	// side.
	for d.PopBottom() != nil {
	}
	require.LessOrEqual(t, liveSlots(d), 2*(clearThreshold-1))
	for dst.PopBottom() != nil {
	}
	require.LessOrEqual(t, liveSlots(dst), 2*(clearThreshold-1))
}

// A deque that its owner fills and empties again and again, as a worker
// does with the batches it takes from the global queue, leaves its stale
// slots for the next batch to write over instead of clearing them each
// time, and what stays reachable is bounded by the threshold on each side
// (the last item's claim moves top, so one slot a batch goes below it).
func TestRefilledDequeWritesOverStaleSlots(t *testing.T) {
	d := New[int](2)
	items := func(n int) []*int {
		xs := make([]*int, n)
		for i := range xs {
			x := i
			xs[i] = &x
		}
		return xs
	}
	// Pushed together and one by one, emptied through the many-items path
	// and the last-item CAS path, and found empty.
	d.PushBottomN(items(10))
	for d.PopBottom() != nil {
	}
	require.Equal(t, 10, liveSlots(d), "slots below the threshold cleared")
	for _, x := range items(5) {
		d.PushBottom(x)
	}
	require.Equal(t, 10, liveSlots(d), "a push did not write over a stale slot")
	for d.PopBottom() != nil {
	}
	require.Equal(t, 10, liveSlots(d))

	// Batches of every size up to past the threshold.
	for n := 1; n <= 4*clearThreshold; n++ {
		d.PushBottomN(items(n % (2 * clearThreshold)))
		for d.PopBottom() != nil {
		}
		require.LessOrEqual(t, liveSlots(d), 2*(clearThreshold-1), "after a batch of %d", n)
	}
}

func TestNewCapacityAboveTheLargestPanics(t *testing.T) {
	for _, c64 := range []int64{1<<32 + 1, 1 << 62, 1<<62 + 1, math.MaxInt64} {
		c := int(c64)
		if int64(c) != c64 {
			continue // an int of 32 bits cannot hold it
		}
		require.PanicsWithValue(t, fmt.Sprintf("deque: New capacity %d above 1<<32", c), func() { New[int](c) }, "capacity %d", c)
	}
	for _, c := range []int{math.MinInt, -1, 0, 1} {
		require.Len(t, New[int](c).buf.Load().slots, 1, "capacity %d", c)
	}
	require.Len(t, New[int](1000).buf.Load().slots, 1024)
}
