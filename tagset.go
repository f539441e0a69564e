package scheduler

import "math/bits"

// tagSet is a set of uint64 yield tags for a process with many yields
// outstanding: open addressing with linear probing and backward-shift
// deletion, so it needs no tombstones and costs a multiply and a probe or
// two per operation. The zero value is an empty set. Not safe for
// concurrent use; proc.mu guards it.
type tagSet struct {
	keys    []uint64 // 0 marks an empty slot; tag 0 is kept in hasZero
	n       int      // tags in keys
	hasZero bool
	shift   uint8 // 64 - log2(len(keys))
}

func (ts *tagSet) len() int {
	if ts.hasZero {
		return ts.n + 1
	}
	return ts.n
}

func (ts *tagSet) home(tag uint64) int {
	return int((tag * 0x9E3779B97F4A7C15) >> ts.shift)
}

// add inserts tag and reports false if it was already present.
func (ts *tagSet) add(tag uint64) bool {
	if tag == 0 {
		if ts.hasZero {
			return false
		}
		ts.hasZero = true
		return true
	}
	if 2*(ts.n+1) > len(ts.keys) {
		ts.grow()
	}
	mask := len(ts.keys) - 1
	for i := ts.home(tag); ; i = (i + 1) & mask {
		switch ts.keys[i] {
		case tag:
			return false
		case 0:
			ts.keys[i] = tag
			ts.n++
			return true
		}
	}
}

// remove deletes tag and reports whether it was present.
func (ts *tagSet) remove(tag uint64) bool {
	if tag == 0 {
		ok := ts.hasZero
		ts.hasZero = false
		return ok
	}
	if ts.n == 0 {
		return false
	}
	mask := len(ts.keys) - 1
	i := ts.home(tag)
	for ts.keys[i] != tag {
		if ts.keys[i] == 0 {
			return false
		}
		i = (i + 1) & mask
	}
	// Shift back the run after i so that every key stays reachable from
	// its home slot without passing an empty slot.
	for j := (i + 1) & mask; ts.keys[j] != 0; j = (j + 1) & mask {
		h := ts.home(ts.keys[j])
		// Move keys[j] into the hole at i unless its home lies
		// cyclically in (i, j].
		if (j > i && (h <= i || h > j)) || (j < i && h <= i && h > j) {
			ts.keys[i] = ts.keys[j]
			i = j
		}
	}
	ts.keys[i] = 0
	ts.n--
	return true
}

func (ts *tagSet) grow() {
	size := max(2*len(ts.keys), 64)
	old := ts.keys
	ts.keys = make([]uint64, size)
	ts.shift = uint8(64 - bits.TrailingZeros(uint(size)))
	ts.n = 0
	for _, k := range old {
		if k != 0 {
			ts.add(k)
		}
	}
}
