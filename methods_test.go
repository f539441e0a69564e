package scheduler_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// Tests of the method names (methods.go).

// TestManyMethodNames: processes with more distinct entry points than
// are interned still report their own.
func TestManyMethodNames(t *testing.T) {
	s := newScheduler(t)
	for i := range 5000 {
		method := fmt.Sprintf("m%d", i)
		h, err := s.Submit(context.Background(), &probe{step: untilCancel, init: func(_ context.Context, got string, _ payload.Payloads) error {
			if got != method {
				return fmt.Errorf("Init got %q, want %q", got, method)
			}
			return nil
		}}, method, nil)
		require.NoError(t, err)
		if i%1000 == 999 {
			info, ok := findProcess(s, h.PID())
			require.True(t, ok)
			require.Equal(t, method, info.Method)
		}
		require.NoError(t, s.Terminate(h.PID()))
	}
}

// TestSpawnedMethodNames: children a step spawns report the entry point
// each was started at, when one step names several of the same length
// one after another, and when an equal name comes from another string
// in memory (a worker remembers the last name it looked up).
func TestSpawnedMethodNames(t *testing.T) {
	var mu sync.Mutex
	ended := map[relay.PID]string{}
	s := newScheduler(t, sched.WithWorkers(1), sched.WithHooks(sched.Hooks{End: func(e sched.EndInfo) {
		mu.Lock()
		ended[e.PID] = e.Method
		mu.Unlock()
	}}))
	methods := []string{"aa", "bb", "aa", strings.Clone("aa"), "bb", strings.Clone("bb"), "cc", "aa", "abc", "aa"}
	spawned := map[relay.PID]string{}
	parent := &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
		if n == 0 {
			for i, m := range methods {
				out.SpawnAwait(uint64(i+1), &probe{step: doneWith(nil)}, m, nil)
			}
			return nil
		}
		for _, ev := range evs {
			if ev.Error != nil {
				return ev.Error
			}
			spawned[ev.From] = methods[ev.Tag-1]
		}
		if len(spawned) == len(methods) {
			out.Done(payload.Payload{})
		}
		return nil
	}}
	_, err := waitEnd(t, s, submit(t, s, parent))
	require.NoError(t, err)
	mu.Lock()
	defer mu.Unlock()
	for pid, m := range spawned {
		require.Equal(t, m, ended[pid], "the method the End hook reports for the child %v", pid)
	}
}

// TestOutsideMethodNames: processes started from outside the workers
// report the entry point each was started at, when names of the same
// length follow one another, when an equal name comes from another
// string in memory, and when a name is the start of the one before (the
// same bytes, shorter): the table remembers the last name looked up from
// outside, and compares a name with it by its length and where its bytes
// are.
func TestOutsideMethodNames(t *testing.T) {
	var mu sync.Mutex
	ended := map[relay.PID]string{}
	done := make(chan struct{}, 64)
	s := newScheduler(t, sched.WithHooks(sched.Hooks{End: func(e sched.EndInfo) {
		mu.Lock()
		ended[e.PID] = e.Method
		mu.Unlock()
		done <- struct{}{}
	}}))
	abc := strings.Clone("abc")
	methods := []string{"aa", "bb", "aa", strings.Clone("aa"), "bb", strings.Clone("bb"), "cc", "aa",
		abc, abc[:2], abc, abc[:2], abc, abc[:1], "aa", abc[:2]}
	started := map[relay.PID]string{}
	for _, m := range methods {
		pid, err := s.Spawn(context.Background(), &probe{step: doneWith(nil)}, m, nil)
		require.NoError(t, err)
		started[pid] = m
	}
	for range methods {
		receive(t, done, "a process's end")
	}
	mu.Lock()
	defer mu.Unlock()
	for pid, m := range started {
		require.Equal(t, m, ended[pid], "the method the End hook reports for %v", pid)
	}
}
