package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// Stress: the records of processes that steps or Spawn start and that end
// plainly serve the processes started after them in the same slots of
// the process table, while other goroutines go on using what they
// learned of the earlier ones: their PIDs, the PIDs their slots give
// next, and their contexts. A message reaches only the process it was
// sent to, or is left unread by it (a dead letter naming it); a send to
// a process that has ended is refused with ErrProcessNotFound and
// nothing else; a context keeps answering its own process's PID and is
// done once that process has ended; and the race detector sees every
// access to a record ordered with its reuse.
//
// Sizes: see stressConfigs (helpers_test.go) for how -short shrinks the
// run and stressScale for how the stress build tag enlarges it.

// reuseMsg is a message for the process to.
type reuseMsg struct{ to relay.PID }

// sighting is what a reused-record child published of itself from Init.
type sighting struct {
	pid    relay.PID
	method string
	ctx    context.Context
}

// reuseBook is what the children, the readers and the DeadLetter hook
// share.
type reuseBook struct {
	f         *violations
	prog      *progress
	seen      [256]atomic.Pointer[sighting] // a ring of the latest sightings
	published atomic.Uint64                 // sightings made; the next goes to seen[published % len]
	all       sync.Map                      // every sighting, by PID, for the final checks
	accepted  atomic.Int64                  // messages a Tell accepted
	read      atomic.Int64                  // messages read by the process they were for
	unread    atomic.Int64                  // messages left unread by it
}

// publish records a child's PID and context for the readers.
func (b *reuseBook) publish(s *sighting) {
	i := b.published.Add(1) - 1
	b.seen[i%uint64(len(b.seen))].Store(s)
	b.all.Store(s.pid, s)
}

// recent returns one of the latest sightings, or nil before the first.
func (b *reuseBook) recent(rng *rand.Rand) *sighting {
	n := b.published.Load()
	if n == 0 {
		return nil
	}
	back := uint64(rng.IntN(int(min(n, 32))))
	return b.seen[(n-1-back)%uint64(len(b.seen))].Load()
}

// deadLetter is the DeadLetter hook: an unread reuseMsg must name, as
// its recipient, the process it was sent to.
func (b *reuseBook) deadLetter(d sched.DeadLetter) {
	m, ok := d.Message.Data.(reuseMsg)
	if !ok {
		return
	}
	if d.Reason != sched.DeadUnread || d.Message.To != m.to {
		b.f.addf("dead letter %v (%v) for %v: want it unread by the process it was sent to", d.Message.To, d.Reason, m.to)
	}
	b.unread.Add(1)
}

// reuseChild publishes itself from Init, checks that every message it
// reads was sent to it, and ends at its first or second step.
type reuseChild struct {
	book  *reuseBook
	self  relay.PID
	twice bool            // end at the second step, not the first
	ended chan<- struct{} // if set, told at the last step (for a child no parent awaits)
	steps int
}

func (c *reuseChild) Init(ctx context.Context, method string, _ payload.Payloads) error {
	self, ok := sched.Self(ctx)
	if !ok {
		return errors.New("no PID in the process context")
	}
	c.self = self
	c.book.publish(&sighting{pid: self, method: method, ctx: ctx})
	return nil
}

func (c *reuseChild) Step(evs []sched.Event, out *sched.StepOutput) error {
	for _, ev := range evs {
		if m, ok := ev.Data.(reuseMsg); ok && ev.Type == sched.EventMessage {
			if m.to != c.self {
				c.book.f.addf("process %v read a message sent to %v", c.self, m.to)
			}
			c.book.read.Add(1)
		}
	}
	c.steps++
	if c.twice && c.steps == 1 {
		out.Continue()
		return nil
	}
	if c.ended != nil {
		c.ended <- struct{}{}
	}
	out.Done(payload.Payload{})
	return nil
}

func (c *reuseChild) Close() {}

// reuseParent starts width children a step, awaiting them all before
// the next round, for rounds rounds.
type reuseParent struct {
	book          *reuseBook
	rng           *rand.Rand
	width, rounds int
	left          int // children of this round not ended yet
	tag           uint64
}

func (p *reuseParent) Init(context.Context, string, payload.Payloads) error { return nil }
func (p *reuseParent) Close()                                               {}

func (p *reuseParent) Step(evs []sched.Event, out *sched.StepOutput) error {
	for _, ev := range evs {
		if ev.Type != sched.EventYieldComplete {
			continue
		}
		if ev.Error != nil {
			return fmt.Errorf("child %v: %w", ev.From, ev.Error)
		}
		p.left--
		p.book.prog.tick()
	}
	if p.left > 0 {
		return nil
	}
	if p.rounds == 0 {
		out.Done(payload.Payload{})
		return nil
	}
	p.rounds--
	for range p.width {
		p.tag++
		method := reuseMethods[p.rng.IntN(len(reuseMethods))]
		out.SpawnAwait(p.tag, &reuseChild{book: p.book, twice: p.rng.IntN(2) == 0}, method, nil)
	}
	p.left = p.width
	return nil
}

// reuseMethods are the children's entry points: a record serves
// processes of each in turn, and must answer each one's own.
var reuseMethods = []string{"left", "right", "middle"}

// readStale uses what the book has seen of the children, as a goroutine
// outside the scheduler that kept it would, until stop is closed.
func readStale(s *sched.Scheduler, b *reuseBook, rng *rand.Rand, stop <-chan struct{}) {
	tell := func(to relay.PID) {
		switch err := s.Tell(to, reuseMsg{to: to}); {
		case err == nil:
			b.accepted.Add(1)
		case !errors.Is(err, sched.ErrProcessNotFound):
			b.f.addf("Tell(%v): %v, want nil or ErrProcessNotFound", to, err)
		}
	}
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		sg := b.recent(rng)
		if sg == nil {
			continue
		}
		tell(sg.pid)
		tell(sched.NextPIDOfSlot(sg.pid))
		if self, _ := sched.Self(sg.ctx); self != sg.pid {
			b.f.addf("the context of %v answers the PID %v", sg.pid, self)
		}
		if err := sg.ctx.Err(); err != nil && !errors.Is(err, context.Canceled) {
			b.f.addf("the context of %v: Err %v", sg.pid, err)
		}
		switch rng.IntN(8) {
		case 0:
			if err := s.Terminate(sg.pid); err != nil && !errors.Is(err, sched.ErrProcessNotFound) {
				b.f.addf("Terminate(%v): %v", sg.pid, err)
			}
		case 1:
			stopMonitor := s.Monitor(sg.pid, func(sched.Exit) {})
			stopMonitor()
		case 2:
			name := fmt.Sprintf("reuse-%p", b)
			if s.Register(name, sg.pid) == nil {
				_ = s.Unregister(name)
			}
		case 3:
			if i%16 == 0 {
				for _, info := range s.Processes() {
					if v, ok := b.all.Load(info.PID); ok && v.(*sighting).method != info.Method {
						b.f.addf("Processes lists %v with entry point %q, want %q", info.PID, info.Method, v.(*sighting).method)
					}
				}
			}
		case 4:
			stopAfter := context.AfterFunc(sg.ctx, func() {})
			stopAfter()
		}
	}
}

// TestStressStaleReadersOfReusedRecords: see the comment at the top of
// the file. The children are started by a parent's steps, or, with
// outside set, by Scheduler.Spawn from a goroutine outside the workers,
// half of them under a context with values (which such a start makes
// for the process on its own): their records reach that goroutine
// through the shared list of free IDs.
func TestStressStaleReadersOfReusedRecords(t *testing.T) {
	for _, outside := range []bool{false, true} {
		t.Run(fmt.Sprintf("outside=%v", outside), func(t *testing.T) {
			testStaleReadersOfReusedRecords(t, outside)
		})
	}
}

func testStaleReadersOfReusedRecords(t *testing.T, outside bool) {
	width, rounds, readers := 16, 300, 4
	if stressScale > 1 {
		rounds *= stressScale
	}
	eachConfig(t, 41, 4, func(t *testing.T, cfg stressConfig) {
		f := &violations{}
		b := &reuseBook{f: f, prog: &progress{}}
		s := newScheduler(t, cfg.options(sched.WithHooks(sched.Hooks{DeadLetter: b.deadLetter}))...)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for i := range readers {
			wg.Go(func() { readStale(s, b, cfg.rng(uint64(i+1)), stop) })
		}
		if outside {
			spawnReused(t, s, b, cfg.rng(0), width, rounds)
		} else {
			h, err := s.Submit(context.Background(), &reuseParent{book: b, rng: cfg.rng(0), width: width, rounds: rounds}, "parent", nil)
			require.NoError(t, err)
			awaitProgress(t, s, b.prog, h.Done(), "reused records", nil)
			_, err = h.Wait(context.Background())
			require.NoError(t, err)
		}
		// Every child has ended, and has been closed.
		eventually(t, "every child closed", func() bool { return s.Stats().Processes.Live == 0 })
		close(stop)
		wg.Wait()
		// A process is counted out before its unread messages reach the
		// DeadLetter hook; Shutdown returns once its workers have
		// stopped, so every report of the last ones has been made.
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		require.NoError(t, s.Shutdown(ctx))
		f.check(t)
		t.Logf("%d messages accepted: %d read, %d unread", b.accepted.Load(), b.read.Load(), b.unread.Load())
		// Each message a Tell accepted was read by the process it was
		// for, or left unread by it.
		require.Equal(t, b.accepted.Load(), b.read.Load()+b.unread.Load(), "messages accepted, against read and unread")
		n := 0
		b.all.Range(func(_, v any) bool {
			sg := v.(*sighting)
			n++
			select {
			case <-sg.ctx.Done():
			default:
				t.Errorf("the context of %v is not done after its end", sg.pid)
				return false
			}
			require.ErrorIs(t, sg.ctx.Err(), context.Canceled, "the context of %v after its end", sg.pid)
			return true
		})
		require.Equal(t, width*rounds, n, "children started")
	})
}

// spawnReused starts rounds rounds of width children with
// Scheduler.Spawn, each round once the one before has ended, as
// reuseParent does from its steps.
func spawnReused(t *testing.T, s *sched.Scheduler, b *reuseBook, rng *rand.Rand, width, rounds int) {
	t.Helper()
	ended := make(chan struct{}, width)
	valued := context.WithValue(context.Background(), ctxKey{}, "reuse")
	for range rounds {
		for range width {
			ctx := context.Background()
			if rng.IntN(2) == 0 {
				ctx = valued
			}
			method := reuseMethods[rng.IntN(len(reuseMethods))]
			_, err := s.Spawn(ctx, &reuseChild{book: b, twice: rng.IntN(2) == 0, ended: ended}, method, nil)
			require.NoError(t, err)
		}
		for range width {
			receive(t, ended, "a spawned child's last step")
			b.prog.tick()
		}
	}
}
