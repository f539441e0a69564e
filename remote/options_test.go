package remote_test

import (
	"context"
	"io/fs"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	scheduler "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/relay"
	"github.com/procsched/scheduler/remote"
)

// TestCloseWithNoCallbacksAfterClientClose: with
// nats.NoCallbacksAfterClientClose in Config.Options, NATS calls no
// closed handler when the node closes its connection; Close, of a node
// started or not, returns all the same, and the node is closed.
func TestCloseWithNoCallbacksAfterClientClose(t *testing.T) {
	srv := tServer(t)
	for _, started := range []bool{false, true} {
		name := map[bool]string{false: "not started", true: "started"}[started]
		t.Run(name, func(t *testing.T) {
			node, err := remote.New(remote.Config{
				Cluster: "test", Name: "a", URL: srv.ClientURL(),
				Options: []nats.Option{nats.NoCallbacksAfterClientClose()},
			})
			require.NoError(t, err)
			s, err := scheduler.New(scheduler.WithNode(node.Node()), scheduler.WithTransport(node))
			require.NoError(t, err)
			defer func() { _ = s.Shutdown(context.Background()) }()
			if started {
				require.NoError(t, node.Start(t.Context(), s))
			}
			closed := make(chan error, 1)
			go func() { closed <- node.Close(context.Background()) }()
			assert.NoError(t, tRecv(t, closed, "Close to return"))
			assert.ErrorIs(t, node.Start(t.Context(), s), remote.ErrClosed, "Start after Close")
		})
	}
}

// TestStartAfterTheConnectionClosedForGood: Start on a node whose NATS
// connection has closed for good (it may not reconnect, and the server
// went away) returns an error wrapping ErrClosed and claims nothing on
// the scheduler, which takes a handler on the spawn command after it.
func TestStartAfterTheConnectionClosedForGood(t *testing.T) {
	srv := tServer(t)
	closed := make(chan struct{})
	node, err := remote.New(remote.Config{
		Cluster: "test", Name: "a", URL: srv.ClientURL(),
		Options: []nats.Option{nats.NoReconnect(), nats.ClosedHandler(func(*nats.Conn) { close(closed) })},
	})
	require.NoError(t, err)
	s, err := scheduler.New(scheduler.WithNode(node.Node()), scheduler.WithTransport(node))
	require.NoError(t, err)
	defer func() { _ = s.Shutdown(context.Background()) }()
	tStopServer(srv)
	tRecv(t, closed, "the connection to close")

	assert.ErrorIs(t, node.Start(t.Context(), s), remote.ErrClosed, "Start")
	assert.NoError(t, s.SetHandler(remote.DefaultSpawnCommand, func(scheduler.Call) error { return nil }),
		"the spawn command is left to the scheduler")
	assert.NoError(t, node.Close(t.Context()))
}

// TestOptionRefused: an option of Config.Options that NATS refuses makes
// New fail with an error wrapping ErrInvalidConfig and the option's own,
// naming the field, before anything is connected.
func TestOptionRefused(t *testing.T) {
	srv := tServer(t)
	node, err := remote.New(remote.Config{
		Cluster: "test", Name: "a", URL: srv.ClientURL(),
		Options: []nats.Option{nats.RootCAs("testdata/no-such-ca.pem")},
	})
	if node != nil {
		t.Cleanup(func() { _ = node.Close(context.Background()) })
	}
	require.ErrorIs(t, err, remote.ErrInvalidConfig)
	assert.ErrorIs(t, err, fs.ErrNotExist, "the option's error")
	assert.Contains(t, err.Error(), "Options")
	assert.Zero(t, srv.NumClients(), "no connection is left")
}

// TestNewWithoutAServer: with nats.RetryOnFailedConnect, NATS returns a
// connection that is not connected when no server answers; New cannot
// check its node number without one, and fails with an error
// wrapping ErrDisconnected, leaving nothing connecting in the
// background.
func TestNewWithoutAServer(t *testing.T) {
	srv := tServer(t)
	url := srv.ClientURL()
	tStopServer(srv) // nothing listens there any more
	done := make(chan error, 1)
	go func() {
		node, err := remote.New(remote.Config{
			Cluster: "test", Name: "a", URL: url,
			Options: []nats.Option{nats.RetryOnFailedConnect(true), nats.ReconnectWait(time.Hour)},
		})
		if node != nil {
			_ = node.Close(context.Background())
		}
		done <- err
	}()
	assert.ErrorIs(t, tRecv(t, done, "New to return"), remote.ErrDisconnected)
}

// TestSubscriptionRefusedByTheServer: a subscription of the node's that
// the server refuses for the user's permissions makes New or Start fail
// with an error wrapping nats.ErrPermissionViolation, instead of leaving
// a node that never hears what comes on that subject; a Start refused so
// leaves the node not started, and the user's error handler is still
// called.
func TestSubscriptionRefusedByTheServer(t *testing.T) {
	for _, tc := range []struct {
		name   string
		denied string
		inNew  bool
	}{
		{"the node's control subject", "procsched.test.ctl.*", true},
		{"the node's data subject", "procsched.test.data.*", false},
		{"the cluster's control subject", "procsched.test.ctl", false},
		{"the inbox of the number check", "_INBOX.>", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := tServerDenying(t, tc.denied)
			userErrs := make(chan error, 16)
			node, err := remote.New(remote.Config{
				Cluster: "test", Name: "a", URL: srv.ClientURL(),
				Options: []nats.Option{nats.UserInfo("u", "p"), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
					userErrs <- err
				})},
			})
			if tc.inNew {
				require.ErrorIs(t, err, nats.ErrPermissionViolation, "New")
				assert.Nil(t, node)
			} else {
				require.NoError(t, err)
				s, err := scheduler.New(scheduler.WithNode(node.Node()), scheduler.WithTransport(node))
				require.NoError(t, err)
				defer func() { _ = s.Shutdown(context.Background()) }()
				subs := srv.NumSubscriptions()
				for range 2 {
					assert.ErrorIs(t, node.Start(t.Context(), s), nats.ErrPermissionViolation, "Start")
				}
				tEventually(t, func() bool { return srv.NumSubscriptions() == subs },
					"the subscriptions Start made are undone (%d before, %d now)", subs, srv.NumSubscriptions())
				assert.ErrorIs(t, node.Send(relay.Message{To: relay.PID{Node: 5, ID: 1}}), remote.ErrClosed, "a send: the node is not started")
				assert.NoError(t, node.Close(t.Context()))
			}
			assert.ErrorIs(t, tRecv(t, userErrs, "the user's error handler"), nats.ErrPermissionViolation)
		})
	}
}

// tServerDenying starts an embedded NATS server whose user "u", password
// "p", may subscribe to anything but denied, and shuts it down at the
// end of the test.
func tServerDenying(t testing.TB, denied string) *server.Server {
	t.Helper()
	return tServerWith(t, &server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true,
		Users: []*server.User{{Username: "u", Password: "p", Permissions: &server.Permissions{
			Subscribe: &server.SubjectPermission{Allow: []string{">"}, Deny: []string{denied}},
		}}},
	})
}

// TestNATSErrorsAreLogged: an error NATS reports on the side (here the
// server refused a subscription) goes to Config.Logger at Error, when
// Config.Options set no error handler as when they do: the node's own
// handler takes the place of NATS's default, which prints it.
func TestNATSErrorsAreLogged(t *testing.T) {
	srv := tServerDenying(t, "procsched.test.data.*")
	for _, withHandler := range []bool{false, true} {
		t.Run(map[bool]string{false: "no handler", true: "a handler"}[withHandler], func(t *testing.T) {
			var log tLockedBuffer
			opts := []nats.Option{nats.UserInfo("u", "p")}
			if withHandler {
				opts = append(opts, nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
			}
			node, err := remote.New(remote.Config{
				Cluster: "test", Name: "a", URL: srv.ClientURL(), Options: opts,
				Logger: slog.New(slog.NewTextHandler(&log, nil)),
			})
			require.NoError(t, err)
			s, err := scheduler.New(scheduler.WithNode(node.Node()), scheduler.WithTransport(node))
			require.NoError(t, err)
			defer func() { _ = s.Shutdown(context.Background()) }()
			require.ErrorIs(t, node.Start(t.Context(), s), nats.ErrPermissionViolation)
			tEventually(t, func() bool {
				out := log.String()
				return strings.Contains(out, "level=ERROR") && strings.Contains(out, "Permissions Violation")
			}, "the refusal is logged at Error: %q", log.String())
			assert.NoError(t, node.Close(t.Context()))
		})
	}
}

// TestNamesWithSubjectCharacters: a node name is any UTF-8 of 1 to 128
// bytes, since names never go into subjects: nodes named with NATS's
// separator, its wildcards, spaces and a name of 128 bytes of multi-byte
// characters join each other, and a spawn by name reaches each.
func TestNamesWithSubjectCharacters(t *testing.T) {
	srv := tServer(t)
	names := []string{"orders.eu", "*", ">", "a b\tc", strings.Repeat("é", 64)}
	var nodes []*tNode
	for _, name := range names {
		n := tStart(t, srv.ClientURL(), name, nil)
		tRegister(t, n)
		nodes = append(nodes, n)
	}
	tJoin(t, nodes...)
	ctx, cancel := context.WithTimeout(context.Background(), tWait)
	defer cancel()
	for _, n := range nodes[1:] {
		child, err := nodes[0].Spawn(ctx, n.Name(), "echo", "run", nil)
		require.NoError(t, err, "a spawn on %q", n.Name())
		assert.Equal(t, n.Node.Node(), child.Node, "the child of a spawn on %q", n.Name())
		assert.Equal(t, n.Name(), nodes[0].Named(child).Node)
		require.NoError(t, nodes[0].S.Tell(child, "stop"))
	}
}
