package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// The core benchmarks. Each scheduler benchmark has a goroutine
// counterpart with the same shape, so one run gives the ratio:
//
//	go test -run '^$' -bench . -benchmem -count 6 . | tee new.txt

// pollStats makes pollStatsDuring start a goroutine that reads the
// scheduler's Stats every 10 milliseconds: monitoring far more eager than
// a service's metrics scraper.
var pollStats bool

// pollStatsDuring reads s's Stats every 10 milliseconds until the
// benchmark ends, if pollStats is set.
func pollStatsDuring(b *testing.B, s *sched.Scheduler) {
	if !pollStats {
		return
	}
	stop, polled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(polled)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				_ = s.Stats()
			case <-stop:
				return
			}
		}
	}()
	// Registered after newScheduler's cleanup, so it runs before it: the
	// polling stops before the scheduler shuts down.
	b.Cleanup(func() {
		close(stop)
		<-polled
	})
}

// bouncer answers every message by telling its sender, until it has
// received max messages.
type bouncer struct {
	stepOnly
	n, max int
	serve  *relay.PID // whom to start the rally with, if anyone
}

func (p *bouncer) Step(evs []sched.Event, out *sched.StepOutput) error {
	if p.serve != nil {
		out.Tell(*p.serve, p)
		p.serve = nil
		return nil
	}
	for _, ev := range evs {
		if ev.Type != sched.EventMessage {
			continue
		}
		if ev.Error != nil {
			// The last reply reaches a partner that has finished.
			continue
		}
		p.n++
		out.Tell(ev.From, p)
		if p.n >= p.max {
			out.Done(payload.Payload{})
			return nil
		}
	}
	return nil
}

// BenchmarkPingPong: two processes exchange b.N messages; ns/op is per
// message.
func BenchmarkPingPong(b *testing.B) { benchPingPong(b) }

func benchPingPong(b *testing.B, opts ...sched.Option) {
	s := newScheduler(b, opts...)
	pollStatsDuring(b, s)
	ctx := context.Background()
	half := b.N/2 + 1
	pong, err := s.Submit(ctx, &bouncer{max: half}, "run", nil)
	if err != nil {
		b.Fatal(err)
	}
	pid := pong.PID()
	b.ResetTimer()
	ping, err := s.Submit(ctx, &bouncer{max: half, serve: &pid}, "run", nil)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := ping.Wait(ctx); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	_ = s.Terminate(pid)
}

// BenchmarkGoroutinePingPong: the same with two goroutines and unbuffered
// channels.
func BenchmarkGoroutinePingPong(b *testing.B) {
	ping, pong := make(chan int), make(chan int)
	go func() {
		for v := range ping {
			pong <- v
		}
		close(pong)
	}()
	for i := 0; i < b.N; i += 2 {
		ping <- i
		<-pong
	}
	close(ping)
	<-pong
}

// oneStep finishes in its first step.
var oneStep = stepFunc(func(_ []sched.Event, out *sched.StepOutput) error {
	out.Done(payload.Payload{})
	return nil
})

// spawner spawns n trivial children from inside the scheduler and waits
// for all of them.
type spawner struct {
	stepOnly
	n, left int
}

func (p *spawner) Step(evs []sched.Event, out *sched.StepOutput) error {
	if p.left == 0 && len(evs) == 0 {
		p.left = p.n
		for i := range p.n {
			out.SpawnAwait(uint64(i), oneStep, "run", nil)
		}
		return nil
	}
	for _, ev := range evs {
		if ev.Error != nil {
			return ev.Error
		}
		p.left--
	}
	if p.left == 0 {
		out.Done(payload.Payload{})
	}
	return nil
}

// BenchmarkSpawn: a process spawns b.N children, 100 at a time, and
// awaits each one's end; ns/op is per child (spawn, Init, one step,
// Close, completion to the parent).
func BenchmarkSpawn(b *testing.B) { benchSpawn(b) }

func benchSpawn(b *testing.B, opts ...sched.Option) {
	s := newScheduler(b, opts...)
	pollStatsDuring(b, s)
	ctx := context.Background()
	for left := b.N; left > 0; left -= 100 {
		h, err := s.Submit(ctx, &spawner{n: min(left, 100)}, "run", nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := h.Wait(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// wideSpawner spawns n trivial children, wideBatch per step, without
// waiting for any of them before it has spawned them all, then waits for
// all: a batch job that hands out its work at once.
type wideSpawner struct {
	stepOnly
	n, spawned, ended int
}

// wideBatch is how many children wideSpawner spawns per step.
const wideBatch = 1000

func (p *wideSpawner) Step(evs []sched.Event, out *sched.StepOutput) error {
	for _, ev := range evs {
		if ev.Error != nil {
			return ev.Error
		}
		p.ended++
	}
	if p.ended == p.n {
		out.Done(payload.Payload{})
		return nil
	}
	for range min(wideBatch, p.n-p.spawned) {
		out.SpawnAwait(uint64(p.spawned), oneStep, "run", nil)
		p.spawned++
	}
	if p.spawned < p.n {
		out.Continue()
	}
	return nil
}

// BenchmarkSpawnWide: one process spawns b.N children, a thousand per
// step, and awaits them all. The parent runs ahead of its children, so
// up to hundreds of thousands of its yields are outstanding at once: ns/op
// is per child and includes what that many pending yields cost.
func BenchmarkSpawnWide(b *testing.B) {
	s := newScheduler(b)
	pollStatsDuring(b, s)
	h, err := s.Submit(context.Background(), &wideSpawner{n: b.N}, "run", nil)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := h.Wait(context.Background()); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkSubmit: a goroutine outside the scheduler submits b.N
// processes that end in their first step, as fast as it can, dropping
// the handles; ns/op is per process, up to the end of the last one.
// wakes/op is how many times a parked worker was woken per Submit: a
// burst should wake few. pops/op is how many times workers took from
// the global queue per Submit.
func BenchmarkSubmit(b *testing.B) {
	benchStartOutside(b, func(s *sched.Scheduler, ctx context.Context) error {
		_, err := s.Submit(ctx, oneStep, "run", nil)
		return err
	})
}

// BenchmarkSpawnOutside: as BenchmarkSubmit with Scheduler.Spawn, which
// returns no Handle, so that an ended process's record can serve a later
// one.
func BenchmarkSpawnOutside(b *testing.B) {
	benchStartOutside(b, func(s *sched.Scheduler, ctx context.Context) error {
		_, err := s.Spawn(ctx, oneStep, "run", nil)
		return err
	})
}

// BenchmarkSpawnOutsideHelp: BenchmarkSpawnOutside with a scheduler made
// WithCallerHelp, whose caller, far ahead of the workers, runs queued
// processes itself.
func BenchmarkSpawnOutsideHelp(b *testing.B) {
	benchStartOutside(b, func(s *sched.Scheduler, ctx context.Context) error {
		_, err := s.Spawn(ctx, oneStep, "run", nil)
		return err
	}, sched.WithCallerHelp())
}

// benchStartOutside measures start, called b.N times by a goroutine
// outside the scheduler made with opts, for BenchmarkSubmit,
// BenchmarkSpawnOutside and BenchmarkSpawnOutsideHelp.
func benchStartOutside(b *testing.B, start func(*sched.Scheduler, context.Context) error, opts ...sched.Option) {
	s := newScheduler(b, opts...)
	pollStatsDuring(b, s)
	ctx := context.Background()
	before := s.Stats()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := start(s, ctx); err != nil {
			b.Fatal(err)
		}
	}
	for s.Stats().Processes.Live > 0 {
		runtime.Gosched()
	}
	b.StopTimer()
	after := s.Stats()
	b.ReportMetric(float64(after.Wakes-before.Wakes)/float64(b.N), "wakes/op")
	b.ReportMetric(float64(after.GlobalPops-before.GlobalPops)/float64(b.N), "pops/op")
}

// BenchmarkGoroutineSpawn: the same with goroutines and a WaitGroup-like
// channel count.
func BenchmarkGoroutineSpawn(b *testing.B) {
	done := make(chan struct{}, 1024)
	go func() {
		for range b.N {
			go func() { done <- struct{}{} }()
		}
	}()
	for range b.N {
		<-done
	}
}

// sink counts messages and waits.
type sink struct {
	stepOnly
	n int
}

func (p *sink) Step(evs []sched.Event, out *sched.StepOutput) error {
	for _, ev := range evs {
		if ev.Type == sched.EventCancel {
			out.Done(payload.Payload{})
		}
	}
	p.n += len(evs)
	return nil
}

// BenchmarkSendToIdle: Tell from outside to an idle process, which wakes,
// steps and goes idle again; ns/op per message.
func BenchmarkSendToIdle(b *testing.B) {
	s := newScheduler(b)
	pollStatsDuring(b, s)
	h, err := s.Submit(context.Background(), &sink{}, "run", nil)
	if err != nil {
		b.Fatal(err)
	}
	pid := h.PID()
	msg := &sink{}
	b.ResetTimer()
	for range b.N {
		if err := s.Tell(pid, msg); err != nil {
			b.Fatal(err)
		}
	}
}

// fanReceivers is how many receivers the fan-out benchmarks feed.
const fanReceivers = 1000

// fanCounter counts messages and finishes when it has want of them.
type fanCounter struct {
	stepOnly
	want, got int
}

func (p *fanCounter) Step(evs []sched.Event, out *sched.StepOutput) error {
	for _, ev := range evs {
		if ev.Type == sched.EventMessage {
			p.got++
		}
	}
	if p.got == p.want {
		out.Done(payload.Payload{})
	}
	return nil
}

// fanner tells left messages round-robin to its receivers, one message
// to each receiver per step.
type fanner struct {
	stepOnly
	to   []relay.PID
	left int
}

func (p *fanner) Step(_ []sched.Event, out *sched.StepOutput) error {
	for _, to := range p.to[:min(len(p.to), p.left)] {
		out.Tell(to, p)
	}
	p.left -= min(len(p.to), p.left)
	if p.left > 0 {
		out.Continue()
	} else {
		out.Done(payload.Payload{})
	}
	return nil
}

// BenchmarkFanOut: one process tells b.N messages round-robin to
// fanReceivers processes; ns/op is per message, up to the last receiver's
// end. BenchmarkGoroutineFanOut is the same with buffered channels.
func BenchmarkFanOut(b *testing.B) {
	s := newScheduler(b)
	pollStatsDuring(b, s)
	ctx := context.Background()
	n := max(b.N/fanReceivers, 1) * fanReceivers
	hs := make([]sched.Handle, fanReceivers)
	pids := make([]relay.PID, fanReceivers)
	for i := range hs {
		h, err := s.Submit(ctx, &fanCounter{want: n / fanReceivers}, "run", nil)
		if err != nil {
			b.Fatal(err)
		}
		hs[i], pids[i] = h, h.PID()
	}
	before := s.Stats().Steps
	b.ResetTimer()
	if _, err := s.Submit(ctx, &fanner{to: pids, left: n}, "run", nil); err != nil {
		b.Fatal(err)
	}
	for _, h := range hs {
		if _, err := h.Wait(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(n)/float64(s.Stats().Steps-before), "msgs/step")
}

func BenchmarkGoroutineFanOut(b *testing.B) {
	n := max(b.N/fanReceivers, 1) * fanReceivers
	chs := make([]chan *int, fanReceivers)
	var wg sync.WaitGroup
	for i := range chs {
		chs[i] = make(chan *int, n/fanReceivers) // never full, as in the harness
		wg.Add(1)
		go func(ch chan *int) {
			defer wg.Done()
			for range n / fanReceivers {
				<-ch
			}
		}(chs[i])
	}
	msg := new(int)
	b.ResetTimer()
	for i := range n {
		chs[i%fanReceivers] <- msg
	}
	wg.Wait()
}

const cmdEcho = sched.FirstUserCommand

// yielder yields cmdEcho n times in sequence.
type yielder struct {
	stepOnly
	left int
}

func (p *yielder) Step(evs []sched.Event, out *sched.StepOutput) error {
	for _, ev := range evs {
		if ev.Error != nil {
			return ev.Error
		}
	}
	if p.left == 0 {
		out.Done(payload.Payload{})
		return nil
	}
	p.left--
	out.Yield(uint64(p.left), cmdEcho, nil)
	return nil
}

// BenchmarkYieldRoundTrip: yield -> handler on another goroutine ->
// CompleteYield -> step; ns/op per round trip.
func BenchmarkYieldRoundTrip(b *testing.B) { benchYieldRoundTrip(b) }

func benchYieldRoundTrip(b *testing.B, opts ...sched.Option) {
	reqs := make(chan sched.Completion, 1)
	s := newScheduler(b, append(opts, sched.WithHandler(cmdEcho, func(c sched.Call) error {
		reqs <- c.Completion()
		return nil
	}))...)
	pollStatsDuring(b, s)
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case c := <-reqs:
				if err := c.Complete(nil, nil); err != nil && !errors.Is(err, sched.ErrClosed) {
					panic(err)
				}
			case <-stop:
				return
			}
		}
	}()
	defer close(stop)
	h, err := s.Submit(context.Background(), &yielder{left: b.N}, "run", nil)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := h.Wait(context.Background()); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkYieldSync: yield -> handler completes at once -> step.
func BenchmarkYieldSync(b *testing.B) {
	s := newScheduler(b, sched.WithHandler(cmdEcho, func(c sched.Call) error {
		return c.Complete(nil, nil)
	}))
	pollStatsDuring(b, s)
	h, err := s.Submit(context.Background(), &yielder{left: b.N}, "run", nil)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := h.Wait(context.Background()); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkGoroutineRoundTrip: a goroutine asks another goroutine to do
// something and waits for the answer: the goroutine shape of a yield.
func BenchmarkGoroutineRoundTrip(b *testing.B) {
	reqs := make(chan chan struct{}, 1)
	go func() {
		for r := range reqs {
			r <- struct{}{}
		}
	}()
	reply := make(chan struct{}, 1)
	for range b.N {
		reqs <- reply
		<-reply
	}
	close(reqs)
}

// skynetNode sums its subtree: a leaf finishes with its number, an inner
// node spawns ten children and awaits their sums.
type skynetNode struct {
	stepOnly
	num, size int
	sum       int64
	got       int
}

func (n *skynetNode) Step(evs []sched.Event, out *sched.StepOutput) error {
	if n.size == 1 {
		out.Done(payload.Of(int64(n.num)))
		return nil
	}
	if len(evs) == 0 {
		sub := n.size / 10
		for i := range 10 {
			out.SpawnAwait(uint64(i), &skynetNode{num: n.num + i*sub, size: sub}, "run", nil)
		}
		return nil
	}
	for _, ev := range evs {
		if ev.Error != nil {
			return ev.Error
		}
		v, err := payload.As[int64](ev.Result())
		if err != nil {
			return err
		}
		n.sum += v
		n.got++
	}
	if n.got == 10 {
		out.Done(payload.Of(n.sum))
	}
	return nil
}

// BenchmarkSkynet: the skynet tree of 100,000 leaves (111,111 processes);
// ns/op is per tree.
func BenchmarkSkynet(b *testing.B) { benchSkynet(b) }

// BenchmarkSkynetWithValues: the same tree, submitted with a context that
// carries a value, as a request's context does: every process of the
// tree inherits the values, and should cost what it costs without them
// but for a slightly larger context.
func BenchmarkSkynetWithValues(b *testing.B) {
	benchSkynetIn(b, context.WithValue(context.Background(), ctxKey{}, "request"))
}

func benchSkynet(b *testing.B, opts ...sched.Option) {
	benchSkynetIn(b, context.Background(), opts...)
}

func benchSkynetIn(b *testing.B, ctx context.Context, opts ...sched.Option) {
	s := newScheduler(b, opts...)
	pollStatsDuring(b, s)
	defer reportScheduling(b, s, s.Stats())
	for b.Loop() {
		h, err := s.Submit(ctx, &skynetNode{size: 100_000}, "run", nil)
		if err != nil {
			b.Fatal(err)
		}
		res, err := h.Wait(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if v, _ := payload.As[int64](res); v != 4999950000 {
			b.Fatalf("sum %d", v)
		}
	}
}

// reportScheduling reports, per operation, how often the workers of s
// spun, parked and were woken since before was read: where the time goes
// when the workers do not have the cores to themselves.
func reportScheduling(b *testing.B, s *sched.Scheduler, before sched.Stats) {
	after := s.Stats()
	n := float64(b.N)
	b.ReportMetric(float64(after.Spins-before.Spins)/n, "spins/op")
	b.ReportMetric(float64(after.Parks-before.Parks)/n, "parks/op")
	b.ReportMetric(float64(after.Wakes-before.Wakes)/n, "wakes/op")
	b.ReportMetric(float64(after.Steals-before.Steals)/n, "steals/op")
}

func goroutineSkynet(c chan<- int64, num, size int) {
	if size == 1 {
		c <- int64(num)
		return
	}
	rc := make(chan int64, 10)
	sub := size / 10
	for i := range 10 {
		go goroutineSkynet(rc, num+i*sub, sub)
	}
	var sum int64
	for range 10 {
		sum += <-rc
	}
	c <- sum
}

// BenchmarkGoroutineSkynet: the same tree with a goroutine per node and
// buffered channels.
func BenchmarkGoroutineSkynet(b *testing.B) {
	for b.Loop() {
		c := make(chan int64, 1)
		go goroutineSkynet(c, 0, 100_000)
		if v := <-c; v != 4999950000 {
			b.Fatalf("sum %d", v)
		}
	}
}

// coreBenchmarks are the benchmarks whose cost the fairness mechanisms,
// statistics and hooks must not raise by more than 5%.
var coreBenchmarks = []struct {
	name string
	run  func(*testing.B, ...sched.Option)
}{
	{"PingPong", benchPingPong},
	{"Spawn", benchSpawn},
	{"YieldRoundTrip", benchYieldRoundTrip},
	{"Skynet", benchSkynet},
}

// BenchmarkFairnessCost runs the core benchmarks with the fairness
// mechanisms (global-queue turns, own-queue turns, next-slot cap, step
// budget, sized global batches) and with unfair scheduling (see withoutFairness), side by
// side:
//
//	go test -run '^$' -bench FairnessCost -count 8 . | benchstat -col /sched -
func BenchmarkFairnessCost(b *testing.B) {
	for _, bm := range coreBenchmarks {
		b.Run(bm.name+"/sched=fair", func(b *testing.B) { bm.run(b) })
		b.Run(bm.name+"/sched=seed", func(b *testing.B) { bm.run(b, sched.WithoutFairness()) })
	}
}

// BenchmarkObservationCost runs the core benchmarks with every hook set
// (doing nothing) and Stats read every 10ms by another goroutine, and
// without, side by side:
//
//	go test -run '^$' -bench ObservationCost -count 8 . | benchstat -col /observed -
func BenchmarkObservationCost(b *testing.B) {
	hooks := sched.WithHooks(sched.Hooks{
		Start:    func(sched.StartInfo) {},
		End:      func(sched.EndInfo) {},
		Panic:    func(sched.PanicInfo) {},
		SlowStep: func(sched.SlowStepInfo) {},
	})
	for _, bm := range coreBenchmarks {
		b.Run(bm.name+"/observed=no", func(b *testing.B) { bm.run(b) })
		b.Run(bm.name+"/observed=yes", func(b *testing.B) {
			pollStats = true
			defer func() { pollStats = false }()
			bm.run(b, hooks)
		})
	}
}

// lateCase is one case of BenchmarkTimerLateness: procs sleepers, each
// sleeping sleeps times in a row, for min up to 5*min at a time.
type lateCase struct {
	procs  int
	min    time.Duration
	sleeps int
}

// lateDuration returns a sleep of min up to 5*min drawn from the
// xorshift state at rng.
func lateDuration(rng *uint64, min time.Duration) time.Duration {
	x := *rng
	x ^= x << 13
	x ^= x >> 7
	x ^= x << 17
	*rng = x
	return min + time.Duration(x%uint64(4*min))
}

// lateSleeper sleeps cap(late) times for a random time and records, for
// each sleep, how late the step that sees its completion starts: the
// time from the deadline to the start of that step.
type lateSleeper struct {
	stepOnly
	rng      uint64
	min      time.Duration
	deadline time.Time
	late     []time.Duration
}

func (p *lateSleeper) Step(evs []sched.Event, out *sched.StepOutput) error {
	now := time.Now()
	for _, ev := range evs {
		if ev.Error != nil {
			return ev.Error
		}
		if ev.Type == sched.EventYieldComplete {
			p.late = append(p.late, now.Sub(p.deadline))
		}
	}
	if len(p.late) == cap(p.late) {
		out.Done(payload.Payload{})
		return nil
	}
	p.deadline = now.Add(lateDuration(&p.rng, p.min))
	out.SleepUntil(1, p.deadline)
	return nil
}

// lateBusyStep is how long each step (or slice between
// runtime.Gosched calls) of the background load computes.
const lateBusyStep = 50 * time.Microsecond

// busyFor computes for d.
func busyFor(d time.Duration) {
	for start := time.Now(); time.Since(start) < d; {
	}
}

// lateBusy is the background load of BenchmarkTimerLateness: it
// computes for lateBusyStep per step and continues until cancelled.
var lateBusy = stepFunc(func(evs []sched.Event, out *sched.StepOutput) error {
	for _, ev := range evs {
		if ev.Type == sched.EventCancel {
			out.Done(payload.Payload{})
			return nil
		}
	}
	busyFor(lateBusyStep)
	out.Continue()
	return nil
})

// BenchmarkTimerLateness measures how late sleepers wake up: procs
// processes each sleep several times in a row for a random 1 to 5 times
// min (impl=sched), against as many goroutines calling time.Sleep with
// the same durations (impl=sleep), side by side. Lateness is the time
// from a sleep's deadline to the moment the sleeper runs again;
// p50-late-us and p99-late-us are its percentiles over every sleep of
// every op, in microseconds. One op is one whole run of procs sleepers.
//
// The cases: 2,000 sleepers of 1-5ms, 20 times, wake about 670,000 times
// a second; 100,000 of 100-500ms, 5 times, about 330,000 times a second,
// from a heap fifty times larger; both keep a two-core machine busy
// without overloading it. 100,000 sleepers of 1-5ms ask for 33 million
// wake-ups a second, far more than the machine can give, so their
// lateness measures the backlog. With load=busy, as many more processes
// (goroutines) as there are processors compute throughout, in steps
// (slices ended by runtime.Gosched) of 50µs, so the workers are never
// idle. The ratios of the two implementations' figures:
//
//	scripts/lateness.sh
func BenchmarkTimerLateness(b *testing.B) {
	cases := []lateCase{
		{2_000, time.Millisecond, 20},
		{100_000, 100 * time.Millisecond, 5},
		{100_000, time.Millisecond, 5},
	}
	for _, c := range cases {
		for _, load := range []string{"none", "busy"} {
			name := fmt.Sprintf("procs=%d/sleep=%v-%v/load=%s", c.procs, c.min, 5*c.min, load)
			busy := 0
			if load == "busy" {
				busy = runtime.GOMAXPROCS(0)
			}
			b.Run(name, func(b *testing.B) {
				b.Run("impl=sched", func(b *testing.B) { benchLatenessSched(b, c, busy) })
				b.Run("impl=sleep", func(b *testing.B) { benchLatenessSleep(b, c, busy) })
			})
		}
	}
}

func benchLatenessSched(b *testing.B, c lateCase, busy int) {
	s := newScheduler(b)
	pollStatsDuring(b, s)
	ctx := context.Background()
	for range busy {
		h, err := s.Submit(ctx, lateBusy, "busy", nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Terminate(h.PID()) })
	}
	var late []time.Duration
	sleepers := make([]lateSleeper, c.procs)
	hs := make([]sched.Handle, c.procs)
	for i := range sleepers {
		sleepers[i].late = make([]time.Duration, 0, c.sleeps)
		sleepers[i].min = c.min
	}
	for n := 0; b.Loop(); n++ {
		for i := range sleepers {
			sleepers[i].rng = uint64(n)*uint64(c.procs) + uint64(i) + 1
			sleepers[i].late = sleepers[i].late[:0]
			h, err := s.Submit(ctx, &sleepers[i], "sleep", nil)
			if err != nil {
				b.Fatal(err)
			}
			hs[i] = h
		}
		for _, h := range hs {
			if _, err := h.Wait(ctx); err != nil {
				b.Fatal(err)
			}
		}
		for i := range sleepers {
			late = append(late, sleepers[i].late...)
		}
	}
	reportLateness(b, late)
}

func benchLatenessSleep(b *testing.B, c lateCase, busy int) {
	var stop atomic.Bool
	var busyDone sync.WaitGroup
	for range busy {
		busyDone.Add(1)
		go func() {
			defer busyDone.Done()
			for !stop.Load() {
				busyFor(lateBusyStep)
				runtime.Gosched()
			}
		}()
	}
	b.Cleanup(func() {
		stop.Store(true)
		busyDone.Wait()
	})
	var late []time.Duration
	lates := make([][]time.Duration, c.procs)
	for i := range lates {
		lates[i] = make([]time.Duration, c.sleeps)
	}
	var wg sync.WaitGroup
	for n := 0; b.Loop(); n++ {
		wg.Add(c.procs)
		for i := range c.procs {
			go func() {
				defer wg.Done()
				rng := uint64(n)*uint64(c.procs) + uint64(i) + 1
				for j := range c.sleeps {
					d := lateDuration(&rng, c.min)
					deadline := time.Now().Add(d)
					time.Sleep(d)
					lates[i][j] = time.Since(deadline)
				}
			}()
		}
		wg.Wait()
		for _, l := range lates {
			late = append(late, l...)
		}
	}
	reportLateness(b, late)
}

// reportLateness reports the 50th and 99th percentiles of late in
// microseconds.
func reportLateness(b *testing.B, late []time.Duration) {
	b.StopTimer()
	slices.Sort(late)
	pct := func(p float64) float64 {
		return float64(late[int(p*float64(len(late)-1))]) / float64(time.Microsecond)
	}
	b.ReportMetric(pct(0.50), "p50-late-us")
	b.ReportMetric(pct(0.99), "p99-late-us")
}
