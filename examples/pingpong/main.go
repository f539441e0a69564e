// Command pingpong bounces a message between two processes and reports the
// cost per message.
//
//	go run ./examples/pingpong [-n 1000000]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// ball is the message. Passing a pointer costs no allocation.
type ball struct{ hits int }

// player returns every ball it gets until it has hit it max times in all.
// The server (serve set) puts the ball in play in its first step.
type player struct {
	serve relay.PID
	max   int
}

func (p *player) Init(context.Context, string, payload.Payloads) error { return nil }

func (p *player) Step(events []scheduler.Event, out *scheduler.StepOutput) error {
	if !p.serve.IsZero() {
		out.Tell(p.serve, &ball{})
		p.serve = relay.PID{}
		return nil
	}
	for _, ev := range events {
		switch {
		case ev.Type == scheduler.EventCancel:
			out.Done(payload.Payload{})
			return nil
		case ev.Type != scheduler.EventMessage:
		case ev.Error != nil:
			// The other player has finished: the rally is over.
			out.Done(payload.Payload{})
			return nil
		default:
			b := ev.Data.(*ball)
			b.hits++
			if b.hits >= p.max {
				out.Done(payload.Of(b.hits))
				return nil
			}
			out.Tell(ev.From, b)
		}
	}
	return nil
}

func (p *player) Close() {}

// errUsage is the error of a flag value the program cannot run with; the
// program exits with status 2 on it, as on a flag it cannot parse.
var errUsage = errors.New("usage")

func main() {
	n := flag.Int("n", 1_000_000, "messages to exchange")
	flag.Parse()
	if flag.NArg() > 0 {
		log.Printf("unexpected arguments %q: the program takes flags only (-h lists them)", flag.Args())
		os.Exit(2)
	}
	if err := run(*n); err != nil {
		log.Print(err)
		if errors.Is(err, errUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// run plays a rally of n messages, at least one, and checks its count.
func run(n int) error {
	if n < 1 {
		return fmt.Errorf("%w: -n %d: need at least 1 message", errUsage, n)
	}
	s, err := scheduler.New()
	if err != nil {
		return err
	}
	defer s.Shutdown(context.Background())
	ctx := context.Background()

	receiver, err := s.Submit(ctx, &player{max: n}, "play", nil)
	if err != nil {
		return err
	}
	start := time.Now()
	server, err := s.Submit(ctx, &player{serve: receiver.PID(), max: n}, "play", nil)
	if err != nil {
		return err
	}
	// Whoever hits the ball the n-th time finishes with the count.
	select {
	case <-server.Done():
	case <-receiver.Done():
	}
	elapsed := time.Since(start)
	for _, h := range []scheduler.Handle{server, receiver} {
		if res, err := h.Result(); err == nil && !res.IsZero() {
			hits, err := payload.As[int](res)
			if err != nil {
				return err
			}
			if hits != n {
				return fmt.Errorf("the rally ended after %d hits, want %d", hits, n)
			}
			fmt.Printf("%d messages in %v: %v per message\n", hits, elapsed.Round(time.Millisecond), elapsed/time.Duration(hits))
			return nil
		}
	}
	return fmt.Errorf("no player finished the rally")
}
