package scheduler_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
)

func TestGoexitInSlowStepHookKeepsTheWatchdog(t *testing.T) {
	reports := make(chan sched.SlowStepInfo, 8)
	s, err := sched.New(sched.WithWorkers(2), sched.WithWatchdog(20*time.Millisecond), sched.WithHooks(sched.Hooks{
		SlowStep: func(i sched.SlowStepInfo) {
			reports <- i
			runtime.Goexit()
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
	// Each slow step lasts until the watchdog reports it.
	for i := range 3 {
		release := make(chan struct{})
		h := submit(t, s, stepFunc(func(_ []sched.Event, out *sched.StepOutput) error {
			<-release
			out.Done(payload.Payload{})
			return nil
		}))
		select {
		case r := <-reports:
			if r.PID != h.PID() {
				t.Errorf("slow step %d: reported %v, want %v", i, r.PID, h.PID())
			}
		case <-time.After(goexitWait):
			close(release)
			t.Fatalf("slow step %d: not reported within %v", i, goexitWait)
		}
		close(release)
		if err := waitBounded(t, h, "slow step"); err != nil {
			t.Fatalf("slow step %d: %v", i, err)
		}
	}
	if err := shutdownBounded(t, s, context.Background(), "SlowStep"); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}
