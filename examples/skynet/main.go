// Command skynet runs the skynet benchmark on the scheduler: a tree of
// processes, each of which spawns ten children and sums their results,
// down to one million leaves that return their own numbers. It prints the
// sum, 499999500000, and how long the tree took.
//
//	go run ./examples/skynet [-leaves 1000000] [-workers N]
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
)

// node is one process of the tree. A node of size 1 is a leaf; any other
// node splits its range of numbers among ten children.
type node struct {
	num, size int
	sum       int64
	waiting   int
}

func (n *node) Init(_ context.Context, method string, _ payload.Payloads) error {
	if method != "sum" {
		return fmt.Errorf("%w: %q", scheduler.ErrUnknownMethod, method)
	}
	return nil
}

func (n *node) Step(events []scheduler.Event, out *scheduler.StepOutput) error {
	if n.size == 1 {
		out.Done(payload.Of(int64(n.num)))
		return nil
	}
	if n.waiting == 0 { // first step: fan out
		sub := n.size / 10
		for i := range 10 {
			out.SpawnAwait(uint64(i), &node{num: n.num + i*sub, size: sub}, "sum", nil)
		}
		n.waiting = 10
		return nil
	}
	for _, ev := range events {
		switch ev.Type {
		case scheduler.EventCancel:
			return errors.New("cancelled")
		case scheduler.EventYieldComplete:
			if ev.Error != nil {
				return ev.Error
			}
			v, err := payload.As[int64](ev.Result())
			if err != nil {
				return err
			}
			n.sum += v
			n.waiting--
		}
	}
	if n.waiting == 0 {
		out.Done(payload.Of(n.sum))
	}
	return nil
}

func (n *node) Close() {}

// powerOfTen reports whether n is 1, 10, 100, ...
func powerOfTen(n int) bool {
	for n >= 10 && n%10 == 0 {
		n /= 10
	}
	return n == 1
}

// errUsage is the error of a flag value the program cannot run with; the
// program exits with status 2 on it, as on a flag it cannot parse.
var errUsage = errors.New("usage")

func main() {
	leaves := flag.Int("leaves", 1_000_000, fmt.Sprintf("number of leaves, a power of ten from 1 to %d", maxLeaves))
	workers := flag.Int("workers", 0, "worker goroutines (0: GOMAXPROCS)")
	flag.Parse()
	if flag.NArg() > 0 {
		log.Printf("unexpected arguments %q: the program takes flags only (-h lists them)", flag.Args())
		os.Exit(2)
	}
	if err := run(*leaves, *workers); err != nil {
		log.Print(err)
		if errors.Is(err, errUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// maxLeaves is the largest tree run sums: the sum of the numbers below
// ten billion, about 5e19, does not fit the int64 the nodes add in.
const maxLeaves = 1_000_000_000

// run sums a tree of the given number of leaves on a scheduler of the
// given number of workers (0: GOMAXPROCS) and checks the sum. The leaves
// must be a power of ten, at most maxLeaves: a node splits its range in
// ten, and a range that does not split evenly down to single leaves
// would make nodes of no leaves that split forever.
func run(leaves, workers int) error {
	if !powerOfTen(leaves) || leaves > maxLeaves {
		return fmt.Errorf("%w: -leaves %d: need a power of ten from 1 to %d", errUsage, leaves, maxLeaves)
	}
	if workers < 0 {
		return fmt.Errorf("%w: -workers %d: need 0 (GOMAXPROCS) or more", errUsage, workers)
	}
	var opts []scheduler.Option
	if workers > 0 {
		opts = append(opts, scheduler.WithWorkers(workers))
	}
	s, err := scheduler.New(opts...)
	if errors.Is(err, scheduler.ErrInvalidOption) {
		// The only option taken from the command line: more workers than
		// a scheduler can have.
		return fmt.Errorf("%w: -workers %d: %w", errUsage, workers, err)
	}
	if err != nil {
		return err
	}
	defer s.Shutdown(context.Background())

	ctx := context.Background()
	start := time.Now()
	h, err := s.Submit(ctx, &node{size: leaves}, "sum", nil)
	if err != nil {
		return err
	}
	res, err := h.Wait(ctx)
	if err != nil {
		return err
	}
	sum, err := payload.As[int64](res)
	if err != nil {
		return err
	}
	elapsed := time.Since(start)
	st := s.Stats()
	fmt.Printf("sum %d\n", sum)
	fmt.Printf("%d processes on %d workers in %v (%v per process)\n",
		st.Processes.Submitted, st.Workers, elapsed.Round(time.Millisecond), elapsed/time.Duration(max(st.Processes.Submitted, 1)))
	if want := int64(leaves) * int64(leaves-1) / 2; sum != want {
		return fmt.Errorf("wrong sum: got %d, want %d", sum, want)
	}
	return nil
}
