package deque

import (
	"fmt"
	"math/bits"
	"sync/atomic"
)

// clearThreshold is how many stale slots the owner lets pile up on either
// side of the live range before a PopBottom clears them (thieves and pushes
// never clear, so slots of items stolen between two of the owner's pops
// pile up past it until the second one). Clearing lets the garbage
// collector reclaim items the deque no longer holds; batching it keeps
// PopBottom free of an extra atomic store in the common case. Fewer stale
// slots than this are left as they are even when the deque is found empty:
// the next pushes write over those above bottom (a deque filled and
// emptied by its owner again and again, as a worker taking batches of
// processes does, then clears only the slots that the last item's claim
// leaves below top, one a batch, clearThreshold at a time), and at most
// 2*clearThreshold-2 items stay reachable for it.
const clearThreshold = 64

// Deque is a growable Chase-Lev work-stealing deque of *T.
//
// One goroutine, the owner, pushes and pops at the bottom; any goroutine
// may steal from the top. The zero value is not usable: create one with
// [New]. See the package documentation for the algorithm and the
// memory-ordering argument.
type Deque[T any] struct {
	// top is the index of the oldest item. Only ever incremented, and only
	// by a successful CompareAndSwap: by a thief claiming the oldest item,
	// or by the owner claiming the last one. Its loads in Steal and
	// PopBottom synchronise with those CASes.
	top atomic.Int64
	_   [56]byte // keeps top (written by thieves) and bottom (written by the owner) on separate cache lines

	// bottom is one past the newest item. Stored only by the owner; the
	// store in PushBottom publishes the slot written just before it to
	// thieves, whose load of bottom synchronises with it.
	bottom atomic.Int64

	// buf is the current ring. Replaced only by the owner when it grows;
	// thieves load it after loading bottom, so a ring they see holds every
	// slot published by that bottom.
	buf atomic.Pointer[ring[T]]

	// The fields below are owner-only bookkeeping for clearing stale
	// slots (see clearStale). Thieves never read them.

	// cleanLow: slots of indices below cleanLow (and below top) hold nil.
	cleanLow int64
	// dirtyHigh: slots of indices at or above dirtyHigh hold nil, except
	// after wrap-around, which the clearing bounds account for.
	dirtyHigh int64
	_         [40]byte // keeps the owner's fields off the next allocation's line
}

// ring is a power-of-two circular buffer. Slots are atomic because a thief
// holding a stale index may read a slot the owner is rewriting; such a
// thief always loses its CAS on top, but the read itself must not race.
type ring[T any] struct {
	mask  int64
	slots []atomic.Pointer[T]
}

func newRing[T any](capacity int64) *ring[T] {
	return &ring[T]{mask: capacity - 1, slots: make([]atomic.Pointer[T], capacity)}
}

func (r *ring[T]) slot(i int64) *atomic.Pointer[T] { return &r.slots[i&r.mask] }

// maxCapacity is the largest capacity New takes: a first ring of 1<<32
// slots is 32 GiB of pointers. Above it, the rounding to a power of two
// overflows or the allocation fails with a fatal error no caller can
// recover from, so New refuses it with a panic that names the value.
const maxCapacity = 1 << 32

// New returns an empty deque whose ring holds capacity items before its
// first growth. The capacity is rounded up to a power of two; values below
// 1 are treated as 1. A capacity above 1<<32 panics, with nothing
// allocated: the ring grows as items come, so the capacity only saves the
// first growths, and one that large is a mistake.
func New[T any](capacity int) *Deque[T] {
	if int64(capacity) > maxCapacity {
		panic(fmt.Sprintf("deque: New capacity %d above 1<<32", capacity))
	}
	d := &Deque[T]{}
	d.buf.Store(newRing[T](roundPow2(capacity)))
	return d
}

func roundPow2(n int) int64 {
	if n <= 1 {
		return 1
	}
	return 1 << bits.Len64(uint64(n-1))
}

// PushBottom adds x at the bottom. The ring grows when full, so no item is
// ever lost. x must not be nil: a nil panics with nothing pushed, since
// nil is what PopBottom and Steal return for an empty deque.
//
// Owner only.
func (d *Deque[T]) PushBottom(x *T) {
	if x == nil {
		panic("deque: PushBottom of nil")
	}
	b := d.bottom.Load()
	t := d.top.Load()
	r := d.buf.Load()
	if b-t >= int64(len(r.slots)) {
		r = d.grow(r, t, b, 1)
	}
	r.slot(b).Store(x)
	if b >= d.dirtyHigh {
		d.dirtyHigh = b + 1
	}
	d.bottom.Store(b + 1) // publishes the slot to thieves
}

// PushBottomN adds the items of xs at the bottom in order, as that many
// calls of PushBottom would, so xs's last item is the newest. The ring
// grows at most once. Thieves see all of them at once: one store of
// bottom publishes every slot, where PushBottom spends one per item (an
// atomic store, which costs a locked instruction on amd64). No item may
// be nil: a nil panics with none of xs pushed. xs is not kept.
//
// Owner only.
func (d *Deque[T]) PushBottomN(xs []*T) {
	n := int64(len(xs))
	if n == 0 {
		return
	}
	b := d.bottom.Load()
	t := d.top.Load()
	r := d.buf.Load()
	if b-t+n > int64(len(r.slots)) {
		r = d.grow(r, t, b, n)
	}
	// Raised first, so that the slots written before a nil is found are
	// cleared like any stale slot (see clearStale).
	if b+n > d.dirtyHigh {
		d.dirtyHigh = b + n
	}
	for _, x := range xs {
		if x == nil {
			panic("deque: PushBottomN of nil")
		}
		r.slot(b).Store(x)
		b++
	}
	d.bottom.Store(b) // publishes the n slots to thieves
}

// PopBottom removes and returns the newest item, or nil when the deque is
// empty. It never fails spuriously: nil means that, at some instant during
// the call, the deque was empty.
//
// Owner only.
func (d *Deque[T]) PopBottom() *T {
	b := d.bottom.Load() - 1
	r := d.buf.Load()
	// Reserve index b before looking at top. A thief that loads bottom
	// after this store will not claim b; one that loaded it before is
	// caught below, because its CAS and our load of top are ordered.
	d.bottom.Store(b)
	t := d.top.Load()
	if t > b {
		// Empty. Undo the reservation.
		d.bottom.Store(b + 1)
		d.clearPiled(t, b+1)
		return nil
	}
	x := r.slot(b).Load()
	if t == b {
		// Last item: thieves may be after it too. Whoever moves top wins.
		if !d.top.CompareAndSwap(t, t+1) {
			x = nil
		}
		d.bottom.Store(b + 1)
		if x != nil {
			d.clearPiled(t+1, b+1)
		}
		return x
	}
	// More than one item: index b is ours without a CAS. A thief could take
	// b only by a CAS from top == b, and top reaches b only after our load
	// of top returned t < b, which came after our reservation; so that
	// thief's later load of bottom sees b (or a newer push) and it finds
	// nothing at b to claim.
	d.clearPiled(t, b)
	return x
}

// clearPiled calls clearStale when a side of the live range [t, b) has
// clearThreshold stale slots, the one case in which it does anything: the
// check costs a few instructions where the call costs thirty, on every
// pop. Owner only.
func (d *Deque[T]) clearPiled(t, b int64) {
	if t-d.cleanLow >= clearThreshold || d.dirtyHigh-b >= clearThreshold {
		d.clearStale(t, b)
	}
}

// clearStale clears slots that no longer hold live items so they do not
// keep popped or stolen items reachable. t and b bound the live range
// [t, b) as the owner last saw it; every index below t has been claimed by
// a CAS on top, so no thief can succeed in taking it any more, and every
// index at or above b has been popped by the owner. It clears a side only
// once it has clearThreshold stale slots, which keeps the amortised cost
// per operation to a comparison (see clearPiled).
//
// Owner only.
func (d *Deque[T]) clearStale(t, b int64) {
	r := d.buf.Load()
	capacity := int64(len(r.slots))
	if t-d.cleanLow >= clearThreshold {
		// Indices in [max(cleanLow, b-cap), t) map to slots that no live
		// index in [t, b) shares: a live alias would be i+cap >= b.
		lo := max(d.cleanLow, b-capacity)
		for i := lo; i < t; i++ {
			r.slot(i).Store(nil)
		}
		d.cleanLow = t
	}
	if d.dirtyHigh-b >= clearThreshold {
		// Indices in [b, dirtyHigh) were written when bottom was at most
		// dirtyHigh and top at least dirtyHigh-cap <= t, so they alias no
		// live index either.
		for i := b; i < d.dirtyHigh; i++ {
			r.slot(i).Store(nil)
		}
		d.dirtyHigh = b
	}
}

// Steal removes and returns the oldest item. It returns nil when the deque
// is empty or when it lost a race for the item with another thief or the
// owner; callers that must distinguish the two check [Deque.Len].
//
// Any goroutine.
func (d *Deque[T]) Steal() *T {
	t := d.top.Load()
	b := d.bottom.Load()
	if t >= b {
		return nil
	}
	// Load the ring after bottom: a ring loaded now holds every slot up to
	// the bottom just read (the owner grows before publishing).
	r := d.buf.Load()
	// Read before the CAS: once top moves past t the owner may reuse the
	// slot. If the CAS succeeds, nobody claimed t between our load of top
	// and now, so the slot still held item t when we read it.
	x := r.slot(t).Load()
	if !d.top.CompareAndSwap(t, t+1) {
		return nil
	}
	return x
}

// StealHalfInto moves about half of d's items (rounded up, so a single item
// is taken too) from d's top to dst's bottom, oldest first, and returns how
// many it moved. It stops early when d runs empty.
//
// Each item is claimed with its own CAS on top, exactly as in Steal: a
// single CAS that claims n > 1 items is unsafe on a Chase-Lev deque because
// the owner pops from the bottom without a CAS while top still holds the
// old value, so the owner and the thief could both take the same item. The
// moved items become visible to dst's thieves with a single store of dst's
// bottom at the end.
//
// Any goroutine, provided it is dst's owner. dst must not be d: that
// panics with nothing moved.
func (d *Deque[T]) StealHalfInto(dst *Deque[T]) int {
	return d.stealHalfInto(dst, nil)
}

// stealHalfInto is StealHalfInto with an optional hook that tests use to
// time-stamp each claim. Before each claim attempt it calls claim(nil,
// false); after the attempt, claim(x, true) with the item, nil if the
// attempt lost a race.
func (d *Deque[T]) stealHalfInto(dst *Deque[T], claim func(x *T, done bool)) int {
	if dst == d {
		panic("deque: StealHalfInto into itself")
	}
	t := d.top.Load()
	b := d.bottom.Load()
	want := (b - t + 1) / 2
	if want <= 0 {
		return 0
	}
	// Make room in dst for the most we may move; dst is ours, so its
	// top can only grow meanwhile, which only adds room.
	db := dst.bottom.Load()
	dr := dst.buf.Load()
	if dt := dst.top.Load(); db-dt+want > int64(len(dr.slots)) {
		dr = dst.grow(dr, dt, db, want)
	}
	var moved int64
	for moved < want {
		if claim != nil {
			claim(nil, false)
		}
		t = d.top.Load()
		b = d.bottom.Load()
		if t >= b {
			if claim != nil {
				claim(nil, true)
			}
			break
		}
		r := d.buf.Load()
		x := r.slot(t).Load()
		if !d.top.CompareAndSwap(t, t+1) {
			// Another thief or the owner took index t; it made progress,
			// so retrying cannot livelock.
			if claim != nil {
				claim(nil, true)
			}
			continue
		}
		if claim != nil {
			claim(x, true)
		}
		dr.slot(db + moved).Store(x)
		moved++
	}
	if moved > 0 {
		if db+moved > dst.dirtyHigh {
			dst.dirtyHigh = db + moved
		}
		dst.bottom.Store(db + moved) // publishes all moved slots at once
	}
	return int(moved)
}

// grow replaces r, which holds the live range [t, b), by a ring with room
// for at least extra more items, copies the live range and returns the new
// ring. Thieves still reading the old ring find the same items at the same
// indices there, and the owner never writes the old ring again.
//
// Owner only.
func (d *Deque[T]) grow(r *ring[T], t, b, extra int64) *ring[T] {
	capacity := int64(len(r.slots))
	for capacity < b-t+extra {
		capacity *= 2
	}
	nr := newRing[T](capacity)
	for i := t; i < b; i++ {
		nr.slot(i).Store(r.slot(i).Load())
	}
	d.buf.Store(nr) // published before the bottom store that follows
	// Stale slots stayed behind in the old ring.
	d.cleanLow, d.dirtyHigh = t, b
	return nr
}

// Len returns the number of items at some instant during the call. With
// concurrent operations it is only a hint.
//
// Any goroutine.
func (d *Deque[T]) Len() int {
	return d.length(nil)
}

// length is Len with an optional hook that tests use to act between the
// loads of top and bottom. Top and bottom are two words, read one after
// the other: a thief's claim and a push in between would give a count
// the deque never held. Top only grows, so a top that reads the same after
// bottom's load held that value when bottom was loaded, and the pair is
// the deque as it was at that instant. A top that moved means a claim
// succeeded meanwhile, so the retry does not livelock.
func (d *Deque[T]) length(between func()) int {
	for {
		t := d.top.Load()
		if between != nil {
			between()
		}
		b := d.bottom.Load()
		if d.top.Load() != t {
			continue
		}
		if n := b - t; n > 0 {
			return int(n)
		}
		return 0
	}
}

// Mark returns the position one past the newest item. It rises by one
// with every item pushed and falls by one with every item PopBottom
// takes from among others; nothing else moves it (PopBottom of the last
// item, like a steal, moves the other end). Items never move, so an
// owner that took m := Mark() earlier and now finds Mark() > m with the
// deque not empty knows that its newest item was pushed after that
// call: no item it held then sat at position m or above.
//
// Owner only.
func (d *Deque[T]) Mark() int64 {
	return d.bottom.Load()
}

// Cap returns the number of items the current ring holds before growing.
//
// Any goroutine.
func (d *Deque[T]) Cap() int {
	return len(d.buf.Load().slots)
}
