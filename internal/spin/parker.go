package spin

import "sync/atomic"

// States of Parker.state. The owner moves the state out of notified and into
// and out of parked; Unpark only ever stores notified.
const (
	stateEmpty    int32 = iota // no token, owner not parked
	stateNotified              // a token is available
	stateParked                // owner is blocked (or about to block) on wake, no token
)

// Parker is a one-token park/unpark primitive that can never lose a wakeup:
// a [Parker.Unpark] that happens before [Parker.Park] makes that Park return
// immediately, and Unparks do not accumulate beyond one token.
//
// The zero value has no token and is ready to use. A Parker must not be
// copied after first use. It has one owner, the only goroutine that may call
// Park; any goroutine may call Unpark.
//
// Why no wakeup is lost: Unpark publishes its token with a Swap before it
// looks at what the owner was doing. Park either consumes a token with a CAS
// notified->empty, or announces itself with a CAS empty->parked and only then
// blocks. Both sides act on the one state word, so either Unpark's Swap comes
// first and the owner's CAS to parked fails (it sees the token and returns),
// or the owner's CAS comes first and Unpark's Swap returns parked, which
// obliges that Unpark to send on the channel the owner is blocked on. There
// is no interleaving in which the owner blocks after a token was published,
// nor one in which the token is published to a parked owner without a send.
//
// Why the send never blocks: a send happens only when a Swap returns parked.
// The state becomes parked once per blocking Park, by the owner's CAS, and
// the first Swap after that replaces parked with notified, so every blocking
// Park is matched by exactly one send. The owner receives that value before
// Park returns and before it can park again, so the 1-buffered channel holds
// at most one value and is empty whenever a send starts.
type Parker struct {
	// state is the token and the owner's announcement, one of the state*
	// constants. Unpark's Swap synchronises with the owner's CAS: whichever
	// comes second observes the other (see the type comment). The Swap that
	// returns parked also synchronises with the CAS that stored parked, which
	// is what publishes wake to Unpark. The owner consumes a token with a
	// CAS or Swap that reads the last Unpark's Swap, so everything every
	// Unparker wrote before its Unpark is visible to the owner after Park
	// returns.
	state atomic.Int32

	// wake carries the wakeup to a blocked owner; capacity 1. It is created
	// lazily by the owner, before the CAS that stores parked. Unpark reads it
	// only after its Swap returned parked, and that Swap synchronises with the
	// CAS, so the plain field needs no lock: it is written once, by the owner,
	// before any goroutine can read it.
	wake chan struct{}
}

// testHookBeforeAnnounce, when set by a test, runs in Park between the failed
// attempt to consume a token and the CAS that announces the owner as parked:
// the narrowest window of the protocol, which a test cannot otherwise hit on
// purpose. It is read only on the path that is about to block, where a nil
// check costs nothing measurable.
var testHookBeforeAnnounce func()

// Park blocks until a token is available and consumes it. If an Unpark came
// since the last Park returned, Park returns at once. It never returns
// without consuming a token: unlike Rust's thread::park or Java's
// LockSupport.park, it has no spurious wakeups: each return answers at
// least one Unpark that no earlier return answered. Only the owning
// goroutine may call Park.
func (p *Parker) Park() {
	if p.state.CompareAndSwap(stateNotified, stateEmpty) {
		return
	}
	if p.wake == nil {
		p.wake = make(chan struct{}, 1)
	}
	if testHookBeforeAnnounce != nil {
		testHookBeforeAnnounce()
	}
	if !p.state.CompareAndSwap(stateEmpty, stateParked) {
		// The state was empty at the first CAS, and between the two only an
		// Unpark can have changed it, to notified. Consume that token; with a
		// Swap rather than a Store, so that consuming reads, and synchronises
		// with, the last Unpark's Swap.
		p.state.Swap(stateEmpty)
		return
	}
	<-p.wake
	// The Unpark that sent left notified behind, and any Unpark that ran
	// since found notified and was folded into this wakeup. Consume the
	// token. This cannot overwrite a newer token: every Swap since the send
	// stored notified as well. It is a Swap rather than a Store so that it
	// reads the last folded Unpark's Swap and synchronises with it: what that
	// Unparker wrote before calling Unpark is visible once Park returns.
	p.state.Swap(stateEmpty)
}

// Unpark makes a token available and wakes the owner if it is parked. A
// token that is already available is not doubled. Any goroutine may call
// Unpark at any time. When the owner is not parked it costs one atomic swap
// and no channel operation.
//
// Unpark always swaps, even when the state already reads notified: a plain
// load fast path would not be a write the owner's CAS can observe, so what the
// caller wrote before Unpark (the work it is announcing) would not be ordered
// before the owner's next look at its queues, and the owner could consume the
// old token, find nothing and park for good.
func (p *Parker) Unpark() {
	if p.state.Swap(stateNotified) == stateParked {
		p.wake <- struct{}{}
	}
}
