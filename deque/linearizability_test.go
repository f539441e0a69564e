package deque

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"
)

type opKind uint8

const (
	opPush opKind = iota
	opPop
	opSteal // a Steal, or one claim inside StealHalfInto
	opPushN // a PushBottomN of items
)

type dequeInput struct {
	kind  opKind
	item  byte   // pushed item; items are numbered from 1
	items string // PushBottomN's items, oldest first, one byte each
}

// dequeModel is the sequential specification. The state is the deque's
// contents as a string, top first, one byte per item, so states compare
// with ==. A steal that returns nothing may have lost a race and is allowed
// in any state; a pop that returns nothing must see an empty deque, because
// the owner loses the last item only to a thief that took it.
var dequeModel = porcupine.Model{
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(string), input.(dequeInput), output.(byte)
		switch in.kind {
		case opPush:
			return true, s + string(in.item)
		case opPushN:
			return true, s + in.items
		case opPop:
			if out == 0 {
				return s == "", s
			}
			return s != "" && s[len(s)-1] == out, s[:max(len(s)-1, 0)]
		default:
			if out == 0 {
				return true, s
			}
			return s != "" && s[0] == out, s[min(1, len(s)):]
		}
	},
	DescribeOperation: func(input, output any) string {
		in := input.(dequeInput)
		switch in.kind {
		case opPush:
			return fmt.Sprintf("push(%d)", in.item)
		case opPushN:
			return fmt.Sprintf("pushN(%v)", []byte(in.items))
		case opPop:
			return fmt.Sprintf("pop() -> %d", output)
		default:
			return fmt.Sprintf("steal() -> %d", output)
		}
	},
}

// historyRecorder time-stamps operations with a shared logical clock.
type historyRecorder struct {
	clock atomic.Int64
	mu    sync.Mutex
	ops   []porcupine.Operation
}

func (h *historyRecorder) record(client int, in dequeInput, call int64, out byte) {
	ret := h.clock.Add(1)
	h.mu.Lock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
	h.mu.Unlock()
}

func itemID(x *byte) byte {
	if x == nil {
		return 0
	}
	return *x
}

// runShortHistory runs one owner and some thieves against a fresh deque of
// capacity 2 for a handful of operations each and returns the history.
func runShortHistory(seed uint64, thieves, ownerOps, thiefOps int) []porcupine.Operation {
	d := New[byte](2)
	h := &historyRecorder{}
	items := make([]byte, ownerOps)
	for i := range items {
		items[i] = byte(i + 1)
	}
	var ready, wg sync.WaitGroup
	var start atomic.Bool
	ready.Add(thieves + 1)
	barrier := func() {
		ready.Done()
		for !start.Load() {
			runtime.Gosched()
		}
	}
	for c := 1; c <= thieves; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(c)))
			own := New[byte](2)
			barrier()
			for range thiefOps {
				if rng.UintN(2) == 0 {
					call := h.clock.Add(1)
					h.record(c, dequeInput{kind: opSteal}, call, itemID(d.Steal()))
					continue
				}
				var call int64
				d.stealHalfInto(own, func(x *byte, done bool) {
					if !done {
						call = h.clock.Add(1)
						return
					}
					h.record(c, dequeInput{kind: opSteal}, call, itemID(x))
				})
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(seed, 0))
		next := 0
		barrier()
		for range ownerOps {
			if k := 2 + rng.IntN(3); next+k <= len(items) && rng.UintN(5) == 0 {
				// Several at once: thieves must see all or none of them.
				xs := make([]*byte, k)
				for i := range xs {
					xs[i] = &items[next+i]
				}
				in := dequeInput{kind: opPushN, items: string(items[next : next+k])}
				call := h.clock.Add(1)
				d.PushBottomN(xs)
				next += k
				h.record(0, in, call, 0)
				continue
			}
			if next < len(items) && rng.UintN(5) < 3 {
				in := dequeInput{kind: opPush, item: items[next]}
				call := h.clock.Add(1)
				d.PushBottom(&items[next])
				next++
				h.record(0, in, call, 0)
				continue
			}
			call := h.clock.Add(1)
			h.record(0, dequeInput{kind: opPop}, call, itemID(d.PopBottom()))
		}
	}()
	ready.Wait()
	start.Store(true)
	wg.Wait()
	return h.ops
}

func TestLinearizableShortHistories(t *testing.T) {
	trials := 1500 * stressScale
	for trial := range trials {
		thieves := 1 + trial%3
		ops := runShortHistory(uint64(trial), thieves, 10, 5)
		res, info := porcupine.CheckOperationsVerbose(dequeModel, ops, 10*time.Second)
		if res != porcupine.Ok {
			// Unknown (timeout) is a failure to investigate, not a pass.
			path := fmt.Sprintf("%s/deque-history-%d.html", t.TempDir(), trial)
			_ = porcupine.VisualizePath(dequeModel, info, path)
			require.Failf(t, "history not linearizable",
				"trial %d (%d thieves): result %v; %d operations: %v", trial, thieves, res, len(ops), ops)
		}
	}
}

// TestLinearizabilityCheckerRejectsBadHistory makes sure the model can fail:
// an item popped twice is not linearizable.
func TestLinearizabilityCheckerRejectsBadHistory(t *testing.T) {
	ops := []porcupine.Operation{
		{ClientId: 0, Input: dequeInput{kind: opPush, item: 1}, Call: 1, Output: byte(0), Return: 2},
		{ClientId: 0, Input: dequeInput{kind: opPop}, Call: 3, Output: byte(1), Return: 6},
		{ClientId: 1, Input: dequeInput{kind: opSteal}, Call: 4, Output: byte(1), Return: 5},
	}
	require.Equal(t, porcupine.Illegal, porcupine.CheckOperationsTimeout(dequeModel, ops, time.Second))
}
