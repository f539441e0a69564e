package workload

import (
	"fmt"
	"math"
)

// The workloads, in the order reports list them.
const (
	PingPong = "pingpong" // two processes exchange messages
	Ring     = "ring"     // N processes pass a token around M times
	Skynet   = "skynet"   // a spawn tree of 10^k leaves, each node sums its ten children
	Spawn    = "spawn"    // start trivial processes and wait for all of them
	FanOut   = "fanout"   // one producer, 1,000 receivers
	Yield    = "yield"    // round trips to an asynchronous handler
	Fib      = "fib"      // fork-join fib(n): every call is a process
	Idle     = "idle"     // bytes per idle process

	// The remote workloads run two nodes in one process, talking over
	// loopback; see [IsRemote].
	RemotePingPong = "remote-pingpong" // round trips between two nodes, one at a time
	RemoteEcho     = "remote-echo"     // a window of messages echoed by the other node
	RemotePairs    = "remote-pairs"    // 1,000 pairs ping-ponging across nodes at once
)

// Names lists every workload in report order: the local ones, then the
// remote ones.
var Names = []string{PingPong, Ring, Skynet, Spawn, FanOut, Yield, Fib, Idle, RemotePingPong, RemoteEcho, RemotePairs}

// IsRemote reports whether workload name carries messages between two
// nodes (two schedulers, engines or actor systems in one process, joined
// over loopback) rather than within one. Remote workloads are compared
// with raw NATS instead of goroutines, and report message rates and
// round-trip latencies.
func IsRemote(name string) bool {
	switch name {
	case RemotePingPong, RemoteEcho, RemotePairs:
		return true
	}
	return false
}

// Describe returns a one-line description of workload name for reports.
func Describe(name string) string {
	switch name {
	case PingPong:
		return "two processes bounce one message back and forth"
	case Ring:
		return "a token passed around a ring of processes"
	case Skynet:
		return "spawn tree, each node sums its ten children"
	case Spawn:
		return "start trivial processes, wait for all"
	case FanOut:
		return "one producer sends round-robin to 1,000 receivers"
	case Yield:
		return "yield to an async handler; a goroutine completes it"
	case Fib:
		return "fork-join fib(n), one process per call"
	case Idle:
		return "memory of idle processes (heap + stacks)"
	case RemotePingPong:
		return "a process on each of two nodes, one message in flight"
	case RemoteEcho:
		return "a window of messages to an echo process on the other node"
	case RemotePairs:
		return "1,000 pairs across two nodes ping-pong at once"
	}
	return name
}

// Sizes are the concrete parameters of every workload at one scale.
type Sizes struct {
	PingPongMessages int // messages exchanged in all (each hop is one)
	RingNodes        int // processes in the ring
	RingLaps         int // times the token goes round
	SkynetLeaves     int // leaves of the tree, a power of ten
	SpawnProcesses   int // trivial processes started
	FanOutReceivers  int // receivers
	FanOutMessages   int // messages in all, a multiple of FanOutReceivers
	YieldProcesses   int // processes yielding concurrently
	YieldsPerProcess int // round trips each makes, one after another
	FibN             int // n of fib(n)
	IdleProcesses    int // idle processes held at once

	RemoteRoundTrips     int // remote-pingpong: round trips, one after another
	RemoteEchoMessages   int // remote-echo: messages sent, each echoed back
	RemoteEchoWindow     int // remote-echo: most messages sent and not yet back
	RemotePairs          int // remote-pairs: pairs, one end on each node
	RemotePairRoundTrips int // remote-pairs: round trips each pair makes
}

// MaxScale is the largest size factor: a thousand times the full sizes,
// a billion messages, leaves or processes, far past what a run can hold;
// much larger factors make counts that overflow.
const MaxScale = 1000

// ScaleOK reports whether scale is a size factor the sizes can be made
// of: positive, finite and at most [MaxScale]. [SizesFor] takes any other
// as 1, so a run must refuse it rather than run at another size under
// its name.
func ScaleOK(scale float64) bool {
	return scale > 0 && scale <= MaxScale
}

// SizesFor returns the sizes at scale (1 is the full size: a million
// messages, leaves or processes). Every size stays at least
// large enough for its workload to be meaningful.
func SizesFor(scale float64) Sizes {
	if scale <= 0 || math.IsNaN(scale) || math.IsInf(scale, 0) {
		scale = 1
	}
	n := func(full int, least int) int {
		return max(least, int(math.Round(float64(full)*scale)))
	}
	const receivers = 1000
	leafExp := max(1, int(math.Round(6+math.Log10(scale))))
	phi := (1 + math.Sqrt(5)) / 2
	return Sizes{
		PingPongMessages: n(1_000_000, 100),
		RingNodes:        1000,
		RingLaps:         n(1000, 2),
		SkynetLeaves:     int(math.Pow10(leafExp)),
		SpawnProcesses:   n(1_000_000, 100),
		FanOutReceivers:  receivers,
		FanOutMessages:   receivers * n(1000, 1),
		YieldProcesses:   1000,
		YieldsPerProcess: n(1000, 1),
		FibN:             max(5, 27+int(math.Round(math.Log(scale)/math.Log(phi)))),
		IdleProcesses:    n(1_000_000, 100),

		RemoteRoundTrips:     n(20_000, 100),
		RemoteEchoMessages:   n(1_000_000, 1000),
		RemoteEchoWindow:     1000,
		RemotePairs:          1000,
		RemotePairRoundTrips: n(500, 5),
	}
}

// Ops returns how many unit operations a run of workload does at these
// sizes, the divisor of its per-operation time: messages, hops, leaves,
// processes, round trips or calls. A remote workload counts messages in
// both directions: a round trip is two.
func (s Sizes) Ops(workload string) int64 {
	switch workload {
	case PingPong:
		return int64(s.PingPongMessages)
	case Ring:
		return int64(s.RingNodes) * int64(s.RingLaps)
	case Skynet:
		return SkynetNodes(s.SkynetLeaves)
	case Spawn:
		return int64(s.SpawnProcesses)
	case FanOut:
		return int64(s.FanOutMessages)
	case Yield:
		return int64(s.YieldProcesses) * int64(s.YieldsPerProcess)
	case Fib:
		return FibCalls(s.FibN)
	case Idle:
		return int64(s.IdleProcesses)
	case RemotePingPong:
		return 2 * int64(s.RemoteRoundTrips)
	case RemoteEcho:
		return 2 * int64(s.RemoteEchoMessages)
	case RemotePairs:
		return 2 * int64(s.RemotePairs) * int64(s.RemotePairRoundTrips)
	}
	return 0
}

// OpUnit names what [Sizes.Ops] counts for workload.
func OpUnit(workload string) string {
	switch workload {
	case PingPong, FanOut, RemotePingPong, RemoteEcho, RemotePairs:
		return "msg"
	case Ring:
		return "hop"
	case Skynet, Spawn, Idle:
		return "proc"
	case Yield:
		return "round trip"
	case Fib:
		return "call"
	}
	return "op"
}

// SkynetSum is the answer of a skynet tree with the given leaves: the sum
// of 0 .. leaves-1 (499999500000 for a million).
func SkynetSum(leaves int) int64 {
	l := int64(leaves)
	return l * (l - 1) / 2
}

// SkynetNodes is the number of nodes of a skynet tree with the given
// leaves (a power of ten): 1,111,111 for a million.
func SkynetNodes(leaves int) int64 {
	var n int64
	for l := int64(leaves); l >= 1; l /= 10 {
		n += l
	}
	return n
}

// FibValue returns fib(n), with fib(0) = 0 and fib(1) = 1.
func FibValue(n int) int64 {
	a, b := int64(0), int64(1)
	for range n {
		a, b = b, a+b
	}
	return a
}

// FibCalls is the number of calls of the naive recursive fib(n): every
// call is one process (or task) in the fib workload.
func FibCalls(n int) int64 {
	return 2*FibValue(n+1) - 1
}

// SpawnSum is the answer of the spawn workload: the sum of the indexes
// 0 .. n-1 of the processes started.
func SpawnSum(n int) int64 {
	return int64(n) * int64(n-1) / 2
}

// Check returns nil if got equals want and otherwise an error naming what
// was checked.
func Check[T comparable](what string, got, want T) error {
	if got != want {
		return fmt.Errorf("%s: got %v, want %v", what, got, want)
	}
	return nil
}

// Label describes what workload does at these sizes, for reports.
func (s Sizes) Label(workload string) string {
	switch workload {
	case PingPong:
		return Thousands(int64(s.PingPongMessages)) + " messages"
	case Ring:
		return Thousands(int64(s.RingNodes)) + " processes × " + Thousands(int64(s.RingLaps)) + " laps"
	case Skynet:
		return Thousands(int64(s.SkynetLeaves)) + " leaves"
	case Spawn:
		return Thousands(int64(s.SpawnProcesses)) + " processes"
	case FanOut:
		return Thousands(int64(s.FanOutReceivers)) + " receivers, " + Thousands(int64(s.FanOutMessages)) + " messages"
	case Yield:
		return Thousands(int64(s.YieldProcesses)) + " processes × " + Thousands(int64(s.YieldsPerProcess)) + " yields"
	case Fib:
		return fmt.Sprintf("fib(%d), %s calls", s.FibN, Thousands(FibCalls(s.FibN)))
	case Idle:
		return Thousands(int64(s.IdleProcesses)) + " processes"
	case RemotePingPong:
		return Thousands(int64(s.RemoteRoundTrips)) + " round trips"
	case RemoteEcho:
		return Thousands(int64(s.RemoteEchoMessages)) + " messages each way, window " + Thousands(int64(s.RemoteEchoWindow))
	case RemotePairs:
		return Thousands(int64(s.RemotePairs)) + " pairs × " + Thousands(int64(s.RemotePairRoundTrips)) + " round trips"
	}
	return ""
}

// Thousands formats n with commas between groups of three digits.
func Thousands(n int64) string {
	s := fmt.Sprint(n)
	neg := ""
	if n < 0 {
		neg, s = "-", s[1:]
	}
	var b []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			b = append(b, ',')
		}
		b = append(b, s[i])
	}
	return neg + string(b)
}
