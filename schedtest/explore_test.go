package schedtest_test

import (
	"context"
	"fmt"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
	"github.com/procsched/scheduler/schedtest"
)

// child finishes with its name after one step.
type child struct{ name string }

func (c *child) Init(context.Context, string, payload.Payloads) error { return nil }
func (c *child) Step(_ []scheduler.Event, out *scheduler.StepOutput) error {
	out.Done(payload.Of(c.name))
	return nil
}
func (c *child) Close() {}

// gather spawns two children and joins their results. The planted bug:
// with inOrder false it joins them in the order they finished, assuming
// the first child spawned finishes first, which the scheduler does not
// guarantee. With inOrder true it puts each result in its place by tag.
type gather struct {
	inOrder bool
	started bool
	got     []string
	byTag   [2]string
}

func (g *gather) Init(context.Context, string, payload.Payloads) error { return nil }
func (g *gather) Step(evs []scheduler.Event, out *scheduler.StepOutput) error {
	if !g.started {
		g.started = true
		out.SpawnAwait(1, &child{name: "a"}, "run", nil)
		out.SpawnAwait(2, &child{name: "b"}, "run", nil)
		return nil
	}
	for _, ev := range evs {
		name, _ := payload.As[string](ev.Result())
		g.got = append(g.got, name)
		g.byTag[ev.Tag-1] = name
	}
	if len(g.got) < 2 {
		return nil
	}
	if g.inOrder {
		out.Done(payload.Of(strings.Join(g.byTag[:], ",")))
	} else {
		out.Done(payload.Of(strings.Join(g.got, ",")))
	}
	return nil
}
func (g *gather) Close() {}

// gatherScenario checks that gather answers "a,b".
func gatherScenario(inOrder bool) func(*schedtest.Sim) {
	return func(s *schedtest.Sim) {
		pid := s.Start(&gather{inOrder: inOrder}, "run", nil)
		s.RunUntilIdle()
		res, err := s.Result(pid)
		if err != nil {
			s.T().Fatalf("gather: %v", err)
		}
		if got := res.Value(); got != "a,b" {
			s.T().Errorf("gather = %v, want a,b", got)
		}
	}
}

func TestExploreFindsThePlantedBugAndReplaysIt(t *testing.T) {
	// Without a seed the kit happens to step the children in spawn order:
	// the bug does not show.
	gatherScenario(false)(schedtest.New(t))

	f, ok := schedtest.Sweep(t, 100, gatherScenario(false))
	require.True(t, ok, "100 seeds did not find the order-dependent bug")
	require.Contains(t, f.Output, "gather = b,a, want a,b")
	t.Logf("found at seed %d", f.Seed)
	for range 5 {
		again, ok := schedtest.Check(t, f.Seed, gatherScenario(false))
		require.True(t, ok, "seed %d did not fail again", f.Seed)
		require.Equal(t, f.Output, again.Output, "the replay took another path")
	}
}

func TestExploreThePlantedBugFixed(t *testing.T) {
	seeds := 300
	if testing.Short() {
		seeds = 50
	}
	schedtest.Explore(t, seeds, gatherScenario(true))
}

// failingTB records what Explore reports instead of failing the test.
type failingTB struct {
	testing.TB
	errs []string
}

func (f *failingTB) Helper() {}
func (f *failingTB) Errorf(format string, args ...any) {
	f.errs = append(f.errs, fmt.Sprintf(format, args...))
}

func TestExploreReportsTheSeedAndHowToReplay(t *testing.T) {
	tb := &failingTB{TB: t}
	schedtest.Explore(tb, 100, gatherScenario(false))
	require.Len(t, tb.errs, 1)
	require.Regexp(t, `fails at seed \d+`, tb.errs[0])
	require.Contains(t, tb.errs[0], "SCHEDTEST_SEED=")
	require.Contains(t, tb.errs[0], "the last scheduling decisions")
}

// TestExploreReplayLineSelectsTheTest checks that the command line
// Explore's report gives to replay a seed runs the test that failed, and
// no other, whatever its name: each element of the -run pattern, read as
// the shell and go test read it, matches the element of the test's name
// and nothing longer, for a subtest whose name has regexp
// metacharacters and a quote in it.
func TestExploreReplayLineSelectsTheTest(t *testing.T) {
	for _, sub := range []string{"plain", "a (b) [c] 1+1=2 it's $5.*"} {
		t.Run(sub, func(t *testing.T) {
			tb := &failingTB{TB: t}
			schedtest.Explore(tb, 100, gatherScenario(false))
			require.Len(t, tb.errs, 1)
			m := regexp.MustCompile(`go test -run (.*), or `).FindStringSubmatch(tb.errs[0])
			require.NotNil(t, m, tb.errs[0])
			pattern := shellWord(t, m[1])
			elems := strings.Split(pattern, "/")
			names := strings.Split(t.Name(), "/")
			require.Len(t, elems, len(names), pattern)
			for i := range names {
				re := regexp.MustCompile(elems[i])
				require.True(t, re.MatchString(names[i]), "%q does not select %q", elems[i], names[i])
				require.False(t, re.MatchString(names[i]+"x"), "%q selects %q too", elems[i], names[i]+"x")
			}
		})
	}
}

// shellWord reads w as a POSIX shell reads one word made of single-quoted
// strings and backslash escapes.
func shellWord(t *testing.T, w string) string {
	var b strings.Builder
	for i := 0; i < len(w); i++ {
		switch w[i] {
		case '\'':
			j := strings.IndexByte(w[i+1:], '\'')
			require.GreaterOrEqual(t, j, 0, "unterminated quote in %s", w)
			b.WriteString(w[i+1 : i+1+j])
			i += j + 1
		case '\\':
			i++
			b.WriteByte(w[i])
		case ' ', '(', ')', '[', ']', '$', '*', '"', ';', '&', '|', '<', '>':
			t.Fatalf("unquoted %q in %s", w[i], w)
		default:
			b.WriteByte(w[i])
		}
	}
	return b.String()
}

func TestExploreSeedFromTheEnvironment(t *testing.T) {
	f, ok := schedtest.Sweep(t, 100, gatherScenario(false))
	require.True(t, ok)
	t.Setenv(schedtest.SeedEnv, fmt.Sprint(f.Seed))
	ran := 0
	_, ok = schedtest.Sweep(t, 100, func(s *schedtest.Sim) {
		ran++
		require.Equal(t, f.Seed, s.Seed())
	})
	require.False(t, ok)
	require.Equal(t, 1, ran)
}

// TestThePlantedBugOnTheScheduler runs the same process on the real
// scheduler: every answer must be one of the two orders; how often the
// bug shows is logged (it depends on the machine and is not asserted).
func TestThePlantedBugOnTheScheduler(t *testing.T) {
	runs := 1000
	if testing.Short() {
		runs = 100
	}
	s, err := scheduler.New()
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Shutdown(context.Background())) }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	wrong := 0
	for range runs {
		h, err := s.Submit(ctx, &gather{}, "run", nil)
		require.NoError(t, err)
		res, err := h.Wait(ctx)
		require.NoError(t, err)
		switch res.Value() {
		case "a,b":
		case "b,a":
			wrong++
		default:
			t.Fatalf("gather = %v", res.Value())
		}
	}
	t.Logf("the bug showed in %d of %d runs on the scheduler", wrong, runs)
}

func TestFaultsAreDrawnFromTheSeed(t *testing.T) {
	scenario := func(s *schedtest.Sim) {
		s.Fake(cmdWork, schedtest.Reply("ok"))
		var got []string
		pid := s.Start(stepper(func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
			for _, ev := range evs {
				got = append(got, fmt.Sprintf("%d:%v", ev.Tag, ev.Error != nil))
			}
			if n == 1 {
				for tag := uint64(1); tag <= 5; tag++ {
					out.Yield(tag, cmdWork, nil)
				}
			}
			if len(got) == 5 {
				out.Done(payload.Of(strings.Join(got, " ")))
			}
			return nil
		}), "run", nil)
		s.RunUntilIdleAdvancing()
		res, err := s.Result(pid)
		if err != nil || strings.Contains(res.Value().(string), "true") {
			s.T().Errorf("a command failed: %v %v", res.Value(), err)
		}
	}
	f, ok := schedtest.Sweep(t, 50, scenario, schedtest.WithFaults(schedtest.Faults{FailYield: 0.2}))
	require.True(t, ok, "no seed injected a failure")
	require.Contains(t, f.Output, "fail ")
	again, ok := schedtest.Check(t, f.Seed, scenario, schedtest.WithFaults(schedtest.Faults{FailYield: 0.2}))
	require.True(t, ok)
	require.Equal(t, f.Output, again.Output)
	_, ok = schedtest.Sweep(t, 50, scenario)
	require.False(t, ok, "without faults every seed passes")
}

// TestTheSameSeedGivesTheSameRun checks the determinism WithSeed
// promises on a scenario that uses every kind of choice the kit draws:
// several processes messaging each other, commands answered at once and
// later, sleeps and deadlines, monitors, and all three faults. Under the
// same seed, everything the processes observe (every event, at which
// virtual time), the faults and the clock are the same from run to run;
// different seeds give different runs.
func TestTheSameSeedGivesTheSameRun(t *testing.T) {
	faults := schedtest.WithFaults(schedtest.Faults{FailYield: 0.2, DelayCompletion: 0.3, Terminate: 0.05})
	run := func(seed uint64) string {
		var b strings.Builder
		s := schedtest.New(t, schedtest.WithSeed(seed), faults)
		s.Fake(cmdWork, schedtest.Reply("ok"))
		later := s.FakeLater(cmdCleanup)
		var pids []relay.PID
		for i := range 4 {
			pids = append(pids, s.Start(stepper(func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
				for _, ev := range evs {
					fmt.Fprintf(&b, "%d@%v: %v\n", i, s.Now().Sub(schedtest.Epoch), ev)
					if ev.Type == scheduler.EventCancel {
						out.Done(payload.Of(i))
					}
				}
				if n > 6 {
					out.Done(payload.Of(i))
					return nil
				}
				if n == 1 {
					out.Yield(uint64(10*n+1), cmdWork, n)
				}
				out.Yield(uint64(10*n+2), cmdCleanup, n)
				out.Timeout(uint64(10*n+2), time.Duration(n)*time.Millisecond)
				out.Sleep(uint64(10*n+3), time.Duration(i+1)*time.Millisecond)
				if n == 1 {
					for _, p := range pids {
						out.Tell(p, fmt.Sprintf("%d.%d", i, n))
					}
				}
				if n == 2 && i > 0 {
					out.Monitor(100, pids[i-1])
				}
				return nil
			}), "run", nil))
		}
		for range 3 {
			s.RunUntilIdle()
			for later.Len() > 0 {
				c := later.Next()
				fmt.Fprintf(&b, "answer %v: %v\n", c.Tag, errOrOK(c.Token().Complete("later", nil)))
			}
			s.Advance(2 * time.Millisecond)
		}
		s.RunUntilIdleAdvancing()
		for _, p := range pids {
			res, err := s.Result(p)
			fmt.Fprintf(&b, "%v: %v %v\n", p, res.Value(), err)
		}
		fmt.Fprintf(&b, "faults: %q\nclock: %v\n", s.Injected(), s.Now().Sub(schedtest.Epoch))
		return b.String()
	}
	runs := map[string]bool{}
	for seed := uint64(1); seed <= 10; seed++ {
		first := run(seed)
		require.Contains(t, first, "faults: [\"", "seed %d injected nothing", seed)
		require.Equal(t, first, run(seed), "seed %d", seed)
		runs[first] = true
	}
	require.Greater(t, len(runs), 5, "the seeds barely change the run")
}

// TestExploreStopsAtASkip checks that a scenario that skips through
// Sim.T ends the exploration at that seed and skips the test, saying at
// which seed, after how many that passed, and what the scenario logged;
// that Check skips its test likewise; and that a run that failed before
// it skipped is a failure, not a skip.
func TestExploreStopsAtASkip(t *testing.T) {
	skipAt3 := func(runs *[]uint64) func(*schedtest.Sim) {
		return func(s *schedtest.Sim) {
			*runs = append(*runs, s.Seed())
			if s.Seed() == 3 {
				s.T().Log("seed 3 cannot reach the state under test")
				s.T().Skipf("not in run %d", len(*runs))
			}
		}
	}

	// On a real test.
	var runs []uint64
	var sub *testing.T
	t.Run("explore", func(t *testing.T) {
		sub = t
		schedtest.Explore(t, 10, skipAt3(&runs))
		runs = append(runs, 0) // not reached: the skip ends the test here
	})
	require.True(t, sub.Skipped(), "the test is skipped")
	require.False(t, sub.Failed())
	require.Equal(t, []uint64{1, 2, 3}, runs, "no seed runs after the skip")

	// What it says.
	runs = nil
	r := runTB(t, func(tb *recTB) {
		schedtest.Explore(tb, 10, skipAt3(&runs))
		tb.Log("reached after the skip")
	})
	require.True(t, r.Skipped())
	require.False(t, r.Failed())
	require.Equal(t, []uint64{1, 2, 3}, runs)
	require.Equal(t, "schedtest: the scenario skips at seed 3, after 2 seeds that passed:\n"+
		"  seed 3 cannot reach the state under test\n  not in run 3", r.text())

	runs = nil
	r = runTB(t, func(tb *recTB) {
		_, failed := schedtest.Check(tb, 3, skipAt3(&runs))
		tb.Logf("reached after the skip, failed %v", failed)
	})
	require.True(t, r.Skipped())
	require.False(t, r.Failed())
	require.Equal(t, "schedtest: the scenario skips at seed 3:\n"+
		"  seed 3 cannot reach the state under test\n  not in run 1", r.text())

	var skippedBefore bool
	f, failed := schedtest.Check(t, 1, func(s *schedtest.Sim) {
		skippedBefore = s.T().Skipped()
		s.T().Error("wrong")
		s.T().Skip("and skipped")
	})
	require.True(t, failed, "a failure before the skip stands")
	require.False(t, skippedBefore)
	require.Equal(t, "  wrong\n  and skipped\n", f.Output)
}

// stepper is a process made of one function, called with the step's
// number (the first is 1).
func stepper(f func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error) scheduler.Process {
	return &stepperProc{f: f}
}

type stepperProc struct {
	f func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error
	n int
}

func (p *stepperProc) Init(context.Context, string, payload.Payloads) error { return nil }
func (p *stepperProc) Step(evs []scheduler.Event, out *scheduler.StepOutput) error {
	p.n++
	return p.f(p.n, evs, out)
}
func (p *stepperProc) Close() {}

func relayPID(id uint64) relay.PID { return relay.PID{ID: id} }

// TestExploreNeedsASeed checks that Explore and Sweep given fewer than
// one seed fail the test, saying so, instead of running nothing and
// passing: a scenario that always fails would pass unseen. With SeedEnv
// set the count is not used, and the seed named runs.
func TestExploreNeedsASeed(t *testing.T) {
	ran := 0
	failing := func(s *schedtest.Sim) { ran++; s.T().Error("always") }
	for _, seeds := range []int{0, -1} {
		r := runTB(t, func(tb *recTB) { schedtest.Explore(tb, seeds, failing) })
		require.True(t, r.Failed(), "Explore with %d seeds", seeds)
		require.Contains(t, r.text(), fmt.Sprintf("schedtest: Explore or Sweep with %d seeds: need at least 1", seeds))
		r = runTB(t, func(tb *recTB) { _, _ = schedtest.Sweep(tb, seeds, failing) })
		require.True(t, r.Failed(), "Sweep with %d seeds", seeds)
	}
	require.Zero(t, ran)
	t.Setenv(schedtest.SeedEnv, "3")
	f, ok := schedtest.Sweep(t, 0, failing)
	require.True(t, ok, "the seed from the environment runs")
	require.Equal(t, uint64(3), f.Seed)
	require.Equal(t, 1, ran)
}

// TestExploreReportsAPanicAtItsSeed checks that a scenario that panics
// (its own code, not a process's: the kit turns those into errors) fails
// at that seed with the panic's value and where it happened, instead of
// taking the test binary down without naming the seed: no later seed
// runs, the seed's cleanups run (the simulation is shut down, so its
// processes are closed), and the report is the same at every replay of
// the seed.
func TestExploreReportsAPanicAtItsSeed(t *testing.T) {
	var runs []uint64
	closed := map[uint64]bool{}
	scenario := func(s *schedtest.Sim) {
		seed := s.Seed()
		runs = append(runs, seed)
		s.Start(&closer{closed: func() { closed[seed] = true }}, "run", nil)
		s.RunUntilIdle()
		s.T().Log("before the panic")
		if seed == 2 {
			var none []int
			none[seed]++ // a runtime error
		}
	}
	f, ok := schedtest.Sweep(t, 5, scenario)
	require.True(t, ok, "the panic at seed 2 was not reported")
	require.Equal(t, uint64(2), f.Seed)
	require.Equal(t, []uint64{1, 2}, runs, "no seed runs after the one that panicked")
	require.True(t, closed[2], "the seed's simulation was not shut down after the panic")
	require.True(t, strings.HasPrefix(f.Output, "  before the panic\n  panic: runtime error: index out of range [2] with length 0\n"), f.Output)
	require.Contains(t, f.Output, "schedtest_test.TestExploreReportsAPanicAtItsSeed.func", "where it panicked")
	require.Contains(t, f.Output, "explore_test.go:", "the file and line")
	require.NotContains(t, f.Output, "runtime.gopanic", "the panic machinery is not where it happened")
	again, ok := schedtest.Check(t, 2, scenario)
	require.True(t, ok)
	require.Equal(t, f.Output, again.Output, "the replay reports something else")

	r := runTB(t, func(tb *recTB) { schedtest.Explore(tb, 5, scenario) })
	require.True(t, r.Failed())
	require.Contains(t, r.text(), "schedtest: the scenario fails at seed 2:\n  before the panic\n  panic: runtime error: index out of range [2] with length 0")
	require.Contains(t, r.text(), "SCHEDTEST_SEED=2")
}

// closer is a process that waits for ever and calls closed from Close.
type closer struct{ closed func() }

func (c *closer) Init(context.Context, string, payload.Payloads) error { return nil }
func (c *closer) Step([]scheduler.Event, *scheduler.StepOutput) error  { return nil }
func (c *closer) Close()                                               { c.closed() }

// TestSeedRunContextEndsWithTheSeed checks Sim.T's Context under Check
// and Explore: as a test's, it is not done while the seed's run goes on
// and is done before the seed's cleanups run, so a cleanup may wait for
// what stops on it, as it may in a test. Each seed gets its own.
func TestSeedRunContextEndsWithTheSeed(t *testing.T) {
	var ctxs []context.Context
	scenario := func(s *schedtest.Sim) {
		tb := s.T()
		ctx := tb.Context()
		ctxs = append(ctxs, ctx)
		if err := ctx.Err(); err != nil {
			tb.Fatalf("the seed's context is done while the seed runs: %v", err)
		}
		stopped := make(chan struct{})
		go func() {
			<-ctx.Done()
			close(stopped)
		}()
		tb.Cleanup(func() {
			select {
			case <-stopped:
			case <-time.After(10 * time.Second):
				tb.Error("the seed's context was not done when its cleanups ran")
			}
		})
	}
	f, failed := schedtest.Check(t, 1, scenario)
	require.False(t, failed, f.Output)
	r := runTB(t, func(tb *recTB) { schedtest.Explore(tb, 3, scenario) })
	require.False(t, r.Failed(), r.text())
	require.Len(t, ctxs, 4)
	for i, ctx := range ctxs {
		require.Error(t, ctx.Err(), "seed run %d", i)
	}
	require.NoError(t, t.Context().Err(), "the test's own context is not done by a seed's")
}

// TestSeedRunOutputIsPartOfItsReport checks Sim.T's Output under Check:
// what is written there is part of the seed's report, in order with its
// Log lines, as it is part of a test's log, and a line left unfinished
// ends where the next Log line or the run ends.
func TestSeedRunOutputIsPartOfItsReport(t *testing.T) {
	f, failed := schedtest.Check(t, 1, func(s *schedtest.Sim) {
		tb := s.T()
		fmt.Fprint(tb.Output(), "written ")
		fmt.Fprintln(tb.Output(), "in two")
		fmt.Fprint(tb.Output(), "two lines\nand half")
		tb.Log("logged")
		fmt.Fprint(tb.Output(), "unfinished")
		tb.Fail()
	})
	require.True(t, failed)
	require.True(t, strings.HasPrefix(f.Output, "  written in two\n  two lines\n  and half\n  logged\n  unfinished\n"), f.Output)
}

// TestTraceListsTheYieldsCarriedOut checks that Trace lists, as its doc
// says, which yield was carried out, besides the steps and the timers:
// with a seed the yields of different processes interleave, and the
// report of a failing seed must show in which order. Each yield is
// listed once, after its step, in the order written, with what it went
// to; its argument is not shown (it may print differently from run to
// run).
func TestTraceListsTheYieldsCarriedOut(t *testing.T) {
	for _, opts := range [][]schedtest.Option{nil, {schedtest.WithSeed(7)}} {
		s := schedtest.New(t, opts...)
		s.Fake(cmdWork, schedtest.Reply("ok"))
		b := s.Start(idle(), "b", nil)
		require.NoError(t, s.Register("b", b))
		a := s.Start(stepper(func(n int, _ []scheduler.Event, out *scheduler.StepOutput) error {
			if n == 1 {
				out.Tell(b, &struct{}{})
				out.TellName("b", 2)
				out.Yield(3, cmdWork, nil)
				out.Sleep(4, time.Millisecond)
				out.Timeout(4, time.Microsecond)
			}
			return nil
		}), "a", nil)
		s.RunUntilIdleAdvancing()
		var got []string
		for _, line := range s.Trace() {
			_, what, _ := strings.Cut(line, ": ")
			if strings.HasPrefix(what, "step "+a.String()) || strings.HasPrefix(what, "carry out "+a.String()) {
				got = append(got, what)
			}
		}
		require.Equal(t, []string{
			"step " + a.String() + " (0 events)",
			"carry out " + a.String() + "'s Tell to " + b.String(),
			"carry out " + a.String() + `'s TellName to "b"`,
			"carry out " + a.String() + fmt.Sprintf("'s Command %d tag 3", cmdWork),
			"carry out " + a.String() + "'s Sleep tag 4 until +1ms deadline +1µs",
			"step " + a.String() + " (1 events)", // the command's answer
			"step " + a.String() + " (1 events)", // the Sleep's timeout
		}, got, "with options %v", opts)
	}
}

// TestTheSameSeedGivesTheSameJournal checks the determinism WithSeed
// promises where a map, a goroutine or the number of CPUs could break
// it: a process watched by several monitors and requests at its end,
// names, a probe, spawns, a request answered from a step, timers set for
// one instant by several processes, Cancel, Continue, and all three
// faults. The journal is every scheduling decision (Trace, read before
// every action through RunUntil's condition) and every event each
// process got and when; under one seed it is the same on every run, run
// by Check in its own goroutine or by the test, with GOMAXPROCS 1, 2 or
// 8.
func TestTheSameSeedGivesTheSameJournal(t *testing.T) {
	faults := schedtest.WithFaults(schedtest.Faults{FailYield: 0.1, DelayCompletion: 0.3, Terminate: 0.02})
	scenario := func(journal *strings.Builder) func(*schedtest.Sim) {
		return func(s *schedtest.Sim) {
			s.Fake(cmdWork, schedtest.Reply("ok"))
			probe := s.Probe()
			logEvents := func(who string, evs []scheduler.Event) {
				for _, ev := range evs {
					fmt.Fprintf(journal, "%s@%v: %v %v %v %v\n", who, s.Now().Sub(schedtest.Epoch), ev.Type, ev.Tag, ev.From, ev.Error)
				}
			}
			// The watched process answers requests and ends on "quit".
			watched := s.Start(stepper(func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
				logEvents("watched", evs)
				for _, ev := range evs {
					if req, ok := ev.Data.(scheduler.Request); ok {
						out.Reply(req.ReplyTo, req.Body, nil)
						out.Tell(probe.PID(), req.Body)
					}
					if ev.Data == "quit" {
						out.Done(payload.Of("quit"))
					}
				}
				return nil
			}), "watched", nil)
			if err := s.Register("watched", watched); err != nil {
				s.T().Fatal(err)
			}
			var pids []relay.PID
			for i := range 5 {
				who := fmt.Sprint("w", i)
				pids = append(pids, s.Start(stepper(func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
					logEvents(who, evs)
					for _, ev := range evs {
						if ev.Type == scheduler.EventCancel {
							out.Done(payload.Of(who))
							return nil
						}
					}
					switch n {
					case 1:
						out.Monitor(1, watched)
						out.RequestName(2, "watched", who)
						out.Sleep(3, time.Millisecond) // every worker's at one instant
						out.Yield(4, cmdWork, i)
						out.Spawn(5, &child{name: who}, "run", nil)
						if i%2 == 0 {
							out.Yield(6, cmdWork, nil)
							out.Cancel(6)
						}
					case 2:
						out.Continue()
					case 3:
						out.Tell(watched, "hello from "+who)
						if i == 4 {
							out.Tell(watched, "quit")
						}
					}
					return nil
				}), who, nil))
			}
			check := func() bool {
				fmt.Fprintf(journal, "--\n%s\n", strings.Join(s.Trace(), "\n"))
				return false
			}
			s.RunUntil(check)
			s.Advance(time.Millisecond)
			s.RunUntil(check)
			s.RunUntilIdleAdvancing()
			if err := s.Shutdown(); err != nil {
				s.T().Errorf("Shutdown: %v", err)
			}
			for _, p := range append(pids, watched) {
				res, err := s.Result(p)
				fmt.Fprintf(journal, "%v: %v %v\n", p, res.Value(), err)
			}
			fmt.Fprintf(journal, "probe: %v\nfaults: %q\nclock: %v\n", len(probe.Received()), s.Injected(), s.Now().Sub(schedtest.Epoch))
		}
	}
	byCheck := func(seed uint64) string {
		var b strings.Builder
		f, failed := schedtest.Check(t, seed, scenario(&b), faults)
		require.False(t, failed, "seed %d: %s", seed, f.Output)
		return b.String()
	}
	byTest := func(seed uint64) string {
		var b strings.Builder
		scenario(&b)(schedtest.New(t, schedtest.WithSeed(seed), faults))
		return b.String()
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	runs := map[string]bool{}
	for seed := uint64(1); seed <= 8; seed++ {
		runtime.GOMAXPROCS(1)
		want := byCheck(seed)
		runs[want] = true
		for _, procs := range []int{1, 2, 8} {
			runtime.GOMAXPROCS(procs)
			for range 3 {
				sameJournal(t, want, byCheck(seed), "seed %d, GOMAXPROCS %d, under Check", seed, procs)
				sameJournal(t, want, byTest(seed), "seed %d, GOMAXPROCS %d, in the test's goroutine", seed, procs)
			}
		}
	}
	require.Greater(t, len(runs), 4, "the seeds barely change the run")
}

// sameJournal fails the test at the first line where journal got differs
// from want, showing that line and the five before it.
func sameJournal(t *testing.T, want, got string, format string, args ...any) {
	t.Helper()
	if want == got {
		return
	}
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	i := 0
	for i < len(w) && i < len(g) && w[i] == g[i] {
		i++
	}
	line := func(ls []string) string {
		if i < len(ls) {
			return ls[i]
		}
		return "(the end)"
	}
	t.Fatalf("%s: the journals differ at line %d:\n  want %s\n  got  %s\nafter:\n  %s", fmt.Sprintf(format, args...),
		i+1, line(w), line(g), strings.Join(w[max(0, i-5):i], "\n  "))
}
