package remote

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	scheduler "github.com/procsched/scheduler"
)

// TestCloseDoesNotWaitForAProbe: Close does not wait for the answer to a
// probe under way, which with a long Heartbeat may be an hour away: a
// peer whose connection is there but whose node does not answer (frozen,
// or too busy) holds no Close.
func TestCloseDoesNotWaitForAProbe(t *testing.T) {
	const wait = 30 * time.Second
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	if !srv.ReadyForConnections(wait) {
		t.Fatal("the NATS server did not start")
	}
	n, err := New(Config{Cluster: "test", Name: "a", URL: srv.ClientURL(), Heartbeat: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	s, err := scheduler.New(scheduler.WithNode(n.Node()), scheduler.WithTransport(n))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Shutdown(context.Background()) }()
	if err := n.Start(t.Context(), s); err != nil {
		t.Fatal(err)
	}

	// A peer subscribed for its number that never answers.
	frozen, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer frozen.Close()
	const num = 7
	probed := make(chan struct{}, 1)
	if _, err := frozen.Subscribe(ctlSubject(n.subj.prefix, num), func(*nats.Msg) {
		select {
		case probed <- struct{}{}:
		default:
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := frozen.Flush(); err != nil {
		t.Fatal(err)
	}
	p := newPeer(n, num, "frozen", 1)
	n.mu.Lock()
	peers := maps.Clone(*n.peers.Load())
	peers[num] = p
	n.peers.Store(&peers)
	n.mu.Unlock()

	n.probe(p, time.Now().UnixNano())
	select {
	case <-probed:
	case <-time.After(wait):
		t.Fatal("the probe did not reach the peer")
	}
	closed := make(chan error, 1)
	go func() { closed <- n.Close(context.Background()) }()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(wait):
		t.Fatalf("Close did not return within %v: it waits for the probe, for a heartbeat of an hour", wait)
	}
}
