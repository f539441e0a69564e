package scheduler_test

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
)

// panicProc panics in the phase named by where ("init", "step" or
// "close"), and counts its Close calls.
type panicProc struct {
	where  string
	closes atomic.Int32
}

func (p *panicProc) Init(context.Context, string, payload.Payloads) error {
	if p.where == "init" {
		panic("init fails")
	}
	return nil
}

func (p *panicProc) Step(_ []sched.Event, out *sched.StepOutput) error {
	if p.where == "step" {
		panic("step fails")
	}
	out.Done(payload.Payload{})
	return nil
}

func (p *panicProc) Close() {
	p.closes.Add(1)
	if p.where == "close" {
		panic("close fails")
	}
}

// monitorEnd monitors pid and returns a channel that receives its exit.
func monitorEnd(s *sched.Scheduler, pid sched.Handle) <-chan sched.Exit {
	ch := make(chan sched.Exit, 1)
	s.Monitor(pid.PID(), func(e sched.Exit) { ch <- e })
	return ch
}

// receiveExit waits for a monitor's report within goexitWait.
func receiveExit(t *testing.T, ch <-chan sched.Exit, what string) sched.Exit {
	t.Helper()
	select {
	case e := <-ch:
		return e
	case <-time.After(goexitWait):
		t.Fatalf("%s: the monitor was not told of the end within %v", what, goexitWait)
		return sched.Exit{}
	}
}

func TestGoexitInPanicHookOnWorkerEndsTheProcess(t *testing.T) {
	for _, where := range []string{"step", "close"} {
		for _, watched := range []bool{false, true} {
			name := where
			if watched {
				name += "/watched"
			}
			t.Run(name, func(t *testing.T) {
				var calls atomic.Int32
				s := hookedScheduler(t, sched.Hooks{
					Panic: func(sched.PanicInfo) {
						calls.Add(1)
						runtime.Goexit()
					},
				})
				if watched {
					unhook := sched.SetStepHooks(s, func() {})
					defer unhook()
				}
				// More Goexits than workers: each worker's goroutine ends
				// at least once.
				const n = 5
				for i := range n {
					p := &panicProc{where: where}
					h := submit(t, s, p)
					err := waitBounded(t, h, where)
					var perr *sched.PanicError
					if !errors.As(err, &perr) || perr.Where != map[string]string{"step": "Step", "close": "Close"}[where] {
						t.Fatalf("process %d: err = %v, want the PanicError of its %s", i, err, where)
					}
					if errors.Is(err, sched.ErrGoexit) {
						t.Fatalf("process %d: err = %v; the hook's Goexit is not the process's", i, err)
					}
					if got := p.closes.Load(); got != 1 {
						t.Fatalf("process %d: Close ran %d times, want 1", i, got)
					}
				}
				if got := calls.Load(); got != n {
					t.Errorf("Panic hook called %d times, want %d", got, n)
				}
				stillServes(t, s, where)
			})
		}
	}
}

func TestGoexitInPanicHookTellsMonitors(t *testing.T) {
	s := hookedScheduler(t, sched.Hooks{
		Panic: func(sched.PanicInfo) { runtime.Goexit() },
	})
	gate := make(chan struct{})
	h := submit(t, s, stepFunc(func([]sched.Event, *sched.StepOutput) error {
		<-gate
		panic("step fails")
	}))
	exits := monitorEnd(s, h)
	close(gate)
	if e := receiveExit(t, exits, "step"); e.Err == nil {
		t.Errorf("monitor told %+v, want the step's failure", e)
	}
	if err := shutdownBounded(t, s, context.Background(), "monitor"); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

func TestGoexitInPanicHookOfHandlerAndPool(t *testing.T) {
	s, err := sched.New(sched.WithWorkers(2), sched.WithBlockingPool(1, 4, sched.PoolWait), sched.WithHooks(sched.Hooks{
		Panic: func(sched.PanicInfo) { runtime.Goexit() },
	}))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetHandler(cmdTest, func(sched.Call) error { panic("handler fails") }); err != nil {
		t.Fatal(err)
	}
	if err := s.SetHandler(cmdTest2, func(c sched.Call) error {
		return c.Go(func(context.Context) (any, error) { panic("work fails") })
	}); err != nil {
		t.Fatal(err)
	}
	for i, cmd := range []sched.CommandID{cmdTest, cmdTest, cmdTest, cmdTest2, cmdTest2} {
		p := &yieldThenDone{cmd: cmd, got: make(chan error, 1)}
		h := submit(t, s, p)
		if err := waitBounded(t, h, "handler"); err == nil && cmd == cmdTest {
			t.Fatalf("process %d: ended with no error, want the handler's panic", i)
		}
		if cmd == cmdTest2 {
			select {
			case err := <-p.got:
				var perr *sched.PanicError
				if !errors.As(err, &perr) || perr.Where != "pool" {
					t.Fatalf("process %d: completion %v, want the pool work's PanicError", i, err)
				}
			default:
				t.Fatalf("process %d: ended without its yield completing", i)
			}
		}
		if got := p.closes.Load(); got != 1 {
			t.Fatalf("process %d: Close ran %d times, want 1", i, got)
		}
	}
	stillServes(t, s, "handler")
}

func TestGoexitInPanicHookOfChildInit(t *testing.T) {
	s := hookedScheduler(t, sched.Hooks{
		Panic: func(sched.PanicInfo) { runtime.Goexit() },
	})
	for i := range 4 {
		child := &panicProc{where: "init"}
		p := &yieldThenDone{child: child, got: make(chan error, 1)}
		h := submit(t, s, p)
		_ = waitBounded(t, h, "parent")
		if got := child.closes.Load(); got != 1 {
			t.Fatalf("child %d: Close ran %d times, want 1", i, got)
		}
	}
	bothWorkersRun(t, s)
	if st := s.Stats().Processes; st.Live != 0 {
		t.Errorf("Live = %d, want 0", st.Live)
	}
	if err := shutdownBounded(t, s, context.Background(), "child init"); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

func TestGoexitInPanicHookOfInitOnCaller(t *testing.T) {
	s := hookedScheduler(t, sched.Hooks{
		Panic: func(sched.PanicInfo) { runtime.Goexit() },
	})
	for i, where := range []string{"init", "init"} {
		p := &panicProc{where: where}
		ended := make(chan bool, 1)
		go func() {
			returned := false
			defer func() { ended <- returned }()
			_, _ = s.Submit(context.Background(), p, "run", nil)
			returned = true
		}()
		select {
		case <-ended:
		case <-time.After(goexitWait):
			t.Fatalf("start %d: the submitting goroutine did not end within %v", i, goexitWait)
		}
		if got := p.closes.Load(); got != 1 {
			t.Fatalf("start %d: Close ran %d times, want 1", i, got)
		}
	}
	if st := s.Stats().Processes; st.Live != 0 {
		t.Errorf("Live = %d, want 0", st.Live)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := shutdownBounded(t, s, ctx, "init"); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

func TestGoexitInDeadLetterHookAtAnEnd(t *testing.T) {
	for _, how := range []string{"done", "failed"} {
		t.Run(how, func(t *testing.T) {
			var letters atomic.Int32
			s := hookedScheduler(t, sched.Hooks{
				DeadLetter: func(d sched.DeadLetter) {
					if d.Reason == sched.DeadUnread {
						letters.Add(1)
					}
					runtime.Goexit()
				},
			})
			gate := make(chan struct{})
			started := make(chan struct{})
			steps := 0
			h := submit(t, s, stepFunc(func(_ []sched.Event, out *sched.StepOutput) error {
				steps++
				if steps == 1 {
					close(started)
					<-gate
					switch how {
					case "done":
						out.Done(payload.Payload{})
					case "failed":
						return errors.New("step fails")
					}
				}
				return nil
			}))
			<-started
			exits := monitorEnd(s, h)
			const n = 3
			for i := range n {
				if err := s.Tell(h.PID(), i); err != nil {
					t.Fatalf("Tell %d: %v", i, err)
				}
			}
			close(gate)
			_ = waitBounded(t, h, how)
			receiveExit(t, exits, how)
			if got := letters.Load(); got != n {
				t.Errorf("DeadLetter hook saw %d unread messages, want %d", got, n)
			}
			stillServes(t, s, how)
		})
	}
}

func TestGoexitInDeadLetterHookOfDoneAfter(t *testing.T) {
	var letters atomic.Int32
	s := hookedScheduler(t, sched.Hooks{
		DeadLetter: func(sched.DeadLetter) {
			letters.Add(1)
			runtime.Goexit()
		},
	})
	gate := make(chan struct{})
	started := make(chan struct{})
	h := submit(t, s, stepFunc(func(evs []sched.Event, out *sched.StepOutput) error {
		if len(evs) == 0 {
			close(started)
			<-gate
			return nil
		}
		out.DoneAfter(1, payload.Payload{}) // the rest go unread
		return nil
	}))
	<-started
	const n = 3
	for i := range n {
		if err := s.Tell(h.PID(), i); err != nil {
			t.Fatalf("Tell %d: %v", i, err)
		}
	}
	close(gate)
	if err := waitBounded(t, h, "DoneAfter"); err != nil {
		t.Errorf("process: %v", err)
	}
	if got := letters.Load(); got != n-1 {
		t.Errorf("DeadLetter hook called %d times, want %d", got, n-1)
	}
	stillServes(t, s, "DoneAfter")
}

func TestGoexitInDeadLetterHookOfTellFromOutside(t *testing.T) {
	var letters atomic.Int32
	s := hookedScheduler(t, sched.Hooks{
		DeadLetter: func(sched.DeadLetter) {
			if letters.Add(1) == 1 {
				runtime.Goexit()
			}
		},
	})
	gate := make(chan struct{})
	started := make(chan struct{})
	h, err := s.Submit(context.Background(), stepFunc(func(evs []sched.Event, out *sched.StepOutput) error {
		if len(evs) == 0 {
			close(started)
			<-gate
			return nil
		}
		for _, e := range evs {
			if e.Type == sched.EventMessage && e.Data == 2 {
				out.Done(payload.Payload{})
			}
		}
		return nil
	}), "run", nil, sched.Mailbox(1, sched.MailboxDropOldest))
	if err != nil {
		t.Fatal(err)
	}
	<-started
	if err := s.Tell(h.PID(), 0); err != nil {
		t.Fatal(err)
	}
	// The second Tell evicts the first, a dead letter whose hook ends
	// the sending goroutine.
	ended := make(chan bool, 1)
	go func() {
		returned := false
		defer func() { ended <- returned }()
		_ = s.Tell(h.PID(), 1)
		returned = true
	}()
	select {
	case returned := <-ended:
		if returned {
			t.Fatal("Tell returned; the hook's Goexit should have ended its goroutine")
		}
	case <-time.After(goexitWait):
		t.Fatalf("the sending goroutine did not end within %v", goexitWait)
	}
	// Nothing is left locked: a later Tell goes through (evicting the
	// second message, whose hook returns).
	done := make(chan error, 1)
	go func() { done <- s.Tell(h.PID(), 2) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Tell after the Goexit: %v", err)
		}
	case <-time.After(goexitWait):
		t.Fatalf("Tell after the Goexit did not return within %v", goexitWait)
	}
	close(gate)
	if err := waitBounded(t, h, "receiver"); err != nil {
		t.Errorf("receiver: %v", err)
	}
	if got := letters.Load(); got != 2 {
		t.Errorf("DeadLetter hook called %d times, want 2", got)
	}
	if err := shutdownBounded(t, s, context.Background(), "Tell"); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

func TestGoexitInDeadLetterHookOfAStepsYields(t *testing.T) {
	var letters atomic.Int32
	s := hookedScheduler(t, sched.Hooks{
		DeadLetter: func(sched.DeadLetter) {
			letters.Add(1)
			runtime.Goexit()
		},
	})
	const n = 4
	for i := range n {
		// A Reply to the zero ReplyTo has nobody to tell: a dead letter
		// reported as the step's yields are carried out.
		h := submit(t, s, stepFunc(func(_ []sched.Event, out *sched.StepOutput) error {
			out.Reply(sched.ReplyTo{}, "late", nil)
			out.Done(payload.Payload{})
			return nil
		}))
		// The run the Goexit cut short cannot go on: the process fails.
		err := waitBounded(t, h, "reply")
		var perr *sched.PanicError
		if !errors.As(err, &perr) || perr.Where != "DeadLetter" || !errors.Is(err, sched.ErrGoexit) {
			t.Fatalf("process %d: err = %v, want a PanicError for ErrGoexit in DeadLetter", i, err)
		}
		if got := letters.Load(); got != int32(i+1) {
			t.Fatalf("process %d: DeadLetter hook called %d times, want %d", i, got, i+1)
		}
	}
	stillServes(t, s, "reply")
}

// TestGoexitInPanicHookOfForcedCloseLetsShutdownReturn: a Goexit in the
// Panic hook called for the panic of a forced process's Close leaves
// the forced end done: Shutdown returns.
func TestGoexitInPanicHookOfForcedCloseLetsShutdownReturn(t *testing.T) {
	forcedCloseLetsShutdownReturn(t, sched.Hooks{Panic: func(sched.PanicInfo) { runtime.Goexit() }}, func() { panic("close fails") })
}
