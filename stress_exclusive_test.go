package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// Stress: no two workers ever step one process at once, and nothing
// runs a process's methods after its Close, however its wake-ups race:
// peers' and outside messages, synchronous, asynchronous and timer
// completions, and completions through a Call that outlived its handler.
//
// Sizes: see stressConfigs (helpers_test.go) for how -short shrinks the
// run and stressScale for how the stress build tag enlarges it.

type exclWorld struct {
	pids []relay.PID
	f    violations
	prog progress
}

// exclProc is driven by every kind of wake-up at once: messages from
// peers and from outside, synchronous, asynchronous and timer
// completions, and Continue, so that wake-ups race with its steps. Its
// guard catches any overlap; it also checks that a step without events
// follows only a Continue, and that every yield completes exactly once.
type exclProc struct {
	w *exclWorld
	guard
	idx       int
	rng       *rand.Rand
	started   bool
	stepped   bool
	continued bool
	left      int
	tagSet    // the yields not completed yet
}

func (p *exclProc) Close() {
	p.guard.enterClose()
	runtime.Gosched() // widen the window in which a late Step would be caught
	p.guard.exitClose()
}

func (p *exclProc) Step(evs []sched.Event, out *sched.StepOutput) error {
	p.guard.enter("Step")
	defer p.guard.exit("Step")
	w := p.w
	if p.rng.IntN(4) == 0 {
		// Hold the flag across a reschedule, so that a second worker
		// claiming this process meanwhile is caught.
		runtime.Gosched()
	}
	if len(evs) == 0 && p.stepped && !p.continued {
		w.f.addf("proc %d: stepped with no events without asking to continue", p.idx)
	}
	p.stepped, p.continued = true, false
	for _, ev := range evs {
		switch ev.Type {
		case sched.EventMessage:
			if _, ok := ev.Data.(startMsg); ok {
				p.started = true
			}
		case sched.EventYieldComplete:
			if !p.complete(ev.Tag) {
				w.f.addf("proc %d: completion of tag %d that is not outstanding (%v)", p.idx, ev.Tag, ev)
			}
			if ev.Error != nil {
				w.f.addf("proc %d: yield %d failed: %v", p.idx, ev.Tag, ev.Error)
			}
		default:
			w.f.addf("proc %d: unexpected event %v", p.idx, ev)
		}
	}
	if !p.started {
		return nil
	}
	w.prog.tick()
	p.left--
	if p.left <= 0 {
		if p.outstanding() == 0 {
			out.Done(payload.Payload{})
		}
		return nil // the outstanding completions wake it
	}
	for k := p.rng.IntN(3); k > 0; k-- {
		out.Tell(w.pids[p.rng.IntN(len(w.pids))], p.idx)
	}
	switch p.rng.IntN(6) {
	case 0:
		out.Continue()
		p.continued = true
	case 1:
		out.Yield(p.newTag(), cmdSync, nil)
	case 2:
		for k := 1 + p.rng.IntN(3); k > 0; k-- {
			out.Yield(p.newTag(), cmdAsync, nil)
		}
	case 3:
		out.Sleep(p.newTag(), time.Duration(p.rng.IntN(100))*time.Microsecond)
	case 4:
		out.Yield(p.newTag(), cmdAsync, nil)
		out.Yield(p.newTag(), cmdSync, nil)
		out.Sleep(p.newTag(), 0)
	case 5:
		// Wait for a message: the external senders reach every
		// process in turn.
	}
	return nil
}

// TestStressNoConcurrentSteps: processes woken at once by peers' and
// external messages, synchronous, asynchronous (pool) and timer
// completions, completions through a Call that outlived its handler, and
// Continue. Their guard fails if Init, Step or Close of one process ever
// overlap, if anything runs after Close or Close runs twice; they also
// check that a step with no events follows only a Continue, that every
// yield completes exactly once, and that a second or bogus completion is
// refused without delivering anything.
func TestStressNoConcurrentSteps(t *testing.T) {
	eachConfig(t, 2, 12, func(t *testing.T, cfg stressConfig) {
		runExclusive(t, cfg, 64, 200*stressScale)
	})
}

func runExclusive(t *testing.T, cfg stressConfig, procs, steps int) {
	w := &exclWorld{}
	pool := newAsyncPool(3, cfg.seed, 4)
	// Handlers also tell a peer through their Call, during the handler
	// (the recipient is handed to the handler's worker) or later from a
	// pool goroutine (the Call outlives its handler and the handoff is
	// closed, or open for another handler of the same worker). The
	// asynchronous handler completes through the Call or the Completion,
	// then completes a second time, which must fail without delivering a
	// second event.
	peer := func(c sched.Call) relay.PID { return w.pids[mix64(c.PID.ID^c.Tag)%uint64(len(w.pids))] }
	tellOK := func(what string, err error) {
		if err != nil && !errors.Is(err, sched.ErrProcessNotFound) {
			w.f.addf("%s: %v", what, err)
		}
	}
	syncHandler := func(c sched.Call) error {
		if c.Tag%2 == 0 {
			tellOK("Call.Tell in a handler", c.Tell(peer(c), -2))
		}
		return c.Complete(nil, nil)
	}
	async := func(c sched.Call) error {
		pool.push(func() {
			if c.Tag%2 == 0 {
				tellOK("Call.Tell after the handler", c.Tell(peer(c), -3))
			}
			var err error
			if c.Tag%3 == 0 {
				err = c.Complete(nil, nil)
			} else {
				err = c.Completion().Complete(nil, nil)
			}
			if err != nil {
				w.f.addf("async completion of %v tag %d: %v", c.PID, c.Tag, err)
			}
			if err := c.Completion().Complete(nil, nil); !errors.Is(err, sched.ErrYieldNotPending) && !errors.Is(err, sched.ErrProcessNotFound) {
				w.f.addf("second completion of %v tag %d: got %v, want ErrYieldNotPending or ErrProcessNotFound", c.PID, c.Tag, err)
			}
		})
		return nil
	}
	s := newScheduler(t, cfg.options(
		sched.WithHandler(cmdSync, syncHandler),
		sched.WithHandler(cmdAsync, async),
	)...)
	ctx := context.Background()
	ps := make([]*exclProc, procs)
	hs := make([]sched.Handle, procs)
	w.pids = make([]relay.PID, procs)
	rng := cfg.rng(1 << 40)
	for i := range ps {
		ps[i] = &exclProc{w: w, idx: i, rng: cfg.rng(uint64(i)), left: steps/2 + rng.IntN(steps)}
		ps[i].guard = guard{name: fmt.Sprintf("proc %d", i), f: &w.f}
		h, err := s.Submit(ctx, ps[i], "exclusive", nil)
		require.NoError(t, err)
		hs[i], w.pids[i] = h, h.PID()
	}
	startAll(t, s, w.pids)

	stop := make(chan struct{})
	var ext sync.WaitGroup
	for e := range 2 {
		ext.Add(1)
		go func() {
			defer ext.Done()
			rng := cfg.rng(1<<41 + uint64(e))
			live := append([]relay.PID(nil), w.pids...)
			for len(live) > 0 {
				for i := 0; i < len(live); i++ {
					select {
					case <-stop:
						return
					default:
					}
					pid := live[i]
					if err := s.Tell(pid, -1); errors.Is(err, sched.ErrProcessNotFound) {
						live[i] = live[len(live)-1]
						live = live[:len(live)-1]
						i--
						continue
					} else if err != nil {
						w.f.addf("external Tell %v: %v", pid, err)
					}
					if i%8 != 0 {
						continue
					}
					// A completion nobody asked for delivers nothing.
					tag := 1<<62 + rng.Uint64N(1<<20)
					if err := s.CompleteYield(pid, tag, nil, nil); !errors.Is(err, sched.ErrYieldNotPending) && !errors.Is(err, sched.ErrProcessNotFound) {
						w.f.addf("bogus CompleteYield %v tag %d: got %v, want ErrYieldNotPending or ErrProcessNotFound", pid, tag, err)
					}
				}
				runtime.Gosched()
			}
		}()
	}

	awaitProgress(t, s, &w.prog, allDone(hs), "no concurrent steps", nil)
	close(stop)
	ext.Wait()
	pool.close()
	for i, h := range hs {
		_, err := h.Wait(ctx)
		require.NoError(t, err, "proc %d", i)
		ps[i].guard.checkClosedOnce()
	}
	w.f.check(t)
}
