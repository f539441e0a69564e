// Package embednats starts a NATS server inside the benchmark process, on
// a random loopback port, for the remote workloads of the binaries that
// talk over NATS (this scheduler's remote module and raw NATS). Both use
// the same server with the same options, so the broker costs them the
// same.
package embednats

import (
	"errors"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Server is a running embedded NATS server.
type Server struct {
	srv *server.Server
}

// Start starts a server on 127.0.0.1 at a port the system picks, with
// logging and signal handling off, and waits until it takes
// connections.
func Start() (*Server, error) {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true})
	if err != nil {
		return nil, err
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return nil, errors.New("embednats: the NATS server did not start within 10s")
	}
	return &Server{srv: srv}, nil
}

// URL returns the URL clients connect to.
func (s *Server) URL() string { return s.srv.ClientURL() }

// Stop shuts the server down and waits until its goroutines are gone.
func (s *Server) Stop() {
	s.srv.Shutdown()
	s.srv.WaitForShutdown()
}
