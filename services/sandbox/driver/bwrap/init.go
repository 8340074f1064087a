package bwrap

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/plugin"
)

// InitArg, as the first argument, makes the plugin binary the init of a
// sandbox's pid namespace: see [Init].
const InitArg = "__fabro_sandbox_init"

// Init is pid 1 inside bwrap: it writes "ready" on fd 4, waits for 'G' on fd 3, runs the command
// (os.Args[2:]) in its own process group and reaps every orphan. It reads
// stop requests on fd 3 ('T': TERM to the command's group; 'K', or the
// pipe's end: KILL to every process in the namespace) and, once the
// command is reaped, kills what is left, writes "exit N" or "signal N" on
// fd 4 and exits; the kernel then kills anything that remains in the
// namespace. Processes inside cannot signal it: pid 1 ignores signals it
// does not handle.
//
// The command gets descriptors 0, 1 and 2 and nothing else, and cannot
// reach the init's through /proc/1/fd either: the init is not dumpable,
// which closes its /proc entries to a process of the same uid without
// capabilities (and the command has none).
func Init() {
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
	p, err := os.StartProcess(path, os.Args[2:], &os.ProcAttr{
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
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

// reachableInit is the init binary as sandboxes can reach it: bwrap binds
// it as the sandbox's uid, which may be unable to reach the plugin's own
// path (a 0700 directory). Then a copy is kept, root's and read-only, in a
// directory of the workspace root named for its content, so restarts reuse
// it and a copy another user planted is never taken.
func (d *Driver) reachableInit(probe ident) (string, error) {
	if probe.as(func() error {
		f, err := os.Open(d.cfg.Init)
		if err == nil {
			f.Close()
		}
		return err
	}) == nil {
		return d.cfg.Init, nil
	}
	sum, err := plugin.FileSHA256(d.cfg.Init)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(d.workspaceRoot(), ".fabro-bwrap-init-"+sum[:24])
	dst := filepath.Join(dir, "init")
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	if err := ownedByRoot(dir, true); err != nil {
		return "", err
	}
	if err := ownedByRoot(dst, false); err == nil {
		if got, err := plugin.FileSHA256(dst); err == nil && got == sum {
			return dst, nil
		}
	}
	src, err := os.Open(d.cfg.Init)
	if err != nil {
		return "", err
	}
	defer src.Close()
	tmp, err := os.CreateTemp(dir, ".init-")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	_, err = io.Copy(tmp, src)
	if err == nil {
		err = tmp.Chmod(0o555)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), dst)
	}
	return dst, err
}

// ownedByRoot checks that p is root's, writable by nobody else, and a
// directory or a regular file as asked.
func ownedByRoot(p string, dir bool) error {
	fi, err := os.Lstat(p)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st.Uid != 0 || fi.Mode().Perm()&0o022 != 0 || fi.IsDir() != dir || (!dir && !fi.Mode().IsRegular()) {
		return fmt.Errorf("%s is not root's alone (%v, uid %d): refusing it as the sandbox init", p, fi.Mode(), st.Uid)
	}
	return nil
}
