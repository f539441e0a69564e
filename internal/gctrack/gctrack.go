// Package gctrack lets the tests of the run queues check what they keep
// reachable: an item popped or stolen must be free for the garbage
// collector once nothing else refers to it, and one still queued must
// not be. The tests push tracked items and ask, after a collection, how
// many are still reachable.
//
// It is for the tests of this module only.
package gctrack

import (
	"runtime"
	"weak"
)

// Item is a tracked item. It is large enough and holds no pointer, so
// the allocator does not pack it with its neighbours into one block,
// which would keep it alive as long as any of them.
type Item struct {
	ID int
	_  [24]byte
}

// Push makes count new items, numbered from 0, hands each to push, and
// returns weak pointers to them. Making them here keeps no strong
// reference in the caller's frame.
func Push(count int, push func(*Item)) []weak.Pointer[Item] {
	ws := make([]weak.Pointer[Item], count)
	for i := range ws {
		p := &Item{ID: i}
		ws[i] = weak.Make(p)
		push(p)
	}
	return ws
}

// Reachable runs a collection and counts the items of ws it did not free.
func Reachable(ws []weak.Pointer[Item]) int {
	runtime.GC()
	n := 0
	for _, w := range ws {
		if w.Value() != nil {
			n++
		}
	}
	return n
}
