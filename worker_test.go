package scheduler_test

import (
	"bytes"
	"context"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// Tests of the worker's loop (worker.go) seen from outside: what a step is
// given, and what the worker goroutines carry for tracing and profiling.

// TestFirstStepHasNoEvents: the first Step gets no events, even when
// events were queued before it ran (Process: "The first call has no
// events"). One worker is kept busy so that the events arrive before the
// new process's first step.
func TestFirstStepHasNoEvents(t *testing.T) {
	tests := []struct {
		name  string
		queue func(t *testing.T, s *sched.Scheduler, pid relay.PID)
	}{
		{"nothing queued", func(*testing.T, *sched.Scheduler, relay.PID) {}},
		{"messages queued", func(t *testing.T, s *sched.Scheduler, pid relay.PID) {
			require.NoError(t, s.Tell(pid, 1))
			require.NoError(t, s.Tell(pid, 2))
		}},
		{"cancel queued", func(t *testing.T, s *sched.Scheduler, pid relay.PID) {
			require.NoError(t, s.Terminate(pid))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newScheduler(t, sched.WithWorkers(1))
			blocker, hb := submitGated(t, s)

			p := &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
				if n > 0 {
					out.Done(payload.Payload{})
				} else {
					out.Continue() // so that "nothing queued" also gets a second step
				}
				return nil
			}}
			h := submit(t, s, p)
			tt.queue(t, s, h.PID())
			endBehindGate(t, s, blocker, hb, h)

			batches := p.Batches()
			require.NotEmpty(t, batches)
			assert.Empty(t, batches[0], "events of the first step")
			requireLifecycle(t, p)
		})
	}
}

// endBehindGate opens the gate of blocker, the gated process hb that
// holds the only worker, waits for h, queued behind it, to end without
// error, and then ends hb.
func endBehindGate(t *testing.T, s *sched.Scheduler, blocker *gated, hb, h sched.Handle) {
	t.Helper()
	blocker.open()
	_, err := waitEnd(t, s, h)
	require.NoError(t, err)
	require.NoError(t, s.Terminate(hb.PID()))
	_, err = waitEnd(t, s, hb)
	require.NoError(t, err)
}

// TestEventsBeforeTheFirstStepWakeIt: events queued for a new process
// before its first step, which that step does not get, wake it for a
// second step even though the first neither continues nor ends: the
// process must not be left waiting with them in its mailbox. One worker
// is kept busy so that they arrive first. The first step yields nothing,
// or yields what registers a pending yield under the process's lock
// (one yield, several, a run of spawns), where the worker looks at the
// mailbox on the way.
func TestEventsBeforeTheFirstStepWakeIt(t *testing.T) {
	for _, c := range []struct {
		name  string
		first func(out *sched.StepOutput)
	}{
		{"no yield", func(*sched.StepOutput) {}},
		{"one yield", func(out *sched.StepOutput) { out.Sleep(1, time.Hour) }},
		{"two yields", func(out *sched.StepOutput) {
			out.Sleep(1, time.Hour)
			out.Sleep(2, time.Hour)
		}},
		{"a run of spawns", func(out *sched.StepOutput) {
			out.SpawnAwait(1, &probe{step: untilMessage}, "run", nil)
			out.SpawnAwait(2, &probe{step: untilMessage}, "run", nil)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newScheduler(t, sched.WithWorkers(1))
			blocker, hb := submitGated(t, s)

			p := &probe{step: func(p *probe, n int, _ []sched.Event, out *sched.StepOutput) error {
				if n == 0 {
					c.first(out)
					return nil // and waits
				}
				if len(p.EventsOf(sched.EventMessage)) == 2 {
					out.Done(payload.Payload{})
				}
				return nil
			}}
			h := submit(t, s, p)
			require.NoError(t, s.Tell(h.PID(), 1))
			require.NoError(t, s.Tell(h.PID(), 2))
			endBehindGate(t, s, blocker, hb, h)

			batches := p.Batches()
			require.GreaterOrEqual(t, len(batches), 2)
			assert.Empty(t, batches[0], "events of the first step")
			assert.Len(t, batches[1], 2, "events of the second step")
			requireLifecycle(t, p)
		})
	}
}

// TestStepBatches: concurrent senders, a process that sometimes continues;
// every event arrives once, per sender in order, and no step after the
// first gets an empty batch unless the step before it continued.
func TestStepBatches(t *testing.T) {
	s := newScheduler(t, sched.WithWorkers(2))
	const senders, perSender = 4, 300
	type msg struct{ sender, seq int }
	p := &probe{step: func(p *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
		if n%7 == 3 {
			out.Continue()
		}
		if len(p.Events()) == senders*perSender {
			out.Done(payload.Payload{})
		}
		return nil
	}}
	h := submit(t, s, p)
	var wg sync.WaitGroup
	errs := make(chan error, senders)
	for sender := range senders {
		wg.Go(func() {
			for seq := range perSender {
				if err := s.Tell(h.PID(), msg{sender, seq}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	_, err := waitEnd(t, s, h)
	require.NoError(t, err)
	requireLifecycle(t, p)

	batches := p.Batches()
	assert.Empty(t, batches[0], "first step's events")
	for i := 1; i < len(batches); i++ {
		if continued := (i-1)%7 == 3; !continued { // as the step function decides
			assert.NotEmpty(t, batches[i], "step %d got no events though step %d asked to wait", i, i-1)
		}
	}
	next := make([]int, senders)
	for _, ev := range p.Events() {
		require.Equal(t, sched.EventMessage, ev.Type, "event %v", ev)
		m := ev.Data.(msg)
		require.Equal(t, next[m.sender], m.seq, "message order of sender %d", m.sender)
		next[m.sender]++
		assert.True(t, ev.From.IsZero(), "From of a message told from outside")
	}
	for sender, n := range next {
		assert.Equal(t, perSender, n, "messages from sender %d", sender)
	}
}

func TestTraceRegions(t *testing.T) {
	if trace.IsEnabled() {
		t.Skip("a trace is already being taken by the test binary") // go test -trace
	}
	var buf bytes.Buffer
	require.NoError(t, trace.Start(&buf))
	s := newScheduler(t)
	h, err := s.Submit(context.Background(), &probe{step: doneWith(1)}, "traced-entry", nil)
	require.NoError(t, err)
	_, err = waitEnd(t, s, h)
	require.NoError(t, err)
	trace.Stop()
	// Strings of the trace (region names, log messages) are stored
	// verbatim in its string table.
	require.Contains(t, buf.String(), "step", "the step region")
	require.Contains(t, buf.String(), h.PID().String()+" traced-entry", "the logged PID and method")
}

func TestWorkerGoroutinesCarryPprofLabels(t *testing.T) {
	s := newScheduler(t, sched.WithWorkers(3))
	_ = s
	var buf bytes.Buffer
	require.NoError(t, pprof.Lookup("goroutine").WriteTo(&buf, 1))
	out := buf.String()
	for _, want := range []string{`"procsched":"worker"`, `"worker":"0"`, `"worker":"2"`} {
		require.True(t, strings.Contains(out, want), "goroutine profile lacks label %s", want)
	}
}

// TestOwnGoroutinesCarryPprofLabels: besides the workers, the
// scheduler's own goroutines carry the label procsched, named for what
// they do: the watchdog, the blocking pool's goroutines, and the
// goroutine that carries a shutdown through.
func TestOwnGoroutinesCarryPprofLabels(t *testing.T) {
	labels := func() string {
		var buf bytes.Buffer
		require.NoError(t, pprof.Lookup("goroutine").WriteTo(&buf, 1))
		return buf.String()
	}
	working, release := make(chan struct{}), make(chan struct{})
	s := newScheduler(t, sched.WithWorkers(1), sched.WithHandler(cmdTest, func(c sched.Call) error {
		return c.Go(func(context.Context) (any, error) {
			close(working)
			<-release
			return nil, nil
		})
	}))
	h := submit(t, s, &probe{step: func(p *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
		if n == 0 {
			out.Yield(1, cmdTest, nil)
		}
		if len(p.EventsOf(sched.EventMessage)) > 0 { // not on cancel: the shutdown waits
			out.Done(payload.Payload{})
		}
		return nil
	}})
	receive(t, working, "the pool's work")
	out := labels()
	for _, want := range []string{`"procsched":"watchdog"`, `"procsched":"pool"`} {
		assert.Contains(t, out, want, "goroutine profile lacks label %s", want)
	}
	close(release)
	stopped := make(chan error, 1)
	go func() { stopped <- s.Shutdown(context.Background()) }()
	eventually(t, "the shutdown's goroutine", func() bool { return strings.Contains(labels(), `"procsched":"stopper"`) })
	require.NoError(t, s.Tell(h.PID(), "quit"))
	require.NoError(t, receive(t, stopped, "Shutdown"))
}

// batches counts the messages it is told, the steps that took them and
// the most one step took, and ends once it has want of them. Its fields
// are read after its Handle reports the end.
type batches struct {
	stepOnly
	want, got, steps, most int
}

func (p *batches) Step(evs []sched.Event, out *sched.StepOutput) error {
	if len(evs) > 0 {
		p.got += len(evs)
		p.steps++
		p.most = max(p.most, len(evs))
	}
	if p.got >= p.want {
		out.Done(payload.Payload{})
	}
	return nil
}

// fanOutBatches starts receivers batches processes, tells each of them
// perReceiver messages from a fanner (one to each per step, continuing
// until all are told), and returns them once all have ended.
func fanOutBatches(t *testing.T, s *sched.Scheduler, receivers, perReceiver int) []*batches {
	t.Helper()
	ps := make([]*batches, receivers)
	hs := make([]sched.Handle, receivers)
	pids := make([]relay.PID, receivers)
	for i := range ps {
		ps[i] = &batches{want: perReceiver}
		hs[i] = submit(t, s, ps[i])
		pids[i] = hs[i].PID()
	}
	submit(t, s, &fanner{to: pids, left: receivers * perReceiver})
	for _, h := range hs {
		_, err := waitEnd(t, s, h)
		require.NoError(t, err)
	}
	return ps
}

// TestContinuingProcessWaitsBehindWhatItWoke: with one worker, a process
// that keeps continuing and tells each of many receivers a message per
// step runs again, once its step budget is used up, only after the
// receivers that were queued have had their turn. So no receiver's
// mailbox gathers much more than one budget's worth of messages (a
// message per step of the producer's run). Were the process to come back
// at the next turn of the global queue, the receivers it woke last would
// take every turn in between, and the others would gather hundreds of
// messages each: all 300 of theirs in one step. The bound leaves room for
// the start, when receivers and producer still arrive through the global
// queue while the worker runs the first of them (up to two runs' worth
// were seen there).
func TestContinuingProcessWaitsBehindWhatItWoke(t *testing.T) {
	const receivers, perReceiver, budget = 300, 300, 16
	s := newScheduler(t, sched.WithWorkers(1), sched.WithStepBudget(budget))
	worst := 0
	for _, p := range fanOutBatches(t, s, receivers, perReceiver) {
		worst = max(worst, p.most)
	}
	t.Logf("the most messages a receiver took in one step: %d", worst)
	assert.LessOrEqual(t, worst, 3*budget, "messages a receiver took in one step")
}

// TestContinuingProcessHoldsWhatItWakes: with two workers, the receivers
// that a continuing process wakes with its messages stay on its worker
// until its run ends, out of the other worker's reach, so each gathers
// the messages of the whole run (one per step, up to the step budget)
// before it is stepped: 16 a step, or about 12 in a race build, which
// sends a quarter of the wakes past the next slot to the deque. Were
// they stealable at once, the other worker would mostly step each for
// the one to three messages that had arrived (unless it was slow to
// wake, as it sometimes is).
func TestContinuingProcessHoldsWhatItWakes(t *testing.T) {
	const receivers, budget = 200, 16
	const perReceiver = 20 * budget
	s := newScheduler(t, sched.WithWorkers(2), sched.WithStepBudget(budget))
	steps := 0
	for _, p := range fanOutBatches(t, s, receivers, perReceiver) {
		steps += p.steps
	}
	perStep := float64(receivers*perReceiver) / float64(steps)
	t.Logf("messages per receiver step: %.1f", perStep)
	assert.GreaterOrEqual(t, perStep, float64(budget)/2, "messages per receiver step")
}

// TestBusyWorkersLetGoroutinesRun: while every worker always has a
// process to run, a goroutine that a step starts runs within about a
// thousand steps, not when the Go runtime gets round to preempting the
// worker (about 10 ms, a hundred thousand such steps). The runtime queues
// the new goroutine on the processor of the worker that started it, and
// no idle processor is there to take it: it runs when that worker next
// yields its processor (every 1024 ticks while every worker is busy). One
// worker on one processor, so that the steps counted are that worker's
// own. Four goroutines started 50,000 steps apart, so that the runtime's
// preemptions, about 10 ms apart, cannot run every one of them soon after
// its start.
func TestBusyWorkersLetGoroutinesRun(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	s := newScheduler(t, sched.WithWorkers(1))
	const (
		spinners = 8
		every    = 50_000 // a step in this many starts a goroutine
		starts   = 4
		bound    = 4096 // steps run before a goroutine may run: four yield periods
	)
	var steps atomic.Int64
	stop := make(chan struct{})
	late := make(chan int64, starts) // steps run between a goroutine's start and its first instruction
	spin := stepFunc(func(_ []sched.Event, out *sched.StepOutput) error {
		if isClosed(stop) {
			out.Done(payload.Payload{})
			return nil
		}
		if n := steps.Add(1); n%every == 0 && n <= every*starts {
			go func() { late <- steps.Load() - n }()
		}
		out.Continue()
		return nil
	})
	hs := make([]sched.Handle, spinners)
	for i := range hs {
		hs[i] = submit(t, s, spin)
	}
	var got []int64
	for range starts {
		got = append(got, receive(t, late, "a goroutine started by a step"))
	}
	close(stop)
	for _, h := range hs {
		_, err := waitEnd(t, s, h)
		require.NoError(t, err)
	}
	t.Logf("late %v", got)
	for _, n := range got {
		require.Less(t, n, int64(bound), "steps run on the busy worker before a goroutine a step started ran: %v", got)
	}
}
