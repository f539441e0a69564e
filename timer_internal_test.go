package scheduler

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/procsched/scheduler/payload"
)

// Tests of the timer service. They are internal so that they can look
// into the shards: a timer released must be gone from the heap and the
// index, not only from Stats.

// sleepUntilEnd sleeps an hour in its first step and finishes at its
// cancel event or at a message, whichever comes first.
func sleepUntilEnd(n int, evs []Event, out *StepOutput) error {
	if n == 0 {
		out.Sleep(1, time.Hour)
		return nil
	}
	for _, ev := range evs {
		if ev.Type == EventCancel || ev.Type == EventMessage {
			out.Done(payload.Payload{})
		}
	}
	return nil
}

// requireNoTimers checks that s holds no timer: none counted, none in
// any heap or index, and no heap buffer kept beyond the size a shard
// keeps anyway.
func requireNoTimers(t *testing.T, s *Scheduler) {
	t.Helper()
	require.Zero(t, s.Stats().Timers, "Stats.Timers")
	for i := range s.timers.shards {
		sh := &s.timers.shards[i]
		sh.mu.Lock()
		n, c, idx := len(sh.heap), cap(sh.heap), sh.index.len()
		sh.mu.Unlock()
		require.Zero(t, n, "shard %d: entries in the heap", i)
		require.Zero(t, idx, "shard %d: entries in the index", i)
		require.LessOrEqual(t, c, timerShrinkMin, "shard %d: heap buffer kept", i)
		require.Equal(t, int64(noTimer), sh.first.Load(), "shard %d: earliest deadline", i)
	}
}

// TestTimersReleasedWhenProcessesEnd: processes that sleep an hour and
// then end, half terminated and half finishing at a message, leave no
// timer behind, at once: not counted by Stats, not in any shard, their
// memory given back.
func TestTimersReleasedWhenProcessesEnd(t *testing.T) {
	n := 20_000
	if testing.Short() {
		n = 2_000
	}
	s := newScheduler(t, WithWorkers(4))
	hs := make([]Handle, n)
	var err error
	for i := range hs {
		hs[i], err = s.Submit(context.Background(), numbered(sleepUntilEnd), "sleep", nil)
		require.NoError(t, err)
	}
	eventually(t, fmt.Sprintf("%d timers", n), func() bool { return s.Stats().Timers == n })
	for i, h := range hs {
		if i%2 == 0 {
			require.NoError(t, s.Terminate(h.PID()))
		} else {
			require.NoError(t, s.Tell(h.PID(), "end"))
		}
	}
	for _, h := range hs {
		require.NoError(t, waitEnd(t, h))
	}
	requireNoTimers(t, s)
}

// TestShutdownReleasesTimers: after Shutdown no timer is left, whether
// the sleepers ended at their cancel event or were forced at the
// deadline, and whatever else a shard still held.
func TestShutdownReleasesTimers(t *testing.T) {
	const n = 1_000
	ignoreCancel := func(n int, _ []Event, out *StepOutput) error {
		if n == 0 {
			out.Sleep(1, time.Hour)
		}
		return nil
	}
	for _, tt := range []struct {
		name   string
		step   func(int, []Event, *StepOutput) error
		forced bool
	}{
		{"ended at cancel", sleepUntilEnd, false},
		{"forced at the deadline", ignoreCancel, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := newScheduler(t, WithWorkers(2))
			for range n {
				_, err := s.Submit(context.Background(), numbered(tt.step), "sleep", nil)
				require.NoError(t, err)
			}
			eventually(t, fmt.Sprintf("%d timers", n), func() bool { return s.Stats().Timers == n })
			// An entry no process owns, as if a removal had been missed.
			sh := &s.timers.shards[1]
			sh.mu.Lock()
			sh.push(timerEntry{when: s.timers.now() + int64(time.Hour), pid: 1<<32 | 1<<20, seq: 2})
			sh.publish()
			sh.mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			if tt.forced {
				cancel() // force at once
			}
			err := s.Shutdown(ctx)
			cancel()
			if tt.forced {
				require.ErrorIs(t, err, ErrForced)
				require.Equal(t, uint64(n), s.Stats().Processes.Forced)
			} else {
				require.NoError(t, err)
			}
			requireNoTimers(t, s)
		})
	}
}

// TestTimerOfEndedProcessNeverFires: the timer of a process that ended
// before its deadline is never fired. With one worker there is one heap,
// which fires in deadline order, so once a later timer has fired every
// earlier one has been taken from the heap if it was there.
func TestTimerOfEndedProcessNeverFires(t *testing.T) {
	const n = 200
	s := newScheduler(t, WithWorkers(1))
	var mu sync.Mutex
	fired := map[uint64]int{}    // timers taken to fire, by process ID
	afterEnd := map[uint64]int{} // of those, taken once the process had ended
	hook := func(hs *Scheduler, pid, _ uint64) {
		if hs != s {
			return
		}
		// One worker fires the timers and runs the steps, so a process
		// found gone here ended before its timer was taken: the timer
		// outlived it. (A stalled machine may make both of a process's
		// timers due in one batch while it still lives; that is fine.)
		gone := hs.table.lookup(pid) == nil
		mu.Lock()
		fired[pid]++
		if gone {
			afterEnd[pid]++
		}
		mu.Unlock()
	}
	testHookTimerFire.Store(&hook)
	defer testHookTimerFire.Store(nil)

	// Each sleeper sets a timer for 30ms and one due at once, and ends
	// when the second fires.
	quitter := func(n int, evs []Event, out *StepOutput) error {
		if n == 0 {
			out.Sleep(1, 30*time.Millisecond)
			out.Sleep(2, 0)
			return nil
		}
		for _, ev := range evs {
			if ev.Type == EventYieldComplete && ev.Tag == 2 {
				out.Done(payload.Payload{})
			}
		}
		return nil
	}
	hs := make([]Handle, n)
	var err error
	for i := range hs {
		hs[i], err = s.Submit(context.Background(), numbered(quitter), "quit", nil)
		require.NoError(t, err)
	}
	for _, h := range hs {
		require.NoError(t, waitEnd(t, h))
	}
	witness, err := s.Submit(context.Background(), numbered(func(n int, _ []Event, out *StepOutput) error {
		if n == 0 {
			out.Sleep(1, 60*time.Millisecond)
		} else {
			out.Done(payload.Payload{})
		}
		return nil
	}), "witness", nil)
	require.NoError(t, err)
	require.NoError(t, waitEnd(t, witness))

	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, afterEnd, "timers taken to fire after their process ended, by process ID")
	for _, h := range hs {
		require.GreaterOrEqual(t, fired[h.PID().ID], 1, "the due timer of %v never fired", h.PID())
	}
	require.Equal(t, 1, fired[witness.PID().ID], "timers fired for the witness")
	require.Len(t, fired, n+1, "processes timers were fired for")
}

// TestTimersOrderAndExactlyOnce: many processes set timers for one
// deadline and a later one, interleaved; each timer completes exactly
// once and never before its deadline, and the timers set for one
// deadline complete in the order the process set them. With one worker,
// which fires every timer itself, the earlier deadline's timers also
// complete first; with several, two workers may fire the two deadlines
// at once.
func TestTimersOrderAndExactlyOnce(t *testing.T) {
	procs := 300
	if testing.Short() {
		procs = 100
	}
	for _, workers := range []int{1, 2, 4} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			s := newScheduler(t, WithWorkers(workers))
			first := time.Now().Add(30 * time.Millisecond)
			second := first.Add(time.Millisecond)
			deadline := func(tag uint64) time.Time {
				if tag > 4 {
					return second
				}
				return first
			}
			got := make([][]uint64, procs)
			var early sync.Map // process index -> the tag that came early
			hs := make([]Handle, procs)
			var err error
			for i := range procs {
				hs[i], err = s.Submit(context.Background(), numbered(func(n int, evs []Event, out *StepOutput) error {
					if n == 0 {
						for _, tag := range []uint64{5, 1, 6, 2, 7, 3, 8, 4} {
							out.SleepUntil(tag, deadline(tag))
						}
						return nil
					}
					now := time.Now()
					for _, ev := range evs {
						if ev.Type != EventYieldComplete {
							continue
						}
						if now.Before(deadline(ev.Tag)) {
							early.Store(i, ev.Tag)
						}
						got[i] = append(got[i], ev.Tag)
					}
					if len(got[i]) >= 8 {
						out.Done(payload.Payload{})
					}
					return nil
				}), "order", nil)
				require.NoError(t, err)
			}
			for _, h := range hs {
				require.NoError(t, waitEnd(t, h))
			}
			early.Range(func(i, tag any) bool {
				t.Errorf("process %d: timer %d completed before its deadline", i, tag)
				return true
			})
			for i := range got {
				require.ElementsMatch(t, []uint64{1, 2, 3, 4, 5, 6, 7, 8}, got[i], "process %d: completions", i)
				var first, second []uint64
				for _, tag := range got[i] {
					if tag <= 4 {
						first = append(first, tag)
					} else {
						second = append(second, tag)
					}
				}
				require.Equal(t, []uint64{1, 2, 3, 4}, first, "process %d: completions of the first deadline", i)
				require.Equal(t, []uint64{5, 6, 7, 8}, second, "process %d: completions of the second deadline", i)
				if workers == 1 {
					require.Equal(t, []uint64{1, 2, 3, 4, 5, 6, 7, 8}, got[i], "process %d: completions", i)
				}
			}
			requireNoTimers(t, s)
		})
	}
}

// TestTimersSetAfterTheirTimeCompleteInOrder: a step that runs after
// the instant its Sleeps are set for (here, an instant already past)
// sets timers that are due at once; they still complete in the order
// set, while other workers, kept busy, look at the timers between their
// steps and fire what is due. Each round's process sets eight Sleeps for
// one past instant, with a Tell between the fourth and the fifth, and
// must read them as 1 to 8. Timers added to their shard one by one broke
// this: another worker fired the first alone while the rest were added,
// and its completion came after theirs (tens of rounds in a thousand).
func TestTimersSetAfterTheirTimeCompleteInOrder(t *testing.T) {
	rounds := 2000
	if testing.Short() {
		rounds = 500
	}
	s := newScheduler(t, WithWorkers(4))
	stop := make(chan struct{})
	spinners := make([]Handle, 6)
	for i := range spinners {
		h, err := s.Submit(context.Background(), numbered(func(n int, evs []Event, out *StepOutput) error {
			select {
			case <-stop:
				out.Done(payload.Payload{})
			default:
				out.Continue()
			}
			return nil
		}), "spin", nil)
		require.NoError(t, err)
		spinners[i] = h
	}
	defer func() {
		close(stop)
		for _, h := range spinners {
			require.NoError(t, waitEnd(t, h))
		}
	}()
	want := []uint64{1, 2, 3, 4, 5, 6, 7, 8}
	bad := 0
	for round := range rounds {
		var got []uint64
		h, err := s.Submit(context.Background(), numbered(func(n int, evs []Event, out *StepOutput) error {
			if n == 0 {
				past := time.Now().Add(-time.Millisecond)
				for tag := uint64(1); tag <= 8; tag++ {
					out.SleepUntil(tag, past)
					if tag == 4 {
						out.Tell(spinners[0].PID(), "between")
					}
				}
				return nil
			}
			for _, ev := range evs {
				if ev.Type == EventYieldComplete {
					got = append(got, ev.Tag)
				}
			}
			if len(got) == len(want) {
				out.Done(payload.Payload{})
			}
			return nil
		}), "sleeps", nil)
		require.NoError(t, err)
		require.NoError(t, waitEnd(t, h))
		if !slices.Equal(got, want) {
			bad++
			if bad <= 3 {
				t.Errorf("round %d: completions %v", round, got)
			}
		}
	}
	require.Zero(t, bad, "rounds of %d whose timers completed out of the order set", rounds)
	requireNoTimers(t, s)
}

// TestSleepWhileEveryWorkerParks: a timer due while every worker is
// parked still completes: a parked worker (the watcher) wakes up for it.
// The watchdog is off, so nothing else runs.
func TestSleepWhileEveryWorkerParks(t *testing.T) {
	for _, workers := range []int{1, 4} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			s := newScheduler(t, WithWorkers(workers), WithWatchdog(0))
			parked := make(chan struct{})
			h, err := s.Submit(context.Background(), numbered(func(n int, _ []Event, out *StepOutput) error {
				if n == 0 {
					out.Sleep(1, 100*time.Millisecond)
					return nil
				}
				select {
				case <-parked:
				default:
					return fmt.Errorf("woke before every worker had parked")
				}
				out.Done(payload.Payload{})
				return nil
			}), "sleep", nil)
			require.NoError(t, err)
			eventually(t, "every worker parked with the timer pending", func() bool {
				return s.idle.count.Load() == int32(workers) && s.Stats().Timers == 1
			})
			close(parked)
			require.NoError(t, waitEnd(t, h))
		})
	}
}

// TestTimerShardAgainstModel drives a shard's heap and index with random
// pushes, removals by seq and pops of the earliest, and checks them
// against a plain map: the earliest entry, the index of every entry, the
// count, and the shrinking of a heap that empties.
func TestTimerShardAgainstModel(t *testing.T) {
	seeds := uint64(10)
	if testing.Short() {
		seeds = 3
	}
	for seed := range seeds {
		rng := rand.New(rand.NewPCG(seed, 11))
		var sh timerShard
		model := map[uint64]timerEntry{} // by seq
		seq := uint64(0)
		check := func(op int) {
			t.Helper()
			require.Equal(t, len(model), len(sh.heap), "seed %d op %d: heap size", seed, op)
			require.Equal(t, len(model), sh.index.len(), "seed %d op %d: index size", seed, op)
			for i := range sh.heap {
				e := &sh.heap[i]
				pos, ok := sh.index.get(e.seq)
				require.True(t, ok && pos == uint64(i), "seed %d op %d: index of seq %d", seed, op, e.seq)
				if i > 0 {
					require.False(t, e.before(&sh.heap[(i-1)/4]), "seed %d op %d: heap order at %d", seed, op, i)
				}
			}
		}
		for op := range 20_000 {
			switch r := rng.IntN(10); {
			case r < 5 || len(model) == 0: // push, often with equal deadlines
				seq++
				e := timerEntry{when: int64(rng.IntN(1000)), pid: rng.Uint64(), seq: seq}
				sh.push(e)
				model[seq] = e
			case r < 7: // remove a random present seq
				var victim uint64
				for s := range model {
					victim = s
					break
				}
				pos, ok := sh.index.get(victim)
				require.True(t, ok)
				got := sh.removeAt(int(pos))
				require.Equal(t, model[victim], got)
				delete(model, victim)
			default: // pop the earliest
				var want timerEntry
				first := true
				for _, e := range model {
					if first || e.before(&want) {
						want, first = e, false
					}
				}
				got := sh.removeAt(0)
				require.Equal(t, want, got, "seed %d op %d: earliest", seed, op)
				delete(model, got.seq)
			}
			if op%97 == 0 {
				check(op)
			}
		}
		check(-1)
		for len(sh.heap) > 0 {
			delete(model, sh.removeAt(0).seq)
		}
		sh.trim(1, nil)
		require.Empty(t, model)
		require.LessOrEqual(t, cap(sh.heap), timerShrinkMin, "seed %d: heap buffer after emptying", seed)
	}
}

// TestTimerShardTrim: a heap that drops below a quarter of its buffer
// keeps the buffer until it has stayed small for timerShrinkAfter (so
// that timers coming and going in waves do not regrow it every wave),
// then moves to a buffer twice its length with a rebuilt index; an empty
// heap gives its memory back at once.
func TestTimerShardTrim(t *testing.T) {
	var sh timerShard
	fill := func(n int) {
		for i := range n {
			sh.push(timerEntry{when: int64(i), pid: 1, seq: uint64(len(sh.heap) + 1 + i*1000)})
		}
	}
	fill(4096)
	big := cap(sh.heap)
	for len(sh.heap) > 100 {
		sh.removeAt(0)
	}
	now := int64(time.Hour)
	sh.trim(now, nil)
	require.Equal(t, big, cap(sh.heap), "shrunk at once")
	sh.trim(now+timerShrinkAfter/2, nil)
	require.Equal(t, big, cap(sh.heap), "shrunk before staying small for timerShrinkAfter")
	// A wave comes back: the clock restarts.
	fill(2000)
	sh.trim(now+timerShrinkAfter, nil)
	for len(sh.heap) > 100 {
		sh.removeAt(0)
	}
	sh.trim(now+timerShrinkAfter+1, nil)
	require.Equal(t, big, cap(sh.heap), "shrunk though the heap was big again in between")
	sh.trim(now+2*timerShrinkAfter+1, nil)
	require.Equal(t, 200, cap(sh.heap), "not shrunk after staying small")
	require.Equal(t, 100, sh.index.len())
	for i := range sh.heap {
		pos, ok := sh.index.get(sh.heap[i].seq)
		require.True(t, ok)
		require.Equal(t, uint64(i), pos)
	}
	fill(4096)
	for len(sh.heap) > 0 {
		sh.removeAt(0)
	}
	sh.trim(now+2*timerShrinkAfter+2, nil)
	require.Zero(t, cap(sh.heap), "empty heap kept its buffer")
	require.Zero(t, sh.index.len())
}

// TestSleepsKeptOnlyWhilePending: the own time of a Sleep whose
// deadline comes first (timerShard.behind) is kept while the yield is
// pending and goes when it stops being pending, however it stops: its
// deadline passes, a later step cancels it, a completion comes from
// outside, or a later deadline gives the Sleep its own time back. A
// process that does this again and again leaves nothing of the rounds
// before.
func TestSleepsKeptOnlyWhilePending(t *testing.T) {
	s := newScheduler(t)
	var wrong []string
	expect := func(want int, what string) { // from the process's own step
		got := 0
		for i := range s.timers.shards {
			sh := &s.timers.shards[i]
			sh.mu.Lock()
			got += sh.behind.len()
			sh.mu.Unlock()
		}
		if got != want {
			wrong = append(wrong, fmt.Sprintf("%s: %d Sleeps kept, want %d", what, got, want))
		}
	}
	completion := func(evs []Event) (Event, bool) {
		for _, ev := range evs {
			if ev.Type == EventYieldComplete && ev.Tag == 1 {
				return ev, true
			}
		}
		return Event{}, false
	}
	pendingOutside := make(chan struct{}, 1)
	phase := 0
	h, err := s.Submit(context.Background(), stepFunc(func(evs []Event, out *StepOutput) error {
		ev, completed := completion(evs)
		switch phase {
		case 0:
			out.Sleep(1, time.Hour)
			out.Timeout(1, 30*time.Minute)
			out.Continue()
		case 1:
			expect(1, "a deadline before the Sleep's time, in its step")
			out.Timeout(1, time.Millisecond)
		case 2:
			if !completed {
				return nil
			}
			if !errors.Is(ev.Error, ErrTimeout) {
				wrong = append(wrong, fmt.Sprintf("the first Sleep completed with %v, want ErrTimeout", ev.Error))
			}
			expect(0, "once the deadline passed")
			out.Sleep(1, time.Hour)
			out.Continue()
		case 3:
			out.Timeout(1, 30*time.Minute)
			out.Continue()
		case 4:
			expect(1, "a deadline before the Sleep's time, in a step of its own")
			out.Cancel(1)
			out.Continue()
		case 5:
			expect(0, "once cancelled")
			out.Sleep(1, time.Hour)
			out.Timeout(1, 30*time.Minute)
			out.Continue()
		case 6:
			expect(1, "before a completion from outside")
			pendingOutside <- struct{}{}
		case 7:
			if !completed {
				return nil
			}
			expect(0, "once completed from outside")
			out.Sleep(1, time.Hour)
			out.Timeout(1, 30*time.Minute)
			out.Continue()
		case 8:
			expect(1, "before a later deadline")
			out.Timeout(1, 2*time.Hour)
			out.Continue()
		case 9:
			expect(0, "once a later deadline gave the Sleep its own time back")
			out.Cancel(1)
			out.Done(payload.Payload{})
		}
		phase++
		return nil
	}), "run", nil)
	require.NoError(t, err)
	select {
	case <-pendingOutside:
	case <-time.After(testTimeout):
		t.Fatal("the process did not reach the completion from outside")
	}
	require.NoError(t, s.CompleteYield(h.PID(), 1, "from outside", nil))
	require.NoError(t, waitEnd(t, h))
	require.Equal(t, 10, phase)
	require.Empty(t, wrong)

	// A process that ends with such a Sleep pending leaves nothing.
	h, err = s.Submit(context.Background(), numbered(func(n int, _ []Event, out *StepOutput) error {
		if n == 0 {
			out.Sleep(1, time.Hour)
			out.Timeout(1, 30*time.Minute)
			out.Continue()
			return nil
		}
		expect(1, "before its process ends")
		out.Done(payload.Payload{})
		return nil
	}), "run", nil)
	require.NoError(t, err)
	require.NoError(t, waitEnd(t, h))
	expect(0, "once its process ended")
	require.Empty(t, wrong)
}

// TestFireBatchKeepsAProcessTogether: a batch of due timers that has
// reached timerBatch goes on while the next due timer is the same
// process's, a deadline as well as a Sleep (an entry's pid marks a
// deadline with timerDeadline), so that a batch never splits the timers
// of one process at its end. The processes are none the table has, so
// nothing completes: only the batch's size is looked at.
func TestFireBatchKeepsAProcessTogether(t *testing.T) {
	s := newScheduler(t, WithWorkers(1))
	w := &worker{s: s, ownTimers: new(timerShard)}
	w.ownTimers.init()
	var sh timerShard
	sh.init()
	const other, p = uint64(1) << 40, uint64(1)<<40 + 1
	seq := uint64(0)
	add := func(when int64, pid uint64) {
		seq++
		sh.push(timerEntry{when: when, pid: pid, seq: seq})
	}
	for range timerBatch - 1 {
		add(5, other)
	}
	add(5, p)               // a Sleep of p, the batch's last place
	add(6, p|timerDeadline) // a deadline of p, due too
	add(6, p)               // and another Sleep of p
	add(7, other)
	sh.publish()
	popped, _, more := w.fireBatch(&sh, 10)
	require.Equal(t, timerBatch+2, popped, "a batch takes every due timer of its last process")
	require.True(t, more, "the other process's timer is left for the next batch")
	popped, _, more = w.fireBatch(&sh, 10)
	require.Equal(t, 1, popped)
	require.False(t, more)
}
