package scheduler_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
)

// The rules of a process's life and end: each test is named after the rule
// it proves.

// TestCompletionReachesOnlyItsOwnYield: a completion made for one yield
// never completes a later yield that reuses its tag, through either a
// Completion or the Call it came from.
func TestCompletionReachesOnlyItsOwnYield(t *testing.T) {
	for _, via := range []string{"Completion", "Call"} {
		t.Run(via, func(t *testing.T) {
			calls := make(chan sched.Call, 2)
			s := tNewScheduler(t, sched.WithHandler(tCmd, func(c sched.Call) error {
				calls <- c
				return nil
			}))
			complete := func(c sched.Call, data any) error {
				if via == "Call" {
					return c.Complete(data, nil)
				}
				return c.Completion().Complete(data, nil)
			}
			p := &tProc{step: func(_ *tProc, n int, evs []sched.Event, out *sched.StepOutput) error {
				switch n {
				case 0, 1: // the first step, then the first completion: yield tag 1 (again)
					out.Yield(1, tCmd, nil)
				default:
					out.Done(payload.Of(evs[0].Data))
				}
				return nil
			}}
			h := tSubmit(t, s, p)
			first := tRecv(t, calls, "the first call")
			require.NoError(t, complete(first, "first"))
			second := tRecv(t, calls, "the second call, with the same tag")
			require.Equal(t, first.Tag, second.Tag)

			err := complete(first, "stale")
			require.ErrorIs(t, err, sched.ErrYieldNotPending, "the first yield's completion, used again")
			require.NoError(t, complete(second, "second"), "the second yield's own completion")

			res, err := tWait(t, s, h)
			require.NoError(t, err)
			assert.Equal(t, "second", res.Value())
			evs := p.EventsOf(sched.EventYieldComplete)
			require.Len(t, evs, 2, "one event per yield")
			assert.Equal(t, "first", evs[0].Data)
			assert.Equal(t, "second", evs[1].Data)
		})
	}
}
