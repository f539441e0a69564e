package schedtest_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
	"github.com/procsched/scheduler/schedtest"
)

// TestSynctest mixes a goroutine into a test: the fake answers from a
// goroutine of its own after an hour of the bubble's time, and the kit,
// which uses no wall clock, runs inside the bubble.
func TestSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := schedtest.New(t)
		s.Fake(cmdWork, func(c schedtest.Call) error {
			tok := c.Token()
			go func() {
				time.Sleep(time.Hour)
				_ = tok.Complete("slow answer", nil)
			}()
			return nil
		})
		pid := s.Start(stepper(func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
			if n == 1 {
				out.Yield(1, cmdWork, nil)
				return nil
			}
			out.Done(payload.Of(evs[0].Data))
			return nil
		}), "run", nil)
		s.RunUntilIdle()
		require.False(t, s.Ended(pid))
		time.Sleep(time.Hour) // the bubble's clock; the fake's goroutine answers
		synctest.Wait()
		s.RunUntilIdle()
		res, err := s.Result(pid)
		require.NoError(t, err)
		require.Equal(t, "slow answer", res.Value())
		require.Equal(t, schedtest.Epoch, s.Now(), "the kit's clock moves only when the test moves it")
	})
}

// TestSynctestExplore checks that the goroutines the kit does start stay
// within a synctest bubble and are waited for by it: Explore's, which runs
// each seed, and the one that runs a function given to
// context.AfterFunc on a call's context when the yield times out.
func TestSynctestExplore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		stopped := 0
		schedtest.Explore(t, 5, func(s *schedtest.Sim) {
			s.Fake(cmdWork, func(c schedtest.Call) error {
				context.AfterFunc(c.Context(), func() {
					mu.Lock()
					stopped++
					mu.Unlock()
				})
				return nil
			})
			pid := s.Start(stepper(func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
				if n == 1 {
					out.Yield(1, cmdWork, nil)
					out.Timeout(1, time.Minute)
					return nil
				}
				out.Done(payload.Payload{})
				return nil
			}), "run", nil)
			s.RunUntilIdleAdvancing()
			require.True(s.T(), s.Ended(pid))
		})
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, 5, stopped, "one AfterFunc per seed, run within the bubble")
	})
}

func TestAdvanceFiresTimersInOrderAtTheirTimes(t *testing.T) {
	s := schedtest.New(t)
	var at []time.Duration
	pid := s.Start(stepper(func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
		for range evs {
			at = append(at, s.Now().Sub(schedtest.Epoch))
		}
		switch n {
		case 1:
			out.Sleep(1, 30*time.Minute)
		case 2:
			out.Sleep(2, 10*time.Minute) // set on the way: fires within the advance
		}
		return nil
	}), "run", nil)
	s.Advance(time.Hour)
	require.Equal(t, []time.Duration{30 * time.Minute, 40 * time.Minute}, at)
	require.Equal(t, schedtest.Epoch.Add(time.Hour), s.Now())
	require.False(t, s.Ended(pid))
}

func TestContinueAndTheStepBudget(t *testing.T) {
	s := schedtest.New(t, schedtest.WithStepBudget(2))
	var order []string
	mk := func(name string) scheduler.Process {
		return stepper(func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
			require.Empty(t, evs)
			order = append(order, name)
			if n < 3 {
				out.Continue()
			} else {
				out.Done(payload.Payload{})
			}
			return nil
		})
	}
	a := s.Start(mk("a"), "run", nil)
	s.Start(mk("b"), "run", nil)
	s.RunUntilIdle()
	require.Equal(t, []string{"a", "a", "b", "b", "a", "b"}, order)
	require.Equal(t, 3, s.Steps(a))
}

// TestWithStepBudgetRefusesWhatTheSchedulerRefuses checks that a step
// budget below 1, which scheduler.New refuses with ErrInvalidOption, fails
// the test in New with the scheduler's error, and that 1 is accepted.
func TestWithStepBudgetRefusesWhatTheSchedulerRefuses(t *testing.T) {
	for _, n := range []int{0, -3, 1} {
		sched, want := scheduler.New(scheduler.WithStepBudget(n))
		if sched != nil {
			require.NoError(t, sched.Shutdown(context.Background()))
		}
		r := runTB(t, func(tb *recTB) {
			schedtest.New(tb, schedtest.WithStepBudget(n))
		})
		if want == nil {
			require.False(t, r.Failed(), "WithStepBudget(%d): %s", n, r.text())
			continue
		}
		require.ErrorIs(t, want, scheduler.ErrInvalidOption)
		require.True(t, r.Failed(), "WithStepBudget(%d)", n)
		require.Equal(t, "schedtest: New: "+want.Error(), r.text())
	}
}

// TestRunUntilChecksBeforeEveryStep checks RunUntil's cond is checked
// before every step, also between the steps of a process on its step
// budget: it stops with the process at the step the test asked for, and
// a run resumed after it takes the steps a run never stopped takes, in
// the same order.
func TestRunUntilChecksBeforeEveryStep(t *testing.T) {
	for _, opts := range [][]schedtest.Option{nil, {schedtest.WithStepBudget(4)}, {schedtest.WithSeed(1)}} {
		run := func(stopAt int) []string {
			s := schedtest.New(t, opts...)
			var order []string
			mk := func(name string) scheduler.Process {
				return stepper(func(n int, _ []scheduler.Event, out *scheduler.StepOutput) error {
					order = append(order, fmt.Sprintf("%s%d", name, n))
					if n < 6 {
						out.Continue()
					}
					return nil
				})
			}
			a := s.Start(mk("a"), "run", nil)
			s.Start(mk("b"), "run", nil)
			if stopAt > 0 {
				require.True(t, s.RunUntil(func() bool { return s.Steps(a) == stopAt }))
				require.Equal(t, stopAt, s.Steps(a))
				require.Equal(t, fmt.Sprintf("a%d", stopAt), order[len(order)-1], "no step after the one cond waited for")
			}
			s.RunUntilIdle()
			return order
		}
		want := run(0)
		for stopAt := 1; stopAt <= 6; stopAt++ {
			require.Equal(t, want, run(stopAt), "stopped after a%d, %d options", stopAt, len(opts))
		}
	}
}

func TestStartAndInitErrors(t *testing.T) {
	s := schedtest.New(t)
	_, err := s.Submit(nil, "run", nil)
	require.ErrorIs(t, err, scheduler.ErrNilProcess)
	_, err = s.Submit(stepper(nil), "", nil)
	require.ErrorIs(t, err, scheduler.ErrEmptyMethod)
	require.NoError(t, s.Shutdown())
	_, err = s.Submit(stepper(nil), "run", nil)
	require.ErrorIs(t, err, scheduler.ErrClosed)
	require.ErrorIs(t, s.Send(relayPID(1), 1), scheduler.ErrClosed)
}

// TestSubmitContextErrors checks SubmitContext's errors, which are the
// scheduler's Submit's: a nil context, and one that is done already (its
// error), before any other; and that StartContext fails the test with
// them.
func TestSubmitContextErrors(t *testing.T) {
	s := schedtest.New(t)
	var nilCtx context.Context // a nil context is what is tested
	_, err := s.SubmitContext(nilCtx, stepper(nil), "run", nil)
	require.ErrorIs(t, err, scheduler.ErrNilContext)
	done, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = s.SubmitContext(done, nil, "run", nil)
	require.ErrorIs(t, err, context.Canceled)
	r := runTB(t, func(tb *recTB) {
		schedtest.New(tb).StartContext(done, stepper(nil), "run", nil)
	})
	require.True(t, r.Failed())
	require.Contains(t, r.text(), "context canceled")
}

func TestProbeReportsWhatItReceived(t *testing.T) {
	tb := &failingTB{TB: t}
	s := schedtest.New(tb)
	probe := s.Probe()
	s.Start(stepper(func(n int, _ []scheduler.Event, out *scheduler.StepOutput) error {
		out.Tell(probe.PID(), "one")
		out.Tell(probe.PID(), "two")
		out.Done(payload.Payload{})
		return nil
	}), "run", nil)
	probe.Expect("one")
	probe.Expect("three")
	probe.ExpectNone()
	require.Len(t, tb.errs, 1)
	require.Contains(t, tb.errs[0], `want a message "three", got Message(from=<0.2>, data=two)`)
	require.Contains(t, tb.errs[0], "ok 1: Message(from=<0.2>, data=one)")
}

// BenchmarkHourTimeout measures the wall time of a test of a one-hour
// timeout: start a process, let its call time out, read the result.
func BenchmarkHourTimeout(b *testing.B) {
	for b.Loop() {
		s := schedtest.New(b)
		s.Fake(cmdWork, schedtest.Never())
		pid := s.Start(fetcher{}, "run", nil)
		s.RunUntilIdleAdvancing()
		if res, _ := s.Result(pid); res.Value() != "gave up" {
			b.Fatal(res)
		}
	}
}

// TestTellWhereAnEarlierStepsYieldWas: the step output is reused from
// step to step, so a Tell is written where the last step's Sleep was,
// with its tag and the deadline of its Timeout. The Tell shows none of
// them.
func TestTellWhereAnEarlierStepsYieldWas(t *testing.T) {
	s := schedtest.New(t)
	probe := s.Probe()
	pid := s.Start(stepper(func(n int, _ []scheduler.Event, out *scheduler.StepOutput) error {
		switch n {
		case 1:
			out.Sleep(7, time.Hour)
			out.Timeout(7, time.Minute)
		case 2:
			out.Tell(probe.PID(), "after")
			out.Done(payload.Payload{})
		}
		return nil
	}), "run", nil)
	s.Advance(time.Hour)
	probe.Expect("after")
	ys := s.Yields(pid)
	require.Len(t, ys, 2)
	require.Equal(t, schedtest.KindSleep, ys[0].Kind)
	require.Equal(t, uint64(7), ys[0].Tag)
	require.False(t, ys[0].Deadline.IsZero(), "the Sleep had the Timeout's deadline")
	require.Equal(t, schedtest.Yield{Step: 2, Kind: schedtest.KindTell, Arg: "after", To: probe.PID()}, ys[1])
}

// TestSeedsStepBetweenTimersOfOneInstant checks that with a seed, timers
// due at one instant fire one at a time, each a choice among the other
// things to do, as WithSeed says of a due timer, when the clock gets there
// by Advance, RunUntilIdleAdvancing or Shutdown: a process woken by the
// first may step, and send, before the second fires, as on the
// scheduler, whose workers fire the timers of different shards apart.
// Two processes sleep until the same instant, and the one woken tells
// the other it woke: some seed has the other told before its own timer
// fires.
func TestSeedsStepBetweenTimersOfOneInstant(t *testing.T) {
	ways := map[string]func(s *schedtest.Sim){
		"Advance":               func(s *schedtest.Sim) { s.Advance(time.Second) },
		"RunUntilIdleAdvancing": func(s *schedtest.Sim) { s.RunUntilIdleAdvancing() },
		"Shutdown": func(s *schedtest.Sim) {
			if err := s.Shutdown(); err != nil {
				s.T().Errorf("Shutdown: %v", err)
			}
		},
	}
	for name, move := range ways {
		t.Run(name, func(t *testing.T) {
			scenario := func(s *schedtest.Sim) {
				var got [2][]string // what each process got, in order
				var pids [2]relay.PID
				for i := range pids {
					pids[i] = s.Start(stepper(func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
						for _, ev := range evs {
							switch ev.Type {
							case scheduler.EventYieldComplete:
								got[i] = append(got[i], "woke")
								out.Tell(pids[1-i], "told")
							case scheduler.EventMessage:
								got[i] = append(got[i], "told")
							}
						}
						if n == 1 {
							out.Sleep(1, time.Millisecond)
						}
						if len(got[i]) == 2 {
							out.Done(payload.Payload{})
						}
						return nil
					}), "sleeper", nil)
				}
				s.RunUntilIdle()
				move(s)
				for i, g := range got {
					if len(g) != 2 {
						s.T().Fatalf("process %d got %q: want woken and told", i, g)
					}
					if g[0] == "told" {
						s.T().Errorf("process %d was told before its own timer fired", i)
					}
				}
			}
			f, ok := schedtest.Sweep(t, 100, scenario)
			require.True(t, ok, "no seed lets a woken process step between two timers of one instant")
			require.Contains(t, f.Output, "was told before its own timer fired")
		})
	}
}

// TestTimersOfOneInstantFireInTheOrderSet checks what Advance's doc says
// of timers due at one instant: they fire in the order they were set,
// without a seed and under every seed, as the trace shows (the Sleeps
// carried out, then the timers fired).
func TestTimersOfOneInstantFireInTheOrderSet(t *testing.T) {
	for seed := range uint64(30) {
		var opts []schedtest.Option
		if seed > 0 {
			opts = append(opts, schedtest.WithSeed(seed))
		}
		s := schedtest.New(t, opts...)
		for range 4 {
			s.Start(stepper(func(n int, _ []scheduler.Event, out *scheduler.StepOutput) error {
				if n == 1 {
					out.Sleep(1, time.Millisecond)
				}
				return nil
			}), "sleeper", nil)
		}
		s.RunUntilIdle()
		var set, fired []string
		for _, line := range s.Trace() {
			if _, rest, ok := strings.Cut(line, "carry out "); ok {
				set = append(set, strings.TrimSuffix(rest, "'s Sleep tag 1 until +1ms"))
			}
		}
		s.Advance(time.Second)
		for _, line := range s.Trace() {
			if _, rest, ok := strings.Cut(line, "timer of "); ok {
				fired = append(fired, strings.TrimSuffix(rest, " tag 1 fires"))
			}
		}
		require.Len(t, set, 4, "seed %d", seed)
		require.Equal(t, set, fired, "seed %d", seed)
	}
}
