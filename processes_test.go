package scheduler_test

import (
	"context"
	"sort"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// Tests of the process listing (processes.go).

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

// TestProcessesBetweenInitAndClose: Processes lists a process only once
// its Init has returned and until its Close is called, while Stats counts
// it in Live from the start of its Init to the end of its Close, as their
// docs say. Init and Close are each held on a channel, which the cleanup
// releases if the test fails first.
func TestProcessesBetweenInitAndClose(t *testing.T) {
	s := newScheduler(t)
	inInit, inClose := make(chan relay.PID, 1), make(chan struct{}, 1)
	initHeld, closeHeld := make(chan struct{}), make(chan struct{})
	releaseInit := sync.OnceFunc(func() { close(initHeld) })
	releaseClose := sync.OnceFunc(func() { close(closeHeld) })
	t.Cleanup(releaseInit)
	t.Cleanup(releaseClose)
	p := &probe{
		init: func(ctx context.Context, _ string, _ payload.Payloads) error {
			self, _ := sched.Self(ctx)
			inInit <- self
			<-initHeld
			return nil
		},
		step: untilMessage,
		close: func() {
			inClose <- struct{}{}
			<-closeHeld
		},
	}
	type submitted struct {
		h   sched.Handle
		err error
	}
	started := make(chan submitted, 1)
	go func() {
		h, err := s.Submit(context.Background(), p, "run", nil)
		started <- submitted{h, err}
	}()

	pid := receive(t, inInit, "the Init")
	assert.Equal(t, int64(1), s.Stats().Processes.Live, "Live while Init runs")
	_, listed := findProcess(s, pid)
	assert.False(t, listed, "listed while Init runs%s", dumpState(s))

	releaseInit()
	r := receive(t, started, "Submit to return")
	require.NoError(t, r.err)
	require.Equal(t, pid, r.h.PID())
	assert.Equal(t, int64(1), s.Stats().Processes.Live, "Live once Init has returned")
	_, listed = findProcess(s, pid)
	assert.True(t, listed, "listed once Init has returned%s", dumpState(s))

	require.NoError(t, s.Tell(pid, "end"))
	receive(t, inClose, "the Close")
	assert.Equal(t, int64(1), s.Stats().Processes.Live, "Live while Close runs")
	_, listed = findProcess(s, pid)
	assert.False(t, listed, "listed while Close runs%s", dumpState(s))

	releaseClose()
	_, err := waitEnd(t, s, r.h)
	require.NoError(t, err)
	assert.Zero(t, s.Stats().Processes.Live, "Live once the end is reported")
	assert.Empty(t, s.Processes())
}
