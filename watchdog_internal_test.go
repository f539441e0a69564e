package scheduler

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/procsched/scheduler/payload"
)

// The watchdog must report a step only for the time the step itself took:
// not the time its worker goroutine waited for a processor (the Go runtime
// preempts a goroutine after a 10 ms time slice and queues it behind the
// others), nor the time the worker spent in the scheduler's own code. These
// tests hold a worker up in both ways, deterministically, until the
// watchdog has seen the run last for its threshold (it marks the worker
// stalled for the next-slot rescue), and check that nothing is reported.

// wdGuard bounds every wait of these tests: a worker that is not marked
// stalled by then means the watchdog never saw the long run.
const wdGuard = 20 * time.Second

// hogProcessors keeps more goroutines computing than there are
// processors, so that at every instant at least three of them wait for
// one (the watchdog lets one pass as its own doing), as in a service whose
// CPU is saturated: a goroutine that yields the processor queues behind
// them. It returns once every hog has run; stop ends them.
func hogProcessors(t *testing.T) (stop func()) {
	t.Helper()
	n := 2*runtime.GOMAXPROCS(0) + 2
	var done atomic.Bool
	var started, ended sync.WaitGroup
	started.Add(n)
	ended.Add(n)
	for range n {
		go func() {
			defer ended.Done()
			started.Done()
			for !done.Load() {
			}
		}()
	}
	started.Wait()
	return func() {
		done.Store(true)
		ended.Wait()
	}
}

// waitForProcessorUntil yields the processor, with the processors hogged,
// until cond holds or the guard expires; it reports whether cond held.
// For the Go runtime, the goroutine is then waiting for a processor most
// of the time, as a preempted one does.
func waitForProcessorUntil(cond func() bool) bool {
	deadline := time.Now().Add(wdGuard)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		runtime.Gosched()
	}
	return true
}

// counting counts the SlowStep reports of a scheduler.
func counting(reports *atomic.Int64) Option {
	return WithHooks(Hooks{SlowStep: func(SlowStepInfo) { reports.Add(1) }})
}

// yielder's one step yields the processor until its worker is marked
// stalled; stalled records whether it was.
type yielder struct {
	stepOnly
	w       *worker
	stalled bool
}

func (y *yielder) Step(_ []Event, out *StepOutput) error {
	y.stalled = waitForProcessorUntil(y.w.stalledNow)
	out.Done(payload.Payload{})
	return nil
}

// TestWatchdogIgnoresStepWaitingForProcessor: a step whose worker waits for
// a processor, inside Step, for longer than the threshold is not slow.
func TestWatchdogIgnoresStepWaitingForProcessor(t *testing.T) {
	stop := hogProcessors(t)
	defer stop()
	var reports atomic.Int64
	s := newScheduler(t, WithWorkers(1), counting(&reports)) // the default threshold

	y := &yielder{w: s.workers[0]}
	h, err := s.Submit(context.Background(), y, "yield", nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*wdGuard)
	defer cancel()
	_, err = h.Wait(ctx)
	require.NoError(t, err)
	require.True(t, y.stalled, "the watchdog never saw the run last for its threshold")
	require.Zero(t, reports.Load(), "SlowStep reports for a step that waited for a processor")
	require.Zero(t, s.Stats().SlowSteps)
}

// counter continues for steps steps, then ends. Each step computes spin
// rounds of a random-number generator: well under a microsecond for spin
// 0, about one for 1000, 10 to 20 for 10000.
type counter struct {
	stepOnly
	steps, spin int
	x           uint64
}

func (c *counter) Step(_ []Event, out *StepOutput) error {
	x := c.x | 1
	for range c.spin {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	c.x = x
	if c.steps--; c.steps <= 0 {
		out.Done(payload.Payload{})
		return nil
	}
	out.Continue()
	return nil
}

// TestWatchdogIgnoresWorkerWaitingForProcessor: many processes make short
// steps on CPUs saturated by other goroutines, and every so many steps a
// worker waits for a processor between claiming a process and calling its
// Step, as when the Go runtime deschedules it there, until the watchdog
// has seen that run last for the (default) threshold. No step is slow, and
// none is reported.
func TestWatchdogIgnoresWorkerWaitingForProcessor(t *testing.T) {
	const (
		procs      = 40
		stepsEach  = 250
		stallEvery = 2500 // four stalls in all
	)
	stop := hogProcessors(t)
	defer stop()
	var reports atomic.Int64
	s := newScheduler(t, WithWorkers(2), counting(&reports))

	var steps, stalls, missed atomic.Int64
	for _, w := range s.workers {
		hook := func() {
			if steps.Add(1)%stallEvery != 0 {
				return
			}
			if waitForProcessorUntil(w.stalledNow) {
				stalls.Add(1)
			} else {
				missed.Add(1)
			}
		}
		w.setTestHookStep(&hook)
	}
	hs := make([]Handle, procs)
	var err error
	for i := range hs {
		hs[i], err = s.Submit(context.Background(), &counter{steps: stepsEach}, "count", nil)
		require.NoError(t, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*wdGuard)
	defer cancel()
	for _, h := range hs {
		_, err := h.Wait(ctx)
		require.NoError(t, err)
	}
	require.Equal(t, int64(procs*stepsEach), steps.Load())
	require.Zero(t, missed.Load(), "stalls the watchdog never saw")
	require.Equal(t, int64(procs*stepsEach/stallEvery), stalls.Load())
	require.Zero(t, reports.Load(), "SlowStep reports for short steps whose worker waited for a processor")
	require.Zero(t, s.Stats().SlowSteps)
}

// waitsForWatch's first step returns as soon as its worker is watched and
// asks to continue; its second step, marked as the worker is watched by
// then, arms the hook of the test and ends the process.
type waitsForWatch struct {
	stepOnly
	w     *worker
	arm   *atomic.Bool
	steps int
}

func (p *waitsForWatch) Step(_ []Event, out *StepOutput) error {
	p.steps++
	if p.steps == 1 {
		waitForProcessorUntil(p.w.watched.Load)
		out.Continue()
		return nil
	}
	p.arm.Store(true)
	out.Done(payload.Payload{})
	return nil
}

// TestWatchdogIgnoresTimeOutsideStep: a worker that the watchdog watches,
// held up in the scheduler's code before a Step for longer than the
// threshold while no goroutine waits for a processor (the runtime's gauge
// is replaced by one that says none does), is not in a slow step. The
// threshold is long enough that no pause of the machine makes the first
// process's steps, which end as soon as the watching begins, look slow.
func TestWatchdogIgnoresTimeOutsideStep(t *testing.T) {
	none := func() (uint64, bool) { return 0, true }
	testHookRunnable.Store(&none)
	defer testHookRunnable.Store(nil)
	var reports atomic.Int64
	s := newScheduler(t, WithWorkers(1), WithWatchdog(100*time.Millisecond), counting(&reports))

	w := s.workers[0]
	var arm atomic.Bool
	held, stalled := false, false
	hook := func() {
		if !arm.Swap(false) {
			return
		}
		// Blocked, not waiting for a processor, until the watchdog has
		// seen this run last for the threshold.
		held = true
		deadline := time.Now().Add(wdGuard)
		for !w.stalledNow() && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		stalled = w.stalledNow()
	}
	w.setTestHookStep(&hook)
	first := &waitsForWatch{w: w, arm: &arm}
	h1, err := s.Submit(context.Background(), first, "watch", nil)
	require.NoError(t, err)
	h2, err := s.Submit(context.Background(), &counter{steps: 1}, "after", nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*wdGuard)
	defer cancel()
	for _, h := range []Handle{h1, h2} {
		_, err := h.Wait(ctx)
		require.NoError(t, err)
	}
	w.setTestHookStep(nil)
	require.True(t, held, "the hook never held the worker up")
	require.True(t, stalled, "the watchdog never saw the run last for its threshold")
	require.Zero(t, reports.Load(), "SlowStep reports for time outside Step")
}

// TestWatchdogWithoutRunnableGauge: on a runtime that cannot say whether
// goroutines wait for a processor, the watchdog counts wall time inside
// Step, so a step whose worker waits for a processor is reported (see
// "Limits" in docs/tuning.md).
func TestWatchdogWithoutRunnableGauge(t *testing.T) {
	missing := func() (uint64, bool) { return 0, false }
	testHookRunnable.Store(&missing)
	defer testHookRunnable.Store(nil)
	stop := hogProcessors(t)
	defer stop()
	reported := make(chan struct{})
	var once sync.Once
	s := newScheduler(t, WithWorkers(1), WithWatchdog(20*time.Millisecond),
		WithHooks(Hooks{SlowStep: func(SlowStepInfo) { once.Do(func() { close(reported) }) }}))

	cond := func() bool {
		select {
		case <-reported:
			return true
		default:
			return false
		}
	}
	h, err := s.Submit(context.Background(), stepUntil(cond), "yield", nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*wdGuard)
	defer cancel()
	_, err = h.Wait(ctx)
	require.NoError(t, err)
	require.True(t, cond(), "the step was not reported")
	require.Equal(t, uint64(1), s.Stats().SlowSteps)
}

// stepUntil returns a process whose one step yields the processor until
// cond holds (or the guard expires).
func stepUntil(cond func() bool) stepFunc {
	return func(_ []Event, out *StepOutput) error {
		waitForProcessorUntil(cond)
		out.Done(payload.Payload{})
		return nil
	}
}

// TestWatchdogQuietWhileProcessorsSaturated: processes make short steps
// while more goroutines compute than there are processors; the Go runtime
// preempts the workers and queues them behind the others, often for longer
// than the threshold, in the middle of a run. No step is slow, and none is
// reported, over a fixed amount of work.
func TestWatchdogQuietWhileProcessorsSaturated(t *testing.T) {
	const procs, stepsEach, spin = 100, 200, 10000
	stop := hogProcessors(t)
	defer stop()
	var reports atomic.Int64
	s := newScheduler(t, counting(&reports)) // the default threshold

	hs := make([]Handle, procs)
	var err error
	cs := make([]*counter, procs)
	for i := range hs {
		cs[i] = &counter{steps: stepsEach, spin: spin}
		hs[i], err = s.Submit(context.Background(), cs[i], "count", nil)
		require.NoError(t, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*wdGuard)
	defer cancel()
	for i, h := range hs {
		_, err := h.Wait(ctx)
		require.NoError(t, err)
		require.Zero(t, cs[i].steps, "process %d ended before its last step", i)
	}
	require.Zero(t, reports.Load(), "SlowStep reports for short steps on saturated processors")
}

// BenchmarkWatchdogNoise counts what the watchdog reports for steps that
// are never slow (about a microsecond each, 100 processes of 1,000 steps
// per op) while something keeps the workers from the processors. Under
// load "http-64K" and "http-1M", an HTTP server on the same processors has
// handlers that compute (hashing 64 KiB or 1 MiB: about 40 µs or 0.6 ms) for
// four clients per processor that keep it saturated, so the Go runtime
// preempts the workers and queues them behind the handlers; under "none",
// only whatever else runs on the machine does. With gauge "missing", the
// watchdog runs as on a runtime without the gauge of goroutines waiting
// for a processor. Every report is a false one: reports/op at a threshold
// is the noise that threshold lets through, longest-ms the longest
// Duration reported.
//
//	go test -run '^$' -bench WatchdogNoise -benchtime 40x .
func BenchmarkWatchdogNoise(b *testing.B) {
	missing := func() (uint64, bool) { return 0, false }
	for _, gauge := range []string{"runtime", "missing"} {
		for _, load := range []struct {
			name string
			body int // bytes each request hashes; 0: no server
		}{{"none", 0}, {"http-64K", 64 << 10}, {"http-1M", 1 << 20}} {
			for _, threshold := range []time.Duration{2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond} {
				b.Run(fmt.Sprintf("gauge=%s/load=%s/threshold=%v", gauge, load.name, threshold), func(b *testing.B) {
					if gauge == "missing" {
						testHookRunnable.Store(&missing)
						defer testHookRunnable.Store(nil)
					}
					if load.body > 0 {
						defer saturateHTTP(load.body)()
					}
					benchWatchdogNoise(b, threshold)
				})
			}
		}
	}
}

func benchWatchdogNoise(b *testing.B, threshold time.Duration) {
	var reports, longest atomic.Int64
	s := newScheduler(b, WithWatchdog(threshold), WithHooks(Hooks{SlowStep: func(st SlowStepInfo) {
		reports.Add(1)
		if d := int64(st.Duration); d > longest.Load() {
			longest.Store(d) // the watchdog goroutine is the only writer
		}
	}}))
	const procs, stepsEach = 100, 1000
	hs := make([]Handle, procs)
	var err error
	for b.Loop() {
		for i := range hs {
			hs[i], err = s.Submit(context.Background(), &counter{steps: stepsEach, spin: 1000}, "count", nil)
			if err != nil {
				b.Fatal(err)
			}
		}
		for _, h := range hs {
			if _, err := h.Wait(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(reports.Load())/float64(b.N), "reports/op")
	b.ReportMetric(float64(longest.Load())/1e6, "longest-ms")
}

// saturateHTTP starts an HTTP server whose handler hashes body bytes, and
// four clients per processor that keep it busy; stop ends them all.
func saturateHTTP(body int) (stop func()) {
	data := make([]byte, body)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sum := sha256.Sum256(data)
		_, _ = w.Write(sum[:])
	}))
	done := make(chan struct{})
	var clients sync.WaitGroup
	for range 4 * runtime.GOMAXPROCS(0) {
		clients.Add(1)
		go func() {
			defer clients.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				resp, err := srv.Client().Get(srv.URL)
				if err != nil {
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
		}()
	}
	return func() {
		close(done)
		clients.Wait()
		srv.Close()
	}
}

// TestStealTakesLaterSlotOfStalledWorker: an idle worker takes the
// process waiting in the later slot of a worker the watchdog has found
// stalled in its current run, as it takes the next slot's, and leaves it
// where it is while that worker is not stalled (it will run it itself).
func TestStealTakesLaterSlotOfStalledWorker(t *testing.T) {
	victim, thief := twoIdleWorkers()

	waiting := new(proc) // Ready: the zero state word
	victim.later.Store(waiting)
	require.Equal(t, 1, victim.queueLen(), "processes queued on the victim, its later slot included")
	require.Nil(t, thief.steal(), "stole from a worker that is not stalled")
	require.Same(t, waiting, victim.later.Load(), "the later slot of a worker that is not stalled")

	running := stRunning | 1<<runShift // the victim's run of the stuck process
	stuck := new(proc)
	stuck.state.Store(running)
	victim.stalledRun.Store(running)
	victim.stalledProc.Store(stuck)
	require.Same(t, waiting, thief.steal(), "what an idle worker took from a stalled one")
	require.Nil(t, victim.later.Load(), "the later slot after the steal")
	require.Zero(t, victim.queueLen()+thief.queueLen(), "processes left queued")
}

// TestStealTakesHeldOfStalledWorker: the processes a worker holds for
// the run it is in (see worker.held) are out of other workers' reach,
// unless the watchdog has found that run stalled: then an idle worker
// takes them, as it takes the next slot's process.
func TestStealTakesHeldOfStalledWorker(t *testing.T) {
	victim, thief := twoIdleWorkers()

	a, b := new(proc), new(proc)
	victim.held.PushBottom(a)
	victim.held.PushBottom(b)
	require.Equal(t, 2, victim.queueLen(), "processes queued on the victim, its held ones included")
	require.Nil(t, thief.steal(), "stole from a worker that is not stalled")

	running := stRunning | 1<<runShift
	stuck := new(proc)
	stuck.state.Store(running)
	victim.stalledRun.Store(running)
	victim.stalledProc.Store(stuck)
	got := thief.steal()
	require.NotNil(t, got, "what an idle worker took from a stalled one")
	rest := thief.dq.PopBottom()
	if rest == nil {
		rest = thief.steal()
	}
	require.ElementsMatch(t, []*proc{a, b}, []*proc{got, rest}, "the held processes, taken")
	require.Zero(t, victim.queueLen()+thief.queueLen(), "processes left queued")
}

// panicsWhenWatched waits in its first step for the watchdog to watch its
// worker, then asks to continue; its second step, marked as every step
// of a watched worker is, records whether it found its mark and panics.
// Its Close counts its calls.
type panicsWhenWatched struct {
	w       *worker
	started chan struct{} // closed by the test once it holds the Handle
	watched atomic.Bool   // the first step saw the worker watched
	marked  atomic.Bool   // the second step ran inside its mark
	closes  atomic.Int32
	steps   int
}

func (p *panicsWhenWatched) Init(context.Context, string, payload.Payloads) error { return nil }

func (p *panicsWhenWatched) Step(_ []Event, out *StepOutput) error {
	p.steps++
	if p.steps == 1 {
		select {
		case <-p.started:
		case <-time.After(testTimeout):
		}
		p.watched.Store(waitForProcessorUntil(p.w.watched.Load))
		out.Continue()
		return nil
	}
	p.marked.Store(p.w.stepMark.Load()&1 == 1)
	panic("boom")
}

func (p *panicsWhenWatched) Close() { p.closes.Add(1) }

// TestHooksOrderInWatchedStep: a step that panics while the watchdog
// watches its worker, whose panic is recovered around the marked Step
// instead of by the worker's loop, ends as one on the plain path does
// (TestHooksOrder): the Panic hook runs before Close, the End hook after
// it, and both before the Handle reports the end, which is the
// PanicError.
func TestHooksOrderInWatchedStep(t *testing.T) {
	type seen struct {
		hook   string
		closes int32
		done   bool // the Handle reported the end
	}
	var (
		mu     sync.Mutex
		h      Handle
		p      *panicsWhenWatched
		got    []seen
		panics []PanicInfo
	)
	record := func(hook string) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, seen{hook, p.closes.Load(), isEnded(h)})
	}
	s := newScheduler(t, WithWorkers(1), WithWatchdog(20*time.Millisecond), WithHooks(Hooks{
		Panic: func(i PanicInfo) {
			record("Panic")
			mu.Lock()
			panics = append(panics, i)
			mu.Unlock()
		},
		End: func(EndInfo) { record("End") },
	}))
	p = &panicsWhenWatched{w: s.workers[0], started: make(chan struct{})}
	mu.Lock()
	var err error
	h, err = s.Submit(context.Background(), p, "watched", nil)
	mu.Unlock()
	close(p.started)
	require.NoError(t, err)
	err = waitEnd(t, h)
	require.ErrorIs(t, err, ErrPanic)
	require.True(t, p.watched.Load(), "the watchdog never watched the worker")
	require.True(t, p.marked.Load(), "the panicking step was not marked as a watched one")

	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []seen{{"Panic", 0, false}, {"End", 1, false}}, got)
	require.Len(t, panics, 1)
	require.Equal(t, "Step", panics[0].Err.Where)
	require.Equal(t, h.PID(), panics[0].PID)
	require.Equal(t, "watched", panics[0].Method)
	var perr *PanicError
	require.ErrorAs(t, err, &perr)
	require.Equal(t, "boom", perr.Value)
}

// isEnded reports whether h's process has ended, without waiting; false
// for the zero Handle, which the test has not filled in yet.
func isEnded(h Handle) bool {
	if h.p == nil {
		return false
	}
	select {
	case <-h.Done():
		return true
	default:
		return false
	}
}

// TestSlowStepReportAfterRunEnded: a slow step reported after its run
// ended (between the sample that found the worker in it and the report)
// still names its process and entry point. The test drives a watchdog
// of its own, whose goroutine it is, by hand: one sample after another
// until one has seen the run, then the run ends, then the report.
func TestSlowStepReportAfterRunEnded(t *testing.T) {
	calm := func() (uint64, bool) { return 0, true }
	testHookRunnable.Store(&calm)
	defer testHookRunnable.Store(nil)
	s := newScheduler(t, WithWorkers(1), WithWatchdog(0))
	reports := make(chan SlowStepInfo, 1)
	wd := newWatchdog(s, time.Nanosecond, func(info SlowStepInfo) { reports <- info })

	entered, held := make(chan struct{}), make(chan struct{})
	release := sync.OnceFunc(func() { close(held) })
	t.Cleanup(release)
	h, err := s.Submit(context.Background(), stepFunc(func(_ []Event, out *StepOutput) error {
		close(entered)
		<-held
		out.Done(payload.Payload{})
		return nil
	}), "slow", nil)
	require.NoError(t, err)
	receive(t, entered, "the step")
	smp := &wd.samples[0]
	eventually(t, "a sample that has seen the run", func() bool {
		wd.check()
		return smp.run != nil
	})

	release()
	require.NoError(t, waitEnd(t, h))
	wd.report(0, smp)
	info := receive(t, reports, "the report")
	require.Equal(t, h.PID(), info.PID)
	require.Equal(t, "slow", info.Method)
	require.Zero(t, info.Worker)
}
