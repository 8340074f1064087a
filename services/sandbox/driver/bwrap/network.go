package bwrap

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fabro-sh/fabro-go/services/sandbox/internal/hostnet"
)

// A command allowed the network still gets a network namespace of its own:
// slirp4netns gives it a user-mode stack (10.0.2.100, gateway 10.0.2.2,
// DNS 10.0.2.3) with --disable-host-loopback, so neither the host's
// loopback (the service's gRPC, REST and NATS ports) nor anything bound to
// 127.0.0.1 can be reached through it. slirp4netns parses every packet the
// command sends, so it runs as the sandbox's uid, in the sandbox's user
// namespace, with its own sandbox and seccomp filter (see slirpCred).
//
// slirp4netns forwards a connection to any address but 10.0.2.2, the host's
// own addresses included: a service bound to 0.0.0.0 (or to the host's
// docker0 address) would answer. So before the command starts, every IPv4
// address of the host's interfaces is given an unreachable route in the
// sandbox's namespace (hostnet.Block); the command, with no capability in the
// namespace's owner, cannot remove them. An address the host gains while a
// command runs is not covered until the next command.

// infoFD is the descriptor on which bwrap reports the sandbox's pid.
const infoFD = 5

// netSetupTimeout bounds how long a sandbox waits for its network.
const netSetupTimeout = 10 * time.Second

// slirp is one command's slirp4netns.
type slirp struct {
	cmd  *exec.Cmd
	exit *os.File // closing it tells slirp4netns to exit
}

// startNet reads the sandbox's pid from bwrap's info pipe and starts
// slirp4netns in its network namespace, returning once the interface is
// configured.
func (d *Driver) startNet(info *os.File, id ident) (*slirp, error) {
	var st struct {
		ChildPID int `json:"child-pid"`
	}
	info.SetReadDeadline(time.Now().Add(netSetupTimeout))
	if err := json.NewDecoder(info).Decode(&st); err != nil || st.ChildPID <= 0 {
		return nil, fmt.Errorf("read the sandbox's pid from bwrap: %v", err)
	}
	// bwrap nests user namespaces of its own for the command; slirp4netns
	// must join the one that owns the network namespace.
	netns, err := os.Open("/proc/" + strconv.Itoa(st.ChildPID) + "/ns/net")
	if err != nil {
		return nil, fmt.Errorf("the sandbox's network namespace: %w", err)
	}
	defer netns.Close()
	ufd, err := unix.IoctlRetInt(int(netns.Fd()), unix.NS_GET_USERNS)
	if err != nil {
		return nil, fmt.Errorf("the owner of the sandbox's network namespace: %w", err)
	}
	owner := os.NewFile(uintptr(ufd), "userns")
	defer owner.Close()
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer readyR.Close()
	exitR, exitW, err := os.Pipe()
	if err != nil {
		readyW.Close()
		return nil, err
	}
	cmd := exec.Command(d.cfg.Slirp4netns, "--configure", "--mtu=65520", "--disable-host-loopback",
		"--enable-sandbox", "--enable-seccomp",
		"--userns-path=/proc/self/fd/3", "--ready-fd=4", "--exit-fd=5",
		strconv.Itoa(st.ChildPID), "tap0")
	cmd.Env = hostEnv
	cmd.ExtraFiles = []*os.File{owner, readyW, exitR}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: slirpCred(id)}
	var stderr limitedBuffer
	cmd.Stderr = &stderr
	err = cmd.Start()
	readyW.Close()
	exitR.Close()
	if err != nil {
		exitW.Close()
		return nil, fmt.Errorf("start slirp4netns: %w", err)
	}
	s := &slirp{cmd: cmd, exit: exitW}
	readyR.SetReadDeadline(time.Now().Add(netSetupTimeout))
	if _, err := io.ReadFull(readyR, make([]byte, 1)); err != nil {
		s.stop()
		return nil, fmt.Errorf("slirp4netns did not configure the network: %v: %s", err, stderr.String())
	}
	if err := hostnet.Block(netns); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// slirpCred is who slirp4netns runs as: the sandbox's uid, when it may
// open /dev/net/tun (Debian's is 0666). On a host whose tun device is
// root's alone it stays root, but only with capabilities in the sandbox's
// user namespace, in its own empty root and under its seccomp filter.
func slirpCred(id ident) *syscall.Credential {
	if fi, err := os.Stat("/dev/net/tun"); err == nil && fi.Mode().Perm()&0o006 == 0o006 {
		return id.cred
	}
	return nil
}

// stop ends slirp4netns and reaps it.
func (s *slirp) stop() {
	s.exit.Close()
	done := make(chan struct{})
	go func() {
		select {
		case <-done:
		case <-time.After(drainGrace):
			syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		}
	}()
	s.cmd.Wait()
	close(done)
}

// limitedBuffer keeps the first 4 KiB written to it.
type limitedBuffer struct{ b []byte }

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := 4096 - len(l.b); room > 0 {
		l.b = append(l.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (l *limitedBuffer) String() string { return string(l.b) }
