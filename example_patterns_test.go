package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// The patterns of docs/patterns.md, each a runnable example.

// run submits p with no input, waits for its result and shuts the
// scheduler down; the examples use it to stay short.
func run(s *scheduler.Scheduler, p scheduler.Process) payload.Payload {
	ctx := context.Background()
	h, err := s.Submit(ctx, p, "run", nil)
	if err != nil {
		log.Fatal(err)
	}
	res, err := h.Wait(ctx)
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		log.Fatal(err)
	}
	return res
}

// counter is a service: it answers every request with its running
// total after adding the request's body.
type counter struct{ total int }

func (c *counter) Init(context.Context, string, payload.Payloads) error { return nil }
func (c *counter) Close()                                               {}

func (c *counter) Step(events []scheduler.Event, out *scheduler.StepOutput) error {
	for _, ev := range events {
		switch ev.Type {
		case scheduler.EventMessage:
			if req, ok := ev.Data.(scheduler.Request); ok {
				c.total += req.Body.(int)
				out.Reply(req.ReplyTo, c.total, nil)
			}
		case scheduler.EventCancel:
			out.Done(payload.Payload{})
		}
	}
	return nil
}

// adder asks the service named "counter" to add 1, 2 and 3, one request
// at a time, and finishes with the last answer.
type adder struct{ next int }

func (a *adder) Init(context.Context, string, payload.Payloads) error { return nil }
func (a *adder) Close()                                               {}

func (a *adder) Step(events []scheduler.Event, out *scheduler.StepOutput) error {
	for _, ev := range events {
		if ev.Type != scheduler.EventYieldComplete {
			continue
		}
		if ev.Error != nil {
			return ev.Error // the service is gone, or ended before answering
		}
		if a.next == 3 {
			out.Done(ev.Result())
			return nil
		}
	}
	a.next++
	out.RequestName(uint64(a.next), "counter", a.next)
	out.Timeout(uint64(a.next), time.Second) // ErrTimeout if no answer by then
	return nil
}

// A request is one yield: the answer is its completion. The replier
// answers with the ReplyTo it was handed; no goroutine waits, and a
// replier that ends without answering completes the request with
// ErrNoReply.
func ExampleStepOutput_Request() {
	s, _ := scheduler.New()
	h, _ := s.Submit(context.Background(), &counter{}, "serve", nil)
	_ = s.Register("counter", h.PID())
	fmt.Println(run(s, &adder{}).Value())
	// Output: 6
}

// squarer answers a request with the square of its body, or fails on
// a negative one (and so ends without answering).
type squarer struct{}

func (squarer) Init(context.Context, string, payload.Payloads) error { return nil }
func (squarer) Close()                                               {}

func (squarer) Step(events []scheduler.Event, out *scheduler.StepOutput) error {
	for _, ev := range events {
		if req, ok := ev.Data.(scheduler.Request); ok {
			n := req.Body.(int)
			if n < 0 {
				return fmt.Errorf("negative: %d", n)
			}
			out.Reply(req.ReplyTo, n*n, nil)
		}
		if ev.Type == scheduler.EventCancel {
			out.Done(payload.Payload{})
		}
	}
	return nil
}

// gather sends one request to each worker at its first step and
// finishes with the sum of the answers and the workers that failed.
type gather struct {
	workers []relay.PID
	inputs  []int
	waiting int
	sum     int
	failed  []string
}

func (g *gather) Init(context.Context, string, payload.Payloads) error { return nil }
func (g *gather) Close()                                               {}

func (g *gather) Step(events []scheduler.Event, out *scheduler.StepOutput) error {
	if g.waiting == 0 && len(events) == 0 { // fan out
		for i, w := range g.workers {
			out.Request(uint64(i), w, g.inputs[i])
		}
		g.waiting = len(g.workers)
		return nil
	}
	for _, ev := range events { // fan in
		if ev.Type != scheduler.EventYieldComplete {
			continue
		}
		g.waiting--
		if ev.Error != nil {
			g.failed = append(g.failed, fmt.Sprintf("worker %d: %v", ev.Tag, errors.Is(ev.Error, scheduler.ErrNoReply)))
			continue
		}
		g.sum += ev.Data.(int)
	}
	if g.waiting == 0 {
		out.Done(payload.Of(fmt.Sprintf("sum %d, failed %v", g.sum, g.failed)))
	}
	return nil
}

// Fan out a request per worker, fan in the answers. Each request watches
// its worker, so a worker that dies before answering is reported at
// once (ErrNoReply) rather than after a timeout.
func Example_fanOutFanIn() {
	s, _ := scheduler.New()
	var workers []relay.PID
	for range 4 {
		h, _ := s.Submit(context.Background(), squarer{}, "square", nil)
		workers = append(workers, h.PID())
	}
	fmt.Println(run(s, &gather{workers: workers, inputs: []int{1, 2, -3, 4}}).Value())
	// Output: sum 21, failed [worker 2: true]
}

// flaky fails the first two times it is started, then finishes.
type flaky struct {
	starts *int
}

func (f *flaky) Init(context.Context, string, payload.Payloads) error {
	*f.starts++
	return nil
}
func (f *flaky) Close() {}

func (f *flaky) Step(_ []scheduler.Event, out *scheduler.StepOutput) error {
	if *f.starts < 3 {
		return fmt.Errorf("start %d failed", *f.starts)
	}
	out.Done(payload.Of("ok"))
	return nil
}

// supervisor starts its child and restarts it when it fails, waiting
// 10ms, 20ms, 40ms... in between, up to maxRestarts times.
type supervisor struct {
	starts   int
	restarts int
	log      []string
}

const maxRestarts = 5

func (sv *supervisor) Init(context.Context, string, payload.Payloads) error { return nil }
func (sv *supervisor) Close()                                               {}

func (sv *supervisor) Step(events []scheduler.Event, out *scheduler.StepOutput) error {
	const child, backoff = 1, 2 // tags
	if len(events) == 0 {
		out.SpawnAwait(child, &flaky{starts: &sv.starts}, "run", nil)
		return nil
	}
	for _, ev := range events {
		switch {
		case ev.Tag == child && ev.Error == nil:
			sv.log = append(sv.log, "done: "+ev.Data.(string))
			out.Done(payload.Of(sv.log))
		case ev.Tag == child && sv.restarts == maxRestarts:
			return fmt.Errorf("gave up after %d restarts: %w", sv.restarts, ev.Error)
		case ev.Tag == child:
			sv.log = append(sv.log, ev.Error.Error())
			out.Sleep(backoff, (10*time.Millisecond)<<sv.restarts)
			sv.restarts++
		case ev.Tag == backoff:
			out.SpawnAwait(child, &flaky{starts: &sv.starts}, "run", nil)
		}
	}
	return nil
}

// A supervisor restarts a failed child with a growing pause. SpawnAwait
// reports the child's end exactly once, its result or its error, so
// nothing is lost between starting a child and watching it. (For a
// process it did not start, a supervisor uses StepOutput.Monitor.)
func Example_supervisor() {
	s, _ := scheduler.New()
	for _, line := range run(s, &supervisor{}).Value().([]string) {
		fmt.Println(line)
	}
	// Output:
	// start 1 failed
	// start 2 failed
	// done: ok
}

// retrier calls a command that fails now and then, retrying with
// exponential backoff.
type retrier struct {
	attempt int
}

const cmdFetch = scheduler.FirstUserCommand

func (r *retrier) Init(context.Context, string, payload.Payloads) error { return nil }
func (r *retrier) Close()                                               {}

func (r *retrier) Step(events []scheduler.Event, out *scheduler.StepOutput) error {
	const call, pause = 1, 2 // tags
	if len(events) == 0 {
		out.Yield(call, cmdFetch, r.attempt)
		return nil
	}
	for _, ev := range events {
		switch ev.Tag {
		case call:
			if ev.Error == nil {
				out.Done(payload.Of(fmt.Sprintf("%v after %d retries", ev.Data, r.attempt)))
				return nil
			}
			r.attempt++
			out.Sleep(pause, time.Millisecond<<r.attempt) // 2ms, 4ms, 8ms...
		case pause:
			out.Yield(call, cmdFetch, r.attempt)
		}
	}
	return nil
}

// Retry with backoff: each failure sleeps twice as long as the one
// before, without a goroutine per waiting process.
func Example_retryWithBackoff() {
	fetch := func(c scheduler.Call) error {
		if c.Arg.(int) < 2 {
			return errors.New("unavailable") // the yield completes with this error
		}
		return c.Complete("fetched", nil)
	}
	s, _ := scheduler.New(scheduler.WithHandler(cmdFetch, fetch))
	fmt.Println(run(s, &retrier{}).Value())
	// Output: fetched after 2 retries
}

// caller yields one command with its argument, bounded by a deadline if
// it has one, and finishes with the command's data, or with its error
// as the result.
type caller struct {
	cmd      scheduler.CommandID
	arg      any
	deadline time.Duration // 0: none
}

func (c *caller) Init(context.Context, string, payload.Payloads) error { return nil }
func (c *caller) Close()                                               {}

func (c *caller) Step(events []scheduler.Event, out *scheduler.StepOutput) error {
	const call = 1 // tag
	if len(events) == 0 {
		out.Yield(call, c.cmd, c.arg)
		if c.deadline > 0 {
			out.Timeout(call, c.deadline) // the handler sees it in Call.Context
		}
		return nil
	}
	for _, ev := range events {
		if ev.Tag != call {
			continue
		}
		if ev.Error != nil {
			out.Done(payload.Of(ev.Error))
			return nil
		}
		out.Done(ev.Result())
	}
	return nil
}

// A deadline on the yield itself: one completion, the answer or
// ErrTimeout, whichever comes first. The handler's call context carries
// the deadline and is done when it passes, with ErrTimeout as its
// cause, so the work stops too.
func Example_timeout() {
	stopped := make(chan string, 1)
	hang := func(c scheduler.Call) error {
		_, hasDeadline := c.Context().Deadline()
		return c.Go(func(ctx context.Context) (any, error) {
			<-ctx.Done() // a service that does not answer in time
			stopped <- fmt.Sprintf("deadline seen %v, stopped by the timeout %v",
				hasDeadline, errors.Is(context.Cause(ctx), scheduler.ErrTimeout))
			return nil, ctx.Err()
		})
	}
	s, _ := scheduler.New(scheduler.WithHandler(cmdFetch, hang))
	err := run(s, &caller{cmd: cmdFetch, arg: "https://example.com", deadline: 20 * time.Millisecond}).Value().(error)
	fmt.Println("the call:", errors.Is(err, scheduler.ErrTimeout))
	fmt.Println("the work:", <-stopped)
	// Output:
	// the call: true
	// the work: deadline seen true, stopped by the timeout true
}

const cmdQuery = scheduler.FirstUserCommand + 1

// Blocking work goes to the bounded pool with Call.Go; the handler does
// not block. The work returns what it has read: its context is done once
// its result has completed the yield.
func Example_blockingWork() {
	// lookup stands for a call that can only block, such as a driver
	// without a callback API.
	lookup := func(ctx context.Context, key string) (string, error) {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		return "value of " + key, nil
	}
	query := func(c scheduler.Call) error {
		return c.Go(func(ctx context.Context) (any, error) {
			return lookup(ctx, c.Arg.(string))
		})
	}
	s, _ := scheduler.New(scheduler.WithHandler(cmdQuery, query), scheduler.WithBlockingPool(4, 100, scheduler.PoolReject))
	fmt.Println(run(s, &caller{cmd: cmdQuery, arg: "k1"}).Value())
	// Output: value of k1
}
