package scheduler

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/procsched/scheduler/payload"
)

// TestTableKeepsFewEndedProcesses: a slot keeps its ended process only
// while the slot's next ID waits in a worker's cache or near the top of
// the shared free list (see table.release), so after many processes have
// come and gone at once, the table reaches at most slotCacheMax ended
// processes per worker, freeDirtyMax more, and slotBatch per stripe of
// the IDs cached for callers outside the workers, however many there were:
// it keeps no more of their records alive than that.
func TestTableKeepsFewEndedProcesses(t *testing.T) {
	const children = 3 * (2*slotCacheMax + freeDirtyMax)
	// Each child waits for its cancel and then ends; the parent spawns
	// them all at once and waits for its own cancel.
	untilCancel := func(_ int, evs []Event, out *StepOutput) error {
		for _, ev := range evs {
			if ev.Type == EventCancel {
				out.Done(payload.Payload{})
			}
		}
		return nil
	}
	root := numbered(func(n int, evs []Event, out *StepOutput) error {
		if n == 0 {
			for i := range children {
				out.Spawn(uint64(i), numbered(untilCancel), "run", nil)
			}
			return nil
		}
		return untilCancel(n, evs, out)
	})
	s := newScheduler(t, WithWorkers(2))
	h, err := s.Submit(t.Context(), root, "run", nil)
	require.NoError(t, err)
	// Processes lists the published ones; the live count includes
	// children admitted and not yet published.
	eventually(t, "every child started", func() bool { return len(s.Processes()) == children+1 })
	for _, info := range s.Processes() {
		if info.PID != h.PID() {
			require.NoError(t, s.Terminate(info.PID))
		}
	}
	eventually(t, "every child ended", func() bool { return s.liveCount() == 1 })
	var ended, live int
	s.table.forEach(func(p *proc) {
		p.mu.Lock()
		if p.flags&pfClosed != 0 {
			ended++
		} else {
			live++
		}
		p.mu.Unlock()
	})
	assert.Equal(t, 1, live, "live processes in the table: the parent")
	assert.LessOrEqual(t, ended, len(s.workers)*slotCacheMax+freeDirtyMax+counterStripes*slotBatch, "ended processes the table reaches")
	assert.Positive(t, ended, "ended processes the table reaches (none would leave the test nothing to check)")
}

// TestTableReservesFreshSlotsInBatches: a cache that finds the shared
// free list empty takes slotBatch never-used slots with one step of the
// shared counter, and hands them out lowest first: a submitter that runs
// ahead of the workers, and so finds the list empty for every process,
// would otherwise step the counter, and take the list's lock, once per
// process.
func TestTableReservesFreshSlotsInBatches(t *testing.T) {
	tb := newTable()
	var c slotCache
	for want := range uint32(slotBatch) {
		id, ok := tb.alloc(&c, false)
		require.True(t, ok)
		assert.Equal(t, makeID(want, 0), id, "the %d'th ID", want)
		assert.Equal(t, uint64(slotBatch), tb.fresh.Load(), "the counter after %d IDs", want+1)
	}
	assert.Empty(t, c)
	// The next batch, for another cache or this one, starts where the
	// first ended.
	var other slotCache
	id, ok := tb.alloc(&other, false)
	require.True(t, ok)
	assert.Equal(t, makeID(slotBatch, 0), id)
	assert.Len(t, other, slotBatch-1)
	assert.Equal(t, uint64(2*slotBatch), tb.fresh.Load())
	// A freed ID goes out before any fresh slot.
	tb.pushFree(makeID(3, 1))
	id, ok = tb.alloc(&c, false)
	require.True(t, ok)
	assert.Equal(t, makeID(3, 1), id)
	assert.Equal(t, uint64(2*slotBatch), tb.fresh.Load())
	// Slots reserved past a chunk's end are covered by the directory.
	tb.fresh.Store(chunkSize - 1)
	id, ok = tb.alloc(&c, false)
	require.True(t, ok)
	assert.Equal(t, makeID(chunkSize-1, 0), id)
	require.Len(t, c, slotBatch-1)
	assert.NotNil(t, tb.entry(chunkSize+slotBatch-2), "the last reserved slot's entry")
}

// TestTableOutsideAllocWarmTakesSameIDs: a caller outside the workers
// that asks for the next records to be fetched ahead (warm) gets the same
// IDs, in the same order, as one that does not, and the table's entries
// are left as they were: fetching ahead only reads. The free IDs it
// takes name slots with an ended process's record and slots without one,
// and the stripe runs down to its last IDs and refills.
func TestTableOutsideAllocWarmTakesSameIDs(t *testing.T) {
	build := func() *table {
		tb := newTable()
		var c slotCache
		var ids []uint64
		for range 3 * slotBatch {
			id, ok := tb.alloc(&c, false)
			require.True(t, ok)
			ids = append(ids, id)
		}
		// Every other slot gets a record, then all are freed for their
		// next generation, as ended processes' slots are.
		for i, id := range ids {
			if i%2 == 0 {
				p := allocProc(0)
				p.setFreshID(id)
				tb.publish(p)
			}
		}
		for _, id := range ids {
			tb.pushFree(makeID(slotOf(id), genOf(id)+1))
		}
		return tb
	}
	cold, warm := build(), build()
	entries := func(tb *table) []*proc {
		var ps []*proc
		for slot := range uint32(4 * slotBatch) {
			ps = append(ps, tb.entry(slot).p.Load())
		}
		return ps
	}
	before := entries(warm)
	for i := range 4*slotBatch + 5 {
		want, okCold := cold.alloc(nil, false)
		got, okWarm := warm.alloc(nil, true)
		require.Equal(t, okCold, okWarm, "alloc %d", i)
		require.Equal(t, want, got, "alloc %d", i)
	}
	assert.Equal(t, before, entries(warm), "the table's entries")
}
