package scheduler

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Timers.
//
// A timer yield is an entry {when, pid, seq} in a min-heap, and the
// workers fire the entries themselves, as the Go runtime's Ps run their
// own timers from the scheduling loop: a due timer never waits for a
// separate goroutine to be given a processor. Each worker has a shard
// (a heap, plus an index from seq to heap position, under a small mutex)
// and the timers it sets go into its own shard; seq-1 modulo the number
// of workers names the worker that registered a yield (see newSeq), so
// the shard of any pending yield is known from its seq alone. (A caller
// that helps, see help.go, registers yields whose seq names worker 0:
// their timers are in worker 0's shard.)
//
// Who fires a due timer:
//
//   - A running worker looks at the timers between runs and between the
//     steps of a process that continues (see worker.checkTimers). When
//     no shard holds a timer, a look is a load per shard; otherwise it
//     reads the clock, and it spaces its looks by the ticks it expects to
//     pass before the earliest deadline, from the time its recent ticks
//     took, at most timerMaxTicks apart: a timer is fired within about a
//     tick of its deadline, at the cost of a clock read every few ticks.
//     A process that continues may take long steps, which that spacing
//     cannot see, so its worker also looks every other step.
//   - A worker fires its own shard; another worker's only once its timers
//     are timerStealAfter overdue (the owner is kept from looking, by a
//     long step or by the operating system) or while its owner is idle.
//     So the workers do not contend for the shards while all is well.
//   - A worker that runs out of work looks before it steals or spins.
//   - A look fires the shards' due timers merged in deadline order, so a
//     backlog reaches the global queue oldest first.
//   - A worker that parks while timers are pending becomes the watcher,
//     unless a parked watcher wakes up by the earliest deadline: it parks
//     with an alarm (a runtime timer whose function takes it off the idle
//     list and unparks it) set to that deadline, as a Tokio worker parks
//     on its time driver with a timeout. The other parked workers sleep
//     without a timeout. If the watcher was woken before its alarm goes
//     off and timers are due then, the alarm wakes another parked
//     worker, for those that relied on it (see alarmRang).
//
// Firing takes up to timerBatch due entries of a shard under its lock,
// completes each yield (exactly that yield, by seq, or nothing if it
// completed or its process ended meanwhile) with no lock held, and
// pushes the processes woken to the global queue in deadline order.
// (Not to the firing worker's deque: its owner works it newest first, so
// under a steady load the processes woken first would wait longest.) A
// process that continues is queued behind them when its worker's look
// fires timers. A shard's lock is held only to take a batch (or to add
// or remove one timer), never while yields complete: a worker
// descheduled while firing (by the operating system, or by the Go
// scheduler for the garbage collector) holds back only its batch.
//
// Order: a shard gives out its timers in the order of their deadlines,
// equal deadlines in the order they were set, and a batch never splits
// the timers of one process at its end. The timers one step sets are
// added to their shard together (see worker.arm), so a worker that fires
// the shard takes all of them or none, and those set for one deadline
// complete in the order set, even if they were due when set. Timers of
// one process in two batches complete in deadline order unless two
// workers fire those batches at once (then they may interleave); with
// one worker, always.
//
// Removal is exact and O(log n): the index gives the entry's position.
// When a process ends, the timers of its pending yields are removed at
// once (see release); Shutdown releases whatever is left.
//
// Deadlines are nanoseconds since the service's epoch on the monotonic
// clock, so wall-clock jumps do not move them.

// noTimer is the earliest deadline of an empty shard.
const noTimer = math.MaxInt64

// watchRunning in timerService.watch: the last watcher was woken and runs;
// it looks at the timers again before it parks.
const watchRunning = -1

// timerService holds the timer shards of a scheduler and the watcher
// slot; the workers do the rest (see above).
type timerService struct {
	s      *Scheduler
	epoch  time.Time
	shards []timerShard // one per worker, indexed by worker ID

	// watch is the deadline at which the watcher's alarm goes off; 0 if
	// no worker watches; watchRunning if the last watcher has woken and
	// is running. A parking worker with an earlier deadline than the
	// watch (or when it is 0 or watchRunning) claims it by CAS and arms
	// its alarm; a watcher that wakes swaps its own deadline for
	// watchRunning by CAS. A worker that sets a timer earlier than the
	// watch, or while it is 0, wakes a parked worker, which parks again
	// as the watcher. Its operations and the loads and stores of the
	// shards' first are sequentially consistent: a worker that parks
	// without an alarm because it loaded a watcher's deadline did so
	// before that watcher's wake-up CAS, and the watcher looks at every
	// shard after that CAS, so it sees every timer the parking worker saw.
	watch atomic.Int64
}

// timerShard is one worker's timers.
type timerShard struct {
	mu    sync.Mutex   // guards heap, index and behind; held for a heap operation or a batch of them
	heap  []timerEntry // a 4-ary min-heap ordered by (when, seq)
	index u64map       // seq -> position of its entry in heap
	// behind holds, for a Sleep whose timer in heap is a deadline that
	// comes before the Sleep's own time, that own time: seq -> when. A
	// Sleep has one timer, for whichever comes first; the time behind it
	// is kept so that a later deadline past it gives the Sleep its own
	// time back (see worker.timeout). An entry goes with its timer.
	behind u64map
	// first is heap[0].when (noTimer when empty) and count is len(heap):
	// stored under mu after every change, loaded without it by workers
	// deciding whether to look (first) and by Stats (count).
	first atomic.Int64
	count atomic.Int64
	// smallSince is when the heap was first seen below a quarter of its
	// buffer, 0 if it is not (see trim). Guarded by mu.
	smallSince int64

	// The rest is used only by the worker that owns the shard (the one
	// with its index), for whatever shard it fires.
	due      []timerEntry // the batch being fired
	woken    []*proc      // processes the batch made Ready
	lastTick uint64       // the tick and clock reading of the last look
	lastNow  int64        // (see ticksUntil)
	alarm    *time.Timer  // wakes this worker when it parks as the watcher
	armedFor int64        // the deadline the alarm is set to; 0: not armed

	_ [64]byte // keeps the next shard's lock and first off these lines
}

// timerEntry is one timer: complete yield seq of process pid at when.
type timerEntry struct {
	when int64  // nanoseconds since the epoch
	pid  uint64 // the process's ID, with timerDeadline for a deadline
	seq  uint64 // its yield (see worker.register)
}

// timerDeadline marks, in a timer entry's pid, the deadline of a yield
// (StepOutput.Timeout), which completes it with ErrTimeout, as opposed to
// a Sleep, which completes it with nothing. Process IDs never have this
// bit (see table.release).
const timerDeadline = uint64(1) << 63

// before orders timer entries by deadline, then by yield sequence number, so equal deadlines fire in yield order. Called with the shard's lock held.
func (e *timerEntry) before(o *timerEntry) bool {
	return e.when < o.when || e.when == o.when && e.seq < o.seq
}

// Sizes of the firing buffers and the heap below which a shard keeps its
// memory.
const (
	timerBatch     = 64
	timerShrinkMin = 256
)

// timerMaxTicks is the most ticks a worker lets pass between looks at the
// timers (see ticksUntil). A tick is a run or a step of a process that
// continues; steps are meant to last microseconds, so this bounds the
// lateness a wrong guess of the tick length can cause.
const timerMaxTicks = 32

// timerBusyTicks is how many ticks a worker lets pass before it looks
// again at timers another worker is firing.
const timerBusyTicks = 4

// newTimerService returns the timers of a scheduler with this many workers. Called by New.
func newTimerService(s *Scheduler, workers int) *timerService {
	ts := &timerService{s: s, epoch: time.Now(), shards: make([]timerShard, workers)}
	for i := range ts.shards {
		ts.shards[i].init()
	}
	return ts
}

// init makes sh an empty shard with its owner's buffers. Called by
// newTimerService, and by newHelper for the helper's scratch shard.
func (sh *timerShard) init() {
	sh.first.Store(noTimer)
	sh.due = make([]timerEntry, 0, timerBatch)
	sh.woken = make([]*proc, 0, timerBatch)
}

// now reads the service's clock.
// Any goroutine.
func (ts *timerService) now() int64 { return int64(time.Since(ts.epoch)) }

// shardOf returns the shard holding the timer of yield seq, if it has
// one: that of the worker that registered it.
func (ts *timerService) shardOf(seq uint64) (*timerShard, int) {
	id := int((seq - 1) % uint64(len(ts.shards)))
	return &ts.shards[id], id
}

// add schedules the timers as of process pid, each the completion of
// one of its yields at its when, in nanoseconds on the service's clock:
// a deadline (timerDeadline in the entry's pid, completing the yield with
// ErrTimeout) or a Sleep's end; a deadline's behind, if not 0, is the own
// time of the Sleep it comes before (see timerShard.behind). Each goes
// into the shard of the worker that registered its yield, those of one
// shard in one hold of its lock (see worker.arm).
// Worker only: w is the calling worker, running pid.
func (ts *timerService) add(w *worker, pid uint64, as []armed) {
	for i := 0; i < len(as); {
		sh, id := ts.shardOf(as[i].seq)
		sh.mu.Lock()
		old := int64(noTimer)
		if len(sh.heap) > 0 {
			old = sh.heap[0].when
		}
		for ; i < len(as); i++ {
			a := &as[i]
			if next, _ := ts.shardOf(a.seq); next != sh {
				break
			}
			e := timerEntry{when: a.when, pid: pid, seq: a.seq}
			if a.deadline {
				e.pid |= timerDeadline
			}
			sh.push(e)
			if a.behind != 0 {
				sh.behind.set(a.seq, uint64(a.behind))
			}
		}
		first := sh.heap[0].when
		sh.publish()
		sh.mu.Unlock()
		if first < old {
			ts.madeEarliest(w, id, first)
		}
	}
}

// madeEarliest follows the adding of a timer at when that is now the
// earliest of shard id. Worker only: w is the worker that added it.
func (ts *timerService) madeEarliest(w *worker, id int, when int64) {
	// The shard's owner looks at its shard at its next tick and spaces
	// its looks for this deadline from there. Another worker (one that
	// sets a deadline for an older yield) leaves the owner's schedule to
	// the owner: it looks within timerMaxTicks, and others fire an
	// overdue shard.
	if w.id == id {
		w.timerTick = 0
	}
	// If workers are parked and none will wake up by when, wake one: it
	// finds no work and parks as the watcher. Otherwise the timer would
	// wait for this worker, which may be about to run a long step.
	if ts.s.idle.count.Load() > 0 {
		if w := ts.watch.Load(); w == 0 || w > when {
			ts.s.wakeWorker()
		}
	}
}

// lookup returns when the timer of yield seq is due, whether it is a
// deadline, and the own time of the Sleep behind that deadline, if any
// (0 if none); ok is false if the yield has no timer. Any goroutine.
func (ts *timerService) lookup(seq uint64) (when, behind int64, deadline, ok bool) {
	sh, _ := ts.shardOf(seq)
	if sh.count.Load() == 0 {
		return 0, 0, false, false
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i, ok := sh.index.get(seq)
	if !ok {
		return 0, 0, false, false
	}
	e := &sh.heap[i]
	if sh.behind.len() != 0 {
		b, _ := sh.behind.get(seq)
		behind = int64(b)
	}
	return e.when, behind, e.pid&timerDeadline != 0, true
}

// remove deletes the timer of yield seq and reports whether it had one.
// Any goroutine.
func (ts *timerService) remove(seq uint64) bool {
	sh, _ := ts.shardOf(seq)
	// The count is published under the shard's lock with every add and
	// remove, so a shard that shows none has none for seq now. A timer
	// added after this look is marked on its yield after it is added,
	// and removed by the failing mark if the yield is gone (see
	// worker.arm).
	if sh.count.Load() == 0 {
		return false
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i, ok := sh.index.get(seq)
	if !ok {
		return false
	}
	sh.removeAt(int(i))
	sh.trim(0, ts)
	sh.publish()
	return true
}

// release removes the timers of p's pending yields. Called by whoever
// ends p, after its last step and before proc.close forgets the pending
// yields. A process with no pending yield costs a load, inline.
func (ts *timerService) release(p *proc) {
	if p.hasPending.Load() {
		ts.releasePending(p)
	}
}

// releasePending is release for a process with pending yields: it
// removes the timers of those that have one. Called by release.
func (ts *timerService) releasePending(p *proc) {
	p.mu.Lock()
	p.pending.eachTimed(p.live(), func(seq uint64) { ts.remove(seq) })
	p.mu.Unlock()
}

// pending returns the number of live timers. Any goroutine.
func (ts *timerService) pending() int {
	n := int64(0)
	for i := range ts.shards {
		n += ts.shards[i].count.Load()
	}
	return int(n)
}

// stop releases every timer left, for the shutdown's stopper once no
// process is live (each ended process released its own already).
func (ts *timerService) stop() {
	for i := range ts.shards {
		sh := &ts.shards[i]
		sh.mu.Lock()
		sh.heap, sh.index, sh.behind = nil, u64map{}, u64map{}
		sh.publish()
		sh.mu.Unlock()
	}
}

// The heap. Called with sh.mu held; publish after a change.

// publish stores first and count for the loads outside the lock.
// Called with sh.mu held.
func (sh *timerShard) publish() {
	first := int64(noTimer)
	if len(sh.heap) > 0 {
		first = sh.heap[0].when
	}
	sh.first.Store(first)
	sh.count.Store(int64(len(sh.heap)))
}

// push adds e to the heap. Called with sh.mu held.
func (sh *timerShard) push(e timerEntry) {
	sh.heap = append(sh.heap, e)
	sh.up(len(sh.heap) - 1)
}

// up moves the entry at i towards the root to its place.
// Called with sh.mu held.
func (sh *timerShard) up(i int) {
	h := sh.heap
	e := h[i]
	for i > 0 {
		parent := (i - 1) / 4
		if !e.before(&h[parent]) {
			break
		}
		sh.place(i, h[parent])
		i = parent
	}
	sh.place(i, e)
}

// down moves the entry at i towards the leaves to its place.
// Called with sh.mu held.
func (sh *timerShard) down(i int) {
	h := sh.heap
	n := len(h)
	e := h[i]
	for {
		c := 4*i + 1
		if c >= n {
			break
		}
		m := c
		for j := c + 1; j < c+4 && j < n; j++ {
			if h[j].before(&h[m]) {
				m = j
			}
		}
		if !h[m].before(&e) {
			break
		}
		sh.place(i, h[m])
		i = m
	}
	sh.place(i, e)
}

// place puts e at position i and records the position in the index.
// Called with sh.mu held.
func (sh *timerShard) place(i int, e timerEntry) {
	sh.heap[i] = e
	sh.index.set(e.seq, uint64(i))
}

// removeAt deletes the entry at i and returns it. The caller calls trim
// once it has removed what it came for.
func (sh *timerShard) removeAt(i int) timerEntry {
	h := sh.heap
	e := h[i]
	sh.index.remove(e.seq)
	if sh.behind.len() != 0 {
		sh.behind.remove(e.seq)
	}
	last := len(h) - 1
	if i != last {
		h[i] = h[last]
	}
	sh.heap = h[:last]
	if i != last {
		if i > 0 && sh.heap[i].before(&sh.heap[(i-1)/4]) {
			sh.up(i)
		} else {
			sh.down(i)
		}
	}
	return e
}

// trim gives back the memory of a burst of timers: once the heap has
// stayed below a quarter of its buffer for timerShrinkAfter, it moves to
// a buffer twice its length and the index, which never shrinks by
// itself, is rebuilt; an empty heap gives its memory back at once.
// Waiting for the heap to stay small keeps a shard whose timers come and
// go in waves (sessions that started together) from shrinking and
// regrowing with every wave. Called after removals,
// with the clock reading now, or 0 if the caller has none (it then reads
// the clock only when the heap is small).
func (sh *timerShard) trim(now int64, ts *timerService) {
	c := cap(sh.heap)
	if c <= timerShrinkMin || len(sh.heap) >= c/4 {
		sh.smallSince = 0
		return
	}
	if len(sh.heap) == 0 {
		// Nothing left: nothing to wait for either, and no later call
		// may come to give the memory back.
		sh.heap, sh.index, sh.smallSince = nil, u64map{}, 0
		return
	}
	if now == 0 {
		now = ts.now()
	}
	switch {
	case sh.smallSince == 0:
		sh.smallSince = now
	case now-sh.smallSince >= timerShrinkAfter:
		sh.smallSince = 0
		h := make([]timerEntry, len(sh.heap), 2*len(sh.heap))
		copy(h, sh.heap)
		sh.heap = h
		sh.index = u64map{}
		sh.index.reserve(len(h))
		for i := range h {
			sh.index.add(h[i].seq, uint64(i))
		}
	}
}

// timerShrinkAfter is how long a shard's heap must stay below a quarter
// of its buffer before trim gives the memory back.
const timerShrinkAfter = int64(time.Second)

// The workers' side.

// checkTimers is a worker's look at the timers, at a tick when
// w.timerTick says it is time. It fires what is due in every shard (see
// fireTimers), decides when to look again from the earliest deadline
// left, and reports whether it queued any process. Every shard, not only
// its own: a worker whose thread the operating system has descheduled
// would otherwise hold its shard's timers back until it runs again.
// Owner only.
func (w *worker) checkTimers() bool {
	queued, now, earliest := w.pollTimers()
	if earliest == noTimer {
		w.timerTick = w.tick + timerMaxTicks
	} else {
		w.timerTick = w.tick + w.ownTimers.ticksUntil(earliest, now, w.tick)
	}
	return queued
}

// ticksUntil returns how many ticks the owner may let pass before it
// looks at the timers again, given the earliest deadline first and the
// clock reading now at tick: half the ticks that the recent ones suggest
// will pass before first, at least 1 and at most timerMaxTicks. Owner
// only.
func (sh *timerShard) ticksUntil(first, now int64, tick uint64) uint64 {
	n := int64(1) // no estimate of a tick's length yet: look at the next one
	switch ticks := int64(tick - sh.lastTick); {
	case first <= now:
		// Due and not fired: another worker took the shard's due
		// timers from under this look and is firing them; looking
		// again at once would only collide with it.
		n = timerBusyTicks
	case ticks > 0 && now > sh.lastNow && sh.lastTick != 0:
		perTick := max((now-sh.lastNow)/ticks, 1)
		n = min(max((first-now)/perTick/2, 1), timerMaxTicks)
	}
	sh.lastTick, sh.lastNow = tick, now
	return uint64(n)
}

// pollTimers fires the due timers of every shard and reports whether it
// queued any process, the clock reading it used, and the earliest
// deadline left as this worker sees it (noTimer if none, and then it may
// not have read the clock). It fires the shards' timers merged in
// deadline order, a run from the shard with the earliest due timer up
// to the next shard's earliest, so that a backlog reaches the global
// queue oldest first, not shard after shard.
//
// A shard whose owner is busy is the owner's to fire: another worker
// takes its timers only once they are timerStealAfter overdue (its owner
// has been kept from looking, by a long step or by the operating
// system), so the workers do not contend for the shards' locks while all
// is well. A shard whose owner is idle is anyone's. Worker only.
func (w *worker) pollTimers() (queued bool, now, earliest int64) {
	ts := w.s.timers
	now = -1
	fired := false
	for {
		best, bestFirst, next := -1, int64(noTimer), int64(noTimer)
		earliest = noTimer
		for i := range ts.shards {
			first := ts.shards[i].first.Load()
			if first == noTimer {
				continue
			}
			if now < 0 {
				now = ts.now()
			}
			grace := int64(0)
			if i != w.id && !w.s.workers[i].idle.Load() {
				grace = timerStealAfter
			}
			earliest = min(earliest, first+grace)
			switch {
			case first+grace > now:
			case first < bestFirst:
				best, bestFirst, next = i, first, bestFirst
			default:
				next = min(next, first)
			}
		}
		if best < 0 {
			break
		}
		if !fired {
			fired = true
			w.s.coarse.advance(now)
		}
		popped, q := w.fireTimers(&ts.shards[best], min(now, next))
		queued = queued || q
		if !popped {
			break // another worker took them meanwhile
		}
	}
	// A worker with nothing queued takes them from the global queue
	// next (and wakes others if it takes several); one with work of its
	// own wakes a worker for them.
	if queued && w.queueLen() > 0 {
		w.s.wakeWorker()
	}
	return queued, now, earliest
}

// timerStealAfter is how overdue the timers of a busy worker's shard
// must be before another worker fires them. A busy owner looks about
// every tick when a deadline is near, so this is reached only when it is
// kept from looking.
const timerStealAfter = int64(100 * time.Microsecond)

// fireTimers completes the timers of sh due by limit, a batch at a
// time, and queues the processes they wake on the global queue; it
// reports whether it took any timer and whether it queued any process.
// It holds no lock while it completes a batch: a worker descheduled
// there (by the operating system, or by the Go scheduler for the garbage
// collector) holds back only the timers of its batch, and the other
// workers go on firing the shard. Worker only.
func (w *worker) fireTimers(sh *timerShard, limit int64) (popped, queued bool) {
	for more := true; more; {
		var n int
		var q bool
		n, q, more = w.fireBatch(sh, limit)
		popped = popped || n > 0
		queued = queued || q
	}
	return popped, queued
}

// fireBatch takes up to timerBatch timers of sh due by now (more if the
// last ones belong to one process, so that the timers one step set for
// one deadline stay in one batch), completes their yields in deadline
// order and pushes the processes woken to the global queue, in that
// order; it reports how many it took, whether it queued any process, and
// whether more are due. Worker only.
func (w *worker) fireBatch(sh *timerShard, now int64) (popped int, queued, more bool) {
	own := w.ownTimers
	due := own.due[:0]
	sh.mu.Lock()
	// The same process, whether the entries are Sleeps or deadlines:
	// timerDeadline is masked off.
	for len(sh.heap) > 0 && sh.heap[0].when <= now &&
		(len(due) < timerBatch || (sh.heap[0].pid^due[len(due)-1].pid)&^timerDeadline == 0) {
		due = append(due, sh.removeAt(0))
	}
	more = len(sh.heap) > 0 && sh.heap[0].when <= now
	sh.trim(max(now, 1), w.s.timers)
	sh.publish()
	sh.mu.Unlock()
	own.due = due[:0] // keep a buffer that grew for one process's timers
	if h := testHookTimerFire.Load(); h != nil {
		for i := range due {
			(*h)(w.s, due[i].pid&^timerDeadline, due[i].seq)
		}
	}
	woken := own.woken[:0]
	for i := range due {
		pid, deadline := due[i].pid&^timerDeadline, due[i].pid&timerDeadline != 0
		p := w.s.table.lookup(pid)
		if p == nil {
			continue // ended meanwhile
		}
		ev, cause := Event{Type: EventYieldComplete}, error(nil)
		if deadline {
			ev.Error, cause = ErrTimeout, ErrTimeout
		}
		c, err := p.complete(&ev, due[i].seq, cause, pid)
		if err != nil {
			continue // ended, or the yield completed otherwise
		}
		if c.held != 0 {
			w.s.demonitor(c.held, c.seq) // its timer is this one, gone already
		}
		st := c.woken
		if st == 0 {
			continue // running: its worker steps it again
		}
		if st == stBlocked {
			w.count(cBlockedOut)
		} else {
			w.count(cIdleOut)
		}
		woken = append(woken, p)
	}
	// The global queue, not the deque, which its owner works newest
	// first: under load the processes woken first would wait longest.
	if len(woken) > 0 {
		w.s.global.PushBatch(woken)
		clear(woken)
		own.woken = woken[:0]
		queued = true
	}
	return len(due), queued, more
}

// testHookTimerFire, when set, is called with every timer a worker takes
// from a shard to fire. Tests only; a load per batch.
var testHookTimerFire atomic.Pointer[func(s *Scheduler, pid, seq uint64)]

// watchTimers is called by a parking worker listed as idle: it reports
// false if a timer is due (the worker should not park), and otherwise
// makes the worker the watcher, with its alarm set to the earliest
// deadline, unless no timer is pending or a parked watcher wakes up by
// then. Worker only.
func (w *worker) watchTimers() bool {
	w.stopAlarm()
	ts := w.s.timers
	earliest := int64(noTimer)
	for i := range ts.shards {
		earliest = min(earliest, ts.shards[i].first.Load())
	}
	if earliest == noTimer {
		// Nothing to watch; a woken watcher's claim lapses.
		ts.watch.CompareAndSwap(watchRunning, 0)
		return true
	}
	now := ts.now()
	if earliest <= now {
		return false
	}
	for {
		cur := ts.watch.Load()
		if cur > now && cur <= earliest {
			// That watcher's alarm goes off by then (and if it has been
			// woken meanwhile, its alarm wakes another parked worker).
			// A watch already past is not trusted: its watcher may be
			// woken but not yet running.
			return true
		}
		if ts.watch.CompareAndSwap(cur, earliest) {
			break
		}
	}
	w.armAlarm(earliest, time.Duration(earliest-now))
	return true
}

// armAlarm sets the worker's alarm to go off after d, for deadline.
// Each arming is counted in s.wg until the alarm's function has run or
// stopAlarm has stopped it, so Shutdown waits for it. Worker only, with
// no alarm armed.
func (w *worker) armAlarm(deadline int64, d time.Duration) {
	own := w.ownTimers
	own.armedFor = deadline
	w.s.wg.Add(1)
	if own.alarm == nil {
		own.alarm = time.AfterFunc(d, w.alarmRang)
		return
	}
	own.alarm.Reset(d)
}

// stopAlarm stops the worker's alarm if it is armed. Worker only: when
// it parks again (before it decides whether to watch) and when it exits.
func (w *worker) stopAlarm() {
	own := w.ownTimers
	if own.armedFor == 0 {
		return
	}
	if own.alarm.Stop() {
		w.s.wg.Done()
	}
	own.armedFor = 0
}

// woke is called by a worker when Park returns. If it was the watcher,
// it marks the watch as running (it looks at the timers again before it
// parks) but leaves its alarm armed: parked workers that trusted its
// watch rely on that alarm, which, if the worker is not parked when it
// goes off, wakes one of them (see alarmRang). Worker only.
func (w *worker) woke() {
	if d := w.ownTimers.armedFor; d != 0 {
		w.s.timers.watch.CompareAndSwap(d, watchRunning)
	}
}

// alarmRang is the alarm's function. It wakes the worker if it is still
// parked (on the idle list), as a waker would but without handing it
// the search. If the worker is not parked (it was woken earlier, and
// may even be waiting for a processor) and timers are due, it wakes
// another parked worker instead, for the timers that parked workers
// trusted its watch with.
// Runs on a goroutine of its own.
// Runs on the alarm's own goroutine.
func (w *worker) alarmRang() {
	s := w.s
	if s.idle.remove(w) {
		w.parker.Unpark()
	} else if s.timers.anyDue() {
		if v := s.idle.pop(); v != nil {
			v.parker.Unpark()
		}
	}
	s.wg.Done()
}

// anyDue reports whether a shard holds a due timer. Any goroutine.
func (ts *timerService) anyDue() bool {
	earliest := int64(noTimer)
	for i := range ts.shards {
		earliest = min(earliest, ts.shards[i].first.Load())
	}
	return earliest != noTimer && earliest <= ts.now()
}
