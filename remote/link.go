package remote

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	scheduler "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// link is the way out to one peer: the frames waiting to be published,
// in the order their senders handed them in, and the credit the peer has
// granted. Order is decided here, under one mutex per peer, and nowhere
// else: the node's writer publishes a link's batches one after the other
// on one connection and subject, which NATS delivers in order, and the
// peer hands them to its scheduler in that order. So two sends by one
// process reach the peer in the order made, even when the process moved
// to another worker between them.
type link struct {
	n       *Node
	peer    *peer
	subject string // the peer's data subject
	key     uint64 // the link key of batches to and from the peer's run (see frame.go)

	// state is linkJoining, linkOpen or linkDown. Written with mu held;
	// loaded without it by the receive path, which only needs to see a
	// down peer soon, not at an exact point.
	state atomic.Int32
	// paused is set while the link may not publish although open: this
	// node's connection went down, and the peer has not been heard from
	// since. Batches published then would reach the server before the
	// peer has subscribed again, and be lost. Written with mu held;
	// loaded without it by the receive path to resume the link.
	paused atomic.Bool

	mu sync.Mutex
	// Guarded by mu:
	reason   error       // why the peer is down: the error sends to it fail with
	open     *outBatch   // the batch being filled; nil if none
	sealed   []*outBatch // full batches waiting, oldest first
	spare    []*outBatch // reusable batches
	buffered int         // bytes of frames in open and sealed
	inflight []sentBatch // published, not yet granted, oldest first
	inBytes  int         // bytes of inflight
	seq      uint64      // sequence of the last batch published
	queued   bool        // on the writer's queue, or being flushed
	stalled  bool        // waiting for credit
	wantSync bool        // publish a sync marker after the pending batches
	retry    bool        // NATS refused a batch whose kept frames wait: the heartbeat queues the link again
	grantAt  int64       // the node clock at the last grant, or when inflight became non-empty
	counts   linkCounts
}

// Link states.
const (
	linkJoining = iota // the peer does not know this node yet: frames wait
	linkOpen           // batches are published
	linkDown           // the peer was declared down: sends fail
)

// linkCounts are a link's counters, guarded by its mu.
type linkCounts struct {
	frames, bytes, batches, stalls, markers uint64
	publishFailed                           uint64
}

// add adds o's counts to c.
func (c *linkCounts) add(o *linkCounts) {
	c.frames += o.frames
	c.bytes += o.bytes
	c.batches += o.batches
	c.stalls += o.stalls
	c.markers += o.markers
	c.publishFailed += o.publishFailed
}

// outBatch is a batch being built or waiting to be published, with the
// messages in it as they were handed in, so that they can go back to
// their senders undelivered if the batch is never published, the
// numbers of the spawn and monitor requests in it, which then fail, and
// the frames that must go all the same (see keptFrame).
type outBatch struct {
	enc   batchEncoder
	origs []relay.Message
	reqs  []uint64
	keep  []keptFrame
	bytes int // frame bytes (size minus the header)
}

// keptFrame is a frame that must reach the peer even if NATS refuses the
// batch it is in: an answer, a bounce, a spawn's answer, the end of a
// watched process or the cancelling of a monitor. Nothing else would
// tell the peer, which would wait, or hold a monitor, until one of the
// nodes goes down. Its frame is written again, by encode, in a batch of
// its own that goes before everything else waiting for the peer (see
// link.keepRefused): frames refer to their batch's tables, so its bytes
// cannot be moved.
type keptFrame struct {
	bound  int // the frame's bound, as reserved
	after  int // how many messages of its batch were before it
	encode func(*batchEncoder)
}

// sentBatch is a published batch awaiting its grant.
type sentBatch struct {
	seq  uint64
	size int
}

// maxSpare is how many emptied batches a link keeps for reuse: one being
// filled while one is published is the steady state.
const maxSpare = 2

// room says how much of a link's buffer a frame may fill.
type room uint8

const (
	// roomSend: messages, and spawn and monitor requests, fill the
	// buffer up to MaxBuffered.
	roomSend room = iota
	// roomAnswer: frames that answer something the peer sent (bounces,
	// replies, spawn answers, exits) may fill it to twice MaxBuffered.
	roomAnswer
	// roomAlways: frames that end a monitor, a spawn or a request, one
	// each, are never refused for room, for one refused would leave a
	// node waiting or holding for ever: a demonitor, a few bytes for a
	// monitor or awaited spawn the peer was sent and this node has
	// forgotten; and, when the room of answers is full, the answer to a
	// spawn, the exit of a watched process and the answer that replaces
	// one refused, without a result or data and with an error text of at
	// most alwaysText bytes.
	roomAlways
)

// alwaysText bounds the error text of an exit, a spawn's answer or a
// refused answer's replacement sent in roomAlways.
const alwaysText = 1 << 10

// reserve returns the batch to append a frame of at most bound bytes to,
// after checking the link's state and limits: a frame larger than a
// batch, or than the buffer's limit for its room r, fails with
// ErrNotEncodable, one that does not fit in what is left of the buffer
// with ErrBackpressure. Called with l.mu held.
func (l *link) reserve(bound int, r room) (*outBatch, error) {
	if l.state.Load() == linkDown {
		return nil, l.reason
	}
	maxBatch := int(l.n.maxBatch.Load())
	if bound > maxBatch-headerLen {
		return nil, fmt.Errorf("%w: a frame of up to %d bytes exceeds the largest batch of %d", ErrNotEncodable, bound, maxBatch)
	}
	if r != roomAlways {
		limit := l.n.cfg.MaxBuffered
		if r == roomAnswer {
			limit = priorityLimit(limit)
		}
		if bound > limit {
			// It could never wait for the peer, however empty the buffer.
			return nil, fmt.Errorf("%w: a frame of up to %d bytes exceeds the %d bytes that may wait for a node", ErrNotEncodable, bound, limit)
		}
		if l.buffered+bound > limit {
			return nil, fmt.Errorf("%w: %d bytes waiting for node %q", ErrBackpressure, l.buffered, l.peer.name)
		}
	}
	b := l.open
	if b != nil && b.enc.size()+bound > maxBatch {
		l.sealed = append(l.sealed, b)
		b = nil
	}
	if b == nil {
		b = l.newBatch()
		l.open = b
	}
	return b, nil
}

// commit accounts for the frame just appended to b, which was before
// bytes long, and reports whether the caller must queue the link on the
// writer. Called with l.mu held.
func (l *link) commit(b *outBatch, before int) (queue bool) {
	grown := b.enc.size() - before
	b.bytes += grown
	l.buffered += grown
	if !l.queued && l.canPublish() {
		l.queued = true
		return true
	}
	return false
}

// canPublish reports whether the writer may publish the link's batches.
// Called with l.mu held.
func (l *link) canPublish() bool { return l.state.Load() == linkOpen && !l.paused.Load() }

// sendMessage appends a message frame; body is what wireBody returned
// for msg.Data. Any goroutine; it never blocks but on l.mu.
func (l *link) sendMessage(msg relay.Message, body any) error {
	bound := messageBound(bodySize(body), "")
	l.mu.Lock()
	b, err := l.reserve(bound, roomSend)
	if err != nil {
		l.mu.Unlock()
		return err
	}
	before := b.enc.size()
	b.enc.message(msg.To, msg.From, body)
	b.origs = append(b.origs, msg)
	queue := l.commit(b, before)
	l.mu.Unlock()
	if queue {
		l.n.writer.push(l)
	}
	return nil
}

// priorityLimit is the bytes that frames answering a peer may fill the
// buffer with: twice MaxBuffered, or all an int holds.
func priorityLimit(maxBuffered int) int {
	return min(maxBuffered, math.MaxInt/2) * 2
}

// sendRefusedAnswer appends a message frame from from to to carrying
// reply, an answer without data that replaces one refused, in room r
// (roomAnswer, or roomAlways with its error's text shortened to
// alwaysText): it answers the peer, so it may use the room of bounces
// (see reserve). Any goroutine.
func (l *link) sendRefusedAnswer(from, to relay.PID, reply scheduler.Reply, r room) error {
	reply.Err = clipError(reply.Err, l.answerText(r, messageBound(bodySize(scheduler.Reply{To: reply.To}), "")+maxCodeLen))
	return l.add(messageBound(bodySize(reply), ""), r, func(e *batchEncoder) {
		e.message(to, from, reply)
	})
}

// sendBounce appends a bounce frame: from is the recipient here that was
// not reached, to its sender on the peer. A bounce carries its message's
// body and the error's text, so a message that just fitted a batch of
// the peer, or one larger than this node's batches, would not fit: the
// text is shortened to fit, and a body too large is left out (a
// request keeps its ReplyTo, which the asker's node needs), so that the
// sender still learns the failure and, from the error's code, why. Any
// goroutine.
func (l *link) sendBounce(from, to relay.PID, cause error, body any) error {
	text, code := errorText(cause), errorCode(cause)
	largest := l.largestAnswer()
	if messageBound(bodySize(body), "") > largest {
		if r, ok := body.(scheduler.Request); ok {
			body = scheduler.Request{ReplyTo: r.ReplyTo}
		} else {
			body = nil
		}
	}
	text = clipText(text, largest-messageBound(bodySize(body), ""))
	return l.add(messageBound(bodySize(body), text), roomAnswer, func(e *batchEncoder) {
		e.bounce(from, to, code, text, body)
	})
}

// largestAnswer is the bound of the largest frame answering the peer
// (see reserve). Any goroutine.
func (l *link) largestAnswer() int {
	return min(int(l.n.maxBatch.Load())-headerLen, priorityLimit(l.n.cfg.MaxBuffered))
}

// answerText is the room for the error text of an answer whose frame
// takes base bytes without it, in room r: what the largest answer leaves,
// or, in roomAlways, alwaysText, within the largest batch. Any goroutine.
func (l *link) answerText(r room, base int) int {
	if r == roomAlways {
		return min(base+alwaysText, int(l.n.maxBatch.Load())-headerLen) - base
	}
	return l.largestAnswer() - base
}

// clipError returns err, or, if its text does not fit in room (see
// clipText), an error matching the same sentinels with its text
// shortened.
func clipError(err error, room int) error {
	text := errorText(err)
	if short := clipText(text, room); len(short) < len(text) {
		return newRemoteError("", relay.PID{}, errorCode(err), short)
	}
	return err
}

// clipText shortens s, at a character's start, so that its length and
// bytes take at most room bytes: what textBound(s) adds to the bound of a
// frame with an empty text.
func clipText(s string, room int) string {
	if uvarintLen(uint64(len(s)))+len(s) <= room {
		return s
	}
	n := room - binary.MaxVarintLen64
	if n <= 0 {
		return ""
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// sendSpawn appends a spawn request; input is in wire form. Any
// goroutine.
func (l *link) sendSpawn(req uint64, kind, method string, await bool, input payload.Payloads) error {
	return l.addRequest(req, spawnBound(kind, method, input), func(e *batchEncoder) {
		e.spawn(req, kind, method, await, input)
	})
}

// sendSpawned appends the answer to a spawn request, in room r (roomAnswer
// or roomAlways): child started, or cause says why not, its text
// shortened if the frame would not fit a batch, or to alwaysText in
// roomAlways. Any goroutine.
func (l *link) sendSpawned(req uint64, child relay.PID, cause error, r room) error {
	code, text := errorCode(cause), errorText(cause)
	text = clipText(text, l.answerText(r, replyBound("", 0)))
	return l.add(replyBound(text, 0), r, func(e *batchEncoder) {
		e.spawned(req, child, code, text)
	})
}

// sendMonitor appends a request to be told when target ends. Any
// goroutine.
func (l *link) sendMonitor(req uint64, target relay.PID) error {
	return l.addRequest(req, replyBound("", 0), func(e *batchEncoder) { e.monitor(req, target) })
}

// sendDemonitor appends a request to forget the monitor of req, which
// only a link that is down refuses. Any goroutine.
func (l *link) sendDemonitor(req uint64) error {
	return l.add(replyBound("", 0), roomAlways, func(e *batchEncoder) { e.demonitor(req) })
}

// sendExit appends the end of the process that request req of the peer
// monitors or awaits, in room r (roomAnswer, or roomAlways with a nil
// result); result is in wire form. The error's text is shortened if the
// frame would not fit a batch, or to alwaysText in roomAlways. Any
// goroutine.
func (l *link) sendExit(req uint64, reason scheduler.ExitReason, cause error, result any, r room) error {
	code, text := errorCode(cause), errorText(cause)
	text = clipText(text, l.answerText(r, replyBound("", bodySize(result))))
	return l.add(replyBound(text, bodySize(result)), r, func(e *batchEncoder) {
		e.exited(req, byte(reason), code, text, result)
	})
}

// add appends one frame that answers the peer or ends something it
// holds, of at most bound bytes, written by encode, in room r of the
// buffer (see reserve), and keeps encode with the batch, so that the
// frame goes in a later batch if NATS refuses this one (see keptFrame).
// Any goroutine; it never blocks but on l.mu.
func (l *link) add(bound int, r room, encode func(*batchEncoder)) error {
	return l.put(bound, r, encode, 0)
}

// addRequest appends the frame of request req, as add does in roomSend,
// and records req with the batch, so that the request fails if NATS
// refuses the batch: it never left, and no answer will come. Any
// goroutine; it never blocks but on l.mu.
func (l *link) addRequest(req uint64, bound int, encode func(*batchEncoder)) error {
	return l.put(bound, roomSend, encode, req)
}

// put is add for req 0 and addRequest for the request req, never 0 (see
// pendingTable.add).
func (l *link) put(bound int, r room, encode func(*batchEncoder), req uint64) error {
	l.mu.Lock()
	b, err := l.reserve(bound, r)
	if err != nil {
		l.mu.Unlock()
		return err
	}
	before := b.enc.size()
	encode(&b.enc)
	if req != 0 {
		b.reqs = append(b.reqs, req)
	} else {
		b.keep = append(b.keep, keptFrame{bound: bound, after: len(b.origs), encode: encode})
	}
	queue := l.commit(b, before)
	l.mu.Unlock()
	if queue {
		l.n.writer.push(l)
	}
	return nil
}

// errorText is err's text for the wire: "" for nil, and the original
// text of an error that came from another node, so that passing one on
// does not stack node names.
func errorText(err error) string {
	if err == nil {
		return ""
	}
	if e, ok := err.(*Error); ok {
		return e.Text
	}
	return err.Error()
}

// next returns the oldest batch waiting, or nil. Called with l.mu held.
func (l *link) next() *outBatch {
	if len(l.sealed) > 0 {
		return l.sealed[0]
	}
	if l.open != nil && l.open.enc.frames > 0 {
		return l.open
	}
	return nil
}

// take removes b, which next returned. Called with l.mu held.
func (l *link) take(b *outBatch) {
	if len(l.sealed) > 0 && l.sealed[0] == b {
		n := copy(l.sealed, l.sealed[1:])
		l.sealed[n] = nil
		l.sealed = l.sealed[:n]
		return
	}
	l.open = nil
}

// recycle empties b for reuse. Called with l.mu held.
func (l *link) recycle(b *outBatch) {
	clear(b.origs) // drop the bodies
	b.origs = b.origs[:0]
	b.reqs = b.reqs[:0]
	clear(b.keep) // drop what the frames refer to
	b.keep = b.keep[:0]
	b.bytes = 0
	b.enc.reset()
	if len(l.spare) < maxSpare {
		l.spare = append(l.spare, b)
	}
}

// flush publishes the link's waiting batches in order while credit
// allows, then a sync marker if one is wanted. Writer goroutine only;
// being the one goroutine that publishes, it assigns the sequence
// numbers. It never holds l.mu while it calls NATS, whose calls may wait
// for the network, so that senders never wait for the network either.
// Messages of a batch that could not be published go back to their
// senders, and its spawn and monitor requests fail; its other frames
// wait at the front of what waits for the peer (see keepRefused), and
// the writer goes on with the link only when something queues it again
// (a send, a grant, the peer heard from after a reconnect, or the next
// heartbeat), so that a publish NATS keeps refusing is not retried in a
// loop.
func (l *link) flush() {
	var failed []relay.Message
	var failedReqs []uint64
	var failure error
	published, kept := false, false
	for {
		connected := l.n.nc.Status() == nats.CONNECTED
		l.mu.Lock()
		b, seq, size, flags := l.nextToPublish(connected)
		if b == nil {
			break
		}
		l.mu.Unlock()
		err := l.n.publish(l.subject, b.enc.finish(l.n.num, l.key, seq, flags))
		l.mu.Lock()
		switch {
		case l.state.Load() != linkOpen:
			// Declared down meanwhile, which reset the accounting: only
			// the messages of a batch that did not leave go back.
		case err != nil:
			// Not sent: give back its sequence number and its credit,
			// unless a grant has freed that already: only a broken or
			// hostile peer grants a batch that never left.
			l.seq--
			if k := len(l.inflight) - 1; k >= 0 && l.inflight[k].seq == seq {
				l.inflight = l.inflight[:k]
				l.inBytes -= size
			}
			l.counts.publishFailed++
		default:
			published = true
			l.counts.frames += uint64(b.enc.frames)
			l.counts.bytes += uint64(size)
			l.counts.batches++
		}
		if err != nil {
			failed = append(failed, b.origs...)
			failedReqs = append(failedReqs, b.reqs...)
			failure = err
			kept = l.state.Load() == linkOpen && l.keepRefused(b, l.publishFailure(err))
		}
		l.recycle(b)
		if kept {
			break // with l.mu held, as at the loop's end
		}
		l.mu.Unlock()
	}
	// Nothing left that credit allows: a send or a grant queues the link
	// again; after a refusal that left frames waiting, the heartbeat does
	// too.
	l.queued = false
	l.retry = kept
	var marker [headerLen]byte
	sync := !kept && l.canPublish() && (l.wantSync || (published && l.n.closing()))
	if sync {
		l.wantSync = false
		l.seq++
		writeHeader(marker[:], l.n.num, l.key, l.seq, flagSync)
	}
	l.mu.Unlock()
	if sync {
		err := l.n.publish(l.subject, marker[:])
		l.mu.Lock()
		if err != nil {
			l.seq-- // never left; the next overdue check asks again
			l.counts.publishFailed++
		} else {
			l.counts.markers++
		}
		l.mu.Unlock()
	}
	if failure != nil {
		err := l.publishFailure(failure)
		l.n.returnAll(l.peer, failed, err)
		for _, req := range failedReqs {
			l.n.pending.fail(req, err)
		}
	}
	l.n.progressed()
}

// publishFailure is the error for a batch to the peer that NATS refused
// with err: what its messages come back with and its requests fail with.
func (l *link) publishFailure(err error) error {
	return fmt.Errorf("%w: publishing to node %q: %w", publishError(err), l.peer.name, err)
}

// newBatch returns an empty batch: a spare one (see recycle) if there is
// one, else a new one. Called with l.mu held.
func (l *link) newBatch() *outBatch {
	if k := len(l.spare); k > 0 {
		b := l.spare[k-1]
		l.spare = l.spare[:k-1]
		return b
	}
	b := &outBatch{}
	b.enc.reset()
	return b
}

// keepRefused puts the frames of b, a batch NATS refused with cause,
// that must reach the peer all the same (see keptFrame) back in front of
// everything waiting for the peer, in their order, in batches of their
// own, so that they keep their place before every frame sent after
// them; and, for each answer among b's messages, which go back to their
// senders, it adds the answer without data that tells its asker why, as
// an answer refused at once does (see Node.answerRefused). Such frames
// count in the buffer again, so that, while they wait, the room left
// for sends and answers is smaller; a frame larger than the largest
// batch now (the server's payload limit may have fallen after a
// reconnect) could never go, and is dropped. It reports whether it kept
// any. Called with l.mu held, by the writer, while the link is open.
func (l *link) keepRefused(b *outBatch, cause error) bool {
	maxBatch := int(l.n.maxBatch.Load())
	var out []*outBatch
	var cur *outBatch
	put := func(k keptFrame) {
		if k.bound > maxBatch-headerLen {
			return
		}
		if cur == nil || cur.enc.size()+k.bound > maxBatch {
			cur = l.newBatch()
			out = append(out, cur)
		}
		before := cur.enc.size()
		k.encode(&cur.enc)
		k.after = 0 // the batch has no messages
		cur.keep = append(cur.keep, k)
		grown := cur.enc.size() - before
		cur.bytes += grown
		l.buffered += grown
	}
	j := 0
	for i, m := range b.origs {
		for ; j < len(b.keep) && b.keep[j].after <= i; j++ {
			put(b.keep[j])
		}
		if reply, ok := m.Data.(scheduler.Reply); ok {
			put(l.refusedAnswer(m.From, m.To, reply, cause))
		}
	}
	for ; j < len(b.keep); j++ {
		put(b.keep[j])
	}
	if len(out) == 0 {
		return false
	}
	l.sealed = append(out, l.sealed...)
	return true
}

// refusedAnswer is the frame that replaces an answer, from from to to,
// that NATS refused to publish with cause: the answer without its data,
// with cause joined to its error, shortened as in roomAlways. Called by
// the writer.
func (l *link) refusedAnswer(from, to relay.PID, reply scheduler.Reply, cause error) keptFrame {
	reply.Data, reply.Err = nil, errors.Join(reply.Err, fmt.Errorf("the answer was refused: %w", cause))
	reply.Err = clipError(reply.Err, l.answerText(roomAlways, messageBound(bodySize(scheduler.Reply{To: reply.To}), "")+maxCodeLen))
	return keptFrame{bound: messageBound(bodySize(reply), ""), encode: func(e *batchEncoder) {
		e.message(to, from, reply)
	}}
}

// retryRefused queues the link again if NATS refused its last batch and
// frames of it wait, so that they go without waiting for another send.
// Heartbeat goroutine.
func (l *link) retryRefused() {
	l.mu.Lock()
	queue := l.retry && l.queueIfPending()
	l.mu.Unlock()
	if queue {
		l.n.writer.push(l)
	}
}

// nextToPublish takes the oldest waiting batch if the link may publish
// it now, gives it the next sequence number and counts it in flight; nil
// if there is none, the link is paused (connected false pauses it) or
// down, or credit is short. flags are the batch's: flagSync when it
// brings the bytes in flight to half the window or more, so that the
// peer grants at once on taking it; the peer's own grants follow its own
// window, which may be larger than this node's. Called with l.mu held,
// by the writer.
func (l *link) nextToPublish(connected bool) (b *outBatch, seq uint64, size int, flags byte) {
	if !l.canPublish() {
		return nil, 0, 0, 0
	}
	if b = l.next(); b == nil {
		return nil, 0, 0, 0
	}
	if !connected {
		l.paused.Store(true) // until the peer is heard from again
		return nil, 0, 0, 0
	}
	size = b.enc.size()
	if l.inBytes > 0 && l.inBytes+size > l.n.cfg.Window {
		if !l.stalled {
			l.stalled = true
			l.counts.stalls++
		}
		return nil, 0, 0, 0
	}
	l.take(b)
	l.seq++
	if len(l.inflight) == 0 {
		l.grantAt = l.n.clock.Load() // the wait for a grant starts
	}
	l.inflight = append(l.inflight, sentBatch{seq: l.seq, size: size})
	l.inBytes += size
	l.buffered -= b.bytes
	if l.inBytes >= l.n.cfg.Window/2 {
		flags = flagSync
	}
	return b, l.seq, size, flags
}

// grant frees the credit of every batch up to seq, which the peer has
// taken. Control goroutine.
func (l *link) grant(seq uint64) {
	l.mu.Lock()
	i := 0
	for i < len(l.inflight) && l.inflight[i].seq <= seq {
		l.inBytes -= l.inflight[i].size
		i++
	}
	l.inflight = l.inflight[:copy(l.inflight, l.inflight[i:])]
	l.grantAt = l.n.clock.Load()
	l.stalled = false
	queue := l.queueIfPending()
	l.mu.Unlock()
	if queue {
		l.n.writer.push(l)
	}
	l.n.progressed()
}

// queueIfPending marks the link queued if it may publish, has something
// to publish and is not queued yet, and reports whether the caller must
// push it to the writer. Called with l.mu held.
func (l *link) queueIfPending() bool {
	if l.queued || !l.canPublish() || (l.next() == nil && !l.wantSync) {
		return false
	}
	l.queued = true
	return true
}

// pause stops the link publishing until resume: this node's connection
// went down and came back. Any goroutine.
func (l *link) pause() {
	l.mu.Lock()
	l.paused.Store(true)
	l.mu.Unlock()
}

// resume lets a paused link publish again: the peer was heard from, so
// it is connected and subscribed. Any goroutine.
func (l *link) resume() {
	l.mu.Lock()
	l.paused.Store(false)
	queue := l.queueIfPending()
	l.mu.Unlock()
	if queue {
		l.n.writer.push(l)
	}
}

// open lets the link publish: the peer knows this node. It reports
// whether the link was joining. Control goroutine.
func (l *link) markOpen() bool {
	l.mu.Lock()
	if l.state.Load() != linkJoining {
		l.mu.Unlock()
		return false
	}
	l.state.Store(linkOpen)
	l.grantAt = l.n.clock.Load()
	queue := l.queueIfPending()
	l.mu.Unlock()
	if queue {
		l.n.writer.push(l)
	}
	return true
}

// fail marks the peer down, so that sends to it fail with reason (an
// error wrapping ErrNodeDown, or ErrClosed when this node closes), and
// returns the messages that were waiting for it. It reports false if the
// link was down already. Any goroutine.
func (l *link) fail(reason error) ([]relay.Message, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state.Load() == linkDown {
		return nil, false
	}
	l.state.Store(linkDown)
	l.reason = reason
	var waiting []relay.Message
	for _, b := range l.sealed {
		waiting = append(waiting, b.origs...)
	}
	if l.open != nil {
		waiting = append(waiting, l.open.origs...)
	}
	l.sealed, l.open, l.spare = nil, nil, nil
	l.buffered = 0
	l.inflight, l.inBytes = nil, 0
	return waiting, true
}

// requestSync asks for a sync marker, so that the peer grants what it has
// taken at once: after a reconnect, when no grant has come for a while
// (a batch lost in flight holds its credit until a later sequence is
// granted), and when closing. Any goroutine.
func (l *link) requestSync() {
	l.mu.Lock()
	queue := false
	if l.state.Load() == linkOpen {
		l.wantSync = true
		queue = l.queueIfPending()
	}
	l.mu.Unlock()
	if queue {
		l.n.writer.push(l)
	}
}

// syncIfOverdue asks for a sync marker when batches have waited for their
// grant longer than wait. Heartbeat goroutine.
func (l *link) syncIfOverdue(now, wait int64) {
	l.mu.Lock()
	overdue := len(l.inflight) > 0 && now-l.grantAt > wait
	l.mu.Unlock()
	if overdue {
		l.requestSync()
	}
}

// idle reports whether nothing waits or is in flight, or the peer is
// down. Any goroutine.
func (l *link) idle() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state.Load() != linkOpen || (l.buffered == 0 && l.next() == nil && len(l.inflight) == 0)
}

// writer publishes the batches of every link, on one goroutine: a link
// with frames waiting is queued once, and its batches are published as
// soon as the previous publish is done, with no timer. While one is
// being published, the frames that arrive collect in the next batch, so
// a lone message goes out at once and a burst goes out in few batches.
type writer struct {
	mu    sync.Mutex
	queue []*link // guarded by mu
	wake  chan struct{}
}

// push queues l, whose queued flag the caller has just set. Any
// goroutine; never blocks but on w.mu.
func (w *writer) push(l *link) {
	w.mu.Lock()
	w.queue = append(w.queue, l)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default: // a wake-up is pending already
	}
}

// run is the writer goroutine.
func (w *writer) run(stop <-chan struct{}) {
	var batch []*link
	for {
		select {
		case <-w.wake:
		case <-stop:
			return
		}
		for {
			w.mu.Lock()
			batch, w.queue = w.queue, batch[:0]
			w.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			for _, l := range batch {
				l.flush()
			}
			clear(batch)
		}
	}
}
