package scheduler

import (
	"runtime"
	"testing"
	"unsafe"

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
		p.reservePending(n, nil)
		for i := range uint64(n) {
			if !p.addPending(i+1, 2*i+1, nil) {
				t.Fatalf("tag %d refused", i+1)
			}
		}
	})
	// The proc, its extra, the largePending, and keys and values of
	// each of the two maps.
	require.LessOrEqual(t, allocs, 7.0, "allocations to record %d pending yields", n)
	p := new(proc)
	p.reservePending(n, nil)
	for i := range uint64(n) {
		require.True(t, p.addPending(i+1, 2*i+1, nil))
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

// TestProcSizeClasses pins each process record to the Go allocation size
// class it fits: a field that grows a record by a few bytes costs every
// process of that kind the whole step to the next class (16 bytes or
// more, times a million waiting processes, and more work for the garbage
// collector), so such a change has to show up here and be decided on.
// Each record is also allocated through newProc and the bytes the
// runtime handed out are counted, which checks that the bound is a real
// size class and that newProc allocates the record meant.
func TestProcSizeClasses(t *testing.T) {
	end := func(EndInfo) {}
	cases := []struct {
		name          string
		size, class   uintptr
		timed, handle bool
		awaited       bool
	}{
		{name: "proc", size: unsafe.Sizeof(proc{}), class: 96},
		{name: "handleProc", size: unsafe.Sizeof(handleProc{}), class: 96, handle: true},
		{name: "awaitedProc", size: unsafe.Sizeof(awaitedProc{}), class: 96, awaited: true},
		{name: "timedProc", size: unsafe.Sizeof(timedProc{}), class: 112, timed: true},
		{name: "timedHandleProc", size: unsafe.Sizeof(timedHandleProc{}), class: 112, timed: true, handle: true},
		{name: "timedAwaitedProc", size: unsafe.Sizeof(timedAwaitedProc{}), class: 112, timed: true, awaited: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.size > c.class {
				t.Fatalf("%s is %d bytes, past its %d-byte size class", c.name, c.size, c.class)
			}
			s := &Scheduler{}
			if c.timed {
				s.hooks.End = end
			}
			const n = 1000
			keep := make([]*proc, n)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for i := range keep {
				keep[i] = s.newProc(c.handle, c.awaited)
			}
			runtime.ReadMemStats(&after)
			// Classes this small are at least 16 bytes apart: what else
			// the test binary allocates meanwhile cannot move the
			// average by that much.
			perProc := (after.TotalAlloc - before.TotalAlloc) / n
			if perProc < uint64(c.class) || perProc >= uint64(c.class)+16 {
				t.Fatalf("%d bytes allocated per %s, want its %d-byte size class", perProc, c.name, c.class)
			}
			require.Equal(t, c.timed, keep[0].kind&pkTimed != 0, "timed")
			require.Equal(t, c.handle, keep[0].kind&pkHandle != 0, "handle")
			require.Equal(t, c.awaited, keep[0].awaited() != nil, "awaited")
			runtime.KeepAlive(keep)
		})
	}
}
