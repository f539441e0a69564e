package scheduler

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// Tests of record reuse (see Scheduler.record and
// proc.recycleFor): whatever is addressed to, or derived from, a process
// that has ended must never reach or be seen by the process that took
// its record, and that process must see nothing left of the one before.

// reuseProc is a test process whose Init hands its context to ready (if
// set) and keeps it, and whose steps are step, numbered from 0; close,
// if set, runs in Close.
type reuseProc struct {
	ready chan<- context.Context
	init  func(ctx context.Context) error
	step  func(n int, evs []Event, out *StepOutput) error
	close func()
	ctx   context.Context
	n     int
}

func (p *reuseProc) Init(ctx context.Context, _ string, _ payload.Payloads) error {
	p.ctx = ctx
	if p.ready != nil {
		p.ready <- ctx
	}
	if p.init != nil {
		return p.init(ctx)
	}
	return nil
}

func (p *reuseProc) Step(evs []Event, out *StepOutput) error {
	n := p.n
	p.n++
	return p.step(n, evs, out)
}

func (p *reuseProc) Close() {
	if p.close != nil {
		p.close()
	}
}

// reuseDeadLetters collects what the DeadLetter hook is given.
type reuseDeadLetters struct {
	mu   sync.Mutex
	list []DeadLetter
}

func (d *reuseDeadLetters) add(dl DeadLetter) {
	d.mu.Lock()
	d.list = append(d.list, dl)
	d.mu.Unlock()
}

func (d *reuseDeadLetters) all() []DeadLetter {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]DeadLetter(nil), d.list...)
}

// reuseInfo returns what Processes lists of pid, and whether it lists it.
func reuseInfo(s *Scheduler, pid relay.PID) (ProcessInfo, bool) {
	for _, info := range s.Processes() {
		if info.PID == pid {
			return info, true
		}
	}
	return ProcessInfo{}, false
}

// reuseWaitState waits until Processes lists pid in state st.
func reuseWaitState(t *testing.T, s *Scheduler, pid relay.PID, st State) {
	t.Helper()
	eventually(t, fmt.Sprintf("%v %v", pid, st), func() bool {
		info, ok := reuseInfo(s, pid)
		return ok && info.State == st
	})
}

// reuseRecordState returns, under p's lock, what a process's record holds
// that others could have left there: its live part, its mailbox count,
// its flags and its pending yields.
func reuseRecordState(p *proc) (live *procLive, queued uint32, flags uint8, pending int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.live(), p.inbox.n, p.flags, p.pending.len(p.live())
}

// reuseChild is what reusingPair learns of a child: its context, as its
// Init got it, its PID and its record.
type reuseChild struct {
	ctx context.Context
	pid relay.PID
	rec *proc
}

// reusingPair submits to s a parent that awaits a child whose steps are
// first and then, once that one has ended, a child whose steps are
// second (see oneAfterOther), and returns the parent's Handle and the
// two children once both have run Init. It fails the test unless the
// second took the first's record: s must have one worker, or the others
// held, so that the first's record is the one the worker gives next.
func reusingPair(t *testing.T, s *Scheduler, first, second func(n int, evs []Event, out *StepOutput) error) (Handle, reuseChild, reuseChild) {
	t.Helper()
	aCtx, nCtx := make(chan context.Context, 1), make(chan context.Context, 1)
	h, err := s.Submit(context.Background(), oneAfterOther(
		&reuseProc{ready: aCtx, step: first}, &reuseProc{ready: nCtx, step: second}), "run", nil)
	require.NoError(t, err)
	a := reuseChild{ctx: receive(t, aCtx, "the first child's context")}
	n := reuseChild{ctx: receive(t, nCtx, "the second child's context")}
	var aID, nID uint64
	a.rec, aID = spawnedCtx(t, a.ctx, false)
	n.rec, nID = spawnedCtx(t, n.ctx, false)
	require.Same(t, a.rec, n.rec, "the second child has the first one's record")
	a.pid, n.pid = relay.PID{Node: s.node, ID: aID}, relay.PID{Node: s.node, ID: nID}
	return h, a, n
}

// collectThenEnd is a step that appends its events to *into and ends
// once it has had one.
func collectThenEnd(into *[]Event) func(n int, evs []Event, out *StepOutput) error {
	return func(_ int, evs []Event, out *StepOutput) error {
		*into = append(*into, evs...)
		if len(*into) > 0 {
			out.Done(payload.Payload{})
		}
		return nil
	}
}

// ctxDoneNow reports whether ctx's Done channel is closed.
func ctxDoneNow(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return true
	default:
		return false
	}
}

// barrierOnOneWorker waits until the one worker of s has run everything
// queued on the global queue before this call: a process submitted now
// runs after them (the global queue is FIFO and nothing else is queued
// on the worker).
func barrierOnOneWorker(t *testing.T, s *Scheduler) {
	t.Helper()
	h, err := s.Submit(context.Background(), stepFunc(func(_ []Event, out *StepOutput) error {
		out.Done(payload.Payload{})
		return nil
	}), "barrier", nil)
	require.NoError(t, err)
	require.NoError(t, waitEnd(t, h))
}

// TestReuseStaleOpsNeverReachTheNextProcess: once a process has ended
// and its record serves the next process of its slot, every operation
// that names the ended process's PID (Tell, Send, TellContext, a
// returned message, CompleteYield of a tag the new process has pending,
// Terminate, Register, Reply, Monitor) fails as for an ended process,
// and leaves nothing on the record: no live part, no event, no flag; the
// new process's context is not done and its yield still pending. A PID
// of the slot's next generation is not there yet either.
func TestReuseStaleOpsNeverReachTheNextProcess(t *testing.T) {
	var dead reuseDeadLetters
	s := newScheduler(t, WithWorkers(1), WithHooks(Hooks{DeadLetter: dead.add}))
	var nEvents []Event // the second's, read once the parent has ended
	h, a, n := reusingPair(t, s, func(_ int, _ []Event, out *StepOutput) error {
		out.Sleep(7, time.Hour) // the same tag the next process waits on
		out.Done(payload.Payload{})
		return nil
	}, func(n int, evs []Event, out *StepOutput) error {
		if n == 0 {
			out.Sleep(7, time.Hour)
			return nil
		}
		nEvents = append(nEvents, evs...)
		for _, ev := range evs {
			if ev.Type == EventMessage && ev.Data == "end" {
				out.Done(payload.Payload{})
			}
		}
		return nil
	})
	aC, nC, aPID, nPID, nRec := a.ctx, n.ctx, a.pid, n.pid, n.rec
	require.Equal(t, NextPIDOfSlot(aPID), nPID)
	reuseWaitState(t, s, nPID, StateBlocked)

	for _, stale := range []relay.PID{aPID, NextPIDOfSlot(nPID)} {
		require.ErrorIs(t, s.Tell(stale, "stale tell"), ErrProcessNotFound, "Tell(%v)", stale)
		require.ErrorIs(t, s.Send(relay.Message{From: nPID, To: stale, Data: "stale send"}), ErrProcessNotFound, "Send(%v)", stale)
		require.ErrorIs(t, s.TellContext(t.Context(), stale, "stale tellcontext"), ErrProcessNotFound)
		require.ErrorIs(t, s.CompleteYield(stale, 7, "stale completion", nil), ErrProcessNotFound)
		require.ErrorIs(t, s.Terminate(stale), ErrProcessNotFound)
		require.ErrorIs(t, s.Register("reuse-stale", stale), ErrProcessNotFound)
		_, err := s.Lookup("reuse-stale")
		require.ErrorIs(t, err, ErrNameNotFound)
		require.ErrorIs(t, s.TellName("reuse-stale", "by name"), ErrNameNotFound)
		exits := make(chan Exit, 1)
		stop := s.Monitor(stale, func(e Exit) { exits <- e })
		e := receive(t, exits, "the stale monitor's exit")
		require.Equal(t, stale, e.PID)
		require.Equal(t, ExitGone, e.Reason)
		require.False(t, stop(), "stopping a monitor of %v that fired", stale)
	}
	// A message handed back to the ended sender, and a late reply to it:
	// dead letters naming it.
	require.ErrorIs(t, s.Send(relay.Message{From: nPID, To: aPID, Data: "returned", Err: errors.New("undeliverable")}), ErrProcessNotFound)
	require.ErrorIs(t, s.Reply(ReplyTo{PID: aPID, Seq: 1}, "late", nil), ErrProcessNotFound)

	live, queued, flags, pending := reuseRecordState(nRec)
	require.Nil(t, live, "the stale operations left a live part on the reused record")
	require.Zero(t, queued, "events queued on the reused record")
	require.Zero(t, flags, "flags set on the reused record")
	require.Equal(t, 1, pending, "the second child's pending yields")
	info, _ := reuseInfo(s, nPID)
	require.Equal(t, StateBlocked, info.State)
	require.NoError(t, nC.Err(), "the second child's context")
	require.NoError(t, context.Cause(nC))
	require.False(t, ctxDoneNow(nC))
	require.ErrorIs(t, aC.Err(), context.Canceled, "the first child's context")
	require.ErrorIs(t, context.Cause(aC), ErrEnded)
	self, _ := Self(aC)
	require.Equal(t, aPID, self)

	require.NoError(t, s.CompleteYield(nPID, 7, "mine", nil))
	require.NoError(t, s.Tell(nPID, "end"))
	require.NoError(t, waitEnd(t, h))
	require.Len(t, nEvents, 2, "the second child's events: %v", nEvents)
	assert.Equal(t, EventYieldComplete, nEvents[0].Type)
	assert.Equal(t, uint64(7), nEvents[0].Tag)
	assert.Equal(t, "mine", nEvents[0].Data)
	assert.Equal(t, EventMessage, nEvents[1].Type)
	assert.Equal(t, "end", nEvents[1].Data)

	dls := dead.all()
	require.Len(t, dls, 2, "dead letters: %v", dls)
	assert.Equal(t, DeadBounce, dls[0].Reason)
	assert.Equal(t, aPID, dls[0].Message.To)
	assert.Equal(t, "returned", dls[0].Message.Data)
	assert.Equal(t, DeadLateReply, dls[1].Reason)
	assert.Equal(t, aPID, dls[1].Message.To)
	assert.Equal(t, "late", dls[1].Message.Data)
}

// TestReuseUnreadMailboxNamesTheEndedProcess: a process whose last step
// tells itself messages and asks itself a request (which needs no watch,
// so its record stays reusable) ends with them unread. Each is a dead
// letter naming it, once, even though its record has been left for the
// slot's next process by then; an answer the DeadLetter hook gives at
// once to the unread request, through its ReplyTo, is a late reply to
// the ended process, and a Tell from the hook to the slot's next PID is
// refused. The next process in the record gets none of it.
func TestReuseUnreadMailboxNamesTheEndedProcess(t *testing.T) {
	const msgs = 10
	var (
		s        *Scheduler
		mu       sync.Mutex
		dead     []DeadLetter
		replyErr []error
		nextErr  []error
	)
	hook := func(dl DeadLetter) {
		mu.Lock()
		dead = append(dead, dl)
		mu.Unlock()
		if req, ok := dl.Message.Data.(Request); ok {
			err := s.Reply(req.ReplyTo, "answer after the end", nil)
			err2 := s.Tell(NextPIDOfSlot(dl.Message.To), "to the next one")
			mu.Lock()
			replyErr = append(replyErr, err)
			nextErr = append(nextErr, err2)
			mu.Unlock()
		}
	}
	s = newScheduler(t, WithWorkers(1), WithHooks(Hooks{DeadLetter: hook}))
	var nEvents []Event
	h, a, n := reusingPair(t, s, func(_ int, _ []Event, out *StepOutput) error {
		for i := range msgs {
			out.Tell(out.Self(), i)
		}
		out.Request(1, out.Self(), "ask")
		out.Done(payload.Payload{})
		return nil
	}, collectThenEnd(&nEvents))
	aPID, nPID := a.pid, n.pid
	reuseWaitState(t, s, nPID, StateIdle)
	info, _ := reuseInfo(s, nPID)
	require.Zero(t, info.Queued, "events queued for the second child")
	require.NoError(t, s.Tell(nPID, "only this"))
	require.NoError(t, waitEnd(t, h))
	require.Len(t, nEvents, 1, "the second child's events: %v", nEvents)
	require.Equal(t, "only this", nEvents[0].Data)

	mu.Lock()
	defer mu.Unlock()
	unread, late := map[any]int{}, 0
	for _, dl := range dead {
		require.Equal(t, aPID, dl.Message.To, "dead letter %v (%v) does not name the ended process", dl.Message, dl.Reason)
		switch dl.Reason {
		case DeadUnread:
			if req, ok := dl.Message.Data.(Request); ok {
				require.Equal(t, aPID, req.ReplyTo.PID)
				unread["request"]++
			} else {
				unread[dl.Message.Data]++
			}
		case DeadLateReply:
			late++
			require.Equal(t, "answer after the end", dl.Message.Data)
		default:
			t.Fatalf("dead letter %v for %v", dl.Reason, dl.Message)
		}
	}
	for i := range msgs {
		require.Equal(t, 1, unread[i], "dead letters of message %d", i)
	}
	require.Equal(t, 1, unread["request"], "dead letters of the request")
	require.Len(t, unread, msgs+1)
	require.Equal(t, 1, late, "late replies")
	require.Len(t, replyErr, 1)
	require.ErrorIs(t, replyErr[0], ErrProcessNotFound, "the reply to the ended asker")
	require.ErrorIs(t, nextErr[0], ErrProcessNotFound, "a Tell to the slot's next PID before it started")
}

// TestReuseBounceToEndedSenderIsDeadLetter: a process tells a busy
// process whose mailbox holds one message (MailboxDropOldest), then
// ends, and its record serves the next process of its slot. A message
// that then evicts the first one bounces it to the ended sender's PID:
// that is a dead letter naming the ended sender, and the process in its
// record gets nothing.
func TestReuseBounceToEndedSenderIsDeadLetter(t *testing.T) {
	var dead reuseDeadLetters
	s := newScheduler(t, WithWorkers(2), WithHooks(Hooks{DeadLetter: dead.add}))
	entered, release := make(chan struct{}), make(chan struct{})
	var targetEvents []Event
	target := &reuseProc{step: func(n int, evs []Event, out *StepOutput) error {
		if n == 0 {
			close(entered)
			<-release
			return nil
		}
		targetEvents = append(targetEvents, evs...)
		for _, ev := range evs {
			if ev.Data == "stop" {
				out.Done(payload.Payload{})
			}
		}
		return nil
	}}
	th, err := s.Submit(context.Background(), target, "target", nil, Mailbox(1, MailboxDropOldest))
	require.NoError(t, err)
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	receive(t, entered, "the target's first step")
	tPID := th.PID()

	var nEvents []Event
	h, a, n := reusingPair(t, s, func(_ int, _ []Event, out *StepOutput) error {
		out.Tell(tPID, "from the first")
		out.Done(payload.Payload{})
		return nil
	}, collectThenEnd(&nEvents)) // the other worker is held
	aPID, nPID, nRec := a.pid, n.pid, n.rec
	reuseWaitState(t, s, nPID, StateIdle)
	info, _ := reuseInfo(s, tPID)
	require.Equal(t, 1, info.Queued, "the target's mailbox")

	require.NoError(t, s.Tell(tPID, "evicts"))
	dls := dead.all()
	require.Len(t, dls, 1, "dead letters: %v", dls)
	assert.Equal(t, DeadBounce, dls[0].Reason)
	assert.Equal(t, aPID, dls[0].Message.To, "the bounce goes to the ended sender")
	assert.Equal(t, tPID, dls[0].Message.From)
	assert.Equal(t, "from the first", dls[0].Message.Data)
	assert.ErrorIs(t, dls[0].Message.Err, ErrDropped)
	info, _ = reuseInfo(s, nPID)
	require.Zero(t, info.Queued, "events queued for the process in the ended sender's record")
	live, queued, _, _ := reuseRecordState(nRec)
	require.Nil(t, live)
	require.Zero(t, queued)

	close(release)
	require.NoError(t, s.Tell(nPID, "only this"))
	require.NoError(t, waitEnd(t, h))
	require.Len(t, nEvents, 1, "the second child's events: %v", nEvents)
	require.Equal(t, "only this", nEvents[0].Data)
	eventually(t, "the target idle", func() bool {
		info, ok := reuseInfo(s, tPID)
		return ok && info.State == StateIdle
	})
	require.NoError(t, s.Tell(tPID, "stop"))
	require.NoError(t, waitEnd(t, th))
	var got []any
	for _, ev := range targetEvents {
		got = append(got, ev.Data)
	}
	require.Equal(t, []any{"evicts", "stop"}, got, "what the target read")
	require.Len(t, dead.all(), 1, "dead letters at the end")
}

// TestReuseSenderWaitingForRoomIsRefused: a sender waits in TellContext
// for room in the full mailbox of a process that then ends in its step,
// without reading it; the record is left for the slot's next process,
// which its parent starts at once. The waiting sender is woken by the end
// and must be refused with ErrProcessNotFound, whether or not the next
// process has been published by then, and its message must reach
// nobody: not the next process, and not as a dead letter. The message
// that filled the mailbox is a dead letter of the ended process, once.
// Repeated, so that the sender's retry meets the next process's start at
// different points.
func TestReuseSenderWaitingForRoomIsRefused(t *testing.T) {
	const rounds = 30
	var dead reuseDeadLetters
	s := newScheduler(t, WithWorkers(1), WithMailbox(1, MailboxReject), WithHooks(Hooks{DeadLetter: dead.add}))
	reused := 0
	for round := range rounds {
		entered, release := make(chan struct{}), make(chan struct{})
		aCtx, nCtx := make(chan context.Context, 1), make(chan context.Context, 1)
		first := &reuseProc{ready: aCtx, step: func(_ int, _ []Event, out *StepOutput) error {
			close(entered)
			<-release
			out.Done(payload.Payload{})
			return nil
		}}
		var nEvents []Event
		second := &reuseProc{ready: nCtx, step: collectThenEnd(&nEvents)}
		h, err := s.Submit(context.Background(), oneAfterOther(first, second), "run", nil)
		require.NoError(t, err)
		aC := receive(t, aCtx, "the first child's context")
		aRec, aID := spawnedCtx(t, aC, false)
		aPID := relay.PID{Node: s.node, ID: aID}
		receive(t, entered, "the first child's step")
		require.NoError(t, s.Tell(aPID, fmt.Sprint("fills ", round)))
		waited := make(chan error, 1)
		go func() { waited <- s.TellContext(context.Background(), aPID, fmt.Sprint("waits ", round)) }()
		eventually(t, "the sender waits for room", func() bool { return SendersWaitForRoom(s, aPID) })
		close(release)
		require.ErrorIs(t, receive(t, waited, "the waiting sender"), ErrProcessNotFound, "round %d", round)
		nC := receive(t, nCtx, "the second child's context")
		nRec, nID := spawnedCtx(t, nC, false)
		nPID := relay.PID{Node: s.node, ID: nID}
		if nRec == aRec {
			reused++
		}
		reuseWaitState(t, s, nPID, StateIdle)
		require.NoError(t, s.Tell(nPID, "only this"))
		require.NoError(t, waitEnd(t, h))
		require.Len(t, nEvents, 1, "round %d: the second child's events: %v", round, nEvents)
		require.Equal(t, "only this", nEvents[0].Data)
	}
	require.Positive(t, reused, "no record was reused")
	counts := map[any]int{}
	for _, dl := range dead.all() {
		require.Equal(t, DeadUnread, dl.Reason, "dead letter %v", dl.Message)
		counts[dl.Message.Data]++
	}
	for round := range rounds {
		require.Equal(t, 1, counts[fmt.Sprint("fills ", round)], "dead letters of the message that filled round %d's mailbox", round)
		require.Zero(t, counts[fmt.Sprint("waits ", round)], "the refused message of round %d is no dead letter", round)
	}
	t.Logf("%d of %d records reused", reused, rounds)
}

// TestReuseAwaitedChildOutlivesItsParent: a parent ends in the step that
// spawns an awaited child, and its record goes to the next process of
// its slot, which awaits a child of its own under the same tag. The
// first child's end completes the await of an ended parent: it must be
// dropped, not delivered to the process in the parent's record, which
// gets only its own child's end.
func TestReuseAwaitedChildOutlivesItsParent(t *testing.T) {
	s := newScheduler(t, WithWorkers(1))
	childStep := func(_ int, evs []Event, out *StepOutput) error {
		for _, ev := range evs {
			if ev.Data == "end" {
				out.Done(payload.Of("child result"))
			}
		}
		return nil
	}
	cCtx, dCtx := make(chan context.Context, 1), make(chan context.Context, 1)
	pCtx, nCtx := make(chan context.Context, 1), make(chan context.Context, 1)
	orphan := &reuseProc{ready: cCtx, step: childStep}
	own := &reuseProc{ready: dCtx, step: childStep}
	parent := &reuseProc{ready: pCtx, step: func(_ int, _ []Event, out *StepOutput) error {
		out.SpawnAwait(1, orphan, "orphan", nil)
		out.Done(payload.Payload{})
		return nil
	}}
	var nEvents []Event
	next := &reuseProc{ready: nCtx, step: func(n int, evs []Event, out *StepOutput) error {
		if n == 0 {
			out.SpawnAwait(1, own, "own", nil)
			return nil
		}
		nEvents = append(nEvents, evs...)
		out.Done(payload.Payload{})
		return nil
	}}
	h, err := s.Submit(context.Background(), oneAfterOther(parent, next), "run", nil)
	require.NoError(t, err)
	pRec, _ := spawnedCtx(t, receive(t, pCtx, "the parent's context"), false)
	nRec, _ := spawnedCtx(t, receive(t, nCtx, "the next process's context"), false)
	require.Same(t, pRec, nRec, "the next process has the ended parent's record")
	_, cID := spawnedCtx(t, receive(t, cCtx, "the orphan's context"), false)
	_, dID := spawnedCtx(t, receive(t, dCtx, "the own child's context"), false)
	cPID, dPID := relay.PID{Node: s.node, ID: cID}, relay.PID{Node: s.node, ID: dID}
	reuseWaitState(t, s, cPID, StateIdle)
	reuseWaitState(t, s, dPID, StateIdle)

	require.NoError(t, s.Tell(cPID, "end"))
	barrierOnOneWorker(t, s) // the orphan has ended, and its end been handed on
	_, ok := reuseInfo(s, cPID)
	require.False(t, ok, "the orphan is still listed")
	nPID := relay.PID{Node: s.node, ID: nRec.id.Load()}
	info, ok := reuseInfo(s, nPID)
	require.True(t, ok)
	require.Equal(t, StateBlocked, info.State, "the process in the parent's record, after the orphan's end")
	require.Zero(t, info.Queued)
	require.Equal(t, 1, info.Pending)

	require.NoError(t, s.Tell(dPID, "end"))
	require.NoError(t, waitEnd(t, h))
	require.Len(t, nEvents, 1, "what the process in the parent's record got: %v", nEvents)
	require.Equal(t, dPID, nEvents[0].From, "the await completed by the wrong child")
	require.Equal(t, uint64(1), nEvents[0].Tag)
	require.NoError(t, nEvents[0].Error)
}

// reuseKey is the context key of the values tests.
type reuseKey struct{}

// afterFuncer is the AfterFunc method of a process context, which the
// context package calls for the contexts derived from it.
type afterFuncer interface {
	AfterFunc(f func()) (stop func() bool)
}

// reuseViolations collects what must not happen, from any goroutine.
type reuseViolations struct {
	mu   sync.Mutex
	list []string
}

func (v *reuseViolations) addf(format string, args ...any) {
	v.mu.Lock()
	if len(v.list) < 20 {
		v.list = append(v.list, fmt.Sprintf(format, args...))
	}
	v.mu.Unlock()
}

func (v *reuseViolations) check(t *testing.T) {
	t.Helper()
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, s := range v.list {
		t.Error(s)
	}
}

// reuseChainChild is a child of TestReuseContextsOfSuccessiveOccupants.
type reuseChainChild struct {
	k       int
	want    any // its context's value for reuseKey
	v       *reuseViolations
	prev    *reuseChainChild // the child started before it, ended
	ctx     context.Context
	pid     relay.PID
	closed  atomic.Bool
	fired   atomic.Int32 // runs of its AfterFunc
	firedOK chan struct{}
	n       int
	cancel  bool
}

func (c *reuseChainChild) Init(ctx context.Context, _ string, _ payload.Payloads) error {
	c.ctx = ctx
	c.pid, _ = Self(ctx)
	if c.k%4 == 2 {
		// Through the method the context package uses for derived
		// contexts, without a Done channel, which would keep the record
		// from reuse.
		ctx.(afterFuncer).AfterFunc(func() {
			if !c.closed.Load() {
				c.v.addf("the AfterFunc of child %d (%v) ran before its end", c.k, c.pid)
			}
			if c.fired.Add(1) != 1 {
				c.v.addf("the AfterFunc of child %d ran twice", c.k)
			}
			if ctx.Err() == nil || !errors.Is(context.Cause(ctx), ErrEnded) {
				c.v.addf("child %d's AfterFunc: Err %v, Cause %v", c.k, ctx.Err(), context.Cause(ctx))
			}
			close(c.firedOK)
		})
	}
	return nil
}

func (c *reuseChainChild) Close() { c.closed.Store(true) }

func (c *reuseChainChild) Step(evs []Event, out *StepOutput) error {
	n := c.n
	c.n++
	for _, ev := range evs {
		if ev.Type == EventCancel {
			c.cancel = true
		}
	}
	// Its own context, while it runs: its PID, its values, not done,
	// unless it was asked to stop.
	if self, _ := Self(c.ctx); self != out.Self() || self != c.pid {
		c.v.addf("child %d: its context answers %v, its step %v", c.k, self, out.Self())
	}
	if got := c.ctx.Value(reuseKey{}); got != c.want {
		c.v.addf("child %d: its context's value %v, want %v", c.k, got, c.want)
	}
	if !c.cancel && (c.ctx.Err() != nil || context.Cause(c.ctx) != nil) {
		c.v.addf("child %d (%v), running: its context is done: %v, %v", c.k, c.pid, c.ctx.Err(), context.Cause(c.ctx))
	}
	// The one before it, ended: done with its own cause, its PID, its
	// values.
	if p := c.prev; p != nil {
		want := ErrEnded
		if p.k%4 == 1 {
			want = ErrTerminated
		}
		if self, _ := Self(p.ctx); self != p.pid {
			c.v.addf("child %d's context answers %v, want %v", p.k, self, p.pid)
		}
		if p.ctx.Err() == nil || !errors.Is(context.Cause(p.ctx), want) {
			c.v.addf("child %d, ended, seen from child %d: Err %v, Cause %v, want %v", p.k, c.k, p.ctx.Err(), context.Cause(p.ctx), want)
		}
		// Its Done channel, asked for after the record moved on, is
		// closed (and asking makes none for this child's context).
		if !ctxDoneNow(p.ctx) {
			c.v.addf("child %d, ended, seen from child %d: its context's Done is open", p.k, c.k)
		}
		if got := p.ctx.Value(reuseKey{}); got != p.want {
			c.v.addf("child %d, ended: its context's value %v, want %v", p.k, got, p.want)
		}
	}
	switch c.k % 4 {
	case 1: // asks itself to stop, then ends at the cancel
		if n == 0 {
			if err := schedOf(c).Terminate(c.pid); err != nil {
				c.v.addf("child %d: Terminate(self): %v", c.k, err)
			}
			return nil
		}
		if c.cancel {
			if !errors.Is(context.Cause(c.ctx), ErrTerminated) {
				c.v.addf("child %d, terminated: cause %v", c.k, context.Cause(c.ctx))
			}
			out.Done(payload.Payload{})
		}
		return nil
	case 3: // fails
		if n == 2 {
			return fmt.Errorf("child %d fails", c.k)
		}
	default:
		if n == 2 {
			out.Done(payload.Payload{})
			return nil
		}
	}
	out.Continue()
	return nil
}

// reuseSched is the scheduler of the running context-chain test, for its
// children's Terminate of themselves.
var reuseSched atomic.Pointer[Scheduler]

func schedOf(*reuseChainChild) *Scheduler { return reuseSched.Load() }

// TestReuseContextsOfSuccessiveOccupants: on one worker, a parent
// awaits children one after another, so that each takes the record of
// the one before when that one's end left it (not after Terminate).
// Every child checks, at each of its steps, that its own context is not
// done and answers its own PID and values, and that the context of the
// child before it is done with that child's cause (ErrEnded, or
// ErrTerminated), answers that child's PID and values; a goroutine
// meanwhile reads every context published so far and checks that none
// answers another PID or value, and that none that was done becomes
// undone. Some children run a function registered with the context's
// AfterFunc, which must run once, after their end, though their record
// serves the next child by then.
func TestReuseContextsOfSuccessiveOccupants(t *testing.T) {
	for _, values := range []bool{false, true} {
		t.Run(fmt.Sprintf("values=%v", values), func(t *testing.T) {
			s := newScheduler(t, WithWorkers(1))
			reuseSched.Store(s)
			defer reuseSched.Store(nil)
			v := &reuseViolations{}
			const children = 3*ctxGens + 7
			ctx, want := context.Background(), any(nil)
			if values {
				ctx, want = context.WithValue(ctx, reuseKey{}, "kept"), "kept"
			}
			kids := make([]*reuseChainChild, children)
			for k := range kids {
				kids[k] = &reuseChainChild{k: k, want: want, v: v, firedOK: make(chan struct{})}
				if k > 0 {
					kids[k].prev = kids[k-1]
				}
			}
			var published atomic.Int64
			parent := numbered(func(n int, evs []Event, out *StepOutput) error {
				if n > 0 {
					published.Store(int64(n)) // child n-1 has ended; its fields are set
				}
				if n < children {
					out.SpawnAwait(uint64(n+1), kids[n], "chain", nil)
				} else {
					out.Done(payload.Payload{})
				}
				return nil
			})
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() {
				wasDone := make([]bool, children)
				for {
					select {
					case <-stop:
						return
					default:
					}
					n := int(published.Load())
					for k := range n {
						c := kids[k]
						if self, _ := Self(c.ctx); self != c.pid {
							v.addf("reader: child %d's context answers %v, want %v", k, self, c.pid)
						}
						if got := c.ctx.Value(reuseKey{}); got != c.want {
							v.addf("reader: child %d's context's value %v", k, got)
						}
						done := c.ctx.Err() != nil
						if wasDone[k] && !done {
							v.addf("reader: child %d's context is no longer done", k)
						}
						if !done {
							v.addf("reader: child %d's context is not done after its end", k)
						}
						wasDone[k] = done
					}
				}
			})
			h, err := s.Submit(ctx, parent, "run", nil)
			require.NoError(t, err)
			_, err = h.Wait(t.Context())
			close(stop)
			wg.Wait()
			require.NoError(t, err)
			v.check(t)
			records := map[*proc]int{}
			recs := make([]*proc, children)
			for k, c := range kids {
				p, id := spawnedCtx(t, c.ctx, values)
				records[p]++
				recs[k] = p
				require.Equal(t, relay.PID{Node: s.node, ID: id}, c.pid, "child %d", k)
				if k%4 == 2 {
					receive(t, c.firedOK, fmt.Sprintf("child %d's AfterFunc", k))
					require.Equal(t, int32(1), c.fired.Load())
				}
			}
			require.Less(t, len(records), children/2, "%d children on %d records: too little reuse to test anything", children, len(records))
			// The records of the children that ran an AfterFunc, and of those
			// that failed, went on to the next child (but at the end of a run
			// of ctxGens generations).
			passed := map[int]int{}
			for k := 0; k+1 < children; k++ {
				if recs[k] == recs[k+1] {
					passed[k%4]++
				}
			}
			require.Zero(t, passed[1], "a terminated child's record was reused")
			require.Positive(t, passed[2], "no record of a child with an AfterFunc was reused")
			require.Positive(t, passed[3], "no record of a failed child was reused")
			t.Logf("%d children on %d records", children, len(records))
		})
	}
}

// TestReuseEndHookAndPanicsPerOccupant: with the End hook set (the
// timed records, ended through the general path), children of one
// parent on one worker end one after another in various ways (done
// after some steps, a failing step, a panicking step, a panicking
// Close, a failing Init) and mostly reuse each other's records. Each
// end is reported for the process that ended, once: its PID, its entry
// point, its own count of steps (not added to the count of the record's
// process before), its error; each panic for the process that panicked;
// and each awaiting yield completes with that child's outcome only.
func TestReuseEndHookAndPanicsPerOccupant(t *testing.T) {
	var mu sync.Mutex
	ends := map[relay.PID][]EndInfo{}
	panics := map[relay.PID][]PanicInfo{}
	s := newScheduler(t, WithWorkers(1), WithHooks(Hooks{
		End: func(e EndInfo) {
			mu.Lock()
			ends[e.PID] = append(ends[e.PID], e)
			mu.Unlock()
		},
		Panic: func(p PanicInfo) {
			mu.Lock()
			panics[p.PID] = append(panics[p.PID], p)
			mu.Unlock()
		},
	}))
	const children = 2*ctxGens + 9
	ctxs := make([]chan context.Context, children)
	steps := func(k int) int { return 1 + k%3 }
	behaviour := func(k int) int { return (k / 2) % 5 } // pairs, so a behaviour follows itself too
	child := func(k int) Process {
		ctxs[k] = make(chan context.Context, 1)
		p := &reuseProc{ready: ctxs[k]}
		b := behaviour(k)
		if b == 4 {
			p.init = func(context.Context) error { return fmt.Errorf("init %d", k) }
		}
		if b == 3 {
			p.close = func() { panic(fmt.Sprintf("close %d", k)) }
		}
		p.step = func(n int, _ []Event, out *StepOutput) error {
			if n+1 < steps(k) {
				out.Continue()
				return nil
			}
			switch b {
			case 1:
				return fmt.Errorf("step %d", k)
			case 2:
				panic(fmt.Sprintf("step %d", k))
			}
			out.Done(payload.Of(k))
			return nil
		}
		return p
	}
	got := make([]Event, 0, children)
	parent := numbered(func(n int, evs []Event, out *StepOutput) error {
		got = append(got, evs...)
		if n < children {
			out.SpawnAwait(uint64(n+1), child(n), fmt.Sprint("b", behaviour(n)), nil)
		} else {
			out.Done(payload.Payload{})
		}
		return nil
	})
	h, err := s.Submit(context.Background(), parent, "run", nil)
	require.NoError(t, err)
	require.NoError(t, waitEnd(t, h))
	require.Len(t, got, children)

	mu.Lock()
	defer mu.Unlock()
	records := map[*proc]int{}
	for k := range children {
		ctx := receive(t, ctxs[k], "a child's context")
		p, id := spawnedCtx(t, ctx, false)
		records[p]++
		pid := relay.PID{Node: s.node, ID: id}
		ev := got[k]
		require.Equal(t, uint64(k+1), ev.Tag)
		b := behaviour(k)
		if b != 4 { // a failed Init's completion names no child
			require.Equal(t, pid, ev.From, "the await of child %d completed by another", k)
		}
		var pe *PanicError
		switch b {
		case 0, 3:
			if b == 0 {
				require.NoError(t, ev.Error, "child %d", k)
			} else {
				require.ErrorAs(t, ev.Error, &pe, "child %d", k)
				require.Equal(t, "Close", pe.Where)
				require.Equal(t, fmt.Sprintf("close %d", k), pe.Value)
			}
			require.Equal(t, k, ev.Result().Value(), "child %d's result", k)
		case 1:
			require.EqualError(t, ev.Error, fmt.Sprintf("step %d", k))
		case 2:
			require.ErrorAs(t, ev.Error, &pe, "child %d", k)
			require.Equal(t, "Step", pe.Where)
			require.Equal(t, fmt.Sprintf("step %d", k), pe.Value)
		case 4:
			require.ErrorIs(t, ev.Error, ErrInit, "child %d", k)
			require.Empty(t, ends[pid], "End reported for child %d, whose Init failed", k)
			continue
		}
		require.Len(t, ends[pid], 1, "End reports of child %d (%v)", k, pid)
		e := ends[pid][0]
		require.Equal(t, fmt.Sprint("b", b), e.Method, "child %d's entry point", k)
		require.Equal(t, uint64(steps(k)), e.Steps, "child %d's steps", k)
		require.GreaterOrEqual(t, e.Duration, time.Duration(0))
		if b == 0 {
			require.NoError(t, e.Err)
		} else {
			require.Error(t, e.Err)
		}
		if b == 2 || b == 3 {
			require.Len(t, panics[pid], 1, "panics of child %d", k)
			require.Equal(t, fmt.Sprint("b", b), panics[pid][0].Method)
		} else {
			require.Empty(t, panics[pid], "panics of child %d", k)
		}
	}
	started := 1 // the parent
	for k := range children {
		if behaviour(k) != 4 {
			started++
		}
	}
	require.Len(t, ends, started, "processes the End hook reported")
	t.Logf("%d children on %d records", children, len(records))
	require.Less(t, len(records), children/2, "too little reuse to test anything")
}

// staleMsg is a message for the process to.
type staleMsg struct {
	to relay.PID
}

// TestReuseWithCallerHelp: the one worker is held and the scheduler
// made WithCallerHelp, so the goroutine that spawns runs most of the
// processes itself; each spawns a child and ends, and the helper's own
// cache of free IDs gives the children the records of the processes it
// has just ended. Meanwhile the spawner tells processes it started a
// while ago, most of them ended and their records serving others. Each
// message is read only by the process it was sent to, or left unread by
// it (a dead letter naming it), or refused with ErrProcessNotFound; and
// every context names its own process and is done with ErrEnded.
func TestReuseWithCallerHelp(t *testing.T) {
	const n = 20 * yieldBacklog
	v := &reuseViolations{}
	var accepted, refused, read, unread atomic.Int64
	hook := func(dl DeadLetter) {
		m, ok := dl.Message.Data.(staleMsg)
		if !ok {
			return
		}
		if dl.Reason != DeadUnread || dl.Message.To != m.to {
			v.addf("dead letter %v to %v (%v), sent to %v", m, dl.Message.To, dl.Reason, m.to)
		}
		unread.Add(1)
	}
	s := newScheduler(t, WithWorkers(1), WithWatchdog(0), WithCallerHelp(), WithHooks(Hooks{DeadLetter: hook}))
	release := holdWorker(t, s)
	var mu sync.Mutex
	ctxs := make(map[relay.PID]context.Context, 2*n)
	record := func(ctx context.Context) relay.PID {
		pid, _ := Self(ctx)
		mu.Lock()
		if _, dup := ctxs[pid]; dup {
			v.addf("two processes have the PID %v", pid)
		}
		ctxs[pid] = ctx
		mu.Unlock()
		return pid
	}
	var ended atomic.Int64
	reader := func(self relay.PID, evs []Event) {
		for _, ev := range evs {
			if m, ok := ev.Data.(staleMsg); ok {
				if m.to != self {
					v.addf("process %v read a message sent to %v", self, m.to)
				}
				read.Add(1)
			}
		}
	}
	leaf := func() Process {
		var self relay.PID
		return &reuseProc{
			init: func(ctx context.Context) error { self = record(ctx); return nil },
			step: func(_ int, evs []Event, out *StepOutput) error {
				reader(self, evs)
				ended.Add(1)
				out.Done(payload.Payload{})
				return nil
			},
		}
	}
	pids := make([]relay.PID, 0, n)
	for i := range n {
		var self relay.PID
		pid, err := s.Spawn(context.Background(), &reuseProc{
			init: func(ctx context.Context) error { self = record(ctx); return nil },
			step: func(k int, evs []Event, out *StepOutput) error {
				reader(self, evs)
				if k == 0 && i%2 == 0 {
					out.Continue() // a second step, for messages that came meanwhile
					return nil
				}
				out.Spawn(1, leaf(), "leaf", nil)
				ended.Add(1)
				out.Done(payload.Payload{})
				return nil
			},
		}, "spawner", nil)
		require.NoError(t, err)
		pids = append(pids, pid)
		// Recent processes wait in the queue; those about yieldBacklog
		// back and more are the ones a help runs and ends.
		for _, back := range []int{1, 300, yieldBacklog, yieldBacklog + 60, 2 * yieldBacklog} {
			if i >= back {
				to := pids[i-back]
				switch err := s.Tell(to, staleMsg{to: to}); {
				case errors.Is(err, ErrProcessNotFound):
					refused.Add(1)
				case err == nil:
					accepted.Add(1)
				default:
					v.addf("Tell(%v): %v", to, err)
				}
			}
		}
	}
	st := s.Stats()
	require.Positive(t, st.Helped, "the caller helped with no process")
	release()
	eventually(t, "every process ended", func() bool { return ended.Load() == 2*n })
	eventually(t, "every process closed", func() bool { return s.Stats().Processes.Live == 0 })
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	require.NoError(t, s.Shutdown(ctx)) // every dead letter reported
	v.check(t)
	require.Equal(t, accepted.Load(), read.Load()+unread.Load(), "messages accepted, against read and unread")
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, ctxs, 2*n)
	records := map[*proc]int{}
	for pid, ctx := range ctxs {
		p, id := spawnedCtx(t, ctx, false)
		records[p]++
		require.Equal(t, pid.ID, id)
		require.ErrorIs(t, ctx.Err(), context.Canceled, "the context of %v", pid)
		require.ErrorIs(t, context.Cause(ctx), ErrEnded, "the context of %v", pid)
	}
	t.Logf("%d processes on %d records, %d helped; %d messages refused, %d accepted: %d read, %d unread",
		2*n, len(records), st.Helped, refused.Load(), accepted.Load(), read.Load(), unread.Load())
	require.Positive(t, refused.Load(), "no message to an ended process")
	require.Less(t, len(records), 2*n*3/4, "too little reuse to test anything")
}

// TestReuseTimersOfEndedOccupants: children on two workers sleep for
// short random times, under the same tag, again and again, while a
// goroutine outside tells recent children (live or ended) to quit, so
// that children end with timers about to fire and their records serve
// new children that sleep under the same tag. A child's sleep must never
// complete before its own deadline, nor twice, nor when it has none
// pending: the timer of the process before it in its record must not
// wake it.
func TestReuseTimersOfEndedOccupants(t *testing.T) {
	const width, rounds, sleeps = 8, 150, 3
	v := &reuseViolations{}
	s := newScheduler(t, WithWorkers(2))
	var ring [64]atomic.Pointer[relay.PID] // recent children told to quit
	var published atomic.Uint64
	var quit, slept, sharedRecords atomic.Int64
	var lastRec sync.Map // slot -> the record of its last child
	child := func(seed uint64) Process {
		var (
			self    relay.PID
			pending bool
			since   time.Time
			d       time.Duration
			done    int
		)
		sleep := func(out *StepOutput) {
			seed = seed*6364136223846793005 + 1442695040888963407
			d = time.Duration(seed>>33%300) * time.Microsecond
			since = time.Now()
			pending = true
			out.Sleep(1, d)
		}
		return &reuseProc{
			init: func(ctx context.Context) error {
				self, _ = Self(ctx)
				c, _ := ctx.(interface{ ident() (*proc, uint64) })
				p, _ := c.ident()
				if prev, ok := lastRec.Swap(slotOf(self.ID), p); ok && prev.(*proc) == p {
					sharedRecords.Add(1)
				}
				if i := published.Add(1); i%4 == 0 { // a quarter are told to quit
					ring[i/4%uint64(len(ring))].Store(&self)
				}
				return nil
			},
			step: func(n int, evs []Event, out *StepOutput) error {
				if n == 0 {
					sleep(out)
					return nil
				}
				for _, ev := range evs {
					switch {
					case ev.Type == EventMessage:
						if ev.Data != self {
							v.addf("process %v read a message for %v", self, ev.Data)
						}
						quit.Add(1)
						out.Done(payload.Payload{})
						return nil
					case ev.Type == EventYieldComplete && ev.Tag == 1:
						if !pending {
							v.addf("process %v: a sleep completed with none pending", self)
						}
						if el := time.Since(since); el < d {
							v.addf("process %v: its sleep of %v completed after %v", self, d, el)
						}
						pending = false
						done++
						slept.Add(1)
					default:
						v.addf("process %v: event %v", self, ev)
					}
				}
				if done == sleeps {
					out.Done(payload.Payload{})
				} else if !pending {
					sleep(out)
				}
				return nil
			},
		}
	}
	var seed uint64
	left, round := 0, 0
	parent := numbered(func(n int, evs []Event, out *StepOutput) error {
		for _, ev := range evs {
			if ev.Type == EventYieldComplete {
				if ev.Error != nil {
					v.addf("a child failed: %v", ev.Error)
				}
				left--
			}
		}
		if left > 0 {
			return nil
		}
		if round == rounds {
			out.Done(payload.Payload{})
			return nil
		}
		round++
		for i := range width {
			seed++
			out.SpawnAwait(uint64(round*width+i), child(seed), "sleeper", nil)
		}
		left = width
		return nil
	})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := uint64(0); ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			runtime.Gosched() // spare the workers on a machine with few processors
			p := ring[i%uint64(len(ring))].Load()
			if p == nil {
				continue
			}
			if err := s.Tell(*p, *p); err != nil && !errors.Is(err, ErrProcessNotFound) {
				v.addf("Tell(%v): %v", *p, err)
			}
		}
	})
	h, err := s.Submit(context.Background(), parent, "parent", nil)
	require.NoError(t, err)
	err = waitEnd(t, h)
	close(stop)
	wg.Wait()
	require.NoError(t, err)
	v.check(t)
	requireNoTimersLeft(t, s)
	t.Logf("%d children: %d quit, %d sleeps completed, %d took the record of their slot's last child",
		width*rounds, quit.Load(), slept.Load(), sharedRecords.Load())
	require.Positive(t, quit.Load())
	require.Positive(t, slept.Load())
	require.Positive(t, sharedRecords.Load(), "no record reused")
}

// requireNoTimersLeft waits until no timer is left in s: every ended
// process released its own.
func requireNoTimersLeft(t *testing.T, s *Scheduler) {
	t.Helper()
	eventually(t, "no timer left", func() bool { return s.timers.pending() == 0 })
}

// TestReuseLateCompletionOfEndedProcess: a handler keeps the Call of
// a child's yield without completing it, and the child ends; the next
// process of its slot (in a record of its own: a record a handler may
// hold is not reused) yields under the same tag, and the handler keeps
// that Call too. Completing the ended child's yield late must fail with
// ErrProcessNotFound and leave the next process waiting; its own
// completion then reaches it, once. The ended child's call context is
// done with ErrEnded, the next one's not.
func TestReuseLateCompletionOfEndedProcess(t *testing.T) {
	calls := make(chan Call, 2)
	s := newScheduler(t, WithWorkers(1), WithHandler(FirstUserCommand, func(c Call) error {
		calls <- c
		return nil
	}))
	aCtx, nCtx := make(chan context.Context, 1), make(chan context.Context, 1)
	step := func(got *[]Event) func(n int, evs []Event, out *StepOutput) error {
		return func(n int, evs []Event, out *StepOutput) error {
			if n == 0 {
				out.Yield(5, FirstUserCommand, nil)
				return nil
			}
			*got = append(*got, evs...)
			for _, ev := range evs {
				if ev.Type == EventYieldComplete || ev.Data == "end" {
					out.Done(payload.Payload{})
				}
			}
			return nil
		}
	}
	var aEvents, nEvents []Event
	first := &reuseProc{ready: aCtx, step: step(&aEvents)}
	second := &reuseProc{ready: nCtx, step: step(&nEvents)}
	h, err := s.Submit(context.Background(), oneAfterOther(first, second), "run", nil)
	require.NoError(t, err)
	aRec, aID := spawnedCtx(t, receive(t, aCtx, "the first child's context"), false)
	aPID := relay.PID{Node: s.node, ID: aID}
	aCall := receive(t, calls, "the first child's call")
	require.Equal(t, aPID, aCall.PID)
	reuseWaitState(t, s, aPID, StateBlocked)
	require.NoError(t, s.Tell(aPID, "end"))
	nRec, nID := spawnedCtx(t, receive(t, nCtx, "the second child's context"), false)
	nPID := relay.PID{Node: s.node, ID: nID}
	nCall := receive(t, calls, "the second child's call")
	require.NotSame(t, aRec, nRec, "a record a handler's Call holds was reused")
	reuseWaitState(t, s, nPID, StateBlocked)
	require.Equal(t, NextPIDOfSlot(aPID), nPID, "the second child is the next process of the first one's slot")

	require.ErrorIs(t, aCall.Complete("late", nil), ErrProcessNotFound)
	require.ErrorIs(t, aCall.Completion().Complete("late", nil), ErrProcessNotFound)
	require.ErrorIs(t, s.CompleteYield(aPID, 5, "late", nil), ErrProcessNotFound)
	require.ErrorIs(t, context.Cause(aCall.Context()), ErrEnded)
	require.NoError(t, nCall.Context().Err())
	info, _ := reuseInfo(s, nPID)
	require.Equal(t, StateBlocked, info.State)
	require.Zero(t, info.Queued)

	require.NoError(t, nCall.Completion().Complete("mine", nil))
	// Completed already; the child may also have ended by now.
	if err := nCall.Complete("twice", nil); !errors.Is(err, ErrYieldNotPending) && !errors.Is(err, ErrProcessNotFound) {
		t.Fatalf("a second completion: %v, want ErrYieldNotPending or ErrProcessNotFound", err)
	}
	require.NoError(t, waitEnd(t, h))
	require.Len(t, nEvents, 1, "the second child's events: %v", nEvents)
	require.Equal(t, "mine", nEvents[0].Data)
	require.Equal(t, uint64(5), nEvents[0].Tag)
	require.Len(t, aEvents, 1, "the first child's events: %v", aEvents)
	require.Equal(t, "end", aEvents[0].Data)
}

// TestReuseProcessesDuringChurn: while children on four workers end
// and their records serve new ones, Processes never lists a process
// twice, never lists one that has ended (by its state), lists only PIDs
// that were started, each with its own entry point, in PID order; and
// Stats never counts fewer live processes than zero.
func TestReuseProcessesDuringChurn(t *testing.T) {
	const width, rounds = 24, 120
	v := &reuseViolations{}
	s := newScheduler(t, WithWorkers(4))
	var methods sync.Map // PID -> entry point, stored by Init
	var ended sync.Map   // PID -> true, stored by the last step
	methodNames := []string{"left", "right", "middle"}
	child := func(k int) Process {
		var self relay.PID
		method := methodNames[k%len(methodNames)]
		return &reuseProc{
			init: func(ctx context.Context) error {
				self, _ = Self(ctx)
				methods.Store(self, method)
				return nil
			},
			step: func(n int, _ []Event, out *StepOutput) error {
				if n < k%3 {
					out.Continue()
					return nil
				}
				ended.Store(self, true)
				out.Done(payload.Payload{})
				return nil
			},
		}
	}
	left, round := 0, 0
	parent := numbered(func(n int, evs []Event, out *StepOutput) error {
		left -= len(evs)
		if left > 0 {
			return nil
		}
		if round == rounds {
			out.Done(payload.Payload{})
			return nil
		}
		round++
		for i := range width {
			out.SpawnAwait(uint64(round*width+i), child(round+i), methodNames[(round+i)%len(methodNames)], nil)
		}
		left = width
		return nil
	})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var snapshots atomic.Int64
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				infos := s.Processes()
				snapshots.Add(1)
				seen := map[relay.PID]bool{}
				for i, info := range infos {
					if seen[info.PID] {
						v.addf("Processes lists %v twice", info.PID)
					}
					seen[info.PID] = true
					if i > 0 && infos[i-1].PID.ID >= info.PID.ID {
						v.addf("Processes out of order: %v before %v", infos[i-1].PID, info.PID)
					}
					if info.State == StateEnded || info.State == 0 {
						v.addf("Processes lists %v as %v", info.PID, info.State)
					}
					if info.Method == "parent" {
						continue
					}
					m, ok := methods.Load(info.PID)
					if !ok {
						v.addf("Processes lists %v, never started", info.PID)
					} else if m != info.Method {
						v.addf("Processes lists %v with entry point %q, want %q", info.PID, info.Method, m)
					}
				}
				// Live may count more than were ever alive at once: the
				// ends are read before the starts (see liveCount), and
				// processes that start and end in between count as live.
				// It is never below zero.
				if st := s.Stats().Processes; st.Live < 0 {
					v.addf("Stats: %d processes live", st.Live)
				}
			}
		})
	}
	h, err := s.Submit(context.Background(), parent, "parent", nil)
	require.NoError(t, err)
	err = waitEnd(t, h)
	close(stop)
	wg.Wait()
	require.NoError(t, err)
	v.check(t)
	t.Logf("%d snapshots", snapshots.Load())
	require.Positive(t, snapshots.Load())
}

// TestReuseValuesAcrossOutsideSpawns: processes started with Spawn
// from outside the workers, every other one under a context with a
// value, end on the workers; enough of them that their IDs come back to
// the spawner through the shared free list with their records, so that
// a process with values takes the record of one without, and the
// reverse. Each context answers, after all of them have ended, its own
// process's PID and values (none for a process started without), and is
// done with ErrEnded.
func TestReuseValuesAcrossOutsideSpawns(t *testing.T) {
	const waves, perWave = 12, 400
	s := newScheduler(t, WithWorkers(2))
	type started struct {
		pid    relay.PID
		ctx    context.Context
		values bool
		want   any // the value it was given, or nil
	}
	var mu sync.Mutex
	var all []started
	var ended atomic.Int64
	for wave := range waves {
		for i := range perWave {
			values := (wave*perWave+i)%2 == 0
			ctx, want := context.Background(), any(nil)
			if values {
				ctx, want = context.WithValue(ctx, reuseKey{}, wave*perWave+i), wave*perWave+i
			}
			_, err := s.Spawn(ctx, &reuseProc{
				init: func(pctx context.Context) error {
					pid, _ := Self(pctx)
					mu.Lock()
					all = append(all, started{pid: pid, ctx: pctx, values: values, want: want})
					if got := pctx.Value(reuseKey{}); got != want {
						return fmt.Errorf("Init: the context's value %v, want %v", got, want)
					}
					mu.Unlock()
					return nil
				},
				step: func(_ int, _ []Event, out *StepOutput) error {
					ended.Add(1)
					out.Done(payload.Payload{})
					return nil
				},
			}, "valued", nil)
			require.NoError(t, err)
		}
		eventually(t, "the wave ended", func() bool {
			return ended.Load() == int64((wave+1)*perWave) && s.Stats().Processes.Live == 0
		})
	}
	mu.Lock()
	defer mu.Unlock()
	byRecord := map[*proc][]started{}
	for i, st := range all {
		p, id := spawnedCtx(t, st.ctx, st.values)
		require.Equal(t, st.pid.ID, id)
		self, _ := Self(st.ctx)
		require.Equal(t, st.pid, self)
		require.Equal(t, st.want, st.ctx.Value(reuseKey{}), "the value of process %d's context (started with values: %v)", i, st.values)
		require.ErrorIs(t, st.ctx.Err(), context.Canceled)
		require.ErrorIs(t, context.Cause(st.ctx), ErrEnded)
		byRecord[p] = append(byRecord[p], st)
	}
	mixed := 0
	for _, sts := range byRecord {
		for i := 1; i < len(sts); i++ {
			if sts[i].values != sts[i-1].values {
				mixed++
			}
		}
	}
	t.Logf("%d processes on %d records, %d times a record went between processes with and without values", len(all), len(byRecord), mixed)
	require.Positive(t, mixed, "no record went between a process with values and one without")
}
