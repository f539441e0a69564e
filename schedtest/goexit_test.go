package schedtest_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/schedtest"
)

type goexitStep struct{}

func (goexitStep) Init(context.Context, string, payload.Payloads) error { return nil }
func (goexitStep) Step([]scheduler.Event, *scheduler.StepOutput) error {
	runtime.Goexit()
	return nil
}
func (goexitStep) Close() {}

// A step that calls runtime.Goexit ends the goroutine that drives the
// Sim, as FailNow does; the Sim is left unlocked, and usable from
// another goroutine, which finds the process not ended.
func TestGoexitInStepEndsDrivingGoroutineOnly(t *testing.T) {
	s := schedtest.New(t)
	pid := s.Start(goexitStep{}, "run", nil)
	ended := make(chan bool, 1)
	go func() {
		returned := false
		defer func() { ended <- returned }()
		s.Step(pid)
		returned = true
	}()
	select {
	case returned := <-ended:
		if returned {
			t.Fatal("Step returned; the Goexit should have ended its goroutine")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the goroutine that stepped did not end within 5s")
	}
	done := make(chan bool, 1)
	go func() {
		s.RunUntilIdle()
		done <- s.Ended(pid)
	}()
	select {
	case e := <-done:
		if e {
			t.Error("the process ended; its step never returned")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the Sim deadlocked after the Goexit")
	}
}
