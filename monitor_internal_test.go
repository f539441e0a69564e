package scheduler

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// stepFunc is a process made of a step function.
type stepFunc func(n int, evs []Event, out *StepOutput) error

type funcProc struct {
	step stepFunc
	n    int
}

func (f *funcProc) Init(context.Context, string, payload.Payloads) error { return nil }
func (f *funcProc) Step(evs []Event, out *StepOutput) error {
	n := f.n
	f.n++
	return f.step(n, evs, out)
}
func (f *funcProc) Close() {}

// TestWatchedProcessKeepsNothingOfEndedWatchers: a long-lived process
// watched by many short-lived ones, which monitor it and end (and by
// requests that are answered), keeps no monitor entry for them.
func TestWatchedProcessKeepsNothingOfEndedWatchers(t *testing.T) {
	s, err := New()
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Shutdown(context.Background())) }()
	server, err := s.Submit(context.Background(), &funcProc{step: func(_ int, evs []Event, out *StepOutput) error {
		for _, ev := range evs {
			if req, ok := ev.Data.(Request); ok {
				out.Reply(req.ReplyTo, "ok", nil)
			}
			if ev.Type == EventCancel {
				out.Done(payload.Payload{})
			}
		}
		return nil
	}}, "serve", nil)
	require.NoError(t, err)
	target := server.PID()
	for i := range 200 {
		h, err := s.Submit(context.Background(), &funcProc{step: func(n int, evs []Event, out *StepOutput) error {
			switch n {
			case 0:
				out.Monitor(1, target)
				out.Request(2, target, i)
			default:
				for _, ev := range evs {
					if ev.Tag == 2 {
						out.Done(payload.Of(ev.Data)) // ends, still monitoring
					}
				}
			}
			return nil
		}}, "watch", nil)
		require.NoError(t, err)
		res, err := h.Wait(context.Background())
		require.NoError(t, err)
		require.Equal(t, "ok", res.Value())
	}
	p := s.table.lookup(target.ID)
	require.NotNil(t, p)
	p.mu.Lock()
	n := 0
	if x := p.extra.Load(); x != nil && x.monitors != nil {
		n = x.monitors.len()
	}
	p.mu.Unlock()
	require.Zero(t, n, "monitor entries left on the watched process")
	_ = relay.PID{}
}
