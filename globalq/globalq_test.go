package globalq

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"weak"

	"github.com/stretchr/testify/require"

	"github.com/procsched/scheduler/internal/gctrack"
)

// checkInvariants inspects the chain of rings of a queue nobody is using
// (see ringsError).
func checkInvariants[T any](t *testing.T, q *Queue[T]) {
	t.Helper()
	require.NoError(t, ringsError(q))
}

// ringsError returns the first broken invariant of the rings from head to
// tail, or nil, for a queue no push or pop is in: capacities are powers of
// two, each twice the one before; every ring before the tail is closed;
// consumers are not past the producers; the cells of the positions
// between them hold their items, filled for those positions, and every
// other cell holds no item, so that popped items can be collected. It uses
// plain comparisons because the differential test runs it after every
// operation, where assertion calls per cell would dominate the run time.
func ringsError[T any](q *Queue[T]) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	h, tl := q.head.Load(), q.tail.Load()
	if h == nil || tl == nil {
		if h != tl {
			return fmt.Errorf("head %p and tail %p: one is set without the other", h, tl)
		}
		return nil
	}
	for r := h; ; r = r.next.Load() {
		if r == nil {
			return fmt.Errorf("tail not reachable from head")
		}
		capacity := r.mask + 1
		e, d := r.enq.Load(), r.deq.Load()
		closed := e&closedBit != 0
		e &^= closedBit
		switch {
		case bits.OnesCount64(capacity) != 1 || uint64(len(r.cells)) != capacity:
			return fmt.Errorf("capacity %d with %d cells", capacity, len(r.cells))
		case r != tl && !closed:
			return fmt.Errorf("a ring of capacity %d before the tail is open", capacity)
		case d > e || e-d > capacity:
			return fmt.Errorf("ring of capacity %d: deq %d, enq %d", capacity, d, e)
		}
		for i := range capacity {
			// The position in [d, e) that lives in cell i, if any.
			p := d + (i-d)&r.mask
			c := &r.cells[i]
			if p < e {
				if c.val == nil || c.seq.Load() != p+1 {
					return fmt.Errorf("ring of capacity %d: cell %d of queued position %d has seq %d, item %v", capacity, i, p, c.seq.Load(), c.val != nil)
				}
			} else if c.val != nil {
				return fmt.Errorf("ring of capacity %d: free cell %d still references an item", capacity, i)
			}
		}
		if r == tl {
			return nil
		}
		if n := r.next.Load(); n != nil && n.mask+1 != 2*capacity {
			return fmt.Errorf("a ring of capacity %d is followed by one of %d", capacity, n.mask+1)
		}
	}
}

// TestDifferential drives a Queue and a slice model with the same random
// operations and requires identical results after every one.
func TestDifferential(t *testing.T) {
	seeds := 200 * stressScale
	const opsPerSeed = 1000
	const maxBatch = 40
	for seed := range seeds {
		rng := rand.New(rand.NewPCG(uint64(seed), 0x9e3779b97f4a7c15))
		// Vary the push/pop balance per seed so that some runs stay short and
		// some grow the ring through several doublings.
		pushPercent := 35 + rng.IntN(30)
		var q Queue[int]
		var model []*int
		next := 0
		newItem := func() *int {
			next++
			v := next
			return &v
		}
		sentinel := new(int)
		for op := range opsPerSeed {
			ctx := opContext{seed, op}
			switch r := rng.IntN(100); {
			case r < pushPercent/2:
				x := newItem()
				q.Push(x)
				model = append(model, x)
			case r < pushPercent:
				xs := make([]*int, rng.IntN(maxBatch+1))
				for i := range xs {
					xs[i] = newItem()
				}
				q.PushBatch(xs)
				model = append(model, xs...)
			case r < pushPercent+(100-pushPercent)/2:
				got := q.Pop()
				if len(model) == 0 {
					if got != nil {
						require.Nil(t, got, "%s: Pop of empty queue", ctx)
					}
					break
				}
				if got != model[0] {
					require.FailNow(t, "Pop out of order", "%s: Pop returned %v, want %d", ctx, deref(got), *model[0])
				}
				model = model[1:]
			default:
				dst := make([]*int, rng.IntN(maxBatch+1))
				for i := range dst {
					dst[i] = sentinel
				}
				n := q.PopInto(dst)
				if want := min(len(dst), len(model)); n != want {
					require.Equal(t, want, n, "%s: PopInto(len %d) count", ctx, len(dst))
				}
				for i := range n {
					if dst[i] != model[i] {
						require.FailNow(t, "PopInto out of order", "%s: item %d is %v, want %d",
							ctx, i, deref(dst[i]), *model[i])
					}
				}
				for i := n; i < len(dst); i++ {
					if dst[i] != sentinel {
						require.FailNow(t, "PopInto wrote past n", "%s: dst[%d] changed, n=%d", ctx, i, n)
					}
				}
				model = model[n:]
			}
			// Plain comparisons first: an assertion call per operation costs
			// more than the operation, and this loop runs hundreds of thousands.
			if q.Len() != len(model) || q.Empty() != (len(model) == 0) {
				require.FailNow(t, "length mismatch", "%s: Len %d Empty %v, model has %d",
					ctx, q.Len(), q.Empty(), len(model))
			}
			if err := ringsError(&q); err != nil {
				require.NoError(t, err, ctx)
			}
		}
		for i, want := range model {
			require.Same(t, want, q.Pop(), "seed %d: draining item %d", seed, i)
		}
		require.Nil(t, q.Pop(), "seed %d: queue must be empty after draining", seed)
		checkInvariants(t, &q)
	}
}

// opContext names an operation of the differential test in failure
// messages; it is formatted only when one is printed.
type opContext struct{ seed, op int }

func (c opContext) String() string { return fmt.Sprintf("seed %d op %d", c.seed, c.op) }

func deref(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestZeroValueIsEmpty(t *testing.T) {
	var q Queue[int]
	require.True(t, q.Empty())
	require.Zero(t, q.Len())
	require.Nil(t, q.Pop())
	require.Zero(t, q.PopInto(make([]*int, 4)))
	require.Nil(t, q.head.Load(), "looking at an empty queue must not allocate a ring")
	require.Nil(t, q.tail.Load(), "looking at an empty queue must not allocate a ring")
}

func TestPushNilPanics(t *testing.T) {
	a, b := new(int), new(int)
	tests := []struct {
		name string
		push func(q *Queue[int])
		want string // the panic's message names the method called
	}{
		{"Push", func(q *Queue[int]) { q.Push(nil) }, "globalq: Push of nil"},
		{"PushBatch of one nil", func(q *Queue[int]) { q.PushBatch([]*int{nil}) }, "globalq: PushBatch of nil"},
		{"PushBatch with nil in the middle", func(q *Queue[int]) { q.PushBatch([]*int{a, nil, b}) }, "globalq: PushBatch of nil"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var q Queue[int]
			q.Push(a)
			require.PanicsWithValue(t, tt.want, func() { tt.push(&q) })
			require.Equal(t, 1, q.Len(), "a rejected push must leave the queue unchanged")
			require.Same(t, a, q.Pop())
			require.Nil(t, q.Pop())
			q.Push(b) // the queue still works
			require.Same(t, b, q.Pop())
		})
	}
}

// TestEmptyPopsTakeNoLock holds the consumers' lock, as a worker taking a
// batch does, while Pop and PopInto look at a queue that is empty: never
// used, drained, and holding only a claimed position not yet filled. They
// must return nothing without waiting for the lock, as their docs say;
// idle workers rely on it to poll the queue cheaply.
func TestEmptyPopsTakeNoLock(t *testing.T) {
	tests := []struct {
		name  string
		setup func(q *Queue[int])
	}{
		{"never used", func(*Queue[int]) {}},
		{"drained", func(q *Queue[int]) {
			q.PushBatch([]*int{new(int), new(int)})
			require.Equal(t, 2, q.PopInto(make([]*int, 4)))
		}},
		{"claimed, not filled", func(q *Queue[int]) {
			r := q.tailRing()
			pos := r.enq.Load()
			require.True(t, r.enq.CompareAndSwap(pos, pos+1))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var q Queue[int]
			tt.setup(&q)
			q.mu.Lock()
			pop, popInto := make(chan *int, 1), make(chan int, 1)
			go func() {
				pop <- q.Pop()
				popInto <- q.PopInto(make([]*int, 4))
			}()
			select {
			case x := <-pop:
				require.Nil(t, x, "Pop")
			case <-time.After(30 * time.Second):
				q.mu.Unlock() // lets the goroutine finish
				require.FailNow(t, "hang: Pop of an empty queue waits for the lock")
			}
			select {
			case n := <-popInto:
				require.Zero(t, n, "PopInto")
			case <-time.After(30 * time.Second):
				q.mu.Unlock()
				require.FailNow(t, "hang: PopInto of an empty queue waits for the lock")
			}
			q.mu.Unlock()
		})
	}
}

// TestPushReportsItsRingsBacklog checks what Push returns: the number of
// items ahead of the new one in its ring, which is the queue's length
// before the push while one ring holds everything, and counts only the
// new ring's items once the queue has grown past a full one.
func TestPushReportsItsRingsBacklog(t *testing.T) {
	var q Queue[int]
	items := make([]int, 3*minCapacity)
	for i := range minCapacity {
		require.Equal(t, i, q.Push(&items[i]), "push %d into an empty queue", i)
	}
	for range 5 {
		require.NotNil(t, q.Pop())
	}
	// Room again in the first ring, behind minCapacity-5 items.
	for i := range 5 {
		require.Equal(t, minCapacity-5+i, q.Push(&items[minCapacity+i]), "push %d after five pops", i)
	}
	// The first ring is full: the next push opens a ring twice as large,
	// with nothing ahead of it there, while the first ring still holds
	// minCapacity items.
	require.Equal(t, 0, q.Push(&items[minCapacity+5]), "first push into the second ring")
	require.Equal(t, 1, q.Push(&items[minCapacity+6]), "second push into the second ring")
	require.Equal(t, minCapacity+2, q.Len())
	checkInvariants(t, &q)
}

// TestGrowthPreservesOrder grows the queue from its smallest ring while
// the items wrap around the ends of the rings, with single and batch
// pushes, and checks the rings it went through and the order items come
// out in. Once drained, the queue keeps its largest ring.
func TestGrowthPreservesOrder(t *testing.T) {
	tests := []struct {
		name     string
		offset   int // items pushed and popped first, so positions do not start at 0
		total    int
		batch    int // 0: Push one at a time
		wantCaps []int
	}{
		{"single pushes from zero value", 0, 100, 0, []int{16, 32, 64}},
		{"single pushes wrapped", 11, 100, 0, []int{16, 32, 64}},
		{"batches wrapped", 13, 200, 7, []int{16, 32, 64, 128}},
		{"one batch over several rings", 13, 1000, 1000, []int{16, 32, 64, 128, 256, 512}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var q Queue[int]
			for range tt.offset {
				q.Push(new(int))
				q.Pop()
			}
			items := make([]*int, tt.total)
			for i := range items {
				items[i] = new(int)
				*items[i] = i
			}
			if tt.batch == 0 {
				for _, x := range items {
					q.Push(x)
				}
			} else {
				for i := 0; i < len(items); i += tt.batch {
					q.PushBatch(items[i:min(i+tt.batch, len(items))])
				}
			}
			checkInvariants(t, &q)
			var caps []int
			for r := q.head.Load(); r != nil; r = r.next.Load() {
				caps = append(caps, int(r.mask+1))
			}
			require.Equal(t, tt.wantCaps, caps, "capacities of the rings from head to tail")
			require.Equal(t, tt.total, q.Len())
			for i, want := range items {
				got := q.Pop()
				require.Same(t, want, got, "item %d: got %v", i, deref(got))
			}
			require.True(t, q.Empty())
			require.Zero(t, q.Len())
			require.Same(t, q.tail.Load(), q.head.Load(), "drained: one ring left")
			require.Equal(t, tt.wantCaps[len(tt.wantCaps)-1], int(q.head.Load().mask+1))
			checkInvariants(t, &q)
		})
	}
}

// TestClaimedPositionHoldsBackLaterItems claims a position the way a push
// does and leaves it unfilled, as a producer between its two steps would:
// the items pushed after it must not come out before it, the queue must
// look empty meanwhile (nothing can be popped), also when enough items
// follow to close the ring and go on in the next, and everything must
// come out in order once the position is filled.
func TestClaimedPositionHoldsBackLaterItems(t *testing.T) {
	for _, at := range []int{0, 5, minCapacity - 1} {
		for _, after := range []int{3, minCapacity + 3} {
			t.Run(fmt.Sprintf("position %d, %d after", at, after), func(t *testing.T) {
				var q Queue[int]
				for range at {
					q.Push(new(int))
					require.NotNil(t, q.Pop())
				}
				lead := new(int) // an item before the claim: the pops below get as far as the claim
				q.Push(lead)
				r := q.tailRing()
				pos := r.enq.Load()
				require.True(t, r.enq.CompareAndSwap(pos, pos+1)) // the claim of a push that has not filled yet
				first, later := new(int), make([]*int, after)
				for i := range later {
					later[i] = new(int)
				}
				q.Push(later[0])
				q.PushBatch(later[1:])
				require.Equal(t, after >= minCapacity, r.next.Load() != nil, "the ring closed")
				got := make([]*int, 4)
				require.Equal(t, 1, q.PopInto(got), "the items after the claimed position must wait")
				require.Same(t, lead, got[0])
				require.True(t, q.Empty(), "the next position is not filled: nothing can be popped")
				require.Nil(t, q.Pop())
				require.Zero(t, q.PopInto(make([]*int, 4)))
				require.Equal(t, 1+after, q.Len(), "the claimed position counts")
				r.fill(pos, first)
				require.False(t, q.Empty())
				dst := make([]*int, 2*after)
				require.Equal(t, 1+after, q.PopInto(dst))
				require.Equal(t, append([]*int{first}, later...), dst[:1+after])
				require.True(t, q.Empty())
				checkInvariants(t, &q)
			})
		}
	}
}

// TestRoomWithStaleConsumerPosition: a producer loads the consumers'
// position and then the producers'; meanwhile both can move on, the
// producers to more than a capacity past the position it loaded. That
// pair must not be taken as room (the difference would wrap around to a
// huge number of free cells and let the producer overwrite queued
// items), and a consistent pair must give the room there is.
func TestRoomWithStaleConsumerPosition(t *testing.T) {
	r := newRing[int](minCapacity)
	for _, tt := range []struct {
		deq, pos, free uint64
		ok             bool
	}{
		{100, 100, minCapacity, true},
		{100, 105, minCapacity - 5, true},
		{100, 100 + minCapacity, 0, true},
		{100, 100 + minCapacity + 1, 0, false},
		{100, 100 + 3*minCapacity, 0, false},
	} {
		free, ok := r.freeAt(tt.deq, tt.pos)
		require.Equal(t, tt.ok, ok, "deq %d, pos %d", tt.deq, tt.pos)
		require.Equal(t, tt.free, free, "deq %d, pos %d", tt.deq, tt.pos)
	}
}

// payload is the tracked item of the tests that check what the queue
// keeps reachable.
type payload = gctrack.Item

// pushTracked pushes count new items and returns weak pointers to them.
func pushTracked(q *Queue[payload], count int) []weak.Pointer[payload] {
	return gctrack.Push(count, func(p *payload) { q.Push(p) })
}

// TestPoppedItemsAreCollectable checks that the queue drops its reference to
// a popped item, and keeps the ones still queued, also when the items are
// spread over rings.
func TestPoppedItemsAreCollectable(t *testing.T) {
	tests := []struct {
		name string
		pop  func(q *Queue[payload], n int)
	}{
		{"Pop", func(q *Queue[payload], n int) {
			for range n {
				require.NotNil(t, q.Pop())
			}
		}},
		{"PopInto", func(q *Queue[payload], n int) {
			dst := make([]*payload, n)
			require.Equal(t, n, q.PopInto(dst))
		}},
	}
	for _, tt := range tests {
		for _, size := range [][2]int{{8, 5}, {3 * minCapacity, minCapacity + 5}} {
			t.Run(fmt.Sprintf("%s %d of %d", tt.name, size[1], size[0]), func(t *testing.T) {
				var q Queue[payload]
				total, popped := size[0], size[1]
				ws := pushTracked(&q, total)
				tt.pop(&q, popped)
				runtime.GC()
				for i, w := range ws {
					if i < popped {
						require.Nil(t, w.Value(), "popped item %d is still reachable: the queue kept its cell", i)
					} else {
						require.NotNil(t, w.Value(), "queued item %d was collected", i)
					}
				}
				require.Equal(t, total-popped, q.Len())
				runtime.KeepAlive(&q)
			})
		}
	}
}

func TestSteadyStateDoesNotAllocate(t *testing.T) {
	const batch = 64
	items := make([]*int, batch)
	for i := range items {
		items[i] = new(int)
	}
	dst := make([]*int, batch)
	tests := []struct {
		name string
		op   func(q *Queue[int])
	}{
		{"Push+Pop", func(q *Queue[int]) {
			q.Push(items[0])
			q.Pop()
		}},
		{"PushBatch+PopInto", func(q *Queue[int]) {
			q.PushBatch(items)
			q.PopInto(dst)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var q Queue[int]
			// Grow the queue first, and keep some items queued so that
			// the measured operations wrap around the ring's end.
			for range 16 {
				q.PushBatch(items)
			}
			q.PopInto(make([]*int, 16*batch-37))
			allocs := testing.AllocsPerRun(1000, func() { tt.op(&q) })
			require.Zero(t, allocs, "allocations per %s in steady state", tt.name)
			require.Equal(t, 37, q.Len())
		})
	}
}

// tagged is an item of the concurrency test: which producer pushed it and
// its position in that producer's sequence.
type tagged struct {
	producer, seq int
}

// TestConcurrentFIFOPerProducer has several producers push tagged sequences
// (single and batch pushes) while several consumers pop them (Pop and
// PopInto). Each consumer must see each producer's items in increasing
// order, and every item must be popped exactly once. The last case runs
// many short-lived queues one after the other, each from its first ring,
// so that rings fill, close and are emptied while producers and consumers
// race, again and again (in one long-lived queue that happens only until
// it has grown).
func TestConcurrentFIFOPerProducer(t *testing.T) {
	tests := []fifoCase{
		{4, 4, 16, "mixed", 1, 20000 * stressScale},
		{1, 4, 32, "mixed", 1, 20000 * stressScale},
		{4, 1, 8, "PopInto", 1, 20000 * stressScale},
		{3, 3, 1, "Pop", 1, 20000 * stressScale},
		{4, 2, 5, "PopInto", 20 * stressScale, 2000},
	}
	for _, tt := range tests {
		name := fmt.Sprintf("%dP%dC batch%d %s %dx%d", tt.producers, tt.consumers, tt.maxBatch, tt.consumerMode, tt.queues, tt.perProducer)
		t.Run(name, func(t *testing.T) {
			for range tt.queues {
				concurrentFIFO(t, tt)
			}
		})
	}
}

// fifoCase is a case of TestConcurrentFIFOPerProducer.
type fifoCase struct {
	producers, consumers int
	maxBatch             int
	consumerMode         string // "Pop", "PopInto" or "mixed"
	queues               int    // fresh queues, run one after the other
	perProducer          int    // items each producer pushes to each queue
}

// concurrentFIFO runs one queue of TestConcurrentFIFOPerProducer's case tt.
func concurrentFIFO(t *testing.T, tt fifoCase) {
	t.Helper()
	perProducer := tt.perProducer
	total := int64(tt.producers * perProducer)

	items := make([][]tagged, tt.producers)
	for p := range items {
		items[p] = make([]tagged, perProducer)
		for s := range items[p] {
			items[p][s] = tagged{producer: p, seq: s}
		}
	}
	seen := make([]atomic.Int32, tt.producers*perProducer)
	var consumed atomic.Int64
	var q Queue[tagged]

	var wg sync.WaitGroup
	start := make(chan struct{}) // released together, so that they contend from the first ring on
	for p := range tt.producers {
		wg.Go(func() {
			<-start
			rng := rand.New(rand.NewPCG(uint64(p), 1))
			batch := make([]*tagged, 0, tt.maxBatch)
			for s := 0; s < perProducer; {
				if tt.maxBatch == 1 || rng.IntN(2) == 0 {
					q.Push(&items[p][s])
					s++
					continue
				}
				batch = batch[:0]
				for k := 1 + rng.IntN(tt.maxBatch); k > 0 && s < perProducer; k-- {
					batch = append(batch, &items[p][s])
					s++
				}
				q.PushBatch(batch)
			}
		})
	}
	violations := make([]string, tt.consumers)
	for c := range tt.consumers {
		wg.Go(func() {
			<-start
			rng := rand.New(rand.NewPCG(uint64(c), 2))
			last := make([]int, tt.producers)
			for i := range last {
				last[i] = -1
			}
			observe := func(x *tagged) {
				if x.seq <= last[x.producer] && violations[c] == "" {
					violations[c] = fmt.Sprintf("consumer %d saw producer %d seq %d after seq %d",
						c, x.producer, x.seq, last[x.producer])
				}
				last[x.producer] = x.seq
				seen[x.producer*perProducer+x.seq].Add(1)
			}
			dst := make([]*tagged, max(tt.maxBatch, 2))
			for consumed.Load() < total {
				usePop := tt.consumerMode == "Pop" || tt.consumerMode == "mixed" && rng.IntN(2) == 0
				got := 0
				if usePop {
					if x := q.Pop(); x != nil {
						observe(x)
						got = 1
					}
				} else {
					got = q.PopInto(dst[:1+rng.IntN(len(dst))])
					for _, x := range dst[:got] {
						observe(x)
					}
				}
				if got == 0 {
					runtime.Gosched()
					continue
				}
				consumed.Add(int64(got))
			}
		})
	}

	close(start)
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		require.FailNow(t, "hang: items lost",
			"consumed %d of %d, queue length %d", consumed.Load(), total, q.Len())
	}

	for _, v := range violations {
		require.Empty(t, v, "per-producer FIFO order violated")
	}
	require.Equal(t, total, consumed.Load(), "items consumed")
	require.True(t, q.Empty(), "queue must be empty, has %d", q.Len())
	for i := range seen {
		require.Equal(t, int32(1), seen[i].Load(),
			"producer %d seq %d popped %d times, want exactly once",
			i/perProducer, i%perProducer, seen[i].Load())
	}
	checkInvariants(t, &q)
}
