// Command goroutines runs the benchmark workloads with plain goroutines
// and channels, the baseline every ratio in the report is taken against.
// Each workload comes in two variants, "unbuffered" and "buffered"
// channels (buffered just large enough that a sender never waits on a
// receiver that is ready); the report keeps whichever is faster and says
// which.
//
// It is run by the harness in ../..; by hand:
//
//	go run ./impl/goroutines -workload skynet -variant buffered -scale 1
package main

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/procsched/scheduler/bench/internal/workload"
)

func main() {
	var entries []workload.Entry
	for _, v := range []struct {
		name     string
		buffered bool
	}{{"unbuffered", false}, {"buffered", true}} {
		b := v.buffered
		bind := func(f func(*workload.Meter, workload.Sizes, bool) (workload.Outcome, error)) workload.Func {
			return func(m *workload.Meter, sz workload.Sizes) (workload.Outcome, error) { return f(m, sz, b) }
		}
		entries = append(entries,
			workload.Entry{Workload: workload.PingPong, Variant: v.name, Run: bind(pingPong)},
			workload.Entry{Workload: workload.Ring, Variant: v.name, Run: bind(ring)},
			workload.Entry{Workload: workload.Skynet, Variant: v.name, Run: bind(skynet)},
			workload.Entry{Workload: workload.Spawn, Variant: v.name, Run: bind(spawn)},
			workload.Entry{Workload: workload.FanOut, Variant: v.name, Run: bind(fanOut)},
			workload.Entry{Workload: workload.Yield, Variant: v.name, Run: bind(yieldRoundTrip)},
			workload.Entry{Workload: workload.Fib, Variant: v.name, Run: bind(fib)},
			workload.Entry{Workload: workload.Idle, Variant: v.name, Run: bind(idle)},
		)
	}
	workload.Main("goroutines", entries)
}

// capacity returns n for the buffered variant and 0 otherwise.
func capacity(buffered bool, n int) int {
	if buffered {
		return n
	}
	return 0
}

// ball is the ping-pong message.
type ball struct{ hits int }

// player returns the ball until max hits have been made in all; the one
// that makes the last hit reports the count on done.
func player(in <-chan *ball, out chan<- *ball, max int, done chan<- int) {
	for b := range in {
		b.hits++
		hits := b.hits // the ball belongs to the peer once sent
		if hits >= max {
			done <- hits
			return
		}
		out <- b
		if hits == max-1 {
			return
		}
	}
}

func pingPong(m *workload.Meter, sz workload.Sizes, buffered bool) (workload.Outcome, error) {
	n := sz.PingPongMessages
	a := make(chan *ball, capacity(buffered, 1))
	b := make(chan *ball, capacity(buffered, 1))
	done := make(chan int, 1)
	m.Start()
	go player(a, b, n, done)
	go player(b, a, n, done)
	a <- &ball{}
	hits := <-done
	m.Stop()
	return workload.Outcome{Detail: fmt.Sprintf("hits=%d", hits)}, workload.Check("hits", hits, n)
}

// token goes round the ring; each receipt is one hop.
type token struct{ hops int }

func ring(m *workload.Meter, sz workload.Sizes, buffered bool) (workload.Outcome, error) {
	n, laps := sz.RingNodes, sz.RingLaps
	in := make([]chan *token, n)
	for i := range in {
		in[i] = make(chan *token, capacity(buffered, 1))
	}
	done := make(chan int, 1)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			next := in[(i+1)%n]
			for visit := 1; visit <= laps; visit++ {
				t := <-in[i]
				t.hops++
				if i == 0 && visit == laps {
					done <- t.hops
					return
				}
				next <- t
			}
		})
	}
	m.Start()
	in[1%n] <- &token{} // node 0 serves
	hops := <-done
	m.Stop()
	wg.Wait()
	return workload.Outcome{Detail: fmt.Sprintf("hops=%d", hops)}, workload.Check("hops", hops, n*laps)
}

// skynetNode sums its part of the tree onto out: a goroutine per node.
func skynetNode(out chan<- int64, num, size int, buffered bool) {
	if size == 1 {
		out <- int64(num)
		return
	}
	rc := make(chan int64, capacity(buffered, 10))
	sub := size / 10
	for i := range 10 {
		go skynetNode(rc, num+i*sub, sub, buffered)
	}
	var sum int64
	for range 10 {
		sum += <-rc
	}
	out <- sum
}

func skynet(m *workload.Meter, sz workload.Sizes, buffered bool) (workload.Outcome, error) {
	out := make(chan int64, 1)
	m.Start()
	go skynetNode(out, 0, sz.SkynetLeaves, buffered)
	sum := <-out
	m.Stop()
	return workload.Outcome{Detail: fmt.Sprintf("sum=%d", sum)}, workload.Check("sum", sum, workload.SkynetSum(sz.SkynetLeaves))
}

func spawn(m *workload.Meter, sz workload.Sizes, buffered bool) (workload.Outcome, error) {
	n := sz.SpawnProcesses
	results := make(chan int, capacity(buffered, n))
	m.Start()
	go func() {
		for i := range n {
			go func() { results <- i }()
		}
	}()
	var sum int64
	for range n {
		sum += int64(<-results)
	}
	m.Stop()
	return workload.Outcome{Detail: fmt.Sprintf("sum=%d", sum)}, workload.Check("sum of results", sum, workload.SpawnSum(n))
}

// fanMsg is the fan-out message; the receivers only count.
type fanMsg struct{}

func fanOut(m *workload.Meter, sz workload.Sizes, buffered bool) (workload.Outcome, error) {
	r, total := sz.FanOutReceivers, sz.FanOutMessages
	each := total / r
	in := make([]chan *fanMsg, r)
	for i := range in {
		in[i] = make(chan *fanMsg, capacity(buffered, each))
	}
	counts := make(chan int, r)
	for i := range r {
		go func() {
			got := 0
			for range in[i] {
				got++
				if got == each {
					break
				}
			}
			counts <- got
		}()
	}
	msg := &fanMsg{}
	m.Start()
	go func() { // the producer
		next := 0
		for range total {
			in[next] <- msg
			if next++; next == r {
				next = 0
			}
		}
	}()
	got := 0
	for range r {
		got += <-counts
	}
	m.Stop()
	return workload.Outcome{Detail: fmt.Sprintf("received=%d", got)}, workload.Check("messages received", got, total)
}

// request is one round trip: the server answers tag+1 on reply.
type request struct {
	tag   uint64
	reply chan uint64
}

func yieldRoundTrip(m *workload.Meter, sz workload.Sizes, buffered bool) (workload.Outcome, error) {
	// GOMAXPROCS server goroutines answer; every client goroutine waits
	// for each answer before asking again, as a yielding process does.
	procs, each := sz.YieldProcesses, sz.YieldsPerProcess
	reqs := make(chan request, capacity(buffered, procs))
	servers := runtime.GOMAXPROCS(0)
	var serving sync.WaitGroup
	for range servers {
		serving.Go(func() {
			for r := range reqs {
				r.reply <- r.tag + 1
			}
		})
	}
	var total, wrong atomic.Int64
	var clients sync.WaitGroup
	m.Start()
	for range procs {
		clients.Go(func() {
			reply := make(chan uint64, capacity(buffered, 1))
			for tag := range uint64(each) {
				reqs <- request{tag: tag, reply: reply}
				if <-reply != tag+1 {
					wrong.Add(1)
				}
			}
			total.Add(int64(each))
		})
	}
	clients.Wait()
	m.Stop()
	close(reqs)
	serving.Wait()
	if err := workload.Check("wrong answers", wrong.Load(), 0); err != nil {
		return workload.Outcome{}, err
	}
	got := int(total.Load())
	return workload.Outcome{Detail: fmt.Sprintf("round_trips=%d", got)}, workload.Check("round trips", got, procs*each)
}

// fibNode computes fib(n) onto out: fib(n-1) and fib(n-2) each in a
// goroutine of its own.
func fibNode(out chan<- int64, n int, buffered bool) {
	if n < 2 {
		out <- int64(n)
		return
	}
	c := make(chan int64, capacity(buffered, 2))
	go fibNode(c, n-1, buffered)
	go fibNode(c, n-2, buffered)
	out <- <-c + <-c
}

func fib(m *workload.Meter, sz workload.Sizes, buffered bool) (workload.Outcome, error) {
	out := make(chan int64, 1)
	m.Start()
	go fibNode(out, sz.FibN, buffered)
	v := <-out
	m.Stop()
	return workload.Outcome{Detail: fmt.Sprintf("fib(%d)=%d", sz.FibN, v)}, workload.Check("fib", v, workload.FibValue(sz.FibN))
}

// idleMsg is what an idle goroutine waits for.
type idleMsg struct{}

func idle(m *workload.Meter, sz workload.Sizes, buffered bool) (workload.Outcome, error) {
	// Every idle "process" is a goroutine blocked on its own mailbox
	// channel; the caller keeps the channels to reach them.
	n := sz.IdleProcesses
	mailboxes := make([]chan idleMsg, n)
	var ready atomic.Int64
	all := make(chan struct{})
	before := workload.LiveBytes()
	m.Start()
	for i := range mailboxes {
		ch := make(chan idleMsg, capacity(buffered, 1))
		mailboxes[i] = ch
		go func() {
			if ready.Add(1) == int64(n) {
				close(all)
			}
			for range ch {
			}
		}()
	}
	<-all
	m.Stop()
	after := workload.LiveBytes()
	live := runtime.NumGoroutine()
	runtime.KeepAlive(mailboxes)
	if live < n {
		return workload.Outcome{}, fmt.Errorf("live goroutines: got %d, want at least %d", live, n)
	}
	return workload.Outcome{
		Detail:          fmt.Sprintf("goroutines=%d", live),
		BytesPerProcess: workload.PerProcess(before, after, n),
	}, nil
}
