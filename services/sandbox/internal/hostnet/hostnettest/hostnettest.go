// Package hostnettest checks, for a driver's tests, that a sandbox allowed
// the network reaches no service of the host's.
package hostnettest

import (
	"fmt"
	"net"
	"strings"
	"testing"
)

// NoHostServices fails t if a command run by run (which returns its
// stdout) reaches a listener bound to 0.0.0.0 on any IPv4 address of the
// host's interfaces but loopback, which the host itself reaches on each
// (the plant, checked first; an address where it fails is not tried).
// The command also tries to delete the route that blocks the address.
func NoHostServices(t *testing.T, run func(command string) string) {
	t.Helper()
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	accepted := make(chan net.Addr, 64)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c.RemoteAddr()
			c.Close()
		}
	}()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	tried := 0
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.To4() == nil || ipn.IP.IsLoopback() {
			continue
		}
		ip := ipn.IP.String()
		c, err := net.Dial("tcp", net.JoinHostPort(ip, fmt.Sprint(port)))
		if err != nil {
			// An address coming or going (another test's bridge): the
			// plant fails there, so it proves nothing either way.
			t.Logf("the listener does not answer on %s from the host (%v): not tried", ip, err)
			continue
		}
		c.Close()
		<-accepted
		tried++
		cmd := fmt.Sprintf("ip route del %[1]s 2>/dev/null; ip route del unreachable %[1]s 2>/dev/null; timeout 5 bash -c 'exec 3<>/dev/tcp/%[1]s/%[2]d' && echo connected", ip, port)
		if out := run(cmd); strings.Contains(out, "connected") {
			t.Errorf("a sandbox allowed the network reached the host's service on %s:%d", ip, port)
		}
	}
	if tried == 0 {
		t.Fatal("the plant: the listener answered on no IPv4 address of the host but loopback")
	}
	select {
	case from := <-accepted:
		t.Errorf("the host's listener accepted a connection from a sandbox (%v)", from)
	default:
	}
}
