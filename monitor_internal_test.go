package scheduler

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// TestWatchedProcessKeepsNothingOfEndedWatchers: a long-lived process
// watched by many short-lived ones, which monitor it and end (and by
// requests that are answered), keeps no monitor entry for them.
func TestWatchedProcessKeepsNothingOfEndedWatchers(t *testing.T) {
	s := newScheduler(t)
	server, err := s.Submit(context.Background(), stepFunc(func(evs []Event, out *StepOutput) error {
		for _, ev := range evs {
			if req, ok := ev.Data.(Request); ok {
				out.Reply(req.ReplyTo, "ok", nil)
			}
			if ev.Type == EventCancel {
				out.Done(payload.Payload{})
			}
		}
		return nil
	}), "serve", nil)
	require.NoError(t, err)
	target := server.PID()
	for i := range 200 {
		h, err := s.Submit(context.Background(), numbered(func(n int, evs []Event, out *StepOutput) error {
			switch n {
			case 0:
				out.Monitor(1, target)
				out.Request(2, target, i)
			default:
				for _, ev := range evs {
					if ev.Tag == 2 {
						out.Done(ev.Result()) // ends, still monitoring
					}
				}
			}
			return nil
		}), "watch", nil)
		require.NoError(t, err)
		res, err := h.Wait(context.Background())
		require.NoError(t, err)
		require.Equal(t, "ok", res.Value())
	}
	p := s.table.lookup(target.ID)
	require.NotNil(t, p)
	p.mu.Lock()
	n := 0
	if x := p.live(); x != nil && x.monitors != nil {
		n = x.monitors.len()
	}
	p.mu.Unlock()
	require.Zero(t, n, "monitor entries left on the watched process")
	_ = relay.PID{}
}
