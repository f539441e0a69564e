package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/procsched/scheduler/globalq"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// Scheduler runs processes on a fixed set of worker goroutines. Create one
// with [New] and stop it with [Scheduler.Shutdown]. All methods are safe
// for concurrent use.
type Scheduler struct {
	node        uint32
	stepBudget  int
	globalBatch int
	unfair      bool // see config
	fixedBatch  bool // see config

	table    *table
	methods  *methodTable
	global   globalq.Queue[proc] // runnable processes not owned by a worker
	workers  []*worker
	handlers atomic.Pointer[[]Handler] // indexed by CommandID; replaced copy-on-write under handlersMu
	timers   *timerService
	watchdog *watchdog // nil when off
	hooks    Hooks
	// transport carries messages for PIDs of other nodes; nil: they are
	// not found.
	transport relay.Receiver
	mailbox   mailboxLimit // the default mailbox limit
	// limits is set once any mailbox limit exists (WithMailbox, or a
	// Mailbox submit option); until then deliveries skip the lookup.
	limits   atomic.Bool
	names    names        // the registry of process names
	pool     pool         // the blocking pool (Call.Go)
	log      *slog.Logger // nil: silent
	maxProcs int64        // 0: no limit
	// procs counts processes against maxProcs (only when it is set):
	// incremented by CAS below the limit before Init, decremented at the
	// end, so the limit holds under any number of concurrent starts.
	procs atomic.Int64
	// extMsgs count message outcomes of senders outside the workers,
	// striped by recipient so that senders to different processes do not
	// contend on one cache line.
	extMsgs [msgStripes]msgStripe

	handlersMu sync.Mutex

	// coarse is the scheduler's coarse clock: nanoseconds since the timer
	// service's epoch, advanced by the watchdog at each sample, by a
	// worker that fires timers (to the clock reading it fired them at)
	// and, when the End hook is set, by every worker each time it
	// publishes its counters (every 64 rounds, and when it goes idle), so
	// reading the time costs a load instead of a clock call. Moved only
	// forward, by CAS (see advanceCoarse); loaded by the End hook's
	// bookkeeping.
	coarse atomic.Int64

	// phase is the shutdown phase (see shutdown.go): stored by Shutdown
	// and the stopper, loaded by every entry point and worker. With the
	// live count (see liveCount) it decides when the workers may stop: a
	// start is counted before the phase is checked, and Shutdown moves
	// the phase before it reads the count, so one sees the other.
	phase atomic.Uint32
	sd    shutdown
	wg    sync.WaitGroup // workers, the watchdog, and armed worker alarms (see armAlarm)

	idle idleWorkers
	// spinning counts workers searching for work (stealing or spinning).
	// Incremented by a worker that starts searching or by the waker that
	// hands a parked worker the search; decremented when a searcher finds
	// work or parks. Read by wakers to avoid waking a worker when one is
	// already searching (see worker.go).
	spinning atomic.Int32

	counters schedCounters
}

// New starts a scheduler with its workers. It returns an error wrapping
// [ErrInvalidOption] for a bad option.
func New(opts ...Option) (*Scheduler, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o.apply(&cfg); err != nil {
			return nil, err
		}
	}
	s := &Scheduler{
		node:        cfg.node,
		stepBudget:  cfg.stepBudget,
		globalBatch: cfg.globalBatch,
		unfair:      cfg.unfair,
		fixedBatch:  cfg.fixedBatch,
		mailbox:     cfg.mailbox,
		maxProcs:    int64(cfg.maxProcs),
		log:         cfg.logger,
		transport:   cfg.transport,
		table:       newTable(),
		methods:     newMethodTable(),
		sd:          newShutdown(),
	}
	s.limits.Store(cfg.mailbox.capacity > 0)
	s.pool = pool{s: s, cfg: cfg.pool}
	hs := make([]Handler, FirstUserCommand)
	for cmd, h := range cfg.handlers {
		hs = setHandler(hs, cmd, h)
	}
	s.handlers.Store(&hs)
	s.hooks = cfg.hooks
	s.timers = newTimerService(s, cfg.workers)
	s.workers = make([]*worker, cfg.workers)
	for i := range s.workers {
		s.workers[i] = newWorker(s, i)
	}
	if cfg.watchdog > 0 {
		s.watchdog = newWatchdog(s, cfg.watchdog, cfg.hooks.SlowStep)
		s.wg.Add(1)
		goLabelled(s.watchdog.run, "procsched", "watchdog")
	}
	s.wg.Add(len(s.workers))
	for i, w := range s.workers {
		goLabelled(w.loop, "procsched", "worker", "worker", strconv.Itoa(i))
	}
	return s, nil
}

// goLabelled starts f on a new goroutine that carries pprof labels, so
// that profiles attribute the scheduler's goroutines. A goroutine takes
// its creator's labels when it is created, so they are there from its
// first instruction.
func goLabelled(f func(), labels ...string) {
	pprof.Do(context.Background(), pprof.Labels(labels...), func(context.Context) { go f() })
}

// Node returns the node number in this scheduler's PIDs.
func (s *Scheduler) Node() uint32 { return s.node }

// Submit starts process p at entry point method with input. It assigns
// the process a PID that is never reused, calls p.Init synchronously (on
// the caller's goroutine) with the process context, and queues the
// process to run. The returned [Handle] names the process and yields its
// result.
//
// If Init fails or panics, Submit calls p.Close and returns an error
// wrapping [ErrInit] and Init's error; the process never runs. Submit also
// fails with [ErrNilProcess], [ErrEmptyMethod], [ErrNilContext], ctx's
// error if ctx is already done, and [ErrClosed] once Shutdown has begun.
//
// ctx bounds the submission only: the process context carries ctx's
// values but not its cancellation (see [Process]).
func (s *Scheduler) Submit(ctx context.Context, p Process, method string, input payload.Payloads, opts ...SubmitOption) (Handle, error) {
	return s.submit(ctx, nil, p, method, input, opts, via{})
}

// submit is Submit and Call.Submit: values, if not nil, is where the
// process context's values come from when ctx has none to offer; v says
// where the process is queued.
func (s *Scheduler) submit(ctx context.Context, values context.Context, p Process, method string, input payload.Payloads, opts []SubmitOption, v via) (Handle, error) {
	if ctx == nil {
		return Handle{}, fmt.Errorf("%w: Submit", ErrNilContext)
	}
	if err := ctx.Err(); err != nil {
		return Handle{}, err
	}
	so, err := applySubmitOptions(opts)
	if err != nil {
		return Handle{}, err
	}
	if values == nil || (ctx != context.Background() && ctx != context.TODO()) {
		values = ctx
	}
	pr, err := s.start(values, p, method, input, 0, 0, nil, so.mailbox, true)
	if err != nil {
		return Handle{}, err
	}
	s.enqueue(pr, v)
	return Handle{p: pr}, nil
}

// start creates, registers and initialises a process; the caller queues
// it. values is the context its Value lookups go to; awaiter and awaitSeq
// name the parent yield that waits for its end (SpawnAwait), if any; w is
// the worker doing this, nil outside workers; mailbox, if not nil, is the
// process's own mailbox limit; handle says the caller gets a Handle, so
// the result must be kept.
func (s *Scheduler) start(values context.Context, p Process, method string, input payload.Payloads, awaiter, awaitSeq uint64, w *worker, mailbox *mailboxLimit, handle bool) (*proc, error) {
	if p == nil {
		return nil, ErrNilProcess
	}
	if method == "" {
		return nil, ErrEmptyMethod
	}
	s.countStart(w)
	if s.closing() {
		s.countEnd(w)
		return nil, ErrClosed
	}
	if s.maxProcs > 0 && !s.reserveProc() {
		if w != nil {
			bump(&w.stats.rejected)
		} else {
			s.counters.rejected.Add(1)
		}
		s.countEnd(w)
		return nil, fmt.Errorf("%w: the limit is %d", ErrTooManyProcesses, s.maxProcs)
	}
	id, ok := s.table.alloc(w.slotCache())
	if !ok {
		s.releaseProc()
		s.countEnd(w)
		return nil, fmt.Errorf("%w: the process table is full", ErrTooManyProcesses)
	}
	pr := s.newProc()
	pr.id, pr.node, pr.impl = id, s.node, p
	pr.awaiter, pr.awaitSeq = awaiter, awaitSeq
	pr.methodID = s.internMethod(method, w)
	if handle {
		pr.flags = pfHandle // not yet shared: no lock needed
	}
	if values == context.Background() || values == context.TODO() {
		values = nil // nothing to look up
	}
	if values != nil || mailbox != nil || pr.methodID == 0 {
		x := &procExtra{values: values, mailbox: mailbox}
		if pr.methodID == 0 {
			x.method = method
		}
		if mailbox != nil && !s.limits.Load() {
			s.limits.Store(true)
		}
		pr.extra.Store(x)
	}
	pr.state.Store(stReady)
	if err := s.callInit(pr, method, input, w); err != nil {
		_ = s.callClose(pr, w)
		pr.impl = nil
		pr.close(payload.Payload{}, err, false)
		s.table.release(id, w.slotCache())
		s.releaseProc()
		if w != nil {
			bump(&w.stats.initFailed)
		} else {
			s.counters.initFailed.Add(1)
		}
		s.countEnd(w)
		return nil, err
	}
	if s.hooks.End != nil {
		pr.timing().started = s.coarse.Load()
	}
	s.table.publish(pr)
	if w != nil {
		bump(&w.stats.spawned)
	} else {
		s.counters.submitted.Add(1)
	}
	// A Shutdown that began after the check above may have walked the
	// table before this process was published; deliver its cancel here.
	if s.closing() {
		_, _ = pr.terminate(pfShutdownCancel) // pr is Ready and about to be queued
	}
	if s.hooks.Start != nil {
		s.hooks.Start(Started{PID: pr.pid(), Method: method})
	}
	return pr, nil
}

// reserveProc counts a process against WithMaxProcesses, if there is room.
func (s *Scheduler) reserveProc() bool {
	for {
		n := s.procs.Load()
		if n >= s.maxProcs {
			return false
		}
		if s.procs.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// releaseProc gives back what reserveProc took.
func (s *Scheduler) releaseProc() {
	if s.maxProcs > 0 {
		s.procs.Add(-1)
	}
}

// recovered reports a panic recovered from p's code or a handler: it is
// counted and passed to the Panic hook. w is the worker, if any.
func (s *Scheduler) recovered(p *proc, perr *PanicError, w *worker) {
	if w != nil {
		bump(&w.stats.panics)
	} else {
		s.counters.panics.Add(1)
	}
	if s.hooks.Panic != nil {
		s.hooks.Panic(Panicked{PID: p.pid(), Method: s.methodOf(p), Err: perr})
	}
	if s.log != nil {
		s.log.Error("scheduler: recovered a panic", "pid", p.pid(), "method", s.methodOf(p), "in", perr.Where, "value", fmt.Sprint(perr.Value))
	}
}

// callInit runs Init, turning a panic into an error.
func (s *Scheduler) callInit(p *proc, method string, input payload.Payloads, w *worker) (err error) {
	defer func() {
		if v := recover(); v != nil {
			perr := newPanicError("Init", v)
			s.recovered(p, perr, w)
			err = fmt.Errorf("%w: %w", ErrInit, perr)
		}
	}()
	if err := p.impl.Init(p, method, input); err != nil {
		return fmt.Errorf("%w: %w", ErrInit, err)
	}
	return nil
}

// callClose runs Close and returns the panic it raised, if any.
func (s *Scheduler) callClose(p *proc, w *worker) (perr error) {
	defer func() {
		if v := recover(); v != nil {
			pe := newPanicError("Close", v)
			s.recovered(p, pe, w)
			perr = pe
		}
	}()
	p.impl.Close()
	return nil
}

// countStart counts a process in, on worker w's counters or the shared
// ones.
func (s *Scheduler) countStart(w *worker) {
	if w != nil {
		bump(&w.stats.started)
	} else {
		s.counters.started.Add(1)
	}
}

// countEnd counts a process out; during Shutdown, the last one out
// releases it.
func (s *Scheduler) countEnd(w *worker) {
	if w != nil {
		bump(&w.stats.ended)
	} else {
		s.counters.ended.Add(1)
	}
	if s.closing() && s.liveCount() == 0 {
		s.sd.drainOnce.Do(func() { close(s.sd.drained) })
	}
}

// via says where a process made Ready by an operation is queued.
type via struct {
	// w is the worker the operation runs on, or on whose behalf a
	// handler's Call runs; nil for callers outside the scheduler.
	w *worker
	// call: the operation comes through a handler's Call, which may be
	// used from any goroutine, so w's queue is reached through its
	// handoff.
	call bool
}

// lookup finds a live process by PID.
func (s *Scheduler) lookup(pid relay.PID) (*proc, error) {
	if pid.Node != s.node {
		return nil, fmt.Errorf("%w: %v is on node %d, this is node %d", ErrProcessNotFound, pid, pid.Node, s.node)
	}
	if p := s.table.lookup(pid.ID); p != nil {
		return p, nil
	}
	return nil, &procError{err: ErrProcessNotFound, pid: pid}
}

// finish ends a process that the caller moved to Complete: Close,
// counters, result, table slot, awaiting parent. The counters come before
// the result is published, so a Stats read after the Handle reports the
// end counts it. w is the worker doing this, if any.
func (s *Scheduler) finish(p *proc, w *worker, result payload.Payload, err error, forced bool) {
	s.timers.release(p)
	if perr := s.callClose(p, w); perr != nil && err == nil {
		err = perr
	}
	p.impl = nil
	s.releaseProc()
	if forced && s.log != nil {
		s.log.Warn("scheduler: process forced to close at the shutdown deadline", "pid", p.pid(), "method", s.methodOf(p))
	}
	if s.hooks.End != nil {
		t := p.timing()
		s.hooks.End(Ended{
			PID: p.pid(), Method: s.methodOf(p), Result: result, Err: err,
			Duration: time.Duration(max(s.coarse.Load()-t.started, 0)), Steps: t.steps, Forced: forced,
		})
	}
	if forced {
		s.sd.forced.Add(1)
	}
	if w != nil {
		bump(&w.stats.completed)
		if err != nil {
			bump(&w.stats.failed)
		}
	} else {
		s.counters.completed.Add(1)
		if err != nil {
			s.counters.failed.Add(1)
		}
	}
	s.countEnd(w)
	c := p.close(result, err, forced)
	s.table.release(p.id, w.slotCache())
	if n := len(c.unread); n > 0 {
		if w != nil {
			w.stats.dropped.Store(w.stats.dropped.Load() + uint64(n))
		} else {
			s.counters.dropped.Add(uint64(n))
		}
		s.deadUnread(p.pid(), c.unread, via{w: w})
	}
	if p.awaiter != 0 && !forced {
		ev := Event{Type: EventYieldComplete, Data: result, Error: err, From: p.pid()}
		_ = s.complete(relay.PID{Node: s.node, ID: p.awaiter}, ev, p.awaitSeq, via{w: w})
	}
	// Names, monitors: frozen now that the process is closed.
	if x := p.extra.Load(); x != nil {
		if len(x.names) > 0 {
			s.releaseNames(p.pid(), x.names)
		}
		if x.monitors != nil || x.held != nil || x.outside != nil {
			s.notifyEnd(p, x, exitOf(p.pid(), result, err, forced, c.cancelled, c.cause), via{w: w})
		}
	}
	p.announce()
}
