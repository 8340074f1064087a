// Package jstest runs real nats-server nodes with JetStream in the test
// process, on random loopback ports, for the vault's JetStream store: one
// node, or a cluster of three.
package jstest

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Server is one embedded JetStream node, or a cluster of them.
type Server struct {
	t     testing.TB
	ns    *server.Server   // the node clients connect to
	nodes []*server.Server // every node of a cluster
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

// StartCluster starts three nodes routed to each other and waits until
// JetStream has a meta leader; clients connect to every node's URL.
func StartCluster(t testing.TB) *Server {
	t.Helper()
	const n = 3
	ports := make([]int, n)
	for i := range ports {
		ports[i] = freePort(t)
	}
	s := &Server{t: t}
	for i := range n {
		var routes []*url.URL
		for j, p := range ports {
			if j != i {
				routes = append(routes, &url.URL{Scheme: "nats-route", Host: fmt.Sprintf("127.0.0.1:%d", p)})
			}
		}
		ns, err := server.NewServer(&server.Options{
			ServerName: fmt.Sprintf("n%d", i+1), Host: "127.0.0.1", Port: -1, JetStream: true,
			StoreDir: t.TempDir(), NoSigs: true, NoLog: true,
			Cluster: server.ClusterOpts{Name: "fabro-vault-test", Host: "127.0.0.1", Port: ports[i]}, Routes: routes,
		})
		if err != nil {
			t.Fatal(err)
		}
		ns.Start()
		t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
		if !ns.ReadyForConnections(45 * time.Second) {
			t.Fatalf("node %d did not become ready in 45 s", i+1)
		}
		s.nodes = append(s.nodes, ns)
	}
	s.ns = s.nodes[0]
	deadline := time.Now().Add(45 * time.Second)
	for {
		leader := false
		current := true
		for _, ns := range s.nodes {
			leader = leader || ns.JetStreamIsLeader()
			current = current && ns.JetStreamIsCurrent()
		}
		if leader && current {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatal("the JetStream cluster elected no meta leader in 45 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Replicas is how many nodes should keep each stream: 3 on a cluster.
func (s *Server) Replicas() int { return max(len(s.nodes), 1) }

// URL is the client URL of every node, comma separated.
func (s *Server) URL() string {
	if len(s.nodes) == 0 {
		return s.ns.ClientURL()
	}
	var urls []string
	for _, ns := range s.nodes {
		urls = append(urls, ns.ClientURL())
	}
	return strings.Join(urls, ",")
}

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
