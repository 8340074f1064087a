// Package listen explains a listener that could not start: for a port in
// use, which address, what it was for and who holds it.
package listen

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Error explains a failed listen on addr for a person: for a port in
// use, which port, what it was for (role: "gRPC", "REST", "NATS"), the
// process holding it when this machine says (Linux, and permission to read
// its /proc entry), and the flag that picks another; else err, wrapped.
func Error(role, addr, flag string, err error) error {
	if !errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("listen %s on %s: %w", role, addr, err)
	}
	by := ""
	if _, port, perr := net.SplitHostPort(addr); perr == nil {
		if p, perr := strconv.Atoi(port); perr == nil {
			if owner := portOwner(p); owner != "" {
				by = " by " + owner
			}
		}
	}
	return fmt.Errorf("the %s address %s is in use%s: stop that process, or give %s another address", role, addr, by, flag)
}

// portOwner names the process listening on TCP port p ("fabro (pid 123)"),
// from /proc/net/tcp{,6} and the processes' descriptors, or "" when it
// cannot be known.
func portOwner(p int) string {
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		listeningInodes(f, p, inodes)
	}
	if len(inodes) == 0 {
		return ""
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range procs {
		link, err := os.Readlink(fd)
		if err != nil || !strings.HasPrefix(link, "socket:[") {
			continue
		}
		if inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] {
			pid := strings.Split(fd, "/")[2]
			comm, _ := os.ReadFile("/proc/" + pid + "/comm")
			return fmt.Sprintf("%s (pid %s)", strings.TrimSpace(string(comm)), pid)
		}
	}
	return ""
}

// listeningInodes adds to inodes those of the sockets in a /proc/net/tcp
// table that listen (state 0A) on port p.
func listeningInodes(table string, p int, inodes map[string]bool) {
	f, err := os.Open(table)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 || fields[3] != "0A" {
			continue
		}
		_, hexPort, ok := strings.Cut(fields[1], ":")
		if port, err := strconv.ParseUint(hexPort, 16, 16); ok && err == nil && int(port) == p {
			inodes[fields[9]] = true
		}
	}
}
