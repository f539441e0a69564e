package scheduler

import (
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
