package main

import (
	"math"
	"runtime"
	"sync/atomic"
	"time"
)

// Before each round of a workload the harness measures how long a cache
// line takes to move from one core to another: two threads take turns
// writing a counter that each waits to see the other's write in, so every
// write waits for the line to come from the other thread's core. On a
// machine with cores in separate groups (separate last-level caches, or
// separate sockets), or a virtual machine whose cores the host places
// anew from time to time, the figure changes with where the two threads
// land, and a workload that moves lines between cores for every
// operation changes with it: on the 2-core virtual machine where the
// published figures were taken it was 25-35 ns in spells of seconds to
// minutes and 155-175 ns in others, and a million starts from outside
// the workers took 1.75x as long in the slow spells as in the fast ones,
// where the pond pool's tasks took 1.15x.
// Each result carries the figure of its round, and the report says how
// many rounds of each workload ran in slow spells, so that a ratio is
// read with the machine it was measured on.

// transferTurns bounds a measurement: this many moves of the line take
// 6 ms at 30 ns and 35 ms at 175 ns.
const transferTurns = 200_000

// transferLimit bounds a measurement in time, for a machine where the
// two threads share one core and each turn waits for the operating
// system to switch between them.
const transferLimit = 100 * time.Millisecond

// transferTries is how many measurements make one figure: the least of
// them, since anything else the machine does meanwhile can only make a
// move look slower.
const transferTries = 3

// measureTransfer returns the time a cache line takes to move between
// the cores of two threads, in nanoseconds per one-way move: the least
// of transferTries measurements (see measureTransferOnce). It returns 0
// on a machine with one logical CPU or one processor for Go, where there
// is no second core to move a line to. Called by the harness between
// runs, never while one runs.
func measureTransfer() float64 {
	if runtime.NumCPU() < 2 || runtime.GOMAXPROCS(0) < 2 {
		return 0
	}
	least := math.Inf(1)
	for range transferTries {
		least = min(least, measureTransferOnce())
	}
	return least
}

// measureTransferOnce measures over transferTurns moves or about
// transferLimit, whichever ends first. Called by measureTransfer.
func measureTransferOnce() float64 {
	// turn is the counter: this goroutine (the initiator) writes odd
	// values, the responder even ones, each after it has seen the
	// other's, and the initiator writes -1 when it is done, which ends
	// the responder. An atomic: each side's loads synchronise with the
	// other's stores.
	var turn atomic.Int64
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer close(done)
		for i := int64(1); ; i += 2 {
			for t := turn.Load(); t != i; t = turn.Load() {
				if t < 0 {
					return
				}
			}
			turn.Store(i + 1)
		}
	}()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// The first turn is not timed: the responder may still be starting.
	turn.Store(1)
	for turn.Load() != 2 {
	}
	start := time.Now()
	i := int64(2)
	for i < transferTurns {
		turn.Store(i + 1)
		for turn.Load() != i+2 {
		}
		i += 2
		if i%128 == 0 && time.Since(start) > transferLimit {
			break
		}
	}
	elapsed := time.Since(start)
	turn.Store(-1)
	<-done
	return float64(elapsed.Nanoseconds()) / float64(i-2) // two moves a turn
}
