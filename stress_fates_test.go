package scheduler_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// Stress: every message has exactly one fate, however it goes, while
// mailboxes overflow (refusing or evicting) and a Shutdown with a
// short deadline cuts the traffic: a message accepted into a mailbox is
// read once, left unread when its recipient ends (a dead letter), or
// evicted by a fuller mailbox (its bounce read by its sender, or a dead
// letter when nobody can get it back); and the scheduler's count of
// accepted messages is the sum of those. Steps never overlap, Close runs
// once, and nothing is left live.
//
// Sizes: see stressConfigs (helpers_test.go) for how -short shrinks the
// run and stressScale for how the stress build tag enlarges it.

// fateMsg is one numbered message.
type fateMsg struct{ id uint64 }

// fateBook records what became of each message, from any goroutine.
type fateBook struct {
	f *violations

	mu      sync.Mutex
	fates   map[uint64][]string
	sent    map[uint64]bool // accepted from outside, or told by a process
	reads   atomic.Int64    // read by their recipients
	unread  atomic.Int64    // accepted, left unread at their recipient's end
	evicted atomic.Int64    // accepted, then evicted by a full mailbox
}

func newFateBook(f *violations) *fateBook {
	return &fateBook{f: f, fates: map[uint64][]string{}, sent: map[uint64]bool{}}
}

// add records fate for message id; a second fate is a violation.
func (b *fateBook) add(id uint64, fate string) {
	b.mu.Lock()
	b.fates[id] = append(b.fates[id], fate)
	fates := append([]string(nil), b.fates[id]...)
	b.mu.Unlock()
	if len(fates) > 1 {
		b.f.addf("message %d has more than one fate: %v", id, fates)
	}
}

// wasSent records message id as sent and owed a fate.
func (b *fateBook) wasSent(id uint64) {
	b.mu.Lock()
	b.sent[id] = true
	b.mu.Unlock()
}

// deadLetter is the DeadLetter hook: it books the fate of a fateMsg.
func (b *fateBook) deadLetter(d sched.DeadLetter) {
	m, ok := d.Message.Data.(fateMsg)
	if !ok {
		return
	}
	switch evictedMsg := errors.Is(d.Message.Err, sched.ErrDropped); {
	case d.Reason == sched.DeadUnread && d.Message.Err == nil:
		b.unread.Add(1) // accepted and never read
	case evictedMsg:
		b.evicted.Add(1) // accepted, evicted, and its bounce reached nobody
	}
	b.add(m.id, "dead letter: "+d.Reason.String())
}

// fateNode reads the messages it gets (now and then stopping partway
// with DoneAfter), tells others, and yields, sleeps or continues at
// random; on its cancel it ends, or goes on a little longer.
type fateNode struct {
	guard
	book *fateBook
	rng  *rand.Rand
	pids *atomic.Pointer[[]relay.PID]
	ids  *atomic.Uint64
	tag  uint64
}

func (n *fateNode) Init(context.Context, string, payload.Payloads) error {
	n.enter("Init")
	n.exit("Init")
	return nil
}

func (n *fateNode) Close() { n.enterClose(); n.exitClose() }

func (n *fateNode) Step(evs []sched.Event, out *sched.StepOutput) error {
	n.enter("Step")
	defer n.exit("Step")
	cancelled := false
	for i, ev := range evs {
		switch ev.Type {
		case sched.EventMessage:
			m, ok := ev.Data.(fateMsg)
			if !ok {
				continue
			}
			if ev.Error == nil {
				if n.rng.IntN(200) == 0 {
					out.DoneAfter(i, payload.Payload{}) // the rest are unread
					return nil
				}
				n.book.reads.Add(1)
				n.book.add(m.id, "read")
				continue
			}
			if errors.Is(ev.Error, sched.ErrDropped) {
				n.book.evicted.Add(1) // accepted, evicted, bounced to us
			}
			n.book.add(m.id, "bounce read")
		case sched.EventCancel:
			cancelled = true
		}
	}
	if pp := n.pids.Load(); pp != nil {
		pids := *pp
		for range n.rng.IntN(3) {
			id := n.ids.Add(1)
			n.book.wasSent(id) // a process's Tell always has a fate: accepted, or bounced
			out.Tell(pids[n.rng.IntN(len(pids))], fateMsg{id})
		}
	}
	switch n.rng.IntN(10) {
	case 0:
		n.tag++
		out.Yield(n.tag, cmdTest, nil)
	case 1:
		n.tag++
		out.Sleep(n.tag, time.Duration(n.rng.IntN(200))*time.Microsecond)
	case 2:
		out.Continue()
	}
	if cancelled && n.rng.IntN(2) == 0 {
		out.Done(payload.Payload{})
	}
	return nil
}

func TestStressMessageFates(t *testing.T) {
	eachConfig(t, 0xfa7e5, 8, func(t *testing.T, cfg stressConfig) {
		for round := range uint64(4 * stressScale) {
			messageFatesRound(t, cfg, round)
		}
	})
}

// messageFatesRound runs 24 processes with small mailboxes that refuse
// or evict, three goroutines sending to them from outside, and a
// Shutdown with a deadline of at most 3 ms once the outside senders are
// halfway through their messages; then it checks every message's fate.
func messageFatesRound(t *testing.T, cfg stressConfig, round uint64) {
	f := &violations{}
	book := newFateBook(f)
	pool := newAsyncPool(2, cfg.seed+round, 2)
	s, err := sched.New(cfg.options(
		sched.WithHandler(cmdTest, completeLater(pool, f, endedOrClosed)),
		sched.WithHooks(sched.Hooks{DeadLetter: book.deadLetter}),
	)...)
	if err != nil {
		t.Fatal(err)
	}
	rng := cfg.rng(round)
	var ids atomic.Uint64
	var pidsP atomic.Pointer[[]relay.PID]
	const procs = 24
	nodes := make([]*fateNode, procs)
	pids := make([]relay.PID, procs)
	for i := range nodes {
		nodes[i] = &fateNode{guard: guard{name: "node", f: f}, book: book, rng: cfg.rng(round*1000 + uint64(i) + 1), pids: &pidsP, ids: &ids}
		// Not MailboxDropNewest: the messages it refuses come back with
		// the same error as the ones MailboxDropOldest evicts after
		// accepting them, and the count of accepted ones could not tell
		// them apart.
		policy := []sched.MailboxPolicy{sched.MailboxReject, sched.MailboxDropOldest}[rng.IntN(2)]
		h, err := s.Submit(context.Background(), nodes[i], "run", nil, sched.Mailbox(1+rng.IntN(4), policy))
		if err != nil {
			t.Fatal(err)
		}
		pids[i] = h.PID()
	}
	pidsP.Store(&pids)

	const senders, perSender = 3, 400
	halfway := make(chan struct{})
	var halfOnce sync.Once
	var wg sync.WaitGroup
	for g := range uint64(senders) {
		wg.Go(func() {
			r := cfg.rng(round*7777 + g)
			for k := range perSender {
				if k == perSender/2 {
					halfOnce.Do(func() { close(halfway) })
				}
				id := ids.Add(1)
				to := pids[r.IntN(len(pids))]
				var err error
				switch r.IntN(3) {
				case 0:
					err = s.Tell(to, fateMsg{id})
				case 1:
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(r.IntN(500))*time.Microsecond)
					err = s.TellContext(ctx, to, fateMsg{id})
					cancel()
				default:
					if r.IntN(20) == 0 {
						_ = s.Terminate(to)
					}
					continue
				}
				if err == nil {
					book.wasSent(id) // accepted: owed a fate
				}
			}
		})
	}
	<-halfway
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(3000))*time.Microsecond)
	done := make(chan error, 1)
	go func() { done <- s.Shutdown(ctx) }()
	select {
	case err = <-done:
	case <-time.After(testTimeout):
		t.Fatalf("Shutdown hangs\n%s", dumpState(s))
	}
	cancel()
	if err != nil && !errors.Is(err, sched.ErrForced) {
		f.addf("Shutdown: %v", err)
	}
	wg.Wait()
	pool.close()

	st := s.Stats()
	if st.Processes.Live != 0 || st.Timers != 0 || st.Pool.Running != 0 {
		f.addf("after the shutdown: live %d, timers %d, pool running %d", st.Processes.Live, st.Timers, st.Pool.Running)
	}
	for _, n := range nodes {
		n.checkClosedOnce()
	}
	book.mu.Lock()
	for id := range book.sent {
		if len(book.fates[id]) != 1 {
			f.addf("message %d: fates %v, want one", id, book.fates[id])
		}
	}
	book.mu.Unlock()
	if want := uint64(book.reads.Load() + book.unread.Load() + book.evicted.Load()); st.Messages.Accepted != want {
		f.addf("Accepted %d, but read %d + unread %d + evicted %d = %d", st.Messages.Accepted,
			book.reads.Load(), book.unread.Load(), book.evicted.Load(), want)
	}
	f.check(t)
	if t.Failed() {
		t.FailNow()
	}
}
