package scheduler

import (
	"fmt"
	"io"
	"sort"

	"github.com/procsched/scheduler/relay"
)

// ProcessInfo describes one live process, for debugging and for tests that
// must explain why a run stopped making progress.
type ProcessInfo struct {
	PID     relay.PID // the process's PID
	Method  string    // its entry point
	State   State     // its state (Ready, Running, Blocked, Idle)
	Woken   bool      // an event arrived while it was Running
	Queued  int       // events waiting in its mailbox
	Pending int       // yields awaiting completion
}

// Processes returns a description of every live process, ordered by PID.
// It walks the whole process table, so it costs time proportional to the
// number of processes: it is for debugging, not for monitoring.
func (s *Scheduler) Processes() []ProcessInfo {
	type entry struct {
		id   uint64
		info ProcessInfo
	}
	var entries []entry
	s.table.forEach(func(p *proc) {
		st := p.state.Load()
		p.mu.Lock()
		info := ProcessInfo{
			PID:     p.pid(),
			Method:  s.methodOf(p),
			State:   State(st & stateMask),
			Woken:   st&flagWake != 0,
			Queued:  len(p.inbox),
			Pending: p.pending.len(p.extra.Load()),
		}
		p.mu.Unlock()
		entries = append(entries, entry{p.id, info})
	})
	sort.Slice(entries, func(i, j int) bool { return entries[i].id < entries[j].id })
	infos := make([]ProcessInfo, len(entries))
	for i, e := range entries {
		infos[i] = e.info
	}
	return infos
}

// DumpProcesses writes one line per live process (see
// [Scheduler.Processes]) followed by the scheduler's statistics.
func (s *Scheduler) DumpProcesses(w io.Writer) {
	for _, pi := range s.Processes() {
		fmt.Fprintf(w, "%s method=%q state=%v woken=%v queued=%d pending=%d\n",
			pi.PID, pi.Method, pi.State, pi.Woken, pi.Queued, pi.Pending)
	}
	fmt.Fprintf(w, "stats: %+v\n", s.Stats())
}
