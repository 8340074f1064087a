// Package sandboxinit is the init of a bwrap sandbox's pid namespace. It
// imports next to nothing, so that the small binary made of it
// (cmd/fabro-bwrap-init) starts in a few milliseconds: it runs once for
// every command.
package sandboxinit

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// Arg, as the first argument, makes a binary the init of a sandbox's pid
// namespace: see [Run].
const Arg = "__fabro_sandbox_init"

// Run is pid 1 inside bwrap: it writes "ready" on fd 4, waits for 'G' on fd 3, runs the command
// (os.Args[2:]) in its own process group (a session of its own, with
// the terminal, when fd 0 is a pty) and reaps every orphan. It reads
// stop requests on fd 3 ('T': TERM to the command's group; 'S' and a
// byte: that signal to the group; 'K', or the pipe's end: KILL to every
// process in the namespace) and, once the
// command is reaped, kills what is left, writes "exit N" or "signal N" on
// fd 4 and exits; the kernel then kills anything that remains in the
// namespace. Processes inside cannot signal it: pid 1 ignores signals it
// does not handle.
//
// The command gets descriptors 0, 1 and 2 and nothing else, and cannot
// reach the init's through /proc/1/fd either: the init is not dumpable,
// which closes its /proc entries to a process of the same uid without
// capabilities (and the command has none).
func Run() {
	// kill(-1) below would reach every process of the user outside a pid
	// namespace of its own: refuse to run anywhere but as its pid 1.
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "the sandbox init runs only as pid 1 of a bwrap sandbox")
		os.Exit(2)
	}
	unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	// Whatever bwrap passed on (its info descriptor, anything it was
	// given) stays out of the command.
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
		for _, e := range ents {
			if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
				syscall.CloseOnExec(fd)
			}
		}
	}
	ctl, st := os.NewFile(3, "control"), os.NewFile(4, "status")
	// bwrap has made the sandbox (its loopback up) before it runs us.
	fmt.Fprintln(st, "ready")
	if b := make([]byte, 1); func() bool { n, err := ctl.Read(b); return err != nil || n != 1 || b[0] != 'G' }() {
		os.Exit(1) // told to stop before the command started
	}
	path, err := exec.LookPath(os.Args[2])
	if err != nil {
		fmt.Fprintf(st, "error %v\n", err)
		os.Exit(1)
	}
	sys := &syscall.SysProcAttr{Setpgid: true}
	if _, err := unix.IoctlGetTermios(0, unix.TCGETS); err == nil {
		// A terminal (a process's pty): the command leads a session of
		// its own with it as the controlling terminal, and leads its
		// group too, so the group signals below reach it as for pipes.
		sys = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	}
	p, err := os.StartProcess(path, os.Args[2:], &os.ProcAttr{
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
		Sys:   sys,
	})
	if err != nil {
		fmt.Fprintf(st, "error %v\n", err)
		os.Exit(1)
	}
	os.Stdin.Close()
	os.Stdout.Close()
	os.Stderr.Close()
	pid := p.Pid
	go func() {
		b := make([]byte, 1)
		for {
			n, err := ctl.Read(b)
			switch {
			case err != nil:
				syscall.Kill(-1, syscall.SIGKILL)
				return
			case n == 1 && b[0] == 'T':
				syscall.Kill(-pid, syscall.SIGTERM)
			case n == 1 && b[0] == 'K':
				syscall.Kill(-1, syscall.SIGKILL)
			case n == 1 && b[0] == 'S':
				// A signal for the command's group (a process's
				// SignalProcess): its number is the next byte.
				if n, err := io.ReadFull(ctl, b); err == nil && n == 1 && b[0] > 0 && b[0] < 65 {
					syscall.Kill(-pid, syscall.Signal(b[0]))
				}
			}
		}
	}()
	var result string
	for {
		var ws syscall.WaitStatus
		wpid, err := syscall.Wait4(-1, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			result = fmt.Sprintf("error wait: %v", err)
			break
		}
		if wpid == pid {
			if ws.Signaled() {
				result = fmt.Sprintf("signal %d", int(ws.Signal()))
			} else {
				result = fmt.Sprintf("exit %d", ws.ExitStatus())
			}
			break
		}
	}
	// No descendant outlives the command.
	syscall.Kill(-1, syscall.SIGKILL)
	for {
		var ws syscall.WaitStatus
		if _, err := syscall.Wait4(-1, &ws, 0, nil); err == syscall.ECHILD {
			break
		}
	}
	fmt.Fprintln(st, result)
	os.Exit(0)
}
