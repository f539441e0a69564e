package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// Stress: callers that help (WithCallerHelp). Several goroutines start
// processes as fast as they can, far ahead of the workers, so that they
// run queued processes themselves while the workers run the rest and
// while each other start, send and, in one variant, shut down. The
// processes leave on a helping caller what steps leave on a worker:
// children awaited (fork-join), messages to a sink, timers. Every
// process must run its Init once and its Close once, never two calls at
// once, and end with its right result; the sink must get each message
// once.

// helpedProc is one process of the stress run, of one of three kinds
// chosen by its index: a leaf that ends in its first step; a fib(4)
// fork-join; one that tells the sink and sleeps before it ends. Each
// ends with its index (the fork-join with fib(4)), or at a cancel.
type helpedProc struct {
	guard
	i     int
	sink  relay.PID
	sleep time.Duration
	fib   *fibProc
	steps int
}

// helpedKinds is the number of kinds of helpedProc.
const helpedKinds = 3

func (p *helpedProc) Step(evs []sched.Event, out *sched.StepOutput) error {
	p.enter("Step")
	defer p.exit("Step")
	for _, ev := range evs {
		if ev.Type == sched.EventCancel {
			out.Done(payload.Payload{})
			return nil
		}
	}
	n := p.steps
	p.steps++
	switch p.i % helpedKinds {
	case 0:
		out.Done(payload.Of(p.i))
	case 1:
		return p.fib.Step(evs, out)
	case 2:
		if n == 0 {
			out.Tell(p.sink, p.i)
			out.Sleep(1, p.sleep)
			return nil
		}
		out.Done(payload.Of(p.i))
	}
	return nil
}

// helpSink counts the messages told to it, each index once.
type helpSink struct {
	stepOnly
	f    *violations
	seen []atomic.Int32
	n    atomic.Int64
}

func (k *helpSink) Step(evs []sched.Event, out *sched.StepOutput) error {
	for _, ev := range evs {
		switch ev.Type {
		case sched.EventCancel:
			out.Done(payload.Payload{})
		case sched.EventMessage:
			i, ok := ev.Data.(int)
			if !ok {
				k.f.addf("sink: message %v is no index", ev.Data)
				continue
			}
			if c := k.seen[i].Add(1); c != 1 {
				k.f.addf("sink: message of %d came %d times", i, c)
			}
			k.n.Add(1)
		}
	}
	return nil
}

func TestStressCallerHelp(t *testing.T) {
	for _, shut := range []bool{false, true} {
		t.Run(map[bool]string{false: "run", true: "shutdown"}[shut], func(t *testing.T) {
			var helped uint64
			eachConfig(t, 0x4e1b, 4, func(t *testing.T, cfg stressConfig) {
				helped += stressCallerHelp(t, cfg, shut)
			})
			// Each configuration's callers run far ahead of the workers;
			// a build in which they never helped tested nothing here.
			require.Positive(t, helped, "no caller helped in any configuration")
		})
	}
}

// stressCallerHelp is one configuration of TestStressCallerHelp; it
// returns how many processes callers ran. With shut, the test shuts the
// scheduler down while the callers start processes, and the callers stop
// at ErrClosed.
func stressCallerHelp(t *testing.T, cfg stressConfig, shut bool) uint64 {
	const callers = 3
	perCaller := 6000 * stressScale
	total := callers * perCaller
	var f violations
	s, err := sched.New(cfg.options(sched.WithCallerHelp())...)
	require.NoError(t, err)
	shutdown := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		return s.Shutdown(ctx)
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = shutdown()
		}
	}()

	sink := &helpSink{f: &f, seen: make([]atomic.Int32, total)}
	sinkH, err := s.Submit(context.Background(), sink, "sink", nil)
	require.NoError(t, err)

	procs := make([]*helpedProc, total)
	handles := make([]sched.Handle, total)
	started := make([]bool, total)
	var spawned atomic.Int64
	var wg sync.WaitGroup
	var begun sync.WaitGroup
	begun.Add(callers)
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := cfg.rng(uint64(c))
			counted := false
			for k := range perCaller {
				i := c*perCaller + k
				p := &helpedProc{
					guard: guard{name: fmt.Sprintf("process %d", i), f: &f},
					i:     i,
					sink:  sinkH.PID(),
					sleep: time.Duration(rng.IntN(50)) * time.Microsecond,
				}
				if i%helpedKinds == 1 {
					p.fib = &fibProc{n: 4, spawned: &spawned, prog: &progress{}}
				}
				procs[i] = p
				h, err := s.Submit(context.Background(), p, "run", nil)
				if k == perCaller/4 && !counted {
					counted = true
					begun.Done()
				}
				if shut && errors.Is(err, sched.ErrClosed) {
					break
				}
				if err != nil {
					f.addf("caller %d: start %d: %v", c, i, err)
					break
				}
				handles[i], started[i] = h, true
			}
			if !counted {
				begun.Done()
			}
		}()
	}
	if shut {
		begun.Wait() // every caller a quarter of the way
		require.NoError(t, shutdown())
		stopped = true
	}
	wg.Wait()

	tells := 0
	wait, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	for i, ok := range started {
		if !ok {
			continue
		}
		res, err := handles[i].Wait(wait)
		if errors.Is(err, context.DeadlineExceeded) {
			f.addf("process %d did not end within %v", i, testTimeout)
			break
		}
		if shut {
			// A fork-join's child cancelled by the shutdown ends with the
			// cancel's error, and one spawned after it began is refused
			// with ErrClosed; its parent returns either.
			if err != nil && !errors.Is(err, sched.ErrShuttingDown) && !errors.Is(err, sched.ErrClosed) {
				f.addf("process %d: %v", i, err)
			}
		} else {
			want := i
			if i%helpedKinds == 1 {
				want = 3 // fib(4)
			}
			if got, perr := payload.As[int](res); err != nil || perr != nil || got != want {
				f.addf("process %d: result %v, %v; want %d", i, res, err, want)
			}
			if i%helpedKinds == 2 {
				tells++
			}
		}
		procs[i].checkClosedOnce()
	}
	if !shut {
		eventually(t, "the sink's messages", func() bool { return sink.n.Load() == int64(tells) })
	}
	helped := s.Stats().Helped
	if !stopped {
		require.NoError(t, shutdown())
		stopped = true
	}
	f.check(t)
	return helped
}
