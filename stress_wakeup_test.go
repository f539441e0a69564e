package scheduler_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// Stress: no wake-up is lost. A process that waits is woken by every
// event that reaches it, whatever point of a worker's way from Step to
// its next state the event lands on.
//
// Sizes: see stressConfigs (helpers_test.go) for how -short shrinks the
// run and stressScale for how the stress build tag enlarges it.

// wakeKick asks a waker goroutine to Tell pid round, after spinning for
// delay iterations; if ack is set, the waker sets it once Tell returned.
type wakeKick struct {
	pid   relay.PID
	round int32
	delay int
	ack   *atomic.Bool
}

type wakeWorld struct {
	kicks    chan wakeKick
	maxDelay int
	f        violations
	prog     progress
}

// wakeProc never continues: each round it waits for one or two events
// sent by other goroutines right as its step ends, timed to land while
// the worker is between Step and the waiting state, during Step, or just
// after. A lost wakeup leaves it waiting forever with an event queued.
type wakeProc struct {
	w *wakeWorld
	guard
	idx       int
	rng       *rand.Rand
	rounds    int
	round     int
	needMsg   bool
	needDone  bool
	tag       uint64
	ack       atomic.Bool
	mode      int
	reportedA atomic.Int64 // round<<8 | mode<<2 | needMsg<<1 | needDone, for the stall report
}

const (
	wakeAsync  = iota // async completion (pool, at once) and a kick after the step
	wakeDuring        // a kick that lands while Step runs: the Running+flagWake path
	wakeIdle          // wait idle for a kick after the step
	wakeSync          // a completion during dispatch and a kick after the step
	wakeTimer         // a zero timer and a kick after the step
	wakeOnly          // only an async completion at once
	wakeModes
)

func (p *wakeProc) Step(evs []sched.Event, out *sched.StepOutput) error {
	p.guard.enter("Step")
	defer p.guard.exit("Step")
	w := p.w
	for _, ev := range evs {
		switch ev.Type {
		case sched.EventMessage:
			if r, ok := ev.Data.(int32); !ok || !p.needMsg || int(r) != p.round {
				w.f.addf("proc %d round %d: unexpected message %v", p.idx, p.round, ev)
			}
			p.needMsg = false
		case sched.EventYieldComplete:
			if !p.needDone || ev.Tag != p.tag || ev.Error != nil {
				w.f.addf("proc %d round %d: unexpected completion %v", p.idx, p.round, ev)
			}
			p.needDone = false
		default:
			w.f.addf("proc %d: unexpected event %v", p.idx, ev)
		}
	}
	defer p.report()
	if p.needMsg || p.needDone {
		return nil
	}
	if p.round > 0 {
		w.prog.tick()
	}
	if p.round == p.rounds {
		out.Done(payload.Payload{})
		return nil
	}
	p.round++
	p.tag++
	p.mode = p.rng.IntN(wakeModes)
	delay := 0
	if p.rng.IntN(4) != 0 {
		delay = p.rng.IntN(w.maxDelay)
	}
	switch p.mode {
	case wakeAsync:
		out.Yield(p.tag, cmdAsync, delay)
		p.needDone = true
		p.kick(out.Self(), p.rng.IntN(w.maxDelay), nil)
	case wakeDuring:
		p.ack.Store(false)
		p.kick(out.Self(), delay, &p.ack)
		for !p.ack.Load() {
			runtime.Gosched()
		}
	case wakeIdle:
		p.kick(out.Self(), delay, nil)
	case wakeSync:
		out.Yield(p.tag, cmdSync, nil)
		p.needDone = true
		p.kick(out.Self(), delay, nil)
	case wakeTimer:
		out.Sleep(p.tag, 0)
		p.needDone = true
		p.kick(out.Self(), delay, nil)
	case wakeOnly:
		out.Yield(p.tag, cmdAsync, delay)
		p.needDone = true
	}
	return nil
}

func (p *wakeProc) kick(self relay.PID, delay int, ack *atomic.Bool) {
	p.needMsg = true
	select {
	case p.w.kicks <- wakeKick{pid: self, round: int32(p.round), delay: delay, ack: ack}:
	default:
		p.w.f.addf("proc %d: kick queue full", p.idx)
	}
}

func (p *wakeProc) report() {
	var m, d int64
	if p.needMsg {
		m = 1
	}
	if p.needDone {
		d = 1
	}
	p.reportedA.Store(int64(p.round)<<8 | int64(p.mode)<<2 | m<<1 | d)
}

// TestStressNoLostWakeup: processes that never continue, woken each round
// by events sent from other goroutines while Step runs, as it returns, or
// while the worker settles the process (asynchronous completions at once
// after a random spin, kicks from waker goroutines, timers, completions
// during dispatch). A lost wakeup leaves a process waiting with an event
// queued; the watchdog then fails with those processes listed.
func TestStressNoLostWakeup(t *testing.T) {
	eachConfig(t, 3, 12, func(t *testing.T, cfg stressConfig) {
		runWakeups(t, cfg, 64, 800*stressScale)
	})
}

func runWakeups(t *testing.T, cfg stressConfig, procs, rounds int) {
	w := &wakeWorld{kicks: make(chan wakeKick, procs), maxDelay: 3000}
	// Completions run at once (no pool delay), after a spin chosen by the
	// process, so they land anywhere from the handler's return to well
	// after the worker settled the process.
	pool := newAsyncPool(3, cfg.seed, 0)
	async := func(c sched.Call) error {
		comp, delay := c.Completion(), c.Arg.(int)
		pool.push(func() {
			spin(delay)
			if err := comp.Complete(nil, nil); err != nil {
				w.f.addf("async completion of %v tag %d: %v", comp.PID(), comp.Tag(), err)
			}
		})
		return nil
	}
	s := newScheduler(t, cfg.options(
		sched.WithHandler(cmdSync, completeAtOnce),
		sched.WithHandler(cmdAsync, async),
	)...)
	var wakers sync.WaitGroup
	for range 4 {
		wakers.Add(1)
		go func() {
			defer wakers.Done()
			for k := range w.kicks {
				spin(k.delay)
				if err := s.Tell(k.pid, k.round); err != nil {
					w.f.addf("kick %v round %d: %v", k.pid, k.round, err)
				}
				if k.ack != nil {
					k.ack.Store(true)
				}
			}
		}()
	}
	ctx := context.Background()
	ps := make([]*wakeProc, procs)
	hs := make([]sched.Handle, procs)
	for i := range ps {
		ps[i] = &wakeProc{w: w, idx: i, rng: cfg.rng(uint64(i)), rounds: rounds}
		ps[i].guard = guard{name: fmt.Sprintf("proc %d", i), f: &w.f}
		h, err := s.Submit(ctx, ps[i], "wake", nil)
		require.NoError(t, err)
		hs[i] = h
	}
	awaitProgress(t, s, &w.prog, allDone(hs), "no lost wakeup", func() string {
		var b strings.Builder
		for i, p := range ps {
			r := p.reportedA.Load()
			if int(r>>8) != rounds || r&3 != 0 {
				fmt.Fprintf(&b, "proc %d %v: round %d mode %d waits for message=%v completion=%v\n",
					i, hs[i].PID(), r>>8, r>>2&63, r&2 != 0, r&1 != 0)
			}
		}
		return b.String()
	})
	close(w.kicks)
	wakers.Wait()
	pool.close()
	for i, h := range hs {
		_, err := h.Wait(ctx)
		require.NoError(t, err, "proc %d", i)
		ps[i].guard.checkClosedOnce()
	}
	w.f.check(t)
}
