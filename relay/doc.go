// Package relay defines the routing vocabulary of the scheduler: a [PID] names
// a process, a [Message] carries a body from one process to another (or back
// to its sender, undelivered), and a [Receiver] is anything that delivers
// messages by PID.
//
// Routing itself is done by the scheduler, which implements Receiver by
// looking the recipient up in its process table. Keeping the types here, apart
// from the scheduler, lets code that only addresses processes (handlers,
// transports to other nodes, tests) depend on a small package, and lets a
// transport over a message bus (such as the Node of this repository's remote
// module) implement the same Receiver interface.
//
// A PID is a plain comparable value of 16 bytes: use it as a map key, compare
// it with ==, and print it as "<node.id>" in decimal. [Parse] is the exact
// inverse of [PID.String], and PID implements [encoding.TextMarshaler],
// [encoding.TextUnmarshaler] and [encoding.TextAppender], so PIDs appear as
// strings in JSON, also as map keys. (By default [encoding/json.Marshal]
// escapes the brackets as \u003c and \u003e, as it escapes every < and >; the
// text still decodes to the same PID, and [encoding/json.Encoder.SetEscapeHTML]
// turns the escaping off.) The zero PID ("<0.0>") names no process;
// it is the sender of a message sent from outside any process. A Message
// marshals to JSON too, with its Err as text ([Message.MarshalJSON]), for
// logs; it is not a wire format and has no decoding.
//
// PID and Message are values with no internal state and are safe to copy and
// read from any number of goroutines. A Message's body is shared, not
// copied: treat it as immutable once sent. Receiver
// implementations document their own concurrency guarantees; the scheduler's
// is safe for concurrent use.
package relay
