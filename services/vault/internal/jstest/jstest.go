// Package jstest runs a real nats-server with JetStream in the test
// process, on a random loopback port, for the vault's JetStream store.
package jstest

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Server is one embedded JetStream node.
type Server struct {
	t  testing.TB
	ns *server.Server
}

// Start starts a node that stops at the test's end.
func Start(t testing.TB) *Server {
	t.Helper()
	ns, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	if !ns.ReadyForConnections(45 * time.Second) {
		ns.Shutdown()
		t.Fatal("nats-server did not become ready in 45 s")
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	return &Server{t: t, ns: ns}
}

// URL is the node's client URL.
func (s *Server) URL() string { return s.ns.ClientURL() }

// JetStream is a fresh connection's JetStream, closed at the test's end:
// one per replica under test.
func (s *Server) JetStream() jetstream.JetStream {
	s.t.Helper()
	nc, err := nats.Connect(s.URL())
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		s.t.Fatal(err)
	}
	return js
}

// Shutdown stops the node (NATS gone, as far as clients can tell).
func (s *Server) Shutdown() { s.ns.Shutdown(); s.ns.WaitForShutdown() }
