package scheduler_test

import (
	"context"
	"errors"
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

// pollStats makes newBenchScheduler start a goroutine that reads the
// scheduler's Stats every 10 milliseconds: monitoring far more eager than
// a service's metrics scraper.
var pollStats bool

func newBenchScheduler(b *testing.B, opts ...sched.Option) *sched.Scheduler {
	b.Helper()
	s, err := sched.New(opts...)
	if err != nil {
		b.Fatal(err)
	}
	var stop, polled chan struct{}
	if pollStats {
		stop, polled = make(chan struct{}), make(chan struct{})
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
	}
	b.Cleanup(func() {
		if stop != nil {
			close(stop)
			<-polled
		}
		if err := s.Shutdown(context.Background()); err != nil {
			b.Error(err)
		}
	})
	return s
}

// bouncer answers every message by telling its sender, until it has
// received max messages.
type bouncer struct {
	n, max int
	serve  *relay.PID // whom to start the rally with, if anyone
}

func (p *bouncer) Init(context.Context, string, payload.Payloads) error { return nil }
func (p *bouncer) Close()                                               {}
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
	s := newBenchScheduler(b, opts...)
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
type oneStep struct{}

func (oneStep) Init(context.Context, string, payload.Payloads) error { return nil }
func (oneStep) Close()                                               {}
func (oneStep) Step(_ []sched.Event, out *sched.StepOutput) error {
	out.Done(payload.Payload{})
	return nil
}

// spawner spawns n trivial children from inside the scheduler and waits
// for all of them.
type spawner struct {
	n, left int
}

func (p *spawner) Init(context.Context, string, payload.Payloads) error { return nil }
func (p *spawner) Close()                                               {}
func (p *spawner) Step(evs []sched.Event, out *sched.StepOutput) error {
	if p.left == 0 && len(evs) == 0 {
		p.left = p.n
		for i := range p.n {
			out.SpawnAwait(uint64(i), oneStep{}, "run", nil)
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
	s := newBenchScheduler(b, opts...)
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
type sink struct{ n int }

func (p *sink) Init(context.Context, string, payload.Payloads) error { return nil }
func (p *sink) Close()                                               {}
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
	s := newBenchScheduler(b)
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

const cmdEcho = sched.FirstUserCommand

// yielder yields cmdEcho n times in sequence.
type yielder struct{ left int }

func (p *yielder) Init(context.Context, string, payload.Payloads) error { return nil }
func (p *yielder) Close()                                               {}
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
	s := newBenchScheduler(b, append(opts, sched.WithHandler(cmdEcho, func(c sched.Call) error {
		reqs <- c.Completion()
		return nil
	}))...)
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
	s := newBenchScheduler(b, sched.WithHandler(cmdEcho, func(c sched.Call) error {
		return c.Complete(nil, nil)
	}))
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
	num, size int
	sum       int64
	got       int
}

func (n *skynetNode) Init(context.Context, string, payload.Payloads) error { return nil }
func (n *skynetNode) Close()                                               {}
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
		v, err := payload.As[int64](ev.Data.(payload.Payload))
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

func benchSkynet(b *testing.B, opts ...sched.Option) {
	s := newBenchScheduler(b, opts...)
	ctx := context.Background()
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
// budget, sized global batches) and with the seed's scheduling, side by
// side:
//
//	go test -run '^$' -bench FairnessCost -count 8 . | benchstat -col /sched -
func BenchmarkFairnessCost(b *testing.B) {
	for _, bm := range coreBenchmarks {
		b.Run(bm.name+"/sched=fair", func(b *testing.B) { bm.run(b) })
		b.Run(bm.name+"/sched=seed", func(b *testing.B) { bm.run(b, sched.WithSeedScheduling()) })
	}
}

// BenchmarkObservationCost runs the core benchmarks with every hook set
// (doing nothing) and Stats read every 10ms by another goroutine, and
// without, side by side:
//
//	go test -run '^$' -bench ObservationCost -count 8 . | benchstat -col /observed -
func BenchmarkObservationCost(b *testing.B) {
	hooks := sched.WithHooks(sched.Hooks{
		Start:    func(sched.Started) {},
		End:      func(sched.Ended) {},
		Panic:    func(sched.Panicked) {},
		SlowStep: func(sched.SlowStep) {},
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
