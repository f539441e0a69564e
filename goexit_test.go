package scheduler_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
)

// goexitWait bounds each wait of these tests: a Goexit that the
// scheduler mishandles shows as a wait that never ends.
const goexitWait = 5 * time.Second

// goexitProc calls runtime.Goexit in the phase named by where ("init",
// "step" or "close"), and counts its Close calls.
type goexitProc struct {
	where  string
	closes atomic.Int32
}

func (p *goexitProc) Init(context.Context, string, payload.Payloads) error {
	if p.where == "init" {
		runtime.Goexit()
	}
	return nil
}

func (p *goexitProc) Step(_ []sched.Event, out *sched.StepOutput) error {
	if p.where == "step" {
		runtime.Goexit()
	}
	if p.where == "close-after-error" {
		return errors.New("step failed")
	}
	out.Done(payload.Payload{})
	return nil
}

func (p *goexitProc) Close() {
	p.closes.Add(1)
	if p.where == "close" || p.where == "close-after-error" {
		runtime.Goexit()
	}
}

// waitBounded waits for h's end within goexitWait and returns its error.
func waitBounded(t *testing.T, h sched.Handle, what string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), goexitWait)
	defer cancel()
	_, err := h.Wait(ctx)
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
		t.Fatalf("%s: the process did not end within %v", what, goexitWait)
	}
	return err
}

// shutdownBounded runs s.Shutdown(ctx) on a goroutine of its own and
// fails the test if it does not return within goexitWait.
func shutdownBounded(t *testing.T, s *sched.Scheduler, ctx context.Context, what string) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- s.Shutdown(ctx) }()
	select {
	case err := <-done:
		return err
	case <-time.After(goexitWait):
		t.Fatalf("%s: Shutdown did not return within %v", what, goexitWait)
		return nil
	}
}

// stillServes fails the test unless both of s's workers still run
// processes (see bothWorkersRun) and a Shutdown of s, bounded, returns
// nil; what names the case in the failure.
func stillServes(t *testing.T, s *sched.Scheduler, what string) {
	t.Helper()
	bothWorkersRun(t, s)
	if err := shutdownBounded(t, s, context.Background(), what); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

// bothWorkersRun fails the test unless two processes are inside Step at
// the same time: with two workers, both must still be running.
func bothWorkersRun(t *testing.T, s *sched.Scheduler) {
	t.Helper()
	var arrived sync.WaitGroup
	arrived.Add(2)
	release := make(chan struct{})
	all := make(chan struct{})
	go func() { arrived.Wait(); close(all) }()
	meet := stepFunc(func(_ []sched.Event, out *sched.StepOutput) error {
		arrived.Done()
		<-release
		out.Done(payload.Payload{})
		return nil
	})
	h1 := submit(t, s, meet)
	h2 := submit(t, s, meet)
	select {
	case <-all:
	case <-time.After(goexitWait):
		close(release)
		t.Fatalf("two steps did not run at once within %v: a worker is gone", goexitWait)
	}
	close(release)
	if err := waitBounded(t, h1, "first meeting process"); err != nil {
		t.Errorf("first meeting process: %v", err)
	}
	if err := waitBounded(t, h2, "second meeting process"); err != nil {
		t.Errorf("second meeting process: %v", err)
	}
}

func TestGoexitOnWorkerEndsProcessAndWorkerGoesOn(t *testing.T) {
	for _, where := range []string{"step", "close", "close-after-error"} {
		for _, traced := range []bool{false, true} {
			name := where
			if traced {
				name += "/watched"
			}
			t.Run(name, func(t *testing.T) {
				var panics atomic.Int32
				var seen atomic.Value
				s := hookedScheduler(t, sched.Hooks{
					Panic: func(pi sched.PanicInfo) {
						panics.Add(1)
						seen.Store(pi.Err)
					},
				})
				if traced {
					unhook := sched.SetStepHooks(s, func() {})
					defer unhook()
				}
				// More Goexits than workers: each worker's goroutine ends
				// at least once.
				const n = 5
				for i := range n {
					p := &goexitProc{where: where}
					h := submit(t, s, p)
					err := waitBounded(t, h, where)
					if where == "close-after-error" {
						// As after a panic of Close: the step's error
						// stays the process's; the Panic hook sees the
						// Goexit.
						if err == nil || err.Error() != "step failed" {
							t.Fatalf("process %d: err = %v, want the step's", i, err)
						}
					} else if !errors.Is(err, sched.ErrGoexit) {
						t.Fatalf("process %d: err = %v, want ErrGoexit", i, err)
					}
					var perr *sched.PanicError
					if where != "close-after-error" && !errors.As(err, &perr) {
						t.Fatalf("process %d: err = %T %v, want a *PanicError", i, err, err)
					}
					if got := p.closes.Load(); got != 1 {
						t.Fatalf("process %d: Close ran %d times, want 1", i, got)
					}
				}
				if got := panics.Load(); got != n {
					t.Errorf("Panic hook called %d times, want %d", got, n)
				}
				if perr, _ := seen.Load().(*sched.PanicError); perr == nil || !errors.Is(perr, sched.ErrGoexit) {
					t.Errorf("Panic hook saw %v, want a PanicError for ErrGoexit", perr)
				}
				bothWorkersRun(t, s)
				if live := s.Stats().Processes.Live; live != 0 {
					t.Errorf("Live = %d after every process ended, want 0", live)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				if err := shutdownBounded(t, s, ctx, where); err != nil {
					t.Errorf("Shutdown: %v", err)
				}
			})
		}
	}
}

// yieldThenDone yields cmd once, and is done with the completion's
// error once it comes, which it records in got.
type yieldThenDone struct {
	onFirstStep func()
	cmd         sched.CommandID
	child       sched.Process
	closes      atomic.Int32
	got         chan error
}

func (p *yieldThenDone) Init(context.Context, string, payload.Payloads) error { return nil }
func (p *yieldThenDone) Close()                                               { p.closes.Add(1) }
func (p *yieldThenDone) Step(evs []sched.Event, out *sched.StepOutput) error {
	for _, e := range evs {
		if e.Type == sched.EventYieldComplete && e.Tag == 1 {
			p.got <- e.Error
			out.Done(payload.Payload{})
			return nil
		}
	}
	if len(evs) == 0 {
		if p.onFirstStep != nil {
			p.onFirstStep()
		}
		if p.child != nil {
			out.Spawn(1, p.child, "run", nil)
		} else {
			out.Yield(1, p.cmd, nil)
		}
	}
	return nil
}

func TestGoexitInHandlerEndsProcess(t *testing.T) {
	s, err := sched.New(sched.WithWorkers(2))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetHandler(cmdTest, func(sched.Call) error { runtime.Goexit(); return nil }); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		p := &yieldThenDone{cmd: cmdTest, got: make(chan error, 1)}
		h := submit(t, s, p)
		err := waitBounded(t, h, "handler")
		if !errors.Is(err, sched.ErrGoexit) {
			t.Fatalf("process %d: err = %v, want ErrGoexit", i, err)
		}
		if got := p.closes.Load(); got != 1 {
			t.Fatalf("process %d: Close ran %d times, want 1", i, got)
		}
	}
	stillServes(t, s, "handler")
}

func TestGoexitInChildInitFailsItsStart(t *testing.T) {
	s, err := sched.New(sched.WithWorkers(2))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		child := &goexitProc{where: "init"}
		p := &yieldThenDone{child: child, got: make(chan error, 1)}
		h := submit(t, s, p)
		// The Goexit goes on out of the parent's run, which ends with it.
		if err := waitBounded(t, h, "parent"); !errors.Is(err, sched.ErrGoexit) {
			t.Fatalf("parent %d: err = %v, want ErrGoexit", i, err)
		}
		if got := p.closes.Load(); got != 1 {
			t.Fatalf("parent %d: Close ran %d times, want 1", i, got)
		}
		if got := child.closes.Load(); got != 1 {
			t.Fatalf("child %d: Close ran %d times, want 1", i, got)
		}
	}
	bothWorkersRun(t, s)
	if st := s.Stats().Processes; st.Live != 0 || st.InitFailed != 4 {
		t.Errorf("Live = %d, InitFailed = %d; want 0 and 4", st.Live, st.InitFailed)
	}
	if err := shutdownBounded(t, s, context.Background(), "child init"); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

func TestGoexitInInitOnCallerReleasesStart(t *testing.T) {
	s, err := sched.New(sched.WithWorkers(2))
	if err != nil {
		t.Fatal(err)
	}
	before := s.Stats().Processes
	starts := []func(p sched.Process){
		func(p sched.Process) { _, _ = s.Submit(context.Background(), p, "run", nil) },
		func(p sched.Process) { _, _ = s.Spawn(context.Background(), p, "run", nil) },
		func(p sched.Process) {
			_, _ = s.Submit(context.Background(), p, "run", nil, sched.Mailbox(4, sched.MailboxReject))
		},
	}
	for i, start := range starts {
		p := &goexitProc{where: "init"}
		ended := make(chan bool, 1)
		go func() {
			returned := false
			defer func() { ended <- returned }()
			start(p)
			returned = true
		}()
		select {
		case returned := <-ended:
			if returned {
				t.Fatalf("start %d: Submit returned; the Goexit should have ended its goroutine", i)
			}
		case <-time.After(goexitWait):
			t.Fatalf("start %d: the submitting goroutine did not end within %v", i, goexitWait)
		}
		if got := p.closes.Load(); got != 1 {
			t.Fatalf("start %d: Close ran %d times, want 1", i, got)
		}
	}
	after := s.Stats().Processes
	if after.Live != before.Live || after.InitFailed != before.InitFailed+uint64(len(starts)) {
		t.Errorf("Live %d -> %d, InitFailed %d -> %d; want Live unchanged and 3 more failed",
			before.Live, after.Live, before.InitFailed, after.InitFailed)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := shutdownBounded(t, s, ctx, "init"); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

func TestGoexitInPoolWorkCompletesYield(t *testing.T) {
	s, err := sched.New(sched.WithWorkers(2), sched.WithBlockingPool(1, 4, sched.PoolWait))
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	if err := s.SetHandler(cmdTest, func(c sched.Call) error {
		return c.Go(func(context.Context) (any, error) {
			if calls.Add(1)%2 == 1 {
				runtime.Goexit()
			}
			return "ok", nil
		})
	}); err != nil {
		t.Fatal(err)
	}
	// With one pool goroutine, each task after a Goexit runs only if the
	// pool kept its goroutine.
	for i := range 4 {
		p := &yieldThenDone{cmd: cmdTest, got: make(chan error, 1)}
		h := submit(t, s, p)
		select {
		case err := <-p.got:
			if goexit := i%2 == 0; goexit != errors.Is(err, sched.ErrGoexit) {
				t.Fatalf("call %d: completion error %v (Goexit: %v)", i, err, goexit)
			}
		case <-time.After(goexitWait):
			t.Fatalf("call %d: no completion within %v", i, goexitWait)
		}
		if err := waitBounded(t, h, "pool caller"); err != nil {
			t.Fatalf("process %d: %v", i, err)
		}
	}
	// Once idle, the pool has no goroutine left running: the count
	// went back down for each that ended, the Goexit's place included.
	eventually(t, "the pool idle", func() bool { return s.Stats().Pool.Running == 0 })
	if err := shutdownBounded(t, s, context.Background(), "pool"); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

func TestGoexitInStartHookFailsTheStart(t *testing.T) {
	for _, onWorker := range []bool{false, true} {
		name := "caller"
		if onWorker {
			name = "worker"
		}
		t.Run(name, func(t *testing.T) {
			var goexit atomic.Bool
			s := hookedScheduler(t, sched.Hooks{
				Start: func(sched.StartInfo) {
					if goexit.Load() {
						runtime.Goexit()
					}
				},
			})
			child := &goexitProc{where: "none"}
			if onWorker {
				// The parent starts with the hook quiet; its step's spawn
				// starts the child, whose Start hook calls Goexit.
				p := &yieldThenDone{child: child, got: make(chan error, 1), onFirstStep: func() { goexit.Store(true) }}
				h := submit(t, s, p)
				if err := waitBounded(t, h, "parent"); !errors.Is(err, sched.ErrGoexit) {
					t.Fatalf("parent: err = %v, want ErrGoexit", err)
				}
				if got := p.closes.Load(); got != 1 {
					t.Errorf("parent: Close ran %d times, want 1", got)
				}
				goexit.Store(false)
				bothWorkersRun(t, s)
			} else {
				goexit.Store(true)
				ended := make(chan bool, 1)
				go func() {
					returned := false
					defer func() { ended <- returned }()
					_, _ = s.Submit(context.Background(), child, "run", nil)
					returned = true
				}()
				select {
				case returned := <-ended:
					if returned {
						t.Fatal("Submit returned; the Goexit should have ended its goroutine")
					}
				case <-time.After(goexitWait):
					t.Fatalf("the submitting goroutine did not end within %v", goexitWait)
				}
				goexit.Store(false)
			}
			if got := child.closes.Load(); got != 1 {
				t.Errorf("child: Close ran %d times, want 1", got)
			}
			if st := s.Stats().Processes; st.Live != 0 || st.InitFailed != 1 {
				t.Errorf("Live = %d, InitFailed = %d; want 0 and 1", st.Live, st.InitFailed)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if err := shutdownBounded(t, s, ctx, "start hook"); err != nil {
				t.Errorf("Shutdown: %v", err)
			}
		})
	}
}

func TestGoexitInEndHookStillEndsTheProcess(t *testing.T) {
	s := hookedScheduler(t, sched.Hooks{
		End: func(sched.EndInfo) { runtime.Goexit() },
	})
	for i := range 4 {
		p := &goexitProc{where: "none"}
		h := submit(t, s, p)
		if err := waitBounded(t, h, "end hook"); err != nil {
			t.Fatalf("process %d: err = %v, want its Done", i, err)
		}
	}
	// bothWorkersRun's processes call the hook too: their ends must
	// still be told.
	bothWorkersRun(t, s)
	if live := s.Stats().Processes.Live; live != 0 {
		t.Errorf("Live = %d, want 0", live)
	}
	if err := shutdownBounded(t, s, context.Background(), "end hook"); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

// hookedScheduler returns a new scheduler of two workers with hooks. The
// tests shut it down themselves, each Shutdown bounded (see
// shutdownBounded), since what they test may keep it from returning.
func hookedScheduler(t *testing.T, hooks sched.Hooks) *sched.Scheduler {
	t.Helper()
	s, err := sched.New(sched.WithWorkers(2), sched.WithHooks(hooks))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// blockedClose waits for a yield that no handler completes, ignoring its
// cancel, and calls close (which may call runtime.Goexit or panic) in
// Close.
type blockedClose struct {
	closes atomic.Int32
	close  func()
}

func (p *blockedClose) Init(context.Context, string, payload.Payloads) error { return nil }
func (p *blockedClose) Step(evs []sched.Event, out *sched.StepOutput) error {
	if len(evs) == 0 {
		out.Yield(1, cmdTest, nil)
	}
	return nil // ignores its cancel: only the deadline ends it
}
func (p *blockedClose) Close() {
	p.closes.Add(1)
	p.close()
}

// forcedCloseLetsShutdownReturn: three processes whose Close calls
// close, forced at a shutdown deadline on a scheduler with hooks, each
// end forced with their Close run once, and Shutdown returns.
func forcedCloseLetsShutdownReturn(t *testing.T, hooks sched.Hooks, close func()) {
	t.Helper()
	s := hookedScheduler(t, hooks)
	if err := s.SetHandler(cmdTest, func(sched.Call) error { return nil }); err != nil {
		t.Fatal(err)
	}
	ps := []*blockedClose{{close: close}, {close: close}, {close: close}}
	hs := make([]sched.Handle, len(ps))
	for i, p := range ps {
		hs[i] = submit(t, s, p)
		waitState(t, s, hs[i].PID(), sched.StateBlocked)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := shutdownBounded(t, s, ctx, "forced"); !errors.Is(err, sched.ErrForced) {
		t.Errorf("Shutdown: %v, want ErrForced", err)
	}
	for i, h := range hs {
		if err := waitBounded(t, h, "forced process"); !errors.Is(err, sched.ErrForced) {
			t.Errorf("process %d: err = %v, want ErrForced", i, err)
		}
		if got := ps[i].closes.Load(); got != 1 {
			t.Errorf("process %d: Close ran %d times, want 1", i, got)
		}
	}
}

// TestGoexitInCloseOfForcedProcessLetsShutdownReturn: a Goexit in the
// Close of a process forced at a shutdown deadline ends the goroutine
// carrying the shutdown through, which the scheduler replaces: Shutdown
// returns.
func TestGoexitInCloseOfForcedProcessLetsShutdownReturn(t *testing.T) {
	forcedCloseLetsShutdownReturn(t, sched.Hooks{}, runtime.Goexit)
}

// spawnThree spawns its children in one step, as one batch.
type spawnThree struct {
	children []sched.Process
	closes   atomic.Int32
}

func (p *spawnThree) Init(context.Context, string, payload.Payloads) error { return nil }
func (p *spawnThree) Close()                                               { p.closes.Add(1) }
func (p *spawnThree) Step(evs []sched.Event, out *sched.StepOutput) error {
	for i, c := range p.children {
		if i == 0 {
			out.Spawn(uint64(i+1), c, "run", nil)
		} else {
			out.SpawnAwait(uint64(i+1), c, "run", nil)
		}
	}
	return nil
}

func TestGoexitInChildInitOfSpawnBatchGivesBackTheRest(t *testing.T) {
	s, err := sched.New(sched.WithWorkers(2))
	if err != nil {
		t.Fatal(err)
	}
	first, second, third := &goexitProc{where: "none"}, &goexitProc{where: "init"}, &goexitProc{where: "none"}
	p := &spawnThree{children: []sched.Process{first, second, third}}
	h := submit(t, s, p)
	if err := waitBounded(t, h, "parent"); !errors.Is(err, sched.ErrGoexit) {
		t.Fatalf("parent: err = %v, want ErrGoexit", err)
	}
	// The first child started before the Goexit and runs to its end;
	// the third was never started, and its place is given back.
	eventually(t, "no process live", func() bool { return s.Stats().Processes.Live == 0 })
	if c := [3]int32{first.closes.Load(), second.closes.Load(), third.closes.Load()}; c != [3]int32{1, 1, 0} {
		t.Errorf("children's Close calls %v, want [1 1 0]", c)
	}
	if got := p.closes.Load(); got != 1 {
		t.Errorf("parent: Close ran %d times, want 1", got)
	}
	bothWorkersRun(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := shutdownBounded(t, s, ctx, "spawn batch"); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

func TestGoexitInStepTellsMonitors(t *testing.T) {
	s, err := sched.New(sched.WithWorkers(2))
	if err != nil {
		t.Fatal(err)
	}
	p := stepFunc(func(evs []sched.Event, _ *sched.StepOutput) error {
		if len(evs) > 0 {
			runtime.Goexit()
		}
		return nil // waits for a message
	})
	h := submit(t, s, p)
	waitState(t, s, h.PID(), sched.StateIdle)
	exits := make(chan sched.Exit, 1)
	s.Monitor(h.PID(), func(e sched.Exit) { exits <- e })
	if err := s.Tell(h.PID(), "go"); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-exits:
		if e.Reason != sched.ExitFailed || !errors.Is(e.Err, sched.ErrGoexit) {
			t.Errorf("monitor saw %v, want a failure with ErrGoexit", e)
		}
	case <-time.After(goexitWait):
		t.Fatalf("the monitor was not told within %v", goexitWait)
	}
	if err := waitBounded(t, h, "monitored"); !errors.Is(err, sched.ErrGoexit) {
		t.Errorf("err = %v, want ErrGoexit", err)
	}
	if err := shutdownBounded(t, s, context.Background(), "monitored"); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}
