package scheduler

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTagSetAgainstMap drives the set and a map with the same random
// operations, with tags drawn from small ranges (many collisions and
// re-insertions), sequential runs (the usual shape of tags) and the full
// range (0 and the maximum included).
func TestTagSetAgainstMap(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 7))
		var ts tagSet
		model := map[uint64]bool{}
		for op := range 20000 {
			var tag uint64
			switch rng.IntN(3) {
			case 0:
				tag = rng.Uint64N(300)
			case 1:
				tag = uint64(op / 3)
			default:
				tag = rng.Uint64()
				if rng.IntN(50) == 0 {
					tag = ^uint64(0)
				}
			}
			if rng.IntN(2) == 0 {
				require.Equal(t, !model[tag], ts.add(tag), "add(%d)", tag)
				model[tag] = true
			} else {
				require.Equal(t, model[tag], ts.remove(tag), "remove(%d)", tag)
				delete(model, tag)
			}
			require.Equal(t, len(model), ts.len())
		}
		for tag := range model {
			require.True(t, ts.remove(tag), "remove(%d) at the end", tag)
		}
		require.Zero(t, ts.len())
	}
}

func BenchmarkTagSetAddRemove(b *testing.B) {
	var ts tagSet
	for i := range uint64(1000) {
		ts.add(i)
	}
	i := uint64(1000)
	for b.Loop() {
		ts.add(i)
		ts.remove(i - 1000)
		i++
	}
}

func BenchmarkMapAddRemove(b *testing.B) {
	m := map[uint64]struct{}{}
	for i := range uint64(1000) {
		m[i] = struct{}{}
	}
	i := uint64(1000)
	for b.Loop() {
		m[i] = struct{}{}
		delete(m, i-1000)
		i++
	}
}

func TestMethodTable(t *testing.T) {
	mt := newMethodTable()
	a, b := mt.id("a"), mt.id("b")
	require.NotZero(t, a)
	require.NotEqual(t, a, b)
	require.Equal(t, a, mt.id("a"))
	require.Equal(t, "b", mt.name(b))
	for i := range maxMethods {
		mt.id(string(rune('A'+i%26)) + itoa(i))
	}
	require.Zero(t, mt.id("one too many"), "past maxMethods names are not interned")
	require.Equal(t, a, mt.id("a"), "interned names stay")
}

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}
