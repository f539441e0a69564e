package scheduler

import (
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/procsched/scheduler/internal/prefetch"
)

// The process table maps a PID to its proc with no lock on lookups.
//
// A PID's ID is generation<<32 | (slot+1), so ID 0 is never used; slots
// never used before are handed to the workers' caches and to the stripes
// of callers outside the workers slotBatch at a time, lowest first, so
// the first processes a single caller starts get the IDs 1, 2, 3, ....
// Slots live in fixed-size chunks reached through a copy-on-write
// directory, so a lookup is two loads and an index. A lookup compares the proc's full ID, so a stale PID never
// reaches the slot's next occupant. A freed slot is reused with the next
// generation: freed IDs go to the freeing worker's cache, spill in batches
// to a shared free list, and come back in batches to workers that run out;
// callers outside the workers take them one by one from a stripe of
// caches of their own (see outsideSlots), which refill from the shared
// list in batches too.
// A slot whose generation reaches maxGen is retired instead of reused, so
// PIDs are never reused within a scheduler's life.
//
// A slot keeps its ended process while its next ID waits in a worker's
// cache, until the next occupant is published over it: clearing it when
// the process ends would write the entry once more, from the worker that
// ended it, while the one that published it (the submitter of a process
// started from outside) holds its cache line, a miss on each side for
// every process. A lookup of the ended process's ID still finds it, and
// every caller finds it closed under its lock, which is what a lookup
// that ran just before its end would find; unless the end left the
// record for the slot's next process, giving it the slot's next ID
// (see proc.recycleFor): a lookup of the ended ID then finds nothing,
// and one of the next ID finds the record Ended until that process is
// published. The shared list is a stack:
// the IDs on top go out first, to a submitter outside the workers, say,
// whose publish then finds the entry where its own last publish left it.
// Only the IDs that sink below its top freeDirtyMax have their entries
// cleared, so at most slotCacheMax ended processes per worker,
// freeDirtyMax more, and slotBatch per stripe of the IDs cached for
// callers outside the workers stay reachable this way.

const (
	chunkBits = 12
	chunkSize = 1 << chunkBits
	chunkMask = chunkSize - 1
	// maxSlots bounds the slot index so that slot+1 fits the ID's low 32
	// bits.
	maxSlots = 1<<32 - 1
)

// maxGen is the last generation a slot is used for. It leaves the top two
// bits of every ID clear: the top one for monitors to mark a request's
// (monitorRequest), the next for a child's ID to name its parent's
// SpawnAwait yield (seqChild).
const maxGen = 1<<30 - 1

// makeID returns the ID of the gen'th occupant of slot.
// Any goroutine.
func makeID(slot, gen uint32) uint64 { return uint64(gen)<<32 | (uint64(slot) + 1) }

// slotOf returns the slot of an ID; IDs with zero low bits name no slot
// and map to a slot beyond any table.
// Any goroutine.
func slotOf(id uint64) uint32 { return uint32(id) - 1 }

// genOf returns the generation of an ID.
// Any goroutine.
func genOf(id uint64) uint32 { return uint32(id >> 32) }

// tableEntry is one slot: the proc in it, or nil. Stored by the
// allocator after Init succeeded; it keeps the proc after its end until
// the next occupant is stored, or until the slot's next ID leaves a
// worker's cache (see release). Lookups load it and then check its id.
type tableEntry struct {
	p atomic.Pointer[proc]
}

// tableChunk is a chunk of slots.
type tableChunk struct {
	entries [chunkSize]tableEntry
}

// table is laid out so that what every lookup reads (dir) shares no
// cache line with what starts and ends write (the free list and its lock,
// fresh, retired): a submitter taking IDs from the free list would
// otherwise take the line from every worker looking a process up.
type table struct {
	_ [cacheLine]byte
	// dir is the chunk directory. Replaced (never modified) under growMu;
	// lookups load it without a lock.
	dir    atomic.Pointer[[]*tableChunk]
	growMu sync.Mutex
	_      [cacheLine]byte
	// free holds the IDs the next occupants of freed slots get, newest
	// last. The entries of free[:clean] are nil; those above may still
	// hold the slots' ended processes (see pushFree). Guarded by freeMu.
	freeMu sync.Mutex
	free   []uint64
	clean  int
	// fresh is the next slot that no cache has reserved (see reserve);
	// it may pass maxSlots, and bounds the slots forEach visits.
	fresh atomic.Uint64
	// retired counts slots withdrawn because their generation ran out.
	retired atomic.Uint64
	_       [cacheLine]byte
	// outside caches free IDs for callers outside the workers, in stripes
	// (see countStripe), as a worker's cache does for it.
	outside [counterStripes]outsideSlots
}

// outsideSlots is one stripe of the free IDs cached for callers outside
// the workers: a submitter calling Submit in a loop takes its IDs here,
// under a lock that stays on its own core, and goes to the shared free
// list, whose lock the workers take too, once per slotBatch of them.
type outsideSlots struct {
	mu  sync.Mutex
	ids slotCache
	_   [cacheLine - 32]byte // the stripe takes a cache line of its own
}

// newTable returns an empty table. Called by New.
func newTable() *table {
	t := &table{}
	dir := []*tableChunk{new(tableChunk)}
	t.dir.Store(&dir)
	return t
}

// entry returns slot's entry, or nil if no chunk covers it yet.
// Any goroutine: lock-free.
func (t *table) entry(slot uint32) *tableEntry {
	dir := *t.dir.Load()
	c := int(slot >> chunkBits)
	if c >= len(dir) {
		return nil
	}
	return &dir[c].entries[slot&chunkMask]
}

// lookup returns the proc with this ID, or nil: a live one, or one that
// has ended and whose slot was not reused yet, which its lock shows
// gone (see proc.gone), as it would to a lookup made just before its
// end.
// Any goroutine.
func (t *table) lookup(id uint64) *proc {
	// The directory is indexed here as entry indexes it, not through
	// entry, so that the compiler inlines lookup (through entry it would
	// cost the inliner more than it allows): every message delivered on
	// a worker and every end of an awaited child looks a process up.
	dir := *t.dir.Load()
	if c := int(slotOf(id) >> chunkBits); c < len(dir) {
		if p := dir[c].entries[slotOf(id)&chunkMask].p.Load(); p != nil && p.id.Load() == id {
			return p
		}
	}
	return nil
}

// slotCache is a worker's private stack of free slots, as the IDs their
// next occupants get. It spares the shared free list's lock for the common
// case of a worker ending processes and starting new ones. Owner only.
type slotCache []uint64

// slotCacheMax bounds a worker's cache; when it is full, half of it goes
// to the shared free list in one batch. slotBatch is how many IDs a worker
// takes from the shared list when its cache is empty.
const (
	slotCacheMax = 256
	slotBatch    = 64
)

// alloc reserves a slot and returns the ID its next occupant will have.
// The slot stays invisible to lookups until publish. Any goroutine; c is
// the calling worker's cache, or nil for callers outside the workers,
// who take a stripe's (see outsideSlots). For them, warm asks for the
// record that the stripe's next ID may reuse to be fetched meanwhile
// (see prefetchNext): the caller starts a process that may take an
// ended one's record (it gets no Handle).
func (t *table) alloc(c *slotCache, warm bool) (uint64, bool) {
	if c == nil {
		o := &t.outside[countStripe()]
		o.mu.Lock()
		if n := len(o.ids); warm && n >= 3 {
			t.prefetchNext(o.ids[n-2], o.ids[n-3]) // the two after this one's
		}
		if len(o.ids) == 0 {
			t.restock(&o.ids)
		}
		id, ok := o.ids.pop()
		o.mu.Unlock()
		return id, ok
	}
	if len(*c) == 0 {
		t.restock(c)
	}
	return c.pop()
}

// restock fills the empty c from the free list or, if that is empty too,
// with never-used slots; c stays empty if the table is full. Called by
// alloc, for the owner of c: a worker, or a caller holding c's stripe's
// lock.
func (t *table) restock(c *slotCache) {
	t.refill(c)
	if len(*c) == 0 {
		t.reserve(c)
	}
}

// pop takes the ID on top of c, or reports that c is empty. Small
// enough to inline, so that a worker admitting a step's children takes
// their IDs without a call (see worker.spawnBatch). Owner of c only.
func (c *slotCache) pop() (uint64, bool) {
	s := *c
	if n := len(s) - 1; n >= 0 {
		*c = s[:n]
		return s[n], true
	}
	return 0, false
}

// prefetchNext asks for the record in next's slot to be fetched into
// this core's caches and, when that slot holds one, for after's table
// entry, so that the starts that take these IDs, the stripe's next two,
// find them there (a slot never used yet holds no record). A
// submitter outside the workers reuses the records of processes that
// ended on a worker, so their lines are in that worker's core's cache,
// or further away. Without this, the first read of one (in
// Scheduler.record) holds up the start for the whole transfer, which
// takes longer than the processor can run ahead of a load that has not
// returned. Asked for a start ahead, the lines arrive while the caller
// runs the start before (Init, the push to the global queue). after's
// entry is fetched so that reading it here, as next's, a start later,
// does not wait either. A slot whose record will not be reused (another
// kind) costs two fetches for nothing; nothing a reader sees changes.
//
// Only the record's first line is asked for: the start of a reused
// record with no context values reads and writes nothing else of it
// (see proc's layout and TestRecordFirstLine). Asked for, the second line would come to this
// core as a copy, and the worker that ends the process, which writes
// that line, would have to take it back.
// Called by alloc, holding the stripe's lock.
func (t *table) prefetchNext(next, after uint64) {
	e, ea := t.entry(slotOf(next)), t.entry(slotOf(after))
	if e == nil || ea == nil {
		return
	}
	if p := e.p.Load(); p != nil {
		prefetch.Lines2(unsafe.Pointer(ea), unsafe.Pointer(p))
	}
}

// reserve puts up to slotBatch never-used slots in c, as their first IDs,
// lowest on top: taking them one at a time from the shared counter would
// cost a locked instruction per process, on a cache line that every
// caller finding the free list empty writes (a submitter running ahead of
// the workers finds it so for every process). Slots reserved and never
// used stay empty. Called by the owner of c, as refill.
func (t *table) reserve(c *slotCache) {
	end := t.fresh.Add(slotBatch)
	first := end - slotBatch
	if first >= maxSlots {
		return
	}
	end = min(end, maxSlots)
	if t.entry(uint32(end-1)) == nil {
		t.grow(uint32(end - 1))
	}
	for slot := end; slot > first; slot-- {
		*c = append(*c, makeID(uint32(slot-1), 0))
	}
}

// refill moves up to slotBatch free IDs from the shared list to c.
// Called by the owner of c (a worker, or the holder of an outside
// stripe's lock); takes freeMu.
func (t *table) refill(c *slotCache) {
	t.freeMu.Lock()
	n := min(slotBatch, len(t.free))
	*c = append(*c, t.free[len(t.free)-n:]...)
	t.free = t.free[:len(t.free)-n]
	t.clean = min(t.clean, len(t.free))
	t.freeMu.Unlock()
}

// grow adds chunks until slot is covered: it doubles the directory, at
// least, and allocates a chunk for each new place. Nothing shrinks it.
// Any goroutine: takes growMu.
func (t *table) grow(slot uint32) {
	t.growMu.Lock()
	defer t.growMu.Unlock()
	old := *t.dir.Load()
	need := int(slot>>chunkBits) + 1
	if need > len(old) {
		dir := make([]*tableChunk, max(need, 2*len(old)))
		copy(dir, old)
		for i := len(old); i < len(dir); i++ {
			dir[i] = new(tableChunk)
		}
		t.dir.Store(&dir)
	}
}

// publish makes p visible to lookups under its ID.
// Called by the goroutine starting p, once.
func (t *table) publish(p *proc) {
	t.entry(slotOf(p.id.Load())).p.Store(p)
}

// release frees the slot of id (published or only reserved) for reuse
// with the next generation. The entry keeps the ended proc (see the
// table's comment) unless the slot retires. Any goroutine, once per
// alloc, after the proc is closed; c is the calling worker's cache, or
// nil.
func (t *table) release(id uint64, c *slotCache) {
	slot := slotOf(id)
	gen := genOf(id)
	if gen == maxGen {
		t.entry(slot).p.Store(nil)
		t.retired.Add(1)
		return
	}
	next := makeID(slot, gen+1)
	if c == nil {
		t.pushFree(next)
		return
	}
	*c = append(*c, next)
	if len(*c) >= slotCacheMax {
		half := len(*c) / 2
		t.pushFree((*c)[half:]...)
		*c = (*c)[:half]
	}
}

// freeDirtyMax is how many IDs on top of the shared free list may keep
// their slots' ended processes (see pushFree), which a caller outside
// the workers that Spawns a process with one of them reuses. When that
// caller runs ahead of the workers for a whole time slice (one
// processor, or a machine busy with other work), the workers end its
// processes in bursts of tens of thousands, and each ID deeper than
// this costs its next process a new record and the clearing an atomic
// store: 16,384 reuses a sixth of them, and keeps at most about 1.5 MiB
// of ended records reachable.
const freeDirtyMax = 16384

// pushFree puts ids on the shared free list and clears the entries of
// the IDs that sink more than freeDirtyMax below its top: the ones that
// may wait there long, and would keep their ended processes reachable
// meanwhile. Any goroutine; takes freeMu.
func (t *table) pushFree(ids ...uint64) {
	t.freeMu.Lock()
	t.free = append(t.free, ids...)
	if keep := len(t.free) - freeDirtyMax; t.clean < keep {
		for _, id := range t.free[t.clean:keep] {
			t.entry(slotOf(id)).p.Store(nil)
		}
		t.clean = keep
	}
	t.freeMu.Unlock()
}

// forEach calls f for every proc in the table: the live ones, and ended
// ones whose slots were not reused yet (see release), which f finds
// Ended by their state word and closed under their lock. Procs published
// or ended meanwhile may or may not be seen.
// Any goroutine.
func (t *table) forEach(f func(*proc)) {
	dir := *t.dir.Load()
	n := t.fresh.Load()
	for c, chunk := range dir {
		for i := range chunk.entries {
			if uint64(c)<<chunkBits+uint64(i) >= n {
				return
			}
			if p := chunk.entries[i].p.Load(); p != nil {
				f(p)
			}
		}
	}
}
