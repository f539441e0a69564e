package scheduler_test

import (
	"bytes"
	"context"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
)

// Tests of the options (options.go), the logger included.

func TestOptions(t *testing.T) {
	h := func(sched.Call) error { return nil }
	bad := []struct {
		name string
		opt  sched.Option
		want error
	}{
		{"WithWorkers(0)", sched.WithWorkers(0), sched.ErrInvalidOption},
		{"WithWorkers(-1)", sched.WithWorkers(-1), sched.ErrInvalidOption},
		{"WithWorkers(1025)", sched.WithWorkers(1025), sched.ErrInvalidOption},
		{"WithWorkers(65536)", sched.WithWorkers(65536), sched.ErrInvalidOption},
		{"WithWorkers(MaxInt)", sched.WithWorkers(math.MaxInt), sched.ErrInvalidOption},
		{"WithGlobalBatch(-1)", sched.WithGlobalBatch(-1), sched.ErrInvalidOption},
		{"WithStepBudget(0)", sched.WithStepBudget(0), sched.ErrInvalidOption},
		{"WithStepBudget(-5)", sched.WithStepBudget(-5), sched.ErrInvalidOption},
		{"WithGlobalBatch(0)", sched.WithGlobalBatch(0), sched.ErrInvalidOption},
		{"WithGlobalBatch(65537)", sched.WithGlobalBatch(1<<16 + 1), sched.ErrInvalidOption},
		{"WithGlobalBatch(MaxInt)", sched.WithGlobalBatch(math.MaxInt), sched.ErrInvalidOption},
		{"WithHandler(a reserved ID)", sched.WithHandler(sched.CommandID(1), h), sched.ErrInvalidCommand},
		{"WithHandler(the last reserved ID)", sched.WithHandler(sched.FirstUserCommand-1, h), sched.ErrInvalidCommand},
		{"WithHandler(FirstUserCommand-1)", sched.WithHandler(sched.FirstUserCommand-1, h), sched.ErrInvalidCommand},
		{"WithHandler(nil)", sched.WithHandler(cmdTest, nil), sched.ErrInvalidCommand},
		{"WithHandler(65537)", sched.WithHandler(1<<16+1, h), sched.ErrInvalidCommand},
		{"WithWatchdog(-1)", sched.WithWatchdog(-1), sched.ErrInvalidOption},
		{"WithMaxProcesses(0)", sched.WithMaxProcesses(0), sched.ErrInvalidOption},
		{"WithMailbox(-1)", sched.WithMailbox(-1, sched.MailboxReject), sched.ErrInvalidOption},
		{"WithMailbox(an unknown policy)", sched.WithMailbox(1, sched.MailboxPolicy(3)), sched.ErrInvalidOption},
		{"WithBlockingPool(-1, 1)", sched.WithBlockingPool(-1, 1, sched.PoolWait), sched.ErrInvalidOption},
		{"WithTransport(nil)", sched.WithTransport(nil), sched.ErrInvalidOption},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			s, err := sched.New(tt.opt)
			if s != nil {
				t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
			}
			require.ErrorIs(t, err, tt.want)
			require.Nil(t, s)
		})
	}

	t.Run("WithNode", func(t *testing.T) {
		s := newScheduler(t, sched.WithNode(7))
		assert.Equal(t, uint32(7), s.Node())
		h := submit(t, s, &probe{step: untilMessage})
		assert.Equal(t, uint32(7), h.PID().Node)
		require.NoError(t, s.Tell(h.PID(), 1))
		_, err := waitEnd(t, s, h)
		require.NoError(t, err)
	})

	t.Run("defaults and nil options", func(t *testing.T) {
		s := newScheduler(t, nil)
		assert.Equal(t, uint32(0), s.Node())
		assert.GreaterOrEqual(t, s.Stats().Workers, 1)
		h := submit(t, s, &probe{step: doneWith(nil)})
		assert.Equal(t, uint32(0), h.PID().Node)
		_, err := waitEnd(t, s, h)
		require.NoError(t, err)
	})

	t.Run("WithWorkers", func(t *testing.T) {
		s := newScheduler(t, sched.WithWorkers(3), sched.WithGlobalBatch(1))
		assert.Equal(t, 3, s.Stats().Workers)
		st := s.Stats()
		assert.Equal(t, 3, st.Workers)
		assert.Len(t, st.WorkerQueues, 3)
	})

	// The most workers are accepted, and the scheduler runs with them
	// and stops.
	t.Run("WithWorkers(1024)", func(t *testing.T) {
		s := newScheduler(t, sched.WithWorkers(1024))
		assert.Equal(t, 1024, s.Stats().Workers)
		h := submit(t, s, &probe{step: doneWith(nil)})
		_, err := waitEnd(t, s, h)
		require.NoError(t, err)
	})

	// The largest values each option accepts are taken, and a process
	// that messages itself, sleeps and yields a command runs to its end
	// under them all.
	t.Run("the largest values", func(t *testing.T) {
		s := newScheduler(t,
			sched.WithNode(math.MaxUint32),
			sched.WithStepBudget(math.MaxInt),
			sched.WithWatchdog(math.MaxInt64),
			sched.WithMaxProcesses(math.MaxInt),
			sched.WithMailbox(math.MaxInt, sched.MailboxDropOldest),
			sched.WithBlockingPool(math.MaxInt, math.MaxInt, sched.PoolReject),
			sched.WithHandler(1<<16, func(c sched.Call) error {
				return c.Go(func(context.Context) (any, error) { return "done", nil })
			}),
		)
		h := submit(t, s, &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
			switch n {
			case 0:
				out.Tell(out.Self(), "hello")
			case 1:
				out.Sleep(1, time.Millisecond)
			case 2:
				out.Yield(2, 1<<16, nil)
			default:
				if ev, ok := completionOf(evs, 2); ok {
					out.Done(ev.Result())
				}
			}
			return nil
		}})
		res, err := waitEnd(t, s, h)
		require.NoError(t, err)
		assert.Equal(t, "done", res.Value())
		assert.Equal(t, uint32(math.MaxUint32), h.PID().Node)
	})

	// The largest batch is accepted, and the scheduler runs with it.
	t.Run("WithGlobalBatch(65536)", func(t *testing.T) {
		s := newScheduler(t, sched.WithWorkers(1), sched.WithGlobalBatch(1<<16))
		h := submit(t, s, &probe{step: doneWith(nil)})
		_, err := waitEnd(t, s, h)
		require.NoError(t, err)
	})

	// A process that keeps continuing is requeued after its budget of
	// consecutive steps.
	t.Run("WithStepBudget", func(t *testing.T) {
		for _, tc := range []struct {
			budget   int
			requeued bool
		}{{4, true}, {sched.DefaultStepBudget, false}} {
			s := newScheduler(t, sched.WithWorkers(1), sched.WithStepBudget(tc.budget))
			h := submit(t, s, &probe{step: func(_ *probe, n int, _ []sched.Event, out *sched.StepOutput) error {
				if n < 9 {
					out.Continue()
				} else {
					out.Done(payload.Payload{})
				}
				return nil
			}})
			_, err := waitEnd(t, s, h)
			require.NoError(t, err)
			// Steps and Requeues are published together, when the worker
			// runs out of work.
			eventually(t, "Steps >= 10", func() bool { return s.Stats().Steps >= 10 })
			st := s.Stats()
			if tc.requeued {
				assert.GreaterOrEqual(t, st.Requeues, uint64(2), "budget %d, 10 steps", tc.budget)
			} else {
				assert.Zero(t, st.Requeues, "budget %d, 10 steps", tc.budget)
			}
			assert.GreaterOrEqual(t, st.Steps, uint64(10))
		}
	})
}

// Options apply in order and the later of two that set the same thing
// wins: a second WithWorkers, a second WithHooks (replacing every hook of
// the first, not adding to them), a second WithHandler for one command.
func TestOptionsLaterWins(t *testing.T) {
	var starts, ends atomic.Int32
	s := newScheduler(t,
		sched.WithWorkers(2), sched.WithWorkers(3),
		sched.WithHooks(sched.Hooks{Start: func(sched.StartInfo) { starts.Add(1) }}),
		sched.WithHooks(sched.Hooks{End: func(sched.EndInfo) { ends.Add(1) }}),
		sched.WithHandler(cmdTest, func(c sched.Call) error { return c.Complete("first", nil) }),
		sched.WithHandler(cmdTest, func(c sched.Call) error { return c.Complete("second", nil) }),
	)
	assert.Equal(t, 3, s.Stats().Workers, "workers")
	h := submit(t, s, &probe{step: yieldOnce(1, func(out *sched.StepOutput) { out.Yield(1, cmdTest, nil) })})
	res, err := waitEnd(t, s, h)
	require.NoError(t, err)
	assert.Equal(t, "second", res.Value(), "the handler registered")
	assert.Equal(t, int32(1), ends.Load(), "End hooks called (the second WithHooks')")
	assert.Equal(t, int32(0), starts.Load(), "Start hooks called (the first WithHooks')")
}

// logCapture is a slog handler that keeps records.
type logCapture struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *logCapture) Enabled(context.Context, slog.Level) bool { return true }

func (h *logCapture) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.records = append(h.records, r.Clone())
	h.mu.Unlock()
	return nil
}

func (h *logCapture) WithAttrs([]slog.Attr) slog.Handler { return h }

func (h *logCapture) WithGroup(string) slog.Handler { return h }

func (h *logCapture) levels() map[string]slog.Level {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]slog.Level{}
	for _, r := range h.records {
		out[r.Message] = r.Level
	}
	return out
}

// loggedScheduler returns a scheduler made with opts that logs into
// capture, a channel that steps may wait on, and let, which closes it
// (once). The cleanup lets the held steps go and shuts the scheduler
// down, on failure too, so that a failing run leaves no worker held.
func loggedScheduler(t *testing.T, opts ...sched.Option) (s *sched.Scheduler, capture *logCapture, release <-chan struct{}, let func()) {
	t.Helper()
	capture = &logCapture{}
	s, err := sched.New(append(opts, sched.WithLogger(slog.New(capture)))...)
	require.NoError(t, err)
	ch := make(chan struct{})
	let = sync.OnceFunc(func() { close(ch) })
	t.Cleanup(func() {
		let()
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	return s, capture, ch, let
}

func TestLogger(t *testing.T) {
	s, capture, release, let := loggedScheduler(t, sched.WithWatchdog(5*time.Millisecond))
	slowEntered := make(chan struct{})
	slow := submit(t, s, &probe{step: func(_ *probe, n int, _ []sched.Event, _ *sched.StepOutput) error {
		if n == 0 {
			close(slowEntered)
			<-release
		}
		return nil // ignores the cancel: forced at the deadline
	}})
	receive(t, slowEntered, "the slow step")
	eventually(t, "the slow step is logged", func() bool {
		_, ok := capture.levels()["scheduler: slow step"]
		return ok
	})
	let()
	h := submit(t, s, &probe{step: func(*probe, int, []sched.Event, *sched.StepOutput) error { panic("boom") }})
	_, err := waitEnd(t, s, h)
	require.ErrorIs(t, err, sched.ErrPanic)
	_ = slow
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, s.Shutdown(ctx), sched.ErrForced) // slow ignores cancel: forced

	levels := capture.levels()
	require.Equal(t, slog.LevelWarn, levels["scheduler: slow step"])
	require.Equal(t, slog.LevelError, levels["scheduler: recovered a panic"])
	require.Equal(t, slog.LevelWarn, levels["scheduler: process forced to close at the shutdown deadline"])
	require.Equal(t, slog.LevelInfo, levels["scheduler: shutting down"])
	require.Equal(t, slog.LevelInfo, levels["scheduler: shut down"])
}

// messages returns the message of each record, in the order logged.
func (h *logCapture) messages() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]string, len(h.records))
	for i, r := range h.records {
		out[i] = r.Message
	}
	return out
}

// attrs returns the attributes of each record logged with msg, by key,
// as strings.
func (h *logCapture) attrs(msg string) []map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []map[string]string
	for _, r := range h.records {
		if r.Message != msg {
			continue
		}
		m := map[string]string{}
		r.Attrs(func(a slog.Attr) bool {
			m[a.Key] = a.Value.String()
			return true
		})
		out = append(out, m)
	}
	return out
}

// TestLoggerAttributes: each event is logged once with the attributes
// docs/observability.md lists for it, and steps and messages log nothing.
func TestLoggerAttributes(t *testing.T) {
	s, capture, release, let := loggedScheduler(t, sched.WithWorkers(2))
	start := func(p sched.Process, method string) sched.Handle {
		t.Helper()
		h, err := s.Submit(context.Background(), p, method, nil)
		require.NoError(t, err)
		return h
	}

	// Steps and messages: nothing logged.
	waiting := start(&probe{step: ignoreAll}, "wait") // forced at shutdown
	busy := start(&probe{step: func(_ *probe, n int, _ []sched.Event, out *sched.StepOutput) error {
		for range 10 {
			out.Tell(waiting.PID(), "hello")
		}
		if n == 99 {
			out.Done(payload.Payload{})
		} else {
			out.Continue()
		}
		return nil
	}}, "busy")
	_, err := waitEnd(t, s, busy)
	require.NoError(t, err)
	require.Empty(t, capture.messages(), "logged with no panic, slow step nor shutdown")

	// A slow step, held until it is logged (or the test ends).
	entered := make(chan struct{})
	slow := start(&probe{step: func(_ *probe, n int, _ []sched.Event, _ *sched.StepOutput) error {
		if n == 0 {
			close(entered)
			<-release
		}
		return nil // ignores the cancel: forced at the deadline
	}}, "slow")
	receive(t, entered, "the slow step")
	eventually(t, "the slow step is logged", func() bool {
		return len(capture.attrs("scheduler: slow step")) > 0
	})
	let()
	slowLogged := capture.attrs("scheduler: slow step")
	require.Len(t, slowLogged, 1)
	require.Equal(t, slow.PID().String(), slowLogged[0]["pid"])
	require.Equal(t, "slow", slowLogged[0]["method"])
	require.Contains(t, []string{"0", "1"}, slowLogged[0]["worker"])
	running, err := time.ParseDuration(slowLogged[0]["running"])
	require.NoError(t, err, "running: %q", slowLogged[0]["running"])
	require.GreaterOrEqual(t, running, sched.DefaultWatchdogThreshold)

	// A panic.
	boom := start(&probe{step: func(*probe, int, []sched.Event, *sched.StepOutput) error { panic("boom") }}, "boom")
	_, err = waitEnd(t, s, boom)
	require.ErrorIs(t, err, sched.ErrPanic)
	require.Equal(t, []map[string]string{{
		"pid": boom.PID().String(), "method": "boom", "in": "Step", "value": "boom",
	}}, capture.attrs("scheduler: recovered a panic"))

	// A shutdown that forces the two processes left.
	waitState(t, s, slow.PID(), sched.StateIdle)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, s.Shutdown(ctx), sched.ErrForced)
	require.Equal(t, []map[string]string{{"live": "2"}}, capture.attrs("scheduler: shutting down"))
	require.ElementsMatch(t, []map[string]string{
		{"pid": waiting.PID().String(), "method": "wait"},
		{"pid": slow.PID().String(), "method": "slow"},
	}, capture.attrs("scheduler: process forced to close at the shutdown deadline"))
	require.Equal(t, []map[string]string{{"forced": "2"}}, capture.attrs("scheduler: shut down"))
	require.Len(t, capture.messages(), 6, "records logged")
}

func TestSilentByDefault(t *testing.T) {
	// With no logger the scheduler must not write to the default logger.
	var buf bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	defer slog.SetDefault(old)
	s := newScheduler(t)
	h := submit(t, s, &probe{step: func(*probe, int, []sched.Event, *sched.StepOutput) error { panic("quiet") }})
	_, err := waitEnd(t, s, h)
	require.ErrorIs(t, err, sched.ErrPanic)
	require.Empty(t, buf.String())
}
