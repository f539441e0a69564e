package scheduler_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

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

func TestHandleBeforeEnd(t *testing.T) {
	s := newScheduler(t)
	p := &probe{step: untilMessage}
	h := submit(t, s, p)

	_, err := h.Result()
	require.ErrorIs(t, err, sched.ErrNotEnded, "Result while the process waits for a message")
	assert.False(t, isClosed(h.Done()), "Done closed while the process waits for a message")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = h.Wait(ctx)
	require.ErrorIs(t, err, context.Canceled, "Wait with a done context returns its error")

	require.NoError(t, s.Tell(h.PID(), 42))
	res, err := waitEnd(t, s, h)
	require.NoError(t, err)
	assert.Equal(t, 42, res.Value())
}

func TestZeroHandle(t *testing.T) {
	var h sched.Handle
	assert.True(t, h.PID().IsZero())
	assert.True(t, isClosed(h.Done()), "zero Handle's Done is closed")
	_, err := h.Wait(context.Background())
	require.ErrorIs(t, err, sched.ErrProcessNotFound)
	_, err = h.Result()
	require.ErrorIs(t, err, sched.ErrProcessNotFound)
}

// TestPIDsNeverReused submits and finishes waves of processes, so that
// table slots are freed and taken again, and checks that no PID comes
// back, including those of processes whose Init failed in between.
func TestPIDsNeverReused(t *testing.T) {
	s := newScheduler(t, sched.WithNode(3))
	const waves, perWave = 20, 100
	seen := make(map[relay.PID]int)
	for wave := range waves {
		hs := make([]sched.Handle, 0, perWave)
		for i := range perWave {
			if i%10 == 0 {
				_, err := s.Submit(context.Background(), &probe{init: func(context.Context, string, payload.Payloads) error {
					return testError("no")
				}}, "run", nil)
				require.ErrorIs(t, err, sched.ErrInit)
			}
			hs = append(hs, submit(t, s, &probe{step: doneWith(i)}))
		}
		for _, h := range hs {
			_, err := waitEnd(t, s, h)
			require.NoError(t, err)
			pid := h.PID()
			if prev, dup := seen[pid]; dup {
				t.Fatalf("PID %v of wave %d was already used in wave %d", pid, wave, prev)
			}
			seen[pid] = wave
		}
		// Let the ended processes free their slots, so that the next
		// wave reuses them.
		eventually(t, "no live process", func() bool { return s.Stats().Processes.Live == 0 })
	}
	require.Len(t, seen, waves*perWave)
	for pid := range seen {
		assert.Equal(t, uint32(3), pid.Node)
		assert.False(t, pid.IsZero())
		back, err := relay.Parse(pid.String())
		require.NoError(t, err, "Parse(%q)", pid.String())
		require.Equal(t, pid, back, "PID.String round trip")
	}
}

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
	s := newScheduler(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &probe{step: doneWith(nil)}
			h, err := s.Submit(context.Background(), p, tt.method, tt.input)
			require.NoError(t, err)
			_, err = waitEnd(t, s, h)
			require.NoError(t, err)
			assert.Equal(t, tt.method, p.method)
			assert.Equal(t, tt.input, p.input)
			requireLifecycle(t, p)
		})
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

func TestProcessContext(t *testing.T) {
	t.Run("Self and values", func(t *testing.T) {
		s := newScheduler(t)
		var initSelf relay.PID
		var initValue any
		p := &probe{
			init: func(ctx context.Context, _ string, _ payload.Payloads) error {
				initSelf, _ = sched.Self(ctx)
				initValue = ctx.Value(ctxKey{})
				return nil
			},
			step: untilMessage,
		}
		ctx := context.WithValue(context.Background(), ctxKey{}, "v")
		h, err := s.Submit(ctx, p, "run", nil)
		require.NoError(t, err)
		assert.Equal(t, h.PID(), initSelf, "Self(ctx) in Init")
		assert.Equal(t, "v", initValue, "Submit ctx value seen in Init")

		pctx := p.Ctx()
		self, ok := sched.Self(pctx)
		require.True(t, ok)
		assert.Equal(t, h.PID(), self)
		// A context derived from the process context still names it.
		derived, cancel := context.WithCancel(pctx)
		defer cancel()
		self, ok = sched.Self(derived)
		require.True(t, ok)
		assert.Equal(t, h.PID(), self)
		_, deadline := pctx.Deadline()
		assert.False(t, deadline, "a process context has no deadline")

		require.NoError(t, s.Tell(h.PID(), "bye"))
		_, err = waitEnd(t, s, h)
		require.NoError(t, err)
		assert.Equal(t, h.PID(), p.self, "StepOutput.Self")
	})

	t.Run("Self of another context", func(t *testing.T) {
		_, ok := sched.Self(context.Background())
		assert.False(t, ok)
	})

	t.Run("Submit ctx cancellation does not reach the process", func(t *testing.T) {
		s := newScheduler(t)
		ctx, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, 7))
		p := &probe{step: untilMessage}
		h, err := s.Submit(ctx, p, "run", nil)
		require.NoError(t, err)
		cancel()
		pctx := p.Ctx()
		assert.NoError(t, pctx.Err())
		assert.False(t, isClosed(pctx.Done()), "process context done after the Submit ctx was cancelled")
		assert.Equal(t, 7, pctx.Value(ctxKey{}), "values of a cancelled Submit ctx stay visible")

		// The process still runs: it answers a message.
		require.NoError(t, s.Tell(h.PID(), "x"))
		res, err := waitEnd(t, s, h)
		require.NoError(t, err)
		assert.Equal(t, "x", res.Value())
	})

	// The process context is cancelled when the process is terminated
	// and when it ends, whether or not Done was asked for beforehand.
	tests := []struct {
		name      string
		earlyDone bool // call Done before the cancellation
		end       func(t *testing.T, s *sched.Scheduler, h sched.Handle)
	}{
		{"terminate", false, func(t *testing.T, s *sched.Scheduler, h sched.Handle) {
			require.NoError(t, s.Terminate(h.PID()))
		}},
		{"terminate, Done asked early", true, func(t *testing.T, s *sched.Scheduler, h sched.Handle) {
			require.NoError(t, s.Terminate(h.PID()))
		}},
		{"end", false, func(t *testing.T, s *sched.Scheduler, h sched.Handle) {
			require.NoError(t, s.Tell(h.PID(), "end"))
			_, err := waitEnd(t, s, h)
			require.NoError(t, err)
		}},
		{"end, Done asked early", true, func(t *testing.T, s *sched.Scheduler, h sched.Handle) {
			require.NoError(t, s.Tell(h.PID(), "end"))
			_, err := waitEnd(t, s, h)
			require.NoError(t, err)
		}},
	}
	for _, tt := range tests {
		t.Run("cancelled at "+tt.name, func(t *testing.T) {
			s := newScheduler(t)
			p := &probe{step: untilMessage}
			h := submit(t, s, p)
			pctx := p.Ctx()
			var done <-chan struct{}
			if tt.earlyDone {
				done = pctx.Done()
				require.False(t, isClosed(done))
				require.NoError(t, pctx.Err())
			}
			tt.end(t, s, h)
			if done == nil {
				done = pctx.Done()
			}
			receive(t, done, "process context Done")
			require.ErrorIs(t, pctx.Err(), context.Canceled)
			receive(t, pctx.Done(), "process context Done (asked again)")
			_, err := waitEnd(t, s, h)
			require.NoError(t, err)
			requireLifecycle(t, p)
		})
	}
}

// TestFirstStepHasNoEvents: the first Step gets no events, even when
// events were queued before it ran (Process: "The first call has no
// events"). One worker is kept busy so that the events arrive before the
// new process's first step.
func TestFirstStepHasNoEvents(t *testing.T) {
	tests := []struct {
		name  string
		queue func(t *testing.T, s *sched.Scheduler, pid relay.PID)
	}{
		{"nothing queued", func(*testing.T, *sched.Scheduler, relay.PID) {}},
		{"messages queued", func(t *testing.T, s *sched.Scheduler, pid relay.PID) {
			require.NoError(t, s.Tell(pid, 1))
			require.NoError(t, s.Tell(pid, 2))
		}},
		{"cancel queued", func(t *testing.T, s *sched.Scheduler, pid relay.PID) {
			require.NoError(t, s.Terminate(pid))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newScheduler(t, sched.WithWorkers(1))
			entered, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			t.Cleanup(func() { once.Do(func() { close(release) }) })
			blocker := &probe{step: func(_ *probe, n int, _ []sched.Event, out *sched.StepOutput) error {
				if n == 0 {
					close(entered)
					<-release
				} else {
					out.Done(payload.Payload{})
				}
				return nil
			}}
			hb := submit(t, s, blocker)
			receive(t, entered, "the blocker's step")

			p := &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
				if n > 0 {
					out.Done(payload.Payload{})
				} else {
					out.Continue() // so that "nothing queued" also gets a second step
				}
				return nil
			}}
			h := submit(t, s, p)
			tt.queue(t, s, h.PID())
			once.Do(func() { close(release) })
			_, err := waitEnd(t, s, h)
			require.NoError(t, err)
			require.NoError(t, s.Terminate(hb.PID()))
			_, err = waitEnd(t, s, hb)
			require.NoError(t, err)

			batches := p.Batches()
			require.NotEmpty(t, batches)
			assert.Empty(t, batches[0], "events of the first step")
			requireLifecycle(t, p)
		})
	}
}

// TestStepBatches: concurrent senders, a process that sometimes continues;
// every event arrives once, per sender in order, and no step after the
// first gets an empty batch unless the step before it continued.
func TestStepBatches(t *testing.T) {
	s := newScheduler(t, sched.WithWorkers(2))
	const senders, perSender = 4, 300
	type msg struct{ sender, seq int }
	p := &probe{step: func(p *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
		if n%7 == 3 {
			out.Continue()
		}
		if len(p.Events()) == senders*perSender {
			out.Done(payload.Payload{})
		}
		return nil
	}}
	h := submit(t, s, p)
	var wg sync.WaitGroup
	errs := make(chan error, senders)
	for sender := range senders {
		wg.Go(func() {
			for seq := range perSender {
				if err := s.Tell(h.PID(), msg{sender, seq}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	_, err := waitEnd(t, s, h)
	require.NoError(t, err)
	requireLifecycle(t, p)

	batches := p.Batches()
	assert.Empty(t, batches[0], "first step's events")
	for i := 1; i < len(batches); i++ {
		if continued := (i-1)%7 == 3; !continued { // as the step function decides
			assert.NotEmpty(t, batches[i], "step %d got no events though step %d asked to wait", i, i-1)
		}
	}
	next := make([]int, senders)
	for _, ev := range p.Events() {
		require.Equal(t, sched.EventMessage, ev.Type, "event %v", ev)
		m := ev.Data.(msg)
		require.Equal(t, next[m.sender], m.seq, "message order of sender %d", m.sender)
		next[m.sender]++
		assert.True(t, ev.From.IsZero(), "From of a message told from outside")
	}
	for sender, n := range next {
		assert.Equal(t, perSender, n, "messages from sender %d", sender)
	}
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

func TestMessages(t *testing.T) {
	t.Run("Send wakes an idle process", func(t *testing.T) {
		s := newScheduler(t)
		p := &probe{step: untilMessage}
		h := submit(t, s, p)
		waitState(t, s, h.PID(), sched.StateIdle)
		msg := relay.Message{From: relay.PID{Node: 0, ID: 12345}, To: h.PID(), Data: payload.Of("hi")}
		require.NoError(t, s.Send(msg))
		_, err := waitEnd(t, s, h)
		require.NoError(t, err)
		evs := p.EventsOf(sched.EventMessage)
		require.Len(t, evs, 1)
		assert.Equal(t, msg.Data, evs[0].Data, "Data is the body, not the envelope")
		assert.Equal(t, msg.From, evs[0].From)
		assert.NoError(t, evs[0].Error)
	})

	t.Run("Tell wakes an idle process", func(t *testing.T) {
		s := newScheduler(t)
		p := &probe{step: untilMessage}
		h := submit(t, s, p)
		waitState(t, s, h.PID(), sched.StateIdle)
		require.NoError(t, s.Tell(h.PID(), 99))
		res, err := waitEnd(t, s, h)
		require.NoError(t, err)
		assert.Equal(t, 99, res.Value())
		evs := p.EventsOf(sched.EventMessage)
		require.Len(t, evs, 1)
		assert.True(t, evs[0].From.IsZero(), "From of Scheduler.Tell")
	})

	t.Run("process to process, in order", func(t *testing.T) {
		s := newScheduler(t)
		const n = 200
		recv := &probe{step: func(p *probe, _ int, _ []sched.Event, out *sched.StepOutput) error {
			if len(p.EventsOf(sched.EventMessage)) == n {
				out.Done(payload.Payload{})
			}
			return nil
		}}
		hr := submit(t, s, recv)
		send := &probe{step: func(_ *probe, _ int, _ []sched.Event, out *sched.StepOutput) error {
			for i := range n {
				out.Tell(hr.PID(), i)
			}
			out.Done(payload.Payload{}) // the Tells of the final step are still delivered
			return nil
		}}
		hs := submit(t, s, send)
		_, err := waitEnd(t, s, hr)
		require.NoError(t, err)
		_, err = waitEnd(t, s, hs)
		require.NoError(t, err)
		for i, ev := range recv.EventsOf(sched.EventMessage) {
			require.Equal(t, i, ev.Data, "message order")
			require.Equal(t, hs.PID(), ev.From, "From of StepOutput.Tell")
		}
	})

	t.Run("self Tell", func(t *testing.T) {
		s := newScheduler(t)
		p := &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
			if n == 0 {
				out.Tell(out.Self(), "me")
				return nil
			}
			for _, ev := range evs {
				if ev.Type == sched.EventMessage {
					if ev.From != out.Self() {
						return fmt.Errorf("From = %v, want %v", ev.From, out.Self())
					}
					out.Done(payload.Of(ev.Data))
				}
			}
			return nil
		}}
		h := submit(t, s, p)
		res, err := waitEnd(t, s, h)
		require.NoError(t, err)
		assert.Equal(t, "me", res.Value())
	})

	t.Run("Tell to a dead PID bounces", func(t *testing.T) {
		s := newScheduler(t)
		dead := submit(t, s, &probe{step: doneWith(nil)})
		_, err := waitEnd(t, s, dead)
		require.NoError(t, err)
		for _, target := range []relay.PID{dead.PID(), {ID: 1 << 40}, {Node: 9, ID: dead.PID().ID}} {
			p := &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
				if n == 0 {
					out.Tell(target, "lost")
					return nil
				}
				out.Done(payload.Payload{})
				return nil
			}}
			h := submit(t, s, p)
			_, err := waitEnd(t, s, h)
			require.NoError(t, err)
			evs := p.Events()
			require.Len(t, evs, 1, "events: %v", evs)
			ev := evs[0]
			assert.Equal(t, sched.EventMessage, ev.Type)
			require.ErrorIs(t, ev.Error, sched.ErrProcessNotFound)
			assert.Equal(t, target, ev.From, "From of a bounce names the target")
			assert.Equal(t, "lost", ev.Data, "Data of a bounce is the message")
		}
		// Per-step counters are published when a worker runs out of work.
		eventually(t, "Bounced == 3", func() bool { return s.Stats().Messages.Bounced == 3 })
	})
}

// TestNotFound: every call that addresses a process fails with
// ErrProcessNotFound for a PID that never existed, has ended, or belongs
// to another node.
func TestNotFound(t *testing.T) {
	s := newScheduler(t, sched.WithNode(1))
	ended := submit(t, s, &probe{step: doneWith(nil)})
	_, err := waitEnd(t, s, ended)
	require.NoError(t, err)
	live := submit(t, s, &probe{step: untilCancel})

	targets := []struct {
		name string
		pid  relay.PID
	}{
		{"never existed", relay.PID{Node: 1, ID: 1<<32 | 999}},
		{"zero", relay.PID{}},
		{"ended", ended.PID()},
		{"another node", relay.PID{Node: 2, ID: live.PID().ID}},
	}
	ops := []struct {
		name string
		call func(pid relay.PID) error
	}{
		{"Send", func(pid relay.PID) error { return s.Send(relay.Message{To: pid}) }},
		{"Tell", func(pid relay.PID) error { return s.Tell(pid, 1) }},
		{"Terminate", func(pid relay.PID) error { return s.Terminate(pid) }},
		{"CompleteYield", func(pid relay.PID) error { return s.CompleteYield(pid, 1, nil, nil) }},
	}
	for _, target := range targets {
		for _, op := range ops {
			t.Run(op.name+"/"+target.name, func(t *testing.T) {
				err := op.call(target.pid)
				require.ErrorIs(t, err, sched.ErrProcessNotFound)
			})
		}
	}
	// The live process was not disturbed.
	info, ok := findProcess(s, live.PID())
	require.True(t, ok)
	assert.Zero(t, info.Queued, "events queued to the live process")
	require.NoError(t, s.Terminate(live.PID()))
	_, err = waitEnd(t, s, live)
	require.NoError(t, err)
}

func TestOptions(t *testing.T) {
	h := func(sched.Call) error { return nil }
	bad := []struct {
		name string
		opt  sched.Option
		want error
	}{
		{"WithWorkers(0)", sched.WithWorkers(0), sched.ErrInvalidOption},
		{"WithWorkers(-1)", sched.WithWorkers(-1), sched.ErrInvalidOption},
		{"WithStepBudget(0)", sched.WithStepBudget(0), sched.ErrInvalidOption},
		{"WithStepBudget(-5)", sched.WithStepBudget(-5), sched.ErrInvalidOption},
		{"WithGlobalBatch(0)", sched.WithGlobalBatch(0), sched.ErrInvalidOption},
		{"WithHandler(a reserved ID)", sched.WithHandler(sched.CommandID(1), h), sched.ErrInvalidCommand},
		{"WithHandler(the last reserved ID)", sched.WithHandler(sched.FirstUserCommand-1, h), sched.ErrInvalidCommand},
		{"WithHandler(FirstUserCommand-1)", sched.WithHandler(sched.FirstUserCommand-1, h), sched.ErrInvalidCommand},
		{"WithHandler(nil)", sched.WithHandler(cmdTest, nil), sched.ErrInvalidCommand},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			s, err := sched.New(tt.opt)
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

func TestProcesses(t *testing.T) {
	completions := make(chan sched.Completion, 1)
	s := newScheduler(t, sched.WithHandler(cmdTest, func(c sched.Call) error {
		completions <- c.Completion()
		return nil
	}))
	idle := submit(t, s, &probe{step: untilMessage})
	hb, err := s.Submit(context.Background(), &probe{step: yieldOnce(5, func(out *sched.StepOutput) {
		out.Yield(5, cmdTest, nil)
	})}, "fetch", nil)
	require.NoError(t, err)
	c := receive(t, completions, "the handler's call")

	info := waitState(t, s, idle.PID(), sched.StateIdle)
	assert.Equal(t, "run", info.Method)
	assert.Zero(t, info.Pending)
	assert.Zero(t, info.Queued)

	info = waitState(t, s, hb.PID(), sched.StateBlocked)
	assert.Equal(t, "fetch", info.Method)
	assert.Equal(t, 1, info.Pending)
	assert.Zero(t, info.Queued)

	dump := dumpState(s)
	assert.Contains(t, dump, idle.PID().String()+` method="run" state=Idle`)
	assert.Contains(t, dump, hb.PID().String()+` method="fetch" state=Blocked`)
	assert.Contains(t, dump, "pending=1")
	assert.Contains(t, dump, "stats:")

	require.NoError(t, c.Complete("data", nil))
	res, err := waitEnd(t, s, hb)
	require.NoError(t, err)
	assert.Equal(t, "data", res.Value())
	require.NoError(t, s.Tell(idle.PID(), 1))
	_, err = waitEnd(t, s, idle)
	require.NoError(t, err)
	eventually(t, "no process listed", func() bool { return len(s.Processes()) == 0 })
}

// TestProcessesOrder: Processes is documented as ordered by PID. PIDs
// whose IDs differ in their number of digits must still come in PID
// order, not in the order of their strings ("<0.10>" before "<0.9>").
func TestProcessesOrder(t *testing.T) {
	s := newScheduler(t)
	// Two failed Inits free the same table slot twice, so that the next
	// process there has a later generation, and twelve processes make
	// IDs of one and two digits in fresh slots.
	for range 2 {
		_, err := s.Submit(context.Background(), &probe{init: func(context.Context, string, payload.Payloads) error {
			return testError("x")
		}}, "run", nil)
		require.ErrorIs(t, err, sched.ErrInit)
	}
	var pids []relay.PID
	for range 12 {
		pids = append(pids, submit(t, s, &probe{step: untilCancel}).PID())
	}
	sort.Slice(pids, func(i, j int) bool {
		if pids[i].Node != pids[j].Node {
			return pids[i].Node < pids[j].Node
		}
		return pids[i].ID < pids[j].ID
	})
	var want, got []string
	for _, pid := range pids {
		want = append(want, pid.String())
	}
	for _, info := range s.Processes() {
		got = append(got, info.PID.String())
	}
	assert.Equal(t, want, got, "Processes order")
}

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
