package spin

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// hangTimeout bounds every wait in these tests. It only detects a hang (a
// lost wakeup); nothing waits for it to pass when the code is correct.
const hangTimeout = 30 * time.Second

// waitClosed fails the test if done is not closed within hangTimeout.
func waitClosed(t *testing.T, done <-chan struct{}, format string, args ...any) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(hangTimeout):
		require.FailNow(t, "hang: "+fmt.Sprintf(format, args...))
	}
}

// runWithin runs f on a new goroutine and fails the test if it has not
// returned within hangTimeout.
func runWithin(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	waitClosed(t, done, "%s did not return", what)
}

func TestUnparkBeforeParkReturnsImmediately(t *testing.T) {
	var p Parker
	p.Unpark()
	require.Equal(t, stateNotified, p.state.Load())
	runWithin(t, "Park after Unpark", p.Park)
	require.Equal(t, stateEmpty, p.state.Load(), "Park must consume the token")
}

// TestUnparkBetweenCheckAndAnnounce places an Unpark in the window between
// Park's failed attempt to take a token and its announcement that it parks.
// Park must see the token, consume it and return without blocking.
func TestUnparkBetweenCheckAndAnnounce(t *testing.T) {
	var p Parker
	hookRan := false
	testHookBeforeAnnounce = func() {
		hookRan = true
		p.Unpark()
	}
	t.Cleanup(func() { testHookBeforeAnnounce = nil })

	runWithin(t, "Park with an Unpark before its announcement", p.Park)
	require.True(t, hookRan, "the hook must run: Park took the blocking path")
	require.Equal(t, stateEmpty, p.state.Load(), "Park must consume the token it found")
	require.Empty(t, p.wake, "no wakeup may be left in the channel")
}

func TestUnparkNotParkedUsesNoChannel(t *testing.T) {
	var p Parker
	allocs := testing.AllocsPerRun(100, p.Unpark)
	require.Zero(t, allocs, "Unpark of a Parker that is not parked allocates")
	require.Nil(t, p.wake, "Unpark of a Parker that never parked must not touch a channel")
	require.Equal(t, stateNotified, p.state.Load())
}

func TestUnparksCollapseToOneToken(t *testing.T) {
	for _, unparks := range []int{1, 2, 5} {
		t.Run(fmt.Sprintf("%d unparks", unparks), func(t *testing.T) {
			var p Parker
			for range unparks {
				p.Unpark()
			}
			runWithin(t, "first Park after Unparks", p.Park)

			// The second Park has no token: it must reach the parked state
			// and stay blocked until a further Unpark.
			returned := make(chan struct{})
			go func() {
				defer close(returned)
				p.Park()
			}()
			deadline := time.Now().Add(hangTimeout)
			for p.state.Load() != stateParked {
				select {
				case <-returned:
					require.FailNow(t, "second Park returned without a token",
						"%d Unparks produced more than one token", unparks)
				default:
				}
				require.True(t, time.Now().Before(deadline), "second Park never parked")
				runtime.Gosched()
			}
			// The owner is parked: only a send on wake can release it, and
			// nothing has been sent.
			select {
			case <-returned:
				require.FailNow(t, "Park returned while parked with no token")
			default:
			}
			p.Unpark()
			waitClosed(t, returned, "Unpark did not wake the parked owner")
			require.Equal(t, stateEmpty, p.state.Load())
			require.Empty(t, p.wake, "the wake channel must be drained")
		})
	}
}

// TestParkUnparkRace races one Unpark against each Park, thousands of times.
// Each Unpark is issued only after the previous Park returned, so every Park
// needs exactly its own Unpark: a lost wakeup hangs the owner.
func TestParkUnparkRace(t *testing.T) {
	tests := []struct {
		name        string
		ownerYields bool // owner yields before Park: Unpark tends to come first
	}{
		{"park tends to come first", false},
		{"unpark tends to come first", true},
	}
	n := 50000 * stressScale
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p Parker
			var parks atomic.Int64 // Parks completed; orders Unpark i after Park i-1
			var sawParked int      // Unparks that found the owner blocked
			ownerDone := make(chan struct{})
			unparkerDone := make(chan struct{})
			go func() {
				defer close(unparkerDone)
				for i := range n {
					for parks.Load() < int64(i) {
						runtime.Gosched()
					}
					if p.state.Load() == stateParked {
						sawParked++
					}
					p.Unpark()
				}
			}()
			go func() {
				defer close(ownerDone)
				for range n {
					if tt.ownerYields {
						runtime.Gosched()
					}
					p.Park()
					parks.Add(1)
				}
			}()
			waitClosed(t, ownerDone, "owner stuck in Park after %d of %d rounds (lost wakeup)", parks.Load(), n)
			waitClosed(t, unparkerDone, "unparker did not finish")
			require.Equal(t, int64(n), parks.Load())
			require.Equal(t, stateEmpty, p.state.Load(), "every token must have been consumed")
			require.Empty(t, p.wake)
			t.Logf("%d of %d Unparks found the owner parked", sawParked, n)
		})
	}
}

// TestParkerWorkAnnouncement is the pattern the scheduler uses: producers
// publish work and then Unpark; the owner checks for work and parks only when
// it sees none. Every item must be seen: a wakeup lost between the owner's
// check and its Park hangs the test.
func TestParkerWorkAnnouncement(t *testing.T) {
	const producers = 4
	perProducer := 5000 * stressScale
	total := int64(producers * perProducer)

	var p Parker
	var produced atomic.Int64
	var wg sync.WaitGroup
	for range producers {
		wg.Go(func() {
			for range perProducer {
				produced.Add(1)
				p.Unpark()
			}
		})
	}
	var consumed, parks int64
	ownerDone := make(chan struct{})
	go func() {
		defer close(ownerDone)
		for consumed < total {
			if produced.Load() > consumed {
				consumed++
				continue
			}
			parks++
			p.Park()
		}
	}()
	waitClosed(t, ownerDone, "owner parked with work pending: lost wakeup")
	wg.Wait()
	require.Equal(t, total, consumed)
	t.Logf("owner parked %d times for %d items", parks, total)
}

func BenchmarkUnparkNotParked(b *testing.B) {
	var p Parker
	for b.Loop() {
		p.Unpark()
	}
}

// BenchmarkParkUnparkPingPong measures one round trip: wake a parked partner
// and park until it wakes us back.
func BenchmarkParkUnparkPingPong(b *testing.B) {
	var mine, partner Parker
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			partner.Park()
			if stop.Load() {
				return
			}
			mine.Unpark()
		}
	}()
	for b.Loop() {
		partner.Unpark()
		mine.Park()
	}
	stop.Store(true)
	partner.Unpark()
	<-done
}
