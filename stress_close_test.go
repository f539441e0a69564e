package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
)

// Stress: Close runs exactly once for every process whose Init ran,
// whatever the ending: done, error, panic, Init failure, terminate (idle,
// busy, in cleanup, racing its own end), shutdown, and a spawner that
// awaits children of those kinds.
//
// Sizes: see stressConfigs (helpers_test.go) for how -short shrinks the
// run and stressScale for how the stress build tag enlarges it.

// endKind is how a lifeProc ends.
type endKind int

const (
	endDone             endKind = iota // Done after some steps
	endError                           // Step returns an error
	endPanic                           // Step panics
	endClosePanic                      // Done, then Close panics
	endInitError                       // Init returns an error
	endInitPanic                       // Init panics
	endTerminate                       // runs until terminated, answers cancel with Done
	endTerminateError                  // runs until terminated, answers cancel with an error
	endTerminateCleanup                // runs until terminated, answers cancel with an async cleanup yield, then Done
	endTerminateBusy                   // keeps continuing until terminated
	endTerminateRace                   // Done after some steps, terminated at a random moment too
	endShutdown                        // runs until Shutdown cancels it
	endSpawner                         // spawns children of the first six kinds, awaits some, then Done
	endKinds
)

var endNames = [...]string{"done", "error", "panic", "close-panic", "init-error", "init-panic",
	"terminate", "terminate-error", "terminate-cleanup", "terminate-busy", "terminate-race", "shutdown", "spawner"}

func (k endKind) String() string { return endNames[k] }

// terminated reports whether the test terminates processes of kind k.
func (k endKind) terminated() bool { return k >= endTerminate && k <= endTerminateRace }

type lifeWorld struct {
	cfg    stressConfig
	f      violations
	prog   progress
	mu     sync.Mutex
	guards []*guard // every process created, children included
	nevers []sched.Completion
	seq    atomic.Int64
}

func (w *lifeWorld) newProc(kind endKind, rng *rand.Rand) *lifeProc {
	n := w.seq.Add(1)
	p := &lifeProc{w: w, kind: kind, rng: rand.New(rand.NewPCG(w.cfg.seed, uint64(n)<<8)), steps: 1 + rng.IntN(12)}
	p.guard = guard{name: fmt.Sprintf("%v process #%d", kind, n), f: &w.f}
	w.mu.Lock()
	w.guards = append(w.guards, &p.guard)
	w.mu.Unlock()
	return p
}

type lifeProc struct {
	w *lifeWorld
	guard
	kind      endKind
	rng       *rand.Rand
	steps     int
	n         int
	tagSet    // the yields not completed yet
	cancelled bool
	cleaning  bool
	children  map[uint64]endKind // awaited children by tag
	parked    bool               // waiting for the end, on a never-completed yield or idle
}

func (p *lifeProc) Init(context.Context, string, payload.Payloads) error {
	p.guard.enter("Init")
	defer p.guard.exit("Init")
	switch p.kind {
	case endInitError:
		return errStressBoom
	case endInitPanic:
		panic(errStressBoom)
	}
	return nil
}

func (p *lifeProc) Close() {
	p.guard.enterClose()
	p.guard.exitClose()
	p.w.prog.tick()
	if p.kind == endClosePanic {
		panic("close-panic")
	}
}

func (p *lifeProc) Step(evs []sched.Event, out *sched.StepOutput) error {
	p.guard.enter("Step")
	defer p.guard.exit("Step")
	w := p.w
	cleaned := false
	for _, ev := range evs {
		switch ev.Type {
		case sched.EventCancel:
			if p.cancelled {
				w.f.addf("%s: second cancel event", p.guard.name)
			}
			p.cancelled = true
		case sched.EventYieldComplete:
			if !p.complete(ev.Tag) {
				w.f.addf("%s: completion of tag %d that is not outstanding", p.guard.name, ev.Tag)
			}
			if kind, ok := p.children[ev.Tag]; ok {
				p.checkChild(kind, ev)
				delete(p.children, ev.Tag)
				continue
			}
			if ev.Error != nil {
				w.f.addf("%s: yield %d failed: %v", p.guard.name, ev.Tag, ev.Error)
			}
			if ev.Data == "cleanup" {
				cleaned = true
			}
		default:
			w.f.addf("%s: unexpected event %v", p.guard.name, ev)
		}
	}
	p.n++
	if p.cancelled {
		switch {
		case p.cleaning:
			if cleaned {
				out.Done(payload.Of("cancelled"))
			}
		case p.kind == endTerminateError:
			return errStressBoom
		case p.kind == endTerminateCleanup:
			out.Yield(p.newTag(), cmdCleanup, "cleanup")
			p.cleaning = true
		default:
			out.Done(payload.Of("cancelled"))
		}
		return nil
	}
	if p.kind == endSpawner {
		return p.spawn(out)
	}
	if p.n >= p.steps {
		switch p.kind {
		case endDone, endClosePanic, endTerminateRace:
			out.Done(payload.Of(p.kind.String()))
			return nil
		case endError:
			return errStressBoom
		case endPanic:
			panic(p.kind.String())
		case endTerminateBusy:
			out.Continue()
			return nil
		}
		// Terminate and shutdown kinds wait for their cancel, idle or
		// on a yield that nobody completes.
		if !p.parked {
			p.parked = true
			if p.rng.IntN(2) == 0 {
				out.Yield(p.newTag(), cmdNever, nil)
			}
		}
		return nil
	}
	p.activity(out)
	return nil
}

// activity is a random step of work before the process's end.
func (p *lifeProc) activity(out *sched.StepOutput) {
	switch p.rng.IntN(4) {
	case 0:
		out.Continue()
	case 1:
		out.Yield(p.newTag(), cmdSync, nil)
	case 2:
		out.Yield(p.newTag(), cmdAsync, nil)
	case 3:
		out.Sleep(p.newTag(), time.Duration(p.rng.IntN(20))*time.Microsecond)
	}
}

// spawn starts the spawner's children in its first step and finishes
// when every awaited one has reported.
func (p *lifeProc) spawn(out *sched.StepOutput) error {
	if p.children == nil {
		p.children = map[uint64]endKind{}
		for range 2 + p.rng.IntN(5) {
			kind := endKind(p.rng.IntN(int(endInitPanic) + 1))
			child := p.w.newProc(kind, p.rng)
			tag := p.newTag()
			if p.rng.IntN(3) == 0 {
				// Not awaited: completes with the PID, or Init's error.
				out.Spawn(tag, child, "child", nil)
				p.children[tag] = -1 - kind
			} else {
				out.SpawnAwait(tag, child, "child", nil)
				p.children[tag] = kind
			}
		}
		return nil
	}
	if len(p.children) == 0 {
		out.Done(payload.Of(p.kind.String()))
	}
	return nil
}

// checkChild checks the completion of a spawn yield for a child of kind
// (or -1-kind for a spawn that is not awaited).
func (p *lifeProc) checkChild(kind endKind, ev sched.Event) {
	w := p.w
	awaited := kind >= 0
	if !awaited {
		kind = -1 - kind
	}
	var ok bool
	switch {
	case kind == endInitError:
		ok = errors.Is(ev.Error, sched.ErrInit) && errors.Is(ev.Error, errStressBoom)
	case kind == endInitPanic:
		ok = errors.Is(ev.Error, sched.ErrInit) && errors.Is(ev.Error, sched.ErrPanic)
	case !awaited:
		ok = ev.Error == nil && !ev.From.IsZero() && ev.Data == nil
	case kind == endDone:
		ok = ev.Error == nil && ev.Result() == payload.Of(kind.String()) && !ev.From.IsZero()
	case kind == endError:
		ok = errors.Is(ev.Error, errStressBoom)
	case kind == endPanic:
		var pe *sched.PanicError
		ok = errors.As(ev.Error, &pe) && pe.Where == "Step"
	case kind == endClosePanic:
		var pe *sched.PanicError
		ok = errors.As(ev.Error, &pe) && pe.Where == "Close"
	}
	if !ok {
		w.f.addf("%s: child of kind %v (awaited %v) completed with %v", p.guard.name, kind, awaited, ev)
	}
}

// checkEnd checks what a process's handle reported.
func (w *lifeWorld) checkEnd(kind endKind, res payload.Payload, err error) error {
	var ok bool
	switch kind {
	case endDone, endSpawner:
		ok = err == nil && res == payload.Of(kind.String())
	case endError, endTerminateError:
		ok = errors.Is(err, errStressBoom)
	case endPanic:
		var pe *sched.PanicError
		ok = errors.As(err, &pe) && pe.Where == "Step" && pe.Value == kind.String() && len(pe.Stack) > 0
	case endClosePanic:
		var pe *sched.PanicError
		ok = errors.As(err, &pe) && pe.Where == "Close"
	case endTerminate, endTerminateCleanup, endTerminateBusy, endShutdown:
		ok = err == nil && res == payload.Of("cancelled")
	case endTerminateRace:
		ok = err == nil && (res == payload.Of("cancelled") || res == payload.Of(kind.String()))
	}
	if ok {
		return nil
	}
	return fmt.Errorf("%v process ended with (%v, %v)", kind, res, err)
}

// TestStressCloseExactlyOnce: processes ending every way there is (done,
// error, panic in Step, Close that panics, Init error or panic, Terminate
// answered by done, error or an asynchronous cleanup, Terminate racing
// with a natural end, a busy loop terminated, Shutdown), and spawners
// whose children, awaited or not, end those ways too. Init and Close are
// counted per process: every process whose Init ran is closed exactly
// once, after its last step; every Handle reports the right outcome and
// every awaited child's result reaches its parent.
func TestStressCloseExactlyOnce(t *testing.T) {
	eachConfig(t, 4, 24, func(t *testing.T, cfg stressConfig) {
		runLifecycle(t, cfg, 800*stressScale)
	})
}

func runLifecycle(t *testing.T, cfg stressConfig, procs int) {
	w := &lifeWorld{cfg: cfg}
	pool := newAsyncPool(3, cfg.seed, 4)
	never := func(c sched.Call) error {
		w.mu.Lock()
		w.nevers = append(w.nevers, c.Completion())
		w.mu.Unlock()
		return nil
	}
	s := newScheduler(t, cfg.options(
		sched.WithHandler(cmdSync, completeAtOnce),
		// A process that ends with a yield outstanding makes its late
		// completion fail with ErrProcessNotFound.
		sched.WithHandler(cmdAsync, completeLater(pool, &w.f, endedOrClosed)),
		sched.WithHandler(cmdCleanup, completeLater(pool, &w.f, nil)),
		sched.WithHandler(cmdNever, never),
	)...)
	ctx := context.Background()
	rng := cfg.rng(1 << 40)

	type entry struct {
		kind endKind
		h    sched.Handle
	}
	var entries []entry
	var toTerminate []entry
	var untilShutdown []sched.Handle
	var others []sched.Handle
	for i := range procs {
		kind := endKind(i % int(endKinds))
		if kind == endTerminateBusy && i >= 2*int(endKinds) {
			kind = endTerminate // a few busy loops are enough on two cores
		}
		p := w.newProc(kind, rng)
		h, err := s.Submit(ctx, p, "life", nil)
		switch kind {
		case endInitError, endInitPanic:
			want := errStressBoom
			if kind == endInitPanic {
				want = sched.ErrPanic
			}
			if !errors.Is(err, sched.ErrInit) || !errors.Is(err, want) {
				t.Errorf("Submit of %v process: got %v, want ErrInit wrapping %v", kind, err, want)
			}
			if c := p.guard.closes.Load(); c != 1 {
				t.Errorf("%s: Submit returned with Close called %d times, want 1", p.guard.name, c)
			}
			continue
		}
		require.NoError(t, err)
		e := entry{kind, h}
		entries = append(entries, e)
		switch {
		case kind.terminated():
			toTerminate = append(toTerminate, e)
			others = append(others, h)
		case kind == endShutdown:
			untilShutdown = append(untilShutdown, h)
		default:
			others = append(others, h)
		}
	}

	// Terminate at random moments, some twice.
	rng.Shuffle(len(toTerminate), func(i, j int) { toTerminate[i], toTerminate[j] = toTerminate[j], toTerminate[i] })
	var term sync.WaitGroup
	term.Add(1)
	go func() {
		defer term.Done()
		rng := cfg.rng(1 << 41)
		for _, e := range toTerminate {
			spin(rng.IntN(20000))
			err := s.Terminate(e.h.PID())
			if err != nil && (e.kind != endTerminateRace || !errors.Is(err, sched.ErrProcessNotFound)) {
				w.f.addf("Terminate %v process %v: %v", e.kind, e.h.PID(), err)
			}
			if rng.IntN(4) == 0 {
				if err := s.Terminate(e.h.PID()); err != nil && !errors.Is(err, sched.ErrProcessNotFound) {
					w.f.addf("second Terminate of %v process %v: %v", e.kind, e.h.PID(), err)
				}
			}
		}
	}()
	awaitProgress(t, s, &w.prog, allDone(others), "terminations", nil)
	term.Wait()

	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		shut <- s.Shutdown(ctx)
	}()
	awaitProgress(t, s, &w.prog, allDone(untilShutdown), "shutdown", nil)
	require.NoError(t, <-shut, "Shutdown")
	pool.close()
	for _, c := range w.nevers {
		if err := c.Complete(nil, nil); !errors.Is(err, sched.ErrClosed) {
			t.Errorf("completion after Shutdown: got %v, want ErrClosed", err)
		}
	}

	for _, e := range entries {
		res, err := e.h.Wait(ctx)
		if err := w.checkEnd(e.kind, res, err); err != nil {
			t.Error(err)
		}
	}
	inits, closes := 0, 0
	for _, g := range w.guards {
		g.checkClosedOnce()
		inits += int(g.inits.Load())
		closes += int(g.closes.Load())
	}
	if inits != closes || inits != len(w.guards) {
		t.Errorf("%d processes, %d Init calls, %d Close calls; want all equal", len(w.guards), inits, closes)
	}
	if st := s.Stats(); st.Processes.Live != 0 || st.Processes.Forced != 0 {
		t.Errorf("after Shutdown: Live %d Forced %d, want 0 and 0", st.Processes.Live, st.Processes.Forced)
	}
	w.f.check(t)
}
