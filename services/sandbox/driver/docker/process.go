package docker

import (
	"context"
	"fmt"
	"io"
	"path"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

var _ driver.ProcessStarter = (*sandbox)(nil)

// noTimeout is the wrapper's timeout for a process: about 30 years.
const noTimeout = 1 << 40

// StartProcess implements driver.ProcessStarter: the process runs under the
// Exec wrapper (wrapper.pl: its own group, a subreaper that kills and reaps
// the whole tree) with no timeout, its stdin the attached connection's.
func (s *sandbox) StartProcess(ctx context.Context, spec driver.ProcessSpec, out driver.Output) (driver.Process, error) {
	rel, err := s.rel(spec.Dir)
	if err != nil {
		return nil, err
	}
	fi, err := s.files.Stat(ctx, rel)
	if err != nil {
		return nil, err
	}
	if fi.Type != driver.TypeDirectory {
		return nil, fmt.Errorf("%w: working_dir %s", driver.ErrNotDirectory, spec.Dir)
	}
	s.mu.Lock()
	deleted := s.deleted
	s.mu.Unlock()
	if deleted {
		return nil, fmt.Errorf("%w: the sandbox is deleted", driver.ErrNotFound)
	}
	id, nonce := randHex(12), randHex(12)
	env := make([]string, 0, len(spec.Env))
	for k, v := range spec.Env {
		env = append(env, k+"="+v)
	}
	cr, err := s.d.cli.ContainerExecCreate(ctx, s.p.name, container.ExecOptions{
		User: s.p.user, WorkingDir: path.Join(s.p.workdir, rel), Env: env,
		Cmd:          []string{"perl", "-e", wrapperScript, s.arch, id, nonce, strconv.FormatInt(noTimeout, 10), strconv.FormatInt(driver.StopGrace.Milliseconds(), 10), spec.Command},
		AttachStdout: true, AttachStderr: true, AttachStdin: true, Tty: spec.Terminal != nil,
	})
	if err != nil {
		return nil, s.engineErr(ctx, "create exec", err)
	}
	// The connection lives as long as the process, not as ctx.
	// Tty here too: the engine frames the stream unless the start says tty.
	hj, err := s.d.cli.ContainerExecAttach(context.WithoutCancel(ctx), cr.ID, container.ExecAttachOptions{Tty: spec.Terminal != nil})
	if err != nil {
		return nil, s.engineErr(ctx, "start exec", err)
	}
	p := &dockerProcess{s: s, id: id, execID: cr.ID, hj: hj, start: time.Now(), done: make(chan struct{}), tty: spec.Terminal != nil}
	if p.tty {
		// API 1.41 cannot size the terminal at create; the wrapper waits
		// for this before it starts the command.
		if err := p.resize(ctx, *spec.Terminal); err != nil {
			hj.Close()
			return nil, s.engineErr(ctx, "size the terminal", err)
		}
	}
	if out != nil && out.Started() != nil {
		out = nil
	}
	go p.run(nonce, out)
	return p, nil
}

// dockerProcess is one process of StartProcess; run reads its output until
// the wrapper's trailer, then closes done.
type dockerProcess struct {
	s      *sandbox
	id     string // the wrapper's id, for signals
	execID string
	hj     types.HijackedResponse
	start  time.Time
	tty    bool // on a terminal: one raw stream, no frames

	stdinMu sync.Mutex
	closed  bool // stdin closed
	killed  bool // guarded by stdinMu too
	done    chan struct{}
	res     driver.ExecResult
}

func (p *dockerProcess) run(nonce string, out driver.Output) {
	defer close(p.done)
	defer p.hj.Close()
	tr := &trailer{marker: []byte("\x00fabro-" + nonce + ":")}
	emit := func(st driver.Stream, b []byte) {
		if len(b) > 0 && out != nil {
			out.Chunk(st, b)
		}
	}
	trailerStream := driver.Stderr
	if p.tty {
		// The terminal is all of the output, the trailer at its end.
		trailerStream = driver.Stdout
		buf := make([]byte, 32<<10)
		for {
			n, err := p.hj.Reader.Read(buf)
			emit(driver.Stdout, tr.feed(buf[:n]))
			if err != nil {
				break
			}
		}
	} else {
		demux(p.hj.Reader, func(st driver.Stream, b []byte) {
			if st == driver.Stderr {
				emit(driver.Stderr, tr.feed(b))
				return
			}
			emit(driver.Stdout, b)
		})
	}
	emit(trailerStream, tr.flush())
	res := driver.ExecResult{Termination: driver.Exited, Duration: time.Since(p.start), StreamsSeparated: !p.tty}
	p.stdinMu.Lock()
	if p.killed {
		res.Termination = driver.Killed
	}
	p.stdinMu.Unlock()
	if st := tr.status; st != nil {
		st.apply(&res, p.s)
	} else if ins, err := p.s.d.cli.ContainerExecInspect(context.Background(), p.execID); err == nil && !ins.Running {
		// No trailer: the wrapper died with the container (a Delete).
		code := ins.ExitCode
		res.ExitCode = &code
		if res.Termination != driver.Killed {
			res.Termination = driver.TerminationUnknown
		}
	} else {
		res.Termination = driver.Killed // the container is gone
		res.Signal = "SIGKILL"
	}
	p.res = res
}

// Stdin implements driver.Process.
func (p *dockerProcess) Stdin() io.WriteCloser { return dockerStdin{p} }

type dockerStdin struct{ p *dockerProcess }

func (w dockerStdin) Write(b []byte) (int, error) {
	select {
	case <-w.p.done:
		return 0, io.ErrClosedPipe
	default:
	}
	return w.p.hj.Conn.Write(b)
}

func (w dockerStdin) Close() error {
	w.p.stdinMu.Lock()
	defer w.p.stdinMu.Unlock()
	if w.p.closed {
		return nil
	}
	w.p.closed = true
	if w.p.tty {
		// The terminal's end of file: the connection is also the output.
		_, err := w.p.hj.Conn.Write([]byte{4}) // VEOF, ^D
		w.p.closed = false
		return err
	}
	return w.p.hj.CloseWrite()
}

var _ driver.Resizer = (*dockerProcess)(nil)

// Resize implements driver.Resizer.
func (p *dockerProcess) Resize(size driver.TerminalSize) error {
	if !p.tty {
		return fmt.Errorf("%w: the process has no terminal", driver.ErrUnsupported)
	}
	select {
	case <-p.done:
		return nil
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), signalExec)
	defer cancel()
	if err := p.resize(ctx, size); err != nil {
		select {
		case <-p.done:
			return nil // it ended meanwhile
		default:
		}
		return p.s.engineErr(ctx, "resize the terminal", err)
	}
	return nil
}

func (p *dockerProcess) resize(ctx context.Context, size driver.TerminalSize) error {
	return p.s.d.cli.ContainerExecResize(ctx, p.execID, container.ResizeOptions{Height: uint(size.Rows), Width: uint(size.Cols)})
}

// wrapperSignals are what the wrapper forwards: TERM to the command's
// group, USR1 kills the whole tree. Other signals go to the command's
// group directly (the wrapper's one child leads it).
var wrapperSignals = map[syscall.Signal]string{syscall.SIGTERM: "TERM", syscall.SIGKILL: "USR1"}

// Signal implements driver.Process.
func (p *dockerProcess) Signal(sig syscall.Signal) (bool, error) {
	select {
	case <-p.done:
		return false, nil
	default:
	}
	if sig == syscall.SIGKILL {
		p.stdinMu.Lock()
		p.killed = true
		p.stdinMu.Unlock()
	}
	if name, ok := wrapperSignals[sig]; ok {
		p.s.signal(p.done, p.id, name)
		return true, nil
	}
	name := driver.SignalName(int(sig))[len("SIG"):]
	ctx, cancel := context.WithTimeout(context.Background(), signalExec)
	defer cancel()
	// The children file has no newline: read by $(...), not read.
	script := `read -r p < ` + pidsDir + `/$1 && c=$(cat /proc/$p/task/$p/children) && c=${c%% *} && [ -n "$c" ] && kill -s "$2" -- "-$c"`
	if _, code, err := p.s.run(ctx, []string{"bash", "-c", script, "fabro-signal", p.id, name}); err != nil || code != 0 {
		select {
		case <-p.done:
			return false, nil
		default:
		}
		if err != nil {
			return false, err
		}
		return false, fmt.Errorf("signal %s: exit %d", name, code)
	}
	return true, nil
}

// Wait implements driver.Process.
func (p *dockerProcess) Wait() driver.ExecResult {
	<-p.done
	return p.res
}
