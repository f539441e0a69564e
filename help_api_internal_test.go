package scheduler

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// Tests of WithCallerHelp with the rest of the API: what the tests in
// help_internal_test.go and stress_help_test.go do not do on a helping
// caller (handlers and the blocking pool, timers and deadlines,
// requests, names, monitors, termination, hooks, the process limit,
// re-entrant starts, shutdown with a deadline, a panic a hook raises,
// starts through a StepOutput or a Call). Most hold the one worker
// (holdWorker) and starts manyStarts processes, so that the caller helps
// deterministically; what ran on the caller is counted by goroutine ID.

// helpedRuns starts n processes made by mk with Submit from the calling
// goroutine while the only worker of s is held, and returns their
// Handles. mk gets the helpedSteps its process is to embed, through which
// the processes count their first steps on the calling goroutine; it
// fails the test if none ran there.
func helpedRuns(t *testing.T, s *Scheduler, n int, mk func(i int, hs helpedSteps) Process) []Handle {
	t.Helper()
	caller := goroutineID()
	var onCaller atomic.Int64
	hs := make([]Handle, n)
	for i := range hs {
		h, err := s.Submit(context.Background(), mk(i, helpedSteps{caller: caller, onCaller: &onCaller}), "run", nil)
		require.NoError(t, err, "start %d", i)
		hs[i] = h
	}
	require.Positive(t, onCaller.Load(), "no process ran on the helping caller")
	return hs
}

// markCaller counts a step on the caller into onCaller.
func markCaller(caller uint64, onCaller *atomic.Int64) {
	if goroutineID() == caller {
		onCaller.Add(1)
	}
}

// helpedSteps, embedded in the processes helpedRuns starts, counts their
// steps, and their first steps on the goroutine caller into onCaller.
type helpedSteps struct {
	caller   uint64
	onCaller *atomic.Int64
	steps    int
}

// count counts a step and reports whether it is the process's first.
func (h *helpedSteps) count() (first bool) {
	h.steps++
	if h.steps == 1 {
		markCaller(h.caller, h.onCaller)
	}
	return h.steps == 1
}

// TestCallerHelpShutdownWaitsForHelper checks that Shutdown does not
// return while a helping caller still ends a process: the last live
// process ends on the caller, with an unread message, so that after its
// end is counted (which releases the shutdown's wait for the processes)
// the caller still has to report the dead letter (Hooks.DeadLetter, run
// on the caller) and announce the end to the process's Handle. On a
// worker, Shutdown waits for the worker goroutine; the helping caller is
// no goroutine of the scheduler's, so a Shutdown that only waits for its
// own goroutines returns while the caller is still in the middle of the
// end: the DeadLetter hook then runs after Shutdown returned, and the
// Handle of a process that Shutdown said had ended is not done.
//
// The hook waits (a bounded time, since a correct scheduler never lets
// it see the stop) for Shutdown to return: it records whether it did.
func TestCallerHelpShutdownWaitsForHelper(t *testing.T) {
	shutReturned := make(chan struct{})
	var hookSawStop atomic.Bool
	var hookRan atomic.Int32
	hooks := Hooks{DeadLetter: func(d DeadLetter) {
		if d.Message.Data != "unread" {
			return
		}
		hookRan.Add(1)
		select {
		case <-shutReturned:
			hookSawStop.Store(true)
		case <-time.After(2 * time.Second):
			// The expected case: Shutdown waits for this hook's caller.
		}
	}}
	s, err := New(WithWorkers(1), WithWatchdog(0), WithCallerHelp(), WithHooks(hooks))
	require.NoError(t, err)
	release := holdWorker(t, s)

	inStep, proceed := make(chan struct{}), make(chan struct{})
	caller := make(chan uint64, 1)
	victim := stepFunc(func(_ []Event, out *StepOutput) error {
		caller <- goroutineID()
		close(inStep)
		<-proceed // the test's stand-in for a step that takes a while
		out.Done(payload.Of(42))
		return nil
	})
	// The victim is the last process of the first help's first batch:
	// the processes before it in the batch have ended on the caller by
	// the time its step runs, and the caller takes no more until it
	// returns. Its first step gets no events, so the message stays unread.
	for range helpBatch - 1 {
		_, err := s.Spawn(context.Background(), leafProcess, "leaf", nil)
		require.NoError(t, err)
	}
	hv, err := s.Submit(context.Background(), victim, "victim", nil)
	require.NoError(t, err)
	require.NoError(t, s.Tell(hv.PID(), "unread"))

	starts := make(chan error, 1)
	starter := make(chan uint64, 1)
	go func() {
		starter <- goroutineID()
		for range manyStarts {
			if _, err := s.Spawn(context.Background(), leafProcess, "leaf", nil); err != nil {
				starts <- err
				return
			}
			select {
			case <-inStep:
				// The victim runs on this goroutine now, or on the worker:
				// stop starting, so that the rest is the worker's.
			default:
				continue
			}
			break
		}
		starts <- nil
	}()
	receive(t, inStep, "the victim's step")
	require.Equal(t, receive(t, starter, "the starter's ID"), receive(t, caller, "the victim's goroutine"),
		"the victim did not run on the helping caller")

	// Everything but the victim ends: the held worker's process and the
	// leaves, which the worker runs once released.
	release()
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		shut <- s.Shutdown(ctx)
	}()
	eventually(t, "the shutdown to begin and only the victim to be live", func() bool {
		return s.closing() && s.liveCount() == 1
	})
	close(proceed)
	err = receive(t, shut, "Shutdown")
	handleDone := false
	select {
	case <-hv.Done():
		handleDone = true
	default:
	}
	close(shutReturned)
	require.NoError(t, receive(t, starts, "the starts"))
	// Shutdown has returned: the victim's end must be complete.
	require.NoError(t, err, "Shutdown")
	require.True(t, handleDone, "Shutdown returned before the Handle of a process that ended on the helping caller reported its end")
	receive(t, hv.Done(), "the victim's end")
	require.False(t, hookSawStop.Load(), "the DeadLetter hook of a process ended by the helping caller was still running when Shutdown returned")
	res, err := waitResult(t, hv)
	require.NoError(t, err)
	v, err := payload.As[int](res)
	require.NoError(t, err)
	require.Equal(t, 42, v)
	require.Equal(t, int32(1), hookRan.Load(), "dead letters of the victim")
}

// cmdHelped is the user command of TestCallerHelpHandlersCompleteLater.
const cmdHelped = FirstUserCommand + 3

// yieldingProc yields cmdHelped with its index in its first step, with
// a deadline of a millisecond when i%4 == 3, and ends with the yield's
// data (an int), or -1 if the deadline passed first.
type yieldingProc struct {
	stepOnly
	i int
	helpedSteps
}

func (p *yieldingProc) Step(evs []Event, out *StepOutput) error {
	if p.count() {
		out.Yield(1, cmdHelped, p.i)
		if p.i%4 == 3 {
			out.Timeout(1, time.Millisecond)
		}
		return nil
	}
	for _, ev := range evs {
		if ev.Type != EventYieldComplete || ev.Tag != 1 {
			continue
		}
		if errors.Is(ev.Error, ErrTimeout) {
			out.Done(payload.Of(-1))
			return nil
		}
		if ev.Error != nil {
			return ev.Error
		}
		v, ok := ev.Data.(int)
		if !ok {
			return fmt.Errorf("process %d: completion data %v (%T)", p.i, ev.Data, ev.Data)
		}
		out.Done(payload.Of(v))
	}
	return nil
}

// TestCallerHelpHandlersCompleteLater checks yields of user commands
// whose handlers a helping caller runs right after the helped steps: a
// handler that completes the call at once (i%4 == 0, the process then
// steps again on the caller's structure), one that keeps the Completion
// for the test to complete once the helps are over (1), one that hands
// the work to the blocking pool, where it waits for a gate opened after
// the helps (2; or, on every sixteenth call, a goroutine that completes
// the Call itself half-way through the helps), and one whose yield has a deadline and is never
// completed (3: the deadline's timer, set by the helper, is in worker
// 0's shard). Every handler also starts a process with Call.Submit on
// every eighth call and checks that its Call.Context shows the deadline
// of a yield that has one. Every process must end with its index (-1 for
// the deadlines), and every child must run.
func TestCallerHelpHandlersCompleteLater(t *testing.T) {
	var mu sync.Mutex
	var kept []Completion
	gate, early := make(chan struct{}), make(chan struct{})
	var lateErr atomic.Pointer[error]
	var children, childRan atomic.Int64
	var badDeadline atomic.Int64
	handler := func(c Call) error {
		i := c.Arg.(int)
		if _, ok := c.Context().Deadline(); ok != (i%4 == 3) {
			badDeadline.Add(1)
		}
		if i%8 == 1 {
			if _, err := c.Submit(context.Background(), stepFunc(func(_ []Event, out *StepOutput) error {
				childRan.Add(1)
				out.Done(payload.Payload{})
				return nil
			}), "child", nil); err != nil {
				return err
			}
			children.Add(1)
		}
		switch i % 4 {
		case 0:
			return c.Complete(i, nil)
		case 1:
			mu.Lock()
			kept = append(kept, c.Completion())
			mu.Unlock()
		case 2:
			if i%16 == 6 {
				// Completed through the Call itself, from a goroutine of
				// its own, while the caller goes on helping: the Call names
				// the helper's structure, whose handoff is open whenever a
				// helped step's handler runs.
				go func() {
					select {
					case <-early:
					case <-time.After(testTimeout):
						err := fmt.Errorf("the starts never got half-way within %v", testTimeout)
						lateErr.Store(&err)
						return
					}
					if err := c.Complete(i, nil); err != nil {
						lateErr.Store(&err)
					}
				}()
				return nil
			}
			return c.Go(func(ctx context.Context) (any, error) {
				select {
				case <-gate:
				case <-ctx.Done():
					return nil, context.Cause(ctx)
				}
				return i, nil
			})
		}
		return nil
	}
	s := newScheduler(t, WithWorkers(1), WithWatchdog(0), WithCallerHelp(), WithHandler(cmdHelped, handler))
	// Opened half-way through the starts, and their helps, or by the
	// cleanup, before the Shutdown, if the test fails first.
	openEarly := sync.OnceFunc(func() { close(early) })
	t.Cleanup(openEarly)
	release := holdWorker(t, s)
	hs := helpedRuns(t, s, manyStarts, func(i int, hs helpedSteps) Process {
		if i == manyStarts/2 {
			openEarly()
		}
		return &yieldingProc{i: i, helpedSteps: hs}
	})
	release()
	// The processes the caller did not run reach their handlers on the
	// worker: wait for every kept Completion.
	eventually(t, "every kept Completion", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(kept) == manyStarts/4
	})
	mu.Lock()
	done := kept
	kept = nil
	mu.Unlock()
	// Completed after the helps, from this goroutine, with the index of
	// the process, found by its PID.
	byPID := make(map[relay.PID]int, len(hs))
	for i, h := range hs {
		byPID[h.PID()] = i
	}
	for _, c := range done {
		i, ok := byPID[c.PID()]
		require.True(t, ok, "a Completion of no process started here: %v", c.PID())
		require.NoError(t, c.Complete(i, nil), "completing process %d", i)
	}
	close(gate)
	for i, h := range hs {
		v := waitInt(t, h, i)
		want := i
		if i%4 == 3 {
			want = -1
		}
		require.Equal(t, want, v, "process %d's result", i)
	}
	eventually(t, "every child", func() bool { return childRan.Load() == children.Load() })
	require.Equal(t, int64(manyStarts/8), children.Load(), "children started by handlers")
	require.Zero(t, badDeadline.Load(), "handlers whose Call.Context showed the wrong deadline")
	if e := lateErr.Load(); e != nil {
		t.Fatalf("Call.Complete from a goroutine of the handler's: %v", *e)
	}
	require.Positive(t, s.Stats().Helped)
}

// helpTimedProc exercises timers and the step budget on a helping caller:
// i%3 == 0 sleeps a millisecond, 1 continues for three step budgets, 2
// sleeps an hour under a deadline of a millisecond (and then sleeps
// until a time already past). Each ends with its index.
type helpTimedProc struct {
	stepOnly
	i int
	helpedSteps
}

func (p *helpTimedProc) Step(evs []Event, out *StepOutput) error {
	p.count()
	switch p.i % 3 {
	case 0:
		if p.steps == 1 {
			out.Sleep(1, time.Millisecond)
			return nil
		}
		if len(evs) != 1 || evs[0].Tag != 1 || evs[0].Error != nil {
			return fmt.Errorf("process %d: events %v after a sleep", p.i, evs)
		}
	case 1:
		if len(evs) != 0 {
			return fmt.Errorf("process %d: events %v while continuing", p.i, evs)
		}
		if p.steps < 3*DefaultStepBudget {
			out.Continue()
			return nil
		}
	case 2:
		switch p.steps {
		case 1:
			out.Sleep(1, time.Hour)
			out.Timeout(1, time.Millisecond)
			return nil
		case 2:
			if len(evs) != 1 || !errors.Is(evs[0].Error, ErrTimeout) {
				return fmt.Errorf("process %d: events %v after a deadline", p.i, evs)
			}
			out.SleepUntil(2, time.Now().Add(-time.Second))
			return nil
		}
		if len(evs) != 1 || evs[0].Tag != 2 || evs[0].Error != nil {
			return fmt.Errorf("process %d: events %v after a past sleep", p.i, evs)
		}
	}
	out.Done(payload.Of(p.i))
	return nil
}

// TestCallerHelpTimersAndBudget checks timers set by steps a helping
// caller runs (in worker 0's shard, by the helper's sequence numbers),
// deadlines on them, and processes that continue past their step budget
// on the caller (requeued through the helper's later slot or the global
// queue): every process ends with its index, and no timer is left.
func TestCallerHelpTimersAndBudget(t *testing.T) {
	s := newScheduler(t, WithWorkers(1), WithWatchdog(0), WithCallerHelp())
	release := holdWorker(t, s)
	hs := helpedRuns(t, s, manyStarts, func(i int, hs helpedSteps) Process {
		return &helpTimedProc{i: i, helpedSteps: hs}
	})
	release()
	for i, h := range hs {
		v := waitInt(t, h, i)
		require.Equal(t, i, v, "process %d's result", i)
	}
	eventually(t, "no timer left", func() bool { return s.timers.pending() == 0 })
	st := s.Stats()
	require.Positive(t, st.Helped)
	require.Positive(t, st.Requeues, "no process used up its step budget")
}

// newReplier returns a process that answers every Request with twice its
// body (an int), ends at its cancel, and counts its steps on the
// goroutine caller into onCaller.
func newReplier(caller uint64, onCaller *atomic.Int64) Process {
	return stepFunc(func(evs []Event, out *StepOutput) error {
		markCaller(caller, onCaller)
		for _, ev := range evs {
			switch ev.Type {
			case EventCancel:
				out.Done(payload.Payload{})
				return nil
			case EventMessage:
				if req, ok := ev.Data.(Request); ok {
					out.Reply(req.ReplyTo, 2*req.Body.(int), nil)
				}
			}
		}
		return nil
	})
}

// askingProc asks the replier through a name (i%3 == 0) or its PID under
// a deadline of an hour (2), and ends with the answer; or (1) registers
// a name of its own from its step, tells itself its index through that
// name, and ends with the message.
type askingProc struct {
	stepOnly
	s  *Scheduler
	i  int
	to relay.PID
	helpedSteps
}

func (p *askingProc) Step(evs []Event, out *StepOutput) error {
	if p.count() {
		switch p.i % 3 {
		case 0:
			out.RequestName(1, "replier", p.i)
		case 1:
			name := fmt.Sprintf("asker-%d", p.i)
			if err := p.s.Register(name, out.Self()); err != nil {
				return err
			}
			out.TellName(name, p.i)
		case 2:
			out.Request(1, p.to, p.i)
			out.Timeout(1, time.Hour)
		}
		return nil
	}
	for _, ev := range evs {
		if ev.Error != nil {
			return fmt.Errorf("process %d: %v", p.i, ev)
		}
		switch {
		case ev.Type == EventYieldComplete && ev.Tag == 1 && p.i%3 != 1:
			out.Done(payload.Of(ev.Data.(int)))
		case ev.Type == EventMessage && p.i%3 == 1:
			out.Done(payload.Of(2 * ev.Data.(int)))
		}
	}
	return nil
}

// TestCallerHelpRequestsAndNames checks requests, replies and names
// through a helping caller: the replier, woken by requests from helped
// steps, is queued on the caller's structure and handed back, and must
// run in a later help; helped steps register names (a
// scheduler method called from a step on the caller) and tell through
// them. Every process ends with twice its index, and every name it
// registered is released at its end.
func TestCallerHelpRequestsAndNames(t *testing.T) {
	s := newScheduler(t, WithWorkers(1), WithWatchdog(0), WithCallerHelp())
	var replierOnCaller atomic.Int64
	r, err := s.Submit(context.Background(), newReplier(goroutineID(), &replierOnCaller), "replier", nil)
	require.NoError(t, err)
	require.NoError(t, s.Register("replier", r.PID()))
	release := holdWorker(t, s)
	hs := helpedRuns(t, s, manyStarts, func(i int, hs helpedSteps) Process {
		return &askingProc{s: s, i: i, to: r.PID(), helpedSteps: hs}
	})
	require.Positive(t, replierOnCaller.Load(), "the replier, woken by helped steps, never ran on the caller")
	release()
	for i, h := range hs {
		v := waitInt(t, h, i)
		require.Equal(t, 2*i, v, "process %d's result", i)
	}
	for i := 1; i < manyStarts; i += 3 {
		_, err := s.Lookup(fmt.Sprintf("asker-%d", i))
		require.ErrorIs(t, err, ErrNameNotFound, "the name of process %d, which ended", i)
	}
	require.NoError(t, s.Terminate(r.PID()))
	require.NoError(t, waitEnd(t, r))
}

// waitingProc waits for its cancel and ends with its index (i%3 == 1);
// or monitors target and ends with the exit's reason (0); or monitors a
// process that has ended and ends with the reason (2).
type waitingProc struct {
	stepOnly
	i      int
	target relay.PID
	gone   relay.PID
	helpedSteps
}

func (p *waitingProc) Step(evs []Event, out *StepOutput) error {
	if p.count() {
		switch p.i % 3 {
		case 0:
			out.Monitor(1, p.target)
		case 2:
			out.Monitor(1, p.gone)
		}
		// Events that came while it was queued (a Terminate) arrive in
		// its next step.
		return nil
	}
	for _, ev := range evs {
		switch {
		case ev.Type == EventCancel && p.i%3 == 1:
			out.Done(payload.Of(p.i))
		case ev.Type == EventYieldComplete && ev.Tag == 1:
			exit, ok := ev.Data.(Exit)
			if !ok {
				return fmt.Errorf("process %d: monitor completion %v", p.i, ev)
			}
			out.Done(payload.Of(int(exit.Reason)))
		}
	}
	return nil
}

// TestCallerHelpMonitorsAndTerminate checks monitors set by helped
// steps (on a live process, ended later by Terminate, and on one that
// has ended), Terminate of processes the caller ran and left waiting
// (and of those it never ran, whose cancel waits in their mailboxes),
// and Scheduler.Monitor from outside on each of those: every monitor
// reports how its process ended, once.
func TestCallerHelpMonitorsAndTerminate(t *testing.T) {
	s := newScheduler(t, WithWorkers(1), WithWatchdog(0), WithCallerHelp())
	gone, err := s.Submit(context.Background(), leafProcess, "gone", nil)
	require.NoError(t, err)
	require.NoError(t, waitEnd(t, gone))
	target, err := s.Submit(context.Background(), stepFunc(func(evs []Event, out *StepOutput) error {
		for _, ev := range evs {
			if ev.Type == EventCancel {
				out.Done(payload.Of("bye"))
			}
		}
		return nil
	}), "target", nil)
	require.NoError(t, err)
	release := holdWorker(t, s)
	hs := helpedRuns(t, s, manyStarts, func(i int, hs helpedSteps) Process {
		return &waitingProc{i: i, target: target.PID(), gone: gone.PID(), helpedSteps: hs}
	})
	// Watched from outside and terminated while the worker is still held:
	// those the caller ran wait Idle; the rest are queued.
	exits := make([]chan Exit, len(hs))
	for i := 1; i < len(hs); i += 3 {
		exits[i] = make(chan Exit, 2)
		ch := exits[i]
		s.Monitor(hs[i].PID(), func(e Exit) { ch <- e })
		require.NoError(t, s.Terminate(hs[i].PID()), "process %d", i)
	}
	release()
	require.NoError(t, s.Terminate(target.PID()))
	for i, h := range hs {
		v := waitInt(t, h, i)
		switch i % 3 {
		case 0:
			require.Equal(t, int(ExitTerminated), v, "process %d: the reason of the target's end", i)
		case 1:
			require.Equal(t, i, v, "process %d's result", i)
			e := receive(t, exits[i], fmt.Sprintf("the outside monitor of process %d", i))
			require.Equal(t, ExitTerminated, e.Reason, "process %d", i)
			require.ErrorIs(t, e.Err, ErrTerminated, "process %d", i)
			r, err := payload.As[int](e.Result)
			require.NoError(t, err)
			require.Equal(t, i, r, "process %d: the exit's result", i)
		case 2:
			require.Equal(t, int(ExitGone), v, "process %d: the reason for an ended process", i)
		}
	}
	for i := 1; i < len(hs); i += 3 {
		select {
		case e := <-exits[i]:
			t.Fatalf("process %d: a second exit %v", i, e)
		default:
		}
	}
}

// TestCallerHelpHooksAndLimit checks a helping caller under
// WithMaxProcesses and the Start and End hooks, which send Submit and
// Spawn down the general start path: its starts help as on the fast
// path; the processes it runs spawn awaited children one at a time (a
// limit turns spawn batches off), which the limit may refuse; the hooks
// run once per process, End on the caller for the processes it ended,
// and the number of live processes never exceeds the limit.
func TestCallerHelpHooksAndLimit(t *testing.T) {
	// Each limit is high enough for the global queue to grow the ring
	// whose pushes see yieldBacklog ahead of them (with limits up to
	// 3,000 the caller never came to a yield point, and its starts were
	// refused instead). At 4,200 the caller helps, then reaches the limit
	// and is refused from then on (a refused start comes to no yield
	// point); at 8,192 it helps throughout.
	for _, limit := range []int{4200, 8192} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) { testHooksAndLimit(t, limit) })
	}
}

func testHooksAndLimit(t *testing.T, limit int) {
	var mu sync.Mutex
	startedPIDs := make(map[relay.PID]int)
	endedPIDs := make(map[relay.PID]int)
	var endsOnCaller atomic.Int64
	var callerID atomic.Uint64
	var s *Scheduler
	var overLimit atomic.Int64
	hooks := Hooks{
		Start: func(si StartInfo) {
			mu.Lock()
			startedPIDs[si.PID]++
			mu.Unlock()
			if n := s.procs.Load(); n > int64(limit) {
				overLimit.Store(n)
			}
		},
		End: func(ei EndInfo) {
			mu.Lock()
			endedPIDs[ei.PID]++
			mu.Unlock()
			if goroutineID() == callerID.Load() {
				endsOnCaller.Add(1)
			}
		},
	}
	s = newScheduler(t, WithWorkers(1), WithWatchdog(0), WithCallerHelp(), WithHooks(hooks), WithMaxProcesses(limit))
	release := holdWorker(t, s)
	callerID.Store(goroutineID())
	var onCaller atomic.Int64
	var refusedChildren atomic.Int64
	accepted, refused := 0, 0
	var hs []Handle
	for i := range manyStarts {
		p := numbered(func(n int, evs []Event, out *StepOutput) error {
			if n == 0 {
				markCaller(callerID.Load(), &onCaller)
				if i%2 == 0 {
					out.Done(payload.Of(i))
					return nil
				}
				out.SpawnAwait(1, leafProcess, "child", nil)
				return nil
			}
			for _, ev := range evs {
				if ev.Type == EventYieldComplete && ev.Tag == 1 {
					if errors.Is(ev.Error, ErrTooManyProcesses) {
						refusedChildren.Add(1)
					} else if ev.Error != nil {
						return ev.Error
					}
					out.Done(payload.Of(i))
				}
			}
			return nil
		})
		h, err := s.Submit(context.Background(), p, "run", nil)
		if errors.Is(err, ErrTooManyProcesses) {
			refused++
			continue
		}
		require.NoError(t, err, "start %d", i)
		accepted++
		hs = append(hs, h)
	}
	require.Positive(t, onCaller.Load(), "no process ran on the helping caller")
	require.Positive(t, endsOnCaller.Load(), "no End hook ran on the helping caller")
	release()
	for _, h := range hs {
		_, err := waitResult(t, h)
		require.NoError(t, err, "process %v", h.PID())
	}
	eventually(t, "no process live", func() bool { return s.Stats().Processes.Live == 0 })
	require.Zero(t, overLimit.Load(), "live processes over the limit")
	mu.Lock()
	defer mu.Unlock()
	for pid, n := range startedPIDs {
		require.Equal(t, 1, n, "Start hooks of %v", pid)
		require.Equal(t, 1, endedPIDs[pid], "End hooks of %v", pid)
	}
	require.Equal(t, len(startedPIDs), len(endedPIDs), "processes that started and ended")
	t.Logf("accepted %d, refused %d, children refused %d, ran on the caller %d", accepted, refused, refusedChildren.Load(), onCaller.Load())
}

// TestCallerHelpReentrantStart checks a helped step that starts
// processes itself, with Spawn and Submit, on the caller's goroutine,
// which is outside the workers: those starts come to yield points
// too, and must not help again inside the help (the helper is one
// structure, busy running the step), nor lose the processes they start.
func TestCallerHelpReentrantStart(t *testing.T) {
	s := newScheduler(t, WithWorkers(1), WithWatchdog(0), WithCallerHelp())
	release := holdWorker(t, s)
	caller := goroutineID()
	var depth, maxDepth, onCaller, childRan, startErrs atomic.Int64
	child := stepFunc(func(_ []Event, out *StepOutput) error {
		childRan.Add(1)
		out.Done(payload.Payload{})
		return nil
	})
	const perStep = 4
	hs := make([]Handle, manyStarts)
	for i := range hs {
		var err error
		hs[i], err = s.Submit(context.Background(), stepFunc(func(_ []Event, out *StepOutput) error {
			if goroutineID() == caller {
				onCaller.Add(1)
				d := depth.Add(1)
				defer depth.Add(-1)
				for {
					m := maxDepth.Load()
					if d <= m || maxDepth.CompareAndSwap(m, d) {
						break
					}
				}
			}
			for k := range perStep {
				var err error
				if k%2 == 0 {
					_, err = s.Spawn(context.Background(), child, "child", nil)
				} else {
					_, err = s.Submit(context.Background(), child, "child", nil)
				}
				if err != nil {
					startErrs.Add(1)
				}
			}
			out.Done(payload.Of(i))
			return nil
		}), "parent", nil)
		require.NoError(t, err)
	}
	require.Positive(t, onCaller.Load(), "no step ran on the helping caller")
	release()
	for i, h := range hs {
		v := waitInt(t, h, i)
		require.Equal(t, i, v)
	}
	eventually(t, "every child", func() bool { return childRan.Load() == perStep*manyStarts })
	require.Zero(t, startErrs.Load(), "starts from helped steps that failed")
	require.Equal(t, int64(1), maxDepth.Load(), "helped steps ran inside a helped step on the caller")
}

// TestCallerHelpNotThroughStepsOrCalls checks that starts a step makes
// through its StepOutput, and a handler through its Call, never help,
// however far they run ahead of the workers. A step spawns manyStarts
// children, with the one worker busy in it; a handler hands its Call to
// a goroutine that submits manyStarts processes through it (so they go
// to the global queue, the handler having returned) while the one
// worker is held. None of the processes may run inside the step, or on
// that goroutine, as they would if it helped. (A step or handler that
// calls Submit or Spawn itself is a caller like any other: see
// WithCallerHelp.)
func TestCallerHelpNotThroughStepsOrCalls(t *testing.T) {
	const cmdStarts = FirstUserCommand + 4
	t.Run("StepOutput", func(t *testing.T) {
		var inside atomic.Bool
		var nested, ran atomic.Int64
		leaf := stepFunc(func(_ []Event, out *StepOutput) error {
			if inside.Load() {
				nested.Add(1)
			}
			ran.Add(1)
			out.Done(payload.Payload{})
			return nil
		})
		s := newScheduler(t, WithWorkers(1), WithWatchdog(0), WithCallerHelp())
		first := true
		h, err := s.Submit(context.Background(), stepFunc(func(_ []Event, out *StepOutput) error {
			if !first {
				out.Done(payload.Payload{})
				return nil
			}
			first = false
			inside.Store(true)
			defer inside.Store(false)
			for i := range manyStarts {
				out.Spawn(uint64(i), leaf, "leaf", nil)
			}
			out.Continue()
			return nil
		}), "starter", nil)
		require.NoError(t, err)
		require.NoError(t, waitEnd(t, h))
		eventually(t, "every child", func() bool { return ran.Load() == manyStarts })
		st := s.Stats()
		require.Zero(t, nested.Load(), "children run inside the step that spawned them (Helps %d, Helped %d)", st.Helps, st.Helped)
		require.Zero(t, st.Helps, "helps through a StepOutput")
	})
	t.Run("Call", func(t *testing.T) {
		var submitter atomic.Uint64
		var nested, ran atomic.Int64
		leaf := stepFunc(func(_ []Event, out *StepOutput) error {
			if goroutineID() == submitter.Load() {
				nested.Add(1)
			}
			ran.Add(1)
			out.Done(payload.Payload{})
			return nil
		})
		handled, held := make(chan struct{}), make(chan struct{})
		submitted := make(chan error, 1)
		handler := func(c Call) error {
			go func() {
				submitter.Store(goroutineID())
				select {
				case <-held:
				case <-time.After(testTimeout):
					submitted <- fmt.Errorf("not let go within %v", testTimeout)
					return
				}
				for range manyStarts {
					if _, err := c.Submit(context.Background(), leaf, "leaf", nil); err != nil {
						submitted <- err
						return
					}
				}
				submitted <- c.Complete(nil, nil)
			}()
			close(handled)
			return nil
		}
		s := newScheduler(t, WithWorkers(1), WithWatchdog(0), WithCallerHelp(), WithHandler(cmdStarts, handler))
		first := true
		h, err := s.Submit(context.Background(), stepFunc(func(_ []Event, out *StepOutput) error {
			if first {
				first = false
				out.Yield(1, cmdStarts, nil)
				return nil
			}
			out.Done(payload.Payload{}) // the Call's completion
			return nil
		}), "starter", nil)
		require.NoError(t, err)
		// Let go once the worker is held, or by the cleanup, before the
		// Shutdown, if the test fails first.
		letGo := sync.OnceFunc(func() { close(held) })
		t.Cleanup(letGo)
		receive(t, handled, "the handler")
		release := holdWorker(t, s)
		letGo()
		require.NoError(t, receive(t, submitted, "the Call's starts"))
		release()
		require.NoError(t, waitEnd(t, h))
		eventually(t, "every process", func() bool { return ran.Load() == manyStarts })
		st := s.Stats()
		require.Zero(t, nested.Load(), "processes run on the goroutine that submitted them through a Call (Helps %d, Helped %d)", st.Helps, st.Helped)
		require.Zero(t, st.Helps, "helps through a Call")
	})
}

// shutProc is a process of TestCallerHelpCallersForcedShutdown, of a
// kind chosen by its index: a leaf (i%5 == 0); one that ignores its
// cancel and waits for ever, to be forced (1); one that sleeps a
// millisecond, and ends at its cancel (2); a fork-join parent of two
// awaited leaves (3); one that yields a command nobody completes, and
// ignores its cancel (4). It counts its Inits and Closes.
type shutProc struct {
	i             int
	inits, closes atomic.Int32
	steps         int
}

func (p *shutProc) Init(context.Context, string, payload.Payloads) error {
	p.inits.Add(1)
	return nil
}

func (p *shutProc) Close() { p.closes.Add(1) }

func (p *shutProc) Step(evs []Event, out *StepOutput) error {
	p.steps++
	first := p.steps == 1
	switch p.i % 5 {
	case 0:
		out.Done(payload.Of(p.i))
	case 1:
		// Waits: its cancel is read and ignored.
	case 2:
		if first {
			out.Sleep(1, time.Millisecond)
			return nil
		}
		out.Done(payload.Of(p.i)) // its sleep's end or its cancel
	case 3:
		if first {
			out.SpawnAwait(1, leafProcess, "leaf", nil)
			out.SpawnAwait(2, leafProcess, "leaf", nil)
			return nil
		}
		for _, ev := range evs {
			if ev.Type == EventYieldComplete {
				p.steps += 100 // counts the children's ends
				if ev.Error != nil && !errors.Is(ev.Error, ErrClosed) {
					return ev.Error
				}
			}
		}
		if p.steps >= 200 {
			out.Done(payload.Of(p.i))
		}
	case 4:
		if first {
			out.Yield(1, cmdHelped, p.i)
		}
	}
	return nil
}

// TestCallerHelpCallersForcedShutdown runs three callers that start
// processes far ahead of the one worker, taking turns at helping, while
// a Shutdown with a short deadline forces the processes that ignore
// their cancel: those waiting in the callers' queues, those claimed on
// the helper's structure, and those the caller is running. Each started
// process must have its Init and Close called once, its Handle must
// report its end (ErrForced for those that ignore their cancel, their
// result or a refusal for the rest), and the callers must stop at
// ErrClosed.
func TestCallerHelpCallersForcedShutdown(t *testing.T) {
	s, err := New(WithWorkers(1), WithWatchdog(0), WithCallerHelp(),
		WithHandler(cmdHelped, func(Call) error { return nil }))
	require.NoError(t, err)
	release := holdWorker(t, s)
	const callers = 3
	perCaller := manyStarts / 4
	procs := make([][]*shutProc, callers)
	handles := make([][]Handle, callers)
	callerErrs := make([]error, callers)
	var wg, quarter sync.WaitGroup
	quarter.Add(callers)
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			counted := false
			defer func() {
				if !counted {
					quarter.Done()
				}
			}()
			for k := range perCaller {
				if k == perCaller/4 {
					counted = true
					quarter.Done()
				}
				p := &shutProc{i: c*perCaller + k}
				h, err := s.Submit(context.Background(), p, "run", nil)
				if err != nil {
					callerErrs[c] = err
					return
				}
				procs[c] = append(procs[c], p)
				handles[c] = append(handles[c], h)
			}
		}()
	}
	quarter.Wait()
	require.Positive(t, s.Stats().Helped, "no caller helped before the shutdown")
	release()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	serr := s.Shutdown(ctx)
	require.ErrorIs(t, serr, ErrForced, "Shutdown")
	wg.Wait()
	forced := 0
	for c := range callers {
		if callerErrs[c] != nil {
			require.ErrorIs(t, callerErrs[c], ErrClosed, "caller %d", c)
		}
		for k, h := range handles[c] {
			p := procs[c][k]
			res, err := waitResult(t, h)
			switch {
			case errors.Is(err, ErrForced):
				forced++
			case p.i%5 == 1 || p.i%5 == 4:
				t.Fatalf("process %d, which ignores its cancel, ended with %v, %v", p.i, res, err)
			default:
				require.NoError(t, err, "process %d", p.i)
				v, perr := payload.As[int](res)
				require.NoError(t, perr)
				require.Equal(t, p.i, v, "process %d's result", p.i)
			}
			require.Equal(t, int32(1), p.inits.Load(), "Inits of process %d", p.i)
			require.Equal(t, int32(1), p.closes.Load(), "Closes of process %d", p.i)
		}
	}
	require.Positive(t, forced, "no process forced")
	// Fork-join children, which have no Handle, may be forced too.
	require.GreaterOrEqual(t, s.Stats().Processes.Forced, uint64(forced), "Stats' forced processes")
	require.Zero(t, s.Stats().Processes.Live)
}

// TestCallerHelpForcedWhileHelping checks a shutdown deadline that
// passes while a caller helps: the caller is inside a step of the last
// process of its first batch (the gate) when the processes are forced.
// The steps before the gate in that batch woke receivers that ignore
// their cancel, which wait Ready on the helper's structure (next slot,
// queue) for the hand-back; the gate itself, its batch's other
// processes, and the receivers must each be forced once, with Close
// once, and the Shutdown must report it.
func TestCallerHelpForcedWhileHelping(t *testing.T) {
	s, err := New(WithWorkers(1), WithWatchdog(0), WithCallerHelp())
	require.NoError(t, err)
	const receivers = 8
	stubborn := func() *shutProc { return &shutProc{i: 1} } // kind 1: ignores its cancel
	var all []*shutProc
	var hs []Handle
	var recvPIDs []relay.PID
	for range receivers {
		p := stubborn()
		h, err := s.Submit(context.Background(), p, "receiver", nil)
		require.NoError(t, err)
		all, hs, recvPIDs = append(all, p), append(hs, h), append(recvPIDs, h.PID())
	}
	eventually(t, "the receivers waiting", func() bool {
		idle := 0
		for _, pi := range s.Processes() {
			if pi.State == StateIdle {
				idle++
			}
		}
		return idle == receivers
	})
	release := holdWorker(t, s)
	for k := range helpBatch - 1 {
		if k < receivers {
			to := recvPIDs[k]
			h, err := s.Submit(context.Background(), numbered(func(n int, _ []Event, out *StepOutput) error {
				if n == 0 {
					out.Tell(to, k) // wakes a stubborn receiver onto the helper
				}
				return nil // then waits, ignoring its cancel
			}), "teller", nil)
			require.NoError(t, err)
			hs = append(hs, h)
			continue
		}
		p := stubborn()
		h, err := s.Submit(context.Background(), p, "stubborn", nil)
		require.NoError(t, err)
		all, hs = append(all, p), append(hs, h)
	}
	gateIn := make(chan uint64, 1)
	gate, err := s.Submit(context.Background(), numbered(func(n int, _ []Event, _ *StepOutput) error {
		if n == 0 {
			gateIn <- goroutineID()
			deadline := time.Now().Add(testTimeout)
			for !s.forcing() && time.Now().Before(deadline) {
				runtime.Gosched()
			}
		}
		return nil // waits, ignoring its cancel
	}), "gate", nil)
	require.NoError(t, err)
	hs = append(hs, gate)

	starter := make(chan uint64, 1)
	starts := make(chan error, 1)
	go func() {
		starter <- goroutineID()
		for {
			_, err := s.Spawn(context.Background(), leafProcess, "leaf", nil)
			if errors.Is(err, ErrClosed) {
				starts <- nil
				return
			}
			if err != nil {
				starts <- err
				return
			}
		}
	}()
	require.Equal(t, receive(t, starter, "the starter"), receive(t, gateIn, "the gate's step"), "the gate ran off the helping caller")
	release()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, s.Shutdown(ctx), ErrForced)
	require.NoError(t, receive(t, starts, "the starter's end"))
	for i, h := range hs {
		_, err := waitResult(t, h)
		require.ErrorIs(t, err, ErrForced, "process %d (%v)", i, h.PID())
	}
	for i, p := range all {
		require.Equal(t, int32(1), p.inits.Load(), "Inits of process %d", i)
		require.Equal(t, int32(1), p.closes.Load(), "Closes of process %d", i)
	}
	require.Zero(t, s.Stats().Processes.Live)
}

// TestCallerHelpHookPanicLeavesNoWreck checks what a panic that the runs
// do not recover (one raised by a hook, which on a worker would end the
// program) leaves behind on a helping caller: it goes on out of the
// caller's Spawn, and a caller that recovers it finds the scheduler as a
// help leaves it. The processes the help had taken and not run are back
// on the global queue, and run; the caller helps again at its next yield
// point. The process whose end raised it heads the queue, so it is the
// first of the first help's batch, and the rest of that batch is left
// when the panic comes.
func TestCallerHelpHookPanicLeavesNoWreck(t *testing.T) {
	const boom = "a hook's panic"
	hooks := Hooks{DeadLetter: func(d DeadLetter) {
		if d.Message.Data == "boom" {
			panic(boom)
		}
	}}
	s := newScheduler(t, WithWorkers(1), WithWatchdog(0), WithCallerHelp(), WithHooks(hooks))
	release := holdWorker(t, s)
	ctx := context.Background()
	// Its first step gets no events: the message stays unread, and its
	// end reports it to the DeadLetter hook.
	victim, err := s.Spawn(ctx, leafProcess, "victim", nil)
	require.NoError(t, err)
	require.NoError(t, s.Tell(victim, "boom"))

	var ran atomic.Int64
	leaf := stepFunc(func(_ []Event, out *StepOutput) error {
		ran.Add(1)
		out.Done(payload.Payload{})
		return nil
	})
	var recovered []any
	var helpsAtPanic uint64
	spawn := func() (err error) {
		defer func() {
			if v := recover(); v != nil {
				recovered = append(recovered, v)
				helpsAtPanic = s.Stats().Helps
			}
		}()
		// The start's own process is queued before its yield point, where
		// the help runs: it is started whether or not the help panics.
		_, err = s.Spawn(ctx, leaf, "leaf", nil)
		return err
	}
	for range manyStarts {
		require.NoError(t, spawn())
	}
	require.Equal(t, []any{boom}, recovered, "the hook's panic, out of one Spawn")
	require.Greater(t, s.Stats().Helps, helpsAtPanic, "no caller helped after the panic")
	release()
	eventually(t, "every leaf to run", func() bool { return ran.Load() == manyStarts })
}

// initFunc is a process whose Init calls init and whose one step ends
// it.
type initFunc func()

func (f initFunc) Init(context.Context, string, payload.Payloads) error { f(); return nil }
func (initFunc) Step(_ []Event, out *StepOutput) error {
	out.Done(payload.Payload{})
	return nil
}
func (initFunc) Close() {}

// TestCallerHelpRunsSpawnedInitsAndStartHook checks what WithCallerHelp
// says runs on a helping caller besides steps: the Init of a child that
// a step it runs spawns, and the Start hook of that child, as a worker
// runs them for the steps it runs.
func TestCallerHelpRunsSpawnedInitsAndStartHook(t *testing.T) {
	var caller atomic.Uint64
	var hooksOnCaller, initsOnCaller atomic.Int64
	hooks := Hooks{Start: func(si StartInfo) {
		if si.Method == "child" && goroutineID() == caller.Load() {
			hooksOnCaller.Add(1)
		}
	}}
	s := newScheduler(t, WithWorkers(1), WithWatchdog(0), WithCallerHelp(), WithHooks(hooks))
	release := holdWorker(t, s)
	caller.Store(goroutineID())
	child := initFunc(func() {
		if goroutineID() == caller.Load() {
			initsOnCaller.Add(1)
		}
	})
	hs := helpedRuns(t, s, manyStarts, func(i int, hs helpedSteps) Process {
		return numbered(func(n int, _ []Event, out *StepOutput) error {
			if n == 0 {
				hs.count()
				out.SpawnAwait(1, child, "child", nil)
				return nil
			}
			out.Done(payload.Of(i))
			return nil
		})
	})
	require.Positive(t, initsOnCaller.Load(), "no spawned child's Init ran on the helping caller")
	require.Positive(t, hooksOnCaller.Load(), "no spawned child's Start hook ran on the helping caller")
	release()
	for i, h := range hs {
		require.Equal(t, i, waitInt(t, h, i), "process %d's result", i)
	}
}
