package scheduler

import (
	"context"
	"time"

	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// Process is a lightweight state machine run by a [Scheduler]. It is a
// plain Go value, not a goroutine: the scheduler calls its methods on one
// of a few worker goroutines (or, with [WithCallerHelp], on a goroutine
// that starts processes), never two at once, so a process needs no locks
// for its own state.
//
// The life of a process:
//
//   - Init is called once, synchronously inside [Scheduler.Submit] or
//     [Scheduler.Spawn] (or on the worker that runs a step's spawn), with
//     the entry point the caller chose and its input. An error ends the
//     process before it ever runs; wrap [ErrUnknownMethod] for entry
//     points the process does not have. Init should be quick and must not
//     block. The process is published only once Init returns (and the
//     Start hook, if set: see [Hooks]): until then a message to it, a
//     [Scheduler.Terminate] of it or a name for it is refused with
//     [ErrProcessNotFound], and a monitor of it completes at once with
//     [ExitGone], so a process that tells itself something or registers
//     a name does so in its first step, and one that hands out its PID
//     from Init should expect others to find it only once Init has
//     returned. ctx is the process
//     context: it carries the values of the
//     context given to Submit or Spawn (not its
//     cancellation), [Self] returns the process's PID from it, and it is
//     cancelled when the process is terminated, when the scheduler shuts
//     down, and when the process ends. Its Done channel, which a context
//     derived from it or [context.AfterFunc] asks for, is made on demand
//     (Err, Value, [Self] and context.Cause do not make it): the record
//     of a process without a Handle that asked for it then serves no
//     later process (see [Scheduler.Spawn]), whose start allocates one.
//   - Step is called repeatedly. The first call has no events; each later
//     call gets every event that arrived since the previous call, in
//     arrival order, and is never called with no events unless the process
//     asked to continue. Step writes what it wants next into out (see
//     [StepOutput]). A non-nil error ends the process with that error.
//     Step must not block: anything slow is a yield. The events slice is
//     the scheduler's and valid only during the call, as out is: the
//     worker reuses its memory for the next step it runs, so a process
//     that keeps an event copies it (an Event is a value).
//   - Close is called exactly once for every process whose Init was called,
//     after its last Step, however it ended: done, error, panic, Init
//     failure, termination, shutdown or forced shutdown. After a failed
//     Init it runs where Init ran, before Submit or Spawn returns.
//
// A panic in any of the three methods ends the process with a [PanicError];
// the scheduler keeps serving every other process.
//
// A call of [runtime.Goexit] (which testing.T's FailNow, Fatal, Fatalf
// and SkipNow make, as do assertion helpers that stop a test) is taken
// as a panic whose value is [ErrGoexit]: the process ends with a
// PanicError that matches ErrGoexit, the Panic hook sees it, and Close
// runs once, unless it was Close that called it. The same goes for a
// handler that runs on a worker, and for work given to [Call.Go], whose
// yield completes with the error. Goexit still ends the goroutine it was
// called on, which nothing can prevent: a worker carries on on a new
// goroutine, and so does the blocking pool; an Init run by Submit or
// Spawn fails its start (the process is closed and counted out) and then
// ends the caller's goroutine, as Goexit means. A Goexit in the Init of
// a child that a step spawns fails that start, and ends the parent as
// well, whose run it cut short; so does one in the Start hook. A Goexit
// in the End hook, or in the Close of a process forced at a shutdown
// deadline, lets the end complete first; for the other hooks, see
// [Hooks]. In a test, report a failure inside a
// process with t.Error and return an error, or call FailNow only on the
// test's own goroutine.
//
// A Process value serves one process at a time, and that is the caller's
// to keep: the scheduler does not look for a value among the live
// processes, which would cost every start. A value started again while
// its process lives becomes a second process, with a PID, Init, steps
// and Close of its own, whose methods may run at the same time as the
// first's, on another worker: the value then needs locks after all. Once
// its Close has returned, a value may be started again, as a new process
// with a new Init.
type Process interface {
	Init(ctx context.Context, method string, input payload.Payloads) error
	Step(events []Event, out *StepOutput) error
	Close()
}

// status is what a step asked for: wait for events (the default),
// continue, or done.
type status uint8

const (
	statusWait     status = iota // wait: Blocked with yields outstanding, Idle otherwise
	statusContinue               // step again soon, even with no events
	statusDone                   // the process has finished
)

// CommandID names a user command a process can yield (see
// [StepOutput.Yield]); handlers are registered for it with [WithHandler]
// or [Scheduler.SetHandler]. IDs below [FirstUserCommand] are reserved.
type CommandID uint32

// FirstUserCommand is the smallest ID available for user commands.
const FirstUserCommand CommandID = 16

// yield is one thing a step asked for: a command, a message, a timer, a
// child, a monitor, a request, an answer or a cancel.
type yield struct {
	tag uint64    // chosen by the process; comes back in the completion event
	cmd CommandID // the user command (yieldGeneric)
	arg any       // the command's argument, the message, the body, the child

	// Typed arguments of the built-in helpers, kept out of Arg so that
	// the common yields do not allocate.
	kind   yieldKind
	to     relay.PID        // Tell, Monitor, Request: the other process; Reply: the asker
	when   int64            // Sleep: the deadline, nanoseconds on the timer clock; Reply: the asking yield
	method string           // Spawn: the entry point (Arg is the Process); TellName, RequestName: the name
	input  payload.Payloads // Spawn: the input
	err    error            // Reply: the error answered
	// deadline, if not 0, is when the yield completes with ErrTimeout
	// unless it completed before (StepOutput.Timeout), on the timer clock.
	deadline int64
}

// yieldKind distinguishes the typed built-in yields from generic ones.
type yieldKind uint8

const (
	yieldGeneric     yieldKind = iota // a user command: cmd and arg say everything
	yieldTell                         // Tell: arg is the message, to the recipient; no completion
	yieldSpawn                        // Spawn: arg is the Process, method and input typed
	yieldSpawnAwait                   // SpawnAwait: as yieldSpawn, completion at the child's end
	yieldTimer                        // Sleep/SleepUntil: when is the deadline
	yieldTellName                     // TellName: Arg is the message, method the name; no completion
	yieldMonitor                      // Monitor: to is the watched process
	yieldRequest                      // Request: Arg is the body, to the replier
	yieldRequestName                  // RequestName: as yieldRequest, with the replier's name in method
	yieldReply                        // Reply: to and when name the asking yield, Arg and err the answer; no completion
	yieldCancel                       // Cancel: tag is the yield to cancel; no completion
	yieldTimeout                      // Timeout of a yield of an earlier step: tag and deadline; no completion
)

// StepOutput is where [Process.Step] writes what the process wants next:
// a status (wait, the default; [StepOutput.Continue]; or
// [StepOutput.Done]) and any number of yields, commands for the scheduler
// and its handlers to carry out once Step returns. Each yield completes
// later with an [EventYieldComplete] that carries its tag, except those
// that complete nothing of their own: [StepOutput.Tell] and
// [StepOutput.TellName] (only an undeliverable message comes back),
// [StepOutput.Reply] (it completes the asker's yield), and
// [StepOutput.Cancel] and a [StepOutput.Timeout] of a yield of an
// earlier step (they act on that yield).
//
// The scheduler owns the StepOutput and reuses it for every step, so
// writing a status or the usual one or two yields does not allocate. It is
// valid only during Step, and keeping it past Step is the caller's
// mistake to avoid: checking each use would cost every yield. Once Step
// has returned, the StepOutput is the output of whatever step its worker
// runs next, which may be another process's. What the worker's own
// goroutine writes into it between steps (a Close that uses it, say) is
// dropped when the next step starts; what another goroutine writes while
// a step runs is a data race, and may be carried out as that step's, for
// the process that step belongs to.
type StepOutput struct {
	self   relay.PID
	status status
	result payload.Payload
	read   int // with statusDone: events of the batch read, -1 for all
	yields []yield
	// used is the most yields a step wrote since release: the part of
	// the yields buffer that may still hold references. release clears
	// that much, not the whole capacity, which one wide step may have
	// made large.
	used  int
	clock time.Time // the timer clock's origin, for Sleep deadlines
	// now, if not nil, is the clock Sleep and Timeout read instead of
	// time.Now: the test kit's virtual clock (see bridge.go).
	now func() time.Time
}

// Self returns the PID of the process being stepped.
func (o *StepOutput) Self() relay.PID { return o.self }

// Continue asks to be stepped again soon even if no event arrives. A
// process that keeps continuing is requeued behind other work after a
// budget of consecutive steps (see [WithStepBudget]). After Done or
// DoneAfter in the same step it does nothing: the end is final.
func (o *StepOutput) Continue() {
	if o.status != statusDone {
		o.status = statusContinue
	}
}

// Done ends the process with result once this step returns; nothing
// written after it in the same step (Continue included) can undo that.
// A step that fails after Done (returns an error or panics) ends the
// process all the same, with that failure instead of the result.
// The step is taken to have read every event of its batch. Yields
// written in the same step are still carried out (a final Tell is
// delivered, a child is started), but their completions reach no one. A
// completion that comes while they are carried out (a Spawn's, a
// handler's that completes at once) is counted in [MessageStats].Unread,
// as the events that arrived during the step are; one that comes later
// is refused with [ErrProcessNotFound], as every delivery to an ended
// process is.
func (o *StepOutput) Done(result payload.Payload) {
	o.status = statusDone
	o.result = result
	o.read = -1
}

// DoneAfter is [StepOutput.Done] for a process that stops partway through
// its batch: it has read the first n events, and the rest count as unread
// ([MessageStats].Unread), as events still queued at its end do, also if
// the step then fails (returns an error or panics, which ends the process
// with that failure instead of the result). n is clamped to the batch.
func (o *StepOutput) DoneAfter(n int, result payload.Payload) {
	o.Done(result)
	o.read = max(n, 0)
}

// Yield asks the scheduler to carry out command cmd with argument arg. The
// handler registered for cmd runs on the worker right after Step; it
// completes the yield at once or later from any goroutine, and the process
// gets an [EventYieldComplete] with this tag. Tags are the process's own
// choice; a tag that is still outstanding completes at once with
// [ErrDuplicateTag]. A cmd with no handler (any above 65536, which none
// can be registered for, included) completes at once with
// [ErrUnknownCommand], and a reserved one with [ErrInvalidCommand].
func (o *StepOutput) Yield(tag uint64, cmd CommandID, arg any) {
	y := o.add() // field by field, as Tell
	y.tag, y.cmd, y.arg, y.kind, y.to, y.when, y.method, y.input, y.err, y.deadline = tag, cmd, arg, yieldGeneric, relay.PID{}, 0, "", nil, nil, 0
}

// Tell sends msg to the process to, after Step returns, without waiting
// for a completion. It is the allocation-free built-in send. If the
// message cannot be delivered, it comes back to this process as an
// [EventMessage] whose Error says why and whose From is to. Messages from
// one process to another arrive in the order they were told. Being sent
// after Step returns, they arrive after anything the step sent straight
// through [Scheduler.Tell] or [Scheduler.Send] while it ran.
func (o *StepOutput) Tell(to relay.PID, msg any) {
	y := o.add()
	// Field by field: a whole yield built and then copied costs the copy,
	// and the copy's loads stall on the fields just stored. Only the
	// fields a Tell's readers read (see add): writing the other five
	// costs fourteen instructions a message, 4 % of a fan-out's.
	y.tag, y.arg, y.kind, y.to, y.deadline = 0, msg, yieldTell, to, 0
}

// Spawn starts a child process after Step returns: Init is called with
// method and input on this worker, and the child is queued here. The yield
// completes with the child's [relay.PID] as From (Data is nil) once the
// child has started. A child that does not start completes it at once,
// From the zero PID, with an error that says why: [ErrInit] wrapping
// Init's error (the child's Close has run, on this worker),
// [ErrNilProcess], [ErrEmptyMethod], [ErrTooManyProcesses] (see
// [WithMaxProcesses]), or [ErrClosed] once Shutdown has begun. The
// children a step spawns are started in the order written; another
// worker may not take a child until the step's later spawns have started
// too.
func (o *StepOutput) Spawn(tag uint64, child Process, method string, input payload.Payloads) {
	o.spawn(tag, child, method, input, yieldSpawn)
}

// SpawnAwait is [StepOutput.Spawn] that completes when the child finishes:
// the completion's [Event.Result] is the child's result (its Data is the
// result's value: see [Event]), Error its error, and From its PID. A
// child that does not start completes it at once, as it completes a
// Spawn.
//
// The child's end reaches the parent at once or, while the worker it
// ended on holds the parent for its next run, when that run starts.
// Until then a [Scheduler.CompleteYield] of the same tag from elsewhere
// may still complete the yield, and the child's result is then dropped,
// as a completion that comes too late is; a deadline set with
// [StepOutput.Timeout] never wins over a child that ended before it
// passed.
func (o *StepOutput) SpawnAwait(tag uint64, child Process, method string, input payload.Payloads) {
	o.spawn(tag, child, method, input, yieldSpawnAwait)
}

// spawn records a Spawn or SpawnAwait yield. Called by Step, through those methods.
func (o *StepOutput) spawn(tag uint64, child Process, method string, input payload.Payloads, kind yieldKind) {
	var arg any
	if child != nil { // keep Arg a nil interface for a nil Process
		arg = child
	}
	y := o.add() // field by field, as Tell
	y.tag, y.cmd, y.arg, y.kind, y.to, y.when, y.method, y.input, y.err, y.deadline = tag, 0, arg, kind, relay.PID{}, 0, method, input, nil, 0
}

// Sleep completes after d. The workers fire timers themselves; a
// sleeping process costs no goroutine and no runtime timer.
func (o *StepOutput) Sleep(tag uint64, d time.Duration) {
	o.SleepUntil(tag, o.timeNow().Add(d))
}

// SleepUntil completes at t (at once if t has passed). Use it as a
// deadline by yielding it next to the work it bounds and acting on
// whichever completes first.
func (o *StepOutput) SleepUntil(tag uint64, t time.Time) {
	y := o.add() // field by field, as Tell
	y.tag, y.cmd, y.arg, y.kind, y.to, y.when, y.method, y.input, y.err, y.deadline = tag, 0, nil, yieldTimer, relay.PID{}, int64(t.Sub(o.clock)), "", nil, nil, 0
}

// TellName is [StepOutput.Tell] to the process registered under name (see
// [Scheduler.Register]), looked up when the step's yields are carried out.
// If no process has the name, the message comes back to this process as
// an undeliverable [EventMessage] whose Error wraps [ErrNameNotFound] and
// whose From is the zero PID. If the process that has the name ends
// between the lookup and the delivery, the message comes back as from
// [StepOutput.Tell] to that process: its Error wraps
// [ErrProcessNotFound] and From is that process's PID. (Scheduler's
// TellName, which returns its refusal, wraps both errors then; a
// bounce has one Error, and telling the two apart would cost every
// send by name a check.)
func (o *StepOutput) TellName(name string, msg any) {
	*o.add() = yield{arg: msg, kind: yieldTellName, method: name}
}

// Monitor watches the process pid: the yield completes once, when pid
// ends, with an [Exit] as Data (and From pid) that says how it ended, or
// at once with ExitGone if pid is not alive, or is this process itself,
// which cannot be told of its own end. Cancelling the yield
// ([StepOutput.Cancel]) stops watching. A process on another node is
// watched by the transport, if it can (see [RemoteMonitor]).
func (o *StepOutput) Monitor(tag uint64, pid relay.PID) {
	*o.add() = yield{tag: tag, kind: yieldMonitor, to: pid}
}

// Request sends body to the process to as a message whose Data is a
// [Request], and completes when it answers (see [StepOutput.Reply]): Data
// is the answer's data, Error its error, From the replier. If to is not
// alive, or ends before answering, the yield completes with an error
// (wrapping [ErrProcessNotFound] or [ErrNoReply]); a refusal (a full
// mailbox) completes it with the refusal. A replier on another node is
// not watched: the watch lives on the replier's record, which is there,
// so if it ends without answering the yield waits for its deadline
// (monitor the replier to learn of its end sooner). Bound the wait with
// [StepOutput.Timeout]. No goroutine waits for the answer.
func (o *StepOutput) Request(tag uint64, to relay.PID, body any) {
	*o.add() = yield{tag: tag, arg: body, kind: yieldRequest, to: to}
}

// RequestName is [StepOutput.Request] to the process registered under
// name; if no process has it, the yield completes with an error wrapping
// [ErrNameNotFound]. If the process that has it ends between the lookup
// and the delivery, the yield completes as a Request to that process
// would ([ErrProcessNotFound] or [ErrNoReply]). No process has the empty
// name, which [Scheduler.Register] refuses.
func (o *StepOutput) RequestName(tag uint64, name string, body any) {
	*o.add() = yield{tag: tag, arg: body, kind: yieldRequestName, method: name}
}

// Reply answers a request this process received (the ReplyTo of its
// [Request]): the asking yield completes with data and err, and this
// process as From. There is no completion: an answer nobody waits for
// any more is a dead letter ([DeadLateReply]), and so is one to a ReplyTo
// that names no request (the zero one), which no process can be told of.
func (o *StepOutput) Reply(to ReplyTo, data any, err error) {
	*o.add() = yield{arg: data, kind: yieldReply, to: to.PID, when: int64(to.Seq), err: err}
}

// Cancel cancels the pending yield with tag, when this step's yields are
// carried out (after the ones written before it): no completion with that
// tag is delivered after this step — not even one that arrived while this
// step ran — unless the tag is yielded again, and a late Complete gets
// [ErrYieldNotPending]. Whatever the
// yield holds is let go at once: a Sleep's timer is released, a handler's
// call context is done with cause [ErrYieldCancelled] (so a goroutine
// working for it can stop), a Monitor stops watching, a Request stops
// waiting (an answer that comes later is a dead letter; one that came
// while this step ran was taken, its Reply returned nil, and it is
// dropped with no dead letter), and a SpawnAwait
// stops waiting for its child, which runs on. Cancelling a tag that is
// not pending, and whose completion did not arrive while this step ran,
// does nothing; the tag may be yielded again at once.
func (o *StepOutput) Cancel(tag uint64) {
	*o.add() = yield{tag: tag, kind: yieldCancel}
}

// Timeout gives the yield with tag a deadline d from now: if it has not
// completed by then, it completes with an error wrapping [ErrTimeout]
// (which wraps context.DeadlineExceeded), and what it holds is let go as
// [StepOutput.Cancel] lets it go — a handler's call context is done with
// that cause, a Monitor stops watching, a Request stops waiting, a
// SpawnAwait stops waiting for its child. If it completes first, the
// deadline's timer is released at once: nothing is left behind.
//
// It applies to the yield with tag written earlier in this step (its
// handler then sees the deadline in [Call.Context]), or to one pending
// from an earlier step; if the yield written in this step is refused
// because its tag is pending ([ErrDuplicateTag]), to the pending one. A
// later Timeout of the same yield replaces its deadline, and a Sleep
// keeps its own time if that comes before the latest deadline, whatever
// earlier deadlines it was given. A tag that is not pending: nothing
// happens.
//
// A deadline that has passed when the step's yields are carried out (d
// of zero or less always has) completes a yield written in this step at
// once with ErrTimeout, before any of its work starts: a handler is not
// called, a request not sent, a child not started, and a Sleep completes
// with ErrTimeout whatever its own time. Given to a yield pending from an
// earlier step, it completes it at once with ErrTimeout, unless that is a
// Sleep whose own time came first and which may then complete as a Sleep.
func (o *StepOutput) Timeout(tag uint64, d time.Duration) {
	// Through Add and Sub, as Sleep's deadline is: they saturate where
	// a sum of durations would wrap, and a deadline too far for the clock
	// would come at once.
	when := int64(o.timeNow().Add(d).Sub(o.clock))
	if when <= 0 {
		when = 1 // the clock's first instant: passed already
	}
	for i := len(o.yields) - 1; i >= 0; i-- {
		y := &o.yields[i]
		if y.tag != tag {
			continue
		}
		switch y.kind {
		case yieldGeneric, yieldSpawn, yieldSpawnAwait, yieldTimer, yieldMonitor, yieldRequest, yieldRequestName:
			y.deadline = when
			return
		}
	}
	*o.add() = yield{tag: tag, kind: yieldTimeout, deadline: when}
}

// timeNow reads the clock of Sleep and Timeout.
// Called by Step, through Sleep and Timeout.
func (o *StepOutput) timeNow() time.Time {
	if o.now != nil {
		return o.now()
	}
	return time.Now()
}

// add extends the yields by one slot and returns it; the slot may hold an
// earlier step's yield, so callers write every field that is read of a
// yield of their kind: its kind, and then what dispatch reads for that
// kind, plus the tag, the deadline and the argument, which Timeout's scan
// and the test kit's copy (bridge.go) read of every kind. Tell writes
// just those; every other method writes the whole yield. A field left
// from an earlier yield keeps what it refers to reachable until the
// worker next goes idle and releases its output (see release), as the
// slots past the end of the step's yields do anyway. They write it in
// place: append(o.yields, y) would build y in a temporary and copy it,
// and the copy's wide loads stall on the narrow stores just made.
// Called by Step, through the yield methods.
func (o *StepOutput) add() *yield {
	n := len(o.yields)
	if n == cap(o.yields) {
		o.yields = append(o.yields, yield{})
	} else {
		o.yields = o.yields[:n+1]
	}
	return &o.yields[n]
}

// reset prepares the output for a step of process self. The yields of the
// previous step stay in the slice's spare capacity until overwritten or
// released by release.
// Worker only, before Step.
func (o *StepOutput) reset(self relay.PID) {
	o.self = self
	o.status = statusWait
	o.result = payload.Payload{}
	o.read = -1
	o.used = max(o.used, len(o.yields))
	o.yields = o.yields[:0]
}

// unread returns how many of a batch of n events a step that called Done
// left unread.
// Worker only, after Step.
func (o *StepOutput) unread(n int) int {
	if o.read < 0 || o.read >= n {
		return 0
	}
	return n - o.read
}

// release drops the references held by earlier steps' yields; the worker
// calls it before it goes idle.
// Worker only.
func (o *StepOutput) release() {
	clear(o.yields[:min(max(o.used, len(o.yields)), cap(o.yields))])
	o.used = 0
	o.result = payload.Payload{}
}
