package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
	"github.com/fabro-sh/fabro-go/services/sandbox/internal/pty"
)

var _ driver.ProcessStarter = (*sandbox)(nil)

// StartProcess implements driver.ProcessStarter: the process runs as Exec's
// commands do (its own group and cgroup, the sandbox's user and limits, its
// tree tracked and swept), with a stdin pipe kept open and no timeout.
func (s *sandbox) StartProcess(ctx context.Context, spec driver.ProcessSpec, out driver.Output) (driver.Process, error) {
	rel, err := s.resolve(spec.Dir)
	if err != nil {
		return nil, err
	}
	fi, err := s.root.Stat(rel)
	if err != nil {
		return nil, fsErr(spec.Dir, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%w: working_dir %s", driver.ErrNotDirectory, spec.Dir)
	}
	cmd := exec.Command(s.bash, "-c", spec.Command)
	cmd.Dir = filepath.Join(s.dir, rel)
	marker, err := newMarker()
	if err != nil {
		return nil, err
	}
	cmd.Env = withMarker(append(append([]string(nil), s.env...), envList(spec.Env)...), marker)
	cg, err := s.cmdGroup(marker)
	if err != nil {
		return nil, err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	s.user.apply(cmd)
	// Our own pipes: the child gets the far ends as files, so no copying
	// goroutine of os/exec outlives the process. On a terminal the three
	// are the pty's slave, and the master is both our ends.
	var pipes []*os.File // to close on failure
	var inR, inW, outR, outW, errR, errW, master *os.File
	if spec.Terminal != nil {
		var slave *os.File
		if master, slave, err = pty.Open(*spec.Terminal); err != nil {
			cg.remove()
			return nil, err
		}
		pipes = []*os.File{master, slave}
		inR, inW, outR, outW = slave, master, master, slave
		cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
		// A session of its own with the terminal as its controlling tty;
		// it leads its group too, so the group kill works as for pipes.
		cmd.SysProcAttr.Setpgid = false
		cmd.SysProcAttr.Setsid, cmd.SysProcAttr.Setctty, cmd.SysProcAttr.Ctty = true, true, 0
	} else {
		pipes = make([]*os.File, 6) // stdin r/w, stdout r/w, stderr r/w
		for i := 0; i < 6; i += 2 {
			if pipes[i], pipes[i+1], err = os.Pipe(); err != nil {
				for _, f := range pipes[:i] {
					f.Close()
				}
				cg.remove()
				return nil, err
			}
		}
		inR, inW, outR, outW, errR, errW = pipes[0], pipes[1], pipes[2], pipes[3], pipes[4], pipes[5]
		cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	}

	s.mu.Lock()
	if s.deleted {
		s.mu.Unlock()
		for _, f := range pipes {
			f.Close()
		}
		cg.remove()
		return nil, fmt.Errorf("%w: the sandbox is deleted", driver.ErrNotFound)
	}
	noStrayDescriptors()
	err = cg.start(cmd)
	if err == nil {
		if s.running == nil {
			s.running = map[*exec.Cmd]struct{}{}
		}
		s.running[cmd] = struct{}{}
	}
	s.mu.Unlock()
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		errR.Close()
		master.Close()
		cg.remove()
		if _, serr := os.Stat(s.bash); errors.Is(err, fs.ErrNotExist) && serr != nil {
			return nil, fmt.Errorf("%w: %s is gone", driver.ErrBashMissing, s.bash)
		}
		if errors.Is(err, syscall.E2BIG) {
			return nil, errTooLong
		}
		return nil, fmt.Errorf("start bash: %w", err)
	}
	p := &process{s: s, cmd: cmd, cg: cg, stdin: inW, master: master, start: time.Now(), pid: cmd.Process.Pid, exited: make(chan struct{}), done: make(chan struct{})}
	if cg == nil || !s.user.other() {
		p.tr = newTree(p.pid, marker)
	}
	p.kill = func() { killGroup(p.pid); cg.kill(p.pid) }
	if p.tr == nil {
		p.kill = func() { cg.kill(p.pid) }
	}
	if out != nil {
		if err := out.Started(); err != nil {
			out = nil
		}
	}
	var sinkMu sync.Mutex // one chunk at a time, across both streams
	read := func(r *os.File, stream driver.Stream) {
		buf := make([]byte, chunkSize)
		for {
			n, err := r.Read(buf)
			if n > 0 && out != nil {
				sinkMu.Lock()
				out.Chunk(stream, buf[:n])
				sinkMu.Unlock()
			}
			if err != nil {
				return
			}
		}
	}
	p.readers.Go(func() { read(outR, driver.Stdout) }) // on a terminal, EIO once every slave is closed
	if errR != nil {
		p.readers.Go(func() { read(errR, driver.Stderr) })
	}
	go func() {
		waitExit(p.pid) // does not reap: the group id stays ours until Wait
		close(p.exited)
	}()
	go p.finish(outR, errR)
	return p, nil
}

// process is one process of StartProcess. Its goroutines: the two readers,
// the exit waiter, and finish, which ends once the tree is gone.
type process struct {
	s      *sandbox
	cmd    *exec.Cmd
	cg     *cmdGroup
	tr     *tree // nil when the cgroup alone holds the tree
	kill   func()
	stdin  *os.File
	master *os.File // the pty's, on a terminal; nil otherwise
	start  time.Time
	pid    int
	killed atomic.Bool

	readers sync.WaitGroup
	exited  chan struct{} // bash exited, not yet reaped
	done    chan struct{} // reaped; res is set

	mu     sync.Mutex // held while signalling, so no signal follows the reap
	reaped bool
	res    driver.ExecResult
}

// finish waits for bash to exit, kills and sweeps what it left (as Exec
// does), drains the output and reaps it.
func (p *process) finish(outR, errR *os.File) {
	defer close(p.done)
	<-p.exited
	p.mu.Lock()
	p.kill()
	p.mu.Unlock()
	p.tr.sweep()
	if p.tr == nil {
		reapGroup(p.pid)
	}
	drained := make(chan struct{})
	go func() { p.readers.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(drainGrace):
		outR.SetReadDeadline(time.Now())
		errR.SetReadDeadline(time.Now())
		<-drained
	}
	outR.Close()
	errR.Close()
	p.stdin.Close()
	p.mu.Lock()
	werr := p.cmd.Wait()
	p.reaped = true
	p.mu.Unlock()
	p.tr.close()
	p.s.mu.Lock()
	delete(p.s.running, p.cmd)
	p.s.mu.Unlock()
	res := driver.ExecResult{Termination: driver.Exited, Duration: time.Since(p.start), StreamsSeparated: true, LimitHit: p.cg.hit()}
	p.cg.remove()
	if p.killed.Load() {
		res.Termination = driver.Killed
	}
	ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	switch {
	case !ok:
		res.Termination = driver.TerminationUnknown
		_ = werr
	case ws.Signaled():
		res.Signal = driver.SignalName(int(ws.Signal()))
	default:
		code := ws.ExitStatus()
		res.ExitCode = &code
	}
	p.res = res
}

// Stdin implements driver.Process. On a terminal, Close sends the
// end-of-file character instead: the master is also the output.
func (p *process) Stdin() io.WriteCloser {
	if p.master != nil {
		return pty.Input(p.master)
	}
	return p.stdin
}

// Resize implements driver.Resizer.
func (p *process) Resize(size driver.TerminalSize) error {
	if p.master == nil {
		return fmt.Errorf("%w: the process has no terminal", driver.ErrUnsupported)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reaped {
		return nil
	}
	return pty.SetSize(p.master, size)
}

// Signal implements driver.Process. KILL goes to the whole tree (group,
// cgroup, and what left the group); other signals to the group.
func (p *process) Signal(sig syscall.Signal) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reaped {
		return false, nil
	}
	select {
	case <-p.exited:
		return false, nil
	default:
	}
	if sig == syscall.SIGKILL {
		p.killed.Store(true)
		p.tr.snapshot()
		p.kill()
		return true, nil
	}
	p.tr.snapshot()
	if err := syscall.Kill(-p.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return false, fmt.Errorf("signal: %w", err)
	}
	return true, nil
}

// Wait implements driver.Process.
func (p *process) Wait() driver.ExecResult {
	<-p.done
	return p.res
}
