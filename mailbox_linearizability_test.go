package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
)

// A bounded mailbox checked for linearizability: goroutines outside the
// scheduler Tell (or TellContext, which waits for room) one process
// whose mailbox holds two messages, under each policy, while the process
// reads them step by step. Each step's batch is a read of the whole
// mailbox, taking effect between the return of the previous step and
// the start of this one. Every history must be explained by the
// sequential bounded queue below.

const mboxCapacity = 2

type mboxOpKind uint8

const (
	mboxTell        mboxOpKind = iota
	mboxTellContext            // TellContext with a short deadline
	mboxRead                   // a step's batch
)

type mboxInput struct {
	kind mboxOpKind
	msg  byte // the message, numbered from 1, for Tell and TellContext
}

// mboxOutput is a Tell's outcome, or the messages a step read, oldest
// first, one byte each.
type mboxOutput struct {
	res  int // outOK, or one of the mbox* outcomes below
	read string
}

const (
	mboxFull    = -10 // ErrMailboxFull
	mboxDropped = -11 // ErrDropped
	mboxGaveUp  = -12 // the context's deadline passed
	mboxOther   = -13 // anything else: never legal
)

type mboxState struct {
	queue string // the queued messages, oldest first
}

func mboxModel(policy sched.MailboxPolicy) porcupine.Model {
	return porcupine.Model{
		Init: func() any { return mboxState{} },
		Step: func(state, input, output any) (bool, any) {
			s, in, out := state.(mboxState), input.(mboxInput), output.(mboxOutput)
			full := len(s.queue) == mboxCapacity
			switch in.kind {
			case mboxRead:
				return out.read == s.queue, mboxState{}
			case mboxTellContext:
				// It waits for room rather than apply the policy.
				switch out.res {
				case outOK:
					return !full, mboxState{s.queue + string(in.msg)}
				case mboxGaveUp:
					return full, s
				}
				return false, s
			}
			switch {
			case !full:
				return out.res == outOK, mboxState{s.queue + string(in.msg)}
			case policy == sched.MailboxReject:
				return out.res == mboxFull, s
			case policy == sched.MailboxDropNewest:
				return out.res == mboxDropped, s
			default: // MailboxDropOldest: the oldest makes room
				return out.res == outOK, mboxState{s.queue[1:] + string(in.msg)}
			}
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(mboxInput), output.(mboxOutput)
			res := map[int]string{outOK: "ok", mboxFull: "full", mboxDropped: "dropped",
				mboxGaveUp: "gave up", mboxOther: "other error"}[out.res]
			switch in.kind {
			case mboxTell:
				return fmt.Sprintf("Tell(%d) -> %s", in.msg, res)
			case mboxTellContext:
				return fmt.Sprintf("TellContext(%d) -> %s", in.msg, res)
			default:
				return fmt.Sprintf("step read %v", []byte(out.read))
			}
		},
	}
}

func mboxOutcome(err error) int {
	switch {
	case err == nil:
		return outOK
	case errors.Is(err, sched.ErrMailboxFull):
		return mboxFull
	case errors.Is(err, sched.ErrDropped):
		return mboxDropped
	case errors.Is(err, context.DeadlineExceeded):
		return mboxGaveUp
	}
	return mboxOther
}

// mboxMsg is a message of one history.
type mboxMsg struct {
	trial int
	id    byte
}

// mboxDead collects the messages of each history that went to the
// DeadLetter hook, and counts those a full mailbox dropped.
type mboxDead struct {
	mu      sync.Mutex
	byRun   map[int][]byte
	dropped map[int]uint64
}

func (d *mboxDead) add(dl sched.DeadLetter) {
	m, ok := dl.Message.Data.(mboxMsg)
	if !ok {
		return
	}
	d.mu.Lock()
	d.byRun[m.trial] = append(d.byRun[m.trial], m.id)
	if dl.Reason == sched.DeadDropped {
		d.dropped[m.trial]++
	}
	d.mu.Unlock()
}

func (d *mboxDead) of(trial int) ([]byte, uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.byRun[trial]), d.dropped[trial]
}

// mboxStatsRead is a read of the counter of a policy's refusals
// (Messages.Rejected under MailboxReject, Messages.Dropped under
// MailboxDropNewest) during a history, less its value at the start.
type mboxStatsRead struct {
	call, ret int64
	n         uint64
}

// refusals returns the counter of Stats that counts the refusals of
// policy, and the outcome of a Tell refused so.
func refusals(policy sched.MailboxPolicy, st sched.Stats) (uint64, int) {
	if policy == sched.MailboxDropNewest {
		return st.Messages.Dropped, mboxDropped
	}
	return st.Messages.Rejected, mboxFull
}

// runMailboxHistory submits a reader with a mailbox of mboxCapacity under
// policy, lets clients goroutines send opsEach messages each (or read
// Stats instead of some), ends the reader, and returns the history,
// every message accepted and read, and the reads of Stats.
func runMailboxHistory(t *testing.T, s *sched.Scheduler, policy sched.MailboxPolicy, trial, clients, opsEach int) (ops []porcupine.Operation, accepted, read []byte, stats []mboxStatsRead) {
	t.Helper()
	base, _ := refusals(policy, s.Stats())
	h := &nameHistory{}
	var lastEnd atomic.Int64 // the clock when the reader's last step returned
	var mu sync.Mutex        // guards read
	reader := stepFunc(func(evs []sched.Event, out *sched.StepOutput) error {
		call := lastEnd.Load()
		var got []byte
		cancelled := false
		for _, ev := range evs {
			switch {
			case ev.Type == sched.EventCancel:
				cancelled = true
			case ev.Type == sched.EventMessage && ev.Error == nil:
				got = append(got, ev.Data.(mboxMsg).id)
			}
		}
		h.record(clients, mboxInput{kind: mboxRead}, mboxOutput{read: string(got)}, call)
		mu.Lock()
		read = append(read, got...)
		mu.Unlock()
		if cancelled {
			out.Done(payload.Payload{})
		}
		// Give the senders a chance to fill the mailbox before the next read.
		for range 2 {
			runtime.Gosched()
		}
		lastEnd.Store(h.call())
		return nil
	})
	hd, err := s.Submit(context.Background(), reader, "run", nil, sched.Mailbox(mboxCapacity, policy))
	require.NoError(t, err)

	var ready, wg sync.WaitGroup
	var start atomic.Bool
	ready.Add(clients)
	var accMu sync.Mutex
	for c := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(trial), uint64(c)))
			ready.Done()
			for !start.Load() {
				runtime.Gosched()
			}
			for i := range opsEach {
				in := mboxInput{kind: mboxTell, msg: byte(1 + c*opsEach + i)}
				msg := mboxMsg{trial: trial, id: in.msg}
				if policy != sched.MailboxDropOldest && rng.IntN(5) == 0 {
					call := h.call()
					n, _ := refusals(policy, s.Stats())
					ret := h.call()
					accMu.Lock()
					stats = append(stats, mboxStatsRead{call: call, ret: ret, n: n - base})
					accMu.Unlock()
					continue
				}
				var err error
				call := h.call()
				if rng.IntN(3) == 0 {
					in.kind = mboxTellContext
					ctx, cancel := context.WithTimeout(context.Background(), 50*time.Microsecond)
					err = s.TellContext(ctx, hd.PID(), msg)
					cancel()
				} else {
					err = s.Tell(hd.PID(), msg)
				}
				h.record(c, in, mboxOutput{res: mboxOutcome(err)}, call)
				if err == nil {
					accMu.Lock()
					accepted = append(accepted, in.msg)
					accMu.Unlock()
				}
			}
		})
	}
	ready.Wait()
	start.Store(true)
	wg.Wait()
	require.NoError(t, s.Terminate(hd.PID()))
	_, err = waitEnd(t, s, hd)
	require.NoError(t, err)
	mu.Lock()
	defer mu.Unlock()
	return h.ops, accepted, slices.Clone(read), stats
}

// checkRefusalCounts checks that each read of Stats counted every
// refusal that returned before the read began, and none that began after
// it returned: a Tell counts its refusal before it returns.
func checkRefusalCounts(t *testing.T, trial int, refused int, ops []porcupine.Operation, stats []mboxStatsRead) {
	t.Helper()
	for _, st := range stats {
		var before, begun uint64
		for _, op := range ops {
			if op.Output.(mboxOutput).res != refused {
				continue
			}
			if op.Return < st.call {
				before++
			}
			if op.Call < st.ret {
				begun++
			}
		}
		require.True(t, before <= st.n && st.n <= begun,
			"trial %d: Stats read [%d,%d] counts %d refusals; %d had returned before it, %d had begun before it returned",
			trial, st.call, st.ret, st.n, before, begun)
	}
}

func describeMailboxHistory(m porcupine.Model, ops []porcupine.Operation) string {
	ops = slices.Clone(ops)
	slices.SortFunc(ops, func(a, b porcupine.Operation) int { return int(a.Call - b.Call) })
	var b strings.Builder
	for _, op := range ops {
		fmt.Fprintf(&b, "\n  [%d,%d] c%d %s", op.Call, op.Return, op.ClientId, m.DescribeOperation(op.Input, op.Output))
	}
	return b.String()
}

// TestMailboxLinearizable: short histories of senders and one reader of
// a bounded mailbox under each policy, each checked against a bounded
// queue; and every accepted message is read once or goes to the
// DeadLetter hook once (evicted, or unread at the end), never both.
// Stats, read one figure at a time and not at one instant, is not part
// of the model: a read of the refusals' counter during a history must
// count those that returned before it and none begun after it, and once
// the senders are done, Messages.Dropped counts every eviction.
func TestMailboxLinearizable(t *testing.T) {
	for _, policy := range []sched.MailboxPolicy{sched.MailboxReject, sched.MailboxDropNewest, sched.MailboxDropOldest} {
		t.Run(policy.String(), func(t *testing.T) {
			dead := &mboxDead{byRun: map[int][]byte{}, dropped: map[int]uint64{}}
			s := newScheduler(t, sched.WithHooks(sched.Hooks{DeadLetter: dead.add}))
			model := mboxModel(policy)
			trials := 300 * stressScale
			for trial := range trials {
				clients := 1 + trial%3
				before := s.Stats().Messages.Dropped
				ops, accepted, read, stats := runMailboxHistory(t, s, policy, trial, clients, 4)
				res, info := porcupine.CheckOperationsVerbose(model, ops, 10*time.Second)
				if res != porcupine.Ok {
					path := fmt.Sprintf("%s/mailbox-history-%d.html", t.TempDir(), trial)
					_ = porcupine.VisualizePath(model, info, path)
					require.Failf(t, "history not linearizable",
						"trial %d (%d senders): result %v; visualised in %s; operations:%s",
						trial, clients, res, path, describeMailboxHistory(model, ops))
				}
				letters, evicted := dead.of(trial)
				got := append(read, letters...)
				slices.Sort(got)
				slices.Sort(accepted)
				require.Equal(t, accepted, got, "trial %d: the messages accepted, against those read and dead-lettered", trial)
				_, refused := refusals(policy, sched.Stats{})
				checkRefusalCounts(t, trial, refused, ops, stats)
				if policy == sched.MailboxDropOldest {
					require.Equal(t, evicted, s.Stats().Messages.Dropped-before,
						"trial %d: Messages.Dropped, against the messages the DeadLetter hook got as dropped", trial)
				}
			}
		})
	}
}

// TestMailboxModelRejectsBadHistories makes sure the model can fail: a
// message read twice, and a full mailbox that accepted a third message
// under MailboxReject.
func TestMailboxModelRejectsBadHistories(t *testing.T) {
	tell := func(c int, msg byte, call, ret int64, res int) porcupine.Operation {
		return porcupine.Operation{ClientId: c, Input: mboxInput{kind: mboxTell, msg: msg}, Call: call, Output: mboxOutput{res: res}, Return: ret}
	}
	readOp := func(call, ret int64, got string) porcupine.Operation {
		return porcupine.Operation{ClientId: 9, Input: mboxInput{kind: mboxRead}, Call: call, Output: mboxOutput{read: got}, Return: ret}
	}
	twice := []porcupine.Operation{tell(0, 1, 1, 2, outOK), readOp(3, 4, "\x01"), readOp(5, 6, "\x01")}
	require.Equal(t, porcupine.Illegal, porcupine.CheckOperationsTimeout(mboxModel(sched.MailboxDropOldest), twice, time.Second))
	over := []porcupine.Operation{tell(0, 1, 1, 2, outOK), tell(0, 2, 3, 4, outOK), tell(0, 3, 5, 6, outOK)}
	require.Equal(t, porcupine.Illegal, porcupine.CheckOperationsTimeout(mboxModel(sched.MailboxReject), over, time.Second))
	require.Equal(t, porcupine.Ok, porcupine.CheckOperationsTimeout(mboxModel(sched.MailboxDropOldest), append(over, readOp(7, 8, "\x02\x03")), time.Second),
		"the model accepts the oldest dropped for the third")
}
