package scheduler

import (
	"testing"

	"github.com/stretchr/testify/require"
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
			if _, _, _, err := p.pushMessage(&Event{Type: EventMessage, Data: msg}, mailboxLimit{}, false); err != nil {
				t.Fatal(err)
			}
		}
		dst = p.drain(dst[:0])
		if len(dst) != burst {
			t.Fatalf("drained %d events, want %d", len(dst), burst)
		}
		if !p.bigInbox {
			t.Fatalf("a buffer of %d events is not marked big", cap(p.inbox))
		}
		p.shrinkInbox() // the process goes waiting
		p.state.Store(stIdle)
	}
	cycle() // the first burst grows the buffer by doublings
	require.Nil(t, p.inbox, "the buffer of a passed burst is let go when the process waits")
	allocs := testing.AllocsPerRun(20, cycle)
	require.LessOrEqual(t, allocs, 2.0, "allocations per burst of %d messages after the first", burst)
}
