package scheduler

import "github.com/procsched/scheduler/relay"

// Exported for the external test package's benchmarks.
var WithoutFairness = withoutFairness

// SendersWaitForRoom reports whether a SendContext or TellContext waits
// for room in pid's full mailbox now: the mark a waiting sender leaves
// under the process's lock, which the next drain clears as it wakes the
// senders. It lets a test wait until a sender is known to be waiting
// instead of hoping that it is. Any goroutine.
func SendersWaitForRoom(s *Scheduler, pid relay.PID) bool {
	p := s.table.lookup(pid.ID)
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.flags&pfRoomWaiters != 0
}

// NextPIDOfSlot returns the PID that the next process in pid's slot of
// the process table gets: the same slot, the next generation. It lets a
// test send to a process that may not have started yet, as a guess would.
// Any goroutine.
func NextPIDOfSlot(pid relay.PID) relay.PID {
	return relay.PID{Node: pid.Node, ID: makeID(slotOf(pid.ID), genOf(pid.ID)+1)}
}

// WatchersOf reports how many monitors the live process pid keeps: those
// of processes' Monitor and Request yields, and those of
// Scheduler.Monitor. It lets a test check that a process keeps nothing
// of the monitors stopped or cancelled, or of watchers that ended. Any
// goroutine.
func WatchersOf(s *Scheduler, pid relay.PID) (yields, outside int) {
	p := s.table.lookup(pid.ID)
	if p == nil {
		return 0, 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gone(pid.ID) {
		return 0, 0
	}
	if x := p.live(); x != nil {
		if x.monitors != nil {
			yields = x.monitors.len()
		}
		outside = len(x.outside)
	}
	return yields, outside
}

// DocConstants are the internal sizes, bounds and intervals that
// docs/design.md and docs/dispatch.md quote, by name, for
// TestDocsQuoteTheConstants.
var DocConstants = map[string]int64{
	"maxCommand":           maxCommand,
	"maxWorkers":           maxWorkers,
	"chunkSize":            chunkSize,
	"slotCacheMax":         slotCacheMax,
	"slotBatch":            slotBatch,
	"freeDirtyMax":         freeDirtyMax,
	"counterStripes":       counterStripes,
	"yieldBacklog":         yieldBacklog,
	"yieldEvery":           yieldEvery,
	"helpBatch*helpRounds": helpBatch * helpRounds,
	"globalCheckInterval":  globalCheckInterval,
	"ownQueueInterval":     ownQueueInterval,
	"maxNextRuns":          maxNextRuns,
	"maxDirectDefers":      maxDirectDefers,
	"queuedTags":           queuedTags,
	"maxDeferred":          maxDeferred,
	"maxDeferTicks":        maxDeferTicks,
	"yieldTicks":           yieldTicks,
	"flushTicks":           flushTicks,
	"keptInbox":            keptInbox,
	"pendingSmallMax":      pendingSmallMax,
	"ctxGens":              ctxGens,
	"valuesCtxSlab":        valuesCtxSlab,
	"homeBlockBits":        homeBlockBits,
	"timerMaxTicks":        timerMaxTicks,
	"timerStealAfter":      timerStealAfter,
	"timerBatch":           timerBatch,
	"timerShrinkMin":       timerShrinkMin,
	"timerShrinkAfter":     timerShrinkAfter,
}

// SetStepHooks sets h as every worker's step hook (see
// worker.setTestHookStep), which puts their steps on the marked path;
// the function returned clears them.
func SetStepHooks(s *Scheduler, h func()) (clear func()) {
	for _, w := range s.workers {
		w.setTestHookStep(&h)
	}
	return func() {
		for _, w := range s.workers {
			w.setTestHookStep(nil)
		}
	}
}
