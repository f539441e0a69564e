package scheduler

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestU64MapAgainstMap drives the map and a Go map with the same random
// operations, with keys drawn from small ranges (many collisions and
// re-insertions), sequential runs (the usual shape of tags) and the full
// range (0 and the maximum included).
func TestU64MapAgainstMap(t *testing.T) {
	seeds := uint64(20)
	if testing.Short() {
		seeds = 5
	}
	for seed := range seeds {
		rng := rand.New(rand.NewPCG(seed, 7))
		var m u64map
		model := map[uint64]uint64{}
		for op := range 20000 {
			var key uint64
			switch rng.IntN(3) {
			case 0:
				key = rng.Uint64N(300)
			case 1:
				key = uint64(op / 3)
			default:
				key = rng.Uint64()
				if rng.IntN(50) == 0 {
					key = ^uint64(0)
				}
			}
			want, present := model[key]
			switch rng.IntN(4) {
			case 3:
				val := rng.Uint64()
				m.set(key, val)
				model[key] = val
			case 0:
				val := rng.Uint64()
				require.Equal(t, !present, m.add(key, val), "add(%d)", key)
				if !present {
					model[key] = val
				}
			case 1:
				got, ok := m.remove(key)
				require.Equal(t, present, ok, "remove(%d)", key)
				require.Equal(t, want, got, "value removed for %d", key)
				delete(model, key)
			default:
				got, ok := m.get(key)
				require.Equal(t, present, ok, "get(%d)", key)
				require.Equal(t, want, got, "get(%d)", key)
			}
			require.Equal(t, len(model), m.len())
		}
		seen := map[uint64]uint64{}
		m.each(func(k, v uint64) { seen[k] = v })
		require.Equal(t, model, seen, "each")
		for key, val := range model {
			got, ok := m.remove(key)
			require.True(t, ok, "remove(%d) at the end", key)
			require.Equal(t, val, got)
		}
		require.Zero(t, m.len())
	}
}

func BenchmarkU64MapAddRemove(b *testing.B) {
	var m u64map
	for i := range uint64(1000) {
		m.add(i, i)
	}
	i := uint64(1000)
	for b.Loop() {
		m.add(i, i)
		m.remove(i - 1000)
		i++
	}
}

// slotOf returns the slot that holds key, which must be present and not 0.
func (m *u64map) slotOf(key uint64) int {
	mask := len(m.slots) - 1
	for i := m.home(key); ; i = (i + 1) & mask {
		if m.slots[i].key == key {
			return i
		}
	}
}

// TestU64MapKeepsRunsTogether: consecutive keys, the usual shape of tags
// and sequence numbers, sit in consecutive slots, so that a map larger
// than the cache costs a few cache lines per run of keys rather than one
// per key.
func TestU64MapKeepsRunsTogether(t *testing.T) {
	for _, base := range []uint64{1, 1 << 20, 5_000_001, 1 << 40} {
		var m u64map
		const n = 1 << 14
		for k := base; k < base+n; k++ {
			m.add(k, k)
		}
		adjacent := 0
		for k := base; k < base+n-1; k++ {
			if m.slotOf(k+1) == (m.slotOf(k)+1)&(len(m.slots)-1) {
				adjacent++
			}
		}
		require.GreaterOrEqual(t, adjacent, (n-1)*9/10,
			"keys %d.. : only %d of %d consecutive pairs in adjacent slots", base, adjacent, n-1)
	}
}

// TestU64MapSpreadsStructuredKeys: keys that share their low bits (tags
// made by shifting, strides of powers of two) or that step by odd amounts
// still spread over the table: the average key sits a few slots from its
// home, as with random keys, instead of queueing behind the others.
func TestU64MapSpreadsStructuredKeys(t *testing.T) {
	const n = 1 << 12
	strides := []uint64{1, 2, 3, 7, 63, 64, 65, 100, 1 << 10, 1000, 1 << 16, 1 << 32, 1<<32 + 1, 1 << 40, 1 << 52}
	for _, stride := range strides {
		var m u64map
		for i := range uint64(n) {
			m.add(1+i*stride, i)
		}
		mask := len(m.slots) - 1
		total := 0
		for i := range uint64(n) {
			k := 1 + i*stride
			total += (m.slotOf(k) - m.home(k)) & mask
		}
		require.LessOrEqual(t, float64(total)/n, 4.0, "stride %d: average distance from home", stride)
	}
}

func BenchmarkU64MapWindow(b *testing.B) {
	for _, w := range []uint64{100, 1000, 100_000, 1_000_000} {
		b.Run(fmt.Sprint(w), func(b *testing.B) {
			var m u64map
			for i := range w {
				m.add(i+1, i)
			}
			i := w + 1
			for b.Loop() {
				m.add(i, i)
				m.remove(i - w)
				i++
			}
		})
	}
}

// TestU64MapRunsAcrossTheEnd: keys that share a home slot, the last one
// of the table, form a run that wraps round to its first slots; every
// key of it stays found while others are removed from any place in it
// (the backward shift crosses the end too), added again, and while the
// table grows under it. Key 0 and the largest key are kept beside them.
func TestU64MapRunsAcrossTheEnd(t *testing.T) {
	var probe u64map
	probe.reserve(1) // 64 slots, the size a map starts with
	last := len(probe.slots) - 1
	var keys []uint64
	for k := uint64(1); len(keys) < 24; k++ {
		if probe.home(k) == last {
			keys = append(keys, k)
		}
	}
	var m u64map
	require.True(t, m.add(0, 100))
	require.True(t, m.add(^uint64(0), 200))
	for i, k := range keys {
		require.True(t, m.add(k, uint64(i)), "add(%d)", k)
	}
	require.Len(t, m.slots, len(probe.slots), "the map grew: the run does not wrap")
	require.Equal(t, keys[len(keys)-1], m.slots[(last+len(keys)-1)&last].key, "the run's last key, past the end")
	check := func(present map[uint64]uint64) {
		t.Helper()
		require.Equal(t, len(present), m.len())
		for k, v := range present {
			got, ok := m.get(k)
			require.True(t, ok, "get(%d)", k)
			require.Equal(t, v, got, "get(%d)", k)
		}
	}
	present := map[uint64]uint64{0: 100, ^uint64(0): 200}
	for i, k := range keys {
		present[k] = uint64(i)
	}
	check(present)
	// Out of the run: its first key, one in the slots before the end,
	// the one at the end, one past it, and its last.
	for _, i := range []int{0, 5, 1, 12, 23} {
		v, ok := m.remove(keys[i])
		require.True(t, ok, "remove(%d)", keys[i])
		require.Equal(t, uint64(i), v)
		delete(present, keys[i])
		check(present)
		_, ok = m.remove(keys[i])
		require.False(t, ok, "remove(%d) again", keys[i])
	}
	// Back in, with new values, then beyond the size that grows it.
	for _, i := range []int{12, 0, 23, 1, 5} {
		require.True(t, m.add(keys[i], uint64(1000+i)))
		present[keys[i]] = uint64(1000 + i)
		check(present)
	}
	for k := uint64(1 << 40); len(present) < 80; k++ {
		require.True(t, m.add(k, k))
		present[k] = k
	}
	require.Greater(t, len(m.slots), len(probe.slots), "the map did not grow")
	check(present)
	for k := range present {
		_, ok := m.remove(k)
		require.True(t, ok, "remove(%d)", k)
	}
	require.Zero(t, m.len())
	_, ok := m.get(keys[3])
	require.False(t, ok)
}

// TestU64MapKeepsItsSizeAfterABurst: removing every key of a burst keeps
// the slots of the map's largest size (it never shrinks, as its doc
// says), and the emptied map works as a new one would.
func TestU64MapKeepsItsSizeAfterABurst(t *testing.T) {
	var m u64map
	for k := uint64(1); k <= 1000; k++ {
		m.add(k, k)
	}
	size := len(m.slots)
	require.GreaterOrEqual(t, size, 2000)
	for k := uint64(1); k <= 1000; k++ {
		_, ok := m.remove(k)
		require.True(t, ok)
	}
	require.Zero(t, m.len())
	require.Len(t, m.slots, size, "slots after the burst")
	require.True(t, m.add(7, 70))
	v, ok := m.get(7)
	require.True(t, ok)
	require.Equal(t, uint64(70), v)
	_, ok = m.get(8)
	require.False(t, ok)
}
