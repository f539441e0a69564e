package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// Tests of starting and finishing a process (start.go): Submit, Spawn, Init, the
// ways a process ends, Close exactly once, and the process limit.

func TestSubmitResult(t *testing.T) {
	tests := []struct {
		name string
		get  func(t *testing.T, s *sched.Scheduler, h sched.Handle) (payload.Payload, error)
	}{
		{"Wait", func(t *testing.T, _ *sched.Scheduler, h sched.Handle) (payload.Payload, error) {
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			return h.Wait(ctx)
		}},
		{"Done then Result", func(t *testing.T, s *sched.Scheduler, h sched.Handle) (payload.Payload, error) {
			return waitEnd(t, s, h)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newScheduler(t)
			p := &probe{step: func(p *probe, _ int, _ []sched.Event, out *sched.StepOutput) error {
				out.Done(p.input.At(0))
				return nil
			}}
			h := submit(t, s, p, "hello")
			res, err := tt.get(t, s, h)
			require.NoError(t, err)
			got, err := payload.As[string](res)
			require.NoError(t, err)
			assert.Equal(t, "hello", got)

			// The result stays available after the end.
			res2, err2 := h.Result()
			require.NoError(t, err2)
			assert.Equal(t, res, res2)
			requireLifecycle(t, p)
		})
	}
}

// TestSchedulerSpawn: Spawn starts a process as Submit does, without a
// Handle: Init sees the PID Spawn returns and the values of its ctx in
// its context, the PID reaches the process, and a monitor gets its
// result. The context of one that ended says so even once its record may
// serve later processes (which the thousands spawned after it make
// likely):
// for a context with values, which a caller outside the workers makes
// on its own, and for one without.
func TestSchedulerSpawn(t *testing.T) {
	for _, withValues := range []bool{true, false} {
		t.Run(fmt.Sprintf("values=%v", withValues), func(t *testing.T) {
			s := newScheduler(t, sched.WithWorkers(2))
			p, seen := seeingProbe()
			ctx, want := context.Background(), any(nil)
			if withValues {
				ctx, want = context.WithValue(ctx, ctxKey{}, "v"), "v"
			}
			pid, err := s.Spawn(ctx, p, "run", nil)
			require.NoError(t, err)
			require.False(t, pid.IsZero(), "Spawn returned a zero PID")
			assert.Equal(t, pid, seen.self, "Self(ctx) in Init")
			assert.Equal(t, want, seen.value, "the Spawn ctx's value seen in Init")
			exits := make(chan sched.Exit, 1)
			s.Monitor(pid, func(e sched.Exit) { exits <- e })
			require.NoError(t, s.Tell(pid, "x"))
			e := receive(t, exits, "the spawned process's exit")
			assert.Equal(t, sched.ExitDone, e.Reason)
			assert.Equal(t, "x", e.Result.Value(), "the result the monitor got")
			requireLifecycle(t, p)
			assert.Equal(t, pid, p.self, "StepOutput.Self")

			// A process no monitor watches, whose record may be reused.
			ended := make(chan struct{}, 1)
			q := &probe{step: func(_ *probe, _ int, _ []sched.Event, out *sched.StepOutput) error {
				ended <- struct{}{}
				out.Done(payload.Payload{})
				return nil
			}}
			qpid, err := s.Spawn(ctx, q, "run", nil)
			require.NoError(t, err)
			receive(t, ended, "the second process's step")
			done := make(chan struct{}, 100)
			for range 30 {
				for range 100 {
					_, err := s.Spawn(ctx, stepFunc(func(_ []sched.Event, out *sched.StepOutput) error {
						done <- struct{}{}
						out.Done(payload.Payload{})
						return nil
					}), "run", nil)
					require.NoError(t, err)
				}
				for range 100 {
					receive(t, done, "a later process's step")
				}
			}
			requireLifecycle(t, q)
			for _, c := range []struct {
				pid relay.PID
				ctx context.Context
			}{{pid, p.Ctx()}, {qpid, q.Ctx()}} {
				receive(t, c.ctx.Done(), "the ended process's context Done")
				assert.ErrorIs(t, c.ctx.Err(), context.Canceled)
				self, ok := sched.Self(c.ctx)
				assert.True(t, ok)
				assert.Equal(t, c.pid, self, "Self of the ended process's context")
				assert.Equal(t, want, c.ctx.Value(ctxKey{}), "a value of the ended process's context")
			}
		})
	}
}

// TestInitGetsMethodAndInput checks that Init gets the entry point and
// the input its start named, and a context with the values of the
// caller's, on every way of starting a process from outside the workers:
// Submit and Spawn, with options and without, on a scheduler with no
// limit and no hooks, with a limit on its processes, and with a Start
// hook (a start without options takes a shorter path on the first).
func TestInitGetsMethodAndInput(t *testing.T) {
	tests := []struct {
		name   string
		method string
		input  payload.Payloads
	}{
		{"no input", "run", nil},
		{"values", "resize", payload.Values(640, "px", true)},
		{"bytes", "load", payload.Payloads{payload.Bytes([]byte("abc"))}},
	}
	type ctxKey struct{}
	ctx := context.WithValue(context.Background(), ctxKey{}, "caller's value")
	starts := []struct {
		name  string
		ended bool // the start waits for the process's end
		start func(s *sched.Scheduler, ctx context.Context, p *probe, method string, input payload.Payloads) error
	}{
		{"Submit", true, func(s *sched.Scheduler, ctx context.Context, p *probe, method string, input payload.Payloads) error {
			h, err := s.Submit(ctx, p, method, input)
			if err == nil {
				_, err = waitEnd(t, s, h)
			}
			return err
		}},
		{"Submit with an option", true, func(s *sched.Scheduler, ctx context.Context, p *probe, method string, input payload.Payloads) error {
			h, err := s.Submit(ctx, p, method, input, sched.Mailbox(4, sched.MailboxReject))
			if err == nil {
				_, err = waitEnd(t, s, h)
			}
			return err
		}},
		{"Spawn", false, func(s *sched.Scheduler, ctx context.Context, p *probe, method string, input payload.Payloads) error {
			_, err := s.Spawn(ctx, p, method, input)
			return err
		}},
		{"Spawn with an option", false, func(s *sched.Scheduler, ctx context.Context, p *probe, method string, input payload.Payloads) error {
			_, err := s.Spawn(ctx, p, method, input, sched.Mailbox(4, sched.MailboxReject))
			return err
		}},
	}
	schedulers := []struct {
		name string
		opts []sched.Option
	}{
		{"plain", nil},
		{"limited", []sched.Option{sched.WithMaxProcesses(1000)}},
		{"hooked", []sched.Option{sched.WithHooks(sched.Hooks{Start: func(sched.StartInfo) {}})}},
	}
	for _, sc := range schedulers {
		s := newScheduler(t, sc.opts...)
		for _, st := range starts {
			for _, tt := range tests {
				for _, c := range []struct {
					name string
					ctx  context.Context
				}{{"background", context.Background()}, {"with values", ctx}} {
					t.Run(sc.name+"/"+st.name+"/"+tt.name+"/"+c.name, func(t *testing.T) {
						p := &probe{step: doneWith(nil)}
						require.NoError(t, st.start(s, c.ctx, p, tt.method, tt.input))
						p.mu.Lock() // Init has returned: the start calls it synchronously
						method, input, pctx := p.method, p.input, p.ctx
						p.mu.Unlock()
						assert.Equal(t, tt.method, method)
						assert.Equal(t, tt.input, input)
						assert.Equal(t, c.ctx.Value(ctxKey{}), pctx.Value(ctxKey{}), "a value of the caller's context")
						if st.ended {
							requireLifecycle(t, p)
						}
					})
				}
			}
		}
	}
}

// TestInitIsSynchronous: Init runs synchronously inside Submit, before
// any Step.
func TestInitIsSynchronous(t *testing.T) {
	s := newScheduler(t)
	var initDone bool
	p := &probe{
		init: func(context.Context, string, payload.Payloads) error {
			initDone = true // no lock: Submit has not returned yet
			return nil
		},
		step: doneWith(nil),
	}
	h := submit(t, s, p)
	assert.True(t, initDone, "Init ran before Submit returned")
	_, err := waitEnd(t, s, h)
	require.NoError(t, err)
}

// TestStepEndings: the result or error a Handle reports for each way a
// step can end a process.
func TestStepEndings(t *testing.T) {
	stepErr := testError("step failed")
	closePanic := testError("close exploded")
	tests := []struct {
		name  string
		p     *probe
		check func(t *testing.T, res payload.Payload, err error)
	}{
		{
			name: "done",
			p:    &probe{step: doneWith("result")},
			check: func(t *testing.T, res payload.Payload, err error) {
				require.NoError(t, err)
				assert.Equal(t, "result", res.Value())
			},
		},
		{
			name: "done with zero result",
			p:    &probe{step: doneWith(nil)},
			check: func(t *testing.T, res payload.Payload, err error) {
				require.NoError(t, err)
				assert.True(t, res.IsZero())
			},
		},
		{
			name: "done after a few steps",
			p: &probe{step: func(_ *probe, n int, _ []sched.Event, out *sched.StepOutput) error {
				if n < 4 {
					out.Continue()
				} else {
					out.Done(payload.Of(n))
				}
				return nil
			}},
			check: func(t *testing.T, res payload.Payload, err error) {
				require.NoError(t, err)
				assert.Equal(t, 4, res.Value())
			},
		},
		{
			name: "step error",
			p: &probe{step: func(*probe, int, []sched.Event, *sched.StepOutput) error {
				return fmt.Errorf("wrapped: %w", stepErr)
			}},
			check: func(t *testing.T, res payload.Payload, err error) {
				require.ErrorIs(t, err, stepErr)
				assert.True(t, res.IsZero())
			},
		},
		{
			name: "step error wins over Done",
			p: &probe{step: func(_ *probe, _ int, _ []sched.Event, out *sched.StepOutput) error {
				out.Done(payload.Of(1))
				return stepErr
			}},
			check: func(t *testing.T, _ payload.Payload, err error) {
				require.ErrorIs(t, err, stepErr)
			},
		},
		{
			name: "step panic",
			p: &probe{step: func(*probe, int, []sched.Event, *sched.StepOutput) error {
				panic("boom")
			}},
			check: func(t *testing.T, _ payload.Payload, err error) {
				require.ErrorIs(t, err, sched.ErrPanic)
				var pe *sched.PanicError
				require.ErrorAs(t, err, &pe)
				assert.Equal(t, "Step", pe.Where)
				assert.Equal(t, "boom", pe.Value)
				assert.Contains(t, string(pe.Stack), "TestStepEndings", "the stack names the panicking function")
				assert.Contains(t, err.Error(), "boom")
			},
		},
		{
			name: "step panic with an error value",
			p: &probe{step: func(*probe, int, []sched.Event, *sched.StepOutput) error {
				panic(stepErr)
			}},
			check: func(t *testing.T, _ payload.Payload, err error) {
				require.ErrorIs(t, err, sched.ErrPanic)
				require.ErrorIs(t, err, stepErr, "PanicError unwraps to an error panic value")
			},
		},
		{
			name: "close panic after success",
			p:    &probe{step: doneWith("ok"), close: func() { panic(closePanic) }},
			check: func(t *testing.T, _ payload.Payload, err error) {
				require.ErrorIs(t, err, sched.ErrPanic)
				require.ErrorIs(t, err, closePanic)
				var pe *sched.PanicError
				require.ErrorAs(t, err, &pe)
				assert.Equal(t, "Close", pe.Where)
			},
		},
		{
			name: "close panic after a step error",
			p: &probe{
				step: func(*probe, int, []sched.Event, *sched.StepOutput) error {
					return stepErr
				},
				close: func() { panic(closePanic) },
			},
			check: func(t *testing.T, _ payload.Payload, err error) {
				require.ErrorIs(t, err, stepErr, "the step's error is the one reported")
			},
		},
	}
	s := newScheduler(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := submit(t, s, tt.p)
			res, err := waitEnd(t, s, h)
			tt.check(t, res, err)
			requireLifecycle(t, tt.p)
		})
	}
	// The scheduler still serves others after panics.
	h := submit(t, s, &probe{step: doneWith(1)})
	_, err := waitEnd(t, s, h)
	require.NoError(t, err)
}

// closeBomb is a child that finishes in its first step with its index
// and whose Close, if bomb is set, panics: the end of a process that a
// worker's step finished calls Close without a deferred call of its own,
// and the worker's loop recovers the panic.
type closeBomb struct {
	i      int
	bomb   bool
	closes *atomic.Int64
}

func (c *closeBomb) Init(context.Context, string, payload.Payloads) error { return nil }
func (c *closeBomb) Step(_ []sched.Event, out *sched.StepOutput) error {
	out.Done(payload.Of(c.i))
	return nil
}
func (c *closeBomb) Close() {
	c.closes.Add(1)
	if c.bomb {
		panic(fmt.Sprintf("close %d exploded", c.i))
	}
}

// TestClosePanicsOfChildren: children that finish in a step and whose
// Close panics, on every worker, one after another and among others
// that end quietly. Each awaiting parent gets the child's result with a
// PanicError from Close, every Close runs once, the panics are counted,
// and the workers go on: the parent's later steps, and a process after
// them, run.
func TestClosePanicsOfChildren(t *testing.T) {
	const children = 400
	s := newScheduler(t, sched.WithWorkers(2))
	var closes atomic.Int64
	got := make(map[int]error)
	parent := &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
		if n == 0 {
			for i := range children {
				// Three in four panic, so that panics follow one another
				// on a worker as well as follow quiet ends.
				out.SpawnAwait(uint64(i+1), &closeBomb{i: i, bomb: i%4 != 0, closes: &closes}, "bomb", nil)
			}
			return nil
		}
		for _, ev := range evs {
			if ev.Type != sched.EventYieldComplete {
				return fmt.Errorf("unexpected event %v", ev.Type)
			}
			i, ok := ev.Result().Value().(int)
			if !ok || uint64(i+1) != ev.Tag {
				return fmt.Errorf("completion of tag %d carries %v", ev.Tag, ev.Result().Value())
			}
			got[i] = ev.Error
		}
		if len(got) == children {
			out.Done(payload.Of(len(got)))
		}
		return nil
	}}
	h := submit(t, s, parent)
	res, err := waitEnd(t, s, h)
	require.NoError(t, err)
	require.Equal(t, children, res.Value())
	for i := range children {
		if i%4 == 0 {
			assert.NoError(t, got[i], "child %d, whose Close returns", i)
			continue
		}
		var pe *sched.PanicError
		if assert.ErrorAs(t, got[i], &pe, "child %d", i) {
			assert.Equal(t, "Close", pe.Where, "child %d", i)
			assert.Equal(t, fmt.Sprintf("close %d exploded", i), pe.Value, "child %d", i)
		}
		assert.ErrorIs(t, got[i], sched.ErrPanic, "child %d", i)
	}
	assert.Equal(t, int64(children), closes.Load(), "Close calls")
	assert.Equal(t, uint64(children*3/4), s.Stats().Processes.Panics, "panics counted")
	assert.Equal(t, uint64(children*3/4), s.Stats().Processes.Failed, "children ended failed")

	// The workers still serve.
	after := submit(t, s, &probe{step: doneWith("after")})
	res, err = waitEnd(t, s, after)
	require.NoError(t, err)
	assert.Equal(t, "after", res.Value())
}

// TestCloseExactlyOnce covers every way a process can end.
func TestCloseExactlyOnce(t *testing.T) {
	tests := []struct {
		name string
		p    *probe
		// end makes the process end and returns its error.
		end     func(t *testing.T, s *sched.Scheduler, p *probe) error
		wantErr error
	}{
		{"done", &probe{step: doneWith(nil)}, endOf, nil},
		{"step error", &probe{step: func(*probe, int, []sched.Event, *sched.StepOutput) error { return testError("x") }}, endOf, testError("x")},
		{"step panic", &probe{step: func(*probe, int, []sched.Event, *sched.StepOutput) error { panic("x") }}, endOf, sched.ErrPanic},
		{"init failure", &probe{init: func(context.Context, string, payload.Payloads) error { return testError("x") }}, submitErr, sched.ErrInit},
		{"init panic", &probe{init: func(context.Context, string, payload.Payloads) error { panic("x") }}, submitErr, sched.ErrPanic},
		{"terminate", &probe{step: untilCancel}, func(t *testing.T, s *sched.Scheduler, p *probe) error {
			h := submit(t, s, p)
			require.NoError(t, s.Terminate(h.PID()))
			_, err := waitEnd(t, s, h)
			return err
		}, nil},
		{"shutdown", &probe{step: untilCancel}, func(t *testing.T, s *sched.Scheduler, p *probe) error {
			h := submit(t, s, p)
			require.NoError(t, s.Shutdown(context.Background()))
			_, err := waitEnd(t, s, h)
			return err
		}, nil},
		{"forced", &probe{step: ignoreAll}, func(t *testing.T, s *sched.Scheduler, p *probe) error {
			h := submit(t, s, p)
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // the deadline has passed already
			require.ErrorIs(t, s.Shutdown(ctx), sched.ErrForced)
			_, err := waitEnd(t, s, h)
			return err
		}, sched.ErrForced},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newScheduler(t)
			err := tt.end(t, s, tt.p)
			if tt.wantErr == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, tt.wantErr)
			}
			requireLifecycle(t, tt.p)
		})
	}
}

// endOf submits p and waits for its end.
func endOf(t *testing.T, s *sched.Scheduler, p *probe) error {
	h := submit(t, s, p)
	_, err := waitEnd(t, s, h)
	return err
}

// submitErr submits p, whose Init fails, and returns Submit's error.
func submitErr(t *testing.T, s *sched.Scheduler, p *probe) error {
	h, err := s.Submit(context.Background(), p, "run", nil)
	require.Error(t, err)
	assert.True(t, h.PID().IsZero(), "Submit returned a PID for a process that failed")
	assert.Zero(t, p.Steps(), "a process whose Init failed was stepped")
	return err
}

// methodsProbe is a process with two entry points; Init rejects any other
// method with an error wrapping ErrUnknownMethod.
func methodsProbe() *probe {
	return &probe{
		init: func(_ context.Context, method string, _ payload.Payloads) error {
			switch method {
			case "add", "sub":
				return nil
			}
			return fmt.Errorf("method %q: %w", method, sched.ErrUnknownMethod)
		},
		step: doneWith(nil),
	}
}

// TestSubmitErrors: Submit and Spawn refuse what cannot start with the
// same errors, call Init only for what they admit and Close after a
// failed Init, and never step a process that failed to start.
func TestSubmitErrors(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Unix(0, 0))
	defer cancel2()
	initErr := testError("init failed")

	type errorCase struct {
		name   string
		ctx    context.Context
		p      sched.Process
		method string
		want   []error
		inits  int // Init calls expected
	}
	// Each entry point gets processes of its own.
	cases := func() []errorCase {
		return []errorCase{
			{"nil process", context.Background(), nil, "run", []error{sched.ErrNilProcess}, 0},
			{"empty method", context.Background(), &probe{step: doneWith(nil)}, "", []error{sched.ErrEmptyMethod}, 0},
			{"cancelled ctx", cancelled, &probe{step: doneWith(nil)}, "run", []error{context.Canceled}, 0},
			{"expired ctx", expired, &probe{step: doneWith(nil)}, "run", []error{context.DeadlineExceeded}, 0},
			{"unknown method", context.Background(), methodsProbe(), "mul", []error{sched.ErrInit, sched.ErrUnknownMethod}, 1},
			{"init error", context.Background(), &probe{init: func(context.Context, string, payload.Payloads) error {
				return initErr
			}}, "run", []error{sched.ErrInit, initErr}, 1},
			{"init panic", context.Background(), &probe{init: func(context.Context, string, payload.Payloads) error {
				panic("init exploded")
			}}, "run", []error{sched.ErrInit, sched.ErrPanic}, 1},
			{"init panic with an error", context.Background(), &probe{init: func(context.Context, string, payload.Payloads) error {
				panic(initErr)
			}}, "run", []error{sched.ErrInit, sched.ErrPanic, initErr}, 1},
		}
	}
	entries := []struct {
		name  string
		start func(s *sched.Scheduler, tt errorCase) (relay.PID, error)
	}{
		{"Submit", func(s *sched.Scheduler, tt errorCase) (relay.PID, error) {
			h, err := s.Submit(tt.ctx, tt.p, tt.method, nil)
			return h.PID(), err
		}},
		{"Spawn", func(s *sched.Scheduler, tt errorCase) (relay.PID, error) {
			return s.Spawn(tt.ctx, tt.p, tt.method, nil)
		}},
		// With an option, a start takes the general path.
		{"Submit with an option", func(s *sched.Scheduler, tt errorCase) (relay.PID, error) {
			h, err := s.Submit(tt.ctx, tt.p, tt.method, nil, sched.Mailbox(4, sched.MailboxReject))
			return h.PID(), err
		}},
		{"Spawn with an option", func(s *sched.Scheduler, tt errorCase) (relay.PID, error) {
			return s.Spawn(tt.ctx, tt.p, tt.method, nil, sched.Mailbox(4, sched.MailboxReject))
		}},
	}
	s := newScheduler(t)
	for _, entry := range entries {
		for _, tt := range cases() {
			t.Run(entry.name+"/"+tt.name, func(t *testing.T) {
				pid, err := entry.start(s, tt)
				require.Error(t, err)
				for _, want := range tt.want {
					require.ErrorIs(t, err, want)
				}
				assert.True(t, pid.IsZero(), "PID of a failed start")
				if p, ok := tt.p.(*probe); ok {
					assert.Equal(t, tt.inits, p.Inits(), "Init calls")
					assert.Equal(t, tt.inits, p.Closes(), "Close calls: once if Init was called, else never")
					assert.Zero(t, p.Steps(), "a process that failed to start was stepped")
				}
			})
		}
	}

	// The good entry points of the same process type work.
	for _, method := range []string{"add", "sub"} {
		p := methodsProbe()
		h, err := s.Submit(context.Background(), p, method, nil)
		require.NoError(t, err, method)
		_, err = waitEnd(t, s, h)
		require.NoError(t, err)
		requireLifecycle(t, p)
	}
	st := s.Stats()
	assert.Equal(t, uint64(len(entries)*4), st.Processes.InitFailed, "InitFailed")
	assert.Equal(t, uint64(2), st.Processes.Submitted, "Submitted")
}

func TestMaxProcessesNeverExceeded(t *testing.T) {
	const limit, submitters = 50, 1000
	release := make(chan struct{})
	s := newScheduler(t, sched.WithMaxProcesses(limit), sched.WithHandler(cmdTest, func(c sched.Call) error {
		done := c.Completion()
		go func() {
			<-release
			_ = done.Complete(nil, nil)
		}()
		return nil
	}))
	var live, peak atomic.Int64
	var accepted, refused atomic.Int64
	var handles sync.Map
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range submitters {
		wg.Go(func() {
			<-start
			h, err := s.Submit(context.Background(), &countedProc{live: &live, peak: &peak, release: release}, "run", nil)
			switch {
			case err == nil:
				accepted.Add(1)
				handles.Store(i, h)
			case errors.Is(err, sched.ErrTooManyProcesses):
				refused.Add(1)
			default:
				t.Errorf("Submit: %v", err)
			}
		})
	}
	close(start)
	wg.Wait()
	require.Equal(t, int64(submitters), accepted.Load()+refused.Load())
	require.Equal(t, int64(limit), accepted.Load(), "exactly the limit is admitted while none has ended")
	require.LessOrEqual(t, peak.Load(), int64(limit), "processes between Init and Close")
	require.Equal(t, uint64(submitters-limit), s.Stats().Processes.Rejected)

	// Once they end, there is room again.
	close(release)
	handles.Range(func(_, v any) bool {
		_, err := waitEnd(t, s, v.(sched.Handle))
		require.NoError(t, err)
		return true
	})
	h, err := s.Submit(context.Background(), &probe{step: doneWith(1)}, "run", nil)
	require.NoError(t, err)
	_, err = waitEnd(t, s, h)
	require.NoError(t, err)
	_, err = sched.New(sched.WithMaxProcesses(0))
	require.ErrorIs(t, err, sched.ErrInvalidOption)
}

// countedProc tracks how many instances are between Init and Close.
type countedProc struct {
	live, peak *atomic.Int64
	release    <-chan struct{}
}

func (m *countedProc) Init(context.Context, string, payload.Payloads) error {
	n := m.live.Add(1)
	for {
		p := m.peak.Load()
		if n <= p || m.peak.CompareAndSwap(p, n) {
			break
		}
	}
	return nil
}

func (m *countedProc) Close() { m.live.Add(-1) }

func (m *countedProc) Step(evs []sched.Event, out *sched.StepOutput) error {
	if len(evs) == 0 {
		out.Yield(1, cmdTest, nil) // wait for the release
		return nil
	}
	out.Done(payload.Payload{})
	return nil
}

// TestStepPanicsOnOneWorker: a worker whose steps panic one after another
// keeps serving, and a panicking step ends its process as a step that
// returns an error does: what it wrote before the panic (a Tell, a
// Continue) is carried out, its Handle reports a PanicError from Step,
// and the panic is counted.
func TestStepPanicsOnOneWorker(t *testing.T) {
	const n = 20
	s := newScheduler(t, sched.WithWorkers(1))
	sink := submit(t, s, &probe{step: func(p *probe, _ int, _ []sched.Event, out *sched.StepOutput) error {
		if len(p.EventsOf(sched.EventMessage)) == 2*n {
			out.Done(payload.Of(2 * n))
		}
		return nil
	}})
	stepErr := testError("step error")
	failing := func(i int, panics bool) sched.Process {
		return &probe{step: func(_ *probe, _ int, _ []sched.Event, out *sched.StepOutput) error {
			out.Tell(sink.PID(), i)
			if i%2 == 0 {
				out.Continue()
			}
			if panics {
				panic(fmt.Sprintf("panic %d", i))
			}
			return stepErr
		}}
	}
	before := s.Stats().Processes.Panics
	var panicked, failed []sched.Handle
	for i := range n {
		panicked = append(panicked, submit(t, s, failing(i, true)))
		failed = append(failed, submit(t, s, failing(i, false)))
	}
	for i, h := range panicked {
		_, err := waitEnd(t, s, h)
		var pe *sched.PanicError
		require.ErrorAs(t, err, &pe, "process %d", i)
		assert.Equal(t, "Step", pe.Where)
		assert.Equal(t, fmt.Sprintf("panic %d", i), pe.Value)
	}
	for _, h := range failed {
		_, err := waitEnd(t, s, h)
		require.ErrorIs(t, err, stepErr)
	}
	res, err := waitEnd(t, s, sink)
	require.NoError(t, err)
	assert.Equal(t, 2*n, res.Value(), "messages told by the failing steps")
	assert.Equal(t, uint64(n), s.Stats().Processes.Panics-before)

	// The worker still runs processes.
	res, err = waitEnd(t, s, submit(t, s, &probe{step: doneWith("after")}))
	require.NoError(t, err)
	assert.Equal(t, "after", res.Value())
}
