package remote

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	scheduler "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/relay"
)

// Node is a scheduler's member of a cluster: it carries messages for
// processes of other nodes over one NATS connection, delivers theirs, and
// keeps the cluster's membership. It implements [relay.Receiver], to be
// given to [scheduler.WithTransport].
//
// Create it with [New], create the scheduler with its number and the node
// as transport, then [Node.Start] it with the scheduler:
//
//	node, err := remote.New(remote.Config{Cluster: "shop", Name: "a", URL: url})
//	s, err := scheduler.New(scheduler.WithNode(node.Node()), scheduler.WithTransport(node))
//	err = node.Start(ctx, s)
//	...
//	node.Close(ctx)  // flush, say goodbye, drain
//	s.Shutdown(ctx)
//
// All methods are safe for concurrent use.
type Node struct {
	cfg Config
	num uint32 // this incarnation's number: the Node of its PIDs
	// run is a random nonzero value drawn with num, which tells this run
	// apart from an earlier one that drew the same number and that peers
	// may still remember (see control.go).
	run  uint64
	nc   *nats.Conn
	subj subjects
	log  *slog.Logger // nil: silent

	// state is stateNew, stateStarting, stateRunning, stateClosing or
	// stateClosed. sched is written before state becomes stateRunning
	// and read only after state was seen at stateRunning or later (the
	// atomic store and load order them).
	state atomic.Int32
	sched *scheduler.Scheduler
	// claimedOn is the scheduler whose spawn command the node has
	// claimed, which a Start that failed leaves claimed for the next.
	// Start only (its state change orders the Starts).
	claimedOn *scheduler.Scheduler

	mu sync.Mutex
	// peers maps node numbers to peers, down ones included (kept as
	// tombstones so that their PIDs fail with ErrNodeDown). Replaced
	// copy-on-write with mu held; loaded without a lock on every send.
	peers  atomic.Pointer[map[uint32]*peer]
	byName map[string]*peer // guarded by mu: the live incarnation of each name
	downs  []*peer          // guarded by mu: down peers, oldest first
	// retired holds the counters of the peers forgotten, so that totals
	// do not shrink. Guarded by mu.
	retired linkCounts

	// maxBatch is the largest batch in bytes: half a window, or the
	// server's maximum payload if smaller. Stored at New and on
	// reconnect, loaded by senders; it orders nothing else.
	maxBatch atomic.Int64
	// clock is a coarse clock, nanoseconds since the Unix epoch, stored
	// by the heartbeat goroutine and loaded where a clock call per
	// batch would be waste; it orders nothing else.
	clock atomic.Int64
	// probesFrom is the time from which a probe that finds no one
	// declares a peer down: FailureTimeout after the last reconnect,
	// giving the peers time to reconnect too. Stored by the reconnect
	// handler, loaded by the heartbeat goroutine and probes; it orders nothing else.
	probesFrom atomic.Int64
	// loggedVersion is one more than the last foreign wire version
	// logged (see dropMalformed), so that a node of another version is
	// logged once, not at each of its heartbeats.
	loggedVersion atomic.Uint32
	// cutOff is set while the heartbeat goroutine finds the connection
	// down, until it finds it back. Heartbeat goroutine only.
	cutOff bool

	writer  writer
	dec     decoder // the data subscription's goroutine only
	kinds   kindRegistry
	pending pendingTable // requests sent to other nodes
	held    heldTable    // monitors kept for other nodes
	counts  counters
	// localAwaits is the number of the scheduler's monitors the node
	// keeps on its own processes for awaited spawns: set when such a
	// spawn starts its child here, gone when the child ends or the
	// spawn stops waiting. Tests read it.
	localAwaits atomic.Int64

	notifyMu sync.Mutex
	notifyCh chan struct{} // guarded by notifyMu: closed and replaced on every change

	// inboundHook, if set, is called before each batch is taken: tests
	// stall the receiving side with it. Stored by tests, loaded by the
	// data goroutine; it orders nothing else.
	inboundHook atomic.Pointer[func()]
	// statsHook, if set, is called by Stats after it has read what n.mu
	// guards and before it reads the links: tests forget a peer there.
	// Stored by tests, loaded by Stats; it orders nothing else.
	statsHook atomic.Pointer[func()]
	// publishHook, if set, is called before each data batch is
	// published, and an error it returns fails the publish as one from
	// NATS would: tests make publishes fail with it. Stored by tests,
	// loaded by the writer; it orders nothing else.
	publishHook atomic.Pointer[func(subject string, data []byte) error]

	stop chan struct{} // closed by Close to stop the writer and the heartbeats
	// probing bounds the probes under way; Close cancels it with stop,
	// so that it waits for no answer, which may be a heartbeat away.
	probing    context.Context
	stopProbes context.CancelFunc
	wg         sync.WaitGroup
	connClosed chan struct{} // closed when the NATS connection is closed for good
	closedOnce sync.Once
	subs       []*nats.Subscription // written by New and Start, read by Close
}

// Node states.
const (
	stateNew = iota
	stateStarting
	stateRunning
	stateClosing
	stateClosed
)

// subjects are the NATS subjects of a node. Node numbers, never names,
// appear in subjects: names may hold any character.
type subjects struct {
	prefix string // "procsched.<cluster>"
	all    string // control messages to every node
	ctl    string // control messages to this node
	data   string // batches to this node
}

func newSubjects(cluster string, num uint32) subjects {
	prefix := "procsched." + cluster
	return subjects{
		prefix: prefix,
		all:    prefix + ".ctl",
		ctl:    ctlSubject(prefix, num),
		data:   dataSubject(prefix, num),
	}
}

func ctlSubject(prefix string, num uint32) string {
	return prefix + ".ctl." + strconv.FormatUint(uint64(num), 10)
}

func dataSubject(prefix string, num uint32) string {
	return prefix + ".data." + strconv.FormatUint(uint64(num), 10)
}

// randomNode picks an incarnation number; a variable so that tests can
// make numbers collide.
var randomNode = rand.Uint32

// newRun draws a run value: random, nonzero.
func newRun() uint64 {
	for {
		if r := rand.Uint64(); r != 0 {
			return r
		}
	}
}

// maxNumberTries bounds the attempts to find a free incarnation number.
const maxNumberTries = 8

// minNumberCheck is the shortest wait for an answer from a node holding
// the number drawn: a heartbeat shorter than a round trip to that node
// would make the check prove nothing.
const minNumberCheck = time.Second

// New connects to NATS and picks this node's incarnation number: a random
// nonzero number that no one of the cluster is subscribed for (the
// server says so at once; a server too old to say so makes New wait a
// heartbeat, and at least a second, for an answer). It does not
// join the cluster yet: create the scheduler with [scheduler.WithNode]
// of [Node.Node] and [scheduler.WithTransport] of the node, then call
// [Node.Start]. Config errors wrap [ErrInvalidConfig], an option of
// Config.Options that NATS refuses among them (with the option's own
// error), and leave nothing connected; a failure to connect is returned
// as NATS reports it. With nats.RetryOnFailedConnect among the options,
// NATS returns a connection still trying to connect when no server
// answers: New then closes it and returns an error wrapping
// [ErrDisconnected], since it needs the server to pick the number. A
// subscription that the server refuses for the connection's permissions
// (to the node's control subject, or to the inbox the number check is
// answered on) fails New with an error wrapping
// nats.ErrPermissionViolation. If every number it draws is held, New
// fails with [ErrNameConflict].
func New(cfg Config) (*Node, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	n := &Node{
		cfg:        cfg,
		log:        cfg.Logger,
		byName:     map[string]*peer{},
		notifyCh:   make(chan struct{}),
		stop:       make(chan struct{}),
		connClosed: make(chan struct{}),
		writer:     writer{wake: make(chan struct{}, 1)},
	}
	n.probing, n.stopProbes = context.WithCancel(context.Background())
	empty := map[uint32]*peer{}
	n.peers.Store(&empty)
	n.clock.Store(time.Now().UnixNano())
	if n.nc, err = n.connect(); err != nil {
		return nil, err
	}
	if !n.nc.IsConnected() {
		// nats.RetryOnFailedConnect returns a connection still trying:
		// without a server, no number can be checked.
		n.nc.Close()
		return nil, fmt.Errorf("%w: no NATS server answered at %s", ErrDisconnected, n.cfg.URL)
	}
	n.setMaxBatch()
	n.run = newRun()
	if n.num, err = n.pickNumber(newSubjects(cfg.Cluster, 0).prefix); err != nil {
		n.nc.Close()
		return nil, err
	}
	n.subj = newSubjects(cfg.Cluster, n.num)
	// Answer probes for the number from now on, so that a node starting
	// later picks another.
	before := n.nc.LastError()
	sub, err := n.nc.Subscribe(n.subj.ctl, n.onControl)
	if err == nil {
		err = n.nc.Flush()
	}
	if err == nil {
		err = n.subscriptionRefused(before, n.subj.ctl)
	}
	if err != nil {
		n.nc.Close()
		return nil, fmt.Errorf("remote: subscribing to %s: %w", n.subj.ctl, err)
	}
	n.subs = append(n.subs, sub)
	return n, nil
}

// connect opens the NATS connection with the user's options, wrapping
// the handlers the node needs around the user's own.
func (n *Node) connect() (*nats.Conn, error) {
	user := nats.GetDefaultOptions()
	for i, o := range n.cfg.Options {
		if o == nil {
			continue
		}
		if err := o(&user); err != nil {
			return nil, fmt.Errorf("%w: Options[%d]: %w", ErrInvalidConfig, i, err)
		}
	}
	opts := append([]nats.Option{nats.Name("procsched " + n.cfg.Cluster + "/" + n.cfg.Name)}, n.cfg.Options...)
	opts = append(slices.Clip(opts),
		nats.ReconnectHandler(func(c *nats.Conn) {
			n.onReconnect()
			if user.ReconnectedCB != nil {
				callUser(func() { user.ReconnectedCB(c) })
			}
		}),
		nats.ClosedHandler(func(c *nats.Conn) {
			n.closedOnce.Do(func() { close(n.connClosed) })
			n.onClosed()
			n.notify() // WaitPeer returns, even on a node not started
			if user.ClosedCB != nil {
				callUser(func() { user.ClosedCB(c) })
			}
		}),
		nats.ErrorHandler(func(c *nats.Conn, sub *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrSlowConsumer) {
				n.counts.slowConsumer.Add(1)
			}
			// The node's handler takes the place of NATS's default one,
			// which prints the error. n.num may not be drawn yet.
			args := []any{"name", n.cfg.Name, "err", err}
			if sub != nil {
				args = append(args, "subject", sub.Subject)
			}
			n.logf(slog.LevelError, "remote: NATS reported an error", args...)
			if user.AsyncErrorCB != nil {
				callUser(func() { user.AsyncErrorCB(c, sub, err) })
			}
		}),
	)
	// NATS calls the disconnect handlers, as set, on the goroutine of the
	// handlers above; the node only keeps a Goexit in them from ending it.
	if user.DisconnectedErrCB != nil {
		opts = append(opts, nats.DisconnectErrHandler(func(c *nats.Conn, err error) {
			callUser(func() { user.DisconnectedErrCB(c, err) })
		}))
	}
	if user.DisconnectedCB != nil {
		opts = append(opts, nats.DisconnectHandler(func(c *nats.Conn) {
			callUser(func() { user.DisconnectedCB(c) })
		}))
	}
	return nats.Connect(n.cfg.URL, opts...)
}

// setMaxBatch sets the largest batch from the window and the server's
// limit.
func (n *Node) setMaxBatch() {
	m := int64(n.cfg.Window / 2)
	if p := n.nc.MaxPayload(); p > 0 && p < m {
		m = p
	}
	n.maxBatch.Store(m)
}

// pickNumber finds an incarnation number no node answers for. A number
// is free when the server says that no one is subscribed for it, or, on
// a server that does not say so (one without headers, which "no
// responders" needs), when no one answers within a heartbeat and at
// least minNumberCheck.
func (n *Node) pickNumber(prefix string) (uint32, error) {
	before := n.nc.LastError()
	for range maxNumberTries {
		num := randomNode()
		if num == 0 {
			continue
		}
		probe := appendCtl(nil, ctlMsg{typ: ctlProbe, sender: num, run: n.run})
		_, err := n.nc.Request(ctlSubject(prefix, num), probe, max(n.cfg.Heartbeat, minNumberCheck))
		if errors.Is(err, nats.ErrTimeout) {
			// No answer can come if the server refused the inbox its
			// answers come to.
			if perr := n.subscriptionRefused(before); perr != nil {
				return 0, fmt.Errorf("remote: checking node number %d: %w", num, perr)
			}
		}
		switch {
		case errors.Is(err, nats.ErrNoResponders):
			return num, nil
		case err == nil:
			continue // taken
		case errors.Is(err, nats.ErrTimeout) && n.nc.HeadersSupported():
			// The server reports "no responders", so someone holds the
			// number without answering: a node of another wire
			// version, or one too busy to answer in time.
			continue
		case errors.Is(err, nats.ErrTimeout):
			// A server that does not report "no responders"; the
			// number is taken only if someone answered.
			return num, nil
		default:
			return 0, fmt.Errorf("remote: checking node number %d: %w", num, err)
		}
	}
	return 0, fmt.Errorf("%w: %d random node numbers were all taken", ErrNameConflict, maxNumberTries)
}

// Node returns this node's number, the Node of its scheduler's PIDs. It
// is drawn anew by each [New], so that PIDs of an earlier run of the
// node reach no process of this one, unless it draws the number of that
// run (see "Nodes, incarnations and names" in the package
// documentation).
func (n *Node) Node() uint32 { return n.num }

// Name returns this node's name.
func (n *Node) Name() string { return n.cfg.Name }

// Start joins the cluster with scheduler s, which must have been created
// with [scheduler.WithNode] of n.Node() and [scheduler.WithTransport] of
// n. It claims [Config].SpawnCommand on s for the node's spawn handler
// (see [Spawn] and [scheduler.Scheduler.ClaimHandler]), so that a
// handler registered on that command later is refused with
// [scheduler.ErrCommandTaken]; it subscribes to the node's subjects and
// says hello; ctx bounds the wait for the server to confirm the
// subscriptions (with no deadline, NATS's own flush timeout of 10
// seconds bounds it too). Peers become reachable as they answer (see
// [Node.WaitPeer] and [Hooks]).
//
// If the server refuses one of the node's subscriptions for the
// connection's permissions, Start returns an error wrapping
// nats.ErrPermissionViolation, with the subscriptions it made undone,
// as when ctx ends during the wait.
//
// If s has a handler on the spawn command already, Start returns an
// error wrapping [ErrInvalidConfig] and [scheduler.ErrCommandTaken] and
// does nothing: choose another Config.SpawnCommand. If ctx has ended,
// Start returns an error wrapping ctx's at once and does nothing. If it
// ends during the wait, Start returns that error too, with the
// subscriptions it made undone and nothing started; the spawn handler
// stays claimed on s, failing spawns with [ErrClosed] until a Start
// succeeds. Either way the node is left not started, for another Start
// or for Close. Once a Start has claimed the spawn command on s, a Start
// with another scheduler (of the same node number) is refused with an
// error wrapping [ErrInvalidConfig] while s has not shut down, since
// s's processes would yield their spawns to a node serving another
// scheduler; once s has shut down, it is allowed. Start on a node
// started already, being started, or closed returns an error wrapping
// [ErrClosed] and changes nothing. So does Start on a node whose NATS
// connection has closed for good (it ran out of reconnect attempts, see
// [ErrClosed]), which claims nothing on s: such a node can only be
// closed; if the connection closes for good during the wait, the error
// wraps ErrClosed too. A nil ctx is refused with an error wrapping
// [scheduler.ErrNilContext], and nothing is done.
func (n *Node) Start(ctx context.Context, s *scheduler.Scheduler) error {
	if ctx == nil {
		return fmt.Errorf("%w: Start", scheduler.ErrNilContext)
	}
	if s == nil {
		return fmt.Errorf("%w: Start with a nil scheduler", ErrInvalidConfig)
	}
	if s.Node() != n.num {
		return fmt.Errorf("%w: the scheduler's node is %d, this node's is %d: create it with scheduler.WithNode(node.Node())", ErrInvalidConfig, s.Node(), n.num)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("remote: joining cluster %q: %w", n.cfg.Cluster, err)
	}
	if !n.state.CompareAndSwap(stateNew, stateStarting) {
		return fmt.Errorf("%w: Start called twice or after Close", ErrClosed)
	}
	if n.connLost() {
		n.state.Store(stateNew)
		return fmt.Errorf("%w: node %q lost its NATS connection for good", ErrClosed, n.cfg.Name)
	}
	if n.claimedOn != nil && n.claimedOn != s {
		// The spawn command is claimed on another scheduler of this
		// number, by a Start that failed: its processes would yield
		// spawns to a node serving s. That claim matters no more once
		// that scheduler has shut down, which it tells by refusing
		// every registration with ErrClosed (a claim of a claimed
		// command changes nothing).
		if err := n.claimedOn.ClaimHandler(n.cfg.SpawnCommand, n.handleSpawn); !errors.Is(err, scheduler.ErrClosed) {
			n.state.Store(stateNew)
			return fmt.Errorf("%w: the node's spawn command is claimed on another scheduler, which still runs: start the node with that one, or shut it down first", ErrInvalidConfig)
		}
		n.claimedOn = nil
	}
	if n.claimedOn != s {
		if err := s.ClaimHandler(n.cfg.SpawnCommand, n.handleSpawn); err != nil {
			n.state.Store(stateNew)
			if errors.Is(err, scheduler.ErrCommandTaken) {
				return fmt.Errorf("%w: Config.SpawnCommand: %w", ErrInvalidConfig, err)
			}
			return err
		}
		n.claimedOn = s
	}
	n.sched = s
	var err error
	var subs []*nats.Subscription
	before := n.nc.LastError()
	for _, sub := range []struct {
		subject string
		handler nats.MsgHandler
	}{{n.subj.data, n.onData}, {n.subj.all, n.onControl}} {
		var x *nats.Subscription
		if x, err = n.nc.Subscribe(sub.subject, sub.handler); err != nil {
			break
		}
		subs = append(subs, x)
		if l := dataPendingLimits; sub.subject == n.subj.data && l.msgs != 0 {
			if err = x.SetPendingLimits(l.msgs, l.bytes); err != nil {
				break
			}
		}
	}
	if err == nil {
		err = n.flush(ctx)
	}
	if err == nil {
		// A context that ended during the wait fails the Start, as its
		// doc says, even when the server's answer came too: the flush
		// picks either when both are there.
		err = ctx.Err()
	}
	if err == nil {
		err = n.subscriptionRefused(before, n.subj.data, n.subj.all)
	}
	if err != nil {
		for _, x := range subs {
			_ = x.Unsubscribe()
		}
		n.state.Store(stateNew)
		if n.connLost() {
			err = fmt.Errorf("%w: %w", ErrClosed, err)
		}
		return fmt.Errorf("remote: joining cluster %q: %w", n.cfg.Cluster, err)
	}
	n.subs = append(n.subs, subs...)
	n.clock.Store(time.Now().UnixNano())
	n.state.Store(stateRunning)
	n.wg.Add(2)
	go func() {
		defer n.wg.Done()
		n.writer.run(n.stop)
	}()
	go n.heartbeats()
	n.publishCtl(n.subj.all, ctlMsg{typ: ctlHello})
	return nil
}

// subscriptionRefused returns the server's refusal of a subscription to
// one of subjects (any subscription if none are given) for the
// connection's permissions, if the connection's last error is one and
// is not before, its last error before the subscriptions were made; nil
// otherwise. The server reports the refusal before it answers the flush
// that follows the subscriptions, and NATS records it as the
// connection's last error as it reads it, so once a flush is done, or a
// request has timed out, this finds it. New and Start only.
func (n *Node) subscriptionRefused(before error, subjects ...string) error {
	err := n.nc.LastError()
	if !errors.Is(err, nats.ErrPermissionViolation) || err == before {
		return nil
	}
	if len(subjects) == 0 && strings.Contains(err.Error(), "Subscription to ") {
		return fmt.Errorf("the server refused a subscription: %w", err)
	}
	for _, subject := range subjects {
		if strings.Contains(err.Error(), "Subscription to \""+subject+"\"") {
			return fmt.Errorf("the server refused the subscription to %s: %w", subject, err)
		}
	}
	return nil
}

// running reports whether the node is started and not closing.
func (n *Node) running() bool { return n.state.Load() == stateRunning }

// closing reports whether Close has begun.
func (n *Node) closing() bool { return n.state.Load() >= stateClosing }

// gone reports whether the node is done with its peers: Close has begun,
// or the NATS connection has closed for good. Any goroutine.
func (n *Node) gone() bool {
	return n.closing() || n.connLost()
}

// connLost reports whether the NATS connection has closed for good.
// Any goroutine.
func (n *Node) connLost() bool {
	select {
	case <-n.connClosed:
		return true
	default:
		return false
	}
}

// notRunning is the error for a send when the node is not running.
func (n *Node) notRunning() error {
	if n.state.Load() < stateRunning {
		return fmt.Errorf("%w: node %q is not started", ErrClosed, n.cfg.Name)
	}
	return fmt.Errorf("%w: node %q is closing", ErrClosed, n.cfg.Name)
}

// The node carries messages for the scheduler's other nodes.
var _ relay.Receiver = (*Node)(nil)

// Send carries msg to the process msg.To on another node; it implements
// [relay.Receiver] for [scheduler.WithTransport]. It never blocks: the
// message is encoded into the batch waiting for that node and goes out
// as soon as the connection is free. A nil error means the message was
// accepted for sending, not that it arrived; a failure learned later
// comes back to the sender as an undelivered message (see the package
// documentation).
//
// It fails at once with an error wrapping [ErrUnknownNode] or
// [ErrNodeDown] (both also [scheduler.ErrProcessNotFound]) when the
// node is unknown or down, [ErrBackpressure] (also
// [scheduler.ErrMailboxFull]) when too much waits for that node,
// [ErrNotEncodable] for a message that cannot cross, and [ErrClosed]
// before Start, from Close on, and once the NATS connection has closed
// for good. A msg with Err set is an undelivered
// message going back to its sender on another node. An answer
// ([scheduler.Reply]) refused with ErrNotEncodable or ErrBackpressure
// reaches its asker as that error, with the answer's own if any, so
// that the asker does not wait for one that never comes.
func (n *Node) Send(msg relay.Message) error {
	if msg.To.Node == n.num && n.running() {
		return n.sched.Send(msg)
	}
	err := n.send(msg)
	if err != nil {
		n.counts.refused(err)
	}
	return err
}

// send is Send for a PID of another node.
func (n *Node) send(msg relay.Message) error {
	if !n.running() {
		return n.notRunning()
	}
	p := n.peer(msg.To.Node)
	switch {
	case p == nil:
		return fmt.Errorf("%w: node %d of %v", ErrUnknownNode, msg.To.Node, msg.To)
	case msg.To.ID == 0:
		return fmt.Errorf("%w: %v", scheduler.ErrProcessNotFound, msg.To)
	case msg.From.Node != n.num && !msg.From.IsZero():
		return fmt.Errorf("%w: sender %v is not a process of this node (%d)", ErrNotEncodable, msg.From, n.num)
	}
	body, err := wireBody(msg.Data)
	if err == nil && msg.Err == nil {
		err = p.link.sendMessage(msg, body)
	}
	if err != nil && msg.Err == nil {
		n.answerRefused(p, msg, err)
	}
	switch {
	case err != nil || msg.Err == nil:
		return err
	case msg.From.IsZero():
		return nil // an undelivered message with no recipient to name
	}
	// An undelivered message going back to its sender there: the bounce
	// frame's From is the process here that was not reached.
	return p.link.sendBounce(msg.From, msg.To, msg.Err, body)
}

// answerRefused tells the asker of msg, if it is an answer
// ([scheduler.Reply]) refused with err, that it was: an answer refused
// would leave its asker waiting. The asker gets the reason instead, as
// the answer's error, in a frame that answers the peer (see
// link.reserve), or, when the room of answers is full, in one that is
// never refused for room. Any goroutine.
func (n *Node) answerRefused(p *peer, msg relay.Message, err error) {
	reply, ok := msg.Data.(scheduler.Reply)
	if !ok || !(errors.Is(err, ErrNotEncodable) || errors.Is(err, ErrBackpressure)) {
		return
	}
	reply.Data, reply.Err = nil, errors.Join(reply.Err, fmt.Errorf("the answer was refused: %w", err))
	if errors.Is(p.link.sendRefusedAnswer(msg.From, msg.To, reply, roomAnswer), ErrBackpressure) {
		// The room of answers is full too: the asker would wait for its
		// timeout, or for ever.
		_ = p.link.sendRefusedAnswer(msg.From, msg.To, reply, roomAlways)
	}
}

// peer returns the peer with number num, live or down, or nil. Any
// goroutine; no lock.
func (n *Node) peer(num uint32) *peer {
	return (*n.peers.Load())[num]
}

// publishCtl sends a control message, best effort: a lost one is made up
// for by the next heartbeat or retry. Any goroutine.
func (n *Node) publishCtl(subject string, m ctlMsg) {
	m.sender, m.run, m.name = n.num, n.run, n.cfg.Name
	var buf [64 + maxNameLen]byte
	_ = n.nc.Publish(subject, appendCtl(buf[:0], m))
}

// publish publishes a data batch (or sync marker) on subject. Writer
// goroutine only.
func (n *Node) publish(subject string, data []byte) error {
	if hook := n.publishHook.Load(); hook != nil {
		if err := (*hook)(subject, data); err != nil {
			return err
		}
	}
	return n.nc.Publish(subject, data)
}

// returnAll hands messages that will not be sent back to their senders
// with err: each becomes an undelivered message from its recipient.
// Messages from outside any process have no one to go back to, and are
// only counted. Any goroutine, holding no link's mu.
func (n *Node) returnAll(p *peer, msgs []relay.Message, err error) {
	for _, m := range msgs {
		n.counts.returned(err) // before the hand-off; see deliver
		if !m.From.IsZero() {
			_ = n.sched.Send(relay.Message{From: m.To, To: m.From, Data: m.Data, Err: err})
		}
	}
}

// publishError is the sentinel for a publish that failed with err, which
// the messages of the batch go back to their senders with: ErrClosed if
// the connection has closed for good; ErrNotEncodable if the batch
// exceeds the server's payload limit (lower, after a reconnect, than the
// one it was built for); ErrBackpressure if NATS's buffer for what is
// published while it reconnects is full; ErrDisconnected for anything
// else. Writer goroutine.
func publishError(err error) error {
	switch {
	case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrConnectionDraining):
		return ErrClosed
	case errors.Is(err, nats.ErrMaxPayload):
		return ErrNotEncodable
	case errors.Is(err, nats.ErrReconnectBufExceeded):
		return ErrBackpressure
	}
	return ErrDisconnected
}

// onReconnect runs on NATS's goroutine after the connection came back.
// Each link waits until its peer is heard from (so has subscribed again)
// before it publishes, and then asks the peer to grant what it has taken,
// since batches may have been lost in flight. Peers get FailureTimeout to
// reconnect before a probe that finds no one declares them down, and the
// silence before the reconnect does not count.
func (n *Node) onReconnect() {
	now := time.Now().UnixNano()
	n.clock.Store(now)
	n.restartClocks(now)
	n.setMaxBatch()
	n.counts.reconnects.Add(1)
	for _, p := range *n.peers.Load() {
		p.link.pause()
		p.link.requestSync()
	}
}

// restartClocks makes the silence of every peer count from now, and a
// probe that finds no one count only FailureTimeout from now: this
// node's connection has come back, and the peers get that long to
// reconnect too. Any goroutine.
func (n *Node) restartClocks(now int64) {
	n.probesFrom.Store(now + min(int64(n.cfg.FailureTimeout), math.MaxInt64-now)) // the longest timeouts end at the end of time
	for _, p := range *n.peers.Load() {
		p.heard(now)
	}
}

// onClosed runs on NATS's goroutine when the connection has closed for
// good (it ran out of reconnect attempts) while the node runs: nothing
// can be sent any more, so the messages waiting go back to their senders,
// the pending requests complete, and sends to peers fail, all with
// ErrClosed, as after Close. Close, which closes the connection itself,
// does this on its own.
func (n *Node) onClosed() {
	if !n.running() {
		return
	}
	n.logf(slog.LevelError, "remote: the NATS connection closed", "node", n.num, "name", n.cfg.Name)
	n.failEverything(fmt.Errorf("%w: node %q lost its NATS connection for good", ErrClosed, n.cfg.Name))
}

// failEverything fails what this node still holds for its peers, with
// err: each link's waiting messages go back to their senders, later
// sends to it fail, the pending requests complete, the monitors held
// for peers stop, and no name finds a peer any more. Called by Close and by onClosed; a second call finds
// nothing left.
func (n *Node) failEverything(err error) {
	for _, p := range *n.peers.Load() {
		if waiting, _ := p.link.fail(err); len(waiting) > 0 {
			n.returnAll(p, waiting, err)
		}
	}
	n.pending.failAll(err)
	n.held.close()
	n.mu.Lock()
	clear(n.byName) // it knows no peer any more: Lookup finds none
	n.mu.Unlock()
	n.notify()
}

// notify wakes everyone waiting for a change (a peer up or down, or
// progress while closing). Any goroutine.
func (n *Node) notify() {
	n.notifyMu.Lock()
	close(n.notifyCh)
	n.notifyCh = make(chan struct{})
	n.notifyMu.Unlock()
}

// changes returns a channel closed at the next notify. Any goroutine.
func (n *Node) changes() <-chan struct{} {
	n.notifyMu.Lock()
	defer n.notifyMu.Unlock()
	return n.notifyCh
}

// progressed tells Close that a link made progress; nothing while not
// closing. Any goroutine.
func (n *Node) progressed() {
	if n.closing() {
		n.notify()
	}
}

// Close leaves the cluster: sends from now on fail with [ErrClosed]; the
// messages waiting are published and the node waits until every peer
// has granted them, or ctx is done (those still waiting then go back to
// their senders with ErrClosed); it says goodbye, so that peers declare
// it down at once; and it drains the NATS connection, waiting for the
// server to confirm what the node published until ctx is done (with no
// deadline, 10 seconds at most). Close the node before shutting its
// scheduler down, so that the messages it delivers meanwhile still find
// their processes.
//
// It returns ctx's error, wrapped, if ctx ended the wait for the peers.
// If the server did not confirm the node's last messages, the goodbye
// among them (its connection was down, or the server did not answer in
// time, as when its machine vanished), Close returns an error wrapping
// [ErrDisconnected] and the cause (ctx's error, or
// [context.DeadlineExceeded] for the 10 seconds): those messages may
// not have reached anyone, and the peers then declare the node down by
// its silence. Once the connection has closed for good, before Close or
// while it waits for the peers, there is nothing to confirm: what still
// waits goes back to its senders with ErrClosed, and Close returns nil.
// The node is closed either way. A second Close, or one during Start,
// returns an error wrapping [ErrClosed]. A nil ctx is refused with an
// error wrapping [scheduler.ErrNilContext], and the node is left as it
// was.
func (n *Node) Close(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("%w: Close", scheduler.ErrNilContext)
	}
	if n.state.CompareAndSwap(stateNew, stateClosed) {
		n.stopProbes()
		n.closeConn()
		n.notify() // WaitPeer returns
		return nil
	}
	if !n.state.CompareAndSwap(stateRunning, stateClosing) {
		return fmt.Errorf("%w: Close called twice or during Start", ErrClosed)
	}
	n.notify() // WaitPeer returns
	var err error
	for _, p := range *n.peers.Load() {
		p.link.requestSync()
	}
	for {
		ch := n.changes()
		if n.drained() {
			break
		}
		select {
		case <-ch:
			continue
		case <-ctx.Done():
			err = fmt.Errorf("remote: node %q closed before every peer took its messages: %w", n.cfg.Name, ctx.Err())
		case <-n.connClosed:
			// Nothing can leave any more: what waits goes back to its
			// senders below, and there is nothing to confirm.
		}
		break
	}
	n.publishCtl(n.subj.all, ctlMsg{typ: ctlBye})
	close(n.stop)
	n.stopProbes()
	n.wg.Wait()
	n.failEverything(fmt.Errorf("%w: node %q closed", ErrClosed, n.cfg.Name))
	if derr := n.drain(ctx); err == nil && derr != nil {
		err = fmt.Errorf("remote: node %q closed, but the server did not confirm its last messages: %w", n.cfg.Name, derr)
	}
	n.state.Store(stateClosed)
	return err
}

// drain stops the subscriptions, lets their handlers take what has
// arrived, flushes what was published and closes the connection, all
// within ctx, or flushTimeout if ctx has no deadline. It returns an
// error wrapping ErrDisconnected if the server did not confirm what was
// published, unless the connection had closed for good.
// NATS's own Drain would do the same, but its goroutine outlives a
// connection that closes under it by up to the drain timeout; here
// nothing outlives Close. Close only.
func (n *Node) drain(ctx context.Context) error {
	if st := n.nc.Status(); st != nats.CONNECTED {
		// Nothing can be taken or flushed without the server.
		n.closeConn()
		if st == nats.CLOSED {
			return nil // closed for good, which sends have reported already
		}
		return fmt.Errorf("%w: the connection is down", ErrDisconnected)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, flushTimeout)
		defer cancel()
	}
	var waits []<-chan nats.SubStatus
	for _, sub := range n.subs {
		waits = append(waits, sub.StatusChanged(nats.SubscriptionClosed))
		_ = sub.Drain()
	}
	for _, ch := range waits {
		select {
		case <-ch:
		case <-n.connClosed:
		case <-ctx.Done():
		}
	}
	err := n.nc.FlushWithContext(ctx)
	n.closeConn()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrDisconnected, err)
	}
	return nil
}

// closeConn closes the NATS connection and waits until the node's
// closed handler has run, so that none of the node's work outlives
// Close. With nats.NoCallbacksAfterClientClose among Config.Options,
// NATS calls no handler for a close of the client's own, and the
// connection is closed once nc.Close returns. Close and drain only.
func (n *Node) closeConn() {
	n.nc.Close()
	if n.nc.Opts.NoCallbacksAfterClientClose {
		n.closedOnce.Do(func() { close(n.connClosed) })
	}
	<-n.connClosed
}

// dataPendingLimits, if its message count is not zero, replaces NATS's
// limits of what may wait in the client for the data subscription (see
// nats.Subscription.SetPendingLimits): tests make a slow consumer with
// a tiny one. Read by Start.
var dataPendingLimits struct{ msgs, bytes int }

// flushTimeout bounds a flush whose context has no deadline: NATS's own
// Flush waits as long. A variable so that tests can shorten it.
var flushTimeout = 10 * time.Second

// flush waits until the server has processed everything published so
// far, or ctx is done, or flushTimeout has passed if ctx has no
// deadline; NATS's FlushWithContext needs a deadline, and its Flush
// ignores ctx. Start and Close only.
func (n *Node) flush(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, flushTimeout)
		defer cancel()
	}
	return n.nc.FlushWithContext(ctx)
}

// drained reports whether every live link has published everything and
// had it granted. Any goroutine.
func (n *Node) drained() bool {
	for _, p := range *n.peers.Load() {
		if !p.link.idle() {
			return false
		}
	}
	return true
}

// logf logs at level if the node has a logger. Any goroutine.
func (n *Node) logf(level slog.Level, msg string, args ...any) {
	if n.log != nil {
		callUser(func() { n.log.Log(context.Background(), level, msg, args...) })
	}
}

// callUser calls f, the user's code (a hook, the logger's handler, a
// NATS handler set in Config.Options), on a goroutine of its own and
// waits for it to return. So a runtime.Goexit in f ends that goroutine
// only, and counts as f's return: the goroutine that called it goes on,
// whether it is one of NATS's, which NATS would not replace (a
// subscription's, which would hear nothing more, or the one that calls
// the connection's handlers, without which Close would wait for ever for
// the closed handler), or the node's own. A panic in f is not
// recovered, and ends the program, as the panic of any goroutine does.
// The node calls user code only when something seldom happens (a peer
// comes or goes, a connection event, a log record), never per message,
// so the goroutine costs nothing that matters.
func callUser(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	<-done
}
