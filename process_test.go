package scheduler_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
)

// Tests of the Process interface and its StepOutput (process.go).

// TestDoneIsFinal: a step that calls Done ends the process whatever it
// writes after, Continue and yields included.
func TestDoneIsFinal(t *testing.T) {
	for _, after := range []struct {
		name  string
		write func(out *sched.StepOutput)
	}{
		{"Continue", func(out *sched.StepOutput) { out.Continue() }},
		{"a yield", func(out *sched.StepOutput) { out.Sleep(1, time.Hour) }},
		{"Continue and a yield", func(out *sched.StepOutput) { out.Yield(2, cmdTest, nil); out.Continue() }},
	} {
		t.Run(after.name, func(t *testing.T) {
			s := newScheduler(t)
			p := &probe{step: func(_ *probe, _ int, _ []sched.Event, out *sched.StepOutput) error {
				out.Done(payload.Of("result"))
				after.write(out)
				return nil
			}}
			res, err := waitEnd(t, s, submit(t, s, p))
			require.NoError(t, err)
			assert.Equal(t, "result", res.Value())
			assert.Equal(t, 1, p.Steps())
			requireLifecycle(t, p)
		})
	}
}
