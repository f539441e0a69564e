package schedtest_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
	"github.com/procsched/scheduler/schedtest"
)

// The conformance suite runs each scenario on the real scheduler and on
// the kit and checks that the processes observe the same things: the
// events they get (in order where the scheduler guarantees an order),
// their results and their errors. Every scenario also has the transcript
// it must produce, so that the two agreeing on a wrong answer fails too.

// world is what a scenario drives: the real scheduler or the kit.
type world interface {
	start(p scheduler.Process, method string) relay.PID
	// startContext is start with ctx for the process context's values.
	startContext(ctx context.Context, p scheduler.Process, method string) relay.PID
	send(to relay.PID, msg any) error
	terminate(pid relay.PID) error
	// terminateAtStep terminates pid right after its nth step (a
	// process of this file's fn kind only).
	terminateAtStep(pid relay.PID, n int)
	register(name string, pid relay.PID) error
	unregister(name string) error
	lookup(name string) (relay.PID, error)
	reply(to scheduler.ReplyTo, data any, err error) error
	// fake sets the handler of cmd: answer at once with data and err, or
	// (hold) keep the call for completeHeld and heldContext.
	fake(cmd scheduler.CommandID, hold bool, data any, err error)
	completeHeld(i int, data any, err error) error
	// heldContext returns the context of held call i, and how long before
	// its deadline the handler ran, on the world's clock; ok is false if
	// it had no deadline then.
	heldContext(i int) (ctx context.Context, left time.Duration, ok bool)
	// lateContext returns what the Context of held call i is when asked
	// for now, not while its handler ran.
	lateContext(i int) context.Context
	// until runs (or waits) until cond holds; it fails the test if it
	// never does.
	until(cond func() bool)
	result(pid relay.PID) (payload.Payload, error) // waits for the end
	unread() int
	shutdown() error
}

// realWorld is a scheduler.Scheduler.
type realWorld struct {
	t       *testing.T
	s       *scheduler.Scheduler
	mu      sync.Mutex
	handles map[relay.PID]scheduler.Handle
	held    []scheduler.Completion
	calls   []scheduler.Call
	ctxs    []heldCtx
	wake    chan struct{}
	j       *journal
	grace   time.Duration // how long shutdown waits before it forces
}

// heldCtx is the context of a held call, and how long before its
// deadline the handler ran (ok: it had one).
type heldCtx struct {
	ctx  context.Context
	left time.Duration
	ok   bool
}

func newReal(t *testing.T, j *journal, grace time.Duration) *realWorld {
	s, err := scheduler.New(scheduler.WithWorkers(2))
	require.NoError(t, err)
	w := &realWorld{t: t, s: s, handles: map[relay.PID]scheduler.Handle{}, wake: j.wake, j: j, grace: grace}
	t.Cleanup(func() { _ = w.shutdown() })
	return w
}

func (w *realWorld) start(p scheduler.Process, method string) relay.PID {
	return w.startContext(context.Background(), p, method)
}
func (w *realWorld) startContext(ctx context.Context, p scheduler.Process, method string) relay.PID {
	h, err := w.s.Submit(ctx, p, method, nil)
	require.NoError(w.t, err)
	w.mu.Lock()
	w.handles[h.PID()] = h
	w.mu.Unlock()
	return h.PID()
}
func (w *realWorld) send(to relay.PID, msg any) error       { return w.s.Tell(to, msg) }
func (w *realWorld) terminate(pid relay.PID) error          { return w.s.Terminate(pid) }
func (w *realWorld) register(n string, pid relay.PID) error { return w.s.Register(n, pid) }
func (w *realWorld) unregister(n string) error              { return w.s.Unregister(n) }
func (w *realWorld) lookup(n string) (relay.PID, error)     { return w.s.Lookup(n) }
func (w *realWorld) reply(to scheduler.ReplyTo, data any, err error) error {
	return w.s.Reply(to, data, err)
}

// terminateAtStep has the process's nth step call Terminate before it
// returns: the scheduler delivers the cancel after that step.
func (w *realWorld) terminateAtStep(pid relay.PID, n int) {
	w.j.afterStep(pid, n, func() { require.NoError(w.t, w.s.Terminate(pid)) })
}
func (w *realWorld) fake(cmd scheduler.CommandID, hold bool, data any, err error) {
	require.NoError(w.t, w.s.SetHandler(cmd, func(c scheduler.Call) error {
		if hold {
			ctx := c.Context()
			dl, ok := ctx.Deadline()
			w.mu.Lock()
			w.held = append(w.held, c.Completion())
			w.calls = append(w.calls, c)
			w.ctxs = append(w.ctxs, heldCtx{ctx: ctx, left: time.Until(dl), ok: ok})
			w.mu.Unlock()
			return nil
		}
		return c.Complete(data, err)
	}))
}
func (w *realWorld) completeHeld(i int, data any, err error) error {
	w.mu.Lock()
	c := w.held[i]
	w.mu.Unlock()
	return c.Complete(data, err)
}
func (w *realWorld) heldContext(i int) (context.Context, time.Duration, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ctxs[i].ctx, w.ctxs[i].left, w.ctxs[i].ok
}

func (w *realWorld) lateContext(i int) context.Context {
	w.mu.Lock()
	c := w.calls[i]
	w.mu.Unlock()
	return c.Context()
}

func (w *realWorld) until(cond func() bool) {
	deadline := time.After(10 * time.Second)
	for !cond() {
		select {
		case <-w.wake:
		case <-deadline:
			w.t.Fatal("the real scheduler never reached the condition")
		}
	}
}
func (w *realWorld) result(pid relay.PID) (payload.Payload, error) {
	w.mu.Lock()
	h := w.handles[pid]
	w.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := h.Wait(ctx)
	require.NotErrorIs(w.t, err, context.DeadlineExceeded)
	return res, err
}
func (w *realWorld) unread() int { return int(w.s.Stats().Messages.Unread) }
func (w *realWorld) shutdown() error {
	ctx, cancel := context.WithTimeout(context.Background(), w.grace)
	defer cancel()
	return w.s.Shutdown(ctx)
}

// kitWorld is a schedtest.Sim.
type kitWorld struct {
	t    *testing.T
	s    *schedtest.Sim
	held []schedtest.Call
	ctxs []heldCtx
	mu   sync.Mutex
}

func newKit(t *testing.T, opts ...schedtest.Option) *kitWorld {
	return &kitWorld{t: t, s: schedtest.New(t, opts...)}
}

func (w *kitWorld) start(p scheduler.Process, method string) relay.PID {
	return w.s.Start(p, method, nil)
}
func (w *kitWorld) startContext(ctx context.Context, p scheduler.Process, method string) relay.PID {
	return w.s.StartContext(ctx, p, method, nil)
}
func (w *kitWorld) send(to relay.PID, msg any) error       { return w.s.Send(to, msg) }
func (w *kitWorld) terminate(pid relay.PID) error          { return w.s.Terminate(pid) }
func (w *kitWorld) register(n string, pid relay.PID) error { return w.s.Register(n, pid) }
func (w *kitWorld) unregister(n string) error              { return w.s.Unregister(n) }
func (w *kitWorld) lookup(n string) (relay.PID, error)     { return w.s.Lookup(n) }
func (w *kitWorld) reply(to scheduler.ReplyTo, data any, err error) error {
	return w.s.Reply(to, data, err)
}
func (w *kitWorld) terminateAtStep(pid relay.PID, n int) { w.s.TerminateAtStep(pid, n) }
func (w *kitWorld) completeHeld(i int, data any, err error) error {
	w.mu.Lock()
	c := w.held[i]
	w.mu.Unlock()
	return c.Token().Complete(data, err)
}
func (w *kitWorld) heldContext(i int) (context.Context, time.Duration, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ctxs[i].ctx, w.ctxs[i].left, w.ctxs[i].ok
}
func (w *kitWorld) lateContext(i int) context.Context {
	w.mu.Lock()
	c := w.held[i]
	w.mu.Unlock()
	return c.Context()
}
func (w *kitWorld) fake(cmd scheduler.CommandID, hold bool, data any, err error) {
	w.s.Fake(cmd, func(c schedtest.Call) error {
		if hold {
			ctx := c.Context()
			dl, ok := ctx.Deadline()
			w.mu.Lock()
			w.held = append(w.held, c)
			w.ctxs = append(w.ctxs, heldCtx{ctx: ctx, left: dl.Sub(w.s.Now()), ok: ok})
			w.mu.Unlock()
			return nil
		}
		return c.Complete(data, err)
	})
}
func (w *kitWorld) until(cond func() bool) {
	if !w.s.RunUntil(cond) {
		w.s.RunUntilIdleAdvancing()
	}
	require.True(w.t, cond(), "the kit never reached the condition")
}
func (w *kitWorld) result(pid relay.PID) (payload.Payload, error) {
	if !w.s.RunUntil(func() bool { return w.s.Ended(pid) }) {
		w.s.RunUntilIdleAdvancing()
	}
	return w.s.Result(pid)
}
func (w *kitWorld) unread() int {
	n := 0
	for id := uint64(1); id < 64; id++ {
		n += w.s.Unread(relay.PID{ID: id})
	}
	return n
}
func (w *kitWorld) shutdown() error { return w.s.Shutdown() }

// journal is what the processes of a scenario observed, line by line.
type journal struct {
	mu    sync.Mutex
	lines []string
	names map[relay.PID]string
	wake  chan struct{}
	after map[relay.PID]func(n int) // run by fn after each of its steps
}

func newJournal() *journal {
	return &journal{names: map[relay.PID]string{}, wake: make(chan struct{}, 1), after: map[relay.PID]func(int){}}
}

// afterStep makes process pid (an fn) call f at the end of its nth step.
func (j *journal) afterStep(pid relay.PID, n int, f func()) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.after[pid] = func(step int) {
		if step == n {
			f()
		}
	}
}

func (j *journal) name(pid relay.PID, name string) {
	j.mu.Lock()
	j.names[pid] = name
	j.mu.Unlock()
}

func (j *journal) add(format string, args ...any) {
	j.mu.Lock()
	j.lines = append(j.lines, fmt.Sprintf(format, args...))
	j.mu.Unlock()
	j.poke()
}

// poke wakes a realWorld.until that waits, to look at its condition
// again: after a line is written, and after every step of an fn, whose
// step function may change what a condition reads once its lines are
// written.
func (j *journal) poke() {
	select {
	case j.wake <- struct{}{}:
	default:
	}
}

// len returns how many lines were written.
func (j *journal) len() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.lines)
}

// has reports whether a line with this prefix was written.
func (j *journal) has(prefix string) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, l := range j.lines {
		if strings.HasPrefix(l, prefix) {
			return true
		}
	}
	return false
}

func (j *journal) text() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return strings.Join(j.lines, "\n")
}

// byName returns the PID of the process the scenario named name.
func (j *journal) byName(name string) relay.PID {
	j.mu.Lock()
	defer j.mu.Unlock()
	for pid, n := range j.names {
		if n == name {
			return pid
		}
	}
	return relay.PID{}
}

// pid describes a PID by the name the scenario gave it.
func (j *journal) pid(p relay.PID) string {
	if p.IsZero() {
		return "outside"
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if n, ok := j.names[p]; ok {
		return n
	}
	return "?"
}

// event describes an event with names for PIDs and sentinels for errors.
func (j *journal) event(ev scheduler.Event) string {
	var b strings.Builder
	switch ev.Type {
	case scheduler.EventYieldComplete:
		fmt.Fprintf(&b, "complete %d", ev.Tag)
	case scheduler.EventMessage:
		b.WriteString("message")
	case scheduler.EventCancel:
		b.WriteString("cancel")
	}
	if ev.Data != nil {
		fmt.Fprintf(&b, " data=%s", j.data(ev.Data))
	}
	if ev.Error != nil {
		fmt.Fprintf(&b, " err=%s", errName(ev.Error))
	}
	if !ev.From.IsZero() {
		fmt.Fprintf(&b, " from=%s", j.pid(ev.From))
	}
	return b.String()
}

func (j *journal) data(d any) string {
	switch v := d.(type) {
	case relay.PID:
		return j.pid(v)
	case payload.Payload:
		return fmt.Sprintf("%v", v.Value())
	case scheduler.Exit:
		s := fmt.Sprintf("exit(%s %v", j.pid(v.PID), v.Reason)
		if v.Err != nil {
			s += " " + errName(v.Err)
		}
		if !v.Result.IsZero() {
			s += fmt.Sprintf(" %v", v.Result.Value())
		}
		return s + ")"
	case scheduler.Request:
		return fmt.Sprintf("request(%v)", v.Body)
	}
	return fmt.Sprintf("%v", d)
}

var errBoom = errors.New("boom")

// errName names the sentinel err wraps.
func errName(err error) string {
	for _, s := range []struct {
		err  error
		name string
	}{
		{scheduler.ErrTimeout, "Timeout"}, {scheduler.ErrDuplicateTag, "DuplicateTag"},
		{scheduler.ErrYieldNotPending, "YieldNotPending"}, {scheduler.ErrNoReply, "NoReply"},
		{scheduler.ErrProcessNotFound, "ProcessNotFound"}, {scheduler.ErrNameNotFound, "NameNotFound"},
		{scheduler.ErrTerminated, "Terminated"}, {scheduler.ErrShuttingDown, "ShuttingDown"},
		{scheduler.ErrForced, "Forced"}, {scheduler.ErrPanic, "Panic"}, {scheduler.ErrInit, "Init"},
		{scheduler.ErrUnknownCommand, "UnknownCommand"}, {scheduler.ErrInvalidCommand, "InvalidCommand"},
		{scheduler.ErrClosed, "Closed"}, {scheduler.ErrEnded, "Ended"}, {errBoom, "boom"},
		{scheduler.ErrNameTaken, "NameTaken"}, {scheduler.ErrInvalidName, "InvalidName"},
		{scheduler.ErrYieldCancelled, "YieldCancelled"},
		{context.DeadlineExceeded, "DeadlineExceeded"}, {context.Canceled, "Canceled"},
	} {
		if errors.Is(err, s.err) {
			return s.name
		}
	}
	return "other(" + err.Error() + ")"
}

// errOrOK is errName that names no error "ok".
func errOrOK(err error) string {
	if err == nil {
		return "ok"
	}
	return errName(err)
}

// calls records, in order, what the calls a scenario makes return, for
// its result line. Any goroutine.
type calls struct {
	mu    sync.Mutex
	lines []string
}

// note records what returned err.
func (c *calls) note(what string, err error) { c.add(what + " " + errOrOK(err)) }

// lookup records what w's Lookup of name gives, the PID by its name in j.
func (c *calls) lookup(w world, j *journal, name string) {
	pid, err := w.lookup(name)
	c.add(fmt.Sprintf("lookup %s %s %s", name, j.pid(pid), errOrOK(err)))
}

func (c *calls) add(line string) {
	c.mu.Lock()
	c.lines = append(c.lines, line)
	c.mu.Unlock()
}

// String returns the records, in order, joined by "; ".
func (c *calls) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.lines, "; ")
}

// replierStep answers each request with "re:" and its body, fails one
// whose body is "fail" with errBoom, and ends its process at one whose
// body is "quit", unanswered.
func replierStep(_ int, evs []scheduler.Event, out *scheduler.StepOutput) error {
	for _, ev := range evs {
		req, ok := ev.Data.(scheduler.Request)
		switch {
		case !ok:
		case req.Body == "quit":
			out.Done(payload.Payload{})
			return nil
		case req.Body == "fail":
			out.Reply(req.ReplyTo, nil, errBoom)
		default:
			out.Reply(req.ReplyTo, fmt.Sprintf("re:%v", req.Body), nil)
		}
	}
	return nil
}

// endOnEvent is a step that ends its process at the first step after
// its start, the one a message to it brings.
func endOnEvent(n int, _ []scheduler.Event, out *scheduler.StepOutput) error {
	if n > 1 {
		out.Done(payload.Payload{})
	}
	return nil
}

// fn is a process made of functions: it names itself in the journal,
// writes every event it gets there, and runs step (and onInit at the end
// of Init, onClose at the start of Close, if set).
type fn struct {
	name    string
	j       *journal
	step    func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error
	onInit  func(self relay.PID)
	onClose func()
	ctx     context.Context
	self    relay.PID
	n       int
	closes  *atomic.Int32
}

func (p *fn) Init(ctx context.Context, _ string, _ payload.Payloads) error {
	p.ctx = ctx
	p.self, _ = scheduler.Self(ctx)
	p.j.name(p.self, p.name)
	if p.onInit != nil {
		p.onInit(p.self)
	}
	return nil
}

func (p *fn) Step(evs []scheduler.Event, out *scheduler.StepOutput) error {
	p.n++
	for _, ev := range evs {
		p.j.add("%s: %s", p.name, p.j.event(ev))
	}
	defer p.j.poke()
	err := p.step(p.n, evs, out)
	p.j.mu.Lock()
	after := p.j.after[p.self]
	p.j.mu.Unlock()
	if after != nil {
		after(p.n)
	}
	return err
}

func (p *fn) Close() {
	if p.onClose != nil {
		p.onClose()
	}
	if p.closes != nil {
		p.closes.Add(1)
	}
	p.j.add("%s: close", p.name)
}

func proc(j *journal, name string, step func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error) *fn {
	return &fn{name: name, j: j, step: step}
}

const (
	cmdWork    = scheduler.FirstUserCommand
	cmdCleanup = scheduler.FirstUserCommand + 1
)

// scenario is one conformance case: run drives a world and returns the
// transcript of what was observed.
type scenario struct {
	name string
	run  func(t *testing.T, w world, j *journal) string
	want string
	// grace is how long a shutdown waits before it forces the processes
	// left: the real scheduler's Shutdown deadline, the kit's
	// WithShutdownDeadline. Zero: 200ms on the scheduler, the kit's
	// default.
	grace time.Duration
}

// kitOptions returns the options of the kit the scenario runs on.
func (sc scenario) kitOptions() []schedtest.Option {
	if sc.grace == 0 {
		return nil
	}
	return []schedtest.Option{schedtest.WithShutdownDeadline(sc.grace)}
}

// realGrace returns the real scheduler's shutdown deadline.
func (sc scenario) realGrace() time.Duration {
	if sc.grace == 0 {
		return 200 * time.Millisecond
	}
	return sc.grace
}

func TestConformance(t *testing.T) {
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			jr := newJournal()
			got := sc.run(t, newReal(t, jr, sc.realGrace()), jr)
			jk := newJournal()
			gotKit := sc.run(t, newKit(t, sc.kitOptions()...), jk)
			require.Equal(t, got, gotKit, "the kit and the scheduler disagree\nscheduler:\n%s\nkit:\n%s", got, gotKit)
			require.Equal(t, sc.want, got, "both agree, on the wrong answer")
		})
	}
}

// TestConformanceSeeded runs every scenario under a few seeds: the kit's
// interleavings must stay within what the scheduler can produce.
func TestConformanceSeeded(t *testing.T) {
	seeds := 20
	if testing.Short() {
		seeds = 5
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			for seed := uint64(1); seed <= uint64(seeds); seed++ {
				j := newJournal()
				got := sc.run(t, newKit(t, append(sc.kitOptions(), schedtest.WithSeed(seed))...), j)
				require.Equal(t, sc.want, got, "seed %d", seed)
			}
		})
	}
}

// lines returns the journal lines of one process, in order.
func lines(j *journal, name string) string {
	var out []string
	for _, l := range strings.Split(j.text(), "\n") {
		if strings.HasPrefix(l, name+": ") {
			out = append(out, strings.TrimPrefix(l, name+": "))
		}
	}
	return strings.Join(out, "; ")
}

// sortedLines is lines, sorted: for a process whose lines come in an
// order the scheduler leaves open (the ends of children racing each
// other, say).
func sortedLines(j *journal, name string) string {
	ls := strings.Split(lines(j, name), "; ")
	sort.Strings(ls)
	return strings.Join(ls, "; ")
}

var scenarios = []scenario{
	{
		name: "messages keep per-sender FIFO",
		run: func(t *testing.T, w world, j *journal) string {
			var got []string
			sink := w.start(proc(j, "sink", func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
				for _, ev := range evs {
					got = append(got, fmt.Sprintf("%s:%v", j.pid(ev.From), ev.Data))
				}
				if len(got) == 15 {
					out.Done(payload.Of(len(got)))
				}
				return nil
			}), "run")
			for _, name := range []string{"a", "b"} {
				w.start(proc(j, name, func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
					for i := 1; i <= 5; i++ {
						out.Tell(sink, i)
					}
					out.Done(payload.Payload{})
					return nil
				}), "run")
			}
			for i := 1; i <= 5; i++ {
				require.NoError(t, w.send(sink, i))
			}
			res, err := w.result(sink)
			require.NoError(t, err)
			// Only each sender's own order is guaranteed.
			per := map[string][]string{}
			for _, g := range got {
				from, v, _ := strings.Cut(g, ":")
				per[from] = append(per[from], v)
			}
			var keys []string
			for k := range per {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			var b strings.Builder
			for _, k := range keys {
				fmt.Fprintf(&b, "%s %v; ", k, per[k])
			}
			return fmt.Sprintf("%sresult %v", b.String(), res.Value())
		},
		want: "a [1 2 3 4 5]; b [1 2 3 4 5]; outside [1 2 3 4 5]; result 15",
	},
	{
		name: "a message to an ended process bounces",
		run: func(t *testing.T, w world, j *journal) string {
			p := w.start(proc(j, "p", func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
				switch n {
				case 1:
					out.SpawnAwait(1, proc(j, "child", func(int, []scheduler.Event, *scheduler.StepOutput) error {
						return nil
					}), "run", nil)
					out.SpawnAwait(2, proc(j, "quick", func(_ int, _ []scheduler.Event, out *scheduler.StepOutput) error {
						out.Done(payload.Of("q"))
						return nil
					}), "run", nil)
				case 2:
					quick := evs[0].From
					out.Tell(quick, "hello?")
				case 3:
					out.Done(payload.Of("ok"))
				}
				return nil
			}), "run")
			_, err := w.result(p)
			require.NoError(t, err)
			return lines(j, "p")
		},
		want: "complete 2 data=q from=quick; message data=hello? err=ProcessNotFound from=quick; close",
	},
	{
		name: "yields complete with data or error, exactly once",
		run: func(t *testing.T, w world, j *journal) string {
			w.fake(cmdWork, false, "fine", nil)
			w.fake(cmdCleanup, false, nil, errBoom)
			p := w.start(proc(j, "p", func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
				switch n {
				case 1:
					out.Yield(1, cmdWork, "x")
					out.Yield(2, cmdCleanup, "y")
					out.Yield(3, scheduler.FirstUserCommand+9, nil)
					out.Yield(4, scheduler.CommandID(3), nil)
				default:
					out.Done(payload.Of(len(evs)))
				}
				return nil
			}), "run")
			res, err := w.result(p)
			require.NoError(t, err)
			return fmt.Sprintf("%s; result %v", lines(j, "p"), res.Value())
		},
		want: "complete 1 data=fine; complete 2 err=boom; complete 3 err=UnknownCommand; complete 4 err=InvalidCommand; close; result 4",
	},
	{
		name: "a duplicate tag completes at once, the first is untouched",
		run: func(t *testing.T, w world, j *journal) string {
			w.fake(cmdWork, true, nil, nil)
			p := w.start(proc(j, "p", func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
				switch n {
				case 1:
					out.Yield(7, cmdWork, "first")
					out.Yield(7, cmdWork, "second")
				case 3:
					out.Done(payload.Payload{})
				}
				return nil
			}), "run")
			w.until(func() bool { return j.has("p: complete 7 err=DuplicateTag") })
			require.NoError(t, w.completeHeld(0, "one", nil))
			_, err := w.result(p)
			require.NoError(t, err)
			return lines(j, "p")
		},
		want: "complete 7 err=DuplicateTag; complete 7 data=one; close",
	},
	{
		// The Timeout lands on the second yield, refused as a duplicate:
		// it goes to the first, the pending one.
		name: "a timeout fires, given through a duplicate, and the late completion is not pending",
		run: func(t *testing.T, w world, j *journal) string {
			w.fake(cmdWork, true, nil, nil)
			p := w.start(proc(j, "p", func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
				switch {
				case n == 1:
					out.Yield(1, cmdWork, "first")
					out.Yield(1, cmdWork, "second")
					out.Timeout(1, 20*time.Millisecond)
				case evs[0].Type == scheduler.EventMessage:
					out.Done(payload.Payload{})
				}
				return nil
			}), "run")
			w.until(func() bool { return j.has("p: complete 1 err=Timeout") })
			late := w.completeHeld(0, "late", nil)
			require.NoError(t, w.send(p, "stop"))
			_, err := w.result(p)
			require.NoError(t, err)
			return fmt.Sprintf("%s; late: %s", lines(j, "p"), errName(late))
		},
		want: "complete 1 err=DuplicateTag; complete 1 err=Timeout; message data=stop; close; late: YieldNotPending",
	},
	{
		name: "a cancelled yield never completes",
		run: func(t *testing.T, w world, j *journal) string {
			w.fake(cmdWork, true, nil, nil)
			p := w.start(proc(j, "p", func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
				switch n {
				case 1:
					out.Yield(1, cmdWork, nil)
					out.Sleep(2, time.Millisecond)
				case 2:
					out.Cancel(1)
					out.Sleep(3, 5*time.Millisecond)
				default:
					out.Done(payload.Payload{})
				}
				return nil
			}), "run")
			w.until(func() bool { return j.has("p: complete 2") })
			w.until(func() bool { return j.has("p: complete 3") })
			// The late completion comes once the process has ended: made
			// while its end is still under way, it would find the yield
			// merely not pending.
			_, err := w.result(p)
			require.NoError(t, err)
			late := w.completeHeld(0, "late", nil)
			return fmt.Sprintf("%s; late: %s", lines(j, "p"), errName(late))
		},
		want: "complete 2; complete 3; close; late: ProcessNotFound",
	},
	{
		name: "sleeps fire in deadline order",
		run: func(t *testing.T, w world, j *journal) string {
			p := w.start(proc(j, "p", func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
				switch n {
				case 1:
					out.Sleep(1, 40*time.Millisecond)
					out.Sleep(2, time.Millisecond)
					out.SleepUntil(3, time.Time{}) // passed: at once
				default:
					if evs[len(evs)-1].Tag == 1 {
						out.Done(payload.Payload{})
					}
				}
				return nil
			}), "run")
			_, err := w.result(p)
			require.NoError(t, err)
			return lines(j, "p")
		},
		want: "complete 3; complete 2; complete 1; close",
	},
	{
		name: "spawn and spawn-await report the child and its end",
		run: func(t *testing.T, w world, j *journal) string {
			p := w.start(proc(j, "p", func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
				switch n {
				case 1:
					out.Spawn(1, proc(j, "idle", func(int, []scheduler.Event, *scheduler.StepOutput) error { return nil }), "run", nil)
					out.SpawnAwait(2, proc(j, "ok", func(_ int, _ []scheduler.Event, out *scheduler.StepOutput) error {
						out.Done(payload.Of("r"))
						return nil
					}), "run", nil)
					out.SpawnAwait(3, proc(j, "bad", func(int, []scheduler.Event, *scheduler.StepOutput) error { return errBoom }), "run", nil)
					out.SpawnAwait(4, nil, "run", nil)
					out.Spawn(5, proc(j, "x", nil), "", nil)
				default:
					if j.len() >= 5 && j.has("p: complete 2") && j.has("p: complete 3") {
						out.Done(payload.Payload{})
					}
				}
				return nil
			}), "run")
			_, err := w.result(p)
			require.NoError(t, err)
			// The children's ends race each other; sort the parent's lines.
			return sortedLines(j, "p")
		},
		want: "close; complete 1 from=idle; complete 2 data=r from=ok; complete 3 err=boom from=bad; complete 4 err=other(scheduler: nil process); complete 5 err=other(scheduler: empty method)",
	},
	{
		name: "monitors report done, failed, terminated and gone",
		run: func(t *testing.T, w world, j *journal) string {
			mk := func(name string, end func(evs []scheduler.Event, out *scheduler.StepOutput) error) relay.PID {
				return w.start(proc(j, name, func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
					if n == 1 {
						return nil
					}
					return end(evs, out)
				}), "run")
			}
			done := mk("done", func(_ []scheduler.Event, out *scheduler.StepOutput) error { out.Done(payload.Of(1)); return nil })
			failed := mk("failed", func([]scheduler.Event, *scheduler.StepOutput) error { return errBoom })
			term := mk("term", func(_ []scheduler.Event, out *scheduler.StepOutput) error { out.Done(payload.Of(3)); return nil })
			gone := mk("gone", func(_ []scheduler.Event, out *scheduler.StepOutput) error { out.Done(payload.Payload{}); return nil })
			require.NoError(t, w.send(gone, "end"))
			_, _ = w.result(gone)
			watcher := w.start(proc(j, "w", func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
				if n == 1 {
					out.Monitor(1, done)
					out.Monitor(2, failed)
					out.Monitor(3, term)
					out.Monitor(4, gone)
					out.Monitor(5, out.Self())
				}
				if j.has("w: complete 1") && j.has("w: complete 2") && j.has("w: complete 3") {
					out.Done(payload.Payload{})
				}
				return nil
			}), "run")
			w.until(func() bool { return j.has("w: complete 5") })
			require.NoError(t, w.send(done, "end"))
			require.NoError(t, w.send(failed, "end"))
			require.NoError(t, w.terminate(term))
			_, err := w.result(watcher)
			require.NoError(t, err)
			return sortedLines(j, "w")
		},
		want: "close; complete 1 data=exit(done done 1) from=done; complete 2 data=exit(failed failed boom) from=failed; complete 3 data=exit(term terminated Terminated 3) from=term; complete 4 data=exit(gone gone ProcessNotFound) from=gone; complete 5 data=exit(w gone ProcessNotFound) from=w",
	},
	{
		name: "requests are answered, refused when the replier is gone, failed when it ends",
		run: func(t *testing.T, w world, j *journal) string {
			replier := w.start(proc(j, "replier", replierStep), "run")
			gone := w.start(proc(j, "gone", func(n int, _ []scheduler.Event, out *scheduler.StepOutput) error {
				out.Done(payload.Payload{})
				return nil
			}), "run")
			_, _ = w.result(gone)
			asker := w.start(proc(j, "asker", func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
				switch n {
				case 1:
					out.Request(1, replier, "a")
					out.Request(2, gone, "b")
				case 2, 3:
					if j.has("asker: complete 1") && j.has("asker: complete 2") && !j.has("asker: complete 3") {
						out.Request(3, replier, "quit")
					}
				}
				if j.has("asker: complete 3") {
					out.Done(payload.Payload{})
				}
				return nil
			}), "run")
			_, err := w.result(asker)
			require.NoError(t, err)
			return sortedLines(j, "asker")
		},
		want: "close; complete 1 data=re:a from=replier; complete 2 err=ProcessNotFound from=gone; complete 3 err=NoReply from=replier",
	},
	{
		name: "names: tell and request by name, bounce for a missing one",
		run: func(t *testing.T, w world, j *journal) string {
			srv := w.start(proc(j, "srv", func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
				for _, ev := range evs {
					if req, ok := ev.Data.(scheduler.Request); ok {
						out.Reply(req.ReplyTo, "pong", nil)
					}
				}
				return nil
			}), "run")
			require.NoError(t, w.register("srv", srv))
			require.ErrorIs(t, w.register("srv", relay.PID{ID: 999}), scheduler.ErrProcessNotFound)
			c := w.start(proc(j, "c", func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
				switch n {
				case 1:
					out.TellName("srv", "hi")
					out.TellName("nobody", "hi")
					out.RequestName(1, "srv", "ping")
					out.RequestName(2, "nobody", "ping")
				}
				if j.has("c: complete 1") && j.has("c: complete 2") && j.has("c: message") {
					out.Done(payload.Payload{})
				}
				return nil
			}), "run")
			_, err := w.result(c)
			require.NoError(t, err)
			// srv may answer while c's yields are still being carried out.
			return sortedLines(j, "c") + " | " + lines(j, "srv")
		},
		want: "close; complete 1 data=pong from=srv; complete 2 err=NameNotFound; message data=hi err=NameNotFound | message data=hi from=c; message data=request(ping) from=c",
	},
	{
		name: "Done leaves the rest of the batch and later events unread",
		run: func(t *testing.T, w world, j *journal) string {
			p := w.start(proc(j, "p", func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
				switch n {
				case 1:
					for i := range 3 {
						out.Tell(out.Self(), i)
					}
				case 2:
					out.Tell(out.Self(), "after")
					out.Tell(out.Self(), "after")
					out.DoneAfter(1, payload.Of(len(evs)))
					out.Continue() // does nothing after Done
				}
				return nil
			}), "run")
			res, err := w.result(p)
			require.NoError(t, err)
			return fmt.Sprintf("%s; result %v; unread %d", lines(j, "p"), res.Value(), w.unread())
		},
		want: "message data=0 from=p; message data=1 from=p; message data=2 from=p; close; result 3; unread 4",
	},
	{
		name: "DoneAfter then a failure leaves the rest of the batch unread",
		run: func(t *testing.T, w world, j *journal) string {
			failed := errors.New("failed partway")
			p := w.start(proc(j, "p", func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
				switch n {
				case 1:
					for i := range 3 {
						out.Tell(out.Self(), i)
					}
				case 2:
					out.DoneAfter(1, payload.Of(len(evs)))
					return failed
				}
				return nil
			}), "run")
			_, err := w.result(p)
			require.ErrorIs(t, err, failed)
			return fmt.Sprintf("%s; unread %d", lines(j, "p"), w.unread())
		},
		want: "message data=0 from=p; message data=1 from=p; message data=2 from=p; close; unread 2",
	},
	{
		name: "Terminate delivers a cancel, then the process ends",
		run: func(t *testing.T, w world, j *journal) string {
			var cause error
			var pr *fn
			// The process outlives its cancel until the test has
			// terminated it twice: ended, it would rightly refuse the
			// second Terminate.
			var cancelled bool
			var release atomic.Bool
			pr = proc(j, "p", func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
				if n > 1 && len(evs) > 0 && evs[0].Type == scheduler.EventCancel {
					cause = context.Cause(pr.ctx)
					cancelled = true
				}
				if cancelled {
					if release.Load() {
						out.Done(payload.Of("bye"))
					} else {
						out.Continue()
					}
				}
				return nil
			})
			p := w.start(pr, "run")
			require.NoError(t, w.terminate(p))
			require.NoError(t, w.terminate(p), "twice is not an error")
			release.Store(true)
			res, err := w.result(p)
			require.NoError(t, err)
			again := w.terminate(p)
			return fmt.Sprintf("%s; result %v; ctx %s; again %s", lines(j, "p"), res.Value(), errName(cause), errName(again))
		},
		want: "cancel err=Terminated; close; result bye; ctx Terminated; again ProcessNotFound",
	},
	{
		name: "a panic in Step ends the process with a PanicError",
		run: func(t *testing.T, w world, j *journal) string {
			closes := new(atomic.Int32)
			pr := proc(j, "p", func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
				if n == 2 {
					panic("oops")
				}
				out.Continue()
				return nil
			})
			pr.closes = closes
			p := w.start(pr, "run")
			_, err := w.result(p)
			var perr *scheduler.PanicError
			require.ErrorAs(t, err, &perr)
			return fmt.Sprintf("%s; err %s in %s; closes %d", lines(j, "p"), errName(err), perr.Where, closes.Load())
		},
		want: "close; err Panic in Step; closes 1",
	},
	{
		name: "Shutdown cancels, serves cleanup, forces the rest",
		run: func(t *testing.T, w world, j *journal) string {
			w.fake(cmdCleanup, false, "cleaned", nil)
			closes := new(atomic.Int32)
			tidy := proc(j, "tidy", func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
				for _, ev := range evs {
					switch {
					case ev.Type == scheduler.EventCancel:
						out.Yield(1, cmdCleanup, nil)
					case ev.Tag == 1:
						out.Done(payload.Of("tidy"))
					}
				}
				return nil
			})
			stubborn := proc(j, "stubborn", func(int, []scheduler.Event, *scheduler.StepOutput) error { return nil })
			tidy.closes, stubborn.closes = closes, closes
			a := w.start(tidy, "run")
			b := w.start(stubborn, "run")
			w.until(func() bool { return true })
			err := w.shutdown()
			ra, ea := w.result(a)
			_, eb := w.result(b)
			return fmt.Sprintf("%s | %s; shutdown %s; tidy %v %v; stubborn %s; closes %d; send after %s",
				lines(j, "tidy"), lines(j, "stubborn"), errName(err), ra.Value(), ea, errName(eb), closes.Load(), errName(w.send(a, 1)))
		},
		want: "cancel err=ShuttingDown; complete 1 data=cleaned; close | cancel err=ShuttingDown; close; shutdown Forced; tidy tidy <nil>; stubborn Forced; closes 2; send after Closed",
	},
	{
		name: "Register and Lookup: errors, several names, names released at the end",
		run: func(t *testing.T, w world, j *journal) string {
			var rec calls
			note := rec.note
			lookup := func(name string) { rec.lookup(w, j, name) }
			a := w.start(proc(j, "a", endOnEvent), "run")
			b := w.start(proc(j, "b", endOnEvent), "run")
			note("register svc a", w.register("svc", a))
			lookup("svc")
			note("register svc a again", w.register("svc", a))
			note("register svc b", w.register("svc", b))
			note("register empty a", w.register("", a))
			note("register x unknown", w.register("x", relay.PID{ID: 999}))
			lookup("x")
			lookup("")
			note("register alias a", w.register("alias", a))
			lookup("alias")
			require.NoError(t, w.send(a, "end"))
			_, err := w.result(a)
			require.NoError(t, err)
			// The scheduler releases the names of an ended process just
			// after its Handle may report the end.
			w.until(func() bool { _, err := w.lookup("alias"); return err != nil })
			lookup("svc")
			lookup("alias")
			note("register svc a ended", w.register("svc", a))
			note("register svc b", w.register("svc", b))
			lookup("svc")
			note("shutdown", w.shutdown())
			note("register y b", w.register("y", b))
			lookup("svc")
			lookup("never")
			note("unregister svc", w.unregister("svc"))
			note("unregister never", w.unregister("never"))
			return rec.String()
		},
		want: "register svc a ok; lookup svc a ok; register svc a again ok; register svc b NameTaken; register empty a InvalidName; " +
			"register x unknown ProcessNotFound; lookup x outside NameNotFound; lookup  outside NameNotFound; register alias a ok; lookup alias a ok; " +
			"lookup svc outside NameNotFound; lookup alias outside NameNotFound; register svc a ended ProcessNotFound; register svc b ok; lookup svc b ok; " +
			"shutdown ok; register y b Closed; lookup svc outside Closed; lookup never outside Closed; unregister svc Closed; unregister never Closed",
	},
	{
		name: "Reply from outside answers a request once",
		run: func(t *testing.T, w world, j *journal) string {
			var mu sync.Mutex
			var asks []scheduler.ReplyTo
			srv := w.start(proc(j, "srv", func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
				for _, ev := range evs {
					if req, ok := ev.Data.(scheduler.Request); ok {
						mu.Lock()
						asks = append(asks, req.ReplyTo)
						mu.Unlock()
					}
					if ev.Type == scheduler.EventCancel {
						out.Done(payload.Payload{})
					}
				}
				return nil
			}), "run")
			asker := w.start(proc(j, "asker", func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
				if n == 1 {
					out.Request(1, srv, "q1")
					out.Request(2, srv, "q2")
					out.Request(3, srv, "q3")
				}
				// It ends when told, so that the test's second answer
				// to q1 finds it waiting still for q3.
				if j.has("asker: complete 1") && j.has("asker: complete 2") && j.has("asker: message data=end") {
					out.Done(payload.Payload{})
				}
				return nil
			}), "run")
			w.until(func() bool { mu.Lock(); defer mu.Unlock(); return len(asks) == 3 })
			mu.Lock()
			rt := append([]scheduler.ReplyTo(nil), asks...)
			mu.Unlock()
			var rec calls
			note := rec.note
			note("reply 1", w.reply(rt[0], "a1", nil))
			note("reply 2", w.reply(rt[1], nil, errBoom))
			note("reply 1 again", w.reply(rt[0], "again", nil))
			note("reply zero", w.reply(scheduler.ReplyTo{}, "zero", nil))
			require.NoError(t, w.send(asker, "end"))
			_, err := w.result(asker)
			require.NoError(t, err)
			note("reply 3 asker ended", w.reply(rt[2], "late", nil))
			note("shutdown", w.shutdown())
			note("reply 3 after shutdown", w.reply(rt[2], "late", nil))
			note("reply zero after shutdown", w.reply(scheduler.ReplyTo{}, "zero", nil))
			return sortedLines(j, "asker") + " | " + rec.String()
		},
		want: "close; complete 1 data=a1; complete 2 err=boom; message data=end | reply 1 ok; reply 2 ok; reply 1 again YieldNotPending; reply zero YieldNotPending; " +
			"reply 3 asker ended ProcessNotFound; shutdown ok; reply 3 after shutdown Closed; reply zero after shutdown YieldNotPending",
	},
	{
		name: "terminated right after a step: the cancel comes in the next",
		run: func(t *testing.T, w world, j *journal) string {
			w.fake(cmdCleanup, false, "cleaned", nil)
			var pr *fn
			pr = proc(j, "p", func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
				j.add("p: step %d cause %s", n, errOrOK(context.Cause(pr.ctx)))
				for _, ev := range evs {
					switch {
					case ev.Type == scheduler.EventCancel:
						out.Yield(1, cmdCleanup, nil)
					case ev.Tag == 1:
						out.Done(payload.Of("bye"))
					}
				}
				return nil
			})
			p := w.start(pr, "run")
			w.terminateAtStep(p, 2)
			w.until(func() bool { return j.has("p: step 1") })
			require.NoError(t, w.send(p, "go"))
			res, err := w.result(p)
			require.NoError(t, err)
			return fmt.Sprintf("%s; result %v", lines(j, "p"), res.Value())
		},
		want: "step 1 cause ok; message data=go; step 2 cause ok; cancel err=Terminated; step 3 cause Terminated; complete 1 data=cleaned; step 4 cause Terminated; close; result bye",
	},
	{
		name: "Timeout of an earlier step's yield",
		run: func(t *testing.T, w world, j *journal) string {
			w.fake(cmdWork, true, nil, nil)
			p := w.start(proc(j, "p", func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
				switch n {
				case 1:
					out.Yield(1, cmdWork, nil)
					out.Yield(2, cmdWork, nil)
					out.Sleep(3, 20*time.Millisecond)
					out.Tell(out.Self(), "next")
				case 2:
					out.Timeout(1, 10*time.Millisecond)
					out.Timeout(2, 0)         // at once
					out.Timeout(3, time.Hour) // the Sleep ends first and keeps its time
					out.Timeout(9, 0)         // not pending: nothing
				}
				if j.has("p: complete 1") && j.has("p: complete 2") && j.has("p: complete 3") {
					out.Done(payload.Payload{})
				}
				return nil
			}), "run")
			_, err := w.result(p)
			require.NoError(t, err)
			return sortedLines(j, "p")
		},
		want: "close; complete 1 err=Timeout; complete 2 err=Timeout; complete 3; message data=next from=p",
	},
	{
		name: "a Timeout of zero or less of a Sleep of the same step",
		run: func(t *testing.T, w world, j *journal) string {
			p := w.start(proc(j, "p", func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
				if n == 1 {
					out.Sleep(1, 0)
					out.Timeout(1, 0)
					out.Sleep(2, -time.Hour)
					out.Timeout(2, -2*time.Hour)
					out.Sleep(3, -2*time.Hour)
					out.Timeout(3, -time.Hour)
					out.Sleep(4, time.Hour)
					out.Timeout(4, 0)
					out.Sleep(5, -time.Hour)
					out.Timeout(5, time.Hour) // to come: the Sleep's time, passed, comes first
				}
				if j.has("p: complete 1") && j.has("p: complete 2") && j.has("p: complete 3") &&
					j.has("p: complete 4") && j.has("p: complete 5") {
					out.Done(payload.Payload{})
				}
				return nil
			}), "run")
			_, err := w.result(p)
			require.NoError(t, err)
			return sortedLines(j, "p")
		},
		want: "close; complete 1 err=Timeout; complete 2 err=Timeout; complete 3 err=Timeout; complete 4 err=Timeout; complete 5",
	},
	{
		name:  "a shutdown deadline forces what has not ended by then",
		grace: 300 * time.Millisecond,
		run: func(t *testing.T, w world, j *journal) string {
			sleepOnCancel := func(name string, d time.Duration) relay.PID {
				return w.start(proc(j, name, func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
					for _, ev := range evs {
						switch {
						case ev.Type == scheduler.EventCancel:
							out.Sleep(1, d)
						case ev.Tag == 1:
							out.Done(payload.Of(name))
						}
					}
					return nil
				}), "run")
			}
			quick := sleepOnCancel("quick", time.Millisecond)
			slow := sleepOnCancel("slow", 5*time.Second) // within the kit's default deadline, not this one
			w.until(func() bool { return true })
			err := w.shutdown()
			rq, eq := w.result(quick)
			_, es := w.result(slow)
			return fmt.Sprintf("%s | %s; shutdown %s; quick %v %s; slow %s",
				lines(j, "quick"), lines(j, "slow"), errOrOK(err), rq.Value(), errOrOK(eq), errOrOK(es))
		},
		want: "cancel err=ShuttingDown; complete 1; close | cancel err=ShuttingDown; close; shutdown Forced; quick quick ok; slow Forced",
	},
	{
		name: "a handler's call context has the yield's deadline and is done when the yield ends, not when the process is asked to stop",
		run: func(t *testing.T, w world, j *journal) string {
			w.fake(cmdWork, true, nil, nil)
			p := w.start(proc(j, "p", func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
				if n == 1 {
					out.Yield(1, cmdWork, "timed")
					out.Timeout(1, time.Hour)
					out.Yield(2, cmdWork, "completed")
					out.Yield(3, cmdWork, "cancelled")
					out.Yield(4, cmdWork, "left")
					out.Tell(out.Self(), "handled") // after the handlers ran
				}
				for _, ev := range evs {
					switch {
					case ev.Type == scheduler.EventCancel:
						out.Timeout(1, 0)
						out.Cancel(3)
						out.Tell(out.Self(), "cancelled")
					case ev.Tag == 2:
						out.Done(payload.Payload{})
					}
				}
				return nil
			}), "run")
			var r []string
			state := func(when string, calls ...int) {
				var b []string
				for _, i := range calls {
					ctx, _, _ := w.heldContext(i - 1)
					_, has := ctx.Deadline()
					b = append(b, fmt.Sprintf("%d %s %s deadline %v", i, errOrOK(ctx.Err()), errOrOK(context.Cause(ctx)), has))
				}
				r = append(r, when+": "+strings.Join(b, ", "))
			}
			w.until(func() bool { return j.has("p: message data=handled") })
			for i := 1; i <= 4; i++ {
				ctx, left, ok := w.heldContext(i - 1)
				self, _ := scheduler.Self(ctx)
				r = append(r, fmt.Sprintf("%d of %s: deadline %v, within the hour %v", i, j.pid(self), ok, left > 0 && left <= time.Hour))
			}
			state("handled", 1, 2, 3, 4)
			require.NoError(t, w.terminate(p))
			w.until(func() bool { return j.has("p: message data=cancelled") })
			state("asked to stop", 1, 2, 3, 4)
			require.NoError(t, w.completeHeld(1, "done", nil))
			_, err := w.result(p)
			require.NoError(t, err)
			state("ended", 2, 4)
			return lines(j, "p") + " | " + strings.Join(r, "; ")
		},
		want: "message data=handled from=p; cancel err=Terminated; complete 1 err=Timeout; message data=cancelled from=p; complete 2 data=done; close | " +
			"1 of p: deadline true, within the hour true; 2 of p: deadline false, within the hour false; " +
			"3 of p: deadline false, within the hour false; 4 of p: deadline false, within the hour false; " +
			"handled: 1 ok ok deadline true, 2 ok ok deadline false, 3 ok ok deadline false, 4 ok ok deadline false; " +
			"asked to stop: 1 DeadlineExceeded Timeout deadline false, 2 ok ok deadline false, 3 Canceled YieldCancelled deadline false, 4 ok ok deadline false; " +
			"ended: 2 Canceled Canceled deadline false, 4 Canceled Ended deadline false",
	},
	{
		name: "a handler's call context asked for once the yield has ended is done already, with cause Canceled until the process ends and Ended after",
		run: func(t *testing.T, w world, j *journal) string {
			w.fake(cmdWork, true, nil, nil)
			p := w.start(proc(j, "p", func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
				if n == 1 {
					out.Yield(1, cmdWork, "timed")
					out.Yield(2, cmdWork, "cancelled")
					out.Yield(3, cmdWork, "completed")
					out.Yield(4, cmdWork, "left")
					out.Tell(out.Self(), "handled") // after the handlers ran
				}
				for _, ev := range evs {
					switch {
					case ev.Data == "handled":
						out.Timeout(1, 0)
						out.Cancel(2)
						out.Tell(out.Self(), "ended")
					case ev.Data == "stop":
						out.Done(payload.Payload{})
					}
				}
				return nil
			}), "run")
			var r []string
			state := func(when string, calls ...int) {
				var b []string
				for _, i := range calls {
					ctx := w.lateContext(i - 1)
					self, _ := scheduler.Self(ctx)
					b = append(b, fmt.Sprintf("%d of %s %s %s", i, j.pid(self), errOrOK(ctx.Err()), errOrOK(context.Cause(ctx))))
				}
				r = append(r, when+": "+strings.Join(b, ", "))
			}
			w.until(func() bool { return j.has("p: message data=ended") })
			require.NoError(t, w.completeHeld(2, "done", nil))
			w.until(func() bool { return j.has("p: complete 3") })
			state("yields ended", 1, 2, 3, 4)
			require.NoError(t, w.send(p, "stop"))
			_, err := w.result(p)
			require.NoError(t, err)
			state("process ended", 1, 2, 3, 4)
			return lines(j, "p") + " | " + strings.Join(r, "; ")
		},
		want: "message data=handled from=p; complete 1 err=Timeout; message data=ended from=p; complete 3 data=done; message data=stop; close | " +
			"yields ended: 1 of p Canceled Canceled, 2 of p Canceled Canceled, 3 of p Canceled Canceled, 4 of p ok ok; " +
			"process ended: 1 of p Canceled Ended, 2 of p Canceled Ended, 3 of p Canceled Ended, 4 of p Canceled Ended",
	},
	{
		name: "the process context carries the start's values, not its cancellation, and a spawned child's its parent's",
		run: func(t *testing.T, w world, j *journal) string {
			type key struct{}
			describe := func(ctx context.Context) string {
				self, _ := scheduler.Self(ctx)
				return fmt.Sprintf("value %v self %s err %s", ctx.Value(key{}), j.pid(self), errOrOK(ctx.Err()))
			}
			var child *fn
			child = proc(j, "child", func(_ int, _ []scheduler.Event, out *scheduler.StepOutput) error {
				out.Done(payload.Of(describe(child.ctx)))
				return nil
			})
			var pr *fn
			pr = proc(j, "p", func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
				if n == 1 {
					out.SpawnAwait(1, child, "run", nil)
					return nil
				}
				out.Done(payload.Of(fmt.Sprintf("%s | child: %v", describe(pr.ctx), evs[0].Data)))
				return nil
			})
			ctx, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "request 7"))
			p := w.startContext(ctx, pr, "run")
			cancel() // bounds the start only
			res, err := w.result(p)
			require.NoError(t, err)
			return fmt.Sprintf("p: %v", res.Value())
		},
		want: "p: value request 7 self p err ok | child: value request 7 self child err ok",
	},
	{
		name: "SpawnAwait and Monitor report a child's panic, failed Init and termination",
		run: func(t *testing.T, w world, j *journal) string {
			p := w.start(proc(j, "p", func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
				if n == 1 {
					out.SpawnAwait(1, proc(j, "panics", func(int, []scheduler.Event, *scheduler.StepOutput) error { panic("oops") }), "run", nil)
					out.SpawnAwait(2, &failingInit{}, "run", nil)
					out.SpawnAwait(3, proc(j, "stops", func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
						if n == 1 {
							out.Tell(out.Self(), "ready")
						}
						for _, ev := range evs {
							if ev.Type == scheduler.EventCancel {
								out.Done(payload.Of("stopped"))
							}
						}
						return nil
					}), "run", nil)
					out.Spawn(4, proc(j, "watched", func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
						if len(evs) > 0 {
							panic("watched")
						}
						return nil
					}), "run", nil)
				}
				for _, ev := range evs {
					if ev.Tag == 4 && ev.Error == nil {
						out.Monitor(5, ev.From)
						out.Tell(ev.From, "go")
					}
				}
				if j.has("p: complete 1") && j.has("p: complete 2") && j.has("p: complete 3") && j.has("p: complete 5") {
					out.Done(payload.Payload{})
				}
				return nil
			}), "run")
			w.until(func() bool { return j.has("stops: message data=ready") })
			require.NoError(t, w.terminate(j.byName("stops")))
			_, err := w.result(p)
			require.NoError(t, err)
			return sortedLines(j, "p")
		},
		want: "close; complete 1 err=Panic from=panics; complete 2 err=Init; complete 3 data=stopped from=stops; complete 4 from=watched; complete 5 data=exit(watched failed Panic) from=watched",
	},
	{
		name: "requests by name: answered with data or an error, NoReply when the holder ends, NameNotFound once its name is free",
		run: func(t *testing.T, w world, j *journal) string {
			srv := w.start(proc(j, "srv", replierStep), "run")
			require.NoError(t, w.register("srv", srv))
			asker := w.start(proc(j, "asker", func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
				if n == 1 {
					out.RequestName(1, "srv", "a")
					out.RequestName(2, "srv", "fail")
				}
				for _, ev := range evs {
					switch {
					case ev.Tag == 2:
						out.RequestName(3, "srv", "quit")
					case ev.Tag == 3:
						out.RequestName(4, "srv", "again")
					case ev.Tag == 4:
						out.Done(payload.Payload{})
					}
				}
				return nil
			}), "run")
			_, err := w.result(asker)
			require.NoError(t, err)
			return lines(j, "asker") + " | " + lines(j, "srv")
		},
		want: "complete 1 data=re:a from=srv; complete 2 err=boom from=srv; complete 3 err=NoReply from=srv; complete 4 err=NameNotFound; close | " +
			"message data=request(a) from=asker; message data=request(fail) from=asker; message data=request(quit) from=asker; close",
	},
	{
		name: "a process that continues leaves the others their turn and gets its messages",
		run: func(t *testing.T, w world, j *journal) string {
			spinner := w.start(proc(j, "spinner", func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
				if j.has("spinner: message data=stop") && j.has("spinner: message data=outside") {
					out.Done(payload.Payload{})
					return nil
				}
				out.Continue()
				return nil
			}), "run")
			require.NoError(t, w.send(spinner, "outside"))
			w.start(proc(j, "stopper", func(n int, _ []scheduler.Event, out *scheduler.StepOutput) error {
				out.Tell(spinner, "stop")
				out.Done(payload.Payload{})
				return nil
			}), "run")
			_, err := w.result(spinner)
			require.NoError(t, err)
			return sortedLines(j, "spinner")
		},
		want: "close; message data=outside; message data=stop from=stopper",
	},
	{
		name: "while its Close runs a process is gone: Register (even of a name it holds), Tell and Terminate are refused, and no name finds it",
		run: func(t *testing.T, w world, j *journal) string {
			var rec calls
			note := rec.note
			pr := proc(j, "p", func(n int, _ []scheduler.Event, out *scheduler.StepOutput) error {
				if n > 1 {
					out.Done(payload.Payload{})
				}
				return nil
			})
			pr.onClose = func() {
				note("register svc", w.register("svc", pr.self))
				note("register other", w.register("other", pr.self))
				pid, err := w.lookup("svc")
				note("lookup svc "+j.pid(pid), err)
				note("unregister svc", w.unregister("svc"))
				note("tell", w.send(pr.self, "in close"))
				note("terminate", w.terminate(pr.self))
			}
			p := w.start(pr, "run")
			require.NoError(t, w.register("svc", p))
			require.NoError(t, w.send(p, "end"))
			_, err := w.result(p)
			require.NoError(t, err)
			w.until(func() bool { _, err := w.lookup("svc"); return err != nil })
			_, err = w.lookup("other")
			note("lookup other", err)
			note("register svc after the end", w.register("svc", p))
			return lines(j, "p") + " | " + rec.String()
		},
		want: "message data=end; close | register svc ProcessNotFound; register other ProcessNotFound; lookup svc outside NameNotFound; unregister svc NameNotFound; tell ProcessNotFound; terminate ProcessNotFound; " +
			"lookup other NameNotFound; register svc after the end ProcessNotFound",
	},
	{
		name: "while its Init runs a process is not there yet: Tell, Register and Terminate of it are refused; from its first step they are not",
		run: func(t *testing.T, w world, j *journal) string {
			var rec calls
			note := rec.note
			var pr *fn
			pr = proc(j, "p", func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
				if n == 1 {
					note("step: register svc", w.register("svc", pr.self))
					out.Tell(out.Self(), "from the first step")
					return nil
				}
				out.Done(payload.Payload{})
				return nil
			})
			pr.onInit = func(self relay.PID) {
				note("init: tell", w.send(self, "from init"))
				note("init: register svc", w.register("svc", self))
				note("init: terminate", w.terminate(self))
				_, err := w.lookup("svc")
				note("init: lookup svc", err)
			}
			p := w.start(pr, "run")
			_, err := w.result(p)
			require.NoError(t, err)
			return lines(j, "p") + " | " + rec.String()
		},
		want: "message data=from the first step from=p; close | init: tell ProcessNotFound; init: register svc ProcessNotFound; init: terminate ProcessNotFound; " +
			"init: lookup svc NameNotFound; step: register svc ok",
	},
	{
		name: "a Timeout too long for the clock never fires, and a Sleep until the end of time never ends",
		run: func(t *testing.T, w world, j *journal) string {
			w.fake(cmdWork, true, nil, nil)
			p := w.start(proc(j, "p", func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
				if n == 1 {
					out.Yield(1, cmdWork, nil)
					out.Timeout(1, math.MaxInt64)
					out.Sleep(2, math.MaxInt64)
					out.Sleep(3, time.Millisecond)
					out.Timeout(3, math.MaxInt64) // the Sleep keeps its own time
				}
				for _, ev := range evs {
					if ev.Tag == 1 {
						out.Cancel(2)
						out.Done(payload.Payload{})
					}
				}
				return nil
			}), "run")
			w.until(func() bool { return j.has("p: complete 3") })
			_, _, hasDeadline := w.heldContext(0)
			require.NoError(t, w.completeHeld(0, "answer", nil))
			_, err := w.result(p)
			require.NoError(t, err)
			return fmt.Sprintf("%s | deadline %v", lines(j, "p"), hasDeadline)
		},
		want: "complete 3; complete 1 data=answer; close | deadline true",
	},
	{
		name: "a Request cancelled by the step during which its answer came: the answer was taken and is never delivered",
		run: func(t *testing.T, w world, j *journal) string {
			var mu sync.Mutex
			var rt scheduler.ReplyTo
			srv := w.start(proc(j, "srv", func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
				for _, ev := range evs {
					if req, ok := ev.Data.(scheduler.Request); ok {
						mu.Lock()
						rt = req.ReplyTo
						mu.Unlock()
					}
					if ev.Type == scheduler.EventCancel {
						out.Done(payload.Payload{})
					}
				}
				return nil
			}), "run")
			var replied error
			asker := w.start(proc(j, "asker", func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
				if n == 1 {
					out.Request(1, srv, "question")
				}
				for _, ev := range evs {
					switch ev.Data {
					case "answer now, then cancel":
						mu.Lock()
						to := rt
						mu.Unlock()
						replied = w.reply(to, "answer", nil)
						out.Cancel(1)
						out.Tell(out.Self(), "after the cancel")
					case "after the cancel":
						out.Done(payload.Payload{})
					}
				}
				return nil
			}), "run")
			w.until(func() bool { mu.Lock(); defer mu.Unlock(); return rt.Seq != 0 })
			require.NoError(t, w.send(asker, "answer now, then cancel"))
			_, err := w.result(asker)
			require.NoError(t, err)
			return fmt.Sprintf("%s | reply %s", lines(j, "asker"), errOrOK(replied))
		},
		want: "message data=answer now, then cancel; message data=after the cancel from=asker; close | reply ok",
	},
	{
		name: "the yields of a final step are carried out: completions that come meanwhile are unread, later ones refused; so are those of a step that fails or panics",
		run: func(t *testing.T, w world, j *journal) string {
			w.fake(cmdWork, false, "at once", nil)
			w.fake(cmdCleanup, true, nil, nil)
			gone := w.start(proc(j, "gone", func(_ int, _ []scheduler.Event, out *scheduler.StepOutput) error {
				out.Done(payload.Payload{})
				return nil
			}), "run")
			_, err := w.result(gone)
			require.NoError(t, err)
			sink := w.start(proc(j, "sink", func(n int, _ []scheduler.Event, out *scheduler.StepOutput) error {
				if j.has("sink: message data=last words") && j.has("sink: message data=famous last words") && j.has("sink: message data=final") {
					out.Done(payload.Payload{})
				}
				return nil
			}), "run")
			p := w.start(proc(j, "p", func(_ int, _ []scheduler.Event, out *scheduler.StepOutput) error {
				out.Tell(out.Self(), "to itself")
				out.Spawn(1, proc(j, "child", func(_ int, _ []scheduler.Event, out *scheduler.StepOutput) error {
					out.Done(payload.Payload{})
					return nil
				}), "run", nil)
				out.Yield(2, cmdWork, nil)
				out.Yield(3, cmdCleanup, nil)
				out.Monitor(4, gone)
				out.Request(5, gone, "q")
				out.Tell(sink, "final")
				out.Done(payload.Of("result"))
				return nil
			}), "run")
			res, err := w.result(p)
			require.NoError(t, err)
			unread := w.unread()
			late := w.completeHeld(0, "late", nil)
			failer := w.start(proc(j, "failer", func(_ int, _ []scheduler.Event, out *scheduler.StepOutput) error {
				out.Tell(sink, "last words")
				return errBoom
			}), "run")
			panicker := w.start(proc(j, "panicker", func(_ int, _ []scheduler.Event, out *scheduler.StepOutput) error {
				out.Tell(sink, "famous last words")
				panic("oops")
			}), "run")
			_, errF := w.result(failer)
			_, errP := w.result(panicker)
			_, err = w.result(sink)
			require.NoError(t, err)
			return fmt.Sprintf("%s | %s | result %v; unread %d; late %s; unread after %d; failer %s; panicker %s",
				lines(j, "p"), sortedLines(j, "sink"), res.Value(), unread, errOrOK(late), w.unread(), errOrOK(errF), errOrOK(errP))
		},
		want: "close | close; message data=famous last words from=panicker; message data=final from=p; message data=last words from=failer | " +
			"result result; unread 5; late ProcessNotFound; unread after 5; failer boom; panicker Panic",
	},
	{
		name: "Unregister releases a name whichever process holds it; TellName and RequestName to a released name, or to the empty one, find nobody",
		run: func(t *testing.T, w world, j *journal) string {
			var rec calls
			note := rec.note
			lookup := func(name string) { rec.lookup(w, j, name) }
			a := w.start(proc(j, "a", endOnEvent), "run")
			b := w.start(proc(j, "b", endOnEvent), "run")
			note("register svc a", w.register("svc", a))
			note("unregister svc", w.unregister("svc"))
			lookup("svc")
			note("unregister svc again", w.unregister("svc"))
			note("register svc b", w.register("svc", b))
			require.NoError(t, w.send(a, "end"))
			_, err := w.result(a)
			require.NoError(t, err)
			lookup("svc") // a's end leaves b's name alone
			note("unregister svc, meant for a", w.unregister("svc"))
			lookup("svc")
			note("register gone b", w.register("gone", b))
			note("unregister gone", w.unregister("gone"))
			note("register svc b again", w.register("svc", b))
			c := w.start(proc(j, "c", func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
				if n == 1 {
					out.TellName("gone", "hi")
					out.RequestName(1, "gone", "ping")
					out.RequestName(2, "", "ping") // no process has the empty name
				}
				if j.has("c: message") && j.has("c: complete 1") && j.has("c: complete 2") {
					out.Done(payload.Payload{})
				}
				return nil
			}), "run")
			_, err = w.result(c)
			require.NoError(t, err)
			require.NoError(t, w.send(b, "end"))
			_, err = w.result(b)
			require.NoError(t, err)
			w.until(func() bool { _, err := w.lookup("svc"); return err != nil })
			note("unregister svc after b's end", w.unregister("svc"))
			note("shutdown", w.shutdown())
			note("unregister svc after shutdown", w.unregister("svc"))
			return sortedLines(j, "c") + " | " + rec.String()
		},
		want: "close; complete 1 err=NameNotFound; complete 2 err=NameNotFound; message data=hi err=NameNotFound | register svc a ok; unregister svc ok; lookup svc outside NameNotFound; " +
			"unregister svc again NameNotFound; register svc b ok; lookup svc b ok; unregister svc, meant for a ok; lookup svc outside NameNotFound; " +
			"register gone b ok; unregister gone ok; register svc b again ok; unregister svc after b's end NameNotFound; shutdown ok; unregister svc after shutdown Closed",
	},
	{
		name: "a Shutdown after Terminate sends no second cancel, and the context's cause stays ErrTerminated",
		run: func(t *testing.T, w world, j *journal) string {
			var pr *fn
			pr = proc(j, "p", func(n int, evs []scheduler.Event, out *scheduler.StepOutput) error {
				for _, ev := range evs {
					switch {
					case ev.Type == scheduler.EventCancel:
						out.Sleep(1, 50*time.Millisecond)
					case ev.Tag == 1:
						j.add("p: cause %s", errOrOK(context.Cause(pr.ctx)))
						out.Done(payload.Of("bye"))
					}
				}
				return nil
			})
			p := w.start(pr, "run")
			w.until(func() bool { return true })
			require.NoError(t, w.terminate(p))
			w.until(func() bool { return j.has("p: cancel") })
			sd := w.shutdown()
			res, err := w.result(p)
			return fmt.Sprintf("%s; shutdown %s; result %v %s", lines(j, "p"), errOrOK(sd), res.Value(), errOrOK(err))
		},
		want: "cancel err=Terminated; complete 1; cause Terminated; close; shutdown ok; result bye ok",
	},
}

// failingInit is a process whose Init fails.
type failingInit struct{}

func (failingInit) Init(context.Context, string, payload.Payloads) error { return errBoom }
func (failingInit) Step([]scheduler.Event, *scheduler.StepOutput) error  { return nil }
func (failingInit) Close()                                               {}
