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

// A process's Handle checked for linearizability against Terminate, Tell
// and the process's own end. As the docs give it, the end comes in two
// stages: from the return of the final step the process is gone
// (Terminate and Tell refuse it with ErrProcessNotFound), and later,
// once its Close has returned, its Handle reports the end (Done is
// closed, Result and Wait give the result). Both are operations of the
// history: the first between the start of the final step and the start
// of Close, the second from the return of Close to the end of the
// history. The process ends with "terminated" at its cancel or with
// "finished" at a message, whichever its step reads first.

type handleOpKind uint8

const (
	handleTerminate handleOpKind = iota
	handleTell                   // Tell "finish"
	handleResult
	handleDone     // whether Done is closed, without waiting
	handleWaitNow  // Wait with a context that is done already
	handleWait     // Wait with a context that is not done
	handleGone     // the process is gone: the final step returned
	handleReported // the Handle reports the end
)

type handleInput struct {
	kind   handleOpKind
	reason string // handleGone: "terminated" or "finished"
}

// handleOutput is what a call returned: res is outOK or outProcNotFound
// for Terminate and Tell; for the Handle's calls, ended says whether it
// reported the end and result is the result it gave.
type handleOutput struct {
	res    int
	ended  bool
	result string
}

type handleState struct {
	terminated, told bool   // a Terminate, a Tell was accepted
	gone, reported   bool   // the two stages of the end
	reason           string // the result, once gone
}

var handleModel = porcupine.Model{
	Init: func() any { return handleState{} },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(handleState), input.(handleInput), output.(handleOutput)
		switch in.kind {
		case handleTerminate, handleTell:
			if out.res == outProcNotFound {
				return s.gone, s
			}
			if out.res != outOK || s.gone {
				return false, s
			}
			if in.kind == handleTerminate {
				s.terminated = true
			} else {
				s.told = true
			}
			return true, s
		case handleGone:
			ok := !s.gone && (in.reason == "terminated" && s.terminated || in.reason == "finished" && s.told)
			s.gone, s.reason = true, in.reason
			return ok, s
		case handleReported:
			ok := s.gone && !s.reported
			s.reported = true
			return ok, s
		case handleWait:
			return s.reported && out.ended && out.result == s.reason, s
		default: // Result, Done, WaitNow
			if !out.ended {
				return !s.reported, s
			}
			return s.reported && (in.kind == handleDone || out.result == s.reason), s
		}
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(handleInput), output.(handleOutput)
		res := "ok"
		if out.res == outProcNotFound {
			res = "no process"
		} else if out.res != outOK {
			res = "other error"
		}
		ended := "not ended"
		if out.ended {
			ended = "ended: " + out.result
		}
		switch in.kind {
		case handleTerminate:
			return "Terminate -> " + res
		case handleTell:
			return "Tell(finish) -> " + res
		case handleResult:
			return "Result -> " + ended
		case handleDone:
			return "Done closed -> " + fmt.Sprint(out.ended)
		case handleWaitNow:
			return "Wait(done ctx) -> " + ended
		case handleWait:
			return "Wait -> " + ended
		case handleGone:
			return "gone: " + in.reason
		default:
			return "reported"
		}
	},
}

// ender is the process of a Handle history: it ends at its cancel or at
// a message, and records its end's two stages.
type ender struct {
	h          *nameHistory
	client     int
	finalStart int64  // the clock at the start of the final step
	reason     string // why it ended
	closed     int64  // the clock when Close was about to return
}

func (e *ender) Init(context.Context, string, payload.Payloads) error { return nil }

func (e *ender) Step(evs []sched.Event, out *sched.StepOutput) error {
	start := e.h.call()
	for _, ev := range evs {
		switch {
		case ev.Type == sched.EventCancel:
			e.reason = "terminated"
		case ev.Type == sched.EventMessage && ev.Error == nil:
			e.reason = "finished"
		default:
			continue
		}
		e.finalStart = start
		out.Done(payload.Of(e.reason))
		return nil
	}
	return nil
}

func (e *ender) Close() {
	// The end's first stage took effect before Close began.
	e.h.record(e.client, handleInput{kind: handleGone, reason: e.reason}, handleOutput{}, e.finalStart)
	for range 2 {
		runtime.Gosched() // a window for the calls that race the report
	}
	e.closed = e.h.call()
}

func handleResultOf(res payload.Payload, err error) handleOutput {
	switch {
	case err == nil:
		s, _ := res.Value().(string)
		return handleOutput{ended: true, result: s}
	case errors.Is(err, sched.ErrNotEnded), errors.Is(err, context.Canceled):
		return handleOutput{}
	}
	return handleOutput{ended: true, result: "error: " + err.Error()}
}

// runHandleHistory submits an ender and lets clients goroutines make
// opsEach calls each; client 0 never blocks and ends with a Terminate,
// so that the others' Waits return.
func runHandleHistory(t *testing.T, s *sched.Scheduler, seed uint64, clients, opsEach int) []porcupine.Operation {
	t.Helper()
	h := &nameHistory{}
	e := &ender{h: h, client: clients}
	hd := submit(t, s, e)
	done, cancel := context.WithCancel(context.Background())
	cancel()
	var ready, wg sync.WaitGroup
	var start atomic.Bool
	ready.Add(clients)
	failures := make(chan string, clients)
	for c := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(c)))
			ready.Done()
			for !start.Load() {
				runtime.Gosched()
			}
			for i := range opsEach {
				kind := handleOpKind(rng.IntN(6))
				if c == 0 && kind == handleWait {
					kind = handleResult
				}
				if c == 0 && i == opsEach-1 {
					kind = handleTerminate
				}
				in := handleInput{kind: kind}
				var out handleOutput
				call := h.call()
				switch kind {
				case handleTerminate:
					out.res = nameOutcome(s.Terminate(hd.PID()))
				case handleTell:
					out.res = nameOutcome(s.Tell(hd.PID(), "finish"))
				case handleResult:
					out = handleResultOf(hd.Result())
				case handleDone:
					out.ended = isClosed(hd.Done())
				case handleWaitNow:
					out = handleResultOf(hd.Wait(done))
				case handleWait:
					ctx, stop := context.WithTimeout(context.Background(), testTimeout)
					res, err := hd.Wait(ctx)
					stop()
					if errors.Is(err, context.DeadlineExceeded) {
						failures <- fmt.Sprintf("Wait: the process did not end within %v", testTimeout)
						return
					}
					out = handleResultOf(res, err)
				}
				h.record(c, in, out, call)
			}
		})
	}
	ready.Wait()
	start.Store(true)
	wg.Wait()
	close(failures)
	for f := range failures {
		t.Fatal(f)
	}
	_, err := waitEnd(t, s, hd)
	require.NoError(t, err)
	h.record(clients, handleInput{kind: handleReported}, handleOutput{}, e.closed)
	return h.ops
}

// TestHandleLinearizable: short histories of a Handle's calls, Terminate
// and Tell racing the process's own end, each checked against the two
// stages of the end.
func TestHandleLinearizable(t *testing.T) {
	s := newScheduler(t)
	trials := 1000 * stressScale
	for trial := range trials {
		clients := 2 + trial%2
		ops := runHandleHistory(t, s, uint64(trial), clients, 4)
		res, info := porcupine.CheckOperationsVerbose(handleModel, ops, 10*time.Second)
		if res != porcupine.Ok {
			path := fmt.Sprintf("%s/handle-history-%d.html", t.TempDir(), trial)
			_ = porcupine.VisualizePath(handleModel, info, path)
			ops = slices.Clone(ops)
			slices.SortFunc(ops, func(a, b porcupine.Operation) int { return int(a.Call - b.Call) })
			var b strings.Builder
			for _, op := range ops {
				fmt.Fprintf(&b, "\n  [%d,%d] c%d %s", op.Call, op.Return, op.ClientId, handleModel.DescribeOperation(op.Input, op.Output))
			}
			require.Failf(t, "history not linearizable",
				"trial %d (%d clients): result %v; visualised in %s; operations:%s", trial, clients, res, path, b.String())
		}
	}
}

// TestHandleModelRejectsBadHistories makes sure the model can fail: a
// Result that reports the end before the process was gone, and a
// Terminate accepted after a Tell was refused.
func TestHandleModelRejectsBadHistories(t *testing.T) {
	op := func(c int, in handleInput, out handleOutput, call, ret int64) porcupine.Operation {
		return porcupine.Operation{ClientId: c, Input: in, Output: out, Call: call, Return: ret}
	}
	early := []porcupine.Operation{
		op(0, handleInput{kind: handleTerminate}, handleOutput{}, 1, 2),
		op(0, handleInput{kind: handleResult}, handleOutput{ended: true, result: "terminated"}, 3, 4),
		op(1, handleInput{kind: handleGone, reason: "terminated"}, handleOutput{}, 5, 6),
		op(1, handleInput{kind: handleReported}, handleOutput{}, 7, 8),
	}
	require.Equal(t, porcupine.Illegal, porcupine.CheckOperationsTimeout(handleModel, early, time.Second))
	late := []porcupine.Operation{
		op(0, handleInput{kind: handleTell}, handleOutput{}, 1, 2),
		op(1, handleInput{kind: handleGone, reason: "finished"}, handleOutput{}, 3, 8),
		op(0, handleInput{kind: handleTell}, handleOutput{res: outProcNotFound}, 4, 5),
		op(0, handleInput{kind: handleTerminate}, handleOutput{}, 6, 7),
		op(1, handleInput{kind: handleReported}, handleOutput{}, 9, 10),
	}
	require.Equal(t, porcupine.Illegal, porcupine.CheckOperationsTimeout(handleModel, late, time.Second))
	late[3].Output = handleOutput{res: outProcNotFound}
	require.Equal(t, porcupine.Ok, porcupine.CheckOperationsTimeout(handleModel, late, time.Second),
		"the model accepts the Terminate refused")
}
