package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/procsched/scheduler/globalq"
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

	handlersMu sync.Mutex

	coarse coarseClock // see clock.go

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

	// ext holds the counts made outside the workers (see counterID).
	ext counterSet

	// helper is the worker structure through which callers outside the
	// workers run queued processes (see help.go); nil unless the
	// scheduler was made WithCallerHelp. helpMu is held by the caller
	// that helps, for the whole of its help (taken with TryLock: a caller
	// that finds it held yields instead), so that it passes the helper's
	// owner-only fields from one helping caller to the next; and, from
	// the moment the scheduler stops, by the stopper, which waits for a
	// help under way to end and lets none begin after. helping is set
	// while a caller holds helpMu for a help, for Shutdown (see onHelper).
	helper  *worker
	helpMu  sync.Mutex
	helping atomic.Bool

	// claimed holds the commands ClaimHandler took; guarded by
	// handlersMu. Last, so that the fields above keep the places in the
	// struct, and so the cache lines, that their use was measured with.
	claimed map[CommandID]bool
	// blocking lists the IDs of the blocking pool's goroutines, which
	// come and go (see shutdown.own); guarded by sd.ownMu. Here rather
	// than in sd for the reason claimed is last.
	blocking []uint64
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
	s.helper = newHelper(s, cfg.callerHelp)
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
// Called by New, by the pool as it starts, and by the shutdown.
func goLabelled(f func(), labels ...string) {
	pprof.Do(context.Background(), pprof.Labels(labels...), func(context.Context) { go f() })
}

// Node returns the node number in this scheduler's PIDs.
func (s *Scheduler) Node() uint32 { return s.node }

// recovered reports a panic recovered from p's code or a handler: it is
// counted, logged and passed to the Panic hook. v says where it runs.
// cut is what the caller does next, up to the end of p (or the
// completion of its yield) and of the goroutine's part in it: should
// the hook call runtime.Goexit, recovered's caller never goes on, so
// callPanicHook runs cut instead, before the goroutine ends.
// Any goroutine: the worker, the submitter running Init, or a pool goroutine.
func (s *Scheduler) recovered(p *proc, perr *PanicError, v via, cut func()) {
	s.count(v, cPanics)
	if s.log != nil {
		s.log.Error("scheduler: recovered a panic", "pid", p.pid(), "method", s.methodOf(p), "in", perr.Where, "value", fmt.Sprint(perr.Value))
	}
	if s.hooks.Panic != nil {
		s.callPanicHook(p, perr, cut)
	}
}

// callPanicHook calls the Panic hook for perr, recovered from p's code.
// A panic of the hook goes on (see onGoexit).
// A runtime.Goexit, which cannot be stopped, counts as the hook's
// return: cut, recovered's, carries out what its caller would have done
// next (p ends, or its yield completes, with perr), and the goroutine
// then ends, which the worker, the pool and the stopper each survive by
// going on on a new one. Any goroutine.
func (s *Scheduler) callPanicHook(p *proc, perr *PanicError, cut func()) {
	onGoexit(func() { s.hooks.Panic(PanicInfo{PID: p.pid(), Method: s.methodOf(p), Err: perr}) }, cut)
}

// via says where an operation runs: on a worker, through a handler's
// Call, or outside the scheduler. It decides where a process the
// operation makes Ready is queued and which counters it counts on.
type via struct {
	// w is the worker the operation runs on, or on whose behalf a
	// handler's Call runs; nil for callers outside the scheduler.
	w *worker
	// call: the operation comes through a handler's Call, which may be
	// used from any goroutine, so w's queue is reached through its
	// handoff.
	call bool
}

// worker returns the worker the operation runs on, whose queue and plain
// counters it may use, or nil: outside the workers, and for a handler's
// Call, which may be used from any goroutine.
func (v via) worker() *worker {
	if v.call {
		return nil
	}
	return v.w
}

// lookup finds a process by PID: a live one, or one that ended so
// recently that its slot was not reused, which the caller finds closed
// under its lock (see table.lookup).
// Any goroutine.
func (s *Scheduler) lookup(pid relay.PID) (*proc, error) {
	if pid.Node != s.node {
		return nil, fmt.Errorf("%w: %v is on node %d, this is node %d", ErrProcessNotFound, pid, pid.Node, s.node)
	}
	if p := s.table.lookup(pid.ID); p != nil {
		return p, nil
	}
	return nil, &procError{err: ErrProcessNotFound, pid: pid}
}
