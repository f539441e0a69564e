package scheduler

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// fifoMsg is a message for the process to, from sender (0: a stale
// sender), numbered seq.
type fifoMsg struct {
	to     relay.PID
	sender int
	seq    int
}

// TestReuseFIFOWhileStaleSendersHammer: on one worker, a parent
// awaits children one after another, each taking the record of the one
// before. Two goroutines send each child its own numbered messages while
// others keep sending to the PIDs of every child that has ended, whose
// records serve the later ones. Every send to an ended child must be
// refused with ErrProcessNotFound, and each child must read exactly its
// own messages, every one, once, in each sender's order.
func TestReuseFIFOWhileStaleSendersHammer(t *testing.T) {
	const children, perSender, senders, stale = 40, 300, 2, 2
	v := &reuseViolations{}
	s := newScheduler(t, WithWorkers(1))
	pids := make(chan relay.PID, children)
	ctxs := make([]context.Context, children)
	var staleAccepted, staleRefused atomic.Int64
	var read [children]atomic.Int64 // each child's messages read so far
	var endedPIDs struct {
		sync.Mutex
		list []relay.PID
	}
	child := func(k int) Process {
		var self relay.PID
		next := [senders + 1]int{}
		got := 0
		return &reuseProc{
			init: func(ctx context.Context) error {
				ctxs[k] = ctx
				self, _ = Self(ctx)
				return nil
			},
			step: func(n int, evs []Event, out *StepOutput) error {
				if n == 0 {
					// From the first step, not Init: the process is
					// published once Init returns, and a Tell before
					// that is refused.
					pids <- self
				}
				for _, ev := range evs {
					m, ok := ev.Data.(fifoMsg)
					if !ok || m.to != self || m.sender == 0 {
						v.addf("child %d (%v) read %v", k, self, ev.Data)
						continue
					}
					if m.seq != next[m.sender] {
						v.addf("child %d: message %d of sender %d, want %d", k, m.seq, m.sender, next[m.sender])
					}
					next[m.sender] = m.seq + 1
					got++
					read[k].Store(int64(got))
				}
				if got == senders*perSender {
					out.Done(payload.Payload{})
				}
				return nil
			},
		}
	}
	parent := numbered(func(n int, evs []Event, out *StepOutput) error {
		for _, ev := range evs {
			if ev.Error != nil {
				v.addf("child failed: %v", ev.Error)
			}
		}
		if n < children {
			out.SpawnAwait(uint64(n+1), child(n), "fifo", nil)
		} else {
			out.Done(payload.Payload{})
		}
		return nil
	})
	stop := make(chan struct{})
	var hammer sync.WaitGroup
	for range stale {
		hammer.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				runtime.Gosched() // spare the worker on a machine with few processors
				endedPIDs.Lock()
				n := len(endedPIDs.list)
				var to relay.PID
				if n > 0 {
					to = endedPIDs.list[i%n]
				}
				endedPIDs.Unlock()
				if n == 0 {
					continue
				}
				switch err := s.Tell(to, fifoMsg{to: to}); {
				case err == nil:
					staleAccepted.Add(1)
					v.addf("a Tell to the ended %v was accepted", to)
				case errors.Is(err, ErrProcessNotFound):
					staleRefused.Add(1)
				default:
					v.addf("Tell(%v): %v", to, err)
				}
			}
		})
	}
	h, err := s.Submit(context.Background(), parent, "run", nil)
	require.NoError(t, err)
	for k := range children {
		pid := receive(t, pids, "a child's PID")
		var wg sync.WaitGroup
		for sender := 1; sender <= senders; sender++ {
			wg.Go(func() {
				for seq := range perSender {
					if err := s.Tell(pid, fifoMsg{to: pid, sender: sender, seq: seq}); err != nil {
						v.addf("Tell(%v) to child %d, live: %v", pid, k, err)
					}
				}
			})
		}
		wg.Wait()
		// The child ends once it has read them all; it is ended when the
		// next child starts (or the parent ends).
		if k+1 < children {
			var next relay.PID
			select {
			case next = <-pids:
			case <-time.After(testTimeout):
				// Said before failing: what the child had read, the
				// scheduler's Stats, whether the child ends given much
				// longer (a worker starved of its processor) or never (a
				// message or wake-up lost), and what the test recorded
				// as wrong so far.
				atTimeout, stats := read[k].Load(), s.Stats()
				late := "it had not ended a minute later either"
				select {
				case <-pids:
					late = "it ended later, within a minute"
				case <-time.After(time.Minute):
				}
				v.check(t)
				t.Fatalf("child %d (%v) has not ended within %v: it read %d of %d messages (%d in the end); %s; Stats at the timeout %+v",
					k, pid, testTimeout, atTimeout, senders*perSender, read[k].Load(), late, stats)
			}
			endedPIDs.Lock()
			endedPIDs.list = append(endedPIDs.list, pid)
			endedPIDs.Unlock()
			pids <- next // hand it back to the loop (the channel has room)
		}
	}
	require.NoError(t, waitEnd(t, h))
	close(stop)
	hammer.Wait()
	v.check(t)
	records := map[*proc]int{}
	for _, ctx := range ctxs {
		p, _ := spawnedCtx(t, ctx, false)
		records[p]++
	}
	t.Logf("%d children on %d records; stale sends: %d refused, %d accepted", children, len(records), staleRefused.Load(), staleAccepted.Load())
	require.Less(t, len(records), children/2, "too little reuse to test anything")
	require.Positive(t, staleRefused.Load())
}
