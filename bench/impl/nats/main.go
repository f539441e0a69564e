// Command nats runs the remote workloads on raw NATS
// (github.com/nats-io/nats.go): the floor under any remote layer built on
// it, this scheduler's included. Two client connections, "a" and "b",
// to one NATS server embedded on a random loopback port, the same server
// the remote module's runs use; core publish and subscribe with
// callbacks, nothing else.
//
//   - remote-pingpong: a publishes a message on subject "ping" with
//     reply subject "pong"; b's subscriber publishes it back on the reply
//     subject, and a's subscriber on "pong" publishes the next one.
//   - remote-echo: a's goroutine publishes as fast as the window lets it
//     (at most window messages sent and not yet back); b's subscriber
//     publishes each one back on its reply subject.
//   - remote-pairs: 1,000 independent ping-pongs. Variant "subjects" gives
//     each pair its own two subjects and subscriptions (the client runs
//     each subscription's callbacks on a goroutine of its own); variant
//     "wildcard" has one subscription per side, on "ping.*" and "pong.*",
//     and finds the pair from the subject.
//
// Every message carries its 8-byte sequence number, and every receiver
// checks it, as in the other implementations.
//
//	go run ./impl/nats -workload remote-pingpong -scale 1
package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/procsched/scheduler/bench/internal/embednats"
	"github.com/procsched/scheduler/bench/internal/workload"
)

func main() {
	workload.Main("nats", []workload.Entry{
		{Workload: workload.RemotePingPong, Run: pingPong},
		{Workload: workload.RemoteEcho, Run: echo},
		{Workload: workload.RemotePairs, Variant: "subjects", Run: pairsBySubject},
		{Workload: workload.RemotePairs, Variant: "wildcard", Run: pairsByWildcard},
	})
}

// runTimeout bounds the wait for a run's last message; a correct run at
// full size takes seconds.
const runTimeout = 5 * time.Minute

// pair is the server and the two connections.
type pair struct {
	srv  *embednats.Server
	a, b *nats.Conn
}

func connect() (p *pair, err error) {
	p = &pair{}
	if p.srv, err = embednats.Start(); err != nil {
		return nil, err
	}
	if p.a, err = nats.Connect(p.srv.URL()); err != nil {
		p.close()
		return nil, err
	}
	if p.b, err = nats.Connect(p.srv.URL()); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

// ready waits until the server has every subscription made so far.
func (p *pair) ready() error {
	return errors.Join(p.a.Flush(), p.b.Flush())
}

func (p *pair) close() {
	for _, c := range []*nats.Conn{p.a, p.b} {
		if c != nil {
			c.Close()
		}
	}
	p.srv.Stop()
}

// failure keeps the first error a callback met; the run reports it.
type failure struct {
	once sync.Once
	err  error
	done chan struct{} // closed at the first error
}

func newFailure() *failure { return &failure{done: make(chan struct{})} }

func (f *failure) set(err error) {
	f.once.Do(func() {
		f.err = err
		close(f.done)
	})
}

// wait waits until done is closed, a callback fails, or the run times
// out.
func (f *failure) wait(done <-chan struct{}) error {
	select {
	case <-done:
		return nil
	case <-f.done:
		return f.err
	case <-time.After(runTimeout):
		return fmt.Errorf("no end after %v", runTimeout)
	}
}

// echoBack subscribes b to subject, publishing every message back on its
// reply subject.
func echoBack(b *nats.Conn, subject string, echoed *atomic.Int64, fail *failure) error {
	_, err := b.Subscribe(subject, func(m *nats.Msg) {
		if err := b.Publish(m.Reply, m.Data); err != nil {
			fail.set(err)
			return
		}
		echoed.Add(1)
	})
	return err
}

// seqOf returns the sequence number of a message.
func seqOf(m *nats.Msg) (uint64, error) {
	n, ok := workload.Seq(m.Data)
	if !ok {
		return 0, fmt.Errorf("a message is %d bytes, want %d", len(m.Data), workload.SeqSize)
	}
	return n, nil
}

// pinger is one end of a ping-pong: it publishes rounds messages one at
// a time, each when the previous one came back.
type pinger struct {
	a              *nats.Conn
	subject, reply string
	rounds, got    int
	buf            [workload.SeqSize]byte
	lat            *workload.Latencies // nil: not recorded
	sentAt         time.Time
}

// send publishes message number p.got. Publish copies the bytes, so the
// buffer is free again when it returns.
func (p *pinger) send(now time.Time) error {
	workload.PutSeq(p.buf[:], uint64(p.got))
	p.sentAt = now
	return p.a.PublishRequest(p.subject, p.reply, p.buf[:])
}

// onEcho takes an echo; it reports whether the pinger has finished.
func (p *pinger) onEcho(m *nats.Msg) (bool, error) {
	n, err := seqOf(m)
	if err != nil {
		return false, err
	}
	if err := workload.Check("echo number", n, uint64(p.got)); err != nil {
		return false, err
	}
	now := time.Now()
	if p.lat != nil {
		p.lat.Add(now.Sub(p.sentAt))
	}
	if p.got++; p.got == p.rounds {
		return true, nil
	}
	return false, p.send(now)
}

func pingPong(m *workload.Meter, sz workload.Sizes) (workload.Outcome, error) {
	c, err := connect()
	if err != nil {
		return workload.Outcome{}, err
	}
	defer c.close()
	n := sz.RemoteRoundTrips
	fail := newFailure()
	var echoed atomic.Int64
	if err := echoBack(c.b, "ping", &echoed, fail); err != nil {
		return workload.Outcome{}, err
	}
	lat := workload.NewLatencies(n)
	p := &pinger{a: c.a, subject: "ping", reply: "pong", rounds: n, lat: lat}
	done := make(chan struct{})
	if _, err := c.a.Subscribe("pong", func(msg *nats.Msg) {
		finished, err := p.onEcho(msg)
		if err != nil {
			fail.set(err)
		} else if finished {
			close(done)
		}
	}); err != nil {
		return workload.Outcome{}, err
	}
	if err := c.ready(); err != nil {
		return workload.Outcome{}, err
	}
	m.Start()
	if err := p.send(time.Now()); err != nil {
		return workload.Outcome{}, err
	}
	err = fail.wait(done)
	m.Stop()
	if err != nil {
		return workload.Outcome{}, err
	}
	out := workload.Outcome{Detail: fmt.Sprintf("round_trips=%d echoed=%d", p.got, echoed.Load()), Latency: lat.Summary()}
	return out, errors.Join(workload.Check("round trips", p.got, n), workload.Check("echoed", echoed.Load(), int64(n)))
}

func echo(m *workload.Meter, sz workload.Sizes) (workload.Outcome, error) {
	c, err := connect()
	if err != nil {
		return workload.Outcome{}, err
	}
	defer c.close()
	n, window := sz.RemoteEchoMessages, sz.RemoteEchoWindow
	fail := newFailure()
	var echoed atomic.Int64
	if err := echoBack(c.b, "echo", &echoed, fail); err != nil {
		return workload.Outcome{}, err
	}
	// got is written by the subscriber's goroutine and read by the
	// sender: the store after each echo pairs with the sender's load
	// before it opens the window further.
	var got atomic.Int64
	more := make(chan struct{}, 1) // the window has room again
	done := make(chan struct{})
	step := int64(max(1, window/4))
	next := int64(0) // the subscriber's own count
	if _, err := c.a.Subscribe("back", func(msg *nats.Msg) {
		v, err := seqOf(msg)
		if err == nil {
			err = workload.Check("echo number", v, uint64(next))
		}
		if err != nil {
			fail.set(err)
			return
		}
		next++
		got.Store(next)
		switch {
		case next == int64(n):
			close(done)
		case next%step == 0:
			select {
			case more <- struct{}{}:
			default:
			}
		}
	}); err != nil {
		return workload.Outcome{}, err
	}
	if err := c.ready(); err != nil {
		return workload.Outcome{}, err
	}
	var buf [workload.SeqSize]byte
	m.Start()
	for sent := 0; sent < n; {
		// With the window full, at least window/4 echoes are still to
		// come, so a signal on more is on its way.
		for int64(sent)-got.Load() >= int64(window) {
			select {
			case <-more:
			case <-fail.done:
				return workload.Outcome{}, fail.err
			}
		}
		workload.PutSeq(buf[:], uint64(sent))
		if err := c.a.PublishRequest("echo", "back", buf[:]); err != nil {
			return workload.Outcome{}, err
		}
		sent++
	}
	err = fail.wait(done)
	m.Stop()
	if err != nil {
		return workload.Outcome{}, err
	}
	out := workload.Outcome{Detail: fmt.Sprintf("echoes=%d echoed=%d", got.Load(), echoed.Load())}
	return out, errors.Join(workload.Check("echoes received in order", got.Load(), int64(n)), workload.Check("echoed", echoed.Load(), int64(n)))
}

// pairsRun is the state of a remote-pairs run shared by its callbacks.
type pairsRun struct {
	pingers  []*pinger
	finished atomic.Int64 // pairs done
	done     chan struct{}
	fail     *failure
	echoed   atomic.Int64
}

func newPairsRun(a *nats.Conn, np, rounds int) *pairsRun {
	r := &pairsRun{pingers: make([]*pinger, np), done: make(chan struct{}), fail: newFailure()}
	for i := range np {
		r.pingers[i] = &pinger{a: a, subject: "ping." + strconv.Itoa(i), reply: "pong." + strconv.Itoa(i), rounds: rounds}
	}
	return r
}

// onEcho passes an echo to pinger p.
func (r *pairsRun) onEcho(p *pinger, m *nats.Msg) {
	finished, err := p.onEcho(m)
	if err != nil {
		r.fail.set(err)
	} else if finished && r.finished.Add(1) == int64(len(r.pingers)) {
		close(r.done)
	}
}

// run serves every pinger and waits until all have finished.
func (r *pairsRun) run(m *workload.Meter, rounds int) (workload.Outcome, error) {
	m.Start()
	now := time.Now()
	for _, p := range r.pingers {
		if err := p.send(now); err != nil {
			return workload.Outcome{}, err
		}
	}
	err := r.fail.wait(r.done)
	m.Stop()
	if err != nil {
		return workload.Outcome{}, err
	}
	got := 0
	for _, p := range r.pingers {
		got += p.got
	}
	want := len(r.pingers) * rounds
	out := workload.Outcome{Detail: fmt.Sprintf("round_trips=%d echoed=%d", got, r.echoed.Load())}
	return out, errors.Join(workload.Check("round trips", got, want), workload.Check("echoed", r.echoed.Load(), int64(want)))
}

func pairsBySubject(m *workload.Meter, sz workload.Sizes) (workload.Outcome, error) {
	c, err := connect()
	if err != nil {
		return workload.Outcome{}, err
	}
	defer c.close()
	r := newPairsRun(c.a, sz.RemotePairs, sz.RemotePairRoundTrips)
	for _, p := range r.pingers {
		if err := echoBack(c.b, p.subject, &r.echoed, r.fail); err != nil {
			return workload.Outcome{}, err
		}
		if _, err := c.a.Subscribe(p.reply, func(msg *nats.Msg) { r.onEcho(p, msg) }); err != nil {
			return workload.Outcome{}, err
		}
	}
	if err := c.ready(); err != nil {
		return workload.Outcome{}, err
	}
	return r.run(m, sz.RemotePairRoundTrips)
}

func pairsByWildcard(m *workload.Meter, sz workload.Sizes) (workload.Outcome, error) {
	c, err := connect()
	if err != nil {
		return workload.Outcome{}, err
	}
	defer c.close()
	r := newPairsRun(c.a, sz.RemotePairs, sz.RemotePairRoundTrips)
	if err := echoBack(c.b, "ping.*", &r.echoed, r.fail); err != nil {
		return workload.Outcome{}, err
	}
	if _, err := c.a.Subscribe("pong.*", func(msg *nats.Msg) {
		i, err := strconv.Atoi(strings.TrimPrefix(msg.Subject, "pong."))
		if err != nil || i < 0 || i >= len(r.pingers) {
			r.fail.set(fmt.Errorf("an echo on unexpected subject %q", msg.Subject))
			return
		}
		r.onEcho(r.pingers[i], msg)
	}); err != nil {
		return workload.Outcome{}, err
	}
	if err := c.ready(); err != nil {
		return workload.Outcome{}, err
	}
	return r.run(m, sz.RemotePairRoundTrips)
}
