package scheduler

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// Tests of where the hooks run (hooks.go), which look at the goroutines
// the scheduler counts as its own.

// TestEndHookGoroutineOfForcedProcesses: the End hook of a process forced
// at a shutdown deadline runs on the scheduler's goroutine that carries
// the shutdown through for a process that was waiting at the deadline,
// and on the worker that ran the step in progress then for one that was
// running, once that step returns.
func TestEndHookGoroutineOfForcedProcesses(t *testing.T) {
	var mu sync.Mutex
	ends := map[relay.PID]uint64{} // the goroutine each End hook ran on
	s := newScheduler(t, WithWorkers(2), WithHooks(Hooks{End: func(e EndInfo) {
		mu.Lock()
		ends[e.PID] = goroutineID()
		mu.Unlock()
	}}))
	ignores := stepFunc(func([]Event, *StepOutput) error { return nil })
	waiting, err := s.Submit(context.Background(), ignores, "waiting", nil)
	require.NoError(t, err)
	entered, released := make(chan struct{}), make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(released) }) }
	t.Cleanup(release)
	var stepG uint64 // the goroutine of the held step
	running, err := s.Submit(context.Background(), numbered(func(n int, _ []Event, _ *StepOutput) error {
		if n == 0 {
			stepG = goroutineID()
			close(entered)
			<-released
		}
		return nil // ignores its cancel
	}), "running", nil)
	require.NoError(t, err)
	receive(t, entered, "the held step")
	eventually(t, "the waiting process to wait", func() bool {
		return waiting.p.state.Load()&stateMask == stIdle
	})

	ctx, cancel := context.WithCancel(context.Background())
	cancel() // force at once
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(ctx) }()
	require.ErrorIs(t, waitEnd(t, waiting), ErrForced)
	release()
	require.ErrorIs(t, receive(t, shut, "Shutdown"), ErrForced)
	require.ErrorIs(t, waitEnd(t, running), ErrForced)

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, ends, 2)
	require.Equal(t, stepG, ends[running.PID()], "the End hook of the process forced as its step returned")
	s.sd.ownMu.Lock()
	own := slices.Clone(s.sd.own)
	s.sd.ownMu.Unlock()
	require.Contains(t, own, ends[waiting.PID()], "the End hook of the waiting process ran on a goroutine not the scheduler's")
	require.NotEqual(t, stepG, ends[waiting.PID()])
}

// closePanics is a process that ignores its events and panics in Close.
type closePanics struct{ stepOnly }

func (closePanics) Step([]Event, *StepOutput) error { return nil }
func (closePanics) Close()                          { panic("in Close") }

// TestPanicHookGoroutineOfForcedClose: the Panic hook for a panic in the
// Close of a process forced at a shutdown deadline runs on the
// scheduler's goroutine that carries the shutdown through, as the End
// hook of such a process does, not on the goroutine that called
// Shutdown.
func TestPanicHookGoroutineOfForcedClose(t *testing.T) {
	panics := make(chan uint64, 1) // the goroutine the Panic hook ran on
	s := newScheduler(t, WithHooks(Hooks{Panic: func(i PanicInfo) {
		if i.Err.Where == "Close" {
			panics <- goroutineID()
		}
	}}))
	h, err := s.Submit(context.Background(), closePanics{}, "waiting", nil)
	require.NoError(t, err)
	eventually(t, "the process to wait", func() bool {
		return h.p.state.Load()&stateMask == stIdle
	})

	ctx, cancel := context.WithCancel(context.Background())
	cancel() // force at once
	shut := make(chan error, 1)
	var shutG uint64
	shutGot := make(chan struct{})
	go func() {
		shutG = goroutineID()
		close(shutGot)
		shut <- s.Shutdown(ctx)
	}()
	require.ErrorIs(t, receive(t, shut, "Shutdown"), ErrForced)
	<-shutGot
	g := receive(t, panics, "the Panic hook for the forced process's Close")
	require.ErrorIs(t, waitEnd(t, h), ErrForced)
	require.NotEqual(t, shutG, g, "the Panic hook ran on the goroutine that called Shutdown")
	s.sd.ownMu.Lock()
	own := slices.Clone(s.sd.own)
	s.sd.ownMu.Unlock()
	require.Contains(t, own, g, "the Panic hook ran on a goroutine not the scheduler's")
}

// TestStartAndDeadLetterHookGoroutines: the Start hook runs on the
// goroutine that called Submit or Spawn (which runs Init as Submit
// does), and on the worker that carried out a step's spawn; its
// StartInfo names the method. The DeadLetter hook runs on the goroutine
// that found the message dead: the sender, for a message a full mailbox
// dropped, and the worker that ended the recipient, for one left unread.
func TestStartAndDeadLetterHookGoroutines(t *testing.T) {
	type call struct {
		pid    relay.PID
		method string
		g      uint64
	}
	var (
		mu      sync.Mutex
		starts  []call
		letters = map[DeadLetterReason][]uint64{}
	)
	s := newScheduler(t, WithWorkers(1), WithHooks(Hooks{
		Start: func(i StartInfo) {
			mu.Lock()
			starts = append(starts, call{i.PID, i.Method, goroutineID()})
			mu.Unlock()
		},
		DeadLetter: func(d DeadLetter) {
			mu.Lock()
			letters[d.Reason] = append(letters[d.Reason], goroutineID())
			mu.Unlock()
		},
	}))
	me := goroutineID()
	ctx := context.Background()
	ignores := stepFunc(func(evs []Event, out *StepOutput) error { // until cancelled
		for _, ev := range evs {
			if ev.Type == EventCancel {
				out.Done(payload.Payload{})
			}
		}
		return nil
	})

	submitted, err := s.Submit(ctx, ignores, "alpha", nil)
	require.NoError(t, err)
	spawned, err := s.Spawn(ctx, ignores, "beta", nil)
	require.NoError(t, err)

	// A parent on the only worker spawns a child, then holds its step
	// while a second message to its mailbox of one drops the first, and
	// ends with the second unread.
	gate := make(chan struct{})
	var stepG uint64
	childPID := make(chan relay.PID, 1)
	parent, err := s.Submit(ctx, numbered(func(n int, evs []Event, out *StepOutput) error {
		switch n {
		case 0:
			out.Spawn(1, ignores, "gamma", nil)
			return nil
		default:
			for _, ev := range evs {
				if ev.Type != EventYieldComplete || ev.Tag != 1 {
					continue
				}
				childPID <- ev.From
				stepG = goroutineID()
				<-gate
				out.Done(payload.Payload{})
			}
			return nil
		}
	}), "parent", nil, Mailbox(1, MailboxDropOldest))
	require.NoError(t, err)
	child := receive(t, childPID, "the spawned child")
	require.NoError(t, s.Tell(parent.PID(), "dropped"))
	require.NoError(t, s.Tell(parent.PID(), "kept, unread"))
	close(gate)
	require.NoError(t, waitEnd(t, parent))

	mu.Lock()
	defer mu.Unlock()
	byPID := map[relay.PID]call{}
	for _, c := range starts {
		byPID[c.pid] = c
	}
	require.Equal(t, call{submitted.PID(), "alpha", me}, byPID[submitted.PID()], "Start of a submitted process: on Submit's caller")
	require.Equal(t, call{spawned, "beta", me}, byPID[spawned], "Start of a process from Scheduler.Spawn: on Spawn's caller")
	require.Equal(t, call{child, "gamma", stepG}, byPID[child], "Start of a step's child: on the worker that ran the step")
	require.Equal(t, []uint64{me}, letters[DeadDropped], "a message a full mailbox dropped: on the sender")
	require.Equal(t, []uint64{stepG}, letters[DeadUnread], "a message left unread: on the worker that ended the recipient")
}
