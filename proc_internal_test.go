package scheduler

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPendingSetReservesMapsOnce: a step that yields more than fit the
// pending slice (a parent spawning a hundred children) moves to the maps
// once, sized for all of them: the record of the maps and the two maps'
// arrays, not a regrowth of both maps at every doubling.
func TestPendingSetReservesMapsOnce(t *testing.T) {
	const n = 100
	allocs := testing.AllocsPerRun(20, func() {
		p := new(proc)
		p.reservePending(n)
		for i := range uint64(n) {
			if !p.addPending(i+1, 2*i+1) {
				t.Fatalf("tag %d refused", i+1)
			}
		}
	})
	// The proc, its extra, the largePending, and keys and values of
	// each of the two maps.
	require.LessOrEqual(t, allocs, 7.0, "allocations to record %d pending yields", n)
	p := new(proc)
	p.reservePending(n)
	for i := range uint64(n) {
		require.True(t, p.addPending(i+1, 2*i+1))
	}
	x := p.extra.Load()
	require.NotNil(t, x)
	require.NotNil(t, x.large)
	require.Equal(t, n, x.large.byTag.len())
	for i := range uint64(n) {
		seq, ok := x.large.byTag.get(i + 1)
		require.True(t, ok)
		require.Equal(t, 2*i+1, seq)
		tag, ok := x.large.bySeq.get(2*i + 1)
		require.True(t, ok)
		require.Equal(t, i+1, tag)
	}
}
