package scheduler_test

import (
	"cmp"
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// Allocation tests: the scheduler promises zero allocations per
// steady-state step, per message send->step, and per
// yield->complete->step.
//
// Method. Each test has a function f that drives allocOps operations
// through the scheduler and waits until the scheduler has carried them
// out, on a channel made beforehand: a blocked channel receive and a
// buffered send allocate nothing. Messages are pointers and completion
// data nil, so boxing them into an interface allocates nothing either.
// Everything the harness allocates (the scheduler, the processes, t.Run)
// happens before the measurement, and three calls of f warm up every
// buffer that grows to a steady size (mailboxes, the step output, the
// queues, the parkers' channels). f is then measured twice:
//
//   - With GOMAXPROCS left alone, so that workers and the test run in
//     parallel and steals, parking and wake-ups happen as in production.
//     runtime.MemStats.Mallocs, the heap allocations of every goroutine
//     (workers, their alarms, handlers, the test), is read around
//     allocParallelRuns calls of f, and the operations are counted
//     exactly, by the processes or by the driving loop. Fewer than one
//     allocation per allocOps operations is accepted: that absorbs the
//     runtime's own rare allocations (a new OS thread, a GC worker) and
//     the one-time buffers of a worker that meets the process for the
//     first time (its event slice, its parker's channel), while a path
//     that allocates once per operation, or even once per hundred, fails
//     by orders of magnitude.
//   - With testing.AllocsPerRun(allocRuns, f), which reads Mallocs
//     around allocRuns calls and returns the total divided by
//     allocRuns, rounded down; it must be 0. AllocsPerRun sets
//     GOMAXPROCS to 1 meanwhile, so a process that never waits keeps the
//     only P until it is preempted and does more than allocOps
//     operations per call; 0 then means fewer than allocRuns
//     allocations in at least allocRuns*allocOps operations.
//
// Under the race detector the same measurements, with allocRaceRuns runs
// each, only have to stay under raceAllocBound per operation: the race
// runtime may allocate where a normal build does not (sync.Pool, for one,
// drops a quarter of its items at random). As of this writing every path
// measures 0 per operation under race too.
const (
	allocOps          = 1000
	allocRuns         = 20
	allocParallelRuns = 50
	// Under the race detector, where round trips cost ten times more and
	// only a bound is checked, fewer runs are enough.
	allocRaceRuns = 5
	// raceAllocBound is the most allocations per operation accepted
	// under the race detector.
	raceAllocBound = 0.25
)

// allocToken is the message of the allocation tests; a pointer in an
// interface needs no allocation.
type allocToken struct{ _ [8]byte }

// checkAllocs measures f as described above. count returns the number of
// operations carried out so far.
func checkAllocs(t *testing.T, what string, count func() int64, f func()) {
	t.Helper()
	for range 3 {
		f() // warm up
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m0, c0 := ms.Mallocs, count()
	runs := allocParallelRuns
	if raceEnabled {
		runs = allocRaceRuns
	}
	for range runs {
		f()
	}
	runtime.ReadMemStats(&ms)
	allocs, ops := ms.Mallocs-m0, count()-c0
	perOp := float64(allocs) / float64(ops)

	if raceEnabled {
		runs = allocRaceRuns
	} else {
		runs = allocRuns
	}
	perRun := testing.AllocsPerRun(runs, f)

	t.Logf("%s: AllocsPerRun %.0f per %d operations; in parallel %d allocations in %d operations (%.4f per operation); race detector %v",
		what, perRun, allocOps, allocs, ops, perOp, raceEnabled)
	if raceEnabled {
		if perOp > raceAllocBound || perRun/allocOps > raceAllocBound {
			t.Errorf("%s: %.3f allocations per operation (%.3f serially) under the race detector, want at most %v", what, perOp, perRun/allocOps, raceAllocBound)
		}
		return
	}
	if perRun != 0 {
		t.Errorf("%s: testing.AllocsPerRun: %.0f allocations per %d operations, want 0", what, perRun, allocOps)
	}
	if allocs*allocOps >= uint64(ops) {
		t.Errorf("%s: %d allocations in %d operations in parallel (%.4f per operation), want 0", what, allocs, ops, perOp)
	}
}

// within bounds each wait of a measured loop by testTimeout without
// allocating: its timer is made once and reset for each wait. A process
// that never signals (a lost wake-up) then fails the test, saying what
// it waited for, instead of hanging it until the test binary's timeout.
type within struct{ bound *time.Timer }

func newWithin() *within {
	bound := time.NewTimer(testTimeout)
	bound.Stop()
	return &within{bound: bound}
}

// recv receives from ch within testTimeout, or fails the test with
// what. Test goroutine only.
func recv[T any](t testing.TB, w *within, ch <-chan T, what string) T {
	t.Helper()
	w.bound.Reset(testTimeout)
	defer w.bound.Stop()
	select {
	case v := <-ch:
		return v
	case <-w.bound.C:
		t.Fatalf("%s: nothing within %v", what, testTimeout)
		panic("unreachable")
	}
}

// allocHook signals a waiting test once a counter reaches a mark: the
// test sets the mark and receives on signal; the process counts and, on
// reaching the mark, clears it with a CAS (so one signal per mark) and
// sends on the 1-buffered channel, which therefore never blocks.
type allocHook struct {
	count  atomic.Int64
	mark   atomic.Int64 // 0: no one waits
	signal chan struct{}
	within *within
}

func newAllocHook() *allocHook {
	return &allocHook{signal: make(chan struct{}, 1), within: newWithin()}
}

// add counts n operations. Step only.
func (h *allocHook) add(n int64) {
	c := h.count.Add(n)
	if m := h.mark.Load(); m != 0 && c >= m && h.mark.CompareAndSwap(m, 0) {
		h.signal <- struct{}{}
	}
}

// await blocks until ops more operations have been counted, failing
// the test if they have not been within testTimeout.
func (h *allocHook) await(t testing.TB, ops int) {
	h.mark.Store(h.count.Load() + int64(ops))
	recv(t, h.within, h.signal, "the operations counted")
}

// allocSpinner continues forever, counting its steps, until cancelled.
type allocSpinner struct {
	stepOnly
	hook *allocHook
}

func (p *allocSpinner) Step(evs []sched.Event, out *sched.StepOutput) error {
	for i := range evs {
		if evs[i].Type == sched.EventCancel {
			out.Done(payload.Payload{})
			return nil
		}
	}
	p.hook.add(1)
	out.Continue()
	return nil
}

// allocPinger answers every message by telling it back to its sender;
// serve, if set, starts the rally. It counts the messages it receives.
type allocPinger struct {
	stepOnly
	hook  *allocHook
	serve relay.PID
	tok   *allocToken
}

func (p *allocPinger) Step(evs []sched.Event, out *sched.StepOutput) error {
	if !p.serve.IsZero() {
		out.Tell(p.serve, p.tok)
		p.serve = relay.PID{}
	}
	n := int64(0)
	for i := range evs {
		ev := &evs[i]
		switch {
		case ev.Type == sched.EventCancel:
			out.Done(payload.Payload{})
			return nil
		case ev.Type == sched.EventMessage && ev.Error == nil:
			out.Tell(ev.From, ev.Data)
			n++
		}
	}
	if n > 0 {
		p.hook.add(n)
	}
	return nil
}

// allocSink signals once per message, for a test that sends one message
// at a time and waits for its step.
type allocSink struct {
	stepOnly
	signal chan struct{}
}

func (p *allocSink) Step(evs []sched.Event, out *sched.StepOutput) error {
	for i := range evs {
		switch evs[i].Type {
		case sched.EventCancel:
			out.Done(payload.Payload{})
			return nil
		case sched.EventMessage:
			p.signal <- struct{}{}
		}
	}
	return nil
}

// allocYielder yields cmd again each time the previous yield completes,
// counting completions, until cancelled; with sleep set it sleeps for d
// instead.
type allocYielder struct {
	stepOnly
	hook  *allocHook
	cmd   sched.CommandID
	sleep bool
	d     time.Duration
	tag   uint64
}

func (p *allocYielder) Step(evs []sched.Event, out *sched.StepOutput) error {
	n := int64(0)
	for i := range evs {
		switch evs[i].Type {
		case sched.EventCancel:
			out.Done(payload.Payload{})
			return nil
		case sched.EventYieldComplete:
			n++
		}
	}
	if n > 0 {
		p.hook.add(n)
	}
	if len(evs) == 0 || n > 0 {
		p.tag++
		if p.sleep {
			out.Sleep(p.tag, p.d)
		} else {
			out.Yield(p.tag, p.cmd, nil)
		}
	}
	return nil
}

func allocSubmit(t *testing.T, s *sched.Scheduler, p sched.Process) relay.PID {
	t.Helper()
	h, err := s.Submit(context.Background(), p, "alloc", nil)
	require.NoError(t, err)
	return h.PID()
}

var allocWorkers = []int{1, 4}

func TestAllocSteadyStateStep(t *testing.T) {
	for _, workers := range allocWorkers {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			s := newScheduler(t, sched.WithWorkers(workers))
			hook := newAllocHook()
			allocSubmit(t, s, &allocSpinner{hook: hook})
			checkAllocs(t, "step that continues", hook.count.Load, func() {
				hook.await(t, allocOps)
			})
		})
	}
}

func TestAllocTellBetweenProcesses(t *testing.T) {
	for _, workers := range allocWorkers {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			s := newScheduler(t, sched.WithWorkers(workers))
			hook := newAllocHook()
			tok := &allocToken{}
			pong := allocSubmit(t, s, &allocPinger{hook: hook, tok: tok})
			allocSubmit(t, s, &allocPinger{hook: hook, tok: tok, serve: pong})
			checkAllocs(t, "StepOutput.Tell -> step", hook.count.Load, func() {
				hook.await(t, allocOps)
			})
		})
	}
}

func TestAllocTellFromOutside(t *testing.T) {
	for _, workers := range allocWorkers {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			s := newScheduler(t, sched.WithWorkers(workers))
			sink := &allocSink{signal: make(chan struct{}, 1)}
			w := newWithin()
			pid := allocSubmit(t, s, sink)
			tok := &allocToken{}
			var told int64
			tell := func() {
				for range allocOps {
					told++
					if err := s.Tell(pid, tok); err != nil {
						t.Fatal(err)
					}
					recv(t, w, sink.signal, "the sink's step") // it stepped and is going idle again
				}
			}
			checkAllocs(t, "Scheduler.Tell to an idle process -> step", func() int64 { return told }, tell)
		})
	}
}

func TestAllocYieldSyncHandler(t *testing.T) {
	for _, workers := range allocWorkers {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			s := newScheduler(t, sched.WithWorkers(workers), sched.WithHandler(cmdSync, completeAtOnce))
			hook := newAllocHook()
			allocSubmit(t, s, &allocYielder{hook: hook, cmd: cmdSync})
			checkAllocs(t, "yield -> Call.Complete in the handler -> step", hook.count.Load, func() {
				hook.await(t, allocOps)
			})
		})
	}
}

func TestAllocCompleteYieldFromOutside(t *testing.T) {
	for _, via := range []string{"Scheduler.CompleteYield", "Completion.Complete"} {
		for _, workers := range allocWorkers {
			t.Run(fmt.Sprintf("%s/workers=%d", via, workers), func(t *testing.T) {
				// At most one yield is outstanding, so the handler's
				// send on the 1-buffered channel never blocks.
				reqs := make(chan sched.Completion, 1)
				w := newWithin()
				s := newScheduler(t, sched.WithWorkers(workers), sched.WithHandler(cmdAsync, func(c sched.Call) error {
					reqs <- c.Completion()
					return nil
				}))
				allocSubmit(t, s, &allocYielder{hook: newAllocHook(), cmd: cmdAsync})
				var completed int64
				complete := func() {
					for range allocOps {
						completed++
						c := recv(t, w, reqs, "the handler's call") // the process yielded and its handler ran
						var err error
						if via == "Completion.Complete" {
							err = c.Complete(nil, nil)
						} else {
							err = s.CompleteYield(c.PID(), c.Tag(), nil, nil)
						}
						if err != nil {
							t.Fatal(err)
						}
					}
				}
				checkAllocs(t, "yield -> "+via+" from outside -> step", func() int64 { return completed }, complete)
			})
		}
	}
}

// TestAllocSleepRoundTrip: a timer set and fired, and the step it wakes,
// allocate nothing. With a timer due at once, the worker fires it at its
// own look at its timers. With a real wait (make stress only: the
// runtime wakes an idle program's timers to the millisecond, so each
// round trip takes one) the worker parks with its alarm set and the
// alarm wakes it.
func TestAllocSleepRoundTrip(t *testing.T) {
	sleeps := []time.Duration{0}
	if stressScale > 1 {
		sleeps = append(sleeps, 20*time.Microsecond)
	}
	for _, d := range sleeps {
		for _, workers := range allocWorkers {
			t.Run(fmt.Sprintf("sleep=%v/workers=%d", d, workers), func(t *testing.T) {
				s := newScheduler(t, sched.WithWorkers(workers))
				hook := newAllocHook()
				allocSubmit(t, s, &allocYielder{hook: hook, sleep: true, d: d})
				checkAllocs(t, fmt.Sprintf("Sleep(%v) -> timer fired -> step", d), hook.count.Load, func() {
					hook.await(t, allocOps)
				})
			})
		}
	}
}

// Allocations per process started. A process costs the user's process
// value and the scheduler's record, one allocation each; nothing else
// is allocated to start it, run it, end it and keep its result for its
// Handle. A spawned child's completion names it in Event.From, and an
// awaited child's result reaches its parent unpacked from its payload
// (see Event), so Spawn and SpawnAwait cost nothing more either.
// The tests measure with testing.AllocsPerRun and allow a tenth of an
// allocation per process for the parent's buffers that grow and shrink
// with each batch; the race runtime may allocate more (see
// raceAllocBound), so under it the bound is half an allocation looser.
const (
	startOps        = 100 // processes started per measured call
	startBatch      = 25  // children spawned per parent step: stays within the small pending set and the kept mailbox
	startAllocSlack = 0.1
)

// startOnce ends in its first step with a pointer result (boxing it
// allocates nothing), after telling the test on done.
type startOnce struct {
	stepOnly
	done chan<- struct{}
	tok  *allocToken
}

func (p *startOnce) Step(_ []sched.Event, out *sched.StepOutput) error {
	p.done <- struct{}{}
	out.Done(payload.Of(p.tok))
	return nil
}

// startParent spawns batch children per message it receives (startBatch
// if batch is 0), awaiting them if await is set.
type startParent struct {
	stepOnly
	done  chan<- struct{}
	tok   *allocToken
	await bool
	batch int
	tag   uint64
}

func (p *startParent) Step(evs []sched.Event, out *sched.StepOutput) error {
	for i := range evs {
		switch {
		case evs[i].Type == sched.EventCancel:
			out.Done(payload.Payload{})
			return nil
		case evs[i].Error != nil:
			return evs[i].Error
		case evs[i].Type != sched.EventMessage:
			continue
		}
		for range cmp.Or(p.batch, startBatch) {
			p.tag++
			if p.await {
				out.SpawnAwait(p.tag, &startOnce{done: p.done, tok: p.tok}, "run", nil)
			} else {
				out.Spawn(p.tag, &startOnce{done: p.done, tok: p.tok}, "run", nil)
			}
		}
	}
	return nil
}

// checkStartAllocs measures f, which starts procs processes and waits
// for them, with testing.AllocsPerRun, and fails if a process costs more
// than want allocations, which are what costs says.
func checkStartAllocs(t *testing.T, what, costs string, want float64, procs int, f func()) {
	t.Helper()
	for range 3 {
		f() // warm up
	}
	runs := allocRuns
	bound := want + startAllocSlack
	if raceEnabled {
		runs, bound = allocRaceRuns, bound+0.5
	}
	perProc := testing.AllocsPerRun(runs, f) / float64(procs)
	t.Logf("%s: %.2f allocations per process, want at most %v; race detector %v", what, perProc, want, raceEnabled)
	if perProc > bound {
		t.Errorf("%s: %.2f allocations per process, want at most %v (%s)", what, perProc, want, costs)
	}
}

// TestAllocSubmit: with either context that carries no values, the
// process needs nothing for context values.
func TestAllocSubmit(t *testing.T) {
	for name, ctx := range map[string]context.Context{"Background": context.Background(), "TODO": context.TODO()} {
		t.Run(name, func(t *testing.T) {
			s := newScheduler(t, sched.WithWorkers(2))
			done := make(chan struct{}, startOps)
			w := newWithin()
			tok := &allocToken{}
			checkStartAllocs(t, "Submit of a process that ends with a result", "the process value and its record", 2, startOps, func() {
				for range startOps {
					if _, err := s.Submit(ctx, &startOnce{done: done, tok: tok}, "run", nil); err != nil {
						t.Fatal(err)
					}
				}
				for range startOps {
					recv(t, w, done, "a process's end")
				}
			})
		})
	}
}

// TestAllocSpawnFromOutside: a process that Scheduler.Spawn starts
// costs, in steady state, what a step's spawn does: its value, and a
// record only when its slot holds none to reuse. The records of ended
// processes reach the caller outside the workers through the shared list
// of free IDs, which the workers fill once their own caches are full, so
// a first burst fills them; with a Handle it would be 2.
func TestAllocSpawnFromOutside(t *testing.T) {
	s := newScheduler(t, sched.WithWorkers(2))
	ctx := context.Background()
	done := make(chan struct{}, startOps)
	w := newWithin()
	tok := &allocToken{}
	spawn := func() {
		for range startOps {
			if _, err := s.Spawn(ctx, &startOnce{done: done, tok: tok}, "run", nil); err != nil {
				t.Fatal(err)
			}
		}
		for range startOps {
			recv(t, w, done, "a process's end")
		}
	}
	for range 20 {
		spawn()
	}
	checkStartAllocs(t, "Scheduler.Spawn of a process that ends with a result", spawnedCosts, spawnedWant, startOps, spawn)
}

// spawnedCosts is what a process started by a step allocates in steady
// state: its value, and now and then a record, when its slot holds none
// to reuse (at least once in ctxGens processes of a slot: see genCtx).
// Its context is its record. Without the reuse it would be 2.
const (
	spawnedCosts = "the process value, and a record only when none is left to reuse"
	spawnedWant  = 1.25
)

func testAllocSpawn(t *testing.T, await bool, what string) {
	testAllocSpawnIn(t, context.Background(), await, what)
}

func testAllocSpawnIn(t *testing.T, ctx context.Context, await bool, what string) {
	testAllocSpawnBatch(t, ctx, await, startBatch, what)
}

// testAllocSpawnBatch is testAllocSpawnIn with batch children spawned
// per step of the parent (a divisor of startOps).
func testAllocSpawnBatch(t *testing.T, ctx context.Context, await bool, batch int, what string) {
	s := newScheduler(t, sched.WithWorkers(2))
	done := make(chan struct{}, startOps)
	w := newWithin()
	h, err := s.Submit(ctx, &startParent{done: done, tok: &allocToken{}, await: await, batch: batch}, "alloc", nil)
	require.NoError(t, err)
	parent := h.PID()
	msg := &allocToken{}
	checkStartAllocs(t, what, spawnedCosts, spawnedWant, startOps, func() {
		// One message at a time, so that each step of the parent spawns
		// batch children, not those of several messages at once.
		for range startOps / batch {
			if err := s.Tell(parent, msg); err != nil {
				t.Fatal(err)
			}
			for range batch {
				recv(t, w, done, "a process's end")
			}
		}
	})
}

func TestAllocSpawn(t *testing.T) {
	testAllocSpawn(t, false, "Spawn (the completion names the child in From)")
}

func TestAllocSpawnAwait(t *testing.T) {
	testAllocSpawn(t, true, "SpawnAwait (the completion carries the child's result)")
}

// TestAllocSpawnOneAStep: a step that spawns a single child starts it on
// its own, not as a batch, and costs the same.
func TestAllocSpawnOneAStep(t *testing.T) {
	for _, await := range []bool{false, true} {
		t.Run(fmt.Sprintf("await=%v", await), func(t *testing.T) {
			testAllocSpawnBatch(t, context.Background(), await, 1, "a step's only Spawn or SpawnAwait")
		})
	}
}

// waitForever is a process that waits until it is terminated; of zero
// size, so that starting one allocates nothing for it.
type waitForever struct{ stepOnly }

func (waitForever) Step(evs []sched.Event, out *sched.StepOutput) error {
	for _, ev := range evs {
		if ev.Type == sched.EventCancel {
			out.Done(payload.Payload{})
		}
	}
	return nil
}

// gate is a process whose first step holds its worker until release is
// closed, having said so on running: while it does, a scheduler of one
// worker runs nothing else, and allocates nothing.
type gate struct {
	stepOnly
	running chan<- struct{}
	release <-chan struct{}
}

func (g *gate) Step(_ []sched.Event, out *sched.StepOutput) error {
	bound := time.NewTimer(testTimeout) // before running: not in what is measured
	defer bound.Stop()
	g.running <- struct{}{}
	select {
	case <-g.release:
	case <-bound.C:
		return fmt.Errorf("gate: not released within %v", testTimeout)
	}
	out.Done(payload.Payload{})
	return nil
}

// TestBytesSubmitWithValues: a process submitted with a context that
// carries values, as a request's does, costs its record (96 bytes) and a
// 48-byte record of what it was started with, not a record of
// everything a process may get on demand (176 bytes). Measured in bytes
// allocated per Submit while the only worker is held by a gate, so that
// nothing else allocates meanwhile and the queue backs up the same way
// in every round; the first two rounds grow the process table and the
// global queue (whose rings double from the last one until one holds a
// whole round), the third is measured. The process value is of a
// zero-size type, which allocates nothing.
func TestBytesSubmitWithValues(t *testing.T) {
	s := newScheduler(t, sched.WithWorkers(1))
	ctx := context.WithValue(context.Background(), ctxKey{}, "request")
	const n = 2000
	hs := make([]sched.Handle, 0, n)
	round := func() float64 {
		running, release := make(chan struct{}, 1), make(chan struct{})
		openGate := sync.OnceFunc(func() { close(release) })
		t.Cleanup(openGate) // before the Shutdown, if the test fails first
		g, err := s.Submit(context.Background(), &gate{running: running, release: release}, "gate", nil)
		require.NoError(t, err)
		receive(t, running, "the gate's step")
		hs = hs[:0]
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range n {
			h, err := s.Submit(ctx, waitForever{}, "wait", nil)
			if err != nil {
				t.Fatal(err)
			}
			hs = append(hs, h)
		}
		runtime.ReadMemStats(&after)
		openGate()
		_, err = waitEnd(t, s, g)
		require.NoError(t, err)
		for _, h := range hs {
			require.NoError(t, s.Terminate(h.PID()))
		}
		for _, h := range hs {
			_, err := waitEnd(t, s, h)
			require.NoError(t, err)
		}
		return float64(after.TotalAlloc-before.TotalAlloc) / n
	}
	round()
	round()
	perProc := round()
	t.Logf("%.1f bytes allocated per Submit with context values", perProc)
	// 96 + 48, and a few bytes for what the runtime allocates meanwhile:
	// far below the 96 + 176 of a record of everything.
	if perProc >= 96+48+16 {
		t.Errorf("%.1f bytes allocated per Submit with context values, want about 144 (the record and 48 for the values)", perProc)
	}
}

// TestAllocSpawnWithValues: the children of a process submitted with a
// context that carries values, as a request's does, inherit them and
// cost no more allocations than without: they share one record of the
// values instead of one each.
func TestAllocSpawnWithValues(t *testing.T) {
	ctx := context.WithValue(context.Background(), ctxKey{}, "request")
	testAllocSpawnIn(t, ctx, false, "Spawn under a context with values")
	testAllocSpawnIn(t, ctx, true, "SpawnAwait under a context with values")
}

// forkNode is a node of a fork-join tree, the shape of a recursive
// computation: a leaf ends at once; an inner node spawns width children
// in one step (two if width is 0), awaits them all, and ends, telling
// done if it is the root. Every inner node is a short-lived parent, so
// the buffers a parent needs for its children (its pending yields, the
// mailbox their results arrive in) are made and let go once per inner
// node.
type forkNode struct {
	stepOnly
	depth, width, waiting int
	tok                   *allocToken
	done                  chan<- struct{} // the root's only
}

func (n *forkNode) Step(evs []sched.Event, out *sched.StepOutput) error {
	if n.depth == 0 {
		out.Done(payload.Of(n.tok))
		return nil
	}
	if n.waiting == 0 && len(evs) == 0 {
		n.waiting = max(n.width, 2)
		for i := range n.waiting {
			out.SpawnAwait(uint64(i+1), &forkNode{depth: n.depth - 1, width: n.width, tok: n.tok}, "run", nil)
		}
		return nil
	}
	for i := range evs {
		if evs[i].Error != nil {
			return evs[i].Error
		}
		if evs[i].Type == sched.EventYieldComplete {
			n.waiting--
		}
	}
	if n.waiting == 0 {
		if n.done != nil {
			n.done <- struct{}{}
		}
		out.Done(payload.Of(n.tok))
	}
	return nil
}

// forkTreeDepth gives trees of 2^(d+1)-1 = 127 processes, half of them
// inner nodes.
const forkTreeDepth = 6

// TestAllocForkJoinTree: a parent that lives only to await its children
// costs no more than a process that spawns none: its pending set and its
// mailbox buffer come from, and go back to, what processes that ended
// before it let go.
func TestAllocForkJoinTree(t *testing.T) {
	s := newScheduler(t, sched.WithWorkers(2))
	ctx := context.Background()
	done := make(chan struct{}, 1)
	w := newWithin()
	tok := &allocToken{}
	const trees = 2 // 254 processes per call
	procs := trees * (1<<(forkTreeDepth+1) - 1)
	checkStartAllocs(t, "fork-join tree (inner nodes are short-lived parents)", spawnedCosts, spawnedWant, procs, func() {
		for range trees {
			if _, err := s.Submit(ctx, &forkNode{depth: forkTreeDepth, tok: tok, done: done}, "run", nil); err != nil {
				t.Fatal(err)
			}
			recv(t, w, done, "a process's end")
		}
	})
}

// TestBytesForkJoinTree: a process of a fork-join tree costs the
// scheduler almost no memory beyond the user's value: its record is one
// that an ended process left in its slot, and is also its context (see
// genCtx); a slot's record is replaced at least once in 32 processes, a
// few bytes a process. The bound allows 12 bytes a process beyond the
// value, so a context of its own for every process (16 bytes, even
// from a slab) fails it. Each tree's root is submitted, and its record
// and Handle count too (under a byte a process). The first rounds grow
// what the workers keep; the third is measured.
func TestBytesForkJoinTree(t *testing.T) {
	s := newScheduler(t, sched.WithWorkers(2))
	ctx := context.Background()
	done := make(chan struct{}, 1)
	w := newWithin()
	tok := &allocToken{}
	const trees = 20
	procs := trees * (1<<(forkTreeDepth+1) - 1)
	round := func() float64 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range trees {
			if _, err := s.Submit(ctx, &forkNode{depth: forkTreeDepth, tok: tok, done: done}, "run", nil); err != nil {
				t.Fatal(err)
			}
			recv(t, w, done, "a process's end")
		}
		runtime.ReadMemStats(&after)
		return float64(after.TotalAlloc-before.TotalAlloc) / float64(procs)
	}
	round()
	round()
	perProc := round()
	// What a process's value takes, measured the same way.
	keep := make([]*forkNode, 1000)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range keep {
		keep[i] = &forkNode{}
	}
	runtime.ReadMemStats(&after)
	value := float64(after.TotalAlloc-before.TotalAlloc) / float64(len(keep))
	t.Logf("%.1f bytes allocated per process of a fork-join tree, %.1f of them its value", perProc, value)
	if perProc > value+12 {
		t.Errorf("%.1f bytes allocated per process of a fork-join tree, want at most %.1f (its value, %.1f, and 12)", perProc, value+12, value)
	}
}

// TestAllocWideParent: a step that spawns more children than the
// pending slice holds moves its pending set to maps once, sized for all
// of them, rather than regrowing them as the children are registered.
// The count is per parent, on one worker, so that the children's
// records are reused: the children's values (one each) and records (a
// record serves at most ctxGens processes, and the hundred slots here
// move on together, one generation per parent, so a measured run of
// parents pays for a hundred records once every ctxGens parents; the
// bound allows a sixteenth of one a child), the parent's value and
// record (2), and the pending maps' record, the part of the parent's
// record made on demand that holds it, and the two maps' arrays (4).
// Registering the children one by one without reserving costs 4 more.
func TestAllocWideParent(t *testing.T) {
	const width = 100
	s := newScheduler(t, sched.WithWorkers(1))
	done := make(chan struct{}, 1)
	w := newWithin()
	tok := &allocToken{}
	f := func() {
		if _, err := s.Submit(context.Background(), &forkNode{depth: 1, width: width, tok: tok, done: done}, "run", nil); err != nil {
			t.Fatal(err)
		}
		recv(t, w, done, "a process's end")
	}
	for range 3 {
		f() // warm up
	}
	runs, bound := allocRuns, float64(width+(width+15)/16+2+4)
	if raceEnabled {
		runs, bound = allocRaceRuns, bound+0.5*(width+1)
	}
	got := testing.AllocsPerRun(runs, f)
	t.Logf("a parent of %d children: %v allocations, want at most %v; race detector %v", width, got, bound, raceEnabled)
	if got > bound {
		t.Errorf("a parent of %d children: %v allocations, want at most %v", width, got, bound)
	}
}
