package remote_test

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	scheduler "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// streamResult is what a stream receiver ends with.
type streamResult struct {
	got        int
	violations []string
}

// tStreamReceiver submits a process that expects want numbered messages
// and checks that each sender's numbers only grow; it ends with a
// streamResult when it has them all.
func tStreamReceiver(t testing.TB, s *scheduler.Scheduler, want int) scheduler.Handle {
	last := map[relay.PID]uint64{}
	var res streamResult
	return tSubmit(t, s, func(_ *tProc, _ int, evs []scheduler.Event, out *scheduler.StepOutput) error {
		for _, ev := range evs {
			if ev.Type != scheduler.EventMessage {
				continue
			}
			seq := binary.BigEndian.Uint64(ev.Data.([]byte))
			if prev, ok := last[ev.From]; ok && seq <= prev {
				res.violations = append(res.violations, fmt.Sprintf("from %v: %d after %d", ev.From, seq, prev))
			}
			last[ev.From] = seq
			res.got++
		}
		if res.got >= want {
			out.Done(payload.Of(res))
		}
		return nil
	})
}

// tStreamSender submits a process that sends n numbered messages, 64 per
// step, the i-th to to[i%len(to)], and ends with the events that came
// back to it.
func tStreamSender(t testing.TB, s *scheduler.Scheduler, to []relay.PID, n int) scheduler.Handle {
	var back []scheduler.Event
	next := 0
	return tSubmit(t, s, func(_ *tProc, _ int, evs []scheduler.Event, out *scheduler.StepOutput) error {
		back = append(back, evs...)
		for k := 0; k < 64 && next < n; k++ {
			out.Tell(to[next%len(to)], binary.BigEndian.AppendUint64(nil, uint64(next)))
			next++
		}
		if next < n {
			out.Continue()
		} else {
			out.Done(payload.Of(back))
		}
		return nil
	})
}

func TestStreamExactlyOnceInOrder(t *testing.T) {
	senders, receivers, perSender := 16, 8, 2048
	if testing.Short() {
		perSender = 256
	}
	_, a, b := tTwoNodes(t, nil)

	var to []relay.PID
	var recv []scheduler.Handle
	for range receivers {
		h := tStreamReceiver(t, b.S, senders*perSender/receivers)
		recv = append(recv, h)
		to = append(to, h.PID())
	}
	var send []scheduler.Handle
	for range senders {
		send = append(send, tStreamSender(t, a.S, to, perSender))
	}
	for _, h := range send {
		res, err := tWaitResult(t, h)
		require.NoError(t, err)
		assert.Empty(t, res.Value(), "no message came back to sender %v", h.PID())
	}
	for _, h := range recv {
		res, err := tWaitResult(t, h)
		require.NoError(t, err)
		r := res.Value().(streamResult)
		assert.Equal(t, senders*perSender/receivers, r.got, "receiver %v", h.PID())
		assert.Empty(t, r.violations, "receiver %v", h.PID())
	}
	// Nothing more arrives: every receiver has ended, so an extra
	// message would bounce, and none did.
	total := uint64(senders * perSender)
	sa, sb := a.Stats(), b.Stats()
	assert.Equal(t, total, sb.Received, "frames received by b")
	assert.Equal(t, total, sa.Sent, "frames sent by a")
	assert.Zero(t, sb.Gaps+sb.Dropped.Duplicate+sb.Dropped.Malformed)
	assert.LessOrEqual(t, sa.BatchesSent, sb.BatchesReceived, "every batch arrived (sync markers count on arrival too)")
	t.Logf("%d messages in %d batches", total, sa.BatchesSent)
}
