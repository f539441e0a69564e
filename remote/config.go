package remote

import (
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/nats-io/nats.go"

	scheduler "github.com/procsched/scheduler"
)

// Config says how a [Node] joins its cluster. The zero value of every
// field but Cluster and Name is a usable default.
type Config struct {
	// Cluster names the group of nodes that talk to each other; it is a
	// token of every subject the nodes use, so nodes of different
	// clusters can share a NATS server. 1 to 128 letters, digits, '-'
	// and '_' (a subject must fit in a line of the NATS protocol, and
	// every message carries it). Required.
	Cluster string
	// Name names this node among the cluster's nodes, in logs and in
	// [Spawn]; 1 to 128 bytes of UTF-8. Names must be unique in a
	// cluster: a node that joins with the name of one already there is
	// taken for that node restarted, and the older one is declared down;
	// the two nodes log the clash and count it in [Stats].Conflicts.
	Name string

	// URL is the NATS server URL, or several separated by commas
	// (default [nats.DefaultURL]).
	URL string
	// Options are passed to [nats.Connect] as they are: TLS,
	// credentials, NKeys, user and password, reconnect settings; one
	// that NATS refuses makes [New] fail with [ErrInvalidConfig]. The
	// connection they make is the node's, which [Node.Close] closes. The
	// node wraps, and still calls, the connection's reconnect, closed
	// and error handlers set here (with nats.NoCallbacksAfterClientClose,
	// NATS calls no closed handler when Close closes the connection); a
	// disconnect handler is NATS's to call, as set. The node calls each
	// of these handlers on a goroutine of its own and waits for it: a
	// [runtime.Goexit] in one counts as its return, and NATS goes on
	// calling the connection's handlers, the node's among them; a panic
	// in one is not recovered, and ends the program. Other handlers
	// (discovered servers, lame duck mode, and the like) NATS calls as
	// set, on that same goroutine: a Goexit in one ends it, after which
	// NATS calls no handler of the connection, and Close, which waits for
	// the closed handler, may never return.
	Options []nats.Option

	// Heartbeat is how often the node tells the cluster it is alive
	// (default [DefaultHeartbeat]; at least [MinHeartbeat], and at most
	// a third of the longest Duration, since FailureTimeout holds three).
	// A peer silent for two heartbeats is probed.
	Heartbeat time.Duration
	// FailureTimeout is how long a peer may stay silent before it is
	// declared down (default [DefaultFailureTimeout], or three heartbeats
	// if that is longer); a probe that finds nobody subscribed for it
	// declares it down sooner. It must be at least three heartbeats. A
	// node judges its peers by its own FailureTimeout, whatever their
	// Heartbeat: a peer whose heartbeats are further apart is declared
	// down though it runs, so the Heartbeat of every node of a cluster
	// must be well under the FailureTimeout of every other (simplest:
	// give them all the same).
	FailureTimeout time.Duration

	// Window is the credit of each link: the most bytes of batches sent
	// to one peer and not yet taken by it (default [DefaultWindow]; at
	// least 4 KiB). A
	// NATS server buffers up to 64 MiB for a client by default, so
	// Window times the number of peers should stay below it. The largest
	// batch is half a window, or the server's maximum payload if that is
	// smaller.
	Window int
	// MaxBuffered bounds the bytes of messages waiting to be sent to one
	// peer (default [DefaultMaxBuffered]). A send beyond it fails with
	// [ErrBackpressure], and a message larger than it with
	// [ErrNotEncodable]. Messages returned to senders on that peer may
	// use as much again before they are dropped. What ends a monitor, a
	// spawn or a request goes whatever waits, so that no node waits or
	// holds for ever: the few bytes that tell the peer a monitor is no longer
	// wanted, and, once the room of answers is full too, the answer to
	// a spawn, the end of a watched process (the error then matches
	// [ErrBackpressure]) and the answer to a request that replaces one
	// refused, without the result or data and with at most 1 KiB of
	// error text.
	MaxBuffered int

	// SpawnCommand is the command ID the node's [Spawn] handler is
	// registered with on the scheduler given to [Node.Start] (default
	// [DefaultSpawnCommand]): from [scheduler.FirstUserCommand] to 65536,
	// the range [scheduler.Scheduler.SetHandler] takes. Start claims it
	// ([scheduler.Scheduler.ClaimHandler]): the scheduler must have no
	// handler on it, and gets no other one after.
	SpawnCommand scheduler.CommandID

	// Hooks are called when peers come and go.
	Hooks Hooks
	// Logger, if set, receives peers coming and going at Info, the
	// malformed batches of peers that have joined dropped at Warn (a
	// batch too short for its header, or a control message that does
	// not decode, cannot be told to come from a peer: it is only
	// counted, in [Stats].Dropped, so that whoever may publish on the
	// cluster's subjects cannot fill the log), and conflicts (see
	// Name), the
	// first message of a node of another wire version, the NATS
	// connection closing for good, and the errors NATS reports to its
	// error handler (a subscription or publish the server refused, a
	// slow consumer) at Error. The node sets its own error handler on
	// the connection, which calls the one set in Options, if any, and
	// takes the place of NATS's default one, which prints the errors.
	// The node calls the logger on a goroutine of its own and waits for
	// it: a [runtime.Goexit] in its handler loses that record only, and
	// the node goes on; a panic in it is not recovered, and ends the
	// program.
	Logger *slog.Logger
}

// Hooks are optional functions the node calls when its view of the
// cluster changes. The goroutine that noticed the change (one of the
// node's NATS subscriptions, its heartbeat goroutine or a probe's)
// calls each hook on a goroutine of its own and waits for it, so hooks
// may run at the same time as each other. Keep them short and never
// block in them: the node hears nothing, or detects no failure, while
// they run, and Close waits for them. A [runtime.Goexit] in a hook
// (t.FailNow, require.*) counts as its return: it ends the hook's own
// goroutine, and the node goes on. A panic in a hook is not recovered:
// as in any goroutine, it ends the program.
type Hooks struct {
	// PeerUp is called when the node starts publishing to a new peer:
	// the peer has shown that it knows this node.
	PeerUp func(Peer)
	// PeerDown is called when a peer is declared down; Peer.Reason says
	// why. It is called for a peer still joining too, which PeerUp never
	// reported.
	PeerDown func(Peer)
}

// Defaults of [Config].
const (
	DefaultHeartbeat      = time.Second
	DefaultFailureTimeout = 5 * time.Second
	DefaultWindow         = 1 << 20
	DefaultMaxBuffered    = 4 << 20
	// DefaultSpawnCommand is the command ID of [Spawn] yields.
	DefaultSpawnCommand scheduler.CommandID = 512
)

// MinHeartbeat is the shortest [Config].Heartbeat: heartbeats go to
// every node, and a shorter interval would flood the cluster with them
// and make a peer's silence a matter of scheduling noise.
const MinHeartbeat = time.Millisecond

// maxHeartbeat is the longest Heartbeat: FailureTimeout, a Duration,
// must hold three of them.
const maxHeartbeat = time.Duration(math.MaxInt64 / 3)

// minWindow keeps a batch large enough for any header and a few frames.
const minWindow = 4 << 10

// maxCommand is the largest command ID [scheduler.Scheduler.SetHandler]
// takes.
const maxCommand = 1 << 16

// withDefaults returns cfg with defaults filled in, or an error wrapping
// ErrInvalidConfig.
func (cfg Config) withDefaults() (Config, error) {
	if err := checkToken(cfg.Cluster); err != nil {
		return cfg, fmt.Errorf("%w: Cluster %.*q: %v", ErrInvalidConfig, maxClusterLen, cfg.Cluster, err)
	}
	if err := checkName(cfg.Name); err != nil {
		return cfg, fmt.Errorf("%w: Name %.*q: %v", ErrInvalidConfig, maxNameLen, cfg.Name, err)
	}
	if cfg.URL == "" {
		cfg.URL = nats.DefaultURL
	}
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	if cfg.FailureTimeout == 0 && cfg.Heartbeat <= maxHeartbeat {
		cfg.FailureTimeout = max(DefaultFailureTimeout, 3*cfg.Heartbeat)
	}
	if cfg.Window == 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.MaxBuffered == 0 {
		cfg.MaxBuffered = DefaultMaxBuffered
	}
	if cfg.SpawnCommand == 0 {
		cfg.SpawnCommand = DefaultSpawnCommand
	}
	switch {
	case cfg.Heartbeat < MinHeartbeat:
		return cfg, fmt.Errorf("%w: Heartbeat %v is below %v", ErrInvalidConfig, cfg.Heartbeat, MinHeartbeat)
	case cfg.Heartbeat > maxHeartbeat:
		return cfg, fmt.Errorf("%w: Heartbeat %v is above %v: three of them must fit in FailureTimeout", ErrInvalidConfig, cfg.Heartbeat, maxHeartbeat)
	case cfg.FailureTimeout < 3*cfg.Heartbeat:
		return cfg, fmt.Errorf("%w: FailureTimeout %v is less than three heartbeats of %v", ErrInvalidConfig, cfg.FailureTimeout, cfg.Heartbeat)
	case cfg.Window < minWindow:
		return cfg, fmt.Errorf("%w: Window %d is below %d", ErrInvalidConfig, cfg.Window, minWindow)
	case cfg.MaxBuffered < 0:
		return cfg, fmt.Errorf("%w: MaxBuffered %d is negative", ErrInvalidConfig, cfg.MaxBuffered)
	case cfg.SpawnCommand < scheduler.FirstUserCommand || cfg.SpawnCommand > maxCommand:
		return cfg, fmt.Errorf("%w: SpawnCommand %d must be from %d to %d", ErrInvalidConfig, cfg.SpawnCommand, scheduler.FirstUserCommand, maxCommand)
	}
	return cfg, nil
}

// maxClusterLen bounds Config.Cluster, a token of every subject: NATS
// servers refuse a protocol line longer than 4 KiB by default, and close
// the connection that sends one.
const maxClusterLen = 128

// checkToken returns an error if s cannot be a subject token of ours.
func checkToken(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("empty")
	case len(s) > maxClusterLen:
		return fmt.Errorf("%d bytes, the most is %d", len(s), maxClusterLen)
	}
	for _, c := range []byte(s) {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_':
		default:
			return fmt.Errorf("byte %q is not a letter, digit, '-' or '_'", c)
		}
	}
	return nil
}
