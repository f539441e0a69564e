package scheduler

import (
	"fmt"
	"sort"

	"github.com/procsched/scheduler/relay"
)

// ProcessInfo describes one process listed by [Scheduler.Processes], for
// debugging and for tests that must explain why a run stopped making
// progress.
type ProcessInfo struct {
	PID     relay.PID // the process's PID
	Method  string    // its entry point
	State   State     // its state (Ready, Running, Blocked, Idle)
	Woken   bool      // an event arrived while it was Running
	Queued  int       // events waiting in its mailbox
	Pending int       // yields awaiting completion
}

// Processes returns a description of every process between its Init and
// its end, ordered by PID: published (its Init, and the Start hook if
// set, have returned, see [Process]) and not ended (its Close not
// called). [Stats] counts in Live the processes whose Init, Start hook or
// Close is running as well, so while
// processes start and end the listing may be shorter than Live. It walks
// the whole process table, so it costs time proportional to the number
// of processes: it is for debugging, not for monitoring.
func (s *Scheduler) Processes() []ProcessInfo {
	type entry struct {
		id   uint64
		info ProcessInfo
	}
	var entries []entry
	s.table.forEach(func(p *proc) {
		p.mu.Lock()
		// Ended (its slot not reused yet), or a record reused for a
		// process whose Init runs (see proc.recycleFor): not live. The
		// state word is read first, under the lock: a record that shows
		// Ended may be in the hands of a start that writes without the
		// lock, and one that does not has been published since, or not
		// yet ended, and its fields are the lock's to read.
		st := p.state.Load()
		if st&stateMask >= stEnded || p.flags&pfClosed != 0 {
			p.mu.Unlock()
			return
		}
		info := ProcessInfo{
			PID:     p.pid(),
			Method:  s.methodOf(p),
			State:   stateOf(st),
			Woken:   st&flagWake != 0,
			Queued:  int(p.inbox.n),
			Pending: p.pending.len(p.live()),
		}
		p.mu.Unlock()
		entries = append(entries, entry{info.PID.ID, info})
	})
	sort.Slice(entries, func(i, j int) bool { return entries[i].id < entries[j].id })
	infos := make([]ProcessInfo, len(entries))
	for i, e := range entries {
		infos[i] = e.info
	}
	return infos
}

// State is where a process is in its life. Transitions:
//
//	Ready -> Running            a worker claims it (CAS)
//	Running -> Ready            it asked to continue, or events arrived while it ran
//	Running -> Blocked          it waits for yields (messages and cancel still wake it)
//	Running -> Idle             it waits for messages
//	Blocked, Idle -> Ready      an event arrived
//	Blocked, Idle -> Running    an event arrived and the worker that
//	                            brought it runs the process next, without
//	                            queueing it (a child ended on that worker,
//	                            or a Tell was its sender's step's last yield)
//	Running -> Ended            it finished (done, error, panic)
//	Ready, Blocked, Idle -> Ended      forced at a shutdown deadline
type State uint8

const (
	StateReady   State = iota + 1 // queued to run
	StateRunning                  // a worker is running its Step
	StateBlocked                  // waiting for yield completions
	StateIdle                     // waiting for messages
	StateEnded                    // finished; Close has been or is being called
)

// String returns the state's name.
func (s State) String() string {
	switch s {
	case StateReady:
		return "Ready"
	case StateRunning:
		return "Running"
	case StateBlocked:
		return "Blocked"
	case StateIdle:
		return "Idle"
	case StateEnded:
		return "Ended"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}
