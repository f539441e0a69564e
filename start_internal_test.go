package scheduler

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/procsched/scheduler/payload"
)

// TestOutsideStartsYieldToABacklog checks when a caller outside the
// workers yields its processor as it starts processes (see yieldBacklog):
// never while fewer than yieldBacklog processes wait on the global queue
// before its own, and then once every yieldEvery starts at most. The one
// worker is held in a step, so that every start waits on the global
// queue and the backlog is what the test made it.
func TestOutsideStartsYieldToABacklog(t *testing.T) {
	s := newScheduler(t, WithWorkers(1), WithWatchdog(0))
	var yields atomic.Int64
	hook := func(y *Scheduler) {
		if y == s {
			yields.Add(1)
		}
	}
	testHookYield.Store(&hook)
	defer testHookYield.Store(nil)

	release := holdWorker(t, s)

	var ended atomic.Int64
	leaf := stepFunc(func(_ []Event, out *StepOutput) error {
		ended.Add(1)
		out.Done(payload.Payload{})
		return nil
	})
	spawn := func(n int) {
		t.Helper()
		for range n {
			_, err := s.Spawn(context.Background(), leaf, "leaf", nil)
			require.NoError(t, err)
		}
	}

	const few = yieldBacklog - 24
	spawn(few)
	require.Zero(t, yields.Load(), "yields with %d processes queued, fewer than %d", few, yieldBacklog)

	const many = manyStarts
	spawn(many)
	n := yields.Load()
	require.Positive(t, n, "no yield after %d starts with the worker held", few+many)
	require.LessOrEqual(t, n, int64(many/yieldEvery+1), "yields: more than one per %d starts", yieldEvery)

	release()
	eventually(t, "every queued process ended", func() bool { return ended.Load() == few+many })
}

// shutdownInInit is a process whose Init begins a Shutdown of its
// scheduler and returns only once Shutdown has walked the table past the
// process's slot, so that the process is published after the walk that
// cancels what runs: its Init first spawns a witness, whose slot comes
// after its own (the table hands out a stripe's slots lowest first, and
// a fresh stripe takes slots above every slot handed out), and waits for
// the witness's cancel, which the walk delivers. Its step ends it only on
// the cancel that Shutdown owes it.
type shutdownInInit struct {
	s         *Scheduler
	shut      chan error
	cancelled atomic.Bool
}

func (p *shutdownInInit) Init(ctx context.Context, _ string, _ payload.Payloads) error {
	self, ok := Self(ctx)
	if !ok {
		return errors.New("no PID in the process context")
	}
	witnessed := make(chan struct{})
	witness, err := p.s.Spawn(context.Background(), stepFunc(func(evs []Event, out *StepOutput) error {
		for _, ev := range evs {
			if ev.Type == EventCancel {
				close(witnessed)
				out.Done(payload.Payload{})
			}
		}
		return nil
	}), "witness", nil)
	if err != nil {
		return err
	}
	if slotOf(witness.ID) <= slotOf(self.ID) {
		return fmt.Errorf("the witness's slot %d does not come after the process's %d", slotOf(witness.ID), slotOf(self.ID))
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		p.shut <- p.s.Shutdown(ctx)
	}()
	select {
	case <-witnessed:
		return nil
	case <-time.After(testTimeout):
		return fmt.Errorf("the witness got no cancel within %v: Shutdown's walk never reached it", testTimeout)
	}
}

func (p *shutdownInInit) Step(evs []Event, out *StepOutput) error {
	for _, ev := range evs {
		if ev.Type == EventCancel {
			p.cancelled.Store(true)
			out.Done(payload.Payload{})
		}
	}
	return nil
}

func (p *shutdownInInit) Close() {}

// TestStartPublishedAfterShutdownBeganIsCancelled checks that a process
// admitted before a Shutdown began, and published after Shutdown walked
// the table to cancel what runs, gets its cancel all the same, on each
// way a start from outside the workers takes: Spawn and Submit without
// options, and Submit with one. Without it, Shutdown would wait for a
// process that nothing ends until the deadline forces it.
func TestStartPublishedAfterShutdownBeganIsCancelled(t *testing.T) {
	starts := map[string]func(s *Scheduler, p Process) error{
		"Spawn": func(s *Scheduler, p Process) error {
			_, err := s.Spawn(context.Background(), p, "run", nil)
			return err
		},
		"Submit": func(s *Scheduler, p Process) error {
			_, err := s.Submit(context.Background(), p, "run", nil)
			return err
		},
		"Submit with an option": func(s *Scheduler, p Process) error {
			_, err := s.Submit(context.Background(), p, "run", nil, Mailbox(8, MailboxReject))
			return err
		},
	}
	for name, start := range starts {
		t.Run(name, func(t *testing.T) {
			s := newScheduler(t)
			p := &shutdownInInit{s: s, shut: make(chan error, 1)}
			require.NoError(t, start(s, p))
			require.NoError(t, receive(t, p.shut, "the Shutdown begun in Init"), "Shutdown waited for the process to its deadline")
			require.True(t, p.cancelled.Load(), "the process ended without its cancel")
		})
	}
}

// TestStartHookComesBeforeAForcedEnd checks that a process whose Start
// hook is still running when a shutdown deadline forces what is alive
// is not forced before the hook has returned: its End hook (and its
// Close) come after its Start hook, and Shutdown waits for the hook and
// then forces the process. The stopper's walk of the table is made
// here too, as the stopper makes it, once the deadline has passed:
// without the rule, that walk finds the process published, and ends it
// under the running hook.
func TestStartHookComesBeforeAForcedEnd(t *testing.T) {
	inStart, release := make(chan struct{}), make(chan struct{})
	var startReturned, endBeforeStart atomic.Bool
	ended := make(chan EndInfo, 1)
	s := newScheduler(t, WithHooks(Hooks{
		Start: func(StartInfo) {
			close(inStart)
			<-release
			startReturned.Store(true)
		},
		End: func(e EndInfo) {
			if !startReturned.Load() {
				endBeforeStart.Store(true)
			}
			ended <- e
		},
	}))
	var closes atomic.Int32
	p := &closeCounter{closes: &closes}
	submitted := make(chan Handle, 1)
	go func() {
		h, err := s.Submit(context.Background(), p, "run", nil)
		if err != nil {
			t.Errorf("Submit: %v", err)
		}
		submitted <- h
	}()
	receive(t, inStart, "the Start hook")

	done, cancel := context.WithCancel(context.Background())
	cancel()
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(done) }()
	eventually(t, "the shutdown deadline to force", s.forcing)
	s.table.forEach(s.tryForce) // as the stopper does at the deadline
	select {
	case e := <-ended:
		close(release)
		t.Fatalf("the process was forced (End hook %+v) while its Start hook ran", e)
	case err := <-shut:
		close(release)
		t.Fatalf("Shutdown returned %v while a Start hook ran", err)
	default:
	}
	require.Zero(t, closes.Load(), "Close ran while the Start hook ran")

	close(release)
	h := receive(t, submitted, "Submit")
	require.ErrorIs(t, receive(t, shut, "Shutdown"), ErrForced)
	require.ErrorIs(t, waitEnd(t, h), ErrForced)
	e := receive(t, ended, "the End hook")
	require.True(t, e.Forced)
	require.False(t, endBeforeStart.Load(), "End hook before the Start hook returned")
	require.Equal(t, int32(1), closes.Load(), "Close calls")
}

// closeCounter is a process that waits for events, ignoring its
// cancel, and counts its Close calls.
type closeCounter struct{ closes *atomic.Int32 }

func (closeCounter) Init(context.Context, string, payload.Payloads) error { return nil }
func (closeCounter) Step([]Event, *StepOutput) error                      { return nil }
func (c closeCounter) Close()                                             { c.closes.Add(1) }
