package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// Stress of the toolkit around processes: names, monitors, requests and
// senders that wait for room, each raced from several goroutines against
// the ends of the processes involved, on four workers. Every message,
// monitor and asking yield is accounted for at the end of a run: a
// missing or doubled completion, a name that outlives its holder, a
// monitor called after its stop said it would not be, a message
// delivered by a call that reported failure (or lost by one that
// reported success) is a violation.
//
// Sizes: the rounds are multiplied by stressScale (scale_test.go).

// tally counts what happened to numbered things, from any goroutine.
type tally struct {
	mu sync.Mutex
	n  map[uint64]map[string]int
}

func (t *tally) add(id uint64, what string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == nil {
		t.n = map[uint64]map[string]int{}
	}
	if t.n[id] == nil {
		t.n[id] = map[string]int{}
	}
	t.n[id][what]++
}

// of returns a copy of what happened to id.
func (t *tally) of(id uint64) map[string]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]int{}
	for k, v := range t.n[id] {
		out[k] = v
	}
	return out
}

// total sums the counts of id.
func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// deadLetterTally returns a DeadLetter hook that records, in tl, each
// dead letter whose Data is a numbered message (toldMsg, sentMsg),
// under its reason.
func deadLetterTally(tl *tally) func(sched.DeadLetter) {
	return func(d sched.DeadLetter) {
		switch m := d.Message.Data.(type) {
		case toldMsg:
			tl.add(uint64(m), "dead "+d.Reason.String())
		case sentMsg:
			tl.add(uint64(m), "dead "+d.Reason.String())
		case replyMsg:
			tl.add(uint64(m), "dead "+d.Reason.String())
		}
	}
}

// Names.

// toldMsg is a message told by name, numbered.
type toldMsg uint64

// askMsg is the body of a request by name, numbered; the holder answers
// with replyMsg of the same number.
type askMsg uint64

// replyMsg is an answer, numbered.
type replyMsg uint64

// endMsg asks a holder to end: 0 with Done, 1 with an error, 2 by
// panicking.
type endMsg int

// carryOut ends the step of the process who as e asks, Done with result
// for 0; -1, no end asked, returns nil. Step only.
func (e endMsg) carryOut(out *sched.StepOutput, who string, result payload.Payload) error {
	switch e {
	case 0:
		out.Done(result)
	case 1:
		return testError(who + " fails")
	case 2:
		panic(who + " panics")
	}
	return nil
}

// finMsg is what a process tells itself to end one step later, so that a
// second completion of a yield it got would arrive before its end.
type finMsg struct{}

// nameRun is what the processes of a names run share.
type nameRun struct {
	s       *sched.Scheduler
	f       *violations
	told    tally
	holders map[string]*atomic.Int32 // per name that is never Unregistered: how many processes hold it
}

// nameHolder registers its name in its first step (ending at once if the
// name is taken), then reads told messages, answers requests and ends
// as an endMsg or a cancel asks. Holding a name that nobody
// Unregisters, it checks at each step that the name is still its own,
// and counts itself a holder from its registration to the step that
// ends it: a process's names are free from the return of its final
// step, so another may take the name while its Close runs. Two holders
// at once is a violation.
type nameHolder struct {
	r       *nameRun
	name    string
	holding bool
	steps   int
}

func (h *nameHolder) Init(context.Context, string, payload.Payloads) error { return nil }

func (h *nameHolder) Close() { h.release() } // a forced end: no final step

// release counts h out of its name's holders, once, before the name is
// free: in its final step, before it returns, or in the Close of a
// forced end.
func (h *nameHolder) release() {
	if c := h.r.holders[h.name]; h.holding && c != nil {
		c.Add(-1)
	}
	h.holding = false
}

func (h *nameHolder) Step(evs []sched.Event, out *sched.StepOutput) error {
	r := h.r
	h.steps++
	if h.steps == 1 {
		if err := r.s.Register(h.name, out.Self()); err != nil {
			if !errors.Is(err, sched.ErrNameTaken) {
				r.f.addf("Register(%q, %v) by a live process: %v", h.name, out.Self(), err)
			}
			out.Done(payload.Payload{})
			return nil
		}
		h.holding = true
		if c := r.holders[h.name]; c != nil {
			if n := c.Add(1); n != 1 {
				r.f.addf("%v registered %q while %d other process(es) held it", out.Self(), h.name, n-1)
			}
		}
		return nil
	}
	if h.holding && r.holders[h.name] != nil {
		if pid, err := r.s.Lookup(h.name); err != nil || pid != out.Self() {
			r.f.addf("%v holds %q, which nobody unregisters, but Lookup says %v, %v", out.Self(), h.name, pid, err)
		}
	}
	end := endMsg(-1) // the whole batch is read before the holder ends
	for _, ev := range evs {
		switch ev.Type {
		case sched.EventCancel:
			end = max(end, 0)
		case sched.EventMessage:
			switch m := ev.Data.(type) {
			case toldMsg:
				r.told.add(uint64(m), "read")
			case sched.Request:
				if a, ok := m.Body.(askMsg); ok {
					out.Reply(m.ReplyTo, replyMsg(a), nil)
				}
			case endMsg:
				end = max(end, m)
			}
		}
	}
	if end >= 0 {
		h.release() // this step ends h, and its return frees the name
	}
	return end.carryOut(out, "holder", payload.Payload{})
}

// TestStressNamesRacingEnds: holders of a few names end (Done, error,
// panic, Terminate) while others try to take the names, outside
// goroutines register aliases for them and unregister some names, and
// processes tell and ask by name. A name has one holder at a time; once
// a holder's Handle reports its end, no name points at it; every message
// told by name is read once or is a dead letter once; every request by
// name completes its asker's yield exactly once, with its answer or an
// error saying the name or its holder is gone.
func TestStressNamesRacingEnds(t *testing.T) {
	const (
		drivers = 4
		nNames  = 3
	)
	rounds := 150 * stressScale
	if testing.Short() {
		rounds = 50
	}
	var f violations
	r := &nameRun{f: &f, holders: map[string]*atomic.Int32{}}
	r.s = newScheduler(t, sched.WithWorkers(4), sched.WithHooks(sched.Hooks{DeadLetter: deadLetterTally(&r.told)}))
	s := r.s
	// "kept" names are never Unregistered; "loose" ones are, by the
	// drivers, at random.
	var names []string
	for i := range nNames {
		kept := fmt.Sprint("kept", i)
		r.holders[kept] = new(atomic.Int32)
		names = append(names, kept, fmt.Sprint("loose", i))
	}
	aliases := []string{"alias0", "alias1"}
	var nextID atomic.Uint64
	var asked atomic.Int64
	teller := func(name string, id uint64) sched.Process {
		return stepFunc(func(_ []sched.Event, out *sched.StepOutput) error {
			out.TellName(name, toldMsg(id))
			out.Done(payload.Payload{})
			return nil
		})
	}
	asker := func(name string, id uint64) sched.Process {
		completions := 0
		return stepFunc(func(evs []sched.Event, out *sched.StepOutput) error {
			for _, ev := range evs {
				switch {
				case ev.Type == sched.EventYieldComplete && ev.Tag == 1:
					completions++
					if completions > 1 {
						f.addf("request %d to %q completed %d times", id, name, completions)
						continue
					}
					asked.Add(1)
					switch {
					case ev.Error == nil:
						if ev.Data != replyMsg(id) {
							f.addf("request %d to %q answered %v", id, name, ev.Data)
						}
					case errors.Is(ev.Error, sched.ErrNameNotFound), errors.Is(ev.Error, sched.ErrNoReply),
						errors.Is(ev.Error, sched.ErrProcessNotFound):
					default:
						f.addf("request %d to %q failed with %v", id, name, ev.Error)
					}
					out.Tell(out.Self(), finMsg{})
				case ev.Type == sched.EventMessage && ev.Data == finMsg{}:
					out.Done(payload.Payload{})
				}
			}
			if len(evs) == 0 {
				out.RequestName(1, name, askMsg(id))
			}
			return nil
		})
	}
	var tolds []uint64
	var toldMu sync.Mutex
	var wg sync.WaitGroup
	for d := range drivers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(d), 0x4a3e5))
			for round := range rounds {
				if f.n.Load() > 0 {
					return
				}
				name := names[rng.IntN(len(names))]
				alias := aliases[rng.IntN(len(aliases))]
				h, err := s.Submit(context.Background(), &nameHolder{r: r, name: name}, "holder", nil)
				if err != nil {
					f.addf("Submit: %v", err)
					return
				}
				tid, aid := nextID.Add(1), nextID.Add(1)
				toldMu.Lock()
				tolds = append(tolds, tid)
				toldMu.Unlock()
				var side []sched.Handle
				for _, p := range []sched.Process{teller(name, tid), asker(name, aid)} {
					hh, err := s.Submit(context.Background(), p, "side", nil)
					if err != nil {
						f.addf("Submit: %v", err)
						return
					}
					side = append(side, hh)
				}
				for _, op := range rng.Perm(5) {
					switch op {
					case 0:
						if err := s.TellName(name, endMsg(rng.IntN(3))); err != nil &&
							!errors.Is(err, sched.ErrNameNotFound) && !errors.Is(err, sched.ErrProcessNotFound) {
							f.addf("TellName(%q): %v", name, err)
						}
					case 1:
						if rng.IntN(2) == 0 {
							_ = s.Terminate(h.PID())
						}
					case 2:
						if err := s.Register(alias, h.PID()); err != nil &&
							!errors.Is(err, sched.ErrNameTaken) && !errors.Is(err, sched.ErrProcessNotFound) {
							f.addf("Register(%q, %v): %v", alias, h.PID(), err)
						}
					case 3:
						if r.holders[name] == nil && rng.IntN(2) == 0 {
							if err := s.Unregister(name); err != nil && !errors.Is(err, sched.ErrNameNotFound) {
								f.addf("Unregister(%q): %v", name, err)
							}
						}
					case 4:
						_, _ = s.Lookup(name)
					}
				}
				_ = s.Terminate(h.PID())
				if err := waitHandle(h); errors.Is(err, errStuck) {
					f.addf("round %d: holder %v did not end%s", round, h.PID(), dumpState(s))
					return
				}
				for _, n := range []string{name, alias} {
					if pid, err := s.Lookup(n); err == nil && pid == h.PID() {
						f.addf("round %d: %q still points at %v after its Handle reported its end", round, n, pid)
					}
				}
				for _, hh := range side {
					if err := waitHandle(hh); err != nil {
						f.addf("round %d: %v: %v%s", round, hh.PID(), err, dumpState(s))
						return
					}
				}
			}
		})
	}
	wg.Wait()
	f.check(t)
	if t.Failed() {
		return
	}
	require.Equal(t, int64(len(tolds)), asked.Load(), "requests completed")
	for _, id := range tolds {
		if got := r.told.of(id); total(got) != 1 {
			t.Errorf("message %d told by name: %v, want exactly one fate (read, or a dead letter)", id, got)
		}
	}
}

// errStuck is what waitHandle returns for a process that did not end.
var errStuck = errors.New("did not end within testTimeout")

// waitHandle waits for h's process to end, for at most testTimeout, and
// returns its error, or errStuck. Any goroutine, unlike waitEnd.
func waitHandle(h sched.Handle) error {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	_, err := h.Wait(ctx)
	if errors.Is(err, context.DeadlineExceeded) && !isClosed(h.Done()) {
		return errStuck
	}
	return err
}

// sentMsg is a message sent by SendContext or TellContext, numbered.
type sentMsg uint64

// Monitors.

// watchMode is what a watcher does when told goMsg: 0 nothing (it waits
// for its monitor of the target to complete, then ends), 1 cancel both
// monitors, then end, 2 end at once, still watching. Mode 3 gives both
// monitors a deadline of a few microseconds, and waits as mode 0 does:
// its monitor of long times out (once), that of target times out or
// reports the end.
type watchMode int

// goMsg tells a watcher to do what its mode says.
type goMsg struct{}

// watcher monitors target (tag 1) and long (tag 2) in its first step,
// and checks what it gets: at most one completion of each, none after
// its Cancel, none of long's (which outlives it), and an Exit of target.
func watcher(f *violations, mode watchMode, target, long relay.PID) sched.Process {
	var done1, done2, cancelling, cancelled bool
	return stepFunc(func(evs []sched.Event, out *sched.StepOutput) error {
		defer func() { cancelled = cancelled || cancelling }()
		if len(evs) == 0 {
			out.Monitor(1, target)
			out.Monitor(2, long)
			if mode == 3 {
				out.Timeout(1, time.Duration(target.ID%8)*time.Microsecond)
				out.Timeout(2, time.Duration(target.ID%5)*time.Microsecond)
			}
			return nil
		}
		end := false
		for _, ev := range evs {
			switch {
			case ev.Type == sched.EventYieldComplete && ev.Tag == 1:
				switch e, ok := ev.Data.(sched.Exit); {
				case cancelled:
					f.addf("%v: monitor of %v completed after its Cancel: %v", out.Self(), target, ev.Data)
				case done1:
					f.addf("%v: monitor of %v completed twice: %v", out.Self(), target, ev.Data)
				case mode == 3 && errors.Is(ev.Error, sched.ErrTimeout):
				case !ok || e.PID != target || ev.From != target || e.Reason == 0:
					f.addf("%v: monitor of %v completed with %#v, %v from %v", out.Self(), target, ev.Data, ev.Error, ev.From)
				}
				done1 = true
				if mode == 0 || mode == 3 {
					out.Tell(out.Self(), finMsg{})
				}
			case ev.Type == sched.EventYieldComplete && ev.Tag == 2:
				if mode != 3 || !errors.Is(ev.Error, sched.ErrTimeout) || done2 {
					f.addf("%v: monitor of %v, which lives on, completed: %v, %v (completed before: %v)", out.Self(), long, ev.Data, ev.Error, done2)
				}
				done2 = true
			case ev.Type == sched.EventMessage && ev.Data == goMsg{}:
				switch mode {
				case 1:
					// In force from the next step: this batch may hold a
					// completion that came before.
					out.Cancel(1)
					out.Cancel(2)
					cancelling = true
					out.Tell(out.Self(), finMsg{})
				case 2:
					end = true
				}
			case ev.Type == sched.EventMessage && ev.Data == finMsg{}:
				end = true
			case ev.Type == sched.EventCancel:
				end = true
			}
		}
		if end {
			out.Done(payload.Payload{})
		}
		return nil
	})
}

// mortal ends as an endMsg says (Done, error, panic) or at cancel.
func mortal() sched.Process {
	return stepFunc(func(evs []sched.Event, out *sched.StepOutput) error {
		end := endMsg(-1)
		for _, ev := range evs {
			if ev.Type == sched.EventCancel {
				end = max(end, 0)
			}
			if m, ok := ev.Data.(endMsg); ok && ev.Type == sched.EventMessage {
				end = max(end, m)
			}
		}
		return end.carryOut(out, "mortal", payload.Of("done"))
	})
}

// outsideWatch is one Scheduler.Monitor: its stop, and how many times
// its function was called.
type outsideWatch struct {
	stop   func() bool
	calls  atomic.Int32
	called chan sched.Exit // the first call's Exit
}

func newOutsideWatch(s *sched.Scheduler, pid relay.PID) *outsideWatch {
	o := &outsideWatch{called: make(chan sched.Exit, 1)}
	o.stop = s.Monitor(pid, func(e sched.Exit) {
		if o.calls.Add(1) == 1 {
			o.called <- e
		}
	})
	return o
}

// TestStressMonitorsRacingEnds: targets end (Done, error, panic,
// Terminate) while their watchers cancel their monitors, end still
// watching, or wait; and outside monitors are stopped at the same time.
// A monitor yield completes at most once, never after its Cancel, and
// exactly once for a watcher that waits; an outside monitor is called
// exactly once unless its stop reported it forgotten, then never; a stop
// of a monitor of a live process reports true. A long-lived process
// that all of them also watch keeps no monitor entry at the end.
func TestStressMonitorsRacingEnds(t *testing.T) {
	const drivers = 4
	rounds := 100 * stressScale
	if testing.Short() {
		rounds = 30
	}
	var f violations
	s := newScheduler(t, sched.WithWorkers(4))
	long := submit(t, s, mortal())
	var outsides []*outsideWatch // stopped, their stop reporting them forgotten
	var outMu sync.Mutex
	var wg sync.WaitGroup
	for d := range drivers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(d), 0x3017))
			for round := range rounds {
				if f.n.Load() > 0 {
					return
				}
				target, err := s.Submit(context.Background(), mortal(), "target", nil)
				if err != nil {
					f.addf("Submit: %v", err)
					return
				}
				tp := target.PID()
				var watchers []sched.Handle
				for m := range 4 {
					h, err := s.Submit(context.Background(), watcher(&f, watchMode(m), tp, long.PID()), "watcher", nil)
					if err != nil {
						f.addf("Submit: %v", err)
						return
					}
					watchers = append(watchers, h)
				}
				ows := []*outsideWatch{newOutsideWatch(s, tp), newOutsideWatch(s, tp)}
				onLong := newOutsideWatch(s, long.PID())
				stopped := make([]bool, len(ows))
				for _, op := range rng.Perm(6) {
					switch op {
					case 0:
						_ = s.Tell(tp, endMsg(rng.IntN(3)))
					case 1:
						_ = s.Terminate(tp)
					case 2:
						for _, h := range watchers {
							_ = s.Tell(h.PID(), goMsg{})
						}
					case 3:
						// Two stops at once: at most one forgets it.
						var other bool
						var g sync.WaitGroup
						g.Go(func() { other = ows[0].stop() })
						stopped[0] = ows[0].stop()
						g.Wait()
						if other && stopped[0] {
							f.addf("round %d: two stops of one monitor both reported it forgotten", round)
						}
						stopped[0] = stopped[0] || other
					case 4:
						if !onLong.stop() {
							f.addf("round %d: stop of a monitor of the live %v reported it not forgotten", round, long.PID())
						}
					case 5:
						if rng.IntN(3) == 0 {
							_ = s.Terminate(watchers[rng.IntN(len(watchers))].PID())
						}
					}
				}
				_ = s.Terminate(tp)
				if err := waitHandle(target); errors.Is(err, errStuck) {
					f.addf("round %d: target %v did not end%s", round, tp, dumpState(s))
					return
				}
				if ows[1].stop() {
					f.addf("round %d: a stop after the Handle reported %v's end reported the monitor forgotten", round, tp)
				}
				late := newOutsideWatch(s, tp)
				for i, o := range append(ows, late) {
					if i < len(stopped) && stopped[i] {
						continue
					}
					select {
					case e := <-o.called:
						if e.PID != tp || (o == late) != (e.Reason == sched.ExitGone) {
							f.addf("round %d: outside monitor %d of %v called with %v", round, i, tp, e)
						}
					case <-time.After(testTimeout):
						f.addf("round %d: outside monitor %d of %v, not stopped, never called", round, i, tp)
					}
				}
				for _, h := range watchers {
					if err := waitHandle(h); err != nil {
						f.addf("round %d: watcher %v: %v%s", round, h.PID(), err, dumpState(s))
						return
					}
				}
				outMu.Lock()
				if stopped[0] {
					outsides = append(outsides, ows[0])
				}
				outsides = append(outsides, onLong)
				outMu.Unlock()
			}
		})
	}
	wg.Wait()
	f.check(t)
	if t.Failed() {
		return
	}
	yields, outside := sched.WatchersOf(s, long.PID())
	require.Zero(t, yields, "monitor yields left on the long-lived process after every watcher ended")
	require.Zero(t, outside, "outside monitors left on the long-lived process after each was stopped")
	require.NoError(t, s.Terminate(long.PID()))
	_, err := waitEnd(t, s, long)
	require.NoError(t, err)
	for i, o := range outsides {
		if n := o.calls.Load(); n != 0 {
			t.Errorf("outside monitor %d called %d times after its stop reported it forgotten", i, n)
		}
	}
}

// Requests.

// answer is the data of a reply to request id: from the replier's step,
// or from outside (Scheduler.Reply).
type answer struct {
	id      uint64
	outside bool
}

// question is the body of a request: how its replier answers it: 0 in
// its step, 1 from outside, 2 never, 3 twice in its step.
type question struct {
	id  uint64
	how int
}

// askState is what became of one request, from its asker's side.
type askState struct {
	mode        int // 0 wait, 1 wait with a timeout, 2 cancel at goMsg, 3 end at goMsg
	completions atomic.Int32
	got         atomic.Value // the completing event's answer or error, as a string
	gotOutside  atomic.Bool  // the completion was the outside answer
	gotStep     atomic.Bool  // the completion was an answer from the replier's step
	stepReplies atomic.Int32 // answers the replier's steps gave
	outsideErr  atomic.Value // Scheduler.Reply's result, as errBox, if it answered from outside
}

type errBox struct{ err error }

// asker asks replier q and checks its completion: exactly once, an
// answer of its own request or an error saying the replier is gone, or
// the timeout.
func asker(f *violations, st *askState, replier relay.PID, q question, timeout time.Duration) sched.Process {
	cancelled := false
	return stepFunc(func(evs []sched.Event, out *sched.StepOutput) error {
		if len(evs) == 0 {
			out.Request(1, replier, q)
			if st.mode == 1 {
				out.Timeout(1, timeout)
			}
			return nil
		}
		end, cancelling := false, false
		for _, ev := range evs {
			switch {
			case ev.Type == sched.EventYieldComplete && ev.Tag == 1:
				if n := st.completions.Add(1); n > 1 || cancelled {
					f.addf("request %d: completion %d (cancelled %v): %v, %v", q.id, n, cancelled, ev.Data, ev.Error)
				}
				switch a, ok := ev.Data.(answer); {
				case ev.Error == nil && ok && a.id == q.id:
					st.gotOutside.Store(a.outside)
					st.gotStep.Store(!a.outside)
				case ev.Error != nil && (errors.Is(ev.Error, sched.ErrNoReply) || errors.Is(ev.Error, sched.ErrProcessNotFound) ||
					errors.Is(ev.Error, sched.ErrTimeout) || errors.Is(ev.Error, sched.ErrMailboxFull) || errors.Is(ev.Error, sched.ErrDropped)):
				default:
					f.addf("request %d completed with %#v, %v", q.id, ev.Data, ev.Error)
				}
				st.got.Store(fmt.Sprint(ev.Data, ev.Error))
				if st.mode < 2 {
					out.Tell(out.Self(), finMsg{})
				}
			case ev.Type == sched.EventMessage && ev.Data == goMsg{}:
				switch st.mode {
				case 2:
					out.Cancel(1)
					cancelling = true
					out.Tell(out.Self(), finMsg{})
				case 3:
					end = true
				}
			case ev.Type == sched.EventMessage && ev.Data == finMsg{}:
				end = true
			case ev.Type == sched.EventCancel:
				end = end || st.mode >= 2 // the others wait for their answer
			}
		}
		cancelled = cancelled || cancelling
		if end {
			out.Done(payload.Payload{})
		}
		return nil
	})
}

// replierRun is a replier's share of a round: the requests it hands out
// to be answered from outside.
type replierRun struct {
	read    atomic.Int32 // requests read
	mu      sync.Mutex
	outside []sched.ReplyTo
	ids     []uint64
	states  map[uint64]*askState
}

func (rr *replierRun) take() ([]sched.ReplyTo, []uint64) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	tos, ids := rr.outside, rr.ids
	rr.outside, rr.ids = nil, nil
	return tos, ids
}

// replier answers the requests as their question says, and ends as an
// endMsg says or at cancel.
func replier(rr *replierRun) sched.Process {
	return stepFunc(func(evs []sched.Event, out *sched.StepOutput) error {
		end := endMsg(-1)
		for _, ev := range evs {
			if ev.Type == sched.EventCancel {
				end = max(end, 0)
			}
			if ev.Type != sched.EventMessage {
				continue
			}
			switch m := ev.Data.(type) {
			case endMsg:
				end = max(end, m)
			case sched.Request:
				rr.read.Add(1)
				q := m.Body.(question)
				st := rr.states[q.id] // written before the asker started
				switch q.how {
				case 0, 3:
					for range q.how/3 + 1 {
						st.stepReplies.Add(1)
						out.Reply(m.ReplyTo, answer{id: q.id}, nil)
					}
				case 1:
					rr.mu.Lock()
					rr.outside = append(rr.outside, m.ReplyTo)
					rr.ids = append(rr.ids, q.id)
					rr.mu.Unlock()
				}
			}
		}
		return end.carryOut(out, "replier", payload.Payload{})
	})
}

// TestStressRequestsRacingEnds: requests whose repliers answer in a step,
// twice, from outside, or never, while the repliers end (Done, error,
// panic, Terminate), the askers cancel, time out, end or are
// terminated, and, in the second run, the scheduler shuts down. An
// asking yield completes at most once, exactly once for an asker that
// waits, with its own answer or an error that says why not; every answer
// a waiting asker did not take is a late-reply dead letter, and
// Scheduler.Reply returns nil exactly for the answer the asker took.
func TestStressRequestsRacingEnds(t *testing.T) {
	for run, shutdown := range []bool{false, true} {
		t.Run(fmt.Sprint("shutdown=", shutdown), func(t *testing.T) {
			testRequestsRacingEnds(t, uint64(run), shutdown)
		})
	}
}

func testRequestsRacingEnds(t *testing.T, seed uint64, shutdown bool) {
	const drivers = 4
	rounds := 100 * stressScale
	if testing.Short() {
		rounds = 30
	}
	var f violations
	var dead tally
	var lateReplies atomic.Uint64
	s, err := sched.New(sched.WithWorkers(4), sched.WithHooks(sched.Hooks{DeadLetter: func(d sched.DeadLetter) {
		if d.Reason == sched.DeadLateReply {
			lateReplies.Add(1)
		}
		if a, ok := d.Message.Data.(answer); ok && d.Reason == sched.DeadLateReply {
			dead.add(a.id, fmt.Sprint("outside=", a.outside))
		}
	}}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	var nextID atomic.Uint64
	var mu sync.Mutex
	states := map[uint64]*askState{}
	var wg sync.WaitGroup
	shutdownDone := make(chan error, 1)
	for d := range drivers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed*drivers+uint64(d), 0x7e9))
			for round := range rounds {
				if f.n.Load() > 0 {
					return
				}
				if shutdown && d == 0 && round == rounds/2 {
					go func() {
						ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
						defer cancel()
						shutdownDone <- s.Shutdown(ctx)
					}()
				}
				rr := &replierRun{states: map[uint64]*askState{}}
				var qs []question
				for mode := range 4 {
					q := question{id: nextID.Add(1), how: rng.IntN(4)}
					st := &askState{mode: mode}
					rr.states[q.id] = st
					qs = append(qs, q)
				}
				var opts []sched.SubmitOption
				switch rng.IntN(3) {
				case 1:
					opts = append(opts, sched.Mailbox(1, sched.MailboxReject))
				case 2:
					opts = append(opts, sched.Mailbox(1, sched.MailboxDropOldest))
				}
				rh, err := s.Submit(context.Background(), replier(rr), "replier", nil, opts...)
				if err != nil {
					if !shutdown || !errors.Is(err, sched.ErrClosed) && !errors.Is(err, sched.ErrShuttingDown) {
						f.addf("Submit: %v", err)
					}
					return
				}
				var askers []sched.Handle
				for _, q := range qs {
					st := rr.states[q.id]
					h, err := s.Submit(context.Background(), asker(&f, st, rh.PID(), q, time.Duration(rng.IntN(50))*time.Microsecond), "asker", nil)
					if err != nil {
						if !shutdown || !errors.Is(err, sched.ErrClosed) && !errors.Is(err, sched.ErrShuttingDown) {
							f.addf("Submit: %v", err)
						}
						continue
					}
					mu.Lock()
					states[q.id] = st
					mu.Unlock()
					askers = append(askers, h)
				}
				replyOutside := func() {
					tos, ids := rr.take()
					for i, to := range tos {
						err := s.Reply(to, answer{id: ids[i], outside: true}, nil)
						rr.states[ids[i]].outsideErr.Store(errBox{err})
					}
				}
				for _, op := range rng.Perm(6) {
					switch op {
					case 5:
						// Mostly, let the requests reach the replier first:
						// a bounded try, no condition of the test.
						for i := 0; i < 2000 && int(rr.read.Load()) < len(askers); i++ {
							runtime.Gosched()
						}
					case 0:
						_ = s.Tell(rh.PID(), endMsg(rng.IntN(3)))
					case 1:
						_ = s.Terminate(rh.PID())
					case 2:
						for _, h := range askers {
							_ = s.Tell(h.PID(), goMsg{})
						}
					case 3:
						replyOutside()
					case 4:
						if len(askers) > 0 {
							_ = s.Terminate(askers[rng.IntN(len(askers))].PID())
						}
					}
				}
				replyOutside()
				_ = s.Terminate(rh.PID())
				if err := waitHandle(rh); errors.Is(err, errStuck) {
					f.addf("round %d: replier %v did not end%s", round, rh.PID(), dumpState(s))
					return
				}
				replyOutside() // late: after the replier's end
				for _, h := range askers {
					if err := waitHandle(h); errors.Is(err, errStuck) {
						f.addf("round %d: asker %v did not end%s", round, h.PID(), dumpState(s))
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if !shutdown {
		go func() { shutdownDone <- s.Shutdown(context.Background()) }()
	}
	if err := receive(t, shutdownDone, "Shutdown"); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	f.check(t)
	if t.Failed() {
		return
	}
	require.Equal(t, lateReplies.Load(), s.Stats().DeadLetters.LateReplies, "late replies counted, once every process has ended, against those the hook got")
	for id, st := range states {
		c := st.completions.Load()
		switch {
		case st.mode < 2 && c != 1:
			t.Errorf("request %d (mode %d): its waiting asker's yield completed %d times", id, st.mode, c)
		case c > 1:
			t.Errorf("request %d (mode %d): completed %d times", id, st.mode, c)
		}
		deadOf := dead.of(id)
		var outErr error
		outAnswered := false
		if b, ok := st.outsideErr.Load().(errBox); ok {
			outAnswered, outErr = true, b.err
			if outErr != nil && !errors.Is(outErr, sched.ErrYieldNotPending) && !errors.Is(outErr, sched.ErrProcessNotFound) &&
				!errors.Is(outErr, sched.ErrClosed) {
				t.Errorf("request %d: Scheduler.Reply: %v", id, outErr)
			}
			if (outErr != nil) != (deadOf["outside=true"] == 1) {
				t.Errorf("request %d: Scheduler.Reply returned %v, late-reply dead letters %v", id, outErr, deadOf)
			}
		}
		if st.mode >= 2 {
			continue // its answer may be dropped by its Cancel, or unread at its end
		}
		if outAnswered && (outErr == nil) != st.gotOutside.Load() {
			t.Errorf("request %d (mode %d): Scheduler.Reply returned %v, the asker took the outside answer: %v (%v)",
				id, st.mode, outErr, st.gotOutside.Load(), st.got.Load())
		}
		stepTaken := 0
		if st.gotStep.Load() {
			stepTaken = 1
		}
		if n := int(st.stepReplies.Load()); n != stepTaken+deadOf["outside=false"] {
			t.Errorf("request %d (mode %d): %d answer(s) from the replier's step, %d taken, late-reply dead letters %v",
				id, st.mode, n, stepTaken, deadOf)
		}
	}
}

// Senders that wait for room.

// slowReader reads sentMsg messages, spinning a while at each step so
// that its one-message mailbox is full more often than not, and ends as
// an endMsg says or at cancel.
func slowReader(told *tally, rng *rand.Rand) sched.Process {
	return stepFunc(func(evs []sched.Event, out *sched.StepOutput) error {
		spin(rng.IntN(2000))
		end := endMsg(-1)
		for _, ev := range evs {
			if ev.Type == sched.EventCancel {
				end = max(end, 0)
			}
			if ev.Type != sched.EventMessage {
				continue
			}
			switch m := ev.Data.(type) {
			case sentMsg:
				told.add(uint64(m), "read")
			case endMsg:
				end = max(end, m)
			}
		}
		return end.carryOut(out, "reader", payload.Payload{})
	})
}

// TestStressSendersWaitingForRoom: SendContext and TellContext wait for
// room in a one-message mailbox (which a plain Tell, under the
// drop-oldest policy, also fills, evicting the oldest) while their
// contexts are cancelled, the reader ends (Done, error, panic,
// Terminate) and, in the second run, the scheduler shuts down. Each call
// returns nil exactly when its message was delivered: then it is read
// once, left unread at the reader's end, or evicted, each a single fate;
// otherwise it returns the context's error or says the reader or the
// scheduler is gone, and the message reaches nobody.
func TestStressSendersWaitingForRoom(t *testing.T) {
	for run, shutdown := range []bool{false, true} {
		t.Run(fmt.Sprint("shutdown=", shutdown), func(t *testing.T) {
			testSendersWaitingForRoom(t, uint64(run), shutdown)
		})
	}
}

func testSendersWaitingForRoom(t *testing.T, seed uint64, shutdown bool) {
	const (
		drivers = 2
		senders = 3
		each    = 4
	)
	rounds := 60 * stressScale
	if testing.Short() {
		rounds = 20
	}
	var f violations
	var fates tally
	var deadLetters [8]atomic.Uint64 // by reason
	tallyHook := deadLetterTally(&fates)
	s, err := sched.New(sched.WithWorkers(4), sched.WithHooks(sched.Hooks{DeadLetter: func(d sched.DeadLetter) {
		deadLetters[d.Reason].Add(1)
		tallyHook(d)
	}}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	var nextID atomic.Uint64
	var mu sync.Mutex
	results := map[uint64]error{}
	shutdownDone := make(chan error, 1)
	var wg sync.WaitGroup
	for d := range drivers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed*drivers+uint64(d), 0x5e4d))
			for round := range rounds {
				if f.n.Load() > 0 {
					return
				}
				if shutdown && d == 0 && round == rounds/2 {
					go func() {
						ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
						defer cancel()
						shutdownDone <- s.Shutdown(ctx)
					}()
				}
				rh, err := s.Submit(context.Background(), slowReader(&fates, rand.New(rand.NewPCG(rng.Uint64(), 1))), "reader", nil,
					sched.Mailbox(1, sched.MailboxDropOldest))
				if err != nil {
					if !shutdown || !errors.Is(err, sched.ErrClosed) && !errors.Is(err, sched.ErrShuttingDown) {
						f.addf("Submit: %v", err)
					}
					return
				}
				to := rh.PID()
				var roundMu sync.Mutex
				var roundIDs []uint64 // the messages accepted in this round
				ctx, cancel := context.WithCancel(context.Background())
				var sw sync.WaitGroup
				for k := range senders {
					krng := rand.New(rand.NewPCG(rng.Uint64(), 2))
					sw.Go(func() {
						for range each {
							id := nextID.Add(1)
							var err error
							switch k {
							case 0:
								err = s.SendContext(ctx, relay.Message{To: to, Data: sentMsg(id)})
							case 1:
								err = s.TellContext(ctx, to, sentMsg(id))
							default:
								err = s.Tell(to, sentMsg(id)) // drop-oldest: evicts a waiting sender's message
							}
							if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, sched.ErrProcessNotFound) &&
								!errors.Is(err, sched.ErrClosed) {
								f.addf("sender %d: %v", k, err)
							}
							mu.Lock()
							results[id] = err
							mu.Unlock()
							if err == nil {
								roundMu.Lock()
								roundIDs = append(roundIDs, id)
								roundMu.Unlock()
							}
							spin(krng.IntN(500))
						}
					})
				}
				for _, op := range rng.Perm(3) {
					spin(rng.IntN(3000))
					switch op {
					case 0:
						// Mostly while a sender waits: a bounded try to
						// catch one waiting, no condition of the test.
						for i := 0; i < 1000 && !sched.SendersWaitForRoom(s, to); i++ {
							runtime.Gosched()
						}
						cancel()
					case 1:
						if rng.IntN(2) == 0 {
							_ = s.Tell(to, endMsg(rng.IntN(3)))
						}
					case 2:
						if rng.IntN(3) == 0 {
							_ = s.Terminate(to)
						}
					}
				}
				sw.Wait()
				cancel()
				_ = s.Terminate(to)
				if err := waitHandle(rh); errors.Is(err, errStuck) {
					f.addf("round %d: reader %v did not end%s", round, to, dumpState(s))
					return
				}
				// Once the Handle reports the end, the messages it left
				// unread have gone to the hook: every accepted message has
				// its fate already.
				for _, id := range roundIDs {
					if got := fates.of(id); total(got) != 1 {
						f.addf("round %d: message %d accepted by %v, fates %v once its Handle reported its end", round, id, to, got)
					}
				}
			}
		})
	}
	wg.Wait()
	if !shutdown {
		go func() { shutdownDone <- s.Shutdown(context.Background()) }()
	}
	if err := receive(t, shutdownDone, "Shutdown"); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	f.check(t)
	if t.Failed() {
		return
	}
	dl := s.Stats().DeadLetters
	require.Equal(t, deadLetters[sched.DeadUnread].Load(), dl.Unread, "unread dead letters counted against those the hook got")
	require.Equal(t, deadLetters[sched.DeadDropped].Load(), dl.Dropped, "dropped dead letters counted against those the hook got")
	delivered := 0
	for id, err := range results {
		got := fates.of(id)
		if err == nil {
			delivered++
			if total(got) != 1 {
				t.Errorf("message %d: accepted, fates %v: want exactly one", id, got)
			}
		} else if total(got) != 0 {
			t.Errorf("message %d: refused with %v, yet fates %v", id, err, got)
		}
	}
	require.NotZero(t, delivered, "no message was delivered")
}

// Forced shutdown.

// stubborn reads sentMsg messages slowly and ignores its cancel: only a
// shutdown deadline ends it. Its watcher variant also watches watched.
func stubborn(told *tally, watch relay.PID) sched.Process {
	return stepFunc(func(evs []sched.Event, out *sched.StepOutput) error {
		if len(evs) == 0 && !watch.IsZero() {
			out.Monitor(1, watch)
		}
		spin(500)
		for _, ev := range evs {
			if m, ok := ev.Data.(sentMsg); ok && ev.Type == sched.EventMessage {
				told.add(uint64(m), "read")
			}
		}
		return nil
	})
}

// TestStressForcedShutdownLetsGo: a shutdown deadline forces processes
// that ignore their cancel while they hold names, are watched from
// outside (some of those monitors being stopped at the same time) and by
// each other, and senders wait for room in their full mailboxes. Once
// Shutdown has returned: every name is free, every outside monitor not
// reported forgotten is called exactly once with ExitForced, every
// waiting sender has returned, and a sender's message reached its
// process (read, or a dead letter unread at its end) exactly when the
// sender got nil.
func TestStressForcedShutdownLetsGo(t *testing.T) {
	runs := 4 * stressScale
	if testing.Short() {
		runs = 2
	}
	for run := range runs {
		testForcedShutdownLetsGo(t, uint64(run))
		if t.Failed() {
			return
		}
	}
}

func testForcedShutdownLetsGo(t *testing.T, seed uint64) {
	const (
		procs   = 16
		senders = 2
	)
	rng := rand.New(rand.NewPCG(seed, 0xf0ced))
	var fates tally
	s, err := sched.New(sched.WithWorkers(4), sched.WithHooks(sched.Hooks{DeadLetter: deadLetterTally(&fates)}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	var pids []relay.PID
	var ows []*outsideWatch
	for i := range procs {
		var watch relay.PID
		if i > 0 {
			watch = pids[rng.IntN(len(pids))]
		}
		h, err := s.Submit(context.Background(), stubborn(&fates, watch), "stubborn", nil, sched.Mailbox(1, sched.MailboxReject))
		require.NoError(t, err)
		pids = append(pids, h.PID())
		require.NoError(t, s.Register(fmt.Sprint("stubborn", i), h.PID()))
		ows = append(ows, newOutsideWatch(s, h.PID()), newOutsideWatch(s, h.PID()))
	}
	var nextID atomic.Uint64
	var mu sync.Mutex
	results := map[uint64]error{}
	var sw sync.WaitGroup
	for _, pid := range pids {
		for k := range senders {
			sw.Go(func() {
				for {
					id := nextID.Add(1)
					var err error
					if k == 0 {
						err = s.TellContext(context.Background(), pid, sentMsg(id))
					} else {
						err = s.SendContext(context.Background(), relay.Message{To: pid, Data: sentMsg(id)})
					}
					mu.Lock()
					results[id] = err
					mu.Unlock()
					if err != nil {
						return
					}
				}
			})
		}
	}
	stopped := make([]bool, len(ows))
	var stops sync.WaitGroup
	stops.Go(func() {
		for i := 0; i < len(ows); i += 2 {
			stopped[i] = ows[i].stop()
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(2000))*time.Microsecond)
	defer cancel()
	err = s.Shutdown(ctx)
	require.ErrorIs(t, err, sched.ErrForced, "processes that ignore their cancel")
	stops.Wait()
	for i := range procs {
		_, err := s.Lookup(fmt.Sprint("stubborn", i))
		// A name still held would be found; a released one is a miss, and
		// a miss after Shutdown says the scheduler is closed.
		require.ErrorIs(t, err, sched.ErrClosed, "a forced process's name after Shutdown returned")
	}
	for i, o := range ows {
		if stopped[i] {
			continue
		}
		select {
		case e := <-o.called:
			require.Equal(t, sched.ExitForced, e.Reason, "outside monitor %d: %v", i, e)
		case <-time.After(testTimeout):
			t.Fatalf("outside monitor %d of a forced process, not stopped, never called", i)
		}
	}
	senderDone := make(chan struct{})
	go func() { sw.Wait(); close(senderDone) }()
	receive(t, senderDone, "the senders waiting for room to return after Shutdown")
	for i, o := range ows {
		if n := o.calls.Load(); n > 1 || stopped[i] && n != 0 {
			t.Errorf("outside monitor %d (stopped %v) called %d times", i, stopped[i], n)
		}
	}
	for id, err := range results {
		got := fates.of(id)
		if err == nil {
			if total(got) != 1 {
				t.Errorf("message %d: accepted, fates %v: want exactly one", id, got)
			}
			continue
		}
		if !errors.Is(err, sched.ErrProcessNotFound) && !errors.Is(err, sched.ErrClosed) {
			t.Errorf("message %d: %v", id, err)
		}
		if total(got) != 0 {
			t.Errorf("message %d: refused with %v, yet fates %v", id, err, got)
		}
	}
}
