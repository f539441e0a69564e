package remote

import (
	"context"
	"fmt"
	"log/slog"

	scheduler "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/relay"
)

// NamedPID is a PID with the name of its node, for logs: a node number
// is a random incarnation number that means little to a reader, the
// name says which machine or service it is.
type NamedPID struct {
	PID  relay.PID // the process
	Node string    // its node's name; empty if the node is unknown or forgotten
}

// String returns the name followed by the PID, as in `b<3735928559.42>`,
// or the PID alone when the node is unknown.
func (p NamedPID) String() string { return p.Node + p.PID.String() }

// LogValue logs the PID and its node's name as a group.
func (p NamedPID) LogValue() slog.Value {
	return slog.GroupValue(slog.String("node", p.Node), slog.String("pid", p.PID.String()))
}

var (
	_ fmt.Stringer   = NamedPID{}
	_ slog.LogValuer = NamedPID{}
)

// Named returns pid with the name of its node, as far as this node
// knows it.
func (n *Node) Named(pid relay.PID) NamedPID {
	if pid.Node == n.num {
		return NamedPID{PID: pid, Node: n.cfg.Name}
	}
	if p := n.peer(pid.Node); p != nil {
		return NamedPID{PID: pid, Node: p.name}
	}
	return NamedPID{PID: pid}
}

// WaitPeer waits until a node named name is up and returns its number,
// or returns ctx's error. A peer up already is returned even if ctx has
// ended; this node's own name returns its own number at once, as
// [Node.Lookup] does, since [Spawn] takes it for this node. From Close
// on, and once the NATS connection has closed for good, the node knows
// no peer: WaitPeer returns an error wrapping [ErrClosed], at once or as
// soon as that happens while it waits. A nil ctx is refused with an
// error wrapping [scheduler.ErrNilContext].
func (n *Node) WaitPeer(ctx context.Context, name string) (uint32, error) {
	if ctx == nil {
		return 0, fmt.Errorf("%w: WaitPeer", scheduler.ErrNilContext)
	}
	if name == n.cfg.Name {
		return n.num, nil
	}
	for {
		ch := n.changes()
		if n.gone() {
			return 0, fmt.Errorf("%w: waiting for node %q: node %q is closed", ErrClosed, name, n.cfg.Name)
		}
		n.mu.Lock()
		p := n.byName[name]
		n.mu.Unlock()
		if p != nil && p.link.state.Load() == linkOpen {
			return p.num, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, fmt.Errorf("remote: waiting for node %q: %w", name, ctx.Err())
		}
	}
}
