package mcptools

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
)

// SandboxTarget is where a stdio server with place sandbox runs: a process
// of the sandbox's processes facet, its stdin and stdout carried by
// AttachProcess. Client calls act for the session's owner.
type SandboxTarget struct {
	Client    sandboxv1.SandboxServiceClient
	SandboxID string
}

// stopGrace is how long a server has between its stdin closing and TERM,
// and between TERM and KILL, as CommandTransport gives a host server.
const stopGrace = 2 * time.Second

// sandboxTransport starts the server in the sandbox on Connect.
type sandboxTransport struct {
	target *SandboxTarget
	spec   *ServerSpec
}

// ServerSpec is the part of a server's configuration a sandbox process
// needs.
type ServerSpec struct {
	Command string
	Args    []string
	Env     map[string]string
}

// Connect implements mcp.Transport. The process and its stream outlive
// ctx (the startup timeout): they end when the connection is closed.
func (t *sandboxTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c := t.target.Client
	resp, err := c.StartProcess(ctx, &sandboxv1.StartProcessRequest{SandboxId: t.target.SandboxID, Spec: &sandboxv1.ProcessSpec{
		Args: append([]string{t.spec.Command}, t.spec.Args...), Env: t.spec.Env}})
	if err != nil {
		return nil, fmt.Errorf("start in sandbox %s: %w", t.target.SandboxID, err)
	}
	pid := resp.GetProcess().GetProcessId()
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stream, err := c.AttachProcess(sctx)
	if err == nil {
		err = stream.Send(&sandboxv1.AttachProcessRequest{Event: &sandboxv1.AttachProcessRequest_Open{Open: &sandboxv1.AttachOpen{SandboxId: t.target.SandboxID, ProcessId: pid}}})
	}
	if err == nil {
		var m *sandboxv1.AttachProcessResponse
		if m, err = stream.Recv(); err == nil && m.GetAttached() == nil {
			err = fmt.Errorf("the attach began with %T", m.GetEvent())
		}
	}
	if err != nil {
		cancel()
		c.SignalProcess(context.WithoutCancel(ctx), &sandboxv1.SignalProcessRequest{SandboxId: t.target.SandboxID, ProcessId: pid, Signal: "KILL"})
		return nil, fmt.Errorf("attach to the server in sandbox %s: %w", t.target.SandboxID, err)
	}
	pr, pw := io.Pipe()
	p := &sandboxPipe{c: c, ctx: sctx, cancel: cancel, sandboxID: t.target.SandboxID, pid: pid, stream: stream, out: pr, exited: make(chan struct{})}
	go p.read(pw)
	return (&mcp.IOTransport{Reader: p, Writer: p}).Connect(ctx)
}

// sandboxPipe is the server's stdio: reads are its stdout, writes its
// stdin. read is the stream's only receiver; it ends with the process or
// the stream.
type sandboxPipe struct {
	c              sandboxv1.SandboxServiceClient
	ctx            context.Context
	cancel         context.CancelFunc
	sandboxID, pid string
	stream         interface {
		Send(*sandboxv1.AttachProcessRequest) error
		Recv() (*sandboxv1.AttachProcessResponse, error)
	}
	out *io.PipeReader

	sendMu    sync.Mutex
	closeOnce sync.Once
	exited    chan struct{}
}

func (p *sandboxPipe) read(pw *io.PipeWriter) {
	defer close(p.exited)
	for {
		m, err := p.stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.EOF
			}
			pw.CloseWithError(err)
			return
		}
		switch ev := m.GetEvent().(type) {
		case *sandboxv1.AttachProcessResponse_Output:
			// stderr is the server's log, not the protocol.
			if ev.Output.GetStream() != sandboxv1.OutputStream_OUTPUT_STREAM_STDERR {
				if _, err := pw.Write(ev.Output.GetData()); err != nil {
					return // the reader closed
				}
			}
		case *sandboxv1.AttachProcessResponse_Gap:
			// Output lost from the log would corrupt the JSON-RPC stream.
			pw.CloseWithError(fmt.Errorf("the server's output lost %d bytes", ev.Gap.GetToOffset()-ev.Gap.GetFromOffset()))
			return
		case *sandboxv1.AttachProcessResponse_Exited:
			pw.CloseWithError(io.EOF)
			return
		}
	}
}

func (p *sandboxPipe) Read(b []byte) (int, error) { return p.out.Read(b) }

func (p *sandboxPipe) Write(b []byte) (int, error) {
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	if err := p.stream.Send(&sandboxv1.AttachProcessRequest{Event: &sandboxv1.AttachProcessRequest_Stdin{Stdin: b}}); err != nil {
		return 0, err
	}
	return len(b), nil
}

// Close closes the server's stdin, then TERM after stopGrace, KILL after
// another, as a host server is stopped; the IOTransport closes both
// halves, so only the first call acts.
func (p *sandboxPipe) Close() error {
	p.closeOnce.Do(func() {
		p.sendMu.Lock()
		p.stream.Send(&sandboxv1.AttachProcessRequest{Event: &sandboxv1.AttachProcessRequest_CloseStdin{CloseStdin: true}})
		p.sendMu.Unlock()
		go func() {
			defer p.cancel()
			for _, sig := range []string{"TERM", "KILL"} {
				select {
				case <-p.exited:
					return
				case <-time.After(stopGrace):
				}
				ctx, cancel := context.WithTimeout(context.WithoutCancel(p.ctx), 10*time.Second)
				p.c.SignalProcess(ctx, &sandboxv1.SignalProcessRequest{SandboxId: p.sandboxID, ProcessId: p.pid, Signal: sig})
				cancel()
			}
			<-p.exited
		}()
		p.out.Close()
	})
	return nil
}
