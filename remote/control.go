package remote

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf8"
)

// A control message is one NATS message on the cluster's control subject
// (hello, heartbeat, goodbye: to every node) or on one node's control
// subject (the rest: to that node).
//
//	version (1 byte) | type (1) | sender node (uint32 LE) | sender run (uint64 LE) | receiver run (uint64 LE) | fields
//	hello      flags (1) | name (uvarint length, bytes)
//	heartbeat  name
//	ack        name
//	bye, down, probe, pong: no fields
//	grant      sequence (uvarint)
//
// A run is the random value a node draws at each start (see Node.run): a
// restarted node that draws the number of an earlier run still differs
// from it by its run. The receiver run names the run a message to one
// node is meant for (ack, direct hello, grant, down), so that one meant
// for an earlier run of the same number is ignored; it is 0 in a message
// to every node. A probe carries the run it looks for, or 0 when it
// checks a number before taking it, but is answered by whoever holds
// the number.
const (
	ctlHello     = 1 + iota // I am here; flagDirect: and I know you
	ctlHeartbeat            // I am still here
	ctlAck                  // I know you: you may send me data
	ctlBye                  // I am leaving
	ctlGrant                // I have taken your batches up to this sequence
	ctlDown                 // I have declared you down
	ctlProbe                // are you there? (a request, answered by pong)
	ctlPong                 // I am here
)

// flagDirect marks a hello sent to one node that its sender has already
// registered.
const flagDirect = 1

// ctlHeaderLen is the length of a control message's fixed part.
const ctlHeaderLen = 1 + 1 + 4 + 8 + 8

// maxNameLen bounds a node name, which travels in every heartbeat.
const maxNameLen = 128

// ctlMsg is a decoded control message.
type ctlMsg struct {
	typ    byte
	sender uint32
	run    uint64 // the sender's run
	to     uint64 // the receiver's run; 0: any
	flags  byte
	name   string
	seq    uint64
}

// appendCtl appends the encoding of m to b.
func appendCtl(b []byte, m ctlMsg) []byte {
	b = append(b, wireVersion, m.typ)
	b = binary.LittleEndian.AppendUint32(b, m.sender)
	b = binary.LittleEndian.AppendUint64(b, m.run)
	b = binary.LittleEndian.AppendUint64(b, m.to)
	switch m.typ {
	case ctlHello:
		b = append(b, m.flags)
		fallthrough
	case ctlHeartbeat, ctlAck:
		b = binary.AppendUvarint(b, uint64(len(m.name)))
		b = append(b, m.name...)
	case ctlGrant:
		b = binary.AppendUvarint(b, m.seq)
	}
	return b
}

// decodeCtl decodes a control message; the error wraps errMalformed.
func decodeCtl(data []byte) (ctlMsg, error) {
	r := reader{buf: data}
	var m ctlMsg
	if v := r.byte(); r.err == nil && v != wireVersion {
		return ctlMsg{}, versionError(v)
	}
	m.typ = r.byte()
	m.sender = r.fixed32()
	m.run = r.fixed64()
	m.to = r.fixed64()
	switch m.typ {
	case ctlHello:
		m.flags = r.byte()
		m.name = r.name()
	case ctlHeartbeat, ctlAck:
		m.name = r.name()
	case ctlGrant:
		m.seq = r.uvarint()
	case ctlBye, ctlDown, ctlProbe, ctlPong:
	default:
		if r.err == nil {
			r.fail("unknown control type %d", m.typ)
		}
	}
	if r.err == nil && r.off != len(data) {
		r.fail("%d bytes after the message", len(data)-r.off)
	}
	if r.err == nil && m.sender == 0 {
		r.fail("sender node 0")
	}
	if r.err == nil && m.run == 0 {
		r.fail("sender run 0")
	}
	if r.err != nil {
		return ctlMsg{}, r.err
	}
	return m, nil
}

// name reads a node name: 1 to maxNameLen bytes of UTF-8.
func (r *reader) name() string {
	b := r.lenBytes()
	if r.err != nil {
		return ""
	}
	if err := checkName(string(b)); err != nil {
		r.fail("%v", err)
		return ""
	}
	return string(b)
}

// checkName returns an error if s cannot be a node name; the reader of a
// control message makes it a malformed frame.
func checkName(s string) error {
	switch {
	case s == "":
		return errors.New("empty node name")
	case len(s) > maxNameLen:
		return fmt.Errorf("node name of %d bytes, the most is %d", len(s), maxNameLen)
	case !utf8.ValidString(s):
		return errors.New("node name is not UTF-8")
	}
	return nil
}
