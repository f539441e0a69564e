package scheduler

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// TestCallerHelpRunsQueuedProcesses checks that with WithCallerHelp a
// caller that starts processes far ahead of the workers runs queued
// processes itself, on its own goroutine, each exactly once, and that
// without the option it runs none. The one worker is held, so whatever
// ran before the release ran on the caller.
func TestCallerHelpRunsQueuedProcesses(t *testing.T) {
	for _, help := range []bool{false, true} {
		name := map[bool]string{false: "without", true: "with"}[help]
		t.Run(name, func(t *testing.T) {
			opts := []Option{WithWorkers(1), WithWatchdog(0)}
			if help {
				opts = append(opts, WithCallerHelp())
			}
			s := newScheduler(t, opts...)
			release := holdWorker(t, s)
			caller := goroutineID()
			runs := make([]atomic.Int32, manyStarts)
			var onCaller, ended atomic.Int64
			for i := range manyStarts {
				_, err := s.Spawn(context.Background(), stepFunc(func(_ []Event, out *StepOutput) error {
					if goroutineID() == caller {
						onCaller.Add(1)
					}
					runs[i].Add(1)
					ended.Add(1)
					out.Done(payload.Payload{})
					return nil
				}), "leaf", nil)
				require.NoError(t, err)
			}
			helped := onCaller.Load()
			require.Equal(t, helped, ended.Load(), "processes ran off the caller while the only worker was held")
			st := s.Stats()
			require.Equal(t, uint64(helped), st.Helped, "Stats.Helped: the processes callers ran")
			if help {
				require.Positive(t, helped, "the caller ran no process in %d starts far ahead of a held worker", manyStarts)
				require.Less(t, helped, int64(manyStarts), "the caller ran every process")
				require.Positive(t, st.Helps, "Stats.Helps")
			} else {
				require.Zero(t, helped, "a caller without WithCallerHelp ran processes")
				require.Zero(t, st.Helps, "Stats.Helps without WithCallerHelp")
			}
			release()
			eventually(t, "every process ended", func() bool { return ended.Load() == manyStarts })
			for i := range runs {
				require.Equal(t, int32(1), runs[i].Load(), "process %d ran that many times", i)
			}
			ps := s.Stats().Processes
			require.Equal(t, uint64(manyStarts+1), ps.Ended, "the ends counted")
			require.Zero(t, ps.Live, "processes live once all ended")
		})
	}
}

// forkParent is a process that awaits two leaf children and tells a
// sink before it ends with the sum of their results, twice its input:
// what its runs leave on a helping caller's worker structure (children
// on its queue, the sink in its next slot, a parent claimed by its
// child's end) must reach the workers.
type forkParent struct {
	stepOnly
	i, got, sum int
	sink        relay.PID
	onCaller    *atomic.Int64
	caller      uint64
}

func (p *forkParent) Step(evs []Event, out *StepOutput) error {
	if p.got == 0 && len(evs) == 0 {
		for tag := uint64(1); tag <= 2; tag++ {
			out.SpawnAwait(tag, stepFunc(func(_ []Event, out *StepOutput) error {
				out.Done(payload.Of(p.i))
				return nil
			}), "leaf", nil)
		}
		out.Tell(p.sink, p.i)
		return nil
	}
	for _, ev := range evs {
		if ev.Type != EventYieldComplete {
			continue
		}
		if ev.Error != nil {
			return ev.Error
		}
		v, err := payload.As[int](ev.Result())
		if err != nil {
			return err
		}
		p.sum += v
		p.got++
	}
	if p.got == 2 {
		if goroutineID() == p.caller {
			p.onCaller.Add(1)
		}
		out.Done(payload.Of(p.sum))
	}
	return nil
}

// TestCallerHelpHandsBackWhatStepsLeave checks that what the steps a
// helping caller runs leave on its worker structure reaches the workers:
// the children a parent awaits, queued on the structure's own queue;
// the sink a parent tells, woken into its next slot; and parents
// claimed by a child's end on the caller. Before the worker is released,
// parents must have ended on the caller (their children ran in a later
// help, after the earlier help handed them back); afterwards every
// parent ends with its children's results and the sink gets every
// message. A structure that kept any of it would leave parents waiting.
func TestCallerHelpHandsBackWhatStepsLeave(t *testing.T) {
	s := newScheduler(t, WithWorkers(1), WithWatchdog(0), WithCallerHelp())
	const n = manyStarts / 4
	var told atomic.Int64
	sinkDone := make(chan struct{})
	sink, err := s.Spawn(context.Background(), stepFunc(func(evs []Event, out *StepOutput) error {
		for _, ev := range evs {
			if ev.Type == EventMessage && told.Add(1) == n {
				close(sinkDone)
				out.Done(payload.Payload{})
			}
		}
		return nil
	}), "sink", nil)
	require.NoError(t, err)
	release := holdWorker(t, s)
	var onCaller atomic.Int64
	caller := goroutineID()
	hs := make([]Handle, n)
	for i := range hs {
		hs[i], err = s.Submit(context.Background(), &forkParent{i: i, sink: sink, onCaller: &onCaller, caller: caller}, "parent", nil)
		require.NoError(t, err)
	}
	require.Positive(t, onCaller.Load(), "no parent ended on the helping caller")
	release()
	for i, h := range hs {
		v := waitInt(t, h, i)
		require.Equal(t, 2*i, v, "parent %d's result", i)
	}
	receive(t, sinkDone, "the sink's last message")
	require.Equal(t, int64(n), told.Load())
}

// TestCallerHelpStepPanics checks that a step that panics on a helping
// caller ends its process with a PanicError, as on a worker, and that
// the caller goes on: its start returns, and the processes after it in
// the same batch run.
func TestCallerHelpStepPanics(t *testing.T) {
	s := newScheduler(t, WithWorkers(1), WithWatchdog(0), WithCallerHelp())
	release := holdWorker(t, s)
	caller := goroutineID()
	var onCaller atomic.Int64
	hs := make([]Handle, manyStarts)
	for i := range hs {
		var err error
		hs[i], err = s.Submit(context.Background(), stepFunc(func(_ []Event, out *StepOutput) error {
			if goroutineID() == caller {
				onCaller.Add(1)
			}
			if i%3 == 0 {
				panic("step panics")
			}
			out.Done(payload.Of(i))
			return nil
		}), "leaf", nil)
		require.NoError(t, err)
	}
	require.Positive(t, onCaller.Load(), "no step ran on the helping caller")
	release()
	for i, h := range hs {
		res, err := waitResult(t, h)
		if i%3 == 0 {
			var perr *PanicError
			require.ErrorAs(t, err, &perr, "process %d", i)
			continue
		}
		require.NoError(t, err, "process %d", i)
		v, err := payload.As[int](res)
		require.NoError(t, err)
		require.Equal(t, i, v)
	}
}

// TestCallerHelpShutdownInStep checks that Shutdown called by a step
// that a helping caller runs does not wait for the stop, which would
// wait for that step: it returns ErrShutdownStarted, and the shutdown
// completes once the worker is released. The starts run on a goroutine
// of their own, so that a Shutdown that waited fails the test instead of
// hanging it.
func TestCallerHelpShutdownInStep(t *testing.T) {
	s := newScheduler(t, WithWorkers(1), WithWatchdog(0), WithCallerHelp())
	release := holdWorker(t, s)
	shut := make(chan error, 1)
	var asked atomic.Bool
	started := make(chan error, 1)
	go func() {
		caller := goroutineID()
		for range manyStarts {
			_, err := s.Spawn(context.Background(), stepFunc(func(evs []Event, out *StepOutput) error {
				if goroutineID() == caller && asked.CompareAndSwap(false, true) {
					shut <- s.Shutdown(context.Background())
				}
				out.Done(payload.Payload{})
				return nil
			}), "leaf", nil)
			if errors.Is(err, ErrClosed) {
				break // the shutdown began
			}
			if err != nil {
				started <- err
				return
			}
		}
		started <- nil
	}()
	err := receive(t, shut, "Shutdown's return in a step on the helping caller")
	require.ErrorIs(t, err, ErrShutdownStarted)
	require.NoError(t, receive(t, started, "the starts"))
	release()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	require.NoError(t, s.Shutdown(ctx))
}

// TestCallerHelpSendContextInStep checks that SendContext and
// TellContext called by a step that a helping caller runs do not wait
// for room in a full mailbox, as on a worker: here the step's own, which
// only the step's return can drain. They return an error wrapping
// ErrMailboxFull at once; their contexts end after a second, so that a
// wait shows as that error instead.
func TestCallerHelpSendContextInStep(t *testing.T) {
	s := newScheduler(t, WithWorkers(1), WithWatchdog(0), WithCallerHelp())
	release := holdWorker(t, s)
	defer release()
	sent := make(chan []error, 1)
	var asked atomic.Bool
	started := make(chan error, 1)
	go func() {
		caller := goroutineID()
		for range manyStarts {
			_, err := s.Spawn(context.Background(), stepFunc(func(evs []Event, out *StepOutput) error {
				if goroutineID() == caller && asked.CompareAndSwap(false, true) {
					self := out.Self()
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					defer cancel()
					sent <- []error{
						s.Tell(self, "fills the mailbox"),
						s.SendContext(ctx, relay.Message{To: self, Data: "more"}),
						s.TellContext(ctx, self, "more"),
					}
				}
				out.Done(payload.Payload{})
				return nil
			}), "leaf", nil, Mailbox(1, MailboxReject))
			if err != nil {
				started <- err
				return
			}
		}
		started <- nil
	}()
	errs := receive(t, sent, "the sends of a step on the helping caller")
	require.NoError(t, errs[0], "Tell")
	require.ErrorIs(t, errs[1], ErrMailboxFull, "SendContext")
	require.ErrorIs(t, errs[2], ErrMailboxFull, "TellContext")
	require.NoError(t, receive(t, started, "the starts"))
}

// TestCallerHelpOptionLimits checks that WithCallerHelp is accepted with
// the most workers, and that the helper's ID, after the last worker's,
// is one a run word can name.
func TestCallerHelpOptionLimits(t *testing.T) {
	s := newScheduler(t, WithWorkers(maxWorkers), WithCallerHelp())
	require.Equal(t, maxWorkers, s.helper.id, "the helper's ID")
	require.LessOrEqual(t, uint64(s.helper.id), workerMask, "the helper's ID does not fit a run word")
}

// TestHelperSeqBase checks the helper's yield sequence numbers: above
// every worker's and below a child's, and in worker 0's timer shard.
func TestHelperSeqBase(t *testing.T) {
	s := newScheduler(t, WithWorkers(3), WithWatchdog(0), WithCallerHelp())
	first := s.helper.seq // no help has run: nothing else reads it
	require.Equal(t, helperSeqBase(3), first, "the helper's first sequence number")
	for range 3 {
		seq := s.helper.newSeq()
		_, shard := s.timers.shardOf(seq)
		require.Zero(t, shard, "the helper's yield %d is not in worker 0's timer shard", seq)
	}
	require.Equal(t, first+9, s.helper.seq, "the helper's sequence numbers do not step by the number of workers")

	for _, n := range []int{1, 2, 3, 4, 7, 8, 64, 1000, maxWorkers - 1} {
		base := helperSeqBase(n)
		require.GreaterOrEqual(t, base, uint64(1)<<61, "workers %d", n)
		require.Less(t, base+uint64(n)*1e9, seqChild, "workers %d", n)
		require.Equal(t, uint64(0), (base-1)%uint64(n), "workers %d: not worker 0's shard", n)
	}
}

// waitResult waits for h's process to end and returns its result and
// error, failing the test if it does not end within testTimeout.
func waitResult(t *testing.T, h Handle) (payload.Payload, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	res, err := h.Wait(ctx)
	require.NotErrorIs(t, err, context.DeadlineExceeded, "process %v did not end within %v", h.PID(), testTimeout)
	return res, err
}

// waitInt waits for h's process, the i-th a test started, to end with an
// int result, and returns it, failing the test otherwise.
func waitInt(t *testing.T, h Handle, i int) int {
	t.Helper()
	res, err := waitResult(t, h)
	require.NoError(t, err, "process %d", i)
	v, err := payload.As[int](res)
	require.NoError(t, err, "process %d's result", i)
	return v
}

// TestAllocSpawnWhileHelping pins what a Spawn from outside allocates
// while its caller helps: with the one worker held, the caller runs
// every process that ends, and the records of those it ended must serve
// its later starts, as those a worker ends do. The process value is one
// value used for every start, so what is counted is the scheduler's:
// without the reuse, a record a start (1.0).
func TestAllocSpawnWhileHelping(t *testing.T) {
	s := newScheduler(t, WithWorkers(1), WithWatchdog(0), WithCallerHelp())
	holdWorker(t, s)
	const n = 4096
	ctx := context.Background()
	spawn := func() {
		for range n {
			if _, err := s.Spawn(ctx, leafProcess, "leaf", nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	for range manyStarts / n {
		spawn() // the queue grown, and the caller helping
	}
	before := s.Stats().Helped
	perProc := testing.AllocsPerRun(10, spawn) / n
	require.Greater(t, s.Stats().Helped, before, "the caller did not help")
	bound := 0.1
	if raceEnabled {
		bound += 0.5
	}
	t.Logf("%.3f allocations per Spawn while helping", perProc)
	require.LessOrEqual(t, perProc, bound, "allocations per Spawn while the caller helps")
}

// leafProcess ends in its first step; one value serves every start.
var leafProcess Process = stepFunc(func(_ []Event, out *StepOutput) error {
	out.Done(payload.Payload{})
	return nil
})
