package scheduler

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/procsched/scheduler/payload"
)

// TestCallerHelpStepGoexits checks that a step that calls
// runtime.Goexit on a helping caller ends its process with ErrGoexit
// and the caller's goroutine, as Goexit means, and that the help is
// wound up as after a panic: the processes it took and did not run go
// back to the global queue and all end, and Shutdown, which waits for
// any help under way, returns.
func TestCallerHelpStepGoexits(t *testing.T) {
	s, err := New(WithWorkers(1), WithWatchdog(0), WithCallerHelp())
	if err != nil {
		t.Fatal(err)
	}
	release := holdWorker(t, s)
	var (
		mu      sync.Mutex
		hs      []Handle
		exited  atomic.Bool
		callerG = make(chan uint64, 1)
	)
	ended := make(chan bool, 1)
	go func() {
		returned := false
		defer func() { ended <- returned }()
		caller := goroutineID()
		callerG <- caller
		for range manyStarts {
			h, err := s.Submit(context.Background(), stepFunc(func(_ []Event, out *StepOutput) error {
				if goroutineID() == caller && exited.CompareAndSwap(false, true) {
					runtime.Goexit()
				}
				out.Done(payload.Payload{})
				return nil
			}), "leaf", nil)
			if err != nil {
				t.Errorf("Submit: %v", err)
				break
			}
			mu.Lock()
			hs = append(hs, h)
			mu.Unlock()
		}
		returned = true
	}()
	<-callerG
	select {
	case returned := <-ended:
		if returned {
			t.Fatal("the caller never helped: no step ran on it")
		}
	case <-time.After(testTimeout):
		t.Fatalf("the submitting goroutine did not end within %v", testTimeout)
	}
	release()
	mu.Lock()
	defer mu.Unlock()
	goexits := 0
	for i, h := range hs {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		_, err := h.Wait(ctx)
		cancel()
		switch {
		case errors.Is(err, ErrGoexit):
			goexits++
		case err != nil:
			t.Fatalf("process %d: %v", i, err)
		}
	}
	if goexits != 1 {
		t.Errorf("%d processes ended with ErrGoexit, want 1", goexits)
	}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		done <- s.Shutdown(ctx)
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	case <-time.After(testTimeout):
		t.Fatalf("Shutdown did not return within %v", testTimeout)
	}
}
