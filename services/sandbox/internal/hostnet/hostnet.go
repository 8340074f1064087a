// Package hostnet keeps a sandbox allowed the network from the host's own
// addresses. A user-mode stack (slirp4netns) or a bridge (Docker) forwards
// a connection to any address, the host's included, so a service bound to
// 0.0.0.0 or to a host address (docker0's among them) would answer a
// sandbox's command; loopback alone is no barrier.
package hostnet

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
)

// Key names the host's IPv4 addresses that Block routes away: a sandbox
// whose namespace was blocked under another key is blocked again, so that
// an address the host gained since is covered too.
func Key() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	var out []string
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() {
			out = append(out, ipn.IP.To4().String())
		}
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

// LinkLocal is IPv4's link-local network, which Block makes unreachable.
const LinkLocal = "169.254.0.0/16"

// Block gives each IPv4 address of the host's interfaces (loopback aside,
// which is the namespace's own) an unreachable route in the network
// namespace netns. A command without CAP_NET_ADMIN in the namespace's
// owner cannot remove them. An address the host gains later is not
// covered. The link-local network is made unreachable too. It needs the capabilities to change netns's routes: root's,
// or those of the owner of netns's user namespace.
//
// Each of also, a network the sandbox shares with others (a Docker
// bridge's), is made unreachable too, as two halves, each more specific
// than the network's own link route; the gateway stays a next hop.
func Block(netns *os.File, also ...*net.IPNet) error {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return fmt.Errorf("the host's addresses: %w", err)
	}
	// Link-local addresses are the host's network's alone: a cloud host's
	// metadata service (169.254.169.254) hands out its credentials.
	batch := strings.Builder{}
	batch.WriteString("route replace unreachable " + LinkLocal + "\n")
	for _, a := range addrs {
		// Neither slirp4netns (without --enable-ipv6) nor the sandboxes'
		// Docker bridge route IPv6 to the host.
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() {
			fmt.Fprintf(&batch, "route replace unreachable %s/32\n", ipn.IP.To4())
		}
	}
	for _, n := range also {
		ones, bits := n.Mask.Size()
		if bits != 32 || ones >= 31 {
			continue
		}
		half := net.CIDRMask(ones+1, 32)
		lo := n.IP.To4().Mask(n.Mask)
		hi := slices.Clone(lo)
		hi[ones/8] |= 0x80 >> (ones % 8)
		fmt.Fprintf(&batch, "route replace unreachable %s\nroute replace unreachable %s\n", &net.IPNet{IP: lo, Mask: half}, &net.IPNet{IP: hi, Mask: half})
	}
	if batch.Len() == 0 {
		return nil
	}
	ip := "/usr/sbin/ip"
	if _, err := os.Stat(ip); err != nil {
		ip = "/sbin/ip"
	}
	if _, err := os.Stat(ip); err != nil {
		return fmt.Errorf("route the host's addresses away from the sandbox: no ip command (Debian's iproute2 package): %w", err)
	}
	cmd := exec.Command("/usr/bin/nsenter", "--net=/proc/self/fd/3", ip, "-batch", "-")
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.ExtraFiles = []*os.File{netns}
	cmd.Stdin = strings.NewReader(batch.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("route the host's addresses away from the sandbox: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}
