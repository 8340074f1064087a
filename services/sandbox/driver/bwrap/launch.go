package bwrap

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

// launched is one command running in bwrap under the init: what Exec and
// StartProcess share. The init has been told to start the command.
type launched struct {
	cmd    *exec.Cmd
	pipes  *pipes
	group  *group // nil without a limit the cgroups enforce
	net    *slirp // nil without the network
	status *bufio.Reader
}

// launch starts command in dir with env over the sandbox's. stdin is the
// command's stdin (nil: /dev/null). tty, when set, is a pty's slave the
// command gets as stdin, stdout and stderr: the init then makes it the
// command's controlling terminal, and the output pipes stay empty.
func (s *sandbox) launch(dir, command string, env map[string]string, stdin io.Reader, tty *os.File) (*launched, error) {
	// A disk limit bounds /tmp (a tmpfs, in memory) as it bounds the
	// workspace.
	args := s.d.args(cmp.Or(s.limits.DiskBytes, s.d.cfg.TmpBytes), s.info.RootDirectory, dir, s.network, initPath, InitArg, "bash", "-c", command)
	args = append(envArgs(s.env, env), args...)
	cmd := exec.Command(s.d.cfg.Bwrap, args...)
	g, err := s.d.cgroups.newGroup("fabro-exec-"+strconv.FormatInt(time.Now().UnixNano(), 36)+"-"+strconv.Itoa(os.Getpid()), s.limits)
	if err != nil {
		return nil, fmt.Errorf("cgroup for the command: %w", err)
	}
	l := &launched{cmd: cmd, group: g}
	ok := false
	defer func() {
		if !ok {
			l.close()
		}
	}()
	var joins []string
	if g != nil {
		if err := g.chown(s.id); err != nil {
			return nil, fmt.Errorf("cgroup for the command: %w", err)
		}
		joins = g.procs()
	}
	// The sandbox's freezer group (pause.go) holds every command too.
	if fz, err := s.freezerProcs(); err != nil {
		return nil, err
	} else if fz != "" {
		joins = append(joins, fz)
	}
	if len(joins) > 0 {
		// A shell, already the sandbox's uid, joins the groups, then
		// becomes bwrap: nothing of the command ever runs outside them.
		joinArgs := append([]string{"-c", `while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"`, "fabro-cgroup-join"}, joins...)
		cmd = exec.Command("/bin/sh", append(append(joinArgs, "--", s.d.cfg.Bwrap), args...)...)
		l.cmd = cmd
	}
	// bwrap (and the shell that joins the cgroups) run on the host, before
	// any namespace exists: they get no variable of the caller's, which
	// could otherwise be LD_PRELOAD naming a library the command wrote. The
	// command's environment is set inside, by bwrap (envArgs).
	cmd.Env = hostEnv
	// Its own group, so that killing bwrap kills nothing of ours; bwrap
	// dies with us, and the sandbox with bwrap.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: s.id.cred}
	cmd.WaitDelay = drainGrace
	cmd.Stdin = stdin
	if l.pipes, err = newPipes(); err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = l.pipes.outW, l.pipes.errW
	if tty != nil {
		cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	}
	cmd.ExtraFiles = []*os.File{l.pipes.ctlR, l.pipes.stW}
	var infoR, infoW *os.File
	if s.network {
		if infoR, infoW, err = os.Pipe(); err != nil {
			return nil, err
		}
		defer infoR.Close()
		defer infoW.Close()
		cmd.ExtraFiles = append(cmd.ExtraFiles, infoW) // infoFD
	}
	if err := cmd.Start(); err != nil {
		if errors.Is(err, syscall.E2BIG) {
			return nil, fmt.Errorf("%w: the command or its environment is longer than exec takes (128 KiB for the command); write a script to a file and run that", driver.ErrInvalid)
		}
		return nil, fmt.Errorf("start bwrap: %w", err)
	}
	l.pipes.closeChildEnds()
	l.status = bufio.NewReader(l.pipes.stR)
	if s.network {
		infoW.Close()
		// slirp4netns configures the namespace once bwrap is done with it.
		l.pipes.stR.SetReadDeadline(time.Now().Add(netSetupTimeout))
		line, err := l.status.ReadString('\n')
		l.pipes.stR.SetReadDeadline(time.Time{})
		if err == nil && line == "ready\n" {
			l.net, err = s.d.startNet(infoR, s.id)
		} else if err == nil {
			err = fmt.Errorf("the init said %q", line)
		}
		if err != nil {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			cmd.Wait()
			return nil, fmt.Errorf("network for the command: %w", err)
		}
	}
	// The init starts the command once told: the network, if any, is up.
	l.pipes.ctlW.Write([]byte{'G'})
	ok = true
	return l, nil
}

// ctl sends the init one control message.
func (l *launched) ctl(b ...byte) { l.pipes.ctlW.Write(b) }

// readStatus reads the init's status to its end (after "ready") and
// returns its first line.
func (l *launched) readStatus() string {
	b, _ := io.ReadAll(l.status)
	st := strings.TrimSpace(strings.TrimPrefix(string(b), "ready\n"))
	st, _, _ = strings.Cut(st, "\n")
	return st
}

// result fills res from the init's status line (only the init writes it:
// no command can reach its pipe). stderr is what to show when there is
// none.
func (l *launched) result(st string, werr error, stderr []byte, res *driver.ExecResult) error {
	kind, num, _ := strings.Cut(st, " ")
	n, nerr := strconv.Atoi(num)
	switch {
	case kind == "exit" && nerr == nil:
		res.ExitCode = &n
	case kind == "signal" && nerr == nil:
		res.Signal = driver.SignalName(n)
	case kind == "error" && strings.Contains(num, "executable file not found"):
		return fmt.Errorf("%w: %s", driver.ErrBashMissing, num)
	default:
		return fmt.Errorf("bwrap ended without the command's status (%v): %s", werr, strings.TrimSpace(string(stderr)))
	}
	return nil
}

// close releases what the launch holds, once bwrap is reaped.
func (l *launched) close() {
	if l.pipes != nil {
		l.pipes.close()
	}
	if l.net != nil {
		l.net.stop()
	}
	if l.group != nil {
		l.group.remove()
	}
}
