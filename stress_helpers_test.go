package scheduler_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// Shared machinery of the stress tests (stress_test.go): random
// configurations, a progress watchdog, an invariant-violation collector
// that any goroutine may report to, a guard that detects overlapping calls
// into one process, and a goroutine pool that completes yields
// asynchronously, as a handler that hands its work off would.

// sStallTimeout is how long a stress run may go without progress before it
// is declared stuck and fails with a dump of its processes.
const sStallTimeout = 20 * time.Second

// User commands of the stress and allocation tests.
const (
	sCmdSync    = sched.FirstUserCommand + 1 // completed by the handler itself
	sCmdAsync   = sched.FirstUserCommand + 2 // completed by an sPool goroutine
	sCmdCleanup = sched.FirstUserCommand + 3 // a cleanup step answered later by an sPool goroutine
	sCmdNever   = sched.FirstUserCommand + 4 // completed only by the test, after the fact
)

// sConfig is one random configuration of a stress run: more workers than
// the machine has cores, and a random step budget and global batch so that
// requeues and batch sizes vary between runs.
type sConfig struct {
	seed    uint64
	workers int
	budget  int
	batch   int
}

// sSeed varies the random configurations between runs: by default it is
// 0 and every run repeats the same seeds; SCHED_STRESS_SEED=N sets it,
// and under `-tags stress` it is random unless set. The tests log it, so
// that a failing configuration can be run again.
var sSeed = func() uint64 {
	if v := os.Getenv("SCHED_STRESS_SEED"); v != "" {
		if n, err := strconv.ParseUint(v, 0, 64); err == nil {
			return n
		}
	}
	if stressScale > 1 {
		return rand.Uint64()
	}
	return 0
}()

// sConfigs returns n configurations, alternating 4 and 8 workers, derived
// from base and sSeed so that every test gets its own seeds.
func sConfigs(t *testing.T, base uint64, n int) []sConfig {
	t.Helper()
	if sSeed != 0 {
		t.Logf("SCHED_STRESS_SEED=%d", sSeed)
	}
	rng := rand.New(rand.NewPCG(base, 0x5eed^sSeed))
	cfgs := make([]sConfig, n)
	for i := range cfgs {
		cfgs[i] = sConfig{
			seed:    rng.Uint64(),
			workers: []int{4, 8}[i%2],
			budget:  1 + rng.IntN(16),
			batch:   1 + rng.IntN(32),
		}
	}
	return cfgs
}

func (c sConfig) String() string {
	return fmt.Sprintf("w%d_budget%d_batch%d_seed%x", c.workers, c.budget, c.batch, c.seed)
}

func (c sConfig) options(extra ...sched.Option) []sched.Option {
	return append([]sched.Option{
		sched.WithWorkers(c.workers),
		sched.WithStepBudget(c.budget),
		sched.WithGlobalBatch(c.batch),
	}, extra...)
}

// rng returns a generator for stream i of the configuration's seed.
func (c sConfig) rng(i uint64) *rand.Rand {
	return rand.New(rand.NewPCG(c.seed, i))
}

// sNewScheduler starts a scheduler that is shut down when the test ends,
// forcibly after 10 s so that a failed run cannot hang the suite. Tests
// that check Shutdown call it themselves; the cleanup's second call then
// returns their result again, which tShutdownOK accepts.
func sNewScheduler(t *testing.T, opts ...sched.Option) *sched.Scheduler {
	t.Helper()
	s, err := sched.New(opts...)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := s.Shutdown(ctx)
		if !tShutdownOK(err) && !t.Failed() {
			t.Errorf("cleanup: Shutdown: %v", err)
		}
	})
	return s
}

// sFailures collects invariant violations reported from any goroutine
// (workers, handlers, pool goroutines), where t.Fatal is not allowed and
// t.Error could come after the test returned. The test reports them with
// check once every goroutine it started has stopped.
type sFailures struct {
	n    atomic.Int64
	mu   sync.Mutex
	msgs []string
}

// sMaxReported bounds how many violations are kept for the report.
const sMaxReported = 20

func (f *sFailures) addf(format string, args ...any) {
	if f.n.Add(1) > sMaxReported {
		return
	}
	msg := fmt.Sprintf(format, args...)
	// Also written at once, so that it is seen even if the bug it reports
	// crashes the test binary before the test can report it.
	fmt.Fprintln(os.Stderr, "stress: invariant violated:", msg)
	f.mu.Lock()
	f.msgs = append(f.msgs, msg)
	f.mu.Unlock()
}

// check fails the test if any violation was reported.
func (f *sFailures) check(t *testing.T) {
	t.Helper()
	n := f.n.Load()
	if n == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	t.Errorf("%d invariant violation(s); the first %d:\n\t%s", n, len(f.msgs), strings.Join(f.msgs, "\n\t"))
}

// sProgress counts events that show a run is moving: messages received,
// rounds finished, processes closed.
type sProgress struct{ n atomic.Int64 }

func (p *sProgress) tick() { p.n.Add(1) }

// sAwait blocks until done is closed. If the progress counter does not
// move for sStallTimeout, the run is stuck (a lost wakeup, a deadlock, a
// lost message): it fails the test with a dump of the scheduler's
// processes and describe's test-specific account, if any.
func sAwait(t *testing.T, s *sched.Scheduler, prog *sProgress, done <-chan struct{}, what string, describe func() string) {
	t.Helper()
	tick := time.NewTicker(sStallTimeout / 8)
	defer tick.Stop()
	last, lastAt := prog.n.Load(), time.Now()
	for {
		select {
		case <-done:
			return
		case now := <-tick.C:
			if n := prog.n.Load(); n != last {
				last, lastAt = n, now
				continue
			}
			if now.Sub(lastAt) < sStallTimeout {
				continue
			}
			extra := ""
			if describe != nil {
				extra = "\ntest's account:\n" + describe()
			}
			t.Fatalf("%s: no progress for %v (progress counter %d)\n%s%s", what, sStallTimeout, last, sDump(s), extra)
		}
	}
}

// sDump describes the live processes of s for a stall report: counts by
// state, the processes that look like lost wakeups (waiting with events
// queued) and the start of the full dump.
func sDump(s *sched.Scheduler) string {
	infos := s.Processes()
	byState := map[sched.State]int{}
	var suspects []string
	for _, pi := range infos {
		byState[pi.State]++
		if (pi.State == sched.StateIdle || pi.State == sched.StateBlocked) && pi.Queued > 0 {
			suspects = append(suspects, fmt.Sprintf("%s %v queued=%d pending=%d", pi.PID, pi.State, pi.Queued, pi.Pending))
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d live processes by state: %v\n", len(infos), byState)
	if len(suspects) > 0 {
		fmt.Fprintf(&b, "LOST WAKEUP: %d waiting process(es) have queued events: %s\n", len(suspects), strings.Join(suspects[:min(len(suspects), 20)], "; "))
	}
	var dump bytes.Buffer
	tWriteProcesses(&dump, s)
	lines := strings.Split(strings.TrimSpace(dump.String()), "\n")
	const keep = 60
	if len(lines) > keep+1 {
		stats := lines[len(lines)-1]
		lines = append(lines[:keep:keep], fmt.Sprintf("... %d more", len(lines)-1-keep), stats)
	}
	b.WriteString("processes:\n")
	b.WriteString(strings.Join(lines, "\n"))
	return b.String()
}

// sAllDone returns a channel closed once every handle's process has ended.
func sAllDone(hs []sched.Handle) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		for _, h := range hs {
			<-h.Done()
		}
		close(done)
	}()
	return done
}

// sGuard checks the one-at-a-time contract of a process: Init, Step and
// Close never overlap, Close comes once and nothing comes after it. Each
// method sets the inside flag with a CAS on entry, so a second goroutine
// entering while the first is inside fails its CAS and reports.
type sGuard struct {
	name   string
	f      *sFailures
	inside atomic.Int32 // 0 outside; 1 in Init or Step; 2 in Close
	inits  atomic.Int32
	steps  atomic.Int64
	closes atomic.Int32
}

func (g *sGuard) enter(where string) {
	if !g.inside.CompareAndSwap(0, 1) {
		g.f.addf("%s: %s entered while another call is inside (flag %d): two goroutines run one process", g.name, where, g.inside.Load())
	}
	if g.closes.Load() != 0 {
		g.f.addf("%s: %s called after Close", g.name, where)
	}
	switch where {
	case "Init":
		if g.inits.Add(1) != 1 {
			g.f.addf("%s: Init called twice", g.name)
		}
	case "Step":
		if g.inits.Load() != 1 {
			g.f.addf("%s: Step before Init", g.name)
		}
		g.steps.Add(1)
	}
}

func (g *sGuard) exit(where string) {
	if !g.inside.CompareAndSwap(1, 0) {
		g.f.addf("%s: leaving %s found the flag at %d: another call overlapped", g.name, where, g.inside.Load())
	}
}

func (g *sGuard) enterClose() {
	if !g.inside.CompareAndSwap(0, 2) {
		g.f.addf("%s: Close entered while another call is inside (flag %d)", g.name, g.inside.Load())
	}
	if n := g.closes.Add(1); n != 1 {
		g.f.addf("%s: Close called %d times", g.name, n)
	}
}

func (g *sGuard) exitClose() {
	if !g.inside.CompareAndSwap(2, 0) {
		g.f.addf("%s: leaving Close found the flag at %d", g.name, g.inside.Load())
	}
}

// Init and Close are the lifecycle of a process that embeds its guard and
// needs nothing more than the checks; processes that do more define their
// own and call enter/exit themselves.
func (g *sGuard) Init(context.Context, string, payload.Payloads) error {
	g.enter("Init")
	g.exit("Init")
	return nil
}

func (g *sGuard) Close() {
	g.enterClose()
	g.exitClose()
}

// checkClosedOnce reports a process whose Init ran but whose Close did not
// run exactly once.
func (g *sGuard) checkClosedOnce() {
	if i, c := g.inits.Load(), g.closes.Load(); i == 1 && c != 1 {
		g.f.addf("%s: Init called, Close called %d times (want 1)", g.name, c)
	}
}

// sPool completes yields on a few goroutines, in an order of their own:
// each goroutine waits a random while before running its next job, so
// completions land at random points of the workers' steps. Its
// queue is unbounded, so that handlers, which must not block, never do.
type sPool struct {
	mu     sync.Mutex
	cond   sync.Cond
	jobs   []func()
	closed bool
	wg     sync.WaitGroup
}

// sNewPool starts n goroutines. maxDelay scales the random wait before
// each job (0: run jobs at once).
func sNewPool(n int, seed uint64, maxDelay int) *sPool {
	p := &sPool{}
	p.cond.L = &p.mu
	p.wg.Add(n)
	for i := range n {
		rng := rand.New(rand.NewPCG(seed, uint64(i)+1000))
		go p.loop(rng, maxDelay)
	}
	return p
}

func (p *sPool) loop(rng *rand.Rand, maxDelay int) {
	defer p.wg.Done()
	for {
		p.mu.Lock()
		for len(p.jobs) == 0 && !p.closed {
			p.cond.Wait()
		}
		if len(p.jobs) == 0 {
			p.mu.Unlock()
			return
		}
		job := p.jobs[0]
		p.jobs[0] = nil
		p.jobs = p.jobs[1:]
		p.mu.Unlock()
		if maxDelay > 0 {
			// A spin, not runtime.Gosched: on a loaded machine (or one
			// P) a Gosched waits for every runnable goroutine, busy
			// workers included, and the pool falls far behind.
			sSpin(rng.IntN(maxDelay+1) * 500)
		}
		job()
	}
}

// push queues job. Any goroutine; never blocks for long.
func (p *sPool) push(job func()) {
	p.mu.Lock()
	p.jobs = append(p.jobs, job)
	p.mu.Unlock()
	p.cond.Signal()
}

// close runs the jobs still queued and stops the goroutines.
func (p *sPool) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.cond.Broadcast()
	p.wg.Wait()
}

// sSyncHandler completes the yield during the handler, with its argument
// as data.
func sSyncHandler(c sched.Call) error { return c.Complete(c.Arg, nil) }

// sAsyncHandler hands the yield to pool, which completes it with the
// yield's argument as data. A completion error that ok does not accept
// is a violation (nil ok: none is accepted).
func sAsyncHandler(pool *sPool, f *sFailures, ok func(error) bool) sched.Handler {
	return func(c sched.Call) error {
		comp, arg := c.Completion(), c.Arg
		pool.push(func() {
			if err := comp.Complete(arg, nil); err != nil && (ok == nil || !ok(err)) {
				f.addf("async completion of %v tag %d: %v", comp.PID(), comp.Tag(), err)
			}
		})
		return nil
	}
}

// sEndedOrClosed accepts the errors of a completion or send that lost a
// race with the end of its process or of the scheduler.
func sEndedOrClosed(err error) bool {
	return errors.Is(err, sched.ErrProcessNotFound) || errors.Is(err, sched.ErrClosed)
}

// sStart is the message that lets the processes of a run begin, once the
// test has submitted them all and published their PIDs: the mailbox's
// lock orders the publication before the receiver's reads.
type sStart struct{}

// sStartAll tells every pid to start.
func sStartAll(t *testing.T, s *sched.Scheduler, pids []relay.PID) {
	t.Helper()
	for _, pid := range pids {
		require.NoError(t, s.Tell(pid, sStart{}))
	}
}

// sSpin busy-waits for about n loop iterations, to place a wake-up at a
// random point of a worker's way from Step to its next state.
func sSpin(n int) {
	var x uint64
	for i := range n {
		x += uint64(i) * 0x9E3779B97F4A7C15
	}
	sSink.Store(x)
}

var sSink atomic.Uint64
