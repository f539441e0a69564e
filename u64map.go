package scheduler

import "math/bits"

// u64map maps uint64 keys to uint64 values for a process with many yields
// outstanding: open addressing with linear probing, runs kept in Robin
// Hood order and backward-shift deletion, so it needs no tombstones and a
// search or a removal stops early. The zero value is an empty map.
// Not safe for concurrent use; proc.mu guards the ones in a procExtra.
//
// Keys come in runs: a process that starts ten thousand children numbers
// their yields one after another, and the scheduler's sequence numbers
// rise too. A map that large is larger than the cache, so what an
// operation costs is the cache lines it touches. The home slot therefore
// keeps a run together: the key's low homeBlockBits bits place it within
// a block of consecutive slots, and only the rest of the key is hashed to
// place the block (see home). Consecutive keys share cache lines, and
// keys that share their low bits (tags made by shifting, say) still
// spread over the table.
//
// The map never shrinks: removing keys keeps the slots of its largest
// size, so that a burst that comes back finds them. An owner that wants
// the memory back drops the map (a process's pending maps go with its
// end; the timer shard rebuilds its index when its heap shrinks).
type u64map struct {
	slots   []u64slot // key 0 marks an empty slot; key 0 is kept in hasZero
	n       int       // keys in slots
	hasZero bool
	zeroVal uint64
	shift   uint8 // 64 - log2(len(slots))
}

// homeBlockBits is how many low bits of a key place it within its block
// of home slots: 64 consecutive keys take 64 consecutive slots, 16 cache
// lines. Fewer bits lose the locality; more make the runs that blocks form
// when they meet longer. With a process that keeps hundreds of thousands
// of children outstanding (BenchmarkSpawnWide), 6 bits is the fastest of
// 0 (the whole key hashed), 4 and 6.
const homeBlockBits = 6

// u64slot is one key and its value, side by side, so that finding a key
// and reading its value touch one cache line rather than two.
type u64slot struct {
	key, val uint64
}

// len returns the number of keys. As every method of the map: called with the lock of whoever holds it (proc.mu, or the timer shard's lock).
func (m *u64map) len() int {
	if m.hasZero {
		return m.n + 1
	}
	return m.n
}

// home returns key's first slot: the block that a multiplicative
// (Fibonacci) hash of the key's high bits picks, plus the key's low
// homeBlockBits bits. Called with the map owner's lock held; the map has
// slots.
func (m *u64map) home(key uint64) int {
	block := ((key >> homeBlockBits) * 0x9E3779B97F4A7C15) >> m.shift
	return int(block+key&(1<<homeBlockBits-1)) & (len(m.slots) - 1)
}

// find returns the slot that holds key and true, or, if key is absent,
// the slot where it belongs and false. Keys along a run of full slots are
// in the order of their home slots (see add), so the search stops at the
// first key whose home comes after key's: key would have been placed
// before it. Called with the map owner's lock held; the map has slots and
// key is not 0.
func (m *u64map) find(key uint64) (int, bool) {
	mask := len(m.slots) - 1
	for i, d := m.home(key), 0; ; i, d = (i+1)&mask, d+1 {
		k := m.slots[i].key
		if k == key {
			return i, true
		}
		if k == 0 || (i-m.home(k))&mask < d {
			return i, false
		}
	}
}

// get returns the value of key and whether it is present.
// Called with the map owner's lock held.
func (m *u64map) get(key uint64) (uint64, bool) {
	if key == 0 {
		return m.zeroVal, m.hasZero
	}
	if m.n == 0 {
		return 0, false
	}
	if i, ok := m.find(key); ok {
		return m.slots[i].val, true
	}
	return 0, false
}

// add inserts key with val and reports false, changing nothing, if key
// was already present. The key goes where find stops, and the keys from
// there to the end of the run move up one slot, which keeps every run in
// the order of its keys' homes (Robin Hood order): that is what lets find
// and remove stop early.
// Called with the map owner's lock held.
func (m *u64map) add(key, val uint64) bool {
	if key == 0 {
		if m.hasZero {
			return false
		}
		m.hasZero, m.zeroVal = true, val
		return true
	}
	var i int
	if len(m.slots) > 0 {
		var found bool
		if i, found = m.find(key); found {
			return false
		}
	}
	if 2*(m.n+1) > len(m.slots) {
		m.grow()
		i, _ = m.find(key)
	}
	mask := len(m.slots) - 1
	e := i
	for m.slots[e].key != 0 {
		e = (e + 1) & mask
	}
	for ; e != i; e = (e - 1) & mask {
		m.slots[e] = m.slots[(e-1)&mask]
	}
	m.slots[i] = u64slot{key, val}
	m.n++
	return true
}

// set stores val for key, adding key if it is not present.
// Called with the map owner's lock held.
func (m *u64map) set(key, val uint64) {
	if key == 0 {
		m.hasZero, m.zeroVal = true, val
		return
	}
	if m.n > 0 {
		if i, ok := m.find(key); ok {
			m.slots[i].val = val
			return
		}
	}
	m.add(key, val)
}

// remove deletes key and returns its value and whether it was present.
// The keys after it in its run move down one slot, up to the first empty
// slot or the first key already in its home slot: in Robin Hood order no
// key after that one has its home before it, so none may move. A run of
// consecutive keys, each in its home slot, therefore costs nothing to
// remove from.
// Called with the map owner's lock held.
func (m *u64map) remove(key uint64) (uint64, bool) {
	if key == 0 {
		v, ok := m.zeroVal, m.hasZero
		m.hasZero, m.zeroVal = false, 0
		return v, ok
	}
	if m.n == 0 {
		return 0, false
	}
	i, ok := m.find(key)
	if !ok {
		return 0, false
	}
	val := m.slots[i].val
	mask := len(m.slots) - 1
	for {
		j := (i + 1) & mask
		k := m.slots[j].key
		if k == 0 || m.home(k) == j {
			break
		}
		m.slots[i] = m.slots[j]
		i = j
	}
	m.slots[i] = u64slot{}
	m.n--
	return val, true
}

// each calls f for every key and value, in no particular order.
// Called with the map owner's lock held.
func (m *u64map) each(f func(key, val uint64)) {
	if m.hasZero {
		f(0, m.zeroVal)
	}
	for _, sl := range m.slots {
		if sl.key != 0 {
			f(sl.key, sl.val)
		}
	}
}

// reserve sizes an empty map for n keys, so that adding them does not
// grow it step by step.
// Called with the map owner's lock held.
func (m *u64map) reserve(n int) {
	size := 64
	for size < 2*n {
		size *= 2
	}
	m.slots = make([]u64slot, size)
	m.shift = uint8(64 - bits.TrailingZeros(uint(size)))
}

// grow doubles the table (64 slots at first) and places every key again. Called with the map owner's lock held.
func (m *u64map) grow() {
	size := max(2*len(m.slots), 64)
	old := m.slots
	m.slots = make([]u64slot, size)
	m.shift = uint8(64 - bits.TrailingZeros(uint(size)))
	m.n = 0
	for _, sl := range old {
		if sl.key != 0 {
			m.add(sl.key, sl.val)
		}
	}
}
