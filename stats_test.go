package scheduler_test

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// Tests of the statistics (stats.go).

// TestStats runs a known workload and checks the counters.
func TestStats(t *testing.T) {
	s := newScheduler(t, sched.WithWorkers(2))
	var hs []sched.Handle
	const ok, failing, panicking, initFailing = 5, 2, 1, 2
	for range ok {
		hs = append(hs, submit(t, s, &probe{step: doneWith(nil)}))
	}
	for range failing {
		hs = append(hs, submit(t, s, &probe{step: func(*probe, int, []sched.Event, *sched.StepOutput) error { return testError("x") }}))
	}
	for range panicking {
		hs = append(hs, submit(t, s, &probe{step: func(*probe, int, []sched.Event, *sched.StepOutput) error { panic("x") }}))
	}
	for range initFailing {
		_, err := s.Submit(context.Background(), &probe{init: func(context.Context, string, payload.Payloads) error { return testError("x") }}, "run", nil)
		require.ErrorIs(t, err, sched.ErrInit)
	}
	// One process tells a PID that does not exist, then finishes on the
	// bounce: two steps, one yield, one message sent and bounced.
	hs = append(hs, submit(t, s, &probe{step: func(_ *probe, n int, _ []sched.Event, out *sched.StepOutput) error {
		if n == 0 {
			out.Tell(relay.PID{ID: 1 << 50}, "x")
		} else {
			out.Done(payload.Payload{})
		}
		return nil
	}}))
	for _, h := range hs {
		_, _ = waitEnd(t, s, h)
	}
	// Process counts are exact at once; the per-step counters once the
	// workers have run out of work.
	eventually(t, "Live == 0", func() bool { return s.Stats().Processes.Live == 0 })
	eventually(t, "per-step counters", func() bool {
		st := s.Stats()
		return st.Messages.Sent == 1 && st.Steps >= ok+failing+panicking+2
	})

	check := func(t *testing.T, st sched.Stats) {
		t.Helper()
		assert.Equal(t, 2, st.Workers)
		assert.Equal(t, int64(0), st.Processes.Live)
		assert.Equal(t, uint64(ok+failing+panicking+1), st.Processes.Submitted, "Submitted")
		assert.Equal(t, uint64(initFailing), st.Processes.InitFailed, "InitFailed")
		assert.Equal(t, uint64(ok+failing+panicking+1), st.Processes.Ended, "Ended")
		assert.Equal(t, uint64(failing+panicking), st.Processes.Failed, "Failed")
		assert.Zero(t, st.Processes.Forced, "Forced")
		assert.GreaterOrEqual(t, st.Steps, uint64(ok+failing+panicking+2), "Steps")
		assert.GreaterOrEqual(t, st.Yields, uint64(1), "Yields")
		assert.Equal(t, uint64(1), st.Messages.Sent, "Sent")
		assert.Equal(t, uint64(1), st.Messages.Bounced, "Bounced")
		assert.Zero(t, st.Timers, "Timers")
		assert.Len(t, st.WorkerQueues, 2)
	}
	check(t, s.Stats())
	require.NoError(t, s.Shutdown(context.Background()))
	check(t, s.Stats())
}

// TestUnreadEventsAreCounted: events a process did not read because it
// ended are counted in Stats.Messages.Unread: the rest of its batch after
// DoneAfter, and events that arrived during or after its final step.
func TestUnreadEventsAreCounted(t *testing.T) {
	s := newScheduler(t, sched.WithWorkers(1))
	gate := make(chan struct{})
	final := make(chan struct{})
	p := &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
		switch n {
		case 0:
			<-gate // hold the first step while five messages queue
		default:
			close(final)
			<-gate // hold the final step while two more arrive
			out.DoneAfter(2, payload.Of(len(evs)))
		}
		return nil
	}}
	h := submit(t, s, p)
	waitState(t, s, h.PID(), sched.StateRunning)
	for i := range 5 {
		require.NoError(t, s.Tell(h.PID(), i))
	}
	gate <- struct{}{}
	receive(t, final, "the final step")
	for i := range 2 {
		require.NoError(t, s.Tell(h.PID(), 10+i))
	}
	gate <- struct{}{}
	res, err := waitEnd(t, s, h)
	require.NoError(t, err)
	require.Equal(t, 5, res.Value(), "the final batch")
	eventually(t, "the unread count", func() bool { return s.Stats().Messages.Unread == 5 })
	assert.Equal(t, uint64(5), s.Stats().Messages.Unread, "3 left in the batch after DoneAfter(2), 2 that came later")
}

// forkJoin spawns two awaited children down to depth 0 and ends once
// both have reported: a parent woken by each child's end in turn.
type forkJoin struct{ depth, waiting int }

func (*forkJoin) Init(context.Context, string, payload.Payloads) error { return nil }
func (*forkJoin) Close()                                               {}
func (f *forkJoin) Step(evs []sched.Event, out *sched.StepOutput) error {
	if f.depth == 0 {
		out.Done(payload.Payload{})
		return nil
	}
	if f.waiting == 0 {
		out.SpawnAwait(1, &forkJoin{depth: f.depth - 1}, "run", nil)
		out.SpawnAwait(2, &forkJoin{depth: f.depth - 1}, "run", nil)
		f.waiting = 2
		return nil
	}
	for _, ev := range evs {
		if ev.Type == sched.EventYieldComplete {
			f.waiting--
		}
	}
	if f.waiting == 0 {
		out.Done(payload.Payload{})
	}
	return nil
}

// TestStatsWaitingStates: Blocked and Idle count the processes waiting
// in each state, so they go up while processes wait and back to zero
// once everything has ended, however the waiting processes were woken:
// by a message, or by the end of a child they awaited, on the worker
// that ran the child or on another.
func TestStatsWaitingStates(t *testing.T) {
	for _, workers := range []int{1, 2} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			s := newScheduler(t, sched.WithWorkers(workers))
			settled := func(blocked, idle int64) func() bool {
				return func() bool {
					st := s.Stats()
					return st.Processes.Blocked == blocked && st.Processes.Idle == idle
				}
			}
			// A parent awaits a child that waits for a message.
			children := make(chan relay.PID, 1)
			parent := submit(t, s, &probe{step: func(p *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
				switch {
				case n == 0:
					out.Spawn(1, &probe{step: untilMessage}, "run", nil)
				case len(evs) > 0 && evs[0].Tag == 1:
					children <- evs[0].From
					out.SpawnAwait(2, &forkJoin{depth: 6}, "run", nil)
					out.SpawnAwait(3, &probe{step: untilMessage}, "run", nil)
				case len(p.EventsOf(sched.EventYieldComplete)) == 3: // the tree's end and the last child's
					out.Done(payload.Payload{})
				}
				return nil
			}})
			child := receive(t, children, "the child's PID")
			eventually(t, "the parent Blocked, two children Idle", settled(1, 2))
			require.NoError(t, s.Tell(child, "go"))
			eventually(t, "the parent Blocked, its awaited child Idle", settled(1, 1))
			for _, info := range s.Processes() {
				if info.State == sched.StateIdle {
					require.NoError(t, s.Tell(info.PID, "go"))
				}
			}
			_, err := waitEnd(t, s, parent)
			require.NoError(t, err)
			// The first child, which the parent does not await, may still
			// be queued with its message when the parent ends.
			eventually(t, "every process to end", func() bool { return s.Stats().Processes.Live == 0 })
			eventually(t, "nothing waiting", settled(0, 0))
		})
	}
}

// TestStatsTrailABusyWorkerByFewSteps: the per-step counters a busy
// worker keeps in plain memory are published every 64 scheduling ticks,
// also while the worker runs a process that continues step after step
// and never goes idle. The process reads the published step count in
// each of its steps and records how far it trails its own count.
func TestStatsTrailABusyWorkerByFewSteps(t *testing.T) {
	s := newScheduler(t, sched.WithWorkers(1))
	const (
		steps = 20_000
		bound = 256 // 64 ticks, one run of the process and some slack
	)
	var own, worst uint64
	h := submit(t, s, stepFunc(func(_ []sched.Event, out *sched.StepOutput) error {
		if own > 0 { // the step now running is not counted yet
			worst = max(worst, own-s.Stats().Steps)
		}
		if own++; own == steps {
			out.Done(payload.Payload{})
			return nil
		}
		out.Continue()
		return nil
	}))
	_, err := waitEnd(t, s, h)
	require.NoError(t, err)
	t.Logf("the published step count trailed the process's own by %d steps at most", worst)
	require.Less(t, worst, uint64(bound), "the published step count trailed a busy worker by %d steps", worst)
}

// TestStatsWhileTheOnlyWorkerIsHeld: with the one worker held in a step,
// the processes submitted meanwhile wait on the queues, and the state
// counts say so: Ready is what the queues hold, Running the rest of
// Live, the four adding up to Live. Processes agrees, and shows the
// held process Woken, with the messages that arrived during its step
// Queued. Once everything has ended and the worker has parked,
// IdleWorkers counts it.
func TestStatsWhileTheOnlyWorkerIsHeld(t *testing.T) {
	s := newScheduler(t, sched.WithWorkers(1))
	eventually(t, "the worker to park", func() bool { return s.Stats().IdleWorkers == 1 })
	inStep, gate := make(chan struct{}), make(chan struct{})
	var opened sync.Once
	open := func() { opened.Do(func() { close(gate) }) }
	defer open() // a failure below must not leave the worker held: Shutdown would wait for it
	held := submit(t, s, &probe{step: func(p *probe, n int, _ []sched.Event, out *sched.StepOutput) error {
		if n == 0 {
			close(inStep)
			<-gate
		}
		if len(p.EventsOf(sched.EventMessage)) == 2 {
			out.Done(payload.Payload{})
		}
		return nil
	}})
	receive(t, inStep, "the held step")
	require.NoError(t, s.Tell(held.PID(), 1))
	require.NoError(t, s.Tell(held.PID(), 2))
	const queued = 3
	hs := []sched.Handle{held}
	for range queued {
		hs = append(hs, submit(t, s, &probe{step: doneWith(nil)}))
	}

	st := s.Stats()
	assert.Equal(t, queued, st.GlobalQueue+st.WorkerQueues[0], "processes on the queues")
	assert.Zero(t, st.IdleWorkers, "parked workers, the only one running a step")
	assert.Equal(t, sched.ProcessStats{Live: queued + 1, Ready: queued, Running: 1, Submitted: queued + 1},
		st.Processes, "process counts")
	infos := s.Processes()
	require.Len(t, infos, queued+1)
	assert.Equal(t, sched.ProcessInfo{PID: held.PID(), Method: "run", State: sched.StateRunning, Woken: true, Queued: 2}, infos[0])
	for i, info := range infos[1:] {
		assert.Equal(t, sched.ProcessInfo{PID: hs[i+1].PID(), Method: "run", State: sched.StateReady}, info)
	}

	open()
	for _, h := range hs {
		_, err := waitEnd(t, s, h)
		require.NoError(t, err)
	}
	eventually(t, "every count back to zero and the worker parked", func() bool {
		st := s.Stats()
		return st.Processes.Live == 0 && st.Processes.Ready == 0 && st.Processes.Running == 0 && st.IdleWorkers == 1
	})
	assert.Equal(t, uint64(queued+1), s.Stats().Processes.Ended)
}

// TestSentCountsEachKindOfSend: Messages.Sent counts what its doc says, for
// each kind of send a step can write: every Tell and TellName, delivered
// or not (one that comes back counts in Bounced too), and every Request
// and RequestName whose receiver was found; not a Request whose receiver
// is not found (its yield completes at once with the error), nor a Reply,
// even one the transport carries to another node (Forwarded counts it).
// Each case runs one sender on a scheduler of its own, with one worker,
// and reads the counts once that worker is idle, when they are exact.
func TestSentCountsEachKindOfSend(t *testing.T) {
	remote := relay.PID{Node: 2, ID: 5}
	gone := relay.PID{Node: 1, ID: 1 << 50}
	type counts struct{ Sent, Bounced, Forwarded uint64 }
	for _, c := range []struct {
		name  string
		send  func(out *sched.StepOutput, server relay.PID)
		await bool  // the sender waits for its Request's completion
		fails error // what that completion's error wraps (nil: the answer)
		want  counts
	}{
		{"Tell", func(out *sched.StepOutput, server relay.PID) { out.Tell(server, 2) }, false, nil, counts{1, 0, 0}},
		{"Tell to a PID not alive", func(out *sched.StepOutput, _ relay.PID) { out.Tell(gone, 2) }, false, nil, counts{1, 1, 0}},
		{"Tell to another node", func(out *sched.StepOutput, _ relay.PID) { out.Tell(remote, 2) }, false, nil, counts{1, 0, 1}},
		{"TellName", func(out *sched.StepOutput, _ relay.PID) { out.TellName("server", 2) }, false, nil, counts{1, 0, 0}},
		{"TellName of a name nobody has", func(out *sched.StepOutput, _ relay.PID) { out.TellName("nobody", 2) }, false, nil, counts{1, 1, 0}},
		{"Request, answered by a Reply", func(out *sched.StepOutput, server relay.PID) { out.Request(1, server, 2) }, true, nil, counts{1, 0, 0}},
		{"RequestName, answered by a Reply", func(out *sched.StepOutput, _ relay.PID) { out.RequestName(1, "server", 2) }, true, nil, counts{1, 0, 0}},
		{"Request to another node", func(out *sched.StepOutput, _ relay.PID) { out.Request(1, remote, 2) }, false, nil, counts{1, 0, 1}},
		{"Request to a PID not alive", func(out *sched.StepOutput, _ relay.PID) { out.Request(1, gone, 2) }, true, sched.ErrProcessNotFound, counts{0, 0, 0}},
		{"RequestName of a name nobody has", func(out *sched.StepOutput, _ relay.PID) { out.RequestName(1, "nobody", 2) }, true, sched.ErrNameNotFound, counts{0, 0, 0}},
		{"Reply to an asker on another node", func(out *sched.StepOutput, _ relay.PID) {
			out.Reply(sched.ReplyTo{PID: remote, Seq: 1}, "answer", nil)
		}, false, nil, counts{0, 0, 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newScheduler(t, sched.WithWorkers(1), sched.WithNode(1), sched.WithTransport(newFakeTransport()))
			server := submit(t, s, &probe{step: serverStep}).PID()
			require.NoError(t, s.Register("server", server))
			h := submit(t, s, &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
				if n == 0 {
					c.send(out, server)
					if !c.await {
						out.Done(payload.Payload{})
					}
					return nil
				}
				if ev, ok := completionOf(evs, 1); ok {
					out.Done(payload.Of(ev))
				}
				return nil
			}})
			res, err := waitEnd(t, s, h)
			require.NoError(t, err)
			if c.await {
				ev := res.Value().(sched.Event)
				if c.fails == nil {
					assert.NoError(t, ev.Error, "the answer")
					assert.Equal(t, 4, ev.Data, "the answer")
				} else {
					assert.ErrorIs(t, ev.Error, c.fails, "the completion")
				}
			}
			eventually(t, "the worker to park", func() bool { return s.Stats().IdleWorkers == 1 })
			ms := s.Stats().Messages
			assert.Equal(t, c.want, counts{ms.Sent, ms.Bounced, ms.Forwarded})
		})
	}
}

// TestStatsCountInitAndClose: Submitted counts a process from its
// admission, while its Init runs, and gives it up to InitFailed if Init
// fails; Live counts a process whose Init or Close is running; Ended
// counts it once its Close has returned; a panic in Close counts in
// Panics and makes the end a failure; Forced is part of Failed; Yields
// counts Tells; Helps and Helped stay 0 without WithCallerHelp.
func TestStatsCountInitAndClose(t *testing.T) {
	s := newScheduler(t, sched.WithWorkers(1))
	ctx := context.Background()
	processes := func() sched.ProcessStats { return s.Stats().Processes }

	// An Init held, then failing.
	inInit, release := make(chan struct{}), make(chan error)
	submitted := make(chan error, 1)
	go func() {
		_, err := s.Submit(ctx, &probe{init: func(context.Context, string, payload.Payloads) error {
			close(inInit)
			return <-release
		}}, "run", nil)
		submitted <- err
	}()
	receive(t, inInit, "Init")
	ps := processes()
	assert.Equal(t, int64(1), ps.Live, "Live while Init runs")
	assert.Equal(t, uint64(1), ps.Submitted, "Submitted while Init runs")
	assert.Zero(t, ps.InitFailed)
	release <- testError("no")
	require.ErrorIs(t, receive(t, submitted, "Submit"), sched.ErrInit)
	ps = processes()
	assert.Equal(t, int64(0), ps.Live, "Live after Init failed")
	assert.Zero(t, ps.Submitted, "Submitted after Init failed")
	assert.Equal(t, uint64(1), ps.InitFailed)
	assert.Zero(t, ps.Ended, "a failed Init is not an end")

	// A Close held, then panicking, after a step that told once and
	// slept once.
	inClose, letGo := make(chan struct{}), make(chan struct{})
	h := submit(t, s, &probe{
		step: func(_ *probe, n int, _ []sched.Event, out *sched.StepOutput) error {
			if n == 0 {
				out.Tell(relay.PID{ID: 1 << 50}, "nobody")
				out.Sleep(1, time.Millisecond)
				return nil
			}
			out.Done(payload.Of("done"))
			return nil
		},
		close: func() {
			close(inClose)
			<-letGo
			panic("in Close")
		},
	})
	receive(t, inClose, "Close")
	ps = processes()
	assert.Equal(t, int64(1), ps.Live, "Live while Close runs")
	assert.Zero(t, ps.Ended, "Ended while Close runs")
	close(letGo)
	_, err := waitEnd(t, s, h)
	require.ErrorIs(t, err, sched.ErrPanic)
	ps = processes()
	assert.Equal(t, int64(0), ps.Live)
	assert.Equal(t, uint64(1), ps.Ended)
	assert.Equal(t, uint64(1), ps.Failed, "a panic in Close after Done fails the end")
	assert.Equal(t, uint64(1), ps.Panics, "the panic in Close")
	eventually(t, "the per-step counters", func() bool { return s.Stats().Steps == 2 })
	st := s.Stats()
	assert.Equal(t, uint64(2), st.Yields, "a Tell and a Sleep")
	assert.Zero(t, st.Helps)
	assert.Zero(t, st.Helped)

	// A process forced at a shutdown deadline: Forced, and Failed too.
	forced := submit(t, s, &probe{step: ignoreAll})
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, s.Shutdown(cancelled), sched.ErrForced)
	_, err = forced.Result()
	require.ErrorIs(t, err, sched.ErrForced)
	ps = processes()
	assert.Equal(t, uint64(2), ps.Ended)
	assert.Equal(t, uint64(2), ps.Failed, "the forced end is a failure")
	assert.Equal(t, uint64(1), ps.Forced)
}

// TestStatsTimersCountSleepsAndDeadlines: Timers counts every timer the
// scheduler holds for a live process: a Sleep's end, and a deadline given
// by Timeout to a yield of any kind; a Sleep with a deadline has one
// timer, for whichever comes first. A cancelled yield's timer goes at
// once, and an ended process's with it.
func TestStatsTimersCountSleepsAndDeadlines(t *testing.T) {
	never := func(sched.Call) error { return nil } // the yield stays pending
	s := newScheduler(t, sched.WithWorkers(1), sched.WithHandler(cmdTest, never))
	h := submit(t, s, &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
		switch {
		case n == 0:
			out.Sleep(1, time.Hour)
			out.Sleep(2, time.Hour)
			out.Timeout(2, 2*time.Hour) // later than the Sleep's own end: still one timer
			out.Yield(3, cmdTest, nil)
			out.Timeout(3, time.Hour)
		case hasCancel(evs):
			out.Done(payload.Payload{})
		default:
			out.Cancel(3)
		}
		return nil
	}})
	waitState(t, s, h.PID(), sched.StateBlocked)
	assert.Equal(t, 3, s.Stats().Timers, "two Sleeps, one of them with a deadline, and a handler's yield with a deadline")
	require.NoError(t, s.Tell(h.PID(), "cancel the handler's yield"))
	eventually(t, "the second step", func() bool { return s.Stats().Cancelled == 1 })
	assert.Equal(t, 2, s.Stats().Timers, "the cancelled yield's deadline is gone")
	require.NoError(t, s.Terminate(h.PID()))
	_, err := waitEnd(t, s, h)
	require.NoError(t, err)
	assert.Zero(t, s.Stats().Timers, "the ended process's timers are gone")
}

// TestStatsYieldsCountEveryCommandWritten: Yields counts the commands
// steps wrote to their StepOutput, each carried out once Step returned,
// those that complete no yield of their own included (Tell, Cancel,
// Reply, a Timeout for a yield of an earlier step), but not a Timeout
// that gives its deadline to a yield written before it in the same
// step: that is part of the yield.
func TestStatsYieldsCountEveryCommandWritten(t *testing.T) {
	s := newScheduler(t, sched.WithWorkers(1))
	h := submit(t, s, &probe{step: func(_ *probe, n int, _ []sched.Event, out *sched.StepOutput) error {
		switch n {
		case 0:
			out.Sleep(1, time.Hour)
			out.Timeout(1, 2*time.Hour)         // part of the Sleep
			out.Tell(relay.PID{ID: 1 << 50}, 1) // bounces: wakes the process for a second step
			out.Cancel(99)                      // no such yield: nothing to cancel
			out.Reply(sched.ReplyTo{}, "nobody asked", nil)
		case 1:
			out.Timeout(1, time.Hour) // for the Sleep of the first step
		default:
			out.Done(payload.Payload{})
		}
		return nil
	}})
	// The worker publishes its counts before it parks: once a Stats shows
	// the step counted and a later one the worker parked, all are exact.
	settled := func(steps uint64) uint64 {
		eventually(t, fmt.Sprintf("step %d counted", steps), func() bool { return s.Stats().Steps == steps })
		eventually(t, "the worker to park", func() bool { return s.Stats().IdleWorkers == 1 })
		return s.Stats().Yields
	}
	assert.Equal(t, uint64(5), settled(2), "Sleep, Tell, Cancel and Reply, then a Timeout")
	assert.Zero(t, s.Stats().Cancelled, "a Cancel of a tag not pending cancels nothing")
	require.NoError(t, s.Tell(h.PID(), "end"))
	_, err := waitEnd(t, s, h)
	require.NoError(t, err)
	assert.Equal(t, uint64(5), settled(3), "the last step wrote none")
}

// TestStatsSendContextGivingUpCountsNothing: SendContext and TellContext
// wait for room in a full mailbox instead of meeting its policy; one
// that gives up, its context done, delivered nothing and counts as none
// of accepted, dropped or rejected, whatever the policy: its caller has
// the context's error.
func TestStatsSendContextGivingUpCountsNothing(t *testing.T) {
	for _, policy := range []sched.MailboxPolicy{sched.MailboxReject, sched.MailboxDropNewest, sched.MailboxDropOldest} {
		t.Run(policy.String(), func(t *testing.T) {
			s := newScheduler(t, sched.WithWorkers(1))
			g, h := submitGated(t, s, sched.Mailbox(1, policy))
			require.NoError(t, s.Tell(h.PID(), note{1, 1}))
			done, cancel := context.WithCancel(context.Background())
			cancel()
			require.ErrorIs(t, s.TellContext(done, h.PID(), note{1, 2}), context.Canceled)
			require.ErrorIs(t, s.SendContext(done, relay.Message{To: h.PID(), Data: note{1, 3}}), context.Canceled)
			short, stop := context.WithTimeout(context.Background(), time.Millisecond)
			defer stop()
			require.ErrorIs(t, s.TellContext(short, h.PID(), note{1, 4}), context.DeadlineExceeded)
			ms := s.Stats().Messages
			assert.Equal(t, sched.MessageStats{Accepted: 1}, ms, "only the first was delivered")
			g.open()
			require.NoError(t, s.Terminate(h.PID()))
			_, err := waitEnd(t, s, h)
			require.NoError(t, err)
			assert.Equal(t, []note{{1, 1}}, g.received())
			assert.Zero(t, s.Stats().DeadLetters, "nothing was lost: the callers were told")
		})
	}
}

// TestObservabilityDocDescribesEveryFigure: docs/observability.md
// describes every figure of Stats in its tables, by field name and JSON
// name: the top-level ones anywhere under its "Stats" heading, those of
// a nested struct in the section headed with that struct's JSON name.
func TestObservabilityDocDescribesEveryFigure(t *testing.T) {
	raw, err := os.ReadFile("docs/observability.md")
	require.NoError(t, err)
	doc := string(raw)
	start, end := strings.Index(doc, "\n## Stats\n"), strings.Index(doc, "\n## Publishing with expvar\n")
	require.True(t, start >= 0 && end > start, "the Stats part of the doc")
	stats := doc[start:end]
	sections := strings.Split(stats, "\n### ")
	row := func(f reflect.StructField) string {
		return fmt.Sprintf("| `%s` (`%s`) |", f.Name, strings.Split(f.Tag.Get("json"), ",")[0])
	}
	var missing []string
	top := reflect.TypeFor[sched.Stats]()
	for i := range top.NumField() {
		f := top.Field(i)
		if f.Type.Kind() != reflect.Struct {
			if !strings.Contains(stats, row(f)) {
				missing = append(missing, f.Name)
			}
			continue
		}
		heading := fmt.Sprintf("(`%s`)", f.Tag.Get("json"))
		var section string
		for _, sec := range sections {
			if first, _, _ := strings.Cut(sec, "\n"); strings.Contains(first, heading) {
				section = sec
			}
		}
		if section == "" {
			missing = append(missing, f.Name+" (no section)")
			continue
		}
		for j := range f.Type.NumField() {
			if g := f.Type.Field(j); !strings.Contains(section, row(g)) {
				missing = append(missing, f.Name+"."+g.Name)
			}
		}
	}
	assert.Empty(t, missing, "figures of Stats that docs/observability.md does not describe")
}

// TestStatsUnreadAtAForcedEnd: a process forced at a shutdown deadline
// while it waits in a queue leaves its mailbox unread: Messages.Unread
// counts every event in it, the shutdown's cancel included, and
// DeadLetters.Unread the messages among them.
func TestStatsUnreadAtAForcedEnd(t *testing.T) {
	s := newScheduler(t, sched.WithWorkers(1))
	h := submit(t, s, &probe{step: ignoreAll})
	waitState(t, s, h.PID(), sched.StateIdle)
	g, _ := submitGated(t, s) // holds the only worker: h waits in a queue
	require.NoError(t, s.Tell(h.PID(), 1))
	require.NoError(t, s.Tell(h.PID(), 2))
	forcing, cancel := context.WithCancel(context.Background())
	cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- s.Shutdown(forcing) }()
	_, err := waitEnd(t, s, h)
	require.ErrorIs(t, err, sched.ErrForced)
	st := s.Stats()
	assert.Equal(t, uint64(3), st.Messages.Unread, "two messages and the cancel")
	assert.Equal(t, sched.DeadLetterStats{Unread: 2}, st.DeadLetters, "the two messages")
	g.open()
	require.ErrorIs(t, receive(t, stopped, "Shutdown"), sched.ErrForced)
}

// TestStatsExactOnceEveryWorkerParks: once every worker is parked
// (IdleWorkers == Workers) the figures a worker publishes in batches are
// exact, its search for work before it parked included: a Shutdown, which
// runs nothing more, leaves every one of them as it was.
func TestStatsExactOnceEveryWorkerParks(t *testing.T) {
	s, err := sched.New(sched.WithWorkers(2))
	require.NoError(t, err)
	h := submit(t, s, &probe{step: doneWith(nil)})
	_, err = waitEnd(t, s, h)
	require.NoError(t, err)
	eventually(t, "both workers to park", func() bool { return s.Stats().IdleWorkers == 2 })
	parked := s.Stats()
	require.NoError(t, s.Shutdown(context.Background()))
	stopped := s.Stats()
	parked.IdleWorkers, stopped.IdleWorkers = 0, 0 // the stop unparks them
	assert.Equal(t, parked, stopped, "figures published by the parked workers, and after the stop")
	assert.NotZero(t, parked.Spins, "the workers searched before they parked")
}

// figures is the part of Stats that a crafted run fixes exactly once its
// processes have ended and the workers have parked.
type figures struct {
	Submitted, InitFailed, Rejected, Ended, Failed, Forced, Panics   uint64
	Accepted, Dropped, MsgRejected, Sent, Bounced, Forwarded, Unread uint64
	DeadUnread, DeadBounces, DeadDropped, DeadLate                   uint64
	Steps, Yields, Cancelled                                         uint64
}

func figuresOf(st sched.Stats) figures {
	ps, ms, dl := st.Processes, st.Messages, st.DeadLetters
	return figures{
		ps.Submitted, ps.InitFailed, ps.Rejected, ps.Ended, ps.Failed, ps.Forced, ps.Panics,
		ms.Accepted, ms.Dropped, ms.Rejected, ms.Sent, ms.Bounced, ms.Forwarded, ms.Unread,
		dl.Unread, dl.Bounces, dl.Dropped, dl.LateReplies,
		st.Steps, st.Yields, st.Cancelled,
	}
}

// settledFigures waits until no process is live and then until every
// worker has parked, having published its counts, and returns the
// figures.
func settledFigures(t *testing.T, s *sched.Scheduler) figures {
	t.Helper()
	eventually(t, "every process to end", func() bool { return s.Stats().Processes.Live == 0 })
	eventually(t, "every worker to park", func() bool { st := s.Stats(); return st.IdleWorkers == st.Workers })
	return figuresOf(s.Stats())
}

// TestStatsExactCountsOfCraftedRuns pins every count of small runs, one
// path each: a Tell from outside, Spawn, a step's SpawnAwait and Tell,
// starts refused for bad input, the process limit and the stop, and
// sends from outside to a full mailbox under each policy.
func TestStatsExactCountsOfCraftedRuns(t *testing.T) {
	t.Run("a Tell from outside", func(t *testing.T) {
		s := newScheduler(t, sched.WithWorkers(1))
		h := submit(t, s, &probe{step: untilMessage})
		waitState(t, s, h.PID(), sched.StateIdle)
		require.NoError(t, s.Tell(h.PID(), 1))
		_, err := waitEnd(t, s, h)
		require.NoError(t, err)
		assert.Equal(t, figures{Submitted: 1, Ended: 1, Accepted: 1, Steps: 2}, settledFigures(t, s))
	})
	t.Run("Spawn", func(t *testing.T) {
		s := newScheduler(t, sched.WithWorkers(1))
		_, err := s.Spawn(context.Background(), &probe{step: doneWith(nil)}, "run", nil)
		require.NoError(t, err)
		assert.Equal(t, figures{Submitted: 1, Ended: 1, Steps: 1}, settledFigures(t, s))
	})
	t.Run("a step's SpawnAwait and Tell", func(t *testing.T) {
		s := newScheduler(t, sched.WithWorkers(1))
		told := submit(t, s, &probe{step: untilMessage})
		h := submit(t, s, &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
			if n == 0 {
				out.SpawnAwait(1, &probe{step: doneWith(nil)}, "run", nil)
				out.Tell(told.PID(), "x")
				return nil
			}
			if _, ok := completionOf(evs, 1); ok {
				out.Done(payload.Payload{})
			}
			return nil
		}})
		for _, h := range []sched.Handle{h, told} {
			_, err := waitEnd(t, s, h)
			require.NoError(t, err)
		}
		// Two steps each for the parent and the process told, one for the child.
		assert.Equal(t, figures{Submitted: 3, Ended: 3, Accepted: 1, Sent: 1, Yields: 2, Steps: 5}, settledFigures(t, s))
	})
	t.Run("refused starts", func(t *testing.T) {
		s := newScheduler(t, sched.WithWorkers(1), sched.WithMaxProcesses(1))
		ctx := context.Background()
		_, err := s.Submit(ctx, nil, "run", nil)
		require.ErrorIs(t, err, sched.ErrNilProcess)
		_, err = s.Submit(ctx, &probe{}, "", nil)
		require.ErrorIs(t, err, sched.ErrEmptyMethod)
		h := submit(t, s, &probe{step: untilMessage})
		_, err = s.Submit(ctx, &probe{}, "run", nil)
		require.ErrorIs(t, err, sched.ErrTooManyProcesses)
		require.NoError(t, s.Tell(h.PID(), 1))
		_, err = waitEnd(t, s, h)
		require.NoError(t, err)
		want := figures{Submitted: 1, Rejected: 1, Ended: 1, Accepted: 1, Steps: 2}
		assert.Equal(t, want, settledFigures(t, s))
		require.NoError(t, s.Shutdown(ctx))
		_, err = s.Submit(ctx, &probe{}, "run", nil)
		require.ErrorIs(t, err, sched.ErrClosed)
		assert.Equal(t, want, figuresOf(s.Stats()), "after the stop, and a start it refused")
	})
	for _, c := range []struct {
		policy sched.MailboxPolicy
		want   figures // of the messages
	}{
		{sched.MailboxReject, figures{Accepted: 1, MsgRejected: 1}},
		{sched.MailboxDropNewest, figures{Accepted: 1, Dropped: 1}},
		{sched.MailboxDropOldest, figures{Accepted: 2, Dropped: 1, DeadDropped: 1}},
	} {
		t.Run("sends from outside to a full mailbox, "+c.policy.String(), func(t *testing.T) {
			s := newScheduler(t, sched.WithWorkers(1))
			g, h := submitGated(t, s, sched.Mailbox(1, c.policy))
			require.NoError(t, s.Tell(h.PID(), note{1, 1}))
			err := s.Tell(h.PID(), note{1, 2})
			if c.policy != sched.MailboxDropOldest {
				require.Error(t, err)
			}
			g.open()
			require.NoError(t, s.Terminate(h.PID()))
			_, err = waitEnd(t, s, h)
			require.NoError(t, err)
			got := settledFigures(t, s)
			assert.Equal(t, figures{Submitted: 1, Ended: 1}, figures{Submitted: got.Submitted, Ended: got.Ended})
			got.Submitted, got.Ended, got.Steps = 0, 0, 0 // the steps depend on when the cancel comes
			assert.Equal(t, c.want, got)
		})
	}
}
