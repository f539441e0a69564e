package scheduler

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
)

// The blocking pool runs work that blocks (a database driver without a
// callback API, a file read, a CPU-heavy function) on a bounded number of
// goroutines, so that a handler, which must not block, can hand it off
// with [Call.Go] and complete its yield when the work returns. Without it,
// limiting how many slow calls run at once costs a goroutine per queued
// call; with it, a queued call costs a queue entry.
//
// Goroutines are started on demand, up to the pool's size, and exit when
// the queue is empty, so an idle pool costs nothing. The queue is a FIFO
// under a mutex: tasks are as slow as what they wrap, so its lock is never
// the bottleneck.

// PoolPolicy says what [Call.Go] does when the blocking pool's queue is
// full.
type PoolPolicy uint8

const (
	// PoolWait: the task waits beyond the queue's length, in order, and
	// its yield stays pending until it runs. Nothing blocks: a waiting
	// task costs a queue entry, not a goroutine.
	PoolWait PoolPolicy = iota
	// PoolReject: [Call.Go] refuses the task at once with an error
	// wrapping [ErrPoolFull], and the yield stays pending: a handler
	// that returns that error completes the yield with it.
	PoolReject
)

// String returns the policy's name.
func (p PoolPolicy) String() string {
	switch p {
	case PoolWait:
		return "wait"
	case PoolReject:
		return "reject"
	}
	return fmt.Sprintf("PoolPolicy(%d)", uint8(p))
}

// Defaults of the blocking pool (see [WithBlockingPool]).
const (
	DefaultPoolSize  = 64
	DefaultPoolQueue = 1024
)

// WithBlockingPool sets the blocking pool that [Call.Go] uses: at most
// size goroutines run tasks at once, at most queue tasks wait in the
// queue, and policy says what happens to a task beyond that. The default
// is [DefaultPoolSize] goroutines, a queue of [DefaultPoolQueue] and
// [PoolWait]. size and queue must be at least 1.
func WithBlockingPool(size, queue int, policy PoolPolicy) Option {
	return optionFunc(func(c *config) error {
		if size < 1 || queue < 1 {
			return fmt.Errorf("%w: WithBlockingPool(%d, %d): need at least 1 each", ErrInvalidOption, size, queue)
		}
		if policy > PoolReject {
			return fmt.Errorf("%w: WithBlockingPool: policy %v is unknown", ErrInvalidOption, policy)
		}
		c.pool = poolConfig{size: size, queue: queue, policy: policy}
		return nil
	})
}

// poolConfig is the blocking pool's configuration.
type poolConfig struct {
	size, queue int
	policy      PoolPolicy
}

// PoolStats describes the blocking pool, from [Scheduler.Stats].
type PoolStats struct {
	Size     int    `json:"size"`     // the most goroutines that run tasks
	Running  int    `json:"running"`  // goroutines running tasks now
	Queued   int    `json:"queued"`   // tasks waiting in the queue (at most its length)
	Waiting  int    `json:"waiting"`  // tasks waiting beyond the queue's length (PoolWait)
	Done     uint64 `json:"done"`     // tasks that ran
	Rejected uint64 `json:"rejected"` // tasks refused because the queue was full (PoolReject)
	Skipped  uint64 `json:"skipped"`  // tasks dropped unrun: nobody waited for them any more
}

// pool is a scheduler's blocking pool.
type pool struct {
	s   *Scheduler
	cfg poolConfig

	mu    sync.Mutex // guards tasks, running, busy and closed
	tasks []poolTask // FIFO; tasks[head:] are queued
	head  int
	// running counts the pool goroutines, busy those of them that have
	// taken a task and not come back for the next. Both are int32, so
	// that the pool, which sits in the Scheduler before its hottest
	// fields, keeps the size those fields' places were measured with:
	// no process runs 1<<31 goroutines.
	running, busy int32
	closed        bool // set by the stopper before it waits for the goroutines

	done, rejected, skipped atomic.Uint64 // for Stats; added to by pool goroutines and Go
}

// poolTask is one piece of blocking work and the call it completes.
type poolTask struct {
	call Call
	work func(context.Context) (any, error)
}

// Go runs work on the scheduler's blocking pool (see [WithBlockingPool])
// and completes this call's yield with what it returns, or with a
// [PanicError] if it panics. work gets the call's context ([Call.Context]):
// it is done if the yield stops being pending (a deadline, a cancel, the
// process's end, or work's own result completing it), so work returns
// what it has read, not a value that lives on that context; a task whose
// yield is no longer pending by the time a goroutine is free for it is
// dropped unrun. Go itself never blocks; call it from the handler and
// return.
//
// It returns an error wrapping [ErrPoolFull] if the queue is full and the
// policy is [PoolReject] (the yield is not completed: return the error
// from the handler to complete it with that), [ErrClosed] once the
// scheduler has stopped, [ErrInvalidCommand] for a nil work (the yield
// is not completed either) and [ErrProcessNotFound] for the zero Call.
func (c Call) Go(work func(ctx context.Context) (any, error)) error {
	if c.s == nil {
		return ErrProcessNotFound
	}
	if work == nil {
		return fmt.Errorf("%w: Call.Go(nil)", ErrInvalidCommand)
	}
	return c.s.pool.submit(poolTask{call: c, work: work})
}

// submit queues t and starts a goroutine for it if the pool has room for
// one. Any goroutine.
func (p *pool) submit(t poolTask) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrClosed
	}
	if p.cfg.policy == PoolReject && int(p.running) >= p.cfg.size && p.waiting() >= p.cfg.queue {
		p.mu.Unlock()
		p.rejected.Add(1)
		return fmt.Errorf("%w: %d tasks queued", ErrPoolFull, p.cfg.queue)
	}
	p.tasks = append(p.tasks, t)
	start := int(p.running) < p.cfg.size
	if start {
		p.running++
		p.s.wg.Add(1)
	}
	p.mu.Unlock()
	if start {
		goLabelled(p.run, "procsched", "pool")
	}
	return nil
}

// waiting returns the number of queued tasks that no pool goroutine is
// about to take: a goroutine started for a task, or come back from one,
// takes the next task without waiting, so the tasks queued for those
// goroutines do not wait and take no room in the queue. With p.mu held.
func (p *pool) waiting() int {
	return max(0, len(p.tasks)-p.head-int(p.running-p.busy))
}

// close refuses new tasks. The stopper calls it before it waits for the
// scheduler's goroutines, so that no pool goroutine is added to the wait
// group during that wait.
func (p *pool) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
}

// run is a pool goroutine: it runs queued tasks until none is left.
func (p *pool) run() {
	defer p.s.wg.Done()
	id := p.s.addBlockingGoroutine()
	defer p.s.removeBlockingGoroutine(id)
	p.mu.Lock()
	for {
		if p.head == len(p.tasks) {
			p.running--
			p.tasks, p.head = p.tasks[:0], 0
			p.mu.Unlock()
			return
		}
		t := p.tasks[p.head]
		p.tasks[p.head] = poolTask{}
		p.head++
		if p.head > 64 && 2*p.head > len(p.tasks) {
			n := copy(p.tasks, p.tasks[p.head:])
			clear(p.tasks[n:])
			p.tasks, p.head = p.tasks[:n], 0
		}
		p.busy++
		p.mu.Unlock()
		p.runTask(t)
		p.mu.Lock()
		p.busy--
	}
}

// runTask runs one task and completes its call, unless nobody waits for
// it any more.
// Pool goroutine only.
func (p *pool) runTask(t poolTask) {
	ctx := t.call.Context()
	if ctx.Err() != nil {
		p.skipped.Add(1)
		return
	}
	data, err := p.protect(t, ctx)
	p.done.Add(1)
	_ = t.call.Completion().Complete(data, err)
}

// protect runs t's work, turning a panic into a PanicError.
// Pool goroutine only.
func (p *pool) protect(t poolTask, ctx context.Context) (data any, err error) {
	returned := false // as in Scheduler.callInit
	defer func() {
		if returned {
			return
		}
		v := recover()
		if v == nil {
			v = ErrGoexit
		}
		perr := newPanicError("pool", v)
		if pr := t.call.ctx; pr != nil {
			p.s.recovered(pr, perr, via{}, func() { p.goexited(t, perr) })
		}
		data, err = nil, perr
		if v == ErrGoexit {
			p.goexited(t, perr)
		}
	}()
	data, err = t.work(ctx)
	returned = true
	return data, err
}

// goexited finishes task t, whose work called runtime.Goexit, as
// runTask would have with perr, and hands the calling goroutine's place
// in the pool to a new goroutine, which goes on with the queued tasks:
// the goroutine that Goexit ends cannot be saved, and the pool keeps
// its count. Pool goroutine only, from protect's deferred function.
func (p *pool) goexited(t poolTask, perr *PanicError) {
	p.done.Add(1)
	_ = t.call.Completion().Complete(nil, perr)
	p.mu.Lock()
	p.busy--
	p.s.wg.Add(1) // before run's deferred Done for this goroutine
	p.mu.Unlock()
	goLabelled(p.run, "procsched", "pool") // counted in running already
}

// stats reports the pool for Stats.
// Any goroutine.
func (p *pool) stats() PoolStats {
	p.mu.Lock()
	n, running := p.waiting(), int(p.running)
	p.mu.Unlock()
	queued := min(n, p.cfg.queue)
	return PoolStats{
		Size: p.cfg.size, Running: running, Queued: queued, Waiting: n - queued,
		Done: p.done.Load(), Rejected: p.rejected.Load(), Skipped: p.skipped.Load(),
	}
}
