package scheduler

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
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
	x := p.live()
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

// TestRecordFirstLine: the fields that the start of a reused record
// from outside the workers reads and writes lie in the record's first
// cache line, which is all that the start asks to have fetched (see
// table.prefetchNext). A field placed before them would push one into
// the second line, which the worker ending the process writes.
func TestRecordFirstLine(t *testing.T) {
	var p proc
	fields := []struct {
		name         string
		offset, size uintptr
	}{
		{"id", unsafe.Offsetof(p.id), unsafe.Sizeof(p.id)},
		{"state", unsafe.Offsetof(p.state), unsafe.Sizeof(p.state)},
		{"methodID", unsafe.Offsetof(p.methodID), unsafe.Sizeof(p.methodID)},
		{"kind", unsafe.Offsetof(p.kind), unsafe.Sizeof(p.kind)},
		{"impl", unsafe.Offsetof(p.impl), unsafe.Sizeof(p.impl)},
	}
	for _, f := range fields {
		if f.offset+f.size > cacheLine {
			t.Errorf("proc.%s takes bytes %d to %d, past the first %d-byte line", f.name, f.offset, f.offset+f.size, cacheLine)
		}
	}
}

// TestProcSizeClasses pins each process record to the Go allocation size
// class it fits: a field that grows a record by a few bytes costs every
// process of that kind the whole step to the next class (16 bytes or
// more, times a million waiting processes, and more work for the garbage
// collector), so such a change has to show up here and be decided on.
// Each record is also allocated through allocProc and the bytes the
// runtime handed out are counted, which checks that the bound is a real
// size class and that allocProc allocates the record meant. A record of
// the kind a start from outside the workers reuses (no Handle, no
// awaiting parent, no timing) must also begin on a cache line and take
// two whole ones (see spawnedProc).
func TestProcSizeClasses(t *testing.T) {
	end := func(EndInfo) {}
	cases := []struct {
		name          string
		size, class   uintptr
		timed, handle bool
		awaited       bool
	}{
		{name: "spawnedProc", size: unsafe.Sizeof(spawnedProc{}), class: 128},
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
				keep[i] = allocProc(s.kindOf(c.handle, c.awaited))
			}
			runtime.ReadMemStats(&after)
			// Classes this small are at least 16 bytes apart: what else
			// the test binary allocates meanwhile cannot move the
			// average by that much.
			perProc := (after.TotalAlloc - before.TotalAlloc) / n
			if perProc < uint64(c.class) || perProc >= uint64(c.class)+16 {
				t.Fatalf("%d bytes allocated per %s, want its %d-byte size class", perProc, c.name, c.class)
			}
			if !c.timed && !c.handle && !c.awaited {
				for _, p := range keep {
					require.Zero(t, uintptr(unsafe.Pointer(p))%cacheLine, "a spawned process's record at %p does not begin on a cache line", p)
				}
			}
			require.Equal(t, c.timed, keep[0].kind&pkTimed != 0, "timed")
			require.Equal(t, c.handle, keep[0].kind&pkHandle != 0, "handle")
			require.Equal(t, c.awaited, keep[0].awaited() != nil, "awaited")
			runtime.KeepAlive(keep)
		})
	}
}

// ctxProbe keeps the context its Init was given, and steps with step.
type ctxProbe struct {
	ctx  chan context.Context
	step func(evs []Event, out *StepOutput) error
}

func (c *ctxProbe) Init(ctx context.Context, _ string, _ payload.Payloads) error {
	c.ctx <- ctx
	return nil
}
func (c *ctxProbe) Step(evs []Event, out *StepOutput) error { return c.step(evs, out) }
func (c *ctxProbe) Close()                                  {}

// oneAfterOther returns a parent that awaits first, then second, then
// ends: on one worker, second starts in the slot first ended in.
func oneAfterOther(first, second Process) stepFunc {
	return numbered(func(n int, _ []Event, out *StepOutput) error {
		switch n {
		case 0:
			out.SpawnAwait(1, first, "run", nil)
		case 1:
			out.SpawnAwait(2, second, "run", nil)
		default:
			out.Done(payload.Payload{})
		}
		return nil
	})
}

// recordKey is the context key of TestRecordReuse's value.
type recordKey struct{}

// spawnedCtx returns the record and ID a spawned process's context names,
// failing unless it is a valuesCtx (values set) or the record as a
// genCtx.
func spawnedCtx(t *testing.T, ctx context.Context, values bool) (*proc, uint64) {
	t.Helper()
	if values {
		c, ok := ctx.(*valuesCtx)
		require.True(t, ok, "the context of a process started with values is a %T", ctx)
		return c.p, c.id
	}
	c, ok := ctx.(interface{ ident() (*proc, uint64) })
	require.True(t, ok, "the context of a process started without values is a %T", ctx)
	return c.ident()
}

// TestRecordReuse: the record of a process started by a step that ended
// plainly goes to the next process started in its slot (see
// Scheduler.record), and the context the first process was given stays
// its own: done, with cause ErrEnded, answering its own PID and the
// values it was started with (none, for a process started without any,
// whose context keeps no values), while the record serves the second,
// which nothing meant for the first reaches.
func TestRecordReuse(t *testing.T) {
	for _, values := range []bool{true, false} {
		t.Run(fmt.Sprintf("values=%v", values), func(t *testing.T) { testRecordReuse(t, values) })
	}
}

func testRecordReuse(t *testing.T, values bool) {
	s := newScheduler(t, WithWorkers(1))
	first := &ctxProbe{ctx: make(chan context.Context, 1), step: func(_ []Event, out *StepOutput) error {
		out.Done(payload.Payload{})
		return nil
	}}
	var secondEvents []Event
	second := &ctxProbe{ctx: make(chan context.Context, 1), step: func(evs []Event, out *StepOutput) error {
		secondEvents = append(secondEvents, evs...)
		if len(secondEvents) > 0 {
			out.Done(payload.Payload{})
		}
		return nil
	}}
	parent := oneAfterOther(first, second)
	ctx, want := context.Background(), any(nil)
	if values {
		ctx, want = context.WithValue(ctx, recordKey{}, "kept"), "kept"
	}
	h, err := s.Submit(ctx, parent, "run", nil)
	require.NoError(t, err)
	firstCtx := receive(t, first.ctx, "the first child's context")
	secondCtx := receive(t, second.ctx, "the second child's context")
	firstRecord, firstID := spawnedCtx(t, firstCtx, values)
	secondRecord, _ := spawnedCtx(t, secondCtx, values)
	require.Same(t, firstRecord, secondRecord, "the second child has the first one's record")

	firstPID, ok := Self(firstCtx)
	require.True(t, ok)
	secondPID, _ := Self(secondCtx)
	require.NotEqual(t, firstPID, secondPID)
	assert.Equal(t, relay.PID{Node: s.node, ID: firstID}, firstPID)
	assert.Equal(t, want, firstCtx.Value(recordKey{}), "the first child's values")
	assert.Equal(t, want, secondCtx.Value(recordKey{}), "the second child's values")
	assert.ErrorIs(t, firstCtx.Err(), context.Canceled, "the first child's context once it ended")
	assert.ErrorIs(t, context.Cause(firstCtx), ErrEnded)
	select {
	case <-firstCtx.Done():
	default:
		t.Error("the first child's context is not done")
	}
	ran := make(chan struct{})
	context.AfterFunc(firstCtx, func() { close(ran) })
	receive(t, ran, "AfterFunc on the first child's context")
	require.NoError(t, secondCtx.Err(), "the second child's context while it waits")

	eventually(t, "the second child waits", func() bool {
		for _, info := range s.Processes() {
			if info.PID == secondPID && info.State == StateIdle {
				return true
			}
		}
		return false
	})
	require.ErrorIs(t, s.Tell(firstPID, "for the first"), ErrProcessNotFound)
	require.NoError(t, s.Tell(secondPID, "for the second"))
	require.NoError(t, waitEnd(t, h))
	require.Len(t, secondEvents, 1, "what the second child got")
	assert.Equal(t, "for the second", secondEvents[0].Data)
}

// TestProcExtraSize pins the part of a record that some processes need
// to its size class: 48 bytes for what a process is started with
// (context values of its own, say, as a process submitted with a
// request's context has), 176 with what it gets on demand (a name, a
// monitor, a Done channel): a service's long-lived processes keep one
// each.
func TestProcExtraSize(t *testing.T) {
	if size := unsafe.Sizeof(procExtra{}); size > 48 {
		t.Fatalf("procExtra is %d bytes, past its 48-byte size class", size)
	}
	if size := unsafe.Sizeof(extraAndLive{}); size > 176 {
		t.Fatalf("extraAndLive is %d bytes, past its 176-byte size class", size)
	}
}

// TestContextsOfARecordsProcesses: on one worker, a parent awaits
// children one after another, so that each starts in the slot the one
// before it ended in and takes its record. A record serves at most
// ctxGens of them (the context of a process without context values is
// its record, under a type that holds its generation modulo ctxGens:
// see genCtx), and the context of every child stays its own once it has
// ended and its record serves others: it answers the child's PID, is
// done with cause ErrEnded, and equals no other child's context.
func TestContextsOfARecordsProcesses(t *testing.T) {
	s := newScheduler(t, WithWorkers(1))
	const children = 2*ctxGens + 3
	ctxs := make(chan context.Context, children)
	child := func() Process {
		return &ctxProbe{ctx: ctxs, step: func(_ []Event, out *StepOutput) error {
			out.Done(payload.Payload{})
			return nil
		}}
	}
	parent := numbered(func(n int, _ []Event, out *StepOutput) error {
		if n < children {
			out.SpawnAwait(uint64(n+1), child(), "run", nil)
		} else {
			out.Done(payload.Payload{})
		}
		return nil
	})
	h, err := s.Submit(context.Background(), parent, "run", nil)
	require.NoError(t, err)
	require.NoError(t, waitEnd(t, h))

	served := map[*proc]int{}
	seen := map[context.Context]bool{}
	pids := map[relay.PID]bool{}
	for range children {
		ctx := receive(t, ctxs, "a child's context")
		p, id := spawnedCtx(t, ctx, false)
		served[p]++
		require.False(t, seen[ctx], "two children have equal contexts")
		seen[ctx] = true
		pid, ok := Self(ctx)
		require.True(t, ok)
		require.Equal(t, relay.PID{Node: s.node, ID: id}, pid, "the PID a child's context answers")
		require.False(t, pids[pid], "two children's contexts answer %v", pid)
		pids[pid] = true
		require.ErrorIs(t, ctx.Err(), context.Canceled, "the context of %v, ended", pid)
		require.ErrorIs(t, context.Cause(ctx), ErrEnded, "the cause of the context of %v", pid)
	}
	most := 0
	for _, n := range served {
		most = max(most, n)
	}
	t.Logf("%d children on %d records, at most %d on one", children, len(served), most)
	require.Greater(t, most, 1, "no record served two children: nothing here was reused")
	require.LessOrEqual(t, most, ctxGens, "a record served more children than its contexts can tell apart")
}

// TestRecordKeptWhenHeld: a record that something may still hold once
// its process has ended is not reused: here a handler kept the Call of
// the first child's yield, whose context then stays that of the first
// child, done with cause ErrEnded.
func TestRecordKeptWhenHeld(t *testing.T) {
	calls := make(chan Call, 1)
	s := newScheduler(t, WithWorkers(1), WithHandler(FirstUserCommand, func(c Call) error {
		calls <- c
		return c.Complete(nil, nil)
	}))
	first := &ctxProbe{ctx: make(chan context.Context, 1), step: func(evs []Event, out *StepOutput) error {
		if len(evs) == 0 {
			out.Yield(1, FirstUserCommand, nil)
		} else {
			out.Done(payload.Payload{})
		}
		return nil
	}}
	second := &ctxProbe{ctx: make(chan context.Context, 1), step: func(_ []Event, out *StepOutput) error {
		out.Done(payload.Payload{})
		return nil
	}}
	parent := oneAfterOther(first, second)
	h, err := s.Submit(t.Context(), parent, "run", nil)
	require.NoError(t, err)
	require.NoError(t, waitEnd(t, h))
	firstRecord, firstID := spawnedCtx(t, receive(t, first.ctx, "the first child's context"), true)
	secondRecord, _ := spawnedCtx(t, receive(t, second.ctx, "the second child's context"), true)
	require.NotSame(t, firstRecord, secondRecord, "a record a handler's Call holds is not reused")
	call := receive(t, calls, "the kept Call")
	assert.ErrorIs(t, context.Cause(call.Context()), ErrEnded, "the kept call's context")
	pid, _ := Self(call.Context())
	assert.Equal(t, relay.PID{Node: s.node, ID: firstID}, pid)
}

// TestMethodEntriesOwnTheirLines: a Submit from outside the workers
// reads the method table's last entry, so the table's fields and each
// entry must share no cache line with other objects, which another core
// may be writing (see methodEntry). An entry is one line, allocated
// line-aligned; the table's fields have a line of padding on each side.
func TestMethodEntriesOwnTheirLines(t *testing.T) {
	if size := unsafe.Sizeof(methodEntry{}); size != cacheLine {
		t.Fatalf("methodEntry is %d bytes, want one %d-byte cache line", size, cacheLine)
	}
	mt := newMethodTable()
	for _, name := range []string{"a", "b", "c"} {
		mt.id(name)
		e := (*mt.ids.Load())[name]
		if addr := uintptr(unsafe.Pointer(e)); addr%cacheLine != 0 {
			t.Fatalf("the entry of %q is at %#x, not at the start of a cache line", name, addr)
		}
	}
	if off := unsafe.Offsetof(mt.ids); off < cacheLine {
		t.Fatalf("the method table's first field is at offset %d, want a cache line of padding before it", off)
	}
	if after := unsafe.Sizeof(*mt) - unsafe.Offsetof(mt.last) - unsafe.Sizeof(mt.last); after < cacheLine {
		t.Fatalf("%d bytes after the method table's last field, want a cache line of padding", after)
	}
}

// selfTeller is a process whose Init sends a message to its own PID and
// keeps what Tell returned, and whose first step ends it.
type selfTeller struct {
	s          *Scheduler
	ctx        context.Context
	told       error
	waitedTell error     // a TellContext's
	registered error     // a Register's, of the name "init " and its PID
	monitored  chan Exit // what a Monitor set up during Init got, once
	listed     bool      // Processes listed it
	live       int64     // Stats' Live
	events     int
	steps      int
}

func (p *selfTeller) Init(ctx context.Context, _ string, _ payload.Payloads) error {
	p.ctx = ctx
	self, _ := Self(ctx)
	p.told = p.s.Tell(self, "sent during Init")
	p.waitedTell = p.s.TellContext(ctx, self, "sent during Init, waiting for room")
	p.registered = p.s.Register("init "+self.String(), self)
	p.monitored = make(chan Exit, 1)
	p.s.Monitor(self, func(e Exit) { p.monitored <- e })
	for _, info := range p.s.Processes() {
		p.listed = p.listed || info.PID == self
	}
	p.live = p.s.Stats().Processes.Live
	return nil
}

func (p *selfTeller) Step(evs []Event, out *StepOutput) error {
	p.events += len(evs)
	p.steps++
	out.Done(payload.Payload{})
	return nil
}
func (p *selfTeller) Close() {}

// initInTwoRecords runs two selfTellers one after the other on one
// worker, the second in the record the first ended in, and returns the
// scheduler and the two by the kind of record their Init ran in.
func initInTwoRecords(t *testing.T) (*Scheduler, map[string]*selfTeller) {
	t.Helper()
	s := newScheduler(t, WithWorkers(1))
	first, second := &selfTeller{s: s}, &selfTeller{s: s}
	h, err := s.Submit(context.Background(), oneAfterOther(first, second), "run", nil)
	require.NoError(t, err)
	require.NoError(t, waitEnd(t, h))
	firstRecord, _ := spawnedCtx(t, first.ctx, false)
	secondRecord, _ := spawnedCtx(t, second.ctx, false)
	require.Same(t, firstRecord, secondRecord, "the second child has the first one's record")
	return s, map[string]*selfTeller{"new record": first, "reused record": second}
}

// TestReusedRecordIsNotThereDuringInit: a process that reuses the record
// of one that ended in its slot is in the table while its Init runs, as
// a new record is not; until it is published, a message to it is
// refused as it would be for a new record, which nobody finds yet, and
// does not reach its first step.
func TestReusedRecordIsNotThereDuringInit(t *testing.T) {
	_, tellers := initInTwoRecords(t)
	for name, p := range tellers {
		assert.ErrorIs(t, p.told, ErrProcessNotFound, "%s: a Tell during Init", name)
		assert.Zero(t, p.events, "%s: events at the first step", name)
	}
}

// TestNoNameDuringInit: a process whose Init runs is not published yet,
// so a name for it is refused with ErrProcessNotFound, as a message is
// (Process: "a message to it or a name for it is refused"), with a new
// record and with a reused one, and nothing is left registered. A
// TellContext is refused too, at once, rather than waiting.
func TestNoNameDuringInit(t *testing.T) {
	s, tellers := initInTwoRecords(t)
	for name, p := range tellers {
		assert.ErrorIs(t, p.registered, ErrProcessNotFound, "%s: a Register during Init", name)
		assert.ErrorIs(t, p.waitedTell, ErrProcessNotFound, "%s: a TellContext during Init", name)
		self, _ := Self(p.ctx)
		_, err := s.Lookup("init " + self.String())
		assert.ErrorIs(t, err, ErrNameNotFound, "%s: the name", name)
	}
	s.names.mu.RLock()
	defer s.names.mu.RUnlock()
	assert.Empty(t, s.names.byName, "names left registered")
}

// TestMonitorDuringInit: a monitor set up while a process's Init runs
// finds no process, as a message does, and completes at once with
// ExitGone, with a new record and with a reused one; the process runs
// on once published, unwatched.
func TestMonitorDuringInit(t *testing.T) {
	_, tellers := initInTwoRecords(t)
	for name, p := range tellers {
		select {
		case e := <-p.monitored:
			assert.Equal(t, ExitGone, e.Reason, "%s: the monitor's exit", name)
			assert.ErrorIs(t, e.Err, ErrProcessNotFound, "%s: the monitor's exit", name)
		case <-time.After(testTimeout):
			t.Fatalf("%s: the monitor set up during Init was never called", name)
		}
		assert.Equal(t, 1, p.steps, "%s: the process did not run on after its Init", name)
	}
}

// TestNotListedDuringInit: Processes does not list a process whose Init
// runs, with a new record and with a reused one (whose state word still
// says Ended), while Stats counts it in Live, with its parent.
func TestNotListedDuringInit(t *testing.T) {
	_, tellers := initInTwoRecords(t)
	for name, p := range tellers {
		assert.False(t, p.listed, "%s: listed during Init", name)
		assert.Equal(t, int64(2), p.live, "%s: Live during Init (the process and its parent)", name)
	}
}

// TestGenCtxFor: the context genCtxFor makes of a record for a
// generation holds that record and names that generation's process,
// whichever later ID of the same run of ctxGens generations the record
// has since taken; the contexts of a record's processes are all of
// different types, so no two compare equal.
func TestGenCtxFor(t *testing.T) {
	const slot = 7
	for gen := uint32(ctxGens); gen < 3*ctxGens; gen++ {
		p := new(proc)
		p.id.Store(makeID(slot, gen))
		ctx := genCtxFor(p, gen)
		c, ok := ctx.(interface{ ident() (*proc, uint64) })
		require.True(t, ok, "genCtxFor made a %T", ctx)
		for later := gen; later < gen|(ctxGens-1)+1; later++ {
			p.id.Store(makeID(slot, later))
			got, id := c.ident()
			require.Same(t, p, got, "the record of the context of generation %d", gen)
			require.Equal(t, makeID(slot, gen), id, "the ID the context of generation %d names once the record has generation %d", gen, later)
		}
	}
	seen := map[context.Context]int{}
	for gen, proto := range genCtxProto {
		if other, dup := seen[proto]; dup {
			t.Fatalf("generations %d and %d have contexts of the same type %T", other, gen, proto)
		}
		seen[proto] = gen
	}
}

// TestReusedRecordKeepsItsPendingArray: a record that its end leaves for
// the slot's next process keeps its pending set's array, emptied, for
// that process's spawns; one that is not left for reuse gives it back.
func TestReusedRecordKeepsItsPendingArray(t *testing.T) {
	var pc pendingCache
	p := allocProc(pkAwaited)
	p.id.Store(makeID(3, 0))
	spawnTwo := func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.pending.reserve(2, p, &pc)
		require.True(t, p.pending.addAbove(1, 11))
		require.True(t, p.pending.addAbove(2, 12))
	}
	spawnTwo()
	arr := p.pending.arr
	require.NotNil(t, arr)

	// Ended with its yields still pending, as a parent that finishes
	// before its children may.
	var c closed
	p.close(&c, payload.Payload{}, nil, false, makeID(3, 1))
	require.Equal(t, makeID(3, 1), p.id.Load(), "the record left for the next ID")
	require.Nil(t, c.pending, "the array given back by a record left for reuse")
	require.Same(t, arr, p.pending.arr, "the array kept by the record")
	require.Zero(t, p.pending.count(), "yields of the ended process left pending")
	require.False(t, p.hasPending.Load())

	spawnTwo()
	require.Same(t, arr, p.pending.arr, "the next process's spawns took another array")
	require.Equal(t, uint64(2), p.pending.count())

	var c2 closed
	p.close(&c2, payload.Payload{}, nil, false, 0)
	require.Nil(t, p.pending.arr, "the array kept by a record not left for reuse")
	require.Same(t, arr, &c2.pending[0], "the array given back")
	c2.recycle(&pc)
}

// A record left for its slot's next process has the mailbox of a new
// record: recycleFor clears the mailbox's count, bits and hint, and its
// buffer if it still has one.
func TestRecycleForLeavesANewMailbox(t *testing.T) {
	for _, withBuffer := range []bool{false, true} {
		p := new(proc)
		p.id.Store(makeID(3, 1))
		p.inbox = eventBuf{n: 2, logCap: 3, hint: 4, wbits: wbStepped | wbBigInbox | wbUnlooked}
		if withBuffer {
			p.inbox.first = &Event{Tag: 9}
		}
		p.mu.Lock()
		p.recycleFor(makeID(3, 2))
		p.mu.Unlock()
		require.Equal(t, eventBuf{}, p.inbox, "the mailbox left, with a buffer: %v", withBuffer)
		require.Equal(t, makeID(3, 2), p.id.Load(), "the next process's ID")
	}
}

// A record left for its slot's next process keeps nothing of how its
// last process was started: a start without context values or options
// stores no procExtra of its own (see submitOutside), so one left in the
// record would give the next process the last one's values, entry point
// and mailbox limit.
func TestRecycleForLeavesNoStartOfTheLast(t *testing.T) {
	type lastKey struct{}
	p := new(proc)
	p.id.Store(makeID(5, 1))
	both := &extraAndStart{s: procStart{method: "last", mailbox: &mailboxLimit{}}}
	both.x.values = context.WithValue(context.Background(), lastKey{}, "last")
	both.x.start = &both.s
	p.extra.Store(&both.x)
	p.flags, p.msgs = pfCancelled, 7
	p.mu.Lock()
	p.recycleFor(makeID(5, 2))
	p.mu.Unlock()
	require.Nil(t, p.extra.Load(), "the last process's procExtra")
	require.Zero(t, p.flags, "the last process's flags")
	require.Zero(t, p.msgs, "the last process's message count")
}

// TestAskingAContextKeepsItsRecordReusable: a spawned child that asks
// its context for Err, Value, Self and context.Cause during its life
// leaves its record to the next child of its slot; one that asks for
// Done has the channel made, and its record serves no later process.
func TestAskingAContextKeepsItsRecordReusable(t *testing.T) {
	for _, askDone := range []bool{false, true} {
		t.Run(fmt.Sprintf("Done=%v", askDone), func(t *testing.T) {
			s := newScheduler(t, WithWorkers(1))
			first := &ctxProbe{ctx: make(chan context.Context, 1)}
			var asked context.Context
			first.step = func(_ []Event, out *StepOutput) error {
				asked = <-first.ctx
				if _, ok := Self(asked); !ok || asked.Err() != nil || asked.Value(recordKey{}) != nil || context.Cause(asked) != nil {
					return fmt.Errorf("a live child's context answers Self %v, Err %v, Cause %v", ok, asked.Err(), context.Cause(asked))
				}
				if askDone {
					_ = asked.Done()
				}
				out.Done(payload.Payload{})
				return nil
			}
			second := &ctxProbe{ctx: make(chan context.Context, 1), step: func(_ []Event, out *StepOutput) error {
				out.Done(payload.Payload{})
				return nil
			}}
			h, err := s.Submit(context.Background(), oneAfterOther(first, second), "run", nil)
			require.NoError(t, err)
			require.NoError(t, waitEnd(t, h))
			firstRecord, _ := spawnedCtx(t, asked, false)
			secondRecord, _ := spawnedCtx(t, receive(t, second.ctx, "the second child's context"), false)
			if askDone {
				require.NotSame(t, firstRecord, secondRecord, "a record whose context made its Done channel served a later process")
			} else {
				require.Same(t, firstRecord, secondRecord, "asking the context for Err, Value, Self or Cause kept its record from the next child")
			}
			require.ErrorIs(t, context.Cause(asked), ErrEnded)
		})
	}
}

// TestSchedulerHotFieldPlaces pins where the Scheduler's fields that
// every start, send and worker search touches lie (the shutdown phase,
// the idle workers, the searching count, the outside counters): which
// cache lines they share with their neighbours changes what the
// scheduler costs (a shift of 32 bytes made a ping-pong 4 % slower), so
// a field added before them has to show up here and be measured. On
// 64-bit platforms only, where the places were measured.
func TestSchedulerHotFieldPlaces(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("the places were measured on 64-bit platforms")
	}
	var s Scheduler
	got := map[string]uintptr{
		"phase":    unsafe.Offsetof(s.phase),
		"idle":     unsafe.Offsetof(s.idle),
		"spinning": unsafe.Offsetof(s.spinning),
		"ext":      unsafe.Offsetof(s.ext),
	}
	want := map[string]uintptr{"phase": 568, "idle": 680, "spinning": 720, "ext": 728}
	require.Equal(t, want, got, "offsets of the Scheduler's hot fields")
}
