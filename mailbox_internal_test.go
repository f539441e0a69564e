package scheduler

import (
	"context"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/procsched/scheduler/relay"
)

// TestMailboxBurstRegrowsInFewSteps: a process that waits after a burst
// lets its large mailbox buffer go, but the next burst of the same size
// gets its room back in two allocations (keptInbox events, then the
// burst's size) instead of one per doubling from a single event.
func TestMailboxBurstRegrowsInFewSteps(t *testing.T) {
	const burst = 4 * keptInbox
	p := new(proc)
	p.state.Store(stIdle)
	dst := make([]Event, 0, burst)
	msg := new(int)
	cycle := func() {
		for range burst {
			if _, _, _, err := p.pushMessage(msg, relay.PID{}, mailboxLimit{}, false, p.id.Load()); err != nil {
				t.Fatal(err)
			}
		}
		dst = p.drain(dst[:0])
		if len(dst) != burst {
			t.Fatalf("drained %d events, want %d", len(dst), burst)
		}
		if p.inbox.wbits&wbBigInbox == 0 {
			t.Fatalf("a buffer of %d events is not marked big", 1<<p.inbox.logCap)
		}
		p.shrinkInbox() // the process goes waiting
		p.state.Store(stIdle)
	}
	cycle() // the first burst grows the buffer by doublings
	require.Nil(t, p.inbox.first, "the buffer of a passed burst is let go when the process waits")
	allocs := testing.AllocsPerRun(20, cycle)
	require.LessOrEqual(t, allocs, 2.0, "allocations per burst of %d messages after the first", burst)
}

// TestMailboxBufferGrowsInOrder: the mailbox buffer, kept as a pointer,
// a count and the log2 of its capacity, keeps every event in the order
// it came through each growth (doublings from one event, and the jumps a
// burst hint makes), its capacity stays a power of two, and a drain
// leaves no event behind in the buffer it keeps.
func TestMailboxBufferGrowsInOrder(t *testing.T) {
	for _, hint := range []uint8{0, 9} {
		for _, n := range []int{1, 2, 3, 63, 64, 65, 200, 1025} {
			p := new(proc)
			p.state.Store(stIdle)
			p.inbox.hint = hint
			for i := range n {
				if _, _, _, err := p.pushMessage(i, relay.PID{}, mailboxLimit{}, false, p.id.Load()); err != nil {
					t.Fatal(err)
				}
				if c := 1 << p.inbox.logCap; c < i+1 || c&(c-1) != 0 {
					t.Fatalf("hint %d: after %d events the capacity is %d", hint, i+1, c)
				}
			}
			require.Equal(t, n, int(p.inbox.n), "hint %d: queued events", hint)
			buf := unsafe.Slice(p.inbox.first, 1<<p.inbox.logCap)
			got := p.drain(nil)
			require.Len(t, got, n, "hint %d: drained events", hint)
			for i, ev := range got {
				if ev.Data != i {
					t.Fatalf("hint %d, %d events: event %d has data %v", hint, n, i, ev.Data)
				}
			}
			for i := range buf {
				if buf[i] != (Event{}) {
					t.Fatalf("hint %d, %d events: slot %d of the buffer still holds %v after the drain", hint, n, i, buf[i])
				}
			}
		}
	}
	require.Panics(t, func() { new(eventBuf).setBuffer(make([]Event, 0, 3)) }, "a buffer of 3 events")
}

// TestClaimWaitingGivesBackAnotherProcess: a claim that finds the record
// holding another process than the one looked up (its record went to a
// later process, which waits too) gives the record back as it was: the
// later process is not claimed, keeps its waiting state, and is not
// queued; a process that does not wait is not claimed at all.
func TestClaimWaitingGivesBackAnotherProcess(t *testing.T) {
	const id, later = 7, 7 | 1<<32 // the same slot, the next generation
	claim := stRunning | 1<<workerShift | 5<<runShift
	for _, st := range []uint64{stIdle, stBlocked} {
		p := new(proc)
		p.id.Store(later)
		p.state.Store(st)
		woken, claimed, gaveBack := p.claimWaiting(id, claim)
		require.False(t, claimed, "claimed the later process")
		require.True(t, gaveBack, "the later process not reported given back")
		require.Zero(t, woken, "queued a process that got no event")
		require.Equal(t, st, p.state.Load(), "the later process's state")

		woken, claimed, gaveBack = p.claimWaiting(later, claim)
		require.True(t, claimed, "the process looked up, waiting, is claimed")
		require.False(t, gaveBack)
		require.Equal(t, st, woken)
		require.Equal(t, claim, p.state.Load())
	}
	for _, st := range []uint64{stReady, stRunning | 2<<workerShift, stEnded} {
		p := new(proc)
		p.id.Store(id)
		p.state.Store(st)
		_, claimed, gaveBack := p.claimWaiting(id, claim)
		require.False(t, claimed || gaveBack, "state %#x", st)
		require.Equal(t, st, p.state.Load())
	}
}

// TestEvictedMessageAfterTheStop: a message that a full mailbox evicted
// goes back to its sender; when the scheduler has stopped by then (the
// eviction raced the end of a Shutdown), the sender is gone, and the
// message, which the scheduler accepted, must still get a fate: a dead
// letter, not nothing.
func TestEvictedMessageAfterTheStop(t *testing.T) {
	var dead []DeadLetter
	s := newScheduler(t, WithHooks(Hooks{DeadLetter: func(d DeadLetter) { dead = append(dead, d) }}))
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	require.NoError(t, s.Shutdown(ctx))
	sender := relay.PID{Node: s.node, ID: 7}
	evicted := relay.Message{From: relay.PID{Node: s.node, ID: 8}, To: sender, Data: "evicted", Err: ErrDropped}
	s.bounce(evicted, via{})
	require.Len(t, dead, 1, "dead letters")
	require.Equal(t, DeadBounce, dead[0].Reason)
	require.Equal(t, "evicted", dead[0].Message.Data)
	require.ErrorIs(t, s.returned(evicted, via{}), ErrClosed, "a transport's return after the stop is the caller's")
	require.Len(t, dead, 1, "dead letters after a returned message was refused")
}
