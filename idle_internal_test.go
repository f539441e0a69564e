package scheduler

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/procsched/scheduler/payload"
)

// barrier lets n parties through together: each arrives and then waits
// for the last. A party that waits longer than the guard gives up and
// reports it, so a broken scheduler fails the test instead of hanging it.
type barrier struct {
	n       int64
	arrived atomic.Int64
	all     chan struct{}
	timeout atomic.Bool
}

func newBarrier(n int) *barrier { return &barrier{n: int64(n), all: make(chan struct{})} }

// await arrives and blocks until everyone has, or the guard expires.
func (b *barrier) await() {
	if b.arrived.Add(1) == b.n {
		close(b.all)
		return
	}
	select {
	case <-b.all:
	case <-time.After(testTimeout):
		b.timeout.Store(true)
	}
}

// forker waits until every other worker has parked, spawns children,
// then blocks its worker in its next step until every child is inside a
// step at the same time as it is. The children are queued on the
// forker's worker, which stays busy: they can only run on other workers,
// all asleep when the children were queued, and only if those are woken
// one after another.
type forker struct {
	stepOnly
	s        *Scheduler
	children int
	bar      *barrier
	spawned  bool
	// neverParked is set if the other workers did not all park within
	// the guard.
	neverParked bool
}

func (f *forker) Step(evs []Event, out *StepOutput) error {
	if !f.spawned {
		f.spawned = true
		deadline := time.Now().Add(testTimeout)
		for int(f.s.idle.count.Load()) < len(f.s.workers)-1 {
			if time.Now().After(deadline) {
				f.neverParked = true
				break
			}
			runtime.Gosched() // let the others run out of work and park
		}
		for i := range f.children {
			out.Spawn(uint64(i), &barrierChild{bar: f.bar}, "child", nil)
		}
		return nil
	}
	f.bar.await()
	out.Done(payload.Payload{})
	return nil
}

// barrierChild waits at the barrier in its first step, then ends.
type barrierChild struct {
	stepOnly
	bar *barrier
}

func (c *barrierChild) Step(evs []Event, out *StepOutput) error {
	c.bar.await()
	out.Done(payload.Payload{})
	return nil
}

// TestWakeReachesEveryParkedWorker: work queued on a busy worker is run
// by parked workers, woken one after another, and never waits for the
// busy worker while another sleeps. Each round a forker waits until
// every other worker has parked, queues one child per other worker and
// blocks its own worker until all of them are inside a step together,
// which needs every parked worker awake at once: the push wakes one
// parked worker, handing it the search; the searcher that finds work
// wakes the next one, and so on. If a wake-up were lost,
// or handed to the busy worker, a child would stay queued behind the
// blocked step and the round would time out. The watchdog is off, so
// nothing but the wake discipline moves the children.
func TestWakeReachesEveryParkedWorker(t *testing.T) {
	const workers = 6
	var wakes, busyWakes atomic.Int64
	var s *Scheduler
	hook := func(w *worker) {
		if w.s != s {
			return
		}
		wakes.Add(1)
		// A worker is on the idle list only from park until it is woken,
		// and idle is set before it parks and cleared only once it has
		// found work: a token for a worker with idle unset went to a
		// busy worker.
		if !w.idle.Load() {
			busyWakes.Add(1)
		}
	}
	s = newScheduler(t, WithWorkers(workers), WithWatchdog(0))
	testHookWake.Store(&hook)
	defer testHookWake.Store(nil)

	for round := range 200 {
		bar := newBarrier(workers)
		f := &forker{s: s, children: workers - 1, bar: bar}
		h, err := s.Submit(context.Background(), f, "fork", nil)
		require.NoError(t, err)
		_, err = h.Wait(context.Background())
		require.NoError(t, err)
		require.False(t, f.neverParked, "round %d: the other workers did not all park within 10s", round)
		if bar.timeout.Load() {
			st := s.Stats()
			t.Fatalf("round %d: the forker and its %d children did not all get a worker at once within 10s (wake-ups so far %d, parks %d)",
				round, workers-1, st.Wakes, st.Parks)
		}
	}
	require.Positive(t, wakes.Load(), "no parked worker was ever woken: the test did not exercise wake-ups")
	require.Zero(t, busyWakes.Load(), "wake tokens handed to workers that were not idle")
}
