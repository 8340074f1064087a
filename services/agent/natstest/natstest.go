// Package natstest runs real nats-server nodes in the test process: one
// JetStream server, or a JetStream cluster of several nodes on random
// ports whose nodes can be stopped and started again on the same store.
package natstest

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/fabro-sh/fabro-go/platform/testkit"
)

// Cluster is a JetStream cluster of in-process nodes.
type Cluster struct {
	t     testing.TB
	name  string
	dir   string
	ports []int // client ports
	cport []int // cluster (route) ports
	nodes []*server.Server
}

// StartCluster starts n nodes that route to each other and waits until
// JetStream has a meta leader. The nodes stop at the test's end.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	c := &Cluster{t: t, name: "fabro-test", dir: t.TempDir(), nodes: make([]*server.Server, n)}
	for range n {
		c.ports = append(c.ports, FreePort(t))
		c.cport = append(c.cport, FreePort(t))
	}
	for i := range n {
		c.Start(i)
	}
	t.Cleanup(func() {
		for i := range c.nodes {
			c.Stop(i)
		}
	})
	c.WaitReady()
	return c
}

func (c *Cluster) options(i int) *server.Options {
	var routes []*url.URL
	for j, p := range c.cport {
		if j != i {
			routes = append(routes, &url.URL{Scheme: "nats-route", Host: fmt.Sprintf("127.0.0.1:%d", p)})
		}
	}
	return &server.Options{
		ServerName: fmt.Sprintf("n%d", i+1),
		Host:       "127.0.0.1",
		Port:       c.ports[i],
		JetStream:  true,
		StoreDir:   filepath.Join(c.dir, fmt.Sprintf("n%d", i+1)),
		Cluster:    server.ClusterOpts{Name: c.name, Host: "127.0.0.1", Port: c.cport[i]},
		Routes:     routes,
		NoSigs:     true,
		NoLog:      true,
	}
}

// Start starts node i (again, on its old store after Stop).
func (c *Cluster) Start(i int) {
	c.t.Helper()
	ns, err := server.NewServer(c.options(i))
	if err != nil {
		c.t.Fatal(err)
	}
	ns.Start()
	// JetStream recovering its store on a loaded machine (two modules'
	// tests at once, under -race) can take more than the 10 s that
	// sufficed on an idle one.
	if !ns.ReadyForConnections(45 * time.Second) {
		ns.Shutdown()
		c.t.Fatalf("node %d (client port %d, route port %d) did not become ready in 45 s", i+1, c.ports[i], c.cport[i])
	}
	c.nodes[i] = ns
}

// Stop shuts node i down (a crash as far as its peers can tell).
func (c *Cluster) Stop(i int) {
	if ns := c.nodes[i]; ns != nil {
		ns.Shutdown()
		ns.WaitForShutdown()
		c.nodes[i] = nil
	}
}

// Node is node i's server; nil when stopped.
func (c *Cluster) Node(i int) *server.Server { return c.nodes[i] }

// URL lists every node's client URL, comma separated, for nats.Connect.
func (c *Cluster) URL() string {
	urls := make([]string, len(c.ports))
	for i, p := range c.ports {
		urls[i] = fmt.Sprintf("nats://127.0.0.1:%d", p)
	}
	return strings.Join(urls, ",")
}

// NodeURL is node i's client URL alone.
func (c *Cluster) NodeURL(i int) string { return fmt.Sprintf("nats://127.0.0.1:%d", c.ports[i]) }

// WaitReady waits until the running nodes agree on a JetStream meta
// leader and every one of them is current.
func (c *Cluster) WaitReady() {
	c.t.Helper()
	testkit.Eventually(c.t, 30*time.Second, func() error {
		leader := false
		for i, ns := range c.nodes {
			if ns == nil {
				continue
			}
			if !ns.JetStreamIsCurrent() {
				return fmt.Errorf("node %d's JetStream is not current", i)
			}
			leader = leader || ns.JetStreamIsLeader()
		}
		if !leader {
			return errors.New("no running node is the JetStream meta leader")
		}
		return nil
	})
}

// StreamLeader is the index of the node leading stream (account $G); -1
// when none does.
func (c *Cluster) StreamLeader(stream string) int {
	for i, ns := range c.nodes {
		if ns != nil && ns.JetStreamIsStreamLeader(server.DEFAULT_GLOBAL_ACCOUNT, stream) {
			return i
		}
	}
	return -1
}

// FreePort is a TCP port free on 127.0.0.1 at the time of the call.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// StartServer starts one JetStream server on a random port (an
// "external" NATS for the processes of a test) and returns its URL.
func StartServer(t testing.TB) string {
	t.Helper()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	if !ns.ReadyForConnections(45 * time.Second) {
		t.Fatal("nats-server did not become ready")
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	return ns.ClientURL()
}
