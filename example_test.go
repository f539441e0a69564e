package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"
	"sync/atomic"
	"time"

	"github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// greeter is a process with one entry point, "greet": it waits 10ms,
// then answers its input with a greeting.
type greeter struct{ name string }

func (g *greeter) Init(ctx context.Context, method string, in payload.Payloads) error {
	if method != "greet" {
		return fmt.Errorf("greeter has no method %q: %w", method, scheduler.ErrUnknownMethod)
	}
	return in.Decode(&g.name) // the entry point's input
}

func (g *greeter) Step(events []scheduler.Event, out *scheduler.StepOutput) error {
	if len(events) == 0 { // first step: wait 10ms without holding a goroutine
		out.Sleep(1, 10*time.Millisecond)
		return nil
	}
	out.Done(payload.Of("hello, " + g.name))
	return nil
}

func (g *greeter) Close() {}

// A process in a few lines, as the README shows it: submitted with its
// input, waited for through its Handle, and a Shutdown with a deadline
// when the program ends.
func Example() {
	ctx := context.Background()
	s, _ := scheduler.New()
	defer func() {
		// Give processes 10 s to finish on their cancel, then force the rest:
		// without a deadline, one process that ignores its cancel would keep
		// Shutdown waiting forever.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			log.Print(err) // wraps scheduler.ErrForced: some processes were forced
		}
	}()
	h, _ := s.Submit(ctx, &greeter{}, "greet", payload.Values("world"))
	res, err := h.Wait(ctx) // res holds "hello, world"
	fmt.Println(res.Value(), err)
	// Output: hello, world <nil>
}

func ExampleScheduler() {
	s, err := scheduler.New()
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	h, err := s.Submit(ctx, &greeter{}, "greet", payload.Values("world"))
	if err != nil {
		log.Fatal(err)
	}
	res, err := h.Wait(ctx)
	if err != nil {
		log.Fatal(err)
	}
	greeting, err := payload.As[string](res)
	fmt.Println(greeting, err)

	// An entry point the process does not have fails the Submit.
	_, err = s.Submit(ctx, &greeter{}, "shout", payload.Values("world"))
	fmt.Println(errors.Is(err, scheduler.ErrUnknownMethod))

	if err := s.Shutdown(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// hello, world <nil>
	// true
}

// tallier adds its n to a shared total and ends; the last one to end
// closes done. It reports through the total, not through a result.
type tallier struct {
	n           int64
	total, left *atomic.Int64
	done        chan struct{}
}

func (c *tallier) Init(context.Context, string, payload.Payloads) error { return nil }

func (c *tallier) Step(_ []scheduler.Event, out *scheduler.StepOutput) error {
	c.total.Add(c.n)
	if c.left.Add(-1) == 0 {
		close(c.done)
	}
	out.Done(payload.Payload{})
	return nil
}

func (c *tallier) Close() {}

// Spawn starts processes whose results nobody waits for: they report
// through shared state, as a pool's fire-and-forget tasks do, and an
// ended one's record can serve the next.
func ExampleScheduler_Spawn() {
	s, err := scheduler.New()
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	var total, left atomic.Int64
	done := make(chan struct{})
	const n = 1000
	left.Store(n)
	for i := range int64(n) {
		if _, err := s.Spawn(ctx, &tallier{n: i + 1, total: &total, left: &left, done: done}, "count", nil); err != nil {
			log.Fatal(err)
		}
	}
	<-done
	fmt.Println(total.Load())

	if err := s.Shutdown(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// 500500
}

// player hits a ball (a number) back to whoever sent it, until the count
// reaches last. The server starts the rally at its first step.
type player struct {
	name  string
	serve relay.PID // whom to serve to; zero for the receiver
	last  int
}

func (p *player) Init(context.Context, string, payload.Payloads) error { return nil }

func (p *player) Step(evs []scheduler.Event, out *scheduler.StepOutput) error {
	if !p.serve.IsZero() {
		out.Tell(p.serve, 1)
		p.serve = relay.PID{}
	}
	for _, ev := range evs {
		if ev.Type != scheduler.EventMessage || ev.Error != nil {
			continue
		}
		n := ev.Data.(int)
		fmt.Printf("%s got the ball (%d)\n", p.name, n)
		if n < p.last {
			out.Tell(ev.From, n+1)
		}
		if n >= p.last-1 {
			out.Done(payload.Of(n))
		}
	}
	return nil
}

func (p *player) Close() {}

func ExampleStepOutput_Tell() {
	s, err := scheduler.New()
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	pong, err := s.Submit(ctx, &player{name: "pong", last: 4}, "play", nil)
	if err != nil {
		log.Fatal(err)
	}
	ping, err := s.Submit(ctx, &player{name: "ping", serve: pong.PID(), last: 4}, "play", nil)
	if err != nil {
		log.Fatal(err)
	}
	for _, h := range []scheduler.Handle{ping, pong} {
		if _, err := h.Wait(ctx); err != nil {
			log.Fatal(err)
		}
	}
	if err := s.Shutdown(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// pong got the ball (1)
	// ping got the ball (2)
	// pong got the ball (3)
	// ping got the ball (4)
}

// cmdUpper is a user command: upper-case the string argument.
const cmdUpper = scheduler.FirstUserCommand

// shouter asks the host to upper-case its input and finishes with the
// answer.
type shouter struct{ text string }

func (p *shouter) Init(_ context.Context, _ string, input payload.Payloads) error {
	return input.Decode(&p.text)
}

func (p *shouter) Step(evs []scheduler.Event, out *scheduler.StepOutput) error {
	if len(evs) == 0 {
		out.Yield(1, cmdUpper, p.text)
		return nil
	}
	for _, ev := range evs {
		if ev.Type == scheduler.EventYieldComplete && ev.Tag == 1 {
			if ev.Error != nil {
				return ev.Error
			}
			out.Done(ev.Result())
		}
	}
	return nil
}

func (p *shouter) Close() {}

func ExampleHandler() {
	// A handler must not block: it hands the work and the yield's
	// Completion to a goroutine, which completes the yield when done.
	upper := func(call scheduler.Call) error {
		text, ok := call.Arg.(string)
		if !ok {
			return fmt.Errorf("upper: want a string, got %T", call.Arg)
		}
		done := call.Completion()
		go func() {
			_ = done.Complete(strings.ToUpper(text), nil)
		}()
		return nil
	}
	s, err := scheduler.New(scheduler.WithHandler(cmdUpper, upper))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	h, err := s.Submit(ctx, &shouter{}, "run", payload.Values("hello"))
	if err != nil {
		log.Fatal(err)
	}
	res, err := h.Wait(ctx)
	fmt.Println(res.Value(), err)

	if err := s.Shutdown(ctx); err != nil {
		log.Fatal(err)
	}
	// Output: HELLO <nil>
}

// square finishes with the square of its input.
type square struct{ n int }

func (p *square) Init(_ context.Context, _ string, input payload.Payloads) error {
	return input.Decode(&p.n)
}

func (p *square) Step(_ []scheduler.Event, out *scheduler.StepOutput) error {
	out.Done(payload.Of(p.n * p.n))
	return nil
}

func (p *square) Close() {}

// sumOfSquares spawns a square child for each of 1..n and sums their
// results as they complete.
type sumOfSquares struct {
	n, left, sum int
	started      bool
}

func (p *sumOfSquares) Init(_ context.Context, _ string, input payload.Payloads) error {
	return input.Decode(&p.n)
}

func (p *sumOfSquares) Step(evs []scheduler.Event, out *scheduler.StepOutput) error {
	if !p.started {
		p.started = true
		for i := 1; i <= p.n; i++ {
			out.SpawnAwait(uint64(i), &square{}, "square", payload.Values(i))
		}
		p.left = p.n
		return nil
	}
	for _, ev := range evs {
		if ev.Type != scheduler.EventYieldComplete {
			continue
		}
		if ev.Error != nil {
			return fmt.Errorf("child %v: %w", ev.From, ev.Error)
		}
		v, err := payload.As[int](ev.Result())
		if err != nil {
			return err
		}
		p.sum += v
		p.left--
	}
	if p.left == 0 {
		out.Done(payload.Of(p.sum))
	}
	return nil
}

func (p *sumOfSquares) Close() {}

func ExampleStepOutput_SpawnAwait() {
	s, err := scheduler.New()
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	h, err := s.Submit(ctx, &sumOfSquares{}, "run", payload.Values(10))
	if err != nil {
		log.Fatal(err)
	}
	res, err := h.Wait(ctx)
	fmt.Println(res.Value(), err)

	if err := s.Shutdown(ctx); err != nil {
		log.Fatal(err)
	}
	// Output: 385 <nil>
}

// session waits for messages until it is cancelled; then it flushes its
// state (a short timer stands for the write) before it ends.
type session struct{ flushed bool }

func (p *session) Init(context.Context, string, payload.Payloads) error { return nil }

func (p *session) Step(evs []scheduler.Event, out *scheduler.StepOutput) error {
	for _, ev := range evs {
		switch ev.Type {
		case scheduler.EventCancel:
			fmt.Println("session: cancelled, flushing")
			out.Sleep(1, time.Millisecond)
		case scheduler.EventYieldComplete:
			p.flushed = true
			out.Done(payload.Of("flushed"))
		}
	}
	return nil
}

func (p *session) Close() { fmt.Println("session: closed, flushed:", p.flushed) }

func ExampleScheduler_Shutdown() {
	s, err := scheduler.New()
	if err != nil {
		log.Fatal(err)
	}
	h, err := s.Submit(context.Background(), &session{}, "serve", nil)
	if err != nil {
		log.Fatal(err)
	}

	// Shutdown cancels every process and waits, here up to ten seconds,
	// for them to finish, cleanup included.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fmt.Println("shutdown:", s.Shutdown(ctx))

	res, err := h.Wait(context.Background())
	fmt.Println("session result:", res.Value(), err)
	_, err = s.Submit(context.Background(), &session{}, "serve", nil)
	fmt.Println("submit after shutdown:", errors.Is(err, scheduler.ErrClosed))
	// Output:
	// session: cancelled, flushing
	// session: closed, flushed: true
	// shutdown: <nil>
	// session result: flushed <nil>
	// submit after shutdown: true
}
