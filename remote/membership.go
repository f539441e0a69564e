package remote

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/procsched/scheduler/relay"
)

// peer is another node incarnation this node has heard of.
type peer struct {
	num  uint32
	run  uint64 // the run of the node (see control.go)
	name string
	link link
	// prevRun is the run of the earlier incarnation with this number
	// that this one replaced, if any: its messages still on their way
	// are ignored. Immutable.
	prevRun uint64

	// lastHeard is the time (ns since the Unix epoch) of the last message
	// from the peer. Stored by the control and data goroutines and the
	// reconnect handler, loaded by the heartbeat goroutine; a plain
	// time, ordering nothing else.
	lastHeard atomic.Int64
	// probing is set while a probe of the peer is under way, so that
	// there is one at a time. Set by the heartbeat goroutine, cleared by
	// the probe.
	probing atomic.Bool

	// The receiving side, touched only by the data subscription's
	// goroutine.
	lastSeq   uint64 // the sequence of the last batch taken
	ungranted int    // bytes taken since the last grant
}

// newPeer returns a peer of n whose link is joining.
func newPeer(n *Node, num uint32, name string, run uint64) *peer {
	p := &peer{num: num, name: name, run: run}
	p.link = link{n: n, peer: p, subject: dataSubject(n.subj.prefix, num), key: run ^ n.run}
	p.link.state.Store(linkJoining)
	return p
}

// heard records a message from the peer at time now.
func (p *peer) heard(now int64) { p.lastHeard.Store(now) }

// heardFrom records a message from the peer, which shows that the peer
// is connected and subscribed: a link paused by a reconnect resumes.
// Any goroutine.
func (p *peer) heardFrom(now int64) {
	p.heard(now)
	if p.link.paused.Load() {
		p.link.resume()
	}
}

// Peer describes another node as this node sees it.
type Peer struct {
	Name string // the node's name
	Node uint32 // the incarnation's number, the Node of its PIDs
	// Up is true while the node publishes to it; false while it is
	// joining (messages sent to it meanwhile wait, within
	// [Config].MaxBuffered, until it is up) and once it is down.
	Up bool
	// Reason says why a peer is down (it wraps [ErrNodeDown], or
	// [ErrClosed] once this node has closed or lost its connection for
	// good); nil otherwise.
	Reason error
}

// describe returns p as a Peer.
func (p *peer) describe() Peer {
	l := &p.link
	l.mu.Lock()
	defer l.mu.Unlock()
	return Peer{Name: p.name, Node: p.num, Up: l.state.Load() == linkOpen, Reason: l.reason}
}

// Why peers are declared down.
var (
	errGoodbye      = errors.New("it left the cluster")
	errDeclaredUs   = errors.New("it declared this node down")
	errNoOneAnswers = errors.New("no one answers for its number")
)

// maxTombstones bounds how many down incarnations a node remembers, so
// that a long-lived cluster whose nodes restart often does not grow the
// directory without bound. A PID of a forgotten incarnation fails with
// ErrUnknownNode instead of ErrNodeDown; both are ErrProcessNotFound.
const maxTombstones = 1024

// onControl handles a control message; NATS calls it on the goroutine of
// the subscription it came on (the node's own control subject, or the
// cluster's).
func (n *Node) onControl(msg *nats.Msg) {
	if msg.Reply != "" {
		// A probe, the only request: answered whatever it holds, even in
		// another wire version, so that any node checking this number
		// finds it taken.
		var buf [ctlHeaderLen]byte
		_ = msg.Respond(appendCtl(buf[:0], ctlMsg{typ: ctlPong, sender: n.num, run: n.run}))
		return
	}
	m, err := decodeCtl(msg.Data)
	if err != nil {
		n.dropMalformed(msg.Data, err)
		return
	}
	if m.typ == ctlProbe || m.typ == ctlPong {
		return
	}
	if m.sender == n.num || m.name == n.cfg.Name {
		if m.sender != n.num || (m.name != "" && m.name != n.cfg.Name) {
			// Names and numbers are unique in a cluster: this is a
			// misconfiguration, or an old incarnation still running.
			n.counts.conflicts.Add(1)
			n.logf(slog.LevelError, "remote: another node uses this node's number or name", "node", n.num, "name", n.cfg.Name, "other", m.name, "otherNode", m.sender)
		}
		return // our own broadcast, or a clash
	}
	if m.to != n.run && (m.to != 0 || addressed(m)) {
		return // meant for an earlier run of this node's number
	}
	if n.state.Load() < stateRunning {
		return
	}
	now := time.Now().UnixNano()
	switch m.typ {
	case ctlHello, ctlHeartbeat, ctlAck:
		n.onHello(m, now)
		return
	}
	// The rest concern the run they come from only.
	p := n.peer(m.sender)
	if p == nil || p.run != m.run {
		return
	}
	switch m.typ {
	case ctlBye:
		n.declareDown(p, errGoodbye, false)
	case ctlDown:
		n.declareDown(p, errDeclaredUs, false)
	case ctlGrant:
		p.heardFrom(now)
		p.link.grant(m.seq)
	}
}

// addressed reports whether m is meant for one run of one node: an
// ack, a direct hello, a grant or a "you are down".
func addressed(m ctlMsg) bool {
	switch m.typ {
	case ctlAck, ctlGrant, ctlDown:
		return true
	case ctlHello:
		return m.flags&flagDirect != 0
	}
	return false
}

// dropMalformed counts a batch or control message that did not decode,
// and logs, once per version, one of a wire version this node does not
// speak: such a node can never join, and nothing else would say why.
// Any goroutine.
func (n *Node) dropMalformed(data []byte, err error) {
	n.counts.dropped[dropMalformed].Add(1)
	if errors.Is(err, errWireVersion) && n.loggedVersion.Swap(uint32(data[0])+1) != uint32(data[0])+1 {
		n.logf(slog.LevelError, "remote: a node of another wire version is in the cluster; its messages are dropped", "node", n.num, "name", n.cfg.Name, "error", err.Error())
	}
}

// onHello handles a hello, heartbeat or ack from another node. The
// handshake makes sure that a node publishes data to a peer only once
// the peer has registered it, since a peer drops batches from nodes it
// does not know:
//
//   - a node registers a sender it does not know before it answers;
//   - a hello is answered with an ack; a hello sent to one node (direct)
//     is only sent to a node already registered;
//   - an ack, or a direct hello, says "I know you": its receiver's link
//     to the sender opens, and, if it was not open, it acks back (so
//     both sides open after a hello, an ack and an ack);
//   - a heartbeat from an unknown node is answered with a direct hello;
//   - every heartbeat, a node sends a direct hello to each peer whose
//     link is not open yet, so that a lost message only delays joining.
//
// A sender is known by its number and its run: one with a known number
// and another run is a new incarnation that drew the number of an
// earlier one (which is declared down if it was not yet, and
// forgotten), except that the messages of the run it replaced, which
// may still be on their way, are ignored.
//
// Control goroutines (the two control subscriptions may run it at once;
// registration is under n.mu).
func (n *Node) onHello(m ctlMsg, now int64) {
	n.mu.Lock()
	p := n.peer(m.sender)
	if p != nil && p.run != m.run && m.run == p.prevRun {
		n.mu.Unlock()
		return // from the run p replaced
	}
	var replaced, earlier *peer // the live incarnation of the name, the earlier run of the number
	var earlierWaiting []relay.Message
	var earlierErr error
	isNew := false
	if p == nil || p.run != m.run {
		if n.closing() {
			n.mu.Unlock()
			return
		}
		np := newPeer(n, m.sender, m.name, m.run)
		if p != nil {
			earlier, np.prevRun = p, p.run
			earlierErr = fmt.Errorf("%w: node %q (%d): %v", ErrNodeDown, p.name, p.num, errNewRun)
			var live bool
			earlierWaiting, live = p.link.fail(earlierErr)
			n.forgetRun(p)
			if !live {
				earlier = nil // down already: forgotten, nothing more to do
			}
		}
		p = np
		replaced = n.byName[m.name]
		peers := maps.Clone(*n.peers.Load())
		peers[p.num] = p
		n.peers.Store(&peers)
		n.byName[m.name] = p
		isNew = true
	}
	n.mu.Unlock()
	if earlier != nil {
		n.wentDown(earlier, earlierWaiting, earlierErr, errNewRun, false)
	}
	if p.name != m.name {
		n.counts.conflicts.Add(1)
		n.logf(slog.LevelError, "remote: two nodes use one number", "node", p.num, "name", p.name, "other", m.name)
		return
	}
	if p.link.state.Load() == linkDown {
		// A node declared down stays down: tell it, so that it declares
		// this node down too, and both sides fail their sends instead of
		// one of them sending into silence.
		n.tellPeer(p, ctlMsg{typ: ctlDown})
		return
	}
	p.heardFrom(now)
	if replaced != nil && replaced != p {
		n.declareDown(replaced, fmt.Errorf("it restarted as node %d", p.num), true)
	}
	switch m.typ {
	case ctlHello:
		if m.flags&flagDirect != 0 {
			n.open(p)
		}
		n.tellPeer(p, ctlMsg{typ: ctlAck})
	case ctlAck:
		if n.open(p) {
			n.tellPeer(p, ctlMsg{typ: ctlAck})
		}
	case ctlHeartbeat:
		if isNew {
			n.tellPeer(p, ctlMsg{typ: ctlHello, flags: flagDirect})
		}
	}
}

// errNewRun is why a peer is declared down when a new run of its node
// number says hello.
var errNewRun = errors.New("it restarted: a new run took its number")

// tellPeer sends control message m to peer p's run. Any goroutine.
func (n *Node) tellPeer(p *peer, m ctlMsg) {
	m.to = p.run
	n.publishCtl(ctlSubject(n.subj.prefix, p.num), m)
}

// forgetRun removes p, which a new run of its number replaces, from the
// down peers if it is there, keeping its counts, and from the names.
// Called with n.mu held.
func (n *Node) forgetRun(p *peer) {
	if i := slices.Index(n.downs, p); i >= 0 {
		n.downs = slices.Delete(n.downs, i, i+1)
	}
	if n.byName[p.name] == p {
		delete(n.byName, p.name)
	}
	p.link.mu.Lock()
	n.retired.add(&p.link.counts)
	p.link.mu.Unlock()
}

// open opens the link to p and reports whether it was not open yet.
// Control goroutines.
func (n *Node) open(p *peer) bool {
	if !p.link.markOpen() {
		return false
	}
	n.counts.joined.Add(1)
	n.logf(slog.LevelInfo, "remote: peer up", "peer", p.name, "node", p.num)
	if h := n.cfg.Hooks.PeerUp; h != nil {
		callHook(h, p.describe())
	}
	n.notify()
	return true
}

// declareDown declares peer p down for reason: sends to it fail from
// now on, the messages waiting for it go back to their senders, and its
// pending spawns and monitors complete with ErrNodeDown. tell: let the
// peer know, in case it is alive and only this node lost it. Any
// goroutine; a peer is declared down once.
func (n *Node) declareDown(p *peer, reason error, tell bool) {
	err := fmt.Errorf("%w: node %q (%d): %v", ErrNodeDown, p.name, p.num, reason)
	waiting, ok := p.link.fail(err)
	if !ok {
		return
	}
	n.mu.Lock()
	if n.byName[p.name] == p {
		delete(n.byName, p.name)
	}
	if n.peer(p.num) != p {
		// A new run of its number replaced it meanwhile, and forgot it.
		n.mu.Unlock()
		n.wentDown(p, waiting, err, reason, false)
		return
	}
	n.downs = append(n.downs, p)
	if len(n.downs) > maxTombstones {
		old := n.downs[0]
		peers := maps.Clone(*n.peers.Load())
		delete(peers, old.num)
		n.peers.Store(&peers)
		n.downs = n.downs[1:]
		old.link.mu.Lock()
		n.retired.add(&old.link.counts)
		old.link.mu.Unlock()
	}
	n.mu.Unlock()
	n.wentDown(p, waiting, err, reason, tell)
}

// wentDown does what follows p's link failing with err for reason: the
// messages that were waiting go back, its requests complete, the
// monitors held for it stop, and the hooks and waiters hear of it. Any
// goroutine, holding no lock.
func (n *Node) wentDown(p *peer, waiting []relay.Message, err, reason error, tell bool) {
	n.counts.lost.Add(1)
	n.returnAll(p, waiting, err)
	n.pending.failPeer(p, err)
	n.held.stopPeer(p)
	if tell {
		n.tellPeer(p, ctlMsg{typ: ctlDown})
	}
	n.logf(slog.LevelInfo, "remote: peer down", "peer", p.name, "node", p.num, "reason", reason.Error())
	if h := n.cfg.Hooks.PeerDown; h != nil {
		callHook(h, p.describe())
	}
	n.notify()
}

// heartbeats is the goroutine that sends heartbeats and detects
// failures, once per heartbeat.
func (n *Node) heartbeats() {
	defer n.wg.Done()
	t := time.NewTicker(n.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case now := <-t.C:
			n.tick(now.UnixNano())
		}
	}
}

// tick is one round of the heartbeat goroutine. While this node's
// connection is down it cannot hear anyone, so it judges no one; and the
// first round that finds it back gives the peers time to reconnect, as
// onReconnect does, which NATS may call later.
func (n *Node) tick(now int64) {
	n.clock.Store(now)
	if n.nc.Status() != nats.CONNECTED {
		n.cutOff = true
		return
	}
	if n.cutOff {
		n.cutOff = false
		n.restartClocks(now)
	}
	n.publishCtl(n.subj.all, ctlMsg{typ: ctlHeartbeat})
	hb := int64(n.cfg.Heartbeat)
	for _, p := range *n.peers.Load() {
		switch p.link.state.Load() {
		case linkDown:
			continue
		case linkJoining:
			n.tellPeer(p, ctlMsg{typ: ctlHello, flags: flagDirect})
		case linkOpen:
			p.link.syncIfOverdue(now, hb)
			p.link.retryRefused()
		}
		silent := now - p.lastHeard.Load()
		switch {
		case silent > int64(n.cfg.FailureTimeout):
			n.declareDown(p, fmt.Errorf("silent for %v", time.Duration(silent).Round(time.Millisecond)), true)
		case silent > 2*hb:
			n.probe(p, now)
		}
	}
}

// probe asks NATS whether anyone answers for peer p: a request to its
// control subject. "No responders" means its subscription is gone, which
// the server knows as soon as the peer's connection closes, so a crashed
// peer is declared down two to three heartbeats after it was last heard
// from (it is probed at the first round that finds it silent for two),
// instead of the failure timeout. Right after this node reconnected, the answer is not
// trusted: the peer may not have reconnected yet. An answer shows that
// the peer is subscribed, so a paused link resumes, but it is no
// heartbeat: a peer silent for FailureTimeout is declared down whatever
// its probes say. Close stops a probe under way, since it waits for no
// answer. Heartbeat goroutine.
func (n *Node) probe(p *peer, now int64) {
	if now < n.probesFrom.Load() || !p.probing.CompareAndSwap(false, true) {
		return
	}
	n.counts.probes.Add(1)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer p.probing.Store(false)
		var buf [ctlHeaderLen]byte
		ctx, cancel := context.WithTimeout(n.probing, n.cfg.Heartbeat)
		defer cancel()
		_, err := n.nc.RequestWithContext(ctx, ctlSubject(n.subj.prefix, p.num), appendCtl(buf[:0], ctlMsg{typ: ctlProbe, sender: n.num, run: n.run, to: p.run}))
		switch {
		case err == nil:
			if p.link.paused.Load() {
				p.link.resume()
			}
		case errors.Is(err, nats.ErrNoResponders):
			if time.Now().UnixNano() >= n.probesFrom.Load() && !n.closing() {
				n.declareDown(p, errNoOneAnswers, true)
			}
		}
	}()
}

// Peers returns the peers this node knows, up, joining and down (a node
// remembers the last 1,024 it declared down).
func (n *Node) Peers() []Peer {
	var ps []Peer
	for _, p := range *n.peers.Load() {
		ps = append(ps, p.describe())
	}
	return ps
}

// Lookup returns the number of the live node named name: this node, or
// a peer heard from and not declared down (one still joining included;
// [Node.WaitPeer] waits until it is up). From Close on, and once the
// NATS connection has closed for good, the node knows no peer: only its
// own name is found.
func (n *Node) Lookup(name string) (uint32, bool) {
	if name == n.cfg.Name {
		return n.num, true
	}
	if n.gone() {
		return 0, false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if p := n.byName[name]; p != nil {
		return p.num, true
	}
	return 0, false
}

// livePeer returns the live peer named name, or an error wrapping
// ErrUnknownNode, or ErrClosed once the node is gone. Any goroutine.
func (n *Node) livePeer(name string) (*peer, error) {
	if n.gone() {
		return nil, fmt.Errorf("%w: node %q is closed or has lost its NATS connection for good", ErrClosed, n.cfg.Name)
	}
	n.mu.Lock()
	p := n.byName[name]
	n.mu.Unlock()
	if p == nil {
		return nil, fmt.Errorf("%w: no node named %q", ErrUnknownNode, name)
	}
	return p, nil
}

// callHook calls hook h with p in a goroutine of its own (see
// callUser).
func callHook(h func(Peer), p Peer) { callUser(func() { h(p) }) }
