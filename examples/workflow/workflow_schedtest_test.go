package main

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/schedtest"
)

// TestWorkflowAnswered: a service that answers at once gives its quote
// as the result (docs/testing.md opens with this test).
func TestWorkflowAnswered(t *testing.T) {
	s := schedtest.New(t)                 // shut down at the end of the test
	s.Fake(cmdQuote, schedtest.Reply(42)) // or Fail(err), Never(), FakeLater(cmd)
	pid := s.Start(&workflow{timeout: time.Second, maxAttempts: 3}, "quote", payload.Values("book"))
	s.RunUntilIdleAdvancing() // run; jump to each timer when idle
	res, err := s.Result(pid)
	require.NoError(t, err)
	require.Equal(t, 42, res.Value())
}

// TestWorkflowTimesOut: the pricing service never answers, so every
// attempt times out; three one-hour timeouts pass in virtual time.
func TestWorkflowTimesOut(t *testing.T) {
	s := schedtest.New(t)
	s.Fake(cmdQuote, schedtest.Never())
	pid := s.Start(&workflow{timeout: time.Hour, maxAttempts: 3}, "quote", payload.Values("book"))

	moved := s.RunUntilIdleAdvancing()

	_, err := s.Result(pid)
	require.ErrorIs(t, err, errTimeout)
	require.Equal(t, 3*time.Hour, moved)
	quotes := 0
	for _, y := range s.Yields(pid) {
		if y.Kind == schedtest.KindCommand {
			require.Equal(t, "book", y.Arg)
			quotes++
		}
	}
	require.Equal(t, 3, quotes)
}

// TestWorkflowQuotes: the first call times out, the retry is answered.
func TestWorkflowQuotes(t *testing.T) {
	s := schedtest.New(t)
	calls := s.FakeLater(cmdQuote)
	pid := s.Start(&workflow{timeout: 30 * time.Millisecond, maxAttempts: 3}, "quote", payload.Values("book"))
	s.RunUntilIdle()
	first := calls.Next()

	s.Advance(30 * time.Millisecond) // the first attempt's timeout: a retry
	// The first attempt's answer comes too late: its yield timed out.
	require.ErrorIs(t, first.Token().Complete(999, nil), scheduler.ErrYieldNotPending)
	second := calls.Next()
	require.NoError(t, second.Token().Complete(420, nil))
	s.RunUntilIdle()

	res, err := s.Result(pid)
	require.NoError(t, err)
	require.Equal(t, 420, res.Value())
}

// TestWorkflowSeeds sweeps seeds with faults: whatever the order of the
// answers and timers, and whichever calls fail or come late, a workflow
// ends with a quote, a timeout after its attempts, or the injected
// failure, and makes at most three calls.
func TestWorkflowSeeds(t *testing.T) {
	seeds := 500
	if testing.Short() {
		seeds = 50
	}
	schedtest.Explore(t, seeds, func(s *schedtest.Sim) {
		s.Fake(cmdQuote, schedtest.Reply(100))
		pid := s.Start(&workflow{timeout: time.Second, maxAttempts: 3}, "quote", payload.Values("book"))
		s.RunUntilIdleAdvancing()
		res, err := s.Result(pid)
		switch {
		case err == nil:
			if res.Value() != 100 {
				s.T().Errorf("quote = %v, want 100", res.Value())
			}
		case errors.Is(err, errTimeout), errors.Is(err, schedtest.ErrInjected):
		default:
			s.T().Errorf("workflow failed: %v", err)
		}
		calls := 0
		for _, y := range s.Yields(pid) {
			if y.Kind == schedtest.KindCommand {
				calls++
			}
		}
		if calls > 3 {
			s.T().Errorf("%d calls, want at most 3", calls)
		}
	}, schedtest.WithFaults(schedtest.Faults{FailYield: 0.1, DelayCompletion: 0.5}))
}
