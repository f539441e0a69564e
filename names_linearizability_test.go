package scheduler_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/relay"
)

// The name registry checked for linearizability: several goroutines
// register, unregister, look up and send by a few names, for a few
// processes, while some of those processes end. Every history must be
// explained by some order of its operations, each taking effect at one
// instant between its call and its return, applied to the sequential
// registry below. A process's end is an operation too: its call is the
// Terminate that asks for it and its return is the Handle reporting it,
// and at the instant it takes effect the process stops being live and
// its names are released.

const (
	linNames = 2 // names per history
	linProcs = 3 // processes per history; indexed from 1, 0 is none
)

type nameOpKind uint8

const (
	nameRegister nameOpKind = iota
	nameUnregister
	nameLookup
	nameTellName
	nameEnd // a process's end: Terminate, then its Handle's Done
)

type nameInput struct {
	kind nameOpKind
	name int // index of the name, for all but nameEnd
	proc int // the process, for nameRegister and nameEnd
}

// Outcomes, for all operations but Lookup, whose output is the index of
// the process it found (0 for ErrNameNotFound).
const (
	outOK           = 0
	outTaken        = -1 // ErrNameTaken
	outProcNotFound = -2 // ErrProcessNotFound, and not ErrNameNotFound
	outNameNotFound = -3 // ErrNameNotFound
	outOther        = -4 // anything else: never legal
)

// nameState is the registry: who holds each name, and which processes
// have ended. It is comparable, as porcupine's default equality needs.
type nameState struct {
	holder [linNames]int
	ended  [linProcs + 1]bool
}

// nameModel is the sequential registry as Register, Unregister, Lookup
// and TellName document it, with the end releasing the process's names.
var nameModel = porcupine.Model{
	Init: func() any { return nameState{} },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(nameState), input.(nameInput), output.(int)
		switch in.kind {
		case nameRegister:
			h := s.holder[in.name]
			switch out {
			case outOK:
				if s.ended[in.proc] || h != 0 && h != in.proc {
					return false, s
				}
				s.holder[in.name] = in.proc
				return true, s
			case outTaken:
				return h != 0 && h != in.proc, s
			case outProcNotFound:
				return s.ended[in.proc], s
			}
			return false, s
		case nameUnregister:
			switch out {
			case outOK:
				if s.holder[in.name] == 0 {
					return false, s
				}
				s.holder[in.name] = 0
				return true, s
			case outNameNotFound:
				return s.holder[in.name] == 0, s
			}
			return false, s
		case nameLookup:
			return s.holder[in.name] == out, s
		case nameTellName:
			switch out {
			case outOK:
				return s.holder[in.name] != 0, s
			case outNameNotFound:
				return s.holder[in.name] == 0, s
			}
			return false, s
		default: // nameEnd
			s.ended[in.proc] = true
			for n, h := range s.holder {
				if h == in.proc {
					s.holder[n] = 0
				}
			}
			return true, s
		}
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(nameInput), output.(int)
		res := map[int]string{outOK: "ok", outTaken: "taken", outProcNotFound: "no process",
			outNameNotFound: "no name", outOther: "other error"}[out]
		switch in.kind {
		case nameRegister:
			return fmt.Sprintf("Register(n%d, p%d) -> %s", in.name, in.proc, res)
		case nameUnregister:
			return fmt.Sprintf("Unregister(n%d) -> %s", in.name, res)
		case nameLookup:
			if out == 0 {
				return fmt.Sprintf("Lookup(n%d) -> no name", in.name)
			}
			return fmt.Sprintf("Lookup(n%d) -> p%d", in.name, out)
		case nameTellName:
			return fmt.Sprintf("TellName(n%d) -> %s", in.name, res)
		default:
			return fmt.Sprintf("end(p%d)", in.proc)
		}
	},
}

// nameOutcome classifies an error of the registry's calls.
func nameOutcome(err error) int {
	switch {
	case err == nil:
		return outOK
	case errors.Is(err, sched.ErrNameNotFound):
		return outNameNotFound
	case errors.Is(err, sched.ErrNameTaken):
		return outTaken
	case errors.Is(err, sched.ErrProcessNotFound):
		return outProcNotFound
	}
	return outOther
}

// nameHistory is a history being recorded, on a shared logical clock.
// The mailbox's histories are recorded with it too.
type nameHistory struct {
	clock atomic.Int64
	mu    sync.Mutex
	ops   []porcupine.Operation
}

func (h *nameHistory) call() int64 { return h.clock.Add(1) }

func (h *nameHistory) record(client int, in, out any, call int64) {
	ret := h.clock.Add(1)
	h.mu.Lock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
	h.mu.Unlock()
}

// runNameHistory starts linProcs processes that end when terminated,
// lets clients goroutines make opsEach random calls each on the names
// prefix+"0" .. prefix+"1", starting together, and returns the history.
// Every process has ended when it returns, so no name of prefix is left.
func runNameHistory(t *testing.T, s *sched.Scheduler, seed uint64, prefix string, clients, opsEach int) []porcupine.Operation {
	t.Helper()
	hs := make([]sched.Handle, linProcs+1)
	index := make(map[relay.PID]int, linProcs)
	for i := 1; i <= linProcs; i++ {
		// Close yields a few times, so that other calls land while the
		// process has ended but is not yet closed.
		hs[i] = submit(t, s, &probe{step: untilCancel, close: func() {
			for range 3 {
				runtime.Gosched()
			}
		}})
		index[hs[i].PID()] = i
	}
	name := func(n int) string { return fmt.Sprint(prefix, n) }
	h := &nameHistory{}
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
			for range opsEach {
				in := nameInput{name: rng.IntN(linNames), proc: 1 + rng.IntN(linProcs)}
				switch r := rng.IntN(20); {
				case r < 7:
					in.kind = nameRegister
					call := h.call()
					err := s.Register(name(in.name), hs[in.proc].PID())
					h.record(c, in, nameOutcome(err), call)
				case r < 10:
					in.kind = nameUnregister
					call := h.call()
					err := s.Unregister(name(in.name))
					h.record(c, in, nameOutcome(err), call)
				case r < 14:
					in.kind = nameLookup
					call := h.call()
					pid, err := s.Lookup(name(in.name))
					out := 0
					if err == nil {
						if out = index[pid]; out == 0 {
							out = outOther // a PID that is none of ours
						}
					} else if !errors.Is(err, sched.ErrNameNotFound) {
						out = outOther
					}
					h.record(c, in, out, call)
				case r < 17:
					in.kind = nameTellName
					call := h.call()
					err := s.TellName(name(in.name), "hello")
					h.record(c, in, nameOutcome(err), call)
				default:
					in.kind = nameEnd
					call := h.call()
					_ = s.Terminate(hs[in.proc].PID()) // ended already: not an error here
					select {
					case <-hs[in.proc].Done():
					case <-time.After(testTimeout):
						failures <- fmt.Sprintf("p%d did not end within %v of its Terminate", in.proc, testTimeout)
						return
					}
					h.record(c, in, outOK, call)
				}
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
	for _, hd := range hs[1:] {
		_ = s.Terminate(hd.PID())
		_, err := waitEnd(t, s, hd)
		require.NoError(t, err)
	}
	return h.ops
}

// describeHistory lists ops by call time, for a failure message.
func describeHistory(ops []porcupine.Operation) string {
	var b strings.Builder
	for _, op := range ops {
		fmt.Fprintf(&b, "\n  [%d,%d] c%d %s", op.Call, op.Return, op.ClientId, nameModel.DescribeOperation(op.Input, op.Output))
	}
	return b.String()
}

// TestNamesLinearizable: short histories of concurrent registry calls
// and process ends, each checked against the sequential registry.
func TestNamesLinearizable(t *testing.T) {
	s := newScheduler(t)
	trials := 1000 * stressScale
	for trial := range trials {
		clients := 2 + trial%3
		ops := runNameHistory(t, s, uint64(trial), fmt.Sprintf("t%d-n", trial), clients, 6)
		res, info := porcupine.CheckOperationsVerbose(nameModel, ops, 10*time.Second)
		if res != porcupine.Ok {
			// Unknown (the check timed out) is a failure to look into, not a pass.
			path := fmt.Sprintf("%s/names-history-%d.html", t.TempDir(), trial)
			_ = porcupine.VisualizePath(nameModel, info, path)
			require.Failf(t, "history not linearizable",
				"trial %d (%d clients): result %v; visualised in %s; operations:%s",
				trial, clients, res, path, describeHistory(ops))
		}
	}
}

// TestNameModelRejectsBadHistories makes sure the model can fail: a name
// found after its holder's end returned, and a registration refused as
// taken for a name nobody holds.
func TestNameModelRejectsBadHistories(t *testing.T) {
	foundAfterEnd := []porcupine.Operation{
		{ClientId: 0, Input: nameInput{kind: nameRegister, name: 0, proc: 1}, Call: 1, Output: outOK, Return: 2},
		{ClientId: 0, Input: nameInput{kind: nameEnd, proc: 1}, Call: 3, Output: outOK, Return: 4},
		{ClientId: 1, Input: nameInput{kind: nameLookup, name: 0}, Call: 5, Output: 1, Return: 6},
	}
	require.Equal(t, porcupine.Illegal, porcupine.CheckOperationsTimeout(nameModel, foundAfterEnd, time.Second))
	takenFree := []porcupine.Operation{
		{ClientId: 0, Input: nameInput{kind: nameRegister, name: 1, proc: 2}, Call: 1, Output: outTaken, Return: 2},
	}
	require.Equal(t, porcupine.Illegal, porcupine.CheckOperationsTimeout(nameModel, takenFree, time.Second))
	concurrent := []porcupine.Operation{
		{ClientId: 0, Input: nameInput{kind: nameRegister, name: 0, proc: 1}, Call: 1, Output: outOK, Return: 4},
		{ClientId: 1, Input: nameInput{kind: nameLookup, name: 0}, Call: 2, Output: 0, Return: 3},
		{ClientId: 2, Input: nameInput{kind: nameEnd, proc: 1}, Call: 2, Output: outOK, Return: 6},
		{ClientId: 1, Input: nameInput{kind: nameTellName, name: 0}, Call: 5, Output: outNameNotFound, Return: 7},
	}
	require.Equal(t, porcupine.Ok, porcupine.CheckOperationsTimeout(nameModel, concurrent, time.Second),
		"the model accepts a legal concurrent history")
}
