// Package remote lets the processes of schedulers on different machines
// send each other messages by PID, spawn and monitor processes on each
// other's nodes, over core NATS.
//
// A [Node] is one scheduler's member of a cluster. It implements
// [relay.Receiver]: given to [scheduler.WithTransport], it receives every
// message for a PID of another node, from [scheduler.Scheduler.Send] and
// Tell, from processes' [scheduler.StepOutput.Tell], and messages
// returned to senders on other nodes. Code that tells a PID needs no
// change when the PID lives elsewhere: the recipient gets the same event,
// and a failure comes back the same way, matching the same sentinel
// errors.
//
// # Joining
//
// The scheduler takes its node number and its transport as options, and
// the node needs the scheduler to deliver to: [New] connects and picks
// the number, the scheduler is created with it, and [Node.Start] ties
// them together and joins.
//
//	node, err := remote.New(remote.Config{Cluster: "shop", Name: "a", URL: url})
//	s, err := scheduler.New(scheduler.WithNode(node.Node()), scheduler.WithTransport(node))
//	err = node.Start(ctx, s)
//	defer s.Shutdown(ctx)
//	defer node.Close(ctx) // first: flush, say goodbye, drain
//
// A node uses one NATS connection, made from [Config].URL and
// [Config].Options, which pass to nats.Connect as they are: TLS,
// credentials, NKeys, user and password. The connection is the node's:
// [Node.Close] closes it. The node authenticates nobody
// itself: whoever may publish on the cluster's subjects can send to its
// processes and start its registered kinds, so the bus's accounts and
// subject permissions are the trust boundary.
//
// # Nodes, incarnations and names
//
// A node's number is its incarnation: a random nonzero 32-bit number
// drawn at each start, after asking the bus whether anyone holds it. It is the Node of every PID of its scheduler, so a PID from before
// a restart names a number no node has any more, and a message to it
// bounces with [ErrNodeDown] (a [scheduler.ErrProcessNotFound]) instead
// of reaching a new process that happens to have the same ID.
//
// With the number, each start draws a random 64-bit run value, which
// travels in every control message and, folded with the receiver's, in
// every batch header. A node that is gone no longer answers for its
// number, so a restarted node may draw the number of an earlier run
// that its peers still remember (down, or not yet found gone); the run
// tells the two apart. A peer takes the new run for a new incarnation:
// it declares the earlier one down if it was not yet (its waiting
// messages come back with [ErrNodeDown]), forgets it, and joins the new
// one; whatever of the earlier run is still on its way, a batch or a
// control message, to or from it, is dropped, so sequence numbers,
// grants and "you are down" of one run never apply to the other. The
// PIDs of the earlier run then name the new one's processes, as its
// number does: a node remembers at most 1,024 down runs besides its live
// peers, among four billion numbers, so this happens at most about once
// in four million restarts.
//
// Names are for people and for [Spawn]: each node learns the others'
// names from their hellos and heartbeats; [Node.Named] prints a PID with
// its node's name, and [Node.Lookup] finds the number of a name. Process
// names ([scheduler.Scheduler.Register]) do not cross: TellName and
// RequestName find processes of their own node only, and a process of
// another node is reached by its PID.
//
// # Subjects
//
// Every subject starts with "procsched.<cluster>". Numbers, never names,
// appear in subjects, so any name is allowed; a node has two subjects of
// its own, never one per process, so spawning costs no subscription.
//
//	procsched.<cluster>.ctl          hello, heartbeat, goodbye: to every node
//	procsched.<cluster>.ctl.<node>   hello to a node not joined yet, ack, credit grant,
//	                                 "you are down", probe: to one node
//	procsched.<cluster>.data.<node>  batches of frames to one node: messages,
//	                                 bounces, spawns and monitors
//
// Control traffic has its own subjects, and each subscription is served
// by its own goroutine, so a heartbeat or a grant is never queued behind
// data the receiver has not taken yet. On the sending side all traffic
// shares the connection, but the credit window bounds the data in front
// of a control message to one window.
//
// # Batches and frames
//
// Each peer has one ordered outbound buffer, filled under one mutex by
// whichever goroutine sends (a worker, a handler, the node itself), and
// one writer goroutine publishes the buffers of all peers. A peer's
// batch is published as soon as the previous publish is done, with no
// timer: a lone message goes out at once, and the messages of a burst
// that arrive meanwhile go out together, as one NATS message of up to
// half a credit window (and never more than the server's maximum
// payload). Order is decided at that one point per peer, not per worker,
// so a process that moves between workers keeps its order.
//
// A batch is a 22-byte header (wire version, flags, sender number, link
// key: the sender's run XOR the receiver's, sequence number) and frames: a kind byte and varint fields. A frame names its
// recipient and sender by process ID alone, since the recipient is on
// the receiving node and the sender on the sending one; the first use of
// an ID or a text (a kind name, an error text) in a batch carries it, and
// later ones name its index in the batch's table (an encoder keeps the
// IDs of a batch in a 256-entry cache, so an ID may be sent again when
// many are in use). Bodies use the payload
// package's wire formats. Decoding checks every length against the bytes
// left, so hostile input can only fail, never panic or allocate more
// than its own size; a batch that fails to decode delivers nothing, and
// is counted, as is one from a node that has not joined or is down, one
// from or for another run of its sender's or its receiver's number, or
// one whose sequence number was seen already.
//
// A control message is a 22-byte header (wire version, type, sender
// number, sender's run, and the receiver's run for a message to one
// node, 0 for one to all) and its fields: a name, flags or a sequence
// number. Both kinds start with the wire version, 2: a node drops what
// carries another version, counting it as malformed and logging the
// first at Error, so nodes of different versions never join, nor read
// each other's messages. A probe is answered whatever its version, and
// a number someone holds without answering counts as taken (on a server
// that reports "no responders"), so no node takes a number held by one
// of another version.
//
// # Credit
//
// Each link has a window of credit in bytes ([Config].Window). The
// sender publishes a batch only while the bytes it has published and not
// yet had granted stay within the window; the receiver grants, naming
// the last sequence number it has taken, each time it has taken a
// quarter of its own window, and at once for a batch flagged "sync".
// The sender flags the batch that brings its bytes in flight to half its
// window, so that a receiver with a larger window grants in time, and
// publishes an empty sync batch when a grant is overdue (a batch lost in
// flight holds credit until a later one is granted), after a reconnect,
// and when closing. So a slow receiver never has more than a window per peer
// waiting at the server or in its client, and the server never cuts it
// off as a slow consumer. Behind the window, the bytes waiting to be
// published to a peer are bounded by [Config].MaxBuffered: a send beyond
// it fails at once with [ErrBackpressure], which matches
// [scheduler.ErrMailboxFull], so a sender handles a congested node as it
// handles a full mailbox with the reject policy. Messages going back to
// their senders may use the same amount again before they are dropped.
// What ends a monitor, a spawn or a request is never refused for room, so
// that no node waits or holds for ever: a demonitor, a few bytes for a
// monitor the peer holds and this node has forgotten; and, once the room
// of answers is full, the answer to a spawn, the end of a watched
// process (the error then matches [ErrBackpressure]) and the answer to a
// request that replaces one refused, without the result or data and with
// at most 1 KiB of error text.
//
// # Membership and failure detection
//
// A node says hello when it starts and sends a heartbeat every
// [Config].Heartbeat. A node publishes data to a peer only after the peer
// has shown that it has registered the node (an ack, or a hello sent to
// it alone), since a node drops batches from nodes it does not know;
// until then messages wait in the link. A peer silent for two heartbeats
// is probed with a NATS request to its control subject: "no responders"
// means its subscription is gone, which the server knows as soon as its
// connection closes, so a crashed peer is declared down within about
// three heartbeats. A peer silent for [Config].FailureTimeout (this
// node's, whatever the peer's Heartbeat) is declared down whatever the
// probe says; a peer that says goodbye is
// declared down at once. A down peer stays down: its later messages are
// dropped, it is told so that it declares this node down too, and only a
// restart (a new incarnation) brings it back. While this node's own
// connection is down it judges no one; once it is back, peers get
// FailureTimeout, counted from then, to reconnect before their silence
// or a probe counts, so an outage of the server declares no one down by
// itself; and each link
// publishes again only once its peer is heard from, so that nothing is
// published to a peer that has not subscribed again yet.
//
// When a peer is declared down, the messages still waiting for it go
// back to their senders with [ErrNodeDown], its pending spawns and
// monitors complete with it, and sends to its PIDs fail with it.
//
// # Delivery guarantee
//
// At most once, and in order per sender and recipient: the messages one
// process sends to one process arrive in the order sent, each at most
// once (a batch seen twice is dropped by its sequence number).
//
// A message comes back to its sender, as an undelivered message whose
// error says why, whenever its failure is known: the recipient had ended
// or its mailbox was full (reported by the receiving node), the node was
// unknown, down, or congested (refused at once), the message could not
// be encoded (refused at once), NATS refused its batch
// ([ErrDisconnected] if the connection failed, [ErrBackpressure] if
// NATS's buffer for a reconnect was full, [ErrNotEncodable] if the batch
// exceeds the limit of a server reached after a reconnect), or the node
// closed, or its connection closed for good (no reconnect attempts
// left), before the message left ([ErrClosed]). A message sent from
// outside any process has no one to come back to: its failures are only
// counted. A spawn or monitor request in a batch NATS refused fails with
// the same error at once, since no answer can come (a monitor completes
// with ExitGone, though its process may be alive). The other frames of
// such a batch (bounces, answers to spawns, ends of watched processes,
// the forgetting of a monitor) must reach the other node all the same,
// or it would wait, or hold a monitor, until a node goes down: they go
// in a later batch, before everything sent after them, tried again with
// the next send, grant or heartbeat, or once the peer is heard from
// after a reconnect, and dropped only if the peer goes down or this node
// closes first. An answer ([scheduler.Reply]) in such a batch comes back
// to its sender as every message does, and its asker gets, in the same
// way, the answer without data with the same error, as when an answer is
// refused at once.
//
// What it does not promise: a message published and then lost — in
// flight when the receiving node crashed, or dropped by the bus around a
// server restart — does not come back, since the sender cannot know
// whether it arrived; the receiver counts the gap in sequence numbers.
// No batch published is sent again, and nothing is ordered across
// different senders or recipients. A spawn or monitor whose answer is lost in
// flight stays pending until its node goes down, this node closes, or
// its caller stops waiting: bound the wait with a timeout where that
// matters (a yield's [scheduler.StepOutput.Timeout], [Node.Spawn]'s
// context), and the request is forgotten when it passes.
//
// # Message bodies
//
// A body crosses if it is nil, a string, a []byte, a [relay.PID], a
// [payload.Payload] or [payload.Payloads]; the receiver gets the same
// type and value, except that a payload holding a Go value
// ([payload.Of]) is encoded as JSON at the sender and arrives as a JSON
// payload, which [payload.Payload.Decode] and [payload.As] read into the
// same Go types. A request ([scheduler.StepOutput.Request]) to a process
// of another node arrives as the same [scheduler.Request], its body by
// the same rule, and the answer ([scheduler.StepOutput.Reply]) goes back
// as a [scheduler.Reply], its error as an [*Error]; so request and reply
// work across nodes as within one, but for the watch of the replier: a
// request to a process of another node is not told when that process
// ends without answering, or its node goes down, once it has the
// request, and waits for its [scheduler.StepOutput.Timeout] (give every
// such request one; a monitor of the replier tells of its end at once).
// Anything else as a body, or a Go value JSON cannot encode, is
// refused at the sender with [ErrNotEncodable] (wrapping
// [payload.ErrEncode] for the latter). An answer whose data cannot
// cross, or is too large, is refused so too, and the asker's request
// completes with that error instead of waiting, as it does with
// [ErrBackpressure] for an answer refused because too much waits for the
// asker's node. A Go value's MarshalJSON runs on the goroutine that
// sends it (the worker carrying out a Tell, the caller of [Node.Send] or
// [Node.Spawn]), before the node takes any lock: a panic in it reaches
// that goroutine as the json package passes it on, and a
// [runtime.Goexit] ends that goroutine; either way nothing is sent, and
// nothing is left locked. The result of a process that another node
// awaits or monitors is encoded on the goroutine the scheduler's
// monitor calls: a panic in its MarshalJSON ends the program, and a
// Goexit sends the end without the result, its error matching
// [ErrNotEncodable] and [scheduler.ErrGoexit], as for a result JSON
// cannot encode, so the watcher is not left waiting. A
// received []byte, string or
// payload content shares the memory of the batch it came in, so a
// receiver that keeps a small part of a large body for long keeps the
// batch (at most half a window) alive.
//
// # Errors
//
// A failure reported by another node arrives as an [*Error] carrying the
// node's name, the process concerned and the original text, and matching
// with [errors.Is] every sentinel error of this package, of the
// scheduler, of payload and of relay that the original matched there, so the same check works for local
// and remote failures: errors.Is(err, scheduler.ErrProcessNotFound)
// holds for an ended process on this node, an ended one on another, and
// every process of a down or unknown node.
//
// # Remote spawn and monitors
//
// [Node.Start] claims a command on the scheduler for its handler
// ([Config].SpawnCommand; no other handler may have it): a process
// yields [Spawn] with [Node.SpawnCommand] to start a process of a kind
// registered with [Node.Register] on a named node, optionally awaiting
// its end. A monitor ([scheduler.StepOutput.Monitor]) of a process of
// another node works as one of a local process: the node implements
// [scheduler.RemoteMonitor], asks the process's node to watch it with its
// scheduler's own monitor, and completes the yield with the
// [scheduler.Exit] that node reports, or with [scheduler.ExitGone] and
// [ErrNodeDown] when the node goes down first. A monitor or a spawn
// request is sent as a message is: one that finds too much waiting for
// its node is refused at once with [ErrBackpressure] (a monitor then
// completes with ExitGone, though its process may be alive). A monitor or a spawn the
// process cancels or times out, or whose process ends, is forgotten at
// once, here and, for a monitor or an awaited spawn's watch of its
// child, on the other node (the node waits on the yield's call context
// with context.AfterFunc); an awaited spawn's watch of a child started
// on this node stops at once too. The child of a forgotten spawn runs on, as
// the child of a cancelled SpawnAwait does. Monitors held for a node
// that goes down are dropped. A node holds one monitor per request
// number of a peer: a request under a number the peer uses already,
// which only a broken or hostile peer sends, replaces the monitor held
// under it, which stops. [Node.Spawn] and [Node.Monitor] do the
// same for code outside any process: a Spawn whose context ends forgets
// its request.
//
// # Concurrency
//
// All methods of [Node] are safe for concurrent use. [Node.Send] never
// blocks: it only encodes the message into the peer's buffer under that
// peer's mutex. The node's goroutines wait for its hooks, which must
// not block (see [Hooks]). See docs/remote.md for tuning and the counters of [Node.Stats].
package remote
