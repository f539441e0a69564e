package spin

import (
	"runtime"
	"sync/atomic"
)

// The rounds of the adaptive spin policy: fewer than
// [TightRounds] rounds spin in a tight busy loop, rounds [TightRounds] up to
// [ParkRound]-1 call [runtime.Gosched], and from round [ParkRound] on
// [Backoff.Spin] reports that the caller should park.
const (
	TightRounds = 4  // rounds [0,4) spin in a tight loop
	ParkRound   = 16 // from this round on, Spin reports that the caller should park
)

// tightUnit is the number of loop iterations of tight round 0; round r runs
// tightUnit<<r. An iteration is one atomic load and a branch, about 0.3 ns on
// the development machine (BenchmarkBackoffTightRounds), so the four tight
// rounds last roughly 20, 40, 80 and 160 ns, about 300 ns in all. That is
// the cost of one park/unpark round trip (BenchmarkParkUnparkPingPong):
// spinning for as long as blocking would cost, then blocking, is never worse
// than twice the better choice made with hindsight, which is the classic
// argument for spin-then-block. Doubling keeps the first rounds short for
// the common case of work that arrives almost at once.
const tightUnit = 64

// spinSink is loaded on every iteration of the tight loop. An atomic load is
// not something the compiler may remove or hoist out of the loop, so the loop
// really spends its iterations; nothing ever stores to spinSink, so the line
// stays shared in every core's cache and the loads generate no coherence
// traffic. Go offers no PAUSE instruction outside the runtime, and since Go
// 1.23 the toolchain refuses a linkname to the runtime's procyield.
var spinSink atomic.Uint32

// Backoff counts the idle rounds of one worker and performs each round's wait.
// The zero value is ready to use and starts at round 0. A Backoff is owned by
// one goroutine; it is not safe for concurrent use.
type Backoff struct {
	rounds int // rounds performed since the last Reset; saturates at ParkRound
}

// Spin performs one backoff round and returns true, or returns false at once,
// without waiting, when the caller should park instead (from round
// [ParkRound] on). Rounds below [TightRounds] busy-wait for a time that
// doubles every round; later rounds call [runtime.Gosched].
func (b *Backoff) Spin() bool {
	switch phaseOf(b.rounds) {
	case phasePark:
		return false
	case phaseTight:
		spinTight(tightUnit << b.rounds)
	case phaseYield:
		runtime.Gosched()
	}
	b.rounds++
	return true
}

// Reset starts the policy over from round 0. A worker calls it when it has
// found work, so that its next idle period begins with cheap tight spins.
func (b *Backoff) Reset() { b.rounds = 0 }

// Rounds returns the number of rounds Spin has performed since the zero value
// or the last [Backoff.Reset]. It never exceeds [ParkRound]: the calls that
// return false are not rounds.
func (b *Backoff) Rounds() int { return b.rounds }

// phase is what a backoff round does.
type phase int

const (
	phaseTight phase = iota // busy loop on this core
	phaseYield              // runtime.Gosched: let other goroutines run
	phasePark               // stop spinning: the caller should park
)

// phaseOf maps a round number to its phase; the policy lives here alone.
func phaseOf(round int) phase {
	switch {
	case round < TightRounds:
		return phaseTight
	case round < ParkRound:
		return phaseYield
	default:
		return phasePark
	}
}

// spinTight busy-waits for n iterations of the loop described at spinSink.
func spinTight(n int) {
	for range n {
		spinSink.Load()
	}
}
