package scheduler

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// TestTableLookupOfIDsNeverIssued: a lookup finds a process only by the
// very ID it was given. The zero ID, IDs whose low half names no slot,
// slots beyond the table, the slot's generations before and after its
// occupant's, and the occupant's ID with either of the two top bits set
// (which name requests and children elsewhere) all find nothing.
func TestTableLookupOfIDsNeverIssued(t *testing.T) {
	tb := newTable()
	var c slotCache
	var id uint64
	for range 5 {
		var ok bool
		id, ok = tb.alloc(&c, false)
		require.True(t, ok)
	}
	// The fifth slot's occupant, in its third generation.
	tb.release(id, &c)
	id, _ = tb.alloc(&c, false)
	tb.release(id, &c)
	id, _ = tb.alloc(&c, false)
	require.Equal(t, makeID(4, 2), id)
	p := allocProc(0)
	p.setFreshID(id)
	tb.publish(p)
	require.Same(t, p, tb.lookup(id))

	for _, bad := range []uint64{
		0,
		1 << 32,              // generation 1 of no slot
		^uint64(0),           // every bit
		1<<32 - 1,            // the last slot there can be, never reached
		makeID(chunkSize, 0), // a slot beyond the directory
		makeID(5, 0),         // a slot reserved and never published
		makeID(4, 0),         // the occupant's slot, earlier generations
		makeID(4, 1),         //
		makeID(4, 3),         // and the next one, never issued
		makeID(4, maxGen),    // and its last
		makeID(4, maxGen+1),  // beyond its last
		id | seqChild,        // the occupant's ID as its parent's yield
		id | monitorRequest,  // and as a request's monitor
		id | 0xFFFFFFFF<<32,  // every generation bit
	} {
		assert.Nil(t, tb.lookup(bad), "lookup(%#x)", bad)
	}
}

// TestTableRetiresASlotAtItsLastGeneration: a slot whose occupant had
// the last generation (maxGen) is never handed out again, so that an ID
// cannot come back once the generation would run out of its bits, and
// the slot's ended process is no longer reachable from it. The next IDs
// come from other slots, and every ID made keeps the two top bits clear.
func TestTableRetiresASlotAtItsLastGeneration(t *testing.T) {
	tb := newTable()
	var c slotCache
	first, ok := tb.alloc(&c, false)
	require.True(t, ok)
	require.Equal(t, makeID(0, 0), first)
	// Slot 0's process before last ends, and its next ID goes to the cache.
	tb.release(makeID(0, maxGen-1), &c)
	last, ok := tb.alloc(&c, false)
	require.True(t, ok)
	require.Equal(t, makeID(0, maxGen), last)
	require.Zero(t, last&(seqChild|monitorRequest), "the top bits of the slot's last ID")
	p := allocProc(0)
	p.setFreshID(last)
	tb.publish(p)
	require.Same(t, p, tb.lookup(last))

	tb.release(last, &c)
	assert.True(t, tb.entry(0).p.Load() == nil, "the retired slot's entry keeps its process")
	assert.True(t, tb.lookup(last) == nil, "lookup of the retired slot's last ID finds its process")
	assert.Equal(t, uint64(1), tb.retired.Load())
	// No ID of slot 0 comes out again, from this cache, another, or the
	// shared list.
	var other slotCache
	for range 4 * slotBatch {
		for _, cache := range []*slotCache{&c, &other} {
			id, ok := tb.alloc(cache, false)
			require.True(t, ok)
			require.NotEqual(t, uint32(0), slotOf(id), "ID %#x of the retired slot", id)
			tb.pushFree(makeID(slotOf(id), genOf(id)+1))
		}
	}
}

// TestTableGrowsUnderLookups: lookups running while other goroutines
// reserve slots, and so grow the directory, find every published process
// by its ID, and nothing by an ID not published; run with -race, it also
// shows that a lookup needs no lock against growth.
func TestTableGrowsUnderLookups(t *testing.T) {
	tb := newTable()
	var c slotCache
	var published []uint64
	for range 3 * slotBatch {
		id, ok := tb.alloc(&c, false)
		require.True(t, ok)
		p := allocProc(0)
		p.setFreshID(id)
		tb.publish(p)
		published = append(published, id)
	}
	const growers, batches = 2, 8 * chunkSize / slotBatch
	stop := make(chan struct{})
	var lookups sync.WaitGroup
	for range 2 {
		lookups.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				for _, id := range published {
					if p := tb.lookup(id); p == nil || p.id.Load() != id {
						t.Errorf("lookup(%#x) = %v during growth", id, p)
						return
					}
					if p := tb.lookup(makeID(slotOf(id), 1)); p != nil {
						t.Errorf("lookup of unpublished %#x found a process", makeID(slotOf(id), 1))
						return
					}
				}
			}
		})
	}
	var grow sync.WaitGroup
	for range growers {
		grow.Go(func() {
			var own slotCache
			for range batches {
				own = own[:0]
				tb.reserve(&own)
				for _, id := range own {
					if tb.entry(slotOf(id)) == nil {
						t.Errorf("slot %d reserved without its entry", slotOf(id))
						return
					}
				}
			}
		})
	}
	grow.Wait()
	close(stop)
	lookups.Wait()
	assert.Equal(t, uint64(3*slotBatch+growers*batches*slotBatch), tb.fresh.Load())
	assert.GreaterOrEqual(t, len(*tb.dir.Load())*chunkSize, int(tb.fresh.Load()), "slots the directory covers")
}

// TestTableFullRefusesStarts: once every slot the table can have has
// been handed out and none is free, a start fails at once with an error
// wrapping ErrTooManyProcesses, from outside the workers (Submit, Spawn)
// and from a step (its spawn completes with it), without calling Init,
// and nothing is left counted as live.
func TestTableFullRefusesStarts(t *testing.T) {
	s := newScheduler(t, WithWorkers(1))
	var inits atomic.Int64
	child := initCounted{n: &inits}
	spawned := make(chan Event, 1)
	// The parent spawns a child for each message, and ends on a cancel.
	parent := stepFunc(func(evs []Event, out *StepOutput) error {
		for _, ev := range evs {
			switch ev.Type {
			case EventMessage:
				out.Spawn(ev.Data.(uint64), child, "run", nil)
			case EventYieldComplete:
				spawned <- ev
			case EventCancel:
				out.Done(payload.Payload{})
			}
		}
		return nil
	})
	ph, err := s.Submit(t.Context(), parent, "run", nil)
	require.NoError(t, err)
	s.table.fresh.Store(maxSlots) // every slot handed out
	// The IDs already cached for callers outside the workers are taken.
	for i := range s.table.outside {
		o := &s.table.outside[i]
		o.mu.Lock()
		o.ids = o.ids[:0]
		o.mu.Unlock()
	}
	_, err = s.Submit(t.Context(), child, "run", nil)
	require.ErrorIs(t, err, ErrTooManyProcesses, "Submit")
	_, err = s.Spawn(t.Context(), child, "run", nil)
	require.ErrorIs(t, err, ErrTooManyProcesses, "Spawn")
	require.Zero(t, inits.Load(), "Inits of refused processes")
	// The parent's worker may hold IDs of its own: its children take
	// them until one is refused.
	var refused Event
	for tag := uint64(1); refused.Error == nil; tag++ {
		require.Less(t, tag, uint64(2*slotCacheMax), "no spawn refused")
		require.NoError(t, s.Tell(ph.PID(), tag))
		refused = receive(t, spawned, "the completion of the parent's spawn")
		require.Equal(t, tag, refused.Tag)
	}
	require.ErrorIs(t, refused.Error, ErrTooManyProcesses, "the refused spawn's completion")
	require.Equal(t, int64(refused.Tag-1), inits.Load(), "Inits: the children that had IDs")
	eventually(t, "only the parent live", func() bool { return s.liveCount() == 1 })
	require.NoError(t, s.Terminate(ph.PID()))
	_, err = ph.Wait(t.Context())
	require.NoError(t, err)
	eventually(t, "no process live", func() bool { return s.liveCount() == 0 })
}

// initCounted counts its Inits, and ends in its first step.
type initCounted struct{ n *atomic.Int64 }

func (c initCounted) Init(context.Context, string, payload.Payloads) error {
	c.n.Add(1)
	return nil
}

func (initCounted) Step(_ []Event, out *StepOutput) error {
	out.Done(payload.Payload{})
	return nil
}

func (initCounted) Close() {}

// TestTableKeepsItsSizeAfterABurst: the directory doubles as slots are
// reserved past its chunks, each chunk allocated when the directory
// grows, and nothing shrinks it when the slots are freed again: the
// entries of the most slots the table has had stay for its life, as its
// doc says.
func TestTableKeepsItsSizeAfterABurst(t *testing.T) {
	tb := newTable()
	var c slotCache
	var ids []uint64
	chunks := func() int { return len(*tb.dir.Load()) }
	for _, step := range []struct{ upTo, want int }{{chunkSize, 1}, {2 * chunkSize, 2}, {2*chunkSize + 1, 4}} {
		upTo, want := step.upTo, step.want
		for len(ids) < upTo {
			id, ok := tb.alloc(&c, false)
			require.True(t, ok)
			ids = append(ids, id)
		}
		require.Equal(t, want, chunks(), "chunks for %d slots", upTo)
	}
	for _, ch := range *tb.dir.Load() {
		require.NotNil(t, ch, "a chunk of the directory")
	}
	for _, id := range ids {
		tb.release(id, &c)
	}
	require.Equal(t, 4, chunks(), "chunks once every slot is free")
}

// TestSlotRetiresAfterItsLastProcess: a worker that starts a child and
// waits for its end, again and again, gives each the slot the one before
// freed; from the last generations on, its children take the slot's last
// IDs, and the child with the last generation leaves the slot for good:
// the children after it get other slots, and no PID of the retired slot
// reaches anything.
func TestSlotRetiresAfterItsLastProcess(t *testing.T) {
	s := newScheduler(t, WithWorkers(1))
	const children = 5
	var pids []relay.PID
	child := stepFunc(func(_ []Event, out *StepOutput) error {
		out.Done(payload.Payload{})
		return nil
	})
	var slot uint32
	parent := numbered(func(n int, evs []Event, out *StepOutput) error {
		if n == 0 {
			// On the only worker, in its step: its cache of free slots is
			// this goroutine's. A never-used slot goes on top, as if its
			// first maxGen-2 processes had come and gone.
			w := s.workers[0]
			s.table.reserve(&w.slots)
			id, _ := w.slots.pop()
			slot = slotOf(id)
			w.slots = append(w.slots, makeID(slot, maxGen-2))
		}
		for _, ev := range evs {
			if ev.Type == EventYieldComplete {
				if ev.Error != nil {
					return ev.Error
				}
				pids = append(pids, ev.From)
			}
		}
		if len(pids) == children {
			out.Done(payload.Payload{})
			return nil
		}
		out.SpawnAwait(uint64(n+1), child, "run", nil)
		return nil
	})
	h, err := s.Submit(t.Context(), parent, "run", nil)
	require.NoError(t, err)
	_, err = h.Wait(t.Context())
	require.NoError(t, err)
	require.Len(t, pids, children)
	for i, gen := range []uint32{maxGen - 2, maxGen - 1, maxGen} {
		require.Equal(t, makeID(slot, gen), pids[i].ID, "child %d", i)
	}
	for i, pid := range pids[3:] {
		require.NotEqual(t, slot, slotOf(pid.ID), "child %d in the retired slot", i+3)
	}
	eventually(t, "no process live", func() bool { return s.liveCount() == 0 })
	require.True(t, s.table.entry(slot).p.Load() == nil, "the retired slot's entry keeps a process")
	require.Equal(t, uint64(1), s.table.retired.Load())
	for _, pid := range append(pids[:3], relay.PID{ID: makeID(slot, maxGen) + 1<<32}) {
		require.ErrorIs(t, s.Tell(pid, "x"), ErrProcessNotFound, "Tell(%v)", pid)
	}
}
