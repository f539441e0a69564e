package scheduler

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// Differential tests of the two ways Submit and Spawn start a process:
// submitOutside's fast path, for a start with a context, no options, no
// process limit and no Start or End hook, and the general path (submit,
// admit, start, enqueue) for everything else. Each path mode below runs
// the same script of starts on a scheduler of its own and records
// everything observable about each start; the records of every general
// mode must equal those of the fast one. The general path is forced by
// something that changes nothing the script looks at: a nil
// SubmitOption (skipped by applySubmitOptions), a mailbox far larger than
// any test fills, a process limit nobody reaches, or no-op Start or End
// hooks.

// pathMode is one way of starting the script's processes.
type pathMode struct {
	name      string
	opts      []Option       // scheduler options besides the common ones
	sub       []SubmitOption // given to every Submit and Spawn
	startHook bool
	endHook   bool
	fast      bool // the mode must take submitOutside's fast path
}

func pathModes() []pathMode {
	return []pathMode{
		{name: "fast", fast: true},
		{name: "nilOption", sub: []SubmitOption{nil}},
		{name: "hugeMailbox", sub: []SubmitOption{Mailbox(1<<20, MailboxReject)}},
		{name: "hugeMaxProcesses", opts: []Option{WithMaxProcesses(1 << 30)}},
		{name: "noopStartHook", startHook: true},
		{name: "noopEndHook", endHook: true},
	}
}

const pathNode = 7

// pathRig is one mode's scheduler and what its hooks saw.
type pathRig struct {
	t    *testing.T
	mode pathMode
	s    *Scheduler

	mu     sync.Mutex
	panics []PanicInfo
	pids   []relay.PID // every PID handed out, to check none is reused
}

func newPathRig(t *testing.T, mode pathMode) *pathRig {
	r := &pathRig{t: t, mode: mode}
	h := Hooks{Panic: func(pi PanicInfo) {
		r.mu.Lock()
		r.panics = append(r.panics, pi)
		r.mu.Unlock()
	}}
	if mode.startHook {
		h.Start = func(StartInfo) {}
	}
	if mode.endHook {
		h.End = func(EndInfo) {}
	}
	opts := append([]Option{WithNode(pathNode), WithWorkers(2), WithWatchdog(0), WithHooks(h)}, mode.opts...)
	r.s = newScheduler(t, opts...)
	// The mode must route where it says (see submitOutside's first test).
	general := len(mode.sub) != 0 || r.s.maxProcs > 0 || r.s.hooks.Start != nil || r.s.hooks.End != nil
	require.Equal(t, !mode.fast, general, "mode %s does not take the path it is meant to", mode.name)
	return r
}

func (r *pathRig) takePanics() []PanicInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.panics
	r.panics = nil
	return p
}

// start starts p through Submit or Spawn with the mode's options.
func (r *pathRig) start(spawn bool, ctx context.Context, p Process, method string, input payload.Payloads) (Handle, relay.PID, error) {
	if spawn {
		pid, err := r.s.Spawn(ctx, p, method, input, r.mode.sub...)
		return Handle{}, pid, err
	}
	h, err := r.s.Submit(ctx, p, method, input, r.mode.sub...)
	return h, h.PID(), err
}

// pathProc is the script's process. Init records what it sees of its
// context, may register a name, and fails or panics as told; its steps
// wait for a message ("fail" makes it fail, anything else is its
// result) or a cancel.
type pathProc struct {
	s         *Scheduler
	initErr   error
	initPanic any
	name      string // registered in Init, if not empty

	mu          sync.Mutex
	inits       int
	closes      int
	steps       int
	ctx         context.Context
	method      string
	input       payload.Payloads
	self        relay.PID
	selfOK      bool
	val         any
	otherVal    any
	errInInit   error
	causeInInit error
	regErr      error
	stepSelf    relay.PID
	errInStep   error
	doneInStep  bool
	stepped     chan struct{} // closed at the first step
}

type pathKey struct{}
type pathOtherKey struct{}

func (p *pathProc) Init(ctx context.Context, method string, input payload.Payloads) error {
	p.mu.Lock()
	p.inits++
	p.ctx, p.method, p.input = ctx, method, input
	p.self, p.selfOK = Self(ctx)
	p.val = ctx.Value(pathKey{})
	p.otherVal = ctx.Value(pathOtherKey{})
	p.errInInit = ctx.Err()
	p.causeInInit = context.Cause(ctx)
	p.mu.Unlock()
	if p.name != "" {
		err := p.s.Register(p.name, p.self)
		p.mu.Lock()
		p.regErr = err
		p.mu.Unlock()
	}
	if p.initPanic != nil {
		panic(p.initPanic)
	}
	return p.initErr
}

func (p *pathProc) Step(evs []Event, out *StepOutput) error {
	p.mu.Lock()
	if p.steps == 0 {
		p.stepSelf = out.Self()
		p.errInStep = p.ctx.Err()
		select {
		case <-p.ctx.Done():
			p.doneInStep = true
		default:
		}
	}
	p.steps++
	if p.steps == 1 && p.stepped != nil {
		close(p.stepped)
	}
	p.mu.Unlock()
	for _, ev := range evs {
		switch ev.Type {
		case EventMessage:
			if s, ok := ev.Data.(string); ok && s == "fail" {
				return errPathStep
			}
			out.Done(ev.Result())
			return nil
		case EventCancel:
			out.Done(payload.Of("cancelled"))
			return nil
		}
	}
	return nil
}

func (p *pathProc) Close() {
	p.mu.Lock()
	p.closes++
	p.mu.Unlock()
}

var (
	errPathStep  = errors.New("path test: step failed")
	errPathInit  = errors.New("path test: init refused")
	errPathCause = errors.New("path test: caller's cause")
)

// pathSentinels are the errors whose errors.Is identity the records compare.
var pathSentinels = []struct {
	name string
	err  error
}{
	{"ErrNilProcess", ErrNilProcess}, {"ErrEmptyMethod", ErrEmptyMethod}, {"ErrNilContext", ErrNilContext},
	{"ErrClosed", ErrClosed}, {"ErrInit", ErrInit}, {"ErrPanic", ErrPanic}, {"ErrTooManyProcesses", ErrTooManyProcesses},
	{"ErrInvalidOption", ErrInvalidOption}, {"Canceled", context.Canceled}, {"DeadlineExceeded", context.DeadlineExceeded},
	{"errPathStep", errPathStep}, {"errPathInit", errPathInit}, {"errPathCause", errPathCause},
	{"ErrEnded", ErrEnded}, {"ErrTerminated", ErrTerminated}, {"ErrShuttingDown", ErrShuttingDown},
	{"ErrProcessNotFound", ErrProcessNotFound}, {"ErrNameNotFound", ErrNameNotFound}, {"ErrNameTaken", ErrNameTaken},
}

var pidInText = regexp.MustCompile(`<\d+\.\d+>`)

// errDesc describes err for comparison: its text and the sentinels it
// matches, and the PanicError it wraps, if any.
func errDesc(err error) string {
	if err == nil {
		return "<nil>"
	}
	var is []string
	for _, s := range pathSentinels {
		if errors.Is(err, s.err) {
			is = append(is, s.name)
		}
	}
	// PIDs differ from one scheduler to the next (a caller outside the
	// workers takes IDs from a stripe chosen by its stack's address).
	d := fmt.Sprintf("%q is%v", pidInText.ReplaceAllString(err.Error(), "<pid>"), is)
	var pe *PanicError
	if errors.As(err, &pe) {
		d += fmt.Sprintf(" panic{where=%s value=%v stack=%t}", pe.Where, pe.Value, len(pe.Stack) > 0)
	}
	return d
}

// pathStats is the part of Stats a start changes, once its process has
// ended.
type pathStats struct {
	Live                                                           int64
	Submitted, InitFailed, Rejected, Ended, Failed, Forced, Panics uint64
	Accepted, Unread                                               uint64
}

func statsOf(s *Scheduler) pathStats {
	st := s.Stats()
	p := st.Processes
	return pathStats{p.Live, p.Submitted, p.InitFailed, p.Rejected, p.Ended, p.Failed, p.Forced, p.Panics, st.Messages.Accepted, st.Messages.Unread}
}

func (a pathStats) minus(b pathStats) pathStats {
	return pathStats{a.Live - b.Live, a.Submitted - b.Submitted, a.InitFailed - b.InitFailed, a.Rejected - b.Rejected,
		a.Ended - b.Ended, a.Failed - b.Failed, a.Forced - b.Forced, a.Panics - b.Panics, a.Accepted - b.Accepted, a.Unread - b.Unread}
}

// pathObs is everything the script records about one start.
type pathObs struct {
	Scenario string
	Err      string
	PIDZero  bool // the PID returned (Spawn) or the Handle's (Submit) is the zero PID
	PIDNode  uint32
	Inits    int
	Closes   int
	Steps    int
	Method   string
	Input    string

	SelfOK, SelfIsPID, StepSelfIsPID bool
	Val, OtherVal                    any
	ErrInInit, CauseInInit           string
	ErrInStep                        string
	DoneInStep                       bool
	RegErr                           string
	LookupLive                       string // Lookup of the registered name while the process lives
	LookupAfter                      string // and after its end
	ProcessesMethod                  string // its method in Processes while it lives

	Result          string // Handle (Submit) result and error
	HandleErr       string
	ExitReason      string // outside monitor
	ExitResult      string
	ExitErr         string
	ExitIsPID       bool
	ErrAfter        string // the process context after the end
	CauseAfter      string
	SelfAfter       bool // Self of the kept context is still the process's PID
	MonitorAfterEnd string

	Panics []string // the Panic hook's reports: where, method, PID is the start's
	Stats  pathStats
}

// endHow says how a started process is brought to its end.
type endHow int

const (
	endMessage   endHow = iota // sent "done"
	endFail                    // sent "fail": the step fails
	endTerminate               // Terminate
)

// pathScenario is one start of the script.
type pathScenario struct {
	name   string
	ctx    func() context.Context // nil: a nil context
	proc   func(s *Scheduler) *pathProc
	nilP   bool
	method string
	end    endHow
	// ended is how many started processes must have ended before the
	// next scenario, for the failed starts: none.
}

func bgCtx() context.Context   { return context.Background() }
func todoCtx() context.Context { return context.TODO() }
func callerValuesCtx() context.Context {
	return context.WithValue(context.Background(), pathKey{}, "caller's value")
}
func cancelledCtx() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}
func cancelledValuesCtx() context.Context {
	ctx, cancel := context.WithCancelCause(context.WithValue(context.Background(), pathKey{}, "caller's value"))
	cancel(errPathCause)
	return ctx
}
func expiredCtx() context.Context {
	ctx, cancel := context.WithDeadline(context.WithValue(context.Background(), pathKey{}, "v"), time.Unix(0, 0))
	_ = cancel // the deadline has passed: done already; the timer is never armed
	return ctx
}

// liveCancelCtx has values and a cancel that the script calls once the
// start has returned: the process must not see it.
type ctxWithCancel struct {
	context.Context
	cancel context.CancelCauseFunc
}

func liveCancelCtx() context.Context {
	ctx, cancel := context.WithCancelCause(context.WithValue(context.Background(), pathKey{}, "cancelled later"))
	return ctxWithCancel{ctx, cancel}
}

func plain(s *Scheduler) *pathProc { return &pathProc{s: s} }

func pathScenarios() []pathScenario {
	named := func(name string) func(s *Scheduler) *pathProc {
		return func(s *Scheduler) *pathProc { return &pathProc{s: s, name: name} }
	}
	failing := func(err error) func(s *Scheduler) *pathProc {
		return func(s *Scheduler) *pathProc { return &pathProc{s: s, initErr: err} }
	}
	panicking := func(v any, name string) func(s *Scheduler) *pathProc {
		return func(s *Scheduler) *pathProc { return &pathProc{s: s, initPanic: v, name: name} }
	}
	return []pathScenario{
		// Refused before Init.
		{name: "nil process", ctx: bgCtx, nilP: true, method: "m"},
		{name: "empty method", ctx: bgCtx, proc: plain, method: ""},
		{name: "nil process and empty method", ctx: bgCtx, nilP: true, method: ""},
		{name: "nil process, values ctx", ctx: callerValuesCtx, nilP: true, method: "m"},
		{name: "nil ctx", ctx: nil, proc: plain, method: "m"},
		{name: "nil ctx and nil process", ctx: nil, nilP: true, method: ""},
		{name: "cancelled ctx", ctx: cancelledCtx, proc: plain, method: "m"},
		{name: "cancelled ctx with values and cause", ctx: cancelledValuesCtx, proc: plain, method: "m"},
		{name: "cancelled ctx and nil process", ctx: cancelledCtx, nilP: true, method: ""},
		{name: "expired deadline ctx", ctx: expiredCtx, proc: plain, method: "m"},
		// Init fails.
		{name: "Init error", ctx: bgCtx, proc: failing(errPathInit), method: "m"},
		{name: "Init error, values ctx", ctx: callerValuesCtx, proc: failing(errPathInit), method: "m"},
		{name: "Init error after Register", ctx: callerValuesCtx, proc: func(s *Scheduler) *pathProc {
			return &pathProc{s: s, initErr: errPathInit, name: "failing-init"}
		}, method: "m"},
		{name: "Init panics with an error", ctx: bgCtx, proc: panicking(errPathInit, ""), method: "panics"},
		{name: "Init panics with a string, values ctx", ctx: callerValuesCtx, proc: panicking("boom", ""), method: "panics"},
		{name: "Init panics after Register", ctx: bgCtx, proc: panicking("boom", "panicking-init"), method: "panics"},
		// Started and run to their end.
		{name: "runs, Background", ctx: bgCtx, proc: plain, method: "m", end: endMessage},
		{name: "runs, TODO", ctx: todoCtx, proc: plain, method: "m", end: endMessage},
		{name: "runs, values ctx", ctx: callerValuesCtx, proc: plain, method: "m", end: endMessage},
		{name: "runs, caller cancels after start", ctx: liveCancelCtx, proc: plain, method: "m", end: endMessage},
		{name: "runs, named in Init", ctx: bgCtx, proc: named("svc"), method: "m", end: endMessage},
		{name: "runs, named in Init, values ctx", ctx: callerValuesCtx, proc: named("svc"), method: "other", end: endMessage},
		{name: "step fails", ctx: callerValuesCtx, proc: plain, method: "m", end: endFail},
		{name: "terminated", ctx: bgCtx, proc: plain, method: "m", end: endTerminate},
		{name: "terminated, values ctx", ctx: callerValuesCtx, proc: named("term"), method: "m", end: endTerminate},
	}
}

// run carries out one scenario and returns what it saw. The start's
// process, if any, has ended (and its end been reported) when it returns.
func (r *pathRig) run(sc pathScenario, spawn bool) pathObs {
	t := r.t
	t.Helper()
	s := r.s
	before := statsOf(s)
	var ctx context.Context
	if sc.ctx != nil {
		ctx = sc.ctx()
	}
	var pp *pathProc
	var p Process
	if !sc.nilP {
		pp = sc.proc(s)
		pp.stepped = make(chan struct{})
		p = pp
	}
	input := payload.Values("in", 1)
	h, pid, err := r.start(spawn, ctx, p, sc.method, input)
	if c, ok := ctx.(ctxWithCancel); ok {
		c.cancel(errPathCause) // the process context carries values only
	}
	o := pathObs{Scenario: sc.name, Err: errDesc(err), PIDZero: pid == relay.PID{}, PIDNode: pid.Node}
	if !spawn && err != nil {
		require.Equal(t, Handle{}, h, "%s: a failed Submit returns the zero Handle", sc.name)
	}
	if err == nil {
		r.mu.Lock()
		r.pids = append(r.pids, pid)
		r.mu.Unlock()
		// The first step has run before the process is told to end, so
		// that what it sees of its context does not depend on timing.
		receive(t, pp.stepped, sc.name+": the first step")
		if pp.name != "" {
			// Register from outside too: Init cannot (the process is
			// not published before Init returns).
			rerr := s.Register(pp.name, pid)
			got, lerr := s.Lookup(pp.name)
			o.LookupLive = fmt.Sprintf("register=%s lookup=%t %s", errDesc(rerr), got == pid, errDesc(lerr))
		}
		for _, info := range s.Processes() {
			if info.PID == pid {
				o.ProcessesMethod = info.Method
			}
		}
		exits := make(chan Exit, 1)
		s.Monitor(pid, func(e Exit) { exits <- e })
		switch sc.end {
		case endMessage:
			require.NoError(t, s.Tell(pid, "done"))
		case endFail:
			require.NoError(t, s.Tell(pid, "fail"))
		case endTerminate:
			require.NoError(t, s.Terminate(pid))
		}
		e := receive(t, exits, sc.name+": the monitor's exit")
		o.ExitReason, o.ExitResult, o.ExitErr, o.ExitIsPID = e.Reason.String(), e.Result.String(), errDesc(e.Err), e.PID == pid
		if !spawn {
			herr := waitEnd(t, h)
			res, rerr := h.Result()
			require.Equal(t, errDesc(herr), errDesc(rerr))
			o.Result, o.HandleErr = res.String(), errDesc(rerr)
		}
		// A monitor set after the end finds the process gone.
		late := make(chan Exit, 1)
		s.Monitor(pid, func(e Exit) { late <- e })
		le := receive(t, late, sc.name+": the late monitor's exit")
		o.MonitorAfterEnd = fmt.Sprintf("%s %s %t", le.Reason, errDesc(le.Err), le.PID == pid)
		if pp.name != "" {
			_, lerr := s.Lookup(pp.name)
			o.LookupAfter = errDesc(lerr)
		}
	}
	if pp != nil {
		pp.mu.Lock()
		o.Inits, o.Closes, o.Steps = pp.inits, pp.closes, pp.steps
		o.Method, o.Input = pp.method, pp.input.String()
		o.SelfOK = pp.selfOK
		o.SelfIsPID = err == nil && pp.self == pid
		o.StepSelfIsPID = err == nil && pp.stepSelf == pid
		o.Val, o.OtherVal = pp.val, pp.otherVal
		o.ErrInInit, o.CauseInInit = errDesc(pp.errInInit), errDesc(pp.causeInInit)
		o.ErrInStep, o.DoneInStep = errDesc(pp.errInStep), pp.doneInStep
		o.RegErr = errDesc(pp.regErr)
		if pp.ctx != nil {
			o.ErrAfter, o.CauseAfter = errDesc(pp.ctx.Err()), errDesc(context.Cause(pp.ctx))
			self, ok := Self(pp.ctx)
			o.SelfAfter = ok && self == pp.self
		}
		selfOfInit := pp.self
		pp.mu.Unlock()
		// Close exactly once for every process whose Init was called.
		require.Equal(t, o.Inits, o.Closes, "%s: Close calls", sc.name)
		for _, pi := range r.takePanics() {
			o.Panics = append(o.Panics, fmt.Sprintf("%s %s %t %t", pi.Err.Where, pi.Method, pi.PID == selfOfInit, pi.PID.Node == pathNode))
		}
		if name := pp.name; name != "" && err != nil {
			// A failed start leaves no name behind.
			_, lerr := s.Lookup(name)
			o.LookupAfter = errDesc(lerr)
		}
	} else {
		require.Empty(t, r.takePanics(), "%s: Panic hook without a process", sc.name)
	}
	o.Stats = statsOf(s).minus(before)
	return o
}

// checkContract asserts, for the fast path, what the documentation
// promises of each scenario, so that both paths agreeing on a wrong
// answer is caught too.
func checkContract(t *testing.T, sc pathScenario, o pathObs, spawn bool) {
	t.Helper()
	switch {
	case sc.ctx == nil:
		require.Contains(t, o.Err, "ErrNilContext", sc.name)
		require.Zero(t, o.Inits, sc.name)
	case sc.nilP && sc.name == "cancelled ctx and nil process":
		require.Contains(t, o.Err, "Canceled", sc.name)
	case sc.nilP:
		require.Contains(t, o.Err, "ErrNilProcess", sc.name)
	case sc.method == "":
		require.Contains(t, o.Err, "ErrEmptyMethod", sc.name)
		require.Zero(t, o.Inits, sc.name)
	}
	if o.Err != "<nil>" {
		require.True(t, o.PIDZero, "%s: a failed start returns the zero PID", sc.name)
		require.Zero(t, o.Stats.Live, sc.name)
		require.Zero(t, o.Stats.Submitted, sc.name)
		require.Zero(t, o.Stats.Ended, sc.name)
		if o.Inits == 1 {
			require.Contains(t, o.Err, "ErrInit", sc.name)
			require.Equal(t, uint64(1), o.Stats.InitFailed, sc.name)
			require.True(t, o.SelfOK, "%s: Init's context has a PID", sc.name)
		} else {
			require.Zero(t, o.Stats.InitFailed, sc.name)
		}
		return
	}
	require.False(t, o.PIDZero, sc.name)
	require.Equal(t, uint32(pathNode), o.PIDNode, sc.name)
	require.Equal(t, 1, o.Inits, sc.name)
	require.True(t, o.SelfOK && o.SelfIsPID && o.StepSelfIsPID && o.SelfAfter, "%s: Self: %+v", sc.name, o)
	require.Equal(t, "<nil>", o.ErrInInit, sc.name)
	require.Equal(t, "<nil>", o.ErrInStep, "%s: the caller's cancel reached the process", sc.name)
	require.False(t, o.DoneInStep, sc.name)
	require.Contains(t, o.ErrAfter, "Canceled", sc.name)
	require.Equal(t, pathStats{Submitted: 1, Ended: 1, Accepted: o.Stats.Accepted, Failed: o.Stats.Failed}, o.Stats, sc.name)
	require.Contains(t, o.MonitorAfterEnd, "ErrProcessNotFound", sc.name)
	if o.LookupAfter != "" {
		require.Contains(t, o.LookupAfter, "ErrNameNotFound", "%s: the name outlived its process", sc.name)
	}
	switch sc.end {
	case endMessage:
		require.Equal(t, "done", o.ExitReason, sc.name)
		require.Contains(t, o.CauseAfter, "ErrEnded", sc.name)
	case endFail:
		require.Equal(t, "failed", o.ExitReason, sc.name)
		require.Contains(t, o.ExitErr, "errPathStep", sc.name)
	case endTerminate:
		require.Equal(t, "terminated", o.ExitReason, sc.name)
		require.Contains(t, o.CauseAfter, "ErrTerminated", sc.name)
	}
}

// TestStartPathsAgree runs the script through every path mode, for
// Submit and for Spawn, and requires every general mode to see exactly
// what the fast path sees.
func TestStartPathsAgree(t *testing.T) {
	for _, spawn := range []bool{false, true} {
		api := "Submit"
		if spawn {
			api = "Spawn"
		}
		t.Run(api, func(t *testing.T) {
			var want []pathObs
			for _, mode := range pathModes() {
				t.Run(mode.name, func(t *testing.T) {
					r := newPathRig(t, mode)
					var got []pathObs
					for _, sc := range pathScenarios() {
						o := r.run(sc, spawn)
						if mode.fast {
							checkContract(t, sc, o, spawn)
						}
						got = append(got, o)
					}
					r.checkPIDsUnique()
					if mode.fast {
						want = got
						return
					}
					if want == nil {
						t.Fatalf("%s: the fast path's run failed: nothing to compare %s with", api, mode.name)
					}
					require.Len(t, got, len(want))
					for i := range got {
						require.Equal(t, want[i], got[i], "%s %s: %q differs from the fast path", api, mode.name, got[i].Scenario)
					}
				})
			}
		})
	}
}

func (r *pathRig) checkPIDsUnique() {
	r.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[relay.PID]bool{}
	for _, pid := range r.pids {
		require.Equal(r.t, uint32(pathNode), pid.Node)
		require.False(r.t, seen[pid], "PID %v handed out twice", pid)
		seen[pid] = true
	}
}

// reuseObs is what TestStartPathsRecordsAndPIDs sees of one mode.
type reuseObs struct {
	Distinct                   int
	AllSelf, AllDone, AllEnded bool
	Vals                       []any
	Stats                      pathStats
}

// TestStartPathsRecordsAndPIDs starts many short processes one after
// another through each mode, so that Spawn's records are reused where
// the scheduler reuses them, and checks that PIDs are never reused, that
// a context kept past its process's end still names that process and is
// done with ErrEnded, and that the counters agree.
func TestStartPathsRecordsAndPIDs(t *testing.T) {
	const n = 300
	for _, spawn := range []bool{false, true} {
		for _, withValues := range []bool{false, true} {
			name := fmt.Sprintf("spawn=%t/values=%t", spawn, withValues)
			t.Run(name, func(t *testing.T) {
				var want *reuseObs
				for _, mode := range pathModes() {
					r := newPathRig(t, mode)
					s := r.s
					before := statsOf(s)
					procs := make([]*pathProc, n)
					pids := make([]relay.PID, n)
					for i := range n {
						ctx := context.Background()
						if withValues {
							ctx = context.WithValue(ctx, pathKey{}, i)
						}
						procs[i] = &pathProc{s: s}
						_, pid, err := r.start(spawn, ctx, procs[i], "short", nil)
						require.NoError(t, err)
						pids[i] = pid
						exits := make(chan Exit, 1)
						s.Monitor(pid, func(e Exit) { exits <- e })
						require.NoError(t, s.Tell(pid, i))
						e := receive(t, exits, "exit")
						require.Equal(t, ExitDone, e.Reason)
					}
					o := reuseObs{AllSelf: true, AllDone: true, AllEnded: true}
					seen := map[relay.PID]bool{}
					for i, p := range procs {
						seen[pids[i]] = true
						p.mu.Lock()
						self, ok := Self(p.ctx)
						o.AllSelf = o.AllSelf && ok && self == pids[i] && p.self == pids[i]
						o.AllDone = o.AllDone && isClosedChan(p.ctx.Done())
						o.AllEnded = o.AllEnded && errors.Is(context.Cause(p.ctx), ErrEnded) && errors.Is(p.ctx.Err(), context.Canceled)
						o.Vals = append(o.Vals, p.ctx.Value(pathKey{}))
						require.Equal(t, 1, p.closes)
						p.mu.Unlock()
					}
					o.Distinct = len(seen)
					if spawn && !withValues {
						// Informational: how many records served the n
						// processes (a genCtx points at its record).
						recs := map[unsafe.Pointer]bool{}
						for _, p := range procs {
							recs[(*ifaceWords)(unsafe.Pointer(&p.ctx)).data] = true
						}
						t.Logf("%s: %d processes used %d records", mode.name, n, len(recs))
					}
					o.Stats = statsOf(s).minus(before)
					require.Equal(t, n, o.Distinct, "%s: PIDs reused", mode.name)
					require.True(t, o.AllSelf && o.AllDone && o.AllEnded, "%s: %+v", mode.name, o)
					if want == nil {
						want = &o
						continue
					}
					require.Equal(t, *want, o, "%s differs from the fast path", mode.name)
				}
			})
		}
	}
}

func isClosedChan(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestStartPathsUnnamedMethods fills the method table, so that a new
// entry point is not interned and the process keeps its name itself, and
// checks that both paths report that name the same (Processes, the Panic
// hook).
func TestStartPathsUnnamedMethods(t *testing.T) {
	for _, spawn := range []bool{false, true} {
		t.Run(fmt.Sprintf("spawn=%t", spawn), func(t *testing.T) {
			var want []string
			for _, mode := range pathModes() {
				r := newPathRig(t, mode)
				s := r.s
				fillMethodTable(s.methods)
				require.Zero(t, s.methods.id("one more"), "the method table is not full")
				var got []string
				for _, ctx := range []context.Context{context.Background(), callerValuesCtx()} {
					p := &pathProc{s: s}
					_, pid, err := r.start(spawn, ctx, p, "not-interned", nil)
					require.NoError(t, err)
					method := ""
					for _, info := range s.Processes() {
						if info.PID == pid {
							method = info.Method
						}
					}
					exits := make(chan Exit, 1)
					s.Monitor(pid, func(e Exit) { exits <- e })
					require.NoError(t, s.Terminate(pid))
					e := receive(t, exits, "exit")
					got = append(got, fmt.Sprintf("processes=%s method=%s val=%v exit=%s", method, p.method, p.ctx.Value(pathKey{}), e.Reason))

					pp := &pathProc{s: s, initPanic: "boom"}
					_, _, err = r.start(spawn, ctx, pp, "not-interned-either", nil)
					require.ErrorIs(t, err, ErrPanic)
					var panics []string
					for _, pi := range r.takePanics() {
						panics = append(panics, pi.Method)
					}
					got = append(got, fmt.Sprintf("err=%s panics=%v closes=%d", errDesc(err), panics, pp.closes))
				}
				require.Equal(t, []string{
					"processes=not-interned method=not-interned val=<nil> exit=terminated",
					`err="scheduler: init failed: scheduler: panic in Init: boom" is[ErrInit ErrPanic] panic{where=Init value=boom stack=true} panics=[not-interned-either] closes=1`,
					"processes=not-interned method=not-interned val=caller's value exit=terminated",
					`err="scheduler: init failed: scheduler: panic in Init: boom" is[ErrInit ErrPanic] panic{where=Init value=boom stack=true} panics=[not-interned-either] closes=1`,
				}, got, mode.name)
				if want == nil {
					want = got
					continue
				}
				require.Equal(t, want, got, "%s differs from the fast path", mode.name)
			}
		})
	}
}

// fillMethodTable interns filler names until the table has no room
// left, as maxMethods calls of id would, at once.
func fillMethodTable(t *methodTable) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ids := map[string]*methodEntry{}
	for k, v := range *t.ids.Load() {
		ids[k] = v
	}
	names := append([]string(nil), *t.names.Load()...)
	for len(names) <= maxMethods {
		name := fmt.Sprintf("filler-%d", len(names))
		ids[name] = &methodEntry{name: name, id: uint16(len(names))}
		names = append(names, name)
	}
	t.names.Store(&names)
	t.ids.Store(&ids)
}

// shutdownObs is what TestStartPathsDuringShutdown sees of one mode.
type shutdownObs struct {
	Errs        []string
	Inits       int
	Closes      int
	HeldCause   string
	HeldExit    string
	Stats       pathStats
	AfterErrs   []string
	AfterInits  int
	ShutdownErr string
}

// TestStartPathsDuringShutdown starts processes while a Shutdown waits
// for a process that has not ended yet, and after Shutdown has returned:
// both paths refuse them with ErrClosed (after checking their arguments)
// and call no Init.
func TestStartPathsDuringShutdown(t *testing.T) {
	for _, spawn := range []bool{false, true} {
		t.Run(fmt.Sprintf("spawn=%t", spawn), func(t *testing.T) {
			var want *shutdownObs
			for _, mode := range pathModes() {
				r := newPathRig(t, mode)
				s := r.s
				// held ends at its cancel only once released: Shutdown
				// waits for it meanwhile.
				release := make(chan struct{})
				held := &heldProc{release: release}
				_, pid, err := r.start(spawn, context.Background(), held, "held", nil)
				require.NoError(t, err)
				exits := make(chan Exit, 1)
				s.Monitor(pid, func(e Exit) { exits <- e })
				before := statsOf(s)
				shut := make(chan error, 1)
				go func() { shut <- s.Shutdown(context.Background()) }()
				eventually(t, "Shutdown began", s.closing)
				receive(t, held.cancelled, "held's cancel")

				var o shutdownObs
				tryAll := func(into *[]string) int {
					inits := 0
					for _, c := range []struct {
						ctx  context.Context
						nilP bool
						m    string
					}{
						{context.Background(), false, "m"},
						{callerValuesCtx(), false, "m"},
						{context.Background(), true, "m"},
						{context.Background(), false, ""},
						{cancelledCtx(), false, "m"},
						{nil, false, "m"},
					} {
						var p Process
						pp := &pathProc{s: s}
						if !c.nilP {
							p = pp
						}
						_, pid, err := r.start(spawn, c.ctx, p, c.m, nil)
						*into = append(*into, fmt.Sprintf("%s zero=%t", errDesc(err), pid == relay.PID{}))
						inits += pp.inits
						o.Closes += pp.closes
					}
					return inits
				}
				o.Inits = tryAll(&o.Errs)
				close(release)
				e := receive(t, exits, "held's exit")
				o.HeldExit = fmt.Sprintf("%s %s", e.Reason, errDesc(e.Err))
				o.HeldCause = errDesc(context.Cause(held.ctx))
				o.ShutdownErr = errDesc(receive(t, shut, "Shutdown's return"))
				o.Stats = statsOf(s).minus(before)
				o.AfterInits = tryAll(&o.AfterErrs)

				require.Zero(t, o.Inits+o.AfterInits, "%s: Init called on a closed scheduler", mode.name)
				require.Equal(t, "terminated "+errDesc(ErrShuttingDown), o.HeldExit, mode.name)
				require.Contains(t, o.HeldCause, "ErrShuttingDown", mode.name)
				for i, errs := range [][]string{o.Errs, o.AfterErrs} {
					require.Contains(t, errs[0], "ErrClosed", "%s %d", mode.name, i)
					require.Contains(t, errs[1], "ErrClosed", "%s %d", mode.name, i)
					require.Contains(t, errs[2], "ErrNilProcess", "%s %d", mode.name, i)
					require.Contains(t, errs[3], "ErrEmptyMethod", "%s %d", mode.name, i)
					require.Contains(t, errs[4], "Canceled", "%s %d", mode.name, i)
					require.Contains(t, errs[5], "ErrNilContext", "%s %d", mode.name, i)
				}
				if want == nil {
					want = &o
					continue
				}
				require.Equal(t, *want, o, "%s differs from the fast path", mode.name)
			}
		})
	}
}

// heldProc waits for its cancel and, once released, ends at it.
type heldProc struct {
	release   chan struct{}
	cancelled chan struct{}
	ctx       context.Context
	once      sync.Once
}

func (p *heldProc) Init(ctx context.Context, _ string, _ payload.Payloads) error {
	p.ctx = ctx
	p.cancelled = make(chan struct{})
	return nil
}

func (p *heldProc) Step(evs []Event, out *StepOutput) error {
	for _, ev := range evs {
		if ev.Type == EventCancel {
			p.once.Do(func() { close(p.cancelled) })
			<-p.release // holds the worker, not a sleep: the test releases it
			out.Done(payload.Of("released"))
		}
	}
	return nil
}

func (p *heldProc) Close() {}
