package scheduler

import "math/bits"

// u64map maps uint64 keys to uint64 values for a process with many yields
// outstanding: open addressing with linear probing and backward-shift
// deletion, so it needs no tombstones and costs a multiply and a probe or
// two per operation. The zero value is an empty map. Not safe for
// concurrent use; proc.mu guards the ones in a procExtra.
type u64map struct {
	keys    []uint64 // 0 marks an empty slot; key 0 is kept in hasZero
	vals    []uint64 // vals[i] belongs to keys[i]
	n       int      // keys in keys
	hasZero bool
	zeroVal uint64
	shift   uint8 // 64 - log2(len(keys))
}

// len returns the number of keys. As every method of the map: called with the lock of whoever holds it (proc.mu, or the timer shard's lock).
func (m *u64map) len() int {
	if m.hasZero {
		return m.n + 1
	}
	return m.n
}

// home returns key's first slot. Called with the map owner's lock held.
func (m *u64map) home(key uint64) int {
	return int((key * 0x9E3779B97F4A7C15) >> m.shift)
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
	mask := len(m.keys) - 1
	for i := m.home(key); ; i = (i + 1) & mask {
		switch m.keys[i] {
		case key:
			return m.vals[i], true
		case 0:
			return 0, false
		}
	}
}

// add inserts key with val and reports false, changing nothing, if key
// was already present.
// Called with the map owner's lock held.
func (m *u64map) add(key, val uint64) bool {
	if key == 0 {
		if m.hasZero {
			return false
		}
		m.hasZero, m.zeroVal = true, val
		return true
	}
	if 2*(m.n+1) > len(m.keys) {
		m.grow()
	}
	mask := len(m.keys) - 1
	for i := m.home(key); ; i = (i + 1) & mask {
		switch m.keys[i] {
		case key:
			return false
		case 0:
			m.keys[i], m.vals[i] = key, val
			m.n++
			return true
		}
	}
}

// set stores val for key, adding key if it is not present.
// Called with the map owner's lock held.
func (m *u64map) set(key, val uint64) {
	if key == 0 {
		m.hasZero, m.zeroVal = true, val
		return
	}
	if m.n > 0 {
		mask := len(m.keys) - 1
		for i := m.home(key); m.keys[i] != 0; i = (i + 1) & mask {
			if m.keys[i] == key {
				m.vals[i] = val
				return
			}
		}
	}
	m.add(key, val)
}

// remove deletes key and returns its value and whether it was present.
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
	mask := len(m.keys) - 1
	i := m.home(key)
	for m.keys[i] != key {
		if m.keys[i] == 0 {
			return 0, false
		}
		i = (i + 1) & mask
	}
	val := m.vals[i]
	// Shift back the run after i so that every key stays reachable from
	// its home slot without passing an empty slot.
	for j := (i + 1) & mask; m.keys[j] != 0; j = (j + 1) & mask {
		h := m.home(m.keys[j])
		// Move keys[j] into the hole at i unless its home lies
		// cyclically in (i, j].
		if (j > i && (h <= i || h > j)) || (j < i && h <= i && h > j) {
			m.keys[i], m.vals[i] = m.keys[j], m.vals[j]
			i = j
		}
	}
	m.keys[i], m.vals[i] = 0, 0
	m.n--
	return val, true
}

// each calls f for every key and value, in no particular order.
// Called with the map owner's lock held.
func (m *u64map) each(f func(key, val uint64)) {
	if m.hasZero {
		f(0, m.zeroVal)
	}
	for i, k := range m.keys {
		if k != 0 {
			f(k, m.vals[i])
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
	m.keys, m.vals = make([]uint64, size), make([]uint64, size)
	m.shift = uint8(64 - bits.TrailingZeros(uint(size)))
}

// grow doubles the table (64 slots at first) and places every key again. Called with the map owner's lock held.
func (m *u64map) grow() {
	size := max(2*len(m.keys), 64)
	oldKeys, oldVals := m.keys, m.vals
	m.keys, m.vals = make([]uint64, size), make([]uint64, size)
	m.shift = uint8(64 - bits.TrailingZeros(uint(size)))
	m.n = 0
	for i, k := range oldKeys {
		if k != 0 {
			m.add(k, oldVals[i])
		}
	}
}
