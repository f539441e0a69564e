package remote_test

import (
	"context"
	"log/slog"
	"runtime"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/procsched/scheduler/remote"
)

// goexitHandler is a slog.Handler that calls runtime.Goexit for every
// record, after passing its message to seen.
type goexitHandler struct{ seen chan<- string }

func (goexitHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h goexitHandler) Handle(_ context.Context, r slog.Record) error {
	select {
	case h.seen <- r.Message:
	default:
	}
	runtime.Goexit()
	return nil
}
func (h goexitHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h goexitHandler) WithGroup(string) slog.Handler      { return h }

// TestLoggerGoexitCountsAsReturn: a Config.Logger whose handler calls
// runtime.Goexit (a test's handler that fails the test) loses that
// record only: the node goes on hearing its peers, and Close returns.
func TestLoggerGoexitCountsAsReturn(t *testing.T) {
	srv := tServer(t)
	seen := make(chan string, 64)
	a := tStart(t, srv.ClientURL(), "a", func(cfg *remote.Config) {
		cfg.Logger = slog.New(goexitHandler{seen})
	})
	b := tStart(t, srv.ClientURL(), "b", nil)
	ctx, cancel := context.WithTimeout(context.Background(), tGoexitWait)
	defer cancel()
	_, err := a.WaitPeer(ctx, "b")
	require.NoError(t, err, "a waiting for b with a logger that calls Goexit")
	assert.Equal(t, "remote: peer up", tRecvBounded(t, seen, "a's log of b up"))
	tRegister(t, a, b)
	assert.NoError(t, tSpawnBounded(t, b, "a", "adder"), "b spawning on a")
	assert.NoError(t, tSpawnBounded(t, a, "b", "adder"), "a spawning on b")
	tCloseBounded(t, a)
}

// TestConnHandlerGoexitCountsAsReturn: a disconnect handler of the
// user's (set in Config.Options) that calls runtime.Goexit leaves NATS
// its callback goroutine, so the node still hears of the connection
// closing: Close, after the server has gone, returns instead of waiting
// for ever.
func TestConnHandlerGoexitCountsAsReturn(t *testing.T) {
	srv := tServer(t)
	disconnected := make(chan struct{}, 1)
	a := tStart(t, srv.ClientURL(), "a", func(cfg *remote.Config) {
		cfg.Options = append(cfg.Options, nats.DisconnectErrHandler(func(*nats.Conn, error) {
			select {
			case disconnected <- struct{}{}:
			default:
			}
			runtime.Goexit()
		}))
	})
	tStopServer(srv)
	tRecvBounded(t, disconnected, "a's disconnect handler")
	closed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), tGoexitWait)
		defer cancel()
		closed <- a.Close(ctx)
	}()
	err := tRecvBounded(t, closed, "a's Close after its disconnect handler called Goexit")
	assert.ErrorIs(t, err, remote.ErrDisconnected, "Close with the server gone")
}
