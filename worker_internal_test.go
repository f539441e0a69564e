package scheduler

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"
	"weak"

	"github.com/stretchr/testify/require"

	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// withoutFairness switches off the fairness mechanisms, to show what
// they buy: no global-queue turn every 61 ticks, no cap on the next slot,
// no step budget (a continuing process keeps its worker), and a fixed
// global batch of 16. This is "unfair scheduling" in the tests and
// benchmarks: a plain work-stealing scheduler, whose workers always take
// their own newest work first.
func withoutFairness() Option {
	return optionFunc(func(c *config) error {
		c.unfair = true
		c.fixedBatch = true
		c.globalBatch = 16
		c.stepBudget = math.MaxInt
		return nil
	})
}

// hot keeps continuing and counts its steps; spin is busy work per step.
// started, if not nil, is closed at its first step.
type hot struct {
	stepOnly
	steps   *atomic.Int64
	spin    int
	started chan struct{}
	// at, if not nil, receives how far watch got, once this process has
	// made atSteps steps.
	at      chan int64
	atSteps int64
	watch   *atomic.Int64
	from    int64
}

func (h *hot) Step(evs []Event, out *StepOutput) error {
	n := h.steps.Add(1)
	if n == 1 && h.started != nil {
		close(h.started)
	}
	if h.at != nil {
		if n == 1 {
			h.from = h.watch.Load()
		}
		if n == h.atSteps {
			h.at <- h.watch.Load() - h.from
		}
	}
	for _, ev := range evs {
		if ev.Type == EventCancel {
			out.Done(payload.Payload{})
			return nil
		}
	}
	busyWork(h.spin)
	out.Continue()
	return nil
}

var busySink atomic.Uint64

// busyWork burns CPU for roughly n iterations without touching shared
// memory more than once.
func busyWork(n int) {
	x := uint64(n)
	for i := 0; i < n; i++ {
		x = x*6364136223846793005 + 1442695040888963407
	}
	busySink.Store(x)
}

// observer reports, at each step with a message, how many steps every
// hot process has made so far.
type observer struct {
	stepOnly
	hots   []atomic.Int64
	counts chan []int64
}

func (o *observer) Step(evs []Event, out *StepOutput) error {
	for _, ev := range evs {
		switch ev.Type {
		case EventCancel:
			out.Done(payload.Payload{})
			return nil
		case EventMessage:
			o.counts <- snapshot(o.hots)
		}
	}
	return nil
}

// saturate starts n hot processes and waits until each has stepped.
func saturate(t testing.TB, s *Scheduler, counters []atomic.Int64, spin int) {
	t.Helper()
	for i := range counters {
		started := make(chan struct{})
		_, err := s.Submit(context.Background(), &hot{steps: &counters[i], spin: spin, started: started}, "run", nil)
		require.NoError(t, err)
		receive(t, started, fmt.Sprintf("hot process %d to step", i))
	}
}

func snapshot(counters []atomic.Int64) []int64 {
	out := make([]int64, len(counters))
	for i := range counters {
		out[i] = counters[i].Load()
	}
	return out
}

// mostSteps returns how many steps the hot process that got furthest
// made from the baseline to the later counts.
func mostSteps(baseline, later []int64) int64 {
	var most int64
	for i := range baseline {
		most = max(most, later[i]-baseline[i])
	}
	return most
}

// maxHotStepsBeforeTurn bounds how many steps a hot process may make
// between a message arriving on the global queue and the idle recipient's
// step: a worker gives the global queue a turn within globalCheckInterval
// ticks, and a hot process continues inline for at most the step budget.
const maxHotStepsBeforeTurn = 2*globalCheckInterval + DefaultStepBudget

// TestStarvationMessageToIdleProcess: with every worker saturated by
// processes that always continue, a message from outside to an idle
// process is stepped before any hot process has made more than a bounded
// number of steps.
//
// The bound is exact with one worker: every hot step then happens on the
// worker that must also run the recipient. With several workers, one of
// them may be descheduled by the operating system (or by the Go runtime,
// when there are more workers than cores) just after it took the
// recipient, while the others keep stepping; there the test checks only
// that the message is not starved.
func TestStarvationMessageToIdleProcess(t *testing.T) {
	for _, workers := range []int{1, 2, 4} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			s := newScheduler(t, WithWorkers(workers))
			hots := make([]atomic.Int64, 2*workers)
			obs := &observer{hots: hots, counts: make(chan []int64, 1)}
			h, err := s.Submit(context.Background(), obs, "observe", nil)
			require.NoError(t, err)
			saturate(t, s, hots, 200)
			var worst int64
			for range 30 {
				// The baseline is taken once the message is queued: the
				// bound is on the steps made after that. Taken before
				// Tell, it would also count the steps made while this
				// goroutine was descheduled on its way into Tell.
				require.NoError(t, s.Tell(h.PID(), 1))
				baseline := snapshot(hots)
				counts := receive(t, obs.counts, "the idle process to be stepped (starved?)")
				worst = max(worst, mostSteps(baseline, counts))
			}
			t.Logf("most steps of a hot process before the message was stepped: %d", worst)
			if workers == 1 {
				require.LessOrEqual(t, worst, int64(maxHotStepsBeforeTurn),
					"a hot process made %d steps before the idle process got its message", worst)
			}
		})
	}
}

// firstStep reports, at its first step, how many steps every hot process
// has made so far.
type firstStep struct {
	stepOnly
	hots   []atomic.Int64
	counts chan []int64
}

func (f *firstStep) Step(_ []Event, out *StepOutput) error {
	f.counts <- snapshot(f.hots)
	out.Done(payload.Payload{})
	return nil
}

// TestStarvationSubmission: a submission, which goes through the global
// queue, runs within a bounded number of ticks of a saturated worker (one
// worker, for the reason given at TestStarvationMessageToIdleProcess).
func TestStarvationSubmission(t *testing.T) {
	const workers = 1
	s := newScheduler(t, WithWorkers(workers))
	hots := make([]atomic.Int64, 2*workers)
	saturate(t, s, hots, 200)
	for range 30 {
		f := &firstStep{hots: hots, counts: make(chan []int64, 1)}
		_, err := s.Submit(context.Background(), f, "run", nil)
		require.NoError(t, err)
		baseline := snapshot(hots) // once queued, as in TestStarvationMessageToIdleProcess
		counts := receive(t, f.counts, "the submission to run (starved?)")
		d := mostSteps(baseline, counts)
		require.LessOrEqual(t, d, int64(maxHotStepsBeforeTurn),
			"a hot process made %d steps before the submission ran", d)
	}
}

// rally keeps a message bouncing with its partner forever, counting.
type rally struct {
	stepOnly
	partner *rally
	self    atomic.Pointer[Handle]
	hits    *atomic.Int64
	serve   bool
	started chan struct{} // closed at the first hit, if not nil
}

func (r *rally) Step(evs []Event, out *StepOutput) error {
	if r.serve {
		r.serve = false
		out.Tell(r.partner.self.Load().PID(), 1)
	}
	for _, ev := range evs {
		switch {
		case ev.Type == EventCancel:
			out.Done(payload.Payload{})
			return nil
		case ev.Type == EventMessage && ev.Error == nil:
			if r.hits.Add(1) == 1 && r.started != nil {
				close(r.started)
			}
			out.Tell(ev.From, 1)
		}
	}
	return nil
}

// TestStarvationPingPongPair: a pair of processes that wake each other
// through the next slot does not starve a third process on the same
// worker. With unfair scheduling the third process never runs.
func TestStarvationPingPongPair(t *testing.T) {
	s := newScheduler(t, WithWorkers(1))

	var hits atomic.Int64
	started := make(chan struct{})
	a, b := &rally{hits: &hits, started: started}, &rally{hits: &hits, serve: true}
	a.partner, b.partner = b, a
	ha, err := s.Submit(context.Background(), a, "run", nil)
	require.NoError(t, err)
	a.self.Store(&ha)
	hb, err := s.Submit(context.Background(), b, "run", nil)
	require.NoError(t, err)
	b.self.Store(&hb)
	receive(t, started, "the rally to start")
	// The third process reports how many exchanges the pair made while
	// it made its first 100 steps: counted in steps, not time.
	var third atomic.Int64
	at := make(chan int64, 1)
	_, err = s.Submit(context.Background(), &hot{steps: &third, at: at, atSteps: 100, watch: &hits}, "run", nil)
	require.NoError(t, err)
	select {
	case rallied := <-at:
		require.Less(t, rallied, int64(100*(globalCheckInterval+maxNextRuns+1)),
			"the pair made %d exchanges while the third process made 100 steps", rallied)
	case <-time.After(testTimeout):
		t.Fatalf("third process starved: %d steps after %d rally messages", third.Load(), hits.Load())
	}
}

// BenchmarkLatencyUnderSaturation measures the time from Tell to the
// recipient's step for an idle process while every worker is saturated by
// processes that keep continuing (each step about 2µs of work), with the
// fairness mechanisms on and with unfair scheduling, side by side. It
// reports p50 and p99 in microseconds and how many samples starved (not
// stepped within 50ms, counted as 50ms).
//
//	go test -run '^$' -bench LatencyUnderSaturation -benchtime 400x .
func BenchmarkLatencyUnderSaturation(b *testing.B) {
	for _, mode := range []struct {
		name string
		opts []Option
	}{
		{"fair", nil},
		{"unfair", []Option{withoutFairness()}},
	} {
		b.Run(mode.name, func(b *testing.B) {
			// With unfair scheduling the hot processes never let go of their
			// workers; they see the cancel at their next step, when the
			// cleanup shuts the scheduler down.
			s := newScheduler(b, mode.opts...)
			lat := make(chan time.Duration, 1)
			rec := &latencyRecorder{out: lat}
			h, err := s.Submit(context.Background(), rec, "run", nil)
			require.NoError(b, err)
			// One hot process per worker: with unfair scheduling a
			// hot process never lets go of its worker, so more would never
			// start.
			hots := make([]atomic.Int64, s.Stats().Workers)
			saturate(b, s, hots, 2000)

			const starveAfter = 50 * time.Millisecond
			samples := make([]time.Duration, 0, b.N)
			starved := 0
			b.ResetTimer()
			for range b.N {
				require.NoError(b, s.Tell(h.PID(), time.Now()))
				select {
				case d := <-lat:
					samples = append(samples, d)
				case <-time.After(starveAfter):
					starved++
					samples = append(samples, starveAfter)
				}
			}
			b.StopTimer()
			slices.Sort(samples)
			b.ReportMetric(float64(samples[len(samples)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(samples[len(samples)*99/100].Microseconds()), "p99-µs")
			b.ReportMetric(float64(starved), "starved")
		})
	}
}

// latencyRecorder reports, for each message carrying a send time, how
// long it took to be stepped.
type latencyRecorder struct {
	stepOnly
	out chan time.Duration
}

func (r *latencyRecorder) Step(evs []Event, out *StepOutput) error {
	for _, ev := range evs {
		switch ev.Type {
		case EventCancel:
			out.Done(payload.Payload{})
			return nil
		case EventMessage:
			if sent, ok := ev.Data.(time.Time); ok {
				select {
				case r.out <- time.Since(sent):
				default: // the benchmark gave up on this sample
				}
			}
		}
	}
	return nil
}

// doneCounter finishes at once and counts; the last of want closes done.
type doneCounter struct {
	stepOnly
	n    *atomic.Int64
	want int64
	done chan struct{}
}

func (d *doneCounter) Step(_ []Event, out *StepOutput) error {
	if d.n.Add(1) == d.want {
		close(d.done)
	}
	out.Done(payload.Payload{})
	return nil
}

// BenchmarkGlobalBatch compares a fixed batch of 16 from the
// global queue with a batch sized min(len/workers+1, 128), on the workload
// that goes through the global queue: submissions from outside. ns/op is
// per process (Submit, one step, end).
//
//	go test -run '^$' -bench GlobalBatch -count 6 . | benchstat -col /batch -
func BenchmarkGlobalBatch(b *testing.B) {
	for _, mode := range []struct {
		name string
		opts []Option
	}{
		{"batch=fixed16", []Option{WithGlobalBatch(16), withFixedBatch()}},
		{"batch=sized128", []Option{WithGlobalBatch(128)}},
	} {
		b.Run(mode.name, func(b *testing.B) {
			s := newScheduler(b, mode.opts...)
			var n atomic.Int64
			done := make(chan struct{})
			b.ResetTimer()
			for range b.N {
				if _, err := s.Submit(context.Background(), &doneCounter{n: &n, want: int64(b.N), done: done}, "run", nil); err != nil {
					b.Fatal(err)
				}
			}
			<-done
		})
	}
}

func withFixedBatch() Option {
	return optionFunc(func(c *config) error {
		c.fixedBatch = true
		return nil
	})
}

// An idle worker keeps no reference to the events of its past steps, even
// when a burst grew its buffer beyond the batches that followed: the data
// of every message read can be collected once the worker waits.
func TestIdleWorkerDropsPastEvents(t *testing.T) {
	const burst = 100
	s := newScheduler(t, WithWorkers(1))
	gate, started := make(chan struct{}), make(chan struct{})
	read := make(chan int, 4)
	first := true
	h, err := s.Submit(context.Background(), stepFunc(func(evs []Event, out *StepOutput) error {
		if first {
			first = false
			close(started)
			<-gate // the burst queues up meanwhile, to arrive in one batch
			return nil
		}
		for _, ev := range evs {
			if ev.Type == EventCancel {
				out.Done(payload.Payload{})
				return nil
			}
		}
		read <- len(evs)
		if len(evs) == burst {
			out.Continue() // a step with a short batch follows, before the worker can go idle
		}
		return nil
	}), "run", nil)
	require.NoError(t, err)
	receive(t, started, "the first step")

	type big struct{ _ [256]byte }
	refs := make([]weak.Pointer[big], 0, burst)
	for range burst {
		v := new(big)
		refs = append(refs, weak.Make(v))
		require.NoError(t, s.Tell(h.PID(), v))
	}
	close(gate)
	require.Equal(t, burst, receive(t, read, "the burst, in one batch"))
	// The continued step's batch is empty: clearing only the last batch's
	// length would leave the burst's references behind.
	require.Equal(t, 0, receive(t, read, "the continued step"))

	eventually(t, "every message of the burst collected", func() bool {
		return allCollected(refs)
	})
}

// Likewise for yields: an idle worker keeps no reference to what past
// steps yielded, even after one wide step.
func TestIdleWorkerDropsPastYields(t *testing.T) {
	const wide = 100
	s := newScheduler(t, WithWorkers(1))
	type big struct{ _ [256]byte }
	refs := make([]weak.Pointer[big], 0, wide)
	stepped := make(chan int, 4)
	n := 0
	_, err := s.Submit(context.Background(), stepFunc(func(evs []Event, out *StepOutput) error {
		for _, ev := range evs {
			if ev.Type == EventCancel {
				out.Done(payload.Payload{})
				return nil
			}
		}
		n++
		if n == 1 {
			// Tells to nobody: each comes back as a bounce, read in the
			// next step, and no other process holds the messages.
			for range wide {
				v := new(big)
				refs = append(refs, weak.Make(v))
				out.Tell(relay.PID{ID: math.MaxUint64 >> 1}, v)
			}
			out.Continue() // a step with no yields follows, before the worker can go idle
		}
		stepped <- n
		return nil
	}), "run", nil)
	require.NoError(t, err)
	require.Equal(t, 1, receive(t, stepped, "the wide step"))
	require.Equal(t, 2, receive(t, stepped, "the continued step, which reads the bounces"))
	eventually(t, "every message the wide step told collected", func() bool {
		return allCollected(refs)
	})
}

// allCollected runs a collection and reports whether every value refs
// point to is gone.
func allCollected[T any](refs []weak.Pointer[T]) bool {
	runtime.GC()
	for _, r := range refs {
		if r.Value() != nil {
			return false
		}
	}
	return true
}

// TestSiblingFirstByQueuedTags: siblingFirst decides from what the
// worker noted at each push (see worker.noteQueued) whether the newest
// queued process is a child of the parent it holds claimed: it leaves
// one that is not in place and takes one that is; where processes came
// by a steal or from the held queue, whose tags it forgets, it takes the
// newest and looks (and puts back one that is not a child).
func TestSiblingFirstByQueuedTags(t *testing.T) {
	w, thief := twoIdleWorkers()
	parent, uncle := new(proc), new(proc)
	parent.id.Store(makeID(1, 0))
	uncle.id.Store(makeID(2, 0))
	childOf := func(p *proc) *proc {
		c := allocProc(pkAwaited)
		c.awaited().parent = p.id.Load()
		return c
	}
	claim := func() {
		w.direct, w.directMark, w.directDefers = parent, w.dq.Mark(), 0
	}
	tagOf := func(w *worker, pos int64) (uint64, bool) {
		tg := w.queued[pos&(queuedTags-1)]
		return tg.parent, tg.pos == pos
	}

	cousin, sibling := childOf(uncle), childOf(parent)
	w.pushLocalN([]*proc{cousin, sibling})
	got, known := tagOf(w, 1)
	require.True(t, known, "the tag of the newest push")
	require.Equal(t, parent.id.Load(), got, "the newest push's parent")
	claim()
	require.Same(t, sibling, w.siblingFirst(), "the parent's child, on top")
	// Taken and pushed back, the last process would move up a position.
	m := w.dq.Mark()
	require.Nil(t, w.siblingFirst(), "with another's child on top")
	require.Equal(t, m, w.dq.Mark(), "the deque's mark: the other's child was taken and pushed back")
	require.Equal(t, 1, w.dq.Len(), "processes left queued")
	require.Same(t, cousin, w.dq.PopBottom(), "the other parent's child, left in place")

	// Moved in by a steal: the thief knows nothing of them.
	a, b, c, d := childOf(parent), childOf(parent), childOf(uncle), childOf(uncle)
	w.pushLocalN([]*proc{a, b, c, d})
	require.Same(t, b, thief.steal(), "the newest of the stolen half")
	require.Equal(t, 1, thief.dq.Len(), "processes the thief queued")
	_, known = tagOf(thief, thief.dq.Mark()-1)
	require.False(t, known, "a tag for a stolen process")
	thief.direct, thief.directMark = parent, thief.dq.Mark()
	require.Same(t, a, thief.siblingFirst(), "the parent's child, stolen and untagged")
	thief.direct = nil

	// Moved in from the held queue: untagged, looked at the slow way.
	w.dq.PopBottom()
	w.dq.PopBottom()
	require.Zero(t, w.dq.Len())
	e := childOf(parent)
	w.held.PushBottom(e)
	w.heldN = 1
	w.flushHeld()
	_, known = tagOf(w, w.dq.Mark()-1)
	require.False(t, known, "a tag for a process moved from the held queue")
	claim()
	require.Same(t, e, w.siblingFirst(), "the parent's child, untagged")
	f := childOf(uncle)
	w.held.PushBottom(f)
	w.heldN = 1
	w.flushHeld()
	claim()
	require.Nil(t, w.siblingFirst(), "with another's child on top, untagged")
	require.Same(t, f, w.dq.PopBottom(), "the other parent's child, put back")
}

// A batch taken from the global queue runs in the order it was queued:
// its first process at once, the rest from the worker's deque, oldest
// first. Their positions in the deque are left undescribed, whatever
// tags earlier pushes left there (see popGlobal and noteQueued).
func TestPopGlobalKeepsTheQueueOrder(t *testing.T) {
	s := &Scheduler{globalBatch: 8, fixedBatch: true}
	w, _ := twoIdleWorkersOf(s)
	ps := make([]*proc, 6)
	for i := range ps {
		ps[i] = new(proc)
		ps[i].id.Store(uint64(i + 1))
		s.global.Push(ps[i])
	}
	for i := range w.queued { // tags of earlier pushes to the same positions
		w.queued[i] = queuedTag{pos: int64(i), parent: 99}
	}
	require.Equal(t, uint64(1), w.popGlobal().id.Load(), "the oldest first")
	require.Equal(t, len(ps)-1, w.dq.Len(), "processes moved to the deque")
	for i := range w.dq.Len() {
		pos := w.dq.Mark() - 1 - int64(i)
		tg := w.queued[pos&(queuedTags-1)]
		require.NotEqual(t, pos, tg.pos, "position %d described: the batch is left unread", pos)
	}
	for _, p := range ps[1:] {
		require.Equal(t, p.id.Load(), w.dq.PopBottom().id.Load(), "the ID of the next process from the deque")
	}
}

// A worker's room for a batch from the global queue follows the batches
// it takes, up to WithGlobalBatch, instead of being made whole in New:
// with the largest batch, the workers would hold 512 KiB each from the
// start. A batch larger than the default is still taken whole.
func TestGlobalBatchRoomFollowsUse(t *testing.T) {
	s := newScheduler(t, WithWorkers(4), WithGlobalBatch(maxGlobalBatch), WithWatchdog(0))
	for _, w := range s.workers {
		require.LessOrEqual(t, cap(w.batch), DefaultGlobalBatch, "worker %d's batch room after New, with WithGlobalBatch(%d)", w.id, maxGlobalBatch)
	}

	const queued, batch = 1000, 600
	s = &Scheduler{globalBatch: batch}
	w, _ := twoIdleWorkersOf(s)
	for i := range queued {
		p := new(proc)
		p.id.Store(uint64(i + 1))
		s.global.Push(p)
	}
	want := min(queued/2+1, batch) // the fair share of two workers
	require.Equal(t, uint64(1), w.popGlobal().id.Load(), "the oldest first")
	require.Equal(t, want-1, w.dq.Len(), "processes moved to the deque")
	require.Equal(t, queued-want, s.global.Len(), "processes left on the global queue")
	require.LessOrEqual(t, cap(w.batch), batch, "the batch room beyond WithGlobalBatch")
	for i := range w.dq.Len() {
		require.Equal(t, uint64(i+2), w.dq.PopBottom().id.Load(), "the ID of the next process from the deque")
	}
	require.Equal(t, uint64(want+1), w.popGlobal().id.Load(), "the oldest left, in the next batch")
}

// A parent put aside for maxDeferTicks is direct again before those put
// aside after it, with the events it held, and the others stay aside
// with theirs, in order.
func TestRestoreDueTakesTheOldestParentAside(t *testing.T) {
	w, _ := twoIdleWorkers()
	ps := []*proc{new(proc), new(proc), new(proc)}
	for i, p := range ps {
		e := w.pushDeferred(int64(i), uint64(10*(i+1)))
		e.p = p
		e.evs = append(e.evs, Event{Tag: uint64(i)})
	}
	w.tick = 10 + maxDeferTicks
	require.True(t, w.restoreDue(), "the oldest parent restored when due")
	require.Same(t, ps[0], w.direct, "the parent made direct")
	require.Equal(t, []Event{{Tag: 0}}, w.directEvs, "the events it held")
	require.Equal(t, maxDirectDefers, w.directDefers, "a parent due runs next")
	require.Len(t, w.deferred, 2, "parents left aside")
	for i, e := range w.deferred {
		require.Same(t, ps[i+1], e.p, "parent %d aside", i)
		require.Equal(t, []Event{{Tag: uint64(i + 1)}}, e.evs, "the events of parent %d aside", i)
	}
	require.Equal(t, uint64(20+maxDeferTicks), w.deferDue, "the next due")

	// The last put aside, restored in place once nothing above its mark
	// is queued.
	w.direct, w.directEvs = nil, w.directEvs[:0]
	w.tick = 0
	require.True(t, w.restoreDue(), "the newest parent restored with its mark reached")
	require.Same(t, ps[2], w.direct)
	require.Equal(t, []Event{{Tag: 2}}, w.directEvs)
	require.Len(t, w.deferred, 1)
	require.Same(t, ps[1], w.deferred[0].p)
}

// TestOldestLocalProcessGetsATurn: a worker takes its own newest work
// first, but every ownQueueInterval ticks the oldest process of its deque
// instead, so a process queued under an endless chain of newer ones
// still runs, and soon. Here one worker runs a chain of processes, each
// of which starts the next and ends; a link also queues, below the next
// link, a process that must run before the chain buries it, three times
// over: each must have run within two intervals' worth of links of
// being queued. The chain stops after the third has run, or after far
// more links than the turns allow.
func TestOldestLocalProcessGetsATurn(t *testing.T) {
	const rounds, maxLinks = 3, 100 * ownQueueInterval
	s := newScheduler(t, WithWorkers(1))
	var links, queuedAt int64 // the links run, and how many had run when the waiting process was queued
	var waited []int64        // links run while each waited
	waiting := false
	done := make(chan struct{})
	// All of it runs on the one worker, one step at a time: the steps
	// share these variables without locks, in the order they run.
	oldest := stepFunc(func(_ []Event, out *StepOutput) error {
		waited = append(waited, links-queuedAt)
		waiting = false
		out.Done(payload.Payload{})
		return nil
	})
	var link stepFunc
	link = func(_ []Event, out *StepOutput) error {
		links++
		switch {
		case len(waited) == rounds || links == maxLinks:
			close(done)
		case !waiting:
			waiting, queuedAt = true, links
			out.Spawn(1, oldest, "oldest", nil) // below the next link: the deque's oldest
			out.Spawn(2, link, "link", nil)
		default:
			out.Spawn(2, link, "link", nil)
		}
		out.Done(payload.Payload{})
		return nil
	}
	_, err := s.Spawn(context.Background(), link, "link", nil)
	require.NoError(t, err)
	<-done
	require.Len(t, waited, rounds, "processes that ran under the chain of %d links", links)
	for i, n := range waited {
		require.LessOrEqual(t, n, int64(2*ownQueueInterval), "links run while process %d waited", i)
	}
}

// TestWorkerYieldsWhileEveryProcessorRunsAWorker: a busy worker yields
// its processor once every yieldTicks ticks when the workers are as many
// as the processors, and never when a processor runs no worker, which
// would only take the yielding worker off its warm cache.
func TestWorkerYieldsWhileEveryProcessorRunsAWorker(t *testing.T) {
	const steps = 8 * yieldTicks
	for _, tc := range []struct {
		name            string
		procs           int // GOMAXPROCS, beside one worker
		atLeast, atMost int64
	}{
		{"one worker, one processor", 1, steps/yieldTicks - 1, steps/yieldTicks + 1},
		{"one worker, two processors", 2, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(tc.procs))
			s := newScheduler(t, WithWorkers(1), WithWatchdog(0))
			var yields atomic.Int64
			hook := func(w *worker) {
				if w.s == s {
					yields.Add(1)
				}
			}
			testHookWorkerYield.Store(&hook)
			defer testHookWorkerYield.Store(nil)

			n := 0
			h, err := s.Submit(context.Background(), stepFunc(func(_ []Event, out *StepOutput) error {
				if n++; n == steps {
					out.Done(payload.Payload{})
					return nil
				}
				out.Continue()
				return nil
			}), "spin", nil)
			require.NoError(t, err)
			_, err = h.Wait(context.Background())
			require.NoError(t, err)
			got := yields.Load()
			require.GreaterOrEqual(t, got, tc.atLeast, "yields in %d steps", steps)
			require.LessOrEqual(t, got, tc.atMost, "yields in %d steps", steps)
		})
	}
}

// TestStepBudgetBoundsARun: a process that keeps continuing makes at
// most a budget's worth of steps in a row on its worker while others
// wait there, and, with others waiting, all of it: the log of who
// stepped, in the order the one worker ran them, falls into stretches
// of one process each, the longest exactly the budget. A process that
// used up its budget while another waited in the later slot, had it
// gone to the global queue ahead of that one, would be taken back by
// the global queue's next turn and make two budgets' worth in a row
// (2 steps with a budget of 1, 6 with 3). The processes start together,
// queued while the worker is held, and end after stepsInAll steps in
// all.
func TestStepBudgetBoundsARun(t *testing.T) {
	for _, budget := range []int{1, 3, 16} {
		t.Run(fmt.Sprint(budget), func(t *testing.T) {
			log := continuingLog(t, budget, 3)
			longest := 0
			for k := 0; k < len(log); {
				j := k
				for j < len(log) && log[j] == log[k] {
					j++
				}
				require.LessOrEqual(t, j-k, budget, "process %d made %d steps in a row from step %d", log[k], j-k, k)
				longest = max(longest, j-k)
				k = j
			}
			require.Equal(t, budget, longest, "the longest stretch of one process's steps")
		})
	}
}

// continuingLog runs n processes that keep continuing on one worker
// with the step budget given, and returns who made each of the first
// stepsInAll steps, in the order the worker ran them. The processes are
// queued while the worker is held, so they start together, and end once
// stepsInAll steps are made in all.
func continuingLog(t *testing.T, budget, n int) []int {
	const stepsInAll = 3000
	s := newScheduler(t, WithWorkers(1), WithStepBudget(budget), WithWatchdog(0))
	release := holdWorker(t, s)
	var log []int // appended to by the one worker's steps; read once all have ended
	hs := make([]Handle, n)
	for i := range hs {
		h, err := s.Submit(context.Background(), stepFunc(func(_ []Event, out *StepOutput) error {
			log = append(log, i)
			if len(log) >= stepsInAll {
				out.Done(payload.Payload{})
				return nil
			}
			out.Continue()
			return nil
		}), "hot", nil)
		require.NoError(t, err)
		hs[i] = h
	}
	release()
	for _, h := range hs {
		require.NoError(t, waitEnd(t, h))
	}
	return log[:stepsInAll] // each process takes a last step once the count is reached
}
