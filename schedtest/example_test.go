package schedtest_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/schedtest"
)

// fetcher calls cmdWork with a one-hour deadline and reports the answer
// to whoever it was told about.
type fetcher struct{}

func (fetcher) Init(context.Context, string, payload.Payloads) error { return nil }
func (fetcher) Step(evs []scheduler.Event, out *scheduler.StepOutput) error {
	if len(evs) == 0 {
		out.Yield(1, cmdWork, "https://example.com")
		out.Timeout(1, time.Hour)
		return nil
	}
	if errors.Is(evs[0].Error, scheduler.ErrTimeout) {
		out.Done(payload.Of("gave up"))
		return nil
	}
	out.Done(payload.Of(evs[0].Data))
	return nil
}
func (fetcher) Close() {}

// An hour-long timeout passes in virtual time.
func ExampleSim_RunUntilIdleAdvancing() {
	s := schedtest.New(&exampleT{})
	s.Fake(cmdWork, schedtest.Never())
	pid := s.Start(fetcher{}, "run", nil)
	moved := s.RunUntilIdleAdvancing()
	res, _ := s.Result(pid)
	fmt.Println(res.Value(), "after", moved)
	fmt.Println(s.Yields(pid)[0])
	// Output:
	// gave up after 1h0m0s
	// step 1: Command(16, tag=1, arg=https://example.com)
}

// A fake answers the command; a held call is answered by the test.
func ExampleSim_FakeLater() {
	s := schedtest.New(&exampleT{})
	calls := s.FakeLater(cmdWork)
	pid := s.Start(fetcher{}, "run", nil)
	s.RunUntilIdle()
	call := calls.Next()
	fmt.Println("asked for", call.Arg)
	_ = call.Token().Complete("<html>", nil)
	s.RunUntilIdle()
	res, _ := s.Result(pid)
	fmt.Println(res.Value())
	fmt.Println(call.Token().Complete("again", nil) != nil)
	// Output:
	// asked for https://example.com
	// <html>
	// true
}

// echo answers every message to its sender.
type echo struct{}

func (echo) Init(context.Context, string, payload.Payloads) error { return nil }
func (echo) Step(evs []scheduler.Event, out *scheduler.StepOutput) error {
	for _, ev := range evs {
		out.Tell(ev.From, fmt.Sprintf("echo %v", ev.Data))
	}
	return nil
}
func (echo) Close() {}

// A probe sends from its own PID and checks what comes back.
func ExampleProbe() {
	s := schedtest.New(&exampleT{})
	probe := s.Probe()
	pid := s.Start(echo{}, "run", nil)
	_ = probe.Send(pid, "hi")
	ev := probe.Expect("echo hi")
	fmt.Println(ev.From == pid)
	probe.ExpectNone()
	// Output:
	// true
}
