package scheduler_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// Tests of the process table (table.go): PIDs and their reuse.

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
