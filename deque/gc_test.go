package deque

import (
	"runtime"
	"testing"
	"weak"

	"github.com/stretchr/testify/require"

	"github.com/procsched/scheduler/internal/gctrack"
)

// payload is the tracked item of the tests that check what the deque
// keeps reachable.
type payload = gctrack.Item

// pushTracked pushes count new items at d's bottom and returns weak
// pointers to them.
func pushTracked(d *Deque[payload], count int) []weak.Pointer[payload] {
	return gctrack.Push(count, d.PushBottom)
}

// reachable counts the items of ws that a collection does not free.
func reachable(ws []weak.Pointer[payload]) int { return gctrack.Reachable(ws) }

// TestStolenItemsStayUntilTheOwnersNextPop: thieves clear nothing, so
// items stolen from a deque whose owner only pushes stay reachable, all
// of them, until the owner's next PopBottom, which clears the stale slots
// below top and leaves fewer than clearThreshold of them, as the package
// documentation says. Pops by the owner clear as they go: never
// clearThreshold stale slots above bottom after a PopBottom.
func TestStolenItemsStayUntilTheOwnersNextPop(t *testing.T) {
	const total = 10 * clearThreshold
	tests := []struct {
		name  string
		steal func(d *Deque[payload]) int
	}{
		{"Steal", func(d *Deque[payload]) int {
			n := 0
			for d.Steal() != nil {
				n++
			}
			return n
		}},
		{"StealHalfInto", func(d *Deque[payload]) int {
			n := 0
			for {
				dst := New[payload](1)
				m := d.StealHalfInto(dst)
				if m == 0 {
					return n
				}
				n += m
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := New[payload](total)
			ws := pushTracked(d, total)
			// A thief on another goroutine, as in the scheduler.
			stolen := make(chan int)
			go func() { stolen <- tt.steal(d) }()
			require.Equal(t, total, <-stolen)
			require.Zero(t, d.Len())
			require.Equal(t, total, reachable(ws),
				"stolen items were freed before the owner's next PopBottom: the package doc says they stay reachable until then")

			require.Nil(t, d.PopBottom(), "the owner finds the deque empty")
			require.Less(t, reachable(ws), clearThreshold,
				"the owner's PopBottom left clearThreshold or more stolen items reachable")
			runtime.KeepAlive(d)
		})
	}

	t.Run("PopBottom", func(t *testing.T) {
		d := New[payload](total)
		ws := pushTracked(d, total)
		for i := range total - 1 {
			require.NotNil(t, d.PopBottom())
			if i%clearThreshold == clearThreshold-1 {
				require.Less(t, reachable(ws[total-1-i:]), clearThreshold,
					"after %d pops, clearThreshold or more popped items are reachable", i+1)
			}
		}
		// The last item's claim moves top, so its slot is stale below
		// top, the others above bottom: fewer than clearThreshold on
		// each side.
		require.NotNil(t, d.PopBottom())
		require.LessOrEqual(t, reachable(ws), 2*(clearThreshold-1))
		runtime.KeepAlive(d)
	})
}

// TestPushBottomNDoesNotKeepItsSlice: PushBottomN's doc says xs is not
// kept; the deque holds the items, not the slice that carried them.
func TestPushBottomNDoesNotKeepItsSlice(t *testing.T) {
	d := New[int](2)
	items := []int{1, 2, 3}
	w := func() weak.Pointer[[3]*int] {
		xs := &[3]*int{&items[0], &items[1], &items[2]}
		d.PushBottomN(xs[:])
		return weak.Make(xs)
	}()
	runtime.GC()
	require.Nil(t, w.Value(), "the deque keeps the slice passed to PushBottomN")
	require.Equal(t, 3, d.Len())
	require.Same(t, &items[2], d.PopBottom())
}

// TestGrowthFreesTheOldRing: after a growth the owner never uses the old
// ring again, and once no thief holds it the garbage collector frees it,
// as the package documentation says.
func TestGrowthFreesTheOldRing(t *testing.T) {
	d := New[int](4)
	items := make([]int, 5)
	for i := range 4 {
		d.PushBottom(&items[i])
	}
	old := weak.Make(d.buf.Load())
	d.PushBottom(&items[4])
	require.Equal(t, 8, d.Cap())
	runtime.GC()
	require.Nil(t, old.Value(), "the ring before the growth is still reachable")
	for i := range items {
		require.Same(t, &items[i], d.Steal(), "item %d after the growth", i)
	}
}
