package remote

import (
	"errors"
	"sync/atomic"

	scheduler "github.com/procsched/scheduler"
)

// Stats is a snapshot of a node's counters, from [Node.Stats]. Totals
// only grow; Buffered, InFlight, Pending, MonitorsHeld and the counts of
// peers by state (Up, Joining, Down) are read at the moment of the call.
// Figures are read one by one, not at one instant.
type Stats struct {
	Peers PeerStats `json:"peers"` // the peers by state

	// Frames (messages, bounces, spawn and monitor requests and their
	// answers) and the batches and bytes that carried them.
	Sent            uint64 `json:"sent"`            // frames published
	Received        uint64 `json:"received"`        // frames taken
	BatchesSent     uint64 `json:"batchesSent"`     // batches published, sync markers apart
	BatchesReceived uint64 `json:"batchesReceived"` // batches taken, sync markers included
	BytesSent       uint64 `json:"bytesSent"`       // bytes of the batches published, sync markers apart
	BytesReceived   uint64 `json:"bytesReceived"`   // bytes of the batches taken, sync markers included
	// SyncMarkers counts empty batches sent to ask a peer for its grant
	// at once (after a reconnect, a long wait, and when closing).
	SyncMarkers uint64 `json:"syncMarkers"`
	// Gaps counts batches from peers that never arrived, as their
	// sequence numbers show: lost in flight, for example while the
	// connection to the server was down.
	Gaps uint64 `json:"gaps"`
	// CreditStalls counts the times a link had batches to send and no
	// credit to send them with.
	CreditStalls uint64 `json:"creditStalls"`
	// PublishFailures counts batches and sync markers NATS refused to
	// take; the messages of a refused batch went back to their senders,
	// its spawn and monitor requests failed, its other frames waited for
	// a later batch, and a refused sync marker is asked for again later.
	PublishFailures uint64 `json:"publishFailures"`

	// Buffered is the bytes of frames waiting to be published, over all
	// peers.
	Buffered int `json:"buffered"`
	// InFlight is the bytes published and not yet granted, over all
	// peers.
	InFlight int `json:"inFlight"`
	// Pending is the spawn and monitor requests sent to other nodes and
	// not answered yet, now.
	Pending int `json:"pending"`
	// MonitorsHeld is the monitors this node keeps on its processes for
	// other nodes, now.
	MonitorsHeld int `json:"monitorsHeld"`

	// Refused counts sends that failed at once (the sender got the
	// error), by reason.
	Refused Reasons `json:"refused"`
	// Returned counts messages this node accepted that failed later, by
	// reason: bounced by the receiving node, refused by NATS, or still
	// waiting when their peer went down or the node closed. Each went
	// back to its sender here, unless it came from outside any process
	// (such a message the receiving node does not bounce: it counts it
	// in its BouncedBack).
	Returned Reasons `json:"returned"`
	// BouncedBack counts messages from other nodes that this node could
	// not deliver, by reason; each went back to its sender, unless it
	// came from outside any process or was an answer its asker no longer
	// waited for (timed out, cancelled or ended), which the scheduler
	// counts as a late reply among its dead letters.
	BouncedBack Reasons `json:"bouncedBack"`
	// Dropped counts what arrived and was not used, by reason.
	Dropped Drops `json:"dropped"`

	Probes        uint64 `json:"probes"`        // requests asking NATS whether a silent peer is still there
	Reconnects    uint64 `json:"reconnects"`    // times the NATS connection came back
	SlowConsumers uint64 `json:"slowConsumers"` // NATS dropped messages for this node because it read too slowly
	Conflicts     uint64 `json:"conflicts"`     // messages from another node using this node's number, or one number with two names
}

// PeerStats counts peers.
type PeerStats struct {
	Up      int    `json:"up"`      // reachable now
	Joining int    `json:"joining"` // heard of, handshake not finished
	Down    int    `json:"down"`    // declared down and still remembered
	Joined  uint64 `json:"joined"`  // peers that came up
	Lost    uint64 `json:"lost"`    // peers declared down
}

// Reasons counts failures by what went wrong.
type Reasons struct {
	NotFound     uint64 `json:"notFound"`     // the process has ended or never existed
	MailboxFull  uint64 `json:"mailboxFull"`  // its mailbox was full (reject policy)
	Dropped      uint64 `json:"dropped"`      // its mailbox was full (a drop policy)
	Closed       uint64 `json:"closed"`       // a scheduler or node was closed
	NodeDown     uint64 `json:"nodeDown"`     // the node was down
	UnknownNode  uint64 `json:"unknownNode"`  // the node was unknown
	Backpressure uint64 `json:"backpressure"` // too much waited for the node
	NotEncodable uint64 `json:"notEncodable"` // the message could not cross
	Disconnected uint64 `json:"disconnected"` // the connection failed while it was being published
	Other        uint64 `json:"other"`        // anything else
}

// Drops counts what arrived and was not used.
type Drops struct {
	// Malformed batches and control messages, which failed to decode
	// (those of another wire version among them).
	Malformed uint64 `json:"malformed"`
	// UnknownSender and DownSender count batches from a node that has
	// not joined, or is down. A batch from or for another run of a
	// known number counts as from a down sender if it is of the run a
	// new one replaced, and as from an unknown one otherwise.
	UnknownSender uint64 `json:"unknownSender"`
	DownSender    uint64 `json:"downSender"` // see UnknownSender
	// Batches that arrived a second time.
	Duplicate uint64 `json:"duplicate"`
	// Bounces that could not be queued because the way back was full or
	// down, and answers to spawns and ends of watched processes that
	// could not because it was down (when it is full these go without
	// the result, see [Config].MaxBuffered).
	Overflow uint64 `json:"overflow"`
}

// Reasons and drops as indexes of the counters' arrays.
const (
	reasonNotFound = iota
	reasonMailboxFull
	reasonDropped
	reasonClosed
	reasonNodeDown
	reasonUnknownNode
	reasonBackpressure
	reasonNotEncodable
	reasonDisconnected
	reasonOther
	numReasons
)

const (
	dropMalformed = iota
	dropUnknownSender
	dropDownSender
	dropDuplicate
	dropOverflow
	numDrops
)

// counters are the node's counters other than the links'. Each is an
// independent atomic total: they order nothing, and Stats reads them one
// by one.
type counters struct {
	received, batchesIn, bytesIn atomic.Uint64
	gaps                         atomic.Uint64
	joined, lost                 atomic.Uint64
	probes, reconnects           atomic.Uint64
	slowConsumer, conflicts      atomic.Uint64
	refusedBy                    [numReasons]atomic.Uint64
	returnedBy                   [numReasons]atomic.Uint64
	bouncedBackBy                [numReasons]atomic.Uint64
	dropped                      [numDrops]atomic.Uint64
}

// refused, returned and bouncedBack count a failure by its reason. Any
// goroutine.
func (c *counters) refused(err error)     { c.refusedBy[reasonOf(err)].Add(1) }
func (c *counters) returned(err error)    { c.returnedBy[reasonOf(err)].Add(1) }
func (c *counters) bouncedBack(err error) { c.bouncedBackBy[reasonOf(err)].Add(1) }

// reasonOf classifies a failure, the most specific sentinel first.
func reasonOf(err error) int {
	for _, r := range [...]struct {
		target error
		reason int
	}{
		{ErrNodeDown, reasonNodeDown},
		{ErrUnknownNode, reasonUnknownNode},
		{ErrBackpressure, reasonBackpressure},
		{ErrNotEncodable, reasonNotEncodable},
		{ErrDisconnected, reasonDisconnected},
		{scheduler.ErrClosed, reasonClosed},
		{scheduler.ErrProcessNotFound, reasonNotFound},
		{scheduler.ErrMailboxFull, reasonMailboxFull},
		{scheduler.ErrDropped, reasonDropped},
	} {
		if errors.Is(err, r.target) {
			return r.reason
		}
	}
	return reasonOther
}

func (r *Reasons) load(c *[numReasons]atomic.Uint64) {
	*r = Reasons{
		NotFound: c[reasonNotFound].Load(), MailboxFull: c[reasonMailboxFull].Load(),
		Dropped: c[reasonDropped].Load(), Closed: c[reasonClosed].Load(),
		NodeDown: c[reasonNodeDown].Load(), UnknownNode: c[reasonUnknownNode].Load(),
		Backpressure: c[reasonBackpressure].Load(), NotEncodable: c[reasonNotEncodable].Load(),
		Disconnected: c[reasonDisconnected].Load(), Other: c[reasonOther].Load(),
	}
}

// Stats returns a snapshot of the node's counters. It takes each peer's
// lock briefly. Any goroutine.
func (n *Node) Stats() Stats {
	c := &n.counts
	st := Stats{
		Received:        c.received.Load(),
		BatchesReceived: c.batchesIn.Load(),
		BytesReceived:   c.bytesIn.Load(),
		Gaps:            c.gaps.Load(),
		Probes:          c.probes.Load(),
		Reconnects:      c.reconnects.Load(),
		SlowConsumers:   c.slowConsumer.Load(),
		Conflicts:       c.conflicts.Load(),
		Dropped: Drops{
			Malformed:     c.dropped[dropMalformed].Load(),
			UnknownSender: c.dropped[dropUnknownSender].Load(),
			DownSender:    c.dropped[dropDownSender].Load(),
			Duplicate:     c.dropped[dropDuplicate].Load(),
			Overflow:      c.dropped[dropOverflow].Load(),
		},
	}
	st.Peers.Joined, st.Peers.Lost = c.joined.Load(), c.lost.Load()
	st.Pending, st.MonitorsHeld = n.pending.len(), n.held.len()
	st.Refused.load(&c.refusedBy)
	st.Returned.load(&c.returnedBy)
	st.BouncedBack.load(&c.bouncedBackBy)
	var lc linkCounts
	// The retired counts and the peers are read under one hold of n.mu,
	// under which declareDown forgets a peer and retires its counts: a
	// peer forgotten meanwhile is counted in one or the other, once.
	n.mu.Lock()
	lc.add(&n.retired)
	peers := *n.peers.Load()
	n.mu.Unlock()
	if hook := n.statsHook.Load(); hook != nil {
		(*hook)()
	}
	for _, p := range peers {
		l := &p.link
		l.mu.Lock()
		switch l.state.Load() {
		case linkOpen:
			st.Peers.Up++
		case linkJoining:
			st.Peers.Joining++
		default:
			st.Peers.Down++
		}
		lc.add(&l.counts)
		st.Buffered += l.buffered
		st.InFlight += l.inBytes
		l.mu.Unlock()
	}
	st.Sent, st.BytesSent, st.BatchesSent = lc.frames, lc.bytes, lc.batches
	st.SyncMarkers, st.CreditStalls, st.PublishFailures = lc.markers, lc.stalls, lc.publishFailed
	return st
}
