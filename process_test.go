package scheduler_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
)

// Tests of the Process interface and its StepOutput (process.go).

// TestDoneIsFinal: a step that calls Done ends the process whatever it
// writes after, Continue and yields included.
func TestDoneIsFinal(t *testing.T) {
	for _, after := range []struct {
		name  string
		write func(out *sched.StepOutput)
	}{
		{"Continue", func(out *sched.StepOutput) { out.Continue() }},
		{"a yield", func(out *sched.StepOutput) { out.Sleep(1, time.Hour) }},
		{"Continue and a yield", func(out *sched.StepOutput) { out.Yield(2, cmdTest, nil); out.Continue() }},
	} {
		t.Run(after.name, func(t *testing.T) {
			s := newScheduler(t)
			p := &probe{step: func(_ *probe, _ int, _ []sched.Event, out *sched.StepOutput) error {
				out.Done(payload.Of("result"))
				after.write(out)
				return nil
			}}
			res, err := waitEnd(t, s, submit(t, s, p))
			require.NoError(t, err)
			assert.Equal(t, "result", res.Value())
			assert.Equal(t, 1, p.Steps())
			requireLifecycle(t, p)
		})
	}
}

// TestEndedOnceTheLastStepReturns: once a process's final step has
// returned and its yields have been carried out (see
// TestEndedOnceTheFinalYieldsAreCarriedOut), it has ended for everyone
// else, though its Close still runs:
// a message to it is refused, Terminate, Register and CompleteYield fail
// with ErrProcessNotFound, and a monitor set then is told at once that
// the process is gone.
func TestEndedOnceTheLastStepReturns(t *testing.T) {
	s := newScheduler(t)
	closing, release := make(chan struct{}), make(chan struct{})
	p := &probe{
		step: func(_ *probe, _ int, _ []sched.Event, out *sched.StepOutput) error {
			out.Done(payload.Of("result"))
			return nil
		},
		close: func() {
			close(closing)
			<-release
		},
	}
	var released sync.Once
	unblock := func() { released.Do(func() { close(release) }) }
	t.Cleanup(unblock) // a failure below must not leave Close blocked
	h := submit(t, s, p)
	receive(t, closing, "Close")
	pid := h.PID()
	require.ErrorIs(t, s.Tell(pid, "during Close"), sched.ErrProcessNotFound, "Tell")
	require.ErrorIs(t, s.Terminate(pid), sched.ErrProcessNotFound, "Terminate")
	require.ErrorIs(t, s.Register("closing", pid), sched.ErrProcessNotFound, "Register")
	require.ErrorIs(t, s.CompleteYield(pid, 1, nil, nil), sched.ErrProcessNotFound, "CompleteYield")
	exits := make(chan sched.Exit, 1)
	s.Monitor(pid, func(e sched.Exit) { exits <- e })
	assert.Equal(t, sched.ExitGone, receive(t, exits, "the monitor set during Close").Reason)
	select {
	case <-h.Done():
		t.Fatal("the Handle reported the end while Close runs")
	default:
	}
	unblock()
	res, err := waitEnd(t, s, h)
	require.NoError(t, err)
	assert.Equal(t, "result", res.Value())
	assert.Zero(t, s.Stats().Messages.Unread, "messages counted unread")
}

// TestFinalStepCompletionsReachNoOne: the yields of the step that calls
// Done are carried out, and their completions reach no one. One that
// comes while the step's yields are carried out (a Spawn's, a handler's
// that completes at once) is counted unread, as an event that arrived
// during the step is; one that comes after the process has ended is
// refused with ErrProcessNotFound, as any delivery to an ended process
// is, and counted nowhere.
func TestFinalStepCompletionsReachNoOne(t *testing.T) {
	kept := make(chan sched.Completion, 1)
	s := newScheduler(t,
		sched.WithHandler(cmdTest, func(c sched.Call) error { return c.Complete("at once", nil) }),
		sched.WithHandler(cmdTest2, func(c sched.Call) error { kept <- c.Completion(); return nil }))
	child := &probe{step: doneWith("child")}
	p := &probe{step: func(_ *probe, _ int, _ []sched.Event, out *sched.StepOutput) error {
		out.Spawn(1, child, "run", nil)
		out.Yield(2, cmdTest, nil)
		out.Yield(3, cmdTest2, nil)
		out.Done(payload.Of("result"))
		return nil
	}}
	h := submit(t, s, p)
	res, err := waitEnd(t, s, h)
	require.NoError(t, err)
	assert.Equal(t, "result", res.Value())
	assert.Equal(t, uint64(2), s.Stats().Messages.Unread, "the Spawn's and the handler's completions, which came during the end")
	late := receive(t, kept, "the second handler's call")
	assert.ErrorIs(t, late.Complete("late", nil), sched.ErrProcessNotFound, "a completion after the end")
	assert.Equal(t, uint64(2), s.Stats().Messages.Unread, "a refused completion is not counted unread")
	eventually(t, "the child to end", func() bool { return child.Closes() == 1 })
	assert.Equal(t, 1, p.Steps())
	requireLifecycle(t, p)
}

// TestEndedOnceTheFinalYieldsAreCarriedOut: the yields of a process's
// final step are carried out before it has ended for everyone else, so
// the handler of one, which runs then, still finds it: a message sent
// to it is queued and counted unread, a name given to it is released by
// its end, and a completion of its yield is taken and reaches no one.
// Once they are carried out, the process has ended (see
// TestEndedOnceTheLastStepReturns).
func TestEndedOnceTheFinalYieldsAreCarriedOut(t *testing.T) {
	type seen struct{ tell, register, complete error }
	got := make(chan seen, 1)
	var s *sched.Scheduler
	s = newScheduler(t, sched.WithHandler(cmdTest, func(c sched.Call) error {
		got <- seen{
			tell:     s.Tell(c.PID, "from the handler"),
			register: s.Register("final", c.PID),
			complete: s.CompleteYield(c.PID, c.Tag, "completed", nil),
		}
		return nil
	}))
	p := &probe{step: func(_ *probe, _ int, _ []sched.Event, out *sched.StepOutput) error {
		out.Yield(1, cmdTest, nil)
		out.Done(payload.Of("result"))
		return nil
	}}
	h := submit(t, s, p)
	res, err := waitEnd(t, s, h)
	require.NoError(t, err)
	assert.Equal(t, "result", res.Value())
	handler := receive(t, got, "the handler")
	assert.NoError(t, handler.tell, "Tell from the final step's handler")
	assert.NoError(t, handler.register, "Register from the final step's handler")
	assert.NoError(t, handler.complete, "CompleteYield from the final step's handler")
	assert.Equal(t, uint64(2), s.Stats().Messages.Unread, "the message and the completion")
	_, err = s.Lookup("final")
	assert.ErrorIs(t, err, sched.ErrNameNotFound, "the name, released by the end")
	assert.ErrorIs(t, s.Tell(h.PID(), "after"), sched.ErrProcessNotFound, "Tell once it has ended")
	assert.Equal(t, 1, p.Steps())
	requireLifecycle(t, p)
}

// TestDoneAfterThenFailureLeavesTheRestUnread: a step that says with
// DoneAfter how far it read its batch, and then fails (returns an error
// or panics), ends the process with its failure, and the events after
// those it read count as unread, as they do after DoneAfter alone: the
// messages among them go to the DeadLetter hook. The failure does not
// make them read.
func TestDoneAfterThenFailureLeavesTheRestUnread(t *testing.T) {
	failure := testError("failed partway")
	for _, end := range []struct {
		name string
		fail func() error
		want error
	}{
		{"an error", func() error { return failure }, failure},
		{"a panic", func() error { panic("failed partway") }, sched.ErrPanic},
	} {
		t.Run(end.name, func(t *testing.T) {
			var mu sync.Mutex
			var dead []any
			// Without the watchdog a panic takes the worker's plain path
			// (see worker.step) every time, not sometimes the watched one.
			s := newScheduler(t, sched.WithWatchdog(0), sched.WithHooks(sched.Hooks{DeadLetter: func(d sched.DeadLetter) {
				mu.Lock()
				defer mu.Unlock()
				if d.Reason == sched.DeadUnread {
					dead = append(dead, d.Message.Data)
				}
			}}))
			inFirst, gate := make(chan struct{}), make(chan struct{})
			p := &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
				if n == 0 {
					close(inFirst)
					<-gate // the three messages come meanwhile: one batch
					return nil
				}
				out.DoneAfter(1, payload.Of("partway"))
				return end.fail()
			}}
			h := submit(t, s, p)
			receive(t, inFirst, "the first step")
			for i := 1; i <= 3; i++ {
				require.NoError(t, s.Tell(h.PID(), i))
			}
			close(gate)
			_, err := waitEnd(t, s, h)
			require.ErrorIs(t, err, end.want)
			batches := p.Batches()
			require.Len(t, batches, 2, "steps")
			require.Len(t, batches[1], 3, "the second step's batch")
			assert.Equal(t, uint64(2), s.Stats().Messages.Unread, "the events after the one read")
			mu.Lock()
			defer mu.Unlock()
			assert.Equal(t, []any{2, 3}, dead, "dead letters of the unread messages")
			requireLifecycle(t, p)
		})
	}
}

// reentered is a process that counts its Inits and Closes across every
// process it serves, and notes when two of its steps overlap; each step
// ends its process with the number of Inits so far.
type reentered struct {
	inits, closes, steps, overlaps atomic.Int32
	gate                           chan struct{} // if not nil, a step waits on it
}

func (r *reentered) Init(context.Context, string, payload.Payloads) error {
	r.inits.Add(1)
	return nil
}

func (r *reentered) Step(_ []sched.Event, out *sched.StepOutput) error {
	if r.steps.Add(1) > 1 {
		r.overlaps.Add(1)
	}
	if r.gate != nil {
		<-r.gate
	}
	r.steps.Add(-1)
	out.Done(payload.Of(int(r.inits.Load())))
	return nil
}

func (r *reentered) Close() { r.closes.Add(1) }

// TestOneProcessValueStartedTwice pins what the Process doc says of a
// value started again: nothing refuses it. Started twice at once, it is
// two processes, with a PID, an Init, steps and a Close each, whose
// steps run at the same time on two workers (the first step of one waits
// until the other's has begun). Started again after its Close, it is a
// new process with a new Init.
func TestOneProcessValueStartedTwice(t *testing.T) {
	s := newScheduler(t, sched.WithWorkers(2))
	gate := make(chan struct{})
	r := &reentered{gate: gate}
	var opened sync.Once
	open := func() { opened.Do(func() { close(gate) }) }
	t.Cleanup(open) // a failure must not leave a step waiting: Shutdown would wait for it
	h1, err := s.Submit(context.Background(), r, "run", nil)
	require.NoError(t, err, "the first start")
	h2, err := s.Submit(context.Background(), r, "run", nil)
	require.NoError(t, err, "the second start of the same value")
	require.NotEqual(t, h1.PID(), h2.PID())
	eventually(t, "the two steps to overlap", func() bool { return r.overlaps.Load() > 0 })
	open()
	for _, h := range []sched.Handle{h1, h2} {
		res, err := waitEnd(t, s, h)
		require.NoError(t, err)
		require.Equal(t, 2, res.Value(), "Inits when %v ended", h.PID())
	}
	require.Equal(t, int32(2), r.closes.Load(), "Closes")

	r.gate = nil
	h3 := submit(t, s, r)
	res, err := waitEnd(t, s, h3)
	require.NoError(t, err)
	require.Equal(t, 3, res.Value(), "Inits once started again after its Close")
	require.Equal(t, int32(3), r.closes.Load(), "Closes")
}

// TestStepOutputKeptPastItsStep pins what StepOutput's doc says of one
// kept after its Step returned and written on the worker between steps
// (here by the process's Close, on the worker that ran its last step,
// which then starts another process): what is written is dropped as the
// worker's next step starts, another process's here, which neither
// carries it out nor is changed by it.
func TestStepOutputKeptPastItsStep(t *testing.T) {
	s := newScheduler(t, sched.WithWorkers(1))
	got := make(chan any, 4)
	observer := submit(t, s, stepFunc(func(evs []sched.Event, out *sched.StepOutput) error {
		for _, ev := range evs {
			switch ev.Type {
			case sched.EventCancel:
				out.Done(payload.Payload{})
			case sched.EventMessage:
				got <- ev.Data
			}
		}
		return nil
	}))
	next := stepFunc(func(evs []sched.Event, out *sched.StepOutput) error {
		if len(evs) == 0 {
			out.Tell(observer.PID(), "the next step's own")
			return nil // it waits: a Continue left in its output would step it again
		}
		out.Done(payload.Payload{}) // its cancel
		return nil
	})
	started := make(chan sched.Handle, 1)
	var kept *sched.StepOutput
	keeper := submit(t, s, &probe{
		step: func(_ *probe, _ int, _ []sched.Event, out *sched.StepOutput) error {
			kept = out
			out.Done(payload.Payload{})
			return nil
		},
		close: func() {
			kept.Tell(observer.PID(), "told through a kept StepOutput")
			kept.Yield(1, cmdTest, nil)
			h, err := s.Submit(context.Background(), next, "run", nil)
			require.NoError(t, err)
			started <- h
		},
	})
	_, err := waitEnd(t, s, keeper)
	require.NoError(t, err)
	h := receive(t, started, "the next process")
	require.Equal(t, "the next step's own", receive(t, got, "the next step's message"))
	require.NoError(t, s.Tell(observer.PID(), "after"))
	require.Equal(t, "after", receive(t, got, "the test's message"), "what reached the observer in between")
	require.NoError(t, s.Terminate(h.PID()))
	res, err := waitEnd(t, s, h)
	require.NoError(t, err, "the next process")
	require.Nil(t, res.Value())
	require.NoError(t, s.Terminate(observer.PID()))
}
