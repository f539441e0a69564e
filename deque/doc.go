// Package deque implements a growable Chase-Lev work-stealing deque.
//
// A [Deque] has one owner, which pushes and pops at the bottom like a
// stack (LIFO, so it keeps working on what it touched last, which is still
// in its cache), and any number of thieves, which take the oldest items from
// the top (FIFO, so they take work the owner will not get to soon). It is
// the per-worker run queue of the scheduler in the parent module.
//
// # Algorithm
//
// The deque is the dynamic circular work-stealing deque of Chase and Lev
// (SPAA 2005), with the memory orderings of Lê, Pop, Cohen and Zappa Nardelli
// ("Correct and Efficient Work-Stealing for Weak Memory Models", PPoPP 2013).
// Items live in a power-of-two ring indexed by two ever-increasing counters:
// top (the oldest item) and bottom (one past the newest). The live items are
// the indices [top, bottom).
//
//   - PushBottom writes the slot at bottom, then increments bottom. When the
//     ring is full it first copies the live range into a ring twice as large;
//     no item is ever dropped. PushBottomN writes several slots, then
//     moves bottom past all of them with one store.
//   - PopBottom decrements bottom first (reserving the newest index), then
//     reads top. If more than one item remains the newest is the owner's
//     without further synchronisation. If exactly one remains, owner and
//     thieves race for it with a CAS on top. If none remains, bottom is
//     restored.
//   - Steal reads top, then bottom, then the ring and the slot at top, and
//     claims the item with a CAS that moves top from the value it read to the
//     next. A failed CAS means somebody else took that item, and Steal
//     returns nil.
//   - StealHalfInto claims about half the items, one CAS per item, and
//     publishes them in the thief's own deque with one store of its bottom.
//
// # Why StealHalfInto uses a CAS per item
//
// Claiming n > 1 items with one CAS (top from t to t+n) is unsafe on this
// deque: the owner pops the newest item without a CAS whenever it sees more
// than one item, and the top it compares against may be the old t while a
// thief's CAS is in flight. A thief that read bottom before a run of such
// pops would then claim items the owner has already taken, and a later push
// could land inside the claimed range. Making every pop synchronise on top
// would slow the owner's fast path for the sake of an occasional steal; a CAS
// per stolen item keeps the owner's path untouched and costs the thief one
// uncontended CAS per item, while the batch still moves in one visit and is
// published to the thief's own deque at once. The tests in this package
// check the result: exactly-once accounting under concurrent owner pops and
// thieves, and linearizability of the individual claims with porcupine.
//
// # Memory ordering
//
// Every atomic operation in Go's sync/atomic is sequentially consistent,
// which is at least as strong as each ordering the algorithm needs:
//
//   - The store of bottom in PushBottom releases the slot written before it
//     (in PushBottomN, every slot written before it);
//     a thief's load of bottom acquires it, and the thief loads the ring and
//     the slot only after that load.
//   - In PopBottom the store of the decremented bottom must be ordered before
//     the load of top (a store-load fence on weak hardware): otherwise the
//     owner and a thief could each see the other's old value and both take
//     the last item. Sequential consistency provides the fence.
//   - In Steal the load of top is ordered before the load of bottom, so a
//     thief never sees a bottom newer than its top by more than the items
//     that really existed, and the CAS on top orders claims among thieves
//     and the owner's last-item CAS.
//   - The ring pointer is stored before the bottom that first makes the new
//     ring's slots necessary, so a thief that loads the ring after bottom
//     finds every slot it may claim. Old rings are only read after a grow,
//     never written, and hold the same items at the same indices; the
//     garbage collector frees them once no thief holds one.
//
// Slots are atomic pointers: a thief with a stale top can read a slot that
// the owner is overwriting after a wrap-around. It then loses its CAS and
// discards what it read, but the read must still not be a data race, so that
// the race detector stays silent by construction.
//
// # Not keeping items alive
//
// A popped or stolen item's slot is cleared so the deque does not keep
// finished work reachable. Clearing needs an atomic store, so the owner does
// it in batches, in PopBottom: a PopBottom that finds 64 stale slots piled
// up above bottom or below top clears that side, so after a PopBottom at
// most 63 on each side stay reachable (one that loses the last item to a
// thief leaves the clearing to the next). Pushes and thieves clear nothing
// (a thief cannot: once top has passed a slot, the owner may fill it
// again), so items stolen since the owner's last PopBottom stay
// reachable, however many, until its next PopBottom or until pushes write
// over their slots. A PopBottom that finds the deque empty also leaves
// fewer than 64 as they are: a deque that its owner fills and
// empties again and again has its slots above bottom written over by the
// next pushes, and clearing them every time would cost a store each for
// nothing. Only indices below top (claimed for good by a CAS) or at or
// above bottom (popped by the owner) are cleared, and never one whose slot
// a live index shares.
//
// # Who may call what
//
// PushBottom, PushBottomN, PopBottom and Mark: only the owner. Steal, Len
// and Cap: any goroutine. StealHalfInto: any goroutine that owns the
// destination deque.
// The owner is whichever goroutine uses the bottom end; ownership may move
// between goroutines only through a happens-before edge (a mutex, a
// channel).
package deque
