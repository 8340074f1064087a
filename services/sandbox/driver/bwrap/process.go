package bwrap

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/fabro-sh/fabro-go/platform/grpcerr"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
	"github.com/fabro-sh/fabro-go/services/sandbox/internal/pty"
)

// The processes facet: a process is a command of Exec's kind (bwrap, the
// init, bash, the same namespaces, user, cgroups and network) whose stdin
// stays open, with no timeout, signalled through the init's control pipe.

var (
	_ driver.ProcessStarter = (*sandbox)(nil)
	_ driver.Resizer        = (*process)(nil)
)

// procSet is a sandbox's running processes, killed by Delete.
type procSet struct {
	mu      sync.Mutex
	deleted bool
	m       map[*process]struct{}
}

// add registers p, false once the sandbox is deleted.
func (ps *procSet) add(p *process) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.deleted {
		return false
	}
	if ps.m == nil {
		ps.m = map[*process]struct{}{}
	}
	ps.m[p] = struct{}{}
	return true
}

func (ps *procSet) remove(p *process) {
	ps.mu.Lock()
	delete(ps.m, p)
	ps.mu.Unlock()
}

// killAll refuses new processes, kills every running one's tree and waits
// for them to end.
func (ps *procSet) killAll() {
	ps.mu.Lock()
	ps.deleted = true
	running := make([]*process, 0, len(ps.m))
	for p := range ps.m {
		running = append(running, p)
	}
	ps.mu.Unlock()
	for _, p := range running {
		p.Signal(syscall.SIGKILL)
	}
	for _, p := range running {
		<-p.done
	}
}

// StartProcess implements driver.ProcessStarter. A process holds one of
// the plugin's MaxExecs slots while it runs.
func (s *sandbox) StartProcess(ctx context.Context, spec driver.ProcessSpec, out driver.Output) (driver.Process, error) {
	select {
	case s.d.execSlots <- struct{}{}:
	default:
		return nil, busyErr.New(codes.ResourceExhausted, "BWRAP_EXEC_LIMIT",
			fmt.Sprintf("the bwrap plugin runs at most %d commands and processes at once; try again when one ends", s.d.cfg.MaxExecs), grpcerr.RetryAfter(time.Second))
	}
	started := false
	defer func() {
		if !started {
			<-s.d.execSlots
		}
	}()
	dir, err := s.dir(ctx, spec.Dir)
	if err != nil {
		return nil, err
	}
	p := &process{s: s, start: time.Now(), done: make(chan struct{})}
	var stdinR, tty *os.File
	if spec.Terminal != nil {
		if p.master, tty, err = pty.Open(*spec.Terminal); err != nil {
			return nil, err
		}
		p.stdin = pty.Input(p.master)
	} else {
		var w *os.File
		if stdinR, w, err = os.Pipe(); err != nil {
			return nil, err
		}
		p.stdin = w
	}
	// The far ends are the child's once it runs (or nobody's).
	closeFar := func() {
		if stdinR != nil {
			stdinR.Close()
		}
		if tty != nil {
			tty.Close()
		}
	}
	if !s.procs.add(p) {
		closeFar()
		p.closeNear()
		return nil, fmt.Errorf("%w: the sandbox is deleted", driver.ErrNotFound)
	}
	var stdin io.Reader
	if stdinR != nil {
		stdin = stdinR
	}
	p.l, err = s.launch(dir, spec.Command, spec.Env, stdin, tty)
	closeFar()
	if err != nil {
		s.procs.remove(p)
		p.closeNear()
		return nil, err
	}
	started = true
	if out != nil && out.Started() != nil {
		out = nil
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
	if p.master != nil {
		// All output is the terminal's; it reads EIO once every slave is
		// closed, which the init's end and bwrap's ensure.
		p.readers.Go(func() { read(p.master, driver.Stdout) })
	} else {
		p.readers.Go(func() { read(p.l.pipes.outR, driver.Stdout) })
		p.readers.Go(func() { read(p.l.pipes.errR, driver.Stderr) })
	}
	go p.finish()
	return p, nil
}

// process is one process of StartProcess. Its goroutines: the readers and
// finish, which ends once bwrap (and so the namespace) is gone.
type process struct {
	s      *sandbox
	l      *launched
	stdin  io.WriteCloser
	master *os.File // the pty's, on a terminal; nil otherwise
	start  time.Time
	killed atomic.Bool

	readers sync.WaitGroup
	done    chan struct{} // bwrap reaped; res is set

	mu    sync.Mutex // held while signalling and resizing, so neither follows the end
	ended bool       // the init reported the command's end
	res   driver.ExecResult
}

// closeNear closes our ends of the stdio.
func (p *process) closeNear() {
	p.stdin.Close()
	if p.master != nil {
		p.master.Close()
	}
}

// finish waits for the init's status (written once the command and all
// it started are gone) and for bwrap, drains the output and releases all.
func (p *process) finish() {
	defer close(p.done)
	statusCh := make(chan string, 1)
	go func() { statusCh <- p.l.readStatus() }()
	werr := p.l.cmd.Wait()
	st := <-statusCh
	p.mu.Lock()
	p.ended = true
	p.mu.Unlock()
	drained := make(chan struct{})
	go func() { p.readers.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(drainGrace):
		for _, f := range []*os.File{p.master, p.l.pipes.outR, p.l.pipes.errR} {
			if f != nil {
				f.SetReadDeadline(time.Now())
			}
		}
		<-drained
	}
	res := driver.ExecResult{Termination: driver.Exited, Duration: time.Since(p.start), StreamsSeparated: p.master == nil}
	if p.l.group != nil {
		res.LimitHit = p.l.group.hit()
	}
	if err := p.l.result(st, werr, nil, &res); err != nil {
		res.Termination = driver.TerminationUnknown
	}
	if p.killed.Load() {
		res.Termination = driver.Killed
	}
	p.mu.Lock()
	p.closeNear()
	p.l.close()
	p.res = res
	p.mu.Unlock()
	p.s.procs.remove(p)
	<-p.s.d.execSlots
}

// Stdin implements driver.Process. On a terminal, Close sends the
// end-of-file character.
func (p *process) Stdin() io.WriteCloser { return p.stdin }

// Signal implements driver.Process: the init sends it to the command's
// group; SIGKILL kills every process of the namespace.
func (p *process) Signal(sig syscall.Signal) (bool, error) {
	if sig <= 0 || sig > 64 {
		return false, fmt.Errorf("%w: signal %d", driver.ErrInvalid, sig)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended {
		return false, nil
	}
	switch sig {
	case syscall.SIGKILL:
		p.killed.Store(true)
		p.l.ctl('K')
	default:
		p.l.ctl('S', byte(sig))
	}
	return true, nil
}

// Resize implements driver.Resizer.
func (p *process) Resize(size driver.TerminalSize) error {
	if p.master == nil {
		return fmt.Errorf("%w: the process has no terminal", driver.ErrUnsupported)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended {
		return nil
	}
	return pty.SetSize(p.master, size)
}

// Wait implements driver.Process.
func (p *process) Wait() driver.ExecResult {
	<-p.done
	return p.res
}

// endAll, at Delete, thaws the sandbox (a frozen process cannot die), then
// kills every process and waits for them.
func (s *sandbox) endAll() {
	s.frz.thaw()
	s.procs.killAll()
}
