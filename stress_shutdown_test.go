package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// Stress: Shutdown during heavy traffic ends every process and loses
// none: processes that answer their cancel end gracefully, those that
// ignore it are forced at the deadline, and every Close runs once.
//
// Sizes: see stressConfigs (helpers_test.go) for how -short shrinks the
// run and stressScale for how the stress build tag enlarges it.

type trafficWorld struct {
	pids      []relay.PID
	f         violations
	prog      progress
	received  atomic.Int64
	busy      chan struct{} // closed when traffic reached its threshold
	busyOnce  sync.Once
	busyAt    int64
	closes    atomic.Int64 // Close calls of the processes that answer cancel
	cleanups  atomic.Int64 // cleanup completions received
	compliant int64
	allClosed chan struct{} // closed when every process that answers cancel has closed
	mu        sync.Mutex
	nevers    []sched.Completion
}

// ignoreMode is how a process of the forced-shutdown variant ignores its
// cancel event: the ways a process can be alive at a deadline.
type ignoreMode int

const (
	comply      ignoreMode = iota // answers cancel with a cleanup yield, then Done
	ignoreIdle                    // waits for messages
	ignoreNever                   // waits for a yield nobody completes
	ignoreSleep                   // waits for a timer an hour away
	ignoreBusy                    // keeps continuing
	ignoreKinds
)

type trafficProc struct {
	w *trafficWorld
	guard
	idx       int
	rng       *rand.Rand
	ignore    ignoreMode
	started   bool
	cancelled bool
	cleaning  bool
	spawned   bool
	spawnTag  uint64
	tagSet    // the yields not completed yet
}

func (p *trafficProc) Close() {
	p.guard.enterClose()
	p.guard.exitClose()
	p.w.prog.tick()
	if p.ignore == comply && p.w.closes.Add(1) == p.w.compliant {
		close(p.w.allClosed)
	}
}

func (p *trafficProc) Step(evs []sched.Event, out *sched.StepOutput) error {
	p.guard.enter("Step")
	defer p.guard.exit("Step")
	w := p.w
	cleaned := false
	for _, ev := range evs {
		switch ev.Type {
		case sched.EventCancel:
			p.cancelled = true
		case sched.EventMessage:
			if _, ok := ev.Data.(startMsg); ok {
				p.started = true
				continue
			}
			if ev.Error != nil {
				continue // a peer that finished
			}
			w.prog.tick()
			if n := w.received.Add(1); n == w.busyAt {
				w.busyOnce.Do(func() { close(w.busy) })
			}
		case sched.EventYieldComplete:
			if !p.complete(ev.Tag) {
				w.f.addf("proc %d: completion of tag %d that is not outstanding", p.idx, ev.Tag)
			}
			switch {
			case ev.Data == "cleanup":
				if ev.Error != nil {
					w.f.addf("proc %d: cleanup failed: %v", p.idx, ev.Error)
				}
				cleaned = true
				w.cleanups.Add(1)
			case p.spawned && ev.Tag == p.spawnTag:
				if !errors.Is(ev.Error, sched.ErrClosed) {
					w.f.addf("proc %d: spawn during shutdown completed with %v, want ErrClosed", p.idx, ev.Error)
				}
			case ev.Error != nil:
				w.f.addf("proc %d: yield %d failed: %v", p.idx, ev.Tag, ev.Error)
			}
		}
	}
	if p.cancelled && p.ignore == comply {
		switch {
		case p.cleaning:
			if cleaned {
				out.Done(payload.Payload{})
			}
		default:
			p.cleaning = true
			out.Yield(p.newTag(), cmdCleanup, "cleanup")
			if p.rng.IntN(4) == 0 {
				// New processes are refused from the start of
				// Shutdown; the spawn yield says so.
				p.spawned, p.spawnTag = true, p.newTag()
				out.Spawn(p.spawnTag, &trafficProc{}, "child", nil)
			}
		}
		return nil
	}
	if !p.started {
		return nil
	}
	switch p.ignore {
	case ignoreNever, ignoreSleep:
		if p.cancelled {
			return nil
		}
	case ignoreBusy:
		if p.cancelled {
			out.Continue()
			return nil
		}
	}
	for k := p.rng.IntN(4); k > 0; k-- {
		out.Tell(w.pids[p.rng.IntN(len(w.pids))], p.idx)
	}
	if p.cancelled {
		switch p.ignore {
		case ignoreNever:
			out.Yield(p.newTag(), cmdNever, nil)
		case ignoreSleep:
			out.Sleep(p.newTag(), time.Hour)
		}
		return nil
	}
	switch p.rng.IntN(5) {
	case 0:
		out.Continue()
	case 1, 2:
		out.Yield(p.newTag(), cmdAsync, nil)
	case 3:
		out.Sleep(p.newTag(), time.Duration(p.rng.IntN(200))*time.Microsecond)
	case 4:
		// Wait for messages from peers or from outside.
	}
	return nil
}

// TestStressShutdownUnderTraffic: Shutdown while processes exchange
// messages, external goroutines send, and asynchronous yields and timers
// are outstanding. Every process answers its cancel with a cleanup yield
// completed later by a pool goroutine (some also try a spawn, which must
// be refused with ErrClosed), and ends only then. Shutdown, with a
// generous deadline, must return nil with every Close called once; a
// scheduler that stops serving before the cleanups complete stalls and is
// dumped by the watchdog.
func TestStressShutdownUnderTraffic(t *testing.T) {
	eachConfig(t, 5, 16, func(t *testing.T, cfg stressConfig) {
		runShutdown(t, cfg, 64, 0, false)
	})
}

// TestStressShutdownForced: processes that ignore their cancel (idle,
// blocked on a yield nobody completes, sleeping, continuing) are alive at
// Shutdown's deadline. In the "exact" runs the deadline is the moment
// every process that answers cancel has closed, so exactly the ignorers
// must be forced; in the "timed" runs it is a short timeout that may also
// catch processes in the middle of their cleanup. Shutdown's error must
// wrap ErrForced and the context's error and give the number of forced
// processes, which must match Stats and the Handles that report
// ErrForced; every Close is called once and no goroutine is left.
func TestStressShutdownForced(t *testing.T) {
	for i, cfg := range stressConfigs(t, 6, 16) {
		name, timed := "exact/", i%2 == 1
		if timed {
			name = "timed/"
		}
		if !t.Run(name+cfg.String(), func(t *testing.T) {
			runShutdown(t, cfg, 48, 12, timed)
		}) {
			break // one failing configuration is enough to report
		}
	}
}

// runShutdown runs procs processes of which ignorers ignore cancel,
// lets traffic build up, and calls Shutdown. With no ignorers the
// deadline is generous and Shutdown must return nil.
func runShutdown(t *testing.T, cfg stressConfig, procs, ignorers int, timed bool) {
	ignoreCurrent := goleak.IgnoreCurrent()
	w := &trafficWorld{
		busy:      make(chan struct{}),
		busyAt:    int64(10000 * stressScale),
		compliant: int64(procs - ignorers),
		allClosed: make(chan struct{}),
	}
	pool := newAsyncPool(3, cfg.seed, 8)
	never := func(c sched.Call) error {
		w.mu.Lock()
		w.nevers = append(w.nevers, c.Completion())
		w.mu.Unlock()
		return nil
	}
	okErr := endedOrClosed
	s := newScheduler(t, cfg.options(
		sched.WithHandler(cmdAsync, completeLater(pool, &w.f, okErr)),
		// Cleanup completes later, from a pool goroutine. Only a forced
		// shutdown may beat it.
		sched.WithHandler(cmdCleanup, completeLater(pool, &w.f, func(err error) bool { return timed && okErr(err) })),
		sched.WithHandler(cmdNever, never),
	)...)
	ctx := context.Background()
	ps := make([]*trafficProc, procs)
	hs := make([]sched.Handle, procs)
	w.pids = make([]relay.PID, procs)
	for i := range ps {
		ig := comply
		if i < ignorers {
			ig = ignoreMode(1 + i%int(ignoreKinds-1))
			if ig == ignoreBusy && i >= int(ignoreKinds-1) {
				ig = ignoreIdle // one busy loop is enough on two cores
			}
		}
		ps[i] = &trafficProc{w: w, idx: i, rng: cfg.rng(uint64(i)), ignore: ig}
		ps[i].guard = guard{name: fmt.Sprintf("proc %d", i), f: &w.f}
		h, err := s.Submit(ctx, ps[i], "traffic", nil)
		require.NoError(t, err)
		hs[i], w.pids[i] = h, h.PID()
	}
	startAll(t, s, w.pids)

	stopExt := make(chan struct{})
	var ext sync.WaitGroup
	for e := range 2 {
		ext.Add(1)
		go func() {
			defer ext.Done()
			rng := cfg.rng(1<<41 + uint64(e))
			for i := 0; ; i++ {
				select {
				case <-stopExt:
					return
				default:
				}
				pid := w.pids[rng.IntN(len(w.pids))]
				if err := s.Tell(pid, -1); err != nil && !okErr(err) {
					w.f.addf("external Tell %v: %v", pid, err)
				}
				if i%8 == 0 {
					runtime.Gosched()
				}
			}
		}()
	}
	awaitProgress(t, s, &w.prog, w.busy, "traffic", nil)

	// Shutdown runs on its own goroutine so that the watchdog can dump
	// the processes while they are still alive if it stops progressing.
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	switch {
	case timed:
		sctx, cancel = context.WithTimeout(ctx, time.Duration(1+cfg.seed%5)*time.Millisecond)
		defer cancel()
	case ignorers > 0:
		go func() {
			select {
			case <-w.allClosed:
			case <-sctx.Done():
			}
			cancel()
		}()
	}
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(sctx) }()
	shutDone := make(chan struct{})
	var shutErr error
	go func() { shutErr = <-shut; close(shutDone) }()
	awaitProgress(t, s, &w.prog, shutDone, "shutdown", nil)

	close(stopExt)
	ext.Wait()
	if err := s.Tell(w.pids[0], -1); !errors.Is(err, sched.ErrClosed) {
		t.Errorf("Tell after Shutdown: got %v, want ErrClosed", err)
	}
	if _, err := s.Submit(ctx, &trafficProc{}, "late", nil); !errors.Is(err, sched.ErrClosed) {
		t.Errorf("Submit after Shutdown: got %v, want ErrClosed", err)
	}
	pool.close()
	for _, c := range w.nevers {
		if err := c.Complete(nil, nil); !errors.Is(err, sched.ErrClosed) {
			t.Errorf("completion after Shutdown: got %v, want ErrClosed", err)
		}
	}

	forced := 0
	for i, h := range hs {
		_, err := h.Wait(ctx)
		switch {
		case errors.Is(err, sched.ErrForced):
			forced++
			if !timed && ps[i].ignore == comply {
				t.Errorf("proc %d answers cancel but was forced", i)
			}
		case err != nil:
			t.Errorf("proc %d: %v", i, err)
		case ps[i].ignore != comply:
			t.Errorf("proc %d ignores cancel but ended with no error", i)
		}
		ps[i].guard.checkClosedOnce()
	}
	if got := s.Stats().Processes.Forced; got != uint64(forced) {
		t.Errorf("Stats().Processes.Forced = %d, but %d handles report ErrForced", got, forced)
	}
	switch {
	case forced == 0:
		require.NoError(t, shutErr, "Shutdown")
	case !errors.Is(shutErr, sched.ErrForced) || !errors.Is(shutErr, context.Canceled) && !errors.Is(shutErr, context.DeadlineExceeded):
		t.Errorf("Shutdown: got %v, want an error wrapping ErrForced and the context's error", shutErr)
	default:
		m := regexp.MustCompile(`(\d+) process`).FindStringSubmatch(shutErr.Error())
		if m == nil {
			t.Errorf("Shutdown: %q does not say how many processes were forced", shutErr)
		} else if n, _ := strconv.Atoi(m[1]); n != forced {
			t.Errorf("Shutdown: %q does not say %d processes were forced", shutErr, forced)
		}
	}
	if !timed && forced != ignorers {
		t.Errorf("%d processes forced, want the %d that ignore cancel", forced, ignorers)
	}
	if !timed && w.cleanups.Load() != int64(procs-ignorers) {
		t.Errorf("%d cleanups completed, want %d", w.cleanups.Load(), procs-ignorers)
	}
	w.f.check(t)
	goleak.VerifyNone(t, ignoreCurrent)
}
