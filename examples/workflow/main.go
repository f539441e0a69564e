// Command workflow runs many small workflows, each a process that calls a
// slow external service through a user command, bounds every call with a
// deadline, and retries a few times before it gives up.
//
// It shows the pattern for I/O with the scheduler: the process yields the
// call (handled asynchronously, completed later from another goroutine)
// with a deadline on the same tag (StepOutput.Timeout), and gets one
// completion: the answer, or ErrTimeout. The handler sees the deadline in
// its call's context and stops its work when it passes. No goroutine
// waits on behalf of a process.
//
//	go run ./examples/workflow [-n 10000] [-timeout 30ms]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"sync/atomic"
	"time"

	"github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
)

// cmdQuote asks the pricing service for a quote; the argument is the item.
const cmdQuote = scheduler.FirstUserCommand

// pricingService simulates a remote service with a variable latency: most
// answers take a few milliseconds, some take far too long. It completes
// each call from a timer goroutine of its own, as a client library's
// callback would.
type pricingService struct {
	// calls counts the calls made. The handler adds to it on whichever
	// worker runs the yield; run loads it once every workflow has ended,
	// when no call is made any more. It orders nothing else.
	calls atomic.Int64
}

func (ps *pricingService) handle(call scheduler.Call) error {
	item, ok := call.Arg.(string)
	if !ok {
		return fmt.Errorf("quote: want an item name, got %T", call.Arg)
	}
	ps.calls.Add(1)
	latency := time.Duration(1+rand.IntN(10)) * time.Millisecond
	if rand.IntN(5) == 0 {
		latency = 200 * time.Millisecond // a slow answer
	}
	done := call.Completion()
	t := time.AfterFunc(latency, func() {
		_ = done.Complete(len(item)*100+rand.IntN(100), nil)
	})
	// The call's context is done when the yield's deadline passes (or
	// the process ends): the answer would reach nobody, so stop.
	context.AfterFunc(call.Context(), func() { t.Stop() })
	return nil
}

// errTimeout is the error of a workflow whose every attempt timed out.
var errTimeout = errors.New("pricing service timed out")

// workflow quotes one item: up to maxAttempts calls, each bounded by a
// timeout. The tag of a call is its attempt number.
type workflow struct {
	item        string
	timeout     time.Duration
	maxAttempts uint64
	attempt     uint64
}

func (w *workflow) Init(_ context.Context, method string, input payload.Payloads) error {
	if method != "quote" {
		return fmt.Errorf("%w: %q", scheduler.ErrUnknownMethod, method)
	}
	return input.Decode(&w.item)
}

func (w *workflow) Step(events []scheduler.Event, out *scheduler.StepOutput) error {
	if w.attempt == 0 {
		w.try(out)
		return nil
	}
	for _, ev := range events {
		switch {
		case ev.Type == scheduler.EventCancel:
			return context.Canceled
		case ev.Type != scheduler.EventYieldComplete:
		case errors.Is(ev.Error, scheduler.ErrTimeout):
			if w.attempt == w.maxAttempts {
				return fmt.Errorf("%w after %d attempts", errTimeout, w.attempt)
			}
			w.try(out)
		case ev.Error != nil:
			return ev.Error
		default:
			out.Done(payload.Of(ev.Data))
			return nil
		}
	}
	return nil
}

// try starts the next attempt: the call, bounded by the timeout.
func (w *workflow) try(out *scheduler.StepOutput) {
	w.attempt++
	out.Yield(w.attempt, cmdQuote, w.item)
	out.Timeout(w.attempt, w.timeout)
}

func (w *workflow) Close() {}

// errUsage is the error of a flag value the program cannot run with; the
// program exits with status 2 on it, as on a flag it cannot parse.
var errUsage = errors.New("usage")

func main() {
	n := flag.Int("n", 10_000, fmt.Sprintf("workflows to run, 0 to %d", maxWorkflows))
	timeout := flag.Duration("timeout", 30*time.Millisecond, "timeout of one call")
	flag.Parse()
	if flag.NArg() > 0 {
		log.Printf("unexpected arguments %q: the program takes flags only (-h lists them)", flag.Args())
		os.Exit(2)
	}
	start := time.Now()
	r, err := run(*n, *timeout)
	if err != nil {
		log.Print(err)
		if errors.Is(err, errUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
	fmt.Printf("%d workflows in %v: %d quoted, %d timed out after 3 attempts; %d calls made\n",
		*n, time.Since(start).Round(time.Millisecond), r.quoted, r.timedOut, r.calls)
}

// outcome counts how the workflows of a run ended and the calls they made.
type outcome struct {
	quoted, timedOut int
	calls            int64
}

// maxWorkflows is the most workflows a run takes. run starts every
// workflow before it waits for any, so each one's process and handle are
// held at once, about half a kilobyte: ten million fit in a few
// gigabytes, and a larger count would run out of memory, or, past what a
// slice of handles can hold, panic.
const maxWorkflows = 10_000_000

// run runs n workflows whose calls each time out after timeout. n must
// be between 0 and maxWorkflows, and the timeout must be positive: a
// call given no time times out before it starts.
func run(n int, timeout time.Duration) (outcome, error) {
	if n < 0 || n > maxWorkflows {
		return outcome{}, fmt.Errorf("%w: -n %d: need 0 to %d workflows", errUsage, n, maxWorkflows)
	}
	if timeout <= 0 {
		return outcome{}, fmt.Errorf("%w: -timeout %v: need a positive duration", errUsage, timeout)
	}
	svc := &pricingService{}
	s, err := scheduler.New(scheduler.WithHandler(cmdQuote, svc.handle))
	if err != nil {
		return outcome{}, err
	}
	defer s.Shutdown(context.Background())

	ctx := context.Background()
	handles := make([]scheduler.Handle, n)
	for i := range handles {
		item := fmt.Sprintf("item-%d", i)
		h, err := s.Submit(ctx, &workflow{timeout: timeout, maxAttempts: 3}, "quote", payload.Values(item))
		if err != nil {
			return outcome{}, err
		}
		handles[i] = h
	}
	var r outcome
	for _, h := range handles {
		_, err := h.Wait(ctx)
		switch {
		case err == nil:
			r.quoted++
		case errors.Is(err, errTimeout):
			r.timedOut++
		default:
			return r, err
		}
	}
	r.calls = svc.calls.Load()
	return r, nil
}
