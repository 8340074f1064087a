package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pluginv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/plugin/v1"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

// The processes facet over the protocol: one Process stream per process,
// living as long as it does.

type processStream = grpc.BidiStreamingServer[pluginv1.ProcessRequest, pluginv1.ProcessResponse]

// lockedSender serialises sends on a server stream: output from the
// driver's reader, signal answers from the receiver.
type lockedSender struct {
	mu     sync.Mutex
	stream processStream
}

func (l *lockedSender) send(m *pluginv1.ProcessResponse) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stream.Send(m)
}

func (l *lockedSender) Started() error {
	return l.send(&pluginv1.ProcessResponse{Response: &pluginv1.ProcessResponse_Started{Started: &pluginv1.ExecStarted{}}})
}

func (l *lockedSender) Chunk(st driver.Stream, data []byte) error {
	return l.send(&pluginv1.ProcessResponse{Response: &pluginv1.ProcessResponse_Output{Output: &pluginv1.ExecOutput{Stream: pluginv1.Stream(st), Data: data}}})
}

// Process runs one process of a sandbox with the processes facet. The
// host's messages become stdin, its close and signals; a host that goes
// away (the stream ends) kills the process's tree.
func (s *server) Process(stream processStream) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	start := first.GetStart()
	if start == nil {
		return status.Error(codes.InvalidArgument, "the first Process message must be start")
	}
	sb, err := s.sandbox(start.GetSandbox())
	if err != nil {
		return err
	}
	ps, ok := sb.(driver.ProcessStarter)
	if !ok || !sb.Info().Capabilities.Processes {
		return toStatus(fmt.Errorf("%w: this driver has no processes facet", driver.ErrUnsupported))
	}
	spec := driver.ProcessSpec{Command: start.GetCommand(), Dir: start.GetDir(), Env: start.GetEnv()}
	if t := start.GetTerminal(); t != nil {
		if !sb.Info().Capabilities.Terminals {
			return toStatus(fmt.Errorf("%w: this driver has no terminals", driver.ErrUnsupported))
		}
		if spec.Terminal, err = terminalSize(t); err != nil {
			return toStatus(err)
		}
	}
	out := &lockedSender{stream: stream}
	p, err := ps.StartProcess(stream.Context(), spec, out)
	if err != nil {
		return toStatus(err)
	}
	ended := make(chan driver.ExecResult, 1)
	go func() { ended <- p.Wait() }()
	// The receiver ends when the host stops sending, or with the stream
	// (this handler's return).
	go func() {
		for {
			m, err := stream.Recv()
			if err == io.EOF {
				return // the host sends no more; the process runs on
			}
			if err != nil {
				p.Signal(syscall.SIGKILL) // the host is gone
				return
			}
			switch r := m.GetRequest().(type) {
			case *pluginv1.ProcessRequest_Stdin:
				p.Stdin().Write(r.Stdin)
			case *pluginv1.ProcessRequest_CloseStdin:
				p.Stdin().Close()
			case *pluginv1.ProcessRequest_Signal:
				ok, err := p.Signal(syscall.Signal(r.Signal))
				ans := &pluginv1.ProcessSignalled{Delivered: ok}
				if err != nil {
					ans.Error = err.Error()
				}
				out.send(&pluginv1.ProcessResponse{Response: &pluginv1.ProcessResponse_Signalled{Signalled: ans}})
			case *pluginv1.ProcessRequest_Resize:
				// Not answered: the host refuses a resize of a process
				// without a terminal itself.
				if rz, ok := p.(driver.Resizer); ok && spec.Terminal != nil {
					if size, err := terminalSize(r.Resize); err == nil {
						rz.Resize(*size)
					}
				}
			}
		}
	}()
	res := <-ended
	return out.send(&pluginv1.ProcessResponse{Response: &pluginv1.ProcessResponse_Result{Result: resultToProto(res)}})
}

var _ driver.ProcessStarter = (*sandbox)(nil)

// StartProcess implements driver.ProcessStarter over the Process stream.
func (s *sandbox) StartProcess(ctx context.Context, spec driver.ProcessSpec, out driver.Output) (driver.Process, error) {
	if err := s.goneErr(); err != nil {
		return nil, err
	}
	sctx, abort := context.WithCancel(context.Background())
	stream, err := s.client().Process(sctx)
	if err != nil {
		abort()
		return nil, s.d.callErr(ctx, s.p, err)
	}
	start := &pluginv1.ProcessStart{Sandbox: s.handle, Command: spec.Command, Dir: spec.Dir, Env: spec.Env}
	if spec.Terminal != nil {
		start.Terminal = terminalToProto(*spec.Terminal)
	}
	if err := stream.Send(&pluginv1.ProcessRequest{Request: &pluginv1.ProcessRequest_Start{Start: start}}); err != nil {
		_, rerr := stream.Recv()
		abort()
		return nil, s.d.callErr(ctx, s.p, rerr)
	}
	// The first message is started, or the error of a process that
	// could not start.
	m, err := stream.Recv()
	if err != nil {
		abort()
		return nil, s.d.callErr(ctx, s.p, err)
	}
	if m.GetStarted() == nil {
		abort()
		return nil, fmt.Errorf("%w: plugin %q began a process stream with %T, not started", driver.ErrUnavailable, s.d.cfg.Name, m.GetResponse())
	}
	if out != nil && out.Started() != nil {
		out = nil
	}
	p := &pluginProcess{s: s, stream: stream, abort: abort, terminal: spec.Terminal != nil, signalled: make(chan *pluginv1.ProcessSignalled, 1), done: make(chan struct{})}
	go p.read(out)
	return p, nil
}

// pluginProcess is a process in a plugin; read is the only receiver.
type pluginProcess struct {
	s      *sandbox
	stream grpc.BidiStreamingClient[pluginv1.ProcessRequest, pluginv1.ProcessResponse]
	abort  context.CancelFunc
	// terminal: the process runs on a pty (ProcessSpec.Terminal).
	terminal bool

	sendMu    sync.Mutex // one sender at a time; signals one at a time too
	signalMu  sync.Mutex
	signalled chan *pluginv1.ProcessSignalled
	done      chan struct{}
	res       driver.ExecResult
}

func (p *pluginProcess) read(out driver.Output) {
	defer close(p.done)
	defer p.abort()
	for {
		m, err := p.stream.Recv()
		if err != nil {
			// The plugin exited or broke the stream: its processes are
			// gone with it.
			p.res = driver.ExecResult{Termination: driver.TerminationUnknown, StreamsSeparated: true}
			return
		}
		switch r := m.GetResponse().(type) {
		case *pluginv1.ProcessResponse_Output:
			if out != nil {
				out.Chunk(driver.Stream(r.Output.GetStream()), r.Output.GetData())
			}
		case *pluginv1.ProcessResponse_Signalled:
			select {
			case p.signalled <- r.Signalled:
			default: // nobody asked: a protocol slip, ignored
			}
		case *pluginv1.ProcessResponse_Result:
			p.res = resultFromProto(r.Result)
			return
		}
	}
}

func (p *pluginProcess) send(m *pluginv1.ProcessRequest) error {
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	select {
	case <-p.done:
		return io.ErrClosedPipe
	default:
	}
	return p.stream.Send(m)
}

// Stdin implements driver.Process.
func (p *pluginProcess) Stdin() io.WriteCloser { return pluginStdin{p} }

type pluginStdin struct{ p *pluginProcess }

func (w pluginStdin) Write(b []byte) (int, error) {
	if err := w.p.send(&pluginv1.ProcessRequest{Request: &pluginv1.ProcessRequest_Stdin{Stdin: b}}); err != nil {
		return 0, err
	}
	return len(b), nil
}

func (w pluginStdin) Close() error {
	return w.p.send(&pluginv1.ProcessRequest{Request: &pluginv1.ProcessRequest_CloseStdin{CloseStdin: true}})
}

// Signal implements driver.Process: the plugin's answer, or false once
// the process has ended.
func (p *pluginProcess) Signal(sig syscall.Signal) (bool, error) {
	p.signalMu.Lock()
	defer p.signalMu.Unlock()
	if err := p.send(&pluginv1.ProcessRequest{Request: &pluginv1.ProcessRequest_Signal{Signal: int32(sig)}}); err != nil {
		return false, nil
	}
	select {
	case ans := <-p.signalled:
		if ans.GetError() != "" {
			return false, errors.New(ans.GetError())
		}
		return ans.GetDelivered(), nil
	case <-p.done:
		return false, nil
	}
}

// Wait implements driver.Process.
func (p *pluginProcess) Wait() driver.ExecResult {
	<-p.done
	return p.res
}

// Resize implements driver.Resizer over the stream's resize message.
func (p *pluginProcess) Resize(size driver.TerminalSize) error {
	if !p.terminal {
		return fmt.Errorf("%w: the process has no terminal", driver.ErrUnsupported)
	}
	// A send fails only once the process has ended, which is no error.
	p.send(&pluginv1.ProcessRequest{Request: &pluginv1.ProcessRequest_Resize{Resize: terminalToProto(size)}})
	return nil
}

// maxTerminalSide bounds a terminal's rows and columns, as the service's
// contract does.
const maxTerminalSide = 1000

func terminalToProto(t driver.TerminalSize) *pluginv1.TerminalSize {
	return &pluginv1.TerminalSize{Rows: uint32(t.Rows), Cols: uint32(t.Cols)}
}

// terminalSize is a size from the host, checked: the plugin trusts it no
// more than any input.
func terminalSize(t *pluginv1.TerminalSize) (*driver.TerminalSize, error) {
	if t.GetRows() < 1 || t.GetRows() > maxTerminalSide || t.GetCols() < 1 || t.GetCols() > maxTerminalSide {
		return nil, fmt.Errorf("%w: terminal size %dx%d: rows and cols are 1 to %d", driver.ErrInvalid, t.GetRows(), t.GetCols(), maxTerminalSide)
	}
	return &driver.TerminalSize{Rows: int(t.GetRows()), Cols: int(t.GetCols())}, nil
}
